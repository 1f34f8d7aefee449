//! `wprobe trace [OPTIONS] (-- CMD | -p PID)`: the function-call tracer.
//! Every function of the executable (with `--plt` its calls through the
//! PLT, with `--lib GLOB` the functions of matching shared libraries) gets
//! two probes at its entry: an ordinary one running the `trace_entry`
//! handler, and a return probe running `trace_exit` when the call returns.
//! The handlers are ordinary Wasm (`guests/trace/trace.wat`, built into
//! wprobe; `--handler [GLOB=]FILE` runs another module instead); their
//! records reach this command structurally (the session's record hook),
//! with the probe that produced them, and become per-thread call trees
//! (`tree`), shown by the views (`views`): uftrace's duration view by
//! default, tracef's call tree with `-T`, a report with `--report`, Chrome
//! trace events with `--chrome`, a flame graph with `--flame`. Names,
//! demangling and source lines are worked out once per function, at start.
//! Exits with the traced command's status.

pub mod funcs;
pub mod lines;
pub mod out;
pub mod records;
pub mod tree;
pub mod views;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;

use hostabi::manifest::{ArgSource, Location, LocationKind, MAX_MAXACTIVE, Manifest, ProbeSpec};
use hostabi::regs;

use crate::cmd::{CliError, CmdResult, return_probe_transport_names};
use crate::format::Format;
use crate::session::{LoadedProgram, RunOptions, Session};
use crate::transport::{ExitStatus, OpenOptions, Target};

use funcs::{Func, NotTraced, Selection};

/// Functions above which `--transport perf` is said to take minutes to arm
/// and to end (docs/trace.md, Limits).
const PERF_MANY_FUNCTIONS: usize = 1000;
use records::{Hook, ProbeMap, TraceState};
use tree::{Filters, Tree};
use views::{Clock, TimeFmt, Views};

/// The built-in handlers (`guests/trace/trace.wat`).
pub const HANDLERS_WAT: &str = include_str!("../../../guests/trace/trace.wat");
/// The export run at each entry.
pub const ENTRY_EXPORT: &str = "trace_entry";
/// The export run at each return.
pub const EXIT_EXPORT: &str = "trace_exit";

/// `wprobe trace`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Output: uftrace's duration view by default; -T for tracef's call tree; \
                  --report for calls and times per function. See docs/trace.md.\n\n\
                  Examples:\n  \
                  wprobe trace -- ./prog                       durations, uftrace's view\n  \
                  wprobe trace -T -l -- ./prog                 tracef's tree, with file:line\n  \
                  wprobe trace --report -F 'parse*' -- ./prog  calls, total and self time\n  \
                  wprobe trace --plt --lib 'libz*' -p 1234     a process, its PLT calls and libz\n  \
                  wprobe trace --chrome t.json --flame f.svg -- ./prog"
)]
pub struct TraceArgs {
    /// Only calls of functions matching GLOB, and the calls made inside
    /// them (repeatable; mangled or shown names).
    #[arg(short = 'F', long = "filter", value_name = "GLOB", value_parser = ordered_glob)]
    pub filter: Vec<OrderedGlob>,
    /// Functions matching GLOB are not traced at all; the calls they make
    /// are shown in their place (repeatable).
    #[arg(short = 'X', long = "exclude", value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// Hide the calls of functions matching GLOB and every call made
    /// inside them (uftrace's -N; repeatable; of a -F and a -N naming one
    /// function, the later one counts).
    #[arg(short = 'N', long = "notrace", value_name = "GLOB", value_parser = ordered_glob)]
    pub notrace: Vec<OrderedGlob>,
    /// Show calls at most N levels deep.
    #[arg(long, value_name = "N")]
    pub depth: Option<u32>,
    /// Hide calls shorter than D (and the calls inside them): `500ns`,
    /// `10us`, `1.5ms`, `2s`; a bare number is ns.
    #[arg(long, value_name = "D")]
    pub min_duration: Option<String>,
    /// Also trace calls through the executable's PLT (library calls).
    #[arg(long)]
    pub plt: bool,
    /// Also trace the functions of shared libraries matching GLOB (base
    /// name, soname, path, or a short name such as `libc`; repeatable).
    #[arg(long = "lib", value_name = "GLOB")]
    pub libs: Vec<String>,
    /// Run another handler module (exporting `trace_entry` and
    /// `trace_exit`) for every function, or with `GLOB=FILE` for the
    /// functions matching GLOB (repeatable).
    #[arg(long = "handler", value_name = "[GLOB=]FILE")]
    pub handlers: Vec<String>,
    /// tracef's call tree: `==> f() at ADDR` / `<== f() [rax = …]`.
    #[arg(short = 'T', long = "call-tree")]
    pub call_tree: bool,
    /// With -T: no `[pid TID]` column.
    #[arg(long)]
    pub no_pid: bool,
    /// With -T: no function addresses.
    #[arg(short = 'i', long = "no-ip")]
    pub no_ip: bool,
    /// With -T: spaces per level.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub offset: usize,
    /// Prefix lines with the time of day.
    #[arg(short = 't', long = "time")]
    pub time: bool,
    /// Prefix lines with the time of day, to the microsecond.
    #[arg(short = 'u', long = "microseconds")]
    pub micros: bool,
    /// Write the trace to FILE instead of standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// With -o FILE: one file per thread, FILE.TID.
    #[arg(long = "ff", requires = "output")]
    pub per_thread: bool,
    /// Print calls, total and self time per function instead of the calls.
    #[arg(long)]
    pub report: bool,
    /// With --report: `text` or `json`.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub format: String,
    /// Also write Chrome trace events (Perfetto, chrome://tracing) to FILE.
    #[arg(long, value_name = "FILE")]
    pub chrome: Option<PathBuf>,
    /// Also write a flame graph (SVG) to FILE.
    #[arg(long, value_name = "FILE")]
    pub flame: Option<PathBuf>,
    /// How C++ and Rust names are shown: `simple` (the default: `ns::f`,
    /// no parameters or template arguments, uftrace's form), `full`
    /// (`ns::f(int)`), `no` (the symbols as they are). `-C` alone changes
    /// nothing (names are demangled by default).
    #[arg(
        short = 'C',
        long = "demangle",
        value_name = "MODE",
        num_args = 0..=1,
        require_equals = true,
        default_value = "simple",
        default_missing_value = "simple",
        value_parser = ["simple", "full", "no"]
    )]
    pub demangle: String,
    /// Show the symbols as they are (`--demangle=no`).
    #[arg(long)]
    pub no_demangle: bool,
    /// Source file and line of each function, from DWARF.
    #[arg(short = 'l', long = "line-numbers")]
    pub line_numbers: bool,
    /// Say which transport traces and why (`--transport auto` chooses).
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Follow fork children (each process its own trees).
    #[arg(short = 'f', long = "follow")]
    pub follow: bool,
    /// Attach to this running process instead of launching a command.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<i32>,
    /// What a handler run in the target does when the record ring is full
    /// (in-process transport): `block` waits for wprobe to make room (at
    /// most a second per run; nothing is lost to a burst, the program is
    /// slowed to wprobe's pace), `drop` drops the run's records at once and
    /// counts them (`dropped`; the program never waits).
    #[arg(long, value_name = "POLICY", value_enum, default_value_t)]
    pub ring_full: crate::transport::RingFull,
    /// How probes reach the target.
    #[arg(long, value_name = "TRANSPORT", default_value = crate::plan::AUTO, value_parser = return_probe_transport_names())]
    pub transport: String,
    /// Compile the handler modules afresh instead of using the module cache.
    #[arg(long)]
    pub no_cache: bool,
    /// The command to launch (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// `--min-duration`: `NUMBER[ns|us|ms|s]` (fractions allowed) in ns.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: f64 = match unit.trim() {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => {
            return Err(format!(
                "--min-duration {s}: unknown unit (ns, us, ms or s)"
            ));
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("--min-duration {s}: not a duration such as 10us"))?;
    Ok((v * scale).round() as u64)
}

fn exit_code(s: Option<ExitStatus>) -> ExitCode {
    match s {
        Some(ExitStatus::Code(c)) => ExitCode::from(c as u8),
        Some(ExitStatus::Signal(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
        None => ExitCode::SUCCESS,
    }
}

/// The executable: the command (found through `PATH`), or `/proc/PID/exe`.
fn executable(a: &TraceArgs) -> Result<PathBuf, String> {
    if let Some(pid) = a.pid {
        return std::fs::read_link(format!("/proc/{pid}/exe"))
            .map_err(|e| format!("reading /proc/{pid}/exe: {e}"));
    }
    let first = a
        .command
        .first()
        .ok_or("give the command to trace after `--`, or -p PID")?;
    let cmd = Path::new(first);
    let dir = crate::programs::command_dir(&a.command)
        .ok_or_else(|| format!("{}: command not found", cmd.display()))?;
    let exe = dir.join(cmd.file_name().unwrap_or_default());
    if !exe.is_file() {
        return Err(format!("{}: command not found", cmd.display()));
    }
    Ok(crate::procmaps::canonical(&exe))
}

/// One handler module and the functions it runs for.
struct HandlerModule {
    label: String,
    path: Option<PathBuf>,
    bytes: Vec<u8>,
    funcs: Vec<usize>,
}

/// Splits `--handler` values into the default module and per-glob ones.
fn handler_modules(a: &TraceArgs, funcs: &[Func]) -> Result<Vec<HandlerModule>, String> {
    let mut default: Option<PathBuf> = None;
    let mut scoped: Vec<(String, PathBuf)> = Vec::new();
    for h in &a.handlers {
        match h.split_once('=') {
            Some((g, f)) if !Path::new(h).is_file() => scoped.push((g.to_string(), f.into())),
            _ => {
                if default.replace(h.into()).is_some() {
                    return Err("--handler FILE (for every function) given twice".into());
                }
            }
        }
    }
    let mut modules: Vec<HandlerModule> = Vec::new();
    let mut by_path: HashMap<PathBuf, usize> = HashMap::new();
    for (i, f) in funcs.iter().enumerate() {
        let scoped_hit = scoped
            .iter()
            .find(|(g, _)| wprobe_elf::glob(g, &f.name) || wprobe_elf::glob(g, &f.shown))
            .map(|(_, p)| p);
        let m = module_for(&mut modules, &mut by_path, scoped_hit.or(default.as_ref()))?;
        modules[m].funcs.push(i);
    }
    for (g, _) in &scoped {
        let used = funcs
            .iter()
            .any(|f| wprobe_elf::glob(g, &f.name) || wprobe_elf::glob(g, &f.shown));
        if !used {
            return Err(format!("--handler {g}=…: no traced function matches `{g}`"));
        }
    }
    Ok(modules)
}

/// The index in `modules` of the handler module at `p` (the built-in one
/// for `None`), read the first time.
fn module_for(
    modules: &mut Vec<HandlerModule>,
    by_path: &mut HashMap<PathBuf, usize>,
    p: Option<&PathBuf>,
) -> Result<usize, String> {
    let key = p.cloned().unwrap_or_default();
    if let Some(&i) = by_path.get(&key) {
        return Ok(i);
    }
    let (label, bytes) = match p {
        None => ("trace".to_string(), HANDLERS_WAT.as_bytes().to_vec()),
        Some(p) => {
            if p.extension().is_some_and(|e| e == "rpn" || e == "bt") {
                return Err(format!(
                    "--handler {}: give a .wasm or .wat module exporting `{ENTRY_EXPORT}` and \
                     `{EXIT_EXPORT}` (see guests/trace/trace.wat)",
                    p.display()
                ));
            }
            (
                crate::programs::program_label(p),
                crate::programs::read_module_file(p)?,
            )
        }
    };
    modules.push(HandlerModule {
        label,
        path: p.cloned(),
        bytes,
        funcs: Vec::new(),
    });
    by_path.insert(key, modules.len() - 1);
    Ok(modules.len() - 1)
}

/// What `trace_entry` may take as parameters, in order (`args`): `rsp` at
/// the entry, the call's identity in its thread.
fn entry_args() -> [ArgSource; 1] {
    [ArgSource::Reg(regs::RSP)]
}

/// What `trace_exit` may take as parameters, in order (`args`): the return
/// value, the entry's `rsp`, the call's duration in ns.
fn exit_args() -> [ArgSource; 3] {
    [
        ArgSource::Reg(regs::RAX),
        ArgSource::Entry(regs::RSP),
        ArgSource::Elapsed,
    ]
}

/// How many of [`entry_args`] and [`exit_args`] the module's handlers take
/// (a prefix of each): the parameter counts of its `trace_entry` and
/// `trace_exit` exports; 0 for a module that does not parse (its load says
/// why) or an export missing.
fn taken_args(bytes: &[u8]) -> (usize, usize) {
    let Ok(wasm) = crate::load::to_wasm(bytes) else {
        return (0, 0);
    };
    let Ok(facts) = crate::load::inspect(&wasm) else {
        return (0, 0);
    };
    let n = |name: &str, most: usize| {
        facts
            .func_exports
            .get(name)
            .map_or(0, |t| t.params().len().min(most))
    };
    (
        n(ENTRY_EXPORT, entry_args().len()),
        n(EXIT_EXPORT, exit_args().len()),
    )
}

/// The manifest of one handler module: an entry probe and a return probe
/// on each of its functions, their handlers taking the first `taken` of
/// [`entry_args`] and [`exit_args`].
fn manifest(
    exe: &Path,
    funcs: &[Func],
    which: &[usize],
    taken: (usize, usize),
    with_entry: bool,
) -> (Manifest, Vec<(u32, bool)>) {
    let mut m = Manifest {
        module: exe.display().to_string(),
        ..Manifest::default()
    };
    let mut map = Vec::with_capacity(which.len() * 2);
    for &i in which {
        let f = &funcs[i];
        let loc = Location {
            kind: LocationKind::Offset,
            symbol: None,
            addend: f.link,
        };
        let mut entry = ProbeSpec::breakpoint(ENTRY_EXPORT, loc);
        entry.value = Some(f.link);
        entry.opcode = Some(f.opcode);
        entry.maxhits = 0;
        if f.module != exe {
            entry.module = Some(f.module.display().to_string());
        }
        let mut exit = entry.clone();
        entry.args = entry_args()[..taken.0].to_vec();
        exit.export = EXIT_EXPORT.into();
        exit.r#return = true;
        exit.maxactive = MAX_MAXACTIVE;
        exit.args = exit_args()[..taken.1].to_vec();
        // The return probe first: a transport that patches code plans the
        // function's windows for both ends at once (a short function takes
        // one window for its entry and its `ret`).
        m.probes.push(exit);
        map.push((i as u32, true));
        if with_entry {
            m.probes.push(entry);
            map.push((i as u32, false));
        }
    }
    (m, map)
}

/// A transport's refusal to arm a function's probes, without what is
/// particular to that function (its address, its name and file), so that
/// the functions refused for one reason are listed together: a program of
/// thousands of functions had a line each.
fn common_reason(why: &str) -> String {
    let mut r = why;
    for prefix in ["cannot patch the function at 0x", "cannot patch 0x"] {
        if let Some((_, rest)) = r.strip_prefix(prefix).and_then(|t| t.split_once(": ")) {
            r = rest;
        }
    }
    // `offset 0x… of PATH is in no function of its symbol table: …`.
    if r.starts_with("offset 0x")
        && let Some(i) = r.find(" is in no function of its symbol table")
    {
        return format!("it{}", &r[i..]);
    }
    // `NAME in PATH has no `ret` instruction …`.
    if let Some(i) = r.find(" has no `ret` instruction") {
        return format!("it{}", &r[i..]);
    }
    // `0x… is a `ret` where a return probe's calls return …`: its entry is
    // a `ret` another traced function's calls return through (a tail call
    // into a function that is a lone `ret`).
    if let Some(rest) = r
        .strip_prefix("0x")
        .and_then(|t| t.split_once(' ').map(|p| p.1))
    {
        return format!("its entry {rest}");
    }
    // `the N bytes the jump replaces at 0x… overlap those of the probe at
    // 0x…`: the window of another traced function (one starting inside it).
    if r.starts_with("the ")
        && r.contains(" bytes the jump replaces at 0x")
        && r.contains(" overlap those of the probe at 0x")
    {
        return "the bytes its jump would replace overlap those of another probe's jump (a \
                function starting inside them)"
            .into();
    }
    r.to_string()
}

/// Prints the functions not traced, once, grouped by reason.
fn list_not_traced(skipped: &[NotTraced]) {
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in skipped {
        by_reason.entry(&s.reason).or_default().push(&s.name);
    }
    for (reason, names) in by_reason {
        crate::elog!("wprobe: not traced ({reason}): {}", names.join(", "));
    }
}

/// Runs the command: the traced command's exit status, or the failure to
/// report (exit status 1).
pub fn trace(a: TraceArgs) -> CmdResult {
    run(a).unwrap_or_else(|e| Err(CliError::user(e)))
}

/// `Err`: the trace could not start (exit status 1); `Ok(Err)`: it ran,
/// and the trees were finished and printed, but the run or the output
/// failed.
fn run(a: TraceArgs) -> Result<CmdResult, String> {
    if a.pid.is_none() && a.command.is_empty() {
        return Err("give the command to trace after `--`, or -p PID".into());
    }
    // Stopping signals are caught from here on (also when started with
    // SIGINT ignored): one that arrives while the functions are read or
    // the probes armed ends the trace as soon as it can.
    let signals = crate::stopsig::StopSignals::install()
        .map_err(|e| format!("installing a signal handler: {e}"))?;
    let stop = signals.stop.clone();
    if a.format == "json" && !a.report {
        return Err("--format json is the form of --report".into());
    }
    if a.time && a.micros {
        return Err("-t and -u: give one".into());
    }
    let min_ns = a
        .min_duration
        .as_deref()
        .map(parse_duration)
        .transpose()?
        .unwrap_or(0);
    let forced = if a.transport == crate::plan::AUTO {
        None
    } else {
        let info = crate::transport::by_name(&a.transport)
            .ok_or_else(|| format!("unknown transport `{}`", a.transport))?;
        if !info.caps.return_probes {
            let alt = crate::transport::TRANSPORTS
                .iter()
                .find(|t| t.caps.return_probes)
                .map_or("no transport of this wprobe can".to_string(), |t| {
                    format!("use --transport {}", t.name)
                });
            return Err(format!(
                "wprobe trace needs return probes, and --transport {} cannot arm them; {alt}",
                info.name
            ));
        }
        Some(info)
    };
    let mut needs = crate::plan::Needs::default();
    if let Some(pid) = a.pid {
        crate::plan::check_attach(pid, forced, &mut needs)?;
    }
    // `auto` knows its transport only once the handlers are loaded; the
    // notes that depend on it wait until then.
    let exe = executable(&a)?;
    let libraries = match a.pid {
        Some(pid) => funcs::libraries_of_process(pid, &exe, &a.libs),
        None => funcs::libraries_for_launch(&exe, &a.libs)?,
    };
    let sel = Selection {
        plt: a.plt,
        libs: a.libs.clone(),
        exclude: a.exclude.clone(),
        filters: a.filter.iter().map(|g| g.glob.clone()).collect(),
        demangle: if a.no_demangle {
            funcs::Demangle::No
        } else {
            match a.demangle.as_str() {
                "full" => funcs::Demangle::Full,
                "no" => funcs::Demangle::No,
                _ => funcs::Demangle::Simple,
            }
        },
    };
    let (mut funcs, skipped) = funcs::select(&exe, &libraries, &sel)?;
    if funcs.is_empty() {
        return Err(if a.exclude.is_empty() {
            format!(
                "no function to trace in {} (no function symbols and no unwind table: trace \
                 its calls to libraries with --plt, a library's functions with --lib GLOB)",
                exe.display()
            )
        } else {
            format!(
                "no function to trace in {} (all excluded by -X, or none has a symbol or an \
                 unwind table entry)",
                exe.display()
            )
        });
    }
    if a.line_numbers {
        lines::fill(&mut funcs);
    }
    list_not_traced(&skipped);
    let (filter_hit, notrace_hit) = filter_and_notrace(&funcs, &a.filter, &a.notrace)?;

    // The handler programs.
    let engine = crate::engine::new_engine().map_err(|e| format!("{e:#}"))?;
    let cache = crate::cache::Cache::for_cli(a.no_cache).map_err(|e| e.to_string())?;
    let modules = handler_modules(&a, &funcs)?;
    let mut programs = Vec::new();
    let mut probes = ProbeMap::default();
    // With the built-in handlers, a transport that reports each call as it
    // enters runs no handler there: `trace_entry` would only log the
    // entry's `rsp`, which the notice carries (a Wasm run, a host call and
    // a record less per call). Other modules' `trace_entry` runs.
    // The transport: forced, or chosen by what the run needs (the
    // session's check needs the programs; whether calls are reported as
    // they enter depends on the transport, so the first candidate's answer
    // is used to build them, and checked again below).
    let first = match forced {
        Some(info) => info,
        None => {
            crate::plan::choose(crate::plan::AUTO, &needs, &|info| {
                if a.follow && !info.caps.follows_forks {
                    return Err("-f: it does not follow forks".into());
                }
                (info.preflight)(true)
            })?
            .info
        }
    };
    let notices: Vec<bool> = modules
        .iter()
        .map(|hm| first.caps.entry_notices && hm.path.is_none())
        .collect();
    for (hm, &notice) in modules.iter().zip(&notices) {
        let (m, map) = manifest(&exe, &funcs, &hm.funcs, taken_args(&hm.bytes), !notice);
        let path = hm.path.as_deref();
        let (module, outcome) = crate::load::load_cached(&engine, &hm.bytes, path, Some(m), &cache)
            .map_err(|e| match path {
                Some(p) => format!("loading {}: {e}", p.display()),
                None => format!("loading the built-in trace handlers: {e}"),
            })?;
        if let Some(p) = path {
            crate::programs::debug_cache_outcome(p, &outcome);
        }
        programs.push(LoadedProgram {
            label: hm.label.clone(),
            module,
        });
        probes.by_prog.push(map);
    }
    let opts = RunOptions {
        follow_forks: a.follow,
        verify_opcodes: true,
        groups: Vec::new(),
        types: Vec::new(),
        fuel: None,
        format: Format::Text,
        text: crate::format::TextStyle::default(),
    };
    let mut session = Session::new(&engine, programs, opts, Box::new(std::io::sink()))
        .map_err(|e| format!("{e:#}"))?;
    // Entry notices were built for `first`: a transport without them is
    // not a candidate when `first` has them (the built-in handlers would
    // log nothing at the entries).
    needs.registers_at_run_time = session.reads_registers_chosen_at_run_time();
    let plan = crate::plan::choose(&a.transport, &needs, &|info| {
        if info.caps.entry_notices != first.caps.entry_notices && notices.iter().any(|n| *n) {
            return Err("the handlers were built for entry notices".into());
        }
        session.check(info)
    })?;
    if a.verbose {
        crate::transport::VERBOSE.store(true, std::sync::atomic::Ordering::Relaxed);
        crate::elog!("wprobe: {}", plan.describe());
    }
    let info = plan.info;
    session.set_plan(&plan);
    session.set_verbose(a.verbose);
    if info.name == "perf" && funcs.len() > PERF_MANY_FUNCTIONS {
        crate::elog!(
            "wprobe: note: --transport perf registers a uprobe at the entry and at each return \
             site of the {} functions to trace, and the kernel waits for an RCU grace period to \
             register each and again to remove it: this takes minutes (30,000 functions: 20,000 \
             uprobes in the first 25 minutes here). -X what you do not need, or use \
             --transport inproc",
            funcs.len()
        );
    }
    for (prog, _) in notices.iter().enumerate().filter(|(_, n)| **n) {
        session.request_entry_notices(prog);
    }
    for prog in 0..session.program_count() {
        session.track_every_call(prog);
    }

    // The outputs.
    crate::engine::interrupt_on(&engine, stop.clone());
    let table: views::Table = Rc::new(funcs);
    let time = TimeFmt::local(if a.micros {
        Clock::Micros
    } else if a.time {
        Clock::Seconds
    } else {
        Clock::None
    });
    let start_ns = crate::sys::time::realtime_ns();
    let text_out = || -> Result<out::TextOut, String> {
        match &a.output {
            Some(p) if a.per_thread => Ok(out::TextOut::per_thread(p.clone(), stop.clone())),
            Some(p) => {
                let f = std::fs::File::create(p)
                    .map_err(|e| format!("creating {}: {e}", p.display()))?;
                Ok(out::TextOut::file(f, stop.clone()))
            }
            None => Ok(out::TextOut::single(
                Box::new(std::io::stdout()),
                std::io::stdout().is_terminal(),
                stop.clone(),
            )),
        }
    };
    let mut list: Vec<Box<dyn views::View>> = Vec::new();
    if a.report {
        list.push(Box::new(views::report::ReportView::new(
            table.clone(),
            text_out()?,
            a.format == "json",
        )));
    } else if a.call_tree {
        list.push(Box::new(views::calltree::CallTreeView::new(
            table.clone(),
            text_out()?,
            views::calltree::TreeOpts {
                pid: !a.no_pid,
                ip: !a.no_ip,
                lines: a.line_numbers,
                offset: a.offset,
                time,
            },
        )));
    } else {
        list.push(Box::new(views::duration::DurationView::new(
            table.clone(),
            text_out()?,
            time,
            a.line_numbers,
        )));
    }
    if let Some(p) = &a.chrome {
        list.push(Box::new(views::chrome::ChromeView::create(
            table.clone(),
            p,
            start_ns,
        )?));
    }
    if let Some(p) = &a.flame {
        let title = format!(
            "wprobe trace {}",
            a.pid.map_or_else(
                || {
                    a.command
                        .iter()
                        .map(|s| s.to_string_lossy())
                        .collect::<Vec<_>>()
                        .join(" ")
                },
                |p| format!("-p {p}")
            )
        );
        list.push(Box::new(views::flame::FlameView::new(
            table.clone(),
            p,
            title,
        )));
    }
    let filters = Filters {
        filter_hit,
        notrace_hit,
        max_depth: a.depth,
        min_ns,
    };
    let state = Rc::new(RefCell::new(TraceState::new(
        probes,
        Tree::new(filters, Views { list }),
    )));
    session.set_record_hook(Box::new(Hook(state.clone())));

    // Launch or attach, arm, run.
    if let Some(r) = signals.received() {
        crate::elog!(
            "wprobe: stopped by signal {} before tracing began{}",
            r.signal,
            if a.pid.is_none() {
                "; the command was not started"
            } else {
                ""
            }
        );
        return Ok(Ok(crate::cmd::run::stopped_before_start(
            a.pid.is_some(),
            r.signal,
        )));
    }
    let target = match a.pid {
        Some(pid) => Target::Attach(pid),
        None => Target::Launch(&a.command),
    };
    let (info, mut transport) = crate::cmd::run::open_planned(&plan, target, |info| OpenOptions {
        follow_forks: a.follow,
        verify_opcodes: true,
        reads_memory: session.reads_memory(),
        registers: crate::cmd::run::registers_read(info, &session),
        ring_full: a.ring_full,
    })?;
    let t = transport.as_mut();
    let main = t.main_pid();
    // A launched command stopped at its exec (perf): the probes of what is
    // mapped and of its startup libraries first, so that calls made before
    // its entry point (constructors) are traced.
    let mut armed = match session.arm_at_start(t, main, false) {
        Ok(n) => n,
        Err(e) => {
            t.kill_launched();
            let _ = t.detach();
            return Err(e);
        }
    };
    if session.pending() > 0 && info.caps.arms_files {
        armed += session.arm_on_files(t, main, &[], false);
    }
    // A function is traced by its two probes or not at all (with entry
    // notices it has one).
    let failed: Vec<(usize, usize)> = session
        .arm_failures()
        .iter()
        .map(|(p, i, _)| (*p, *i))
        .collect();
    for (prog, index) in failed {
        if !notices[prog] {
            session.disable_probe(t, prog, index ^ 1);
        }
    }
    report_arm_failures(&session, &table, &modules, &notices);
    // Nothing armed yet is fine when the libraries of the rest are still
    // to be mapped and the transport arms them then (a stripped program
    // traced with `--lib`, stopped at its exec under ptrace).
    let later = session.pending() > 0 && info.caps.later_libraries;
    if armed == 0 && !later {
        if a.pid.is_none() {
            t.kill_launched();
        }
        let _ = t.detach();
        return Err(format!("no function could be traced in process {main}"));
    }
    let result = session.run(t, &stop);
    let report = t.report();
    // A failed run still finishes and prints the trees it has; the error
    // is reported last, with its exit status (2: wprobe's own failure).
    let mut failure = None;
    let mut status = match result {
        Ok(s) => s,
        Err(e) => {
            failure = Some(CliError::internal(format!("{e:#}")));
            None
        }
    };
    // A transport that ends with the launched process (perf) reports its
    // exit status, not an exit event: the trees end with it all the same.
    if let Some(s) = status.or(report.exit_status)
        && !state.borrow().exited.contains(&main)
    {
        use crate::session::hook::RecordHook;
        Hook(state.clone()).event(&crate::session::hook::HookEvent::ProcessExited {
            pid: main,
            status: s,
        });
    }
    let errors = {
        let mut st = state.borrow_mut();
        st.tree.finish();
        st.tree.sink.finish()
    };
    if !errors.is_empty() {
        let lines = errors.join("\nerror: ");
        match &mut failure {
            Some(f) => f.message = format!("{}\nerror: {lines}", f.message),
            None => failure = Some(CliError::user(lines)),
        }
    }
    summary(&session, &state.borrow());
    for (pid, addr, found) in &report.code_left_alone {
        crate::elog!(
            "wprobe: warning: process {pid} rewrote its code at {addr:#x} (now {found:#04x}) \
             while it was traced there: left as the process wrote it"
        );
    }
    status = status.or(report.exit_status);
    if a.pid.is_none() && status.is_none() {
        if let Some(sig) = signals.forward_after_detach(main, &report.detach_signals) {
            crate::elog!(
                "wprobe: detached; signal {sig} passed on to process {main}, waiting for it to exit"
            );
        } else {
            crate::elog!("wprobe: detached; waiting for process {main} to exit");
        }
        status = wait_child(main);
    }
    if let Some(f) = failure {
        return Ok(Err(f));
    }
    Ok(Ok(exit_code(status)))
}

/// A `-F` or `-N` pattern, with its place among them on the command line
/// (uftrace's rule: of a `-F` and a `-N` naming one function, the later
/// one counts).
#[derive(Clone, Debug)]
pub struct OrderedGlob {
    /// The pattern.
    pub glob: String,
    /// Its place among the `-F` and `-N` patterns.
    pub seq: usize,
}

/// clap parses the values of `-F` and `-N` in their command-line order:
/// a count taken as each is parsed is their order.
fn ordered_glob(s: &str) -> Result<OrderedGlob, String> {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    Ok(OrderedGlob {
        glob: s.to_string(),
        seq: SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    })
}

/// Per function, the place of the last glob matching its symbol or its
/// shown name; empty without globs; an error when none matches.
fn matching(
    funcs: &[Func],
    globs: &[OrderedGlob],
    option: &str,
) -> Result<Vec<Option<usize>>, String> {
    if globs.is_empty() {
        return Ok(Vec::new());
    }
    let hits: Vec<Option<usize>> = funcs
        .iter()
        .map(|f| {
            globs
                .iter()
                .filter(|g| {
                    wprobe_elf::glob(&g.glob, &f.name) || wprobe_elf::glob(&g.glob, &f.shown)
                })
                .map(|g| g.seq)
                .max()
        })
        .collect();
    if !hits.iter().any(Option::is_some) {
        let sep = format!(" {option} ");
        let names: Vec<&str> = globs.iter().map(|g| g.glob.as_str()).collect();
        return Err(format!(
            "{option} {}: no traced function matches",
            names.join(&sep)
        ));
    }
    Ok(hits)
}

/// Per function, whether `-F` names it and whether `-N` does: a function
/// both name counts as named by the later option only.
fn filter_and_notrace(
    funcs: &[Func],
    filter: &[OrderedGlob],
    notrace: &[OrderedGlob],
) -> Result<(Vec<bool>, Vec<bool>), String> {
    let f = matching(funcs, filter, "-F")?;
    let n = matching(funcs, notrace, "-N")?;
    let at = |v: &[Option<usize>], i: usize| v.get(i).copied().flatten();
    let filter_hit = (0..f.len())
        .map(|i| at(&f, i).is_some_and(|s| at(&n, i).is_none_or(|t| s > t)))
        .collect();
    let notrace_hit = (0..n.len())
        .map(|i| at(&n, i).is_some_and(|t| at(&f, i).is_none_or(|s| t > s)))
        .collect();
    Ok((filter_hit, notrace_hit))
}

/// Says, once, which functions could not be traced and why (the
/// transport refused their entry or return probe).
fn report_arm_failures(
    session: &Session,
    table: &views::Table,
    modules: &[HandlerModule],
    notices: &[bool],
) {
    let mut skipped: Vec<NotTraced> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (prog, index, why) in session.arm_failures() {
        // Two probes per function, or only its return probe.
        let per = if notices.get(*prog) == Some(&true) {
            1
        } else {
            2
        };
        let Some(&fi) = modules.get(*prog).and_then(|m| m.funcs.get(index / per)) else {
            continue;
        };
        if seen.insert(fi) {
            skipped.push(NotTraced {
                name: table[fi].shown.clone(),
                reason: common_reason(why),
            });
        }
    }
    list_not_traced(&skipped);
}

/// One line of what was traced, and a warning for anything lost.
fn summary(session: &Session, st: &TraceState) {
    let c = st.tree.counters;
    let p = st.problems;
    let stats = session.stats();
    let traps: u64 = stats.iter().map(|(_, s)| s.traps).sum();
    let fuel: u64 = stats.iter().map(|(_, s)| s.fuel_exhausted).sum();
    let dropped: u64 =
        stats.iter().map(|(_, s)| s.dropped).sum::<u64>() + session.dropped_unattributed();
    crate::elog!(
        "wprobe: trace: {} calls ({} returned, {} unwound{})",
        c.calls,
        c.returned,
        c.unwound,
        if c.running > 0 {
            format!(", {} still running when the trace ended", c.running)
        } else {
            String::new()
        }
    );
    let warn = |n: u64, what: &str| {
        if n > 0 {
            crate::elog!("wprobe: warning: {n} {what}");
        }
    };
    warn(
        p.missed,
        "calls not tracked to their return (more than 1,048,576 live calls in a process or \
         thread, or a return address that cannot take a breakpoint, as after a call that never \
         returns): their returns are not in the trace",
    );
    warn(
        dropped.max(p.lost),
        "hits the transport could not deliver (the kernel dropped them): missing from the trace",
    );
    warn(
        c.orphan_returns,
        "returns whose call was not seen: not in the trace",
    );
    warn(
        p.entries_without_record,
        "entries whose handler logged no trace record (major 0x7472, minor 1): not in the trace",
    );
    warn(
        p.exits_without_record,
        "returns whose handler logged no trace record (major 0x7472, minor 2): not in the trace",
    );
    warn(traps, "handler runs trapped");
    warn(fuel, "handler runs ran out of fuel");
}

/// Waits for our child `pid` to exit (after it was detached).
fn wait_child(pid: i32) -> Option<ExitStatus> {
    use nix::sys::wait::{WaitStatus, waitpid};
    loop {
        match waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Ok(WaitStatus::Exited(_, c)) => return Some(ExitStatus::Code(c)),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Some(ExitStatus::Signal(sig as i32)),
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn refusals_lose_what_is_particular_to_the_function() {
        use super::common_reason;
        assert_eq!(
            common_reason(
                "cannot patch the function at 0x55996f37d510: _RNvYNtf in /tmp/p has no `ret` \
                 instruction (it ends in calls that do not return, or in tail calls out of the \
                 module): --transport inproc cannot observe its returns; use --transport ptrace"
            ),
            "it has no `ret` instruction (it ends in calls that do not return, or in tail calls \
             out of the module): --transport inproc cannot observe its returns; use --transport \
             ptrace"
        );
        assert_eq!(
            common_reason(
                "cannot patch 0x55996e4adae0: 0x55996e4adae0 is a `ret` where a return probe's \
                 calls return: a probe cannot share it"
            ),
            "its entry is a `ret` where a return probe's calls return: a probe cannot share it"
        );
        assert_eq!(
            common_reason(
                "cannot patch the function at 0x55996f37e454: no function symbol covers it \
                 (branch targets in the window cannot be ruled out)"
            ),
            "no function symbol covers it (branch targets in the window cannot be ruled out)"
        );
        assert_eq!(
            common_reason(
                "cannot patch the function at 0x2084630: the 5 bytes the jump replaces at \
                 0x2084630 overlap those of the probe at 0x2084634"
            ),
            "the bytes its jump would replace overlap those of another probe's jump (a function \
             starting inside them)"
        );
        assert_eq!(
            common_reason(
                "offset 0x11c0 of /tmp/p is in no function of its symbol table: --transport perf \
                 finds the returns of a return probe by decoding its function; use --transport \
                 ptrace"
            ),
            "it is in no function of its symbol table: --transport perf finds the returns of a \
             return probe by decoding its function; use --transport ptrace"
        );
        assert_eq!(common_reason("anything else"), "anything else");
    }

    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500"), Ok(500));
        assert_eq!(parse_duration("10us"), Ok(10_000));
        assert_eq!(parse_duration("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration("2s"), Ok(2_000_000_000));
        assert!(parse_duration("2h").is_err());
        assert!(parse_duration("ms").is_err());
    }
}
