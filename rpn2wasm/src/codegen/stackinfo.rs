//! Whole-program analysis of the RPN stack, for two optimisations that are
//! only sound when the analysis proves them so:
//!
//! * **Bounded zero-fill.** The stack is zero at the start of every hit
//!   (spec §8.1). If no run of any probe can write below a known depth, the
//!   entry refills only the slots runs can write (`extent`), not all 1,024.
//! * **Store elision.** The spec makes popped slots observable (`push tsp,
//!   -k`, `push sbp, k`, `trace pv`, `restore tsp`, wrap-around), so the
//!   compiled code normally writes every push through to memory. If the
//!   program contains none of those and its depth stays well inside the
//!   circular stack, a value that is pushed and popped while still cached
//!   in a Wasm local need never reach memory (`elide`).
//!
//! The analysis computes, per body, the interval of stack depths (relative
//! to the body's entry) at each instruction by abstract interpretation with
//! widening, and summarises procedures for their call sites. Anything it
//! cannot bound (stack-supplied counts, `restore tsp`, exception handler
//! entries, recursion) makes it answer "unknown", which disables both
//! optimisations for the whole program.

use crate::ast::{Body, BodyOwner, Op, Program, SlotOp, StackRel, VarOp};
use std::collections::HashMap;

/// Slots of the circular stack.
pub const SLOTS: u32 = 1024;
/// Elision keeps this many slots of headroom below a full stack, so that no
/// run comes near wrapping around (where a popped slot becomes readable again).
const ELIDE_MAX_DEPTH: i64 = 900;
/// An instruction whose depth interval changed this often is widened to unknown.
const WIDEN_AFTER: u32 = 24;
/// Words an exception pushes (spec §10.4 step 1b).
const RAISE_WORDS: i64 = 3;

/// What the analysis proves about a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackFacts {
    /// How many slots from the top of the stack (slot 1023 downwards) any run
    /// can write; [`SLOTS`] when unknown. The entry refills only these.
    pub extent: u32,
    /// Whether no slot above TOS is ever read, so pops of cached values need
    /// no memory store.
    pub elide: bool,
}

impl StackFacts {
    /// The facts of a program the analysis could not bound.
    pub const UNKNOWN: StackFacts = StackFacts {
        extent: SLOTS,
        elide: false,
    };
}

/// Effect of an instruction that falls through: the deepest slot it touches
/// (relative to TOS, 1 = TOS) and the net depth change interval.
#[derive(Clone, Copy, Debug)]
struct Effect {
    touch: i64,
    lo: i64,
    hi: i64,
}

const fn fx(touch: i64, net: i64) -> Option<Effect> {
    Some(Effect {
        touch,
        lo: net,
        hi: net,
    })
}

/// The static effect of `op`, `None` when it is dynamic (or, for calls, given
/// by the callee's summary).
fn effect(op: &Op) -> Option<Effect> {
    use Op::*;
    match op {
        Nop | Jmp(_) | Sx(_) | Ux | Rx | PurgeSt | Callk | LogSt => fx(0, 0),
        SetMinImm(_) | SetMajImm(_) => fx(0, 0),
        Abort | Remove | Exit | ExitN(_) | Ret | Suspend | Resume => fx(0, 0),
        Jlt(_) | Jle(_) | Jgt(_) | Jge(_) | Jz(_) | Jnz(_) | Loop(_) => fx(1, 0),
        SetMin | SetMaj => fx(1, -1),
        // Elements that do not fit are not popped (LOG_OVERFLOW, usually masked).
        LogB(n) | LogN(n) => Some(Effect {
            touch: i64::from(*n),
            lo: -i64::from(*n),
            hi: 0,
        }),
        LogStr | LogMrf | LogVars(_) | TracePv | TraceVars(_) => fx(2, -2),
        VarImm(VarOp::Push, ..) => fx(0, 1),
        VarImm(VarOp::Pop, ..) => fx(1, -1),
        VarImm(VarOp::Move, ..) => fx(1, 0),
        VarImm(..) => fx(0, 0),
        Var(VarOp::Push, _) => fx(1, 0),
        Var(VarOp::Pop, _) => fx(2, -2),
        Var(VarOp::Move, _) => fx(2, -1),
        Var(..) => fx(1, -1),
        Add | Sub | Mul | And | Or | Xor | Shift(_) | Prop(_) => fx(2, -1),
        Neg | ShiftImm(..) | PropImm(..) | PushMem(_) | Vfyr | Vfyrw | PushIo(_) | Malloc => {
            fx(1, 0)
        }
        Div | Idiv | Xchg => fx(2, 0),
        DupImm(n) => fx(1, i64::from(*n)),
        Ros(n) => fx(i64::from(*n), -i64::from(*n)),
        PushReg { reg, .. } if *reg == hostabi::regs::CPUID => fx(1, 3),
        PushReg { reg, .. } => fx(
            0,
            hostabi::regs::by_id(*reg).map_or(1, |r| r.parts() as i64),
        ),
        PopReg { .. } => fx(1, -1),
        PushImm(_) | PushSym { .. } | PushByte(_) | PushTask | PushPid | PushProcid => fx(0, 1),
        PushEntry(_) | PushElapsed | PushUsdt(_) => fx(0, 1),
        PushX | PushLp | PushPlp | PushStp | SaveTsp | SaveSbp | PushWid => {
            fx(0, if matches!(op, PushX) { 3 } else { 1 })
        }
        PopLp | PopStp | RestoreSbp | Free => fx(1, -1),
        PopMem(_) | PopIo(_) => fx(2, -2),
        PushH(_, k) => fx(2, i64::from(*k) - 2),
        PopH(_, k) => fx(2 + i64::from(*k), -2 - i64::from(*k)),
        SlotImm(SlotOp::Push, StackRel::Tsp, k) => fx((i64::from(*k) + 1).max(0), 1),
        SlotImm(SlotOp::Pop, StackRel::Tsp, k) => fx((i64::from(*k) + 1).max(1), -1),
        SlotImm(SlotOp::Copy, StackRel::Tsp, k) => fx((i64::from(*k) + 1).max(1), 0),
        // SBP-relative and stack-supplied slots, stack-supplied counts, TSP
        // changes and calls are not static.
        SlotImm(_, StackRel::Sbp, _) | Slot(..) | Dup | Log | RestoreTsp | Call(_) => None,
    }
}

/// Whether `op` may read a slot above TOS (or a slot the analysis cannot place).
fn reads_dead_slots(op: &Op) -> bool {
    match op {
        Op::SlotImm(SlotOp::Push, StackRel::Tsp, k) => *k < 0,
        Op::SlotImm(_, StackRel::Sbp, _) | Op::Slot(..) => true,
        Op::TracePv | Op::RestoreTsp | Op::Dup | Op::Log => true,
        _ => false,
    }
}

/// What a body does to the stack, relative to the depth at its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Summary {
    /// Lowest `depth − touched` over its instructions (≥ 0 at every call
    /// site means it never reaches below the stack's base).
    margin: i64,
    /// Highest top-index it can write (0 = the slot a push at depth 0 writes).
    max_write: i64,
    /// Net depth change at `ret` (procedures).
    ret: Option<(i64, i64)>,
    /// It reads slots above TOS.
    dead_reads: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Depth {
    Unseen,
    Range(i64, i64),
    Unknown,
}

/// Summarises `body`; `None` when its depths cannot be bounded.
fn summarize(
    body: &Body,
    procs: &HashMap<usize, Option<Summary>>,
    program: &Program,
) -> Option<Summary> {
    let n = body.insns.len();
    let mut depth = vec![Depth::Unseen; n];
    let mut changes = vec![0u32; n];
    depth[0] = Depth::Range(0, 0);
    let mut work = vec![0usize];
    let mut dead_reads = false;
    // Handler entries are reached with whatever depth the raise had.
    for insn in &body.insns {
        if let Op::Sx(t) = insn.op
            && t < n
        {
            return None;
        }
    }
    while let Some(i) = work.pop() {
        let Depth::Range(lo, hi) = depth[i] else {
            return None;
        };
        let op = &body.insns[i].op;
        dead_reads |= reads_dead_slots(op);
        let (dlo, dhi) = match op {
            Op::Call(p) => {
                let callee = program.procs.get(*p)?;
                procs.get(&callee.body).copied().flatten()?.ret?
            }
            _ => {
                let e = effect(op)?;
                (e.lo, e.hi)
            }
        };
        let out = (lo + dlo, hi + dhi);
        if out.1 > i64::from(SLOTS) || out.0 < -i64::from(SLOTS) {
            return None;
        }
        let mut succ = [None, None];
        if !op.ends_flow() && i + 1 < n {
            succ[0] = Some(i + 1);
        }
        if let Some(t) = op.target().filter(|t| *t < n && !matches!(op, Op::Sx(_))) {
            succ[1] = Some(t);
        }
        for s in succ.into_iter().flatten() {
            let new = match depth[s] {
                Depth::Unseen => Depth::Range(out.0, out.1),
                Depth::Range(a, b) => Depth::Range(a.min(out.0), b.max(out.1)),
                Depth::Unknown => Depth::Unknown,
            };
            if new != depth[s] {
                changes[s] += 1;
                depth[s] = if changes[s] > WIDEN_AFTER {
                    Depth::Unknown
                } else {
                    new
                };
                work.push(s);
            }
        }
    }
    let mut margin = i64::MAX;
    let mut max_write = i64::MIN;
    let mut ret: Option<(i64, i64)> = None;
    for (i, insn) in body.insns.iter().enumerate() {
        let Depth::Range(lo, hi) = depth[i] else {
            continue; // unreachable
        };
        let op = &insn.op;
        let (touch, out_hi) = match op {
            Op::Call(p) => {
                let s = procs.get(&program.procs[*p].body).copied().flatten()?;
                margin = margin.min(lo + s.margin);
                max_write = max_write.max(hi + s.max_write);
                dead_reads |= s.dead_reads;
                (0, hi + s.ret.map_or(0, |r| r.1))
            }
            _ => {
                let e = effect(op)?;
                (e.touch, hi + e.hi)
            }
        };
        margin = margin.min(lo - touch);
        // Pushes end at `out_hi`; an exception pushes three words on top
        // of whatever depth it is raised at.
        max_write = max_write.max(hi.max(out_hi) + RAISE_WORDS - 1);
        if let Op::SlotImm(SlotOp::Pop | SlotOp::Copy, StackRel::Tsp, k) = op {
            max_write = max_write.max(hi - i64::from(*k) - 1);
        }
        if matches!(op, Op::Ret) || (i + 1 == n && matches!(body.owner, BodyOwner::Proc(_))) {
            ret = Some(match ret {
                None => (lo, hi),
                Some((a, b)) => (a.min(lo), b.max(hi)),
            });
        }
    }
    Some(Summary {
        margin,
        max_write,
        ret,
        dead_reads,
    })
}

/// Analyses `program` (see the module documentation).
pub fn analyze(program: &Program) -> StackFacts {
    // Procedures in callee-first order; recursion leaves them unbounded.
    let mut procs: HashMap<usize, Option<Summary>> = HashMap::new();
    let proc_bodies: Vec<usize> = program.procs.iter().map(|p| p.body).collect();
    let mut state = vec![0u8; program.bodies.len()]; // 0 new, 1 visiting, 2 done
    fn visit(
        b: usize,
        program: &Program,
        state: &mut Vec<u8>,
        procs: &mut HashMap<usize, Option<Summary>>,
    ) {
        if state.get(b).copied() != Some(0) {
            if state.get(b).copied() == Some(1) {
                procs.insert(b, None); // recursion
            }
            return;
        }
        state[b] = 1;
        for insn in &program.bodies[b].insns {
            if let Op::Call(p) = insn.op
                && let Some(callee) = program.procs.get(p)
            {
                visit(callee.body, program, state, procs);
            }
        }
        state[b] = 2;
        let s = if procs.get(&b) == Some(&None) {
            None
        } else {
            summarize(&program.bodies[b], procs, program)
        };
        procs.insert(b, s);
    }
    for b in proc_bodies {
        visit(b, program, &mut state, &mut procs);
    }
    if procs.values().any(|s| s.is_none()) {
        // A recursive procedure may still be unreachable, but keep it simple.
        return StackFacts::UNKNOWN;
    }
    let mut max_write = -1i64;
    let mut dead_reads = false;
    for probe in &program.probes {
        let Some(s) = summarize(&program.bodies[probe.body], &procs, program) else {
            return StackFacts::UNKNOWN;
        };
        if s.margin < 0 {
            return StackFacts::UNKNOWN;
        }
        max_write = max_write.max(s.max_write);
        dead_reads |= s.dead_reads;
    }
    if max_write >= i64::from(SLOTS) - 1 {
        return StackFacts::UNKNOWN;
    }
    StackFacts {
        extent: (max_write + 1).max(0) as u32,
        elide: !dead_reads && max_write < ELIDE_MAX_DEPTH,
    }
}
