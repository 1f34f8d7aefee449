//! C definitions in a program (`struct Foo { int a; char b[10]; };`,
//! `union`, `enum E { A, B = 5 };`), the type names of casts and
//! `sizeof` (`unsigned int`, `struct Foo`), and `config = { k = v; }`.

use super::{Bail, Parser, R};
use crate::ast::{CMember, TypeSpec};
use crate::diag::codes;
use crate::lex::Tok;

/// Words that make up C base type names.
const BASE_WORDS: &[&str] = &[
    "unsigned", "signed", "char", "short", "int", "long", "float", "double", "void", "_Bool",
    "bool", "const", "volatile",
];

/// Whether `w` starts a type name (in a cast, `sizeof`, a member).
pub fn starts_type(w: &str) -> bool {
    matches!(w, "struct" | "union" | "enum")
        || BASE_WORDS.contains(&w)
        || crate::ctypes::base_type(w).is_some()
}

impl Parser<'_> {
    fn ident(&mut self, what: &str) -> R<String> {
        match self.tok.clone() {
            Tok::Ident(n) => {
                self.bump();
                Ok(n)
            }
            _ => self.unexpected(what),
        }
    }

    fn int_lit(&mut self) -> R<i64> {
        let neg = self.eat("-");
        match self.tok {
            Tok::Int(v) => {
                self.bump();
                Ok(if neg {
                    (v as i64).wrapping_neg()
                } else {
                    v as i64
                })
            }
            _ => self.unexpected("an integer"),
        }
    }

    /// A type: `struct X [{...}]`, `union X [{...}]`, `enum X [{...}]`, or
    /// base words (`unsigned long`, `uint8_t`).
    pub(super) fn type_spec(&mut self) -> R<TypeSpec> {
        let Tok::Ident(w) = self.tok.clone() else {
            return self.unexpected("a type");
        };
        match w.as_str() {
            "struct" | "union" | "enum" => {
                self.bump();
                let name = match &self.tok {
                    Tok::Ident(n) => {
                        let n = n.clone();
                        self.bump();
                        Some(n)
                    }
                    _ => None,
                };
                if !self.is("{") {
                    let Some(n) = name else {
                        return self.unexpected("a name or `{`");
                    };
                    return Ok(TypeSpec::Named(format!("{w} {n}")));
                }
                self.bump();
                if w == "enum" {
                    let values = self.enumerators()?;
                    return Ok(TypeSpec::Enum { name, values });
                }
                let members = self.members()?;
                Ok(TypeSpec::Record {
                    union: w == "union",
                    name,
                    members,
                })
            }
            _ => {
                let mut words = Vec::new();
                while let Tok::Ident(x) = &self.tok {
                    let base = BASE_WORDS.contains(&x.as_str());
                    if !base && !words.is_empty() {
                        break;
                    }
                    words.push(x.clone());
                    self.bump();
                    if !base {
                        break;
                    }
                }
                Ok(TypeSpec::Named(words.join(" ")))
            }
        }
    }

    /// An enum's enumerators after its `{`, and the `}`: `A [= n], ...`.
    fn enumerators(&mut self) -> R<Vec<(String, Option<i64>)>> {
        let mut values = Vec::new();
        while !self.is("}") {
            let n = self.ident("an enumerator")?;
            let v = if self.eat("=") {
                Some(self.int_lit()?)
            } else {
                None
            };
            values.push((n, v));
            if !self.eat(",") {
                break;
            }
        }
        self.expect("}")?;
        Ok(values)
    }

    /// Members up to the closing `}` (consumed); the last `;` is optional.
    fn members(&mut self) -> R<Vec<CMember>> {
        let mut out = Vec::new();
        self.enter()?;
        loop {
            if self.eat("}") {
                break;
            }
            let ty = self.type_spec()?;
            loop {
                let span = self.span;
                let mut ptr = 0u8;
                while self.eat("*") {
                    ptr = ptr.saturating_add(1);
                }
                let name = match &self.tok {
                    Tok::Ident(n) => {
                        let n = n.clone();
                        self.bump();
                        n
                    }
                    // An anonymous record member.
                    _ if matches!(ty, TypeSpec::Record { .. }) && ptr == 0 => String::new(),
                    _ => return self.unexpected("a member name"),
                };
                let mut dims = Vec::new();
                while self.eat("[") {
                    let n = self.int_lit()?;
                    dims.push(n.clamp(0, u32::MAX as i64) as u32);
                    self.expect("]")?;
                }
                let bits = if self.eat(":") {
                    Some(self.int_lit()?.clamp(0, 64) as u32)
                } else {
                    None
                };
                out.push(CMember {
                    ty: ty.clone(),
                    ptr,
                    name,
                    dims,
                    bits,
                    span,
                });
                if !self.eat(",") {
                    break;
                }
            }
            if self.eat(";") {
                continue;
            }
            self.expect("}")?;
            break;
        }
        self.leave();
        Ok(out)
    }

    /// A top-level definition; the next token is read as an attach point.
    pub(super) fn cdef(&mut self) -> R<crate::ast::CDef> {
        let span = self.span;
        // The word was read as an attach point: read it again as a token.
        self.lex.pos = span.lo as usize;
        self.bump();
        let spec = self.type_spec()?;
        if matches!(spec, TypeSpec::Named(_)) {
            self.diags.error(
                codes::SYNTAX,
                span,
                "a C definition needs a body: struct NAME { ... }",
            );
            return Err(Bail);
        }
        if !self.is(";") {
            // `struct X { } BEGIN { }`: no `;` before the next probe.
            self.relex_attach();
            return Ok(crate::ast::CDef { spec, span });
        }
        self.bump_attach();
        Ok(crate::ast::CDef { spec, span })
    }

    /// `config = { key = value; ... }`; the next token is an attach point.
    pub(super) fn config(&mut self) -> R<Vec<(String, String, rpn2wasm::Span)>> {
        self.lex.pos = self.span.lo as usize;
        self.bump();
        self.bump();
        self.expect("=")?;
        self.expect("{")?;
        let mut out = Vec::new();
        while !self.is("}") {
            let span = self.span;
            let key = self.ident("a config key")?;
            self.expect("=")?;
            let value = match self.tok.clone() {
                Tok::Ident(v) => v,
                Tok::Int(v) => v.to_string(),
                Tok::Str(s) => String::from_utf8_lossy(&s).into_owned(),
                _ => return self.unexpected("a value"),
            };
            self.bump();
            out.push((key, value, span));
            if !self.eat(";") {
                break;
            }
        }
        if !self.is("}") {
            return self.unexpected("`}`");
        }
        self.relex_after_brace();
        Ok(out)
    }

    /// After a `}` that is the current token: the next word is an attach point.
    fn relex_after_brace(&mut self) {
        self.lex.pos = self.span.hi as usize;
        self.bump_attach();
    }
}
