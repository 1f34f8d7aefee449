//! Calls: output (`printf`, `print`, `time`), control (`exit`), map
//! maintenance (`clear`, `zero`, `delete`), readers (`str`, `buf`, `reg`,
//! `usym`, `ustack`), comparisons (`strncmp`) and the aggregations, which
//! are only valid as the value of a map assignment.
//!
//! This module dispatches a call, as a statement or as a value, to its
//! family's module: `output`, `maps`, `aggregate`, `strings`, `time`,
//! `net`, `process`, `ints`.

mod aggregate;
mod ints;
mod maps;
mod net;
mod output;
mod process;
mod strings;
mod time;

use super::Fx;
use crate::ast::{self, ExprKind};
use crate::diag::codes;
use crate::ir::{E, S, Ty};
use hostabi::event::EventKind;
use rpn2wasm::Span;

const AGGREGATIONS: &[&str] = &[
    "count", "sum", "avg", "min", "max", "stats", "hist", "lhist",
];

/// Functions bpftrace has that wprobe refuses, with the reason.
const REFUSED: &[(&str, &str)] = &[
    ("signal", "handlers do not send signals"),
    ("override", "it changes kernel function returns"),
    ("kstack", "it describes the kernel"),
    ("ksym", "it describes the kernel"),
    ("kaddr", "it describes the kernel"),
    ("kptr", "it describes the kernel"),
    ("cgroupid", "it describes the kernel"),
    ("cgroup_path", "it describes the kernel"),
    ("join", "not supported yet"),
    ("path", "it describes the kernel"),
    ("skboutput", "it describes the kernel"),
    ("debugf", "use printf"),
    ("unwatch", "not supported yet"),
];

/// Whether `name` is an aggregation function.
pub(crate) fn is_aggregation(name: &str) -> bool {
    AGGREGATIONS.contains(&name)
}

pub(crate) fn int_literal(e: &ast::Expr) -> Option<i64> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v as i64),
        ExprKind::Unop(ast::UnOp::Neg, x) => match x.kind {
            ExprKind::Int(v) => Some((v as i64).wrapping_neg()),
            _ => None,
        },
        _ => None,
    }
}

impl Fx<'_, '_> {
    fn nargs(&mut self, name: &str, args: &[ast::Expr], lo: usize, hi: usize, span: Span) -> bool {
        if args.len() < lo || args.len() > hi {
            let want = if lo == hi {
                format!("{lo} argument{}", if lo == 1 { "" } else { "s" })
            } else {
                format!("{lo} to {hi} arguments")
            };
            self.cx.err(
                codes::ARGUMENTS,
                span,
                format!("{name}() requires {want} ({} provided)", args.len()),
            );
            return false;
        }
        true
    }

    /// A call used as a statement.
    pub(crate) fn expr_stmt(&mut self, e: &ast::Expr) -> Option<S> {
        // `c ? f() : g()` as a statement: one of the two calls.
        if let ExprKind::Ternary(c, a, b) = &e.kind
            && (matches!(a.kind, ExprKind::Call { .. }) || matches!(b.kind, ExprKind::Call { .. }))
        {
            let (ce, ct) = self.expr(c);
            self.want_int(&ct, c.span, "ternary condition");
            let then: Vec<S> = self.expr_stmt(a).into_iter().collect();
            let els: Vec<S> = self.expr_stmt(b).into_iter().collect();
            return Some(S::If(ce, then, els));
        }
        if let ExprKind::Call { name, args, .. } = &e.kind {
            match name.as_str() {
                "printf" => return self.printf(args, e.span, EventKind::Printf),
                "cat" => return self.printf(args, e.span, EventKind::Cat),
                "system" => {
                    if !self.cx.opts.unsafe_calls {
                        self.cx.err_note(
                            codes::UNSUPPORTED,
                            e.span,
                            "system() is an unsafe function being used in safe mode",
                            "run with --unsafe to allow it",
                        );
                        return None;
                    }
                    return self.printf(args, e.span, EventKind::System);
                }
                "print" => return self.print(args, e.span),
                "time" => return self.time(args, e.span),
                "exit" => return self.stmt_exit(args, e.span),
                "clear" | "zero" => return self.stmt_reset(name, args, e.span),
                "delete" => return self.stmt_delete(args, e.span),
                n if is_aggregation(n) => {
                    self.cx.err(
                        codes::MAP_USE,
                        e.span,
                        format!("{n}() should be directly assigned to a map"),
                    );
                    return None;
                }
                _ => {}
            }
        }
        let (x, _) = self.expr(e);
        Some(S::Eval(x))
    }

    /// A call used as a value.
    pub(crate) fn call(
        &mut self,
        name: &str,
        name_span: Span,
        args: &[ast::Expr],
        span: Span,
    ) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        match name {
            "str" => self.call_str(args, span),
            "uaddr" => self.call_uaddr(args, span),
            "macaddr" => self.call_macaddr(args, span),
            "buf" => self.call_buf(args, span),
            "len" => self.call_len(args, span),
            "strftime" => self.call_strftime(args, span),
            "strerror" => self.call_strerror(args, span),
            "has_key" => self.call_has_key(args, span),
            "pton" => self.call_pton(args, span),
            "ntop" => self.call_ntop(args, span),
            "bswap" => self.call_bswap(args, span),
            "nsecs" => self.call_nsecs(args, span),
            "reg" => self.call_reg(args, span),
            "usym" => self.call_usym(args, span),
            "ustack" => self.call_ustack(args, span),
            "strncmp" => self.call_strncmp(args, span),
            "sizeof" => self.call_sizeof(args, span),
            "strcontains" => self.call_strcontains(args, span),
            "uptr" => self.call_uptr(args, span),
            "printf" | "print" | "time" | "exit" | "clear" | "zero" | "delete" | "cat"
            | "system" => {
                self.cx.err(
                    codes::ARGUMENTS,
                    span,
                    format!("{name}() should not be used in an assignment or as a map key"),
                );
                bad
            }
            n if is_aggregation(n) => {
                self.cx.err(
                    codes::MAP_USE,
                    span,
                    format!("{n}() should be directly assigned to a map"),
                );
                bad
            }
            _ => {
                if let Some((_, why)) = REFUSED.iter().find(|(f, _)| *f == name) {
                    self.cx.err_note(
                        codes::UNSUPPORTED,
                        name_span,
                        format!("{name}() is not supported"),
                        *why,
                    );
                } else {
                    self.cx.err(
                        codes::UNKNOWN_FUNCTION,
                        name_span,
                        format!("Unknown function: {name}"),
                    );
                }
                bad
            }
        }
    }
}
