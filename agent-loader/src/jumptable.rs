//! Jump tables: the targets of a `switch`'s indirect `jmp`, read from the
//! table its code indexes, so that a window in a function with one is
//! checked against them instead of refused (window rule 3: a jump table
//! could land anywhere in the function). Only the shapes GCC and Clang
//! emit for x86-64, with the table's size proven by a bound on the index
//! in front of it; anything else stays unresolved, and the function keeps
//! its refusal. The table's read:
//!
//! ```text
//! lea   TABLE(%rip), %base  ; position-independent: i32 offsets from TABLE
//! movslq (%base,%idx,4), %r
//! add   %base, %r
//! jmp   *%r
//!
//! jmp   *TABLE(,%idx,8)     ; absolute: u64 addresses (non-PIE)
//! ```
//!
//! The `lea` is in the 16 instructions before the `jmp` with nothing
//! writing `%base` after it, or anywhere in the function when it is the
//! function's only write of `%base` (hoisted out of a loop that
//! dispatches: Perl's `Perl_leave_scope`), or when every path of the
//! function to the read passes it with nothing writing `%base` after
//! (`%r15` also zeroed and reused elsewhere; `jumptable/paths.rs`: not
//! yet sed's 0x8810, whose cases loop back through table entries).
//!
//! The bound, walking back from the read (any `lea` or other register's
//! `mov` between), through register copies into the index (`mov %a32,
//! %b32`, `mov %a, %b`, `movzx %a8/16, %b`: each keeps no more bits than
//! the one it copies, so the bound on the copied register holds):
//!
//! ```text
//! cmp   $N, %idx            ; entries 0..=N (unsigned), on at least as
//! [jcc, mov …]              ; many bits as the index keeps (8-bit
//! ja    default             ; `cmp $N, %cl` then `movzbl %cl, %eax`;
//!                           ; a 16-bit `cmp $N, %bp`), or as it was
//!                           ; zero-extended from before the check
//!                           ; (`movzbl (%rax), %eax; jne; cmp $4, %al`);
//!                           ; moves and jumps out between, not setting
//!                           ; the flags (Perl: `cmp $24, %r15d; jg; mov
//!                           ; …, %ebx; ja`), or the index's own
//!                           ; zero-extension (`mov %ebp, %ebp`)
//!
//! mov   %idx, %x            ; or the check on a copy of the index made
//! cmp   $N, %x              ; before it, either way, with nothing
//! ja    default             ; writing either between (Perl:
//!                           ; `movzbl %al, %edx; cmp $15, %al; ja`)
//!
//! cmp   $N, mem             ; or on memory, the index read from the same
//! [loads …]                 ; byte or word right after the `ja`, no
//! ja    default             ; store nor write of its address's registers
//! movzx mem, %idx           ; between (OpenSSL, Perl's `Perl_magic_get`)
//!
//! and   $N, %idx32          ; or a mask: entries 0..=N (32 or 64 bits)
//! ```
//!
//! No branch target may land between the bound's first instruction and
//! the `jmp` (a path that skipped the check would index with another
//! bound), but after the `ja` one whose every way in is a `jbe` of the
//! function on the same check (`jumptable/entries.rs`: `cmp $0x96, %eax;
//! jbe` to the `lea` after the first `ja`); and between the copy a check
//! relies on and the check (up to the `cmp`), one where every path of
//! the function to the check passes the copy with nothing writing either
//! register after it (Perl's `Perl_sv_upgrade`: `mov %r14, %r12; cmp $7,
//! %edx; ja L; T: …; cmp $7, %r12d; ja`, T also entered by a `je` and a
//! `jmp` from L, over a call keeping the callee-saved `%r12`, `%r14`;
//! `jumptable/paths.rs`). Not read (the function keeps its refusal): an
//! index rebased after its check (`cmp $45, %dil; ja; sub $33, %edi`: an
//! index below 33 wraps), a dispatch entered by branches on other tests
//! (Perl's `Perl_rpeep`: `jne` to the `lea` after its `ja`), an index
//! bounded by earlier code only (SipHash's tail: `movslq (%r8,%r10,4)`
//! with `%r10` a length masked far before).

use crate::insn::writes;
use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register,
};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

mod entries;
mod paths;

/// The module's branch targets, as [`resolve_with_labels`] takes them.
struct Targets<'a> {
    /// Every address a branch lands on.
    set: &'a HashSet<u64>,
    /// How many direct branches land on each, if known.
    branches: Option<&'a HashMap<u64, u32>>,
}

/// How far before the `jmp` the bounds check is looked for.
const MAX_BACK: usize = 16;

/// Most entries a table is read for.
const MAX_ENTRIES: u64 = 4096;

/// The targets (link-time) of every indirect `jmp` of the function whose
/// code is `code` at link-time `start`: `Ok` with the `jmp`s resolved and
/// their targets (none inside the function for a tail call through a
/// pointer, [`crate::tailcall`]), `Err` with the first one that is not. `read` gives
/// `len` bytes of the module at a link-time address. `targets` is the
/// module's set of direct branch targets.
pub fn resolve(
    code: &[u8],
    start: u64,
    targets: &HashSet<u64>,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Result<Vec<(u64, Vec<u64>)>, u64> {
    resolve_with_labels(code, start, targets, None, read, None, None)
}

/// Whether each indirect `jmp` judged is a tail call through a pointer
/// ([`crate::tailcall`]), by its address: kept between resolutions of the
/// same functions (a module's second pass, with its tables' targets
/// known), as the judgement does not depend on the targets and its
/// analysis of the function costs more than the rest of a resolution.
#[derive(Debug, Default)]
pub struct TailVerdicts(std::sync::Mutex<HashMap<u64, bool>>);

impl TailVerdicts {
    fn get(&self, jmp: u64) -> Option<bool> {
        self.0.lock().ok()?.get(&jmp).copied()
    }

    fn put(&self, jmp: u64, tail: bool) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(jmp, tail);
        }
    }
}

/// [`resolve`], and with `data_labels` (the module's link-time addresses
/// that its data holds: every 8-byte word of its allocated data sections,
/// and every relative relocation's addend, that is an address of its
/// code; sorted) the indirect `jmp`s of a computed `goto` too: a `jmp`
/// through a pointer loaded from memory as it is (`jmp *mem`, or `mov
/// mem, %r` then `jmp *%r` with nothing between that a branch lands on),
/// in a function whose own addresses some data or its own code takes
/// (GCC's labels as values: CPython's `opcode_targets`). A pointer in
/// memory is one the program stored, and a label's address comes from a
/// static initializer (data) or from its function's own code (`lea`, an
/// immediate): those are every place such a `jmp` can land in its
/// function. A label address made by arithmetic (`&&a - &&b` tables) is
/// not loaded as it is, and stays unresolved.
///
/// With `data_labels`, any other indirect `jmp` too, in a function that
/// reads no table of relative offsets (`movslq (%base,%idx,4), %r`), where the
/// line of code before it does not compute its register: its target is a
/// pointer (loaded, or given to the function), so it lands on an address
/// data or code takes or outside the function (a tail call through a
/// pointer whose stack `tailcall` could not follow: CPython's
/// `do_mkvalue` ends in `jmp *%rsi` after its epilogue, `%rsi` set on
/// several paths). No targets inside: the caller takes it as a tail call.
///
/// With `branches` (how many of the module's direct branches land on each
/// of `targets`, `u32::MAX` for any other way in: a table's entry), a
/// table whose dispatch a branch enters after its check too, when every
/// way in there is a branch of the function on the same check
/// (`jumptable/entries.rs`).
///
/// With `verdicts`, the `jmp`s judged tail calls or not are taken from
/// there and kept there ([`TailVerdicts`]).
pub fn resolve_with_labels(
    code: &[u8],
    start: u64,
    targets: &HashSet<u64>,
    branches: Option<&HashMap<u64, u32>>,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    data_labels: Option<&[u64]>,
    verdicts: Option<&TailVerdicts>,
) -> Result<Vec<(u64, Vec<u64>)>, u64> {
    let targets = Targets {
        set: targets,
        branches,
    };
    // Room for instructions of 3 bytes on average (compiled code's are
    // longer): no growing, which cost a tenth of the resolutions.
    let mut insns = Vec::with_capacity(code.len() / 3 + 1);
    let mut d = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    while d.can_decode() {
        insns.push(d.decode());
    }
    let end = start + code.len() as u64;
    let mut out = Vec::new();
    let mut tails = None;
    let mut labels: Option<Vec<u64>> = None;
    let mut relative = None;
    for (k, i) in insns.iter().enumerate() {
        if i.flow_control() != FlowControl::IndirectBranch {
            continue;
        }
        if let Some(t) = one(&insns, k, &targets, read) {
            out.push((i.ip(), t));
            continue;
        }
        // Not a table: a tail call through a pointer lands in no window.
        let kept = verdicts.and_then(|v| v.get(i.ip()));
        let tail = kept.unwrap_or_else(|| {
            let f = tails.get_or_insert_with(|| crate::tailcall::Function::of(&insns, start, end));
            f.is_pointer_tail_call(&insns, k, read)
        });
        if let (None, Some(v)) = (kept, verdicts) {
            v.put(i.ip(), tail);
        }
        if tail {
            out.push((i.ip(), Vec::new()));
            continue;
        }
        let Some(data) = data_labels else {
            return Err(i.ip());
        };
        let labels = labels.get_or_insert_with(|| taken_labels(&insns, start, end, data));
        let relative = *relative.get_or_insert_with(|| has_relative_table(&insns));
        if (!labels.is_empty() && loads_a_pointer(&insns, k, targets.set))
            || (!relative && !computed_in_line(&insns, k))
        {
            out.push((i.ip(), labels.clone()));
        } else {
            return Err(i.ip());
        }
    }
    Ok(out)
}

/// Whether the function reads a table of relative offsets the way a
/// `switch` (or `&&a - &&b` labels) does: `movslq (%base,%idx,4), %r`. Its
/// targets are the table's base plus an offset, which no data holds.
fn has_relative_table(insns: &[Instruction]) -> bool {
    insns.iter().any(|i| {
        i.code() == Code::Movsxd_r64_rm32
            && i.op1_kind() == OpKind::Memory
            && i.memory_index_scale() == 4
            && i.memory_index() != Register::None
    })
}

/// Whether the straight line of code before the indirect `jmp *%r` at
/// `insns[k]` computes `%r` (its last write there is not a `mov`, a
/// `movzx`/`movsx` or a `pop`): an address made by arithmetic.
fn computed_in_line(insns: &[Instruction], k: usize) -> bool {
    let j = &insns[k];
    if j.op0_kind() != OpKind::Register {
        return false;
    }
    let r = j.op0_register().full_register();
    let lo = k.saturating_sub(MAX_BACK);
    match (lo..k)
        .rev()
        .find(|&m| writes(&insns[m], r) || insns[m].flow_control() != FlowControl::Next)
    {
        Some(m) if writes(&insns[m], r) => !matches!(
            insns[m].mnemonic(),
            Mnemonic::Mov | Mnemonic::Movzx | Mnemonic::Movsx | Mnemonic::Pop
        ),
        _ => false,
    }
}

/// Whether the indirect `jmp` at `insns[k]` goes where a pointer read from
/// memory points, as it was read: `jmp *mem64`, or `jmp *%r` right after
/// (nothing between landed on by a branch, nor writing `%r`, nor leaving
/// the straight line) `mov mem64, %r`.
fn loads_a_pointer(insns: &[Instruction], k: usize, targets: &HashSet<u64>) -> bool {
    let j = &insns[k];
    if j.op0_kind() == OpKind::Memory {
        return j.code() == Code::Jmp_rm64;
    }
    let r = j.op0_register().full_register();
    let lo = k.saturating_sub(MAX_BACK);
    let Some(m) = (lo..k)
        .rev()
        .find(|&m| writes(&insns[m], r) || insns[m].flow_control() != FlowControl::Next)
    else {
        return false;
    };
    let load = &insns[m];
    load.code() == Code::Mov_r64_rm64
        && load.op1_kind() == OpKind::Memory
        && load.op0_register() == r
        && ((m + 1)..=k).all(|n| !targets.contains(&insns[n].ip()))
}

/// The addresses inside the function (`start..end`, link-time) that a
/// computed `goto` may land on: those the module's data holds
/// (`data`, sorted), and those its own code makes (a `lea` of a
/// RIP-relative address, an immediate), its entry excepted.
fn taken_labels(insns: &[Instruction], start: u64, end: u64, data: &[u64]) -> Vec<u64> {
    let inside = |a: u64| start < a && a < end;
    let lo = data.partition_point(|&a| a <= start);
    let hi = data.partition_point(|&a| a < end);
    let mut out: Vec<u64> = data[lo..hi].to_vec();
    for i in insns {
        if i.mnemonic() == Mnemonic::Lea && i.is_ip_rel_memory_operand() {
            out.push(i.ip_rel_memory_address());
        }
        for n in 0..i.op_count() {
            let v = match i.op_kind(n) {
                OpKind::Immediate32to64 => i.immediate32to64() as u64,
                OpKind::Immediate32 => u64::from(i.immediate32()),
                OpKind::Immediate64 => i.immediate64(),
                _ => continue,
            };
            out.push(v);
        }
    }
    out.retain(|&a| inside(a));
    out.sort_unstable();
    out.dedup();
    out
}

/// A jump table read for an indirect `jmp`, as [`tables`] gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// The address of the indirect `jmp`.
    pub jmp: u64,
    /// The table's address.
    pub addr: u64,
    /// Bytes per entry: 8 for absolute addresses (`jmp *TABLE(,%idx,8)`),
    /// 4 for i32 offsets from the table (`lea TABLE(%rip)`, `movslq`,
    /// `add`).
    pub entry: usize,
    /// The target of each entry, in order (as many as the bound allows).
    pub targets: Vec<u64>,
}

/// The jump tables of the function whose code is `code` at `start`:
/// each indirect `jmp` that [`resolve_with_labels`] reads a table for,
/// with the table's address, entry size and targets (the jumps resolved
/// otherwise, or not at all, are left out). `targets`, `branches` and
/// `read` as for [`resolve_with_labels`].
pub fn tables(
    code: &[u8],
    start: u64,
    targets: &HashSet<u64>,
    branches: Option<&HashMap<u64, u32>>,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Vec<Table> {
    let targets = Targets {
        set: targets,
        branches,
    };
    let insns: Vec<Instruction> = Decoder::with_ip(64, code, start, DecoderOptions::NONE)
        .into_iter()
        .collect();
    (0..insns.len())
        .filter(|&k| insns[k].flow_control() == FlowControl::IndirectBranch)
        .filter_map(|k| table(&insns, k, &targets, read))
        .collect()
}

/// The targets of the indirect `jmp` at `insns[k]`, if it is a table's.
fn one(
    insns: &[Instruction],
    k: usize,
    targets: &Targets<'_>,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<Vec<u64>> {
    table(insns, k, targets, read).map(|t| t.targets)
}

/// The table the indirect `jmp` at `insns[k]` dispatches through, if its
/// read and bound are proven.
fn table(
    insns: &[Instruction],
    k: usize,
    targets: &Targets<'_>,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<Table> {
    let lo = k.saturating_sub(MAX_BACK);
    let (table, entry, index, load) = table_read(insns, k, lo, targets)?;
    let index = index.full_register();
    (index != Register::None).then_some(())?;
    let b = bound(insns, load, index, lo)?;
    let count = b.max.checked_add(1).filter(|&c| c <= MAX_ENTRIES)?;
    // No path into the dispatch but through the check: no branch lands
    // after its first instruction, up to the `jmp`; but after the `ja`,
    // one whose every way in is a branch of the function on the same
    // check (`jumptable/entries.rs`), and, up to a check that relies on
    // a copy (its first instruction), one whose every path passes the
    // copy (`jumptable/paths.rs`).
    let copied = b
        .gate
        .and_then(|g| Some((flags_source(insns, g, lo)?, copy(&insns[b.first])?)))
        .map(|(f, (to, from, _))| (f, [to, from]));
    let proven = std::cell::OnceCell::new();
    ((b.first + 1)..=k)
        .all(|m| {
            !targets.set.contains(&insns[m].ip())
                || (b.gate.is_some_and(|g| m > g)
                    && entries::checked_ways_in(insns, m, load, index, b.max, targets))
                || copied.is_some_and(|(f, regs)| {
                    m <= f
                        && *proven.get_or_init(|| {
                            paths::copied_on_every_path(insns, b.first, f, regs, targets)
                        })
                })
        })
        .then_some(())?;
    let bytes = read(table, count as usize * entry)?;
    let to = bytes
        .chunks_exact(entry)
        .map(|c| match entry {
            4 => table.wrapping_add(i32::from_le_bytes(c.try_into().unwrap()) as i64 as u64),
            _ => u64::from_le_bytes(c.try_into().unwrap()),
        })
        .collect();
    Some(Table {
        jmp: insns[k].ip(),
        addr: table,
        entry,
        targets: to,
    })
}

/// The table the indirect `jmp` at `insns[k]` reads: its address, its
/// entry size, the index register, and where the read is (the bound must
/// come before it).
fn table_read(
    insns: &[Instruction],
    k: usize,
    lo: usize,
    targets: &Targets<'_>,
) -> Option<(u64, usize, Register, usize)> {
    let j = &insns[k];
    if j.op0_kind() == OpKind::Memory {
        // jmp *TABLE(,%idx,8)
        (j.memory_base() == Register::None && j.memory_index_scale() == 8).then_some(())?;
        return Some((j.memory_displacement64(), 8, j.memory_index(), k));
    }
    // jmp *%r, %r = movslq (%base,%idx,4) + %base, %base = lea TABLE(%rip)
    let r = j.op0_register().full_register();
    let add = (lo..k).rev().find(|&m| writes(&insns[m], r))?;
    let a = &insns[add];
    (a.mnemonic() == Mnemonic::Add
        && a.op0_kind() == OpKind::Register
        && a.op1_kind() == OpKind::Register
        && a.op0_register().full_register() == r)
        .then_some(())?;
    let base = a.op1_register().full_register();
    let mov = (lo..add).rev().find(|&m| writes(&insns[m], r))?;
    let m = &insns[mov];
    (m.code() == Code::Movsxd_r64_rm32
        && m.op1_kind() == OpKind::Memory
        && m.memory_base().full_register() == base
        && m.memory_index_scale() == 4
        && m.memory_displacement64() == 0)
        .then_some(())?;
    let rip_lea = |l: &Instruction| l.mnemonic() == Mnemonic::Lea && l.is_ip_rel_memory_operand();
    let near = (lo..mov)
        .rev()
        .find(|&n| writes(&insns[n], base))
        .filter(|&n| rip_lea(&insns[n]) && ((n + 1)..k).all(|m| !writes(&insns[m], base)));
    let table = match near {
        Some(n) => insns[n].ip_rel_memory_address(),
        None => hoisted_base(insns, base).or_else(|| passed_base(insns, base, mov, k, targets))?,
    };
    Some((table, 4, m.memory_index(), mov))
}

/// The table a base register holds for the whole function, set out of
/// the loop that dispatches (Perl's `Perl_leave_scope`: `lea
/// TABLE(%rip), %r11` before it): every instruction of the function that
/// writes it is a `lea` of that same TABLE, or a `pop` of the caller's
/// value in an epilogue (nothing but moves after it, up to a `ret` or a
/// `jmp` out of the function). On every path to the `jmp`, it holds TABLE.
fn hoisted_base(insns: &[Instruction], base: Register) -> Option<u64> {
    let start = insns.first()?.ip();
    let end = insns.last()?.next_ip();
    let mut table = None;
    for (n, i) in insns.iter().enumerate() {
        if !writes(i, base) {
            continue;
        }
        if i.mnemonic() == Mnemonic::Lea && i.is_ip_rel_memory_operand() {
            let t = i.ip_rel_memory_address();
            (*table.get_or_insert(t) == t).then_some(())?;
            continue;
        }
        (i.mnemonic() == Mnemonic::Pop && i.op0_kind() == OpKind::Register).then_some(())?;
        let leaves = insns[n + 1..]
            .iter()
            .find(|j| j.flow_control() != FlowControl::Next || writes(j, base))
            .is_some_and(|j| match j.flow_control() {
                FlowControl::Return => true,
                FlowControl::UnconditionalBranch => {
                    crate::insn::near_target(j).is_some_and(|t| t < start || t >= end)
                }
                _ => false,
            });
        leaves.then_some(())?;
    }
    table
}

/// The table a base register holds at the read (`insns[mov]`) when the
/// function also holds other values in it (`lea TABLE(%rip), %r15`
/// before a loop, `%r15` reused elsewhere: sed's 0x8810): a `lea` of
/// it that every path of the function to the read passes, nothing
/// writing it after (`jumptable/paths.rs`), nor between the read and the
/// `jmp` at `insns[k]`.
fn passed_base(
    insns: &[Instruction],
    base: Register,
    mov: usize,
    k: usize,
    targets: &Targets<'_>,
) -> Option<u64> {
    (mov..k).all(|m| !writes(&insns[m], base)).then_some(())?;
    let n = (0..insns.len()).find(|&n| {
        let l = &insns[n];
        l.mnemonic() == Mnemonic::Lea
            && l.is_ip_rel_memory_operand()
            && l.op0_register().full_register() == base
            && paths::copied_on_every_path(insns, n, mov, [base, base], targets)
    })?;
    Some(insns[n].ip_rel_memory_address())
}

/// Bits of a register operand, 64 counted as 32 (a 32-bit write
/// zero-extends: a 32-bit check bounds the 64-bit register GCC indexes
/// with).
fn bits(r: Register) -> u32 {
    (r.size() as u32 * 8).min(32)
}

/// Whether `i` has an immediate second operand.
fn has_imm(i: &Instruction) -> bool {
    matches!(
        i.op1_kind(),
        OpKind::Immediate8to32
            | OpKind::Immediate32
            | OpKind::Immediate8to64
            | OpKind::Immediate8
            | OpKind::Immediate8to16
            | OpKind::Immediate16
            | OpKind::Immediate32to64
    )
}

/// The copy `i` makes between registers, if it is one that keeps the low
/// bits: `(to, from, bits kept)` for `mov %from, %to` (32 or 64 bits)
/// and `movzx %from8/16, %to`.
fn copy(i: &Instruction) -> Option<(Register, Register, u32)> {
    let kept = match i.code() {
        Code::Mov_r32_rm32 | Code::Mov_rm32_r32 | Code::Mov_r64_rm64 | Code::Mov_rm64_r64 => 32,
        Code::Movzx_r32_rm8 | Code::Movzx_r64_rm8 => 8,
        Code::Movzx_r32_rm16 | Code::Movzx_r64_rm16 => 16,
        _ => return None,
    };
    (i.op0_kind() == OpKind::Register && i.op1_kind() == OpKind::Register).then(|| {
        (
            i.op0_register().full_register(),
            i.op1_register().full_register(),
            kept,
        )
    })
}

/// A table's bound, as [`bound`] found it.
struct Bound {
    /// The first instruction the dispatch relies on.
    first: usize,
    /// The `ja` that leaves for the default (none for a mask).
    gate: Option<usize>,
    /// The largest index.
    max: u64,
}

/// The check that bounds `index` where the table is read (`insns[load]`):
/// the first instruction the dispatch relies on (no branch may land after
/// it), and the largest index. Walking back from the read, through
/// copies into the index (`mov`, `movzx`: each keeps fewer bits, so the
/// bound of the copied register holds):
///
/// - `and $MASK, %idx32/64`: the index is at most MASK;
/// - `ja` after `cmp $N, %idx` (jumps and moves that leave the flags
///   between them: `cmp; jg; mov; ja`), on as many bits as the index
///   keeps or was zero-extended from before it, or on a register the
///   index was copied from or to, with nothing writing either in between
///   (`movzbl %al, %edx; cmp $15, %al`);
/// - `ja` after `cmp $N, mem`, the index the byte or word read from the
///   same memory right after the `ja`.
fn bound(insns: &[Instruction], load: usize, index: Register, lo: usize) -> Option<Bound> {
    let mut idx = index;
    // Bits of the checked register the index keeps.
    let mut kept = 32;
    let mut n = load;
    loop {
        n = n.checked_sub(1).filter(|&n| n >= lo)?;
        let i = &insns[n];
        if i.mnemonic() == Mnemonic::Ja {
            let (first, max) = checked(insns, n, idx, kept, lo)?;
            return Some(Bound {
                first,
                gate: Some(n),
                max,
            });
        }
        if writes(i, idx) {
            if i.mnemonic() == Mnemonic::And
                && i.op0_kind() == OpKind::Register
                && i.op0_register().full_register() == idx
                && bits(i.op0_register()) == 32
                && has_imm(i)
            {
                return Some(Bound {
                    first: n,
                    gate: None,
                    max: i.immediate(1),
                });
            }
            if i.op1_kind() == OpKind::Memory {
                let ja = n.checked_sub(1).filter(|&m| m >= lo)?;
                (insns[ja].mnemonic() == Mnemonic::Ja).then_some(())?;
                let (first, max) = checked_memory(insns, n, ja, lo)?;
                return Some(Bound {
                    first,
                    gate: Some(ja),
                    max,
                });
            }
            let (to, from, k) = copy(i)?;
            (to == idx).then_some(())?;
            idx = from;
            kept = kept.min(k);
        }
        if i.flow_control() != FlowControl::Next {
            return None;
        }
    }
}

/// The `cmp $N, %reg` whose flags the `ja` at `insns[ja]` tests, the index
/// `idx` (keeping `kept` bits of what was checked) unchanged since.
fn checked(
    insns: &[Instruction],
    ja: usize,
    idx: Register,
    kept: u32,
    lo: usize,
) -> Option<(usize, u64)> {
    let f = flags_source(insns, ja, lo)?;
    let c = &insns[f];
    (c.mnemonic() == Mnemonic::Cmp && c.op0_kind() == OpKind::Register && has_imm(c))
        .then_some(())?;
    let x = c.op0_register().full_register();
    let w = bits(c.op0_register());
    // Between them, nothing writes either, but a register's own
    // zero-extension (`cmp $6, %ebp; mov %ebp, %ebp; ja`: it keeps the
    // checked bits).
    ((f + 1)..ja)
        .all(|m| {
            let i = &insns[m];
            (!writes(i, idx) && !writes(i, x))
                || copy(i).is_some_and(|(to, from, k)| to == from && k == 32)
        })
        .then_some(())?;
    if x == idx {
        if w >= kept {
            return Some((f, c.immediate(1)));
        }
        // Checked on fewer bits than the index keeps: the index
        // zero-extended before the check from no more bits than checked
        // (`movzbl (%rax), %eax; jne; cmp $4, %al; ja`).
        let m = (lo..f).rev().find(|&m| writes(&insns[m], idx))?;
        straight(insns, m + 1, f).then_some(())?;
        let from = match insns[m].code() {
            Code::Movzx_r32_rm8 | Code::Movzx_r64_rm8 => 8,
            Code::Movzx_r32_rm16 | Code::Movzx_r64_rm16 => 16,
            _ => return None,
        };
        return (w >= from).then_some((m, c.immediate(1)));
    }
    // The index a copy of the checked register, or the checked register
    // a copy of the index, made before the check.
    let m = (lo..f)
        .rev()
        .find(|&m| writes(&insns[m], idx) || writes(&insns[m], x))?;
    straight(insns, m + 1, f).then_some(())?;
    let (to, from, k) = copy(&insns[m])?;
    let ok = if (to, from) == (idx, x) {
        // idx = x's low k bits: the index keeps min(k, kept) bits of x.
        w >= k.min(kept)
    } else if (to, from) == (x, idx) {
        // x = idx's low k bits, checked on w of them.
        k.min(w) >= kept
    } else {
        false
    };
    ok.then_some((m, c.immediate(1)))
}

/// Whether `insns[from..to]` is a straight line: no instruction there
/// branches but conditional jumps out.
fn straight(insns: &[Instruction], from: usize, to: usize) -> bool {
    insns[from..to].iter().all(|i| {
        matches!(
            i.flow_control(),
            FlowControl::Next | FlowControl::ConditionalBranch
        )
    })
}

/// The instruction before the `jcc` at `insns[at]` that last set the
/// flags, in a straight line (only moves and conditional jumps out
/// between: `cmp $24, %esi; jg; mov mem, %ecx; ja`).
fn flags_source(insns: &[Instruction], at: usize, lo: usize) -> Option<usize> {
    let f = (lo..at).rev().find(|&m| insns[m].rflags_modified() != 0)?;
    straight(insns, f + 1, at).then_some(f)
}

/// The index read from memory at `insns[n]` (`movzx`), right after the
/// `ja` (or, entering there, `jbe`) at `insns[ja]` that tests a `cmp $N`
/// of that same memory (OpenSSL: `cmpb $6,
/// (%r12); ja; movzbl (%r12), %eax`; Perl: `cmpb $0x7e, (%rax); movzbl
/// 1(%rax), %ecx; lea 1(%rax), %r13; ja; movzbl (%rax), %eax`), with
/// nothing between the `cmp` and the `ja` that writes memory or the
/// registers of its address.
fn checked_memory(insns: &[Instruction], n: usize, ja: usize, lo: usize) -> Option<(usize, u64)> {
    let i = &insns[n];
    matches!(
        i.code(),
        Code::Movzx_r32_rm8 | Code::Movzx_r32_rm16 | Code::Movzx_r64_rm8 | Code::Movzx_r64_rm16
    )
    .then_some(())?;
    let f = flags_source(insns, ja, lo)?;
    let c = &insns[f];
    let same = c.memory_base() == i.memory_base()
        && c.memory_index() == i.memory_index()
        && c.memory_index_scale() == i.memory_index_scale()
        && c.memory_displacement64() == i.memory_displacement64()
        && c.memory_segment() == i.memory_segment()
        && c.memory_size() == i.memory_size();
    (c.mnemonic() == Mnemonic::Cmp && c.op0_kind() == OpKind::Memory && has_imm(c) && same)
        .then_some(())?;
    let address = [i.memory_base(), i.memory_index()].map(Register::full_register);
    ((f + 1)..ja)
        .all(|m| {
            !writes_memory(&insns[m])
                && address
                    .iter()
                    .all(|&r| r == Register::None || !writes(&insns[m], r))
        })
        .then_some((f, c.immediate(1)))
}

/// Whether `i` writes memory (a store, a `push`, a `call`).
fn writes_memory(i: &Instruction) -> bool {
    iced_x86::InstructionInfoFactory::new()
        .info(i)
        .used_memory()
        .iter()
        .any(|m| {
            !matches!(
                m.access(),
                iced_x86::OpAccess::Read
                    | iced_x86::OpAccess::CondRead
                    | iced_x86::OpAccess::NoMemAccess
            )
        })
}

#[cfg(test)]
mod tests;
