//! Diagnostics: stable codes, messages and spans, rendered as
//! `path:line:col: error[CODE]: message` + the source line + a caret.
//! (Skeleton: the front end completes the code table.)

use crate::source::{SourceMap, Span};

/// One error found in a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable code such as `E0012` (see the table in this module).
    pub code: &'static str,
    /// One-line message.
    pub message: String,
    /// Where.
    pub span: Span,
    /// Extra lines (`note: …`) printed after the caret.
    pub notes: Vec<String>,
}

/// Every error of a compilation, in source order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Renders every diagnostic.
    pub fn render(&self, map: &SourceMap) -> String {
        let mut out = String::new();
        for d in &self.0 {
            out.push_str(&d.render(map));
        }
        out
    }
}

impl Diagnostic {
    /// `path:line:col: error[CODE]: message`, the source line, a caret line, notes.
    pub fn render(&self, map: &SourceMap) -> String {
        let (line, col) = map.line_col(self.span.file, self.span.lo);
        let path = map
            .files
            .get(self.span.file as usize)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default();
        let text = map.line_text(self.span.file, self.span.lo);
        let mut s = format!(
            "{path}:{line}:{col}: error[{}]: {}\n",
            self.code, self.message
        );
        s.push_str(&format!("  | {text}\n"));
        let pad: String = text
            .chars()
            .take(col.saturating_sub(1) as usize)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let width = (self.span.hi.saturating_sub(self.span.lo)).max(1) as usize;
        s.push_str(&format!("  | {pad}{}\n", "^".repeat(width.min(80))));
        for n in &self.notes {
            s.push_str(&format!("  = note: {n}\n"));
        }
        s
    }
}
