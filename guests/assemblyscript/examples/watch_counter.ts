// watch_counter.ts - a hardware watchpoint on writes to probe_target's
// 8-byte `counter`: log the value just written and the address of the
// instruction after the write. DR6 says which of DR0-DR3 fired; that debug
// register holds the watched address.
//
//   wprobe run watch_counter.wasm -- ./probe_target
//   watch_counter:counter pid P tid T cpu C 11.0: (0, 0x401170)

import { item_kind, outcome, raw, readReg, reg } from "../wprobe";

const WPROBE_MANIFEST = `
module probe_target
major 11
probe on_write
  location offset counter
  watch w
  length 8
  maxhits 2
`;

const rec = memory.data(16);
const items = memory.data<u32>([item_kind.RAW_WORDS << 16]);

/** The address watched by the debug register that fired. */
function watched(): u64 {
  const dr6 = readReg(reg.DR6);
  let slot = 0;
  for (let i = 0; i < 4; i++) {
    if (dr6 & (<u64>1 << i)) {
      slot = i;
      break;
    }
  }
  return readReg(reg.DR0 + slot);
}

export function on_write(): i32 {
  if (raw.read_mem(<i64>watched(), <i32>rec, 8) != 8) store<u64>(rec, u64.MAX_VALUE);
  store<u64>(rec + 8, readReg(reg.RIP));
  raw.emit_log(11, 0, <i32>rec, 16, <i32>items, 1);
  return outcome.EXIT;
}
