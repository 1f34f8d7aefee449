//! The translation of one instruction (spec Appendix A), dispatching on its
//! operation.

use super::{A, B, BodyGen, R, TSP, VCAP};
use crate::ast::*;
use crate::codegen::asm::{Asm, mem};
use crate::codegen::helpers::Helper;
use crate::codegen::layout::{self as l, frame, g, raised, status};
use hostabi::{Exception, ImportId, Outcome};

impl BodyGen<'_> {
    pub(super) fn insn(&mut self, insn: &Insn) {
        use Op::*;
        match &insn.op {
            Nop => {}
            Jmp(t) => {
                self.count_branch();
                self.goto(*t);
            }
            Jz(t) => self.cond_branch(*t, |a| {
                a.i().i64_eqz();
            }),
            Jnz(t) => self.cond_branch(*t, |a| {
                a.i().i64_const(0).i64_ne();
            }),
            Jlt(t) => self.cond_branch(*t, |a| {
                a.i().i64_const(0).i64_lt_s();
            }),
            Jle(t) => self.cond_branch(*t, |a| {
                a.i().i64_const(0).i64_le_s();
            }),
            Jgt(t) => self.cond_branch(*t, |a| {
                a.i().i64_const(0).i64_gt_s();
            }),
            Jge(t) => self.cond_branch(*t, |a| {
                a.i().i64_const(0).i64_ge_s();
            }),
            Loop(t) => {
                self.loop_step();
                self.a.i().i64_const(0).i64_ne();
                if let Some(lbl) = self.direct_label(*t) {
                    self.a.br_if(lbl);
                } else {
                    let taken = self.a.if_();
                    self.goto(*t);
                    self.a.end(taken);
                }
            }
            Call(p) => self.call(*p, insn),
            Ret => {
                if self.is_proc {
                    self.sync_out();
                    self.a
                        .i()
                        .call(self.ctx.helper(Helper::Leave))
                        .i32_const(status::RET)
                        .return_();
                } else {
                    self.raise_const(Exception::CallStackOverflow, 0, 0);
                }
            }
            Abort => self.terminate(Outcome::Abort),
            Remove => self.terminate(Outcome::Remove),
            Exit => self.terminate(Outcome::Exit),
            ExitN(n) => match n {
                1 => self.terminate(Outcome::DebuggerHandoff),
                2 => self.terminate(Outcome::CrashDump),
                3 => self.terminate(Outcome::CoreDump),
                _ => self.raise_const(Exception::InvalidOperand, 4, *n as u64),
            },
            Suspend | Resume => self.raise_const(
                Exception::InvalidOpcode,
                insn.op.opcode() as u64,
                insn.offset as u64,
            ),
            SetMinImm(n) => {
                self.a.i().i32_const(*n as i32).global_set(g::MINOR);
            }
            SetMin => {
                self.pop();
                self.a
                    .i()
                    .i32_wrap_i64()
                    .i32_const(0xFFFF)
                    .i32_and()
                    .global_set(g::MINOR);
            }
            SetMajImm(n) => {
                self.a.i().i32_const(*n as i32).global_set(g::MAJOR);
            }
            SetMaj => {
                self.pop();
                self.a
                    .i()
                    .i32_wrap_i64()
                    .i32_const(0xFFFF)
                    .i32_and()
                    .local_tee(R);
                let set = self.a.if_();
                self.a.i().local_get(R).global_set(g::MAJOR);
                self.a.end(set);
            }
            LogStr => self.helper_e(Helper::LogStr, None),
            LogMrf => self.helper_e(Helper::LogMrf, None),
            LogB(n) => self.helper_e(Helper::LogB, Some(*n as i32)),
            LogN(n) => self.log_words(*n),
            Log => self.helper_e(Helper::LogCount, None),
            LogVars(VarSpace::Local) => self.helper_e(Helper::LogLv, None),
            LogVars(VarSpace::Global) => self.helper_e(Helper::LogGv, None),
            LogSt => self.call_helper(Helper::LogSt),
            VarImm(op, space, i) => self.var_op(*op, *space, Some(*i)),
            Var(op, space) => self.var_op(*op, *space, None),
            Add => self.binop(|a| {
                a.i().i64_add();
            }),
            Sub => self.binop(|a| {
                // [y, x] → y - x (TOS − NOS)
                a.i().i64_sub();
            }),
            Mul => self.binop(|a| {
                a.i().i64_mul();
            }),
            And => self.binop(|a| {
                a.i().i64_and();
            }),
            Or => self.binop(|a| {
                a.i().i64_or();
            }),
            Xor => self.binop(|a| {
                a.i().i64_xor();
            }),
            Neg => {
                self.pop();
                self.a.i().i64_const(-1).i64_xor();
                self.push();
            }
            Div | Idiv => self.divide(matches!(insn.op, Idiv)),
            ShiftImm(s, n) => {
                self.pop();
                self.a.i().i64_const(*n as i64);
                shift(&mut self.a, *s);
                self.push();
            }
            Shift(s) => {
                // ( c v -- r ): [v, c] → v op c
                self.pop();
                self.pop();
                shift(&mut self.a, *s);
                self.push();
            }
            PropImm(p, n) => {
                self.pop();
                prop_imm(&mut self.a, *p, *n as u32);
                self.push();
            }
            Prop(p) => {
                self.pop_to(B);
                self.a
                    .i()
                    .local_get(B)
                    .i64_eqz()
                    .local_get(B)
                    .i64_const(64)
                    .i64_gt_u()
                    .i32_or();
                self.raise_if(
                    Exception::InvalidOperand,
                    |a| {
                        a.i().i64_const(3);
                    },
                    |a| {
                        a.i().local_get(B);
                    },
                );
                self.pop();
                self.a.i().local_get(B);
                let h = match p {
                    PropOp::Pbl => Helper::Pbl,
                    PropOp::Pbr => Helper::Pbr,
                    PropOp::Pzl => Helper::Pzl,
                    PropOp::Pzr => Helper::Pzr,
                };
                self.a.i().call(self.ctx.helper(h));
                self.push();
            }
            Xchg => {
                self.pop_to(A);
                self.pop_to(B);
                self.a.i().local_get(A);
                self.push();
                self.a.i().local_get(B);
                self.push();
            }
            DupImm(n) => {
                if (*n as usize) + self.vstack.len() < VCAP {
                    self.pop_to(A);
                    for _ in 0..=*n {
                        self.a.i().local_get(A);
                        self.push();
                    }
                } else {
                    self.pop_to(A);
                    self.sync_out();
                    self.a
                        .i()
                        .local_get(A)
                        .i32_const(*n as i32 + 1)
                        .call(self.ctx.helper(Helper::Dup));
                    self.sync_in();
                }
            }
            Dup => {
                self.pop_to(A);
                self.pop_to(B);
                self.sync_out();
                self.a
                    .i()
                    .local_get(A)
                    .local_get(B)
                    .i32_wrap_i64()
                    .i32_const(0xFF)
                    .i32_and()
                    .i32_const(1)
                    .i32_add();
                self.a.i().call(self.ctx.helper(Helper::Dup));
                self.sync_in();
            }
            Ros(n) => {
                let n = *n as usize;
                let drop = n.min(self.vstack.len());
                self.vstack.truncate(self.vstack.len() - drop);
                if n > 0 {
                    self.tdelta += n as i32;
                }
            }
            PushReg { reg, .. } if *reg == hostabi::regs::CPUID => {
                self.pop();
                self.a.i().i32_wrap_i64().local_set(R);
                for idx in [3, 2, 1, 0] {
                    self.a
                        .i()
                        .local_get(R)
                        .i32_const(0)
                        .i32_const(idx)
                        .call(self.ctx.import(ImportId::cpuid));
                    self.push();
                }
            }
            PushReg { reg, .. } => {
                let parts = hostabi::regs::by_id(*reg).map_or(1, |r| r.parts());
                for part in (0..parts).rev() {
                    self.a
                        .i()
                        .i32_const(*reg as i32)
                        .i32_const(part as i32)
                        .call(self.ctx.import(ImportId::read_reg));
                    self.push();
                }
            }
            PopReg { reg, .. } => {
                self.a.i().i32_const(*reg as i32);
                self.pop();
                self.a.i().call(self.ctx.import(ImportId::write_reg)).drop();
            }
            PushImm(v) => self.push_const(*v),
            PushByte(b) => self.push_const(*b as u64),
            PushSym { value } => {
                self.a
                    .i()
                    .call(self.ctx.import(ImportId::load_bias))
                    .i64_const(*value as i64)
                    .i64_add();
                self.push();
            }
            PushMem(w) => self.mem_read(*w),
            PopMem(w) => self.mem_write(*w),
            PushTask => self.push_import(ImportId::thread_pointer),
            PushPid => self.push_import(ImportId::current_tid),
            PushProcid => self.push_import(ImportId::current_cpu),
            PushEntry(reg) => {
                self.a
                    .i()
                    .i32_const(i32::from(*reg))
                    .call(self.ctx.import(ImportId::entry_reg));
                self.push();
            }
            PushElapsed => self.push_import(ImportId::elapsed_ns),
            PushUsdt(n) => {
                self.a
                    .i()
                    .i32_const(i32::from(*n))
                    .call(self.ctx.import(ImportId::usdt_arg));
                self.push();
            }
            Vfyr | Vfyrw => {
                let access = if matches!(insn.op, Vfyr) { 1 } else { 3 };
                self.pop();
                self.a
                    .i()
                    .i32_const(access)
                    .call(self.ctx.import(ImportId::check_access));
                self.a.i().i32_const(0).i32_ne().i64_extend_i32_u();
                self.push();
            }
            Sx(t) => {
                let off = self.body.insns[*t].offset as i64;
                let blk =
                    self.block_of[*t].expect("codegen invariant: sx targets start blocks") as i64;
                self.frame_store(frame::HANDLER_OFF, |a| {
                    a.i().i64_const(off);
                });
                self.frame_store(frame::HANDLER_BLOCK, |a| {
                    a.i().i64_const(blk);
                });
            }
            Ux => {
                self.frame_store(frame::HANDLER_OFF, |a| {
                    a.i().i64_const(hostabi::record::HANDLER_NONE as i64);
                });
                self.frame_store(frame::HANDLER_BLOCK, |a| {
                    a.i().i64_const(-1);
                });
            }
            Rx => {
                // code = S[0], p1 = S[1], p2 = S[2], not popped.
                self.sync_out();
                for k in 0..3 {
                    self.a
                        .i()
                        .local_get(TSP)
                        .i32_const(k)
                        .i32_add()
                        .i32_const(1023)
                        .i32_and()
                        .i32_const(3)
                        .i32_shl()
                        .i64_load(mem(l::STACK, 3));
                }
                self.a
                    .i()
                    .i32_const(1)
                    .call(self.ctx.helper(Helper::Raise))
                    .local_tee(R)
                    .i32_const(raised::IGNORED)
                    .i32_ne();
                let exc = self.exc;
                self.a.br_if(exc);
            }
            PushX => {
                for gl in [g::EXC_P2, g::EXC_P1, g::EXC_CODE] {
                    self.a.i().global_get(gl);
                    self.push();
                }
            }
            PushLp | PushPlp | PushStp => {
                let gl = match insn.op {
                    PushLp => g::LP,
                    PushPlp => g::PLP,
                    _ => g::STP,
                };
                self.a.i().global_get(gl).i64_extend_i32_u();
                self.push();
            }
            PopLp => {
                self.pop();
                self.a.i().call(self.ctx.helper(Helper::PopLp));
            }
            PopStp => {
                self.pop();
                self.a.i().call(self.ctx.helper(Helper::PopStp));
            }
            PurgeSt => {
                self.a.i().i32_const(0).global_set(g::STP);
            }
            TracePv => {
                self.pop_to(B);
                self.pop_to(A);
                self.frame_store(frame::PV_START, |a| {
                    a.i().local_get(A).i64_const(1023).i64_and();
                });
                self.frame_store(frame::PV_COUNT, |a| {
                    a.i().local_get(B);
                });
            }
            TraceVars(space) => self.trace_vars(*space),
            SlotImm(op, rel, k) => self.slot_op(*op, *rel, Some(*k)),
            Slot(op, rel) => self.slot_op(*op, *rel, None),
            SaveTsp => {
                self.tsp_plus(0);
                self.a.i().i64_extend_i32_u();
                self.push();
            }
            RestoreTsp => {
                self.flush();
                self.pop();
                self.a
                    .i()
                    .i32_wrap_i64()
                    .i32_const(1023)
                    .i32_and()
                    .local_set(TSP);
                self.tdelta = 0;
            }
            SaveSbp => {
                self.a.i().global_get(g::SBP).i64_extend_i32_u();
                self.push();
            }
            RestoreSbp => {
                self.pop();
                self.a
                    .i()
                    .i32_wrap_i64()
                    .i32_const(1023)
                    .i32_and()
                    .global_set(g::SBP);
            }
            Callk => {
                self.sync_out();
                self.a.i().call(self.ctx.import(ImportId::callk));
            }
            Malloc => self.helper_e(Helper::Malloc, None),
            Free => self.helper_e(Helper::Free, None),
            PushWid => self.push_const((-64i64) as u64),
            PushH(w, k) | PopH(w, k) => {
                let h = if matches!(insn.op, PushH(..)) {
                    Helper::PushH
                } else {
                    Helper::PopH
                };
                self.sync_out();
                self.a
                    .i()
                    .i32_const(w.bytes() as i32)
                    .i32_const(*k as i32)
                    .call(self.ctx.helper(h));
                self.sync_in();
                self.check_e();
            }
            PushIo(w) => {
                self.pop_to(A);
                self.a
                    .i()
                    .local_get(A)
                    .i32_const(w.bytes() as i32)
                    .i32_const(l::SCRATCH as i32)
                    .call(self.ctx.import(ImportId::io_in));
                self.io_check();
                self.a.i().i32_const(0).i64_load(mem(l::SCRATCH, 3));
                self.push();
            }
            PopIo(w) => {
                self.pop_to(B);
                self.pop_to(A);
                self.a
                    .i()
                    .local_get(A)
                    .i32_const(w.bytes() as i32)
                    .local_get(B)
                    .call(self.ctx.import(ImportId::io_out));
                self.io_check();
            }
        }
    }
}

fn shift(a: &mut Asm, s: ShiftOp) {
    match s {
        ShiftOp::Shl => a.i().i64_shl(),
        ShiftOp::Shr => a.i().i64_shr_u(),
        ShiftOp::Rol => a.i().i64_rotl(),
        ShiftOp::Ror => a.i().i64_rotr(),
    };
}

fn prop_imm(a: &mut Asm, p: PropOp, n: u32) {
    let low_mask = |n: u32| -> i64 {
        if n >= 64 {
            -1
        } else {
            ((1u64 << n) - 1) as i64
        }
    };
    match p {
        PropOp::Pbl => {
            let s = (64 - n) as i64;
            a.i().i64_const(s).i64_shl().i64_const(s).i64_shr_s();
        }
        PropOp::Pbr => {
            let m = low_mask(n);
            a.i().local_tee(A).i64_const(m).i64_or();
            a.i().local_get(A).i64_const(!m).i64_and();
            a.i()
                .local_get(A)
                .i64_const((n - 1) as i64)
                .i64_shr_u()
                .i64_const(1)
                .i64_and()
                .i32_wrap_i64();
            a.i().select();
        }
        PropOp::Pzl => {
            a.i().i64_const(low_mask(n)).i64_and();
        }
        PropOp::Pzr => {
            a.i().i64_const(!low_mask(n - 1)).i64_and();
        }
    }
}
