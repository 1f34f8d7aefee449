// log_args.ts - log the arguments of target_fn(a, b, s) in probe_target:
// a and b as raw words, the string s read from the traced process.
//
//   wprobe run log_args.wasm -- ./probe_target
//   log_args:target_fn pid P tid T cpu C 1.1: (0, 7) "hello, probes"

import { item_kind, outcome, raw, readReg, reg, token } from "../wprobe";

const WPROBE_MANIFEST = `
module probe_target
major 1
probe on_target_fn
  location offset target_fn
  opcode 0x55
  minor 1
`;

// The record: two words, then a STRING item (token, u16 length, bytes).
const rec = memory.data(16 + 3 + 256);
const items = memory.data<u32>([item_kind.RAW_WORDS << 16, 16 | (item_kind.TOKENIZED << 16)]);

export function on_target_fn(): i32 {
  store<u64>(rec, readReg(reg.RDI));
  store<u64>(rec + 8, readReg(reg.RSI));
  let n = raw.read_str(<i64>readReg(reg.RDX), <i32>rec + 19, 256);
  if (n < 0) n = 0; // unreadable: log it empty
  store<u8>(rec + 16, <u8>token.STRING);
  store<u16>(rec + 17, <u16>n);
  raw.emit_log(1, 1, <i32>rec, 19 + n, <i32>items, 2);
  return outcome.EXIT;
}
