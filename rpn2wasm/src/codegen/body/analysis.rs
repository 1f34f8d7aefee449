//! Analyses of a body before emission: structured and unrollable loops,
//! blocks entered through the dispatch, and the cached values at block entry.

use super::VCAP;
use crate::ast::*;

/// The natural loops of a body that can be Wasm `loop`s: for each block
/// that heads one, the last block of the loop. A loop `[b, c]` (c the last
/// block with a backward branch to b) qualifies when no branch enters it
/// other than at b, no block inside it is reached through the dispatch
/// (handler entries, heads of loops that do not qualify), and it nests
/// properly with the other loops.
pub(super) fn structured_loops(
    body: &Body,
    block_of: &[Option<usize>],
    n: usize,
) -> Vec<Option<usize>> {
    let len = body.insns.len();
    let mut blk = vec![0; len];
    let mut cur = 0;
    for i in 0..len {
        if let Some(b) = block_of[i] {
            cur = b;
        }
        blk[i] = cur;
    }
    let mut dispatched = vec![false; n];
    if n > 0 {
        dispatched[0] = true;
    }
    let mut edges = Vec::new();
    for (i, insn) in body.insns.iter().enumerate() {
        let Some(t) = insn.op.target().filter(|t| *t < len) else {
            continue;
        };
        let Some(tb) = block_of[t] else { continue };
        if matches!(insn.op, Op::Sx(_)) {
            dispatched[tb] = true;
        } else {
            edges.push((blk[i], tb));
        }
    }
    let mut end: Vec<Option<usize>> = vec![None; n];
    for &(s, t) in &edges {
        if t <= s {
            end[t] = Some(end[t].map_or(s, |c: usize| c.max(s)));
        }
    }
    loop {
        let mut through_dispatch = dispatched.clone();
        for &(s, t) in &edges {
            if t <= s && end[t].is_none() {
                through_dispatch[t] = true;
            }
        }
        let heads: Vec<(usize, usize)> = (0..n).filter_map(|b| end[b].map(|c| (b, c))).collect();
        let bad = heads.iter().copied().find(|&(b, c)| {
            let improper = heads
                .iter()
                .any(|&(b2, c2)| (b < b2 && b2 <= c && c2 > c) || (b2 < b && b <= c2 && c > c2));
            let entered = edges.iter().any(|&(s, t)| s < b && t > b && t <= c);
            let dispatched_inside = (b + 1..=c).any(|j| through_dispatch[j]);
            improper || entered || dispatched_inside
        });
        match bad {
            Some((b, _)) => end[b] = None,
            None => return end,
        }
    }
}

/// A single-block structured loop closed by `loop`, to be emitted as
/// several copies of its body (see `BodyGen::unrolled_loop`).
#[derive(Clone, Copy)]
pub(super) struct Unroll {
    /// The loop's first instruction (the head block's leader).
    pub(super) head: usize,
    /// The `loop` instruction that branches back to `head`.
    pub(super) back_edge: usize,
    /// Copies of the body, the first included.
    pub(super) copies: usize,
}

/// Bodies of at most this many instructions are unrolled four times, of at
/// most twice as many twice; longer ones are not unrolled.
const UNROLL_SMALL_BODY: usize = 8;

/// For each block, the unrolling of the loop it heads, if any: a structured
/// loop of one block whose first branch is the `loop` back to its head,
/// preceded only by straight-line instructions (no branch, `sx`, call or
/// terminator). Straight-line code from the same compile-time state
/// compiles to the same code, which is what makes the copies agree.
pub(super) fn unrollable_loops(
    body: &Body,
    block_of: &[Option<usize>],
    loop_end: &[Option<usize>],
) -> Vec<Option<Unroll>> {
    let mut out = vec![None; loop_end.len()];
    for (head, b) in block_of.iter().enumerate() {
        let Some(b) = *b else { continue };
        if loop_end[b] != Some(b) {
            continue;
        }
        let mut back_edge = None;
        for (i, insn) in body.insns.iter().enumerate().skip(head) {
            if i > head && block_of[i].is_some() {
                break;
            }
            if insn.op.target().is_some() {
                if matches!(insn.op, Op::Loop(t) if t == head) {
                    back_edge = Some(i);
                }
                break;
            }
            if !straight_line(&insn.op) {
                break;
            }
        }
        let Some(back_edge) = back_edge else { continue };
        let len = back_edge - head;
        let copies = if len <= UNROLL_SMALL_BODY {
            4
        } else if len <= 2 * UNROLL_SMALL_BODY {
            2
        } else {
            continue;
        };
        out[b] = Some(Unroll {
            head,
            back_edge,
            copies,
        });
    }
    out
}

/// Whether an instruction always falls through to the next one (or raises):
/// no branch, no call, no end of the run.
fn straight_line(op: &Op) -> bool {
    op.target().is_none() && !op.ends_flow() && !matches!(op, Op::Call(_))
}

/// For each block, whether the dispatch `br_table` can send control to it:
/// the entry, `sx` targets (handler entries) and the targets of backward
/// branches that are not structured loops (see `BodyGen::goto`).
pub(super) fn dispatch_targets(
    body: &Body,
    block_of: &[Option<usize>],
    loop_end: &[Option<usize>],
) -> Vec<bool> {
    let n = loop_end.len();
    let len = body.insns.len();
    let mut dispatched = vec![false; n];
    if n > 0 {
        dispatched[0] = true;
    }
    let mut cur = 0;
    for (i, insn) in body.insns.iter().enumerate() {
        if let Some(b) = block_of[i] {
            cur = b;
        }
        let Some(tb) = insn
            .op
            .target()
            .filter(|t| *t < len)
            .and_then(|t| block_of[t])
        else {
            continue;
        };
        let structured = loop_end[tb].is_some_and(|c| cur <= c);
        if matches!(insn.op, Op::Sx(_)) || (tb <= cur && !structured) {
            dispatched[tb] = true;
        }
    }
    dispatched
}

/// For each block, the head of the innermost structured loop whose interior
/// (the blocks after its head) contains it; `None` at the top level.
pub(super) fn loop_regions(loop_end: &[Option<usize>]) -> Vec<Option<usize>> {
    let n = loop_end.len();
    let mut region = vec![None; n];
    // Heads in increasing order: later (inner) loops overwrite outer ones.
    for (b, c) in loop_end.iter().enumerate() {
        if let Some(c) = c {
            for r in region.iter_mut().take(c + 1).skip(b + 1) {
                *r = Some(b);
            }
        }
    }
    region
}

/// Net stack effect of an instruction (pushes − pops), when it is static
/// and the instruction falls through normally. `None`: dynamic (helpers that
/// may stop early, calls, `restore tsp`, stack-supplied counts).
fn stack_effect(op: &Op) -> Option<i64> {
    use Op::*;
    Some(match op {
        Nop | Jmp(_) | Jlt(_) | Jle(_) | Jgt(_) | Jge(_) | Jz(_) | Jnz(_) | Loop(_) => 0,
        SetMinImm(_) | SetMajImm(_) | Sx(_) | Ux | Rx | PurgeSt | Callk | LogSt => 0,
        Neg | Div | Idiv | ShiftImm(..) | PropImm(..) | Xchg | PushMem(_) | Vfyr | Vfyrw
        | PushIo(_) => 0,
        SetMin | SetMaj | Add | Sub | Mul | And | Or | Xor | Shift(_) | Prop(_) | PopReg { .. } => {
            -1
        }
        PopLp | PopStp | RestoreSbp | Free => -1,
        PopMem(_) | TracePv | TraceVars(_) | PopIo(_) => -2,
        PushImm(_) | PushSym { .. } | PushByte(_) | PushTask | PushPid | PushProcid => 1,
        PushEntry(_) | PushElapsed | PushUsdt(_) => 1,
        PushLp | PushPlp | PushStp | SaveTsp | SaveSbp | PushWid => 1,
        PushX => 3,
        PushReg { reg, .. } if *reg == hostabi::regs::CPUID => 3,
        PushReg { reg, .. } => hostabi::regs::by_id(*reg).map_or(1, |r| r.parts() as i64),
        DupImm(n) => *n as i64,
        Ros(n) => -(*n as i64),
        VarImm(VarOp::Push, ..) => 1,
        VarImm(VarOp::Pop, ..) => -1,
        VarImm(..) => 0,
        Var(VarOp::Push, _) => 0,
        Var(VarOp::Pop, _) => -2,
        Var(..) => -1,
        SlotImm(SlotOp::Push, ..) => 1,
        SlotImm(SlotOp::Pop, ..) => -1,
        SlotImm(SlotOp::Copy, ..) => 0,
        Slot(SlotOp::Push, _) => 0,
        Slot(SlotOp::Pop, _) => -2,
        Slot(SlotOp::Copy, _) => -1,
        Malloc => 0,
        _ => return None,
    })
}

/// For each block, how many values its predecessors can all hand over in
/// locals: the statically known stack depth at its leader (relative to the
/// body's entry; the same on every incoming edge), capped at the cache size.
/// Handler entries (`sx` targets) and blocks of unknown depth get 0.
pub(super) fn block_cache_sizes(
    body: &Body,
    block_of: &[Option<usize>],
    n_blocks: usize,
) -> Vec<usize> {
    #[derive(Clone, Copy, PartialEq)]
    enum D {
        Unseen,
        Known(i64),
        Unknown,
    }
    let n = body.insns.len();
    let mut depth = vec![D::Unseen; n];
    let merge = |slot: &mut D, v: D| -> bool {
        let new = match (*slot, v) {
            (D::Unseen, v) => v,
            (D::Known(a), D::Known(b)) if a == b => D::Known(a),
            (D::Unknown, _) => D::Unknown,
            _ => D::Unknown,
        };
        let changed = new != *slot;
        *slot = new;
        changed
    };
    for insn in &body.insns {
        if let Op::Sx(t) = insn.op
            && t < n
        {
            depth[t] = D::Unknown;
        }
    }
    merge(&mut depth[0], D::Known(0));
    let mut work: Vec<usize> = vec![0];
    while let Some(i) = work.pop() {
        let d = depth[i];
        let op = &body.insns[i].op;
        let after = match (d, stack_effect(op)) {
            (D::Known(x), Some(e)) => D::Known(x + e),
            _ => D::Unknown,
        };
        let falls = !op.ends_flow();
        let mut succ = Vec::with_capacity(2);
        if falls && i + 1 < n {
            succ.push(i + 1);
        }
        if let Some(t) = op.target().filter(|t| !matches!(op, Op::Sx(_)) && *t < n) {
            succ.push(t);
        }
        for s in succ {
            if merge(&mut depth[s], after) {
                work.push(s);
            }
        }
    }
    let mut k = vec![0; n_blocks];
    for (i, b) in block_of.iter().enumerate() {
        if let (Some(b), D::Known(d)) = (b, depth[i]) {
            k[*b] = (d.max(0) as usize).min(VCAP);
        }
    }
    k
}

/// Whether an instruction can write the RPN stack (a push, a slot write, or
/// an exception, which pushes its three words). Conservative: anything not
/// listed as harmless counts.
pub(super) fn may_write_stack(op: &Op) -> bool {
    !matches!(
        op,
        Op::Nop
            | Op::Exit
            | Op::Abort
            | Op::Remove
            | Op::ExitN(1..=3)
            | Op::SetMinImm(_)
            | Op::SetMajImm(_)
            | Op::Sx(_)
            | Op::Ux
            | Op::PurgeSt
            | Op::Callk
    )
}
