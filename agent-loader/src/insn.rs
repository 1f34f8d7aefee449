//! What the window rules ([`crate::window`]), the jump-table reader
//! ([`crate::jumptable`]), the tail-call rules ([`crate::tailcall`]) and
//! a whole function's copy ([`crate::whole`]) ask of one instruction.

use iced_x86::{FlowControl, Instruction, InstructionInfoFactory, OpAccess, OpKind, Register};

/// The immediate target of a branch, call or `xbegin` (`None` for an
/// indirect one, or an instruction that does not branch).
pub(crate) fn near_target(i: &Instruction) -> Option<u64> {
    (i.op_count() > 0
        && matches!(
            i.op0_kind(),
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
        ))
    .then(|| i.near_branch_target())
}

/// The immediate target of `i` that the sweep of a module's code counts
/// as a branch target (`window::BranchTargets::sweep`): a `jmp`'s, a
/// `jcc`'s, a `call`'s or an `xbegin`'s.
pub(crate) fn swept_target(i: &Instruction) -> Option<u64> {
    near_target(i).filter(|_| {
        matches!(
            i.flow_control(),
            FlowControl::UnconditionalBranch
                | FlowControl::ConditionalBranch
                | FlowControl::Call
                | FlowControl::XbeginXabortXend
        )
    })
}

/// Whether `i` is a `jmp`/`jcc` with an immediate target.
pub(crate) fn direct_branch(i: &Instruction) -> bool {
    matches!(
        i.flow_control(),
        FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
    ) && near_target(i).is_some()
}

/// The registers `i` writes (their full 64-bit registers), whether as an
/// operand or implicitly (`xchg`, `push`).
pub(crate) fn written(f: &mut InstructionInfoFactory, i: &Instruction) -> Vec<Register> {
    f.info(i)
        .used_registers()
        .iter()
        .filter(|u| {
            matches!(
                u.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            )
        })
        .map(|u| u.register().full_register())
        .collect()
}

/// Whether `i` writes register `r` (its full 64-bit register).
pub(crate) fn writes(i: &Instruction, r: Register) -> bool {
    written(&mut InstructionInfoFactory::new(), i).contains(&r.full_register())
}
