//! Emitters shared by the instructions: binary operators, variable traces,
//! frame stores, memory access, I/O checks, log words, helpers, division and
//! procedure calls.

use super::{A, B, BodyGen, C, D, JC, R, TSP};
use crate::ast::*;
use crate::codegen::asm::{Asm, Label, mem};
use crate::codegen::helpers::Helper;
use crate::codegen::layout::{self as l, frame, g, status};
use hostabi::{Exception, ImportId};

impl BodyGen<'_> {
    // ---- instructions --------------------------------------------------------

    pub(super) fn binop(&mut self, f: impl FnOnce(&mut Asm)) {
        self.pop();
        self.pop();
        f(&mut self.a);
        self.push();
    }

    pub(super) fn trace_vars(&mut self, space: VarSpace) {
        // ( i n -- ): n in B, i in A.
        self.pop_to(B);
        self.pop_to(A);
        let (kind, start_f, count_f) = match space {
            VarSpace::Local => (1, frame::LV_START, frame::LV_COUNT),
            VarSpace::Global => (2, frame::GV_START, frame::GV_COUNT),
        };
        match space {
            VarSpace::Local => {
                self.a.i().i64_const(self.ctx.vars as i64).local_set(C);
            }
            VarSpace::Global => {
                self.a
                    .i()
                    .call(self.ctx.import(ImportId::gvar_count))
                    .local_set(C);
            }
        }
        // n > 0 && (i > limit || n > limit - i)
        self.a.i().local_get(B).i64_const(0).i64_ne();
        self.a.i().local_get(A).local_get(C).i64_gt_u();
        self.a
            .i()
            .local_get(B)
            .local_get(C)
            .local_get(A)
            .i64_sub()
            .i64_gt_u()
            .i32_or()
            .i32_and();
        self.raise_if(
            Exception::InvalidOperand,
            |a| {
                a.i().i64_const(kind);
            },
            |a| {
                // first invalid index = max(i, limit)
                a.i()
                    .local_get(A)
                    .local_get(C)
                    .local_get(A)
                    .local_get(C)
                    .i64_gt_u()
                    .select();
            },
        );
        self.frame_store(start_f, |a| {
            a.i().local_get(A);
        });
        self.frame_store(count_f, |a| {
            a.i().local_get(B);
        });
    }

    /// Stores an i64 into field `f` of the current frame.
    pub(super) fn frame_store(&mut self, f: u32, v: impl FnOnce(&mut Asm)) {
        self.a
            .i()
            .global_get(g::DEPTH)
            .i32_const(l::FRAME_BYTES as i32)
            .i32_mul();
        v(&mut self.a);
        self.a.i().i64_store(mem(l::FRAMES + f, 3));
    }

    pub(super) fn mem_read(&mut self, w: Width) {
        self.pop_to(A);
        self.a
            .i()
            .local_get(A)
            .i32_const(l::SCRATCH as i32)
            .i32_const(w.bytes() as i32)
            .call(self.ctx.import(ImportId::read_mem));
        self.a.i().i32_const(w.bytes() as i32).i32_ne();
        self.raise_if(
            Exception::InvalidAddr,
            |a| {
                a.i().local_get(A);
            },
            |a| {
                a.i().i64_const(0);
            },
        );
        let m = mem(l::SCRATCH, 0);
        match w {
            Width::U8 => self.a.i().i32_const(0).i64_load8_u(m),
            Width::U16 => self.a.i().i32_const(0).i64_load16_u(m),
            Width::U32 => self.a.i().i32_const(0).i64_load32_u(m),
            Width::U64 => self.a.i().i32_const(0).i64_load(m),
        };
        self.push();
    }

    pub(super) fn mem_write(&mut self, w: Width) {
        self.pop_to(B);
        self.pop_to(A);
        self.a
            .i()
            .i32_const(0)
            .local_get(B)
            .i64_store(mem(l::SCRATCH, 0));
        self.a
            .i()
            .local_get(A)
            .i32_const(l::SCRATCH as i32)
            .i32_const(w.bytes() as i32)
            .call(self.ctx.import(ImportId::write_mem));
        self.raise_if(
            Exception::InvalidAddr,
            |a| {
                a.i().local_get(A);
            },
            |a| {
                a.i().i64_const(0);
            },
        );
    }

    /// Status (i32) of an I/O import on the stack: raise INVALID_OPERAND(5, port in A) unless OK.
    pub(super) fn io_check(&mut self) {
        self.raise_if(
            Exception::InvalidOperand,
            |a| {
                a.i().i64_const(5);
            },
            |a| {
                a.i().local_get(A);
            },
        );
    }

    pub(super) fn push_import(&mut self, id: ImportId) {
        self.a.i().call(self.ctx.import(id));
        self.push();
    }

    /// Calls a stack-using helper returning exception bits, with an optional i32 argument.
    /// `log n`. When the n values are cached and the log area has room for
    /// them (checked at run time), they are stored straight into it: no
    /// spill, no helper call. Otherwise (and for overflow, with its partial
    /// effects) the `rt_logn` helper does it. Both paths end with the cache
    /// flushed and TSP published.
    pub(super) fn log_words(&mut self, n: u16) {
        let bytes = 8 * u32::from(n);
        if n == 0 || usize::from(n) > self.vstack.len() || bytes > u32::from(self.ctx.logmax) {
            self.helper_e(Helper::LogN, Some(i32::from(n)));
            return;
        }
        let limit = i32::from(self.ctx.logmax) - bytes as i32;
        self.a.i().global_get(g::LP).i32_const(limit).i32_le_s();
        let fast = self.a.if_();
        let saved = (self.vstack.clone(), self.tdelta);
        // The item descriptor (offset LP, raw words), as `rt_additem` writes it.
        self.a
            .i()
            .global_get(g::ITEMS)
            .i32_const(2)
            .i32_shl()
            .global_get(g::LP)
            .i32_const((hostabi::record::ItemKind::RawWords as i32) << 16)
            .i32_or()
            .i32_store(mem(l::ITEMS, 2))
            .global_get(g::ITEMS)
            .i32_const(1)
            .i32_add()
            .global_set(g::ITEMS);
        for j in 0..u32::from(n) {
            self.a.i().global_get(g::LP);
            self.pop(); // TOS first: pop order
            self.a.i().i64_store(mem(l::LOG + 8 * j, 0));
        }
        // Complete: PLP := LP := LP + 8n.
        self.a
            .i()
            .global_get(g::LP)
            .i32_const(bytes as i32)
            .i32_add()
            .global_set(g::LP)
            .global_get(g::LP)
            .global_set(g::PLP);
        self.sync_out();
        self.a.else_();
        (self.vstack, self.tdelta) = saved;
        self.helper_e(Helper::LogN, Some(i32::from(n)));
        self.a.end(fast);
    }

    pub(super) fn helper_e(&mut self, h: Helper, arg: Option<i32>) {
        self.sync_out();
        if let Some(v) = arg {
            self.a.i().i32_const(v);
        }
        self.a.i().call(self.ctx.helper(h));
        self.sync_in();
        self.check_e();
    }

    pub(super) fn divide(&mut self, signed: bool) {
        self.pop_to(A); // y (divisor, TOS)
        self.pop_to(B); // x
        self.a.i().local_get(A).i64_eqz();
        let zero = self.a.if_();
        self.raise_const(Exception::DivideByZero, 0, 0);
        self.a.end(zero);
        if signed {
            // MIN / -1: quot = MIN, rem = 0.
            self.a
                .i()
                .local_get(B)
                .i64_const(i64::MIN)
                .i64_eq()
                .local_get(A)
                .i64_const(-1)
                .i64_eq()
                .i32_and();
            let ovf = self.a.if_();
            self.a
                .i()
                .i64_const(0)
                .local_set(C)
                .i64_const(i64::MIN)
                .local_set(D);
            self.a.else_();
            self.a
                .i()
                .local_get(B)
                .local_get(A)
                .i64_rem_s()
                .local_set(C);
            self.a
                .i()
                .local_get(B)
                .local_get(A)
                .i64_div_s()
                .local_set(D);
            self.a.end(ovf);
        } else {
            self.a
                .i()
                .local_get(B)
                .local_get(A)
                .i64_rem_u()
                .local_set(C);
            self.a
                .i()
                .local_get(B)
                .local_get(A)
                .i64_div_u()
                .local_set(D);
        }
        self.a.i().local_get(C);
        self.push();
        self.a.i().local_get(D);
        self.push();
    }

    pub(super) fn call(&mut self, p: ProcId, insn: &Insn) {
        let callee = &self.program.procs[p];
        let called = self.program.bodies[callee.body].insns[0].offset as i64;
        let ret = (insn.offset + insn.op.size()) as i64;
        self.sync_out();
        self.a
            .i()
            .i64_const(called)
            .i64_const(ret)
            .call(self.ctx.helper(Helper::Enter));
        self.check_e();
        self.a
            .i()
            .call(self.ctx.body_func(callee.body))
            .local_set(R);
        self.a
            .i()
            .global_get(g::TSP)
            .local_set(TSP)
            .global_get(g::JC)
            .local_set(JC);
        // status RET: continue; TERMINATE: return it; EXCEPTION: dispatch in this frame.
        let cont = self.a.block();
        self.a.i().local_get(R);
        self.a.br_if_zero(cont);
        self.a
            .i()
            .local_get(R)
            .i32_const(status::TERMINATE)
            .i32_eq();
        let term = self.a.if_();
        self.a.i().i32_const(status::TERMINATE).return_();
        self.a.end(term);
        self.a
            .i()
            .call(self.ctx.helper(Helper::Dispatch))
            .local_set(R);
        let exc = self.exc;
        self.a.br(exc);
        self.a.end(cont);
    }
}

impl Asm {
    /// `i32.eqz; br_if l`: branch when the i32 on the stack is zero.
    fn br_if_zero(&mut self, l: Label) {
        self.i().i32_eqz();
        self.br_if(l);
    }
}
