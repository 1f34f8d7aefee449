//! Field and index access: `.f`/`->f` of values and of the traced
//! process's memory, `args.NAME` from DWARF (C++ references included),
//! `v[i]` of values.

use super::ARG_REGS;
use crate::ast::{self, ExprKind};
use crate::check::{Ctx, Fx, coerce_int};
use crate::diag::codes;
use crate::dwarf::ParamValue;
use crate::ir::{E, Ty};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `v[i]` of a record or array value (not in the traced process): a
    /// constant index.
    pub(super) fn index_value(&mut self, base: &ast::Expr, idx: &ast::Expr, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let (be, bt) = self.expr(base);
        let Ty::Array(elem, n) = &bt else {
            if bt != Ty::None {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "The array index operator [] can not be used on expressions of type '{}'",
                        bt.name()
                    ),
                );
            }
            return bad;
        };
        let Some(i) = crate::check::call::int_literal(idx) else {
            self.cx.err(
                codes::LITERAL,
                idx.span,
                "an array value (read from the process already) takes a constant index",
            );
            return bad;
        };
        if i < 0 || i >= *n as i64 {
            self.cx.err(
                codes::LITERAL,
                idx.span,
                format!("the index {i} is out of bounds for array of size {n}"),
            );
            return bad;
        }
        let t = (**elem).clone();
        (
            E::Field {
                base: Box::new(be),
                off: t.size() * i as u32,
                ty: t.clone(),
            },
            t,
        )
    }

    /// Parameter `field` when it is a C++ reference (`int &x`) in every
    /// probe of the handler and in a register: its register and the type
    /// it refers to.
    pub(crate) fn reference_param(&self, field: &str) -> Option<(usize, crate::ctypes::CType)> {
        if self.ctx != Ctx::Uprobe || self.concrete.is_empty() {
            return None;
        }
        let mut found = None;
        for c in self.concrete {
            let params = c.params.as_ref()?;
            let i = params.iter().position(|p| p.name == field)?;
            let p = &params[i];
            let Some(crate::ctypes::CType::Ptr(to)) = &p.ctype else {
                return None;
            };
            if !p.by_ref || i >= 6 {
                return None;
            }
            if found.as_ref().is_some_and(|(j, t)| (*j, t) != (i, &**to)) {
                return None;
            }
            found = Some((i, (**to).clone()));
        }
        found
    }

    pub(super) fn field(
        &mut self,
        base: &ast::Expr,
        field: &str,
        _arrow: bool,
        span: Span,
    ) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !matches!(&base.kind, ExprKind::Ident(n) if n == "args") {
            // A field of a record value.
            let (be, bt) = self.expr(base);
            let Ty::Record(r) = &bt else {
                if bt != Ty::None {
                    self.cx.err(
                        codes::TYPE,
                        span,
                        format!(
                            "Can not access field '{field}' on expression of type '{}'",
                            bt.name()
                        ),
                    );
                }
                return bad;
            };
            let mut off = 0;
            for (n, t) in &r.fields {
                if n == field {
                    return (
                        E::Field {
                            base: Box::new(be),
                            off,
                            ty: t.clone(),
                        },
                        t.clone(),
                    );
                }
                off += t.size();
            }
            self.cx.err(
                codes::TYPE,
                span,
                format!(
                    "Struct/union of type '{}' does not contain a field named '{field}'",
                    r.name
                ),
            );
            return bad;
        }
        if self.ctx != Ctx::Uprobe {
            self.cx.err(
                codes::BUILTIN_CONTEXT,
                span,
                "The args builtin can only be used with tracepoint/kfunc/uprobe probes (uprobes only, here: not uretprobes)",
            );
            return bad;
        }
        // A C++ reference: the object it refers to.
        if let Some((i, to)) = self.reference_param(field) {
            return self.read_c(E::Reg(ARG_REGS[i]), &to, None, span);
        }
        let mut found: Option<(usize, ParamValue)> = None;
        let mut ctype = None;
        for c in self.concrete {
            let Some(params) = &c.params else {
                self.cx.err_note(
                    codes::DWARF,
                    span,
                    format!("No debuginfo found for {}", c.name),
                    "args.NAME needs DWARF for the function (build the binary with -g)",
                );
                return bad;
            };
            let Some(i) = params.iter().position(|p| p.name == field) else {
                self.cx.err(
                    codes::DWARF,
                    span,
                    format!("Can't find function parameter {field}"),
                );
                return bad;
            };
            let v = params[i].value;
            if found.is_some_and(|f| f != (i, v)) {
                self.cx.err(
                    codes::DWARF,
                    span,
                    format!("Probe has attach points with mixed arguments: {field}"),
                );
                return bad;
            }
            found = Some((i, v));
            ctype = params[i].ctype.clone();
        }
        match found {
            Some((i, ParamValue::Int { .. }))
                if i < 6 && matches!(ctype, Some(crate::ctypes::CType::Ptr(_))) =>
            {
                let Some(crate::ctypes::CType::Ptr(p)) = ctype else {
                    return bad;
                };
                (E::Reg(ARG_REGS[i]), Ty::Ptr(p))
            }
            Some((i, ParamValue::Int { .. }))
                if i < 6 && matches!(ctype, Some(crate::ctypes::CType::Enum(_))) =>
            {
                let Some(crate::ctypes::CType::Enum(en)) = ctype else {
                    return bad;
                };
                let t = Ty::Int {
                    signed: true,
                    bytes: en.bytes,
                };
                (coerce_int(E::Reg(ARG_REGS[i]), &Ty::U64, &t), Ty::Enum(en))
            }
            Some((i, ParamValue::Int { signed, bytes })) if i < 6 => {
                let t = Ty::Int { signed, bytes };
                (coerce_int(E::Reg(ARG_REGS[i]), &Ty::U64, &t), t)
            }
            Some((_, ParamValue::Int { .. })) => {
                self.cx.err(
                    codes::UNSUPPORTED,
                    span,
                    format!("parameter {field} is passed on the stack (7th or later), which is not supported"),
                );
                bad
            }
            Some(_) => {
                self.cx.err(
                    codes::UNSUPPORTED,
                    span,
                    format!("parameter {field} is not an integer or pointer (floating point or structure by value), which is not supported"),
                );
                bad
            }
            None => bad,
        }
    }
}
