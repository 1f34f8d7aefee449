//! Jump tables: the targets of a `switch`'s indirect `jmp`, read from the
//! table its code indexes, so that a window in a function with one is
//! checked against them instead of refused (window rule 3: a jump table
//! could land anywhere in the function). Only the shapes GCC and Clang
//! emit for x86-64, with the table's size proven by the bounds check in
//! front of it; anything else stays unresolved, and the function keeps
//! its refusal:
//!
//! ```text
//! cmp   $N, %idx32          ; the bound (unsigned): entries 0..=N
//! ja    default
//! [mov  %idx32, %idx32']    ; at most zero-extending copies (or movzx
//!                           ; of the checked byte or word, or of the
//!                           ; byte or word in memory `cmp` checked
//!                           ; just before the `ja`), before or
//! lea   TABLE(%rip), %base  ; after the lea (position-independent: i32
//!                           ; offsets from TABLE)
//! movslq (%base,%idx',4), %r
//! add   %base, %r
//! jmp   *%r
//!
//! jmp   *TABLE(,%idx',8)    ; absolute: u64 addresses (non-PIE)
//! ```
//!
//! No branch target may land between the bounds check and the `jmp` (a
//! path that skipped the check would index with another bound).

use crate::insn::writes;
use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register,
};
use std::collections::HashSet;

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
    resolve_with_labels(code, start, targets, read, None)
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
pub fn resolve_with_labels(
    code: &[u8],
    start: u64,
    targets: &HashSet<u64>,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    data_labels: Option<&[u64]>,
) -> Result<Vec<(u64, Vec<u64>)>, u64> {
    let mut insns = Vec::new();
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
        if let Some(t) = one(&insns, k, targets, read) {
            out.push((i.ip(), t));
            continue;
        }
        // Not a table: a tail call through a pointer lands in no window.
        let f =
            tails.get_or_insert_with(|| crate::tailcall::Function::of(&insns, start, end, read));
        if f.is_pointer_tail_call(&insns, k, read) {
            out.push((i.ip(), Vec::new()));
            continue;
        }
        let Some(data) = data_labels else {
            return Err(i.ip());
        };
        let labels = labels.get_or_insert_with(|| taken_labels(&insns, start, end, data));
        let relative = *relative.get_or_insert_with(|| has_relative_table(&insns));
        if (!labels.is_empty() && loads_a_pointer(&insns, k, targets))
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

/// The targets of the indirect `jmp` at `insns[k]`, if it is a table's.
fn one(
    insns: &[Instruction],
    k: usize,
    targets: &HashSet<u64>,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<Vec<u64>> {
    let j = &insns[k];
    let lo = k.saturating_sub(MAX_BACK);
    // The table, its entry size, the index register, and where the
    // table's read is (the bound must come before it).
    let (table, entry, index, load) = if j.op0_kind() == OpKind::Memory {
        // jmp *TABLE(,%idx,8)
        (j.memory_base() == Register::None && j.memory_index_scale() == 8).then_some(())?;
        let t = j.memory_displacement64();
        (t, 8usize, j.memory_index(), k)
    } else {
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
        let index = m.memory_index();
        let lea = (lo..mov).rev().find(|&n| writes(&insns[n], base))?;
        let l = &insns[lea];
        (l.mnemonic() == Mnemonic::Lea && l.is_ip_rel_memory_operand()).then_some(())?;
        // Nothing between the lea and the jmp changes the base.
        ((lea + 1)..k)
            .all(|n| !writes(&insns[n], base))
            .then_some(())?;
        (l.ip_rel_memory_address(), 4usize, index, mov)
    };
    let index = index.full_register();
    (index != Register::None).then_some(())?;
    // The bounds check: `cmp idx, N` then `ja`, with at most a
    // zero-extending `mov` into the index register between it and the
    // table's read.
    let imm = |i: &Instruction| {
        matches!(
            i.op1_kind(),
            OpKind::Immediate8to32
                | OpKind::Immediate32
                | OpKind::Immediate8to64
                | OpKind::Immediate8
                | OpKind::Immediate32to64
        )
    };
    let mut idx = index;
    let mut n = load;
    let (cmp, bound) = loop {
        n = n.checked_sub(1).filter(|&n| n > lo)?;
        let i = &insns[n];
        let c = &insns[n - 1];
        // The check on memory, the index read from it right after
        // (OpenSSL: `cmpb $6, (%r12); ja; movzbl (%r12), %eax`).
        if writes(i, idx)
            && matches!(
                i.code(),
                Code::Movzx_r32_rm8
                    | Code::Movzx_r32_rm16
                    | Code::Movzx_r64_rm8
                    | Code::Movzx_r64_rm16
            )
            && i.op1_kind() == OpKind::Memory
        {
            let m = n.checked_sub(2).filter(|&m| m >= lo)?;
            let k = &insns[m];
            let same = |a: &Instruction, b: &Instruction| {
                a.memory_base() == b.memory_base()
                    && a.memory_index() == b.memory_index()
                    && a.memory_index_scale() == b.memory_index_scale()
                    && a.memory_displacement64() == b.memory_displacement64()
                    && a.memory_segment() == b.memory_segment()
                    && a.memory_size() == b.memory_size()
            };
            (c.mnemonic() == Mnemonic::Ja
                && k.mnemonic() == Mnemonic::Cmp
                && k.op0_kind() == OpKind::Memory
                && imm(k)
                && same(k, i))
            .then_some(())?;
            break (m, k.immediate(1));
        }
        if i.mnemonic() == Mnemonic::Ja
            && c.mnemonic() == Mnemonic::Cmp
            && c.op0_kind() == OpKind::Register
            && c.op0_register().full_register() == idx
            && imm(c)
        {
            break (n - 1, c.immediate(1));
        }
        if writes(i, idx) {
            // `mov %src32, %idx32` or `movzx %src8/16, %idx` (zero-extend):
            // the check may be on src (V8 checks a byte, `cmp $N, %sil`,
            // then indexes with `movzbl %sil, %eax`).
            (matches!(
                i.code(),
                Code::Mov_r32_rm32
                    | Code::Mov_rm32_r32
                    | Code::Movzx_r32_rm8
                    | Code::Movzx_r32_rm16
                    | Code::Movzx_r64_rm8
                    | Code::Movzx_r64_rm16
            ) && i.op0_kind() == OpKind::Register
                && i.op1_kind() == OpKind::Register)
                .then_some(())?;
            idx = i.op1_register().full_register();
        }
        if i.flow_control() != FlowControl::Next {
            return None;
        }
    };
    let count = bound.checked_add(1).filter(|&c| c <= MAX_ENTRIES)?;
    // No path into the dispatch but through the check: no branch lands
    // after the `cmp`, up to the `jmp`.
    ((cmp + 1)..=k)
        .all(|m| !targets.contains(&insns[m].ip()))
        .then_some(())?;
    let bytes = read(table, count as usize * entry)?;
    Some(
        bytes
            .chunks_exact(entry)
            .map(|c| match entry {
                4 => table.wrapping_add(i32::from_le_bytes(c.try_into().unwrap()) as i64 as u64),
                _ => u64::from_le_bytes(c.try_into().unwrap()),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: u64 = 0x1000;
    const TABLE: u64 = 0x2000;

    /// `switch (edi) { 4 cases }` as GCC emits it position-independent:
    /// the bound 3, the table at TABLE with offsets to 0x1020 + 8 * i.
    fn pic() -> Vec<u8> {
        let mut c = vec![
            0x83, 0xff, 0x03, // cmp edi, 3
            0x77, 0x20, // ja default
            0x89, 0xff, // mov edi, edi
            0x48, 0x8d, 0x15, // lea rdx, [rip + TABLE - 0x100e]
        ];
        c.extend_from_slice(&((TABLE - 0x100e) as u32).to_le_bytes());
        c.extend_from_slice(&[
            0x48, 0x63, 0x04, 0xba, // movsxd rax, dword [rdx + rdi*4]
            0x48, 0x01, 0xd0, // add rax, rdx
            0xff, 0xe0, // jmp rax
        ]);
        c.resize(0x40, 0xc3);
        c
    }

    fn read(at: u64, len: usize) -> Option<Vec<u8>> {
        let entries: Vec<u8> = (0..8u64)
            .flat_map(|i| (((0x1020 + 8 * i) as i64 - TABLE as i64) as i32).to_le_bytes())
            .collect();
        let off = at.checked_sub(TABLE)? as usize;
        entries.get(off..off + len).map(<[u8]>::to_vec)
    }

    #[test]
    fn a_bounded_pic_table_gives_its_entries() {
        let got = resolve(&pic(), START, &HashSet::new(), &read);
        assert_eq!(
            got,
            Ok(vec![(0x1015, vec![0x1020, 0x1028, 0x1030, 0x1038])])
        );
    }

    #[test]
    fn anything_less_certain_stays_unresolved() {
        // No bounds check.
        let mut c = pic();
        c[0] = 0x90;
        c[1] = 0x90;
        c[2] = 0x90;
        assert_eq!(resolve(&c, START, &HashSet::new(), &read), Err(0x1015));
        // The check on another register.
        let mut c = pic();
        c[1] = 0xfe; // cmp esi, 3
        assert_eq!(resolve(&c, START, &HashSet::new(), &read), Err(0x1015));
        // A branch lands after the check: a path without it.
        for at in [0x1003, 0x1005, 0x1007, 0x1015] {
            let t: HashSet<u64> = [at].into();
            assert_eq!(resolve(&pic(), START, &t, &read), Err(0x1015), "{at:#x}");
        }
        // The index changed after the check.
        let mut c = pic();
        c[5] = 0xff;
        c[6] = 0xc7; // inc edi
        assert_eq!(resolve(&c, START, &HashSet::new(), &read), Err(0x1015));
        // The table unreadable.
        let none = |_: u64, _: usize| None;
        assert_eq!(resolve(&pic(), START, &HashSet::new(), &none), Err(0x1015));
        // A function pointer's tail call is resolved, with no target
        // inside the function (crate::tailcall) ...
        let c = [0x48, 0x8b, 0x07, 0xff, 0xe0]; // mov rax, [rdi]; jmp rax
        assert_eq!(
            resolve(&c, START, &HashSet::new(), &read),
            Ok(vec![(0x1003, vec![])])
        );
        // ... not one inside its frame: push rbx; mov rax, [rdi]; jmp rax
        let c = [0x53, 0x48, 0x8b, 0x07, 0xff, 0xe0];
        assert_eq!(resolve(&c, START, &HashSet::new(), &read), Err(0x1004));
    }

    #[test]
    fn a_computed_goto_lands_on_the_labels_data_or_code_takes() {
        // movzx edx, byte [rdi]; mov rdx, [TABLE + rdx*8]; jmp rdx;
        // lea rax, [rip + 0xc] (a label made in code: 0x1020); ret
        let mut c = vec![0x0f, 0xb6, 0x17, 0x48, 0x8b, 0x14, 0xd5];
        c.extend_from_slice(&(TABLE as u32).to_le_bytes());
        c.extend_from_slice(&[0xff, 0xe2, 0x48, 0x8d, 0x05, 0x0c, 0, 0, 0]);
        c.resize(0x40, 0xc3);
        let none = |_: u64, _: usize| None;
        let t = HashSet::new();
        // Without the data's words, unresolved (no bound: not a table).
        assert_eq!(resolve(&c, START, &t, &none), Err(0x100b));
        // The data's words inside the function, and the code's `lea`;
        // not the entry, nor an address outside.
        let data = [0x0800, START, 0x1030, 0x1038, 0x2000];
        assert_eq!(
            resolve_with_labels(&c, START, &t, &none, Some(&data)),
            Ok(vec![(0x100b, vec![0x1020, 0x1030, 0x1038])])
        );
        // A branch landing between the load and the jmp: rdx may come
        // from another path, but still a pointer: the labels too.
        let t: HashSet<u64> = [0x100b].into();
        assert_eq!(
            resolve_with_labels(&c, START, &t, &none, Some(&data)),
            Ok(vec![(0x100b, vec![0x1020, 0x1030, 0x1038])])
        );
        // The pointer changed after its load (add rdx, 8): arithmetic.
        let mut d = c[..0x0b].to_vec();
        d.extend_from_slice(&[0x48, 0x83, 0xc2, 0x08, 0xff, 0xe2]);
        d.resize(0x40, 0xc3);
        assert_eq!(
            resolve_with_labels(&d, START, &HashSet::new(), &none, Some(&data)),
            Err(0x100f)
        );
        // A function no data or code takes an address inside of, with no
        // relative table: its jmp goes outside (a tail call, no targets).
        let mut e = c[..0x0d].to_vec();
        e.resize(0x40, 0xc3);
        assert_eq!(
            resolve_with_labels(&e, START, &HashSet::new(), &none, Some(&[0x2000])),
            Ok(vec![(0x100b, vec![])])
        );
        // ... but with a relative table's read (movsxd rax, [rdx + rcx*4])
        // somewhere in it, only a pointer loaded in line is trusted.
        let mut f = e.clone();
        f[0x20..0x24].copy_from_slice(&[0x48, 0x63, 0x04, 0x8a]);
        assert_eq!(
            resolve_with_labels(&f, START, &t, &none, Some(&[0x2000])),
            Err(0x100b)
        );
        assert_eq!(
            resolve_with_labels(&f, START, &HashSet::new(), &none, Some(&data)),
            Ok(vec![(0x100b, vec![0x1030, 0x1038])])
        );
    }

    #[test]
    fn an_absolute_table_gives_its_entries() {
        // cmp edi, 1; ja; mov eax, edi; jmp [TABLE + rax*8]
        let mut c = vec![0x83, 0xff, 0x01, 0x77, 0x20, 0x89, 0xf8, 0xff, 0x24, 0xc5];
        c.extend_from_slice(&(TABLE as u32).to_le_bytes());
        c.resize(0x40, 0xc3);
        let abs = |at: u64, len: usize| {
            let e: Vec<u8> = [0x1020u64, 0x1030]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            let off = at.checked_sub(TABLE)? as usize;
            e.get(off..off + len).map(<[u8]>::to_vec)
        };
        assert_eq!(
            resolve(&c, START, &HashSet::new(), &abs),
            Ok(vec![(0x1007, vec![0x1020, 0x1030])])
        );
        // V8's: the check on a byte, the index its zero-extension, other
        // moves between: cmp sil, 1; ja; movzx eax, sil; mov r12, rdi;
        // jmp [TABLE + rax*8]
        let mut c = vec![
            0x40, 0x80, 0xfe, 0x01, 0x77, 0x20, 0x40, 0x0f, 0xb6, 0xc6, 0x49, 0x89, 0xfc, 0xff,
            0x24, 0xc5,
        ];
        c.extend_from_slice(&(TABLE as u32).to_le_bytes());
        c.resize(0x40, 0xc3);
        assert_eq!(
            resolve(&c, START, &HashSet::new(), &abs),
            Ok(vec![(0x100d, vec![0x1020, 0x1030])])
        );
        // ... not when the index is another byte than the one checked
        // (movzx eax, dil).
        c[9] = 0xc7;
        assert_eq!(resolve(&c, START, &HashSet::new(), &abs), Err(0x100d));
        // OpenSSL's: the byte checked in memory, then read into the index:
        // cmp byte [r12], 1; ja; movzx eax, byte [r12]; jmp [TABLE + rax*8]
        let mut c = vec![
            0x41, 0x80, 0x3c, 0x24, 0x01, 0x77, 0x20, 0x41, 0x0f, 0xb6, 0x04, 0x24, 0xff, 0x24,
            0xc5,
        ];
        c.extend_from_slice(&(TABLE as u32).to_le_bytes());
        c.resize(0x40, 0xc3);
        assert_eq!(
            resolve(&c, START, &HashSet::new(), &abs),
            Ok(vec![(0x100c, vec![0x1020, 0x1030])])
        );
        // ... not another byte than the one checked ([r12+1]).
        let mut other = c.clone();
        other[10] = 0x44;
        other.splice(12..12, [0x01]);
        other.truncate(0x40);
        assert_eq!(resolve(&other, START, &HashSet::new(), &abs), Err(0x100d));
    }
}
