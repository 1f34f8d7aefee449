//! The reference interpreter: the executable semantics of the RPN language
//! (spec §8–14, §16, §17, Appendix A). The compiled Wasm is checked against
//! it byte for byte, so it favours clarity and exactness over speed.
//!
//! [`run`] executes one hit of one probe of a checked [`Program`] against a
//! [`HitEnv`] and returns the outcome, the records the hit produces (§11.1)
//! with their item descriptors, the number of executed instructions and the
//! final "last exception" registers. Persistent state (the program's local
//! variables) lives in a [`ProgramState`]; global variables live in the env.
//!
//! The interpreter never panics, whatever the program (even a hand-built,
//! unchecked one) and whatever the environment: arithmetic wraps, indices are
//! checked, and out-of-range references in a malformed program behave as the
//! body's implicit terminator (instruction indices) or as `nop` (procedure
//! ids).
//!
//! This file holds the public types, [`run`] and the machine state.
//! Submodules: `areas` the log, stack-trace and heap areas; `stack` the RPN
//! stack and call frames; `control` exceptions and branches; `vars`
//! variables; `log` logging and stack traces; `heap` `pushh`/`poph`; `exec`
//! the instruction step; `tests` the unit tests.

use crate::ast::{BodyId, InsnIdx, Program, PropOp, ShiftOp};
use hostabi::env::HitEnv;
use hostabi::record::HANDLER_NONE;
use hostabi::{Exception, Outcome};

mod areas;
mod control;
mod exec;
mod heap;
mod log;
mod stack;
#[cfg(test)]
mod tests;
mod vars;

use areas::{Heap, LogArea, TraceArea};

/// Default instruction budget per hit (spec §16 [A 13]).
pub const DEFAULT_INSN_BUDGET: u64 = 16_777_216;

/// Number of RPN stack slots (§8.1).
pub const STACK_SLOTS: usize = 1024;

/// Maximum number of call frames above the base frame (§8.3).
pub const MAX_CALL_DEPTH: usize = 32;

/// Host limits of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// At most this many instructions execute per hit; the run ends with
    /// [`Outcome::BudgetExceeded`] (records produced) before the next one.
    pub insn_budget: u64,
    /// Report the final stack, TSP and SBP in [`RunResult::state`].
    pub capture_state: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            insn_budget: DEFAULT_INSN_BUDGET,
            capture_state: false,
        }
    }
}

/// Persistent state of one loaded program (§1 item 6): its local variables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramState {
    /// The `vars` local variables, zero at load, kept across hits.
    pub locals: Vec<u64>,
}

impl ProgramState {
    /// Fresh state of `program`: `vars` zeroed local variables.
    pub fn new(program: &Program) -> ProgramState {
        ProgramState {
            locals: vec![0; usize::from(program.header.vars)],
        }
    }
}

/// Which record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// The log record, with the major/minor codes in force at the end.
    Log {
        /// Major code.
        major: u16,
        /// Minor code.
        minor: u16,
    },
    /// The stack-trace record (header major 0, minor 0).
    StackTrace,
}

/// One record produced by a hit: what the handler passes to `emit_log` /
/// `emit_stacktrace` (the host adds the record header).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Log or stack trace.
    pub kind: RecordKind,
    /// The log data area `[0, LP)` or the stack-trace area `[0, STP)`.
    pub data: Vec<u8>,
    /// Item descriptors (`hostabi::record::LogItem::encode`) of a log
    /// record; empty for a stack-trace record.
    pub items: Vec<u32>,
}

/// The result of one hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunResult {
    /// How the run ended.
    pub outcome: Outcome,
    /// The records, in emission order (none for [`Outcome::Abort`]).
    pub records: Vec<Record>,
    /// Number of instructions executed (implicit terminators included).
    pub insns: u64,
    /// The "last exception" registers at the end: code, handler (code offset
    /// or 0xFFFFFFFF for NONE), parameter 1, parameter 2.
    pub last_exception: (u64, u64, u64, u64),
    /// The machine state at the end, when [`Limits::capture_state`] asked for it.
    pub state: Option<FinalState>,
}

/// The RPN machine at the end of a run (for differential testing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalState {
    /// All 1024 stack slots.
    pub stack: Vec<u64>,
    /// TSP.
    pub tsp: u32,
    /// SBP.
    pub sbp: u32,
}

/// Runs one hit of probe `probe` of `program` (§14 steps 4–5, records of
/// step 8). Local variables persist in `state`; everything else of the hit
/// thread (registers, memory, global variables, hooks) is reached through
/// `env`. An out-of-range `probe` runs nothing and returns
/// [`Outcome::Abort`] without records.
pub fn run(
    program: &Program,
    probe: usize,
    state: &mut ProgramState,
    env: &mut dyn HitEnv,
    limits: &Limits,
) -> RunResult {
    let Some(p) = program.probes.get(probe) else {
        return RunResult {
            outcome: Outcome::Abort,
            records: Vec::new(),
            insns: 0,
            last_exception: (0, HANDLER_NONE, 0, 0),
            state: None,
        };
    };
    let h = &program.header;
    if state.locals.len() < usize::from(h.vars) {
        state.locals.resize(usize::from(h.vars), 0);
    }
    let base = Frame::new(p.body, 0);
    let mut m = Machine {
        prog: program,
        env,
        locals: &mut state.locals,
        vars: u64::from(h.vars),
        mask: u64::from(p.excpt_mask),
        autostacktrace: h.autostacktrace,
        jmpmax: u64::from(h.jmpmax),
        location: p.value,
        stack: [0; STACK_SLOTS],
        tsp: 0,
        sbp: 0,
        base,
        calls: Vec::new(),
        body: p.body,
        pc: 0,
        log: LogArea::new(h.logmax),
        trace: TraceArea::new(h.excpt_log),
        heap: Heap::new(p.heap),
        jumps: 0,
        last: (0, HANDLER_NONE, 0, 0),
        major: h.major,
        minor: p.minor,
    };
    let mut insns = 0u64;
    let outcome = loop {
        if insns >= limits.insn_budget {
            break Outcome::BudgetExceeded;
        }
        insns += 1;
        match m.step() {
            Flow::Next => m.pc = m.pc.wrapping_add(1),
            Flow::Jumped => {}
            Flow::Stop(o) => break o,
        }
    };
    let mut records = Vec::new();
    if outcome != Outcome::Abort {
        records.push(Record {
            kind: RecordKind::Log {
                major: m.major,
                minor: m.minor,
            },
            data: m.log.data,
            items: m.log.items,
        });
        if m.trace.stp() > 0 {
            records.push(Record {
                kind: RecordKind::StackTrace,
                data: m.trace.data,
                items: Vec::new(),
            });
        }
    }
    let state = limits.capture_state.then(|| FinalState {
        stack: m.stack.to_vec(),
        tsp: m.tsp as u32,
        sbp: m.sbp as u32,
    });
    RunResult {
        outcome,
        records,
        insns,
        last_exception: m.last,
        state,
    }
}

/// What the main loop does after an instruction.
enum Flow {
    /// Continue with the next instruction of the body.
    Next,
    /// `body`/`pc` were set by the instruction (branch, call, dispatch).
    Jumped,
    /// The run ends.
    Stop(Outcome),
}

/// A call frame (§8.3).
#[derive(Clone, Debug)]
struct Frame {
    /// The body this frame executes.
    body: BodyId,
    /// Caller's SBP.
    saved_sbp: usize,
    /// Where `ret` continues: caller's body and instruction index.
    ret_to: (BodyId, InsnIdx),
    /// Code offset of the procedure's first instruction.
    called: u64,
    /// Code offset of the instruction after the `call`.
    ret_offset: u64,
    /// RPN-trace range: (start slot, count).
    pv: (u64, u64),
    /// Local-variable trace range.
    lv: (u64, u64),
    /// Global-variable trace range.
    gv: (u64, u64),
    /// Exception handler: an instruction index in `body`.
    handler: Option<InsnIdx>,
}

impl Frame {
    fn new(body: BodyId, saved_sbp: usize) -> Frame {
        Frame {
            body,
            saved_sbp,
            ret_to: (body, 0),
            called: 0,
            ret_offset: 0,
            pv: (0, 0),
            lv: (0, 0),
            gv: (0, 0),
            handler: None,
        }
    }
}

/// The per-hit machine state (§8).
struct Machine<'a> {
    prog: &'a Program,
    env: &'a mut dyn HitEnv,
    locals: &'a mut Vec<u64>,
    vars: u64,
    mask: u64,
    autostacktrace: bool,
    jmpmax: u64,
    location: u64,
    stack: [u64; STACK_SLOTS],
    tsp: usize,
    sbp: usize,
    base: Frame,
    calls: Vec<Frame>,
    body: BodyId,
    pc: InsnIdx,
    log: LogArea,
    trace: TraceArea,
    heap: Heap,
    jumps: u64,
    last: (u64, u64, u64, u64),
    major: u16,
    minor: u16,
}

const SLOT_MASK: usize = STACK_SLOTS - 1;

fn exc(e: Exception) -> u64 {
    u64::from(e.bit())
}

/// Mask of the low `bytes` bytes.
fn low_mask(bytes: u32) -> u64 {
    if bytes >= 8 {
        u64::MAX
    } else {
        (1u64 << (bytes * 8)) - 1
    }
}

/// Mask of the low `n` bits (n ≤ 64).
fn bit_mask(n: u64) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// `shl/shr/rol/ror` with the count taken modulo 64 (§9.5).
fn shift(op: ShiftOp, v: u64, count: u64) -> u64 {
    let c = (count % 64) as u32;
    match op {
        ShiftOp::Shl => v << c,
        ShiftOp::Shr => v >> c,
        ShiftOp::Rol => v.rotate_left(c),
        ShiftOp::Ror => v.rotate_right(c),
    }
}

/// `pbl/pbr/pzl/pzr` with bit number `n` in 1 … 64 (§9.5).
fn propagate(op: PropOp, v: u64, n: u64) -> u64 {
    let b = (v >> (n - 1)) & 1 == 1;
    match op {
        // Bits n−1 … 63 := b.
        PropOp::Pbl => {
            let high = !bit_mask(n - 1);
            if b { v | high } else { v & !high }
        }
        // Bits 0 … n−1 := b.
        PropOp::Pbr => {
            let low = bit_mask(n);
            if b { v | low } else { v & !low }
        }
        // Keep bits 0 … n−1.
        PropOp::Pzl => v & bit_mask(n),
        // Keep bits n−1 … 63.
        PropOp::Pzr => v & !bit_mask(n - 1),
    }
}
