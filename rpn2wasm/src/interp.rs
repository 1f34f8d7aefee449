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

use crate::ast::{
    BodyId, Insn, InsnIdx, Op, Program, PropOp, ShiftOp, SlotOp, StackRel, VarOp, VarSpace, Width,
};
use hostabi::env::HitEnv;
use hostabi::record::{HANDLER_NONE, ItemKind, token};
use hostabi::{Exception, Outcome, Status, regs, status::NON_MASKABLE_BITS};

mod areas;
#[cfg(test)]
mod tests;

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

impl<'a> Machine<'a> {
    // ----- RPN stack (§8.1) -----

    fn push(&mut self, v: u64) {
        self.tsp = self.tsp.wrapping_sub(1) & SLOT_MASK;
        self.stack[self.tsp] = v;
    }

    fn pop(&mut self) -> u64 {
        let v = self.stack[self.tsp & SLOT_MASK];
        self.tsp = (self.tsp + 1) & SLOT_MASK;
        v
    }

    /// S[k].
    fn s(&self, k: usize) -> u64 {
        self.stack[(self.tsp + k) & SLOT_MASK]
    }

    fn tos(&self) -> u64 {
        self.s(0)
    }

    fn set_tos(&mut self, v: u64) {
        self.stack[self.tsp & SLOT_MASK] = v;
    }

    /// Slot index of S[k] or B[k] for a (signed) word k.
    fn slot_index(&self, rel: StackRel, k: u64) -> usize {
        let base = match rel {
            StackRel::Tsp => self.tsp,
            StackRel::Sbp => self.sbp,
        };
        (base as u64).wrapping_add(k) as usize & SLOT_MASK
    }

    // ----- frames -----

    fn top(&mut self) -> &mut Frame {
        match self.calls.last_mut() {
            Some(f) => f,
            None => &mut self.base,
        }
    }

    fn top_ref(&self) -> &Frame {
        self.calls.last().unwrap_or(&self.base)
    }

    /// Code offset of instruction `idx` of `body` (code size if out of range).
    fn offset_of(&self, body: BodyId, idx: InsnIdx) -> u64 {
        self.prog
            .bodies
            .get(body)
            .and_then(|b| b.insns.get(idx))
            .map_or(u64::from(self.prog.code_size), |i| u64::from(i.offset))
    }

    /// The current frame's handler as a code offset, or NONE.
    fn handler_offset(&self) -> u64 {
        let f = self.top_ref();
        match f.handler {
            Some(h) => self.offset_of(f.body, h),
            None => HANDLER_NONE,
        }
    }

    // ----- exceptions (§10.4, §10.5) -----

    fn raise(&mut self, e: Exception, p1: u64, p2: u64) -> Flow {
        self.generate(exc(e), p1, p2, false)
    }

    fn generate(&mut self, code: u64, p1: u64, p2: u64, from_rx: bool) -> Flow {
        let x = code & 0xFFFF;
        if x & self.mask != 0 {
            self.last = (code, self.handler_offset(), p1, p2);
            if !from_rx {
                self.push(p2);
                self.push(p1);
                self.push(code);
            }
            if self.autostacktrace {
                self.log_stack_trace();
            }
            self.dispatch()
        } else if x & u64::from(NON_MASKABLE_BITS) != 0 {
            self.last = (code, self.handler_offset(), p1, p2);
            if self.autostacktrace {
                self.log_stack_trace();
            }
            Flow::Stop(Outcome::Uncaught)
        } else {
            Flow::Next
        }
    }

    fn dispatch(&mut self) -> Flow {
        loop {
            let f = self.top();
            if let Some(h) = f.handler.take() {
                self.body = f.body;
                self.pc = h;
                return Flow::Jumped;
            }
            match self.calls.pop() {
                None => return Flow::Stop(Outcome::Uncaught),
                Some(f) => self.sbp = f.saved_sbp,
            }
        }
    }

    // ----- branches (§9.1) -----

    /// The branch-limit check of a counting branch: `Some(flow)` when
    /// MAX_JMPS is raised instead of branching.
    fn count_branch(&mut self) -> Option<Flow> {
        if self.jumps >= self.jmpmax {
            return Some(self.raise(Exception::MaxJmps, self.jmpmax, 0));
        }
        self.jumps += 1;
        None
    }

    fn branch(&mut self, taken: bool, target: InsnIdx) -> Flow {
        if !taken {
            return Flow::Next;
        }
        if let Some(f) = self.count_branch() {
            return f;
        }
        self.pc = target;
        Flow::Jumped
    }

    // ----- variables (§9.4) -----

    fn var_limit(&mut self, space: VarSpace) -> u64 {
        match space {
            VarSpace::Local => self.vars,
            VarSpace::Global => self.env.gvars().len() as u64,
        }
    }

    fn var_kind(space: VarSpace) -> u64 {
        match space {
            VarSpace::Local => 1,
            VarSpace::Global => 2,
        }
    }

    fn var_get(&mut self, space: VarSpace, i: u64) -> Option<u64> {
        if i >= self.var_limit(space) {
            return None;
        }
        let i = usize::try_from(i).ok()?;
        match space {
            VarSpace::Local => self.locals.get(i).copied(),
            VarSpace::Global => self.env.gvars().get(i).copied(),
        }
    }

    fn var_set(&mut self, space: VarSpace, i: u64, v: u64) -> bool {
        if i >= self.var_limit(space) {
            return false;
        }
        let Ok(i) = usize::try_from(i) else {
            return false;
        };
        let slot = match space {
            VarSpace::Local => self.locals.get_mut(i),
            VarSpace::Global => self.env.gvars().get_mut(i),
        };
        match slot {
            Some(s) => {
                *s = v;
                true
            }
            None => false,
        }
    }

    fn var_op(&mut self, op: VarOp, space: VarSpace, imm: Option<u16>) -> Flow {
        let bad = |m: &mut Machine<'a>, i: u64| {
            m.raise(Exception::InvalidOperand, Machine::var_kind(space), i)
        };
        match op {
            VarOp::Push => {
                let i = imm.map_or_else(|| self.pop(), u64::from);
                match self.var_get(space, i) {
                    Some(v) => {
                        self.push(v);
                        Flow::Next
                    }
                    None => bad(self, i),
                }
            }
            VarOp::Pop => {
                let (i, v) = match imm {
                    Some(i) => (u64::from(i), self.pop()),
                    None => {
                        let v = self.pop();
                        (self.pop(), v)
                    }
                };
                if self.var_set(space, i, v) {
                    Flow::Next
                } else {
                    bad(self, i)
                }
            }
            VarOp::Move => {
                let i = imm.map_or_else(|| self.pop(), u64::from);
                let v = self.tos();
                if self.var_set(space, i, v) {
                    Flow::Next
                } else {
                    bad(self, i)
                }
            }
            VarOp::Inc | VarOp::Dec => {
                let i = imm.map_or_else(|| self.pop(), u64::from);
                let Some(v) = self.var_get(space, i) else {
                    return bad(self, i);
                };
                let v = if op == VarOp::Inc {
                    v.wrapping_add(1)
                } else {
                    v.wrapping_sub(1)
                };
                self.var_set(space, i, v);
                Flow::Next
            }
        }
    }

    // ----- logging (§9.3, §11) -----

    fn overflow(&mut self) -> Flow {
        let logmax = u64::from(self.prog.header.logmax);
        self.raise(Exception::LogOverflow, logmax, 0)
    }

    /// `log n` (8 bytes per element) and `log b, n` (1 byte per element).
    fn log_raw(&mut self, n: u16, bytes: bool) -> Flow {
        self.log.begin();
        let room = self.log.room();
        let n = usize::from(n);
        let k = n.min(if bytes { room } else { room / 8 });
        if k > 0 {
            self.log.item(if bytes {
                ItemKind::RawBytes
            } else {
                ItemKind::RawWords
            });
            for _ in 0..k {
                let v = self.pop();
                if bytes {
                    self.log.put(&[v as u8]);
                } else {
                    self.log.put(&v.to_le_bytes());
                }
            }
        }
        if k < n {
            return self.overflow();
        }
        self.log.commit();
        Flow::Next
    }

    /// `log` (stack count, token 0x07).
    fn log_counted(&mut self) -> Flow {
        let n = usize::from(self.pop() as u16);
        self.log.begin();
        let room = self.log.room();
        if room < 3 {
            return self.overflow();
        }
        let k = n.min((room - 3) / 8);
        self.log.item(ItemKind::Tokenized);
        self.log.put(&[token::WORDS]);
        self.log.put(&(k as u16).to_le_bytes());
        for _ in 0..k {
            let v = self.pop();
            self.log.put(&v.to_le_bytes());
        }
        if k < n {
            return self.overflow();
        }
        self.log.commit();
        Flow::Next
    }

    /// A fault met by `log str` / `log mrf` at `addr` (§11.5).
    fn log_fault(&mut self, addr: u64) -> Flow {
        self.log.fault_record(addr);
        self.raise(Exception::InvalidAddr, addr, 0)
    }

    /// `log str` / `log arf`.
    fn log_str(&mut self) -> Flow {
        let addr = self.pop();
        let len = self.pop();
        self.log.begin();
        let room = self.log.room();
        if room < 3 {
            return self.overflow();
        }
        let avail = room - 3;
        // One byte beyond the room is examined to decide whether the string fits.
        let examine = usize::try_from(len).unwrap_or(usize::MAX).min(avail + 1);
        let mut buf = vec![0u8; examine];
        let n = match self.env.read_str(addr, &mut buf) {
            Ok(n) => n.min(examine),
            Err(i) => return self.log_fault(addr.wrapping_add(i as u64)),
        };
        let fits = n <= avail;
        let m = n.min(avail);
        self.log.item(ItemKind::Tokenized);
        self.log.put(&[token::STRING]);
        self.log.put(&(m as u16).to_le_bytes());
        self.log.put(&buf[..m]);
        if !fits {
            return self.overflow();
        }
        self.log.commit();
        Flow::Next
    }

    /// `log mrf`.
    fn log_mrf(&mut self) -> Flow {
        let addr = self.pop();
        let len = self.pop();
        self.log.begin();
        let room = self.log.room();
        if room < 3 {
            return self.overflow();
        }
        let m = usize::try_from(len).unwrap_or(usize::MAX).min(room - 3);
        let mut buf = vec![0u8; m];
        let got = self.env.read_mem(addr, &mut buf);
        if got < m {
            return self.log_fault(addr.wrapping_add(got as u64));
        }
        self.log.item(ItemKind::Tokenized);
        self.log.put(&[token::MEMORY]);
        self.log.put(&(m as u16).to_le_bytes());
        self.log.put(&buf);
        if (m as u64) < len {
            return self.overflow();
        }
        self.log.commit();
        Flow::Next
    }

    /// `log lv` / `log gv`.
    fn log_vars(&mut self, space: VarSpace) -> Flow {
        let n = self.pop();
        let i = self.pop();
        self.log.begin();
        if self.log.room() < 3 {
            return self.overflow();
        }
        let (tok, kind) = match space {
            VarSpace::Local => (token::LOCAL_VARS, 1),
            VarSpace::Global => (token::GLOBAL_VARS, 2),
        };
        self.log.item(ItemKind::Tokenized);
        let count_at = self.log.lp() + 1;
        self.log.put(&[tok, 0, 0]);
        let mut j = 0u64;
        while j < n {
            let idx = i.wrapping_add(j);
            let Some(v) = self.var_get(space, idx) else {
                return self.raise(Exception::InvalidOperand, kind, idx);
            };
            if self.log.room() < 8 {
                return self.overflow();
            }
            self.log.put(&v.to_le_bytes());
            j += 1;
            if let Some(c) = self.log.data.get_mut(count_at..count_at + 2) {
                c.copy_from_slice(&(j as u16).to_le_bytes());
            }
        }
        self.log.commit();
        Flow::Next
    }

    // ----- stack traces (§12) -----

    /// Appends a stack trace to the stack-trace area (never raises).
    fn log_stack_trace(&mut self) {
        let name = self.prog.header.name.as_bytes();
        let mut header = Vec::with_capacity(20 + name.len());
        header.push(token::STRING);
        header.extend_from_slice(&(name.len() as u16).to_le_bytes());
        header.extend_from_slice(name);
        header.extend_from_slice(&self.location.to_le_bytes());
        header.extend_from_slice(&self.prog.header.id.to_le_bytes());
        header.extend_from_slice(&self.major.to_le_bytes());
        header.extend_from_slice(&self.minor.to_le_bytes());
        header.extend_from_slice(&[token::TRACE_COUNT, 0, 0]);
        if !self.trace.ensure_header(&header) {
            return;
        }
        // Size first: ranges may be huge, and then the record cannot fit.
        let mut size: u64 = 35;
        for f in &self.calls {
            let words = f.pv.1.saturating_add(f.lv.1).saturating_add(f.gv.1);
            size = size
                .saturating_add(25)
                .saturating_add(words.saturating_mul(8));
        }
        if size > self.trace.room() as u64 {
            return;
        }
        let mut rec = Vec::with_capacity(size as usize);
        let (code, handler, p1, p2) = self.last;
        for v in [code, handler, p1, p2] {
            rec.extend_from_slice(&v.to_le_bytes());
        }
        rec.push(token::FRAME_COUNT);
        rec.extend_from_slice(&(self.calls.len() as u16).to_le_bytes());
        let frames: Vec<Frame> = self.calls.iter().rev().cloned().collect();
        for f in &frames {
            rec.extend_from_slice(&f.called.to_le_bytes());
            rec.extend_from_slice(&f.ret_offset.to_le_bytes());
            rec.push(token::STACK_SLOTS);
            rec.extend_from_slice(&(f.pv.1 as u16).to_le_bytes());
            for j in 0..f.pv.1 {
                let slot = (f.pv.0.wrapping_add(j) as usize) & SLOT_MASK;
                rec.extend_from_slice(&self.stack[slot].to_le_bytes());
            }
            for (space, (start, count), tok) in [
                (VarSpace::Local, f.lv, token::LOCAL_VARS),
                (VarSpace::Global, f.gv, token::GLOBAL_VARS),
            ] {
                rec.push(tok);
                rec.extend_from_slice(&(count as u16).to_le_bytes());
                for j in 0..count {
                    let v = self.var_get(space, start.wrapping_add(j)).unwrap_or(0);
                    rec.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        self.trace.push_record(&rec);
    }

    fn trace_vars(&mut self, space: VarSpace) -> Flow {
        let n = self.pop();
        let i = self.pop();
        let limit = self.var_limit(space);
        if n > 0 && u128::from(i) + u128::from(n) > u128::from(limit) {
            return self.raise(
                Exception::InvalidOperand,
                Self::var_kind(space),
                i.max(limit),
            );
        }
        let f = self.top();
        match space {
            VarSpace::Local => f.lv = (i, n),
            VarSpace::Global => f.gv = (i, n),
        }
        Flow::Next
    }

    // ----- heap (§9.15) -----

    fn pushh(&mut self, w: Width, k: u16) -> Flow {
        let mut off = self.pop();
        let h = self.pop();
        let n = u64::from(w.bytes());
        let Some(block) = self.heap.block(h) else {
            return self.raise(Exception::HeapInvalidHandle, h, off);
        };
        let mut values = Vec::new();
        let mut fault = false;
        for _ in 0..k {
            let Some(bytes) = off
                .checked_add(n)
                .filter(|end| *end <= block.len() as u64)
                .and_then(|end| block.get(off as usize..end as usize))
            else {
                fault = true;
                break;
            };
            let mut a = [0u8; 8];
            a[..bytes.len()].copy_from_slice(bytes);
            values.push(u64::from_le_bytes(a));
            off += n;
        }
        for v in values {
            self.push(v);
        }
        if fault {
            return self.raise(Exception::HeapInvalidOffset, h, off);
        }
        Flow::Next
    }

    fn poph(&mut self, w: Width, k: u16) -> Flow {
        let mut off = self.pop();
        let h = self.pop();
        let n = u64::from(w.bytes());
        if self.heap.block(h).is_none() {
            return self.raise(Exception::HeapInvalidHandle, h, off);
        }
        for _ in 0..k {
            let len = self.heap.block(h).map_or(0, |b| b.len() as u64);
            let end = match off.checked_add(n) {
                Some(end) if end <= len => end,
                _ => return self.raise(Exception::HeapInvalidOffset, h, off),
            };
            let v = self.pop();
            if let Some(dst) = self
                .heap
                .block(h)
                .and_then(|b| b.get_mut(off as usize..end as usize))
            {
                dst.copy_from_slice(&v.to_le_bytes()[..n as usize]);
            }
            off = end;
        }
        Flow::Next
    }

    // ----- the instruction step -----

    /// Executes the instruction at `body`/`pc`.
    fn step(&mut self) -> Flow {
        let prog: &'a Program = self.prog;
        let Some(body) = prog.bodies.get(self.body) else {
            return Flow::Stop(Outcome::Exit);
        };
        match body.insns.get(self.pc) {
            Some(insn) => self.exec(insn),
            // Malformed program: running off a body acts as its terminator.
            None if self.calls.is_empty() => Flow::Stop(Outcome::Exit),
            None => self.ret(),
        }
    }

    fn ret(&mut self) -> Flow {
        match self.calls.pop() {
            None => self.raise(Exception::CallStackOverflow, 0, 0),
            Some(f) => {
                self.sbp = f.saved_sbp;
                (self.body, self.pc) = f.ret_to;
                Flow::Jumped
            }
        }
    }

    fn call(&mut self, insn: &Insn, p: usize) -> Flow {
        let Some(proc_) = self.prog.procs.get(p) else {
            return Flow::Next;
        };
        if self.calls.len() >= MAX_CALL_DEPTH {
            return self.raise(Exception::CallStackOverflow, MAX_CALL_DEPTH as u64, 0);
        }
        let mut f = Frame::new(proc_.body, self.sbp);
        f.ret_to = (self.body, self.pc.wrapping_add(1));
        f.called = self.offset_of(proc_.body, 0);
        f.ret_offset = u64::from(insn.offset) + u64::from(insn.op.size());
        self.calls.push(f);
        self.body = proc_.body;
        self.pc = 0;
        Flow::Jumped
    }

    fn exec(&mut self, insn: &Insn) -> Flow {
        use Op::*;
        match insn.op {
            Nop => Flow::Next,
            Jmp(t) => self.branch(true, t),
            Jlt(t) => self.branch((self.tos() as i64) < 0, t),
            Jle(t) => self.branch((self.tos() as i64) <= 0, t),
            Jgt(t) => self.branch((self.tos() as i64) > 0, t),
            Jge(t) => self.branch((self.tos() as i64) >= 0, t),
            Jz(t) => self.branch(self.tos() == 0, t),
            Jnz(t) => self.branch(self.tos() != 0, t),
            Loop(t) => {
                if let Some(f) = self.count_branch() {
                    return f;
                }
                let v = self.tos().wrapping_sub(1);
                self.set_tos(v);
                if v != 0 {
                    self.pc = t;
                    Flow::Jumped
                } else {
                    Flow::Next
                }
            }
            Call(p) => self.call(insn, p),
            Ret => self.ret(),
            Abort => Flow::Stop(Outcome::Abort),
            Remove => Flow::Stop(Outcome::Remove),
            Exit => Flow::Stop(Outcome::Exit),
            ExitN(n) => match n {
                1 => Flow::Stop(Outcome::DebuggerHandoff),
                2 => Flow::Stop(Outcome::CrashDump),
                3 => Flow::Stop(Outcome::CoreDump),
                _ => self.raise(Exception::InvalidOperand, 4, u64::from(n)),
            },
            Suspend | Resume => self.raise(
                Exception::InvalidOpcode,
                u64::from(insn.op.opcode()),
                u64::from(insn.offset),
            ),
            SetMinImm(n) => {
                self.minor = n;
                Flow::Next
            }
            SetMin => {
                self.minor = self.pop() as u16;
                Flow::Next
            }
            SetMajImm(n) => {
                if n != 0 {
                    self.major = n;
                }
                Flow::Next
            }
            SetMaj => {
                let v = self.pop() as u16;
                if v != 0 {
                    self.major = v;
                }
                Flow::Next
            }
            LogStr => self.log_str(),
            LogMrf => self.log_mrf(),
            LogB(n) => self.log_raw(n, true),
            LogN(n) => self.log_raw(n, false),
            Log => self.log_counted(),
            LogVars(space) => self.log_vars(space),
            LogSt => {
                self.log_stack_trace();
                Flow::Next
            }
            VarImm(op, space, i) => self.var_op(op, space, Some(i)),
            Var(op, space) => self.var_op(op, space, None),
            Add | Sub | Mul | And | Or | Xor => {
                let y = self.pop();
                let x = self.pop();
                let r = match insn.op {
                    Add => x.wrapping_add(y),
                    Sub => y.wrapping_sub(x),
                    Mul => x.wrapping_mul(y),
                    And => x & y,
                    Or => x | y,
                    _ => x ^ y,
                };
                self.push(r);
                Flow::Next
            }
            Neg => {
                let v = self.pop();
                self.push(!v);
                Flow::Next
            }
            Div | Idiv => {
                let y = self.pop();
                let x = self.pop();
                if y == 0 {
                    return self.raise(Exception::DivideByZero, 0, 0);
                }
                let (rem, quot) = if insn.op == Div {
                    (x % y, x / y)
                } else {
                    let (x, y) = (x as i64, y as i64);
                    (x.wrapping_rem(y) as u64, x.wrapping_div(y) as u64)
                };
                self.push(rem);
                self.push(quot);
                Flow::Next
            }
            ShiftImm(op, n) => {
                let v = self.pop();
                self.push(shift(op, v, u64::from(n)));
                Flow::Next
            }
            Shift(op) => {
                let v = self.pop();
                let c = self.pop();
                self.push(shift(op, v, c));
                Flow::Next
            }
            PropImm(op, n) => self.prop(op, Some(u64::from(n))),
            Prop(op) => self.prop(op, None),
            Xchg => {
                let a = self.tsp & SLOT_MASK;
                let b = (self.tsp + 1) & SLOT_MASK;
                self.stack.swap(a, b);
                Flow::Next
            }
            DupImm(n) => {
                let v = self.tos();
                for _ in 0..n {
                    self.push(v);
                }
                Flow::Next
            }
            Dup => {
                let v = self.pop();
                let n = self.pop() % 256;
                for _ in 0..=n {
                    self.push(v);
                }
                Flow::Next
            }
            Ros(n) => {
                self.tsp = (self.tsp + usize::from(n)) & SLOT_MASK;
                Flow::Next
            }
            PushReg { reg, .. } => {
                if reg == regs::CPUID {
                    let leaf = self.pop();
                    let [eax, ebx, ecx, edx] = self.env.cpuid(leaf as u32, 0);
                    for v in [edx, ecx, ebx, eax] {
                        self.push(u64::from(v));
                    }
                } else {
                    let parts = regs::by_id(reg).map_or(1, |r| r.parts());
                    for part in (0..parts).rev() {
                        let v = self.env.read_reg_any(reg, part).unwrap_or(0);
                        self.push(v);
                    }
                }
                Flow::Next
            }
            PopReg { reg, .. } => {
                let v = self.pop();
                // Writability was checked at build time; a transport that
                // cannot write (perf) drops the write silently.
                let _: Status = self.env.write_reg_any(reg, v);
                Flow::Next
            }
            PushImm(v) => {
                self.push(v);
                Flow::Next
            }
            PushSym { value } => {
                let v = value.wrapping_add(self.env.load_bias());
                self.push(v);
                Flow::Next
            }
            PushByte(b) => {
                self.push(u64::from(b));
                Flow::Next
            }
            PushMem(w) => {
                let addr = self.pop();
                let n = w.bytes() as usize;
                let mut buf = [0u8; 8];
                if self.env.read_mem(addr, &mut buf[..n]) < n {
                    return self.raise(Exception::InvalidAddr, addr, 0);
                }
                buf[n..].fill(0);
                self.push(u64::from_le_bytes(buf));
                Flow::Next
            }
            PopMem(w) => {
                let v = self.pop();
                let addr = self.pop();
                let n = w.bytes() as usize;
                if self.env.write_mem(addr, &v.to_le_bytes()[..n]) != Status::Ok {
                    return self.raise(Exception::InvalidAddr, addr, 0);
                }
                Flow::Next
            }
            PushTask => {
                let v = self.env.thread_pointer();
                self.push(v);
                Flow::Next
            }
            PushPid => {
                let v = self.env.tid();
                self.push(v);
                Flow::Next
            }
            PushProcid => {
                let v = self.env.cpu();
                self.push(v);
                Flow::Next
            }
            // §9.16. The checker lets these run only in return probes, whose
            // hits always carry the entry state (a call the runtime could not
            // track runs no handler at all, §6.5). An environment without one
            // (a model hit that is not a return) reads 0 here, where the
            // runtime's imports would trap.
            PushEntry(reg) => {
                let v = self.env.entry_reg(reg).unwrap_or(0);
                self.push(v);
                Flow::Next
            }
            // A model hit has no USDT site: 0, where the runtime's import
            // reads the site's argument (its note's spec).
            PushUsdt(_) => {
                self.push(0);
                Flow::Next
            }
            PushElapsed => {
                let v = self.env.elapsed_ns().unwrap_or(0);
                self.push(v);
                Flow::Next
            }
            Vfyr | Vfyrw => {
                let addr = self.pop();
                let ok = self.env.check_access(addr, insn.op == Vfyrw);
                self.push(u64::from(!ok));
                Flow::Next
            }
            Sx(t) => {
                self.top().handler = Some(t);
                Flow::Next
            }
            Ux => {
                self.top().handler = None;
                Flow::Next
            }
            Rx => {
                let (code, p1, p2) = (self.s(0), self.s(1), self.s(2));
                self.generate(code, p1, p2, true)
            }
            PushX => {
                let (code, _, p1, p2) = self.last;
                self.push(p2);
                self.push(p1);
                self.push(code);
                Flow::Next
            }
            PushLp => {
                self.push(self.log.lp() as u64);
                Flow::Next
            }
            PushPlp => {
                self.push(self.log.plp as u64);
                Flow::Next
            }
            PopLp => {
                let v = self.pop();
                self.log.truncate(v);
                Flow::Next
            }
            PushStp => {
                self.push(self.trace.stp() as u64);
                Flow::Next
            }
            PopStp => {
                let v = self.pop();
                self.trace.truncate(v);
                Flow::Next
            }
            PurgeSt => {
                self.trace.purge();
                Flow::Next
            }
            TracePv => {
                let n = self.pop();
                let i = self.pop();
                self.top().pv = (i % STACK_SLOTS as u64, n);
                Flow::Next
            }
            TraceVars(space) => self.trace_vars(space),
            SlotImm(op, rel, k) => self.slot_op(op, rel, Some(k as i64 as u64)),
            Slot(op, rel) => self.slot_op(op, rel, None),
            SaveTsp => {
                self.push(self.tsp as u64);
                Flow::Next
            }
            RestoreTsp => {
                let t = self.pop();
                self.tsp = t as usize & SLOT_MASK;
                Flow::Next
            }
            SaveSbp => {
                self.push(self.sbp as u64);
                Flow::Next
            }
            RestoreSbp => {
                let s = self.pop();
                self.sbp = s as usize & SLOT_MASK;
                Flow::Next
            }
            Callk => {
                self.env.callk();
                Flow::Next
            }
            Malloc => {
                let size = self.pop();
                match self.heap.malloc(size) {
                    Some(h) => {
                        self.push(h);
                        Flow::Next
                    }
                    None => self.raise(Exception::HeapNomem, size, 0),
                }
            }
            Free => {
                let h = self.pop();
                if self.heap.free(h) {
                    Flow::Next
                } else {
                    self.raise(Exception::HeapInvalidHandle, h, 0)
                }
            }
            PushWid => {
                self.push(-64i64 as u64);
                Flow::Next
            }
            PushH(w, k) => self.pushh(w, k),
            PopH(w, k) => self.poph(w, k),
            PushIo(w) => {
                let port = self.pop();
                match self.env.io_in(port, w.bytes() as u8) {
                    Some(v) => {
                        self.push(v & low_mask(w.bytes()));
                        Flow::Next
                    }
                    None => self.raise(Exception::InvalidOperand, 5, port),
                }
            }
            PopIo(w) => {
                let v = self.pop();
                let port = self.pop();
                if self
                    .env
                    .io_out(port, w.bytes() as u8, v & low_mask(w.bytes()))
                {
                    Flow::Next
                } else {
                    self.raise(Exception::InvalidOperand, 5, port)
                }
            }
        }
    }

    /// `pbl/pbr/pzl/pzr` (immediate when `imm` is given).
    fn prop(&mut self, op: PropOp, imm: Option<u64>) -> Flow {
        let n = imm.unwrap_or_else(|| self.pop());
        if n == 0 || n > 64 {
            // v is not popped.
            return self.raise(Exception::InvalidOperand, 3, n);
        }
        let v = self.pop();
        self.push(propagate(op, v, n));
        Flow::Next
    }

    /// `push/pop/copy tsp|sbp[, k]`.
    fn slot_op(&mut self, op: SlotOp, rel: StackRel, imm: Option<u64>) -> Flow {
        match (op, imm) {
            (SlotOp::Push, Some(k)) => {
                let v = self.stack[self.slot_index(rel, k)];
                self.push(v);
            }
            (SlotOp::Push, None) => {
                let k = self.pop();
                let v = self.stack[self.slot_index(rel, k)];
                self.push(v);
            }
            (SlotOp::Pop, Some(k)) => {
                let at = self.slot_index(rel, k);
                let v = self.pop();
                self.stack[at] = v;
            }
            (SlotOp::Pop, None) => {
                let v = self.pop();
                let k = self.pop();
                let at = self.slot_index(rel, k);
                self.stack[at] = v;
            }
            (SlotOp::Copy, Some(k)) => {
                let at = self.slot_index(rel, k);
                self.stack[at] = self.tos();
            }
            (SlotOp::Copy, None) => {
                let k = self.pop();
                let at = self.slot_index(rel, k);
                self.stack[at] = self.tos();
            }
        }
        Flow::Next
    }
}
