// time_calls.ts - a return probe on target_fn(a, b, s) in probe_target:
// when each call returns, log how long it took, its return value (rax at
// the return) and its first argument as it was at the entry (rdi has been
// reused by then).
//
//   wprobe run time_calls.wasm -- ./probe_target
//   time_calls:target_fn pid P tid T cpu C 1.2: (1523, 13, 0)

import { elapsed, entryArg, item_kind, outcome, raw, readReg, reg } from "../wprobe";

const WPROBE_MANIFEST = `
module probe_target
probe on_return
  location offset target_fn
  return yes
  maxactive 16
  minor 2
`;

const w = memory.data(24);
const items = memory.data<u32>([item_kind.RAW_WORDS << 16]);

export function on_return(): i32 {
  store<u64>(w, elapsed());
  store<u64>(w + 8, readReg(reg.RAX));
  store<u64>(w + 16, entryArg(0));
  raw.emit_log(1, 2, <i32>w, 24, <i32>items, 1);
  return outcome.EXIT;
}
