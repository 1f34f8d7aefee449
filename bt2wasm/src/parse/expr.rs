//! Expressions: precedence climbing over bpftrace's C-like operator table,
//! casts, postfix forms, calls, tuples.

use super::{Bail, Parser, R};
use crate::ast::*;
use crate::diag::codes;
use crate::lex::Tok;
use rpn2wasm::Span;

/// Binary operator levels, loosest first.
const LEVELS: &[&[(&str, BinOp)]] = &[
    &[("||", BinOp::LOr)],
    &[("&&", BinOp::LAnd)],
    &[("|", BinOp::BitOr)],
    &[("^", BinOp::BitXor)],
    &[("&", BinOp::BitAnd)],
    &[("==", BinOp::Eq), ("!=", BinOp::Ne)],
    &[
        ("<=", BinOp::Le),
        (">=", BinOp::Ge),
        ("<", BinOp::Lt),
        (">", BinOp::Gt),
    ],
    &[("<<", BinOp::Shl), (">>", BinOp::Shr)],
    &[("+", BinOp::Add), ("-", BinOp::Sub)],
    &[("*", BinOp::Mul), ("/", BinOp::Div), ("%", BinOp::Mod)],
];

/// Type names a parenthesised identifier is a cast to.
pub const CAST_TYPES: &[&str] = &[
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "int", "char",
    "short", "long", "unsigned", "signed", "void", "bool", "size_t", "u8", "u16", "u32", "u64",
    "s8", "s16", "s32", "s64",
];

fn join(a: Span, b: Span) -> Span {
    Span {
        file: a.file,
        lo: a.lo.min(b.lo),
        hi: a.hi.max(b.hi),
    }
}

impl Parser<'_> {
    /// An expression (ternary level).
    pub(super) fn expr(&mut self) -> R<Expr> {
        self.enter()?;
        let r = self.ternary();
        self.leave();
        r
    }

    fn ternary(&mut self) -> R<Expr> {
        let c = self.binary(0)?;
        if !self.is("?") {
            return Ok(c);
        }
        self.bump();
        let a = self.expr()?;
        self.expect(":")?;
        self.enter()?;
        let b = self.ternary();
        self.leave();
        let b = b?;
        let span = join(c.span, b.span);
        Ok(Expr {
            kind: ExprKind::Ternary(Box::new(c), Box::new(a), Box::new(b)),
            span,
        })
    }

    /// Whether the current `/` closes a predicate (followed by `{` or `/`).
    fn ends_predicate(&self) -> bool {
        if !self.in_pred || !self.is("/") {
            return false;
        }
        let mut i = self.span.hi as usize;
        while let Some(c) = self.src.get(i) {
            match c {
                b' ' | b'\t' | b'\n' | b'\r' => i += 1,
                b'{' | b'/' => return true,
                _ => return false,
            }
        }
        false
    }

    fn binary(&mut self, level: usize) -> R<Expr> {
        if level == LEVELS.len() {
            return self.cast();
        }
        let mut l = self.binary(level + 1)?;
        loop {
            let Tok::Punct(p) = &self.tok else {
                return Ok(l);
            };
            let Some((_, op)) = LEVELS[level].iter().find(|(t, _)| t == p) else {
                return Ok(l);
            };
            if *op == BinOp::Div && self.ends_predicate() {
                return Ok(l);
            }
            let op = *op;
            let op_span = self.span;
            self.bump();
            self.enter()?;
            let r = self.binary(level + 1);
            self.leave();
            let r = r?;
            l = Expr {
                kind: ExprKind::Binop(op, Box::new(l), Box::new(r)),
                span: op_span,
            };
        }
    }

    /// `(type)expr`, or a unary expression.
    fn cast(&mut self) -> R<Expr> {
        if self.is("(") {
            let save_pos = self.lex.pos;
            let (save_tok, save_span, save_prev) = (self.tok.clone(), self.span, self.prev);
            let start = self.span;
            self.bump();
            let is_type = matches!(&self.tok, Tok::Ident(t)
                if CAST_TYPES.contains(&t.as_str()) || super::cdef::starts_type(t));
            if is_type {
                let ty = match self.type_spec()? {
                    crate::ast::TypeSpec::Named(n) => n,
                    _ => String::new(),
                };
                let mut ptr = 0u8;
                while self.is("*") {
                    ptr = ptr.saturating_add(1);
                    self.bump();
                }
                let mut array = None;
                if self.is("[")
                    && let Tok::Int(n) = self.peek_tok()
                {
                    self.bump();
                    self.bump();
                    self.expect("]")?;
                    array = Some(n.min(u32::MAX as u64) as u32);
                } else if self.is("[") && matches!(self.peek_tok(), Tok::Punct("]")) {
                    // `(int8[])x`: the size is the operand's.
                    self.bump();
                    self.bump();
                    array = Some(0);
                }
                if self.is(")") && !ty.is_empty() {
                    let end = self.span;
                    self.bump();
                    self.enter()?;
                    let e = self.cast();
                    self.leave();
                    let e = e?;
                    return Ok(Expr {
                        kind: ExprKind::Cast {
                            ty,
                            ptr,
                            array,
                            expr: Box::new(e),
                        },
                        span: join(start, end),
                    });
                }
            }
            // Not a cast: rewind.
            self.lex.pos = save_pos;
            self.tok = save_tok;
            self.span = save_span;
            self.prev = save_prev;
        }
        self.unary()
    }

    fn unary(&mut self) -> R<Expr> {
        let start = self.span;
        let op = match &self.tok {
            Tok::Punct("-") => Some(UnOp::Neg),
            Tok::Punct("!") => Some(UnOp::Not),
            Tok::Punct("~") => Some(UnOp::BitNot),
            Tok::Punct("*") => Some(UnOp::Deref),
            _ => None,
        };
        if let Some(op) = op {
            self.bump();
            self.enter()?;
            let e = self.cast();
            self.leave();
            let e = e?;
            let span = join(start, e.span);
            return Ok(Expr {
                kind: ExprKind::Unop(op, Box::new(e)),
                span,
            });
        }
        if self.is("++") || self.is("--") {
            let inc = self.is("++");
            self.bump();
            let t = self.postfix()?;
            if !matches!(t.kind, ExprKind::Map(_) | ExprKind::Var(_)) {
                let msg = format!(
                    "The {} operator must be applied to a map or variable",
                    if inc { "++" } else { "--" }
                );
                self.diags.error(codes::SYNTAX, start, msg);
                return Err(Bail);
            }
            let span = join(start, t.span);
            return Ok(Expr {
                kind: ExprKind::IncDec {
                    target: Box::new(t),
                    inc,
                    post: false,
                },
                span,
            });
        }
        self.postfix()
    }

    fn postfix(&mut self) -> R<Expr> {
        let mut e = self.primary()?;
        loop {
            if self.is(".") || self.is("->") {
                let arrow = self.is("->");
                let dot = self.span;
                self.bump();
                match self.tok.clone() {
                    Tok::Ident(f) => {
                        let span = join(dot, self.span);
                        self.bump();
                        e = Expr {
                            kind: ExprKind::Field {
                                base: Box::new(e),
                                field: f,
                                arrow,
                            },
                            span,
                        };
                    }
                    Tok::Int(n) if !arrow => {
                        let span = self.span;
                        self.bump();
                        e = Expr {
                            kind: ExprKind::TupleIndex(Box::new(e), n),
                            span,
                        };
                    }
                    _ => return self.unexpected("a field name"),
                }
            } else if self.is("[") {
                let lo = self.span;
                self.bump();
                let i = self.expr()?;
                let hi = self.expect("]")?;
                e = Expr {
                    kind: ExprKind::Index(Box::new(e), Box::new(i)),
                    span: join(lo, hi),
                };
            } else if (self.is("++") || self.is("--"))
                && matches!(e.kind, ExprKind::Map(_) | ExprKind::Var(_))
            {
                let inc = self.is("++");
                let span = join(e.span, self.span);
                self.bump();
                e = Expr {
                    kind: ExprKind::IncDec {
                        target: Box::new(e),
                        inc,
                        post: true,
                    },
                    span,
                };
            } else {
                return Ok(e);
            }
        }
    }

    fn primary(&mut self) -> R<Expr> {
        let span = self.span;
        match self.tok.clone() {
            Tok::Int(v) => {
                self.bump();
                Ok(Expr {
                    kind: ExprKind::Int(v),
                    span,
                })
            }
            Tok::Str(s) => {
                self.bump();
                Ok(Expr {
                    kind: ExprKind::Str(s),
                    span,
                })
            }
            Tok::Var(v) => {
                self.bump();
                Ok(Expr {
                    kind: ExprKind::Var(v),
                    span,
                })
            }
            Tok::Param(n) => {
                self.bump();
                Ok(Expr {
                    kind: ExprKind::Param(n),
                    span,
                })
            }
            Tok::ParamCount => {
                self.bump();
                Ok(Expr {
                    kind: ExprKind::ParamCount,
                    span,
                })
            }
            Tok::Map(name) => {
                self.bump();
                let mut keys = Vec::new();
                let mut end = span;
                if self.is("[") {
                    self.bump();
                    keys = self.args_until("]")?;
                    end = self.prev;
                    if keys.is_empty() {
                        self.diags.error(
                            codes::SYNTAX,
                            end,
                            "syntax error, unexpected ], expecting a key",
                        );
                        return Err(Bail);
                    }
                }
                let span = join(span, end);
                Ok(Expr {
                    kind: ExprKind::Map(MapRef { name, keys, span }),
                    span,
                })
            }
            Tok::Ident(name) if name == "sizeof" || name == "offsetof" => {
                self.sizeof_offsetof(name, span)
            }
            Tok::Ident(name) => {
                self.bump();
                if self.is("(") {
                    self.bump();
                    let args = self.args_until(")")?;
                    let end = self.prev;
                    Ok(Expr {
                        kind: ExprKind::Call {
                            name,
                            name_span: span,
                            args,
                        },
                        span: join(span, end),
                    })
                } else {
                    Ok(Expr {
                        kind: ExprKind::Ident(name),
                        span,
                    })
                }
            }
            Tok::Punct("(") => {
                self.bump();
                let first = self.expr()?;
                if self.is(",") {
                    self.bump();
                    let mut items = vec![first];
                    items.extend(self.args_until(")")?);
                    let end = self.prev;
                    return Ok(Expr {
                        kind: ExprKind::Tuple(items),
                        span: join(span, end),
                    });
                }
                self.expect(")")?;
                Ok(first)
            }
            _ => self.unexpected("an expression"),
        }
    }

    /// `sizeof(TYPE)`, `sizeof(expr)` (a call) and `offsetof(TYPE, a.b)`;
    /// `name` says which.
    fn sizeof_offsetof(&mut self, name: String, span: Span) -> R<Expr> {
        self.bump();
        let open = self.expect("(")?;
        let is_type = matches!(&self.tok, Tok::Ident(t) if super::cdef::starts_type(t));
        if name == "offsetof" {
            let ty = match self.type_spec()? {
                crate::ast::TypeSpec::Named(n) => n,
                _ => return self.unexpected("a type name"),
            };
            self.expect(",")?;
            let mut path = Vec::new();
            loop {
                match self.tok.clone() {
                    Tok::Ident(f) => {
                        path.push(f);
                        self.bump();
                    }
                    _ => return self.unexpected("a field name"),
                }
                if !self.eat(".") {
                    break;
                }
            }
            let end = self.expect(")")?;
            return Ok(Expr {
                kind: ExprKind::Offsetof { ty, path },
                span: join(span, end),
            });
        }
        if is_type {
            let ty = match self.type_spec()? {
                crate::ast::TypeSpec::Named(n) => n,
                _ => return self.unexpected("a type name"),
            };
            let mut ptr = 0u8;
            while self.eat("*") {
                ptr = ptr.saturating_add(1);
            }
            let end = self.expect(")")?;
            return Ok(Expr {
                kind: ExprKind::SizeofType { ty, ptr },
                span: join(span, end),
            });
        }
        let _ = open;
        let arg = self.expr()?;
        let end = self.expect(")")?;
        Ok(Expr {
            kind: ExprKind::Call {
                name,
                name_span: span,
                args: vec![arg],
            },
            span: join(span, end),
        })
    }

    /// Comma-separated expressions up to `close` (consumed).
    fn args_until(&mut self, close: &str) -> R<Vec<Expr>> {
        let mut v = Vec::new();
        if self.eat(close) {
            return Ok(v);
        }
        loop {
            v.push(self.expr()?);
            if self.eat(close) {
                return Ok(v);
            }
            if !self.eat(",") {
                return self.unexpected(&format!("`,` or `{close}`"));
            }
        }
    }
}
