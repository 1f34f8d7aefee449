//! Integer calls: `bswap`, `sizeof`.

use crate::ast;
use crate::check::Fx;
use crate::diag::codes;
use crate::ir::{E, S, Ty};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `bswap(x)`: the integer's bytes reversed.
    pub(super) fn call_bswap(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("bswap", args, 1, 1, span) {
            return bad;
        }
        let (e, t) = self.expr(&args[0]);
        let Ty::Int { signed, bytes } = t else {
            if t != Ty::None {
                self.cx.err(
                    codes::ARGUMENTS,
                    args[0].span,
                    format!("bswap() expects an integer ({} provided)", t.name()),
                );
            }
            return bad;
        };
        // Byte i moves to byte (bytes - 1 - i).
        let l = self.local();
        let mut acc = E::Int(0);
        for i in 0..bytes as i64 {
            let byte = E::Bin(
                crate::ast::BinOp::BitAnd,
                false,
                Box::new(E::Bin(
                    crate::ast::BinOp::Shr,
                    false,
                    Box::new(E::Local(l)),
                    Box::new(E::Int(8 * i)),
                )),
                Box::new(E::Int(0xff)),
            );
            let moved = E::Bin(
                crate::ast::BinOp::Shl,
                false,
                Box::new(byte),
                Box::new(E::Int(8 * (bytes as i64 - 1 - i))),
            );
            acc = E::Bin(
                crate::ast::BinOp::BitOr,
                false,
                Box::new(acc),
                Box::new(moved),
            );
        }
        let t = Ty::Int {
            signed: false,
            bytes,
        };
        let _ = signed;
        (E::Seq(vec![S::SetLocal(l, e)], Box::new(acc)), t)
    }

    /// `sizeof(x)`: the size of the value's C type.
    pub(super) fn call_sizeof(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("sizeof", args, 1, 1, span) {
            return bad;
        }
        let (_, t) = self.expr(&args[0]);
        if t == Ty::None {
            return bad;
        }
        (E::Int(crate::check::types::c_size(&t) as i64), Ty::U64)
    }
}
