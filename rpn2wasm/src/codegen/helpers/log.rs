//! The logging instructions (§9.3, §11.2): `log n`, `log b`, `log`, `log str`,
//! `log mrf`, `log lv`/`log gv`, and the fault record of a bad address.

use super::{Helper, gadd, gg, gs, ret_exc, ret_overflow, room};
use crate::codegen::Ctx;
use crate::codegen::asm::{Asm, mem};
use crate::codegen::layout::{self as l, g};
use hostabi::ImportId;
use hostabi::record::{ItemKind, token};
use wasm_encoder::Function;
use wasm_encoder::ValType::{I32, I64};

/// `log n` (8 bytes per element) or `log b, n` (1 byte).
pub(super) fn log_n(ctx: &Ctx, bytes: bool) -> Function {
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

pub(super) fn log_count(ctx: &Ctx) -> Function {
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

pub(super) fn log_str(ctx: &Ctx) -> Function {
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

pub(super) fn log_mrf(ctx: &Ctx) -> Function {
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

pub(super) fn log_vars(ctx: &Ctx, global: bool) -> Function {
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
