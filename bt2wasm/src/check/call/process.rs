//! Reads of the traced process's state: `reg`, `uaddr`, `usym`, `ustack`,
//! `uptr`.

use super::int_literal;
use crate::ast::{self, ExprKind};
use crate::check::Fx;
use crate::diag::codes;
use crate::ir::{E, Ty};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `reg("NAME")`: a register of the hit thread, by its pt_regs name.
    pub(super) fn call_reg(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("reg", args, 1, 1, span) {
            return bad;
        }
        let ExprKind::Str(r) = &args[0].kind else {
            self.cx.err(
                codes::LITERAL,
                args[0].span,
                "reg() expects a string literal",
            );
            return bad;
        };
        let r = String::from_utf8_lossy(r).to_string();
        if self.ctx == crate::check::Ctx::Special {
            self.cx.err(
                codes::BUILTIN_CONTEXT,
                span,
                "reg can not be used with \"BEGIN\"/\"END\"/\"interval\" probes",
            );
            return bad;
        }
        // bpftrace's names are pt_regs fields: ip, sp, bp, ax...
        match crate::events::register(&r) {
            Some(id) => (E::Reg(id), Ty::U64),
            None => {
                self.cx.err(
                    codes::ARGUMENTS,
                    args[0].span,
                    format!("'{r}' is not a valid register"),
                );
                bad
            }
        }
    }

    /// `uaddr("NAME")`: checks its argument, then the address (`uaddr`).
    pub(super) fn call_uaddr(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("uaddr", args, 1, 1, span) {
            return bad;
        }
        let ExprKind::Str(name) = &args[0].kind else {
            self.cx.err(
                codes::LITERAL,
                args[0].span,
                "uaddr() expects a string literal",
            );
            return bad;
        };
        let name = String::from_utf8_lossy(name).into_owned();
        self.uaddr(&name, span)
    }

    /// `uaddr("NAME")`: the address of variable NAME of the probed binary
    /// in the process (its link-time value plus the module's load bias),
    /// a pointer to a signed integer of its size (8 bytes when the size is
    /// not 1, 2, 4 or 8), as bpftrace types it.
    fn uaddr(&mut self, name: &str, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let mut found: Option<(u64, u64)> = None;
        for c in self.concrete {
            let crate::probes::Kind::Uprobe { module, .. } = &c.kind else {
                self.cx.err(
                    codes::BUILTIN_CONTEXT,
                    span,
                    "uaddr can only be used with uprobes and usdt probes",
                );
                return bad;
            };
            let bin = self.cx.dwarf_files.iter().find(|b| {
                let canon = std::fs::canonicalize(&b.path).unwrap_or_else(|_| b.path.clone());
                canon.to_string_lossy() == module.as_str()
                    || b.path.to_string_lossy() == module.as_str()
                    || b.path
                        .file_name()
                        .is_some_and(|f| f.to_string_lossy() == module.as_str())
            });
            let Some(sym) = bin.and_then(|b| b.object(name)) else {
                self.cx.err(
                    codes::NO_MATCH,
                    span,
                    format!("Could not resolve symbol: {module}:{name}"),
                );
                return bad;
            };
            if found.is_some_and(|f| f != sym) {
                self.cx.err(
                    codes::NO_MATCH,
                    span,
                    format!(
                        "uaddr(\"{name}\") names different variables in the probes of this handler"
                    ),
                );
                return bad;
            }
            found = Some(sym);
        }
        let Some((value, size)) = found else {
            self.cx.err(
                codes::BUILTIN_CONTEXT,
                span,
                "uaddr can only be used with uprobes and usdt probes",
            );
            return bad;
        };
        let bytes = if matches!(size, 1 | 2 | 4 | 8) {
            size as u8
        } else {
            8
        };
        (
            E::Bin(
                crate::ast::BinOp::Add,
                false,
                Box::new(E::Int(value as i64)),
                Box::new(E::Fact(crate::ir::Fact::Bias)),
            ),
            Ty::Ptr(Box::new(crate::ctypes::CType::Int {
                signed: true,
                bytes,
            })),
        )
    }

    /// `usym(addr)`: an address, symbolized when printed.
    pub(super) fn call_usym(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("usym", args, 1, 1, span) {
            return bad;
        }
        let (a, at) = self.expr(&args[0]);
        self.want_int(&at, args[0].span, "usym() address");
        let slot = self.slot(16);
        (
            E::Usym {
                addr: Box::new(a),
                slot,
            },
            Ty::Usym,
        )
    }

    /// `ustack([mode,] [limit])`: the user stack.
    pub(super) fn call_ustack(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        // ustack([mode,] [limit])
        let mut frames = self.cx.opts.ustack_frames;
        let mut mode = self.default_stack_mode();
        for a in args {
            match &a.kind {
                ExprKind::Ident(m) if m == "bpftrace" => mode = None,
                ExprKind::Ident(m) if m == "perf" => mode = Some(hostabi::layout::StackMode::Perf),
                ExprKind::Ident(m) if m == "raw" => mode = Some(hostabi::layout::StackMode::Raw),
                _ => match int_literal(a) {
                    Some(n) if (1..=1024).contains(&n) => frames = n as u32,
                    _ => {
                        self.cx.err(
                            codes::ARGUMENTS,
                            a.span,
                            "ustack() expects a stack mode (bpftrace, perf, raw) and/or a frame limit of 1 to 1024",
                        );
                        return bad;
                    }
                },
            }
        }
        self.ustack(frames, mode, span)
    }

    /// `uptr(p)`: the pointer, unchanged (it is already a user pointer).
    pub(super) fn call_uptr(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("uptr", args, 1, 1, span) {
            return bad;
        }
        self.expr(&args[0])
    }
}
