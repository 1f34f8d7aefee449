//! Lowering of expressions and map assignments: builtins, operators with
//! bpftrace's typing (64-bit results, signed only when both operands are),
//! string comparisons, casts, tuples, map reads, `args` from DWARF.
//!
//! This module holds the dispatch on the expression's kind, literals,
//! variables, tuples and the ternary operator; the rest is in `builtins`,
//! `ops`, `casts`, `fields` and `maps`.

mod builtins;
mod casts;
mod fields;
mod maps;
mod ops;

use super::{Fx, VarLoc, unify};
use crate::ast::{self, BinOp, ExprKind};
use crate::diag::codes;
use crate::ir::{E, Part, S, Ty};
use builtins::errno;
use rpn2wasm::Span;

/// `hostabi::regs` ids used by the lowering (checked by a test).
pub(crate) mod reg {
    pub const RAX: u16 = 0x06;
    pub const RCX: u16 = 0x08;
    pub const RDX: u16 = 0x09;
    pub const RDI: u16 = 0x0a;
    pub const RSI: u16 = 0x0b;
    pub const RBP: u16 = 0x0f;
    pub const R8: u16 = 0x10;
    pub const R9: u16 = 0x11;
}

/// Registers of arguments 0-5 (System V x86-64).
pub(crate) const ARG_REGS: [u16; 6] = [reg::RDI, reg::RSI, reg::RDX, reg::RCX, reg::R8, reg::R9];

/// `e * n` (pointer arithmetic's scaling; nothing for 1).
fn scaled(e: E, n: u64) -> E {
    if n == 1 {
        e
    } else {
        E::Bin(BinOp::Mul, false, Box::new(e), Box::new(E::Int(n as i64)))
    }
}

/// Integer binary operation with bpftrace's result type. A pointer plus or
/// minus an integer moves by whole pointees (C's arithmetic, as bpftrace
/// does it): `(int32 *)0x32 + 1` is `0x36`; the difference of two
/// pointers is in pointees too.
pub(crate) fn int_binop(op: BinOp, (a, ta): (E, Ty), (b, tb): (E, Ty)) -> (E, Ty) {
    if matches!(op, BinOp::Add | BinOp::Sub) {
        match (ta.is_ptr(), tb.is_ptr()) {
            (true, false) => {
                let n = ta.pointee_size();
                return (E::Bin(op, false, Box::new(a), Box::new(scaled(b, n))), ta);
            }
            (false, true) if op == BinOp::Add => {
                let n = tb.pointee_size();
                return (E::Bin(op, false, Box::new(scaled(a, n)), Box::new(b)), tb);
            }
            (true, true) if op == BinOp::Sub => {
                let n = ta.pointee_size() as i64;
                let d = E::Bin(BinOp::Sub, true, Box::new(a), Box::new(b));
                let e = if n == 1 {
                    d
                } else {
                    E::Bin(BinOp::Div, true, Box::new(d), Box::new(E::Int(n)))
                };
                return (e, Ty::I64);
            }
            _ => {}
        }
    }
    let (sa, sb) = (ta.signed(), tb.signed());
    let signed = match op {
        BinOp::Shl | BinOp::Shr => sa,
        _ => sa && sb,
    };
    let t = if op.is_comparison() {
        Ty::I64
    } else {
        Ty::Int { signed, bytes: 8 }
    };
    (E::Bin(op, signed, Box::new(a), Box::new(b)), t)
}

fn is_literal_nonneg(e: &ast::Expr) -> bool {
    matches!(e.kind, ExprKind::Int(_))
}

impl Fx<'_, '_> {
    /// Lowers an expression; errors give `(Int(0), None)`.
    pub fn expr(&mut self, e: &ast::Expr) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        match &e.kind {
            // Literals beyond int64 are uint64, as in bpftrace.
            ExprKind::Int(v) if *v > i64::MAX as u64 => (E::Int(*v as i64), Ty::U64),
            ExprKind::Int(v) => (E::Int(*v as i64), Ty::I64),
            ExprKind::Str(s) => {
                let a = self.cx.string(s);
                (E::Static(a), Ty::Str(s.len() as u32 + 1))
            }
            ExprKind::Ident(name) => {
                if let Some((en, v)) = self.cx.types.enumerators.get(name).cloned() {
                    return (E::Int(v), Ty::Enum(en));
                }
                if let Some(v) = errno(name) {
                    return (E::Int(v), Ty::I64);
                }
                self.builtin(name, e.span)
            }
            ExprKind::SizeofType { ty, ptr } => self.sizeof_type(ty, *ptr, e.span),
            ExprKind::Offsetof { ty, path } => self.offsetof(ty, path, e.span),
            ExprKind::Var(name) => match self.vars.get(name) {
                Some((t, VarLoc::Local(l))) => (E::Local(*l), t.clone()),
                Some((t, VarLoc::Slot(s))) => (E::Slot(*s), t.clone()),
                None => {
                    self.cx.err(
                        codes::UNDEFINED,
                        e.span,
                        format!("Undefined or undeclared variable used: {name}"),
                    );
                    bad
                }
            },
            ExprKind::Param(_) | ExprKind::ParamCount => {
                self.cx.err_note(
                    codes::UNSUPPORTED,
                    e.span,
                    "positional parameters are not supported",
                    "wprobe takes the command after `--`, not program arguments",
                );
                bad
            }
            ExprKind::Map(m) => self.map_get(m),
            ExprKind::Call {
                name,
                name_span,
                args,
            } => self.call(name, *name_span, args, e.span),
            ExprKind::Unop(op, x) => self.unop(*op, x, e.span),
            ExprKind::Binop(op, a, b) => self.binop(*op, a, b, e.span),
            ExprKind::Ternary(c, a, b) => self.ternary(c, a, b, e.span),
            ExprKind::Field { base, field, arrow } => {
                if let Some((a, c, bits)) = self.place(e) {
                    return self.read_c(a, &c, bits, e.span);
                }
                self.field(base, field, *arrow, e.span)
            }
            ExprKind::TupleIndex(base, n) => self.tuple_index(base, *n, e.span),
            ExprKind::Index(base, idx) => {
                if let Some((a, c, bits)) = self.place(e) {
                    return self.read_c(a, &c, bits, e.span);
                }
                self.index_value(base, idx, e.span)
            }
            ExprKind::Cast {
                ty,
                ptr,
                array,
                expr,
            } => {
                if let Some(n) = array {
                    if *ptr > 0 {
                        self.cx.err(
                            codes::UNSUPPORTED,
                            e.span,
                            format!("casts to arrays of pointers (`{ty}*[N]`) are not supported"),
                        );
                        return bad;
                    }
                    return self.cast_to_array(ty, *n, expr, e.span);
                }
                self.cast(ty, *ptr, expr, e.span)
            }
            ExprKind::Tuple(items) => self.tuple(items),
            ExprKind::IncDec { target, inc, post } => self.incdec(target, *inc, *post, e.span),
        }
    }

    /// `c ? a : b`: integers of bpftrace's 64-bit typing, or aggregates of
    /// one type built in a slot.
    fn ternary(&mut self, c: &ast::Expr, a: &ast::Expr, b: &ast::Expr, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let (ce, ct) = self.expr(c);
        self.want_int(&ct, c.span, "ternary condition");
        let (ae, at) = self.expr(a);
        let (be, bt) = self.expr(b);
        if at == Ty::None || bt == Ty::None {
            return bad;
        }
        match (at.is_int(), bt.is_int()) {
            (true, true) => {
                let signed = at.signed() && bt.signed();
                (
                    E::Ternary(Box::new(ce), Box::new(ae), Box::new(be)),
                    Ty::Int { signed, bytes: 8 },
                )
            }
            _ => match unify(&at, &bt) {
                Some(t) if t.is_agg() => {
                    let size = t.size();
                    let slot = self.slot(size);
                    let ae = self.convert(ae, &at, &t);
                    let be = self.convert(be, &bt, &t);
                    let set = |e, from: &Ty| S::SetSlot {
                        slot,
                        e,
                        size,
                        src_size: from.stored_size(size),
                    };
                    let s = S::If(ce, vec![set(ae, &at)], vec![set(be, &bt)]);
                    (E::Seq(vec![s], Box::new(E::Slot(slot))), t)
                }
                _ => {
                    self.cx.err(
                        codes::TYPE,
                        span,
                        format!(
                            "Ternary operator must return the same type: have '{}' and '{}'",
                            at.name(),
                            bt.name()
                        ),
                    );
                    bad
                }
            },
        }
    }

    /// `t.N` of a tuple value.
    fn tuple_index(&mut self, base: &ast::Expr, n: u64, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let (be, bt) = self.expr(base);
        let Ty::Tuple(fields) = &bt else {
            if bt != Ty::None {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "Can not access index '{n}' on expression of type '{}'",
                        bt.name()
                    ),
                );
            }
            return bad;
        };
        let Some(t) = fields.get(n as usize).cloned() else {
            self.cx.err(
                codes::TYPE,
                span,
                format!(
                    "Invalid tuple index: {n}. Found {} elements in tuple.",
                    fields.len()
                ),
            );
            return bad;
        };
        let off: u32 = fields[..n as usize].iter().map(Ty::size).sum();
        (
            E::Field {
                base: Box::new(be),
                off,
                ty: t.clone(),
            },
            t,
        )
    }

    /// `(a, b, ...)`: the items laid out one after the other in a slot.
    fn tuple(&mut self, items: &[ast::Expr]) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let mut parts = Vec::new();
        let mut tys = Vec::new();
        let mut off = 0;
        for it in items {
            let (ie, it_t) = self.expr(it);
            if it_t == Ty::None {
                return bad;
            }
            tys.push(it_t.clone());
            let sz = it_t.size();
            parts.push(Part {
                e: ie,
                ty: it_t,
                off,
            });
            off += sz;
        }
        let slot = self.slot(off);
        (E::Tuple { slot, parts }, Ty::Tuple(tys))
    }
}

/// Elements `range` of the integer array value in frame slot `slot`
/// (elements of `elem`, each in an 8-byte word) packed into one integer as
/// their C bytes would be: element `range.start` in the lowest bytes.
pub(crate) fn pack_elements(slot: u32, elem: &Ty, range: core::ops::Range<u32>) -> E {
    use crate::ast::BinOp;
    let eb = match elem {
        Ty::Int { bytes, .. } => u32::from(*bytes),
        _ => 8,
    };
    let mask = if eb >= 8 {
        -1i64
    } else {
        (1i64 << (8 * eb)) - 1
    };
    let mut acc = E::Int(0);
    for (k, i) in range.enumerate() {
        let el = E::Bin(
            BinOp::BitAnd,
            false,
            Box::new(E::Field {
                base: Box::new(E::Slot(slot)),
                off: elem.size() * i,
                ty: elem.clone(),
            }),
            Box::new(E::Int(mask)),
        );
        let shifted = E::Bin(
            BinOp::Shl,
            false,
            Box::new(el),
            Box::new(E::Int(8 * eb as i64 * k as i64)),
        );
        acc = E::Bin(BinOp::BitOr, false, Box::new(acc), Box::new(shifted));
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::reg;

    #[test]
    fn register_ids_match_hostabi() {
        for (name, id) in [
            ("rax", reg::RAX),
            ("rcx", reg::RCX),
            ("rdx", reg::RDX),
            ("rdi", reg::RDI),
            ("rsi", reg::RSI),
            ("rbp", reg::RBP),
            ("r8", reg::R8),
            ("r9", reg::R9),
        ] {
            assert_eq!(
                hostabi::regs::by_name(name).map(|r| r.id),
                Some(id),
                "{name}"
            );
        }
    }
}
