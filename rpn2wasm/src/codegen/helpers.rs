//! Internal Wasm functions shared by all bodies of a compiled program: the
//! exception machinery (§10.4–10.5), call frames, the logging instructions
//! (§9.3), stack traces (§12), the heap extension (§9.15) and record
//! emission (§11.1). They keep the machine state in globals and linear
//! memory (see `layout`); body code synchronises its cached TSP first.
//!
//! This file holds the helper list, the small emitters the helpers share,
//! [`build`] and the `emit`, `dup` and `pbl`/`pbr`/`pzl`/`pzr` helpers.
//! Submodules: `machine` exceptions, call frames, the memory stack and item
//! descriptors; `log` the logging instructions; `stacktrace` `log st` and the
//! `pop lp`/`pop stp` instructions; `heap` the heap extension.

mod heap;
mod log;
mod machine;
mod stacktrace;

use super::Ctx;
use super::asm::Asm;
use super::layout::{self as l, g};
use heap::{free, heap_find, malloc, pop_h, push_h};
use hostabi::ImportId;
use log::{log_count, log_mrf, log_n, log_str, log_vars};
use machine::{add_item, check, dispatch, enter, leave, pop, push, raise};
use stacktrace::{log_st, pop_lp, pop_stp};
use wasm_encoder::{Function, ValType};

/// Every helper, in function-index order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helper {
    /// `(code i64, p1 i64, p2 i64, from_rx i32) -> i32`: generate an exception.
    Raise,
    /// `() -> i32`: find a handler in the current frame, or propagate/terminate.
    Dispatch,
    /// `(e i32) -> i32`: `IGNORED` when e = 0, else raise e with the pending params.
    Check,
    /// `(called i64, ret i64) -> i32`: push a call frame (e = 0x10 when too deep).
    Enter,
    /// `()`: pop a call frame, restoring SBP.
    Leave,
    /// `(v i64)`: push on the memory stack (global TSP).
    Push,
    /// `() -> i64`: pop from the memory stack.
    Pop,
    /// `(kind i32)`: add an item descriptor at LP.
    AddItem,
    /// `(n i32) -> i32`: `log n`.
    LogN,
    /// `(n i32) -> i32`: `log b, n`.
    LogB,
    /// `() -> i32`: `log`.
    LogCount,
    /// `() -> i32`: `log str`.
    LogStr,
    /// `() -> i32`: `log mrf`.
    LogMrf,
    /// `() -> i32`: `log lv`.
    LogLv,
    /// `() -> i32`: `log gv`.
    LogGv,
    /// `()`: append a stack trace.
    LogSt,
    /// `(v i64)`: `pop lp`.
    PopLp,
    /// `(v i64)`: `pop stp`.
    PopStp,
    /// `()`: emit the records of this hit.
    Emit,
    /// `(v i64, count i32)`: push `count` copies of v.
    Dup,
    /// `(v i64, n i64) -> i64`: `pbl` with 1 ≤ n ≤ 64.
    Pbl,
    /// `(v i64, n i64) -> i64`: `pbr`.
    Pbr,
    /// `(v i64, n i64) -> i64`: `pzl`.
    Pzl,
    /// `(v i64, n i64) -> i64`: `pzr`.
    Pzr,
    /// `(h i64) -> i32`: heap table index of live handle h, or -1.
    HeapFind,
    /// `() -> i32`: `malloc`.
    Malloc,
    /// `() -> i32`: `free`.
    Free,
    /// `(width i32, k i32) -> i32`: `pushh`.
    PushH,
    /// `(width i32, k i32) -> i32`: `poph`.
    PopH,
}

/// All helpers in index order.
pub const HELPERS: &[Helper] = &[
    Helper::Raise,
    Helper::Dispatch,
    Helper::Check,
    Helper::Enter,
    Helper::Leave,
    Helper::Push,
    Helper::Pop,
    Helper::AddItem,
    Helper::LogN,
    Helper::LogB,
    Helper::LogCount,
    Helper::LogStr,
    Helper::LogMrf,
    Helper::LogLv,
    Helper::LogGv,
    Helper::LogSt,
    Helper::PopLp,
    Helper::PopStp,
    Helper::Emit,
    Helper::Dup,
    Helper::Pbl,
    Helper::Pbr,
    Helper::Pzl,
    Helper::Pzr,
    Helper::HeapFind,
    Helper::Malloc,
    Helper::Free,
    Helper::PushH,
    Helper::PopH,
];

use ValType::{I32, I64};

impl Helper {
    /// Parameter and result types.
    pub fn sig(self) -> (&'static [ValType], &'static [ValType]) {
        use Helper::*;
        match self {
            Raise => (&[I64, I64, I64, I32], &[I32]),
            Dispatch | LogCount | LogStr | LogMrf | LogLv | LogGv | Malloc | Free => (&[], &[I32]),
            Check | LogN | LogB => (&[I32], &[I32]),
            Enter => (&[I64, I64], &[I32]),
            Leave | LogSt | Emit => (&[], &[]),
            Push | PopLp | PopStp => (&[I64], &[]),
            Pop => (&[], &[I64]),
            AddItem => (&[I32], &[]),
            Dup => (&[I64, I32], &[]),
            Pbl | Pbr | Pzl | Pzr => (&[I64, I64], &[I64]),
            HeapFind => (&[I64], &[I32]),
            PushH | PopH => (&[I32, I32], &[I32]),
        }
    }

    /// Host imports this helper calls.
    pub fn imports(self) -> &'static [ImportId] {
        match self {
            Helper::LogStr => &[ImportId::read_str],
            Helper::LogMrf => &[ImportId::read_mem],
            Helper::LogGv => &[ImportId::gvar_count, ImportId::gvar_get],
            Helper::LogSt => &[ImportId::gvar_get],
            Helper::Emit => &[ImportId::emit_log, ImportId::emit_stacktrace],
            _ => &[],
        }
    }
}

/// Emits `global.get`.
fn gg(a: &mut Asm, i: u32) {
    a.i().global_get(i);
}

/// Emits `global.set`.
fn gs(a: &mut Asm, i: u32) {
    a.i().global_set(i);
}

/// Address of the current frame (`FRAMES + depth * FRAME_BYTES`) on the stack.
fn cur_frame(a: &mut Asm) {
    gg(a, g::DEPTH);
    a.i().i32_const(l::FRAME_BYTES as i32).i32_mul();
}

/// `g = g + delta` for an i32 global.
fn gadd(a: &mut Asm, i: u32, delta: i32) {
    gg(a, i);
    a.i().i32_const(delta).i32_add();
    gs(a, i);
}

/// Sets PP1/PP2 from the given emitters and returns the exception bits `e`.
fn ret_exc(a: &mut Asm, e: u16, p1: impl FnOnce(&mut Asm), p2: impl FnOnce(&mut Asm)) {
    p1(a);
    gs(a, g::PP1);
    p2(a);
    gs(a, g::PP2);
    a.i().i32_const(e as i32).return_();
}

/// LOG_OVERFLOW(logmax, 0) with the PLP left at the start of the instruction.
fn ret_overflow(a: &mut Asm, ctx: &Ctx) {
    let logmax = ctx.logmax as i64;
    ret_exc(
        a,
        hostabi::Exception::LogOverflow.bit(),
        |a| {
            a.i().i64_const(logmax);
        },
        |a| {
            a.i().i64_const(0);
        },
    );
}

/// Pushes `room = logmax - LP` (i32).
fn room(a: &mut Asm, ctx: &Ctx) {
    a.i().i32_const(ctx.logmax as i32);
    gg(a, g::LP);
    a.i().i32_sub();
}

/// Builds the body of `h`.
pub fn build(h: Helper, ctx: &Ctx) -> Function {
    match h {
        Helper::Raise => raise(ctx),
        Helper::Dispatch => dispatch(),
        Helper::Check => check(ctx),
        Helper::Enter => enter(),
        Helper::Leave => leave(),
        Helper::Push => push(),
        Helper::Pop => pop(),
        Helper::AddItem => add_item(),
        Helper::LogN => log_n(ctx, false),
        Helper::LogB => log_n(ctx, true),
        Helper::LogCount => log_count(ctx),
        Helper::LogStr => log_str(ctx),
        Helper::LogMrf => log_mrf(ctx),
        Helper::LogLv => log_vars(ctx, false),
        Helper::LogGv => log_vars(ctx, true),
        Helper::LogSt => log_st(ctx),
        Helper::PopLp => pop_lp(),
        Helper::PopStp => pop_stp(ctx),
        Helper::Emit => emit(ctx),
        Helper::Dup => dup(ctx),
        Helper::Pbl | Helper::Pbr | Helper::Pzl | Helper::Pzr => prop(h),
        Helper::HeapFind => heap_find(),
        Helper::Malloc => malloc(ctx),
        Helper::Free => free(ctx),
        Helper::PushH => push_h(ctx),
        Helper::PopH => pop_h(ctx),
    }
}

fn emit(ctx: &Ctx) -> Function {
    let mut a = Asm::new(0, &[]);
    gg(&mut a, g::MAJOR);
    gg(&mut a, g::MINOR);
    a.i().i32_const(l::LOG as i32);
    gg(&mut a, g::LP);
    a.i().i32_const(l::ITEMS as i32);
    gg(&mut a, g::ITEMS);
    a.i().call(ctx.import(ImportId::emit_log)).drop();
    gg(&mut a, g::STP);
    let any = a.if_();
    a.i().i32_const(l::STACKTRACE as i32);
    gg(&mut a, g::STP);
    a.i().call(ctx.import(ImportId::emit_stacktrace)).drop();
    a.end(any);
    a.finish()
}

fn dup(ctx: &Ctx) -> Function {
    let mut a = Asm::new(2, &[]);
    let blk = a.block();
    let lp = a.loop_();
    a.i().local_get(1).i32_eqz();
    a.br_if(blk);
    a.i().local_get(0).call(ctx.helper(Helper::Push));
    a.i().local_get(1).i32_const(1).i32_sub().local_set(1);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    a.finish()
}

fn prop(h: Helper) -> Function {
    // params: 0 v, 1 n (1..=64); local 2: mask
    let mut a = Asm::new(2, &[(1, I64)]);
    match h {
        Helper::Pbl => {
            a.i()
                .local_get(0)
                .i64_const(64)
                .local_get(1)
                .i64_sub()
                .local_tee(2)
                .i64_shl()
                .local_get(2)
                .i64_shr_s();
        }
        Helper::Pbr => {
            // mask = -1 >> (64 - n); b = (v >> (n-1)) & 1
            a.i()
                .i64_const(-1)
                .i64_const(64)
                .local_get(1)
                .i64_sub()
                .i64_shr_u()
                .local_set(2);
            a.i().local_get(0).local_get(2).i64_or();
            a.i()
                .local_get(0)
                .local_get(2)
                .i64_const(-1)
                .i64_xor()
                .i64_and();
            a.i()
                .local_get(0)
                .local_get(1)
                .i64_const(1)
                .i64_sub()
                .i64_shr_u()
                .i64_const(1)
                .i64_and()
                .i32_wrap_i64();
            a.i().select();
        }
        Helper::Pzl => {
            a.i()
                .local_get(0)
                .i64_const(-1)
                .i64_const(64)
                .local_get(1)
                .i64_sub()
                .i64_shr_u()
                .i64_and();
        }
        _ => {
            a.i()
                .local_get(0)
                .i64_const(-1)
                .local_get(1)
                .i64_const(1)
                .i64_sub()
                .i64_shl()
                .i64_and();
        }
    }
    a.finish()
}
