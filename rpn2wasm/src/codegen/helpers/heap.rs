//! The heap extension (§9.15): table lookup, `malloc`, `free`, and
//! `pushh`/`poph`.

use super::{Helper, gadd, gg, gs, ret_exc};
use crate::codegen::Ctx;
use crate::codegen::asm::{Asm, mem};
use crate::codegen::layout::{self as l, g};
use wasm_encoder::Function;
use wasm_encoder::ValType::{I32, I64};

/// Address of heap table entry `idx` (i32 on the stack) → entry address.
fn heap_entry(a: &mut Asm) {
    a.i().i32_const(l::HEAP_ENTRY_BYTES as i32).i32_mul();
}

pub(super) fn heap_find() -> Function {
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

pub(super) fn malloc(ctx: &Ctx) -> Function {
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

pub(super) fn free(ctx: &Ctx) -> Function {
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

pub(super) fn push_h(ctx: &Ctx) -> Function {
    heap_access(ctx, false)
}

pub(super) fn pop_h(ctx: &Ctx) -> Function {
    heap_access(ctx, true)
}
