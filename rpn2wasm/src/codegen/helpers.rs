//! Internal Wasm functions shared by all bodies of a compiled program: the
//! exception machinery (§10.4–10.5), call frames, the logging instructions
//! (§9.3), stack traces (§12), the heap extension (§9.15) and record
//! emission (§11.1). They keep the machine state in globals and linear
//! memory (see `layout`); body code synchronises its cached TSP first.

use super::Ctx;
use super::asm::{Asm, mem};
use super::layout::{self as l, frame, g, raised};
use hostabi::ImportId;
use hostabi::record::{ItemKind, token};
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

fn raise(ctx: &Ctx) -> Function {
    // params: 0 code, 1 p1, 2 p2, 3 from_rx; local 4: x (i32)
    let mut a = Asm::new(4, &[(1, I32)]);
    a.i()
        .local_get(0)
        .i32_wrap_i64()
        .i32_const(0xFFFF)
        .i32_and()
        .local_set(4);
    let record_last = |a: &mut Asm| {
        a.i().local_get(0);
        gs(a, g::EXC_CODE);
        cur_frame(a);
        a.i().i64_load(mem(l::FRAMES + frame::HANDLER_OFF, 3));
        gs(a, g::EXC_HANDLER);
        a.i().local_get(1);
        gs(a, g::EXC_P1);
        a.i().local_get(2);
        gs(a, g::EXC_P2);
    };
    // Generated?
    a.i().local_get(4);
    gg(&mut a, g::MASK);
    a.i().i32_and();
    let generated = a.if_();
    record_last(&mut a);
    a.i().local_get(3).i32_eqz();
    let push3 = a.if_();
    let push_f = ctx.helper(Helper::Push);
    a.i()
        .local_get(2)
        .call(push_f)
        .local_get(1)
        .call(push_f)
        .local_get(0)
        .call(push_f);
    a.end(push3);
    if ctx.autostacktrace {
        a.i().call(ctx.helper(Helper::LogSt));
    }
    a.i().call(ctx.helper(Helper::Dispatch)).return_();
    a.end(generated);
    // Masked non-maskable: terminate.
    a.i()
        .local_get(4)
        .i32_const(hostabi::status::NON_MASKABLE_BITS as i32)
        .i32_and();
    let fatal = a.if_();
    record_last(&mut a);
    if ctx.autostacktrace {
        a.i().call(ctx.helper(Helper::LogSt));
    }
    a.i().i32_const(hostabi::Outcome::Uncaught as i32);
    gs(&mut a, g::OUTCOME);
    a.i().i32_const(raised::TERMINATE).return_();
    a.end(fatal);
    a.i().i32_const(raised::IGNORED);
    a.finish()
}

fn dispatch() -> Function {
    // local 0: frame address, local 1: handler block
    let mut a = Asm::new(0, &[(2, I32)]);
    cur_frame(&mut a);
    a.i()
        .local_tee(0)
        .i64_load(mem(l::FRAMES + frame::HANDLER_BLOCK, 3))
        .i32_wrap_i64()
        .local_tee(1);
    a.i().i32_const(0).i32_ge_s();
    let found = a.if_();
    a.i()
        .local_get(0)
        .i64_const(hostabi::record::HANDLER_NONE as i64)
        .i64_store(mem(l::FRAMES + frame::HANDLER_OFF, 3));
    a.i()
        .local_get(0)
        .i64_const(-1)
        .i64_store(mem(l::FRAMES + frame::HANDLER_BLOCK, 3));
    a.i().local_get(1).return_();
    a.end(found);
    gg(&mut a, g::DEPTH);
    a.i().i32_eqz();
    let base = a.if_();
    a.i().i32_const(hostabi::Outcome::Uncaught as i32);
    gs(&mut a, g::OUTCOME);
    a.i().i32_const(raised::TERMINATE).return_();
    a.end(base);
    a.i()
        .local_get(0)
        .i64_load(mem(l::FRAMES + frame::SAVED_SBP, 3))
        .i32_wrap_i64();
    gs(&mut a, g::SBP);
    gadd(&mut a, g::DEPTH, -1);
    a.i().i32_const(raised::PROPAGATE);
    a.finish()
}

fn check(ctx: &Ctx) -> Function {
    let mut a = Asm::new(1, &[]);
    a.i().local_get(0).i32_eqz();
    let ok = a.if_();
    a.i().i32_const(raised::IGNORED).return_();
    a.end(ok);
    a.i().local_get(0).i64_extend_i32_u();
    gg(&mut a, g::PP1);
    gg(&mut a, g::PP2);
    a.i().i32_const(0).call(ctx.helper(Helper::Raise));
    a.finish()
}

fn enter() -> Function {
    // params: 0 called, 1 ret; local 2: frame address
    let mut a = Asm::new(2, &[(1, I32)]);
    gg(&mut a, g::DEPTH);
    a.i().i32_const(l::MAX_CALL_DEPTH as i32).i32_ge_u();
    let deep = a.if_();
    ret_exc(
        &mut a,
        hostabi::Exception::CallStackOverflow.bit(),
        |a| {
            a.i().i64_const(l::MAX_CALL_DEPTH as i64);
        },
        |a| {
            a.i().i64_const(0);
        },
    );
    a.end(deep);
    gadd(&mut a, g::DEPTH, 1);
    cur_frame(&mut a);
    a.i().local_set(2);
    a.i()
        .local_get(2)
        .i32_const(l::FRAMES as i32)
        .i32_add()
        .i32_const(0)
        .i32_const(l::FRAME_BYTES as i32)
        .memory_fill(0);
    a.i().local_get(2);
    gg(&mut a, g::SBP);
    a.i()
        .i64_extend_i32_u()
        .i64_store(mem(l::FRAMES + frame::SAVED_SBP, 3));
    a.i()
        .local_get(2)
        .i64_const(hostabi::record::HANDLER_NONE as i64)
        .i64_store(mem(l::FRAMES + frame::HANDLER_OFF, 3));
    a.i()
        .local_get(2)
        .i64_const(-1)
        .i64_store(mem(l::FRAMES + frame::HANDLER_BLOCK, 3));
    a.i()
        .local_get(2)
        .local_get(0)
        .i64_store(mem(l::FRAMES + frame::CALLED, 3));
    a.i()
        .local_get(2)
        .local_get(1)
        .i64_store(mem(l::FRAMES + frame::RET, 3));
    a.i().i32_const(0);
    a.finish()
}

fn leave() -> Function {
    let mut a = Asm::new(0, &[]);
    cur_frame(&mut a);
    a.i()
        .i64_load(mem(l::FRAMES + frame::SAVED_SBP, 3))
        .i32_wrap_i64();
    gs(&mut a, g::SBP);
    gadd(&mut a, g::DEPTH, -1);
    a.finish()
}

fn push() -> Function {
    let mut a = Asm::new(1, &[]);
    gg(&mut a, g::TSP);
    a.i().i32_const(1).i32_sub().i32_const(1023).i32_and();
    gs(&mut a, g::TSP);
    gg(&mut a, g::TSP);
    a.i()
        .i32_const(3)
        .i32_shl()
        .local_get(0)
        .i64_store(mem(l::STACK, 3));
    a.finish()
}

fn pop() -> Function {
    let mut a = Asm::new(0, &[]);
    gg(&mut a, g::TSP);
    a.i().i32_const(3).i32_shl().i64_load(mem(l::STACK, 3));
    gg(&mut a, g::TSP);
    a.i().i32_const(1).i32_add().i32_const(1023).i32_and();
    gs(&mut a, g::TSP);
    a.finish()
}

fn add_item() -> Function {
    let mut a = Asm::new(1, &[]);
    gg(&mut a, g::ITEMS);
    a.i().i32_const(2).i32_shl();
    gg(&mut a, g::LP);
    a.i()
        .local_get(0)
        .i32_const(16)
        .i32_shl()
        .i32_or()
        .i32_store(mem(l::ITEMS, 2));
    gadd(&mut a, g::ITEMS, 1);
    a.finish()
}

/// `log n` (8 bytes per element) or `log b, n` (1 byte).
fn log_n(ctx: &Ctx, bytes: bool) -> Function {
    // param 0: n; local 1: k
    let mut a = Asm::new(1, &[(1, I32)]);
    let unit = if bytes { 1 } else { 8 };
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    // k = min(n, room / unit)
    room(&mut a, ctx);
    if !bytes {
        a.i().i32_const(3).i32_shr_u();
    }
    a.i()
        .local_tee(1)
        .local_get(0)
        .local_get(1)
        .local_get(0)
        .i32_lt_u()
        .select()
        .local_set(1);
    a.i().local_get(1);
    let any = a.if_();
    let kind = if bytes {
        ItemKind::RawBytes
    } else {
        ItemKind::RawWords
    };
    a.i()
        .i32_const(kind as i32)
        .call(ctx.helper(Helper::AddItem));
    let blk = a.block();
    let lp = a.loop_();
    a.i().local_get(1).i32_eqz();
    a.br_if(blk);
    gg(&mut a, g::LP);
    a.i().call(ctx.helper(Helper::Pop));
    if bytes {
        a.i().i64_store8(mem(l::LOG, 0));
    } else {
        a.i().i64_store(mem(l::LOG, 0));
    }
    gadd(&mut a, g::LP, unit);
    a.i().local_get(1).i32_const(1).i32_sub().local_set(1);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    a.end(any);
    // Everything asked for written?
    a.i().i32_const(ctx.logmax as i32);
    gg(&mut a, g::PLP);
    a.i().i32_sub();
    if !bytes {
        a.i().i32_const(3).i32_shr_u();
    }
    a.i().local_get(0).i32_lt_u();
    let short = a.if_();
    ret_overflow(&mut a, ctx);
    a.end(short);
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    a.i().i32_const(0);
    a.finish()
}

/// Writes `token, u16 count` at LP and an item descriptor; LP += 3.
fn token_header(a: &mut Asm, ctx: &Ctx, tok: u8, count: impl FnOnce(&mut Asm)) {
    a.i()
        .i32_const(ItemKind::Tokenized as i32)
        .call(ctx.helper(Helper::AddItem));
    gg(a, g::LP);
    a.i().i32_const(tok as i32).i32_store8(mem(l::LOG, 0));
    gg(a, g::LP);
    count(a);
    a.i().i32_store16(mem(l::LOG + 1, 0));
    gadd(a, g::LP, 3);
}

/// If room < 3: LOG_OVERFLOW, nothing written.
fn need_room(a: &mut Asm, ctx: &Ctx, n: i32) {
    room(a, ctx);
    a.i().i32_const(n).i32_lt_s();
    let short = a.if_();
    ret_overflow(a, ctx);
    a.end(short);
}

fn log_count(ctx: &Ctx) -> Function {
    // locals: 0 n (i32), 1 k
    let mut a = Asm::new(0, &[(2, I32)]);
    a.i()
        .call(ctx.helper(Helper::Pop))
        .i32_wrap_i64()
        .i32_const(0xFFFF)
        .i32_and()
        .local_set(0);
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    need_room(&mut a, ctx, 3);
    room(&mut a, ctx);
    a.i().i32_const(3).i32_sub().i32_const(3).i32_shr_u();
    a.i()
        .local_tee(1)
        .local_get(0)
        .local_get(1)
        .local_get(0)
        .i32_lt_u()
        .select()
        .local_set(1);
    token_header(&mut a, ctx, token::WORDS, |a| {
        a.i().local_get(1);
    });
    let blk = a.block();
    let lp = a.loop_();
    a.i().local_get(1).i32_eqz();
    a.br_if(blk);
    gg(&mut a, g::LP);
    a.i()
        .call(ctx.helper(Helper::Pop))
        .i64_store(mem(l::LOG, 0));
    gadd(&mut a, g::LP, 8);
    a.i().local_get(1).i32_const(1).i32_sub().local_set(1);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    // k < n ?
    gg(&mut a, g::LP);
    gg(&mut a, g::PLP);
    a.i()
        .i32_sub()
        .i32_const(3)
        .i32_sub()
        .i32_const(3)
        .i32_shr_u()
        .local_get(0)
        .i32_lt_u();
    let short = a.if_();
    ret_overflow(&mut a, ctx);
    a.end(short);
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    a.i().i32_const(0);
    a.finish()
}

/// Writes a fault record for address `addr_local` at LP if 11 bytes fit,
/// then returns INVALID_ADDR(addr, 0).
fn fault(a: &mut Asm, ctx: &Ctx, addr_local: u32) {
    room(a, ctx);
    a.i().i32_const(11).i32_ge_s();
    let fits = a.if_();
    token_header(a, ctx, token::FAULT, |a| {
        a.i().i32_const(8);
    });
    gg(a, g::LP);
    a.i().local_get(addr_local).i64_store(mem(l::LOG, 0));
    gadd(a, g::LP, 8);
    a.end(fits);
    ret_exc(
        a,
        hostabi::Exception::InvalidAddr.bit(),
        |a| {
            a.i().local_get(addr_local);
        },
        |a| {
            a.i().i64_const(0);
        },
    );
}

fn log_str(ctx: &Ctx) -> Function {
    // locals: 0 addr i64, 1 len i64, 2 avail i32, 3 max i32, 4 n i32, 5 m i32
    let mut a = Asm::new(0, &[(2, I64), (4, I32)]);
    let pop = ctx.helper(Helper::Pop);
    a.i().call(pop).local_set(0).call(pop).local_set(1);
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    need_room(&mut a, ctx, 3);
    room(&mut a, ctx);
    a.i().i32_const(3).i32_sub().local_set(2);
    // max = min(len, avail + 1)
    a.i().local_get(1);
    a.i().local_get(2).i32_const(1).i32_add().i64_extend_i32_u();
    a.i()
        .local_get(1)
        .local_get(2)
        .i32_const(1)
        .i32_add()
        .i64_extend_i32_u()
        .i64_lt_u();
    a.i().select().i32_wrap_i64().local_set(3);
    a.i().local_get(0);
    gg(&mut a, g::LP);
    a.i()
        .i32_const((l::LOG + 3) as i32)
        .i32_add()
        .local_get(3)
        .call(ctx.import(ImportId::read_str))
        .local_tee(4);
    a.i().i32_const(0).i32_lt_s();
    let faulted = a.if_();
    // fault address = addr + i, i = -n - 1
    a.i()
        .local_get(0)
        .i32_const(-1)
        .local_get(4)
        .i32_sub()
        .i64_extend_i32_u()
        .i64_add()
        .local_set(0);
    fault(&mut a, ctx, 0);
    a.end(faulted);
    // m = min(n, avail)
    a.i()
        .local_get(4)
        .local_get(2)
        .local_get(4)
        .local_get(2)
        .i32_lt_u()
        .select()
        .local_set(5);
    token_header(&mut a, ctx, token::STRING, |a| {
        a.i().local_get(5);
    });
    gg(&mut a, g::LP);
    a.i().local_get(5).i32_add();
    gs(&mut a, g::LP);
    a.i().local_get(4).local_get(2).i32_gt_u();
    let short = a.if_();
    ret_overflow(&mut a, ctx);
    a.end(short);
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    a.i().i32_const(0);
    a.finish()
}

fn log_mrf(ctx: &Ctx) -> Function {
    // locals: 0 addr i64, 1 len i64, 2 m i32, 3 k i32
    let mut a = Asm::new(0, &[(2, I64), (2, I32)]);
    let pop = ctx.helper(Helper::Pop);
    a.i().call(pop).local_set(0).call(pop).local_set(1);
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    need_room(&mut a, ctx, 3);
    // m = min(len, room - 3)
    a.i().local_get(1);
    room(&mut a, ctx);
    a.i().i32_const(3).i32_sub().i64_extend_i32_u();
    a.i().local_get(1);
    room(&mut a, ctx);
    a.i()
        .i32_const(3)
        .i32_sub()
        .i64_extend_i32_u()
        .i64_lt_u()
        .select()
        .i32_wrap_i64()
        .local_set(2);
    a.i().local_get(0);
    gg(&mut a, g::LP);
    a.i()
        .i32_const((l::LOG + 3) as i32)
        .i32_add()
        .local_get(2)
        .call(ctx.import(ImportId::read_mem))
        .local_tee(3);
    a.i().local_get(2).i32_lt_u();
    let faulted = a.if_();
    a.i()
        .local_get(0)
        .local_get(3)
        .i64_extend_i32_u()
        .i64_add()
        .local_set(0);
    fault(&mut a, ctx, 0);
    a.end(faulted);
    token_header(&mut a, ctx, token::MEMORY, |a| {
        a.i().local_get(2);
    });
    gg(&mut a, g::LP);
    a.i().local_get(2).i32_add();
    gs(&mut a, g::LP);
    a.i()
        .local_get(2)
        .i64_extend_i32_u()
        .local_get(1)
        .i64_lt_u();
    let short = a.if_();
    ret_overflow(&mut a, ctx);
    a.end(short);
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    a.i().i32_const(0);
    a.finish()
}

fn log_vars(ctx: &Ctx, global: bool) -> Function {
    // locals: 0 i i64, 1 n i64, 2 j i64, 3 limit i64, 4 idx i64, 5 count_pos i32
    let mut a = Asm::new(0, &[(5, I64), (1, I32)]);
    let pop = ctx.helper(Helper::Pop);
    a.i().call(pop).local_set(1).call(pop).local_set(0);
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    need_room(&mut a, ctx, 3);
    if global {
        a.i().call(ctx.import(ImportId::gvar_count)).local_set(3);
    } else {
        a.i().i64_const(ctx.vars as i64).local_set(3);
    }
    gg(&mut a, g::LP);
    a.i().local_set(5);
    let tok = if global {
        token::GLOBAL_VARS
    } else {
        token::LOCAL_VARS
    };
    token_header(&mut a, ctx, tok, |a| {
        a.i().i32_const(0);
    });
    let blk = a.block();
    let lp = a.loop_();
    a.i().local_get(2).local_get(1).i64_ge_u();
    a.br_if(blk);
    // idx = i + j; invalid when it wrapped or idx >= limit
    a.i()
        .local_get(0)
        .local_get(2)
        .i64_add()
        .local_tee(4)
        .local_get(0)
        .i64_lt_u();
    a.i().local_get(4).local_get(3).i64_ge_u().i32_or();
    let bad = a.if_();
    ret_exc(
        &mut a,
        hostabi::Exception::InvalidOperand.bit(),
        |a| {
            a.i().i64_const(if global { 2 } else { 1 });
        },
        |a| {
            a.i().local_get(4);
        },
    );
    a.end(bad);
    need_room(&mut a, ctx, 8);
    gg(&mut a, g::LP);
    if global {
        a.i().local_get(4).call(ctx.import(ImportId::gvar_get));
    } else {
        a.i()
            .local_get(4)
            .i32_wrap_i64()
            .i32_const(3)
            .i32_shl()
            .i64_load(mem(l::VARS, 3));
    }
    a.i().i64_store(mem(l::LOG, 0));
    gadd(&mut a, g::LP, 8);
    a.i()
        .local_get(5)
        .local_get(5)
        .i32_load16_u(mem(l::LOG + 1, 0))
        .i32_const(1)
        .i32_add()
        .i32_store16(mem(l::LOG + 1, 0));
    a.i().local_get(2).i64_const(1).i64_add().local_set(2);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    gg(&mut a, g::LP);
    gs(&mut a, g::PLP);
    a.i().i32_const(0);
    a.finish()
}

/// Size of the stack-trace header: `01 u16 L name` + 8 + 2*3 + `02 u16`.
fn st_header_bytes(ctx: &Ctx) -> i32 {
    (3 + ctx.name_len + 8 + 6 + 3) as i32
}

fn log_st(ctx: &Ctx) -> Function {
    // locals: 0 size i64, 1 d i32 (frame depth), 2 frame addr i32, 3 p i32 (write pos),
    //         4 j i64, 5 cnt i64, 6 start i64
    let mut a = Asm::new(0, &[(1, I64), (3, I32), (3, I64)]);
    let hdr = st_header_bytes(ctx);
    let cap = ctx.excpt_log as i32;
    gg(&mut a, g::STP);
    a.i().i32_eqz();
    let first = a.if_();
    if hdr > cap {
        a.i().return_();
    } else {
        let w16 = |a: &mut Asm, at: i32, v: &dyn Fn(&mut Asm)| {
            a.i().i32_const(at);
            v(a);
            a.i().i32_store16(mem(l::STACKTRACE, 0));
        };
        a.i()
            .i32_const(0)
            .i32_const(token::STRING as i32)
            .i32_store8(mem(l::STACKTRACE, 0));
        w16(&mut a, 1, &|a| {
            a.i().i32_const(ctx.name_len as i32);
        });
        a.i()
            .i32_const((l::STACKTRACE + 3) as i32)
            .i32_const(l::NAME as i32)
            .i32_const(ctx.name_len as i32)
            .memory_copy(0, 0);
        let p = 3 + ctx.name_len as i32;
        a.i().i32_const(p);
        gg(&mut a, g::LOCATION);
        a.i().i64_store(mem(l::STACKTRACE, 0));
        w16(&mut a, p + 8, &|a| {
            a.i().i32_const(ctx.id as i32);
        });
        w16(&mut a, p + 10, &|a| gg(a, g::MAJOR));
        w16(&mut a, p + 12, &|a| gg(a, g::MINOR));
        a.i()
            .i32_const(p + 14)
            .i32_const(token::TRACE_COUNT as i32)
            .i32_store8(mem(l::STACKTRACE, 0));
        w16(&mut a, p + 15, &|a| {
            a.i().i32_const(0);
        });
        a.i().i32_const(hdr);
        gs(&mut a, g::STP);
    }
    a.end(first);
    // size = 35 + sum over frames of 16 + 9 + 8 * (a + b + c), counts clamped so it cannot wrap.
    a.i().i64_const(35).local_set(0);
    gg(&mut a, g::DEPTH);
    a.i().local_set(1);
    let blk = a.block();
    let lp = a.loop_();
    a.i().local_get(1).i32_eqz();
    a.br_if(blk);
    a.i()
        .local_get(1)
        .i32_const(l::FRAME_BYTES as i32)
        .i32_mul()
        .local_set(2);
    a.i().local_get(0).i64_const(25).i64_add().local_set(0);
    for f in [frame::PV_COUNT, frame::LV_COUNT, frame::GV_COUNT] {
        // min(count, 4096) * 8
        a.i()
            .local_get(2)
            .i64_load(mem(l::FRAMES + f, 3))
            .local_tee(5)
            .i64_const(4096)
            .local_get(5)
            .i64_const(4096)
            .i64_lt_u()
            .select();
        a.i()
            .i64_const(3)
            .i64_shl()
            .local_get(0)
            .i64_add()
            .local_set(0);
    }
    a.i().local_get(1).i32_const(1).i32_sub().local_set(1);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    // Fits?
    gg(&mut a, g::STP);
    a.i()
        .i64_extend_i32_u()
        .local_get(0)
        .i64_add()
        .i64_const(cap as i64)
        .i64_gt_u();
    let nofit = a.if_();
    a.i().return_();
    a.end(nofit);
    // Write the record at p = STP.
    gg(&mut a, g::STP);
    a.i().local_set(3);
    let put64 = |a: &mut Asm, v: &dyn Fn(&mut Asm)| {
        a.i().local_get(3);
        v(a);
        a.i()
            .i64_store(mem(l::STACKTRACE, 0))
            .local_get(3)
            .i32_const(8)
            .i32_add()
            .local_set(3);
    };
    put64(&mut a, &|a| gg(a, g::EXC_CODE));
    put64(&mut a, &|a| gg(a, g::EXC_HANDLER));
    put64(&mut a, &|a| gg(a, g::EXC_P1));
    put64(&mut a, &|a| gg(a, g::EXC_P2));
    let put_tok = |a: &mut Asm, tok: u8, n: &dyn Fn(&mut Asm)| {
        a.i()
            .local_get(3)
            .i32_const(tok as i32)
            .i32_store8(mem(l::STACKTRACE, 0));
        a.i().local_get(3);
        n(a);
        a.i()
            .i32_store16(mem(l::STACKTRACE + 1, 0))
            .local_get(3)
            .i32_const(3)
            .i32_add()
            .local_set(3);
    };
    put_tok(&mut a, token::FRAME_COUNT, &|a| gg(a, g::DEPTH));
    gg(&mut a, g::DEPTH);
    a.i().local_set(1);
    let blk = a.block();
    let lp = a.loop_();
    a.i().local_get(1).i32_eqz();
    a.br_if(blk);
    a.i()
        .local_get(1)
        .i32_const(l::FRAME_BYTES as i32)
        .i32_mul()
        .local_set(2);
    put64(&mut a, &|a| {
        a.i()
            .local_get(2)
            .i64_load(mem(l::FRAMES + frame::CALLED, 3));
    });
    put64(&mut a, &|a| {
        a.i().local_get(2).i64_load(mem(l::FRAMES + frame::RET, 3));
    });
    for (tok, start, count) in [
        (token::STACK_SLOTS, frame::PV_START, frame::PV_COUNT),
        (token::LOCAL_VARS, frame::LV_START, frame::LV_COUNT),
        (token::GLOBAL_VARS, frame::GV_START, frame::GV_COUNT),
    ] {
        a.i()
            .local_get(2)
            .i64_load(mem(l::FRAMES + count, 3))
            .local_set(5);
        a.i()
            .local_get(2)
            .i64_load(mem(l::FRAMES + start, 3))
            .local_set(6);
        put_tok(&mut a, tok, &|a| {
            a.i().local_get(5).i32_wrap_i64();
        });
        a.i().i64_const(0).local_set(4);
        let b2 = a.block();
        let l2 = a.loop_();
        a.i().local_get(4).local_get(5).i64_ge_u();
        a.br_if(b2);
        put64(&mut a, &|a| {
            a.i().local_get(6).local_get(4).i64_add();
            match tok {
                token::STACK_SLOTS => {
                    a.i()
                        .i32_wrap_i64()
                        .i32_const(1023)
                        .i32_and()
                        .i32_const(3)
                        .i32_shl()
                        .i64_load(mem(l::STACK, 3));
                }
                token::LOCAL_VARS => {
                    a.i()
                        .i32_wrap_i64()
                        .i32_const(3)
                        .i32_shl()
                        .i64_load(mem(l::VARS, 3));
                }
                _ => {
                    a.i().call(ctx.import(ImportId::gvar_get));
                }
            }
        });
        a.i().local_get(4).i64_const(1).i64_add().local_set(4);
        a.br(l2);
        a.end(l2);
        a.end(b2);
    }
    a.i().local_get(1).i32_const(1).i32_sub().local_set(1);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    a.i().local_get(3);
    gs(&mut a, g::STP);
    // header record count += 1
    a.i()
        .i32_const(hdr - 2)
        .i32_const(hdr - 2)
        .i32_load16_u(mem(l::STACKTRACE, 0))
        .i32_const(1)
        .i32_add()
        .i32_store16(mem(l::STACKTRACE, 0));
    a.finish()
}

fn pop_lp() -> Function {
    let mut a = Asm::new(1, &[]);
    a.i().local_get(0);
    gg(&mut a, g::LP);
    a.i().i64_extend_i32_u().i64_lt_u();
    let shorter = a.if_();
    a.i().local_get(0).i32_wrap_i64();
    gs(&mut a, g::LP);
    // Drop item descriptors at or beyond the new LP (they are in increasing order).
    let blk = a.block();
    let lp = a.loop_();
    gg(&mut a, g::ITEMS);
    a.i().i32_eqz();
    a.br_if(blk);
    gg(&mut a, g::ITEMS);
    a.i()
        .i32_const(2)
        .i32_shl()
        .i32_load(mem(l::ITEMS - 4, 2))
        .i32_const(0xFFFF)
        .i32_and();
    gg(&mut a, g::LP);
    a.i().i32_lt_u();
    a.br_if(blk);
    gadd(&mut a, g::ITEMS, -1);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    a.end(shorter);
    a.finish()
}

fn pop_stp(ctx: &Ctx) -> Function {
    // param 0: v; locals: 1 target i32, 2 pos i32, 3 end i32, 4 nframes i32, 5 count i32
    let mut a = Asm::new(1, &[(5, I32)]);
    let hdr = st_header_bytes(ctx);
    gg(&mut a, g::STP);
    a.i().i32_eqz();
    let empty = a.if_();
    a.i().return_();
    a.end(empty);
    // target = min(v, STP)
    a.i().local_get(0);
    gg(&mut a, g::STP);
    a.i().i64_extend_i32_u();
    a.i().local_get(0);
    gg(&mut a, g::STP);
    a.i()
        .i64_extend_i32_u()
        .i64_lt_u()
        .select()
        .i32_wrap_i64()
        .local_tee(1);
    a.i().i32_const(hdr).i32_lt_u();
    let before = a.if_();
    a.i().i32_const(0);
    gs(&mut a, g::STP);
    a.i().return_();
    a.end(before);
    a.i().i32_const(hdr).local_set(2);
    let blk = a.block();
    let lp = a.loop_();
    // record at pos: 32 bytes, 03 u16 F, F frames
    a.i().local_get(2);
    gg(&mut a, g::STP);
    a.i().i32_ge_u();
    a.br_if(blk);
    a.i()
        .local_get(2)
        .i32_load16_u(mem(l::STACKTRACE + 33, 0))
        .local_set(4);
    a.i().local_get(2).i32_const(35).i32_add().local_set(3);
    let b2 = a.block();
    let l2 = a.loop_();
    a.i().local_get(4).i32_eqz();
    a.br_if(b2);
    a.i().local_get(3).i32_const(16).i32_add().local_set(3);
    for _ in 0..3 {
        a.i()
            .local_get(3)
            .local_get(3)
            .i32_load16_u(mem(l::STACKTRACE + 1, 0))
            .i32_const(3)
            .i32_shl()
            .i32_add()
            .i32_const(3)
            .i32_add()
            .local_set(3);
    }
    a.i().local_get(4).i32_const(1).i32_sub().local_set(4);
    a.br(l2);
    a.end(l2);
    a.end(b2);
    a.i().local_get(3).local_get(1).i32_gt_u();
    a.br_if(blk);
    a.i().local_get(3).local_set(2);
    a.i().local_get(5).i32_const(1).i32_add().local_set(5);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    a.i().local_get(2);
    gs(&mut a, g::STP);
    a.i()
        .i32_const(hdr - 2)
        .local_get(5)
        .i32_store16(mem(l::STACKTRACE, 0));
    a.finish()
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

/// Address of heap table entry `idx` (i32 on the stack) → entry address.
fn heap_entry(a: &mut Asm) {
    a.i().i32_const(l::HEAP_ENTRY_BYTES as i32).i32_mul();
}

fn heap_find() -> Function {
    // param 0: handle; local 1: i
    let mut a = Asm::new(1, &[(1, I32)]);
    let blk = a.block();
    let lp = a.loop_();
    a.i().local_get(1);
    gg(&mut a, g::HEAP_LIVE);
    a.i().i32_ge_u();
    a.br_if(blk);
    a.i().local_get(1);
    heap_entry(&mut a);
    a.i().i64_load(mem(l::HEAP_TABLE, 3)).local_get(0).i64_eq();
    let found = a.if_();
    a.i().local_get(1).return_();
    a.end(found);
    a.i().local_get(1).i32_const(1).i32_add().local_set(1);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    a.i().i32_const(-1);
    a.finish()
}

fn malloc(ctx: &Ctx) -> Function {
    // locals: 0 size i64, 1 i i32, 2 dst i32, 3 e i32 (entry addr)
    let mut a = Asm::new(0, &[(1, I64), (3, I32)]);
    a.i().call(ctx.helper(Helper::Pop)).local_set(0);
    let nomem = |a: &mut Asm| {
        ret_exc(
            a,
            hostabi::Exception::HeapNomem.bit(),
            |a| {
                a.i().local_get(0);
            },
            |a| {
                a.i().i64_const(0);
            },
        );
    };
    // used + size > cap, or too many blocks
    gg(&mut a, g::HEAP_USED);
    a.i().i64_extend_i32_u().local_get(0).i64_add();
    gg(&mut a, g::HEAP_CAP);
    a.i().i64_extend_i32_u().i64_gt_u();
    a.i()
        .local_get(0)
        .i64_const(l::HEAP_ARENA_BYTES as i64)
        .i64_gt_u()
        .i32_or();
    gg(&mut a, g::HEAP_LIVE);
    a.i()
        .i32_const(l::HEAP_MAX_BLOCKS as i32)
        .i32_ge_u()
        .i32_or();
    let full = a.if_();
    nomem(&mut a);
    a.end(full);
    // Compact when the bump pointer cannot take the block.
    gg(&mut a, g::HEAP_BUMP);
    a.i()
        .i64_extend_i32_u()
        .local_get(0)
        .i64_add()
        .i64_const(l::HEAP_ARENA_BYTES as i64)
        .i64_gt_u();
    let compact = a.if_();
    a.i().i32_const(0).local_set(2);
    a.i().i32_const(0).local_set(1);
    let blk = a.block();
    let lp = a.loop_();
    a.i().local_get(1);
    gg(&mut a, g::HEAP_LIVE);
    a.i().i32_ge_u();
    a.br_if(blk);
    a.i().local_get(1);
    heap_entry(&mut a);
    a.i().local_set(3);
    // memmove(arena + dst, arena + off, size); off = dst; dst += size
    a.i().local_get(2).i32_const(l::HEAP_ARENA as i32).i32_add();
    a.i()
        .local_get(3)
        .i32_load(mem(l::HEAP_TABLE + 8, 2))
        .i32_const(l::HEAP_ARENA as i32)
        .i32_add();
    a.i()
        .local_get(3)
        .i32_load(mem(l::HEAP_TABLE + 12, 2))
        .memory_copy(0, 0);
    a.i()
        .local_get(3)
        .local_get(2)
        .i32_store(mem(l::HEAP_TABLE + 8, 2));
    a.i()
        .local_get(2)
        .local_get(3)
        .i32_load(mem(l::HEAP_TABLE + 12, 2))
        .i32_add()
        .local_set(2);
    a.i().local_get(1).i32_const(1).i32_add().local_set(1);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    a.i().local_get(2);
    gs(&mut a, g::HEAP_BUMP);
    a.end(compact);
    // New entry at index LIVE (entries stay in allocation order).
    gg(&mut a, g::HEAP_LIVE);
    heap_entry(&mut a);
    a.i().local_tee(3);
    gg(&mut a, g::HEAP_NEXT);
    a.i().i64_store(mem(l::HEAP_TABLE, 3));
    a.i().local_get(3);
    gg(&mut a, g::HEAP_BUMP);
    a.i().i32_store(mem(l::HEAP_TABLE + 8, 2));
    a.i()
        .local_get(3)
        .local_get(0)
        .i32_wrap_i64()
        .i32_store(mem(l::HEAP_TABLE + 12, 2));
    gg(&mut a, g::HEAP_BUMP);
    a.i()
        .i32_const(l::HEAP_ARENA as i32)
        .i32_add()
        .i32_const(0)
        .local_get(0)
        .i32_wrap_i64()
        .memory_fill(0);
    gg(&mut a, g::HEAP_BUMP);
    a.i().local_get(0).i32_wrap_i64().i32_add();
    gs(&mut a, g::HEAP_BUMP);
    gg(&mut a, g::HEAP_USED);
    a.i().local_get(0).i32_wrap_i64().i32_add();
    gs(&mut a, g::HEAP_USED);
    gadd(&mut a, g::HEAP_LIVE, 1);
    gg(&mut a, g::HEAP_NEXT);
    a.i().call(ctx.helper(Helper::Push));
    gg(&mut a, g::HEAP_NEXT);
    a.i().i64_const(1).i64_add();
    gs(&mut a, g::HEAP_NEXT);
    a.i().i32_const(0);
    a.finish()
}

fn free(ctx: &Ctx) -> Function {
    // locals: 0 h i64, 1 idx i32, 2 entry addr i32
    let mut a = Asm::new(0, &[(1, I64), (2, I32)]);
    a.i()
        .call(ctx.helper(Helper::Pop))
        .local_tee(0)
        .call(ctx.helper(Helper::HeapFind))
        .local_tee(1);
    a.i().i32_const(0).i32_lt_s();
    let bad = a.if_();
    ret_exc(
        &mut a,
        hostabi::Exception::HeapInvalidHandle.bit(),
        |a| {
            a.i().local_get(0);
        },
        |a| {
            a.i().i64_const(0);
        },
    );
    a.end(bad);
    a.i().local_get(1);
    heap_entry(&mut a);
    a.i().local_set(2);
    gg(&mut a, g::HEAP_USED);
    a.i()
        .local_get(2)
        .i32_load(mem(l::HEAP_TABLE + 12, 2))
        .i32_sub();
    gs(&mut a, g::HEAP_USED);
    // Shift later entries down by one to keep allocation order.
    a.i().local_get(2).i32_const(l::HEAP_TABLE as i32).i32_add();
    a.i()
        .local_get(2)
        .i32_const((l::HEAP_TABLE + l::HEAP_ENTRY_BYTES) as i32)
        .i32_add();
    gg(&mut a, g::HEAP_LIVE);
    a.i().local_get(1).i32_sub().i32_const(1).i32_sub();
    heap_entry(&mut a);
    a.i().memory_copy(0, 0);
    gadd(&mut a, g::HEAP_LIVE, -1);
    a.i().i32_const(0);
    a.finish()
}

/// `pushh`/`poph`: pop off, pop h; check h; then k elements of `width` bytes.
fn heap_access(ctx: &Ctx, store: bool) -> Function {
    // params 0 width, 1 k; locals 2 h i64, 3 off i64, 4 entry i32, 5 v i64
    let mut a = Asm::new(2, &[(2, I64), (1, I32), (1, I64)]);
    let pop = ctx.helper(Helper::Pop);
    a.i()
        .call(pop)
        .local_set(3)
        .call(pop)
        .local_tee(2)
        .call(ctx.helper(Helper::HeapFind))
        .local_tee(4);
    a.i().i32_const(0).i32_lt_s();
    let bad = a.if_();
    ret_exc(
        &mut a,
        hostabi::Exception::HeapInvalidHandle.bit(),
        |a| {
            a.i().local_get(2);
        },
        |a| {
            a.i().local_get(3);
        },
    );
    a.end(bad);
    a.i().local_get(4);
    heap_entry(&mut a);
    a.i().local_set(4);
    let blk = a.block();
    let lp = a.loop_();
    a.i().local_get(1).i32_eqz();
    a.br_if(blk);
    // off + width > size: HEAP_INVALID_OFFSET(h, off)
    a.i()
        .local_get(3)
        .local_get(0)
        .i64_extend_i32_u()
        .i64_add()
        .local_get(4)
        .i32_load(mem(l::HEAP_TABLE + 12, 2))
        .i64_extend_i32_u()
        .i64_gt_u();
    a.i().local_get(3).i64_const(1 << 32).i64_ge_u().i32_or();
    let oob = a.if_();
    ret_exc(
        &mut a,
        hostabi::Exception::HeapInvalidOffset.bit(),
        |a| {
            a.i().local_get(2);
        },
        |a| {
            a.i().local_get(3);
        },
    );
    a.end(oob);
    // address = arena + entry.off + off (on the stack, used by the load/store below)
    let addr = |a: &mut Asm| {
        a.i()
            .local_get(4)
            .i32_load(mem(l::HEAP_TABLE + 8, 2))
            .local_get(3)
            .i32_wrap_i64()
            .i32_add();
    };
    for (w, bits) in [(1, 0u32), (2, 1), (4, 2), (8, 3)] {
        a.i().local_get(0).i32_const(w).i32_eq();
        let this = a.if_();
        if store {
            a.i().call(pop).local_set(5);
            addr(&mut a);
            a.i().local_get(5);
            match bits {
                0 => a.i().i64_store8(mem(l::HEAP_ARENA, 0)),
                1 => a.i().i64_store16(mem(l::HEAP_ARENA, 0)),
                2 => a.i().i64_store32(mem(l::HEAP_ARENA, 0)),
                _ => a.i().i64_store(mem(l::HEAP_ARENA, 0)),
            };
        } else {
            addr(&mut a);
            match bits {
                0 => a.i().i64_load8_u(mem(l::HEAP_ARENA, 0)),
                1 => a.i().i64_load16_u(mem(l::HEAP_ARENA, 0)),
                2 => a.i().i64_load32_u(mem(l::HEAP_ARENA, 0)),
                _ => a.i().i64_load(mem(l::HEAP_ARENA, 0)),
            };
            a.i().call(ctx.helper(Helper::Push));
        }
        a.end(this);
    }
    a.i()
        .local_get(3)
        .local_get(0)
        .i64_extend_i32_u()
        .i64_add()
        .local_set(3);
    a.i().local_get(1).i32_const(1).i32_sub().local_set(1);
    a.br(lp);
    a.end(lp);
    a.end(blk);
    a.i().i32_const(0);
    a.finish()
}

fn push_h(ctx: &Ctx) -> Function {
    heap_access(ctx, false)
}

fn pop_h(ctx: &Ctx) -> Function {
    heap_access(ctx, true)
}
