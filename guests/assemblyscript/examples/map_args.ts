// map_args.ts - aggregate in wprobe's map service instead of logging a
// record per hit: calls of target_fn counted by the parity of its first
// argument, and a power-of-two histogram of that argument. The maps live
// on the handler side and are printed once, at exit, as bpftrace prints
// `@calls[arg0 % 2] = count(); @sizes = hist(arg0);`.
//
//   wprobe run map_args.wasm -- ./probe_target 9
//   Attaching 1 probe...
//   ...
//   @calls[0]: 5
//   @calls[1]: 4
//   ...

import { map_op, outcome, raw, readReg, reg } from "../wprobe";

const WPROBE_MANIFEST = `
module probe_target
major 6
map @calls count key=u64
map @sizes hist key=
probe on_call
  location offset target_fn
`;

const parity = memory.data(8);

export function on_call(): i32 {
  const a = readReg(reg.RDI);
  store<u64>(parity, a % 2);
  raw.map_update(0, <i32>parity, 8, map_op.COUNT, 1);
  raw.map_update(1, 0, 0, map_op.HIST, <i64>a);
  return outcome.ABORT; // no record: the maps hold the result
}
