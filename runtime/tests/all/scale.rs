//! Scale. A generated C program with N = 10,000
//! distinct `noinline` functions `f0 … f9999`, each called once by `main`;
//! a generated WAT handler module whose manifest lists one probe per
//! function (`location offset fN`, `opcode 0x55`). Every probe shares the
//! export `on_hit` (a manifest may bind any number of probes to one
//! export), which logs `rip - load_bias`, the function's link-time address.
//!
//! Checked: every probe armed and hit exactly once (the JSON `stats`
//! object), one record per function with the probe label naming the same
//! function the RIP points at, and the target's checksum equal to the
//! untraced run's. The arm and disarm times wprobe measured (its
//! `WPROBE_DEBUG` line) are printed, with the total time.
//!
//! ptrace arms all 10,000 sites (`int3`s). perf arms 100 of them by default
//! (tracefs uprobes, one perf event per CPU each): the kernel's per-uprobe
//! teardown makes 10,000 take minutes (see `many_sites_perf`). Run with
//! `--nocapture` to see the times.

use crate::case;
use crate::support::case::{Case, Need};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(ten_thousand_sites_ptrace),
    case!(ten_thousand_sites_inproc_registered_in_parts),
    case!(many_sites_perf, Need::Perf),
];

use crate::support::cli::*;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const N: usize = 10_000;

/// The generated target (built once per test process, `n` functions).
fn target(n: usize) -> PathBuf {
    let name = format!("scale{n}");
    let mut c = String::from("#include <stdio.h>\n\n");
    for i in 0..n {
        let _ = writeln!(
            c,
            "__attribute__((noinline)) unsigned long f{i}(unsigned long x) {{ asm volatile(\"\"); return x * 31 + {i}; }}"
        );
    }
    c.push_str("\nint main(void) {\n  unsigned long s = 1;\n");
    for i in 0..n {
        let _ = writeln!(c, "  s = f{i}(s);");
    }
    c.push_str("  printf(\"checksum %lu\\n\", s);\n  return 0;\n}\n");
    let src = write(&format!("{name}.c"), &c);
    gcc(
        &name,
        &src,
        &[
            "-O0",
            "-fno-omit-frame-pointer",
            "-fcf-protection=none",
            "-fPIE",
            "-pie",
        ],
    )
}

/// The handler module: one probe per function, all bound to `on_hit`.
fn handler(exe: &Path, n: usize) -> PathBuf {
    let mut m = format!(
        "wprobe-manifest 1\\nabi 2\\nmodule {}\\nmajor 1\\n",
        exe.display()
    );
    for i in 0..n {
        let _ = write!(
            m,
            "probe on_hit\\n  location offset f{i}\\n  opcode 0x55\\n  minor 1\\n"
        );
    }
    let wat = format!(
        r#"(module
  (import "wprobe" "read_reg" (func $read_reg (param i32 i32) (result i64)))
  (import "wprobe" "load_bias" (func $load_bias (result i64)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; Logs one raw word: RIP minus the load bias (the function's link-time address).
  (func (export "on_hit") (result i32)
    (i64.store (i32.const 0)
      (i64.sub (call $read_reg (i32.const 0x0d) (i32.const 0)) (call $load_bias)))
    (i32.store (i32.const 1024) (i32.const 0x800000)) ;; RAW_WORDS at 0
    (drop (call $emit_log (i32.const 1) (i32.const 1) (i32.const 0) (i32.const 8)
                (i32.const 1024) (i32.const 1)))
    (i32.const 0))
  (@custom "wprobe.manifest" "{m}"))
"#
    );
    write(&format!("scale{n}.wat"), &wat)
}

/// Runs `wprobe run` on the N-function target with probes on `f0 … f{n-1}`.
fn check(transport: &str, n: usize) {
    check_with(transport, n, &[]);
}

/// [`check`] with the variables `env` set for wprobe; its standard error.
fn check_with(transport: &str, n: usize, env: &[(&str, &str)]) -> String {
    let exe = target(N);
    let wat = handler(&exe, n);
    let plain = Command::new(&exe).output().unwrap();
    assert!(plain.status.success());
    let want = String::from_utf8(plain.stdout).unwrap();
    // Link-time address → function index.
    let elf = wprobe_elf::ElfInfo::open(&exe).unwrap();
    let index: HashMap<u64, usize> = (0..n)
        .map(|i| match elf.lookup(&format!("f{i}")) {
            wprobe_elf::Lookup::Found(s) => (s.value, i),
            other => panic!("f{i}: {other:?}"),
        })
        .collect();
    assert_eq!(index.len(), n, "distinct addresses");
    for (&a, i) in &index {
        assert_eq!(elf.first_byte(a), Some(0x55), "f{i} starts with push %rbp");
    }

    let t0 = Instant::now();
    let mut c = wprobe();
    eprintln!("T16 {transport}: {n} probe sites in a program of {N} functions");
    c.arg("run")
        .arg(&wat)
        .args([
            "--no-cache",
            "--transport",
            transport,
            "--format",
            "json",
            "--",
        ])
        .arg(&exe)
        .current_dir(scratch())
        .env("WPROBE_PERF_RING_PAGES", "4096")
        .env("WPROBE_DEBUG", "1")
        .envs(env.iter().copied());
    let o = output_within(c, 120);
    let total = t0.elapsed();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{transport}: {}", tail(&stderr));
    let stdout = String::from_utf8(o.stdout).unwrap();
    let (json, own): (Vec<&str>, Vec<&str>) = stdout.lines().partition(|l| l.starts_with('{'));
    assert_eq!(
        own.join("\n"),
        want.trim_end(),
        "{transport}: target output"
    );
    let lines: Vec<serde_json::Value> = json
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let s = stats(&lines);

    let probes = s["probes"].as_array().unwrap();
    assert_eq!(probes.len(), n, "{transport}: every probe listed");
    let mut seen = vec![false; n];
    for p in probes {
        let label = p["probe"].as_str().unwrap();
        let i: usize = label.rsplit_once(":f").unwrap().1.parse().unwrap();
        assert!(
            !std::mem::replace(&mut seen[i], true),
            "{label} listed twice"
        );
        assert_eq!(
            (
                p["hits"].as_u64(),
                p["runs"].as_u64(),
                p["records"].as_u64()
            ),
            (Some(1), Some(1), Some(1)),
            "{transport}: {p}"
        );
    }
    assert_eq!(s["hits"], n as u64, "{transport}");
    assert_eq!(s["dropped"], 0, "{transport}");

    let mut hit = vec![0u32; n];
    for r in lines.iter().filter(|v| v["kind"] == "log") {
        let addr = r["items"][0]["values"][0].as_u64().unwrap();
        let i = *index
            .get(&addr)
            .unwrap_or_else(|| panic!("{transport}: record at {addr:#x} is no fN: {r}"));
        let label = r["probe"].as_str().unwrap();
        assert!(label.ends_with(&format!(":f{i}")), "{label} logged f{i}");
        hit[i] += 1;
    }
    let wrong: Vec<String> = (0..n)
        .filter(|&i| hit[i] != 1)
        .map(|i| format!("f{i}×{}", hit[i]))
        .take(20)
        .collect();
    assert!(
        wrong.is_empty(),
        "{transport}: not hit exactly once: {wrong:?}"
    );

    let times = stderr
        .lines()
        .find(|l| l.starts_with(&format!("wprobe: debug: {n} probes: armed in ")))
        .unwrap_or_else(|| panic!("{transport}: no timing line: {}", tail(&stderr)));
    eprintln!(
        "T16 {transport}: {}; wprobe run {:.2} s",
        times.trim_start_matches("wprobe: debug: "),
        total.as_secs_f64()
    );
    stderr.into_owned()
}

fn tail(s: &str) -> &str {
    &s[s.len().saturating_sub(4000)..]
}

/// inproc, its agent loaded before planning with a region laid out for one
/// site (`WPROBE_INPROC_PRELOAD_SITES`): the 10,000 sites go to the agent
/// in several requests (`LoadedAgent::set_sites`), and every probe is
/// still hit exactly once with its own record.
fn ten_thousand_sites_inproc_registered_in_parts() {
    let err = check_with("inproc", N, &[("WPROBE_INPROC_PRELOAD_SITES", "1")]);
    let line = err
        .lines()
        .find(|l| l.contains(": loaded before planning: "))
        .unwrap_or_else(|| panic!("the agent was not loaded before planning: {}", tail(&err)));
    assert!(line.contains("agent mapped"), "{line}");
    assert!(
        err.lines()
            .any(|l| l.contains(" sites registered (in parts) ")),
        "{}",
        tail(&err)
    );
}

fn ten_thousand_sites_ptrace() {
    check("ptrace", N);
}

/// perf with fewer sites (default 100; `WPROBE_T16_PERF_SITES=10000` for
/// the full run). Each uprobe costs the kernel a tracefs definition and, when
/// its last perf event is closed, one RCU grace period taken under
/// `event_mutex` (`perf_trace_event_unreg` → `tracepoint_synchronize_unregister`):
/// measured here at ≈ 10–30 ms per site when the machine is idle, so 10,000
/// sites take minutes to disarm (docs/architecture.md, "Scale").
fn many_sites_perf() {
    let n = std::env::var("WPROBE_T16_PERF_SITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
        .clamp(1, N);
    check("perf", n);
}
