//! The stack cache: values held in Wasm locals, their spills and write-through
//! to the memory stack, and the TSP and jump-counter locals.

use super::{BodyGen, JC, TSP, VBASE, VCAP, VItem};
use crate::codegen::asm::mem;
use crate::codegen::helpers::Helper;
use crate::codegen::layout::{self as l, g};

impl BodyGen<'_> {
    // ---- stack cache ---------------------------------------------------------

    /// Whether pushes skip the write-through store (see the module documentation).
    pub(super) fn elide(&self) -> bool {
        self.ctx.stack.elide
    }

    /// Writes the cached values that memory may lack (all of them, when
    /// stores are elided) to their slots; the cache stays valid.
    fn spill_all(&mut self) {
        let n = self.vstack.len();
        self.spill_below(n);
    }

    /// Writes cache items `0..n` (the deepest `n`) to their slots, when stores are elided.
    fn spill_below(&mut self, n: usize) {
        if !self.elide() {
            return;
        }
        let len = self.vstack.len();
        for idx in 0..n.min(len) {
            // Item idx is S[len - 1 - idx].
            self.tsp_plus((len - 1 - idx) as i32);
            self.a.i().i32_const(3).i32_shl();
            match self.vstack[idx] {
                VItem::Local => self.a.i().local_get(VBASE + idx as u32),
                VItem::Const(c) => self.a.i().i64_const(c),
            };
            self.a.i().i64_store(mem(l::STACK, 3));
        }
    }

    /// Emits `tsp = (tsp - 1) & 1023` and leaves `tsp << 3` (the slot address) on the stack.
    fn dec_tsp_addr(&mut self) {
        self.tdelta -= 1;
        self.tsp_plus(0);
        self.a.i().i32_const(3).i32_shl();
    }

    /// Emits the real `(TSP + k) & 1023` (k relative to the current top).
    pub(super) fn tsp_plus(&mut self, k: i32) {
        let off = self.tdelta + k;
        self.a.i().local_get(TSP);
        if off != 0 {
            self.a
                .i()
                .i32_const(off)
                .i32_add()
                .i32_const(1023)
                .i32_and();
        }
    }

    /// Applies the pending TSP adjustment to the local.
    fn commit(&mut self) {
        if self.tdelta != 0 {
            self.tsp_plus(0);
            self.a.i().local_set(TSP);
            self.tdelta = 0;
        }
    }

    /// Pushes the i64 on the Wasm operand stack: written through to the
    /// memory stack at once, and kept in a local for the next pops.
    pub(super) fn push(&mut self) {
        if self.vstack.len() == VCAP {
            // The spills are balanced: the value waits on the operand stack.
            self.flush();
        }
        let slot = VBASE + self.vstack.len() as u32;
        self.a.i().local_set(slot);
        if self.elide() {
            self.tdelta -= 1;
        } else {
            self.dec_tsp_addr();
            self.a.i().local_get(slot).i64_store(mem(l::STACK, 3));
        }
        self.vstack.push(VItem::Local);
    }

    pub(super) fn push_const(&mut self, v: u64) {
        if self.vstack.len() == VCAP {
            self.flush();
        }
        if self.elide() {
            self.tdelta -= 1;
        } else {
            self.dec_tsp_addr();
            self.a.i().i64_const(v as i64).i64_store(mem(l::STACK, 3));
        }
        self.vstack.push(VItem::Const(v as i64));
    }

    /// Pops onto the Wasm operand stack (from the cache when it holds the top).
    pub(super) fn pop(&mut self) {
        match self.vstack.pop() {
            Some(VItem::Local) => {
                let slot = VBASE + self.vstack.len() as u32;
                self.a.i().local_get(slot);
            }
            Some(VItem::Const(c)) => {
                self.a.i().i64_const(c);
            }
            None => {
                self.tsp_plus(0);
                self.a.i().i32_const(3).i32_shl().i64_load(mem(l::STACK, 3));
            }
        }
        self.tdelta += 1;
    }

    /// Pops into scratch local `dst`.
    pub(super) fn pop_to(&mut self, dst: u32) {
        self.pop();
        self.a.i().local_set(dst);
    }

    /// Copies TOS (not popped) onto the Wasm operand stack.
    pub(super) fn peek(&mut self) {
        match self.vstack.last() {
            Some(VItem::Local) => {
                let slot = VBASE + self.vstack.len() as u32 - 1;
                self.a.i().local_get(slot);
            }
            Some(VItem::Const(c)) => {
                let c = *c;
                self.a.i().i64_const(c);
            }
            None => {
                self.tsp_plus(0);
                self.a.i().i32_const(3).i32_shl().i64_load(mem(l::STACK, 3));
            }
        }
    }

    /// Forgets the cached values after making sure memory holds them;
    /// needed wherever the memory stack may change behind the cache or is
    /// read behind it.
    pub(super) fn flush(&mut self) {
        self.spill_all();
        self.vstack.clear();
    }

    /// Completes the memory stack and publishes TSP and the jump counter to
    /// their globals, so an exception raised now sees the right stack; the
    /// cache stays valid.
    pub(super) fn publish(&mut self) {
        self.spill_all();
        self.tsp_plus(0);
        self.a
            .i()
            .global_set(g::TSP)
            .local_get(JC)
            .global_set(g::JC);
    }

    /// Makes the cache hold exactly the top `k` values in locals
    /// `VBASE..VBASE+k` (TOS last): what a block entered with `k` expects.
    pub(super) fn canonicalize(&mut self, k: usize) {
        let l = self.vstack.len();
        // Items that leave the cache must be in memory.
        self.spill_below(l.saturating_sub(k));
        if l >= k {
            // Keep the top k: item l-k+j goes to slot j (ascending: sources are above targets).
            for j in 0..k {
                let src = l - k + j;
                match self.vstack[src] {
                    VItem::Local if src == j => {}
                    VItem::Local => {
                        self.a
                            .i()
                            .local_get(VBASE + src as u32)
                            .local_set(VBASE + j as u32);
                    }
                    VItem::Const(c) => {
                        self.a.i().i64_const(c).local_set(VBASE + j as u32);
                    }
                }
            }
        } else {
            // The cached top l values move up; the k-l deeper ones come from memory.
            let shift = k - l;
            for i in (0..l).rev() {
                match self.vstack[i] {
                    VItem::Local => {
                        self.a
                            .i()
                            .local_get(VBASE + i as u32)
                            .local_set(VBASE + (i + shift) as u32);
                    }
                    VItem::Const(c) => {
                        self.a
                            .i()
                            .i64_const(c)
                            .local_set(VBASE + (i + shift) as u32);
                    }
                }
            }
            for j in 0..shift {
                let depth = (k - 1 - j) as i32; // S[depth]
                self.tsp_plus(depth);
                self.a
                    .i()
                    .i32_const(3)
                    .i32_shl()
                    .i64_load(mem(l::STACK, 3))
                    .local_set(VBASE + j as u32);
            }
        }
        self.vstack = vec![VItem::Local; k];
        self.commit();
    }

    /// Clears the cache and publishes TSP and the jump counter to their globals.
    pub(super) fn sync_out(&mut self) {
        self.flush();
        self.commit();
        self.a
            .i()
            .local_get(TSP)
            .global_set(g::TSP)
            .local_get(JC)
            .global_set(g::JC);
    }

    pub(super) fn sync_in(&mut self) {
        self.a.i().global_get(g::TSP).local_set(TSP);
    }

    /// Calls a helper that uses the memory stack.
    pub(super) fn call_helper(&mut self, h: Helper) {
        self.sync_out();
        self.a.i().call(self.ctx.helper(h));
        self.sync_in();
    }
}
