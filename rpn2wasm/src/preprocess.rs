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
//!
//! This file holds the limits, the output types (`PpLine`, `LineIndex`),
//! `preprocess`, the line-by-line pass over each file and `read_source`.
//! Submodules: `directive` the directives (conditionals, `#define`/`#undef`,
//! `#include`); `expand` macro substitution; `tests` the unit tests.

mod directive;
mod expand;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::Options;
use crate::diag::{Diagnostic, Sink, SortKey, codes};
use crate::lex::comment_start;
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
