//! `wprobe bench`: how long each handler of a program takes, without
//! stopping anything. Every probe's handler runs N times on a synthetic hit
//! (registers zero and no memory, or the registers and the memory a real hit
//! of the target showed the handler, with `-- CMD`), timed in batches; the
//! report gives, per probe, the median and spread of the time per run, the
//! fuel used, and the records and bytes produced per run. `--interp` runs the
//! reference interpreter on the same hits for `.rpn` programs.

mod capture;
mod end_to_end;
#[cfg(test)]
pub(crate) use end_to_end::traced_argv;

use std::path::PathBuf;

pub use self::capture::capture;
pub use self::end_to_end::{EndToEnd, end_to_end, render_end_to_end};

use crate::cmd::transport_names;
use crate::probe::programs::ProgramOpts;

use crate::wasm::load::LoadedModule;
use crate::wasm::runner::{RunOutcome, Runner};
use hostabi::Outcome;
use rpn2wasm::ast::Program;
use rpn2wasm::interp::{self, Limits, ProgramState};
use rpn2wasm::model::ModelEnv;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use crate::cmd::{CliError, CmdResult};
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
    cache: &crate::wasm::cache::Cache,
) -> Result<BenchProgram, String> {
    let label = crate::probe::programs::program_label(path);
    let (bytes, ast) = if crate::cmd::is_bt(path) {
        let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let wasm = crate::cmd::run::oneliner::compile_text(
            &path.display().to_string(),
            &String::from_utf8_lossy(&text),
            &bt2wasm::Options::default(),
        )?;
        (wasm, None)
    } else if path.extension().is_some_and(|e| e == "rpn") {
        let (wasm, program) = crate::probe::programs::compile_rpn_for(path, &a.opts, &a.command)?;
        (wasm, Some(program))
    } else {
        (crate::probe::programs::read_module_file(path)?, None)
    };
    let (module, outcome) = crate::wasm::load::load_cached(engine, &bytes, Some(path), None, cache)
        .map_err(|e| format!("loading {}: {e}", path.display()))?;
    crate::probe::programs::debug_cache_outcome(path, &outcome);
    Ok(BenchProgram { label, module, ast })
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
            let location = crate::cmd::location_text(&m.module, spec);
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
pub fn bench(mut a: BenchArgs) -> CmdResult {
    if let Some(text) = a.program_text.take() {
        match crate::cmd::run::oneliner::bench_program_file(&text) {
            Ok(p) => a.programs.push(p),
            Err(e) => {
                return Err(CliError::user(e.to_string()));
            }
        }
    }
    if a.end_to_end {
        crate::elog!(
            "wprobe bench: {} runs of each configuration (medians); per hit = (traced - untraced) / hits",
            a.repeat.max(1)
        );
        let rows = end_to_end(&a);
        let _ = crate::out::output::print_stdout(&render_end_to_end(&rows));
        return if rows
            .iter()
            .any(|r| r.mode != "untraced" && r.error.is_none())
        {
            Ok(ExitCode::SUCCESS)
        } else {
            Ok(ExitCode::from(1))
        };
    }
    let engine = crate::cmd::cli_engine()?;
    let cache = crate::wasm::cache::Cache::for_cli(a.opts.no_cache)
        .map_err(|e| CliError::user(e.to_string()))?;
    let programs = crate::cmd::load_each(&a.programs, |p| {
        load_bench_program_with_cache(&engine, p, &a, &cache)
    })?;
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
                return Err(CliError::user(e.to_string()));
            }
        }
    };
    let hit_of = |prog: usize, probe: usize| -> Option<ModelEnv> {
        match &captured {
            None => Some(ModelEnv::new()),
            Some(c) => c.get(&(prog, probe)).cloned(),
        }
    };
    let rows = bench_programs(
        &engine,
        &programs,
        &hit_of,
        a.iterations,
        a.opts.fuel,
        a.interp,
    )
    .map_err(|e| CliError::internal(format!("{e:#}")))?;
    let text = if a.format == crate::out::format::Format::Json {
        render_json(&rows)
    } else {
        render_text(&rows)
    };
    let _ = crate::out::output::print_stdout(&text);
    Ok(ExitCode::SUCCESS)
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

    #[test]
    fn time_batches_runs_exactly_the_timed_iterations_plus_warm_up() {
        let mut n = 0u64;
        let t = time_batches(1000, || n += 1);
        assert_eq!(t.runs, 1000);
        assert_eq!(n, 1000 + 40);
    }
}

/// Examples shown under `--help`.
const EXAMPLES: &str = "\
Examples:
  wprobe bench prog.rpn                          ns per handler run on a synthetic hit
  wprobe bench prog.rpn --interp                 the reference interpreter, for comparison
  wprobe bench prog.rpn -- ./prog                on a hit captured from a real run of ./prog
  wprobe bench prog.rpn --end-to-end -- ./prog   per-hit cost of each transport on ./prog";

/// `wprobe bench`.
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct BenchArgs {
    /// Probe programs: .rpn (compiled on the fly), .wasm, .wat or .bt.
    #[arg(required_unless_present = "program_text")]
    pub programs: Vec<PathBuf>,
    /// A program in bpftrace's language.
    #[arg(short = 'e', value_name = "PROGRAM")]
    pub program_text: Option<String>,
    /// Runs of each handler (split into timed batches after a warm-up).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub iterations: u64,
    /// Also run the reference interpreter on the same hit (.rpn programs).
    #[arg(long)]
    pub interp: bool,
    /// How the programs are built and run.
    #[command(flatten)]
    pub opts: ProgramOpts,
    /// Output format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t)]
    pub format: crate::out::format::Format,
    /// Instead of timing handlers alone, time the command (after `--`)
    /// untraced and traced under each transport, and report the overhead
    /// per hit (which includes wprobe's start-up: use a workload with many
    /// hits).
    #[arg(long, requires = "command")]
    pub end_to_end: bool,
    /// Runs of each configuration with `--end-to-end` (the median is reported).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeat: u32,
    /// Transports measured by `--end-to-end` (repeatable; default: every
    /// transport).
    #[arg(long = "transport", value_name = "TRANSPORT", value_parser = transport_names())]
    pub transports: Vec<String>,
    /// A command: with `--end-to-end`, the workload; otherwise the handlers
    /// run on the registers and memory of its first hit of each probe.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}
