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

use crate::layout::Layout;
use crate::maps::MapKind;

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
        self.render_into(&mut s);
        s
    }

    /// [`Location::render`] appended to `s` (a probe's label is made of it
    /// for each of the thousands of functions `wprobe trace` can probe:
    /// digits put down, not formatted).
    pub fn render_into(&self, s: &mut String) {
        match &self.symbol {
            Some(sym) => {
                s.push_str(sym);
                let a = self.addend as i64;
                if a > 0 {
                    s.push('+');
                    push_hex(s, a as u64);
                } else if a < 0 {
                    s.push('-');
                    push_hex(s, a.unsigned_abs());
                }
            }
            None => push_hex(s, self.addend),
        }
    }
}

/// Appends `v` as `{:#x}` writes it (`0x` and lower-case digits).
fn push_hex(s: &mut String, v: u64) {
    s.push_str("0x");
    let digits = (64 - v.leading_zeros()).div_ceil(4).max(1);
    for k in (0..digits).rev() {
        let d = ((v >> (4 * k)) & 0xf) as u32;
        s.push(char::from_digit(d, 16).unwrap_or('0'));
    }
}

mod decode;
mod encode;
mod syntax;

pub use syntax::is_symbol;

#[cfg(test)]
mod tests;
