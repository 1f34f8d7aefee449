// faults.ts - three handlers that misbehave, to show what the sandbox does
// with them; the traced program runs on unharmed. No manifest: bind them
// on the command line.
//
//   wprobe run faults.wasm --probe target_fn=spin -- ./probe_target   # fuel_exhausted 3
//   wprobe run faults.wasm --probe target_fn=trap -- ./probe_target   # traps 3
//   wprobe run faults.wasm --probe target_fn=wild -- ./probe_target
//   faults:target_fn pid P tid T cpu C 1.0: (0, -1, -1)

import { item_kind, outcome, raw } from "../wprobe";

let sink: u64 = 0;

/** Loops forever: fuel ends each run. */
export function spin(): i32 {
  let i: u64 = 0;
  while (true) {
    i++;
    store<u64>(changetype<usize>(0), i); // not optimized away
  }
  return outcome.EXIT;
}

/** Traps: an index out of range calls `abort`, which the SDK maps to `unreachable`. */
const table = new StaticArray<u64>(2);
export function trap(): i32 {
  sink += table[<i32>(sink + 5)];
  return outcome.EXIT;
}

const rec = memory.data(24);
const buf = memory.data(8);
const items = memory.data<u32>([item_kind.RAW_WORDS << 16]);

/**
 * Reads address 8, which no process maps: read_mem copies 0 bytes, read_str
 * returns -1 (byte 0 unreadable), check_access says FAULT (-1); the three are logged.
 */
export function wild(): i32 {
  store<u64>(rec, <u64>raw.read_mem(8, <i32>buf, 8));
  store<i64>(rec + 8, <i64>raw.read_str(8, <i32>buf, 8));
  store<i64>(rec + 16, <i64>raw.check_access(8, 1));
  raw.emit_log(1, 0, <i32>rec, 24, <i32>items, 1);
  return outcome.EXIT;
}
