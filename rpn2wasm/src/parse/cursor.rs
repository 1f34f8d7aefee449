//! A cursor over the tokens of one line, with the operand readers shared by
//! instructions and header statements: numbers of an operand class (§2.5),
//! symbolic expressions (§2.7), names.

use crate::diag::codes;
use crate::lex::{Tok, TokKind, is_ident};
use crate::preprocess::PpLine;
use crate::source::Span;

/// A parse error inside one line (byte positions in the line's text).
#[derive(Clone, Debug)]
pub(crate) struct PErr {
    pub code: &'static str,
    pub message: String,
    pub lo: usize,
    pub hi: usize,
    pub note: Option<String>,
}

impl PErr {
    pub(crate) fn new(
        code: &'static str,
        lo: usize,
        hi: usize,
        message: impl Into<String>,
    ) -> Self {
        PErr {
            code,
            message: message.into(),
            lo,
            hi,
            note: None,
        }
    }

    pub(crate) fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// Operand classes of spec §2.5 (plus `Index`, whose limit depends on the
/// header and is checked later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// 0 … 255: counts, `exit n`.
    U8,
    /// 1 … 64: `pbl/pbr/pzl/pzr n`.
    Bit,
    /// 0 … 65535.
    U16,
    /// 1 … 65535: `setmaj n`.
    Maj,
    /// −32768 … 32767: `tsp`/`sbp` offsets.
    S16,
    /// 0 … 255: `push b`.
    Byte,
    /// 0 … 2^64−1: variable index (checked against vars/gvars later).
    Index,
}

impl Class {
    fn range(self) -> (i128, i128) {
        match self {
            Class::U8 | Class::Byte => (0, 255),
            Class::Bit => (1, 64),
            Class::U16 => (0, 65535),
            Class::Maj => (1, 65535),
            Class::S16 => (-32768, 32767),
            Class::Index => (0, u64::MAX as i128),
        }
    }

    fn signed(self) -> bool {
        self == Class::S16
    }
}

/// A symbolic expression (§2.7) after syntax checks: the numbers summed
/// modulo 2^64 and at most one (added) symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Expr {
    /// Sum of the numeric terms, modulo 2^64.
    pub num: u64,
    /// The symbol term and its span.
    pub sym: Option<(String, Span)>,
    /// The whole expression.
    pub span: Span,
}

/// Tokens of one line and a position in them.
pub(crate) struct Cur<'a> {
    pub line: &'a PpLine,
    pub toks: &'a [Tok],
    pub i: usize,
}

impl<'a> Cur<'a> {
    pub(crate) fn new(line: &'a PpLine, toks: &'a [Tok]) -> Self {
        Cur { line, toks, i: 0 }
    }

    pub(crate) fn text(&self, t: Tok) -> &'a [u8] {
        &self.line.text[t.lo..t.hi]
    }

    pub(crate) fn show(&self, t: Tok) -> String {
        String::from_utf8_lossy(self.text(t)).into_owned()
    }

    /// Lower-case text of a token.
    pub(crate) fn lower(&self, t: Tok) -> String {
        self.show(t).to_ascii_lowercase()
    }

    pub(crate) fn peek(&self) -> Option<Tok> {
        self.toks.get(self.i).copied()
    }

    pub(crate) fn peek2(&self) -> Option<Tok> {
        self.toks.get(self.i + 1).copied()
    }

    pub(crate) fn bump(&mut self) -> Option<Tok> {
        let t = self.peek()?;
        self.i += 1;
        Some(t)
    }

    /// End of the last token of the line (where a missing operand is reported).
    pub(crate) fn end(&self) -> usize {
        self.toks.last().map_or(0, |t| t.hi)
    }

    /// End of the last token consumed.
    pub(crate) fn consumed_end(&self) -> usize {
        self.i
            .checked_sub(1)
            .and_then(|i| self.toks.get(i))
            .map_or(0, |t| t.hi)
    }

    pub(crate) fn span(&self, lo: usize, hi: usize) -> Span {
        self.line.span(lo, hi)
    }

    pub(crate) fn tspan(&self, t: Tok) -> Span {
        self.line.span(t.lo, t.hi)
    }

    /// A "missing operand" error at the end of the line.
    pub(crate) fn missing(&self, what: &str) -> PErr {
        let e = self.end();
        PErr::new(codes::MISSING_OPERAND, e, e, format!("missing {what}"))
    }

    /// Describes a token for messages.
    pub(crate) fn describe(&self, t: Tok) -> String {
        match t.kind {
            TokKind::Number(_) => format!("number `{}`", self.show(t)),
            TokKind::Word => format!("`{}`", self.show(t)),
            TokKind::Str => "a quoted string".to_string(),
            _ => format!("`{}`", self.show(t)),
        }
    }

    /// Requires the end of the line.
    pub(crate) fn expect_end(&self) -> Result<(), PErr> {
        match self.peek() {
            None => Ok(()),
            Some(t) => Err(PErr::new(
                codes::EXTRA_OPERAND,
                t.lo,
                t.hi,
                format!("unexpected {} after the last operand", self.describe(t)),
            )),
        }
    }

    /// Requires a comma (after `what`).
    pub(crate) fn comma(&mut self, what: &str) -> Result<(), PErr> {
        match self.bump() {
            Some(Tok {
                kind: TokKind::Comma,
                ..
            }) => Ok(()),
            Some(t) => Err(PErr::new(
                codes::UNEXPECTED_TOKEN,
                t.lo,
                t.hi,
                format!("expected `,` after `{what}`, found {}", self.describe(t)),
            )),
            None => Err(self.missing(&format!("`,` and operand after `{what}`"))),
        }
    }

    /// Reads a number of class `class`; returns it (two's complement for
    /// negatives) and its byte range.
    pub(crate) fn number(&mut self, class: Class, what: &str) -> Result<(u64, usize, usize), PErr> {
        let Some(first) = self.bump() else {
            return Err(self.missing(what));
        };
        let (neg, t) = match first.kind {
            TokKind::Minus if !class.signed() => {
                return Err(PErr::new(
                    codes::SIGN_NOT_ALLOWED,
                    first.lo,
                    first.hi,
                    format!("{what} must not be negative"),
                ));
            }
            TokKind::Minus => match self.bump() {
                Some(t) => (true, t),
                None => return Err(self.missing(&format!("number after `-` ({what})"))),
            },
            _ => (false, first),
        };
        let TokKind::Number(v) = t.kind else {
            return Err(PErr::new(
                codes::UNEXPECTED_TOKEN,
                t.lo,
                t.hi,
                format!("expected {what}, found {}", self.describe(t)),
            ));
        };
        let (min, max) = class.range();
        let value: i128 = if v > i128::MAX as u128 {
            i128::MAX
        } else if neg {
            -(v as i128)
        } else {
            v as i128
        };
        if value == 0 && class == Class::Maj {
            return Err(PErr::new(
                codes::MAJOR_ZERO,
                first.lo,
                t.hi,
                "major code 0 is reserved for stack-trace records",
            ));
        }
        if value < min || value > max {
            return Err(PErr::new(
                codes::NUMBER_OUT_OF_RANGE,
                first.lo,
                t.hi,
                format!(
                    "{what} `{}{}` is out of range ({min} … {max})",
                    if neg { "-" } else { "" },
                    self.show(t)
                ),
            ));
        }
        Ok((value as u64, first.lo, t.hi))
    }

    /// Reads an identifier (label or procedure name).
    pub(crate) fn name(&mut self, what: &str) -> Result<(String, Tok), PErr> {
        let Some(t) = self.bump() else {
            return Err(self.missing(what));
        };
        match t.kind {
            TokKind::Word if is_ident(self.text(t)) => Ok((self.show(t), t)),
            TokKind::Word | TokKind::Number(_) => Err(PErr::new(
                codes::INVALID_NAME,
                t.lo,
                t.hi,
                format!("invalid {what} {}", self.describe(t)),
            )
            .note("names are made of letters, digits and `_` and do not start with a digit")),
            _ => Err(PErr::new(
                codes::UNEXPECTED_TOKEN,
                t.lo,
                t.hi,
                format!("expected {what}, found {}", self.describe(t)),
            )),
        }
    }

    /// Reads a symbolic expression `[-] term {(+|-) term}` (§2.7), stopping
    /// before a token that cannot continue it (`,`, `:`, end of line).
    pub(crate) fn expr(&mut self) -> Result<Expr, PErr> {
        let lo = self.peek().map_or(self.end(), |t| t.lo);
        let mut neg = false;
        if let Some(Tok {
            kind: TokKind::Minus,
            ..
        }) = self.peek()
        {
            neg = true;
            self.i += 1;
        }
        let leading_neg = neg;
        let mut num: u64 = 0;
        let mut sym: Option<(String, Span)> = None;
        let mut terms = 0;
        let mut first_literal: u128 = 0;
        loop {
            let Some(t) = self.bump() else {
                return Err(self.missing("number or symbol"));
            };
            terms += 1;
            match t.kind {
                TokKind::Number(v) => {
                    if v > u64::MAX as u128 {
                        return Err(PErr::new(
                            codes::NUMBER_OUT_OF_RANGE,
                            t.lo,
                            t.hi,
                            format!("number `{}` does not fit in 64 bits", self.show(t)),
                        ));
                    }
                    if terms == 1 {
                        first_literal = v;
                    }
                    let v = v as u64;
                    num = if neg {
                        num.wrapping_sub(v)
                    } else {
                        num.wrapping_add(v)
                    };
                }
                TokKind::Word => {
                    let name = self.show(t);
                    if let Some((other, _)) = &sym {
                        return Err(PErr::new(
                            codes::INVALID_EXPRESSION,
                            t.lo,
                            t.hi,
                            format!("second symbol `{name}` in an expression (already `{other}`)"),
                        )
                        .note("an expression may contain at most one symbol"));
                    }
                    if neg {
                        return Err(PErr::new(
                            codes::INVALID_EXPRESSION,
                            t.lo,
                            t.hi,
                            format!("symbol `{name}` is subtracted"),
                        )
                        .note("a symbol must be added, not subtracted (`main - 8` is valid, `8 - main` is not)"));
                    }
                    sym = Some((name, self.tspan(t)));
                }
                _ => {
                    return Err(PErr::new(
                        codes::UNEXPECTED_TOKEN,
                        t.lo,
                        t.hi,
                        format!("expected a number or a symbol, found {}", self.describe(t)),
                    ));
                }
            }
            match self.peek().map(|t| t.kind) {
                Some(TokKind::Plus) => neg = false,
                Some(TokKind::Minus) => neg = true,
                _ => break,
            }
            self.i += 1;
        }
        if terms == 1 && leading_neg && first_literal > 1u128 << 63 {
            // A lone negative literal: imm64 goes down to −2^63 only.
            return Err(PErr::new(
                codes::NUMBER_OUT_OF_RANGE,
                lo,
                self.consumed_end(),
                "value is below −2^63",
            ));
        }
        Ok(Expr {
            num,
            sym,
            span: self.span(lo, self.consumed_end()),
        })
    }
}
