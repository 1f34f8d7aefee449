//! histogram.zig - a histogram of target_fn's first argument in power-of-two
//! buckets, kept in the run's global variables, logged when bump() runs.
//!
//!   wprobe run histogram.wasm -- ./probe_target 9
//!   histogram:bump pid P tid T cpu C 5.0: (1, 1, 2, 4, 1, 0, 0, 0)
//!
//! Bucket 0 counts a = 0, bucket k > 0 counts 2^(k-1) <= a < 2^k; the last
//! bucket also counts everything larger.

const wprobe = @import("wprobe");

const BUCKETS = 8;

comptime {
    wprobe.manifest(
        \\module probe_target
        \\major 5
        \\gvars 8
        \\probe on_call
        \\  location offset target_fn
        \\  opcode 0x55
        \\probe on_bump
        \\  location offset bump
        \\  opcode 0x55
    );
}

fn bucket(a: u64) u64 {
    return @min(64 - @as(u64, @clz(a)), BUCKETS - 1);
}

export fn on_call() i32 {
    const b = bucket(wprobe.readReg(wprobe.Reg.RDI));
    // gvar_get traps beyond the count: the helpers check it.
    _ = wprobe.gvarSet(b, (wprobe.gvarGet(b) orelse 0) + 1);
    return wprobe.Outcome.ABORT; // no record for this hit
}

var counts: [BUCKETS]u64 = undefined;
var items = [1]u32{wprobe.item(0, wprobe.ItemKind.RAW_WORDS)};

export fn on_bump() i32 {
    for (&counts, 0..) |*c, i| c.* = wprobe.gvarGet(i) orelse 0;
    _ = wprobe.emitLog(5, 0, @ptrCast(&counts), &items);
    return wprobe.Outcome.EXIT;
}
