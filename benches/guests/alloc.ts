// alloc.ts - guests/assemblyscript/examples/log_args.ts, except that the
// record is a new heap object at every hit instead of static memory: what
// AssemblyScript's allocator (and, with --runtime incremental, its GC) costs a
// handler. Built by benches/guests/compare with the stub runtime (a bump
// allocator that never frees: memory grows at every hit until the 16 MiB limit,
// then every allocation aborts, a trap) and with the incremental runtime.

import { item_kind, outcome, raw, readReg, reg, token } from "../wprobe"; // compiled from a copy in guests/assemblyscript/.bench

const WPROBE_MANIFEST = `
module probe_target
major 1
probe on_target_fn
  location offset target_fn
  opcode 0x55
  minor 1
`;

const items = memory.data<u32>([item_kind.RAW_WORDS << 16, 16 | (item_kind.TOKENIZED << 16)]);

export function on_target_fn(): i32 {
  const rec = new StaticArray<u8>(16 + 3 + 256); // a heap object per hit
  const p = changetype<usize>(rec);
  store<u64>(p, readReg(reg.RDI));
  store<u64>(p + 8, readReg(reg.RSI));
  let n = raw.read_str(<i64>readReg(reg.RDX), <i32>p + 19, 256);
  if (n < 0) n = 0;
  store<u8>(p + 16, <u8>token.STRING);
  store<u16>(p + 17, <u16>n);
  raw.emit_log(1, 1, <i32>p, 19 + n, <i32>items, 2);
  return outcome.EXIT;
}
