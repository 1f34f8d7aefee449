//! Ways into a table's check from before it: a branch that lands between
//! the copy of the index a check reads and that check (Perl's
//! `Perl_sv_upgrade`, 0x131330 in Debian's /usr/bin/perl 5.36):
//!
//! ```text
//!         mov  %r14, %r12       ; the copy the check relies on
//!         cmp  $7, %edx
//!         ja   L                ; L: …; call …; jmp T (%r12, %r14 kept)
//! T:      mov  (%rbx), %r9      ; entered from L too
//!         cmp  $7, %r12d        ; the check, on the copy
//!         ja   default
//!         lea  TABLE(%rip), %rdx
//!         movslq (%rdx,%r14,4), %rax
//! ```
//!
//! is trusted when every path of the function to the check passes the
//! copy, nothing after it writing either register; and a table's base
//! register that the function also holds other values in (`lea
//! TABLE(%rip), %r15` before a loop, `%r15` zeroed and reused elsewhere,
//! as in sed's 0x8810) is TABLE when every path to the read passes that
//! `lea`, nothing after it writing the register. Not yet in sed's 0x8810
//! itself: its cases loop back to the dispatch, and a table's entry (its
//! own included) on the way is a way in the walk does not follow, so the
//! function keeps its refusal. Either way: walking back from the
//! check over every way into each instruction (the one before, when it
//! falls through; each direct branch of the function to it, when the
//! sweep counts no other way in there), up to the copy. A path that
//! reaches the function's entry, a call's target, a table's entry, or code nothing falls into but padding, is not proven. A call
//! on the way keeps the registers only when both are callee-saved (the
//! System V ABI the compiled code itself relies on to keep them).

use super::Targets;
use crate::insn::{swept_target, writes};
use iced_x86::{FlowControl, Instruction, Mnemonic, Register};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Most instructions walked back from a check.
const MAX_WALK: usize = 4096;

/// Whether every path of the function (`insns`) to `insns[at]` passes
/// `insns[copy]` (a copy, or a base's `lea`), with nothing after it
/// writing any of `regs`.
pub(super) fn copied_on_every_path(
    insns: &[Instruction],
    copy: usize,
    at: usize,
    regs: [Register; 2],
    targets: &Targets<'_>,
) -> bool {
    let Some(branches) = targets.branches else {
        return false;
    };
    let mut into: HashMap<u64, Vec<usize>> = HashMap::default();
    for (p, i) in insns.iter().enumerate() {
        if let Some(t) = swept_target(i) {
            into.entry(t).or_default().push(p);
        }
    }
    let saved = regs.iter().all(|&r| callee_saved(r));
    let mut seen: HashSet<usize> = [at].into_iter().collect();
    let mut work = vec![at];
    while let Some(n) = work.pop() {
        if n == 0 {
            return false;
        }
        let ip = insns[n].ip();
        let own = into.get(&ip).map_or(&[][..], Vec::as_slice);
        if (targets.set.contains(&ip) || !own.is_empty())
            && (branches.get(&ip).copied() != Some(own.len() as u32)
                || own.iter().any(|&p| !crate::insn::direct_branch(&insns[p])))
        {
            return false;
        }
        let before = Some(n - 1).filter(|&p| falls_through(&insns[p]));
        if before.is_none() && own.is_empty() && insns[n].mnemonic() != Mnemonic::Nop {
            return false;
        }
        for &p in before.iter().chain(own) {
            if p == copy || !seen.insert(p) {
                continue;
            }
            let i = &insns[p];
            let call = matches!(
                i.flow_control(),
                FlowControl::Call | FlowControl::IndirectCall
            );
            if seen.len() > MAX_WALK || regs.iter().any(|&r| writes(i, r)) || (call && !saved) {
                return false;
            }
            work.push(p);
        }
    }
    true
}

/// Whether execution goes on to the next instruction after `i` (a call's
/// return too).
fn falls_through(i: &Instruction) -> bool {
    !matches!(
        i.flow_control(),
        FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::Return
            | FlowControl::Exception
    )
}

/// Whether `r` (a full 64-bit register) is kept across calls.
fn callee_saved(r: Register) -> bool {
    matches!(
        r,
        Register::RBX
            | Register::RBP
            | Register::R12
            | Register::R13
            | Register::R14
            | Register::R15
    )
}

#[cfg(test)]
mod tests {
    use super::super::resolve_with_labels;
    use super::super::tests::hex;
    use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

    /// Debian's /usr/bin/perl 5.36 `Perl_sv_upgrade`, 0x131330..0x131496:
    /// two tables; the first checked on a copy (`mov %r14, %r12` at
    /// 0x131361, `cmp $7, %r12d` at 0x131370) whose way in at 0x13136d
    /// is also taken by `je` (0x13147d) and `jmp` (0x131491) from its
    /// `ja 0x131478` path, over a `call` (`%r12`, `%r14` callee-saved).
    const START: u64 = 0x131330;
    const CODE: &str = "
        41 57 48 8d 0d 87 5b 21 00 41 56 41 55 41 54 55 53 48 83 ec 28 8b 46 0c 44 0f b6 f0 4e 8d 3c f1
        41 39 d6 0f 84 0b 01 00 00 49 89 fd 48 89 f3 89 d5 4d 89 f4 83 fa 07 0f 87 0b 01 00 00 4c 8b 0b
        41 83 fc 07 0f 87 f6 01 00 00 48 8d 15 33 57 21 00 4a 63 04 b2 48 01 d0 ff e0 66 0f 1f 44 00 00
        45 31 d2 44 39 e5 0f 82 bc 01 00 00 8b 43 0c 30 c0 41 89 e8 09 e8 89 43 0c 83 fd 0f 0f 87 23 05
        00 00 48 8d 15 1b 57 21 00 4a 63 04 82 48 01 d0 ff e0 66 0f 1f 44 00 00 4b 8b 84 c5 68 08 00 00
        48 85 c0 0f 84 c7 03 00 00 48 8b 10 66 0f ef c0 4b 89 94 c5 68 08 00 00 48 89 03 0f 11 00 83 fd
        0b 0f 84 f1 02 00 00 66 0f 6f 05 61 5b 21 00 0f 11 40 10 8b 53 0c 89 d0 25 ff 00 ff 5f 81 e2 00
        00 00 02 89 43 0c 0f 85 6c 03 00 00 0d 00 00 00 20 89 43 0c 41 83 fc 06 0f 86 aa 02 00 00 48 8b
        03 49 8b 51 08 48 89 50 08 48 8b 03 49 8b 11 48 89 10 41 80 3f 00 74 1c 41 0f b6 47 02 49 81 c6
        0c 01 00 00 4b 8b 54 f5 08 4c 01 c8 48 89 10 4b 89 44 f5 08 48 83 c4 28 5b 5d 41 5c 41 5d 41 5e
        41 5f c3 0f 1f 44 00 00 a9 00 00 00 10 0f 84 ea fe ff ff 31 d2 e8 46 24 00 00 48 8d 0d 2f 5a 21
        00 e9 d7 fe ff ff";

    /// The two tables (8 entries at 0x346ab4, 16 at 0x346ad4), entries
    /// `to + 8 * i` for table `to`: 0x131500 and 0x131600.
    fn read(at: u64, len: usize) -> Option<Vec<u8>> {
        let (table, n, to) = match at {
            0x346ab4 => (at, 8, 0x131500u64),
            0x346ad4 => (at, 16, 0x131600),
            _ => return None,
        };
        let e: Vec<u8> = (0..n)
            .flat_map(|i| (((to + 8 * i) as i64 - table as i64) as i32).to_le_bytes())
            .collect();
        e.get(..len).map(<[u8]>::to_vec)
    }

    fn targets(to: u64, n: u64) -> Vec<u64> {
        (0..n).map(|i| to + 8 * i).collect()
    }

    /// The targets of `code`'s direct branches, counted, plus `more`.
    fn swept(code: &[u8], more: &[u64]) -> (HashSet<u64>, HashMap<u64, u32>) {
        let mut t = crate::window::BranchTargets::default();
        t.sweep(code, START);
        for &m in more {
            t.0.insert(m);
            *t.2.entry(m).or_insert(0) += 1;
        }
        (t.0, t.2)
    }

    fn resolved(code: &[u8], more: &[u64]) -> Result<Vec<(u64, Vec<u64>)>, u64> {
        let (set, counts) = swept(code, more);
        resolve_with_labels(code, START, &set, Some(&counts), &read, None, None)
    }

    #[test]
    fn every_path_to_a_check_on_a_copy_passes_the_copy() {
        let c = hex(CODE);
        assert_eq!(
            resolved(&c, &[]),
            Ok(vec![
                (0x131388, targets(0x131500, 8)),
                (0x1313c0, targets(0x131600, 16)),
            ])
        );
        // Without the counts, the ways in are not known.
        let (set, _) = swept(&c, &[]);
        assert_eq!(
            resolve_with_labels(&c, START, &set, None, &read, None, None),
            Err(0x131388)
        );
        // Another branch of the module to 0x13136d, or a table's entry.
        assert_eq!(resolved(&c, &[0x13136d]), Err(0x131388));
        assert_eq!(resolved(&c, &[0x131483]), Err(0x131388));
    }

    #[test]
    fn a_path_that_skips_the_copy_or_writes_it_is_refused() {
        let c = hex(CODE);
        let at = |a: u64| (a - START) as usize;
        // The `je` at 0x131353 (before the copy) retargeted to 0x131478:
        // a path from the entry to the check without the copy.
        let mut d = c.clone();
        d[at(0x131353)..at(0x131359)].copy_from_slice(&hex("0f 84 1f 01 00 00"));
        assert_eq!(resolved(&d, &[]), Err(0x131388));
        // `mov %rcx, %r12` on the way (for the `lea` at 0x13148a).
        let mut d = c.clone();
        d[at(0x13148a)..at(0x131491)].copy_from_slice(&hex("49 89 cc 90 90 90 90"));
        assert_eq!(resolved(&d, &[]), Err(0x131388));
        // The copy and check on %rdx/%rcx (caller-saved) across the call:
        // `mov %r14, %rcx` ... `cmp $7, %ecx`.
        let mut d = c.clone();
        d[at(0x131361)..at(0x131364)].copy_from_slice(&hex("4c 89 f1"));
        d[at(0x131370)..at(0x131374)].copy_from_slice(&hex("83 f9 07 90"));
        d[at(0x13148a)..at(0x131491)].copy_from_slice(&hex("90 90 90 90 90 90 90"));
        assert_eq!(resolved(&d, &[]), Err(0x131388));
    }

    /// Debian's /usr/bin/sed 4.9, 0x8ed1..0x8fc3 (in the function at
    /// 0x8810): `lea TABLE(%rip), %r15` (TABLE 0x17ec0, 7 entries), a
    /// loop over calls, `lea -7(%r8), %eax; cmp $6, %al; ja; movzbl %al,
    /// %eax; movslq (%r15,%rax,4), %rax; add %r15, %rax; jmp *%rax`; and
    /// at 0x9326 the function's `xor %r15d, %r15d` (then `ret` here).
    const SED: &str = "
        4c 8d 3d e8 ef 00 00 0f 9f 44 24 20 49 89 c6 31 ed 48 89 4c 24 08 4c 89 54 24 30 e9 a0 00 00 00
        0f 1f 80 00 00 00 00 e8 d3 a7 ff ff 48 89 c2 0f b6 c3 48 8b 12 f6 44 42 01 40 0f 84 8d 00 00 00
        88 9c 24 80 00 00 00 41 80 7d 00 5c bb 01 00 00 00 0f 84 b8 0d 00 00 48 01 dd 4c 39 f5 72 3a 80
        7c 24 20 00 74 33 4c 89 e1 ba 01 00 00 00 be 01 00 00 00 48 89 dd 48 8d 3d 85 01 01 00 e8 4d 29
        00 00 48 8b 7c 24 28 4c 89 e1 ba 01 00 00 00 be 01 00 00 00 e8 36 29 00 00 48 8b 7c 24 08 4c 89
        e1 48 89 da be 01 00 00 00 49 83 c5 01 e8 1d 29 00 00 48 8b 44 24 18 49 39 c5 0f 84 bf 0c 00 00
        41 0f b6 5d 00 84 db 0f 89 5a ff ff ff c6 84 24 80 00 00 00 5c 45 0f b6 45 00 41 8d 40 f9 3c 06
        0f 87 33 0d 00 00 0f b6 c0 49 63 04 87 4c 01 f8 ff e0";
    const SED_AT: u64 = 0x8ed1;

    /// [`SED`], nops to 0x9326, then `tail`.
    fn sed(tail: &str) -> Vec<u8> {
        let mut c = hex(SED);
        c.resize((0x9326 - SED_AT) as usize, 0x90);
        c.extend(hex(tail));
        c
    }

    fn sed_resolved(code: &[u8], more: &[u64]) -> Result<Vec<(u64, Vec<u64>)>, u64> {
        let read = |at: u64, len: usize| {
            let t = hex(
                "28 11 ff ff 08 11 ff ff 70 11 ff ff 60 11 ff ff 50 11 ff ff 40 11 ff ff 30 11 ff ff",
            );
            (at == 0x17ec0).then(|| t.get(..len).map(<[u8]>::to_vec))?
        };
        let mut t = crate::window::BranchTargets::default();
        t.sweep(code, SED_AT);
        for &m in more {
            t.0.insert(m);
            *t.2.entry(m).or_insert(0) += 1;
        }
        resolve_with_labels(code, SED_AT, &t.0, Some(&t.2), &read, None, None)
    }

    #[test]
    fn a_base_lea_every_path_passes_is_the_table() {
        let want = vec![0x8fe8, 0x8fc8, 0x9030, 0x9020, 0x9010, 0x9000, 0x8ff0];
        assert_eq!(
            sed_resolved(&sed("45 31 ff c3"), &[]),
            Ok(vec![(0x8fc1, want)])
        );
        // The zeroed %r15 jumping into the loop (`jmp 0x8f91`).
        assert_eq!(
            sed_resolved(&sed("45 31 ff e9 63 fc ff ff"), &[]),
            Err(0x8fc1)
        );
        // Another branch of the module into the loop (0x8f91).
        assert_eq!(sed_resolved(&sed("45 31 ff c3"), &[0x8f91]), Err(0x8fc1));
        // `mov %r12, %r15` in the loop (for `mov %r12, %rcx` at 0x8f6f).
        let mut c = sed("45 31 ff c3");
        let at = (0x8f6f - SED_AT) as usize;
        c[at..at + 3].copy_from_slice(&hex("4d 89 e7"));
        assert_eq!(sed_resolved(&c, &[]), Err(0x8fc1));
    }
}
