//! Recursive-descent parser of the one-liner language, bpftrace's grammar
//! (`parser.yy` of bpftrace 0.17): probes, predicates, statements and
//! expressions with C precedence. Errors are collected with spans; after
//! an error inside a block the parser skips to the next `;` or `}`, so one
//! run reports several. Depth is bounded ([`MAX_DEPTH`]), so deeply nested
//! input gives an error, not a stack overflow.

mod cdef;
mod expr;

use crate::ast::*;
use crate::diag::{Sink, codes};
use crate::lex::{Lexer, Tok};
use rpn2wasm::Span;

/// Deepest nesting of expressions and blocks.
pub const MAX_DEPTH: usize = 64;

/// Parser state.
pub struct Parser<'a> {
    lex: Lexer<'a>,
    src: &'a [u8],
    tok: Tok,
    span: Span,
    /// Span of the previous token.
    prev: Span,
    depth: usize,
    /// Inside `/.../`: a `/` followed by `{` or `/` ends the predicate.
    in_pred: bool,
    /// Diagnostics.
    pub diags: Sink,
}

/// A parse error already reported (unwinds to the nearest recovery point).
pub struct Bail;

type R<T> = Result<T, Bail>;

/// Parses a whole program.
pub fn parse(src: &[u8], file: u32) -> (Program, Sink) {
    let mut p = Parser::new(src, file);
    let prog = p.program();
    (prog, p.diags)
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("identifier `{s}`"),
        Tok::Int(v) => format!("integer {v}"),
        Tok::Str(_) => "string".into(),
        Tok::Map(m) => format!("map {m}"),
        Tok::Var(v) => format!("variable {v}"),
        Tok::Param(n) => format!("${n}"),
        Tok::ParamCount => "$#".into(),
        Tok::Punct(p) => format!("`{p}`"),
        Tok::Eof => "end of file".into(),
        Tok::Error(e) => e.clone(),
    }
}

impl<'a> Parser<'a> {
    fn new(src: &'a [u8], file: u32) -> Parser<'a> {
        let mut lex = Lexer::new(src, file);
        let (tok, span) = lex.attach_point();
        let mut p = Parser {
            lex,
            src,
            tok,
            span,
            prev: span,
            depth: 0,
            in_pred: false,
            diags: Sink::default(),
        };
        p.check_lex_error();
        p
    }

    fn check_lex_error(&mut self) {
        if let Tok::Error(m) = &self.tok {
            let m = m.clone();
            self.diags.error(codes::LEXICAL, self.span, m);
        }
    }

    /// Moves to the next ordinary token.
    fn bump(&mut self) {
        self.prev = self.span;
        let (t, s) = self.lex.token();
        self.tok = t;
        self.span = s;
        self.check_lex_error();
    }

    /// Re-reads the current position as an attach point.
    fn bump_attach(&mut self) {
        self.prev = self.span;
        let (t, s) = self.lex.attach_point();
        self.tok = t;
        self.span = s;
        self.check_lex_error();
    }

    /// The token after the current one (the lexer's position unchanged).
    fn peek_tok(&self) -> Tok {
        let mut l = Lexer::new(self.src, self.span.file);
        l.pos = self.lex.pos;
        l.token().0
    }

    fn is(&self, p: &str) -> bool {
        matches!(&self.tok, Tok::Punct(q) if *q == p)
    }

    fn is_ident(&self, name: &str) -> bool {
        matches!(&self.tok, Tok::Ident(s) if s == name)
    }

    fn eat(&mut self, p: &str) -> bool {
        if self.is(p) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn unexpected<T>(&mut self, expected: &str) -> R<T> {
        if !matches!(self.tok, Tok::Error(_)) {
            let msg = format!(
                "syntax error, unexpected {}, expecting {expected}",
                describe(&self.tok)
            );
            self.diags.error(codes::SYNTAX, self.span, msg);
        }
        Err(Bail)
    }

    fn expect(&mut self, p: &str) -> R<Span> {
        if self.is(p) {
            let s = self.span;
            self.bump();
            Ok(s)
        } else {
            self.unexpected(&format!("`{p}`"))
        }
    }

    fn enter(&mut self) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.diags.error(
                codes::LIMIT,
                self.span,
                format!("nesting deeper than {MAX_DEPTH} levels"),
            );
            return Err(Bail);
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn program(&mut self) -> Program {
        let mut prog = Program::default();
        if matches!(&self.tok, Tok::Punct("#")) || self.src_at_hash() {
            let s = self.span;
            self.diags.error(
                codes::UNSUPPORTED,
                s,
                "C preprocessor directives and definitions are not supported (wprobe reads no C headers)",
            );
            return prog;
        }
        while self.tok != Tok::Eof {
            if let Tok::Ident(w) = &self.tok
                && matches!(w.as_str(), "struct" | "union" | "enum")
            {
                match self.cdef() {
                    Ok(d) => prog.cdefs.push(d),
                    Err(Bail) => return prog,
                }
                continue;
            }
            if matches!(&self.tok, Tok::Ident(w) if w == "config") && self.next_is_assign() {
                match self.config() {
                    Ok(c) => prog.config.extend(c),
                    Err(Bail) => return prog,
                }
                continue;
            }
            match self.probe() {
                Ok(p) => prog.probes.push(p),
                Err(Bail) => {
                    // Skip to the end of this probe's block (or the input).
                    self.recover_probe();
                }
            }
        }
        if prog.probes.is_empty() && self.diags.is_empty() {
            let s = self.span;
            self.diags.error(
                codes::PROBE_COUNT,
                s,
                "no probes: a program needs at least one probe",
            );
        }
        prog
    }

    /// Whether the next non-blank byte after the current token is `=`.
    fn next_is_assign(&self) -> bool {
        let mut i = self.span.hi as usize;
        while let Some(c) = self.src.get(i) {
            match c {
                b' ' | b'\t' | b'\n' | b'\r' => i += 1,
                b'=' => return true,
                _ => return false,
            }
        }
        false
    }

    fn src_at_hash(&self) -> bool {
        let lo = self.span.lo as usize;
        self.src.get(lo) == Some(&b'#') && self.src.get(lo + 1) != Some(&b'!')
    }

    fn recover_probe(&mut self) {
        let mut depth = 0usize;
        loop {
            match &self.tok {
                Tok::Eof => return,
                Tok::Punct("{") => depth += 1,
                Tok::Punct("}") => {
                    if depth <= 1 {
                        self.bump_attach();
                        return;
                    }
                    depth -= 1;
                }
                _ => {}
            }
            self.bump();
        }
    }

    fn probe(&mut self) -> R<Probe> {
        let mut attach = Vec::new();
        loop {
            match &self.tok {
                Tok::Ident(text) => {
                    attach.push((text.clone(), self.span));
                    self.bump();
                }
                _ => return self.unexpected("an attach point"),
            }
            if self.is(",") {
                self.bump_attach();
                continue;
            }
            break;
        }
        let span = attach[0].1;
        let pred = if self.is("/") {
            self.bump();
            self.in_pred = true;
            let e = self.expr();
            self.in_pred = false;
            let e = e?;
            if !self.is("/") {
                return self.unexpected("`/` ending the predicate");
            }
            self.bump();
            Some(e)
        } else {
            None
        };
        if !self.is("{") {
            if self.tok == Tok::Eof {
                let s = self.span;
                self.diags
                    .error(codes::SYNTAX, s, "unexpected end of file, expected {");
                return Err(Bail);
            }
            return self.unexpected("`{`");
        }
        let body = self.block()?;
        // The block's `}` was consumed as an ordinary token; the next
        // token starts an attach point.
        self.relex_attach();
        Ok(Probe {
            attach,
            pred,
            body,
            span,
        })
    }

    /// Re-reads the current token as an attach point (after a probe's block).
    fn relex_attach(&mut self) {
        self.lex.pos = self.span.lo as usize;
        let prev = self.prev;
        self.bump_attach();
        self.prev = prev;
    }

    /// `{ statements }`; the closing brace is consumed.
    fn block(&mut self) -> R<Vec<Stmt>> {
        self.enter()?;
        let r = self.block_inner();
        self.leave();
        r
    }

    fn block_inner(&mut self) -> R<Vec<Stmt>> {
        self.expect("{")?;
        let mut stmts = Vec::new();
        loop {
            if self.is("}") {
                self.bump();
                return Ok(stmts);
            }
            if self.tok == Tok::Eof {
                let s = self.span;
                self.diags
                    .error(codes::SYNTAX, s, "unexpected end of file, expecting `}`");
                return Err(Bail);
            }
            match self.stmt() {
                Ok((s, is_block)) => {
                    stmts.push(s);
                    if self.is(";") {
                        self.bump();
                    } else if !is_block && !self.is("}") {
                        let _: R<()> = self.unexpected("`;` or `}`");
                        self.recover_stmt();
                    }
                }
                Err(Bail) => self.recover_stmt(),
            }
        }
    }

    /// Skips to just after the next `;` at this level, or to the `}` closing it.
    fn recover_stmt(&mut self) {
        let mut depth = 0usize;
        loop {
            match &self.tok {
                Tok::Eof => return,
                Tok::Punct(";") if depth == 0 => {
                    self.bump();
                    return;
                }
                Tok::Punct("{") => depth += 1,
                Tok::Punct("}") => {
                    if depth == 0 {
                        return;
                    }
                    depth -= 1;
                }
                _ => {}
            }
            self.bump();
        }
    }

    /// One statement; the flag says whether it ends with a block.
    fn stmt(&mut self) -> R<(Stmt, bool)> {
        let start = self.span;
        let kw = match &self.tok {
            Tok::Ident(s) => s.clone(),
            _ => String::new(),
        };
        match kw.as_str() {
            "if" => return Ok((self.if_stmt()?, true)),
            "unroll" => {
                self.bump();
                self.expect("(")?;
                let count = self.expr()?;
                self.expect(")")?;
                let body = self.block()?;
                return Ok((
                    Stmt {
                        kind: StmtKind::Unroll { count, body },
                        span: start,
                    },
                    true,
                ));
            }
            "while" => {
                self.bump();
                self.expect("(")?;
                let cond = self.expr()?;
                self.expect(")")?;
                let body = self.block()?;
                return Ok((
                    Stmt {
                        kind: StmtKind::While { cond, body },
                        span: start,
                    },
                    true,
                ));
            }
            "for" => return self.for_stmt(start),
            "let" => return self.let_stmt(start),
            "break" | "continue" | "return" => {
                self.bump();
                let kind = match kw.as_str() {
                    "break" => StmtKind::Break,
                    "continue" => StmtKind::Continue,
                    _ => StmtKind::Return,
                };
                return Ok((Stmt { kind, span: start }, false));
            }
            _ => {}
        }
        let e = self.expr()?;
        let op = match &self.tok {
            Tok::Punct("=") => Some(None),
            Tok::Punct(p) => compound(p).map(Some),
            _ => None,
        };
        let Some(op) = op else {
            return Ok((
                Stmt {
                    kind: StmtKind::Expr(e),
                    span: start,
                },
                false,
            ));
        };
        let op_span = self.span;
        self.bump();
        let value = self.expr()?;
        let kind = match e.kind {
            ExprKind::Map(map) => StmtKind::AssignMap { map, op, value },
            ExprKind::Var(name) => StmtKind::AssignVar {
                name,
                var_span: e.span,
                op,
                value,
            },
            ExprKind::TupleIndex(..) => {
                self.diags.error(
                    codes::SYNTAX,
                    e.span,
                    "Tuples are immutable once created. Consider creating a new tuple and assigning it instead.",
                );
                return Err(Bail);
            }
            _ => {
                self.diags.error(
                    codes::SYNTAX,
                    op_span,
                    "syntax error, unexpected =, expecting ; or }: only maps and variables can be assigned",
                );
                return Err(Bail);
            }
        };
        Ok((Stmt { kind, span: start }, false))
    }

    /// `for ($kv : @map) { ... }`.
    fn for_stmt(&mut self, start: Span) -> R<(Stmt, bool)> {
        self.bump();
        self.expect("(")?;
        let Tok::Var(var) = self.tok.clone() else {
            return self.unexpected("a variable");
        };
        self.bump();
        self.expect(":")?;
        let map = match self.tok.clone() {
            Tok::Map(name) => {
                let span = self.span;
                self.bump();
                MapRef {
                    name,
                    keys: Vec::new(),
                    span,
                }
            }
            _ => {
                let s = self.span;
                self.diags.error(
                    codes::UNSUPPORTED,
                    s,
                    "`for` loops go over a map here (`for ($kv : @map)`); ranges are not supported",
                );
                return Err(Bail);
            }
        };
        self.expect(")")?;
        let body = self.block()?;
        Ok((
            Stmt {
                kind: StmtKind::For { var, map, body },
                span: start,
            },
            true,
        ))
    }

    /// `let $x;`, `let $x: TYPE;`, `let $x = e;` (bpftrace 0.23): the
    /// declaration itself changes nothing here (variables are typed by what
    /// they are given).
    fn let_stmt(&mut self, start: Span) -> R<(Stmt, bool)> {
        self.bump();
        let var_span = self.span;
        let Tok::Var(name) = self.tok.clone() else {
            return self.unexpected("a variable");
        };
        self.bump();
        if self.eat(":") {
            self.type_spec()?;
            while self.eat("*") {}
            while self.eat("[") {
                self.expr()?;
                self.expect("]")?;
            }
        }
        if self.eat("=") {
            let value = self.expr()?;
            return Ok((
                Stmt {
                    kind: StmtKind::AssignVar {
                        name,
                        var_span,
                        op: None,
                        value,
                    },
                    span: start,
                },
                false,
            ));
        }
        let _ = var_span;
        Ok((
            Stmt {
                kind: StmtKind::Let { name },
                span: start,
            },
            false,
        ))
    }

    fn if_stmt(&mut self) -> R<Stmt> {
        let start = self.span;
        self.bump();
        self.expect("(")?;
        let cond = self.expr()?;
        self.expect(")")?;
        let then = self.block()?;
        let els = if self.is_ident("else") {
            self.bump();
            if self.is_ident("if") {
                self.enter()?;
                let s = self.if_stmt();
                self.leave();
                vec![s?]
            } else {
                self.block()?
            }
        } else {
            Vec::new()
        };
        Ok(Stmt {
            kind: StmtKind::If { cond, then, els },
            span: start,
        })
    }
}

fn compound(p: &str) -> Option<BinOp> {
    Some(match p {
        "+=" => BinOp::Add,
        "-=" => BinOp::Sub,
        "*=" => BinOp::Mul,
        "/=" => BinOp::Div,
        "%=" => BinOp::Mod,
        "&=" => BinOp::BitAnd,
        "|=" => BinOp::BitOr,
        "^=" => BinOp::BitXor,
        "<<=" => BinOp::Shl,
        ">>=" => BinOp::Shr,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
