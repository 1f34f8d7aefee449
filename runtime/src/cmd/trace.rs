//! `wprobe trace [OPTIONS] (-- CMD | -p PID)`: the function-call tracer.
//! Every function of the executable (with `--plt` its calls through the
//! PLT, with `--lib GLOB` the functions of matching shared libraries) gets
//! a return probe at its entry, armed with entry notices: every transport
//! reports each call as it enters and as it returns as typed events
//! (`Event::Entered`, `Event::Returned`, `Event::Unwound`), and no handler
//! runs (the built-in module, `guests/trace/trace.wat`, is the programs'
//! manifest and the template of `--handler`). `--handler [GLOB=]FILE` runs
//! a module's `trace_entry` at the entry (an ordinary probe) and
//! `trace_exit` at the return instead; their records are decoded
//! (`records`). Both reach this command through the session's record hook,
//! with the probe they belong to, and become per-thread call trees
//! (`tree`), shown by the views (`views`): uftrace's duration view by
//! default, tracef's call tree with `-T`, a report with `--report`, Chrome
//! trace events with `--chrome`, a flame graph with `--flame`. Names,
//! demangling and source lines are worked out once per function, at start.
//! Exits with the traced command's status.
//!
//! Here: the arguments and the steps of a run (the transport, the session,
//! the arming). The functions to trace are chosen in `funcs` (their lines
//! in `lines`), those `-F`/`-N` name in `filters`; `handlers` builds and
//! loads the handler modules; `refusals` says which functions are left out
//! and why; `outputs` builds the views; `finish` ends the run (the summary,
//! the exit status).

mod filters;
mod finish;
pub mod funcs;
mod handlers;
pub mod lines;
pub mod out;
mod outputs;
pub mod records;
mod refusals;
pub mod tree;
pub mod views;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::cmd::{CliError, CmdResult, return_probe_transport_names};
use crate::out::format::Format;
use crate::plan::{Needs, Plan};
use crate::session::{LoadedProgram, RunOptions, Session};
use crate::transport::{OpenOptions, Target, Transport, TransportInfo};

use filters::{filter_and_notrace, ordered_glob};
use funcs::{Func, Selection};
use handlers::{HandlerModule, handler_modules};
use records::{Hook, TraceState};
use refusals::{list_not_traced, report_arm_failures};
use tree::{Filters, Tree};
use views::Views;

pub use filters::{OrderedGlob, parse_duration};
pub use handlers::{ENTRY_EXPORT, EXIT_EXPORT, HANDLERS_WAT};

/// Functions above which `--transport perf` is said to take minutes to arm
/// and to end (docs/trace.md, Limits).
const PERF_MANY_FUNCTIONS: usize = 1000;

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
    /// Also trace the executable's library calls: through its PLT, and
    /// (in process only) through the GOT slots of code built with -fno-plt.
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
    /// Compile the handler modules and plan the in-process sites afresh
    /// instead of using the module cache and the plan cache.
    #[arg(long)]
    pub no_cache: bool,
    /// The command to launch (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
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
    let dir = crate::probe::programs::command_dir(&a.command)
        .ok_or_else(|| format!("{}: command not found", cmd.display()))?;
    let exe = dir.join(cmd.file_name().unwrap_or_default());
    if !exe.is_file() {
        return Err(format!("{}: command not found", cmd.display()));
    }
    Ok(crate::proc::procmaps::canonical(&exe))
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
    // Under `WPROBE_DEBUG`, when each part of the run ended.
    let debug = std::env::var_os("WPROBE_DEBUG").is_some();
    let started = std::time::Instant::now();
    let ph = |part: &str| {
        if debug {
            crate::elog!(
                "wprobe: debug: {part} done {:.1} ms after the start",
                started.elapsed().as_secs_f64() * 1e3
            );
        }
    };
    if a.pid.is_none() && a.command.is_empty() {
        return Err("give the command to trace after `--`, or -p PID".into());
    }
    // Stopping signals are caught from here on (also when started with
    // SIGINT ignored): one that arrives while the functions are read or
    // the probes armed ends the trace as soon as it can.
    let signals = crate::proc::stopsig::StopSignals::install()
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
    let forced = forced_transport(&a)?;
    let mut needs = crate::plan::Needs {
        follow_forks: a.follow,
        ..crate::plan::Needs::default()
    };
    if let Some(pid) = a.pid {
        crate::plan::check_attach(pid, forced, &mut needs)?;
    }
    // `auto` knows its transport only once the handlers are loaded; the
    // notes that depend on it wait until then.
    let exe = executable(&a)?;
    crate::transport::inproc::configure_plan_cache(a.no_cache);
    if a.transport == "inproc" || a.transport == crate::plan::AUTO {
        // Its code read meanwhile (handlers built, the command launched),
        // for the in-process patcher to plan every function's sites.
        crate::transport::inproc::prefetch(&crate::proc::procmaps::canonical(&exe));
    }
    let funcs = select_functions(&a, &exe)?;
    ph("selecting the functions");
    let (filter_hit, notrace_hit) = filter_and_notrace(&funcs, &a.filter, &a.notrace)?;

    // The handler programs.
    let engine = crate::wasm::engine::new_engine().map_err(|e| format!("{e:#}"))?;
    let cache = crate::wasm::cache::Cache::for_cli(a.no_cache).map_err(|e| e.to_string())?;
    let modules = handler_modules(&a, &funcs)?;
    // The built-in handlers run nowhere: the transport reports each call's
    // entry and return as events (the entry's `rsp`; the return's `rax`,
    // the entry's `rsp` and the call's duration), what `trace_entry` and
    // `trace_exit` would log. Other modules' handlers run.
    check_transport(&a, forced, &needs)?;
    let notices: Vec<bool> = modules.iter().map(|hm| hm.path.is_none()).collect();
    let (programs, probes) = handlers::load(&engine, &cache, &exe, &funcs, &modules, &notices)?;
    ph("loading the handlers");
    let (mut session, plan) =
        start_session(&a, &engine, programs, &mut needs, &notices, funcs.len())?;
    ph("starting the session");
    // Calls of `swapcontext` switch stacks: the transports pair each
    // stack's calls apart, and the tree shows each stack's calls under
    // its own open calls.
    let switches: Vec<bool> = funcs.iter().map(funcs::switches_stack).collect();
    for (prog, map) in probes.by_prog.iter().enumerate() {
        for (index, &(f, exit)) in map.iter().enumerate() {
            if exit && switches[f as usize] {
                session.mark_stack_switch(prog, index);
            }
        }
    }

    // The outputs.
    crate::wasm::engine::interrupt_on(&engine, stop.clone());
    let table: views::Table = Rc::new(funcs);
    let list = outputs::views(&a, &table, &stop)?;
    let filters = Filters {
        filter_hit,
        notrace_hit,
        max_depth: a.depth,
        min_ns,
    };
    let mut tree = Tree::new(filters, Views { list });
    tree.set_switches(switches);
    tree.set_throwers(table.iter().map(funcs::throws).collect());
    let state = Rc::new(RefCell::new(TraceState::new(probes, tree)));
    session.set_record_hook(Box::new(Hook(state.clone())));

    // Launch or attach, arm, run.
    if let Some(r) = signals.received() {
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
    ph("launching or attaching");
    let t = transport.as_mut();
    let main = t.main_pid();
    arm(&a, &mut session, t, info, &table, &modules, &notices)?;
    ph("arming");
    let result = session.run(t, &stop);
    ph("the run");
    let report = t.report();
    let r = finish::finish(&a, &session, &state, &signals, main, result, report);
    ph("the summary");
    // wprobe ends here: what the in-process transport holds (every site
    // planned; tens of thousands of allocations) goes back with the
    // process's memory rather than freed piece by piece, once it is
    // detached for good (its drop would only detach it again). Not the
    // others: their drops take kernel objects down (uprobes, perf events).
    if info.name == crate::transport::inproc::INFO.name && transport.detach().is_ok() {
        std::mem::forget(transport);
    }
    Ok(r)
}

/// The transport `--transport` names (`None` for `auto`): one that can
/// arm return probes.
fn forced_transport(a: &TraceArgs) -> Result<Option<&'static TransportInfo>, String> {
    Ok(if a.transport == crate::plan::AUTO {
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
    })
}

/// The functions to trace in `exe` (and the libraries `--lib` names),
/// with their source lines under `-l`; those left out are said.
fn select_functions(a: &TraceArgs, exe: &Path) -> Result<Vec<Func>, String> {
    let libraries = match a.pid {
        Some(pid) => funcs::libraries_of_process(pid, exe, &a.libs),
        None => funcs::libraries_for_launch(exe, &a.libs)?,
    };
    let sel = Selection {
        plt: a.plt,
        libs: a.libs.clone(),
        exclude: wprobe_elf::glob::GlobSet::new(&a.exclude),
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
    let (mut funcs, skipped) = funcs::select(exe, &libraries, &sel)?;
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
    Ok(funcs)
}

/// Under `auto`, whether some transport can serve the run at all, before
/// the handler modules are built (the session's check, which needs the
/// programs, chooses in [`start_session`]).
fn check_transport(
    a: &TraceArgs,
    forced: Option<&'static TransportInfo>,
    needs: &Needs,
) -> Result<(), String> {
    if forced.is_none() {
        crate::plan::choose(crate::plan::AUTO, needs, &|info| {
            if a.follow && !info.caps.follows_forks {
                return Err("-f: it does not follow forks".into());
            }
            (info.preflight)(true).map_err(|e| e.to_string())
        })?;
    }
    Ok(())
}

/// The session of the loaded `programs`, its transport planned (with entry
/// notices for the programs `notices` says), every call of their return
/// probes tracked.
fn start_session(
    a: &TraceArgs,
    engine: &wasmtime::Engine,
    programs: Vec<LoadedProgram>,
    needs: &mut Needs,
    notices: &[bool],
    functions: usize,
) -> Result<(Session, Plan), String> {
    let opts = RunOptions {
        follow_forks: a.follow,
        verify_opcodes: true,
        groups: Vec::new(),
        types: Vec::new(),
        fuel: None,
        format: Format::Text,
        text: crate::out::format::TextStyle::default(),
    };
    let mut session = Session::new(engine, programs, opts, Box::new(std::io::sink()))
        .map_err(|e| format!("{e:#}"))?;
    // The built-in handlers need a transport that reports the calls as
    // they enter and return (every transport of this wprobe does).
    needs.registers_at_run_time = session.reads_registers_chosen_at_run_time();
    let plan = crate::plan::choose(&a.transport, needs, &|info| {
        if !info.caps.entry_notices && notices.iter().any(|n| *n) {
            return Err(format!(
                "--transport {} cannot report calls as they enter and return, which the \
                 built-in trace handlers need",
                info.name
            ));
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
    session.set_use_cache(!a.no_cache);
    if info.name == "perf" && functions > PERF_MANY_FUNCTIONS {
        crate::elog!(
            "wprobe: note: --transport perf registers a uprobe at the entry and at each return \
             site of the {} functions to trace, and the kernel waits for an RCU grace period to \
             register each and again to remove it: this takes minutes (30,000 functions: 20,000 \
             uprobes in the first 25 minutes here). -X what you do not need, or use \
             --transport inproc",
            functions
        );
    }
    for (prog, _) in notices.iter().enumerate().filter(|(_, n)| **n) {
        session.request_entry_notices(prog);
    }
    for prog in 0..session.program_count() {
        session.track_every_call(prog);
    }
    Ok((session, plan))
}

/// Arms the probes in the target `t` opened: a function is traced by its
/// probes or not at all, and the functions refused are said; `Err` (the
/// launched command killed, the target detached) where nothing could be
/// armed and nothing is still to be.
fn arm(
    a: &TraceArgs,
    session: &mut Session,
    t: &mut dyn Transport,
    info: &'static TransportInfo,
    table: &views::Table,
    modules: &[HandlerModule],
    notices: &[bool],
) -> Result<(), String> {
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
    report_arm_failures(session, table, modules, notices);
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
    Ok(())
}
