//! Diagnostic codes of the one-liner front end. Rendering is rpn2wasm's
//! (`path:line:col: error[CODE]: message`, the line, a caret), so both
//! compilers speak alike; messages follow bpftrace's wording where
//! bpftrace has one. Codes are `B0xxx`, grouped by stage: `B00xx` lexical
//! and syntax, `B01xx` probes, `B02xx` names and types, `B03xx` calls,
//! `B04xx` unsupported constructs, `B05xx` probe events, `B06xx` the
//! command line of `wprobe run` (reported at the argument, see
//! `runtime/src/cmd/cmdline.rs`).

use rpn2wasm::Span;
pub use rpn2wasm::diag::{Diagnostic, Diagnostics};

/// The codes, one constant per class of error.
pub mod codes {
    /// A lexical error (bad character, unterminated string or comment, bad number).
    pub const LEXICAL: &str = "B0001";
    /// Unexpected token.
    pub const SYNTAX: &str = "B0002";
    /// An attach point that does not parse (`uprobe` without a function, ...).
    pub const ATTACH_POINT: &str = "B0100";
    /// A probe type wprobe does not trace (kernel probes, tracepoints, ...).
    pub const UNSUPPORTED_PROBE: &str = "B0101";
    /// The binary of a uprobe cannot be found or read.
    pub const BINARY: &str = "B0102";
    /// No function matches (wildcard or name).
    pub const NO_MATCH: &str = "B0103";
    /// A probe location that is not on an instruction boundary.
    pub const NOT_BOUNDARY: &str = "B0104";
    /// A watchpoint that is not valid (length, mode, alignment).
    pub const WATCHPOINT: &str = "B0105";
    /// No probe at all, or too many.
    pub const PROBE_COUNT: &str = "B0106";
    /// Undefined variable, unknown identifier or builtin.
    pub const UNDEFINED: &str = "B0200";
    /// A type mismatch (operands, assignment, map key or value).
    pub const TYPE: &str = "B0201";
    /// A builtin used in a probe that does not provide it (`retval` in a uprobe).
    pub const BUILTIN_CONTEXT: &str = "B0202";
    /// Unknown function.
    pub const UNKNOWN_FUNCTION: &str = "B0300";
    /// Wrong number or kind of arguments.
    pub const ARGUMENTS: &str = "B0301";
    /// A bad printf format.
    pub const FORMAT: &str = "B0302";
    /// An aggregation used outside a map assignment, or a bad map use.
    pub const MAP_USE: &str = "B0303";
    /// An argument that must be a literal is not, or is out of range.
    pub const LITERAL: &str = "B0304";
    /// A construct bpftrace has and wprobe does not (kernel features, C
    /// definitions, struct access without DWARF, ...).
    pub const UNSUPPORTED: &str = "B0400";
    /// `args` without DWARF for the function, or an unknown argument name.
    pub const DWARF: &str = "B0401";
    /// A limit exceeded (statements, loop unrolling, frame size).
    pub const LIMIT: &str = "B0402";
    /// A probe event (`--event`) that does not parse.
    pub const EVENT: &str = "B0500";
    /// A command-line option wprobe refuses (`-k`, `--info`), an unknown
    /// option, or a bad value (`-p a1`), shown at its argument.
    pub const COMMAND_LINE: &str = "B0600";
}

/// Every code with a description, in code order.
pub const CODES: &[(&str, &str)] = &[
    (codes::LEXICAL, "lexical error"),
    (codes::SYNTAX, "syntax error"),
    (codes::ATTACH_POINT, "invalid attach point"),
    (
        codes::UNSUPPORTED_PROBE,
        "probe type not supported in user space",
    ),
    (codes::BINARY, "binary not found or not readable"),
    (codes::NO_MATCH, "no function matches"),
    (codes::NOT_BOUNDARY, "probe not on an instruction boundary"),
    (codes::WATCHPOINT, "invalid watchpoint"),
    (codes::PROBE_COUNT, "no probes, or too many"),
    (codes::UNDEFINED, "undefined name"),
    (codes::TYPE, "type mismatch"),
    (
        codes::BUILTIN_CONTEXT,
        "builtin not available in this probe",
    ),
    (codes::UNKNOWN_FUNCTION, "unknown function"),
    (codes::ARGUMENTS, "wrong arguments"),
    (codes::FORMAT, "bad format string"),
    (codes::MAP_USE, "invalid map or aggregation use"),
    (codes::LITERAL, "literal required or out of range"),
    (codes::UNSUPPORTED, "construct not supported"),
    (codes::DWARF, "DWARF argument information unavailable"),
    (codes::LIMIT, "limit exceeded"),
    (codes::EVENT, "invalid probe event"),
    (
        codes::COMMAND_LINE,
        "command-line option refused or invalid",
    ),
];

/// Collects diagnostics.
#[derive(Default)]
pub struct Sink {
    /// Collected so far.
    pub list: Vec<Diagnostic>,
}

impl Sink {
    /// Adds an error.
    pub fn error(&mut self, code: &'static str, span: Span, msg: impl Into<String>) {
        self.list.push(Diagnostic::new(code, span, msg));
    }

    /// Adds an error with a note.
    pub fn error_note(
        &mut self,
        code: &'static str,
        span: Span,
        msg: impl Into<String>,
        note: impl Into<String>,
    ) {
        self.list
            .push(Diagnostic::new(code, span, msg).with_note(note));
    }

    /// Whether nothing was reported.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The diagnostics in source order.
    pub fn finish(mut self) -> Diagnostics {
        self.list.sort_by_key(|d| (d.span.file, d.span.lo));
        Diagnostics(self.list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_sorted() {
        for w in CODES.windows(2) {
            assert!(w[0].0 < w[1].0, "{} {}", w[0].0, w[1].0);
        }
    }
}
