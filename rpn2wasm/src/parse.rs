//! Parser (spec §2, §4, §5, §6, §9 syntax): the front end's entry points
//! and the line-by-line parse of the preprocessed text into sections (file
//! header, probes, procedures) and raw statements. Every line is parsed on
//! its own, so an error skips only the rest of its line and every error of
//! the file is found. Names, symbols and header-dependent limits are left to
//! [`crate::check`], which produces the [`ast::Program`]. The parser never
//! reads files itself (the preprocessor does) and never panics on any bytes.

mod cursor;
mod header;
mod insn;

pub(crate) use cursor::Expr;
pub(crate) use header::{Key, Stmt, Value};
pub(crate) use insn::RawOp;

use crate::diag::{Diagnostic, Sink, codes};
use crate::lex::{Tok, TokKind, comment_start, is_ident, lex_line};
use crate::preprocess::{self, MAX_SOURCE_BYTES, PpLine};
use crate::source::Span;
use crate::{Options, SourceMap, ast, diag::Diagnostics};
use cursor::{Cur, PErr};
use std::path::Path;

/// Front end on a file: preprocess, parse and check it. On failure every
/// error found is returned, in source order, with the files read.
pub fn parse_file(
    path: &Path,
    opts: &Options,
) -> Result<(ast::Program, SourceMap), (Diagnostics, SourceMap)> {
    match preprocess::read_source(path) {
        Ok(bytes) => parse_text(path, bytes, opts),
        Err(msg) => {
            let mut map = SourceMap::default();
            let file = map.add(path.to_path_buf(), Vec::new());
            let d = Diagnostic::new(codes::FILE_NOT_READABLE, Span { file, lo: 0, hi: 0 }, msg);
            Err((Diagnostics(vec![d]), map))
        }
    }
}

/// Front end on in-memory bytes (`path` names the file in messages and is
/// the base of relative includes).
pub fn parse_text(
    path: &Path,
    text: Vec<u8>,
    opts: &Options,
) -> Result<(ast::Program, SourceMap), (Diagnostics, SourceMap)> {
    let mut map = SourceMap::default();
    if text.len() as u64 > MAX_SOURCE_BYTES {
        let file = map.add(path.to_path_buf(), Vec::new());
        let d = Diagnostic::new(
            codes::FILE_NOT_READABLE,
            Span { file, lo: 0, hi: 0 },
            format!("source is larger than {MAX_SOURCE_BYTES} bytes"),
        );
        return Err((Diagnostics(vec![d]), map));
    }
    let main = map.add(path.to_path_buf(), text);
    let mut sink = Sink::default();
    let pp = preprocess::preprocess(&mut map, main, opts, &mut sink);
    let raw = parse_lines(&pp.lines, &map, &mut sink);
    let program = crate::check::check(raw, &map, opts, &mut sink);
    match program {
        Some(p) if sink.is_empty() => Ok((p, map)),
        _ => Err((sink.finish(|s| pp.index.key(s)), map)),
    }
}

/// The whole file as parsed: header statements, then probes and procedures
/// in source order.
#[derive(Debug, Default)]
pub(crate) struct RawProgram {
    /// File header statements, in order.
    pub file_stmts: Vec<Stmt>,
    /// Probes and procedures, in source order.
    pub items: Vec<Item>,
    /// End of the main file (where "no probe" is reported).
    pub main_end: Span,
}

/// A probe or a procedure.
#[derive(Debug)]
pub(crate) enum Item {
    /// A probe: its header statements (the location statement first) and body.
    Probe(Vec<Stmt>, RawBody),
    /// A procedure.
    Proc(RawProc),
}

impl Item {
    fn body_mut(&mut self) -> &mut RawBody {
        match self {
            Item::Probe(_, b) => b,
            Item::Proc(p) => &mut p.body,
        }
    }
}

/// A procedure as parsed.
#[derive(Debug)]
pub(crate) struct RawProc {
    /// Name as written (empty if it was invalid; reported).
    pub name: String,
    /// Span of the name (of `proc` if missing).
    pub name_span: Span,
    /// Span of the `proc` line.
    pub span: Span,
    /// The body.
    pub body: RawBody,
}

/// A body as parsed.
#[derive(Debug, Default)]
pub(crate) struct RawBody {
    /// Instructions in order.
    pub insns: Vec<RawInsn>,
    /// Labels; `insn` = index of the instruction they label (`insns.len()`
    /// for the implicit terminator).
    pub labels: Vec<RawLabel>,
    /// Zero-width span at the end of the body's last line (for the implicit
    /// terminator).
    pub end: Span,
}

/// A label definition.
#[derive(Debug)]
pub(crate) struct RawLabel {
    /// Name as written.
    pub name: String,
    /// Where.
    pub span: Span,
    /// Index of the labelled instruction.
    pub insn: usize,
}

/// An instruction as parsed.
#[derive(Debug)]
pub(crate) struct RawInsn {
    /// What.
    pub op: RawOp,
    /// The instruction's text.
    pub span: Span,
    /// The operand blamed by later checks (label, index …).
    pub arg: Span,
}

/// Which part of the file the parser is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    File,
    ProbeHeader,
    Body,
}

struct Parser<'a> {
    sink: &'a mut Sink,
    prog: RawProgram,
    section: Section,
}

fn parse_lines(lines: &[PpLine], map: &SourceMap, sink: &mut Sink) -> RawProgram {
    let len = map.files.first().map_or(0, |f| f.bytes.len() as u32);
    let mut p = Parser {
        sink,
        prog: RawProgram {
            main_end: Span {
                file: 0,
                lo: len,
                hi: len,
            },
            ..RawProgram::default()
        },
        section: Section::File,
    };
    for l in lines {
        p.line(l);
    }
    p.prog
}

impl Parser<'_> {
    fn report(&mut self, line: &PpLine, e: PErr) {
        let mut d = Diagnostic::new(e.code, line.span(e.lo, e.hi), e.message);
        if let Some(n) = e.note {
            d = d.with_note(n);
        }
        self.sink.push(d);
    }

    /// The body receiving instructions and labels now, if any.
    fn body(&mut self) -> Option<&mut RawBody> {
        match self.section {
            Section::File => None,
            _ => self.prog.items.last_mut().map(Item::body_mut),
        }
    }

    fn line(&mut self, l: &PpLine) {
        let cend = comment_start(&l.text).unwrap_or(l.text.len());
        if l.text[..cend]
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | b'\r'))
        {
            return;
        }
        if let Some(h) = header::header_prefix(&l.text, cend) {
            for (lo, hi) in h.labels {
                self.sink.error(
                    codes::LABEL_WITHOUT_INSN,
                    l.span(lo, hi),
                    "a label must be followed by an instruction, not by a header statement",
                );
            }
            return self.header(l, h.keyword, h.eq_end, cend);
        }
        let toks = match lex_line(&l.text[..cend], 0) {
            Ok(t) => t,
            Err(e) => {
                // Keep the labels in front of the error, so that jumps to
                // them do not cascade into "undefined label".
                let before = lex_line(&l.text[..e.lo], 0).unwrap_or_default();
                self.report(l, PErr::new(e.code, e.lo, e.hi, e.message));
                self.labels(l, &before, false);
                let span = l.span(0, cend);
                return self.push_insn(l, RawOp::Error, span, span);
            }
        };
        let n = self.labels(l, &toks, true);
        let rest = &toks[n..];
        let Some(first) = rest.first() else {
            return;
        };
        if first.kind == TokKind::Word && l.text[first.lo..first.hi].eq_ignore_ascii_case(b"proc") {
            for t in toks[..n].iter().step_by(2) {
                self.sink.error(
                    codes::LABEL_WITHOUT_INSN,
                    l.span(t.lo, t.hi),
                    "a label must be followed by an instruction, not by `proc`",
                );
            }
            return self.proc(l, rest);
        }
        if self.section == Section::File {
            return self.report(
                l,
                PErr::new(
                    codes::INSN_OUTSIDE_BODY,
                    first.lo,
                    rest.last().map_or(first.hi, |t| t.hi),
                    "instruction outside any probe or procedure",
                )
                .note(
                    "a probe starts with `offset =` or `address =`, a procedure with `proc NAME`",
                ),
            );
        }
        let mut c = Cur::new(l, rest);
        let span = l.span(first.lo, rest.last().map_or(first.hi, |t| t.hi));
        match insn::parse(&mut c) {
            Ok(p) => {
                let arg = l.span(p.arg.0, p.arg.1);
                self.push_insn(l, p.op, span, arg);
            }
            Err(e) => {
                self.report(l, e);
                self.push_insn(l, RawOp::Error, span, span);
            }
        }
    }

    /// Reads the labels at the start of `toks`; returns how many tokens they
    /// use. `complete`: the line was fully lexed (labels alone on a line
    /// are reported when outside a body).
    fn labels(&mut self, l: &PpLine, toks: &[Tok], complete: bool) -> usize {
        let mut n = 0;
        while n + 1 < toks.len()
            && toks[n + 1].kind == TokKind::Colon
            && matches!(toks[n].kind, TokKind::Word | TokKind::Number(_))
        {
            let t = toks[n];
            n += 2;
            let text = &l.text[t.lo..t.hi];
            let span = l.span(t.lo, t.hi);
            if !is_ident(text) {
                self.sink.error(
                    codes::INVALID_NAME,
                    span,
                    format!("invalid label name `{}`", String::from_utf8_lossy(text)),
                );
                continue;
            }
            if self.section == Section::File {
                if complete && n == toks.len() {
                    self.sink.error(
                        codes::LABEL_WITHOUT_INSN,
                        span,
                        "label outside any probe or procedure body",
                    );
                }
                continue;
            }
            self.section = Section::Body;
            let end = l.end();
            if let Some(b) = self.body() {
                b.labels.push(RawLabel {
                    name: String::from_utf8_lossy(text).into_owned(),
                    span,
                    insn: b.insns.len(),
                });
                b.end = end;
            }
        }
        n
    }

    fn push_insn(&mut self, l: &PpLine, op: RawOp, span: Span, arg: Span) {
        if self.section == Section::File {
            return;
        }
        self.section = Section::Body;
        let end = l.end();
        if let Some(b) = self.body() {
            b.insns.push(RawInsn { op, span, arg });
            b.end = end;
        }
    }

    fn proc(&mut self, l: &PpLine, toks: &[Tok]) {
        let kw = toks[0];
        let mut c = Cur::new(l, toks);
        c.i = 1;
        let (name, name_span) = match c.name("procedure name").and_then(|(n, t)| {
            c.expect_end()?;
            Ok((n, t))
        }) {
            Ok((n, t)) => (n, l.span(t.lo, t.hi)),
            Err(e) => {
                self.report(l, e);
                (String::new(), l.span(kw.lo, kw.hi))
            }
        };
        self.prog.items.push(Item::Proc(RawProc {
            name,
            name_span,
            span: l.span(kw.lo, toks.last().map_or(kw.hi, |t| t.hi)),
            body: RawBody {
                end: l.end(),
                ..RawBody::default()
            },
        }));
        self.section = Section::Body;
    }

    fn header(&mut self, l: &PpLine, kw: (usize, usize), eq_end: usize, cend: usize) {
        let word = String::from_utf8_lossy(&l.text[kw.0..kw.1]).to_ascii_lowercase();
        let key_span = l.span(kw.0, kw.1);
        let Some(key) = Key::from_word(&word) else {
            return self.sink.error(
                codes::UNKNOWN_KEYWORD,
                key_span,
                format!(
                    "unknown header keyword `{}`",
                    String::from_utf8_lossy(&l.text[kw.0..kw.1])
                ),
            );
        };
        let in_proc = matches!(self.prog.items.last(), Some(Item::Proc(_)));
        let misplaced = match self.section {
            _ if key.is_location() => None,
            Section::File if !key.in_file() => Some((
                codes::KEYWORD_WRONG_SECTION,
                format!(
                    "`{}` is a probe header keyword, not allowed in the file header",
                    key.name()
                ),
                "a probe starts with `offset =` or `address =`; statements before it belong to the file header",
            )),
            Section::ProbeHeader | Section::Body if !key.in_probe() => Some((
                codes::KEYWORD_WRONG_SECTION,
                format!(
                    "`{}` is a file header keyword, not allowed after the first probe",
                    key.name()
                ),
                "the file header ends at the first `offset =`, `address =` or `proc` line",
            )),
            Section::Body if in_proc => Some((
                codes::HEADER_AFTER_BODY,
                format!("header statement `{}` inside a procedure", key.name()),
                "probe header statements belong between `offset =`/`address =` and the first instruction",
            )),
            Section::Body => Some((
                codes::HEADER_AFTER_BODY,
                format!("header statement `{}` after instructions", key.name()),
                "probe header statements belong between `offset =`/`address =` and the first instruction",
            )),
            _ => None,
        };
        if let Some((code, msg, note)) = misplaced {
            let d = Diagnostic::new(code, key_span, msg).with_note(note);
            return self.sink.push(d);
        }
        let (value, span) = match header::value(key, l, eq_end, cend) {
            Ok(v) => v,
            Err(e) => {
                let at = l.span(e.lo, e.hi);
                self.report(l, e);
                (Value::Invalid, at)
            }
        };
        let stmt = Stmt {
            key,
            key_span,
            value,
            span,
        };
        if key.is_location() {
            self.prog.items.push(Item::Probe(
                vec![stmt],
                RawBody {
                    end: l.end(),
                    ..RawBody::default()
                },
            ));
            self.section = Section::ProbeHeader;
            return;
        }
        match (self.section, self.prog.items.last_mut()) {
            (Section::ProbeHeader, Some(Item::Probe(stmts, body))) => {
                stmts.push(stmt);
                body.end = l.end();
            }
            _ => self.prog.file_stmts.push(stmt),
        }
    }
}
