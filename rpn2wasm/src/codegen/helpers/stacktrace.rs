//! Stack traces (§12): `log st`, and `pop lp`/`pop stp`, which truncate the
//! log and stack-trace areas.

use super::{gadd, gg, gs};
use crate::codegen::Ctx;
use crate::codegen::asm::{Asm, mem};
use crate::codegen::layout::{self as l, frame, g};
use hostabi::ImportId;
use hostabi::record::token;
use wasm_encoder::Function;
use wasm_encoder::ValType::{I32, I64};

/// Size of the stack-trace header: `01 u16 L name` + 8 + 2*3 + `02 u16`.
fn st_header_bytes(ctx: &Ctx) -> i32 {
    (3 + ctx.name_len + 8 + 6 + 3) as i32
}

pub(super) fn log_st(ctx: &Ctx) -> Function {
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

pub(super) fn pop_lp() -> Function {
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

pub(super) fn pop_stp(ctx: &Ctx) -> Function {
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
