// count_calls.ts - count the calls of a function in a variable that
// persists across hits and log the running count. No manifest: bind the
// handler on the command line.
//
//   wprobe run count_calls.wasm --probe target_fn=count -- ./probe_target
//   count_calls:target_fn pid P tid T cpu C 1.0: (1)

import { item_kind, outcome, raw } from "../wprobe";

let calls: u64 = 0;
const rec = memory.data(8);
const items = memory.data<u32>([item_kind.RAW_WORDS << 16]) // item(0, RAW_WORDS);

export function count(): i32 {
  calls++;
  store<u64>(rec, calls);
  raw.emit_log(1, 0, <i32>rec, 8, <i32>items, 1);
  return outcome.EXIT;
}
