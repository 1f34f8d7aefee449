//! Checker (spec §7, §15): the last stage of the front end. Turns the raw
//! parse into an [`crate::ast::Program`]: header values and their ranges, probe
//! rules, labels and procedures, variable indices, symbols, where the entry
//! values of return probes may be read (§6.5), and the
//! canonical layout (every `Insn.offset`, `Program.code_size`). It reports
//! every error it finds and produces a program only when there is none. It
//! never reads anything but the module's symbol table, and that only when a
//! symbol is used.
//!
//! **Decision: trailing labels.** §2.8 says "a label that is not followed by
//! an instruction in its body is a build error", while §4.2 appends an
//! implicit `exit`/`ret` to every body and §17 item 4 states that this
//! implicit instruction "gives every label a following instruction". The
//! later, more specific decision wins: a label at the end of a body labels
//! the implicit terminator, and jumping to it ends the handler (or returns).
//! Error [`codes::LABEL_WITHOUT_INSN`] is therefore only reported for labels
//! that cannot belong to a body at all: labels in the file header (before
//! any probe or procedure) and labels written on the same line as a header
//! statement or a `proc` heading.

mod body;
mod header;

use crate::Options;
use crate::ast::{Body, BodyOwner, Insn, Op, Probe, Proc, Program};
use crate::diag::{Diagnostic, Sink, codes};
use crate::parse::{Expr, Item, RawProgram};
use crate::source::{SourceMap, Span};
use crate::symbols::{ElfSymbols, SymbolError, Symbols};

/// Largest canonical code image (§15): code offsets are 16-bit quantities.
pub const MAX_CODE_BYTES: u32 = 65535;
/// Largest number of probe points in one file (§4.1).
pub const MAX_PROBES: usize = 65535;

/// Where symbols come from during one check.
enum SymbolSource<'a> {
    Given(&'a dyn Symbols),
    Elf(Option<Box<ElfSymbols>>),
}

/// State shared by the checks of one file.
pub(crate) struct Ctx<'a> {
    map: &'a SourceMap,
    sink: &'a mut Sink,
    symbols: SymbolSource<'a>,
    module: String,
    module_dirs: Vec<std::path::PathBuf>,
    module_error_reported: bool,
}

/// Checks `raw`; returns the program if no error was reported (by this
/// stage or an earlier one).
pub(crate) fn check(
    raw: RawProgram,
    map: &SourceMap,
    opts: &Options,
    sink: &mut Sink,
) -> Option<Program> {
    let mut cx = Ctx {
        map,
        sink,
        symbols: match opts.symbols.as_deref() {
            Some(s) => SymbolSource::Given(s),
            None => SymbolSource::Elf(None),
        },
        module: String::new(),
        module_dirs: opts.module_dirs.clone(),
        module_error_reported: false,
    };
    let header = cx.file_header(&raw.file_stmts);
    cx.module = header.name.clone();
    let procs = cx.procs(&raw.items);
    let labels = cx.label_tables(&raw.items);

    let mut probes = Vec::new();
    let mut bodies = Vec::new();
    let mut probe_count = 0usize;
    for (i, item) in raw.items.iter().enumerate() {
        let id = bodies.len();
        match item {
            Item::Probe(stmts, body) => {
                probe_count += 1;
                if probe_count == MAX_PROBES + 1 {
                    let span = stmts.first().map_or(raw.main_end, |s| s.key_span);
                    cx.sink.error(
                        codes::TOO_MANY_PROBES,
                        span,
                        format!("more than {MAX_PROBES} probe points in one file"),
                    );
                }
                if let Some(mut p) = cx.probe(stmts, &header) {
                    p.body = id;
                    probes.push(p);
                }
                let owner = BodyOwner::Probe(probe_count - 1);
                bodies.push(cx.body(body, owner, i, &labels, &procs, &header));
            }
            Item::Proc(p) => {
                let owner = BodyOwner::Proc(procs.ids[i].unwrap_or(0));
                bodies.push(cx.body(&p.body, owner, i, &labels, &procs, &header));
            }
        }
    }
    if probe_count == 0 {
        let d = Diagnostic::new(
            codes::NO_PROBES,
            raw.main_end,
            "the file defines no probe point",
        )
        .with_note("a probe starts with `offset = LOCATION` or `address = LOCATION`");
        cx.sink.push_keyed((u64::MAX, 0), d);
    }
    cx.entry_values(&probes, &procs.list, &bodies);
    let code_size = cx.layout(&mut bodies);
    let procs = procs.list;
    if !cx.sink.is_empty() {
        return None;
    }
    Some(Program {
        header,
        probes,
        procs,
        bodies,
        code_size,
    })
}

impl Ctx<'_> {
    /// §6.5: `push entry` and `push elapsed` only where every hit that can
    /// run them is the return of a return probe. Each offending instruction
    /// of the body of a probe without `return = yes`, or of a procedure such
    /// a probe calls (directly or through other procedures), is reported
    /// once, naming the first such probe. Probes whose header had errors
    /// are not in `probes` and are skipped (already reported).
    fn entry_values(&mut self, probes: &[Probe], procs: &[Proc], bodies: &[Body]) {
        let mut reported = std::collections::HashSet::new();
        for p in probes.iter().filter(|p| !p.r#return) {
            let mut seen = vec![false; bodies.len()];
            let mut todo = vec![p.body];
            if let Some(s) = seen.get_mut(p.body) {
                *s = true;
            }
            while let Some(b) = todo.pop() {
                let Some(body) = bodies.get(b) else { continue };
                for (i, insn) in body.insns.iter().enumerate() {
                    if let Op::Call(id) = insn.op
                        && let Some(callee) = procs.get(id)
                        && let Some(s) = seen.get_mut(callee.body)
                        && !*s
                    {
                        *s = true;
                        todo.push(callee.body);
                    }
                    if insn.op.needs_return_probe() && reported.insert((b, i)) {
                        let d = self.entry_outside_return_probe(p, body, insn, procs);
                        self.sink.push(d);
                    }
                }
            }
        }
    }

    fn entry_outside_return_probe(
        &self,
        p: &Probe,
        body: &Body,
        insn: &Insn,
        procs: &[Proc],
    ) -> Diagnostic {
        let what = match insn.op {
            Op::PushElapsed => "push elapsed",
            _ => "push entry",
        };
        let d = match body.owner {
            BodyOwner::Proc(id) => {
                let name = procs.get(id).map_or("", |pr| pr.name.as_str());
                Diagnostic::new(
                    codes::ENTRY_OUTSIDE_RETURN_PROBE,
                    insn.span,
                    format!(
                        "`{what}` in procedure `{name}`, which a probe that is not a return probe calls"
                    ),
                )
                .with_note(format!(
                    "called, directly or through other procedures, by the probe at {}",
                    self.at(p.span)
                ))
            }
            BodyOwner::Probe(_) => Diagnostic::new(
                codes::ENTRY_OUTSIDE_RETURN_PROBE,
                insn.span,
                format!("`{what}` in a probe that is not a return probe"),
            ),
        };
        d.with_note("entry values exist only when the handler runs at the return of a call: add `return = yes` to the probe (at the function's entry)")
    }

    /// The sites of USDT probe `provider:name` in the module, or why none.
    pub(crate) fn usdt_sites(
        &mut self,
        provider: &str,
        name: &str,
    ) -> Result<Vec<crate::ast::UsdtSite>, String> {
        let elf = match &mut self.symbols {
            SymbolSource::Given(_) => {
                return Err(format!(
                    "`usdt = {provider}:{name}` needs the module file (its `.note.stapsdt`)"
                ));
            }
            SymbolSource::Elf(elf) => {
                if self.module.is_empty() {
                    return Err("`usdt =` needs the module: the file header has no `name =`".into());
                }
                elf.get_or_insert_with(|| {
                    Box::new(ElfSymbols::with_dirs(
                        &self.module,
                        self.module_dirs.clone(),
                    ))
                })
            }
        };
        let sites = elf.usdt_sites(provider, name)?;
        let mut out = Vec::new();
        for s in sites {
            let args = s
                .args
                .map_err(|e| format!("USDT probe {provider}:{name}: argument specs: {e}"))?;
            out.push(crate::ast::UsdtSite {
                addr: s.addr,
                semaphore: s.semaphore,
                args,
            });
        }
        if out.is_empty() {
            return Err(format!(
                "no USDT probe `{provider}:{name}` in module `{}` (`wprobe list MODULE 'usdt:*'` lists them)",
                self.module
            ));
        }
        Ok(out)
    }

    /// Looks a symbol up, reporting failures.
    fn symbol(&mut self, name: &str, span: Span) -> Option<(String, u64)> {
        let r = match &mut self.symbols {
            SymbolSource::Given(s) => s.lookup(name),
            SymbolSource::Elf(elf) => {
                if self.module.is_empty() {
                    // `name =` is missing (reported): nowhere to look.
                    return None;
                }
                elf.get_or_insert_with(|| {
                    Box::new(ElfSymbols::with_dirs(
                        &self.module,
                        self.module_dirs.clone(),
                    ))
                })
                .lookup(name)
            }
        };
        match r {
            Ok(found) => Some(found),
            Err(SymbolError::Unknown) => {
                let d = Diagnostic::new(
                    codes::UNKNOWN_SYMBOL,
                    span,
                    format!("unknown symbol `{name}`"),
                )
                .with_note(format!(
                    "looked up in `.symtab` and `.dynsym` of module `{}`",
                    self.module
                ));
                self.sink.push(d);
                None
            }
            Err(SymbolError::Ambiguous(names)) => {
                let d = Diagnostic::new(
                    codes::AMBIGUOUS_SYMBOL,
                    span,
                    format!("symbol `{name}` is ambiguous: no exact match and several case-insensitive ones"),
                )
                .with_note(format!("candidates: {}", names.join(", ")));
                self.sink.push(d);
                None
            }
            Err(SymbolError::Module(msg)) => {
                if !self.module_error_reported {
                    self.module_error_reported = true;
                    let d = Diagnostic::new(
                        codes::MODULE_UNAVAILABLE,
                        span,
                        format!("cannot look up symbol `{name}`: {msg}"),
                    )
                    .with_note("symbols come from the file named by `name =` (a path, or a name found in the current directory, in PATH, or as the dynamic linker finds a library)");
                    self.sink.push(d);
                }
                None
            }
        }
    }

    /// Link-time value of an expression and its symbol's ELF name.
    fn resolve(&mut self, e: &Expr) -> Option<(u64, Option<String>)> {
        match &e.sym {
            None => Some((e.num, None)),
            Some((name, span)) => {
                let (exact, v) = self.symbol(name, *span)?;
                Some((e.num.wrapping_add(v), Some(exact)))
            }
        }
    }

    /// Assigns canonical offsets (§15): bodies in source order, each with
    /// its implicit terminator. Reports an image above [`MAX_CODE_BYTES`]
    /// at the first instruction that does not fit.
    fn layout(&mut self, bodies: &mut [Body]) -> u32 {
        let mut offset: u64 = 0;
        let mut reported = false;
        for insn in bodies.iter_mut().flat_map(|b| b.insns.iter_mut()) {
            insn.offset = offset.min(u32::MAX as u64) as u32;
            offset += insn.op.size() as u64;
            if offset > MAX_CODE_BYTES as u64 && !reported {
                reported = true;
                let d = Diagnostic::new(
                    codes::CODE_TOO_LARGE,
                    insn.span,
                    format!("code image exceeds {MAX_CODE_BYTES} bytes at this instruction"),
                )
                .with_note("the code of all probes and procedures, implicit terminators included, must fit in 65535 bytes");
                self.sink.push(d);
            }
        }
        offset.min(u32::MAX as u64) as u32
    }
}

/// The implicit terminator of a body (§4.2).
fn terminator(owner: BodyOwner, span: Span) -> Insn {
    let op = match owner {
        BodyOwner::Probe(_) => Op::Exit,
        BodyOwner::Proc(_) => Op::Ret,
    };
    Insn {
        op,
        span,
        offset: 0,
    }
}

#[cfg(test)]
mod tests {
    use crate::ast::Op;
    use crate::symbols::MapSymbols;
    use crate::{Options, parse::parse_text};
    use std::path::Path;

    fn opts() -> Options {
        Options {
            symbols: Some(Box::new(MapSymbols::new([("target_fn", 0x401146u64)]))),
            ..Options::default()
        }
    }

    #[test]
    fn appendix_b_offsets() {
        let src = "name = probe_target
major = 7
offset = target_fn
opcode = 0x55
        push 3          // offset  0: 4C 03 00 00 00 00 00 00 00
loop1:  push 2          // offset  9: 4C 02 00 00 00 00 00 00 00
        log 1           // offset 18: 1B 01 00
        loop loop1      // offset 21: 08 EB FF FF FF FF FF FF FF
        log 1           // offset 30: 1B 01 00
                        // offset 33: 0D   (implicit exit)
";
        let (p, _) = parse_text(Path::new("b.rpn"), src.into(), &opts()).unwrap();
        let b = &p.bodies[0];
        let offs: Vec<u32> = b.insns.iter().map(|i| i.offset).collect();
        assert_eq!(offs, [0, 9, 18, 21, 30, 33]);
        assert_eq!(b.insns[3].op, Op::Loop(1));
        assert_eq!(b.insns[5].op, Op::Exit);
        assert_eq!(p.code_size, 34);
        assert_eq!(p.header.major, 7);
        let probe = &p.probes[0];
        assert_eq!(probe.value, 0x401146);
        assert_eq!(probe.addend, 0);
        assert_eq!(probe.symbol.as_deref(), Some("target_fn"));
        assert_eq!(probe.opcode, Some(0x55));
        assert_eq!(probe.maxhits, 0x7FFF_FFFF);
        // Displacement of `loop loop1`: target 9 minus the next offset 30.
        let next = b.insns[4].offset as i64;
        assert_eq!(b.insns[1].offset as i64 - next, -21);
    }

    #[test]
    fn trailing_label_labels_the_implicit_terminator() {
        let src =
            "name = m\noffset = 0x1000\nopcode = 0x55\n  jmp end\nend:\nproc p\n  jz out\nout:\n";
        let (p, _) = parse_text(Path::new("t.rpn"), src.into(), &Options::default()).unwrap();
        assert_eq!(p.bodies[0].insns[0].op, Op::Jmp(1));
        assert_eq!(p.bodies[0].insns[1].op, Op::Exit);
        assert_eq!(p.bodies[1].insns[0].op, Op::Jz(1));
        assert_eq!(p.bodies[1].insns[1].op, Op::Ret);
        assert_eq!(p.bodies[1].insns[1].offset, 10 + 9);
    }
}
