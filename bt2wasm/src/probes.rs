//! Attach points: parsing `provider:...` text as bpftrace does, refusing
//! what user space cannot trace, and expanding each into concrete probes
//! (wildcards against the binary's function symbols; offsets and
//! addresses checked against instruction boundaries).

use crate::diag::{Sink, codes};
use crate::elf::Binary;
use rpn2wasm::Span;
use std::collections::HashMap;
use std::path::PathBuf;

mod uprobe;
mod usdt;

use uprobe::uprobe;

/// What a concrete probe is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `BEGIN`.
    Begin,
    /// `END`.
    End,
    /// `interval:UNIT:N`.
    Interval {
        /// Period.
        period_ns: u64,
    },
    /// `uprobe` / `uretprobe` at a function (or address) of a binary.
    Uprobe {
        /// `uretprobe`.
        ret: bool,
        /// The module as the manifest names it (path, or a library's base name).
        module: String,
        /// The symbol, if located by symbol.
        symbol: Option<String>,
        /// Offset from the symbol, or the link-time address without one.
        offset: u64,
        /// Link-time address (when known at build time and stable).
        value: Option<u64>,
        /// First byte at the location (from the file).
        opcode: Option<u8>,
    },
    /// `usdt:PATH:PROVIDER:NAME`: one site of a USDT probe.
    Usdt {
        /// The module as the manifest names it (as for uprobes).
        module: String,
        /// The site's link-time address.
        addr: u64,
        /// Whether the address is known at build time (not a library
        /// bound by name at run time).
        fixed: bool,
        /// First byte at the site (its `nop`).
        opcode: Option<u8>,
        /// The semaphore's link-time address, if the probe has one.
        semaphore: Option<u64>,
        /// The site's arguments; `Err` says why they cannot be read.
        args: Result<Vec<hostabi::usdt::UsdtArg>, String>,
    },
    /// `watchpoint:ADDR:LEN:MODE`.
    Watchpoint {
        /// Absolute address, or a symbol of the traced executable.
        addr: WatchAddr,
        /// Length: 1, 2, 4, 8.
        len: u8,
        /// `w`, `rw` or `x`.
        mode: &'static str,
        /// The traced executable (where a symbol is looked up).
        module: String,
    },
}

/// Where a watchpoint is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchAddr {
    /// A run-time address.
    Absolute(u64),
    /// A data symbol of the traced executable (relocated at run time).
    Symbol(String),
}

/// One concrete probe, after expansion.
#[derive(Clone, Debug)]
pub struct Concrete {
    /// What it is.
    pub kind: Kind,
    /// The `probe` builtin's text (`uprobe:./t:f`).
    pub name: String,
    /// The `func` builtin's text (uprobes).
    pub func: String,
    /// The provider as written, for messages.
    pub provider: &'static str,
    /// DWARF parameters, when the function has them.
    pub params: Option<Vec<crate::dwarf::Param>>,
}

/// What attach points are resolved against.
#[derive(Default)]
pub struct Env {
    /// `-p PID`.
    pub pid: Option<i32>,
    /// The traced command's executable (`-c` / `--`), for watchpoints.
    pub command: Option<PathBuf>,
    /// Files the traced process maps (with `-p`), for library names.
    pub mapped: Vec<String>,
    /// No process is traced: uprobes and watchpoints are refused.
    pub no_process: bool,
    /// `--unsafe`: a function whose symbol has size 0 may be probed.
    pub unsafe_calls: bool,
    /// The transport can probe a function whose symbol has size 0.
    pub unsized_symbols: bool,
    pub(crate) binaries: HashMap<PathBuf, Result<std::rc::Rc<Binary>, String>>,
}

impl Env {
    /// The binary at `path`, read once.
    pub fn binary(&mut self, path: &std::path::Path) -> Result<std::rc::Rc<Binary>, String> {
        self.binaries
            .entry(path.to_path_buf())
            .or_insert_with(|| Binary::open(path).map(std::rc::Rc::new))
            .clone()
    }
}

/// Providers bpftrace has that wprobe does not trace, with their aliases.
const KERNEL: &[(&str, &str)] = &[
    ("kprobe", "kprobe"),
    ("k", "kprobe"),
    ("kretprobe", "kretprobe"),
    ("kr", "kretprobe"),
    ("tracepoint", "tracepoint"),
    ("t", "tracepoint"),
    ("rawtracepoint", "rawtracepoint"),
    ("rt", "rawtracepoint"),
    ("software", "software"),
    ("s", "software"),
    ("hardware", "hardware"),
    ("h", "hardware"),
    ("kfunc", "kfunc"),
    ("f", "kfunc"),
    ("kretfunc", "kretfunc"),
    ("fr", "kretfunc"),
    ("iter", "iter"),
    ("it", "iter"),
    ("profile", "profile"),
    ("p", "profile"),
    ("asyncwatchpoint", "asyncwatchpoint"),
    ("aw", "asyncwatchpoint"),
];

fn parse_u64(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

/// Expands one attach point; errors go to `diags` (and give no probes).
pub fn expand(text: &str, span: Span, env: &mut Env, diags: &mut Sink) -> Vec<Concrete> {
    let owned = split_attach(text);
    let parts: Vec<&str> = owned.iter().map(String::as_str).collect();
    let provider = parts[0];
    match provider {
        "BEGIN" | "END" if parts.len() == 1 => {
            let (kind, p) = if provider == "BEGIN" {
                (Kind::Begin, "BEGIN")
            } else {
                (Kind::End, "END")
            };
            return vec![Concrete {
                kind,
                name: p.into(),
                func: String::new(),
                provider: p,
                params: None,
            }];
        }
        "interval" | "i" => return interval(&parts, span, diags),
        "uprobe" | "u" => {
            return uprobe(&parts, false, span, env, diags);
        }
        "uretprobe" | "ur" => {
            return uprobe(&parts, true, span, env, diags);
        }
        "watchpoint" | "w" => {
            return needs_process(watchpoint(&parts, span, env, diags), span, env, diags);
        }
        "usdt" | "U" => {
            return usdt::expand(&parts, span, env, diags);
        }
        _ => {}
    }
    if let Some((_, full)) = KERNEL.iter().find(|(a, _)| *a == provider) {
        let why = match *full {
            "profile" => "it samples every CPU; use `interval` for periodic actions",
            "asyncwatchpoint" => "use `watchpoint`, which wprobe arms in every thread",
            _ => "wprobe traces user space only",
        };
        diags.error_note(
            codes::UNSUPPORTED_PROBE,
            span,
            format!("{full} probes are not supported"),
            why,
        );
    } else if matches!(provider, "BEGIN" | "END") {
        diags.error(
            codes::ATTACH_POINT,
            span,
            format!("{provider} probe type requires 0 arguments"),
        );
    } else {
        diags.error(
            codes::ATTACH_POINT,
            span,
            format!("Invalid probe type: {provider}"),
        );
    }
    Vec::new()
}

/// An attach point's parts: split at `:` outside double quotes, the
/// quotes removed (`uprobe:./b:"f"+4` is `uprobe`, `./b`, `f+4`).
fn split_attach(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => {
                if let (Some(last), Some(n)) = (out.last_mut(), chars.next()) {
                    last.push(n);
                }
            }
            '"' => quoted = !quoted,
            ':' if !quoted => out.push(String::new()),
            c => {
                if let Some(last) = out.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    out
}

fn interval(parts: &[&str], span: Span, diags: &mut Sink) -> Vec<Concrete> {
    if parts.len() != 3 {
        diags.error(
            codes::ATTACH_POINT,
            span,
            "interval probe type requires 2 arguments",
        );
        return Vec::new();
    }
    let unit_ns = match parts[1] {
        "s" => 1_000_000_000,
        "ms" => 1_000_000,
        "us" => 1_000,
        "hz" => 0,
        u => {
            diags.error(
                codes::ATTACH_POINT,
                span,
                format!("interval: invalid unit `{u}` (s, ms, us or hz)"),
            );
            return Vec::new();
        }
    };
    let Some(n) = parse_u64(parts[2]).filter(|n| *n > 0) else {
        diags.error(
            codes::ATTACH_POINT,
            span,
            format!("interval: invalid count `{}`", parts[2]),
        );
        return Vec::new();
    };
    let period_ns = if unit_ns == 0 {
        1_000_000_000 / n.min(1_000_000_000)
    } else {
        n.saturating_mul(unit_ns)
    };
    if period_ns < 1_000_000 {
        diags.error_note(
            codes::ATTACH_POINT,
            span,
            "interval: periods under 1 ms are not supported",
            "wprobe runs interval probes in its own event loop",
        );
        return Vec::new();
    }
    vec![Concrete {
        kind: Kind::Interval { period_ns },
        name: format!("interval:{}:{}", parts[1], parts[2]),
        func: String::new(),
        provider: "interval",
        params: None,
    }]
}

fn watchpoint(parts: &[&str], span: Span, env: &mut Env, diags: &mut Sink) -> Vec<Concrete> {
    if parts.len() != 4 {
        diags.error(
            codes::ATTACH_POINT,
            span,
            "watchpoint probe type requires 3 arguments",
        );
        return Vec::new();
    }
    let addr = match parse_u64(parts[1]) {
        Some(a) => WatchAddr::Absolute(a),
        None if parts[1].contains('+') => {
            diags.error_note(
                codes::UNSUPPORTED,
                span,
                "watchpoint on a function argument (`func+argN`) is not supported",
                "give an address, or a data symbol of the traced executable",
            );
            return Vec::new();
        }
        None if rpn2wasm_symbol(parts[1]) => WatchAddr::Symbol(parts[1].to_string()),
        None => {
            diags.error(
                codes::WATCHPOINT,
                span,
                format!("Invalid watchpoint address: {}", parts[1]),
            );
            return Vec::new();
        }
    };
    let len = match parts[2] {
        "1" => 1,
        "2" => 2,
        "4" => 4,
        "8" => 8,
        l => {
            diags.error(
                codes::WATCHPOINT,
                span,
                format!("Invalid watchpoint length: {l} (1, 2, 4 or 8)"),
            );
            return Vec::new();
        }
    };
    let mode = match parts[3] {
        "w" => "w",
        "rw" | "wr" => "rw",
        "x" => "x",
        "r" => {
            diags.error_note(
                codes::WATCHPOINT,
                span,
                "read-only watchpoints are not supported on x86-64",
                "the debug registers watch writes (w), reads and writes (rw) or execution (x)",
            );
            return Vec::new();
        }
        m => {
            diags.error(
                codes::WATCHPOINT,
                span,
                format!("Invalid watchpoint mode: {m} (w, rw or x)"),
            );
            return Vec::new();
        }
    };
    if let WatchAddr::Absolute(a) = addr
        && a % len as u64 != 0
    {
        diags.error(
            codes::WATCHPOINT,
            span,
            format!("watchpoint address 0x{a:x} is not aligned to its length {len}"),
        );
        return Vec::new();
    }
    if mode == "x" && len != 1 {
        diags.error(codes::WATCHPOINT, span, "execute watchpoints have length 1");
        return Vec::new();
    }
    let module = match (&env.command, env.pid) {
        (Some(c), _) => std::fs::canonicalize(c)
            .unwrap_or(c.clone())
            .to_string_lossy()
            .into_owned(),
        (None, Some(pid)) => std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
        (None, None) => {
            diags.error(
                codes::WATCHPOINT,
                span,
                "Watchpoint probes require a -c or -p argument",
            );
            return Vec::new();
        }
    };
    vec![Concrete {
        kind: Kind::Watchpoint {
            addr,
            len,
            mode,
            module,
        },
        name: format!("watchpoint:{}:{}:{}", parts[1], parts[2], parts[3]),
        func: String::new(),
        provider: "watchpoint",
        params: None,
    }]
}

fn rpn2wasm_symbol(s: &str) -> bool {
    hostabi::manifest::is_symbol(s)
}

/// The watchpoints of an attach point that resolved, refused when no
/// process is traced (after the attach point's own errors, as bpftrace
/// reports those first): an address means something in one process only.
/// Uprobes and USDT probes with no process are system-wide (the runtime
/// arms them on their files, for every process that runs them).
fn needs_process(list: Vec<Concrete>, span: Span, env: &Env, diags: &mut Sink) -> Vec<Concrete> {
    if !env.no_process || list.is_empty() {
        return list;
    }
    diags.error(
        codes::UNSUPPORTED,
        span,
        "a watchpoint needs a process to trace (an address means something in one process \
         only): give -c CMD, a command after `--`, or -p PID",
    );
    Vec::new()
}

/// The C++ name of a mangled symbol as `uprobe:BIN:cpp:NAME` matches it:
/// demangled, without its parameter list (`ns::f` for `_ZN2ns1fEi`);
/// `None` for a symbol that is not a C++ name (the
/// `wprobe_elf::NameForm::Cpp` form).
pub fn cpp_name(symbol: &str) -> Option<String> {
    wprobe_elf::functions::cpp_name(symbol)
}

/// The path a process sees for `/proc/PID/root/PATH` (`/PATH`).
pub(crate) fn in_process_root(target: &str) -> Option<String> {
    let rest = target.strip_prefix("/proc/")?;
    let (pid, rest) = rest.split_once('/')?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let inside = rest.strip_prefix("root")?;
    inside.starts_with('/').then(|| inside.to_string())
}
