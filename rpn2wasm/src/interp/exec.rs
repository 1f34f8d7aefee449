//! The instruction step: fetch, `call`/`ret`, and the execution of each
//! instruction (Appendix A).

use super::{
    Flow, Frame, MAX_CALL_DEPTH, Machine, SLOT_MASK, STACK_SLOTS, low_mask, propagate, shift,
};
use crate::ast::{Insn, Op, Program, PropOp, SlotOp, StackRel};
use hostabi::{Exception, Outcome, Status, regs};

impl<'a> Machine<'a> {
    // ----- the instruction step -----

    /// Executes the instruction at `body`/`pc`.
    pub(super) fn step(&mut self) -> Flow {
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
