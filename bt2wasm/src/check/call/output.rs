//! Output and control statements: `printf` (and `cat`, `system`, which take
//! a format the same way), `print`, `exit`.

use super::int_literal;
use crate::ast::{self, ExprKind};
use crate::check::Fx;
use crate::check::format::{self, Kind};
use crate::diag::codes;
use crate::ir::{E, Emit, Part, S, Ty};
use hostabi::event::{EventKind, PrintfEntry};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `exit([code])` as a statement.
    pub(super) fn stmt_exit(&mut self, args: &[ast::Expr], span: Span) -> Option<S> {
        if !self.nargs("exit", args, 0, 1, span) {
            return None;
        }
        let stop = S::Return(hostabi::Outcome::Stop as i32);
        let Some(a) = args.first() else {
            return Some(stop);
        };
        // `exit(code)`: an EXIT event carries the status
        // wprobe ends with, then the run stops as for `exit()`.
        let (v, t) = self.expr(a);
        if !t.is_int() {
            self.cx.err(
                codes::ARGUMENTS,
                a.span,
                "exit() expects an integer exit code",
            );
            return None;
        }
        let slot = self.slot(8);
        let emit = S::Emit(Emit {
            kind: EventKind::Exit as i32,
            id: 0,
            slot,
            parts: vec![Part {
                e: v,
                ty: Ty::I64,
                off: 0,
            }],
            size: 8,
        });
        Some(S::If(E::Int(1), vec![emit, stop], Vec::new()))
    }

    /// `printf`, and `cat`/`system`, which take a format the same way.
    pub(super) fn printf(&mut self, args: &[ast::Expr], span: Span, kind: EventKind) -> Option<S> {
        let Some(first) = args.first() else {
            self.cx.err(
                codes::ARGUMENTS,
                span,
                "printf() requires at least 1 argument (0 provided)",
            );
            return None;
        };
        let ExprKind::Str(fmt) = &first.kind else {
            self.cx.err(
                codes::LITERAL,
                first.span,
                "printf() expects a string literal as first argument",
            );
            return None;
        };
        let specs = format::specs(fmt);
        let rest = &args[1..];
        if rest.len() < specs.len() {
            self.cx.err(
                codes::FORMAT,
                span,
                format!(
                    "printf: Not enough arguments for format string ({} supplied, {} expected)",
                    rest.len(),
                    specs.len()
                ),
            );
            return None;
        }
        if rest.len() > specs.len() {
            self.cx.err(
                codes::FORMAT,
                span,
                format!(
                    "printf: Too many arguments for format string ({} supplied, {} expected)",
                    rest.len(),
                    specs.len()
                ),
            );
            return None;
        }
        let mut parts = Vec::new();
        let mut layouts = Vec::new();
        let mut off = 0;
        for (a, s) in rest.iter().zip(&specs) {
            let (e, t) = self.expr(a);
            if t == Ty::None {
                return None;
            }
            let given = match t {
                Ty::Int { .. } | Ty::Ptr(_) => Kind::Int,
                // An enum prints as its number (%d) or its name (%s).
                Ty::Enum(_) if s.kind != Kind::Buf => s.kind,
                Ty::Buf(_) => Kind::Buf,
                _ => Kind::Str,
            };
            if given != s.kind {
                self.cx.err(
                    codes::FORMAT,
                    a.span,
                    format!(
                        "printf: %{} specifier expects a value of type {} ({} supplied)",
                        s.conv,
                        s.kind.name(),
                        given.name()
                    ),
                );
                return None;
            }
            let sz = t.size();
            layouts.push(t.layout());
            parts.push(Part { e, ty: t, off });
            off += sz;
        }
        let id = self.cx.events.printf.len() as u32;
        self.cx.events.printf.push(PrintfEntry {
            format: fmt.clone(),
            args: layouts,
        });
        let slot = self.slot(off.max(8));
        Some(S::Emit(Emit {
            kind: kind as i32,
            id,
            slot,
            parts,
            size: off,
        }))
    }

    pub(super) fn print(&mut self, args: &[ast::Expr], span: Span) -> Option<S> {
        if !self.nargs("print", args, 1, 3, span) {
            return None;
        }
        if let ExprKind::Map(m) = &args[0].kind
            && m.keys.is_empty()
        {
            let info = self.cx.map(&m.name);
            info.used.get_or_insert(m.span);
            let index = info.index;
            let mut lits = [0i64; 2];
            for (i, a) in args[1..].iter().enumerate() {
                match int_literal(a) {
                    Some(v) if v >= 0 => lits[i] = v,
                    _ => {
                        self.cx.err(
                            codes::LITERAL,
                            a.span,
                            "print(): top and div must be non-negative integer literals",
                        );
                        return None;
                    }
                }
            }
            let slot = self.slot(16);
            let parts = vec![
                Part {
                    e: E::Int(lits[0]),
                    ty: Ty::U64,
                    off: 0,
                },
                Part {
                    e: E::Int(lits[1]),
                    ty: Ty::U64,
                    off: 8,
                },
            ];
            return Some(S::Emit(Emit {
                kind: EventKind::PrintMap as i32,
                id: index,
                slot,
                parts,
                size: 16,
            }));
        }
        if args.len() > 1 {
            self.cx.err(
                codes::ARGUMENTS,
                span,
                "Non-map print() only takes 1 argument, 2 found",
            );
            return None;
        }
        let (e, t) = self.expr(&args[0]);
        if t == Ty::None {
            return None;
        }
        let id = self.cx.events.values.len() as u32;
        self.cx.events.values.push(t.layout());
        let size = t.size();
        let slot = self.slot(size);
        Some(S::Emit(Emit {
            kind: EventKind::PrintValue as i32,
            id,
            slot,
            parts: vec![Part { e, ty: t, off: 0 }],
            size,
        }))
    }
}
