//! The machine helpers: exceptions (raise, dispatch to a handler, check),
//! call frames (enter, leave), the memory stack (push, pop) and log item
//! descriptors.

use super::{Helper, cur_frame, gadd, gg, gs, ret_exc};
use crate::codegen::Ctx;
use crate::codegen::asm::{Asm, mem};
use crate::codegen::layout::{self as l, frame, g, raised};
use wasm_encoder::Function;
use wasm_encoder::ValType::I32;

pub(super) fn raise(ctx: &Ctx) -> Function {
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

pub(super) fn dispatch() -> Function {
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

pub(super) fn check(ctx: &Ctx) -> Function {
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

pub(super) fn enter() -> Function {
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

pub(super) fn leave() -> Function {
    let mut a = Asm::new(0, &[]);
    cur_frame(&mut a);
    a.i()
        .i64_load(mem(l::FRAMES + frame::SAVED_SBP, 3))
        .i32_wrap_i64();
    gs(&mut a, g::SBP);
    gadd(&mut a, g::DEPTH, -1);
    a.finish()
}

pub(super) fn push() -> Function {
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

pub(super) fn pop() -> Function {
    let mut a = Asm::new(0, &[]);
    gg(&mut a, g::TSP);
    a.i().i32_const(3).i32_shl().i64_load(mem(l::STACK, 3));
    gg(&mut a, g::TSP);
    a.i().i32_const(1).i32_add().i32_const(1023).i32_and();
    gs(&mut a, g::TSP);
    a.finish()
}

pub(super) fn add_item() -> Function {
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
