//! The directives (spec §3.1, §3.2): conditional groups, `#define`/`#undef`
//! and `#include` with its search order.

use std::path::{Path, PathBuf};

use super::{Cond, MAX_INCLUDE_DEPTH, Pp, read_source, show, trim};
use crate::diag::{Diagnostic, codes};
use crate::lex::{comment_start, is_ident};
use crate::source::{FileId, Span};

impl Pp<'_> {
    /// Handles the directive line `line` whose `#` is at `h`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site; the arguments are the line's coordinates"
    )]
    pub(super) fn directive(
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
