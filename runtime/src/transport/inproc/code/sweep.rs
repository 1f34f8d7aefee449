//! The sweep of a module file's code (`ModuleCode::read`, when the plan
//! cache has none): its functions, the targets of every direct branch in
//! its executable sections (a linear sweep with iced-x86, the largest
//! section in two parts on two CPUs), its jump tables and its tail calls
//! through a pointer.

use rustc_hash::FxHashSet as HashSet;

use agent_loader::jumptable;
use agent_loader::window::{BranchTargets, Function, Noted};
use goblin::elf::{Elf, section_header};

use super::{Calls, ModuleCode};
use crate::transport::inproc::plans;
use crate::transport::retsites::Flow;

impl ModuleCode {
    /// The sweep of the module file `elf` (`parsed`): its functions, its
    /// branch targets, its jump tables and tail calls through a pointer.
    #[cfg(test)]
    pub(in crate::transport::inproc) fn sweep(
        elf: &wprobe_elf::info::ElfInfo,
        parsed: &Elf<'_>,
    ) -> plans::Sweep {
        Self::sweep_with_calls(elf, parsed).0
    }

    /// [`ModuleCode::sweep`], and the map of calls the sweep met
    /// ([`ModuleCode::calls`]).
    pub(super) fn sweep_with_calls(
        elf: &wprobe_elf::info::ElfInfo,
        parsed: &Elf<'_>,
    ) -> (plans::Sweep, Calls, Flow) {
        let mut funcs = elf.named_functions();
        // The functions no symbol names (static ones of a stripped module,
        // IFUNC implementations), bounded by their unwind table entries:
        // only where no symbol's range meets theirs, so that a function's
        // code is never cut short of what its symbol says.
        funcs.extend(elf.unnamed_functions());
        // Each PLT entry, a function of its own for the patcher (`trace
        // --plt`): 16 bytes, entered only at its start (its `jmp *GOT` is
        // the first instruction; a lazy entry's `push` after it is reached
        // through the GOT, past any window at the entry).
        funcs.extend(
            elf.plt_entries()
                .map(|(a, _)| (a, a + wprobe_elf::info::PLT_ENTRY_BYTES)),
        );
        funcs.sort_unstable();
        funcs.dedup();
        let sections = exec_sections(elf.file_bytes(), parsed);
        let (mut targets, noted) = swept(&sections, &funcs);
        // Jump tables, once every direct target is known: a table is
        // trusted only when no branch lands between its bounds check and
        // its `jmp`, checked again with every table's targets added.
        let read = |at: u64, len: usize| elf.bytes_at(at, len).map(<[u8]>::to_vec);
        let code_of = |&(start, end): &(u64, u64)| elf.bytes_at(start, (end - start) as usize);
        let labels = data_labels(elf, parsed);
        let verdicts = jumptable::TailVerdicts::default();
        let resolve = |code: &[u8], start: u64, targets: &BranchTargets| {
            jumptable::resolve_with_labels(
                code,
                start,
                &targets.0,
                Some(&targets.2),
                &read,
                Some(&labels),
                Some(&verdicts),
            )
        };
        // Only functions that may hold an indirect `jmp` are decoded again.
        let funcs_jumping: Vec<(u64, u64)> = funcs
            .iter()
            .copied()
            .filter(|f| may_jump_indirectly(&noted, *f, code_of(f)))
            .collect();
        // The functions' tables, half of them on a thread of its own.
        let tables_of = |fs: &[(u64, u64)]| {
            let mut with_tables = Vec::new();
            let mut extra: HashSet<u64> = HashSet::default();
            for f in fs {
                if let Some(code) = code_of(f)
                    && let Ok(tables) = resolve(code, f.0, &targets)
                    && !tables.is_empty()
                {
                    with_tables.push(*f);
                    extra.extend(tables.into_iter().flat_map(|(_, t)| t));
                }
            }
            (with_tables, extra)
        };
        let ((mut with_tables, mut extra), (more, more_extra)) =
            in_halves(&funcs_jumping, tables_of);
        with_tables.extend(more);
        extra.extend(more_extra);
        targets.add_other(extra);
        // Each indirect `jmp` whose targets are known, and whether none is
        // inside its function (a tail call through a pointer): half of
        // the functions on a thread of its own again.
        let known_of = |fs: &[(u64, u64)]| {
            let mut known = Vec::new();
            for f in fs {
                if let Some(code) = code_of(f)
                    && let Ok(tables) = resolve(code, f.0, &targets)
                {
                    known.extend(tables.into_iter().map(|(jmp, to)| (jmp, to.is_empty())));
                }
            }
            known
        };
        let (known, more) = in_halves(&with_tables, known_of);
        let mut tail_jumps = HashSet::default();
        for (jmp, tail) in known.into_iter().chain(more) {
            if tail {
                tail_jumps.insert(jmp);
            }
            targets.1.insert(jmp);
        }
        // Each function's first indirect `jmp` whose targets are not all
        // known, once: every window past a function's entry asks.
        let unknown_of = |fs: &[(u64, u64)]| {
            let mut unknown = rustc_hash::FxHashMap::default();
            for f in fs {
                if let Some(code) = code_of(f) {
                    let func = Function {
                        start: f.0,
                        code,
                        bias: 0,
                    };
                    if let Some(at) = targets.first_unknown_jump(&func) {
                        unknown.insert(f.0, at);
                    }
                }
            }
            unknown
        };
        let (mut unknown, more) = in_halves(&funcs_jumping, unknown_of);
        unknown.extend(more);
        targets.3 = Some(unknown);
        let flow = Flow {
            parts: swept_parts(&sections, &funcs),
            bounds: bounds_of(&funcs),
            missed: noted.missed,
            invalid: noted.invalid,
            rets: noted.rets,
            jumps: noted.jumps,
            indirect: noted.indirect,
        };
        let sweep = plans::Sweep {
            funcs,
            targets,
            tail_jumps,
        };
        (sweep, calls_of(noted.calls), flow)
    }
}

/// The link-time addresses of the module's code that its data holds, sorted:
/// every 8-byte-aligned word of its allocated, non-executable sections that
/// is one, and every relative (and absolute 64-bit) relocation's target
/// that is one. A computed `goto`'s labels are among them
/// ([`jumptable::resolve_with_labels`]).
fn data_labels(elf: &wprobe_elf::info::ElfInfo, parsed: &Elf<'_>) -> Vec<u64> {
    let mut out = Vec::new();
    let Some((lo, hi)) = elf.exec_span() else {
        return out;
    };
    for sh in &parsed.section_headers {
        let flags = sh.sh_flags;
        if sh.sh_type == section_header::SHT_NOBITS
            || flags & u64::from(section_header::SHF_ALLOC) == 0
            || flags & u64::from(section_header::SHF_EXECINSTR) != 0
        {
            continue;
        }
        let (off, len) = (sh.sh_offset as usize, sh.sh_size as usize);
        let Some(bytes) = elf.file_bytes().get(off..off.saturating_add(len)) else {
            continue;
        };
        // Words at 8-byte-aligned addresses.
        let skip = (sh.sh_addr.wrapping_neg() & 7) as usize;
        for w in bytes.get(skip..).unwrap_or(&[]).chunks_exact(8) {
            let v = u64::from_le_bytes(w.try_into().unwrap_or_default());
            if v != 0 && lo <= v && v < hi && elf.is_exec_vaddr(v) {
                out.push(v);
            }
        }
    }
    for r in parsed.dynrelas.iter().chain(parsed.dynrels.iter()) {
        let v = match r.r_type {
            goblin::elf::reloc::R_X86_64_RELATIVE => r.r_addend.unwrap_or(0) as u64,
            goblin::elf::reloc::R_X86_64_64 => parsed.dynsyms.get(r.r_sym).map_or(0, |s| {
                s.st_value.wrapping_add(r.r_addend.unwrap_or(0) as u64)
            }),
            _ => continue,
        };
        if elf.is_exec_vaddr(v) {
            out.push(v);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The map of the calls a sweep noted (`window::Noted::calls`).
pub(super) fn calls_of(calls: Vec<(u64, u64)>) -> Calls {
    let mut map = Calls::default();
    for (to, back) in calls {
        map.entry(to).or_default().push(back);
    }
    map
}

/// Whether the function `start..end` (its bytes `code`) may hold an
/// indirect `jmp`: the sweep met one in it (`noted`), or it did not land
/// on its start (nor swept it) and its bytes hold an `ff /4` or `ff /5`
/// however they decode.
pub(super) fn may_jump_indirectly(
    noted: &Noted,
    (start, end): (u64, u64),
    code: Option<&[u8]>,
) -> bool {
    let i = noted.indirect.partition_point(|&a| a < start);
    noted.indirect.get(i).is_some_and(|&a| a < end)
        || (noted.missed.binary_search(&start).is_ok()
            && code.is_some_and(|c| {
                c.windows(2)
                    .any(|w| w[0] == 0xff && matches!((w[1] >> 3) & 7, 4 | 5))
            }))
}

/// `work` done on the first half of `items` by a thread of its own and on
/// the second by this one (the sweep of a large module, a tenth of a
/// second, on both CPUs); done here whole when the thread cannot start.
fn in_halves<T: Sync, R: Send>(items: &[T], work: impl Fn(&[T]) -> R + Sync) -> (R, R) {
    let (a, b) = items.split_at(items.len() / 2);
    std::thread::scope(|scope| {
        let first = std::thread::Builder::new()
            .name("wprobe-sweep".into())
            .spawn_scoped(scope, || work(a));
        let second = work(b);
        let first = match first.map(|h| h.join()) {
            Ok(Ok(r)) => r,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => work(a),
        };
        (first, second)
    })
}

/// The direct branch targets of the executable sections `sections`, each
/// swept linearly; the largest in two parts, cut at the function start
/// (of `funcs`, sorted) nearest its middle, swept on both CPUs. With them,
/// the indirect branches met and the starts of `funcs` the sweep did not
/// land on or did not sweep (`window::Noted`, sorted).
pub(super) fn swept(sections: &[(u64, &[u8])], funcs: &[(u64, u64)]) -> (BranchTargets, Noted) {
    let starts = bounds_of(funcs);
    let mut noted = Noted::default();
    let mut targets = BranchTargets::default();
    for (k, &(addr, code)) in sections.iter().enumerate() {
        match cut_of(sections, funcs, k) {
            Some(s) => {
                let (head, tail) = code.split_at((s - addr) as usize);
                let parts = [(addr, head), (s, tail)];
                let (first, second) = in_halves(&parts, |p: &[(u64, &[u8])]| {
                    let mut t = BranchTargets::default();
                    let mut n = Noted::default();
                    for &(a, c) in p {
                        t.sweep_noting(c, a, &starts, &mut n);
                    }
                    (t, n)
                });
                for (mut t, n) in [first, second] {
                    // The smaller set into the larger.
                    if t.2.len() > targets.2.len() {
                        std::mem::swap(&mut t, &mut targets);
                    }
                    targets.merge_swept(t);
                    noted.append(n);
                }
            }
            None => targets.sweep_noting(code, addr, &starts, &mut noted),
        }
    }
    targets.settle();
    let swept = |s: u64| {
        sections
            .iter()
            .any(|&(a, c)| a <= s && s < a + c.len() as u64)
    };
    noted
        .missed
        .extend(starts.iter().copied().filter(|&s| !swept(s)));
    noted.sort();
    (targets, noted)
}

/// The starts and ends of `funcs`, sorted, each once: where [`swept`]
/// tells whether it lands (`retsites::Flow`).
fn bounds_of(funcs: &[(u64, u64)]) -> Vec<u64> {
    let mut bounds: Vec<u64> = funcs.iter().flat_map(|&(s, e)| [s, e]).collect();
    bounds.sort_unstable();
    bounds.dedup();
    bounds
}

/// Where [`swept`] cuts section `k` of `sections` in two, to sweep it on
/// both CPUs: the largest section, at the function start (of `funcs`,
/// sorted) nearest its middle.
fn cut_of(sections: &[(u64, &[u8])], funcs: &[(u64, u64)], k: usize) -> Option<u64> {
    let largest = (0..sections.len()).max_by_key(|&k| sections[k].1.len());
    let (addr, code) = *sections.get(k)?;
    let end = addr + code.len() as u64;
    (Some(k) == largest)
        .then(|| {
            let middle = addr + code.len() as u64 / 2;
            let i = funcs.partition_point(|&(s, _)| s < middle);
            funcs.get(i).map(|&(s, _)| s)
        })
        .flatten()
        .filter(|&s| s > addr && s < end)
}

/// The parts of `sections` a sweep decodes each from its start
/// ([`swept`]): each section, cut where [`cut_of`] says.
fn swept_parts(sections: &[(u64, &[u8])], funcs: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut parts = Vec::new();
    for (k, &(addr, code)) in sections.iter().enumerate() {
        let end = addr + code.len() as u64;
        match cut_of(sections, funcs, k) {
            Some(s) => parts.extend([(addr, s), (s, end)]),
            None => parts.push((addr, end)),
        }
    }
    parts
}

/// The executable sections of the module file `bytes` (`parsed`): each
/// one's link-time address and bytes.
pub(super) fn exec_sections<'a>(bytes: &'a [u8], parsed: &Elf<'_>) -> Vec<(u64, &'a [u8])> {
    parsed
        .section_headers
        .iter()
        .filter(|sh| {
            sh.sh_type == section_header::SHT_PROGBITS
                && sh.sh_flags & u64::from(section_header::SHF_EXECINSTR) != 0
        })
        .filter_map(|sh| {
            let (off, len) = (sh.sh_offset as usize, sh.sh_size as usize);
            Some((sh.sh_addr, bytes.get(off..off.saturating_add(len))?))
        })
        .collect()
}
