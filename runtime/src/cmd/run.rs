//! `wprobe run`: load the programs (compiling `.rpn` on the fly), start or
//! attach to the target, arm, run the session, print the summary, and exit
//! with the traced command's status (128 + signal when it was killed).
//! `--transport NAME` chooses the transport from the registry; the
//! session (handlers, statistics, output) is the same for every one.

pub mod listing;
pub mod oneliner;

use std::path::PathBuf;

use crate::cmd::transport_names;
use crate::probe::programs::{ProgramArgs, ProgramOpts};

use crate::out::format::Format;
use crate::probe::programs::load_program_with_cache;
use crate::session::{RunOptions, Session};
use crate::transport::{ExitStatus, OpenOptions, Target, TransportInfo};
use crate::wasm::regscan::RegsRead;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use crate::cmd::{CliError, CmdResult, wait_child};

fn exit_code(s: Option<ExitStatus>) -> ExitCode {
    // bpftrace's `exit(code)` decides over the traced command's status.
    if let Some(c) = crate::out::btout::requested_exit_status() {
        return ExitCode::from(c);
    }
    crate::cmd::command_exit_code(s)
}

/// A program and a target are given (a one-liner needs no target: it
/// may be system-wide).
fn what_to_trace(a: &RunArgs, oneliner: bool) -> Result<(), CliError> {
    if a.programs.is_empty() && !oneliner {
        return Err(CliError::user(
            "give a program: a file (.rpn, .wasm, .wat, .bt), -e PROGRAM or --event EVENT",
        ));
    }
    if a.pid.is_none() && a.command.is_empty() && !oneliner {
        return Err(CliError::user(
            "give the command to trace after `--`, or -p PID",
        ));
    }
    Ok(())
}

/// Runs the command.
pub fn run(a: RunArgs) -> CmdResult {
    let a = crate::cmd::run::oneliner::normalize(a);
    if a.list {
        return crate::cmd::run::listing::list(&a);
    }
    // Stopping signals are caught from here on (also when wprobe was
    // started with SIGINT ignored, as `cmd &` in a script does): one that
    // arrives while the programs load or the probes are armed ends the run
    // as soon as it can, the target left as it was.
    let signals = crate::proc::stopsig::StopSignals::install()
        .map_err(|e| CliError::internal(format!("installing a signal handler: {e}")))?;
    let stop = signals.stop.clone();
    let oneliner = crate::cmd::run::oneliner::active(&a);
    what_to_trace(&a, oneliner)?;
    // A transport the user named is known now; `auto` chooses once the
    // programs are loaded (what they need decides).
    let forced = named_transport(&a)?;
    // Bound before anything is traced: a busy port stops nothing half done.
    let exporter = crate::out::metrics::Exporter::start(&a.metrics).map_err(CliError::user)?;
    // A process that cannot be traced at all is refused first, with the
    // real cause (its executable, which `--probe` defaults to, may not
    // even be readable).
    let mut needs = crate::plan::Needs {
        follow_forks: a.follow,
        ..crate::plan::Needs::default()
    };
    if let Some(pid) = a.pid {
        crate::plan::check_attach(pid, forced, &mut needs).map_err(CliError::user)?;
    }
    let engine = crate::cmd::cli_engine()?;
    let cache = crate::wasm::cache::Cache::for_cli(a.opts.no_cache)
        .map_err(|e| CliError::user(e.to_string()))?;
    crate::transport::inproc::configure_plan_cache(a.opts.no_cache);
    let mut programs = crate::cmd::load_each(&a.programs, |p| {
        if crate::cmd::is_bt(p) {
            crate::cmd::run::oneliner::load_file(&engine, p, &a, &cache)
        } else {
            load_program_with_cache(&engine, p, &a.program_args(), &cache)
        }
    })?;
    match crate::cmd::run::oneliner::extra_programs(&engine, &a, &cache) {
        Ok(more) => programs.extend(more),
        Err(e) => {
            return Err(CliError::user(e.to_string()));
        }
    }
    // Modules built by bt2wasm (or using maps, events or begin/end probes)
    // run with one-liner behaviour whatever file they came from.
    let oneliner = oneliner
        || programs
            .iter()
            .any(|p| crate::cmd::run::oneliner::is_oneliner_module(&p.module));
    // Buffered and flushed by the session's output (see `output`).
    let (out, terminal) = output(&a)?;
    let opts = run_options(&a);
    let mut session =
        Session::new(&engine, programs, opts, out).map_err(|e| CliError::user(format!("{e:#}")))?;
    if a.dry_run {
        // bpftrace's --dry-run: everything checked and loaded, nothing run.
        return Ok(ExitCode::SUCCESS);
    }
    session.set_use_cache(!a.opts.no_cache);
    if let Some(e) = &exporter {
        session.set_metrics(e.feed());
    }
    if session.probe_count() == 0 && !(oneliner && session.probe_total() > 0) {
        return Err(CliError::user("no probe selected (check --group / --type)"));
    }
    let (plan, system_wide) = plan(&a, &mut session, needs, oneliner)?;
    if a.verbose {
        crate::transport::VERBOSE.store(true, std::sync::atomic::Ordering::Relaxed);
        crate::elog!("wprobe: {}", plan.describe());
    }
    session.set_plan(&plan);
    session.set_verbose(a.verbose);
    session.set_output(terminal, stop.clone());
    crate::wasm::engine::interrupt_on(&engine, stop.clone());
    if oneliner {
        set_up_oneliner(&mut session, &a, &stop);
        if a.pid.is_none() && a.command.is_empty() && !system_wide {
            let r = crate::cmd::run::oneliner::run_without_target(session, &stop);
            metrics_done(exporter, &signals);
            return r;
        }
    }
    if let Some(r) = signals.received() {
        // Nothing launched or attached yet.
        return Ok(stopped_before_start(a.pid.is_some(), r.signal));
    }
    let target = match a.pid {
        _ if system_wide => Target::System,
        Some(pid) => Target::Attach(pid),
        None => Target::Launch(&a.command),
    };
    let (info, mut transport) = open_planned(&plan, target, |info| OpenOptions {
        follow_forks: a.follow,
        verify_opcodes: !a.no_verify_opcodes,
        reads_memory: session.reads_memory(),
        registers: registers_read(info, &session),
        ring_full: a.ring_full,
    })
    .map_err(CliError::user)?;
    let t = transport.as_mut();
    if system_wide {
        return run_system_wide(session, t, &a, &stop, exporter, &signals);
    }
    let main = arm(&mut session, t, info, &a, oneliner)?;
    if oneliner {
        if a.pid.is_none() {
            session.set_child_pid(main as u64);
        }
        session.begin();
    }
    if let Some(p) = session.transport_tick() {
        t.set_tick(p);
    }
    let mut status = match session.run(t, &stop) {
        Ok(s) => s,
        Err(e) => {
            session.summary();
            return Err(CliError::internal(format!("{e:#}")));
        }
    };
    let report = t.report();
    // A one-liner's exit() ends the command (SIGTERM) and wprobe exits 0,
    // as `bpftrace -c` does.
    let by_exit = oneliner && session.exited();
    if oneliner {
        status = crate::cmd::run::oneliner::finish(
            &mut session,
            a.pid.is_none().then_some(main),
            status,
        );
    }
    session.summary();
    session.publish_final_metrics();
    if by_exit && a.pid.is_none() {
        let _ = wait_child(main);
        metrics_done(exporter, &signals);
        return finish(&session, &a, Some(ExitStatus::Code(0)));
    }
    status = wait_detached(&a, main, status, &report, &signals);
    metrics_done(exporter, &signals);
    finish(&session, &a, status)
}

/// The transport `--transport` names (`None` for `auto`).
fn named_transport(a: &RunArgs) -> Result<Option<&'static TransportInfo>, CliError> {
    Ok(if a.transport == crate::plan::AUTO {
        None
    } else {
        Some(crate::transport::by_name(&a.transport).ok_or_else(|| {
            CliError::user(format!(
                "unknown transport `{}` (one of: {}, {})",
                a.transport,
                crate::plan::AUTO,
                crate::transport::TRANSPORTS
                    .iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?)
    })
}

/// Where the records go: `-o FILE` or standard output (and whether that
/// is a terminal).
fn output(a: &RunArgs) -> Result<(Box<dyn Write + Send>, bool), CliError> {
    Ok(match &a.output {
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => (Box::new(f), false),
            Err(e) => {
                return Err(CliError::user(format!("creating {}: {e}", path.display())));
            }
        },
        None => (Box::new(std::io::stdout()), std::io::stdout().is_terminal()),
    })
}

/// The session's options from the command line.
fn run_options(a: &RunArgs) -> RunOptions {
    RunOptions {
        follow_forks: a.follow,
        verify_opcodes: !a.no_verify_opcodes,
        groups: a.groups.clone(),
        types: a.types.clone(),
        fuel: a.opts.fuel,
        format: a.format,
        text: crate::out::format::TextStyle {
            since_ns: a.timestamps.then(crate::sys::time::realtime_ns),
            radix: a.radix,
        },
    }
}

/// The transport for the session's probes, chosen from what they need
/// (or checked against them when named), and whether the run is
/// system-wide (a one-liner with no process named and probes on files).
fn plan(
    a: &RunArgs,
    session: &mut Session,
    mut needs: crate::plan::Needs,
    oneliner: bool,
) -> Result<(crate::plan::Plan, bool), CliError> {
    needs.registers_at_run_time = session.reads_registers_chosen_at_run_time();
    // No process named and probes on files: bpftrace's default, system-wide
    // probes (they fire in every process that runs the file).
    let system_wide =
        oneliner && a.pid.is_none() && a.command.is_empty() && session.probe_count() > 0;
    needs.system_wide = system_wide;
    let files = crate::plan::files_at_start(&a.command, a.pid);
    needs.later_modules = crate::plan::later_modules(&session.probe_modules(), &files);
    needs.later_programs =
        crate::plan::programs_among(&needs.later_modules, &module_dirs(&a.command));
    needs.close_probes = session.probes_closer_than_a_jump(&files);
    let plan = crate::plan::choose(&a.transport, &needs, &|info| session.check(info))
        .map_err(CliError::user)?;
    Ok((plan, system_wide))
}

/// A one-liner's settings: its output, bpftrace's configuration.
fn set_up_oneliner(
    session: &mut Session,
    a: &RunArgs,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    session.set_oneliner(a.format == Format::Json, stop.clone(), 0);
    session.set_oneliner_quiet(a.quiet);
    let config = crate::cmd::run::oneliner::run_config();
    session.set_print_maps_on_exit(config.print_maps_on_exit);
    session.set_demangle_symbols(
        !a.no_demangle && crate::cmd::run::oneliner::cpp_demangle(config.cpp_demangle),
    );
    session.set_oneliner_output_file(a.output.is_some());
}

/// Arms the probes in the process `t` launched or attached to (its pid);
/// `Err` (the launched command killed, the target detached) where none
/// could be armed and none is still to be.
fn arm(
    session: &mut Session,
    t: &mut dyn crate::transport::Transport,
    info: &'static TransportInfo,
    a: &RunArgs,
    oneliner: bool,
) -> Result<i32, CliError> {
    let main = t.main_pid();
    let mut armed = match session.arm_at_start(t, main, true) {
        Ok(n) => n,
        Err(e) => {
            t.kill_launched();
            let _ = t.detach();
            return Err(CliError::user(e));
        }
    };
    if session.pending() > 0 && info.caps.arms_files {
        // Modules not mapped yet (a program a child execs, a library
        // loaded later): arm on the file, found by path or next to the
        // command, in the current directory or on PATH.
        armed += session.arm_on_files(t, main, &module_dirs(&a.command), true);
    }
    if oneliner && armed == 0 && session.pending() == 0 && session.probe_count() == 0 {
        // Only begin/end/interval probes: nothing to arm.
    } else if armed == 0 && (session.pending() == 0 || !info.caps.later_libraries) {
        if a.pid.is_none() {
            // The command never ran any of its own code: it does not run
            // at all, as with bpftrace -c when attaching fails.
            t.kill_launched();
        }
        let _ = t.detach();
        return Err(CliError::user(format!(
            "no probe could be armed in process {main}"
        )));
    }
    if session.pending() > 0 && !info.caps.later_libraries {
        crate::elog!(
            "wprobe: warning: {} probe(s) not armed: their module is not mapped in process {main} \
             at its entry point{}; --transport {} arms probes once, at start",
            session.pending(),
            if info.caps.arms_files {
                " and its file was not found"
            } else {
                ""
            },
            info.name
        );
    }
    Ok(main)
}

/// After the run: the code left as the process rewrote it said, and the
/// command's status, waited for where it was detached while still our
/// child.
fn wait_detached(
    a: &RunArgs,
    main: i32,
    status: Option<ExitStatus>,
    report: &crate::transport::Report,
    signals: &crate::proc::stopsig::StopSignals,
) -> Option<ExitStatus> {
    for (pid, addr, found) in &report.code_left_alone {
        crate::elog!(
            "wprobe: warning: process {pid} rewrote its code at {addr:#x} (now {found:#04x}) \
             while it was probed there: left as the process wrote it"
        );
    }
    // It may have ended while wprobe was detaching (of that very signal).
    let mut status = status.or(report.exit_status);
    if a.pid.is_none() && status.is_none() {
        // The command was detached (a stopping signal, or a debugger
        // hand-off) but is still our child, and would die with us: give it
        // the signal that stopped wprobe, as it would have had it untraced,
        // and wait for it.
        if report.handed_off.contains(&main) {
            crate::elog!("wprobe: waiting for process {main} (handed off to a debugger) to exit");
        } else if let Some(sig) = signals.forward_after_detach(main, &report.detach_signals) {
            crate::elog!(
                "wprobe: detached; signal {sig} passed on to process {main}, waiting for it to exit"
            );
        } else {
            crate::elog!("wprobe: detached; waiting for process {main} to exit");
        }
        status = wait_child(main);
    }
    status
}

/// A system-wide run (no `-c`/`-p`; the transport opened on
/// [`Target::System`]): every probe armed on its file, `BEGIN`, the
/// handlers of every process that hits until `exit()` or a stopping
/// signal, `END`, the maps.
fn run_system_wide(
    mut session: Session,
    t: &mut dyn crate::transport::Transport,
    a: &RunArgs,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    exporter: Option<crate::out::metrics::Exporter>,
    signals: &crate::proc::stopsig::StopSignals,
) -> CmdResult {
    let armed = session.arm_system_wide(t, &module_dirs(&[]));
    if armed == 0 {
        let _ = t.detach();
        return Err(CliError::user(
            "no probe could be armed system-wide (no -c/-p: probes are armed on their files, \
             for every process that runs them)",
        ));
    }
    if a.verbose {
        crate::elog!("wprobe: {armed} probe(s) armed system-wide");
    }
    session.begin();
    if let Some(p) = session.transport_tick() {
        t.set_tick(p);
    }
    // The run detaches (closes every event) when it ends.
    let res = session.run(t, stop);
    if let Err(e) = res {
        session.summary();
        return Err(CliError::internal(format!("{e:#}")));
    }
    let _ = crate::cmd::run::oneliner::finish(&mut session, None, None);
    session.summary();
    session.publish_final_metrics();
    metrics_done(exporter, signals);
    finish(&session, a, None)
}

/// A run a stopping signal ended before it launched or attached: said,
/// and its exit status: 0 for `-p` (as when it detaches at that signal
/// later), 128 + the signal when the command was never started (as if it
/// had been killed by it).
pub(crate) fn stopped_before_start(attach: bool, signal: i32) -> ExitCode {
    crate::elog!(
        "wprobe: stopped by signal {} before tracing began{}",
        signal,
        if !attach {
            "; the command was not started"
        } else {
            ""
        }
    );
    if attach {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(128u8.wrapping_add(signal as u8))
    }
}

/// `--metrics`: the final values served for `--metrics-linger` (unless a
/// signal stopped the run), then the server stopped.
fn metrics_done(
    e: Option<crate::out::metrics::Exporter>,
    signals: &crate::proc::stopsig::StopSignals,
) {
    if let Some(e) = e {
        e.finish(|| signals.received().is_some());
    }
}

/// Where modules not mapped at start are looked for by base name: the
/// command's directory, the current directory, then `PATH`.
/// The registers handlers can read: a transport that samples them (rather
/// than stopping the thread) samples only those the programs read.
pub(crate) fn registers_read(
    info: &crate::transport::TransportInfo,
    session: &Session,
) -> RegsRead {
    if info.caps.synchronous {
        RegsRead::All
    } else {
        session.registers_read()
    }
}

/// Starts or attaches with the planned transport; under `auto`, one that
/// fails to start (nothing of the target ran: a launched command is killed
/// at its entry point, an attached process let go as it was) hands the run
/// to the next candidate, with a note saying why.
pub(crate) fn open_planned(
    plan: &crate::plan::Plan,
    target: Target<'_>,
    options: impl Fn(&'static crate::transport::TransportInfo) -> OpenOptions,
) -> Result<
    (
        &'static crate::transport::TransportInfo,
        Box<dyn crate::transport::Transport>,
    ),
    String,
> {
    let mut info = plan.info;
    let mut next = plan.fallbacks.iter();
    loop {
        match (info.open)(target, &options(info)) {
            Ok(t) => return Ok((info, t)),
            Err(e) => match next.next() {
                Some(&other) => {
                    crate::elog!(
                        "wprobe: note: --transport {} could not start ({e}); --transport auto \
                         goes on with {}",
                        info.name,
                        other.name
                    );
                    info = other;
                }
                None => return Err(e.to_string()),
            },
        }
    }
}

fn module_dirs(command: &[std::ffi::OsString]) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> = Vec::new();
    if let Some(c) = command.first().map(std::path::Path::new)
        && let Some(d) = c.parent()
        && !d.as_os_str().is_empty()
    {
        dirs.push(d.to_path_buf());
    }
    dirs.push(".".into());
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    dirs
}

/// The exit status of `wprobe run`: the traced command's, unless records
/// were lost (they could not be written: then 1, with the count).
fn finish(session: &Session, a: &RunArgs, status: Option<ExitStatus>) -> CmdResult {
    if let Some((n, e)) = session.records_lost() {
        let dest = a
            .output
            .as_ref()
            .map_or("standard output".to_string(), |p| p.display().to_string());
        return Err(CliError::user(format!(
            "{n} record{} lost: writing {dest} failed: {e}{}",
            if n == 1 { "" } else { "s" },
            match status {
                Some(ExitStatus::Code(c)) => format!(" (the command exited with status {c})"),
                Some(ExitStatus::Signal(s)) => format!(" (the command was killed by signal {s})"),
                None => String::new(),
            }
        )));
    }
    Ok(exit_code(status))
}

/// Examples shown under `wprobe run --help`.
const RUN_EXAMPLES: &str = "\
Examples:
  wprobe run prog.rpn -- ./app arg          launch ./app, trace it until it exits
  wprobe run prog.rpn -p 1234               attach to every thread of process 1234
  wprobe run -e 'uprobe:./app:f { printf(\"%d\\n\", arg0); }' -c ./app
  wprobe run script.bt -c ./app             bpftrace's language, from a file
  wprobe run --event 'p:open libc:open path=+0(%di):string' -c ./app
  wprobe run handler.wat --probe 'target_fn=on_call' -- ./app
  wprobe run prog.rpn --format json -o out.jsonl -- ./app
  wprobe run -l 'uprobe:./app:*'            list what can be probed

Records go to standard output (or -o FILE), the summary to standard error.
SIGINT, SIGTERM or SIGHUP stop tracing and leave the process as it was.";

/// `wprobe run`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = RUN_EXAMPLES,
    // bpftrace's `USAGE:` heading (its suite checks `-h` by it).
    help_template = "{before-help}{about-with-newline}\nUSAGE:\n    {usage}\n\n{all-args}{after-help}"
)]
pub struct RunArgs {
    /// Probe programs: .rpn (compiled on the fly), .wasm or .wat, or .bt
    /// (bpftrace's language); with -l, the pattern to list.
    pub programs: Vec<PathBuf>,
    /// A program in bpftrace's language (`-e 'uprobe:./prog:f { @[comm] = count(); }'`).
    #[arg(short = 'e', value_name = "PROGRAM")]
    pub program_text: Option<String>,
    /// A probe event in uprobe_events syntax (repeatable):
    /// `p[:NAME] MODULE:SYM[+OFF] [FIELD=FETCHARG[:TYPE] ...]`, `r[:NAME] ...`.
    #[arg(long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// The command to trace, as one string split on spaces (bpftrace's -c;
    /// the same as giving it after `--`).
    #[arg(short = 'c', value_name = "CMD", conflicts_with_all = ["command", "pid"])]
    pub cmd: Option<String>,
    /// List the probe-able functions matching the pattern (`uprobe:BIN:GLOB`).
    #[arg(short = 'l')]
    pub list: bool,
    /// With -l: each function's arguments from DWARF (`-lv`).
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Attach to this running process instead of launching a command
    /// (with neither, a one-liner's probes are system-wide: they fire in
    /// every process that runs the probed files, through --transport perf).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<i32>,
    /// Follow fork/vfork/exec children (without it children are detached, their inherited breakpoints removed).
    #[arg(short = 'f', long = "follow")]
    pub follow: bool,
    /// Only probes of these groups (repeatable).
    #[arg(long = "group", value_name = "G")]
    pub groups: Vec<String>,
    /// Only probes of these types (repeatable).
    #[arg(long = "type", value_name = "T")]
    pub types: Vec<String>,
    /// How the programs are built and run.
    #[command(flatten)]
    pub opts: ProgramOpts,
    /// Output format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t)]
    pub format: crate::out::format::Format,
    /// Write records to FILE instead of standard output (where, without
    /// it, they share the terminal with the command's own output).
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Start each text record with the seconds since tracing began
    /// (`1.234567`); JSON records always carry `time_ns`.
    #[arg(short = 't', long = "timestamps")]
    pub timestamps: bool,
    /// How text records write numbers: `auto` (below 100,000 in decimal,
    /// others in hex), `hex` or `dec`.
    #[arg(long, value_name = "RADIX", value_enum, default_value_t)]
    pub radix: crate::out::format::Radix,
    /// Arm breakpoints even where the byte differs from `opcode =`.
    #[arg(long)]
    pub no_verify_opcodes: bool,
    /// What a handler run in the target does when the record ring is full
    /// (in-process transport): `block` waits for wprobe to make room (at
    /// most a second per run; nothing is lost to a burst, the program is
    /// slowed to wprobe's pace), `drop` drops the run's records at once and
    /// counts them (`dropped`; the program never waits).
    #[arg(long, value_name = "POLICY", value_enum, default_value_t)]
    pub ring_full: crate::transport::RingFull,
    /// How probes reach the target and hits reach the handlers.
    #[arg(long, value_name = "TRANSPORT", default_value = crate::plan::AUTO, value_parser = transport_names())]
    pub transport: String,
    /// Bind a handler export to a breakpoint, for modules without a manifest
    /// (repeatable): `[MODULE:]SYMBOL[±N]=EXPORT` or `[MODULE:]NUMBER=EXPORT`
    /// (a link-time address, as `objdump -d` shows it; like `offset =`), or
    /// `@NUMBER=EXPORT` / `@SYMBOL[±N]=EXPORT` (a run-time address; like
    /// `address =`). MODULE is a path or a base name; without it, the traced
    /// executable.
    #[arg(long = "probe", value_name = "LOCATION=EXPORT")]
    pub probes: Vec<String>,
    /// `--metrics ADDR` and its options.
    #[command(flatten)]
    pub metrics: crate::out::metrics::MetricsArgs,
    /// bpftrace's -q: no `Attaching N probes...` line.
    #[arg(short = 'q')]
    pub quiet: bool,
    /// bpftrace's --unsafe: allow `system()` in one-liners.
    #[arg(long = "unsafe")]
    pub unsafe_calls: bool,
    /// Show C++ and Rust names in `ustack`, `usym` and `func` output as
    /// their symbols (demangled by default; bpftrace's `cpp_demangle = 0`).
    #[arg(long)]
    pub no_demangle: bool,
    /// bpftrace's --usdt-file-activation: raise USDT semaphores in the
    /// traced processes. wprobe always does (in every process it traces,
    /// launched, attached or forked; with no -c/-p, in every process
    /// mapping the file, through the kernel), so the flag changes nothing
    /// but is accepted.
    #[arg(long = "usdt-file-activation")]
    pub usdt_file_activation: bool,
    /// bpftrace's --no-warnings: no warnings from the one-liner front end.
    #[arg(long)]
    pub no_warnings: bool,
    /// bpftrace's --dry-run: compile and load the program, run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// bpftrace's --include FILE: C definitions for a one-liner (as if
    /// `#include`d at its top).
    #[arg(long = "include", value_name = "FILE")]
    pub c_includes: Vec<PathBuf>,
    /// Positional parameters of a one-liner (`$1`, `$2`, ..., `$#`): the
    /// words after `-e PROGRAM` or after a `.bt` file (set by
    /// `oneliner::normalize`, not a flag).
    #[arg(skip)]
    pub params: Vec<String>,
    /// The command to launch (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

impl RunArgs {
    /// What loading the programs reads of these arguments.
    pub fn program_args(&self) -> ProgramArgs<'_> {
        ProgramArgs {
            programs: &self.programs,
            probes: &self.probes,
            opts: &self.opts,
            command: &self.command,
            pid: self.pid,
        }
    }
}
