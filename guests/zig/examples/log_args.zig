//! log_args.zig - log the arguments of target_fn(a, b, s) in probe_target:
//! a and b as raw words, the string s read from the traced process.
//!
//!   wprobe run log_args.wasm -- ./probe_target
//!   log_args:target_fn pid P tid T cpu C 1.1: (0, 7) "hello, probes"

const wprobe = @import("wprobe");

comptime {
    wprobe.manifest(
        \\module probe_target
        \\major 1
        \\probe on_target_fn
        \\  location offset target_fn
        \\  opcode 0x55
        \\  minor 1
    );
}

/// The record: two words, then a STRING item (token, u16 length, bytes).
const Record = extern struct {
    words: [2]u64 align(1),
    token: u8,
    len: [2]u8,
    text: [256]u8,
};

var rec: Record = undefined;
var items: [2]u32 = .{
    wprobe.item(0, wprobe.ItemKind.RAW_WORDS),
    wprobe.item(16, wprobe.ItemKind.TOKENIZED),
};

export fn on_target_fn() i32 {
    rec.words[0] = wprobe.readReg(wprobe.Reg.RDI);
    rec.words[1] = wprobe.readReg(wprobe.Reg.RSI);
    // An unreadable string is logged empty.
    const s = wprobe.readStr(wprobe.readReg(wprobe.Reg.RDX), &rec.text) orelse rec.text[0..0];
    rec.token = wprobe.Token.STRING;
    rec.len = .{ @truncate(s.len), @truncate(s.len >> 8) };
    const bytes: [*]const u8 = @ptrCast(&rec);
    _ = wprobe.emitLog(1, 1, bytes[0 .. 19 + s.len], &items);
    return wprobe.Outcome.EXIT;
}
