//! watch_counter.zig - a hardware watchpoint on writes to probe_target's
//! 8-byte `counter`: log the value just written and the address of the
//! instruction after the write. DR6 says which of DR0-DR3 fired; that debug
//! register holds the watched address.
//!
//!   wprobe run watch_counter.wasm -- ./probe_target
//!   watch_counter:counter pid P tid T cpu C 11.0: (0, 0x401170)

const wprobe = @import("wprobe");

comptime {
    wprobe.manifest(
        \\module probe_target
        \\major 11
        \\probe on_write
        \\  location offset counter
        \\  watch w
        \\  length 8
        \\  maxhits 2
    );
}

var rec: [2]u64 = undefined;
var items = [1]u32{wprobe.item(0, wprobe.ItemKind.RAW_WORDS)};

/// The address watched by the debug register that fired.
fn watched() u64 {
    const dr6 = wprobe.readReg(wprobe.Reg.DR6);
    var slot: i32 = 0;
    for (0..4) |i| {
        if (dr6 & (@as(u64, 1) << @intCast(i)) != 0) {
            slot = @intCast(i);
            break;
        }
    }
    return wprobe.readReg(wprobe.Reg.DR0 + slot);
}

export fn on_write() i32 {
    if (wprobe.readMem(watched(), @ptrCast(&rec[0])) != 8) rec[0] = ~@as(u64, 0);
    rec[1] = wprobe.readReg(wprobe.Reg.RIP);
    _ = wprobe.emitLog(11, 0, @ptrCast(&rec), &items);
    return wprobe.Outcome.EXIT;
}
