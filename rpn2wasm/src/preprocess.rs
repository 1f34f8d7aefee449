//! Preprocessor (spec §3), the first pass of the front end: `#define`,
//! `#undef`, `#include`, `#ifdef`/`#ifndef`/`#elseif`/`#elif`/`#else`/`#endif`
//! and macro substitution. Its output is a list of `PpLine`s, one per
//! kept source line, each able to map any byte range of its (possibly
//! expanded) text back to a span of the original file: text copied from the
//! file maps byte for byte, text produced by a macro expansion maps to the
//! macro use. It never fails: errors are reported to the sink and the
//! offending line or directive is dropped.
//!
//! Decisions where the spec leaves room:
//! * A "whole identifier token" is a maximal run of `[A-Za-z0-9_.$@]` (the
//!   characters of ELF symbol names, §2.4) that is an identifier; so in
//!   `foo.cold` neither `foo` nor `cold` is replaced. Runs starting with a
//!   digit are numbers and never replaced.
//! * The bare form `#include path` is macro-substituted (C does the same);
//!   the quoted and `<…>` forms are not.
//! * Text after `#else`/`#endif` or after a `#ifdef` name, other than a
//!   comment, is an error (never silently ignored).
//! * Lines of skipped branches are not checked at all (not even for UTF-8),
//!   except for the conditional directives needed to find the matching
//!   `#endif`.
//! * Only regular files are included (never devices or FIFOs), and no file
//!   larger than `MAX_SOURCE_BYTES` (64 MiB).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::Options;
use crate::diag::{Diagnostic, Sink, SortKey, codes};
use crate::lex::{comment_start, is_ident, is_word_char};
use crate::source::{FileId, SourceMap, Span};

/// Include nesting limit (spec §3.1): the main file is level 0, so 16
/// nested `#include`s are allowed.
pub(crate) const MAX_INCLUDE_DEPTH: usize = 16;
/// Macro expansion nesting limit (spec §3.3): a macro used in the text is
/// expansion level 1.
pub(crate) const MAX_EXPANSION_DEPTH: usize = 32;
/// Bytes that macro expansions may add to one line: far above any real use,
/// low enough that exponential macro chains fail fast instead of exhausting
/// memory.
pub(crate) const MAX_EXPANSION_BYTES_PER_LINE: usize = 1 << 20;
/// Bytes that macro expansions may add to one compilation, for the same reason.
pub(crate) const MAX_EXPANSION_BYTES_TOTAL: usize = 16 << 20;
/// Largest source file read (main or included): byte offsets are `u32`, and
/// nothing legitimate comes close.
pub(crate) const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// A piece of a [`PpLine`]: text starting at output offset `out` either
/// copied from the source starting at `src_lo`, or produced by the macro use
/// at `src_lo..src_hi`.
#[derive(Clone, Copy, Debug)]
struct Seg {
    out: u32,
    src_lo: u32,
    src_hi: u32,
    expanded: bool,
}

/// One preprocessed line: text without line terminator (comments included),
/// and the mapping back to the source.
#[derive(Clone, Debug)]
pub(crate) struct PpLine {
    /// The file the line comes from.
    pub file: FileId,
    /// The text after macro substitution.
    pub text: Vec<u8>,
    segs: Vec<Seg>,
}

impl PpLine {
    fn seg_at(&self, pos: usize) -> Option<&Seg> {
        let idx = self
            .segs
            .partition_point(|s| s.out as usize <= pos)
            .checked_sub(1)?;
        self.segs.get(idx)
    }

    /// Source offset of the position just before output byte `pos` (`pos`
    /// may be the end of the text).
    fn point(&self, pos: usize) -> u32 {
        match self.seg_at(pos) {
            Some(s) if s.expanded => {
                if pos >= self.text.len() && pos > s.out as usize {
                    s.src_hi
                } else {
                    s.src_lo
                }
            }
            Some(s) => s.src_lo + (pos - s.out as usize) as u32,
            None => 0,
        }
    }

    /// Source range of output byte `pos`.
    fn range_of(&self, pos: usize) -> (u32, u32) {
        match self.seg_at(pos) {
            Some(s) if s.expanded => (s.src_lo, s.src_hi),
            Some(s) => {
                let o = s.src_lo + (pos - s.out as usize) as u32;
                (o, o + 1)
            }
            None => (0, 0),
        }
    }

    /// Source span of the output byte range `lo..hi` (empty: a point).
    pub fn span(&self, lo: usize, hi: usize) -> Span {
        let lo = lo.min(self.text.len());
        let hi = hi.min(self.text.len());
        if hi <= lo {
            let p = self.point(lo);
            return Span {
                file: self.file,
                lo: p,
                hi: p,
            };
        }
        let (a, _) = self.range_of(lo);
        let (_, b) = self.range_of(hi - 1);
        Span {
            file: self.file,
            lo: a,
            hi: b.max(a),
        }
    }

    /// Zero-width span at the end of the line.
    pub fn end(&self) -> Span {
        self.span(self.text.len(), self.text.len())
    }
}

/// Maps spans to their position in reading order, so that diagnostics of
/// included files sort where the `#include` is.
#[derive(Default)]
pub(crate) struct LineIndex(Vec<Vec<(u32, u64)>>);

impl LineIndex {
    /// The sort key of a span: sequence number of its line, then its offset.
    pub(crate) fn key(&self, span: Span) -> SortKey {
        let Some(lines) = self.0.get(span.file as usize) else {
            return (0, span.lo);
        };
        let i = lines.partition_point(|(start, _)| *start <= span.lo);
        match i.checked_sub(1).and_then(|i| lines.get(i)) {
            Some((_, seq)) => (*seq, span.lo),
            None => (0, span.lo),
        }
    }
}

/// Result of preprocessing.
pub(crate) struct Preprocessed {
    /// The kept lines, in reading order.
    pub lines: Vec<PpLine>,
    /// Span → reading order.
    pub index: LineIndex,
}

/// An open conditional group.
struct Cond {
    parent_active: bool,
    taken: bool,
    active: bool,
    seen_else: bool,
    kw: &'static str,
    span: Span,
    seq: u64,
}

/// Why a macro expansion failed.
enum ExpandError {
    TooDeep(Vec<Vec<u8>>),
    TooLarge,
}

struct Pp<'a> {
    map: &'a mut SourceMap,
    opts: &'a Options,
    sink: &'a mut Sink,
    defs: HashMap<Vec<u8>, Vec<u8>>,
    lines: Vec<PpLine>,
    seq: u64,
    index: Vec<Vec<(u32, u64)>>,
    stack: Vec<PathBuf>,
    cache: HashMap<PathBuf, FileId>,
    expanded_total: usize,
}

/// Preprocesses file `main` of `map` (which receives every included file).
pub(crate) fn preprocess(
    map: &mut SourceMap,
    main: FileId,
    opts: &Options,
    sink: &mut Sink,
) -> Preprocessed {
    let main_path = map
        .files
        .get(main as usize)
        .map(|f| f.path.clone())
        .unwrap_or_default();
    let canon = std::fs::canonicalize(&main_path).unwrap_or(main_path);
    let defs = opts
        .defines
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    let mut pp = Pp {
        map,
        opts,
        sink,
        defs,
        lines: Vec::new(),
        seq: 0,
        index: Vec::new(),
        stack: vec![canon.clone()],
        cache: HashMap::from([(canon, main)]),
        expanded_total: 0,
    };
    pp.file(main, 0);
    Preprocessed {
        lines: pp.lines,
        index: LineIndex(pp.index),
    }
}

fn trim(s: &[u8], mut lo: usize, mut hi: usize) -> (usize, usize) {
    while lo < hi && matches!(s[lo], b' ' | b'\t' | b'\r') {
        lo += 1;
    }
    while hi > lo && matches!(s[hi - 1], b' ' | b'\t' | b'\r') {
        hi -= 1;
    }
    (lo, hi)
}

fn show(s: &[u8]) -> String {
    String::from_utf8_lossy(s).into_owned()
}

impl Pp<'_> {
    fn span(&self, file: FileId, lo: usize, hi: usize) -> Span {
        Span {
            file,
            lo: lo as u32,
            hi: hi as u32,
        }
    }

    /// Processes every line of `file`, at include depth `depth`.
    fn file(&mut self, file: FileId, depth: usize) {
        let Some(bytes) = self.map.files.get(file as usize).map(|f| f.bytes.clone()) else {
            return;
        };
        if self.index.len() <= file as usize {
            self.index.resize(file as usize + 1, Vec::new());
        }
        let record = self.index[file as usize].is_empty();
        let mut conds: Vec<Cond> = Vec::new();
        let mut start = 0;
        while start < bytes.len() {
            let end = bytes[start..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(bytes.len(), |p| start + p);
            let content_end = if end > start && bytes[end - 1] == b'\r' {
                end - 1
            } else {
                end
            };
            let seq = self.seq;
            self.seq += 1;
            if record {
                self.index[file as usize].push((start as u32, seq));
            }
            self.line(
                file,
                start,
                &bytes[start..content_end],
                seq,
                &mut conds,
                depth,
            );
            start = end + 1;
        }
        for c in conds {
            let d = Diagnostic::new(
                codes::UNTERMINATED_CONDITIONAL,
                c.span,
                format!("`#{}` group is not terminated in this file", c.kw),
            )
            .with_note("a conditional group must end with `#endif` in the file where it begins");
            self.sink.push_keyed((c.seq, c.span.lo), d);
        }
    }

    /// Checks that `line` is UTF-8; reports the first bad byte.
    fn check_utf8(&mut self, file: FileId, start: usize, line: &[u8]) -> bool {
        match std::str::from_utf8(line) {
            Ok(_) => true,
            Err(e) => {
                let lo = start + e.valid_up_to();
                let len = e.error_len().unwrap_or(line.len() - e.valid_up_to()).max(1);
                let bad = &line[e.valid_up_to()..(e.valid_up_to() + len).min(line.len())];
                let hex: Vec<String> = bad.iter().map(|b| format!("0x{b:02x}")).collect();
                self.sink.error(
                    codes::INVALID_UTF8,
                    self.span(file, lo, lo + len),
                    format!("invalid UTF-8 byte sequence {}", hex.join(" ")),
                );
                false
            }
        }
    }

    fn line(
        &mut self,
        file: FileId,
        start: usize,
        line: &[u8],
        seq: u64,
        conds: &mut Vec<Cond>,
        depth: usize,
    ) {
        let active = conds.last().is_none_or(|c| c.active);
        let first = line.iter().position(|b| !matches!(b, b' ' | b'\t'));
        if let Some(h) = first.filter(|h| line[*h] == b'#') {
            if active && !self.check_utf8(file, start, line) {
                // Reported; go on with the non-ASCII bytes masked so that the
                // conditional structure stays intact.
                let fixed: Vec<u8> = line
                    .iter()
                    .map(|b| if b.is_ascii() { *b } else { b'?' })
                    .collect();
                return self.directive(file, start, &fixed, h, seq, conds, depth);
            }
            self.directive(file, start, line, h, seq, conds, depth);
        } else if active {
            let line = if self.check_utf8(file, start, line) {
                line
            } else {
                // Reported. If the bad bytes are in the comment, the code
                // before it is still used (no cascade of errors); otherwise
                // the line is dropped.
                let bad = std::str::from_utf8(line)
                    .err()
                    .map_or(line.len(), |e| e.valid_up_to());
                match comment_start(line) {
                    Some(c) if c <= bad => &line[..c],
                    _ => return,
                }
            };
            if let Some(l) = self.expand_line(file, start, line) {
                self.lines.push(l);
            }
        }
    }

    /// Handles the directive line `line` whose `#` is at `h`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site; the arguments are the line's coordinates"
    )]
    fn directive(
        &mut self,
        file: FileId,
        start: usize,
        line: &[u8],
        h: usize,
        seq: u64,
        conds: &mut Vec<Cond>,
        depth: usize,
    ) {
        let active = conds.last().is_none_or(|c| c.active);
        let mut i = h + 1;
        while i < line.len() && matches!(line[i], b' ' | b'\t') {
            i += 1;
        }
        let kw_lo = i;
        while i < line.len() && line[i].is_ascii_alphabetic() {
            i += 1;
        }
        let kw = line[kw_lo..i].to_ascii_lowercase();
        let kw_span = self.span(file, start + h, start + i);
        let rest_end = comment_start(&line[i..]).map_or(line.len(), |p| i + p);
        let (alo, ahi) = trim(line, i, rest_end);
        let args = Arg {
            file,
            start,
            line,
            lo: alo,
            hi: ahi,
        };
        match kw.as_slice() {
            b"ifdef" | b"ifndef" => {
                let ifndef = kw == b"ifndef";
                let defined = if active {
                    self.cond_name(&args, kw_span)
                        .map(|n| self.defs.contains_key(n))
                } else {
                    None
                };
                let take = active && defined.is_some_and(|d| d != ifndef);
                conds.push(Cond {
                    parent_active: active,
                    taken: take,
                    active: take,
                    seen_else: false,
                    kw: if ifndef { "ifndef" } else { "ifdef" },
                    span: kw_span,
                    seq,
                });
            }
            b"elseif" | b"elif" => {
                let Some(last) = conds.len().checked_sub(1) else {
                    return self.unmatched(kw_span, &kw);
                };
                if conds[last].seen_else {
                    conds[last].active = false;
                    return self.sink.error(
                        codes::ELSE_AFTER_ELSE,
                        kw_span,
                        format!("`#{}` after `#else`", show(&kw)),
                    );
                }
                let evaluate = conds[last].parent_active && !conds[last].taken;
                let defined = evaluate
                    && self
                        .cond_name(&args, kw_span)
                        .is_some_and(|n| self.defs.contains_key(n));
                conds[last].active = defined;
                conds[last].taken |= defined;
            }
            b"else" | b"endif" => {
                let Some(c) = conds.last_mut() else {
                    return self.unmatched(kw_span, &kw);
                };
                let parent_active = c.parent_active;
                if kw == b"else" {
                    if c.seen_else {
                        c.active = false;
                        return self.sink.error(
                            codes::ELSE_AFTER_ELSE,
                            kw_span,
                            "second `#else` in one conditional group",
                        );
                    }
                    c.active = c.parent_active && !c.taken;
                    c.taken = true;
                    c.seen_else = true;
                } else {
                    conds.pop();
                }
                if parent_active {
                    self.no_extra(&args, &kw);
                }
            }
            _ if !active => {}
            b"define" => self.define(&args, kw_span),
            b"undef" => {
                if let Some(n) = self.cond_name(&args, kw_span) {
                    let n = n.to_vec();
                    self.defs.remove(&n);
                }
            }
            b"include" => self.include(&args, kw_span, depth),
            b"" => self.sink.error(
                codes::UNKNOWN_DIRECTIVE,
                kw_span,
                "missing directive name after `#`",
            ),
            _ => self.sink.error(
                codes::UNKNOWN_DIRECTIVE,
                kw_span,
                format!(
                    "unknown preprocessor directive `#{}`",
                    show(&line[kw_lo..i])
                ),
            ),
        }
    }

    fn unmatched(&mut self, span: Span, kw: &[u8]) {
        self.sink.error(
            codes::UNMATCHED_CONDITIONAL,
            span,
            format!(
                "`#{}` without an open `#ifdef`/`#ifndef` in this file",
                show(kw)
            ),
        );
    }

    fn no_extra(&mut self, a: &Arg<'_>, kw: &[u8]) {
        if a.lo < a.hi {
            self.sink.error(
                codes::MALFORMED_DIRECTIVE,
                a.span(a.lo, a.hi),
                format!("unexpected text after `#{}`", show(kw)),
            );
        }
    }

    /// The macro name argument of `#ifdef`/`#ifndef`/`#elseif`/`#undef`
    /// (nothing else may follow it).
    fn cond_name<'l>(&mut self, a: &Arg<'l>, kw_span: Span) -> Option<&'l [u8]> {
        let (name, end) = self.macro_name(a, kw_span)?;
        let (lo, hi) = trim(a.line, end, a.hi);
        if lo < hi {
            self.sink.error(
                codes::MALFORMED_DIRECTIVE,
                a.span(lo, hi),
                "unexpected text after the macro name",
            );
            return None;
        }
        Some(name)
    }

    /// Reads a macro name at the start of the argument; returns it and the
    /// offset just after it.
    fn macro_name<'l>(&mut self, a: &Arg<'l>, kw_span: Span) -> Option<(&'l [u8], usize)> {
        if a.lo >= a.hi {
            self.sink
                .error(codes::MALFORMED_DIRECTIVE, kw_span, "missing macro name");
            return None;
        }
        let end = a.line[a.lo..a.hi]
            .iter()
            .position(|b| matches!(b, b' ' | b'\t'))
            .map_or(a.hi, |p| a.lo + p);
        let name = &a.line[a.lo..end];
        if !is_ident(name) {
            self.sink.error(
                codes::MALFORMED_DIRECTIVE,
                a.span(a.lo, end),
                format!("invalid macro name `{}`", show(name)),
            );
            return None;
        }
        Some((name, end))
    }

    fn define(&mut self, a: &Arg<'_>, kw_span: Span) {
        let Some((name, end)) = self.macro_name(a, kw_span) else {
            return;
        };
        let (lo, hi) = trim(a.line, end, a.hi);
        self.defs.insert(name.to_vec(), a.line[lo..hi].to_vec());
    }

    fn include(&mut self, a: &Arg<'_>, kw_span: Span, depth: usize) {
        let Some((path, span)) = self.include_path(a, kw_span) else {
            return;
        };
        let rel = PathBuf::from(String::from_utf8_lossy(&path).into_owned());
        let mut candidates = Vec::new();
        if rel.is_absolute() {
            candidates.push(rel.clone());
        } else {
            let dir = self
                .map
                .files
                .get(a.file as usize)
                .and_then(|f| f.path.parent().map(Path::to_path_buf))
                .unwrap_or_default();
            candidates.push(dir.join(&rel));
            for d in &self.opts.include_dirs {
                candidates.push(d.join(&rel));
            }
        }
        let Some(found) = candidates.iter().find(|c| c.is_file()).cloned() else {
            let searched: Vec<String> =
                candidates.iter().map(|c| c.display().to_string()).collect();
            let d = Diagnostic::new(
                codes::FILE_NOT_READABLE,
                span,
                format!("include file `{}` not found", rel.display()),
            )
            .with_note(format!("searched: {}", searched.join(", ")));
            return self.sink.push(d);
        };
        let canon = std::fs::canonicalize(&found).unwrap_or_else(|_| found.clone());
        if let Some(pos) = self.stack.iter().position(|p| *p == canon) {
            let chain: Vec<String> = self.stack[pos..]
                .iter()
                .map(|p| p.display().to_string())
                .chain([canon.display().to_string()])
                .collect();
            let d = Diagnostic::new(
                codes::INCLUDE_CYCLE,
                span,
                format!("`{}` includes itself", found.display()),
            )
            .with_note(format!("include chain: {}", chain.join(" -> ")));
            return self.sink.push(d);
        }
        if depth + 1 > MAX_INCLUDE_DEPTH {
            return self.sink.error(
                codes::INCLUDE_TOO_DEEP,
                span,
                format!("includes nested deeper than {MAX_INCLUDE_DEPTH} levels"),
            );
        }
        let id = match self.cache.get(&canon) {
            Some(id) => *id,
            None => match read_source(&found) {
                Ok(bytes) => {
                    let id = self.map.add(found.clone(), bytes);
                    self.cache.insert(canon.clone(), id);
                    id
                }
                Err(msg) => return self.sink.error(codes::FILE_NOT_READABLE, span, msg),
            },
        };
        self.stack.push(canon);
        self.file(id, depth + 1);
        self.stack.pop();
    }

    /// The path argument of `#include` and the span to blame for it.
    fn include_path(&mut self, a: &Arg<'_>, kw_span: Span) -> Option<(Vec<u8>, Span)> {
        let arg = &a.line[a.lo..a.hi];
        let close = match arg.first() {
            Some(b'"') => Some(b'"'),
            Some(b'<') => Some(b'>'),
            Some(_) => None,
            None => {
                self.sink
                    .error(codes::MALFORMED_DIRECTIVE, kw_span, "missing file name");
                return None;
            }
        };
        let Some(close) = close else {
            // Bare form: macro-substituted.
            let l = self.expand_line(a.file, a.start + a.lo, arg)?;
            let (lo, hi) = trim(&l.text, 0, l.text.len());
            let span = a.span(a.lo, a.hi);
            if lo >= hi {
                self.sink
                    .error(codes::MALFORMED_DIRECTIVE, span, "missing file name");
                return None;
            }
            return Some((l.text[lo..hi].to_vec(), span));
        };
        let Some(p) = arg[1..].iter().position(|b| *b == close) else {
            self.sink.error(
                codes::MALFORMED_DIRECTIVE,
                a.span(a.lo, a.lo + 1),
                format!("missing closing `{}`", char::from(close)),
            );
            return None;
        };
        let end = a.lo + 1 + p + 1;
        if end < a.hi {
            self.sink.error(
                codes::MALFORMED_DIRECTIVE,
                a.span(end, a.hi),
                "unexpected text after the file name",
            );
            return None;
        }
        if p == 0 {
            self.sink.error(
                codes::MALFORMED_DIRECTIVE,
                a.span(a.lo, end),
                "empty file name",
            );
            return None;
        }
        Some((arg[1..1 + p].to_vec(), a.span(a.lo + 1, end - 1)))
    }

    /// Substitutes macros in `line` (which starts at source offset `start`).
    /// `None` if an expansion failed (reported).
    fn expand_line(&mut self, file: FileId, start: usize, line: &[u8]) -> Option<PpLine> {
        let direct = |text: &[u8]| PpLine {
            file,
            text: text.to_vec(),
            segs: vec![Seg {
                out: 0,
                src_lo: start as u32,
                src_hi: (start + text.len()) as u32,
                expanded: false,
            }],
        };
        if self.defs.is_empty() {
            return Some(direct(line));
        }
        let mut out = Vec::with_capacity(line.len());
        let mut segs = Vec::new();
        let mut from = 0;
        let mut i = 0;
        let limit = line.len() + MAX_EXPANSION_BYTES_PER_LINE;
        while i < line.len() {
            let b = line[i];
            if b == b'"' {
                i = line[i + 1..]
                    .iter()
                    .position(|c| *c == b'"')
                    .map_or(line.len(), |p| i + p + 2);
                continue;
            }
            if b == b'/' && line.get(i + 1) == Some(&b'/') {
                break;
            }
            if !is_word_char(b) {
                i += 1;
                continue;
            }
            let j = line[i..]
                .iter()
                .position(|c| !is_word_char(*c))
                .map_or(line.len(), |p| i + p);
            let word = &line[i..j];
            if is_ident(word) && self.defs.contains_key(word) {
                if from < i {
                    segs.push(Seg {
                        out: out.len() as u32,
                        src_lo: (start + from) as u32,
                        src_hi: (start + i) as u32,
                        expanded: false,
                    });
                    out.extend_from_slice(&line[from..i]);
                }
                let exp_lo = out.len();
                let mut active = Vec::new();
                let left = MAX_EXPANSION_BYTES_TOTAL.saturating_sub(self.expanded_total);
                let limit = limit.min(exp_lo + left);
                let r = self.expand(word, 1, &mut active, &mut out, limit);
                self.expanded_total += out.len() - exp_lo;
                let use_span = self.span(file, start + i, start + j);
                if let Err(e) = r {
                    self.expand_error(e, word, use_span);
                    return None;
                }
                segs.push(Seg {
                    out: exp_lo as u32,
                    src_lo: use_span.lo,
                    src_hi: use_span.hi,
                    expanded: true,
                });
                from = j;
            }
            i = j;
        }
        if segs.is_empty() {
            return Some(direct(line));
        }
        if from < line.len() {
            segs.push(Seg {
                out: out.len() as u32,
                src_lo: (start + from) as u32,
                src_hi: (start + line.len()) as u32,
                expanded: false,
            });
            out.extend_from_slice(&line[from..]);
        }
        Some(PpLine {
            file,
            text: out,
            segs,
        })
    }

    fn expand_error(&mut self, e: ExpandError, word: &[u8], span: Span) {
        match e {
            ExpandError::TooDeep(chain) => {
                let chain: Vec<String> = chain.iter().map(|n| show(n)).collect();
                let shown = if chain.len() > 6 {
                    format!(
                        "{} -> ... -> {}",
                        chain[..3].join(" -> "),
                        chain[chain.len() - 2..].join(" -> ")
                    )
                } else {
                    chain.join(" -> ")
                };
                let d = Diagnostic::new(
                    codes::MACRO_TOO_DEEP,
                    span,
                    format!(
                        "expansion of macro `{}` is nested deeper than {MAX_EXPANSION_DEPTH} levels",
                        show(word)
                    ),
                )
                .with_note(format!("expansion chain: {shown}"));
                self.sink.push(d);
            }
            ExpandError::TooLarge => self.sink.error(
                codes::MACRO_TOO_LARGE,
                span,
                format!("expansion of macro `{}` produces too much text", show(word)),
            ),
        }
    }

    /// Appends the expansion of macro `name` (at nesting level `depth`) to
    /// `out`, rescanning it; `active` holds the macros being expanded.
    fn expand(
        &self,
        name: &[u8],
        depth: usize,
        active: &mut Vec<Vec<u8>>,
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), ExpandError> {
        active.push(name.to_vec());
        if depth > MAX_EXPANSION_DEPTH {
            return Err(ExpandError::TooDeep(active.clone()));
        }
        let value = self.defs.get(name).map_or(&[][..], Vec::as_slice);
        let mut i = 0;
        while i < value.len() {
            let b = value[i];
            let j = if b == b'"' {
                value[i + 1..]
                    .iter()
                    .position(|c| *c == b'"')
                    .map_or(value.len(), |p| i + p + 2)
            } else if b == b'/' && value.get(i + 1) == Some(&b'/') {
                value.len()
            } else if is_word_char(b) {
                value[i..]
                    .iter()
                    .position(|c| !is_word_char(*c))
                    .map_or(value.len(), |p| i + p)
            } else {
                i + 1
            };
            let word = &value[i..j];
            if is_word_char(b)
                && is_ident(word)
                && self.defs.contains_key(word)
                && !active.iter().any(|a| a == word)
            {
                self.expand(word, depth + 1, active, out, limit)?;
            } else {
                out.extend_from_slice(word);
            }
            if out.len() > limit {
                return Err(ExpandError::TooLarge);
            }
            i = j;
        }
        active.pop();
        Ok(())
    }
}

/// The argument of a directive: `line[lo..hi]`, the line starting at
/// source offset `start` of `file`.
struct Arg<'l> {
    file: FileId,
    start: usize,
    line: &'l [u8],
    lo: usize,
    hi: usize,
}

impl Arg<'_> {
    fn span(&self, lo: usize, hi: usize) -> Span {
        Span {
            file: self.file,
            lo: (self.start + lo) as u32,
            hi: (self.start + hi) as u32,
        }
    }
}

/// Reads a source file: regular files only, at most [`MAX_SOURCE_BYTES`].
pub(crate) fn read_source(path: &Path) -> Result<Vec<u8>, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("`{}` is not a regular file", path.display()));
    }
    if meta.len() > MAX_SOURCE_BYTES {
        return Err(format!(
            "`{}` is larger than {MAX_SOURCE_BYTES} bytes",
            path.display()
        ));
    }
    std::fs::read(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(src: &str, defines: &[(&str, &str)]) -> (Vec<String>, Vec<PpLine>, Vec<&'static str>) {
        let mut map = SourceMap::default();
        let main = map.add("m.rpn".into(), src.as_bytes().to_vec());
        let opts = Options {
            defines: defines
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Options::default()
        };
        let mut sink = Sink::default();
        let pp = preprocess(&mut map, main, &opts, &mut sink);
        let codes = sink
            .finish(|s| pp.index.key(s))
            .0
            .iter()
            .map(|d| d.code)
            .collect();
        let text = pp.lines.iter().map(|l| show(&l.text)).collect();
        (text, pp.lines, codes)
    }

    #[test]
    fn substitution_rules() {
        let (t, _, c) = run(
            "#define A x1\n#define B A+A\n#define S S S\nB \"A\" // A\nfoo.A A.b A_ 0xA A\nS\n",
            &[],
        );
        assert!(c.is_empty(), "{c:?}");
        assert_eq!(t, ["x1+x1 \"A\" // A", "foo.A A.b A_ 0xA x1", "S S"]);
    }

    #[test]
    fn command_line_defines_and_conditionals() {
        let src = "#ifdef D\nd\n#elif E\ne\n#else\nz\n#endif\n#IFNDEF D\nnd\n#EndIf\n";
        assert_eq!(run(src, &[("D", "1")]).0, ["d"]);
        assert_eq!(run(src, &[("E", "1")]).0, ["e", "nd"]);
        assert_eq!(run(src, &[]).0, ["z", "nd"]);
        // Nested groups inside a skipped branch are tracked.
        let src = "#ifdef NO\n#ifdef X\n#else\nbad\n#endif\n#else\ngood\n#endif\n";
        assert_eq!(run(src, &[]).0, ["good"]);
        // #define replaces a -D value; #undef removes it.
        let src = "#define V 2\nV\n#undef V\nV\n";
        assert_eq!(run(src, &[("V", "1")]).0, ["2", "V"]);
        // Empty value.
        assert_eq!(run("#define E   // nothing\n[E]\n", &[]).0, ["[]"]);
    }

    #[test]
    fn expanded_text_maps_to_the_macro_use() {
        let (t, lines, _) = run("#define LONG abcdef\n  x LONG y\n", &[]);
        assert_eq!(t, ["  x abcdef y"]);
        let l = &lines[0];
        let base = 20; // offset of line 2
        // Copied text maps byte for byte.
        assert_eq!(
            l.span(2, 3),
            Span {
                file: 0,
                lo: base + 2,
                hi: base + 3
            }
        );
        // Any byte of the expansion maps to the whole use.
        assert_eq!(
            l.span(6, 8),
            Span {
                file: 0,
                lo: base + 4,
                hi: base + 8
            }
        );
        // After the expansion, offsets shift back.
        assert_eq!(
            l.span(11, 12),
            Span {
                file: 0,
                lo: base + 9,
                hi: base + 10
            }
        );
        assert_eq!(
            l.end(),
            Span {
                file: 0,
                lo: base + 10,
                hi: base + 10
            }
        );
        // A range spanning copied and expanded text.
        assert_eq!(
            l.span(2, 12),
            Span {
                file: 0,
                lo: base + 2,
                hi: base + 10
            }
        );
    }

    #[test]
    fn directive_errors() {
        assert_eq!(run("#define\n", &[]).2, [codes::MALFORMED_DIRECTIVE]);
        assert_eq!(
            run("#ifdef A B\n#endif\n", &[]).2,
            [codes::MALFORMED_DIRECTIVE]
        );
        assert_eq!(run("#\n", &[]).2, [codes::UNKNOWN_DIRECTIVE]);
        assert_eq!(run("#include\n", &[]).2, [codes::MALFORMED_DIRECTIVE]);
        assert_eq!(run("#include \"\"\n", &[]).2, [codes::MALFORMED_DIRECTIVE]);
        assert_eq!(run("#include <a\n", &[]).2, [codes::MALFORMED_DIRECTIVE]);
        assert_eq!(
            run("#include \"a\" b\n", &[]).2,
            [codes::MALFORMED_DIRECTIVE]
        );
        // Unknown directives in skipped branches are ignored.
        assert!(run("#ifdef X\n#pragma\n#endif\n", &[]).2.is_empty());
        // Directives themselves are never substituted.
        assert_eq!(run("#define X Y\n#ifdef X\nk\n#endif\n", &[]).0, ["k"]);
    }
}
