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
//!
//! Submodules: `cache` the stack cache and the TSP/jump-counter locals;
//! `control` exceptions and branches; `vars` variables and TSP/SBP slots;
//! `ops` emitters shared by instructions (arithmetic, memory, I/O, log,
//! helpers, calls); `insn` the per-instruction translation; `analysis` the
//! loop and block analyses done before emission.

mod analysis;
mod cache;
mod control;
mod insn;
mod ops;
mod vars;

use super::Ctx;
use super::asm::{Asm, Label};
use super::layout::{g, raised, status};
use crate::ast::*;
use analysis::{
    Unroll, block_cache_sizes, dispatch_targets, loop_regions, may_write_stack, structured_loops,
    unrollable_loops,
};
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
