//! A relocated copy of a whole function, its `ret`s instrumented inline:
//! for a traced function one of whose `ret`s no jump can cover (a `ret`
//! that is a branch target, with no padding near). The entry keeps its
//! window; its stub dispatches the entry, then runs a copy of the whole
//! function (in the stub area) in which each `ret` is a `jmp` to that
//! `ret`'s return stub (the stub a windowed `ret` gets, with no displaced
//! instructions: dispatch, then the `ret`), and every branch between the
//! function's instructions goes to the copy (the block encoder links a
//! branch whose target is one of the block's instructions to its new
//! copy, [`crate::reloc`]).
//!
//! ```text
//! copy:   lea rsp, [rsp-128] ; push id ; call trampoline ; lea rsp, [rsp+128]
//!         <the function, relocated; each `ret` a `jmp ret_stub_k`,
//!          each `call f` a `push ORIG_NEXT ; jmp f`>
//!         jmp function_end          ; its last instruction falling through
//! ```
//!
//! A `call` in the copy pushes the address after the `call` in the
//! *original* function (`ORIG_NEXT`), then jumps to the callee, as the
//! `call` ending a stub's window does (`callemu`). The callee, and every
//! unwinder or backtrace it runs, sees a return address in the original
//! function, whose unwind table is right;
//! the caller writes a jump to the copy's instruction at each `ORIG_NEXT`
//! ([`Copy::returns`]), so that the return comes back to the copy. A
//! `call` of the function itself goes to the original entry (its window:
//! dispatched as any call). The same jump back goes at each instruction
//! that a branch from outside the function lands on ([`Whole::entered`]: a
//! `.cold` part jumping back, which the copy left by its direct jump).
//!
//! A jump table that [`crate::jumptable`] proves goes with the copy: a
//! copy of the table, each entry inside the function rewritten to the
//! copy of its instruction, is written after the copy's code (8-byte
//! aligned), and the copy reads it instead: for a table of absolute
//! addresses (non-PIE) its `jmp`'s disp32 is the new table's address,
//! which must fit a sign-extended 32 bits; for a table of i32 offsets
//! from itself (PIE) each `lea` of the table's address takes the new
//! table's, whose offsets are from itself (`whole/tables.rs`).
//!
//! ```text
//!         jmp *NEW(,%idx,8)         ; the copy's dispatch (non-PIE)
//!         …
//! NEW:    .quad <copy of case 0>, <copy of case 1>, …
//! ```
//!
//! Eligible ([`analyse`]): the whole function decodes, each of its
//! branches into it landing on one of its instructions; no indirect `jmp`
//! but tail calls through a pointer (the caller's set, [`crate::tailcall`])
//! and jumps through the tables given (any other would lead back into the
//! original) nor `xbegin`; no
//! operand reads or writes its own code (a `lea` of one of its
//! addresses runs as a `mov` of that address, as in a stub); at most
//! [`MAX_BYTES`]; each `call` a near one, direct to another function or to
//! its own entry, or indirect through an operand other than `rsp` itself.

use rustc_hash::FxHashSet as HashSet;

use anyhow::{Context, Result, bail};
use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, OpKind, Register};

use crate::callemu::call_as_push_and_jump;
use crate::insn::{near_target, swept_target};
use crate::jumptable::Table;
use crate::reloc::{OWN_IP, relocate};
use crate::stub::{Site, dispatch_call, displaced};
use crate::window::{BranchTargets, Function};

mod tables;

/// Largest function copied whole, in bytes.
pub const MAX_BYTES: usize = 4096;

/// A function that can run as a relocated copy, decoded.
#[derive(Clone, Debug)]
pub struct Whole {
    /// Run-time address of its first byte.
    pub start: u64,
    /// Run-time address of the byte after its last.
    pub end: u64,
    /// Its instructions, at their run-time addresses.
    pub insns: Vec<Instruction>,
    /// The addresses of its `ret`s, in order.
    pub rets: Vec<u64>,
    /// Its `call`s, in order: each one's address and the address after it
    /// (the return address it pushes, in the original function).
    pub calls: Vec<(u64, u64)>,
    /// Its instructions (but the first) that branches from outside it land
    /// on (a `.cold` part jumping back), in order.
    pub entered: Vec<u64>,
    /// Its jump tables (absolute addresses, at run-time addresses), copied
    /// with it.
    pub tables: Vec<Table>,
}

impl Whole {
    /// How many of its own direct branches (and calls) land on `at`, as
    /// the module's sweep counts them.
    pub fn branches_to(&self, at: u64) -> usize {
        self.insns
            .iter()
            .filter(|j| swept_target(j) == Some(at))
            .count()
    }

    /// The instructions of the function its jump tables land on, sorted.
    /// The module's count of ways in there does not tell its own tables'
    /// entries from other branches: [`analyse`] leaves them out of
    /// [`Whole::entered`], for the caller to check for branches from
    /// outside.
    pub fn table_targets(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .tables
            .iter()
            .flat_map(|t| t.targets.iter().copied())
            .filter(|t| (self.start..self.end).contains(t))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Where the original needs a jump back into the copy, in order: the
    /// return addresses of its calls that are inside it (a `call` ending
    /// the function, of a function that never returns, has none there),
    /// and the instructions branches from outside land on.
    pub fn returns_inside(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .calls
            .iter()
            .map(|&(_, next)| next)
            .filter(|&n| n < self.end)
            .chain(self.entered.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// The code of a copy, and where in it the original's return addresses
/// go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copy {
    /// The code, to be written at the address it was made for.
    pub code: Vec<u8>,
    /// For each of [`Whole::returns_inside`]: the address after a `call`
    /// in the original, and the address of the copy of that instruction.
    pub returns: Vec<(u64, u64)>,
}

/// Decodes `func` (its whole extent) for a copy, checking the rules; why
/// not. `tail_jumps`: the link-time addresses of the module's indirect
/// `jmp`s that are tail calls through a pointer (no target inside their
/// function). `tables`: the function's jump tables
/// ([`crate::jumptable::tables`]), at run-time addresses.
pub fn analyse(
    func: Function<'_>,
    targets: &BranchTargets,
    tail_jumps: &HashSet<u64>,
    tables: &[Table],
) -> Result<Whole, String> {
    let end = func.start + func.code.len() as u64;
    if func.code.len() > MAX_BYTES {
        return Err(format!(
            "it has {} bytes, more than the {MAX_BYTES} a copy may take",
            func.code.len()
        ));
    }
    let mut d = Decoder::with_ip(64, func.code, func.start, DecoderOptions::NONE);
    let mut insns = Vec::new();
    let mut rets = Vec::new();
    let mut calls = Vec::new();
    let mut i = Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut i);
        if i.is_invalid() {
            return Err(format!("it does not decode at {:#x}", i.ip()));
        }
        match i.flow_control() {
            FlowControl::IndirectBranch
                if !tail_jumps.contains(&i.ip().wrapping_sub(func.bias)) =>
            {
                if tables.iter().any(|t| t.jmp == i.ip()) {
                    insns.push(i);
                    continue;
                }
                return Err(format!(
                    "it has an indirect `jmp` at {:#x} that is not a tail call, which could lead \
                     back into the original",
                    i.ip()
                ));
            }
            FlowControl::XbeginXabortXend => {
                return Err(format!("it has `{}` at {:#x}", name(&i), i.ip()));
            }
            FlowControl::Call | FlowControl::IndirectCall => {
                call_rule(&i, func.start, end)?;
                calls.push((i.ip(), i.next_ip()));
            }
            FlowControl::Return => {
                if !matches!(i.code(), Code::Retnq | Code::Retnq_imm16) {
                    return Err(format!("it has `{}` at {:#x}", name(&i), i.ip()));
                }
                rets.push(i.ip());
            }
            _ => {}
        }
        if i.is_ip_rel_memory_operand() {
            let to = i.ip_rel_memory_address();
            if (func.start..end).contains(&to) && i.mnemonic() != iced_x86::Mnemonic::Lea {
                return Err(format!(
                    "`{}` at {:#x} reads or writes the function's own code",
                    name(&i),
                    i.ip()
                ));
            }
        }
        insns.push(i);
    }
    if rets.is_empty() {
        return Err("it has no `ret`".into());
    }
    let tables: Vec<Table> = tables
        .iter()
        .filter(|t| insns.iter().any(|i| i.ip() == t.jmp))
        .cloned()
        .collect();
    for t in &tables {
        tables::rule(&insns, t)?;
    }
    // Its branches into it land on its instructions (else the copy's
    // would go back to the original).
    let starts: HashSet<u64> = insns.iter().map(Instruction::ip).collect();
    if let Some(j) = insns.iter().find(|j| {
        near_target(j).is_some_and(|t| (func.start..end).contains(&t) && !starts.contains(&t))
    }) {
        return Err(format!(
            "the branch at {:#x} lands inside an instruction",
            j.ip()
        ));
    }
    // The instructions (but its entry) that a branch from outside it lands
    // on: more branches to them in the module than its own.
    // A table's entry counts as any way in (`u32::MAX`): those of its
    // own tables are left to the caller (`Whole::table_targets`).
    let own_entries: HashSet<u64> = tables
        .iter()
        .flat_map(|t| t.targets.iter().copied())
        .collect();
    let mut entered = Vec::new();
    for at in insns.iter().skip(1).map(Instruction::ip) {
        let link = at.wrapping_sub(func.bias);
        if !targets.0.contains(&link) {
            continue;
        }
        let inside = insns.iter().filter(|j| swept_target(j) == Some(at)).count();
        let ways = targets.2.get(&link).copied();
        if ways == Some(u32::MAX) && own_entries.contains(&at) {
            continue;
        }
        if ways != Some(inside as u32) {
            entered.push(at);
        }
    }
    Ok(Whole {
        start: func.start,
        end,
        insns,
        rets,
        calls,
        entered,
        tables,
    })
}

/// Why the `call` `i` of a function at `start..end` cannot run in its copy
/// as a push of its return address and a jump.
fn call_rule(i: &Instruction, start: u64, end: u64) -> Result<(), String> {
    match i.code() {
        Code::Call_rel32_64 => {
            let t = i.near_branch_target();
            if t != start && (start..end).contains(&t) {
                return Err(format!(
                    "the `call` at {:#x} calls into the function itself ({t:#x})",
                    i.ip()
                ));
            }
            Ok(())
        }
        Code::Call_rm64 => {
            let rsp_op = match i.op0_kind() {
                OpKind::Register => i.op0_register() == Register::RSP,
                _ => i.memory_index() == Register::RSP,
            };
            if rsp_op {
                return Err(format!(
                    "the `call` at {:#x} goes through `rsp` itself",
                    i.ip()
                ));
            }
            Ok(())
        }
        _ => Err(format!("it has `{}` at {:#x}", name(i), i.ip())),
    }
}

/// The mnemonic of `i`, as a listing writes it.
fn name(i: &Instruction) -> String {
    format!("{:?}", i.mnemonic()).to_lowercase()
}

fn e(r: std::result::Result<Instruction, iced_x86::IcedError>) -> Result<Instruction> {
    r.context("building a function's copy")
}

/// The code of the copy of `whole` at `at`, entered from the window of
/// `entry` (site id `site_id`; the stub area's trampoline at
/// `trampoline`), its `ret`s jumping to `ret_stubs` (each `ret`'s address
/// and its return stub's, one per [`Whole::rets`]). Fails on an entry not
/// at the function's start (but past an `endbr64`), where an
/// instruction cannot be encoded at `at` (a RIP-relative operand out of
/// rel32 reach), and where a copied jump table's address would not fit
/// its `jmp`'s disp32 (an entry its i32 offset). The code ends with the
/// copies of the function's jump tables (8-byte aligned, after `int3`
/// padding).
pub fn generate(
    entry: &Site,
    whole: &Whole,
    ret_stubs: &[(u64, u64)],
    site_id: u32,
    trampoline: u64,
    at: u64,
) -> Result<Copy> {
    if entry.probe != whole.start
        || whole
            .insns
            .iter()
            .take_while(|i| i.ip() < entry.addr)
            .any(|i| i.code() != Code::Endbr64)
    {
        bail!(
            "the entry's window at 0x{:x} is not at the function's start 0x{:x}",
            entry.addr,
            whole.start
        );
    }
    let mut v: Vec<Instruction> = Vec::with_capacity(whole.insns.len() + 5);
    v.extend(dispatch_call(site_id, trampoline)?);
    let own = whole.start..whole.end;
    // A `call` of the function itself goes to the original entry: then no
    // instruction of the copy may have the entry's address (the block
    // encoder would link the jump to it), and its own branches to the
    // entry go to its first instruction's own IP.
    let recursive = whole
        .insns
        .iter()
        .any(|i| i.code() == Code::Call_rel32_64 && i.near_branch_target() == whole.start);
    let first = OWN_IP + v.len() as u64;
    // Where each original instruction's copy starts in `v`.
    let mut index_of: rustc_hash::FxHashMap<u64, usize> =
        rustc_hash::FxHashMap::with_capacity_and_hasher(whole.insns.len(), Default::default());
    for i in &whole.insns {
        index_of.insert(i.ip(), v.len());
        let mut i = *i;
        if recursive
            && i.flow_control() != FlowControl::Call
            && near_target(&i) == Some(whole.start)
        {
            i.set_near_branch64(first);
        }
        let mut out = if i.flow_control() == FlowControl::Return {
            let stub = ret_stubs
                .iter()
                .find(|&&(r, _)| r == i.ip())
                .map(|&(_, s)| s)
                .with_context(|| format!("no return stub for the `ret` at 0x{:x}", i.ip()))?;
            // Its address kept: a branch to the `ret` lands on the jump.
            let mut j = e(Instruction::with_branch(Code::Jmp_rel32_64, stub))?;
            j.set_ip(i.ip());
            vec![j]
        } else if matches!(
            i.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall
        ) {
            // Checked by [`call_rule`].
            call_as_push_and_jump(&i)?
        } else {
            vec![displaced(&i, own.clone())?]
        };
        if recursive && i.ip() == whole.start {
            debug_assert_eq!(first, OWN_IP + v.len() as u64);
            out[0].set_ip(0);
        }
        v.extend(out);
    }
    let relocated = |v: &[Instruction]| {
        relocate(v, at, Some(whole.end)).map_err(|e| {
            anyhow::anyhow!(
                "relocating the function at 0x{:x} to 0x{at:x}: {e}",
                whole.start
            )
        })
    };
    let mut r = relocated(&v)?;
    let mut table_bytes = Vec::new();
    let refs = tables::references(&v, &whole.tables);
    if !whole.tables.is_empty() {
        // The tables' places after the code, then the code again with the
        // `jmp`s (or `lea`s) reading them (disp32: the same length).
        let len = r.code.len();
        let end = at + len as u64;
        let places = tables::places(&whole.tables, end)?;
        for &(k, t) in &refs {
            v[k].set_memory_displacement64(places[t]);
        }
        r = relocated(&v)?;
        if r.code.len() != len {
            bail!(
                "the copy of the function at 0x{:x} changed length with its jump tables",
                whole.start
            );
        }
        let copy_of = |t: u64| -> Result<u64> {
            if !(whole.start..whole.end).contains(&t) {
                return Ok(t);
            }
            let k = *index_of
                .get(&t)
                .with_context(|| format!("no instruction at 0x{t:x} for a jump table's entry"))?;
            match r.offsets.get(k) {
                Some(&o) if o != u32::MAX => Ok(at + u64::from(o)),
                _ => bail!("the copy of the table entry 0x{t:x} has no address of its own"),
            }
        };
        table_bytes = tables::bytes(&whole.tables, &places, end, copy_of)?;
    }
    let mut returns = Vec::new();
    for next in whole.returns_inside() {
        let k = v
            .iter()
            .position(|i| i.ip() == next)
            .with_context(|| format!("no instruction at 0x{next:x} in the copy"))?;
        match r.offsets.get(k) {
            Some(&o) if o != u32::MAX => returns.push((next, at + u64::from(o))),
            _ => bail!("the copy of the instruction at 0x{next:x} has no address of its own"),
        }
    }
    let mut code = r.code;
    code.extend_from_slice(&table_bytes);
    Ok(Copy { code, returns })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets_of(code: &[u8], start: u64) -> BranchTargets {
        let mut t = BranchTargets::default();
        t.sweep(code, start);
        t
    }

    /// `f: test edi, edi ; je .r ; mov eax, 1 ; .r: ret` where `.r` (the
    /// `ret`) is a branch target: copied, the `je` going to the copy's jump
    /// to the return stub.
    #[test]
    fn a_ret_that_is_a_branch_target_is_linked_to_its_jump() {
        let code = [0x85, 0xff, 0x74, 0x05, 0xb8, 0x01, 0, 0, 0, 0xc3];
        let start = 0x40_1000;
        let t = targets_of(&code, start);
        let func = Function {
            start,
            code: &code,
            bias: 0,
        };
        let w = analyse(func, &t, &HashSet::default(), &[]).unwrap();
        assert_eq!(w.rets, [0x40_1009]);
        assert!(w.calls.is_empty());
        let entry = Site {
            probe: start,
            addr: start,
            displaced: w.insns[..3].to_vec(),
            len: 9,
            ret: None,
        };
        let at = 0x40_9000;
        let copy = generate(&entry, &w, &[(0x40_1009, 0x40_a000)], 7, 0x40_8000, at).unwrap();
        assert!(copy.returns.is_empty());
        let code = copy.code;
        let insns: Vec<Instruction> = Decoder::with_ip(64, &code, at, DecoderOptions::NONE)
            .into_iter()
            .collect();
        // The dispatch, then the body.
        assert_eq!(insns[1].code(), Code::Pushq_imm32);
        assert_eq!(insns[1].immediate32(), 7);
        assert_eq!(insns[2].near_branch_target(), 0x40_8000);
        let je = insns.iter().find(|i| i.code() == Code::Je_rel8_64).unwrap();
        let jmp = insns
            .iter()
            .find(|i| i.near_branch_target() == 0x40_a000)
            .unwrap();
        assert_eq!(je.near_branch_target(), jmp.ip());
        // The last: back to the function's end.
        assert_eq!(insns.last().unwrap().near_branch_target(), start + 10);
    }

    /// `f: push rbx ; call g ; pop rbx ; call *8(%rsp) ; call f ; ret`:
    /// each `call` a push of the original's return address and a jump
    /// (`jmp *16(%rsp)`: the push moved `rsp`); the call of `f` itself
    /// goes to the original entry; the original's return addresses map to
    /// their copies. At a high address, the push is `lea` and two `mov`s.
    #[test]
    fn calls_push_the_original_return_address_and_jump() {
        for start in [0x40_1000u64, 0x7f00_0000_1000] {
            let g = start + 0x1000;
            let mut code = vec![0x53, 0xe8];
            code.extend_from_slice(&((g as i64 - (start as i64 + 6)) as i32).to_le_bytes());
            code.extend_from_slice(&[0x5b, 0xff, 0x54, 0x24, 0x08, 0xe8]);
            code.extend_from_slice(&(-((code.len() + 4) as i32)).to_le_bytes());
            code.push(0xc3);
            let func = Function {
                start,
                code: &code,
                bias: 0,
            };
            let w = analyse(func, &targets_of(&code, start), &HashSet::default(), &[]).unwrap();
            let ends = [start + 6, start + 11, start + 16];
            assert_eq!(
                w.calls,
                [
                    (start + 1, ends[0]),
                    (start + 7, ends[1]),
                    (start + 11, ends[2])
                ]
            );
            assert_eq!(w.returns_inside(), ends);
            let entry = Site {
                probe: start,
                addr: start,
                displaced: w.insns[..2].to_vec(),
                len: 6,
                ret: None,
            };
            let at = start + 0x8000;
            let copy =
                generate(&entry, &w, &[(start + 16, at + 0x1000)], 3, at - 0x100, at).unwrap();
            let insns: Vec<Instruction> =
                Decoder::with_ip(64, &copy.code, at, DecoderOptions::NONE)
                    .into_iter()
                    .collect();
            let at_addr = |a: u64| insns.iter().position(|i| i.ip() == a).unwrap();
            // Each return address maps to the copy of its instruction.
            let copied: Vec<Code> = copy
                .returns
                .iter()
                .map(|&(_, c)| insns[at_addr(c)].code())
                .collect();
            let push = if start < 0x8000_0000 {
                Code::Pushq_imm32
            } else {
                Code::Lea_r64_m
            };
            assert_eq!(copied, [Code::Pop_r64, push, Code::Jmp_rel32_64]);
            assert_eq!(
                copy.returns.iter().map(|&(n, _)| n).collect::<Vec<_>>(),
                ends
            );
            // The pushes of the return addresses, and the jumps.
            let pushed: Vec<u64> = insns
                .iter()
                .filter_map(|i| match i.code() {
                    Code::Pushq_imm32 if i.immediate32() != 3 => Some(i.immediate64()),
                    Code::Mov_rm32_imm32 if i.memory_displacement64() == 0 => {
                        Some(u64::from(i.immediate32()))
                    }
                    Code::Mov_rm32_imm32 => None,
                    _ => None,
                })
                .collect();
            let his: Vec<u64> = insns
                .iter()
                .filter(|i| i.code() == Code::Mov_rm32_imm32 && i.memory_displacement64() == 4)
                .map(|i| u64::from(i.immediate32()))
                .collect();
            if start < 0x8000_0000 {
                assert_eq!(pushed, ends);
                assert!(his.is_empty());
            } else {
                assert_eq!(pushed, ends.map(|e| e & 0xffff_ffff));
                assert_eq!(his, [start >> 32; 3]);
            }
            let jumps: Vec<&Instruction> = insns
                .iter()
                .filter(|i| matches!(i.code(), Code::Jmp_rel32_64 | Code::Jmp_rm64))
                .collect();
            assert_eq!(jumps[0].near_branch_target(), g);
            assert_eq!(jumps[1].code(), Code::Jmp_rm64);
            assert_eq!(jumps[1].memory_base(), Register::RSP);
            assert_eq!(jumps[1].memory_displacement64(), 16);
            // The call of itself: to the original entry, not the copy.
            assert_eq!(jumps[2].near_branch_target(), start);
            // The `ret`'s jump to its stub.
            assert_eq!(jumps[3].near_branch_target(), at + 0x1000);
        }
    }

    /// A switch's code at `start`: `head` (its check and its `jmp` through
    /// the table at `table_at`, entries of `entry` bytes, the `jmp` at
    /// `jmp`), then three cases (`mov $10+k, %eax ; ret`) and the default
    /// (`or $-1, %eax ; ret`): the code, the cases' addresses, the branch
    /// targets (the cases among them) and the table.
    fn switch_of(
        start: u64,
        head: Vec<u8>,
        jmp: u64,
        table_at: u64,
        entry: usize,
    ) -> (Vec<u8>, Vec<u64>, BranchTargets, Table) {
        let mut code = head;
        let cases: Vec<u64> = (0..3).map(|k| start + code.len() as u64 + 6 * k).collect();
        for k in 0..3u8 {
            code.extend_from_slice(&[0xb8, 10 + k, 0, 0, 0, 0xc3]);
        }
        code.extend_from_slice(&[0x83, 0xc8, 0xff, 0xc3]);
        let mut t = targets_of(&code, start);
        t.add_other(cases.iter().copied());
        let table = Table {
            jmp,
            addr: table_at,
            entry,
            targets: cases.clone(),
        };
        (code, cases, t, table)
    }

    /// `f: cmp $2, %edi ; ja .d ; mov %edi, %eax ; jmp *T(,%rax,8) ;
    /// .c0: mov $10, %eax ; ret ; .c1: … ; .c2: … ; .d: or $-1, %eax ; ret`
    /// with `T` its table of 3 entries: the copy's `jmp` reads a copy of
    /// the table after the code, whose entries are the copies of the
    /// cases; a table of offsets is refused.
    #[test]
    fn a_jump_table_goes_with_the_copy() {
        let start = 0x40_1000u64;
        let table_at = 0x40_2000u64;
        let mut head = vec![0x83, 0xff, 0x02, 0x77, 0x14, 0x89, 0xf8, 0xff, 0x24, 0xc5];
        head.extend_from_slice(&(table_at as u32).to_le_bytes());
        let (code, cases, t, table) = switch_of(start, head, start + 7, table_at, 8);
        let func = Function {
            start,
            code: &code,
            bias: 0,
        };
        let w = analyse(func, &t, &HashSet::default(), std::slice::from_ref(&table)).unwrap();
        assert_eq!(w.rets.len(), 4);
        assert!(w.entered.is_empty());
        assert_eq!(w.table_targets(), cases);
        let entry = Site {
            probe: start,
            addr: start,
            displaced: w.insns[..3].to_vec(),
            len: 7,
            ret: None,
        };
        let at = 0x40_9000;
        let stubs: Vec<(u64, u64)> = w
            .rets
            .iter()
            .enumerate()
            .map(|(k, &r)| (r, 0x40_a000 + 0x40 * k as u64))
            .collect();
        let copy = generate(&entry, &w, &stubs, 7, 0x40_8000, at).unwrap();
        let insns: Vec<Instruction> = Decoder::with_ip(64, &copy.code, at, DecoderOptions::NONE)
            .into_iter()
            .collect();
        let jmp = insns.iter().find(|i| i.code() == Code::Jmp_rm64).unwrap();
        let new_table = jmp.memory_displacement64();
        assert_eq!(new_table % 8, 0);
        let off = (new_table - at) as usize;
        assert_eq!(copy.code.len(), off + 24);
        let entries: Vec<u64> = copy.code[off..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let movs: Vec<(u64, u32)> = insns
            .iter()
            .filter(|i| i.code() == Code::Mov_r32_imm32)
            .map(|i| (i.ip(), i.immediate32()))
            .collect();
        assert_eq!(movs.iter().map(|m| m.1).collect::<Vec<_>>(), [10, 11, 12]);
        assert_eq!(entries, movs.iter().map(|m| m.0).collect::<Vec<_>>());
        // A table of another shape than its `jmp`'s is refused.
        let relative = Table { entry: 4, ..table };
        let e = analyse(func, &t, &HashSet::default(), &[relative]).unwrap_err();
        assert!(e.contains("does not read its jump table"), "{e}");
        // A copy too high for the table's disp32.
        let e = generate(&entry, &w, &stubs, 7, 0x40_8000, 0x8000_0000).unwrap_err();
        assert!(format!("{e:#}").contains("32-bit reach"), "{e:#}");
    }

    /// The PIE shape: `f: cmp $2, %edi ; ja .d ; lea T(%rip), %rdx ;
    /// movslq (%rdx,%rdi,4), %rax ; add %rdx, %rax ; jmp *%rax ; .c0: mov
    /// $10, %eax ; ret ; … ; .d: or $-1, %eax ; ret`, `T` 3 offsets from
    /// itself: the copy's `lea` takes the table's copy, whose offsets from
    /// itself lead to the copy's cases; a read inside the table other than
    /// by the `lea` is refused.
    #[test]
    fn a_table_of_offsets_goes_with_the_copy() {
        let start = 0x7f00_0000_1000u64;
        let table_at = start + 0x1000;
        let mut head = vec![0x83, 0xff, 0x02, 0x77, 0x22, 0x48, 0x8d, 0x15];
        head.extend_from_slice(&((table_at - (start + 12)) as u32).to_le_bytes());
        head.extend_from_slice(&[0x48, 0x63, 0x04, 0xba, 0x48, 0x01, 0xd0, 0xff, 0xe0]);
        let (code, _, t, table) = switch_of(start, head, start + 19, table_at, 4);
        let func = Function {
            start,
            code: &code,
            bias: 0,
        };
        let w = analyse(func, &t, &HashSet::default(), std::slice::from_ref(&table)).unwrap();
        assert!(w.entered.is_empty());
        let entry = Site {
            probe: start,
            addr: start,
            displaced: w.insns[..2].to_vec(),
            len: 5,
            ret: None,
        };
        let at = start + 0x9000;
        let stubs: Vec<(u64, u64)> = w
            .rets
            .iter()
            .enumerate()
            .map(|(k, &r)| (r, at + 0x1000 + 0x40 * k as u64))
            .collect();
        let copy = generate(&entry, &w, &stubs, 7, at - 0x100, at).unwrap();
        let insns: Vec<Instruction> = Decoder::with_ip(64, &copy.code, at, DecoderOptions::NONE)
            .into_iter()
            .collect();
        let lea = insns
            .iter()
            .find(|i| i.code() == Code::Lea_r64_m && i.is_ip_rel_memory_operand())
            .unwrap();
        let new_table = lea.ip_rel_memory_address();
        let off = (new_table - at) as usize;
        assert_eq!(off % 8, 0);
        assert_eq!(copy.code.len(), off + 12);
        let entries: Vec<u64> = copy.code[off..]
            .chunks_exact(4)
            .map(|c| new_table.wrapping_add(i32::from_le_bytes(c.try_into().unwrap()) as u64))
            .collect();
        let movs: Vec<u64> = insns
            .iter()
            .filter(|i| i.code() == Code::Mov_r32_imm32)
            .map(Instruction::ip)
            .collect();
        assert_eq!(entries, movs);
        // `mov T+4(%rip), %eax` in the function: refused.
        let mut code2 = code.clone();
        let at_mov = start + code2.len() as u64;
        code2.extend_from_slice(&[0x8b, 0x05]);
        code2.extend_from_slice(&((table_at + 4 - (at_mov + 6)) as u32).to_le_bytes());
        code2.push(0xc3);
        let func2 = Function {
            start,
            code: &code2,
            bias: 0,
        };
        let e = analyse(func2, &t, &HashSet::default(), &[table]).unwrap_err();
        assert!(e.contains("other than by a `lea` of the table"), "{e}");
    }

    #[test]
    fn refusals() {
        let start = 0x40_1000;
        let check = |code: &[u8], t: &BranchTargets| {
            analyse(
                Function {
                    start,
                    code,
                    bias: 0,
                },
                t,
                &HashSet::default(),
                &[],
            )
        };
        // An indirect jump.
        let code = [0xff, 0xe0, 0xc3];
        let e = check(&code, &targets_of(&code, start)).unwrap_err();
        assert!(e.contains("indirect `jmp`"), "{e}");
        // A branch from outside into its middle (a `.cold` part's): where
        // the original jumps back into the copy.
        let code = [0x31, 0xc0, 0xc3];
        let mut t = targets_of(&code, start);
        // `jmp start+2` from 0x401200.
        let rel = (start + 2) as i64 - (0x40_1200 + 5);
        let mut jmp = vec![0xe9];
        jmp.extend_from_slice(&(rel as i32).to_le_bytes());
        t.sweep(&jmp, 0x40_1200);
        assert_eq!(check(&code, &t).unwrap().entered, [start + 2]);
        // A branch into the middle of one of its instructions.
        let code = [0xeb, 0x01, 0xb8, 0x01, 0, 0, 0, 0xc3];
        let e = check(&code, &targets_of(&code, start)).unwrap_err();
        assert!(e.contains("inside an instruction"), "{e}");
        // Reads its own code.
        let code = [0x48, 0x8b, 0x05, 0xf9, 0xff, 0xff, 0xff, 0xc3];
        let e = check(&code, &targets_of(&code, start)).unwrap_err();
        assert!(e.contains("own code"), "{e}");
        // An indirect `jmp` that is a tail call is copied.
        let code = [0xff, 0xe0, 0xc3];
        let tails: HashSet<u64> = [start].into_iter().collect();
        let f = Function {
            start,
            code: &code,
            bias: 0,
        };
        assert!(analyse(f, &targets_of(&code, start), &tails, &[]).is_ok());
        // A call into its own middle; through `rsp` itself.
        let code = [0xe8, 0, 0, 0, 0, 0xc3];
        let e = check(&code, &targets_of(&code, start)).unwrap_err();
        assert!(e.contains("calls into the function itself"), "{e}");
        let code = [0xff, 0xd4, 0xc3];
        let e = check(&code, &targets_of(&code, start)).unwrap_err();
        assert!(e.contains("through `rsp`"), "{e}");
        // Too long.
        let code = vec![0x90; MAX_BYTES + 1];
        let e = check(&code, &BranchTargets::default()).unwrap_err();
        assert!(e.contains("more than"), "{e}");
    }
}
