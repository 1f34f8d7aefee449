//! `wprobe bench --end-to-end -- CMD`: the command timed untraced and
//! traced under each transport; the overhead per hit (the slope is the
//! caller's business: `benches/` runs two call counts).

use super::BenchArgs;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

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
    // Why a traced run failed: the first compiler diagnostic (`file:line:
    // col: error[CODE]: …`) when there is one, else the first error line.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = stderr
        .lines()
        .find(|l| l.contains(": error["))
        .or_else(|| stderr.lines().find(|l| l.starts_with("error")))
        .map_or_else(
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
pub(crate) fn traced_argv(
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
    // `auto` (what a run without --transport gets) and every transport.
    let all: Vec<String> = std::iter::once(crate::plan::AUTO)
        .chain(crate::transport::TRANSPORTS.iter().map(|t| t.name))
        .map(String::from)
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
