//! Diagnostics: stable codes, messages and spans, rendered as
//! `path:line:col: error[CODE]: message` + the source line + a caret.
//!
//! Every build error of the front end (spec §7) has one stable code, listed
//! in [`CODES`] with a one-line description (constants in [`codes`]). Codes
//! are grouped by stage: `E000x` lexical, `E001x` preprocessor, `E002x`
//! instruction syntax, `E003x`/`E004x` header statements and probe rules,
//! `E005x` labels and procedures, `E0060`/`E0061` variable indices,
//! `E0065`–`E0068` registers and the entry values of return probes,
//! `E007x` unsupported legacy features, `E008x` symbols, `E009x` limits. A
//! code is never reused for another meaning.
//!
//! Rendering never panics, whatever the span: a span outside its file
//! renders as line 1, column 1 of an empty line.

use crate::source::{SourceMap, Span};

/// Stable diagnostic codes, one constant per error class.
pub mod codes {
    /// Invalid UTF-8 byte sequence in the source.
    pub const INVALID_UTF8: &str = "E0001";
    /// Character not allowed here (NUL, control, non-ASCII outside comments and strings, stray punctuation).
    pub const INVALID_CHAR: &str = "E0002";
    /// Quoted string without its closing quote.
    pub const UNTERMINATED_STRING: &str = "E0003";
    /// Malformed number (`0x` without digits, letters in a decimal number, ...).
    pub const MALFORMED_NUMBER: &str = "E0004";
    /// Unknown preprocessor directive.
    pub const UNKNOWN_DIRECTIVE: &str = "E0010";
    /// Malformed directive: missing or invalid macro name or path, extra text.
    pub const MALFORMED_DIRECTIVE: &str = "E0011";
    /// `#else`, `#elseif` or `#endif` without an open conditional group.
    pub const UNMATCHED_CONDITIONAL: &str = "E0012";
    /// A second `#else`, or `#elseif` after `#else`, in one group.
    pub const ELSE_AFTER_ELSE: &str = "E0013";
    /// Conditional group not terminated in the file where it began.
    pub const UNTERMINATED_CONDITIONAL: &str = "E0014";
    /// A source file cannot be read (missing include file, not a regular file, too large).
    pub const FILE_NOT_READABLE: &str = "E0015";
    /// A file includes itself, directly or indirectly.
    pub const INCLUDE_CYCLE: &str = "E0016";
    /// Include nesting deeper than 16 levels.
    pub const INCLUDE_TOO_DEEP: &str = "E0017";
    /// Macro expansion nested deeper than 32 levels.
    pub const MACRO_TOO_DEEP: &str = "E0018";
    /// Macro expansion produces too much text.
    pub const MACRO_TOO_LARGE: &str = "E0019";
    /// Unknown instruction mnemonic.
    pub const UNKNOWN_MNEMONIC: &str = "E0020";
    /// Wrong operand keyword (e.g. `push mem, u128`, `trace xv`).
    pub const INVALID_OPERAND: &str = "E0021";
    /// An operand is missing.
    pub const MISSING_OPERAND: &str = "E0022";
    /// An operand too many.
    pub const EXTRA_OPERAND: &str = "E0023";
    /// Unexpected token (missing comma, misplaced punctuation, wrong kind of token).
    pub const UNEXPECTED_TOKEN: &str = "E0024";
    /// Number outside the range of its operand class (spec §2.5).
    pub const NUMBER_OUT_OF_RANGE: &str = "E0025";
    /// A `-` sign where only unsigned values are allowed.
    pub const SIGN_NOT_ALLOWED: &str = "E0026";
    /// Invalid label, procedure, group or type name.
    pub const INVALID_NAME: &str = "E0027";
    /// Symbolic expression with more than one symbol or a subtracted symbol.
    pub const INVALID_EXPRESSION: &str = "E0028";
    /// Instruction before the first probe or procedure.
    pub const INSN_OUTSIDE_BODY: &str = "E0029";
    /// The file header has no `name =`.
    pub const MISSING_NAME: &str = "E0030";
    /// Unknown header keyword.
    pub const UNKNOWN_KEYWORD: &str = "E0031";
    /// Header keyword in the wrong section (probe keyword in the file header or vice versa).
    pub const KEYWORD_WRONG_SECTION: &str = "E0032";
    /// Header keyword given twice in one section.
    pub const DUPLICATE_KEYWORD: &str = "E0033";
    /// Header value outside its range (spec §5, §6.1).
    pub const VALUE_OUT_OF_RANGE: &str = "E0034";
    /// Header value of the wrong form (not a number, not `yes`/`no`, unknown word, missing).
    pub const INVALID_VALUE: &str = "E0035";
    /// Header value that is recognised but unsupported (`modtype = kernel`, `watchpoint = io`).
    pub const UNSUPPORTED_VALUE: &str = "E0036";
    /// Major code 0, reserved for stack-trace records (`major = 0`, `setmaj 0`).
    pub const MAJOR_ZERO: &str = "E0037";
    /// `group =` / `type =` names a group or type not declared by `groupdef` / `typedef`.
    pub const UNDECLARED_GROUP: &str = "E0038";
    /// Retired: a breakpoint probe without `opcode =` was an error before
    /// the runtime verified instruction boundaries itself (never reused).
    pub const MISSING_OPCODE: &str = "E0039";
    /// `opcode =` on a watchpoint probe.
    pub const OPCODE_ON_WATCHPOINT: &str = "E0040";
    /// Forbidden opcode value (0xCC, 0xCD, 0xCE, 0x9B).
    pub const FORBIDDEN_OPCODE: &str = "E0041";
    /// Address range `a:b` on a breakpoint probe.
    pub const RANGE_ON_BREAKPOINT: &str = "E0042";
    /// Watchpoint length other than 1, 2, 4, 8 (or not 1 for `watchpoint = x`).
    pub const WATCH_LENGTH: &str = "E0043";
    /// Watchpoint start not a multiple of its length.
    pub const WATCH_ALIGNMENT: &str = "E0044";
    /// Header statement after the body started, or inside a procedure.
    pub const HEADER_AFTER_BODY: &str = "E0045";
    /// The file defines no probe point.
    pub const NO_PROBES: &str = "E0046";
    /// More than 65535 probe points.
    pub const TOO_MANY_PROBES: &str = "E0047";
    /// `return = yes` on a watchpoint probe (return probes are breakpoints at a function's entry).
    pub const RETURN_ON_WATCHPOINT: &str = "E0048";
    /// `maxactive =` on a probe without `return = yes`.
    pub const MAXACTIVE_WITHOUT_RETURN: &str = "E0049";
    /// Jump or `sx` to a label that is not defined anywhere.
    pub const UNDEFINED_LABEL: &str = "E0050";
    /// Label defined twice in one body.
    pub const DUPLICATE_LABEL: &str = "E0051";
    /// Label not followed by an instruction of a body (outside any body, or on a header line).
    pub const LABEL_WITHOUT_INSN: &str = "E0052";
    /// Jump or `sx` target defined in another body.
    pub const TARGET_IN_OTHER_BODY: &str = "E0053";
    /// `call` of a procedure that is not defined.
    pub const UNDEFINED_PROC: &str = "E0054";
    /// Procedure defined twice (names are case-insensitive).
    pub const DUPLICATE_PROC: &str = "E0055";
    /// `call` of a label.
    pub const CALL_OF_LABEL: &str = "E0056";
    /// Jump or `sx` to a procedure name.
    pub const JUMP_TO_PROC: &str = "E0057";
    /// Immediate local-variable index not below `vars`.
    pub const LV_INDEX: &str = "E0060";
    /// Immediate global-variable index not below `gvars`.
    pub const GV_INDEX: &str = "E0061";
    /// Unknown register name.
    pub const UNKNOWN_REGISTER: &str = "E0065";
    /// `pop r/u` to a register that may not be written.
    pub const REGISTER_NOT_WRITABLE: &str = "E0066";
    /// `push entry` or `push elapsed` where the hit of a probe that is not a
    /// return probe can run it (its body, or a procedure it calls).
    pub const ENTRY_OUTSIDE_RETURN_PROBE: &str = "E0067";
    /// `push entry` of a register whose entry value is not kept (not rdi,
    /// rsi, rdx, rcx, r8, r9 or rsp).
    pub const NOT_AN_ENTRY_REGISTER: &str = "E0068";
    /// Unsupported legacy instruction (spec §9.14).
    pub const LEGACY_INSN: &str = "E0070";
    /// Unsupported (privileged or IA-32 only) register.
    pub const FORBIDDEN_REGISTER: &str = "E0071";
    /// Unknown symbol.
    pub const UNKNOWN_SYMBOL: &str = "E0080";
    /// Several symbols match case-insensitively and none exactly.
    pub const AMBIGUOUS_SYMBOL: &str = "E0081";
    /// The module named by `name =` cannot be found or read for symbols.
    pub const MODULE_UNAVAILABLE: &str = "E0082";
    /// Code image larger than 65535 bytes.
    pub const CODE_TOO_LARGE: &str = "E0090";
}

/// Every diagnostic code with a one-line description, in code order.
pub const CODES: &[(&str, &str)] = &[
    (codes::INVALID_UTF8, "invalid UTF-8 byte sequence"),
    (
        codes::INVALID_CHAR,
        "character not allowed here (NUL, control, non-ASCII outside comments and strings, stray punctuation)",
    ),
    (codes::UNTERMINATED_STRING, "unterminated quoted string"),
    (codes::MALFORMED_NUMBER, "malformed number"),
    (codes::UNKNOWN_DIRECTIVE, "unknown preprocessor directive"),
    (
        codes::MALFORMED_DIRECTIVE,
        "malformed directive (missing or invalid name or path, extra text)",
    ),
    (
        codes::UNMATCHED_CONDITIONAL,
        "#else, #elseif or #endif without an open conditional group",
    ),
    (
        codes::ELSE_AFTER_ELSE,
        "second #else, or #elseif after #else, in one conditional group",
    ),
    (
        codes::UNTERMINATED_CONDITIONAL,
        "conditional group not terminated in the file where it began",
    ),
    (
        codes::FILE_NOT_READABLE,
        "source file cannot be read (missing, not a regular file, too large)",
    ),
    (codes::INCLUDE_CYCLE, "file includes itself"),
    (
        codes::INCLUDE_TOO_DEEP,
        "include nesting deeper than 16 levels",
    ),
    (
        codes::MACRO_TOO_DEEP,
        "macro expansion deeper than 32 levels",
    ),
    (
        codes::MACRO_TOO_LARGE,
        "macro expansion produces too much text",
    ),
    (codes::UNKNOWN_MNEMONIC, "unknown instruction mnemonic"),
    (codes::INVALID_OPERAND, "wrong operand keyword"),
    (codes::MISSING_OPERAND, "missing operand"),
    (codes::EXTRA_OPERAND, "extra operand"),
    (
        codes::UNEXPECTED_TOKEN,
        "unexpected token (missing comma, misplaced punctuation, wrong kind of token)",
    ),
    (
        codes::NUMBER_OUT_OF_RANGE,
        "number outside the range of its operand class",
    ),
    (
        codes::SIGN_NOT_ALLOWED,
        "negative value where only unsigned values are allowed",
    ),
    (
        codes::INVALID_NAME,
        "invalid label, procedure, group or type name",
    ),
    (
        codes::INVALID_EXPRESSION,
        "symbolic expression with more than one symbol or a subtracted symbol",
    ),
    (
        codes::INSN_OUTSIDE_BODY,
        "instruction before the first probe or procedure",
    ),
    (codes::MISSING_NAME, "file header without `name =`"),
    (codes::UNKNOWN_KEYWORD, "unknown header keyword"),
    (
        codes::KEYWORD_WRONG_SECTION,
        "header keyword in the wrong section",
    ),
    (codes::DUPLICATE_KEYWORD, "header keyword given twice"),
    (codes::VALUE_OUT_OF_RANGE, "header value out of range"),
    (codes::INVALID_VALUE, "header value of the wrong form"),
    (
        codes::UNSUPPORTED_VALUE,
        "unsupported header value (modtype kernel/kmod, watchpoint io)",
    ),
    (
        codes::MAJOR_ZERO,
        "major code 0 is reserved for stack-trace records",
    ),
    (codes::UNDECLARED_GROUP, "undeclared group or type"),
    (
        codes::MISSING_OPCODE,
        "(retired) breakpoint probe without `opcode =`",
    ),
    (
        codes::OPCODE_ON_WATCHPOINT,
        "`opcode =` on a watchpoint probe",
    ),
    (codes::FORBIDDEN_OPCODE, "forbidden opcode value"),
    (
        codes::RANGE_ON_BREAKPOINT,
        "address range on a breakpoint probe",
    ),
    (codes::WATCH_LENGTH, "invalid watchpoint length"),
    (
        codes::WATCH_ALIGNMENT,
        "watchpoint start not a multiple of its length",
    ),
    (
        codes::HEADER_AFTER_BODY,
        "header statement after instructions or in a procedure",
    ),
    (codes::NO_PROBES, "file without any probe point"),
    (codes::TOO_MANY_PROBES, "more than 65535 probe points"),
    (
        codes::RETURN_ON_WATCHPOINT,
        "`return = yes` on a watchpoint probe",
    ),
    (
        codes::MAXACTIVE_WITHOUT_RETURN,
        "`maxactive =` without `return = yes`",
    ),
    (codes::UNDEFINED_LABEL, "undefined label"),
    (codes::DUPLICATE_LABEL, "label defined twice in one body"),
    (
        codes::LABEL_WITHOUT_INSN,
        "label not followed by an instruction of a body",
    ),
    (
        codes::TARGET_IN_OTHER_BODY,
        "jump or sx target in another body",
    ),
    (codes::UNDEFINED_PROC, "undefined procedure"),
    (codes::DUPLICATE_PROC, "procedure defined twice"),
    (codes::CALL_OF_LABEL, "call of a label"),
    (codes::JUMP_TO_PROC, "jump or sx to a procedure name"),
    (codes::LV_INDEX, "local variable index not below `vars`"),
    (codes::GV_INDEX, "global variable index not below `gvars`"),
    (codes::UNKNOWN_REGISTER, "unknown register"),
    (codes::REGISTER_NOT_WRITABLE, "register may not be written"),
    (
        codes::ENTRY_OUTSIDE_RETURN_PROBE,
        "`push entry` or `push elapsed` reachable from a probe that is not a return probe",
    ),
    (
        codes::NOT_AN_ENTRY_REGISTER,
        "`push entry` of a register not kept at the entry (not rdi, rsi, rdx, rcx, r8, r9, rsp)",
    ),
    (codes::LEGACY_INSN, "unsupported legacy instruction"),
    (
        codes::FORBIDDEN_REGISTER,
        "unsupported privileged or IA-32 register",
    ),
    (codes::UNKNOWN_SYMBOL, "unknown symbol"),
    (codes::AMBIGUOUS_SYMBOL, "ambiguous case-insensitive symbol"),
    (
        codes::MODULE_UNAVAILABLE,
        "module named by `name =` cannot be read for symbols",
    ),
    (codes::CODE_TOO_LARGE, "code image larger than 65535 bytes"),
];

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

    /// Whether there is no diagnostic.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Diagnostic {
    /// A diagnostic with code `code` at `span`, without notes.
    pub fn new(code: &'static str, span: Span, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            message: message.into(),
            span,
            notes: Vec::new(),
        }
    }

    /// Adds a note line.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// `path:line:col: error[CODE]: message`, the source line, a caret line, notes.
    pub fn render(&self, map: &SourceMap) -> String {
        let (line, col) = map.line_col(self.span.file, self.span.lo);
        let path = map
            .files
            .get(self.span.file as usize)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default();
        let text = map.line_text(self.span.file, self.span.lo);
        // Control characters of the source (an ESC starting a terminal
        // sequence, say) are shown escaped, never sent to the terminal.
        let mut s = format!(
            "{}:{line}:{col}: error[{}]: {}\n",
            escape_controls(&path),
            self.code,
            escape_controls(&self.message)
        );
        s.push_str(&format!("  | {}\n", escape_controls(&text)));
        let prefix: String = text.chars().take(col.saturating_sub(1) as usize).collect();
        let pad: String = escape_controls(&prefix)
            .chars()
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let width = (self.span.hi.saturating_sub(self.span.lo)).max(1) as usize;
        s.push_str(&format!("  | {pad}{}\n", "^".repeat(width.min(80))));
        for n in &self.notes {
            s.push_str(&format!("  = note: {}\n", escape_controls(n)));
        }
        s
    }
}

/// `text` with control characters other than tab written as `\u{..}`.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\t' {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// Sort key of a diagnostic: position in the preprocessed stream (the
/// sequence number of the physical line, in reading order across includes),
/// then the byte offset.
pub(crate) type SortKey = (u64, u32);

/// Collects the diagnostics of one compilation and sorts them into source
/// order (reading order across included files) at the end.
#[derive(Default)]
pub(crate) struct Sink {
    items: Vec<(Option<SortKey>, Diagnostic)>,
}

impl Sink {
    /// Adds a diagnostic; its position in the output follows its span.
    pub(crate) fn push(&mut self, d: Diagnostic) {
        self.items.push((None, d));
    }

    /// Adds a diagnostic with an explicit sort key.
    pub(crate) fn push_keyed(&mut self, key: SortKey, d: Diagnostic) {
        self.items.push((Some(key), d));
    }

    /// Shorthand for `push(Diagnostic::new(..))`.
    pub(crate) fn error(&mut self, code: &'static str, span: Span, message: impl Into<String>) {
        self.push(Diagnostic::new(code, span, message));
    }

    /// Whether no error was reported.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Sorts into source order; `key_of` gives the key of spans without one.
    pub(crate) fn finish(self, key_of: impl Fn(Span) -> SortKey) -> Diagnostics {
        let mut v: Vec<(SortKey, Diagnostic)> = self
            .items
            .into_iter()
            .map(|(k, d)| (k.unwrap_or_else(|| key_of(d.span)), d))
            .collect();
        v.sort_by_key(|(k, _)| *k);
        Diagnostics(v.into_iter().map(|(_, d)| d).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_sorted_and_described() {
        for w in CODES.windows(2) {
            assert!(w[0].0 < w[1].0, "{} / {}", w[0].0, w[1].0);
        }
        for (code, desc) in CODES {
            assert_eq!(code.len(), 5, "{code}");
            assert!(code.starts_with('E'), "{code}");
            assert!(!desc.is_empty(), "{code}");
        }
    }

    #[test]
    fn render_format() {
        let mut map = SourceMap::default();
        let f = map.add("a.rpn".into(), b"name = x\r\n\tbogus 1\r\n".to_vec());
        let d = Diagnostic::new(
            codes::UNKNOWN_MNEMONIC,
            Span {
                file: f,
                lo: 11,
                hi: 16,
            },
            "unknown mnemonic `bogus`",
        )
        .with_note("a note");
        assert_eq!(
            d.render(&map),
            "a.rpn:2:2: error[E0020]: unknown mnemonic `bogus`\n  | \tbogus 1\n  | \t^^^^^\n  = note: a note\n"
        );
    }

    #[test]
    fn render_escapes_control_characters_and_keeps_the_caret_aligned() {
        let mut map = SourceMap::default();
        let f = map.add("a.rpn".into(), b"  \x1b[31m bogus\n".to_vec());
        let d = Diagnostic::new(
            codes::UNKNOWN_MNEMONIC,
            Span {
                file: f,
                lo: 8,
                hi: 13,
            },
            "unknown mnemonic `\x1b`",
        );
        let r = d.render(&map);
        assert!(!r.contains('\x1b'), "{r:?}");
        assert_eq!(
            r,
            "a.rpn:1:9: error[E0020]: unknown mnemonic `\\u{1b}`\n  |   \\u{1b}[31m bogus\n  |              ^^^^^\n"
        );
    }

    #[test]
    fn render_never_panics_on_bad_spans() {
        let map = SourceMap::default();
        let d = Diagnostic::new(
            codes::NO_PROBES,
            Span {
                file: 7,
                lo: 99,
                hi: 3,
            },
            "x",
        );
        assert!(d.render(&map).starts_with(":1:1: error[E0046]"));
    }
}
