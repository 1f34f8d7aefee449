//! Operators: unary and binary operators with bpftrace's typing, and
//! `++`/`--` on variables and maps.

use super::{int_binop, is_literal_nonneg};
use crate::ast::{self, BinOp, ExprKind, UnOp};
use crate::check::{Fx, VarLoc};
use crate::diag::codes;
use crate::ir::{E, S, Ty};
use hostabi::maps::{MapKind, Op};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    pub(super) fn unop(&mut self, op: UnOp, x: &ast::Expr, span: Span) -> (E, Ty) {
        if op == UnOp::Deref {
            let (addr, at) = self.expr(x);
            return match at {
                Ty::Ptr(p) => self.read_c(addr, &p, None, span),
                Ty::None => (E::Int(0), Ty::None),
                t => {
                    self.cx.err_note(
                        codes::TYPE,
                        span,
                        format!("Can not dereference type '{}'", t.name()),
                        "cast to a pointer first: *(uint64*)addr",
                    );
                    (E::Int(0), Ty::None)
                }
            };
        }
        let (e, t) = self.expr(x);
        if !t.is_int() {
            if t != Ty::None {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "The {} operator can not be used on expressions of type '{}'",
                        match op {
                            UnOp::Neg => "-",
                            UnOp::Not => "!",
                            _ => "~",
                        },
                        t.name()
                    ),
                );
            }
            return (E::Int(0), Ty::None);
        }
        let rt = match op {
            UnOp::Neg => Ty::I64,
            UnOp::Not => Ty::U64,
            _ => Ty::Int {
                signed: t.signed(),
                bytes: 8,
            },
        };
        (E::Un(op, Box::new(e)), rt)
    }

    pub(super) fn binop(&mut self, op: BinOp, a: &ast::Expr, b: &ast::Expr, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let (ae, mut at) = self.expr(a);
        let (be, mut bt) = self.expr(b);
        if at == Ty::None || bt == Ty::None {
            return bad;
        }
        match (&at, &bt) {
            (Ty::Str(x), Ty::Str(y)) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                return (
                    E::StrEq {
                        ne: op == BinOp::Ne,
                        a: Box::new(ae),
                        b: Box::new(be),
                        n: (*x).min(*y),
                    },
                    Ty::U64,
                );
            }
            (x, y) if x.is_int() && y.is_int() => {}
            (Ty::Buf(x), Ty::Buf(y)) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                // The length word first: buffers of different lengths differ.
                return (
                    E::MemEq {
                        ne: op == BinOp::Ne,
                        a: Box::new(ae),
                        b: Box::new(be),
                        n: Ty::Buf(*x.min(y)).size(),
                    },
                    Ty::U64,
                );
            }
            (x, y)
                if matches!(op, BinOp::Eq | BinOp::Ne)
                    && x == y
                    && matches!(x, Ty::Array(..) | Ty::Record(_) | Ty::Tuple(_)) =>
            {
                // Equal values of one type are equal bytes (a buffer's
                // unused bytes are zero-filled when it is read).
                return (
                    E::MemEq {
                        ne: op == BinOp::Ne,
                        a: Box::new(ae),
                        b: Box::new(be),
                        n: x.size(),
                    },
                    Ty::U64,
                );
            }
            _ => {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "Type mismatch for '{}': comparing '{}' with '{}'",
                        op.text(),
                        at.name(),
                        bt.name()
                    ),
                );
                return bad;
            }
        }
        // A non-negative literal takes the other operand's signedness.
        if is_literal_nonneg(a) && !bt.signed() {
            at = Ty::U64;
        }
        if is_literal_nonneg(b) && !at.signed() {
            bt = Ty::U64;
        }
        int_binop(op, (ae, at), (be, bt))
    }

    pub(super) fn incdec(
        &mut self,
        target: &ast::Expr,
        inc: bool,
        post: bool,
        span: Span,
    ) -> (E, Ty) {
        let delta: i64 = if inc { 1 } else { -1 };
        match &target.kind {
            ExprKind::Var(name) => {
                let Some((t, VarLoc::Local(l))) = self.vars.get(name).cloned() else {
                    self.cx.err(
                        codes::UNDEFINED,
                        span,
                        format!("Undefined or undeclared variable used: {name}"),
                    );
                    return (E::Int(0), Ty::None);
                };
                let set = S::SetLocal(
                    l,
                    E::Bin(
                        BinOp::Add,
                        t.signed(),
                        Box::new(E::Local(l)),
                        Box::new(E::Int(delta * t.pointee_size() as i64)),
                    ),
                );
                if post {
                    let tmp = self.local();
                    (
                        E::Seq(
                            vec![S::SetLocal(tmp, E::Local(l)), set],
                            Box::new(E::Local(tmp)),
                        ),
                        t,
                    )
                } else {
                    (E::Seq(vec![set], Box::new(E::Local(l))), t)
                }
            }
            ExprKind::Map(m) => {
                // `@x++`: an integer map (bpftrace types it int64), or a
                // pointer map (moved by one pointee).
                let Some((map, key)) = self.map_target(m, Ty::I64, true) else {
                    return (E::Int(0), Ty::None);
                };
                let cur = self
                    .cx
                    .maps
                    .get(&m.name)
                    .map(|i| i.value.clone())
                    .unwrap_or(Ty::None);
                let vt = if cur.is_ptr() { cur.clone() } else { Ty::I64 };
                let delta = delta * cur.pointee_size() as i64;
                if self
                    .set_map_kind(m, MapKind::Assign, vt.clone(), None, span)
                    .is_none()
                {
                    return (E::Int(0), Ty::None);
                }
                let upd = S::MapUpdate {
                    map,
                    key: key.clone(),
                    op: Op::Add,
                    value: E::Int(delta),
                };
                let slot = self.slot(8);
                let vt2 = vt.clone();
                let get = move |k| E::MapGet {
                    map,
                    key: k,
                    slot,
                    ty: vt2.clone(),
                };
                if post {
                    let tmp = self.local();
                    (
                        E::Seq(
                            vec![S::SetLocal(tmp, get(key)), upd],
                            Box::new(E::Local(tmp)),
                        ),
                        vt,
                    )
                } else {
                    (E::Seq(vec![upd], Box::new(get(key))), vt)
                }
            }
            _ => (E::Int(0), Ty::None),
        }
    }
}
