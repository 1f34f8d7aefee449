//! Ways into a table's dispatch after its check: a branch that lands
//! between the `ja` and the `jmp` is trusted when it is a `jbe` of the
//! function on the same check (Perl's `Perl_isSCRIPT_RUN`: `cmp $0x96,
//! %eax; ja default; lea TABLE(%rip), %rdi; …`, and later `cmp $0x96,
//! %eax; jbe` to that `lea`), and no other branch of the module lands
//! there (the sweep's count of branches to it is the function's own):
//!
//! ```text
//!         cmp  $N, %idx         ; the check, as [`super::bound`] reads it
//!         ja   default
//! T:      …                     ; entered here by:
//!         movslq (%base,%idx,4), %r
//!
//!         cmp  $M, %idx         ; M <= N, on the index as it is at T
//!         jbe  T
//! ```
//!
//! The index at T is what the dispatch reads from T on (the copies
//! between followed back, as for the check); a `jbe`'s check is read as
//! the `ja`'s is ([`super::checked`], [`super::checked_memory`]), and no
//! branch may land between its own check and it.

use super::{MAX_BACK, Targets, checked, checked_memory, copy};
use crate::insn::{swept_target, writes};
use iced_x86::{FlowControl, Instruction, Mnemonic, OpKind, Register};

/// Whether every way into `insns[t]` (after the dispatch's `ja`, before
/// its table read at `insns[load]` with index `index`) but from the
/// instruction before is a `jbe` of the function on a check of at most
/// `max` of the index as it is at `t`.
pub(super) fn checked_ways_in(
    insns: &[Instruction],
    t: usize,
    load: usize,
    index: Register,
    max: u64,
    targets: &Targets<'_>,
) -> bool {
    let Some(branches) = targets.branches.filter(|_| t <= load) else {
        return false;
    };
    let at = insns[t].ip();
    let sources: Vec<usize> = (0..insns.len())
        .filter(|&p| swept_target(&insns[p]) == Some(at))
        .collect();
    if sources.is_empty() || branches.get(&at).copied() != Some(sources.len() as u32) {
        return false;
    }
    let Some((idx, kept, memory)) = state_at(insns, load, index, t) else {
        return false;
    };
    sources.iter().all(|&p| {
        let lo = p.saturating_sub(MAX_BACK);
        let check = match memory {
            Some(n) => checked_memory(insns, n, p, lo),
            None => checked(insns, p, idx, kept, lo),
        };
        insns[p].mnemonic() == Mnemonic::Jbe
            && check.is_some_and(|(first, m)| {
                m <= max && ((first + 1)..=p).all(|n| !targets.set.contains(&insns[n].ip()))
            })
    })
}

/// The index as the dispatch from `insns[t]` on reads it at
/// `insns[load]`: the register it is at `t` and the bits of it the read
/// keeps, or the `movzx` at `t` that reads it from memory. `None` when
/// anything between writes it otherwise, or leaves the straight line.
fn state_at(
    insns: &[Instruction],
    load: usize,
    index: Register,
    t: usize,
) -> Option<(Register, u32, Option<usize>)> {
    let mut idx = index;
    let mut kept = 32;
    for n in (t..load).rev() {
        let i = &insns[n];
        if i.flow_control() != FlowControl::Next {
            return None;
        }
        if !writes(i, idx) {
            continue;
        }
        if i.op1_kind() == OpKind::Memory {
            return (n == t).then_some((idx, kept, Some(n)));
        }
        let (to, from, k) = copy(i)?;
        (to == idx).then_some(())?;
        idx = from;
        kept = kept.min(k);
    }
    Some((idx, kept, None))
}

#[cfg(test)]
mod tests {
    use super::super::resolve_with_labels;
    use super::super::tests::{hex, rel_table};
    use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

    /// `code` at `start`, with `tail` at `at`, nops between.
    fn with_at(mut code: Vec<u8>, start: u64, at: u64, tail: &[u8]) -> Vec<u8> {
        code.resize((at - start) as usize, 0x90);
        code.extend_from_slice(tail);
        code
    }

    /// The targets of `code`'s direct branches, counted, plus `more`.
    fn swept(code: &[u8], start: u64, more: &[u64]) -> (HashSet<u64>, HashMap<u64, u32>) {
        let mut t = crate::window::BranchTargets::default();
        t.sweep(code, start);
        for &m in more {
            t.0.insert(m);
            *t.2.entry(m).or_insert(0) += 1;
        }
        (t.0, t.2)
    }

    #[test]
    fn a_second_check_may_enter_the_dispatch() {
        // Perl's `Perl_isSCRIPT_RUN` (0x1966c3): cmp eax, 0x96; ja;
        // lea rdi, [rip + TABLE]; mov edx, eax; movsxd rdx, [rdi + rdx*4];
        // add rdx, rdi; jmp rdx; and at 0x1967a9: cmp eax, 0x96; jbe to
        // the lea (0x1966ce).
        let main = hex(
            "3d 96 00 00 00  0f 87 e6 00 00 00  48 8d 3d c7 38 1b 00  89 c2
                        48 63 14 97  48 01 fa  ff e2",
        );
        let second = hex("3d 96 00 00 00  0f 86 1a ff ff ff");
        let c = with_at(main, 0x1966c3, 0x1967a9, &second);
        let r = rel_table(0x349f9c, 0x196800);
        let want: Vec<u64> = (0..0x97).map(|i| 0x196800 + 8 * i).collect();
        let (set, counts) = swept(&c, 0x1966c3, &[]);
        assert_eq!(
            resolve_with_labels(&c, 0x1966c3, &set, Some(&counts), &r, None, None),
            Ok(vec![(0x1966de, want)])
        );
        // Without the counts, or with another branch of the module there,
        // or a table's entry: not every way in is known.
        assert_eq!(
            resolve_with_labels(&c, 0x1966c3, &set, None, &r, None, None),
            Err(0x1966de)
        );
        let (set2, counts2) = swept(&c, 0x1966c3, &[0x1966ce]);
        assert_eq!(
            resolve_with_labels(&c, 0x1966c3, &set2, Some(&counts2), &r, None, None),
            Err(0x1966de)
        );
        let mut table = counts.clone();
        table.insert(0x1966ce, u32::MAX);
        assert_eq!(
            resolve_with_labels(&c, 0x1966c3, &set, Some(&table), &r, None, None),
            Err(0x1966de)
        );
        // The second check on a larger bound (0x97), or on another
        // register (ecx).
        for other in ["3d 97 00 00 00", "81 f9 96 00 00"] {
            let mut d = c.clone();
            let at = (0x1967a9 - 0x1966c3) as usize;
            d[at..at + 5].copy_from_slice(&hex(other));
            assert_eq!(
                resolve_with_labels(&d, 0x1966c3, &set, Some(&counts), &r, None, None),
                Err(0x1966de),
                "{other}"
            );
        }
        // Entering past the index's copy (at the movsxd, 0x1966d7).
        let mut d = c.clone();
        let at = (0x1967ae - 0x1966c3) as usize;
        d[at + 2..at + 6].copy_from_slice(&(0x1966d7i32 - 0x1967b4).to_le_bytes());
        let (set3, counts3) = swept(&d, 0x1966c3, &[]);
        assert_eq!(
            resolve_with_labels(&d, 0x1966c3, &set3, Some(&counts3), &r, None, None),
            Err(0x1966de)
        );
    }

    #[test]
    fn a_second_check_of_the_memory_may_enter_at_its_read() {
        // Perl's 0x9b5ca (in `Perl_scan_str`'s module): cmp byte [rbx +
        // 0x52], 0xa; ja; movzx eax, byte [rbx + 0x52]; lea rdx, [rip +
        // TABLE]; movsxd rax, [rdx + rax*4]; add rax, rdx; jmp rax; and at
        // 0x9b6cb: cmp byte [rbx + 0x52], 0xa; jbe to the movzx (0x9b5d4).
        let main = hex(
            "80 7b 52 0a  0f 87 04 01 00 00  0f b6 43 52  48 8d 15 2d d3 14 00
                        48 63 04 82  48 01 d0  ff e0",
        );
        let second = hex("80 7b 52 0a  0f 86 ff fe ff ff");
        let c = with_at(main, 0x9b5ca, 0x9b6cb, &second);
        let r = rel_table(0x1e890c, 0x9b700);
        let want: Vec<u64> = (0..0xb).map(|i| 0x9b700 + 8 * i).collect();
        let (set, counts) = swept(&c, 0x9b5ca, &[]);
        assert_eq!(
            resolve_with_labels(&c, 0x9b5ca, &set, Some(&counts), &r, None, None),
            Ok(vec![(0x9b5e6, want)])
        );
        // The second check on another byte ([rbx + 0x53]).
        let mut d = c.clone();
        d[(0x9b6cb - 0x9b5ca) as usize + 2] = 0x53;
        assert_eq!(
            resolve_with_labels(&d, 0x9b5ca, &set, Some(&counts), &r, None, None),
            Err(0x9b5e6)
        );
    }
}
