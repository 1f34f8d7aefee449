//! String and buffer calls: `str`, `buf`, `strerror`, `strncmp`,
//! `strcontains`.

use super::int_literal;
use crate::ast;
use crate::check::Fx;
use crate::diag::codes;
use crate::ir::{E, Part, S, Ty};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `str(p[, n])`: a NUL-terminated string read from the process, or a string cut to `n` bytes.
    pub(super) fn call_str(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("str", args, 1, 2, span) {
            return bad;
        }
        let (addr, at) = self.expr(&args[0]);
        let strlen = self.cx.opts.strlen;
        if let Ty::Str(have) = at {
            // str() of a string (a literal, a positional
            // parameter): the string, cut to n bytes.
            let size = match args.get(1).map(int_literal) {
                None => have,
                Some(Some(v)) if v > 0 => (v as u64).min(have as u64) as u32,
                Some(_) => {
                    self.cx.err(
                        codes::LITERAL,
                        args[1].span,
                        "str() of a string takes a positive integer literal length",
                    );
                    return bad;
                }
            };
            let slot = self.slot(size);
            let set = S::SetSlot {
                slot,
                e: addr,
                size,
                src_size: size.saturating_sub(1).min(have),
            };
            return (E::Seq(vec![set], Box::new(E::Slot(slot))), Ty::Str(size));
        }
        if at != Ty::None && !at.is_int() {
            self.cx.err(
                codes::ARGUMENTS,
                args[0].span,
                format!(
                    "str() expects an integer or a pointer type as first argument ({} provided)",
                    at.name()
                ),
            );
            return bad;
        }
        // str(p, n) reads n bytes, its NUL included (bpftrace 0.23;
        // 0.17 kept n characters), at most BPFTRACE_STRLEN.
        let (max, size) = match args.get(1) {
            None => (E::Int(strlen as i64), strlen),
            Some(n) => match int_literal(n) {
                Some(v) if v > 0 => {
                    let size = (v as u64).min(strlen as u64) as u32;
                    (E::Int(size as i64), size)
                }
                Some(_) => {
                    self.cx
                        .err(codes::LITERAL, n.span, "str(): length must be positive");
                    return bad;
                }
                None => {
                    let (ne, nt) = self.expr(n);
                    self.want_int(&nt, n.span, "str() length");
                    (ne, strlen)
                }
            },
        };
        let slot = self.slot(size);
        (
            E::ReadStr {
                addr: Box::new(addr),
                max: Box::new(max),
                slot,
                size,
            },
            Ty::Str(size),
        )
    }

    /// `buf(p[, n])`: bytes of the process (or of an array or a string) as a buffer.
    pub(super) fn call_buf(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("buf", args, 1, 2, span) {
            return bad;
        }
        let strlen = self.cx.opts.strlen;
        let lit_len = match args.get(1).map(int_literal) {
            Some(Some(v)) if v > 0 => Some(v as u32),
            Some(Some(_)) => {
                self.cx.err(
                    codes::LITERAL,
                    args[1].span,
                    "buf(): length must be positive",
                );
                return bad;
            }
            _ => None,
        };
        // An array in the traced process: its bytes.
        if let Some((addr, c, _)) = self.place(&args[0])
            && matches!(c, crate::ctypes::CType::Array(..))
        {
            let cap = lit_len.unwrap_or(c.size()).min(strlen.max(c.size()));
            let slot = self.slot(8 + cap);
            return (
                E::ReadBuf {
                    addr: Box::new(addr),
                    len: Box::new(E::Int(cap as i64)),
                    slot,
                    cap,
                },
                Ty::Buf(cap),
            );
        }
        let (addr, at) = self.expr(&args[0]);
        if let Ty::Str(have) = at {
            // A string's bytes (its NUL too, when the length
            // reaches it): a length and the bytes, as a buffer is
            // laid out.
            let n = lit_len.unwrap_or(have.saturating_sub(1)).min(have);
            let slot = self.slot(8 + n);
            let e = E::Tuple {
                slot,
                parts: vec![
                    Part {
                        e: E::Int(n as i64),
                        ty: Ty::U64,
                        off: 0,
                    },
                    Part {
                        e: addr,
                        ty: Ty::Str(n.max(1)),
                        off: 8,
                    },
                ],
            };
            return (e, Ty::Buf(n.max(1)));
        }
        self.want_int(&at, args[0].span, "buf() address");
        let (len, cap) = match (args.get(1), lit_len) {
            (None, _) => (E::Int(strlen as i64), strlen),
            (Some(_), Some(v)) => (E::Int(v as i64), v.min(strlen)),
            (Some(n), None) => {
                let (ne, nt) = self.expr(n);
                self.want_int(&nt, n.span, "buf() length");
                (ne, strlen)
            }
        };
        let slot = self.slot(8 + cap);
        (
            E::ReadBuf {
                addr: Box::new(addr),
                len: Box::new(len),
                slot,
                cap,
            },
            Ty::Buf(cap),
        )
    }

    /// `strerror(errno)`: the C library's message, from a table in static data.
    pub(super) fn call_strerror(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("strerror", args, 1, 1, span) {
            return bad;
        }
        let (e, t) = self.expr(&args[0]);
        if t == Ty::None {
            return bad;
        }
        self.want_int(&t, args[0].span, "strerror() argument");
        // The C library's messages, one per errno, in static data.
        const ERRNOS: i32 = 134;
        let msgs: Vec<String> = (0..=ERRNOS)
            .map(|n| {
                if n == ERRNOS {
                    return "Unknown error".to_string();
                }
                let m = std::io::Error::from_raw_os_error(n).to_string();
                m.split(" (os error").next().unwrap_or(&m).to_string()
            })
            .collect();
        let stride = msgs.iter().map(|m| m.len() as u32 + 1).max().unwrap_or(1);
        let stride = stride.div_ceil(8) * 8;
        let mut bytes = Vec::new();
        for m in &msgs {
            let mut b = m.as_bytes().to_vec();
            b.resize(stride as usize, 0);
            bytes.extend(b);
        }
        let base = self.cx.string(&bytes);
        (
            E::TableAt {
                base,
                stride,
                count: msgs.len() as u32,
                index: Box::new(e),
            },
            Ty::Str(stride),
        )
    }

    /// `strncmp(a, b, n)`: 0 when the first `n` bytes of two strings are equal.
    pub(super) fn call_strncmp(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("strncmp", args, 3, 3, span) {
            return bad;
        }
        let (a, at) = self.expr(&args[0]);
        let (b, bt) = self.expr(&args[1]);
        let Some(n) = int_literal(&args[2]).filter(|n| *n >= 0) else {
            self.cx.err(
                codes::LITERAL,
                args[2].span,
                "strncmp() expects an integer literal as third argument",
            );
            return bad;
        };
        match (at, bt) {
            (Ty::Str(x), Ty::Str(y)) => (
                E::StrEq {
                    ne: true,
                    a: Box::new(a),
                    b: Box::new(b),
                    n: (n as u32).min(x).min(y),
                },
                Ty::U64,
            ),
            (x, y) => {
                if x != Ty::None && y != Ty::None {
                    self.cx
                        .err(codes::ARGUMENTS, span, "strncmp() expects two strings");
                }
                bad
            }
        }
    }

    /// `strcontains(hay, needle)`: whether a string contains the other.
    pub(super) fn call_strcontains(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("strcontains", args, 2, 2, span) {
            return bad;
        }
        let (a, at) = self.expr(&args[0]);
        let (b, bt) = self.expr(&args[1]);
        match (at, bt) {
            (Ty::Str(x), Ty::Str(y)) => (
                E::StrContains {
                    hay: Box::new(a),
                    hn: x,
                    needle: Box::new(b),
                    nn: y,
                },
                Ty::U64,
            ),
            (x, y) => {
                if x != Ty::None && y != Ty::None {
                    self.cx
                        .err(codes::ARGUMENTS, span, "strcontains() expects two strings");
                }
                bad
            }
        }
    }
}
