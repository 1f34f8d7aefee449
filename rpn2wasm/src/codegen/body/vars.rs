//! Variables (local and global, constant or stack-supplied index) and the
//! stack slots addressed relative to TSP or SBP.

use super::{A, B, BodyGen, C, VBASE, VItem};
use crate::ast::*;
use crate::codegen::asm::mem;
use crate::codegen::layout::{self as l, g};
use hostabi::{Exception, ImportId};

impl BodyGen<'_> {
    // ---- variables ---------------------------------------------------------

    fn local_addr_const(i: u16) -> u32 {
        l::VARS + 8 * i as u32
    }

    /// Checks a stack-supplied index in local A against the limit, raising INVALID_OPERAND.
    fn check_index(&mut self, space: VarSpace) {
        let (kind, limit_global) = match space {
            VarSpace::Local => (1, false),
            VarSpace::Global => (2, true),
        };
        self.a.i().local_get(A);
        if limit_global {
            self.a.i().call(self.ctx.import(ImportId::gvar_count));
        } else {
            self.a.i().i64_const(self.ctx.vars as i64);
        }
        self.a.i().i64_ge_u();
        self.raise_if(
            Exception::InvalidOperand,
            |a| {
                a.i().i64_const(kind);
            },
            |a| {
                a.i().local_get(A);
            },
        );
    }

    /// Loads variable (index in local A, or immediate) onto the operand stack.
    fn load_var(&mut self, space: VarSpace, imm: Option<u16>) {
        match (space, imm) {
            (VarSpace::Local, Some(i)) => {
                self.a
                    .i()
                    .i32_const(0)
                    .i64_load(mem(Self::local_addr_const(i), 3));
            }
            (VarSpace::Local, None) => {
                self.a
                    .i()
                    .local_get(A)
                    .i32_wrap_i64()
                    .i32_const(3)
                    .i32_shl()
                    .i64_load(mem(l::VARS, 3));
            }
            (VarSpace::Global, Some(i)) => {
                self.a
                    .i()
                    .i64_const(i as i64)
                    .call(self.ctx.import(ImportId::gvar_get));
            }
            (VarSpace::Global, None) => {
                self.a
                    .i()
                    .local_get(A)
                    .call(self.ctx.import(ImportId::gvar_get));
            }
        }
    }

    /// Stores the value in local B into the variable.
    fn store_var(&mut self, space: VarSpace, imm: Option<u16>) {
        match (space, imm) {
            (VarSpace::Local, Some(i)) => {
                self.a
                    .i()
                    .i32_const(0)
                    .local_get(B)
                    .i64_store(mem(Self::local_addr_const(i), 3));
            }
            (VarSpace::Local, None) => {
                self.a
                    .i()
                    .local_get(A)
                    .i32_wrap_i64()
                    .i32_const(3)
                    .i32_shl()
                    .local_get(B)
                    .i64_store(mem(l::VARS, 3));
            }
            (VarSpace::Global, Some(i)) => {
                self.a
                    .i()
                    .i64_const(i as i64)
                    .local_get(B)
                    .call(self.ctx.import(ImportId::gvar_set));
            }
            (VarSpace::Global, None) => {
                self.a
                    .i()
                    .local_get(A)
                    .local_get(B)
                    .call(self.ctx.import(ImportId::gvar_set));
            }
        }
    }

    pub(super) fn var_op(&mut self, op: VarOp, space: VarSpace, imm: Option<u16>) {
        if imm.is_none() {
            // Stack-supplied index: may raise, so work on a materialised stack.
            match op {
                VarOp::Pop => {
                    self.pop_to(B);
                    self.pop_to(A);
                }
                _ => self.pop_to(A),
            }
            self.check_index(space);
        }
        match op {
            VarOp::Push => {
                self.load_var(space, imm);
                self.push();
            }
            VarOp::Pop => {
                if imm.is_some() {
                    self.pop_to(B);
                }
                self.store_var(space, imm);
            }
            VarOp::Move => {
                self.peek();
                self.a.i().local_set(B);
                self.store_var(space, imm);
            }
            VarOp::Inc | VarOp::Dec => {
                self.load_var(space, imm);
                self.a
                    .i()
                    .i64_const(if op == VarOp::Inc { 1 } else { -1 })
                    .i64_add()
                    .local_set(B);
                self.store_var(space, imm);
            }
        }
    }

    // ---- slots (tsp / sbp) --------------------------------------------------

    /// Address of slot `(base + k) & 1023` where base is TSP or SBP and k is in local C (i32).
    fn slot_addr(&mut self, rel: StackRel) {
        match rel {
            StackRel::Tsp => self.tsp_plus(0),
            StackRel::Sbp => {
                self.a.i().global_get(g::SBP);
            }
        };
        self.a
            .i()
            .local_get(C)
            .i32_wrap_i64()
            .i32_add()
            .i32_const(1023)
            .i32_and()
            .i32_const(3)
            .i32_shl();
    }

    pub(super) fn slot_op(&mut self, op: SlotOp, rel: StackRel, imm: Option<i16>) {
        // `S[k]` with an immediate k that falls in the cache: work on the
        // cached local (and write through); anything else goes to memory,
        // which always holds every value.
        if let (Some(k), StackRel::Tsp) = (imm, rel) {
            let slot = (k as i64).rem_euclid(1024) as usize;
            let len = self.vstack.len();
            if slot < len {
                let idx = len - 1 - slot;
                match op {
                    SlotOp::Push => {
                        match self.vstack[idx] {
                            VItem::Local => self.a.i().local_get(VBASE + idx as u32),
                            VItem::Const(c) => self.a.i().i64_const(c),
                        };
                        self.push();
                    }
                    SlotOp::Pop | SlotOp::Copy => {
                        // S[k] := TOS (then pop for `pop tsp, k`).
                        self.peek();
                        self.a.i().local_set(VBASE + idx as u32);
                        self.vstack[idx] = VItem::Local;
                        if !self.elide() {
                            self.tsp_plus(slot as i32);
                            self.a
                                .i()
                                .i32_const(3)
                                .i32_shl()
                                .local_get(VBASE + idx as u32)
                                .i64_store(mem(l::STACK, 3));
                        }
                        if op == SlotOp::Pop {
                            self.pop();
                            self.a.i().drop();
                        }
                    }
                }
                return;
            }
        }
        if self.elide() && op != SlotOp::Push && !(imm.is_some() && rel == StackRel::Tsp) {
            // A write at a computed slot may hit a cached value: put the
            // cache in memory first (the analysis keeps such programs out of
            // this mode; this keeps the code correct regardless).
            self.flush();
        }
        match imm {
            Some(k) => {
                self.a.i().i64_const(k as i64).local_set(C);
            }
            None => self.pop_to(C),
        }
        match op {
            SlotOp::Push => {
                self.slot_addr(rel);
                self.a.i().i64_load(mem(l::STACK, 3));
                self.push();
            }
            SlotOp::Pop => {
                if imm.is_some() && rel == StackRel::Tsp {
                    // `pop tsp, k` beyond the cache: S[k] computed before popping.
                    self.slot_addr(rel);
                    self.peek();
                    self.a.i().i64_store(mem(l::STACK, 3));
                    self.pop();
                    self.a.i().drop();
                } else if imm.is_none() {
                    // `pop tsp|sbp`: pop v, pop k; S[k]/B[k] := v (after both pops).
                    self.a.i().local_get(C).local_set(B);
                    self.pop_to(C);
                    self.slot_addr(rel);
                    self.a.i().local_get(B).i64_store(mem(l::STACK, 3));
                } else {
                    // `pop sbp, k`: B[k] := pop.
                    self.pop_to(B);
                    self.slot_addr(rel);
                    self.a.i().local_get(B).i64_store(mem(l::STACK, 3));
                }
            }
            SlotOp::Copy => {
                self.slot_addr(rel);
                self.peek();
                self.a.i().i64_store(mem(l::STACK, 3));
            }
        }
        // A write at a computed slot may hit a cached one (not for a Tsp
        // immediate beyond the cache, whose slot is disjoint from it).
        if op != SlotOp::Push && !(imm.is_some() && rel == StackRel::Tsp) {
            self.flush();
        }
    }
}
