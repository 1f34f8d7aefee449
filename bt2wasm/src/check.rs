//! Semantic analysis: attach points expanded into concrete probes, names
//! resolved, types inferred, and every probe lowered to the typed IR.
//!
//! Maps and variables get their types from how they are used anywhere in
//! the program (a map read in one probe may be assigned in another), so,
//! like bpftrace, the lowering runs in passes until the map and variable
//! types stop changing; only the last pass reports errors and its IR is
//! kept. Errors carry bpftrace's wording where bpftrace has one.

pub(crate) mod call;
pub mod config;
pub(crate) mod expr;
mod iterate;
mod stmt;
mod types;
pub(crate) use expr::reg;
pub mod format;

use crate::ast::{self, Program};
use crate::diag::{Sink, codes};
use crate::ir::{self, E, Handler, Key, Part, S, Ty};
use crate::probes::{self, Concrete, Kind};
use hostabi::event::Events;
use hostabi::manifest::{Location, LocationKind, Manifest, MapDecl, ProbeKind, ProbeSpec, Trigger};
use hostabi::maps::MapKind;
use rpn2wasm::Span;
use std::collections::HashMap;

/// Compile options that change the program's meaning.
#[derive(Clone, Debug)]
pub struct Options {
    /// String size of `str()`, `comm`... (bpftrace `BPFTRACE_STRLEN`, default 64).
    pub strlen: u32,
    /// Keys per map (bpftrace `BPFTRACE_MAP_KEYS_MAX`, default 4096).
    pub map_keys: u32,
    /// Frames of `ustack` (bpftrace's default is 127).
    pub ustack_frames: u32,
    /// Whether a command is launched (`cpid` is then available).
    pub has_child: bool,
    /// The default stack mode (`bpftrace`, `perf`, `raw`; bpftrace's
    /// `BPFTRACE_STACK_MODE`).
    pub stack_mode: String,
    /// `--unsafe`: `system()` is allowed.
    pub unsafe_calls: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            strlen: 64,
            map_keys: hostabi::maps::DEFAULT_MAX_KEYS,
            ustack_frames: 127,
            has_child: false,
            stack_mode: "bpftrace".into(),
            unsafe_calls: false,
        }
    }
}

/// How many inference passes at most (bpftrace uses 10).
const MAX_PASSES: usize = 10;
/// Largest frame of one handler (bytes): strings and keys live there.
pub const MAX_FRAME_BYTES: u32 = 1 << 20;
/// Largest `unroll` count (bpftrace's).
pub const MAX_UNROLL: u64 = 100;

/// What is known about a map.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MapInfo {
    pub name: String,
    pub index: u32,
    pub kind: Option<MapKind>,
    /// Key field types (`None`: not seen yet).
    pub key: Option<Vec<Ty>>,
    /// Value type of assign maps; sample type of the others.
    pub value: Ty,
    pub lhist: Option<(i64, i64, i64)>,
    /// `k` of `hist(x, k)` (`None`: not seen yet).
    pub hist_bits: Option<u8>,
    /// Span of the first assignment (for messages).
    pub first: Option<Span>,
    /// Span of the first use of any kind.
    pub used: Option<Span>,
}

/// Program-wide state of one pass.
pub(crate) struct Cx<'a> {
    pub opts: &'a Options,
    pub maps: HashMap<String, MapInfo>,
    pub map_order: Vec<String>,
    /// Variable types by (probe, name), learnt across passes.
    pub vars: HashMap<(usize, String), Ty>,
    pub events: Events,
    pub data: Vec<u8>,
    strings: HashMap<Vec<u8>, u32>,
    pub diags: Sink,
    /// Last pass: report errors, keep the IR.
    pub final_pass: bool,
    /// Something learnt this pass (another pass is needed).
    pub changed: bool,
    /// C types: the program's definitions and what DWARF added.
    pub types: crate::ctypes::Types,
    /// The probed binaries, whose DWARF defines types the program names.
    pub dwarf_files: Vec<std::rc::Rc<crate::elf::Binary>>,
}

impl Cx<'_> {
    pub fn err(&mut self, code: &'static str, span: Span, msg: impl Into<String>) {
        if self.final_pass {
            self.diags.error(code, span, msg);
        }
    }

    pub fn err_note(
        &mut self,
        code: &'static str,
        span: Span,
        msg: impl Into<String>,
        note: impl Into<String>,
    ) {
        if self.final_pass {
            self.diags.error_note(code, span, msg, note);
        }
    }

    /// Address of a NUL-terminated copy of `bytes` in static data (`len + 1`
    /// bytes, padded to 8).
    pub fn string(&mut self, bytes: &[u8]) -> u32 {
        if let Some(a) = self.strings.get(bytes) {
            return *a;
        }
        let at = ir::STATIC_BASE + self.data.len() as u32;
        self.data.extend_from_slice(bytes);
        self.data.push(0);
        while !self.data.len().is_multiple_of(8) {
            self.data.push(0);
        }
        self.strings.insert(bytes.to_vec(), at);
        at
    }

    /// The map named `name`, created on first sight.
    pub fn map(&mut self, name: &str) -> &mut MapInfo {
        if !self.maps.contains_key(name) {
            let index = self.map_order.len() as u32;
            self.map_order.push(name.to_string());
            self.maps.insert(
                name.to_string(),
                MapInfo {
                    name: name.to_string(),
                    index,
                    kind: None,
                    key: None,
                    value: Ty::None,
                    lhist: None,
                    hist_bits: None,
                    first: None,
                    used: None,
                },
            );
        }
        self.maps.get_mut(name).expect("inserted above")
    }
}

/// Unifies two types of one map field or variable: integers widen to 64
/// bits (signed when either is), strings to the larger size, tuples field
/// by field; `None` when they cannot be one type.
pub(crate) fn unify(a: &Ty, b: &Ty) -> Option<Ty> {
    Some(match (a, b) {
        (Ty::None, t) | (t, Ty::None) => t.clone(),
        (
            Ty::Int {
                signed: s1,
                bytes: b1,
            },
            Ty::Int {
                signed: s2,
                bytes: b2,
            },
        ) => {
            if s1 == s2 && b1 == b2 {
                a.clone()
            } else {
                Ty::Int {
                    signed: *s1 || *s2,
                    bytes: 8,
                }
            }
        }
        (Ty::Str(x), Ty::Str(y)) => Ty::Str(*x.max(y)),
        (Ty::Buf(x), Ty::Buf(y)) => Ty::Buf(*x.max(y)),
        (Ty::Ustack(x, m), Ty::Ustack(y, n)) if m == n => Ty::Ustack(*x.max(y), *m),
        (Ty::Usym, Ty::Usym) => Ty::Usym,
        (Ty::Ptr(_), Ty::Ptr(_)) => a.clone(),
        (Ty::Record(x), Ty::Record(y)) if x == y => a.clone(),
        (Ty::Array(x, n), Ty::Array(y, m)) if n == m => Ty::Array(Box::new(unify(x, y)?), *n),
        (Ty::Enum(x), Ty::Enum(y)) if x == y => a.clone(),
        (Ty::Strftime(x), Ty::Strftime(y)) if x == y => a.clone(),
        (Ty::Username, Ty::Username) | (Ty::Inet, Ty::Inet) => a.clone(),
        (Ty::Enum(_), Ty::Int { signed, .. }) | (Ty::Int { signed, .. }, Ty::Enum(_)) => Ty::Int {
            signed: *signed,
            bytes: 8,
        },
        (Ty::Tuple(x), Ty::Tuple(y)) if x.len() == y.len() => Ty::Tuple(
            x.iter()
                .zip(y)
                .map(|(a, b)| unify(a, b))
                .collect::<Option<Vec<_>>>()?,
        ),
        _ => return None,
    })
}

/// The probe context a handler body runs in (the common kind of its
/// concrete probes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ctx {
    Special,
    Uprobe,
    Usdt,
    Uretprobe,
    Watch,
}

/// Lowering state of one handler.
pub(crate) struct Fx<'c, 'a> {
    pub cx: &'c mut Cx<'a>,
    pub probe: usize,
    pub ctx: Ctx,
    pub concrete: &'c [Concrete],
    pub locals: u32,
    pub frame: u32,
    pub vars: HashMap<String, (Ty, VarLoc)>,
    pub loop_depth: u32,
    /// (base, stride) of this handler's `probe` and `func` name tables.
    pub tables: Option<((u32, u32), (u32, u32))>,
}

/// Where a variable lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VarLoc {
    Local(u32),
    Slot(u32),
}

impl Fx<'_, '_> {
    pub fn local(&mut self) -> u32 {
        self.locals += 1;
        self.locals - 1
    }

    /// A frame slot of `size` bytes (8-aligned).
    pub fn slot(&mut self, size: u32) -> u32 {
        let at = self.frame;
        self.frame = self.frame.saturating_add(size.div_ceil(8) * 8);
        at
    }

    /// `e` (of type `from`) as a value of type `to`, a type `from` unifies
    /// into: integers truncated to a narrower type, tuples laid out again
    /// field by field (a longer string in a field moves the fields after
    /// it), strings and buffers copied as their prefix (the copy
    /// zero-fills the rest).
    pub fn convert(&mut self, e: E, from: &Ty, to: &Ty) -> E {
        match (from, to) {
            (Ty::Tuple(f), Ty::Tuple(t)) if from != to && f.len() == t.len() => {
                let tmp = self.slot(from.size());
                let mut parts = Vec::new();
                let (mut off_from, mut off_to) = (0, 0);
                for (ff, tt) in f.iter().zip(t) {
                    let field = E::Field {
                        base: Box::new(E::Slot(tmp)),
                        off: off_from,
                        ty: ff.clone(),
                    };
                    parts.push(Part {
                        e: self.convert(field, ff, tt),
                        ty: tt.clone(),
                        off: off_to,
                    });
                    off_from += ff.size();
                    off_to += tt.size();
                }
                let slot = self.slot(to.size());
                let fill = S::SetSlot {
                    slot: tmp,
                    e,
                    size: from.size(),
                    src_size: from.size(),
                };
                E::Seq(vec![fill], Box::new(E::Tuple { slot, parts }))
            }
            _ => coerce_int(e, from, to),
        }
    }

    /// Builds a map key from the key expressions, typed as the map's key.
    pub fn key(&mut self, key_tys: &[Ty], exprs: Vec<(E, Ty)>) -> Key {
        let size: u32 = key_tys.iter().map(Ty::size).sum();
        let slot = self.slot(size.max(8));
        let mut parts = Vec::new();
        let mut off = 0;
        for (t, (e, _)) in key_tys.iter().zip(exprs) {
            parts.push(Part {
                e,
                ty: t.clone(),
                off,
            });
            off += t.size();
        }
        Key { slot, parts, size }
    }

    pub fn want_int(&mut self, t: &Ty, span: Span, what: &str) {
        if !t.is_int() && *t != Ty::None {
            self.cx.err(
                codes::TYPE,
                span,
                format!("{what} must be an integer, not {}", t.name()),
            );
        }
    }
}

/// Converts an integer value of type `from` to `to` (truncation of narrow types).
pub(crate) fn coerce_int(e: E, from: &Ty, to: &Ty) -> E {
    match (from, to) {
        (Ty::Int { .. }, Ty::Int { signed, bytes }) if *bytes < 8 && from != to => E::Cast {
            e: Box::new(e),
            signed: *signed,
            bytes: *bytes,
        },
        _ => e,
    }
}

/// The result of checking a program.
pub struct Checked {
    /// The IR.
    pub module: ir::Module,
    /// The concrete probes, by handler.
    pub concrete: Vec<Vec<Concrete>>,
    /// What the program's `config` block decides for the run.
    pub config: config::RunConfig,
    /// Warnings for the run to print (attach points skipped).
    pub warnings: Vec<String>,
}

/// Expands, checks and lowers `prog`.
pub fn check(
    prog: &Program,
    env: &mut probes::Env,
    opts: &Options,
) -> Result<Checked, crate::diag::Diagnostics> {
    let mut diags = Sink::default();
    let mut local = opts.clone();
    let run_config = config::apply(&prog.config, &mut local, &mut diags);
    let mut concrete: Vec<Vec<Concrete>> = Vec::new();
    let mut warnings = Vec::new();
    for p in &prog.probes {
        let mut list = Vec::new();
        for (text, span) in &p.attach {
            // A function missing from one attach point of several is
            // skipped with a warning (bpftrace's `missing_probes`
            // default), or silently (`ignore`); `error` keeps the error.
            let mut here = Sink::default();
            list.extend(probes::expand(text, *span, env, &mut here));
            let skippable = p.attach.len() > 1
                && run_config.missing_probes != "error"
                && !here.list.is_empty()
                && here.list.iter().all(|d| d.code == codes::NO_MATCH);
            if skippable {
                if run_config.missing_probes == "warn" {
                    for d in &here.list {
                        let what = d.message.trim_end_matches(", cannot attach probe.");
                        warnings.push(format!("WARNING: {what}, skipping probe."));
                    }
                }
            } else {
                diags.list.append(&mut here.list);
            }
        }
        if list.is_empty() && diags.is_empty() && !p.attach.is_empty() {
            diags.error(
                codes::NO_MATCH,
                p.span,
                "none of this probe's attach points matches anything",
            );
        }
        concrete.push(list);
    }
    let opts = &local;
    let mut types = types::build(prog, &mut diags);
    let dwarf_files: Vec<std::rc::Rc<crate::elf::Binary>> = env
        .binaries
        .values()
        .filter_map(|b| b.clone().ok())
        .collect();
    let mut vars: HashMap<(usize, String), Ty> = HashMap::new();
    let mut maps: HashMap<String, MapInfo> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for pass in 0..=MAX_PASSES {
        let mut cx = Cx {
            opts,
            maps: maps.clone(),
            map_order: order.clone(),
            vars: vars.clone(),
            events: Events::default(),
            data: Vec::new(),
            strings: HashMap::new(),
            diags: Sink::default(),
            final_pass: false,
            changed: false,
            types,
            dwarf_files: dwarf_files.clone(),
        };
        let _ = lower_all(&mut cx, prog, &concrete);
        maps = cx.maps;
        order = cx.map_order;
        vars = cx.vars;
        types = cx.types;
        if !cx.changed && pass > 0 {
            break;
        }
    }
    let mut cx = Cx {
        opts,
        maps,
        map_order: order,
        vars,
        events: Events::default(),
        data: Vec::new(),
        strings: HashMap::new(),
        diags: Sink::default(),
        final_pass: true,
        changed: false,
        types,
        dwarf_files,
    };
    let handlers = lower_all(&mut cx, prog, &concrete);
    diags.list.append(&mut cx.diags.list);
    if !diags.is_empty() {
        return Err(diags.finish());
    }
    Ok(Checked {
        module: finish(cx, handlers, &concrete),
        concrete,
        config: run_config,
        warnings,
    })
}

fn lower_all(cx: &mut Cx<'_>, prog: &Program, concrete: &[Vec<Concrete>]) -> Vec<Handler> {
    let mut handlers = Vec::new();
    for (i, p) in prog.probes.iter().enumerate() {
        handlers.push(lower_probe(cx, i, p, &concrete[i]));
    }
    // Maps used (read, printed, cleared, deleted from) but never assigned.
    if cx.final_pass {
        let undefined: Vec<(Span, String)> = cx
            .map_order
            .iter()
            .filter_map(|n| cx.maps.get(n))
            .filter(|m| m.kind.is_none())
            .map(|m| (m.used.unwrap_or_default(), m.name.clone()))
            .collect();
        for (span, name) in undefined {
            cx.err(codes::UNDEFINED, span, format!("Undefined map: {name}"));
        }
        // The manifest holds at most MAX_MAPS maps: the first one beyond is
        // refused here, where it is written, not when the module is loaded.
        let over: Option<(Span, String)> = cx
            .map_order
            .iter()
            .filter_map(|n| cx.maps.get(n))
            .filter(|m| m.kind.is_some())
            .nth(hostabi::maps::MAX_MAPS)
            .map(|m| (m.first.or(m.used).unwrap_or_default(), m.name.clone()));
        if let Some((span, name)) = over {
            cx.err(
                codes::LIMIT,
                span,
                format!(
                    "Too many maps: {name} is map {} of a program that may have at most {}",
                    hostabi::maps::MAX_MAPS + 1,
                    hostabi::maps::MAX_MAPS
                ),
            );
        }
    }
    handlers
}

fn lower_probe(cx: &mut Cx<'_>, index: usize, p: &ast::Probe, concrete: &[Concrete]) -> Handler {
    let ctx = match concrete.first().map(|c| &c.kind) {
        Some(Kind::Uprobe { ret: true, .. }) => Ctx::Uretprobe,
        Some(Kind::Uprobe { .. }) => Ctx::Uprobe,
        Some(Kind::Watchpoint { .. }) => Ctx::Watch,
        Some(Kind::Usdt { .. }) => Ctx::Usdt,
        Some(_) => Ctx::Special,
        // Its attach points were refused: the body is checked as their
        // provider's (no second error for `arg0` in a refused uprobe).
        None => match p
            .attach
            .first()
            .map(|(t, _)| t.split(':').next().unwrap_or_default())
        {
            Some("uprobe" | "u") => Ctx::Uprobe,
            Some("uretprobe" | "ur") => Ctx::Uretprobe,
            Some("watchpoint" | "w") => Ctx::Watch,
            Some("usdt" | "U") => Ctx::Usdt,
            _ => Ctx::Special,
        },
    };
    let mixed = concrete.iter().any(|c| {
        let k = match &c.kind {
            Kind::Uprobe { ret: true, .. } => Ctx::Uretprobe,
            Kind::Uprobe { .. } => Ctx::Uprobe,
            Kind::Watchpoint { .. } => Ctx::Watch,
            Kind::Usdt { .. } => Ctx::Usdt,
            _ => Ctx::Special,
        };
        k != ctx
    });
    let mut fx = Fx {
        cx,
        probe: index,
        ctx: if mixed { Ctx::Special } else { ctx },
        concrete,
        locals: 0,
        frame: 0,
        vars: HashMap::new(),
        loop_depth: 0,
        tables: None,
    };
    let mut body = fx.stmts(&p.body);
    if let Some(pred) = &p.pred {
        let (c, t) = fx.expr(pred);
        fx.want_int(&t, pred.span, "predicate");
        body = vec![S::If(c, body, Vec::new())];
    }
    if fx.frame > MAX_FRAME_BYTES {
        fx.cx.err(
            codes::LIMIT,
            p.span,
            format!(
                "this probe needs {} bytes of frame, more than the {MAX_FRAME_BYTES} allowed",
                fx.frame
            ),
        );
    }
    Handler {
        body,
        locals: fx.locals,
        frame: fx.frame,
    }
}

/// The module of handlers built outside the checker (probe events).
pub(crate) fn module_of(
    handlers: Vec<Handler>,
    concrete: &[Vec<Concrete>],
    data: Vec<u8>,
    events: Events,
    opts: &Options,
) -> ir::Module {
    let cx = Cx {
        opts,
        maps: HashMap::new(),
        map_order: Vec::new(),
        vars: HashMap::new(),
        events,
        data,
        strings: HashMap::new(),
        diags: Sink::default(),
        final_pass: true,
        changed: false,
        types: crate::ctypes::Types::default(),
        dwarf_files: Vec::new(),
    };
    finish(cx, handlers, concrete)
}

/// Builds the manifest and the module from the last pass.
fn finish(cx: Cx<'_>, handlers: Vec<Handler>, concrete: &[Vec<Concrete>]) -> ir::Module {
    let mut manifest = Manifest {
        module: String::new(),
        ..Manifest::default()
    };
    for name in &cx.map_order {
        let m = &cx.maps[name];
        let Some(kind) = m.kind else { continue };
        manifest.maps.push(MapDecl {
            name: m.name.clone(),
            kind,
            key: m
                .key
                .clone()
                .unwrap_or_default()
                .iter()
                .map(Ty::layout)
                .collect(),
            value: match kind {
                MapKind::Count | MapKind::Hist | MapKind::Lhist => None,
                _ => Some(m.value.layout()),
            },
            max_keys: cx.opts.map_keys,
            lhist: m.lhist,
            hist_bits: m.hist_bits.unwrap_or(0),
        });
    }
    let mut probes = Vec::new();
    for (h, list) in concrete.iter().enumerate() {
        for (i, c) in list.iter().enumerate() {
            let export = format!("p{}", probes.len());
            let spec = spec_of(&export, c);
            if manifest.module.is_empty()
                && let Some(m) = &spec.module
            {
                manifest.module = m.clone();
            }
            probes.push(ir::ProbeOut {
                export,
                handler: h,
                index: i as u32,
                spec,
                also: Vec::new(),
                merged: false,
            });
        }
    }
    merge_returns(&mut probes);
    if manifest.module.is_empty() {
        manifest.module = "-".into();
    }
    // The first probe's module is the file's; others keep theirs.
    for p in &mut probes {
        if p.spec.module.as_deref() == Some(manifest.module.as_str()) {
            p.spec.module = None;
        }
    }
    manifest.probes = probes.iter().map(|p| p.spec.clone()).collect();
    // A handler run can be long (loops); the fuel derived from jmpmax is
    // 100x less than the runtime's cap, so one-liners get the cap.
    manifest.fuel = 10_000_000;
    ir::Module {
        handlers,
        probes,
        data: cx.data,
        manifest,
        events: cx.events,
    }
}

/// Return probes of one function run in program order, as bpftrace runs
/// them: the transports pair each return with its call, and the returns of
/// calls entered at the same stack pointer come innermost (last armed)
/// first, so the bodies of every later return probe at the same place run
/// from the first one's export, after its own body; the later probes stay
/// in the manifest (bpftrace's `Attaching N probes` counts them) with
/// exports that do nothing.
pub fn merge_returns(probes: &mut [ir::ProbeOut]) {
    let same = |a: &ProbeSpec, b: &ProbeSpec| {
        a.r#return
            && b.r#return
            && a.kind == ProbeKind::Breakpoint
            && b.kind == ProbeKind::Breakpoint
            && a.module == b.module
            && a.location == b.location
            && a.value == b.value
    };
    for j in 1..probes.len() {
        let (head, tail) = probes.split_at_mut(j);
        let later = &mut tail[0];
        if let Some(first) = head
            .iter_mut()
            .find(|p| !p.merged && same(&p.spec, &later.spec))
        {
            first.also.push((later.handler, later.index));
            later.merged = true;
        }
    }
}

fn spec_of(export: &str, c: &Concrete) -> ProbeSpec {
    match &c.kind {
        Kind::Begin => ProbeSpec::special(export, Trigger::Begin),
        Kind::End => ProbeSpec::special(export, Trigger::End),
        Kind::Interval { period_ns } => ProbeSpec::special(
            export,
            Trigger::Interval {
                period_ns: *period_ns,
            },
        ),
        Kind::Uprobe {
            ret,
            module,
            symbol,
            offset,
            value,
            opcode,
        } => {
            let mut p = ProbeSpec::breakpoint(
                export,
                Location {
                    kind: LocationKind::Offset,
                    symbol: symbol.clone(),
                    addend: *offset,
                },
            );
            p.value = *value;
            p.opcode = *opcode;
            p.r#return = *ret;
            p.module = Some(module.clone());
            p
        }
        Kind::Usdt {
            module,
            addr,
            fixed,
            opcode,
            semaphore,
            args,
        } => {
            let mut p = ProbeSpec::breakpoint(
                export,
                Location {
                    kind: LocationKind::Offset,
                    symbol: None,
                    addend: *addr,
                },
            );
            p.value = fixed.then_some(*addr);
            p.opcode = *opcode;
            p.module = Some(module.clone());
            p.semaphore = *semaphore;
            p.usdt_args = args.clone().unwrap_or_default();
            p
        }
        Kind::Watchpoint {
            addr,
            len,
            mode,
            module,
        } => {
            let location = match addr {
                probes::WatchAddr::Absolute(a) => Location {
                    kind: LocationKind::Address,
                    symbol: None,
                    addend: *a,
                },
                probes::WatchAddr::Symbol(s) => Location {
                    kind: LocationKind::Offset,
                    symbol: Some(s.clone()),
                    addend: 0,
                },
            };
            let mut p = ProbeSpec::breakpoint(export, location);
            p.kind = match *mode {
                "x" => ProbeKind::WatchExec,
                "w" => ProbeKind::WatchWrite,
                _ => ProbeKind::WatchReadWrite,
            };
            p.length = *len;
            p.module = Some(module.clone());
            p
        }
    }
}
