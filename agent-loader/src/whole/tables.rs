//! The jump tables a copy carries ([`super`]): which tables can go with
//! it, where their copies go after the copy's code, which instructions
//! of the copy read them, and their entries rewritten to the copy's
//! instructions.
//!
//! ```text
//! absolute (non-PIE):  jmp *NEW(,%idx,8)       NEW: .quad <copy of case k> …
//! relative (PIE):      lea NEW(%rip), %base    NEW: .long <copy of case k> - NEW …
//!                      movslq (%base,%idx,4), %r ; add %base, %r ; jmp *%r
//! ```

use anyhow::{Result, bail};
use iced_x86::{Code, Instruction, Mnemonic, OpKind, Register};

use crate::jumptable::Table;

/// Why the function `insns` cannot carry a copy of its table `t`: its
/// `jmp` not of the table's shape, or (a table of offsets) the table's
/// address taken other than by a `lea` of it, or an address inside it
/// read.
pub(super) fn rule(insns: &[Instruction], t: &Table) -> Result<(), String> {
    let Some(j) = insns.iter().find(|i| i.ip() == t.jmp) else {
        return Err(format!("no `jmp` at {:#x} for its jump table", t.jmp));
    };
    let shape = match t.entry {
        8 => {
            j.code() == Code::Jmp_rm64
                && j.op0_kind() == OpKind::Memory
                && j.memory_base() == Register::None
                && j.memory_index_scale() == 8
        }
        4 => j.code() == Code::Jmp_rm64 && j.op0_kind() == OpKind::Register,
        _ => false,
    };
    if !shape {
        return Err(format!(
            "the `jmp` at {:#x} does not read its jump table at {:#x} as the resolver's shapes do",
            t.jmp, t.addr
        ));
    }
    if t.entry == 4 {
        let size = 4 * t.targets.len() as u64;
        let mut leas = 0;
        for i in insns.iter().filter(|i| i.is_ip_rel_memory_operand()) {
            let a = i.ip_rel_memory_address();
            if a == t.addr && i.mnemonic() == Mnemonic::Lea {
                leas += 1;
            } else if (t.addr..t.addr + size).contains(&a) {
                return Err(format!(
                    "`{}` at {:#x} takes an address in its jump table at {:#x} other than by a \
                     `lea` of the table",
                    format!("{:?}", i.mnemonic()).to_lowercase(),
                    i.ip(),
                    t.addr
                ));
            }
        }
        if leas == 0 {
            return Err(format!(
                "no `lea` of its jump table at {:#x} in the function",
                t.addr
            ));
        }
    }
    Ok(())
}

/// The instructions of `v` (the copy's, before encoding) that read one of
/// `tables`, each with the index of its table: an absolute table's `jmp`,
/// a table of offsets' `lea`s.
pub(super) fn references(v: &[Instruction], tables: &[Table]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (k, i) in v.iter().enumerate() {
        for (n, t) in tables.iter().enumerate() {
            let reads = match t.entry {
                8 => {
                    i.code() == Code::Jmp_rm64 && i.op0_kind() == OpKind::Memory && i.ip() == t.jmp
                }
                _ => {
                    i.mnemonic() == Mnemonic::Lea
                        && i.is_ip_rel_memory_operand()
                        && i.ip_rel_memory_address() == t.addr
                }
            };
            if reads {
                out.push((k, n));
            }
        }
    }
    out
}

/// The address of the copy of each of `tables`, one after the other from
/// `base`, each 8-byte aligned; fails when an absolute table would not fit
/// its `jmp`'s sign-extended disp32.
pub(super) fn places(tables: &[Table], base: u64) -> Result<Vec<u64>> {
    let mut places = Vec::with_capacity(tables.len());
    let mut at = base;
    for t in tables {
        at = at.next_multiple_of(8);
        let end = at + (t.entry * t.targets.len()) as u64;
        if t.entry == 8 && end > 0x7fff_ffff {
            bail!(
                "the copy of the jump table at 0x{:x} would be at 0x{at:x}, out of its `jmp`'s \
                 32-bit reach",
                t.addr
            );
        }
        places.push(at);
        at = end;
    }
    Ok(places)
}

/// The bytes from `from` (the copy's code's end) to the end of the last
/// table's copy: `int3` padding, and each table's entries, the address
/// of an entry's target in the copy given by `copy_of` (an absolute
/// address, or its offset from the table's copy).
pub(super) fn bytes(
    tables: &[Table],
    places: &[u64],
    from: u64,
    copy_of: impl Fn(u64) -> Result<u64>,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (t, &place) in tables.iter().zip(places) {
        out.resize((place - from) as usize, 0xcc);
        for &e in &t.targets {
            let to = copy_of(e)?;
            if t.entry == 8 {
                out.extend_from_slice(&to.to_le_bytes());
                continue;
            }
            let Ok(off) = i32::try_from((to as i64).wrapping_sub(place as i64)) else {
                bail!(
                    "the entry 0x{e:x} of the jump table at 0x{:x} is out of 32-bit reach of \
                     the table's copy at 0x{place:x}",
                    t.addr
                );
            };
            out.extend_from_slice(&off.to_le_bytes());
        }
    }
    Ok(out)
}
