//! The one-liner table (`oneliners/table.txt`): bpftrace programs from its
//! reference guide and one-liner tutorial, restricted to user space, run by
//! `wprobe run -e` on the deterministic target `progs/bt_target.c`, each
//! with its exact expected output. Where bpftrace is installed the same
//! programs run under bpftrace too and the outputs are compared (after
//! putting ties of equal map values in one order: bpftrace leaves them in
//! hash-table order); a case marked `differs` says why it cannot match.
//! Without bpftrace the comparison says so and passes, except in CI
//! (`CI` set), which installs it.
//!
//! `BLESS=1` rewrites the expected outputs from wprobe's.

use crate::case;
use crate::support::case::{Case, Need};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(oneliner_table_gives_exact_output),
    case!(oneliner_table_matches_bpftrace, Need::Bpftrace, Need::Root),
];

use crate::support::cli::{gcc, output_within, progs, sym, wprobe};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One row of the table.
#[derive(Clone, Debug, Default)]
struct Row {
    name: String,
    args: Option<String>,
    opts: Vec<String>,
    /// Positional parameters, after the program (`$1`, `$2`, ...).
    params: Vec<String>,
    env: Vec<(String, String)>,
    bpftrace: String,
    program: String,
    expect: String,
}

fn table_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oneliners/table.txt")
}

fn parse_table(text: &str) -> Vec<Row> {
    let mut cases = Vec::new();
    let mut cur: Option<Row> = None;
    let mut in_expect = false;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("### ") {
            cases.extend(cur.take());
            cur = Some(Row {
                name: name.to_string(),
                ..Row::default()
            });
            in_expect = false;
            continue;
        }
        let Some(c) = cur.as_mut() else { continue };
        if in_expect {
            if let Some(l) = line.strip_prefix("| ") {
                c.expect.push_str(l);
                c.expect.push('\n');
            } else if line == "|" {
                c.expect.push('\n');
            } else if line == "\\ no newline" {
                c.expect.pop();
            }
            continue;
        }
        if let Some(v) = line.strip_prefix("args: ") {
            c.args = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("opts: ") {
            c.opts = v.split_whitespace().map(String::from).collect();
        } else if let Some(v) = line.strip_prefix("params: ") {
            c.params = v.split_whitespace().map(String::from).collect();
        } else if let Some(v) = line.strip_prefix("env: ") {
            let (k, val) = v.split_once('=').expect("env: K=V");
            c.env.push((k.to_string(), val.to_string()));
        } else if let Some(v) = line.strip_prefix("bpftrace: ") {
            c.bpftrace = v.to_string();
        } else if let Some(v) = line.strip_prefix("program: ") {
            c.program = v.to_string();
        } else if line == "---" {
            in_expect = true;
        }
    }
    cases.extend(cur);
    cases
}

fn render_table(cases: &[Row]) -> String {
    let mut s = String::from(
        "# One-liner table of runtime/tests/oneliners.rs (BLESS=1 rewrites the outputs).\n\
         # T is the target (progs/bt_target.c); ADDR(sym) its link-time symbol address.\n\n",
    );
    for c in cases {
        s += &format!("### {}\n", c.name);
        if let Some(a) = &c.args {
            s += &format!("args: {a}\n");
        }
        if !c.opts.is_empty() {
            s += &format!("opts: {}\n", c.opts.join(" "));
        }
        if !c.params.is_empty() {
            s += &format!("params: {}\n", c.params.join(" "));
        }
        for (k, v) in &c.env {
            s += &format!("env: {k}={v}\n");
        }
        s += &format!("bpftrace: {}\n", c.bpftrace);
        s += &format!("program: {}\n---\n", c.program);
        let mut lines: Vec<&str> = c.expect.split('\n').collect();
        let ends_nl = c.expect.ends_with('\n');
        if ends_nl {
            lines.pop();
        }
        for l in lines {
            if l.is_empty() {
                s += "|\n";
            } else {
                s += &format!("| {l}\n");
            }
        }
        if !ends_nl && !c.expect.is_empty() {
            s += "\\ no newline\n";
        }
        s += "\n";
    }
    s
}

fn target() -> PathBuf {
    gcc(
        "bt_target",
        &progs().join("bt_target.c"),
        &[
            "-O0",
            "-g",
            "-fno-omit-frame-pointer",
            "-no-pie",
            "-fcf-protection=none",
        ],
    )
}

/// The program text with `T` and `ADDR(sym)` filled in.
fn program_text(c: &Row, t: &Path) -> String {
    let mut p = c.program.replace("T:", &format!("{}:", t.display()));
    while let Some(i) = p.find("ADDR(") {
        let end = p[i..].find(')').map(|e| i + e).expect("ADDR(sym)");
        let name = &p[i + 5..end];
        p = format!("{}{:#x}{}", &p[..i], sym(t, name), &p[end + 1..]);
    }
    p
}

fn run_tool(tool: &str, c: &Row, t: &Path) -> (String, String, Option<i32>) {
    let mut cmd = if tool == "wprobe" {
        let mut w = wprobe();
        w.arg("run");
        w
    } else {
        Command::new("bpftrace")
    };
    cmd.args(&c.opts)
        .arg("-e")
        .arg(program_text(c, t))
        .args(&c.params);
    if let Some(a) = &c.args {
        cmd.arg("-c").arg(format!("{} {a}", t.display()));
    }
    for (k, v) in &c.env {
        cmd.env(k, v);
    }
    let o = output_within(cmd, 120);
    let out = String::from_utf8_lossy(&o.stdout).replace(&t.display().to_string(), "T");
    // bpftrace's warning on stderr about RLIMIT_MEMLOCK is not output.
    (
        out,
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code(),
    )
}

/// Runs `f` on every case, `threads` at a time.
fn each<R: Send>(cases: &[Row], threads: usize, f: impl Fn(&Row) -> R + Sync) -> Vec<R> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<R>>> =
        cases.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(c) = cases.get(i) else { return };
                    let r = f(c);
                    *results[i].lock().unwrap() = Some(r);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|m| m.into_inner().unwrap().expect("every case ran"))
        .collect()
}

fn oneliner_table_gives_exact_output() {
    let text = std::fs::read_to_string(table_path()).unwrap();
    let mut cases = parse_table(&text);
    assert!(cases.len() >= 40, "the table has {} cases", cases.len());
    let t = target();
    let outs = each(&cases, 4, |c| run_tool("wprobe", c, &t));
    if std::env::var_os("BLESS").is_some() {
        for (c, (out, _, _)) in cases.iter_mut().zip(&outs) {
            c.expect = out.clone();
        }
        std::fs::write(table_path(), render_table(&cases)).unwrap();
        return;
    }
    let mut failures = Vec::new();
    for (c, (out, err, code)) in cases.iter().zip(&outs) {
        if *out != c.expect || *code != Some(0) {
            failures.push(format!(
                "### {} (exit {code:?})\n--- expected\n{}--- got\n{out}--- stderr\n{err}",
                c.name, c.expect
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Puts runs of map lines with equal values (`@m[k]: 3`) in one order, and
/// the members of JSON objects of maps, since bpftrace leaves them in the
/// order of its hash table; trailing spaces do not count.
fn normalize(out: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut run: Vec<String> = Vec::new();
    let key = |l: &str| -> Option<(String, String)> {
        let (head, val) = l.rsplit_once("]: ")?;
        let name = head.split('[').next()?;
        (name.starts_with('@') && !val.is_empty()).then(|| (name.to_string(), val.to_string()))
    };
    let flush = |run: &mut Vec<String>, lines: &mut Vec<String>| {
        run.sort();
        lines.append(run);
    };
    for l in out.lines() {
        // bpftrace 0.17 writes `@name: ` before a histogram's newline, 0.23
        // (and wprobe) `@name:`.
        let l = l.trim_end();
        let l = if l.starts_with("{\"type\": \"map\"") {
            // Object members in sorted order.
            match serde_json::from_str::<serde_json::Value>(l) {
                Ok(v) => v.to_string(),
                Err(_) => l.to_string(),
            }
        } else {
            l.to_string()
        };
        match (key(&l), run.last().and_then(|r| key(r))) {
            (Some(k), Some(prev)) if k == prev => run.push(l),
            (Some(_), _) => {
                flush(&mut run, &mut lines);
                run.push(l);
            }
            (None, _) => {
                flush(&mut run, &mut lines);
                lines.push(l);
            }
        }
    }
    flush(&mut run, &mut lines);
    lines.join("\n")
}

/// bpftrace's uprobes need tracefs mounted.
fn bpftrace_ready() {
    // bpftrace's uprobes need tracefs.
    if !Path::new("/sys/kernel/tracing/uprobe_events").exists() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
    }
}

fn oneliner_table_matches_bpftrace() {
    bpftrace_ready();
    let text = std::fs::read_to_string(table_path()).unwrap();
    let cases = parse_table(&text);
    // bpftrace's uprobes put int3 into the page cache of the binary, where
    // wprobe's runs of the other test would see them: a copy of its own.
    // (Same file name: `comm` is printed.)
    let dir = target().with_file_name("bpftrace-copy");
    std::fs::create_dir_all(&dir).unwrap();
    let t = dir.join("bt_target");
    std::fs::copy(target(), &t).unwrap();
    let compared: Vec<&Row> = cases
        .iter()
        .filter(|c| !c.bpftrace.starts_with("differs"))
        .collect();
    for c in cases.iter().filter(|c| c.bpftrace.starts_with("differs")) {
        eprintln!("not compared with bpftrace: {}: {}", c.name, c.bpftrace);
    }
    let owned: Vec<Row> = compared.iter().map(|c| (*c).clone()).collect();
    // Compared with the table's expected output, which the other test
    // checks is wprobe's.
    // One at a time: bpftrace 0.17 loses its last events now and then when
    // several instances share the machine.
    let outs = each(&owned, 1, |c| run_tool("bpftrace", c, &t));
    let mut failures = Vec::new();
    for (c, (b, be, _)) in owned.iter().zip(&outs) {
        let w = &c.expect;
        if normalize(w) != normalize(b) {
            failures.push(format!(
                "### {}\n--- wprobe\n{w}--- bpftrace\n{b}--- bpftrace stderr\n{be}",
                c.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from bpftrace:\n{}",
        failures.len(),
        owned.len(),
        failures.join("\n")
    );
    eprintln!("{} cases matched bpftrace's output", owned.len());
}
