//! A `call` run away from its place: as a push of its *original* return
//! address and a jump to the callee. A stub runs so the `call` ending a
//! probe's window ([`crate::stub`]), a whole function's copy each of its
//! `call`s ([`crate::whole`]): the callee, and every unwinder or
//! backtrace it runs, sees a return address in the original code, and
//! returns there, never into the stub area.
//!
//! ```text
//! push ORIG_NEXT                       ; when it fits an imm32 (sign-extended)
//! lea rsp, [rsp-8]                     ; else: no flag changed,
//! mov dword [rsp], ORIG_NEXT_LOW       ;       no register written
//! mov dword [rsp+4], ORIG_NEXT_HIGH
//! jmp f                                ; `jmp *OPERAND` for `call *OPERAND`,
//!                                      ; its displacement raised by 8 when
//!                                      ; `rsp` is its base
//! ```

use anyhow::{Context, Result};
use iced_x86::{Code, Instruction, MemoryOperand, OpKind, Register};

/// The `call` `i` (decoded at its run-time address; a near one, direct or
/// through an operand other than `rsp` itself, as the window and copy
/// rules check) as a push of `i.next_ip()` and a jump to the callee. The
/// first instruction keeps the `call`'s address, so that a branch to the
/// `call` the block encoder links lands on it; the others are the
/// caller's own (IP 0, see [`crate::reloc::relocate`]).
pub(crate) fn call_as_push_and_jump(i: &Instruction) -> Result<Vec<Instruction>> {
    let next = i.next_ip();
    let rsp = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    let mut v = Vec::with_capacity(4);
    if i64::from(next as i32) == next as i64 {
        v.push(e(Instruction::with1(Code::Pushq_imm32, next as i32))?);
    } else {
        v.push(e(Instruction::with2(
            Code::Lea_r64_m,
            Register::RSP,
            rsp(-8),
        ))?);
        v.push(e(Instruction::with2(
            Code::Mov_rm32_imm32,
            rsp(0),
            next as u32,
        ))?);
        v.push(e(Instruction::with2(
            Code::Mov_rm32_imm32,
            rsp(4),
            (next >> 32) as u32,
        ))?);
    }
    v[0].set_ip(i.ip());
    let j = if i.code() == Code::Call_rm64 {
        let mut j = *i;
        j.set_code(Code::Jmp_rm64);
        if j.op0_kind() == OpKind::Memory && j.memory_base() == Register::RSP {
            // The push moved `rsp` down by 8.
            let d = j.memory_displacement64().wrapping_add(8);
            j.set_memory_displacement64(d);
            j.set_memory_displ_size(if (-128..128).contains(&(d as i64)) {
                1
            } else {
                4
            });
        }
        j.set_ip(0);
        j
    } else {
        e(Instruction::with_branch(
            Code::Jmp_rel32_64,
            i.near_branch_target(),
        ))?
    };
    v.push(j);
    Ok(v)
}

fn e(r: std::result::Result<Instruction, iced_x86::IcedError>) -> Result<Instruction> {
    r.context("running a `call` as a push and a jump")
}
