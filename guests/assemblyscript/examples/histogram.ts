// histogram.ts - a histogram of target_fn's first argument in power-of-two
// buckets, kept in the run's global variables, logged when bump() runs.
//
//   wprobe run histogram.wasm -- ./probe_target 9
//   histogram:bump pid P tid T cpu C 5.0: (1, 1, 2, 4, 1, 0, 0, 0)
//
// Bucket 0 counts a = 0, bucket k > 0 counts 2^(k-1) <= a < 2^k; the last
// bucket also counts everything larger.

import { gvarGet, gvarSet, item_kind, outcome, raw, readReg, reg } from "../wprobe";

const WPROBE_MANIFEST = `
module probe_target
major 5
gvars 8
probe on_call
  location offset target_fn
  opcode 0x55
probe on_bump
  location offset bump
  opcode 0x55
`;

const BUCKETS: u64 = 8;

function bucket(a: u64): u64 {
  const b = 64 - clz(a);
  return b < BUCKETS ? b : BUCKETS - 1;
}

export function on_call(): i32 {
  const b = bucket(readReg(reg.RDI));
  gvarSet(b, gvarGet(b) + 1); // both check gvar_count(): gvar_get traps beyond it
  return outcome.ABORT; // no record for this hit
}

const counts = memory.data(8 * <i32>BUCKETS);
const items = memory.data<u32>([item_kind.RAW_WORDS << 16]);

export function on_bump(): i32 {
  for (let i: u64 = 0; i < BUCKETS; i++) store<u64>(counts + <usize>(i * 8), gvarGet(i));
  raw.emit_log(5, 0, <i32>counts, 8 * <i32>BUCKETS, <i32>items, 1);
  return outcome.EXIT;
}
