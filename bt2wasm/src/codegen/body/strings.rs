//! Strings: entries of static string tables, comparisons and searches,
//! and the bodies of the helper functions they call (`streq`, `memeq`,
//! `strcontains`).

use super::{Gen, mem};
use crate::ir::E;
use wasm_encoder::{BlockType, Function, ValType};

impl Gen<'_> {
    /// Entry `index` of a table of `count` strings of `stride` bytes at
    /// `base`, the last one for an index out of range.
    pub(super) fn table_at(&mut self, base: u32, stride: u32, count: u32, index: &E) {
        let t = self.temp64();
        self.i().i32_const(base as i32);
        self.expr(index);
        let last = count.saturating_sub(1) as i64;
        self.i()
            .local_tee(t)
            .i64_const(count as i64)
            .i64_lt_u()
            .if_(BlockType::Result(ValType::I64))
            .local_get(t)
            .else_()
            .i64_const(last)
            .end()
            .i32_wrap_i64()
            .i32_const(stride as i32)
            .i32_mul()
            .i32_add();
        self.free64();
    }

    /// Whether two strings are equal up to their NUL or `n` bytes (the
    /// `streq` helper); `ne` negates.
    pub(super) fn str_eq(&mut self, ne: bool, a: &E, b: &E, n: u32) {
        let f = self.ctx.streq.expect("codegen invariant: streq collected");
        self.equal_call(f, ne, a, b, n);
    }

    /// Whether `n` bytes at two addresses are equal (the `memeq` helper);
    /// `ne` negates.
    pub(super) fn mem_eq(&mut self, ne: bool, a: &E, b: &E, n: u32) {
        let f = self.ctx.memeq.expect("codegen invariant: memeq collected");
        self.equal_call(f, ne, a, b, n);
    }

    /// The call of `f`, `streq` or `memeq`, on `a`, `b` and `n`, as an
    /// `i64` (`ne`: negated).
    fn equal_call(&mut self, f: u32, ne: bool, a: &E, b: &E, n: u32) {
        self.expr(a);
        self.expr(b);
        self.i().i32_const(n as i32);
        self.i().call(f);
        if ne {
            self.i().i32_eqz();
        }
        self.i().i64_extend_i32_u();
    }

    /// Whether string `hay` contains `needle` (the `strcontains` helper).
    pub(super) fn str_contains(&mut self, hay: &E, hn: u32, needle: &E, nn: u32) {
        self.expr(hay);
        self.i().i32_const(hn as i32);
        self.expr(needle);
        self.i().i32_const(nn as i32);
        let f = self
            .ctx
            .strcontains
            .expect("codegen invariant: strcontains collected");
        self.i().call(f).i64_extend_i32_u();
    }
}

/// `streq(a: i32, b: i32, n: i32) -> i32`: 1 when the strings at `a` and
/// `b` are equal up to their NUL or `n` bytes.
pub fn streq_helper() -> Function {
    equal_bytes(true)
}

/// `streq` (`to_nul`: the strings end at `a`'s NUL) or `memeq`: 1 when
/// the `n` bytes at `a` and `b` are equal, or up to their first NUL.
fn equal_bytes(to_nul: bool) -> Function {
    let mut f = Function::new([(1, ValType::I32)]);
    let (a, b, n, i) = (0, 1, 2, 3);
    let mut ins = f.instructions();
    ins.block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(i)
        .local_get(n)
        .i32_ge_u()
        .br_if(1)
        .local_get(a)
        .local_get(i)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .local_get(b)
        .local_get(i)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_ne()
        .if_(BlockType::Empty)
        .i32_const(0)
        .return_()
        .end();
    if to_nul {
        ins.local_get(a)
            .local_get(i)
            .i32_add()
            .i32_load8_u(mem(0, 0))
            .i32_eqz()
            .br_if(1);
    }
    increment(&mut ins, i).br(0).end().end().i32_const(1).end();
    f
}

/// `local += 1` (an `i32` local).
fn increment<'a, 'b>(
    ins: &'b mut wasm_encoder::InstructionSink<'a>,
    local: u32,
) -> &'b mut wasm_encoder::InstructionSink<'a> {
    ins.local_get(local).i32_const(1).i32_add().local_set(local)
}

/// `strcontains(h, hn, nd, nn) -> i32`: whether the NUL-terminated string
/// at `nd` (at most `nn` bytes) occurs in the one at `h` (at most `hn`).
pub fn strcontains_helper() -> Function {
    let mut f = Function::new([(3, ValType::I32)]);
    let (h, hn, nd, nn, i, j, nl) = (0, 1, 2, 3, 4, 5, 6);
    let mut ins = f.instructions();
    // nl = strnlen(nd, nn)
    ins.block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(nl)
        .local_get(nn)
        .i32_ge_u()
        .br_if(1)
        .local_get(nd)
        .local_get(nl)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_eqz()
        .br_if(1);
    increment(&mut ins, nl).br(0).end().end();
    ins.local_get(nl)
        .i32_eqz()
        .if_(BlockType::Empty)
        .i32_const(1)
        .return_()
        .end();
    // Each start i with i + nl <= hn, up to the haystack's NUL.
    ins.block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(i)
        .local_get(nl)
        .i32_add()
        .local_get(hn)
        .i32_gt_u()
        .br_if(1)
        .i32_const(0)
        .local_set(j)
        .block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(j)
        .local_get(nl)
        .i32_ge_u()
        .if_(BlockType::Empty)
        .i32_const(1)
        .return_()
        .end()
        .local_get(h)
        .local_get(i)
        .i32_add()
        .local_get(j)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .local_get(nd)
        .local_get(j)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_ne()
        .br_if(1);
    increment(&mut ins, j)
        .br(0)
        .end()
        .end()
        .local_get(h)
        .local_get(i)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_eqz()
        .br_if(1);
    increment(&mut ins, i).br(0).end().end().i32_const(0).end();
    f
}

/// `memeq(a, b, n) -> i32`: whether the `n` bytes at `a` and `b` are equal.
pub fn memeq_helper() -> Function {
    equal_bytes(false)
}
