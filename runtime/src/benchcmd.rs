//! `wprobe bench`: how long each handler of a program takes, without
//! stopping anything. Every probe's handler runs N times on a synthetic hit
//! (registers zero and no memory, or the registers and the memory a real hit
//! of the target showed the handler, with `-- CMD`), timed in batches; the
//! report gives, per probe, the median and spread of the time per run, the
//! fuel used, and the records and bytes produced per run. `--interp` runs the
//! reference interpreter on the same hits for `.rpn` programs.

use crate::cli::BenchArgs;
use crate::handlers::{RunOutcome, Runner};
use crate::load::LoadedModule;
use hostabi::Outcome;
use hostabi::manifest::{LocationKind, ProbeSpec};
use rpn2wasm::ast::Program;
use rpn2wasm::interp::{self, Limits, ProgramState};
use rpn2wasm::model::ModelEnv;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Number of timed batches the iterations are split into.
pub const BATCHES: u64 = 25;

/// A program to benchmark: the loaded module and, for `.rpn`, its AST.
pub struct BenchProgram {
    /// Label (file stem).
    pub label: String,
    /// The module.
    pub module: LoadedModule,
    /// The checked program, for `--interp`.
    pub ast: Option<Program>,
}

/// Timing of one engine on one probe.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Median time per run over the batches, ns.
    pub median_ns: f64,
    /// 10th percentile of the batch means, ns.
    pub p10_ns: f64,
    /// 90th percentile of the batch means, ns.
    pub p90_ns: f64,
    /// Runs timed.
    pub runs: u64,
}

/// What one run of a handler did (measured on an untimed run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFacts {
    /// How it ended (`exit 0`, `fuel exhausted`, `trap: …`).
    pub outcome: String,
    /// Fuel consumed (compiled engine), or instructions executed (interpreter).
    pub work: u64,
    /// Records produced.
    pub records: u64,
    /// Record data bytes produced.
    pub bytes: u64,
}

/// One row of the report.
#[derive(Clone, Debug)]
pub struct Row {
    /// Program label.
    pub program: String,
    /// Probe index in the program.
    pub probe: usize,
    /// Where the probe is, as written (`module:symbol+off`).
    pub location: String,
    /// `compiled` or `interp`.
    pub engine: &'static str,
    /// Timing.
    pub timing: Timing,
    /// What a run did.
    pub facts: RunFacts,
}

/// Loads `path` for benchmarking: `.rpn` compiled (AST kept), `.wasm`/`.wat`
/// as is; wasmtime's compilation taken from `cache`, as for `wprobe run`.
pub fn load_bench_program_with_cache(
    engine: &wasmtime::Engine,
    path: &Path,
    a: &BenchArgs,
    cache: &crate::cache::Cache,
) -> Result<BenchProgram, String> {
    let label = crate::programs::program_label(path);
    let (bytes, ast) = if crate::btrun::is_bt(path) {
        let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let wasm = crate::btrun::compile_text(
            &path.display().to_string(),
            &String::from_utf8_lossy(&text),
            &bt2wasm::Options::default(),
        )?;
        (wasm, None)
    } else if path.extension().is_some_and(|e| e == "rpn") {
        let (wasm, program) = crate::programs::compile_rpn_for(path, &a.opts, &a.command)?;
        (wasm, Some(program))
    } else {
        (crate::programs::read_module_file(path)?, None)
    };
    let (module, outcome) = crate::load::load_cached(engine, &bytes, Some(path), None, cache)
        .map_err(|e| format!("loading {}: {e}", path.display()))?;
    crate::programs::debug_cache_outcome(path, &outcome);
    Ok(BenchProgram { label, module, ast })
}

/// The location of a probe as the user wrote it.
pub fn location_text(module: &str, p: &ProbeSpec) -> String {
    let mut s = String::new();
    if p.location.kind == LocationKind::Address {
        s.push('@');
    } else {
        let _ = write!(s, "{module}:");
    }
    match &p.location.symbol {
        Some(sym) if p.location.addend != 0 => {
            let _ = write!(s, "{sym}+{:#x}", p.location.addend);
        }
        Some(sym) => s.push_str(sym),
        None => {
            let _ = write!(s, "{:#x}", p.location.addend);
        }
    }
    s
}

fn outcome_text(o: &RunOutcome) -> String {
    match o {
        RunOutcome::Returned(o) => match o {
            Outcome::Exit => "exit",
            Outcome::Abort => "abort",
            Outcome::Remove => "remove",
            Outcome::DebuggerHandoff => "exit 1 (debugger hand-off)",
            Outcome::CrashDump => "exit 2 (crash dump)",
            Outcome::CoreDump => "exit 3 (core dump)",
            Outcome::Uncaught => "uncaught exception",
            Outcome::BudgetExceeded => "instruction budget exceeded",
            Outcome::Stop => "stop (exit())",
        }
        .into(),
        RunOutcome::FuelExhausted => "fuel exhausted".into(),
        RunOutcome::Trapped(m) => format!("trap: {m}"),
        RunOutcome::Interrupted => "interrupted".into(),
    }
}

/// Median and 10th/90th percentiles of per-run times (ns) of the batches.
pub fn summarize(mut per_run: Vec<f64>, runs: u64) -> Timing {
    per_run.sort_by(f64::total_cmp);
    let pick = |q: f64| -> f64 {
        if per_run.is_empty() {
            return 0.0;
        }
        let i = ((per_run.len() - 1) as f64 * q).round() as usize;
        per_run[i]
    };
    Timing {
        median_ns: pick(0.5),
        p10_ns: pick(0.1),
        p90_ns: pick(0.9),
        runs,
    }
}

/// Times `f` over `iterations` runs split into [`BATCHES`] batches, after a warm-up.
pub fn time_batches(iterations: u64, mut f: impl FnMut()) -> Timing {
    let iterations = iterations.max(1);
    let batches = BATCHES.min(iterations);
    let per_batch = iterations / batches;
    for _ in 0..per_batch.min(1000) {
        f();
    }
    let mut per_run = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        let t0 = Instant::now();
        for _ in 0..per_batch {
            f();
        }
        per_run.push(t0.elapsed().as_nanos() as f64 / per_batch as f64);
    }
    summarize(per_run, batches * per_batch)
}

/// Benchmarks every probe of `programs` on copies of its hit (`hit_of(program,
/// probe)`, `None`: skipped with a note); the compiled
/// engine always, the interpreter too when `interp` (for `.rpn` programs).
pub fn bench_programs(
    engine: &wasmtime::Engine,
    programs: &[BenchProgram],
    hit_of: &dyn Fn(usize, usize) -> Option<ModelEnv>,
    iterations: u64,
    fuel: Option<u64>,
    interp: bool,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let gvars = programs
        .iter()
        .map(|p| p.module.manifest.gvars as usize)
        .max()
        .unwrap_or(0);
    for (pn, p) in programs.iter().enumerate() {
        let m = &p.module.manifest;
        for (i, spec) in m.probes.iter().enumerate() {
            let location = location_text(&m.module, spec);
            let Some(hit) = hit_of(pn, i) else {
                crate::elog!(
                    "wprobe bench: probe {} of {} ({location}) was not hit by the command: not measured",
                    i,
                    p.label
                );
                continue;
            };
            // Compiled: a runner of its own (fresh variables), one untimed run for the facts.
            let mut env = hit.clone();
            env.with_gvars(gvars);
            let mut runner = Runner::new(engine, env)?;
            let prog = runner.add(&p.module, fuel)?;
            let budget = runner.programs[prog].fuel;
            let out = runner.run(prog, i);
            let left = runner.store.get_fuel().unwrap_or(0);
            let sink = &runner.store.data().sink;
            let facts = RunFacts {
                outcome: outcome_text(&out),
                work: budget.saturating_sub(left),
                records: sink.records.len() as u64,
                bytes: sink.bytes.len() as u64,
            };
            let timing = time_batches(iterations, || {
                let d = runner.store.data_mut();
                d.sink.clear();
                d.env.reg_writes.clear();
                d.env.mem_writes.clear();
                std::hint::black_box(runner.run(prog, i));
            });
            rows.push(Row {
                program: p.label.clone(),
                probe: i,
                location: location.clone(),
                engine: "compiled",
                timing,
                facts,
            });
            if !interp {
                continue;
            }
            let Some(ast) = &p.ast else { continue };
            let mut env = hit.clone();
            env.with_gvars(gvars);
            let mut state = ProgramState::new(ast);
            let limits = Limits::default();
            let r = interp::run(ast, i, &mut state, &mut env, &limits);
            let facts = RunFacts {
                outcome: outcome_text(&RunOutcome::Returned(r.outcome)),
                work: r.insns,
                records: r.records.len() as u64,
                bytes: r.records.iter().map(|r| r.data.len() as u64).sum(),
            };
            let timing = time_batches(iterations, || {
                env.reg_writes.clear();
                env.mem_writes.clear();
                std::hint::black_box(interp::run(ast, i, &mut state, &mut env, &limits));
            });
            rows.push(Row {
                program: p.label.clone(),
                probe: i,
                location,
                engine: "interp",
                timing,
                facts,
            });
        }
    }
    Ok(rows)
}

/// Renders the report as an aligned text table.
pub fn render_text(rows: &[Row]) -> String {
    let head = [
        "PROGRAM",
        "PROBE",
        "LOCATION",
        "ENGINE",
        "MEDIAN_NS",
        "P10_NS",
        "P90_NS",
        "WORK/RUN",
        "RECORDS/RUN",
        "BYTES/RUN",
        "OUTCOME",
    ];
    let mut table: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for r in rows {
        table.push(vec![
            r.program.clone(),
            r.probe.to_string(),
            r.location.clone(),
            r.engine.to_string(),
            format!("{:.1}", r.timing.median_ns),
            format!("{:.1}", r.timing.p10_ns),
            format!("{:.1}", r.timing.p90_ns),
            r.facts.work.to_string(),
            r.facts.records.to_string(),
            r.facts.bytes.to_string(),
            r.facts.outcome.clone(),
        ]);
    }
    let cols = head.len();
    let width: Vec<usize> = (0..cols)
        .map(|c| table.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    let mut s = String::new();
    for row in &table {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == cols {
                line.push_str(cell);
            } else if (4..10).contains(&c) {
                let _ = write!(line, "{cell:>w$}  ", w = width[c]);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = width[c]);
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

/// Renders the report as one JSON object per row.
pub fn render_json(rows: &[Row]) -> String {
    let mut s = String::new();
    for r in rows {
        let v = serde_json::json!({
            "program": r.program,
            "probe": r.probe,
            "location": r.location,
            "engine": r.engine,
            "median_ns": r.timing.median_ns,
            "p10_ns": r.timing.p10_ns,
            "p90_ns": r.timing.p90_ns,
            "runs": r.timing.runs,
            "work_per_run": r.facts.work,
            "records_per_run": r.facts.records,
            "bytes_per_run": r.facts.bytes,
            "outcome": r.facts.outcome,
        });
        s.push_str(&v.to_string());
        s.push('\n');
    }
    s
}

/// Runs `wprobe bench`.
pub fn bench(mut a: BenchArgs) -> ExitCode {
    if let Some(text) = a.program_text.take() {
        match crate::btrun::bench_program_file(&text) {
            Ok(p) => a.programs.push(p),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    }
    if a.end_to_end {
        crate::elog!(
            "wprobe bench: {} runs of each configuration (medians); per hit = (traced - untraced) / hits",
            a.repeat.max(1)
        );
        let rows = end_to_end(&a);
        let _ = crate::output::print_stdout(&render_end_to_end(&rows));
        return if rows
            .iter()
            .any(|r| r.mode != "untraced" && r.error.is_none())
        {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    let engine = match crate::programs::cli_engine() {
        Ok(e) => e,
        Err(code) => return code,
    };
    let cache = match crate::cache::Cache::for_cli(a.opts.no_cache) {
        Ok(c) => c,
        Err(e) => {
            crate::elog!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let programs = match crate::programs::load_each(&a.programs, |p| {
        load_bench_program_with_cache(&engine, p, &a, &cache)
    }) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let captured = if a.command.is_empty() {
        crate::elog!(
            "wprobe bench: {} iterations per probe on a synthetic hit (registers 0, no memory); WORK is fuel for compiled runs, instructions for interpreted ones",
            a.iterations
        );
        None
    } else {
        match capture(&engine, &a, &programs) {
            Ok(c) => {
                crate::elog!(
                    "wprobe bench: {} iterations per probe on the first hit of each probe in `{}` (its registers and a memory image); WORK is fuel for compiled runs, instructions for interpreted ones",
                    a.iterations,
                    a.command[0].to_string_lossy()
                );
                Some(c)
            }
            Err(e) => {
                crate::elog!("error: {e}");
                return ExitCode::from(1);
            }
        }
    };
    let hit_of = |prog: usize, probe: usize| -> Option<ModelEnv> {
        match &captured {
            None => Some(ModelEnv::new()),
            Some(c) => c.get(&(prog, probe)).cloned(),
        }
    };
    let rows = match bench_programs(
        &engine,
        &programs,
        &hit_of,
        a.iterations,
        a.opts.fuel,
        a.interp,
    ) {
        Ok(r) => r,
        Err(e) => {
            crate::elog!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let text = if a.format == "json" {
        render_json(&rows)
    } else {
        render_text(&rows)
    };
    let _ = crate::output::print_stdout(&text);
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarize_picks_median_and_deciles() {
        let t = summarize((1..=11).map(|x| x as f64).collect(), 110);
        assert_eq!(
            (t.median_ns, t.p10_ns, t.p90_ns, t.runs),
            (6.0, 2.0, 10.0, 110)
        );
    }

    /// Every program option of `bench --end-to-end` reaches the traced
    /// `wprobe run`, which parses it back to the same values.
    #[test]
    fn end_to_end_passes_the_program_options_on_to_run() {
        use crate::cli::{Cli, Command};
        use clap::Parser;
        use std::path::PathBuf;
        let bench = Cli::try_parse_from([
            "wprobe",
            "bench",
            "--end-to-end",
            "--no-cache",
            "--fuel",
            "777",
            "-D",
            "A=1",
            "-D",
            "B",
            "-I",
            "inc",
            "-I",
            "/x/y",
            "p1.rpn",
            "p2.wasm",
            "--",
            "cmd",
            "arg 1",
            "-D",
        ])
        .unwrap();
        let Command::Bench(b) = bench.command else {
            panic!("not bench");
        };
        let argv = traced_argv(
            &b,
            std::path::Path::new("/bin/wprobe"),
            "perf",
            std::path::Path::new("/tmp/r.jsonl"),
        );
        let Command::Run(r) = Cli::try_parse_from(&argv).unwrap().command else {
            panic!("not run: {argv:?}");
        };
        assert_eq!(argv[0], "/bin/wprobe");
        assert_eq!(r.transport, "perf");
        assert_eq!(
            (r.format.as_str(), r.output),
            ("json", Some("/tmp/r.jsonl".into()))
        );
        assert!(r.opts.no_cache);
        assert_eq!(r.opts.fuel, Some(777));
        assert_eq!(r.opts.define, ["A=1", "B"]);
        assert_eq!(
            r.opts.include,
            [PathBuf::from("inc"), PathBuf::from("/x/y")]
        );
        assert_eq!(
            r.programs,
            [PathBuf::from("p1.rpn"), PathBuf::from("p2.wasm")]
        );
        assert_eq!(r.command, ["cmd", "arg 1", "-D"]);
    }

    #[test]
    fn time_batches_runs_exactly_the_timed_iterations_plus_warm_up() {
        let mut n = 0u64;
        let t = time_batches(1000, || n += 1);
        assert_eq!(t.runs, 1000);
        assert_eq!(n, 1000 + 40);
    }
}

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
    use crate::session::{ProgramInput, RunOptions, Session};
    use crate::transport::{OpenOptions, Target, ptrace};
    let inputs = programs
        .iter()
        .map(|p| ProgramInput {
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
        format: crate::format::Format::Text,
    };
    let mut session = Session::new(engine, inputs, opts, Box::new(std::io::sink()))
        .map_err(|e| format!("{e:#}"))?;
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
            registers: crate::regscan::RegsRead::All,
        },
    );
    let _ = nix::unistd::dup2_stdout(&saved);
    let mut tracer = launched?;
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

/// One measured configuration of `--end-to-end`.
#[derive(Clone, Debug)]
pub struct EndToEnd {
    /// `untraced`, or the transport.
    pub mode: String,
    /// Median wall time of the command, ns.
    pub wall_ns: f64,
    /// Median CPU time of the command and its tracer (user + system), ns.
    pub cpu_ns: f64,
    /// Probe hits reported by the run (0 untraced); `None` when the runs disagreed.
    pub hits: Option<u64>,
    /// Why the mode could not be measured.
    pub error: Option<String>,
}

/// Runs `argv` once with stdout and stdin to /dev/null; returns its exit
/// status, wall time and the CPU time it and its descendants used.
fn timed_run(argv: &[std::ffi::OsString]) -> std::io::Result<(String, f64, f64)> {
    use std::process::{Command, Stdio};
    let before = children_cpu_ns();
    let t0 = Instant::now();
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    let wall = t0.elapsed().as_nanos() as f64;
    // The first error line says why a traced run failed.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = stderr.lines().find(|l| l.starts_with("error")).map_or_else(
        || out.status.to_string(),
        |l| l.strip_prefix("error: ").unwrap_or(l).to_string(),
    );
    Ok((why, wall, children_cpu_ns() - before))
}

/// CPU time (user + system) of the waited-for descendants of this process, ns.
fn children_cpu_ns() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    use nix::sys::time::TimeValLike;
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        (u.user_time().num_microseconds() + u.system_time().num_microseconds()) as f64 * 1e3
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// The `hits` of the final `stats` line of a JSON-lines output file.
fn stats_hits(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let last = text
        .lines()
        .rev()
        .find(|l| l.contains("\"kind\":\"stats\""))?;
    let v: serde_json::Value = serde_json::from_str(last).ok()?;
    v["hits"].as_u64()
}

/// The `wprobe run` command line of the traced runs of `--end-to-end`: the
/// program options of the bench (`--no-cache`, `--fuel`, `-D`, `-I`) are
/// passed on, and the records go to `records` as JSON lines.
fn traced_argv(
    a: &BenchArgs,
    me: &std::path::Path,
    transport: &str,
    records: &std::path::Path,
) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = vec![
        me.into(),
        "run".into(),
        "--transport".into(),
        transport.into(),
        "--format".into(),
        "json".into(),
        "-o".into(),
        records.into(),
    ];
    if a.opts.no_cache {
        argv.push("--no-cache".into());
    }
    if let Some(f) = a.opts.fuel {
        argv.push("--fuel".into());
        argv.push(f.to_string().into());
    }
    for d in &a.opts.define {
        argv.push("-D".into());
        argv.push(d.into());
    }
    for i in &a.opts.include {
        argv.push("-I".into());
        argv.push(i.into());
    }
    argv.extend(a.programs.iter().map(|p| p.clone().into_os_string()));
    argv.push("--".into());
    argv.extend(a.command.iter().cloned());
    argv
}

/// Measures the command untraced and traced under each transport.
pub fn end_to_end(a: &BenchArgs) -> Vec<EndToEnd> {
    let mut out = Vec::new();
    let repeat = a.repeat.max(1);
    let (mut walls, mut cpus) = (Vec::new(), Vec::new());
    let mut error = None;
    for _ in 0..repeat {
        match timed_run(&a.command) {
            Ok((_, w, c)) => {
                walls.push(w);
                cpus.push(c);
            }
            Err(e) => {
                error = Some(format!("running {}: {e}", a.command[0].to_string_lossy()));
                break;
            }
        }
    }
    out.push(EndToEnd {
        mode: "untraced".into(),
        wall_ns: median(walls),
        cpu_ns: median(cpus),
        hits: Some(0),
        error,
    });
    let me = std::env::current_exe().unwrap_or_else(|_| "wprobe".into());
    let records = std::env::temp_dir().join(format!("wprobe-bench-{}.jsonl", std::process::id()));
    let all: Vec<String> = crate::transport::TRANSPORTS
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    let transports = if a.transports.is_empty() {
        &all
    } else {
        &a.transports
    };
    for transport in transports {
        let argv = traced_argv(a, &me, transport, &records);
        let (mut walls, mut cpus, mut hits) = (Vec::new(), Vec::new(), Vec::new());
        let mut error = None;
        for _ in 0..repeat {
            let _ = std::fs::remove_file(&records);
            match timed_run(&argv) {
                Ok((why, w, c)) => match stats_hits(&records) {
                    Some(h) => {
                        walls.push(w);
                        cpus.push(c);
                        hits.push(h);
                    }
                    None => {
                        error = Some(why);
                        break;
                    }
                },
                Err(e) => {
                    error = Some(format!("running wprobe: {e}"));
                    break;
                }
            }
        }
        let agreed = hits
            .first()
            .copied()
            .filter(|h| hits.iter().all(|x| x == h));
        out.push(EndToEnd {
            mode: transport.clone(),
            wall_ns: median(walls),
            cpu_ns: median(cpus),
            hits: if error.is_some() { None } else { agreed },
            error,
        });
    }
    let _ = std::fs::remove_file(&records);
    out
}

/// Renders the end-to-end table: per-hit overhead against the untraced run.
pub fn render_end_to_end(rows: &[EndToEnd]) -> String {
    let base = rows.first().cloned();
    let mut s = format!(
        "{:<10}  {:>10}  {:>12}  {:>12}  {:>16}  {:>16}\n",
        "MODE", "HITS", "WALL_MS", "CPU_MS", "WALL_NS/HIT", "CPU_NS/HIT"
    );
    for r in rows {
        if let Some(e) = &r.error {
            let _ = writeln!(s, "{:<10}  unavailable: {e}", r.mode);
            continue;
        }
        let hits = r.hits.map_or("varied".to_string(), |h| h.to_string());
        let per_hit = |traced: f64, untraced: f64| match (r.hits, r.mode == "untraced") {
            (_, true) => "-".to_string(),
            (Some(h), false) if h > 0 => format!("{:.0}", (traced - untraced) / h as f64),
            _ => "n/a".to_string(),
        };
        let (bw, bc) = base.as_ref().map_or((0.0, 0.0), |b| (b.wall_ns, b.cpu_ns));
        let _ = writeln!(
            s,
            "{:<10}  {:>10}  {:>12.2}  {:>12.2}  {:>16}  {:>16}",
            r.mode,
            hits,
            r.wall_ns / 1e6,
            r.cpu_ns / 1e6,
            per_hit(r.wall_ns, bw),
            per_hit(r.cpu_ns, bc)
        );
    }
    s
}
