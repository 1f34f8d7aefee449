//! The probe manifest carried by every handler module in the custom section
//! [`crate::MANIFEST_SECTION`]: a small, versioned, line-based UTF-8 text, so
//! that C string literals and WAT `@custom` annotations can carry it as easily
//! as the compiler writes it. Parsing never panics and reports byte offsets.
//!
//! ```text
//! wprobe-manifest 1
//! abi 2
//! module probe_target
//! major 1
//! probe probe0
//!   location offset target_fn+1
//!   value 0x401147
//!   opcode 0x48
//! ```
//!
//! Keys of the file part: `abi` (required, first), `module` (required),
//! `major`, `id`, `vars`, `gvars`, `logmax`, `jmpmax`, `excpt_log`,
//! `autostacktrace`, `fuel`, `groups`, `types`. A `probe EXPORT` line opens a
//! probe; its keys (indented by convention) are `location` (required),
//! `value`, `opcode`, `watch`, `length`, `group`, `type`, `minor`, `ignore`,
//! `maxhits`, `logonfault`, `excpt_mask`, `heap`, `return`, `maxactive`
//! (return probes: `return yes` only on a breakpoint, `maxactive` only with
//! `return yes`), `args` (the handler's parameters, see [`ArgSource`]),
//! `usdt_args` (a USDT site's argument specs in their canonical spelling,
//! [`crate::usdt::UsdtArg::render`], read by the `usdt_arg` import) and
//! `semaphore` (the link-time address of the site's USDT semaphore, a
//! 2-byte counter the runtime raises while the probe is armed) and `usdt`
//! (`PROVIDER:NAME`: a USDT probe the runtime expands into its sites when
//! it loads the module; no `location` needed).
//! Blank lines and lines starting with `#` are ignored.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::layout::Layout;
use crate::maps::MapKind;
use crate::record::{DecodeError, DecodeErrorKind};

/// First line of every manifest.
pub const MAGIC: &str = "wprobe-manifest";
/// The manifest format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Everything the runtime needs to know about a handler module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// ABI version the module was built against.
    pub abi: u32,
    /// The probed module (`name =`): a path or a base name / soname.
    pub module: String,
    /// Major code of log records.
    pub major: u16,
    /// Program id, written into stack-trace headers.
    pub id: u16,
    /// Number of local variables.
    pub vars: u16,
    /// Number of global variables used.
    pub gvars: u16,
    /// Log data capacity in bytes.
    pub logmax: u16,
    /// Branch limit per hit.
    pub jmpmax: u16,
    /// Stack-trace area capacity in bytes.
    pub excpt_log: u16,
    /// `autostacktrace = yes`.
    pub autostacktrace: bool,
    /// Fuel per hit suggested by the compiler (0: let the runtime derive it).
    pub fuel: u64,
    /// Declared group names.
    pub groups: Vec<String>,
    /// Declared type names.
    pub types: Vec<String>,
    /// The probe points.
    pub probes: Vec<ProbeSpec>,
    /// The maps of the map service (`map_*` imports), by index.
    pub maps: Vec<MapDecl>,
    /// The `exit N` a handler of the program may end with that need the
    /// target stopped at the hit (1: debugger hand-off, 3: core dump), as
    /// the compiler found them; empty when none or unknown (a module not
    /// compiled from RPN). A transport without them refuses the program.
    pub stops: Vec<u8>,
}

/// One map of the map service, as a `map` line declares it:
/// `map NAME KIND key=LAYOUTS [value=LAYOUT] [maxkeys=N] [lhist=MIN,MAX,STEP] [bits=K]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapDecl {
    /// The name printed (`@name`, `@`).
    pub name: String,
    /// What it aggregates.
    pub kind: MapKind,
    /// The key's fields (empty: a map without keys).
    pub key: Vec<Layout>,
    /// The value of an `assign` map (required); for the other kinds, the
    /// layout of the aggregated samples (`i64` or `u64`: how sums, minima
    /// and maxima print).
    pub value: Option<Layout>,
    /// Most keys it may hold.
    pub max_keys: u32,
    /// `lhist` parameters (min, max, step).
    pub lhist: Option<(i64, i64, i64)>,
    /// `k` of a `hist(x, k)` map: 2^k buckets per power of two (0: one,
    /// `hist(x)`); `bits=K` on the line, at most [`crate::maps::MAX_HIST_BITS`].
    pub hist_bits: u8,
}

impl MapDecl {
    /// Key bytes.
    pub fn key_size(&self) -> usize {
        self.key.iter().map(Layout::size).sum()
    }
}

/// What fires a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// A hit of its location (breakpoint or watchpoint).
    Hit,
    /// Once, when tracing starts (after arming, before the target runs on).
    Begin,
    /// Once, when tracing ends (after detaching, before the maps are printed).
    End,
    /// Every `period_ns` nanoseconds while tracing.
    Interval {
        /// The period.
        period_ns: u64,
    },
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest {
            abi: crate::ABI_VERSION,
            module: String::new(),
            major: 1,
            id: 0,
            vars: 0,
            gvars: 0,
            logmax: 1024,
            jmpmax: 65535,
            excpt_log: 1024,
            autostacktrace: false,
            fuel: 0,
            groups: Vec::new(),
            types: Vec::new(),
            probes: Vec::new(),
            maps: Vec::new(),
            stops: Vec::new(),
        }
    }
}

/// How a probe's location statement is to be relocated (spec §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocationKind {
    /// `offset =`: a link-time address of the module, relocated by its load bias.
    Offset,
    /// `address =`: absolute; only a symbol term is relocated.
    Address,
}

/// A probe's location: `[symbol] + addend`, optionally already resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// Offset or address.
    pub kind: LocationKind,
    /// The symbol term, if any.
    pub symbol: Option<String>,
    /// The numeric terms, summed (two's complement).
    pub addend: u64,
}

/// What kind of probe point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    /// Software breakpoint (`int3` or uprobe).
    Breakpoint,
    /// Hardware watchpoint on execution.
    WatchExec,
    /// Hardware watchpoint on writes.
    WatchWrite,
    /// Hardware watchpoint on reads or writes.
    WatchReadWrite,
}

impl ProbeKind {
    /// The manifest spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Breakpoint => "none",
            ProbeKind::WatchExec => "x",
            ProbeKind::WatchWrite => "w",
            ProbeKind::WatchReadWrite => "rw",
        }
    }
}

/// One probe point of a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    /// Name of the handler export (`() -> i32`, returning an `Outcome`).
    pub export: String,
    /// Where the probe goes.
    pub location: Location,
    /// Link-time value of the location computed at build time (symbols resolved), if known.
    pub value: Option<u64>,
    /// Expected first byte at the location (breakpoints); `None`: not verified.
    pub opcode: Option<u8>,
    /// Breakpoint or watchpoint kind.
    pub kind: ProbeKind,
    /// Watched length in bytes (1 for breakpoints).
    pub length: u8,
    /// Group name, if any.
    pub group: Option<String>,
    /// Type name, if any.
    pub r#type: Option<String>,
    /// Minor code of this probe's log records.
    pub minor: u16,
    /// Number of initial hits skipped.
    pub ignore: u32,
    /// Handler runs before the probe disables itself; 0 means no limit (as
    /// RPN's `maxhits = 0`).
    pub maxhits: u32,
    /// Emit records when the displaced instruction faults.
    pub logonfault: bool,
    /// Exception mask.
    pub excpt_mask: u16,
    /// Per-hit heap capacity (bytes).
    pub heap: u16,
    /// What fires it.
    pub trigger: Trigger,
    /// Its module, when not the file's `module`.
    pub module: Option<String>,
    /// A return probe (`return yes`): the location is a function's entry,
    /// and the handler runs when each call entering there returns, with
    /// the registers of the return; `entry_reg` and `elapsed_ns` give the
    /// entry's argument registers, `rsp` and the call's duration.
    pub r#return: bool,
    /// For a return probe: how many calls of it may be live (entered, not
    /// yet returned) at once per process, nested or in concurrent threads;
    /// a call beyond is not tracked and counts as missed. 0 means
    /// [`DEFAULT_MAXACTIVE`] (see [`ProbeSpec::maxactive_or_default`]).
    pub maxactive: u32,
    /// What the handler receives as parameters (`args`), one i64 each, in
    /// order; empty for a handler that takes none.
    pub args: Vec<ArgSource>,
    /// A USDT site's arguments (`usdt_args`), what `usdt_arg(n)` reads;
    /// empty for other probes.
    pub usdt_args: Vec<crate::usdt::UsdtArg>,
    /// A USDT site's semaphore (`semaphore`): link-time address, in the
    /// probe's module, of the 2-byte counter the program checks before
    /// the site; raised by one while the probe is armed.
    pub semaphore: Option<u64>,
    /// `usdt PROVIDER:NAME`: a USDT probe named rather than placed: the
    /// runtime replaces the probe, when it loads the module, by one probe
    /// per site of the module's note (each with its `usdt_args` and
    /// `semaphore`); its `location` may then be left out.
    pub usdt_probe: Option<String>,
}

/// Most parameters a handler may take (`args`).
pub const MAX_HANDLER_ARGS: usize = 6;

/// One parameter of a handler (a word of the manifest's `args` line): the
/// value the runtime passes, taken at the hit as the host imports would
/// read it, without the handler calling them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgSource {
    /// `NAME`: register `NAME` of the hit thread, its low 64 bits (a 32-bit
    /// alias zero-extended), as `read_reg(id, 0)` reads it.
    Reg(u16),
    /// `entry.NAME` (return probes): an argument register or `rsp` at the
    /// entry of the returning call, as `entry_reg(id)` reads it.
    Entry(u16),
    /// `elapsed` (return probes): the call's duration in ns, as
    /// `elapsed_ns()` reads it.
    Elapsed,
}

impl ArgSource {
    /// Parses one word of an `args` line.
    pub fn parse(word: &str) -> Option<ArgSource> {
        if word == "elapsed" {
            return Some(ArgSource::Elapsed);
        }
        if let Some(name) = word.strip_prefix("entry.") {
            let r = crate::regs::by_name(name)?;
            return crate::regs::entry_index(r.id).map(|_| ArgSource::Entry(r.id));
        }
        crate::regs::by_name(word)
            .filter(|r| r.id != crate::regs::CPUID)
            .map(|r| ArgSource::Reg(r.id))
    }

    /// Whether only a return probe's handler can take it.
    pub fn needs_return(self) -> bool {
        !matches!(self, ArgSource::Reg(_))
    }

    /// The word of an `args` line.
    pub fn render(self) -> String {
        let name = |id| crate::regs::by_id(id).map_or("?", |r| r.name);
        match self {
            ArgSource::Reg(id) => name(id).to_string(),
            ArgSource::Entry(id) => alloc::format!("entry.{}", name(id)),
            ArgSource::Elapsed => "elapsed".to_string(),
        }
    }
}

/// Default `maxhits` (spec §6.1).
pub const DEFAULT_MAXHITS: u32 = 0x7FFF_FFFF;

/// Live calls of one return probe tracked per process when `maxactive` is
/// 0 or absent: the nesting depth Linux uretprobes allow per thread
/// (`MAX_URETPROBE_DEPTH`), enough for recursion a few dozen deep or a few
/// dozen threads inside the function at once, at a few dozen bytes each.
pub const DEFAULT_MAXACTIVE: u32 = 64;

/// Largest `maxactive`: the limit Linux puts on kretprobe events
/// (`KRETPROBE_MAXACTIVE_MAX`). It bounds the state the runtime holds per
/// return probe and process, whatever a runaway recursion does.
pub const MAX_MAXACTIVE: u32 = 4096;

impl ProbeSpec {
    /// A breakpoint probe with every optional field at its default.
    pub fn breakpoint(export: &str, location: Location) -> ProbeSpec {
        ProbeSpec {
            export: export.to_string(),
            location,
            value: None,
            opcode: None,
            kind: ProbeKind::Breakpoint,
            length: 1,
            group: None,
            r#type: None,
            minor: 0,
            ignore: 0,
            maxhits: DEFAULT_MAXHITS,
            logonfault: false,
            excpt_mask: crate::status::DEFAULT_EXCEPTION_MASK,
            heap: 0,
            trigger: Trigger::Hit,
            module: None,
            r#return: false,
            maxactive: 0,
            args: Vec::new(),
            usdt_args: Vec::new(),
            semaphore: None,
            usdt_probe: None,
        }
    }

    /// The number of live calls tracked per process: `maxactive`, or
    /// [`DEFAULT_MAXACTIVE`] when it is 0.
    pub fn maxactive_or_default(&self) -> u32 {
        if self.maxactive == 0 {
            DEFAULT_MAXACTIVE
        } else {
            self.maxactive
        }
    }

    /// A probe fired by `trigger` instead of a location (`Begin`, `End`,
    /// `Interval`); its location is a placeholder.
    pub fn special(export: &str, trigger: Trigger) -> ProbeSpec {
        ProbeSpec {
            trigger,
            ..ProbeSpec::breakpoint(export, no_location())
        }
    }
}

/// The location of a probe that has none (begin, end, interval).
pub fn no_location() -> Location {
    Location {
        kind: LocationKind::Offset,
        symbol: None,
        addend: 0,
    }
}

impl Location {
    /// Renders `sym`, `sym+0x10`, `sym-0x8` or a hex number.
    pub fn render(&self) -> String {
        let mut s = String::new();
        match &self.symbol {
            Some(sym) => {
                s.push_str(sym);
                let a = self.addend as i64;
                if a > 0 {
                    let _ = write!(s, "+0x{a:x}");
                } else if a < 0 {
                    let _ = write!(s, "-0x{:x}", a.unsigned_abs());
                }
            }
            None => {
                let _ = write!(s, "0x{:x}", self.addend);
            }
        }
        s
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

impl Manifest {
    /// Renders the manifest text.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{MAGIC} {FORMAT_VERSION}");
        let _ = writeln!(s, "abi {}", self.abi);
        let _ = writeln!(s, "module {}", self.module);
        let _ = writeln!(s, "major {}", self.major);
        let _ = writeln!(s, "id {}", self.id);
        let _ = writeln!(s, "vars {}", self.vars);
        let _ = writeln!(s, "gvars {}", self.gvars);
        let _ = writeln!(s, "logmax {}", self.logmax);
        let _ = writeln!(s, "jmpmax {}", self.jmpmax);
        let _ = writeln!(s, "excpt_log {}", self.excpt_log);
        let _ = writeln!(s, "autostacktrace {}", yes_no(self.autostacktrace));
        let _ = writeln!(s, "fuel {}", self.fuel);
        if !self.groups.is_empty() {
            let _ = writeln!(s, "groups {}", self.groups.join(" "));
        }
        if !self.types.is_empty() {
            let _ = writeln!(s, "types {}", self.types.join(" "));
        }
        if !self.stops.is_empty() {
            let v: Vec<String> = self.stops.iter().map(u8::to_string).collect();
            let _ = writeln!(s, "stops {}", v.join(" "));
        }
        for m in &self.maps {
            let _ = write!(s, "map {} {} key=", m.name, m.kind.name());
            crate::layout::render_list_into(&m.key, &mut s);
            if let Some(v) = &m.value {
                s.push_str(" value=");
                v.render_into(&mut s);
            }
            let _ = write!(s, " maxkeys={}", m.max_keys);
            if let Some((a, b, c)) = m.lhist {
                let _ = write!(s, " lhist={a},{b},{c}");
            }
            if m.hist_bits != 0 {
                let _ = write!(s, " bits={}", m.hist_bits);
            }
            s.push('\n');
        }
        for p in &self.probes {
            let _ = writeln!(s, "probe {}", p.export);
            match p.trigger {
                Trigger::Hit => {}
                Trigger::Begin => {
                    let _ = writeln!(s, "  trigger begin");
                }
                Trigger::End => {
                    let _ = writeln!(s, "  trigger end");
                }
                Trigger::Interval { period_ns } => {
                    let _ = writeln!(s, "  trigger interval {period_ns}");
                }
            }
            if let Some(m) = &p.module {
                let _ = writeln!(s, "  module {m}");
            }
            let kind = match p.location.kind {
                LocationKind::Offset => "offset",
                LocationKind::Address => "address",
            };
            let _ = writeln!(s, "  location {kind} {}", p.location.render());
            if let Some(v) = p.value {
                let _ = writeln!(s, "  value 0x{v:x}");
            }
            if let Some(o) = p.opcode {
                let _ = writeln!(s, "  opcode 0x{o:02x}");
            }
            let _ = writeln!(s, "  watch {}", p.kind.as_str());
            let _ = writeln!(s, "  length {}", p.length);
            if let Some(g) = &p.group {
                let _ = writeln!(s, "  group {g}");
            }
            if let Some(t) = &p.r#type {
                let _ = writeln!(s, "  type {t}");
            }
            let _ = writeln!(s, "  minor {}", p.minor);
            let _ = writeln!(s, "  ignore {}", p.ignore);
            let _ = writeln!(s, "  maxhits {}", p.maxhits);
            let _ = writeln!(s, "  logonfault {}", yes_no(p.logonfault));
            let _ = writeln!(s, "  excpt_mask 0x{:04x}", p.excpt_mask);
            let _ = writeln!(s, "  heap {}", p.heap);
            if p.r#return {
                let _ = writeln!(s, "  return yes");
            }
            if p.maxactive != 0 {
                let _ = writeln!(s, "  maxactive {}", p.maxactive);
            }
            if !p.args.is_empty() {
                let words: Vec<String> = p.args.iter().map(|a| a.render()).collect();
                let _ = writeln!(s, "  args {}", words.join(" "));
            }
            if !p.usdt_args.is_empty() {
                let _ = writeln!(s, "  usdt_args {}", crate::usdt::render_args(&p.usdt_args));
            }
            if let Some(sem) = p.semaphore {
                let _ = writeln!(s, "  semaphore 0x{sem:x}");
            }
            if let Some(u) = &p.usdt_probe {
                let _ = writeln!(s, "  usdt {u}");
            }
        }
        s
    }

    /// Parses manifest bytes (the custom section's payload).
    pub fn decode(bytes: &[u8]) -> Result<Manifest, DecodeError> {
        let text = core::str::from_utf8(bytes)
            .map_err(|e| DecodeError::new(e.valid_up_to(), DecodeErrorKind::BadValue))?;
        let mut lines = Lines { text, pos: 0 };
        let (off, first) = lines
            .next()
            .ok_or(DecodeError::new(0, DecodeErrorKind::Truncated))?;
        let (magic, ver) = split_kv(first);
        if magic != MAGIC {
            return Err(DecodeError::new(off, DecodeErrorKind::BadValue));
        }
        let ver: u32 = parse_num(ver, off)?;
        if ver != FORMAT_VERSION {
            return Err(DecodeError::new(
                off,
                DecodeErrorKind::UnsupportedVersion(ver),
            ));
        }
        let mut m = Manifest {
            abi: 0,
            ..Manifest::default()
        };
        let (mut have_abi, mut have_module) = (false, false);
        // Per probe: offsets of its `return` and `maxactive` lines, for the
        // rules checked once the whole probe is read.
        let mut return_lines: Vec<ReturnLines> = Vec::new();
        for (off, line) in lines {
            let (key, val) = split_kv(line);
            let bad = DecodeError::new(off, DecodeErrorKind::BadValue);
            if let Some(p) = m.probes.last_mut().filter(|_| is_probe_key(key)) {
                decode_probe_key(p, key, val, off)?;
                if let Some(r) = return_lines.last_mut() {
                    match key {
                        "return" => r.ret = off,
                        "maxactive" => r.maxactive = off,
                        "args" => r.args = off,
                        _ => {}
                    }
                }
                continue;
            }
            match key {
                "abi" => {
                    m.abi = parse_num(val, off)?;
                    have_abi = true;
                }
                "module" if !val.is_empty() => {
                    m.module = val.to_string();
                    have_module = true;
                }
                "major" => m.major = parse_num(val, off).and_then(|v| nonzero(v, off))?,
                "id" => m.id = parse_num(val, off)?,
                "vars" => m.vars = parse_num(val, off).and_then(|v| at_most(v, 256, off))?,
                "gvars" => m.gvars = parse_num(val, off).and_then(|v| at_most(v, 256, off))?,
                "logmax" => m.logmax = parse_num(val, off)?,
                "jmpmax" => m.jmpmax = parse_num(val, off)?,
                "excpt_log" => m.excpt_log = parse_num(val, off)?,
                "autostacktrace" => m.autostacktrace = parse_bool(val, off)?,
                "stops" => {
                    for w in val.split_whitespace() {
                        match w {
                            "1" => m.stops.push(1),
                            "3" => m.stops.push(3),
                            _ => return Err(bad),
                        }
                    }
                }
                "fuel" => m.fuel = parse_num(val, off)?,
                "groups" => m.groups = names(val, off)?,
                "types" => m.types = names(val, off)?,
                "probe" if is_name(val) => {
                    m.probes.push(ProbeSpec::breakpoint(val, placeholder()));
                    return_lines.push(ReturnLines::default());
                }
                "map" if m.probes.is_empty() => {
                    let d = parse_map(val).ok_or(bad)?;
                    if m.maps.len() >= crate::maps::MAX_MAPS {
                        return Err(bad);
                    }
                    m.maps.push(d);
                }
                _ => return Err(bad),
            }
        }
        if !have_abi || !have_module {
            return Err(DecodeError::new(text.len(), DecodeErrorKind::Truncated));
        }
        for p in &mut m.probes {
            // A probe whose `location` line is missing still holds the placeholder.
            if p.location.symbol.as_deref() == Some("") {
                if p.trigger == Trigger::Hit && p.usdt_probe.is_none() {
                    return Err(DecodeError::new(text.len(), DecodeErrorKind::Truncated));
                }
                p.location = no_location();
            }
        }
        for (p, at) in m.probes.iter().zip(&return_lines) {
            // A return probe catches calls at a breakpoint; `maxactive`
            // means nothing without `return yes`.
            if p.r#return && p.kind != ProbeKind::Breakpoint {
                return Err(DecodeError::new(at.ret, DecodeErrorKind::BadValue));
            }
            if p.maxactive != 0 && !p.r#return {
                return Err(DecodeError::new(at.maxactive, DecodeErrorKind::BadValue));
            }
            // The entry state and the duration exist only where a call
            // returns.
            if !p.r#return && p.args.iter().any(|a| a.needs_return()) {
                return Err(DecodeError::new(at.args, DecodeErrorKind::BadValue));
            }
        }
        Ok(m)
    }
}

/// Parses the value of a `map` line.
fn parse_map(val: &str) -> Option<MapDecl> {
    let mut words = val.split_ascii_whitespace();
    let name = words.next()?;
    let ident = name.strip_prefix('@').unwrap_or(name);
    if !(ident.is_empty() || is_name(ident)) || name.is_empty() {
        return None;
    }
    let kind = MapKind::from_name(words.next()?)?;
    let mut d = MapDecl {
        name: name.to_string(),
        kind,
        key: Vec::new(),
        value: None,
        max_keys: crate::maps::DEFAULT_MAX_KEYS,
        lhist: None,
        hist_bits: 0,
    };
    for w in words {
        let (k, v) = w.split_once('=')?;
        match k {
            "key" => d.key = crate::layout::parse_list(v)?,
            "value" => d.value = Some(Layout::parse(v)?),
            "maxkeys" => {
                d.max_keys = parse_u64(v)?.try_into().ok()?;
                if d.max_keys == 0 || d.max_keys > crate::maps::MAX_KEYS_PER_MAP {
                    return None;
                }
            }
            "lhist" => {
                let mut it = v.split(',').map(|x| x.parse::<i64>().ok());
                let (a, b, c) = (it.next()??, it.next()??, it.next()??);
                if it.next().is_some() {
                    return None;
                }
                d.lhist = Some((a, b, c));
            }
            "bits" => {
                d.hist_bits = v.parse().ok()?;
                if d.kind != MapKind::Hist || d.hist_bits > crate::maps::MAX_HIST_BITS {
                    return None;
                }
            }
            _ => return None,
        }
    }
    if (d.kind == MapKind::Lhist) != d.lhist.is_some()
        || (d.kind == MapKind::Assign && d.value.is_none())
    {
        return None;
    }
    Some(d)
}

/// Byte offsets of a probe's `return`, `maxactive` and `args` lines (0 if
/// absent).
#[derive(Default)]
struct ReturnLines {
    ret: usize,
    maxactive: usize,
    args: usize,
}

fn placeholder() -> Location {
    Location {
        kind: LocationKind::Offset,
        symbol: Some(String::new()),
        addend: 0,
    }
}

fn is_probe_key(key: &str) -> bool {
    matches!(
        key,
        "location"
            | "value"
            | "opcode"
            | "watch"
            | "length"
            | "group"
            | "type"
            | "minor"
            | "ignore"
            | "maxhits"
            | "logonfault"
            | "excpt_mask"
            | "heap"
            | "trigger"
            | "module"
            | "return"
            | "maxactive"
            | "args"
            | "usdt_args"
            | "semaphore"
            | "usdt"
    )
}

fn decode_probe_key(
    p: &mut ProbeSpec,
    key: &str,
    val: &str,
    off: usize,
) -> Result<(), DecodeError> {
    let bad = DecodeError::new(off, DecodeErrorKind::BadValue);
    match key {
        "location" => p.location = parse_location(val).ok_or(bad)?,
        "value" => p.value = Some(parse_num(val, off)?),
        "opcode" => p.opcode = Some(parse_num(val, off)?),
        "watch" => {
            p.kind = match val {
                "none" => ProbeKind::Breakpoint,
                "x" => ProbeKind::WatchExec,
                "w" => ProbeKind::WatchWrite,
                "rw" => ProbeKind::WatchReadWrite,
                _ => return Err(bad),
            }
        }
        "length" => {
            p.length = parse_num(val, off)?;
            if !matches!(p.length, 1 | 2 | 4 | 8) {
                return Err(bad);
            }
        }
        "group" if is_name(val) => p.group = Some(val.to_string()),
        "type" if is_name(val) => p.r#type = Some(val.to_string()),
        "minor" => p.minor = parse_num(val, off)?,
        "ignore" => p.ignore = parse_num(val, off).and_then(|v| at_most(v, 0x7FFF_FFFF, off))?,
        "maxhits" => p.maxhits = parse_num(val, off).and_then(|v| at_most(v, 0x7FFF_FFFF, off))?,
        "logonfault" => p.logonfault = parse_bool(val, off)?,
        "excpt_mask" => p.excpt_mask = parse_num(val, off)?,
        "heap" => p.heap = parse_num(val, off).and_then(|v| at_most(v, 16384, off))?,
        "trigger" => {
            let (t, arg) = split_kv(val);
            p.trigger = match (t, arg) {
                ("begin", "") => Trigger::Begin,
                ("end", "") => Trigger::End,
                ("hit", "") => Trigger::Hit,
                ("interval", n) => Trigger::Interval {
                    period_ns: parse_num(n, off)
                        .and_then(|v: u64| if v == 0 { Err(bad) } else { Ok(v) })?,
                },
                _ => return Err(bad),
            }
        }
        "module" if !val.is_empty() => p.module = Some(val.to_string()),
        "return" => p.r#return = parse_bool(val, off)?,
        "maxactive" => {
            p.maxactive = parse_num(val, off).and_then(|v| at_most(v, MAX_MAXACTIVE, off))?
        }
        "args" => {
            let mut args = Vec::new();
            for w in val.split_ascii_whitespace() {
                args.push(ArgSource::parse(w).ok_or(bad)?);
            }
            if args.len() > MAX_HANDLER_ARGS {
                return Err(bad);
            }
            p.args = args;
        }
        "usdt_args" => {
            p.usdt_args = crate::usdt::parse_args(val, &mut |_| None).map_err(|_| bad)?;
        }
        "semaphore" => p.semaphore = Some(parse_num(val, off)?),
        "usdt" => match val.split_once(':') {
            Some((prov, name)) if is_name(prov) && is_name(name) => {
                p.usdt_probe = Some(val.to_string())
            }
            _ => return Err(bad),
        },
        _ => return Err(bad),
    }
    Ok(())
}

/// Parses `offset|address SYMBOL[(+|-)N]` or `offset|address N`.
fn parse_location(val: &str) -> Option<Location> {
    let (kind, rest) = split_kv(val);
    let kind = match kind {
        "offset" => LocationKind::Offset,
        "address" => LocationKind::Address,
        _ => return None,
    };
    Location::parse_expr(kind, rest)
}

impl Location {
    /// Parses `SYMBOL[(+|-)N]` or `N` (decimal or `0x` hexadecimal; blanks
    /// around the sign allowed): the one location-expression syntax of
    /// manifests and of the command line's `--probe`. A negative addend
    /// wraps (it is added modulo 2^64).
    pub fn parse_expr(kind: LocationKind, s: &str) -> Option<Location> {
        let s = s.trim();
        if let Some(n) = parse_u64(s) {
            return Some(Location {
                kind,
                symbol: None,
                addend: n,
            });
        }
        let split = s
            .char_indices()
            .skip(1)
            .find(|(_, c)| *c == '+' || *c == '-')
            .map(|(i, _)| i)
            .unwrap_or(s.len());
        let (sym, tail) = s.split_at(split);
        let sym = sym.trim();
        if !is_symbol(sym) {
            return None;
        }
        let addend = match tail.as_bytes().first() {
            None => 0,
            Some(b'+') => parse_u64(tail[1..].trim())?,
            Some(_) => parse_u64(tail[1..].trim())?.wrapping_neg(),
        };
        Some(Location {
            kind,
            symbol: Some(sym.to_string()),
            addend,
        })
    }
}

/// ELF symbol characters accepted by the RPN language (spec §2.4).
pub fn is_symbol(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || "_.$".contains(c))
        && cs.all(|c| c.is_ascii_alphanumeric() || "_.$@".contains(c))
}

fn is_name(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn names(val: &str, off: usize) -> Result<Vec<String>, DecodeError> {
    val.split_ascii_whitespace()
        .map(|n| {
            if is_name(n) {
                Ok(n.to_string())
            } else {
                Err(DecodeError::new(off, DecodeErrorKind::BadValue))
            }
        })
        .collect()
}

fn parse_u64(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

fn parse_num<T: TryFrom<u64>>(s: &str, off: usize) -> Result<T, DecodeError> {
    parse_u64(s)
        .and_then(|v| T::try_from(v).ok())
        .ok_or(DecodeError::new(off, DecodeErrorKind::BadValue))
}

fn at_most<T: PartialOrd>(v: T, max: T, off: usize) -> Result<T, DecodeError> {
    if v <= max {
        Ok(v)
    } else {
        Err(DecodeError::new(off, DecodeErrorKind::BadValue))
    }
}

fn nonzero(v: u16, off: usize) -> Result<u16, DecodeError> {
    if v != 0 {
        Ok(v)
    } else {
        Err(DecodeError::new(off, DecodeErrorKind::BadValue))
    }
}

fn parse_bool(s: &str, off: usize) -> Result<bool, DecodeError> {
    match s {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(DecodeError::new(off, DecodeErrorKind::BadValue)),
    }
}

fn split_kv(line: &str) -> (&str, &str) {
    let line = line.trim();
    match line.find([' ', '\t']) {
        Some(i) => (&line[..i], line[i..].trim()),
        None => (line, ""),
    }
}

/// Non-blank, non-comment lines with their byte offsets.
struct Lines<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = (usize, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        while self.pos < self.text.len() {
            let start = self.pos;
            let rest = &self.text[start..];
            let len = rest.find('\n').map(|i| i + 1).unwrap_or(rest.len());
            self.pos += len;
            let line = rest[..len].trim_end_matches(['\n', '\r']);
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            return Some((start, line));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let mut p = ProbeSpec::breakpoint(
            "probe0",
            Location {
                kind: LocationKind::Offset,
                symbol: Some("target_fn".into()),
                addend: 1,
            },
        );
        p.value = Some(0x401147);
        p.opcode = Some(0x48);
        p.group = Some("g1".into());
        let mut w = ProbeSpec::breakpoint(
            "probe1",
            Location {
                kind: LocationKind::Address,
                symbol: None,
                addend: 0x404078,
            },
        );
        w.kind = ProbeKind::WatchWrite;
        w.length = 8;
        w.maxhits = 2;
        w.module = Some("/lib/libc.so.6".into());
        let b = ProbeSpec::special("begin0", Trigger::Begin);
        let i = ProbeSpec::special(
            "tick",
            Trigger::Interval {
                period_ns: 1_000_000,
            },
        );
        let mut r = ProbeSpec::breakpoint(
            "probe2",
            Location {
                kind: LocationKind::Offset,
                symbol: Some("target_fn".into()),
                addend: 0,
            },
        );
        r.r#return = true;
        r.maxactive = 8;
        r.args = alloc::vec![
            ArgSource::Reg(crate::regs::RAX),
            ArgSource::Entry(crate::regs::RSP),
            ArgSource::Elapsed,
        ];
        Manifest {
            module: "probe_target".into(),
            major: 13,
            groups: alloc::vec!["g1".into(), "g2".into()],
            probes: alloc::vec![p, w, r, b, i],
            maps: alloc::vec![
                MapDecl {
                    name: "@".into(),
                    kind: MapKind::Count,
                    key: alloc::vec![Layout::U64, Layout::Str(16)],
                    value: None,
                    max_keys: 10,
                    lhist: None,
                    hist_bits: 0,
                },
                MapDecl {
                    name: "@h".into(),
                    kind: MapKind::Hist,
                    key: alloc::vec![Layout::U64],
                    value: None,
                    max_keys: 10,
                    lhist: None,
                    hist_bits: 3,
                },
                MapDecl {
                    name: "@lat".into(),
                    kind: MapKind::Lhist,
                    key: alloc::vec![],
                    value: None,
                    max_keys: 1,
                    lhist: Some((0, 100, 10)),
                    hist_bits: 0,
                },
                MapDecl {
                    name: "@s".into(),
                    kind: MapKind::Assign,
                    key: alloc::vec![Layout::I64],
                    value: Some(Layout::Str(64)),
                    max_keys: 4096,
                    lhist: None,
                    hist_bits: 0,
                },
            ],
            ..Manifest::default()
        }
    }

    #[test]
    fn round_trip() {
        let m = sample();
        let text = m.encode();
        assert_eq!(Manifest::decode(text.as_bytes()), Ok(m));
    }

    #[test]
    fn usdt_keys_round_trip() {
        let mut m = sample();
        let args = crate::usdt::parse_args(
            "-4@%eax 8@-16(%rbp) 8@$3 -4@0x4010 1@8(%rax,%rdx,4)",
            &mut |_| None,
        )
        .unwrap();
        m.probes[0].usdt_args = args;
        m.probes[0].semaphore = Some(0x4050);
        let text = m.encode();
        assert!(
            text.contains("  usdt_args -4@%rax 8@-16(%rbp) 8@$3 -4@0x4010 1@8(%rax,%rdx,4)\n  semaphore 0x4050\n"),
            "{text}"
        );
        assert_eq!(Manifest::decode(text.as_bytes()), Ok(m));
        // A probe named by `usdt`, without a location.
        let named = "wprobe-manifest 1\nabi 4\nmodule m\nprobe p\n  usdt python:function__entry\n";
        let m = Manifest::decode(named.as_bytes()).unwrap();
        assert_eq!(
            m.probes[0].usdt_probe.as_deref(),
            Some("python:function__entry")
        );
        assert!(m.encode().contains("  usdt python:function__entry\n"));
        assert!(
            Manifest::decode(b"wprobe-manifest 1\nabi 4\nmodule m\nprobe p\n  usdt nocolon\n")
                .is_err()
        );
        let head = "wprobe-manifest 1\nabi 1\nmodule m\nprobe p\n  location offset f\n";
        let t = alloc::format!("{head}  usdt_args 3@%eax\n");
        assert_eq!(
            Manifest::decode(t.as_bytes()),
            Err(DecodeError::new(
                t.find("  usdt_args").unwrap(),
                DecodeErrorKind::BadValue
            ))
        );
    }

    #[test]
    fn return_probe_keys() {
        let text = sample().encode();
        assert!(text.contains("probe probe2\n"), "{text}");
        assert!(text.contains("  return yes\n  maxactive 8\n"), "{text}");
        // Non-return probes write neither key.
        assert_eq!(text.matches("return").count(), 1, "{text}");
        let head = "wprobe-manifest 1\nabi 1\nmodule m\nprobe p\n  location offset f\n";
        let m = Manifest::decode(alloc::format!("{head}  return yes\n").as_bytes()).unwrap();
        assert!(m.probes[0].r#return);
        assert_eq!(m.probes[0].maxactive, 0);
        assert_eq!(m.probes[0].maxactive_or_default(), DEFAULT_MAXACTIVE);
        let m = Manifest::decode(alloc::format!("{head}  return no\n").as_bytes()).unwrap();
        assert!(!m.probes[0].r#return);
        // `maxactive` before `return yes` is fine; the rules hold per probe.
        let ok = alloc::format!("{head}  maxactive 4096\n  return yes\n");
        assert_eq!(
            Manifest::decode(ok.as_bytes()).unwrap().probes[0].maxactive,
            4096
        );
        let bad = |tail: &str| {
            let t = alloc::format!("{head}{tail}");
            Manifest::decode(t.as_bytes()).map(|_| ())
        };
        let at = |tail: &str, line: &str| {
            let t = alloc::format!("{head}{tail}");
            Err(DecodeError::new(
                t.find(line).unwrap(),
                DecodeErrorKind::BadValue,
            ))
        };
        assert_eq!(
            bad("  return yes\n  maxactive 4097\n"),
            at("  return yes\n  maxactive 4097\n", "  maxactive")
        );
        assert_eq!(bad("  maxactive 3\n"), at("  maxactive 3\n", "  maxactive"));
        assert_eq!(
            bad("  maxactive 3\n  return no\n"),
            at("  maxactive 3\n  return no\n", "  maxactive")
        );
        assert_eq!(bad("  maxactive 0\n"), Ok(()));
        assert_eq!(
            bad("  return yes\n  watch w\n"),
            at("  return yes\n  watch w\n", "  return")
        );
        assert_eq!(bad("  return maybe\n"), at("  return maybe\n", "  return"));
    }

    #[test]
    fn handler_args() {
        let text = sample().encode();
        assert!(
            text.contains("  maxactive 8\n  args rax entry.rsp elapsed\n"),
            "{text}"
        );
        assert_eq!(text.matches("  args").count(), 1, "{text}");
        let head = "wprobe-manifest 1\nabi 1\nmodule m\nprobe p\n  location offset f\n";
        let args = |tail: &str| {
            let t = alloc::format!("{head}{tail}");
            Manifest::decode(t.as_bytes()).map(|m| m.probes[0].args.clone())
        };
        use crate::regs::{RDI, RSI, RSP};
        const EAX: u16 = 0x106;
        assert_eq!(
            args("  args rdi RSI eax rsp\n"),
            Ok(alloc::vec![
                ArgSource::Reg(RDI),
                ArgSource::Reg(RSI),
                ArgSource::Reg(EAX),
                ArgSource::Reg(RSP)
            ])
        );
        assert_eq!(args("  args\n"), Ok(alloc::vec![]));
        assert_eq!(
            args("  return yes\n  args entry.rdi elapsed rax\n"),
            Ok(alloc::vec![
                ArgSource::Entry(RDI),
                ArgSource::Elapsed,
                ArgSource::Reg(crate::regs::RAX)
            ])
        );
        // `args` before `return yes` is fine too.
        assert!(args("  args entry.rsp\n  return yes\n").is_ok());
        let at = |tail: &str, line: &str| {
            let t = alloc::format!("{head}{tail}");
            Err(DecodeError::new(
                t.find(line).unwrap(),
                DecodeErrorKind::BadValue,
            ))
        };
        for tail in [
            // Entry state and duration only in a return probe.
            "  args rdi elapsed\n",
            "  args entry.rdi\n  return no\n",
            // Not an argument register at the entry, not a register.
            "  return yes\n  args entry.rax\n",
            "  args rdi cr0\n",
            "  args cpuid\n",
            "  args rdi,rsi\n",
            // Seven.
            "  args rdi rsi rdx rcx r8 r9 rax\n",
        ] {
            assert_eq!(args(tail), at(tail, "  args"), "{tail}");
        }
    }

    #[test]
    fn negative_addend_round_trips() {
        let loc = parse_location("address main-0x8").unwrap();
        assert_eq!(loc.addend, 8u64.wrapping_neg());
        assert_eq!(loc.render(), "main-0x8");
    }

    #[test]
    fn errors_carry_line_offsets() {
        let text = "wprobe-manifest 1\nabi 1\nmodule m\nmajor 0\n";
        assert_eq!(
            Manifest::decode(text.as_bytes()),
            Err(DecodeError::new(33, DecodeErrorKind::BadValue))
        );
        let text = "wprobe-manifest 2\n";
        assert_eq!(
            Manifest::decode(text.as_bytes()).unwrap_err().kind,
            DecodeErrorKind::UnsupportedVersion(2)
        );
        let text = "wprobe-manifest 1\nabi 1\nmodule m\nprobe p\n";
        assert!(
            Manifest::decode(text.as_bytes()).is_err(),
            "probe without location"
        );
    }

    #[test]
    fn every_prefix_and_flip_is_handled() {
        let text = sample().encode();
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let _ = Manifest::decode(&bytes[..cut]);
        }
        for i in 0..bytes.len() {
            let mut b = bytes.to_vec();
            b[i] ^= 0xA5;
            let _ = Manifest::decode(&b);
        }
    }
}
