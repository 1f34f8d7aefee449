//! Operators: unary and binary operators (bpftrace's zero rules for `/`
//! and `%`, short-circuit `&&` and `||`) and integer casts.

use super::{Gen, Lbl};
use crate::ast::{BinOp, UnOp};
use crate::ir::E;
use wasm_encoder::{BlockType, ValType};

impl Gen<'_> {
    /// A unary operator.
    pub(super) fn unop(&mut self, op: &UnOp, x: &E) {
        match op {
            UnOp::Neg => {
                self.i().i64_const(0);
                self.expr(x);
                self.i().i64_sub();
            }
            UnOp::Not => {
                self.expr(x);
                self.i().i64_eqz().i64_extend_i32_u();
            }
            UnOp::BitNot => {
                self.expr(x);
                self.i().i64_const(-1).i64_xor();
            }
            UnOp::Deref => {
                self.expr(x);
            }
        }
    }

    pub(super) fn binop(&mut self, op: BinOp, signed: bool, a: &E, b: &E) {
        match op {
            BinOp::LAnd | BinOp::LOr => {
                self.truth(a);
                self.i().if_(BlockType::Result(ValType::I64));
                self.labels.push(Lbl::Plain);
                if op == BinOp::LAnd {
                    self.truth(b);
                    self.i().i64_extend_i32_u().else_().i64_const(0);
                } else {
                    self.i().i64_const(1).else_();
                    self.truth(b);
                    self.i().i64_extend_i32_u();
                }
                self.labels.pop();
                self.i().end();
                return;
            }
            BinOp::Div | BinOp::Mod => {
                let (ta, tb) = (self.temp64(), self.temp64());
                self.expr(a);
                self.i().local_set(ta);
                self.expr(b);
                self.i()
                    .local_tee(tb)
                    .i64_eqz()
                    .if_(BlockType::Result(ValType::I64));
                if op == BinOp::Div {
                    self.i().i64_const(0);
                } else {
                    self.i().local_get(ta);
                }
                self.i().else_().local_get(ta).local_get(tb);
                if op == BinOp::Div {
                    self.i().i64_div_u();
                } else {
                    self.i().i64_rem_u();
                }
                self.i().end();
                self.free64();
                self.free64();
                return;
            }
            _ => {}
        }
        self.expr(a);
        self.expr(b);
        let mut i = self.i();
        match op {
            BinOp::Add => i.i64_add(),
            BinOp::Sub => i.i64_sub(),
            BinOp::Mul => i.i64_mul(),
            BinOp::BitAnd => i.i64_and(),
            BinOp::BitOr => i.i64_or(),
            BinOp::BitXor => i.i64_xor(),
            BinOp::Shl => i.i64_shl(),
            BinOp::Shr => i.i64_shr_u(),
            BinOp::Eq => i.i64_eq().i64_extend_i32_u(),
            BinOp::Ne => i.i64_ne().i64_extend_i32_u(),
            BinOp::Lt if signed => i.i64_lt_s().i64_extend_i32_u(),
            BinOp::Lt => i.i64_lt_u().i64_extend_i32_u(),
            BinOp::Le if signed => i.i64_le_s().i64_extend_i32_u(),
            BinOp::Le => i.i64_le_u().i64_extend_i32_u(),
            BinOp::Gt if signed => i.i64_gt_s().i64_extend_i32_u(),
            BinOp::Gt => i.i64_gt_u().i64_extend_i32_u(),
            BinOp::Ge if signed => i.i64_ge_s().i64_extend_i32_u(),
            BinOp::Ge => i.i64_ge_u().i64_extend_i32_u(),
            BinOp::Div | BinOp::Mod | BinOp::LAnd | BinOp::LOr => &mut i,
        };
    }

    /// An integer cast: sign-extension or truncation to `bytes`.
    pub(super) fn cast(&mut self, e: &E, signed: &bool, bytes: &u8) {
        self.expr(e);
        match (signed, bytes) {
            (_, 8) => {}
            (true, 1) => {
                self.i().i64_extend8_s();
            }
            (true, 2) => {
                self.i().i64_extend16_s();
            }
            (true, _) => {
                self.i().i64_extend32_s();
            }
            (false, b) => {
                let mask = (1i64 << (*b as u32 * 8)) - 1;
                self.i().i64_const(mask).i64_and();
            }
        }
    }
}
