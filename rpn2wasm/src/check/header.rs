//! Header checks (spec §5, §6): duplicates, value ranges, supported values,
//! groups and types, and the per-probe rules on `opcode`, `watchpoint`,
//! ranges, `return` and `maxactive` (§6.5). Fills the [`FileHeader`] and the
//! header fields of each [`Probe`].

use std::collections::HashMap;

use super::Ctx;
use crate::ast::{FileHeader, LocationKind, Probe, WatchKind};
use crate::diag::{Diagnostic, codes};
use crate::parse::{Key, Stmt, Value};
use crate::source::Span;
use hostabi::manifest::MAX_MAXACTIVE;

/// Largest `ignore =` / `maxhits =` value (2^31 − 1).
const MAX_HITS: u64 = 0x7FFF_FFFF;
/// Opcodes that cannot be probed: int3, int n, into, fwait (§6.1).
const FORBIDDEN_OPCODES: [u8; 4] = [0xCC, 0xCD, 0xCE, 0x9B];

impl Ctx<'_> {
    /// Reports a repeated keyword; true if `s` repeats an earlier statement.
    fn duplicate(&mut self, seen: &mut HashMap<Key, Span>, s: &Stmt) -> bool {
        if let Some(first) = seen.get(&s.key) {
            let (line, col) = self.map.line_col(first.file, first.lo);
            let d = Diagnostic::new(
                codes::DUPLICATE_KEYWORD,
                s.key_span,
                format!("`{}` given twice", s.key.name()),
            )
            .with_note(format!("first given at line {line}, column {col}"));
            self.sink.push(d);
            return true;
        }
        seen.insert(s.key, s.key_span);
        false
    }

    /// The numeric value of `s`, at most `max` (reported otherwise).
    fn num(&mut self, s: &Stmt, max: u64) -> Option<u64> {
        let Value::Num(v) = s.value else {
            return None;
        };
        if v > max as u128 {
            let shown = if v > u64::MAX as u128 {
                "a value that does not fit in 64 bits".to_string()
            } else {
                v.to_string()
            };
            self.sink.error(
                codes::VALUE_OUT_OF_RANGE,
                s.span,
                format!("`{}` must be at most {max} (found {shown})", s.key.name()),
            );
            return None;
        }
        Some(v as u64)
    }

    fn boolean(s: &Stmt) -> Option<bool> {
        match s.value {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// Checks the file header statements.
    pub(super) fn file_header(&mut self, stmts: &[Stmt]) -> FileHeader {
        let mut h = FileHeader::default();
        let mut seen = HashMap::new();
        for s in stmts {
            if !matches!(s.key, Key::Groupdef | Key::Typedef) && self.duplicate(&mut seen, s) {
                continue;
            }
            match s.key {
                Key::Name => {
                    if let Value::Text(t) = &s.value {
                        h.name = t.clone();
                    }
                }
                Key::Modtype => self.modtype(s),
                Key::Major => {
                    if s.value == Value::Num(0) {
                        self.sink.error(
                            codes::MAJOR_ZERO,
                            s.span,
                            "`major = 0` is reserved for stack-trace records (1 … 65535)",
                        );
                    } else if let Some(v) = self.num(s, 65535) {
                        h.major = v as u16;
                    }
                }
                Key::Id => h.id = self.num(s, 65535).map_or(h.id, |v| v as u16),
                Key::Vars => h.vars = self.num(s, 256).map_or(h.vars, |v| v as u16),
                Key::Gvars => h.gvars = self.num(s, 256).map_or(h.gvars, |v| v as u16),
                Key::Logmax => h.logmax = self.num(s, 1024).map_or(h.logmax, |v| v as u16),
                Key::ExcptLog => h.excpt_log = self.num(s, 1024).map_or(h.excpt_log, |v| v as u16),
                Key::Jmpmax => h.jmpmax = self.num(s, 65535).map_or(h.jmpmax, |v| v as u16),
                Key::ExcptMask => {
                    h.excpt_mask = self.num(s, 0xFFFF).map_or(h.excpt_mask, |v| v as u16)
                }
                Key::Heap => h.heap = self.num(s, 16384).map_or(h.heap, |v| v as u16),
                Key::Autostacktrace => {
                    h.autostacktrace = Self::boolean(s).unwrap_or(h.autostacktrace)
                }
                Key::Logonfault => h.logonfault = Self::boolean(s).unwrap_or(h.logonfault),
                Key::Groupdef | Key::Typedef => {
                    let list = if s.key == Key::Groupdef {
                        &mut h.groups
                    } else {
                        &mut h.types
                    };
                    if let Value::Names(names) = &s.value {
                        for (n, _) in names {
                            if !list.iter().any(|x| x.eq_ignore_ascii_case(n)) {
                                list.push(n.clone());
                            }
                        }
                    }
                }
                // Probe keywords never reach the file header (the parser
                // reports them).
                _ => {}
            }
        }
        if !seen.contains_key(&Key::Name) {
            let d = Diagnostic::new(
                codes::MISSING_NAME,
                Span {
                    file: 0,
                    lo: 0,
                    hi: 0,
                },
                "the file header has no `name =` statement",
            )
            .with_note("`name = MODULE` names the executable or shared object to probe");
            self.sink.push_keyed((0, 0), d);
        }
        h
    }

    fn modtype(&mut self, s: &Stmt) {
        let Value::Word(w) = &s.value else { return };
        match w.as_str() {
            "user" => {}
            "kernel" | "kmod" => {
                let d = Diagnostic::new(
                    codes::UNSUPPORTED_VALUE,
                    s.span,
                    format!("`modtype = {w}` is not supported"),
                )
                .with_note("wprobe traces user-space processes only: use `modtype = user`");
                self.sink.push(d);
            }
            _ => self.sink.error(
                codes::INVALID_VALUE,
                s.span,
                format!("invalid `modtype` `{w}`; expected `user`, `kernel` or `kmod`"),
            ),
        }
    }

    /// Checks a probe's header statements (`stmts[0]` is the location) and
    /// builds the probe (body id left 0).
    pub(super) fn probe(&mut self, stmts: &[Stmt], h: &FileHeader) -> Option<Probe> {
        let loc = stmts.first()?;
        let mut seen = HashMap::new();
        let mut p = Probe {
            kind: if loc.key == Key::Address {
                LocationKind::Address
            } else {
                LocationKind::Offset
            },
            symbol: None,
            value: 0,
            addend: 0,
            length: 1,
            opcode: None,
            watch: None,
            group: None,
            r#type: None,
            minor: 0,
            ignore: 0,
            maxhits: 0,
            logonfault: h.logonfault,
            excpt_mask: h.excpt_mask,
            heap: h.heap,
            r#return: false,
            maxactive: 0,
            usdt: Vec::new(),
            body: 0,
            span: loc.key_span,
        };
        let mut opcode_span = None;
        let (mut return_span, mut maxactive_span) = (None, None);
        for s in &stmts[1..] {
            if self.duplicate(&mut seen, s) {
                continue;
            }
            match s.key {
                Key::Opcode => {
                    opcode_span = Some(s.key_span);
                    if let Some(v) = self.num(s, 255) {
                        if FORBIDDEN_OPCODES.contains(&(v as u8)) {
                            self.sink.error(
                                codes::FORBIDDEN_OPCODE,
                                s.span,
                                format!("opcode 0x{v:02X} cannot be probed"),
                            );
                        }
                        p.opcode = Some(v as u8);
                    }
                }
                Key::Watchpoint => p.watch = self.watch_kind(s),
                Key::Group => p.group = self.declared(s, &h.groups, "group", "groupdef"),
                Key::Type => p.r#type = self.declared(s, &h.types, "type", "typedef"),
                Key::Minor => p.minor = self.num(s, 65535).map_or(0, |v| v as u16),
                Key::Ignore => p.ignore = self.num(s, MAX_HITS).map_or(0, |v| v as u32),
                Key::Maxhits => p.maxhits = self.num(s, MAX_HITS).map_or(0, |v| v as u32),
                Key::Logonfault => p.logonfault = Self::boolean(s).unwrap_or(p.logonfault),
                Key::ExcptMask => {
                    p.excpt_mask = self.num(s, 0xFFFF).map_or(p.excpt_mask, |v| v as u16)
                }
                Key::Heap => p.heap = self.num(s, 16384).map_or(p.heap, |v| v as u16),
                Key::Return => {
                    p.r#return = Self::boolean(s).unwrap_or(false);
                    return_span = Some(s.key_span);
                }
                Key::Maxactive => {
                    p.maxactive = self
                        .num(s, u64::from(MAX_MAXACTIVE))
                        .map_or(0, |v| v as u32);
                    maxactive_span = Some(s.key_span);
                }
                _ => {}
            }
        }
        if p.maxhits == 0 {
            p.maxhits = MAX_HITS as u32;
        }
        // A watchpoint statement that failed to parse still makes this a
        // watchpoint for the opcode rule, to avoid a second error.
        let watch_given = seen.contains_key(&Key::Watchpoint);
        // A breakpoint probe without `opcode =` is verified at arming time
        // by decoding its function (§6.2); a watchpoint has no opcode.
        if let (true, Some(span)) = (watch_given, opcode_span) {
            self.sink.error(
                codes::OPCODE_ON_WATCHPOINT,
                span,
                "`opcode =` is not allowed on a watchpoint probe",
            );
        }
        self.return_rules(&p, watch_given, return_span, maxactive_span);
        if loc.key == Key::Usdt {
            let not_bp = watch_given || p.r#return;
            self.usdt_location(loc, &mut p, not_bp)?;
        } else {
            self.location(loc, &mut p, watch_given)?;
        }
        Some(p)
    }

    /// `usdt = PROVIDER:NAME` (§6.6): the sites of the probe in the module
    /// (one manifest probe each); a breakpoint, never a watchpoint or a
    /// return probe.
    fn usdt_location(&mut self, loc: &Stmt, p: &mut Probe, not_bp: bool) -> Option<()> {
        let Value::Usdt(provider, name) = &loc.value else {
            return None;
        };
        if not_bp {
            self.sink.error(
                codes::INVALID_VALUE,
                loc.span,
                "a `usdt =` probe is a breakpoint at the probe's sites: no `watchpoint =` or `return = yes`",
            );
            return None;
        }
        let sites = match self.usdt_sites(provider, name) {
            Ok(s) => s,
            Err(why) => {
                self.sink.error(codes::UNKNOWN_SYMBOL, loc.span, why);
                return None;
            }
        };
        p.value = sites.first().map_or(0, |s| s.addr);
        p.addend = p.value;
        p.usdt = sites;
        Some(())
    }

    /// §6.5: a return probe is a breakpoint; `maxactive` needs `return = yes`.
    fn return_rules(
        &mut self,
        p: &Probe,
        watch: bool,
        return_span: Option<Span>,
        maxactive_span: Option<Span>,
    ) {
        if let (true, true, Some(span)) = (p.r#return, watch, return_span) {
            let d = Diagnostic::new(
                codes::RETURN_ON_WATCHPOINT,
                span,
                "`return = yes` is not allowed on a watchpoint probe",
            )
            .with_note(
                "a return probe is a breakpoint at the entry of a function: drop `watchpoint =`",
            );
            self.sink.push(d);
        }
        if let (false, Some(span)) = (p.r#return, maxactive_span) {
            let d = Diagnostic::new(
                codes::MAXACTIVE_WITHOUT_RETURN,
                span,
                "`maxactive =` is only allowed on a return probe",
            )
            .with_note(
                "`maxactive` bounds the live calls a return probe tracks; add `return = yes`",
            );
            self.sink.push(d);
        }
    }

    fn watch_kind(&mut self, s: &Stmt) -> Option<WatchKind> {
        let Value::Word(w) = &s.value else {
            return None;
        };
        match w.as_str() {
            "x" => Some(WatchKind::X),
            "w" => Some(WatchKind::W),
            "rw" => Some(WatchKind::Rw),
            "io" => {
                let d = Diagnostic::new(
                    codes::UNSUPPORTED_VALUE,
                    s.span,
                    "`watchpoint = io` is not supported",
                )
                .with_note("an I/O-port watchpoint is a debug register with R/W = 10, which works only with CR4.DE set, a flag only the kernel controls; Linux refuses that encoding through both ptrace and perf, so no user-space tracer can offer it (the ports themselves would also need ioperm/iopl in the target); use `x`, `w` or `rw`");
                self.sink.push(d);
                None
            }
            _ => {
                self.sink.error(
                    codes::INVALID_VALUE,
                    s.span,
                    format!("invalid watchpoint kind `{w}`; expected `x`, `w` or `rw`"),
                );
                None
            }
        }
    }

    fn declared(&mut self, s: &Stmt, list: &[String], what: &str, def: &str) -> Option<String> {
        let Value::Text(n) = &s.value else {
            return None;
        };
        if let Some(d) = list.iter().find(|d| d.eq_ignore_ascii_case(n)) {
            return Some(d.clone());
        }
        let note = if list.is_empty() {
            format!("no {what} is declared; add `{def} = {n}` to the file header")
        } else {
            format!("declared: {}", list.join(", "))
        };
        let d = Diagnostic::new(
            codes::UNDECLARED_GROUP,
            s.span,
            format!("{what} `{n}` is not declared by `{def}`"),
        )
        .with_note(note);
        self.sink.push(d);
        None
    }

    /// Resolves the location statement and applies the range rules.
    fn location(&mut self, loc: &Stmt, p: &mut Probe, watch: bool) -> Option<()> {
        let Value::Loc(a, b) = &loc.value else {
            return None;
        };
        let (value, symbol) = self.resolve(a)?;
        p.value = value;
        p.addend = a.num;
        p.symbol = symbol;
        let Some(b) = b else {
            return Some(());
        };
        let range = Span {
            file: a.span.file,
            lo: a.span.lo,
            hi: b.span.hi.max(a.span.lo),
        };
        if !watch {
            let d = Diagnostic::new(
                codes::RANGE_ON_BREAKPOINT,
                range,
                "address range on a breakpoint probe",
            )
            .with_note("ranges `a:b` are for watchpoint probes (`watchpoint = x|w|rw`)");
            self.sink.push(d);
            return Some(());
        }
        let (end, _) = self.resolve(b)?;
        let len = (end as u128 + 1).checked_sub(value as u128);
        match len {
            Some(n @ (1 | 2 | 4 | 8)) => {
                p.length = n as u8;
                if p.watch == Some(WatchKind::X) && n != 1 {
                    self.sink.error(
                        codes::WATCH_LENGTH,
                        range,
                        format!("`watchpoint = x` needs a length of 1 byte, not {n}"),
                    );
                } else if value % n as u64 != 0 {
                    self.sink.error(
                        codes::WATCH_ALIGNMENT,
                        a.span,
                        format!("watchpoint start 0x{value:x} is not a multiple of its length {n}"),
                    );
                }
            }
            _ => {
                let shown = len.map_or("negative".to_string(), |n| n.to_string());
                let d = Diagnostic::new(
                    codes::WATCH_LENGTH,
                    range,
                    format!("watchpoint length {shown} is not 1, 2, 4 or 8 bytes"),
                )
                .with_note("the range `a:b` covers bytes a … b inclusive");
                self.sink.push(d);
            }
        }
        Some(())
    }
}
