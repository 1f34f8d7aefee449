//! Test oracles from the binaries themselves: where a function stores to a
//! variable, found by decoding the function with iced-x86 (so expected
//! instruction pointers are computed, never copied from a run).

use std::path::Path;

use iced_x86::{Decoder, DecoderOptions, InstructionInfoFactory, OpAccess};
use wprobe_elf::{ElfInfo, Lookup};

fn symbol(info: &ElfInfo, name: &str) -> (u64, u64) {
    match info.lookup(name) {
        Lookup::Found(s) => (s.value, s.size),
        other => panic!("{name}: {other:?}"),
    }
}

/// The link-time addresses of the instructions that follow each store
/// into variable `var` in function `func` of `file`, in code order: where
/// the CPU reports a write watchpoint on `var` (RIP after the access).
pub fn after_stores(file: &Path, func: &str, var: &str) -> Vec<u64> {
    let info = ElfInfo::open(file).unwrap();
    let (f, fsize) = symbol(&info, func);
    let (v, vsize) = symbol(&info, var);
    let bytes = info.bytes_at(f, fsize as usize).expect("function bytes");
    let mut decoder = Decoder::with_ip(64, bytes, f, DecoderOptions::NONE);
    let mut factory = InstructionInfoFactory::new();
    let mut out = Vec::new();
    for insn in &mut decoder {
        let info = factory.info(&insn);
        let writes = info.used_memory().iter().any(|m| {
            matches!(
                m.access(),
                OpAccess::Write
                    | OpAccess::ReadWrite
                    | OpAccess::CondWrite
                    | OpAccess::ReadCondWrite
            ) && insn.is_ip_rel_memory_operand()
                && (v..v + vsize.max(1)).contains(&insn.ip_rel_memory_address())
        });
        if writes {
            out.push(insn.next_ip());
        }
    }
    out
}
