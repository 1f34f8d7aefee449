//! Time calls: `nsecs(clock)`, `strftime` and the `time()` statement.

use crate::ast::{self, ExprKind};
use crate::check::Fx;
use crate::diag::codes;
use crate::ir::{E, Emit, S, Ty};
use hostabi::event::EventKind;
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `nsecs([clock])`: monotonic, boot or TAI time in nanoseconds.
    pub(super) fn call_nsecs(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("nsecs", args, 0, 1, span) {
            return bad;
        }
        match args.first().map(|a| &a.kind) {
            None => (E::Fact(crate::ir::Fact::Nsecs), Ty::U64),
            Some(ExprKind::Ident(c)) if c == "monotonic" => {
                (E::Fact(crate::ir::Fact::Nsecs), Ty::U64)
            }
            Some(ExprKind::Ident(c)) if c == "boot" => {
                (E::Fact(crate::ir::Fact::NsecsBoot), Ty::U64)
            }
            Some(ExprKind::Ident(c)) if matches!(c.as_str(), "tai" | "sw_tai") => {
                (E::Fact(crate::ir::Fact::NsecsTai), Ty::U64)
            }
            _ => {
                self.cx.err(
                    codes::ARGUMENTS,
                    args[0].span,
                    "nsecs() takes monotonic, boot, tai or sw_tai",
                );
                bad
            }
        }
    }

    /// `strftime(FMT, ns)`: a time, formatted when printed.
    pub(super) fn call_strftime(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("strftime", args, 2, 2, span) {
            return bad;
        }
        let ExprKind::Str(fmt) = &args[0].kind else {
            self.cx.err(
                codes::LITERAL,
                args[0].span,
                "strftime() expects a string literal as first argument",
            );
            return bad;
        };
        let (e, t) = self.expr(&args[1]);
        if t == Ty::None {
            return bad;
        }
        self.want_int(&t, args[1].span, "strftime() time");
        (e, Ty::Strftime(fmt.clone()))
    }

    pub(super) fn time(&mut self, args: &[ast::Expr], span: Span) -> Option<S> {
        if !self.nargs("time", args, 0, 1, span) {
            return None;
        }
        let fmt = match args.first() {
            None => b"%H:%M:%S\n".to_vec(),
            Some(a) => match &a.kind {
                ExprKind::Str(s) => s.clone(),
                _ => {
                    self.cx
                        .err(codes::LITERAL, a.span, "time() expects a string literal");
                    return None;
                }
            },
        };
        let id = self.cx.events.times.len() as u32;
        self.cx.events.times.push(fmt);
        let slot = self.slot(8);
        Some(S::Emit(Emit {
            kind: EventKind::Time as i32,
            id,
            slot,
            parts: Vec::new(),
            size: 0,
        }))
    }
}
