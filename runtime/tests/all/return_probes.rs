//! Return probes (spec §6.5) on real processes, under every transport that
//! arms them: exact return values and entry arguments, elapsed time,
//! `maxactive`, and every way a call can end — recursion, mutual
//! recursion, a tail call, `longjmp`, a signal handler, threads, `fork`,
//! `exec`, a C++ exception thrown through traced frames — with the
//! target's output and exit status identical to an untraced run; the
//! refusal of a location that is not a function entry; a handler writing
//! `rax` (ptrace); detaching while calls are live (ptrace); the seam's
//! suspend and resume with calls live; a return probe on an IFUNC.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, output_within, progs, scratch, stats, sym, wprobe, write};

pub const CASES: &[Case] = &[
    case!(values_and_entry_arguments_are_exact @ every_transport),
    case!(handler_parameters_are_what_the_imports_read @ every_transport),
    case!(elapsed_of_a_10_ms_sleep @ every_transport),
    case!(maxactive_2_on_a_recursion_of_depth_5 @ every_transport),
    case!(ignore_and_maxhits_count_returns @ every_transport),
    case!(every_way_a_call_ends @ per_transport),
    case!(a_cpp_exception_through_three_traced_frames @ every_transport),
    case!(a_fork_child_not_followed_runs_untouched @ every_transport),
    case!(exec_during_a_call @ per_transport),
    case!(not_a_function_entry_is_refused @ every_transport),
    case!(a_return_handler_writes_rax, Need::Ptrace),
    case!(inproc_copies_a_function_whose_ret_takes_no_window),
    case!(
        detaching_with_live_calls_restores_the_return_sites,
        Need::Ptrace
    ),
    case!(suspend_ends_live_calls_and_resume_tracks_new_ones @ per_transport),
    case!(a_return_probe_on_an_ifunc_returns_from_the_implementation @ every_transport),
    case!(each_call_is_one_hit_of_its_entry_and_return_probes @ every_transport),
];

/// `tests/progs/retprobe.c`, not PIE (link-time addresses are run-time
/// ones), every C call a real call.
fn target() -> PathBuf {
    gcc(
        "retprobe",
        &progs().join("retprobe.c"),
        &[
            "-O1",
            "-fno-optimize-sibling-calls",
            "-fno-inline",
            "-fno-pie",
            "-no-pie",
            "-fcf-protection=none",
        ],
    )
}

/// The module name of file `t`.
fn module_of(t: &Path) -> &str {
    t.file_name().and_then(|n| n.to_str()).unwrap()
}

/// `tests/progs/throw3.cc`.
fn throw3() -> PathBuf {
    gcc(
        "throw3",
        &progs().join("throw3.cc"),
        &[
            "-O1",
            "-fno-optimize-sibling-calls",
            "-fno-inline",
            "-lstdc++",
        ],
    )
}

/// An RPN program `name` of return probes on `module`: for each function,
/// a probe logging `words` (RPN push instructions, logged in this order).
fn program(name: &str, module: &str, probes: &[(&str, &str)], words: &[&str]) -> PathBuf {
    let mut s = format!("name = {module}\nmajor = 1\n");
    for (i, (loc, extra)) in probes.iter().enumerate() {
        s.push_str(&format!(
            "offset = {loc}\nreturn = yes\nminor = {i}\n{extra}"
        ));
        // `log n` logs the top of the stack first: push in reverse.
        for w in words.iter().rev() {
            s.push_str(&format!("        push {w}\n"));
        }
        s.push_str(&format!("        log {}\n", words.len()));
    }
    write(&format!("{name}.rpn"), s)
}

/// What one run gave.
struct Run {
    /// Log records: (minor, tid, pid, words).
    records: Vec<(u64, u64, u64, Vec<u64>)>,
    /// The `stats` line.
    stats: serde_json::Value,
    /// wprobe's standard error.
    stderr: String,
    /// wprobe's exit status (the command's).
    status: Option<i32>,
    /// What the target printed.
    output: String,
}

impl Run {
    /// (hits, missed) of the probe whose label ends with `:loc`.
    fn counts(&self, loc: &str) -> (u64, u64) {
        let p = self.stats["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["probe"].as_str().unwrap().ends_with(&format!(":{loc}")))
            .unwrap_or_else(|| panic!("no probe {loc}: {}", self.stats));
        (p["hits"].as_u64().unwrap(), p["missed"].as_u64().unwrap())
    }

    /// The words of the records of probe `minor`.
    fn words(&self, minor: u64) -> Vec<Vec<u64>> {
        self.records
            .iter()
            .filter(|r| r.0 == minor)
            .map(|r| r.3.clone())
            .collect()
    }
}

/// Runs `wprobe run PROGRAM --transport T --format json [OPTS] -- TARGET
/// >OUT ARGS`.
fn run(transport: &str, prog: &Path, opts: &[&str], target: &Path, args: &[&str]) -> Run {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out = scratch().join(format!("ret-{transport}-{n}.out"));
    let mut c = wprobe();
    c.arg("run")
        .arg(prog)
        .args(["--transport", transport, "--format", "json"])
        .args(opts)
        .arg("--")
        .arg(target)
        .arg(format!(">{}", out.display()))
        .args(args)
        .current_dir(scratch())
        .env("WPROBE_PERF_RING_PAGES", "8192");
    let o = output_within(c, 120);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let records = lines
        .iter()
        .filter(|v| v["kind"] == "log")
        .map(|v| {
            (
                v["minor"].as_u64().unwrap(),
                v["tid"].as_u64().unwrap(),
                v["pid"].as_u64().unwrap(),
                v["items"][0]["values"]
                    .as_array()
                    .map(|a| a.iter().map(|x| x.as_u64().unwrap()).collect())
                    .unwrap_or_default(),
            )
        })
        .collect();
    Run {
        records,
        stats: stats(&lines).clone(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        status: o.status.code(),
        output: std::fs::read_to_string(&out).unwrap_or_default(),
    }
}

/// The target's output and exit status without wprobe.
fn untraced(target: &Path, args: &[&str]) -> (String, Option<i32>) {
    let o = Command::new(target).args(args).output().unwrap();
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        o.status.code(),
    )
}

/// Checks that the traced run printed and exited as the untraced one.
fn same_as_untraced(r: &Run, target: &Path, args: &[&str]) {
    let (out, status) = untraced(target, args);
    assert_eq!(
        r.output, out,
        "the target's output; wprobe said: {}",
        r.stderr
    );
    assert_eq!(r.status, status, "the target's exit status: {}", r.stderr);
}

/// The address the `call` ending at `ret` in `file` calls (non-PIE file).
fn call_target_before(file: &Path, ret: u64) -> u64 {
    let info = wprobe_elf::ElfInfo::open(file).unwrap();
    let b = info.bytes_at(ret - 5, 5).unwrap();
    assert_eq!(b[0], 0xe8, "a direct call ends at {ret:#x}");
    let rel = i32::from_le_bytes(b[1..5].try_into().unwrap());
    ret.wrapping_add(rel as i64 as u64)
}

fn values_and_entry_arguments_are_exact(transport: &'static str) {
    let t = target();
    let words = [
        "entry, rdi",
        "entry, rsi",
        "entry, rdx",
        "r, rax",
        "entry, rsp",
        "r, rsp",
        "r, rip",
    ];
    let prog = program(
        &format!("ret-values-{transport}"),
        module_of(&t),
        &[("add3", ""), ("tailer", "")],
        &words,
    );
    let r = run(transport, &prog, &[], &t, &["calls", "tail"]);
    same_as_untraced(&r, &t, &["calls", "tail"]);
    let add3 = r.words(0);
    let args: Vec<&[u64]> = add3.iter().map(|w| &w[..4]).collect();
    // add3(i, 10i, 100) for i = 0, 1, 2, then add3(101, 2, 3) entered by
    // tailer's jump.
    assert_eq!(
        args,
        [
            &[0, 0, 100, 100][..],
            &[1, 10, 100, 111],
            &[2, 20, 100, 122],
            &[101, 2, 3, 106]
        ]
    );
    for w in &add3 {
        assert_eq!(w[5], w[4] + 8, "rsp at the return is the entry's + 8");
    }
    // The return address: after a `call add3` for the three direct calls,
    // after the `call tailer` for the tail-called one.
    let (add3_at, tailer_at) = (sym(&t, "add3"), sym(&t, "tailer"));
    for w in &add3[..3] {
        assert_eq!(call_target_before(&t, w[6]), add3_at);
    }
    assert_eq!(call_target_before(&t, add3[3][6]), tailer_at);
    // tailer(1, 2, 3) returns when add3 does, with its value, after it.
    let tailer = r.words(1);
    assert_eq!(tailer.len(), 1);
    assert_eq!(&tailer[0][..4], &[1, 2, 3, 106]);
    assert_eq!(&tailer[0][4..], &add3[3][4..], "same frame, same return");
    let order: Vec<u64> = r.records.iter().map(|r| r.0).collect();
    assert_eq!(order, [0, 0, 0, 0, 1], "the tail-called add3 returns first");
    assert_eq!(r.counts("add3"), (4, 0));
    assert_eq!(r.counts("tailer"), (1, 0));
}

/// A handler taking its values as parameters (manifest `args`) gets what
/// the imports read: at add3's entry its arguments, `rsp` and `edi`; at its
/// return the entry's arguments, `rax`, the duration and the entry's `rsp`.
fn handler_parameters_are_what_the_imports_read(transport: &'static str) {
    let t = target();
    let module = module_of(&t);
    let prog = write(
        &format!("ret-params-{transport}.wat"),
        format!(
            r#"(module
  (import "wprobe" "read_reg" (func $read_reg (param i32 i32) (result i64)))
  (import "wprobe" "entry_reg" (func $entry_reg (param i32) (result i64)))
  (import "wprobe" "elapsed_ns" (func $elapsed_ns (result i64)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $log (param $minor i32) (param $n i32)
    (i32.store (i32.const 1024) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 1) (local.get $minor)
                (i32.const 0) (i32.shl (local.get $n) (i32.const 3)) (i32.const 1024) (i32.const 1))))
  ;; At add3's entry: its arguments, rsp and edi as parameters, then as read_reg reads them.
  (func (export "at_entry") (param i64 i64 i64 i64 i64) (result i32)
    (i64.store (i32.const 0) (local.get 0))
    (i64.store (i32.const 8) (local.get 1))
    (i64.store (i32.const 16) (local.get 2))
    (i64.store (i32.const 24) (local.get 3))
    (i64.store (i32.const 32) (local.get 4))
    (i64.store (i32.const 40) (call $read_reg (i32.const 0x0a) (i32.const 0)))
    (i64.store (i32.const 48) (call $read_reg (i32.const 0x0b) (i32.const 0)))
    (i64.store (i32.const 56) (call $read_reg (i32.const 0x09) (i32.const 0)))
    (i64.store (i32.const 64) (call $read_reg (i32.const 0x0e) (i32.const 0)))
    (i64.store (i32.const 72) (call $read_reg (i32.const 0x10a) (i32.const 0)))
    (call $log (i32.const 0) (i32.const 10))
    (i32.const 0))
  ;; At add3's return: entry arguments, rax, the duration, the entry's rsp, then as the imports read them.
  (func (export "at_return") (param i64 i64 i64 i64 i64 i64)
    (i64.store (i32.const 0) (local.get 0))
    (i64.store (i32.const 8) (local.get 1))
    (i64.store (i32.const 16) (local.get 2))
    (i64.store (i32.const 24) (local.get 3))
    (i64.store (i32.const 32) (local.get 4))
    (i64.store (i32.const 40) (local.get 5))
    (i64.store (i32.const 48) (call $entry_reg (i32.const 0x0a)))
    (i64.store (i32.const 56) (call $entry_reg (i32.const 0x0b)))
    (i64.store (i32.const 64) (call $entry_reg (i32.const 0x09)))
    (i64.store (i32.const 72) (call $read_reg (i32.const 0x06) (i32.const 0)))
    (i64.store (i32.const 80) (call $elapsed_ns))
    (i64.store (i32.const 88) (call $entry_reg (i32.const 0x0e)))
    (call $log (i32.const 1) (i32.const 12)))
  (@custom "wprobe.manifest" "wprobe-manifest 1\nabi 2\nmodule {module}\nmajor 1\nprobe at_entry\n  location offset add3\n  maxhits 0\n  args rdi rsi rdx rsp edi\nprobe at_return\n  location offset add3\n  return yes\n  minor 1\n  maxhits 0\n  args entry.rdi entry.rsi entry.rdx rax elapsed entry.rsp\n"))
"#
        ),
    );
    let r = run(transport, &prog, &[], &t, &["calls"]);
    same_as_untraced(&r, &t, &["calls"]);
    // add3(i, 10i, 100) for i = 0, 1, 2.
    let entries = r.words(0);
    assert_eq!(entries.len(), 3, "{}", r.stderr);
    for (i, w) in entries.iter().enumerate() {
        let i = i as u64;
        assert_eq!(w[..3], [i, 10 * i, 100], "arguments as parameters");
        assert_eq!(w[4], i, "edi as a parameter");
        assert_eq!(w[..5], w[5..], "the parameters are what read_reg reads");
    }
    let returns = r.words(1);
    assert_eq!(returns.len(), 3, "{}", r.stderr);
    for (i, w) in returns.iter().enumerate() {
        let i = i as u64;
        assert_eq!(w[..4], [i, 10 * i, 100, 11 * i + 100]);
        assert_eq!(w[5], entries[i as usize][3], "the entry's rsp");
        assert_eq!(w[..6], w[6..], "the parameters are what the imports read");
    }
}

fn elapsed_of_a_10_ms_sleep(transport: &'static str) {
    let t = target();
    let prog = program(
        &format!("ret-sleep-{transport}"),
        module_of(&t),
        &[("sleeper", "")],
        &["entry, rdi", "r, rax", "elapsed"],
    );
    let r = run(transport, &prog, &[], &t, &["sleep"]);
    same_as_untraced(&r, &t, &["sleep"]);
    let w = r.words(0);
    assert_eq!(w.len(), 1);
    assert_eq!(&w[0][..2], &[10, 10]);
    // At least the 10 ms slept; at most 50: a loaded machine (the tests
    // of a CI run in parallel) stretches a 10 ms sleep by several ms,
    // where a wrong unit or origin is off by a factor of 1000 or by the
    // process's whole life.
    assert!(
        (10_000_000..=50_000_000).contains(&w[0][2]),
        "elapsed {} ns: [10 ms, 50 ms]",
        w[0][2]
    );
}

fn maxactive_2_on_a_recursion_of_depth_5(transport: &'static str) {
    let t = target();
    let prog = program(
        &format!("ret-maxactive-{transport}"),
        module_of(&t),
        &[("rec", "maxactive = 2\n")],
        &["entry, rdi", "r, rax"],
    );
    // rec(5) twice: per outermost call rec(5) and rec(4) are tracked,
    // rec(3), rec(2), rec(1) missed; rec(4) returns first.
    let r = run(transport, &prog, &[], &t, &["rec"]);
    same_as_untraced(&r, &t, &["rec"]);
    assert_eq!(r.words(0), [[4, 10], [5, 15], [4, 10], [5, 15]]);
    assert_eq!(
        r.counts("rec"),
        (4, 6),
        "exactly 3 missed per outermost call"
    );
}

fn ignore_and_maxhits_count_returns(transport: &'static str) {
    let t = target();
    let prog = program(
        &format!("ret-maxhits-{transport}"),
        module_of(&t),
        &[
            ("add3", "ignore = 1\nmaxhits = 1\n"),
            ("rec", "maxhits = 3\n"),
        ],
        &["entry, rdi", "r, rax"],
    );
    // add3: the first return ignored, the second runs, then the probe is
    // gone (the third call is not tracked, and not missed). rec(5): the
    // three innermost returns run; the two calls still live when the
    // probe goes return without a handler and are not missed either.
    let r = run(transport, &prog, &[], &t, &["calls", "rec"]);
    same_as_untraced(&r, &t, &["calls", "rec"]);
    assert_eq!(r.words(0), [[1, 111]]);
    assert_eq!(r.words(1), [[1, 1], [2, 3], [3, 6]]);
    assert_eq!(r.counts("add3"), (2, 0));
    assert_eq!(r.counts("rec"), (3, 0));
}

/// Every probe of retprobe.c, each logging its entry arguments, its
/// return value and its elapsed time.
const ALL: &[&str] = &[
    "add3",
    "sleeper",
    "rec",
    "is_even",
    "is_odd",
    "tailer",
    "jumper",
    "in_handler",
    "on_signal",
    "with_signal",
];

fn every_way_a_call_ends(transport: &'static str) {
    let t = target();
    let probes: Vec<(&str, &str)> = ALL.iter().map(|f| (*f, "maxactive = 4096\n")).collect();
    let prog = program(
        &format!("ret-all-{transport}"),
        module_of(&t),
        &probes,
        &[
            "entry, rdi",
            "entry, rsi",
            "entry, rdx",
            "r, rax",
            "elapsed",
        ],
    );
    let r = run(transport, &prog, &["-f"], &t, &["all"]);
    same_as_untraced(&r, &t, &["all"]);
    let counts: BTreeMap<&str, (u64, u64)> = ALL.iter().map(|f| (*f, r.counts(f))).collect();
    let want: BTreeMap<&str, (u64, u64)> = [
        // calls 3, tail 1, longjmp 1, threads 4 × 50, fork 2 + 1 in the child
        ("add3", (208, 0)),
        ("sleeper", (1, 0)),
        // rec 2 × 5, threads 4 × 4, the child's rec(3)
        ("rec", (29, 0)),
        // is_even(6) and is_even(3)
        ("is_even", (6, 0)),
        ("is_odd", (5, 0)),
        ("tailer", (1, 0)),
        // 3 rounds of jumper(3) .. jumper(0), left by longjmp: unwound
        ("jumper", (0, 12)),
        ("in_handler", (2, 0)),
        ("on_signal", (2, 0)),
        ("with_signal", (2, 0)),
    ]
    .into_iter()
    .collect();
    assert_eq!(counts, want);
    // Each return paired with its own entry (per thread, per process): the
    // value fits the arguments.
    for (minor, tid, pid, w) in &r.records {
        let (a, b, c, rax) = (w[0], w[1], w[2], w[3]);
        let ok = match ALL[*minor as usize] {
            "add3" => rax == a + b + c,
            "sleeper" => rax == a && w[4] >= a * 1_000_000,
            "rec" => rax == a * (a + 1) / 2,
            "is_even" => rax == u64::from(a % 2 == 0),
            "is_odd" => rax == a % 2,
            "tailer" => rax == a + 100 + b + c,
            "in_handler" => rax == 2 * a,
            "on_signal" | "with_signal" => true,
            other => panic!("{other} has no returns"),
        };
        assert!(ok, "{} in {pid}/{tid}: {w:?}", ALL[*minor as usize]);
    }
    // The fork child's calls are its own.
    let pids: std::collections::BTreeSet<u64> = r.records.iter().map(|r| r.2).collect();
    assert_eq!(pids.len(), 2, "the parent and the fork child");
    let tids: std::collections::BTreeSet<u64> = r.records.iter().map(|r| r.1).collect();
    assert_eq!(tids.len(), 6, "main, 4 threads, the child");
}

fn a_cpp_exception_through_three_traced_frames(transport: &'static str) {
    let t = throw3();
    let prog = program(
        &format!("ret-throw-{transport}"),
        "throw3",
        &[("_Z2t1i", ""), ("_Z2t2i", ""), ("_Z2t3i", "")],
        &["entry, rdi", "r, rax"],
    );
    let r = run(transport, &prog, &[], &t, &[]);
    same_as_untraced(&r, &t, &[]);
    assert_eq!(
        r.output,
        "t1(0) = 6\ncaught boom (2 destroyed)\ncaught boom (3 destroyed)\n"
    );
    // t1(0) returns normally, innermost first; t1(1) and t1(2) throw
    // through all three: 2 unwound calls each.
    let got: Vec<(u64, Vec<u64>)> = r.records.iter().map(|r| (r.0, r.3.clone())).collect();
    assert_eq!(got, [(2, vec![0, 3]), (1, vec![0, 5]), (0, vec![0, 6])]);
    for f in ["_Z2t1i", "_Z2t2i", "_Z2t3i"] {
        assert_eq!(r.counts(f), (1, 2), "{f}: 1 return, 2 unwound");
    }
}

fn a_fork_child_not_followed_runs_untouched(transport: &'static str) {
    let t = target();
    let prog = program(
        &format!("ret-fork-{transport}"),
        module_of(&t),
        &[("add3", ""), ("rec", "")],
        &["entry, rdi", "r, rax"],
    );
    // Without -f the child is not traced: its calls (add3, rec(3)) run
    // through return sites it inherited (ptrace) and must be untouched.
    let r = run(transport, &prog, &[], &t, &["fork"]);
    same_as_untraced(&r, &t, &["fork"]);
    assert_eq!(r.words(0), [[1, 6], [4, 15]]);
    assert_eq!(r.counts("add3"), (2, 0));
    assert_eq!(r.counts("rec"), (0, 0));
}

fn exec_during_a_call(transport: &'static str) {
    let t = target();
    let prog = program(
        &format!("ret-exec-{transport}"),
        module_of(&t),
        &[("execer", ""), ("add3", "")],
        &["entry, rdi", "r, rax"],
    );
    let r = run(transport, &prog, &[], &t, &["exec"]);
    same_as_untraced(&r, &t, &["exec"]);
    assert_eq!(r.output, "calls 333\n");
    // execer never returns: its image is gone; the new image's calls are
    // traced.
    assert_eq!(r.counts("execer"), (0, 1));
    assert_eq!(r.counts("add3"), (3, 0));
}

fn not_a_function_entry_is_refused(transport: &'static str) {
    let t = target();
    let add3 = sym(&t, "add3");
    // add3+3 starts an instruction (`lea`) but is not the entry.
    let prog = program(
        &format!("ret-notentry-{transport}"),
        module_of(&t),
        &[("add3+3", ""), ("rec", "")],
        &["r, rax"],
    );
    let r = run(transport, &prog, &[], &t, &["calls", "rec"]);
    same_as_untraced(&r, &t, &["calls", "rec"]);
    let label = format!("ret-notentry-{transport}:add3+0x3");
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains(&label))
        .unwrap_or_else(|| panic!("{}", r.stderr));
    let pid_at = line.find("in pid ").unwrap() + 7;
    let pid_end = pid_at + line[pid_at..].find(':').unwrap();
    assert_eq!(
        line.replace(&line[pid_at..pid_end], "N"),
        format!(
            "wprobe: warning: probe {label} not applied in pid N: not a function entry: {:#x} \
             is add3+0x3; a return probe must be at the first byte of its function ({add3:#x})",
            add3 + 3
        )
    );
    assert_eq!(r.counts("rec"), (10, 0), "the other probe is armed");

    // Functions that start with endbr64: the instruction after it is an
    // entry too.
    let cet = gcc(
        "retprobe-cet",
        &progs().join("retprobe.c"),
        &[
            "-O1",
            "-fno-optimize-sibling-calls",
            "-fno-inline",
            "-fcf-protection=full",
        ],
    );
    let info = wprobe_elf::ElfInfo::open(&cet).unwrap();
    let at = sym(&cet, "add3");
    assert_eq!(info.bytes_at(at, 4).unwrap(), [0xf3, 0x0f, 0x1e, 0xfa]);
    let prog = program(
        &format!("ret-endbr-{transport}"),
        "retprobe-cet",
        &[("add3+4", ""), ("rec", ""), ("rec+9", "")],
        &["r, rax"],
    );
    let r = run(transport, &prog, &[], &cet, &["calls"]);
    assert_eq!(r.words(0), [[100], [111], [122]]);
    assert!(r.stderr.contains(&format!(
        "not a function entry: {:#x} is rec+0x9; a return probe must be at the first byte of \
         its function ({:#x}) or after the endbr64 that starts it ({:#x})",
        sym(&cet, "rec") + 9,
        sym(&cet, "rec"),
        sym(&cet, "rec") + 4
    )));
}

fn a_return_handler_writes_rax() {
    let t = target();
    let prog = write(
        "ret-rax.rpn",
        "name = retprobe\nmajor = 1\noffset = add3\nreturn = yes\n\
         \x20       push r, rax\n        push 1000\n        add\n        pop r, rax\n",
    );
    let r = run("ptrace", &prog, &[], &t, &["calls"]);
    // Each add3 returns its value + 1000 to the caller: 333 + 3000.
    assert_eq!(r.output, "calls 3333\n");
    assert_eq!(r.status, Some(3));
}

fn detaching_with_live_calls_restores_the_return_sites() {
    let t = target();
    let out = scratch().join("ret-naps.out");
    let mut child = Command::new(&t)
        .arg(format!(">{}", out.display()))
        .args(["naps8", "naps1,4000"])
        .spawn()
        .unwrap();
    let prog = program(
        "ret-naps",
        "retprobe",
        &[("sleeper", "")],
        &["r, rax", "r, rip"],
    );
    let mut w = wprobe();
    w.arg("run")
        .arg(&prog)
        .args(["--format", "json", "-p"])
        .arg(child.id().to_string())
        .current_dir(scratch())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut wp = w.spawn().unwrap();
    // A return seen (the probe is armed), then stop while the last call
    // sleeps (the 8 naps of 100 ms are over by then, the one of 4 s is
    // not): its return site is armed in the process.
    let mut reader = std::io::BufReader::new(wp.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    let rip = v["items"][0]["values"][1].as_u64().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(wp.id() as i32, libc::SIGINT) };
    let o = crate::support::cli::output_within_child(wp, 30);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The byte at the return address is the program's again.
    let mut b = [0u8; 1];
    let f = std::fs::File::open(format!("/proc/{}/mem", child.id())).unwrap();
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, rip).unwrap();
    let info = wprobe_elf::ElfInfo::open(&t).unwrap();
    assert_eq!(b[0], info.first_byte(rip).unwrap(), "at {rip:#x}");
    assert_eq!(child.wait().unwrap().code(), Some(3));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        (0..8)
            .map(|i| format!("nap {i} 100\n"))
            .chain(["nap 0 4000\n".to_string()])
            .collect::<String>()
    );
    // The call live at the detach is counted as missed.
    let stats: serde_json::Value = rest
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "stats")
        .expect("stats");
    assert_eq!(stats["missed"], 1, "{stats}");
}

/// Through the seam: `suspend` while a call sleeps ends it (one
/// `Event::Unwound`, cause `Suspend`, before anything else of the run),
/// no return is delivered while dormant (under ptrace the code of the
/// function and of its caller is the file's again: no entry and no return
/// site left), and after `resume` later calls are tracked again with their
/// own entry arguments and return values; the command runs to its end.
fn suspend_ends_live_calls_and_resume_tracks_new_ones(transport: &'static str) {
    use runtime::probe::addr::RunAddr;
    use runtime::transport::calls::Left;
    use runtime::transport::{Action, Event, Insert, OpenOptions, Target, Transport};
    use std::cell::{Cell, RefCell};
    use std::sync::atomic::AtomicBool;

    let t = target();
    let elf = wprobe_elf::ElfInfo::open(&t).unwrap();
    let (sleeper, naps) = (sym(&t, "sleeper"), sym(&t, "naps"));
    let code = |a: u64| {
        let f = elf.function_containing(a).unwrap();
        (
            f.value,
            elf.bytes_at(f.value, f.size as usize).unwrap().to_vec(),
        )
    };
    let (code_sleeper, code_naps) = (code(sleeper), code(naps));
    let out = scratch().join(format!("ret-suspend-{transport}.out"));
    let argv = [
        t.clone().into_os_string(),
        format!(">{}", out.display()).into(),
        "naps10,50".into(),
    ];
    let info = runtime::transport::by_name(transport).unwrap();
    let mut tr = (info.open)(
        Target::Launch(&argv),
        &OpenOptions {
            follow_forks: false,
            verify_opcodes: true,
            reads_memory: false,
            registers: runtime::wasm::regscan::RegsRead::All,
            ring_full: Default::default(),
        },
    )
    .unwrap();
    let pid = tr.main_pid();
    tr.insert(
        5,
        pid,
        RunAddr(sleeper),
        Insert::Return {
            opcode: None,
            maxactive: 4,
            entry_notice: false,
        },
    )
    .unwrap();
    tr.set_tick(std::time::Duration::from_millis(20));
    // What the run saw, in order: 'r' a return (checked), 'u' an unwound
    // call, 's' suspend, 'R' resume.
    let seen = RefCell::new(String::new());
    let last_return = Cell::new(None::<std::time::Instant>);
    let ticks_dormant = Cell::new(0);
    let stop = AtomicBool::new(false);
    let status = tr
        .run(&stop, &mut |tr: &mut dyn Transport, ev: Event<'_>| {
            let (suspended, resumed) = {
                let s = seen.borrow();
                (s.contains('s'), s.contains('R'))
            };
            match ev {
                Event::Hit { tags, hit } => {
                    assert_eq!(tags, [5]);
                    assert_eq!(hit.entry_reg(hostabi::regs::RDI), Some(50));
                    assert_eq!(hit.read_reg(hostabi::regs::RAX, 0), Some(50));
                    assert!(hit.elapsed_ns().unwrap() >= 50_000_000);
                    seen.borrow_mut().push('r');
                    last_return.set(Some(std::time::Instant::now()));
                }
                Event::Unwound { tag, cause, .. } => {
                    assert_eq!((tag, cause), (5, Left::Suspend));
                    seen.borrow_mut().push('u');
                }
                // 10 ms after a return, the next call (50 ms) is sleeping.
                Event::Tick
                    if !suspended
                        && last_return
                            .get()
                            .is_some_and(|t| t.elapsed().as_millis() >= 10) =>
                {
                    tr.suspend().unwrap();
                    seen.borrow_mut().push('s');
                }
                Event::Tick if suspended && !resumed => {
                    ticks_dormant.set(ticks_dormant.get() + 1);
                    if transport == "ptrace" {
                        let f = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
                        for (at, bytes) in [&code_sleeper, &code_naps] {
                            let mut b = vec![0u8; bytes.len()];
                            std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, *at).unwrap();
                            assert_eq!(&b, bytes, "the code at {at:#x} while dormant");
                        }
                    }
                    if ticks_dormant.get() == 5 {
                        tr.resume().unwrap();
                        seen.borrow_mut().push('R');
                    }
                }
                _ => {}
            }
            Action::Continue
        })
        .unwrap();
    tr.detach().unwrap();
    assert_eq!(status, Some(runtime::transport::ExitStatus::Code(3)));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        (0..10).map(|i| format!("nap {i} 50\n")).collect::<String>()
    );
    let seen = seen.into_inner();
    // Returns before suspend; the call live at suspend unwound at the next
    // event; nothing while dormant; returns again after resume (the call
    // live at resume was not seen entering). Under perf (the target does
    // not wait), the entry of the sleeping call may not have been read
    // from its ring yet when `suspend` ends the live calls.
    let (before, after) = seen.split_once('s').expect(&seen);
    assert!(
        !before.is_empty() && before.chars().all(|c| c == 'r'),
        "{seen}"
    );
    let (dormant, after) = after.split_once('R').expect(&seen);
    assert!(
        after.len() >= 2 && after.chars().all(|c| c == 'r'),
        "{seen}"
    );
    if transport == "ptrace" {
        assert_eq!(dormant, "u", "{seen}");
        assert!(
            after.len() >= 4,
            "returns after resume (10 calls of 50 ms, 100 ms dormant): {seen}"
        );
    } else {
        assert!(dormant.is_empty() || dormant == "u", "{seen}");
    }
}

/// `f` of `tests/progs/ifunc.c` is an IFUNC whose resolver picks `impl_b`
/// (x + 2): a return probe on `f` tracks the calls of the implementation
/// the process chose (PIE and not), with their own arguments, return
/// values and one return address in `main`.
fn a_return_probe_on_an_ifunc_returns_from_the_implementation(transport: &'static str) {
    for (name, flags) in [
        (
            "ifunc_nopie",
            &["-O1", "-no-pie", "-fcf-protection=none"][..],
        ),
        ("ifunc_pie", &["-O1", "-fPIE", "-pie"][..]),
    ] {
        let exe = gcc(name, &progs().join("ifunc.c"), flags);
        let prog = program(
            &format!("ret-{name}-{transport}"),
            &exe.display().to_string(),
            &[("f", "")],
            &["entry, rdi", "r, rax", "r, rip"],
        );
        let mut c = wprobe();
        c.arg("run")
            .arg(&prog)
            .args(["--transport", transport, "--format", "json", "--"])
            .arg(&exe)
            .arg("10")
            .current_dir(scratch());
        let o = output_within(c, 120);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(o.status.code(), Some(0), "{name}: {err}");
        // sum of i + 2 for i < 10, as untraced.
        assert!(out.lines().any(|l| l.starts_with("sum=65 ")), "{out}");
        let words: Vec<Vec<u64>> = out
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["kind"] == "log")
            .map(|v| {
                v["items"][0]["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect()
            })
            .collect();
        assert_eq!(words.len(), 10, "{transport} {name}: {err}");
        for (i, w) in words.iter().enumerate() {
            assert_eq!(&w[..2], &[i as u64, i as u64 + 2], "{transport} {name}");
            assert_eq!(w[2], words[0][2], "one return address");
        }
        if name == "ifunc_nopie" {
            let main = sym(&exe, "main");
            let info = wprobe_elf::ElfInfo::open(&exe).unwrap();
            let f = info.function_containing(words[0][2]).unwrap();
            assert_eq!(f.value, main, "returns into main");
        }
        assert!(
            err.contains("`f` is an IFUNC; probing the implementation process"),
            "{err}"
        );
    }
}

/// Where no window fits a `ret`, not even a near jump's 2 bytes, the
/// in-process transport runs the function as a relocated copy: `rec` ends
/// in `ret; ret`, the second a branch target with no padding after it, and
/// calls itself: its copy pushes the original return address for that
/// call and jumps to `rec`'s entry, and a jump after the `call` brings the
/// return back into the copy (`-v` says so); no trap. `add3` (3
/// instructions) takes one window for its entry and its `ret`. Both give
/// exact records.
fn inproc_copies_a_function_whose_ret_takes_no_window() {
    let t = target();
    let prog = program(
        "ret-refused-inproc",
        "retprobe",
        &[("add3", ""), ("rec", "")],
        &["r, rax", "entry, rdi"],
    );
    let r = run("inproc", &prog, &["-v"], &t, &["calls", "rec"]);
    same_as_untraced(&r, &t, &["calls", "rec"]);
    let info = wprobe_elf::ElfInfo::open(&t).unwrap();
    let rec = sym(&t, "rec");
    let f = info.function_containing(rec).unwrap();
    let code = info.bytes_at(f.value, f.size as usize).unwrap();
    assert_eq!(
        &code[code.len() - 2..],
        [0xc3, 0xc3],
        "rec ends in ret; ret"
    );
    let end = f.value + f.size;
    // Its call of itself, whose return comes back into the copy.
    let call = (0..code.len().saturating_sub(4))
        .find(|&k| {
            let rel = i32::from_le_bytes(code[k + 1..k + 5].try_into().unwrap());
            code[k] == 0xe8 && (f.value + k as u64 + 5).wrapping_add(rel as i64 as u64) == rec
        })
        .map(|k| f.value + k as u64)
        .expect("rec calls itself");
    assert!(!r.stderr.contains("a trap instead"), "{}", r.stderr);
    let copied: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("run in a relocated copy of the whole function"))
        .collect();
    assert_eq!(copied.len(), 1, "{}", r.stderr);
    assert!(
        copied[0].contains(&format!(
            ": {rec:#x} rec: its `ret`s ({:#x}, {:#x}) run in a relocated copy",
            end - 2,
            end - 1
        )),
        "{}",
        copied[0]
    );
    assert!(
        copied[0].contains(&format!(
            "; 1 jump back into the copy at ({:#x}), where its calls return or branches from \
             outside it land",
            call + 5
        )),
        "{}",
        copied[0]
    );
    let add3 = r.words(0);
    assert_eq!(add3.len(), 3, "{}", r.stderr);
    assert_eq!(add3[0], [100, 0]);
    // rec(5) twice: rec(1) .. rec(5) return n(n+1)/2, innermost first.
    let rec_words = r.words(1);
    let want: Vec<Vec<u64>> = [1..=5u64, 1..=5]
        .into_iter()
        .flatten()
        .map(|n| vec![n * (n + 1) / 2, n])
        .collect();
    assert_eq!(rec_words, want);
    assert_eq!(r.counts("add3"), (3, 0));
    assert_eq!(r.counts("rec"), (10, 0));
}

/// Each call is one hit of its function's entry probe and one of its
/// return probe, whatever the transport, and whether the return probe
/// runs a handler (`wprobe run`) or reports its calls as events, no
/// handler run (a session asking for entry notices, as `wprobe trace`
/// does for its built-in handlers: each `Event::Returned` is a hit). The
/// program: an entry probe on `add3`, return probes on `add3` and `rec`;
/// `calls rec` makes 3 calls of `add3` and twice 5 of `rec`. (The
/// session driven from here, not by `wprobe run`, saw no hit of the entry
/// probe under perf, with the return probe on the same entry: not
/// understood yet, so the session runs the return probes alone.)
fn each_call_is_one_hit_of_its_entry_and_return_probes(transport: &'static str) {
    let t = target();
    let prog = write(
        &format!("hits-{transport}.rpn"),
        format!(
            "name = {}\nmajor = 1\n\
             offset = add3\nminor = 0\n push r, rdi\n log 1\n\
             offset = add3\nreturn = yes\nminor = 1\n push r, rax\n log 1\n\
             offset = rec\nreturn = yes\nminor = 2\n push r, rax\n log 1\n",
            t.display()
        ),
    );
    let args = ["calls", "rec"];
    let want = [(3, 0), (3, 0), (10, 0)];
    let r = run(transport, &prog, &[], &t, &args);
    same_as_untraced(&r, &t, &args);
    let counts: Vec<(u64, u64)> = r.stats["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["hits"].as_u64().unwrap(), p["missed"].as_u64().unwrap()))
        .collect();
    assert_eq!(counts, want, "(hits, missed) with handlers: {}", r.stderr);
    // The return probes alone, run by a session as `wprobe trace` runs
    // them: their returns are hits whether told as events or run.
    let returns = write(
        &format!("hits-returns-{transport}.rpn"),
        format!(
            "name = {}\nmajor = 1\n\
             offset = add3\nreturn = yes\nminor = 1\n push r, rax\n log 1\n\
             offset = rec\nreturn = yes\nminor = 2\n push r, rax\n log 1\n",
            t.display()
        ),
    );
    for notices in [false, true] {
        assert_eq!(
            session_hits(transport, &returns, &t, &args, notices),
            want[1..],
            "(hits, missed) of a session, the calls told as events: {notices}"
        );
    }
}

/// `(hits, missed)` of each probe of RPN program `prog` run by a session
/// (`notices`: whose return probes report their calls as events,
/// `Session::request_entry_notices`) under `transport` (`auto`: the
/// planner's choice), over `target ARGS`, which must print and exit as
/// untraced, with nothing dropped.
fn session_hits(
    transport: &str,
    prog: &Path,
    target: &Path,
    args: &[&str],
    notices: bool,
) -> Vec<(u64, u64)> {
    use runtime::session::{LoadedProgram, RunOptions, Session};
    use runtime::transport::{ExitStatus, OpenOptions, Target};
    let engine = runtime::wasm::engine::new_engine().unwrap();
    let (wasm, _) = runtime::probe::programs::compile_rpn(prog, &[], &[], Vec::new()).unwrap();
    let module = runtime::wasm::load::load(&engine, &wasm, None).unwrap();
    let options = RunOptions {
        follow_forks: false,
        verify_opcodes: true,
        groups: Vec::new(),
        types: Vec::new(),
        fuel: None,
        format: runtime::out::format::Format::Text,
        text: Default::default(),
    };
    let program = LoadedProgram {
        label: "hits".into(),
        module,
    };
    let mut s = Session::new(&engine, vec![program], options, Box::new(std::io::sink())).unwrap();
    if notices {
        s.request_entry_notices(0);
    }
    s.track_every_call(0);
    s.set_use_cache(false);
    let plan = runtime::plan::choose(transport, &Default::default(), &|i| s.check(i))
        .unwrap_or_else(|e| panic!("{transport}: {e}"));
    let out = scratch().join(format!("hits-session-{transport}-{notices}.out"));
    let mut argv: Vec<std::ffi::OsString> = vec![
        target.as_os_str().to_owned(),
        format!(">{}", out.display()).into(),
    ];
    argv.extend(args.iter().map(Into::into));
    let info = plan.info;
    let registers = if info.caps.synchronous {
        runtime::wasm::regscan::RegsRead::All
    } else {
        s.registers_read()
    };
    let options = OpenOptions {
        follow_forks: false,
        verify_opcodes: true,
        reads_memory: s.reads_memory(),
        registers,
        ring_full: Default::default(),
    };
    let mut t = (info.open)(Target::Launch(&argv), &options).unwrap();
    let main = t.main_pid();
    s.arm_at_start(t.as_mut(), main, false).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let status = s.run(t.as_mut(), &stop).unwrap();
    let (output, code) = untraced(target, args);
    let code = code.map(ExitStatus::Code);
    assert_eq!(status, code, "{}: the target's exit status", info.name);
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        output,
        "{}",
        info.name
    );
    let stats = s.stats();
    assert!(
        stats.iter().all(|(_, st)| st.dropped == 0),
        "{}: {stats:?}",
        info.name
    );
    stats.iter().map(|(_, st)| (st.hits, st.missed)).collect()
}
