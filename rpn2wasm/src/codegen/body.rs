//! Translation of one body (probe handler or procedure) into one Wasm
//! function `() -> i32` (a `layout::status` code).
//!
//! Control flow: basic blocks start at every branch or `sx` target; they are
//! laid out as nested `block`s inside a dispatch `loop`. Forward branches are
//! direct `br`s. A backward branch to the head of a natural loop (entered
//! only through its head, with no handler entry inside) becomes a `br` to a
//! Wasm `loop` wrapped around the loop's blocks; any other backward branch,
//! and the entry of exception handlers, go through a `br_table` on a
//! block-index local. Exceptions leave through an outer `block` to a common
//! dispatch tail.
//!
//! Stack caching: values are kept in Wasm locals so that the pops that
//! follow need no memory load. By default every push is also written
//! through to the circular stack in memory, so the memory stack always
//! equals the reference interpreter's, dead slots included — they are
//! observable through `push tsp, -k`, `trace pv` and wrap-around. When the
//! whole-program analysis (`stackinfo`) proves no slot above TOS is ever
//! read, pushes are not written through: cached values reach memory only
//! when they leave the cache while still live (a spill) or when something
//! reads the memory stack (helpers, calls, exceptions, the end of the run),
//! and a value pushed and popped within the cache never touches memory. The
//! invariant in both modes: every live value not in the cache is in memory.
//! The cache is dropped wherever the memory stack may change behind it. TSP
//! and the jump counter live in locals and are synchronised with their
//! globals around calls and helpers.

use super::Ctx;
use super::asm::{Asm, Label, mem};
use super::helpers::Helper;
use super::layout::{self as l, frame, g, raised, status};
use crate::ast::*;
use hostabi::{Exception, ImportId, Outcome};
use wasm_encoder::{Function, ValType};

/// Locals: pc, tsp, jc, r (i32), then scratch i64 a..d, then the virtual stack.
const PC: u32 = 0;
const TSP: u32 = 1;
const JC: u32 = 2;
const R: u32 = 3;
const A: u32 = 4;
const B: u32 = 5;
const C: u32 = 6;
const D: u32 = 7;
const VBASE: u32 = 8;
/// Pending values kept in locals at most.
const VCAP: usize = 16;

#[derive(Clone, Copy)]
enum VItem {
    /// In local `VBASE + i`.
    Local,
    /// A constant.
    Const(i64),
}

/// Byte offsets of each instruction's code within the function, for `--emit wat`.
pub type SourceMarks = Vec<(usize, usize)>;

struct BodyGen<'a> {
    a: Asm,
    ctx: &'a Ctx,
    program: &'a Program,
    body: &'a Body,
    is_proc: bool,
    vstack: Vec<VItem>,
    /// Block index of each instruction that starts a block.
    block_of: Vec<Option<usize>>,
    /// Labels of the block constructs, by block index.
    block_labels: Vec<Label>,
    /// For a block that heads a structured loop: its last block.
    loop_end: Vec<Option<usize>>,
    /// Labels of the structured loops, by head block.
    loop_labels: Vec<Label>,
    /// For a block that heads an unrolled loop: what to unroll.
    unroll: Vec<Option<Unroll>>,
    /// The exit of the unrolled loop being emitted (a `block` inside its `loop`).
    unroll_exit: Option<Label>,
    /// Values cached in locals on entry of each block (all predecessors agree).
    block_k: Vec<usize>,
    /// Pushes minus pops not yet applied to the TSP local: the real TSP is
    /// `(TSP + tdelta) & 1023`. Keeping it at compile time makes successive
    /// stack accesses independent instead of a chain through one register.
    tdelta: i32,
    exc: Label,
    dispatch: Label,
    /// Index of the block being emitted.
    cur_block: usize,
    marks: SourceMarks,
}

/// Translates `body` of `program`.
pub fn translate(ctx: &Ctx, program: &Program, body: &Body) -> (Function, SourceMarks) {
    let mut leaders = vec![false; body.insns.len()];
    leaders[0] = true;
    for insn in &body.insns {
        if let Some(t) = insn.op.target().filter(|t| *t < leaders.len()) {
            leaders[t] = true;
        }
    }
    let mut block_of = vec![None; body.insns.len()];
    let mut n = 0;
    for (i, is) in leaders.iter().enumerate() {
        if *is {
            block_of[i] = Some(n);
            n += 1;
        }
    }
    let locals = [(4u32, ValType::I32), (4 + VCAP as u32, ValType::I64)];
    let mut a = Asm::new(0, &locals);
    // Load the cached registers.
    a.i()
        .global_get(g::TSP)
        .local_set(TSP)
        .global_get(g::JC)
        .local_set(JC);
    if !ctx.stack.elide && body.insns.iter().any(|i| may_write_stack(&i.op)) {
        a.i().i32_const(1).global_set(g::STACK_DIRTY);
    }
    let loop_end = structured_loops(body, &block_of, n);
    let region = loop_regions(&loop_end);
    let unroll = unrollable_loops(body, &block_of, &loop_end);
    let dispatch = a.loop_();
    let exc = a.block();
    let mut block_labels = vec![Label(u32::MAX); n];
    // Open the top-level blocks, b_{n-1} (outermost) … b_0 (innermost); the
    // blocks inside a structured loop are opened inside it.
    for i in (0..n).rev() {
        if region[i].is_none() {
            block_labels[i] = a.block();
        }
    }
    a.i().local_get(PC);
    // Only the entry, handlers and heads of unstructured loops are ever
    // dispatched to (all top-level blocks). The other entries of the table
    // go to the entry block, which expects nothing in the cache: a dead
    // table entry to a block that expects cached values would keep those
    // locals live around the dispatch loop, and so across every call, which
    // costs Cranelift registers inside loops.
    let dispatched = dispatch_targets(body, &block_of, &loop_end);
    let targets: Vec<Label> = (0..n)
        .map(|i| block_labels[if dispatched[i] { i } else { 0 }])
        .collect();
    a.br_table(&targets, block_labels[0]);
    let is_proc = matches!(body.owner, BodyOwner::Proc(_));
    let mut bg = BodyGen {
        a,
        ctx,
        program,
        body,
        is_proc,
        vstack: Vec::new(),
        block_k: block_cache_sizes(body, &block_of, n),
        tdelta: 0,
        block_of,
        block_labels,
        loop_labels: vec![Label(u32::MAX); n],
        loop_end,
        unroll,
        unroll_exit: None,
        exc,
        dispatch,
        cur_block: 0,
        marks: Vec::new(),
    };
    for (i, insn) in body.insns.iter().enumerate() {
        if let Some(b) = bg.block_of[i] {
            // Fall into the next block with the cache it expects.
            let k = bg.block_k[b];
            bg.canonicalize(k);
            let lbl = bg.block_labels[b];
            bg.a.end(lbl);
            if bg.loop_end[b].is_some() {
                bg.loop_labels[b] = bg.a.loop_();
                for j in (b + 1..n).rev() {
                    if region[j] == Some(b) {
                        bg.block_labels[j] = bg.a.block();
                    }
                }
                if bg.unroll[b].is_some() {
                    bg.unroll_exit = Some(bg.a.block());
                }
            }
            bg.cur_block = b;
            bg.vstack = vec![VItem::Local; k];
            bg.tdelta = 0;
        }
        bg.marks.push((i, bg.a.byte_len()));
        match bg.unroll[bg.cur_block] {
            Some(u) if u.back_edge == i => bg.unrolled_loop(u),
            _ => bg.insn(insn),
        }
        if i + 1 == body.insns.len() || bg.block_of[i + 1].is_some() {
            // Close the loops that end with this block, innermost first.
            let cur = bg.cur_block;
            for h in (0..=cur).rev() {
                if bg.loop_end[h] == Some(cur) {
                    let l = bg.loop_labels[h];
                    bg.a.end(l);
                }
            }
        }
    }
    // The last instruction is always a terminator; nothing falls out of the last block.
    bg.a.i().unreachable();
    let exc = bg.exc;
    bg.a.end(exc);
    // Exception tail: R holds a handler block (≥ 0), PROPAGATE or TERMINATE.
    bg.a.i().local_get(R).i32_const(0).i32_ge_s();
    let handler = bg.a.if_();
    bg.a.i()
        .local_get(R)
        .local_set(PC)
        .global_get(g::TSP)
        .local_set(TSP);
    let d = bg.dispatch;
    bg.a.br(d);
    bg.a.end(handler);
    bg.a.i()
        .i32_const(status::TERMINATE)
        .i32_const(status::EXCEPTION)
        .local_get(R)
        .i32_const(raised::TERMINATE)
        .i32_eq()
        .select()
        .return_();
    let d = bg.dispatch;
    bg.a.end(d);
    bg.a.i().unreachable();
    let marks = std::mem::take(&mut bg.marks);
    (bg.a.finish(), marks)
}

impl BodyGen<'_> {
    // ---- stack cache ---------------------------------------------------------

    /// Whether pushes skip the write-through store (see the module documentation).
    fn elide(&self) -> bool {
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
    fn tsp_plus(&mut self, k: i32) {
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
    fn push(&mut self) {
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

    fn push_const(&mut self, v: u64) {
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
    fn pop(&mut self) {
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
    fn pop_to(&mut self, dst: u32) {
        self.pop();
        self.a.i().local_set(dst);
    }

    /// Copies TOS (not popped) onto the Wasm operand stack.
    fn peek(&mut self) {
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
    fn flush(&mut self) {
        self.spill_all();
        self.vstack.clear();
    }

    /// Completes the memory stack and publishes TSP and the jump counter to
    /// their globals, so an exception raised now sees the right stack; the
    /// cache stays valid.
    fn publish(&mut self) {
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
    fn canonicalize(&mut self, k: usize) {
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
    fn sync_out(&mut self) {
        self.flush();
        self.commit();
        self.a
            .i()
            .local_get(TSP)
            .global_set(g::TSP)
            .local_get(JC)
            .global_set(g::JC);
    }

    fn sync_in(&mut self) {
        self.a.i().global_get(g::TSP).local_set(TSP);
    }

    /// Calls a helper that uses the memory stack.
    fn call_helper(&mut self, h: Helper) {
        self.sync_out();
        self.a.i().call(self.ctx.helper(h));
        self.sync_in();
    }

    // ---- exceptions ------------------------------------------------------

    /// After a helper returned its exception bits `e` (i32 on the stack):
    /// raise when non-zero, continue when ignored.
    fn check_e(&mut self) {
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
    fn raise_if(&mut self, code: Exception, p1: impl FnOnce(&mut Asm), p2: impl FnOnce(&mut Asm)) {
        let bad = self.a.if_();
        self.publish();
        self.raise_with(code, p1, p2);
        self.a.end(bad);
    }

    fn raise_const(&mut self, code: Exception, p1: u64, p2: u64) {
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
    fn terminate(&mut self, outcome: Outcome) {
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
    fn count_branch(&mut self) {
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
    fn goto(&mut self, t: InsnIdx) {
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
    fn direct_label(&self, t: InsnIdx) -> Option<Label> {
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
    fn loop_step(&mut self) {
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
    fn unrolled_loop(&mut self, u: Unroll) {
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
    fn cond_branch(&mut self, t: InsnIdx, test: impl FnOnce(&mut Asm)) {
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

    fn var_op(&mut self, op: VarOp, space: VarSpace, imm: Option<u16>) {
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

    fn slot_op(&mut self, op: SlotOp, rel: StackRel, imm: Option<i16>) {
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

    // ---- instructions --------------------------------------------------------

    fn binop(&mut self, f: impl FnOnce(&mut Asm)) {
        self.pop();
        self.pop();
        f(&mut self.a);
        self.push();
    }

    fn trace_vars(&mut self, space: VarSpace) {
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
    fn frame_store(&mut self, f: u32, v: impl FnOnce(&mut Asm)) {
        self.a
            .i()
            .global_get(g::DEPTH)
            .i32_const(l::FRAME_BYTES as i32)
            .i32_mul();
        v(&mut self.a);
        self.a.i().i64_store(mem(l::FRAMES + f, 3));
    }

    fn mem_read(&mut self, w: Width) {
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

    fn mem_write(&mut self, w: Width) {
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

    fn insn(&mut self, insn: &Insn) {
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

    /// Status (i32) of an I/O import on the stack: raise INVALID_OPERAND(5, port in A) unless OK.
    fn io_check(&mut self) {
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

    fn push_import(&mut self, id: ImportId) {
        self.a.i().call(self.ctx.import(id));
        self.push();
    }

    /// Calls a stack-using helper returning exception bits, with an optional i32 argument.
    /// `log n`. When the n values are cached and the log area has room for
    /// them (checked at run time), they are stored straight into it: no
    /// spill, no helper call. Otherwise (and for overflow, with its partial
    /// effects) the `rt_logn` helper does it. Both paths end with the cache
    /// flushed and TSP published.
    fn log_words(&mut self, n: u16) {
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

    fn helper_e(&mut self, h: Helper, arg: Option<i32>) {
        self.sync_out();
        if let Some(v) = arg {
            self.a.i().i32_const(v);
        }
        self.a.i().call(self.ctx.helper(h));
        self.sync_in();
        self.check_e();
    }

    fn divide(&mut self, signed: bool) {
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

    fn call(&mut self, p: ProcId, insn: &Insn) {
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

/// The natural loops of a body that can be Wasm `loop`s: for each block
/// that heads one, the last block of the loop. A loop `[b, c]` (c the last
/// block with a backward branch to b) qualifies when no branch enters it
/// other than at b, no block inside it is reached through the dispatch
/// (handler entries, heads of loops that do not qualify), and it nests
/// properly with the other loops.
fn structured_loops(body: &Body, block_of: &[Option<usize>], n: usize) -> Vec<Option<usize>> {
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
struct Unroll {
    /// The loop's first instruction (the head block's leader).
    head: usize,
    /// The `loop` instruction that branches back to `head`.
    back_edge: usize,
    /// Copies of the body, the first included.
    copies: usize,
}

/// Bodies of at most this many instructions are unrolled four times, of at
/// most twice as many twice; longer ones are not unrolled.
const UNROLL_SMALL_BODY: usize = 8;

/// For each block, the unrolling of the loop it heads, if any: a structured
/// loop of one block whose first branch is the `loop` back to its head,
/// preceded only by straight-line instructions (no branch, `sx`, call or
/// terminator). Straight-line code from the same compile-time state
/// compiles to the same code, which is what makes the copies agree.
fn unrollable_loops(
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
fn dispatch_targets(
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
fn loop_regions(loop_end: &[Option<usize>]) -> Vec<Option<usize>> {
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
fn block_cache_sizes(body: &Body, block_of: &[Option<usize>], n_blocks: usize) -> Vec<usize> {
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
fn may_write_stack(op: &Op) -> bool {
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
