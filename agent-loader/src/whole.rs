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
//!         <the function, relocated; each `ret` a `jmp ret_stub_k`>
//!         jmp function_end          ; its last instruction falling through
//! ```
//!
//! Eligible ([`analyse`]): the whole function decodes, each of its
//! branches into it landing on one of its instructions; no indirect `jmp`
//! (a jump table would lead back into the original) nor `xbegin`; no
//! branch from outside the function lands inside it but on its entry (the
//! sweep's count of branches to each of its instructions is the count of
//! its own: a `.cold` part jumping back, a jump table's entry, are not);
//! no operand reads or writes its own code (a `lea` of one of its
//! addresses runs as a `mov` of that address, as in a stub); at most
//! [`MAX_BYTES`]; and no `call` ([`Whole::first_call`]): a `call` in the
//! copy would push a return address into the copy, which the program's
//! unwinder (C++ exceptions, `backtrace()`) would meet in a callee, and a
//! `call` of the function itself would enter the copy past its dispatch.

use anyhow::{Context, Result, bail};
use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction};

use crate::insn::near_target;
use crate::reloc::relocate;
use crate::stub::{Site, dispatch_call, displaced};
use crate::window::{BranchTargets, Function};

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
    /// Its first `call`, direct or not: no copy is made of a function
    /// that calls (see the module's documentation).
    pub first_call: Option<u64>,
}

/// Decodes `func` (its whole extent) for a copy, checking the rules but
/// the one on calls (which [`Whole::first_call`] tells); why not.
pub fn analyse(func: Function<'_>, targets: &BranchTargets) -> Result<Whole, String> {
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
    let mut first_call = None;
    let mut i = Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut i);
        if i.is_invalid() {
            return Err(format!("it does not decode at {:#x}", i.ip()));
        }
        match i.flow_control() {
            FlowControl::IndirectBranch => {
                return Err(format!(
                    "it has an indirect `jmp` at {:#x}, which could lead back into the original",
                    i.ip()
                ));
            }
            FlowControl::XbeginXabortXend => {
                return Err(format!("it has `{}` at {:#x}", name(&i), i.ip()));
            }
            FlowControl::Call | FlowControl::IndirectCall => {
                first_call.get_or_insert(i.ip());
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
    // Its branches into it land on its instructions (else the copy's
    // would go back to the original).
    let starts: std::collections::HashSet<u64> = insns.iter().map(Instruction::ip).collect();
    if let Some(j) = insns.iter().find(|j| {
        near_target(j).is_some_and(|t| (func.start..end).contains(&t) && !starts.contains(&t))
    }) {
        return Err(format!(
            "the branch at {:#x} lands inside an instruction",
            j.ip()
        ));
    }
    // Every branch to one of its instructions (but its entry) is one of
    // its own.
    for at in insns.iter().skip(1).map(Instruction::ip) {
        let link = at.wrapping_sub(func.bias);
        if !targets.0.contains(&link) {
            continue;
        }
        let inside = insns
            .iter()
            .filter(|j| near_target(j) == Some(at) && branches(j))
            .count();
        if targets.2.get(&link).copied() != Some(inside as u32) {
            return Err(format!(
                "{at:#x} inside it is the target of a branch from outside it"
            ));
        }
    }
    Ok(Whole {
        start: func.start,
        end,
        insns,
        rets,
        first_call,
    })
}

/// The mnemonic of `i`, as a listing writes it.
fn name(i: &Instruction) -> String {
    format!("{:?}", i.mnemonic()).to_lowercase()
}

/// Whether the sweep counts `i`'s immediate target as a branch target
/// (`BranchTargets::sweep`).
fn branches(i: &Instruction) -> bool {
    matches!(
        i.flow_control(),
        FlowControl::UnconditionalBranch
            | FlowControl::ConditionalBranch
            | FlowControl::Call
            | FlowControl::XbeginXabortXend
    )
}

/// The code of the copy of `whole` at `at`, entered from the window of
/// `entry` (site id `site_id`; the stub area's trampoline at
/// `trampoline`), its `ret`s jumping to `ret_stubs` (each `ret`'s address
/// and its return stub's, one per [`Whole::rets`]). Fails on a function
/// that calls, on an entry not at the function's start (but past an
/// `endbr64`), and where an instruction cannot be encoded at `at` (a
/// RIP-relative operand out of rel32 reach).
pub fn generate(
    entry: &Site,
    whole: &Whole,
    ret_stubs: &[(u64, u64)],
    site_id: u32,
    trampoline: u64,
    at: u64,
) -> Result<Vec<u8>> {
    if let Some(c) = whole.first_call {
        bail!("a `call` at 0x{c:x}: no copy of a function that calls");
    }
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
    for i in &whole.insns {
        if i.flow_control() == FlowControl::Return {
            let stub = ret_stubs
                .iter()
                .find(|&&(r, _)| r == i.ip())
                .map(|&(_, s)| s)
                .with_context(|| format!("no return stub for the `ret` at 0x{:x}", i.ip()))?;
            // Its address kept: a branch to the `ret` lands on the jump.
            let mut j = Instruction::with_branch(Code::Jmp_rel32_64, stub)
                .context("building a function's copy")?;
            j.set_ip(i.ip());
            v.push(j);
        } else {
            v.push(displaced(i, own.clone())?);
        }
    }
    let r = relocate(&v, at, Some(whole.end)).map_err(|e| {
        anyhow::anyhow!(
            "relocating the function at 0x{:x} to 0x{at:x}: {e}",
            whole.start
        )
    })?;
    Ok(r.code)
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
        let w = analyse(func, &t).unwrap();
        assert_eq!(w.rets, [0x40_1009]);
        assert_eq!(w.first_call, None);
        let entry = Site {
            probe: start,
            addr: start,
            displaced: w.insns[..3].to_vec(),
            len: 9,
            ret: None,
        };
        let at = 0x40_9000;
        let code = generate(&entry, &w, &[(0x40_1009, 0x40_a000)], 7, 0x40_8000, at).unwrap();
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
            )
        };
        // An indirect jump.
        let code = [0xff, 0xe0, 0xc3];
        let e = check(&code, &targets_of(&code, start)).unwrap_err();
        assert!(e.contains("indirect `jmp`"), "{e}");
        // A branch from outside into its middle (a `.cold` part's).
        let code = [0x31, 0xc0, 0xc3];
        let mut t = targets_of(&code, start);
        // `jmp start+2` from 0x401200.
        let rel = (start + 2) as i64 - (0x40_1200 + 5);
        let mut jmp = vec![0xe9];
        jmp.extend_from_slice(&(rel as i32).to_le_bytes());
        t.sweep(&jmp, 0x40_1200);
        let e = check(&code, &t).unwrap_err();
        assert!(e.contains("from outside"), "{e}");
        // A branch into the middle of one of its instructions.
        let code = [0xeb, 0x01, 0xb8, 0x01, 0, 0, 0, 0xc3];
        let e = check(&code, &targets_of(&code, start)).unwrap_err();
        assert!(e.contains("inside an instruction"), "{e}");
        // Reads its own code.
        let code = [0x48, 0x8b, 0x05, 0xf9, 0xff, 0xff, 0xff, 0xc3];
        let e = check(&code, &targets_of(&code, start)).unwrap_err();
        assert!(e.contains("own code"), "{e}");
        // A call: analysed, refused by `generate`.
        let code = [0xe8, 0, 0, 0, 0, 0xc3];
        let w = check(&code, &targets_of(&code, start)).unwrap();
        assert_eq!(w.first_call, Some(start));
        let entry = Site {
            probe: start,
            addr: start,
            displaced: w.insns[..1].to_vec(),
            len: 5,
            ret: None,
        };
        let e = generate(
            &entry,
            &w,
            &[(start + 5, 0x40_a000)],
            1,
            0x40_8000,
            0x40_9000,
        )
        .unwrap_err();
        assert!(e.to_string().contains("call"), "{e}");
        // Too long.
        let code = vec![0x90; MAX_BYTES + 1];
        let e = check(&code, &BranchTargets::default()).unwrap_err();
        assert!(e.contains("more than"), "{e}");
    }
}
