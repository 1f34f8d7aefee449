//! Macro substitution (spec §3.3): expansion of one line, with its limits
//! and the map from expanded text back to the source.

use super::{
    ExpandError, MAX_EXPANSION_BYTES_PER_LINE, MAX_EXPANSION_BYTES_TOTAL, MAX_EXPANSION_DEPTH, Pp,
    PpLine, Seg, show,
};
use crate::diag::{Diagnostic, codes};
use crate::lex::{is_ident, is_word_char};
use crate::source::{FileId, Span};

impl Pp<'_> {
    /// Substitutes macros in `line` (which starts at source offset `start`).
    /// `None` if an expansion failed (reported).
    pub(super) fn expand_line(
        &mut self,
        file: FileId,
        start: usize,
        line: &[u8],
    ) -> Option<PpLine> {
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
