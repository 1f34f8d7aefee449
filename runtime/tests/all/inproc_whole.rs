//! Relocated copies of whole functions under the in-process transport
//! (`tests/progs/whole_funcs.c`): `leafsum`, whose `ret`s are branch
//! targets with no room for a jump nor padding in reach of a near jump,
//! and which calls nothing, runs as a copy whose `ret`s jump to return
//! stubs: no trap, every call and return value exact, the program's output
//! unchanged, and after a detach the code is the file's again. `callsum`,
//! the same shape with a `call`, keeps its trap, the reason said.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{
    gcc, live_bytes, output_within, output_within_child, progs, scratch, signal, stderr, wprobe,
};

pub const CASES: &[Case] = &[
    case!(
        a_leaf_function_whose_rets_take_no_jump_runs_as_a_copy,
        Need::Ptrace
    ),
    case!(detach_puts_the_copied_function_s_entry_back, Need::Ptrace),
];

/// `whole_funcs.c`, non-PIE (link-time addresses are run-time ones).
fn whole_funcs() -> PathBuf {
    gcc(
        "whole_funcs",
        &progs().join("whole_funcs.c"),
        &["-O2", "-fcf-protection=none", "-fno-pie", "-no-pie"],
    )
}

/// Start and size of function `name` of `exe`.
fn func(exe: &Path, name: &str) -> (u64, u64) {
    let elf = wprobe_elf::ElfInfo::open(exe).unwrap();
    match elf.lookup(name) {
        wprobe_elf::Lookup::Found(s) => (s.value, s.size),
        other => panic!("{name}: {other:?}"),
    }
}

/// `leafsum(n)` as the program computes it.
fn leafsum(n: i64) -> i64 {
    if n <= 0 {
        return 0;
    }
    let s = n * (n + 1) / 2 + 3;
    if s > 1000 { s - 1000 } else { s }
}

/// The program's result after `n` terms.
fn sum(n: i64) -> i64 {
    (0..n)
        .map(|i| leafsum(i % 60 - 5) + if i % 7 > 0 { 2 * (i % 7) + 1 } else { 0 })
        .sum()
}

/// The shapes the tests are about: `leafsum`'s last `ret` is a branch
/// target with `callsum` right after it, `callsum`'s with `filler_b`.
/// Returns the file's bytes from `filler_a` to the end of `filler_b`, and
/// where they start.
fn shapes(exe: &Path) -> (u64, Vec<u8>) {
    let elf = wprobe_elf::ElfInfo::open(exe).unwrap();
    let (leaf, leaf_len) = func(exe, "leafsum");
    let (calls, calls_len) = func(exe, "callsum");
    let (a, _) = func(exe, "filler_a");
    let (b, b_len) = func(exe, "filler_b");
    assert_eq!(leaf + leaf_len, calls, "callsum right after leafsum");
    assert_eq!(calls + calls_len, b, "filler_b right after callsum");
    assert_eq!(elf.bytes_at(leaf + leaf_len - 1, 1).unwrap(), [0xc3]);
    assert_eq!(elf.bytes_at(calls + calls_len - 1, 1).unwrap(), [0xc3]);
    (
        a,
        elf.bytes_at(a, (b + b_len - a) as usize).unwrap().to_vec(),
    )
}

/// Every call of `leafsum` is traced with its return value and no site
/// traps in it (its copy said under `WPROBE_DEBUG`); `callsum` traps at
/// its `ret` with the reason; the counts over 1,000 terms are exact.
fn a_leaf_function_whose_rets_take_no_jump_runs_as_a_copy() {
    let exe = whole_funcs();
    shapes(&exe);
    let (leaf, leaf_len) = func(&exe, "leafsum");
    let (calls, calls_len) = func(&exe, "callsum");
    let plain = Command::new(&exe).arg("1000").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        format!("{}\n", sum(1000))
    );
    // The return values of 70 calls (both `ret`s taken).
    let tree = scratch().join("whole_funcs.tree");
    let mut c = wprobe();
    c.args(["trace", "--transport", "inproc", "-F", "leafsum", "-T"])
        .args(["--no-pid", "-i", "-o"])
        .arg(&tree)
        .arg("--")
        .arg(&exe)
        .arg("70")
        .env("WPROBE_DEBUG", "1")
        .current_dir(scratch());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{}\n", sum(70)),
        "{err}"
    );
    let copied: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("run in a relocated copy of the whole function"))
        .collect();
    assert_eq!(copied.len(), 1, "{err}");
    assert!(
        copied[0].contains(&format!(
            ": {leaf:#x} leafsum: its `ret`s ({:#x}, {:#x}) run in a relocated copy",
            leaf + leaf_len - 5,
            leaf + leaf_len - 1
        )),
        "{}",
        copied[0]
    );
    let traps: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("a trap instead"))
        .collect();
    assert_eq!(traps.len(), 1, "{err}");
    assert!(
        traps[0].contains(&format!(": {:#x} in callsum: ", calls + calls_len - 1))
            && traps[0].contains(&format!(
                "; nor a relocated copy of the whole function: it calls (at {:#x}), and a \
                 return address into a copy must never be on the stack): a trap instead",
                calls + 8
            )),
        "{}",
        traps[0]
    );
    let want: String = (0..70)
        .map(|i| {
            format!(
                "==> leafsum()\n<== leafsum() [rax = {:#x}]\n",
                leafsum(i % 60 - 5)
            )
        })
        .collect();
    let got: String = std::fs::read_to_string(&tree)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("+++ "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(got, want, "{err}");
    // Exact counts over 1,000 terms; the stops are `callsum`'s alone.
    let out = scratch().join("whole_funcs.report.json");
    let mut c = wprobe();
    c.args(["trace", "--transport", "inproc", "--report"])
        .args(["--format", "json", "-o"])
        .arg(&out)
        .args(["-X", "_*", "-X", "*tm_clones", "-X", "frame_dummy", "--"])
        .arg(&exe)
        .arg("1000")
        .env("WPROBE_DEBUG", "1")
        .current_dir(scratch());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{}\n", sum(1000)),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "1000 ptrace stops at trap sites; the busiest: callsum at {:#x} (1000)\n",
            calls + calls_len - 1
        )),
        "{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let got: BTreeMap<String, u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["function"].as_str().unwrap().to_string(),
                r["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    let twice = (0..1000).filter(|i| i % 7 > 0).count() as u64;
    let want: BTreeMap<String, u64> = [
        ("callsum", 1000),
        ("filler_a", 1),
        ("filler_b", 1),
        ("leafsum", 1000),
        ("main", 1),
        ("twice", twice),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(got, want, "{err}");
}

/// `whole_funcs` reading its input, traced by `wprobe trace -p` under
/// inproc: once armed (a `jmp` at `leafsum`'s entry), 30 terms are
/// traced; after SIGINT (wprobe detaches) the code from `filler_a` to the
/// end of `filler_b` is the file's, and the program goes on with the
/// right results.
fn detach_puts_the_copied_function_s_entry_back() {
    let exe = whole_funcs();
    let (lo, orig) = shapes(&exe);
    let (leaf, _) = func(&exe, "leafsum");
    let mut target = Command::new(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = target.id();
    let mut to = target.stdin.take().unwrap();
    let mut from = BufReader::new(target.stdout.take().unwrap()).lines();
    let out = scratch().join("whole_funcs_attached.json");
    let w = wprobe()
        .args(["trace", "--transport", "inproc", "-p", &pid.to_string()])
        .args(["-F", "leafsum", "--report", "--format", "json", "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while live_bytes(pid, leaf, 1) != [0xe9] {
        assert!(Instant::now() < deadline, "not armed within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    writeln!(to, "30").unwrap();
    assert_eq!(from.next().unwrap().unwrap(), format!("sum {}", sum(30)));
    signal(w.id(), "INT");
    let o = output_within_child(w, 30);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!runtime::transport::inproc::journal::path(pid as i32).exists());
    assert_eq!(live_bytes(pid, lo, orig.len()), orig, "the file's bytes");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let leafsum = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == "leafsum")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(leafsum["calls"], 30, "{v}");
    writeln!(to, "970").unwrap();
    drop(to);
    assert_eq!(from.next().unwrap().unwrap(), format!("sum {}", sum(1000)));
    assert_eq!(from.next().unwrap().unwrap(), format!("done {}", sum(1000)));
    assert!(target.wait().unwrap().success());
}
