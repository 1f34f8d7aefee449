//! count_calls.zig - count the calls of a function in a variable that
//! persists across hits and log the running count. No manifest: bind the
//! handler on the command line.
//!
//!   wprobe run count_calls.wasm --probe target_fn=count -- ./probe_target
//!   count_calls:target_fn pid P tid T cpu C 1.0: (1)

const wprobe = @import("wprobe");

var calls: u64 = 0;
var items = [1]u32{wprobe.item(0, wprobe.ItemKind.RAW_WORDS)};

export fn count() i32 {
    calls += 1;
    _ = wprobe.emitLog(1, 0, @ptrCast(&calls), &items);
    return wprobe.Outcome.EXIT;
}
