//! `wprobe bench -- CMD`: the first hit of each probe of a real run of the
//! command, captured under ptrace, for the handlers to be timed on.

use super::{BenchArgs, BenchProgram};
use rpn2wasm::model::ModelEnv;

/// Runs the command under ptrace until each probe has been hit once (or the
/// command ends) and returns each probe's first hit as a synthetic
/// environment, by (program, probe). The handlers run as in `wprobe run`
/// (their records are discarded); the command's output is discarded; it is
/// killed once every probe has been captured.
pub fn capture(
    engine: &wasmtime::Engine,
    a: &BenchArgs,
    programs: &[BenchProgram],
) -> Result<std::collections::HashMap<(usize, usize), ModelEnv>, String> {
    use crate::session::{LoadedProgram, RunOptions, Session};
    use crate::transport::{OpenOptions, Target, ptrace};
    let inputs = programs
        .iter()
        .map(|p| LoadedProgram {
            label: p.label.clone(),
            module: p.module.clone(),
        })
        .collect();
    let opts = RunOptions {
        follow_forks: false,
        verify_opcodes: true,
        groups: Vec::new(),
        types: Vec::new(),
        fuel: a.opts.fuel,
        format: crate::out::format::Format::Text,
        text: crate::out::format::TextStyle::default(),
    };
    let mut session = Session::new(engine, inputs, opts, Box::new(std::io::sink()))
        .map_err(|e| format!("{e:#}"))?;
    session.set_use_cache(!a.opts.no_cache);
    // The command's output would mix with the report: send it to /dev/null.
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let saved = nix::unistd::dup(std::io::stdout()).map_err(|e| format!("dup: {e}"))?;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("/dev/null: {e}"))?;
    let _ = nix::unistd::dup2_stdout(&null);
    // Ptrace: the handler reads the stopped thread's whole memory, which
    // is what the capture copies.
    let launched = (ptrace::INFO.open)(
        Target::Launch(&a.command),
        &OpenOptions {
            follow_forks: false,
            verify_opcodes: true,
            reads_memory: true,
            registers: crate::wasm::regscan::RegsRead::All,
            ring_full: Default::default(),
        },
    );
    let _ = nix::unistd::dup2_stdout(&saved);
    let mut tracer = launched.map_err(|e| e.to_string())?;
    let t = tracer.as_mut();
    let main = t.main_pid();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    session.enable_capture(done.clone());
    if session.arm(t, main, true) == 0 && session.pending() == 0 {
        t.kill_launched();
        let _ = t.detach();
        return Err(format!("no probe could be armed in process {main}"));
    }
    let status = session.run(t, &done).map_err(|e| format!("{e:#}"))?;
    if status.is_none() {
        // Stopped once every probe was captured: everything is detached.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(main), nix::sys::signal::SIGKILL);
    }
    Ok(session
        .take_capture()
        .into_iter()
        .filter_map(|(k, env)| env.map(|e| (k, e)))
        .collect())
}
