//! Exceptions (raising, the common exit) and branches (jump counting, direct
//! and dispatched gotos, structured and unrolled loops).

use super::analysis::Unroll;
use super::{BodyGen, JC, PC, R, VItem};
use crate::ast::*;
use crate::codegen::asm::{Asm, Label};
use crate::codegen::helpers::Helper;
use crate::codegen::layout::{g, raised, status};
use hostabi::{Exception, Outcome};

impl BodyGen<'_> {
    // ---- exceptions ------------------------------------------------------

    /// After a helper returned its exception bits `e` (i32 on the stack):
    /// raise when non-zero, continue when ignored.
    pub(super) fn check_e(&mut self) {
        self.a
            .i()
            .call(self.ctx.helper(Helper::Check))
            .local_tee(R)
            .i32_const(raised::IGNORED)
            .i32_ne();
        let exc = self.exc;
        self.a.br_if(exc);
    }

    /// Raises `code` with p1/p2 given by emitters. The stack must be flushed
    /// and synchronised by the caller (`sync_out`).
    fn raise_with(
        &mut self,
        code: Exception,
        p1: impl FnOnce(&mut Asm),
        p2: impl FnOnce(&mut Asm),
    ) {
        self.a.i().i64_const(code.bit() as i64);
        p1(&mut self.a);
        p2(&mut self.a);
        self.a
            .i()
            .i32_const(0)
            .call(self.ctx.helper(Helper::Raise))
            .local_tee(R);
        let exc = self.exc;
        if code.bit() & hostabi::status::NON_MASKABLE_BITS != 0 {
            self.a.i().drop();
            self.a.br(exc);
        } else {
            self.a.i().i32_const(raised::IGNORED).i32_ne();
            self.a.br_if(exc);
        }
    }

    /// Raises `code` when the i32 on the operand stack is non-zero (a cold
    /// path; the compile-time cache state of the hot path is untouched).
    pub(super) fn raise_if(
        &mut self,
        code: Exception,
        p1: impl FnOnce(&mut Asm),
        p2: impl FnOnce(&mut Asm),
    ) {
        let bad = self.a.if_();
        self.publish();
        self.raise_with(code, p1, p2);
        self.a.end(bad);
    }

    pub(super) fn raise_const(&mut self, code: Exception, p1: u64, p2: u64) {
        self.publish();
        self.raise_with(
            code,
            |a| {
                a.i().i64_const(p1 as i64);
            },
            |a| {
                a.i().i64_const(p2 as i64);
            },
        );
    }

    /// Ends the run with `outcome`.
    pub(super) fn terminate(&mut self, outcome: Outcome) {
        self.sync_out();
        self.a
            .i()
            .i32_const(outcome as i32)
            .global_set(g::OUTCOME)
            .i32_const(status::TERMINATE)
            .return_();
    }

    // ---- branches ----------------------------------------------------------

    /// Counts a branch against jmpmax (raising MAX_JMPS instead of branching).
    pub(super) fn count_branch(&mut self) {
        let jmpmax = self.ctx.jmpmax;
        self.a.i().local_get(JC).i32_const(jmpmax as i32).i32_ge_u();
        let over = self.a.if_();
        self.raise_const(Exception::MaxJmps, jmpmax as u64, 0);
        self.a.end(over);
        self.a
            .i()
            .local_get(JC)
            .i32_const(1)
            .i32_add()
            .local_set(JC);
    }

    /// Jumps to instruction `t` (a block leader); the stack is flushed.
    pub(super) fn goto(&mut self, t: InsnIdx) {
        let b = self.block_of[t].expect("codegen invariant: branch targets start blocks");
        let saved = (self.vstack.clone(), self.tdelta);
        let k = self.block_k[b];
        self.canonicalize(k);
        (self.vstack, self.tdelta) = saved;
        if b > self.cur_block {
            let lbl = self.block_labels[b];
            self.a.br(lbl);
        } else if self.loop_end[b].is_some_and(|c| self.cur_block <= c) {
            let lbl = self.loop_labels[b];
            self.a.br(lbl);
        } else {
            self.a.i().i32_const(b as i32).local_set(PC);
            let d = self.dispatch;
            self.a.br(d);
        }
    }

    /// The label a branch to instruction `t` can take directly, when the
    /// cache already has the shape the target block expects (so the branch
    /// needs no code of its own): a forward branch or a structured loop.
    pub(super) fn direct_label(&self, t: InsnIdx) -> Option<Label> {
        let b = self.block_of[t]?;
        let k = self.block_k[b];
        let canonical = self.tdelta == 0
            && self.vstack.len() == k
            && self.vstack.iter().all(|v| matches!(v, VItem::Local));
        if !canonical {
            None
        } else if b > self.cur_block {
            Some(self.block_labels[b])
        } else if self.loop_end[b].is_some_and(|c| self.cur_block <= c) {
            Some(self.loop_labels[b])
        } else {
            None
        }
    }

    /// The part of `loop` before its branch: count the jump, TOS := TOS − 1
    /// in place (pop + push writes it through), and TOS on the operand stack.
    pub(super) fn loop_step(&mut self) {
        self.count_branch();
        self.pop();
        self.a.i().i64_const(1).i64_sub();
        self.push();
        self.peek();
    }

    /// Emits the back edge of an unrolled loop (see [`unrollable_loops`]):
    /// the body already emitted once is followed by `u.copies - 1` more
    /// copies. Every copy but the last ends with `loop`'s step and a branch
    /// out to the exit block when the counter reached zero, then falls into
    /// the next copy with the cache in the shape the head expects; the last
    /// copy ends with the ordinary `loop`. Each copy is the same code from
    /// the same compile-time state, so all the exits leave the cache in the
    /// same shape, the one the code after the loop is emitted for; the
    /// semantics, jump counting included, are exactly those of the rolled
    /// loop. What it saves per iteration is the loop's own overhead in the
    /// machine code: wasmtime's fuel check at the loop header, the back
    /// edge and its register moves.
    ///
    /// [`unrollable_loops`]: super::analysis::unrollable_loops
    pub(super) fn unrolled_loop(&mut self, u: Unroll) {
        let body = self.body;
        let k = self.block_k[self.cur_block];
        let exit = self
            .unroll_exit
            .take()
            .expect("codegen invariant: the unrolled loop's exit block is open");
        let mut exit_shape = None;
        // The driver emitted the first copy's body.
        for copy in 1..=u.copies {
            if copy > 1 {
                for i in u.head..u.back_edge {
                    self.marks.push((i, self.a.byte_len()));
                    self.insn(&body.insns[i]);
                }
                self.marks.push((u.back_edge, self.a.byte_len()));
            }
            if copy < u.copies {
                self.loop_step();
                self.a.i().i64_eqz();
                self.a.br_if(exit);
                exit_shape = cfg!(debug_assertions).then(|| self.shape());
                // The counter is not zero: on into the next copy.
                self.canonicalize(k);
            } else {
                self.insn(&body.insns[u.back_edge]);
                debug_assert!(
                    exit_shape.as_ref().is_none_or(|s| *s == self.shape()),
                    "codegen invariant: every exit of an unrolled loop has the same cache shape"
                );
            }
        }
        self.a.end(exit);
    }

    /// The compile-time cache state, for invariant checks.
    fn shape(&self) -> (Vec<Option<i64>>, i32) {
        let items = self
            .vstack
            .iter()
            .map(|v| match v {
                VItem::Local => None,
                VItem::Const(c) => Some(*c),
            })
            .collect();
        (items, self.tdelta)
    }

    /// Conditional branch on TOS (not popped); `test` turns the i64 into an i32 condition.
    pub(super) fn cond_branch(&mut self, t: InsnIdx, test: impl FnOnce(&mut Asm)) {
        self.peek();
        test(&mut self.a);
        if let Some(lbl) = self.direct_label(t) {
            // Branch-free counting (JC += taken, MAX_JMPS when taken at
            // the limit) and a plain `br_if`: the taken path has no block.
            let jmpmax = self.ctx.jmpmax;
            self.a
                .i()
                .local_tee(R)
                .local_get(JC)
                .i32_const(jmpmax as i32)
                .i32_ge_u()
                .i32_and();
            let over = self.a.if_();
            self.raise_const(Exception::MaxJmps, jmpmax as u64, 0);
            self.a.end(over);
            self.a
                .i()
                .local_get(JC)
                .local_get(R)
                .i32_add()
                .local_set(JC)
                .local_get(R);
            self.a.br_if(lbl);
            return;
        }
        let taken = self.a.if_();
        self.count_branch();
        self.goto(t);
        self.a.end(taken);
    }
}
