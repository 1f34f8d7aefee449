//! The runtime's real-process tests, one binary with a module per feature
//! (wasmtime's `tests/all` shape): real targets built with gcc, real
//! ptrace and perf, real wasmtime, the `wprobe` binary itself.
//!
//! The harness is libtest-mimic: a test that needs what the machine lacks
//! (root, perf, gdb, …; see [`support::case::Need`]) is reported as
//! `ignored`, with the reason printed first, and fails in CI (`CI=true`).
//! Filter and list as with any test binary (`cargo test -p runtime --test
//! all -- perf_transport`, `-- --list`).

mod support;

mod bench_cmd;
mod cache;
mod cli;
mod cli_goldens;
mod docs;
mod dynamic_processes;
mod guests;
mod heap;
mod inproc;
mod inproc_epilogues;
mod inproc_forks;
mod inproc_goto;
mod inproc_jumptables;
mod inproc_near;
mod inproc_safety;
mod inproc_tablecopy;
mod inproc_vforks;
mod inproc_whole;
mod layers;
mod logonfault;
mod metrics;
mod modules;
mod oneliner_runtime;
mod oneliners;
mod output;
mod perf_transport;
mod ptrace_breakpoints;
mod ptrace_libs_watch;
mod ptrace_processes;
mod return_probes;
mod sandbox;
mod scale;
mod system_wide;
mod trace;
mod trace_daemon;
mod trace_exceptions;
mod trace_ucontext;
mod tracer_death;
mod transport_seam;
mod usdt;
mod watchpoints;

fn main() {
    // The ptrace transport's attach mode starts its watchdog by running
    // the current executable as `__watchdog PID [--detached]` (wprobe's
    // hidden subcommand). Tests that attach through the library run in
    // this binary: here it is the watchdog, as wprobe would be.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("__watchdog") {
        let pid = argv.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
        let detached = argv.get(3).map(String::as_str) == Some("--detached");
        let code = runtime::transport::common::watchdog::run(pid, detached);
        std::process::exit(i32::from(code != std::process::ExitCode::SUCCESS));
    }
    let args = libtest_mimic::Arguments::from_args();
    let modules: &[&[support::case::Case]] = &[
        bench_cmd::CASES,
        cache::CASES,
        cli::CASES,
        docs::CASES,
        dynamic_processes::CASES,
        inproc_forks::CASES,
        guests::CASES,
        heap::CASES,
        inproc::CASES,
        inproc_goto::CASES,
        inproc_jumptables::CASES,
        inproc_near::CASES,
        inproc_safety::CASES,
        inproc_tablecopy::CASES,
        inproc_vforks::CASES,
        inproc_epilogues::CASES,
        inproc_whole::CASES,
        layers::CASES,
        logonfault::CASES,
        metrics::CASES,
        modules::CASES,
        oneliner_runtime::CASES,
        oneliners::CASES,
        output::CASES,
        perf_transport::CASES,
        ptrace_breakpoints::CASES,
        ptrace_libs_watch::CASES,
        ptrace_processes::CASES,
        return_probes::CASES,
        sandbox::CASES,
        scale::CASES,
        system_wide::CASES,
        trace::CASES,
        trace_daemon::CASES,
        trace_exceptions::CASES,
        trace_ucontext::CASES,
        tracer_death::CASES,
        transport_seam::CASES,
        usdt::CASES,
        watchpoints::CASES,
    ];
    let trials = modules
        .iter()
        .flat_map(|m| m.iter())
        .flat_map(|c| c.trials())
        .chain(cli_goldens::trials())
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    // The gcc builds and binary copies of this run (hundreds of MB) go
    // with it; a run that was killed leaves its directory to the next
    // run's sweep (`support::cli::scratch`).
    let _ = std::fs::remove_dir_all(support::cli::scratch_path());
    conclusion.exit();
}
