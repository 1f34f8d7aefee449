//! The sandbox, proven on real targets: runaway
//! handlers are stopped by fuel at every hit, trapping handlers are counted,
//! memory growth past the limit is refused, deep recursion is stopped — and
//! each time the traced program runs to its normal end with its normal
//! output. Then random pointers, lengths and values passed to every host
//! import, thousands of times, never panic the host.

use crate::case;
use crate::support::case::Case;

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(a_handler_looping_over_unreadable_memory_is_bounded),
    case!(sigint_and_sigterm_interrupt_a_running_handler),
    case!(infinite_loop_is_stopped_by_fuel_at_every_hit_and_the_target_finishes),
    case!(a_loop_of_host_calls_is_stopped_by_fuel),
    case!(trapping_handlers_are_counted_and_the_target_continues),
    case!(memory_growth_past_the_limit_is_refused),
    case!(deep_recursion_is_stopped),
    case!(random_arguments_to_every_host_import_never_panic_the_host),
    case!(records_of_one_run_are_bounded),
    case!(bulk_host_calls_are_charged_fuel),
    case!(control_characters_from_a_guest_never_reach_the_terminal_raw),
];

use crate::support::cli::{probe_target, scratch, wprobe};

/// What probe_target prints for `n` calls of target_fn.
fn target_output(n: u64) -> String {
    let counter: u64 = (0..n).sum::<u64>() + 1;
    let last = if n == 0 { 0 } else { (n - 1) * 7 + 13 };
    format!("counter={counter} last={last}")
}

struct Outcome {
    /// The target's own output lines.
    target: Vec<String>,
    /// Decoded JSON records (the stats line last).
    records: Vec<serde_json::Value>,
    stderr: String,
    elapsed: std::time::Duration,
}

impl Outcome {
    fn stats(&self) -> &serde_json::Value {
        let s = self.records.last().expect("stats line");
        assert_eq!(s["kind"], "stats", "{s}");
        s
    }
}

/// Runs the WAT handler `h` on every call of target_fn, `n` calls, JSON output.
fn run_handler(wat: &str, n: u64, extra: &[&str]) -> Outcome {
    let name = format!("h{:x}.wat", fxhash(wat));
    let p = scratch().join(name);
    std::fs::write(&p, wat).unwrap();
    let t0 = std::time::Instant::now();
    let o = wprobe()
        .args(["run", "--transport", "ptrace"])
        .arg(&p)
        .args(["--probe", "target_fn=h", "--format", "json"])
        .args(extra)
        .arg("--")
        .arg(probe_target())
        .arg(n.to_string())
        .output()
        .unwrap();
    let elapsed = t0.elapsed();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let out = String::from_utf8(o.stdout).unwrap();
    let (json, text): (Vec<&str>, Vec<&str>) = out.lines().partition(|l| l.starts_with('{'));
    Outcome {
        target: text.into_iter().map(str::to_string).collect(),
        records: json
            .into_iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        stderr,
        elapsed,
    }
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A handler module: the given imports and functions, handler `h`.
fn module(body: &str) -> String {
    format!(
        r#"(module
  (import "wprobe" "now_ns" (func $now_ns (result i64)))
  (import "wprobe" "read_mem" (func $read_mem (param i64 i32 i32) (result i32)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  {body})"#
    )
}

fn infinite_loop_is_stopped_by_fuel_at_every_hit_and_the_target_finishes() {
    let wat = module(r#"(func (export "h") (result i32) (loop $l (br $l)) (i32.const 0))"#);
    // 1,000 hits with a small budget.
    let o = run_handler(&wat, 1000, &["--fuel", "100000"]);
    assert_eq!(o.target, [target_output(1000)]);
    let s = o.stats();
    assert_eq!(
        (&s["hits"], &s["runs"], &s["fuel_exhausted"], &s["traps"]),
        (&1000.into(), &1000.into(), &1000.into(), &0.into()),
        "{s}"
    );
    assert_eq!(o.records.len(), 1, "no records from exhausted runs");
    // The default budget (no manifest, no --fuel) bounds it too.
    let o = run_handler(&wat, 3, &[]);
    assert_eq!(o.target, [target_output(3)]);
    assert_eq!(o.stats()["fuel_exhausted"], 3);
    assert!(
        o.elapsed < std::time::Duration::from_secs(20),
        "{:?}",
        o.elapsed
    );
}

fn a_loop_of_host_calls_is_stopped_by_fuel() {
    let wat = module(
        r#"(func (export "h") (result i32)
             (loop $l (drop (call $now_ns))
                      (drop (call $read_mem (i64.const 0x401146) (i32.const 0) (i32.const 4096)))
                      (br $l))
             (i32.const 0))"#,
    );
    let o = run_handler(&wat, 5, &["--fuel", "200000"]);
    assert_eq!(o.target, [target_output(5)]);
    let s = o.stats();
    assert_eq!(
        (&s["runs"], &s["fuel_exhausted"]),
        (&5.into(), &5.into()),
        "{s}"
    );
}

fn trapping_handlers_are_counted_and_the_target_continues() {
    let cases = [
        (
            r#"(func (export "h") (result i32) unreachable)"#,
            "wasm trap: wasm `unreachable` instruction executed",
        ),
        (
            r#"(func (export "h") (result i32) (i32.load (i32.const 0x7ffffff0)))"#,
            "wasm trap: out of bounds memory access",
        ),
        (
            r#"(func (export "h") (result i32)
                 (call $read_mem (i64.const 0x401146) (i32.const 65530) (i32.const 16)))"#,
            "read_mem: guest range 0xfffa+16 is outside the handler's memory (65536 bytes)",
        ),
        (
            r#"(func (export "h") (result i32)
                 (call $emit_log (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 8)
                                 (i32.const -4) (i32.const 2)))"#,
            "emit_log items: guest range 0xfffffffc+8 is outside the handler's memory (65536 bytes)",
        ),
        (
            r#"(func (export "h") (result i32) (i32.const 99))"#,
            "handler returned 99, not an outcome code",
        ),
    ];
    for (body, msg) in cases {
        let o = run_handler(&module(body), 4, &[]);
        assert_eq!(o.target, [target_output(4)], "{body}");
        let s = o.stats();
        assert_eq!(
            (&s["runs"], &s["traps"], &s["fuel_exhausted"]),
            (&4.into(), &4.into(), &0.into()),
            "{body}: {s}"
        );
        assert_eq!(
            o.stderr.matches("trapped").count(),
            1,
            "the first trap is printed, once: {}",
            o.stderr
        );
        let head = format!(
            "wprobe: handler of h{:x}:target_fn trapped: ",
            fxhash(&module(body))
        );
        assert!(
            o.stderr.contains(&head) && o.stderr.contains(msg),
            "{body}: {}",
            o.stderr
        );
    }
}

fn memory_growth_past_the_limit_is_refused() {
    // Each hit grows memory by 100 pages (6.25 MiB) and logs memory.grow's
    // result: the old size in pages, then -1 once 16 MiB would be exceeded.
    let wat = module(
        r#"(func (export "h") (result i32)
             (i64.store (i32.const 0) (i64.extend_i32_s (memory.grow (i32.const 100))))
             (i32.store (i32.const 8) (i32.const 0x800000))
             (drop (call $emit_log (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 8)
                                   (i32.const 8) (i32.const 1)))
             (i32.const 0))"#,
    );
    let o = run_handler(&wat, 4, &[]);
    assert_eq!(o.target, [target_output(4)]);
    let grown: Vec<i64> = o.records[..o.records.len() - 1]
        .iter()
        .map(|r| r["items"][0]["values"][0].as_u64().unwrap() as i64)
        .collect();
    assert_eq!(grown, [1, 101, -1, -1]);
    assert_eq!(o.stats()["traps"], 0);
}

fn deep_recursion_is_stopped() {
    let wat = module(
        r#"(func $down (param i64) (result i64)
             (i64.add (call $down (i64.add (local.get 0) (i64.const 1))) (i64.const 1)))
           (func (export "h") (result i32) (drop (call $down (i64.const 0))) (i32.const 0))"#,
    );
    let o = run_handler(&wat, 3, &["--fuel", "1000000000"]);
    assert_eq!(o.target, [target_output(3)]);
    let s = o.stats();
    assert_eq!((&s["runs"], &s["traps"]), (&3.into(), &3.into()), "{s}");
    assert!(o.stderr.contains("call stack exhausted"), "{}", o.stderr);
}

fn random_arguments_to_every_host_import_never_panic_the_host() {
    let n = crate::support::host_calls::smoke(0x5EED_0001, 40_000);
    assert!(n.calls >= 40_000, "{n:?}");
    // Both outcomes happen: the generator reaches the interesting edges.
    assert!(n.ok > 1_000 && n.trapped > 1_000, "{n:?}");
    assert_eq!(n.imports_called, hostabi::HOST_IMPORTS.len(), "{n:?}");
}

fn records_of_one_run_are_bounded() {
    // Emit 8-byte records until the host says no: the record-count budget.
    let wat = module(
        r#"(func (export "h") (result i32)
             (i32.store (i32.const 8) (i32.const 0x800000))
             (loop $l
               (br_if $l (i32.eqz (call $emit_log (i32.const 1) (i32.const 0) (i32.const 0)
                                                 (i32.const 8) (i32.const 8) (i32.const 1)))))
             (i32.const 0))"#,
    );
    let o = run_handler(&wat, 2, &[]);
    assert_eq!(o.target, [target_output(2)]);
    let s = o.stats();
    assert_eq!(
        (&s["runs"], &s["records"], &s["fuel_exhausted"]),
        (&2.into(), &(2 * 4096).into(), &0.into()),
        "{s}"
    );
    // 2 KiB records: the byte budget (4 MiB) ends it first; a guest that
    // ignores the status runs out of fuel instead of memory.
    let wat = module(
        r#"(func (export "h") (result i32)
             (loop $l
               (drop (call $emit_log (i32.const 1) (i32.const 0) (i32.const 0)
                                     (i32.const 2048) (i32.const 0) (i32.const 0)))
               (br $l))
             (i32.const 0))"#,
    );
    let o = run_handler(&wat, 1, &["--fuel", "50000000"]);
    assert_eq!(o.target, [target_output(1)]);
    let s = o.stats();
    assert_eq!(
        (&s["records"], &s["bytes"], &s["fuel_exhausted"]),
        (&2048.into(), &(4u64 << 20).into(), &1.into()),
        "{s}"
    );
}

fn bulk_host_calls_are_charged_fuel() {
    // Each hit reads 60 KiB per iteration until fuel runs out, counting the
    // iterations in memory; `bump` logs the total. 60 KiB cost 3,840 units
    // and the call itself MEMORY_CALL_FUEL (1,000), so 1,000,000 units allow
    // 207 iterations (without the charges: ~90,000).
    let wat = module(
        r#"(func (export "h") (result i32)
             (loop $l
               (i64.store (i32.const 0) (i64.add (i64.load (i32.const 0)) (i64.const 1)))
               (drop (call $read_mem (i64.const 0x401146) (i32.const 16) (i32.const 0xf000)))
               (br $l))
             (i32.const 0))
           (func (export "report") (result i32)
             (i32.store (i32.const 8) (i32.const 0x800000))
             (drop (call $emit_log (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 8)
                                   (i32.const 8) (i32.const 1)))
             (i32.const 0))"#,
    );
    let o = run_handler(&wat, 3, &["--fuel", "1000000", "--probe", "bump=report"]);
    assert_eq!(o.target, [target_output(3)]);
    assert_eq!(
        o.records[0]["items"][0]["values"][0],
        3 * 207,
        "{:?}",
        o.records
    );
    assert_eq!(o.stats()["fuel_exhausted"], 3);
}

fn control_characters_from_a_guest_never_reach_the_terminal_raw() {
    // A string item holding an OSC title escape, CR, LF and a DEL.
    let wat = module(
        r#"(data (i32.const 0) "\01\0b\00\1b]0;pwn\07\r\n\7f")
           (func (export "h") (result i32)
             (i32.store (i32.const 64) (i32.const 0x820000))
             (drop (call $emit_log (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 14)
                                   (i32.const 64) (i32.const 1)))
             (i32.const 0))"#,
    );
    let p = scratch().join("osc.wat");
    std::fs::write(&p, &wat).unwrap();
    for format in ["text", "json"] {
        let o = wprobe()
            .args(["run", "--transport", "ptrace"])
            .arg(&p)
            .args(["--probe", "target_fn=h", "--format", format, "--"])
            .arg(probe_target())
            .arg("1")
            .output()
            .unwrap();
        assert!(o.status.success());
        let out = String::from_utf8(o.stdout).unwrap();
        let record = out.lines().find(|l| l.contains("osc")).expect(&out);
        assert!(
            !record.bytes().any(|b| b < 0x20 || b == 0x7f),
            "{format}: raw control bytes in {record:?}"
        );
        assert_eq!(
            out.lines().count(),
            2 + (format == "json") as usize,
            "{out:?}"
        );
        if format == "json" {
            let v: serde_json::Value = serde_json::from_str(record).unwrap();
            assert_eq!(
                v["items"][0]["value"]
                    .as_str()
                    .or(v["items"][0]["text"].as_str()),
                Some("\u{1b}]0;pwn\u{7}\r\n\u{7f}"),
                "{record}"
            );
        }
    }
}

/// A handler looping over an unreadable address (an `sx` handler that
/// faults again) in a process with many mappings: each failed read costs a
/// system call, charged as fuel, and the mappings are re-read at most once
/// per hit. It once held the target 18 s per hit (every failed read
/// re-read /proc/PID/maps); now every hit ends by fuel, quickly.
fn a_handler_looping_over_unreadable_memory_is_bounded() {
    let exe = crate::support::cli::gcc(
        "many_maps_O1",
        &crate::support::cli::progs().join("many_maps.c"),
        &["-O1"],
    );
    let p = crate::support::cli::write(
        "unreadable_loop.rpn",
        format!(
            "name = {}\noffset = probe_low\nagain:\n sx again\n push 0x10\n push mem, u64\n exit\n\
             offset = probe_high\nagain2:\n sx again2\n push 0x10\n push mem, u64\n exit\n",
            exe.display()
        ),
    );
    let t0 = std::time::Instant::now();
    let (lines, err, code) = crate::support::cli::run("ptrace", &[&p], &[exe.to_str().unwrap()]);
    let took = t0.elapsed();
    assert_eq!(code, Some(0), "{err}");
    let s = crate::support::cli::stats(&lines);
    assert_eq!(
        (&s["hits"], &s["fuel_exhausted"]),
        (&2.into(), &2.into()),
        "{err}"
    );
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
}

/// SIGINT stops wprobe while a handler runs with an enormous fuel budget:
/// the handler is interrupted (counted), wprobe detaches and exits at once,
/// and the attached process runs on, unpatched.
fn sigint_and_sigterm_interrupt_a_running_handler() {
    for sig in ["INT", "TERM"] {
        a_signal_interrupts_a_running_handler(sig);
    }
}

fn a_signal_interrupts_a_running_handler(sig: &str) {
    let exe = crate::support::cli::slow_target();
    let work = crate::support::cli::sym(&exe, "work");
    let wat = crate::support::cli::write(
        "spin.wat",
        "(module (func (export \"h\") (result i32) (loop $l (br $l)) (i32.const 0)))",
    );
    let mut target = std::process::Command::new(&exe)
        .arg("100000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id();
    let w = crate::support::cli::wprobe()
        .args(["run", "--transport", "ptrace"])
        .arg(&wat)
        .args(["--probe", "work=h", "--fuel", "1000000000000000", "-p"])
        .arg(pid.to_string())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Armed, and a hit's handler spinning: the target's thread is stopped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let state = st
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        if state == "t" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no hit within 10 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t0 = std::time::Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args([&format!("-{sig}"), &w.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let o = w.wait_with_output().unwrap();
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(3),
        "SIG{sig}: {:?}",
        t0.elapsed()
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("interrupted: wprobe is stopping"),
        "SIG{sig}: {err}"
    );
    let mut b = [0u8];
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
        f.read_exact_at(&mut b, work).unwrap();
    }
    assert_ne!(b[0], 0xcc, "unpatched");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(target.try_wait().unwrap().is_none(), "the process runs on");
    target.kill().unwrap();
    target.wait().unwrap();
}
