//! bpftrace's own runtime test suite (v0.23.5, `shared/conformance/`) run
//! against `wprobe run`: the in-scope tests (user-space probes and
//! probe-free language tests), adapted to a process tracer, with per group
//! the passes, the failures by class (wrong result, unclear error, clear
//! refusal) and the skips with their reasons. A ratchet
//! (`ratchet.txt`): the run fails when fewer tests pass than recorded
//! there, or when a test gives a wrong result that is not listed there.
//!
//! ```text
//! cargo test -p runtime --test conformance                 # everything, with the ratchet
//! cargo test -p runtime --test conformance -- tuples -v    # tests whose id contains `tuples`, each shown
//! cargo test -p runtime --test conformance -- --jobs 2 --report r.txt
//! ```
//!
//! Without the suite (a clone without `../shared`) it says so and passes;
//! in CI (`CI` set) that is a failure. The full per-test report goes to
//! `target/tmp/conformance/report.txt`.

mod exec;
mod progs;
mod report;
mod scope;
mod suite;
mod verdict;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The suite's folder beside the repository (`../shared/...`).
const SUITE_DIR: &str = "../shared/conformance/bpftrace-v0.23.5";

/// Command-line options.
struct Args {
    filters: Vec<String>,
    verbose: bool,
    jobs: usize,
    report: Option<PathBuf>,
    ratchet: bool,
}

fn args() -> Args {
    let mut a = Args {
        filters: Vec::new(),
        verbose: false,
        jobs: 4,
        report: None,
        ratchet: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(w) = it.next() {
        match w.as_str() {
            "-v" | "--verbose" => a.verbose = true,
            "--jobs" | "-j" => a.jobs = it.next().and_then(|n| n.parse().ok()).unwrap_or(4).max(1),
            "--report" => a.report = it.next().map(PathBuf::from),
            "--no-ratchet" => a.ratchet = false,
            // libtest's options, which cargo may pass: nothing to do.
            w if w.starts_with('-') => {}
            w => a.filters.push(w.to_string()),
        }
    }
    a
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

fn main() {
    let a = args();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let suite_dir = std::env::var_os("WPROBE_CONFORMANCE_SUITE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join(SUITE_DIR));
    if !suite_dir.join("runtime").is_dir() {
        let msg = format!(
            "conformance: bpftrace's suite is not at {} (it comes with the project's shared/ folder): skipped",
            suite_dir.display()
        );
        if in_ci() {
            eprintln!("{msg}; in CI (CI is set) the suite must be there");
            std::process::exit(1);
        }
        println!("{msg}");
        return;
    }
    let suite_dir = std::fs::canonicalize(&suite_dir).unwrap_or(suite_dir);
    match run(&a, &suite_dir, &repo) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("conformance: {e}");
            std::process::exit(2);
        }
    }
}

/// One test with what was decided about it.
pub struct Entry {
    /// The test.
    pub test: suite::Test,
    /// Its group (`None`: outside every group).
    pub group: Option<scope::Group>,
    /// What happened.
    pub result: report::Result,
}

fn run(a: &Args, suite_dir: &Path, repo: &Path) -> Result<bool, String> {
    verdict::self_check()?;
    let here = repo.join("runtime/tests/conformance");
    let listed = scope::read_listed(
        &std::fs::read_to_string(here.join("out_of_scope.txt")).map_err(|e| e.to_string())?,
    )?;
    let ratchet = report::Ratchet::read(
        &std::fs::read_to_string(here.join("ratchet.txt")).map_err(|e| e.to_string())?,
    )?;
    let tests = suite::read_all(&suite_dir.join("runtime"))?;
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("conformance");
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let (built, build_failures) = progs::build(suite_dir, &cache)?;
    let build_time = t0.elapsed();
    let work = cache.join(format!("work-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    for (link, to) in [
        ("runtime", suite_dir.join("runtime")),
        ("testprogs", built.join("testprogs")),
        ("testlibs", built.join("testlibs")),
    ] {
        std::os::unix::fs::symlink(&to, work.join(link)).map_err(|e| e.to_string())?;
    }
    let mut env: Vec<(String, String)> = Vec::new();
    env.push((
        "PATH".into(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
    ));
    let cache_dir = std::env::var("WPROBE_CACHE_DIR")
        .unwrap_or_else(|_| cache.join("module-cache").to_string_lossy().into_owned());
    env.push(("WPROBE_CACHE_DIR".into(), cache_dir));
    // As bpftrace's runner: the tracer prints a line once its probes are
    // attached.
    env.push(("__BPFTRACE_NOTIFY_PROBES_ATTACHED".into(), "1".into()));
    // `{{BPFTRACE}}` is wprobe through a link named `bpftrace`: tests
    // expect the tracer's own `comm` (in BEGIN) to be that name.
    let tracer = work.join("bin/bpftrace");
    std::fs::create_dir_all(work.join("bin")).map_err(|e| e.to_string())?;
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_wprobe"), &tracer).map_err(|e| e.to_string())?;
    let setting = exec::Setting {
        wprobe: tracer,
        work: work.clone(),
        env,
    };
    // Decide each test's scope; run the in-scope ones.
    let mut entries: Vec<Entry> = Vec::new();
    let mut queue = Vec::new();
    for t in tests {
        let selected =
            a.filters.is_empty() || a.filters.iter().any(|f| t.id().contains(f.as_str()));
        if !selected {
            continue;
        }
        let (group, result) = match scope::classify(&t, suite_dir) {
            scope::Scope::Out(o) => (None, report::Result::Outside(o)),
            scope::Scope::In(g) => match listed.iter().find(|l| l.id == t.id()) {
                Some(l) if l.accepted => (Some(g), report::Result::Skipped(l.reason.clone())),
                Some(l) => (
                    Some(g),
                    report::Result::Failed(
                        verdict::Class::Unclear,
                        format!(
                            "listed as out of scope for a reason that does not count: {}",
                            l.reason
                        ),
                        None,
                    ),
                ),
                None => {
                    queue.push(entries.len());
                    (Some(g), report::Result::Pending)
                }
            },
        };
        entries.push(Entry {
            test: t,
            group,
            result,
        });
    }
    let budgets = Mutex::new(std::collections::HashMap::<String, Duration>::new());
    // Tests of one suite run one at a time (they share file names and
    // programs); suites run side by side.
    let pending = Mutex::new((queue, std::collections::HashSet::<String>::new()));
    let results: Mutex<Vec<(usize, report::Result)>> = Mutex::new(Vec::new());
    let budget = Duration::from_secs(ratchet.suite_budget_s);
    // A system-wide test (`exec::system_wide`) runs alone: its probes
    // would fire in the processes of tests running alongside (and the
    // kernel's breakpoints in their code would refuse their own probes).
    let alone = |i: usize| {
        let e = &entries[i];
        exec::system_wide(&e.test, e.group.unwrap_or(scope::Group::Language))
    };
    const ALONE: &str = "\0system-wide";
    let take = || -> Option<Option<usize>> {
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.0.is_empty() {
            return None;
        }
        let (queue, busy) = &mut *p;
        if busy.contains(ALONE) {
            return Some(None);
        }
        let at = queue.iter().position(|&i| {
            !busy.contains(&entries[i].test.suite) && (!alone(i) || busy.is_empty())
        });
        Some(at.map(|k| {
            let i = queue.remove(k);
            busy.insert(entries[i].test.suite.clone());
            if alone(i) {
                busy.insert(ALONE.to_string());
            }
            i
        }))
    };
    let done = |i: usize| {
        let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
        p.1.remove(&entries[i].test.suite);
        p.1.remove(ALONE);
    };
    std::thread::scope(|sc| {
        for _ in 0..a.jobs {
            sc.spawn(|| {
                while let Some(next) = take() {
                    let Some(i) = next else {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    let e = &entries[i];
                    let used = budgets
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&e.test.suite)
                        .copied()
                        .unwrap_or_default();
                    let res = if used >= budget {
                        report::Result::Failed(
                            verdict::Class::Unclear,
                            format!(
                                "not run: suite `{}` used its {}s budget",
                                e.test.suite,
                                budget.as_secs()
                            ),
                            None,
                        )
                    } else {
                        let group = e.group.unwrap_or(scope::Group::Language);
                        let r = exec::run(&e.test, group, &setting, budget - used, i);
                        let res = report::Result::of(&e.test, r, &setting.work);
                        if let Some(el) = res.elapsed() {
                            *budgets
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .entry(e.test.suite.clone())
                                .or_default() += el;
                        }
                        res
                    };
                    done(i);
                    if a.verbose {
                        println!("{}", report::line(&e.test, &res));
                    }
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((i, res));
                }
            });
        }
    });
    for (i, r) in results.into_inner().unwrap_or_else(|e| e.into_inner()) {
        entries[i].result = r;
    }
    let _ = std::fs::remove_dir_all(&work);
    let summary = report::Summary::of(&entries);
    let text = report::full(
        &entries,
        &summary,
        &build_failures,
        build_time,
        t0.elapsed(),
    );
    let path = a.report.clone().unwrap_or_else(|| cache.join("report.txt"));
    let _ = std::fs::write(&path, &text);
    print!("{}", summary.render());
    println!("conformance: per-test report in {}", path.display());
    if !a.ratchet || !a.filters.is_empty() {
        return Ok(true);
    }
    Ok(ratchet.check(&entries, &summary))
}
