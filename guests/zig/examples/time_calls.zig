//! time_calls.zig - a return probe on target_fn(a, b, s) in probe_target:
//! when each call returns, log how long it took, its return value (rax at
//! the return) and its first argument as it was at the entry (rdi has been
//! reused by then).
//!
//!   wprobe run time_calls.wasm -- ./probe_target
//!   time_calls:target_fn pid P tid T cpu C 1.2: (1523, 13, 0)

const wprobe = @import("wprobe");

comptime {
    wprobe.manifest(
        \\module probe_target
        \\probe on_return
        \\  location offset target_fn
        \\  return yes
        \\  maxactive 16
        \\  minor 2
    );
}

var w: [3]u64 = undefined;
var items = [1]u32{wprobe.item(0, wprobe.ItemKind.RAW_WORDS)};

export fn on_return() i32 {
    w = .{ wprobe.elapsed(), wprobe.readReg(wprobe.Reg.RAX), wprobe.entryArg(0) };
    _ = wprobe.emitLog(1, 2, @ptrCast(&w), &items);
    return wprobe.Outcome.EXIT;
}
