//! map_args.zig - aggregate in wprobe's map service instead of logging a
//! record per hit: calls of target_fn counted by the parity of its first
//! argument, and a power-of-two histogram of that argument. The maps live
//! on the handler side and are printed once, at exit, as bpftrace prints
//! `@calls[arg0 % 2] = count(); @sizes = hist(arg0);`.
//!
//!   wprobe run map_args.wasm -- ./probe_target 9
//!   Attaching 1 probe...
//!   ...
//!   @calls[0]: 5
//!   @calls[1]: 4
//!   ...

const wprobe = @import("wprobe");

comptime {
    wprobe.manifest(
        \\module probe_target
        \\major 6
        \\map @calls count key=u64
        \\map @sizes hist key=
        \\probe on_call
        \\  location offset target_fn
    );
}

var parity: u64 = 0;

export fn on_call() i32 {
    const a = wprobe.readReg(wprobe.Reg.RDI);
    parity = a % 2;
    _ = wprobe.raw.map_update(0, wprobe.ptr(&parity), 8, wprobe.MapOp.COUNT, 1);
    _ = wprobe.raw.map_update(1, 0, 0, wprobe.MapOp.HIST, @bitCast(a));
    return wprobe.Outcome.ABORT; // no record: the maps hold the result
}
