//! `wprobe run`: load the programs (compiling `.rpn` on the fly), start or
//! attach to the target, arm, run the session, print the summary, and exit
//! with the traced command's status (128 + signal when it was killed).
//! `--transport ptrace` (default) or `perf` chooses the provider; the
//! session (handlers, statistics, output) is the same for both.

use crate::cli::RunArgs;
use crate::format::Format;
use crate::programs::load_program_with_cache;
use crate::provider::perf::{PerfOptions, PerfTracer};
use crate::provider::ptrace::{ExitStatus, TraceOptions, Tracer};
use crate::regscan::RegsRead;
use crate::session::{RunOptions, Session};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

fn exit_code(s: Option<ExitStatus>) -> ExitCode {
    match s {
        Some(ExitStatus::Code(c)) => ExitCode::from(c as u8),
        Some(ExitStatus::Signal(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
        None => ExitCode::SUCCESS,
    }
}

/// Runs the command.
pub fn run(a: RunArgs) -> ExitCode {
    let a = crate::btrun::normalize(a);
    if a.list {
        return crate::btrun::list(&a);
    }
    let oneliner = crate::btrun::active(&a);
    if a.programs.is_empty() && !oneliner {
        eprintln!(
            "error: give a program: a file (.rpn, .wasm, .wat, .bt), -e PROGRAM or --event EVENT"
        );
        return ExitCode::from(1);
    }
    if a.pid.is_none() && a.command.is_empty() && !oneliner {
        eprintln!("error: give the command to trace after `--`, or -p PID");
        return ExitCode::from(1);
    }
    let engine = match crate::programs::cli_engine() {
        Ok(e) => e,
        Err(code) => return code,
    };
    let cache = crate::cache::Cache::for_cli(a.opts.no_cache);
    let mut programs = match crate::programs::load_each(&a.programs, |p| {
        load_program_with_cache(&engine, p, &a, &cache)
    }) {
        Ok(x) => x,
        Err(code) => return code,
    };
    match crate::btrun::extra_programs(&engine, &a, &cache) {
        Ok(more) => programs.extend(more),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    }
    // Modules built by bt2wasm (or using maps, events or begin/end probes)
    // run with one-liner behaviour whatever file they came from.
    let oneliner = oneliner
        || programs
            .iter()
            .any(|p| crate::btrun::is_oneliner_module(&p.module));
    let out: Box<dyn Write> = match &a.output {
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => Box::new(std::io::BufWriter::new(f)),
            Err(e) => {
                eprintln!("error: creating {}: {e}", path.display());
                return ExitCode::from(1);
            }
        },
        None if std::io::stdout().is_terminal() => Box::new(std::io::stdout()),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    let opts = RunOptions {
        follow_forks: a.follow,
        verify_opcodes: !a.no_verify_opcodes,
        groups: a.groups.clone(),
        types: a.types.clone(),
        fuel: a.opts.fuel,
        format: if a.format == "json" {
            Format::Json
        } else {
            Format::Text
        },
    };
    let topts = TraceOptions {
        follow_forks: a.follow,
        verify_opcodes: !a.no_verify_opcodes,
    };
    let perf = a.transport == "perf";
    // The registers the perf transport samples (the scan runs for it only).
    let regs_read = if perf {
        programs
            .iter()
            .map(|p| p.module.registers_read())
            .fold(RegsRead::Only(0), RegsRead::union)
    } else {
        RegsRead::All
    };
    let mut session = match Session::new(&engine, programs, opts, out) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(1);
        }
    };
    if session.probe_count() == 0 && !(oneliner && session.probe_total() > 0) {
        eprintln!("error: no probe selected (check --group / --type)");
        return ExitCode::from(1);
    }
    if let Err(e) = session.check(perf) {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGPIPE,
    ] {
        if let Err(e) = signal_hook::flag::register(sig, stop.clone()) {
            eprintln!("error: installing a signal handler: {e}");
            return ExitCode::from(2);
        }
    }
    if oneliner {
        session.set_oneliner(a.format == "json", stop.clone(), 0);
        if a.pid.is_none() && a.command.is_empty() {
            if session.probe_count() > 0 {
                eprintln!(
                    "error: uprobes and watchpoints need a process: give -c CMD, a command after `--`, or -p PID (wprobe traces processes, not the whole system)"
                );
                return ExitCode::from(1);
            }
            return crate::btrun::run_without_target(session, &stop);
        }
    }
    if perf {
        return run_perf(&a, session, &stop, regs_read, oneliner);
    }
    let mut tracer = match a.pid {
        Some(pid) => {
            eprintln!(
                "wprobe: attaching to {pid}. Note: if wprobe is killed with SIGKILL, its breakpoints stay in the process and the next hit kills it; run `wprobe repair --pid {pid}` at once to restore the bytes (or use --transport perf, which patches nothing)."
            );
            Tracer::attach(pid, topts)
        }
        None => Tracer::launch(&a.command, topts),
    };
    let mut tracer = match tracer.as_mut() {
        Ok(_) => tracer.expect("checked"),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    // A diagnostic knob for measurements: which step-over path to use.
    if let Ok(p) = std::env::var("WPROBE_STEP_POLICY") {
        use crate::provider::ptrace::StepPolicy;
        match p.as_str() {
            "auto" => tracer.set_step_policy(StepPolicy::Auto),
            "no-emulation" => tracer.set_step_policy(StepPolicy::NoEmulation),
            "single-step" => tracer.set_step_policy(StepPolicy::SingleStepOnly),
            other => eprintln!(
                "wprobe: warning: WPROBE_STEP_POLICY={other} is not auto, no-emulation or single-step"
            ),
        }
    }
    let main = tracer.main_pid();
    let armed = session.arm(&mut tracer, main, true);
    if oneliner && armed == 0 && session.pending() == 0 && session.probe_count() == 0 {
        // Only begin/end/interval probes: nothing to arm.
    } else if armed == 0 && session.pending() == 0 {
        eprintln!("error: no probe could be armed in process {main}");
        let _ = tracer.detach_all();
        return ExitCode::from(1);
    }
    if oneliner {
        if a.pid.is_none() {
            session.set_child_pid(main as u64);
        }
        if let Some(p) = session.tick_period() {
            tracer.set_tick(p);
        }
        session.begin();
    }
    let mut status = match session.run(&mut tracer, &stop) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e:#}");
            let _ = tracer.detach_all();
            session.summary();
            return ExitCode::from(2);
        }
    };
    if oneliner {
        status = crate::btrun::finish(&mut session, a.pid.is_none().then_some(main), status);
    }
    session.summary();
    // A launched command handed off to a debugger is still our child (and
    // dies with us): wait for the debugging session to end.
    if a.pid.is_none() && status.is_none() && session.handed_off().contains(&main) {
        eprintln!("wprobe: waiting for process {main} (handed off to a debugger) to exit");
        use nix::sys::wait::{WaitStatus, waitpid};
        status = loop {
            match waitpid(nix::unistd::Pid::from_raw(main), None) {
                Ok(WaitStatus::Exited(_, c)) => break Some(ExitStatus::Code(c)),
                Ok(WaitStatus::Signaled(_, sig, _)) => break Some(ExitStatus::Signal(sig as i32)),
                Err(nix::errno::Errno::EINTR) if stop.load(std::sync::atomic::Ordering::SeqCst) => {
                    break None;
                }
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break None,
            }
        };
    }
    exit_code(status)
}

/// `--transport perf`: open the events, let the target run, handle samples.
fn run_perf(
    a: &RunArgs,
    mut session: Session,
    stop: &AtomicBool,
    regs_read: RegsRead,
    oneliner: bool,
) -> ExitCode {
    let opts = PerfOptions {
        follow_forks: a.follow,
        stack_bytes: if session.reads_memory() {
            crate::provider::perf::STACK_SNAPSHOT_BYTES
        } else {
            0
        },
        regs_mask: crate::provider::perf::regs_mask(regs_read, session.reads_memory()),
    };
    let tracer = match a.pid {
        Some(pid) => PerfTracer::attach(pid, opts),
        None => PerfTracer::launch(&a.command, opts),
    };
    let mut tracer = match tracer {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let main = tracer.main_pid();
    let mut armed = session.arm_perf(&mut tracer, main, true);
    if session.pending() > 0 {
        // Modules not mapped yet (a program a child execs, a library
        // loaded later): arm on the file, found by path or next to the
        // command, in the current directory or on PATH.
        let mut dirs: Vec<std::path::PathBuf> = Vec::new();
        if let Some(c) = a.command.first().map(std::path::Path::new)
            && let Some(d) = c.parent()
            && !d.as_os_str().is_empty()
        {
            dirs.push(d.to_path_buf());
        }
        dirs.push(".".into());
        if let Some(p) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&p));
        }
        armed += session.arm_perf_by_file(&mut tracer, main, &dirs, true);
    }
    if armed == 0 {
        eprintln!("error: no probe could be armed in process {main}");
        return ExitCode::from(1); // dropping the tracer kills a launched command that never ran
    }
    if session.pending() > 0 {
        eprintln!(
            "wprobe: warning: {} probe(s) not armed: their module is not mapped in process {main} \
             at its entry point and its file was not found; --transport perf arms probes once, \
             at start",
            session.pending()
        );
    }
    if oneliner {
        if a.pid.is_none() {
            session.set_child_pid(main as u64);
        }
        if let Some(p) = session.tick_period() {
            tracer.set_tick(p);
        }
        session.begin();
    }
    let mut status = match session.run_perf(&mut tracer, stop) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e:#}");
            session.summary();
            return ExitCode::from(2);
        }
    };
    if oneliner {
        status = crate::btrun::finish(&mut session, a.pid.is_none().then_some(main), status);
    }
    session.summary();
    exit_code(status)
}
