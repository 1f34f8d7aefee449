//! faults.zig - three handlers that misbehave, to show what the sandbox
//! does with them; the traced program runs on unharmed. No manifest: bind
//! them on the command line.
//!
//!   wprobe run faults.wasm --probe target_fn=spin -- ./probe_target   # fuel_exhausted 3
//!   wprobe run faults.wasm --probe target_fn=trap -- ./probe_target   # traps 3
//!   wprobe run faults.wasm --probe target_fn=wild -- ./probe_target
//!   faults:target_fn pid P tid T cpu C 1.0: (0, -1, -1)

const wprobe = @import("wprobe");

var sink: u64 = 0;

/// Loops forever: fuel ends each run.
export fn spin() i32 {
    var i: u64 = 0;
    while (true) {
        i +%= 1;
        @as(*volatile u64, @ptrCast(&sink)).* = i;
    }
}

/// Traps: a Wasm `unreachable`.
export fn trap() i32 {
    @trap();
}

var rec: [3]u64 = undefined;
var items = [1]u32{wprobe.item(0, wprobe.ItemKind.RAW_WORDS)};

/// Reads address 8, which no process maps: read_mem copies 0 bytes,
/// read_str returns -1 (byte 0 unreadable), check_access says FAULT (-1);
/// the three are logged.
export fn wild() i32 {
    var buf: [8]u8 = undefined;
    rec[0] = wprobe.readMem(8, &buf);
    rec[1] = @bitCast(@as(i64, wprobe.raw.read_str(8, wprobe.ptr(&buf), 8)));
    rec[2] = @bitCast(@as(i64, wprobe.raw.check_access(8, 1)));
    _ = wprobe.emitLog(1, 0, @ptrCast(&rec), &items);
    return wprobe.Outcome.EXIT;
}
