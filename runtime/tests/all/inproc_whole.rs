//! Relocated copies of whole functions under the in-process transport
//! (`tests/progs/whole_funcs.c`, `tests/progs/copy_throw.cpp`): `leafsum`,
//! whose `ret`s are branch targets with no room for a jump nor padding in
//! reach of a near jump, and which calls nothing, `callsum`, the same shape
//! with a `call`, `recsum`, which calls itself, and `coldsum`, whose
//! `.cold` part jumps back into its middle, run as copies whose `ret`s
//! jump to return stubs and whose calls return (and whose `.cold` part
//! comes back) through a jump back into the copy: no trap, every call and return
//! value exact, the program's output unchanged, and after a detach the code
//! is the file's again. A C++ exception thrown through a copy, and
//! `backtrace()` under it, see the original function.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{
    gcc, live_bytes, output_within, output_within_child, progs, scratch, signal, stderr, wprobe,
};
use crate::support::target::{counts, func, inproc_report, inproc_tree, report_calls, spawn_piped};

pub const CASES: &[Case] = &[
    case!(
        functions_whose_rets_take_no_jump_run_as_copies,
        Need::Ptrace
    ),
    case!(detach_puts_the_copied_functions_code_back, Need::Ptrace),
    case!(
        a_warm_run_takes_its_copies_from_the_plan_cache,
        Need::Ptrace
    ),
    case!(
        an_exception_thrown_through_a_copy_is_caught_as_untraced,
        Need::Ptrace
    ),
];

/// `whole_funcs.c`, non-PIE (link-time addresses are run-time ones).
fn whole_funcs() -> PathBuf {
    gcc(
        "whole_funcs",
        &progs().join("whole_funcs.c"),
        &["-O2", "-fcf-protection=none", "-fno-pie", "-no-pie"],
    )
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
        .map(|i| {
            leafsum(i % 60 - 5)
                + if i % 7 > 0 { 2 * (i % 7) + 1 } else { 0 }
                + (i % 5) * (i % 5 + 1) / 2
                + coldsum(i % 9 - 4)
        })
        .sum()
}

/// The tree of `-F leafsum` over `n` terms: each call with its return
/// value.
fn leafsum_tree(n: i64) -> String {
    (0..n)
        .map(|i| {
            format!(
                "==> leafsum()\n<== leafsum() [rax = {:#x}]\n",
                leafsum(i % 60 - 5)
            )
        })
        .collect()
}

/// `coldsum(n)` as the program computes it.
fn coldsum(n: i64) -> i64 {
    if n == 0 { 0 } else { n.abs() + 2 }
}

/// The shapes the tests are about: `leafsum`'s last `ret` is a branch
/// target with `callsum` right after it, `callsum`'s with `recsum`,
/// `recsum`'s with `coldsum`, `coldsum`'s with `filler_b`, and
/// `coldsum.cold` after `filler_b`. Returns the file's bytes from
/// `filler_a` to the end of `coldsum.cold`, and where they start.
fn shapes(exe: &Path) -> (u64, Vec<u8>) {
    let elf = wprobe_elf::ElfInfo::open(exe).unwrap();
    let (leaf, leaf_len) = func(exe, "leafsum");
    let (calls, calls_len) = func(exe, "callsum");
    let (rec, rec_len) = func(exe, "recsum");
    let (cold, cold_len) = func(exe, "coldsum");
    let (a, _) = func(exe, "filler_a");
    let (b, b_len) = func(exe, "filler_b");
    let (c, c_len) = func(exe, "coldsum.cold");
    assert_eq!(leaf + leaf_len, calls, "callsum right after leafsum");
    assert_eq!(calls + calls_len, rec, "recsum right after callsum");
    assert_eq!(rec + rec_len, cold, "coldsum right after recsum");
    assert_eq!(cold + cold_len, b, "filler_b right after coldsum");
    assert_eq!(b + b_len, c, "coldsum.cold right after filler_b");
    for end in [
        leaf + leaf_len,
        calls + calls_len,
        rec + rec_len,
        cold + cold_len,
    ] {
        assert_eq!(elf.bytes_at(end - 1, 1).unwrap(), [0xc3]);
    }
    (
        a,
        elf.bytes_at(a, (c + c_len - a) as usize).unwrap().to_vec(),
    )
}

/// Where the original jumps back into the copies: after the `call` in
/// `callsum` and in `recsum` (where their calls return), and where
/// `coldsum.cold` jumps back into `coldsum`.
fn returns(exe: &Path) -> [u64; 3] {
    let (calls, _) = func(exe, "callsum");
    let (rec, _) = func(exe, "recsum");
    let (cold, _) = func(exe, "coldsum");
    // `xor; test; jle; push; call`, `xor; test; jle; push; mov; lea;
    // call` and `mov; test; js rel32; je`.
    [calls + 13, rec + 20, cold + 14]
}

/// `wprobe trace -F NAME -T -i` of `whole_funcs N` under inproc, with
/// `WPROBE_DEBUG`: its output (checked to be the program's) and the tree
/// (the calls of NAME and of what they call).
fn traced_tree(exe: &Path, name: &str, n: i64) -> (String, String) {
    let (out, err, got) = inproc_tree(exe, &format!("whole_funcs.{name}"), name, &n.to_string());
    assert_eq!(out, format!("{}\n", sum(n)), "{err}");
    (err, got)
}

/// The copies a run makes are kept in its plan cache and taken from it by
/// the next run of the program (non-PIE: the same addresses, the same
/// stub areas), which traces the same calls with the same return values
/// and says its copies as the first did; the plan file is not written
/// again.
fn a_warm_run_takes_its_copies_from_the_plan_cache() {
    let exe = whole_funcs();
    let cache = scratch().join("whole_funcs.plans");
    let _ = std::fs::remove_dir_all(&cache);
    let tree = scratch().join("whole_funcs.warm.tree");
    let run = || {
        let mut c = wprobe();
        c.args([
            "trace",
            "--transport",
            "inproc",
            "-v",
            "-F",
            "leafsum",
            "-T",
        ])
        .args(["--no-pid", "-i", "-o"])
        .arg(&tree)
        .arg("--")
        .arg(&exe)
        .arg("70")
        .env("WPROBE_DEBUG", "1")
        .env("WPROBE_CACHE_DIR", &cache)
        .env_remove("WPROBE_NO_CACHE")
        .current_dir(scratch());
        let o = output_within(c, 120);
        let err = stderr(&o);
        assert!(o.status.success(), "{err}");
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("{}\n", sum(70)),
            "{err}"
        );
        // What it says of its copies, the process's id left out.
        let copies: Vec<String> = err
            .lines()
            .filter(|l| l.contains("run in a relocated copy of the whole function"))
            .map(|l| l.splitn(3, ": ").nth(2).unwrap_or(l).to_string())
            .collect();
        // The tree, without its process lines (`+++ `).
        let tree: String = std::fs::read_to_string(&tree)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("+++ "))
            .map(|l| format!("{l}\n"))
            .collect();
        (err, copies, tree)
    };
    // (name, inode) of each plan file: one written again is a new file.
    let plans = || -> Vec<(String, u64)> {
        use std::os::unix::fs::MetadataExt;
        let mut v: Vec<(String, u64)> = std::fs::read_dir(cache.join("plans"))
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().ino(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let (cold_err, cold_copies, cold) = run();
    assert_eq!(cold_copies.len(), 4, "{cold_err}");
    assert!(
        !cold_err.contains("as an earlier run made them"),
        "{cold_err}"
    );
    let written = plans();
    assert!(!written.is_empty(), "{cold_err}");
    let (warm_err, warm_copies, warm) = run();
    assert_eq!(warm, cold, "{warm_err}");
    assert_eq!(warm_copies, cold_copies, "{warm_err}");
    assert!(
        warm_err.lines().any(|l| l.starts_with("wprobe: debug: process ")
            && l.ends_with(": 4 relocated copies of whole functions as an earlier run made them (plan cache)")),
        "{warm_err}"
    );
    assert!(!warm_err.contains("a trap instead"), "{warm_err}");
    assert_eq!(plans(), written, "{warm_err}");
    let want = leafsum_tree(70);
    assert_eq!(warm, want, "{warm_err}");
    std::fs::remove_dir_all(&cache).unwrap();
}

/// Every call of `leafsum`, `callsum` and `recsum` is traced with its
/// return value and no site traps (each copy said under `WPROBE_DEBUG`,
/// with the jumps back at the return addresses of the calls); the counts
/// over 1,000 terms are exact, with no ptrace stop.
fn functions_whose_rets_take_no_jump_run_as_copies() {
    let exe = whole_funcs();
    shapes(&exe);
    let (leaf, leaf_len) = func(&exe, "leafsum");
    let (calls, calls_len) = func(&exe, "callsum");
    let (rec, rec_len) = func(&exe, "recsum");
    let [calls_next, rec_next, cold_back] = returns(&exe);
    let (cold, cold_len) = func(&exe, "coldsum");
    let plain = Command::new(&exe).arg("1000").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        format!("{}\n", sum(1000))
    );
    // The return values of 70 calls of `leafsum` (both `ret`s taken).
    let (err, got) = traced_tree(&exe, "leafsum", 70);
    let copied: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("run in a relocated copy of the whole function"))
        .collect();
    assert_eq!(copied.len(), 4, "{err}");
    assert!(
        copied[0].contains(&format!(
            ": {leaf:#x} leafsum: its `ret`s ({:#x}, {:#x}) run in a relocated copy",
            leaf + leaf_len - 5,
            leaf + leaf_len - 1
        )) && !copied[0].contains("jump back"),
        "{}",
        copied[0]
    );
    assert!(!err.contains("a trap instead"), "{err}");
    let want = leafsum_tree(70);
    assert_eq!(got, want, "{err}");
    // `callsum`: its call of `twice` returns to the copy, and is seen.
    let (err, got) = traced_tree(&exe, "callsum", 14);
    let copied: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(&format!(": {calls:#x} callsum: ")))
        .collect();
    assert_eq!(copied.len(), 1, "{err}");
    assert!(
        copied[0].contains(&format!(
            ": {calls:#x} callsum: its `ret`s ({:#x}) run in a relocated copy",
            calls + calls_len - 1
        )) && copied[0].ends_with(&format!(
            "; 1 jump back into the copy at ({calls_next:#x}), where its calls return or \
             branches from outside it land"
        )),
        "{}",
        copied[0]
    );
    assert!(!err.contains("a trap instead"), "{err}");
    let want: String = (0..14)
        .map(|i| {
            let n = i % 7;
            if n > 0 {
                format!(
                    "==> callsum()\n   ==> twice()\n   <== twice() [rax = {:#x}]\n<== callsum() \
                     [rax = {:#x}]\n",
                    2 * n,
                    2 * n + 1
                )
            } else {
                "==> callsum()\n<== callsum() [rax = 0x0]\n".to_string()
            }
        })
        .collect();
    assert_eq!(got, want, "{err}");
    // `recsum`: each call of itself enters through the entry (a call of
    // its own, nested), and returns to the copy.
    let (err, got) = traced_tree(&exe, "recsum", 10);
    assert!(
        err.contains(&format!(
            ": {rec:#x} recsum: its `ret`s ({:#x}) run in a relocated copy",
            rec + rec_len - 1
        )) && err.contains(&format!(
            "; 1 jump back into the copy at ({rec_next:#x}), where its calls return or \
             branches from outside it land\n"
        )),
        "{err}"
    );
    assert!(!err.contains("a trap instead"), "{err}");
    fn nested(k: i64, depth: usize, out: &mut String) {
        let pad = "   ".repeat(depth);
        out.push_str(&format!("{pad}==> recsum()\n"));
        if k > 0 {
            nested(k - 1, depth + 1, out);
        }
        out.push_str(&format!(
            "{pad}<== recsum() [rax = {:#x}]\n",
            k * (k + 1) / 2
        ));
    }
    let mut want = String::new();
    for i in 0..10 {
        nested(i % 5, 0, &mut want);
    }
    assert_eq!(got, want, "{err}");
    // `coldsum`: back from its `.cold` part into the copy.
    let (err, got) = traced_tree(&exe, "coldsum", 18);
    assert!(
        err.contains(&format!(
            ": {cold:#x} coldsum: its `ret`s ({:#x}) run in a relocated copy",
            cold + cold_len - 1
        )) && err.contains(&format!(
            "; 1 jump back into the copy at ({cold_back:#x}), where its calls return or \
             branches from outside it land\n"
        )),
        "{err}"
    );
    assert!(!err.contains("a trap instead"), "{err}");
    let want: String = (0..18)
        .map(|i| {
            format!(
                "==> coldsum()\n<== coldsum() [rax = {:#x}]\n",
                coldsum(i % 9 - 4)
            )
        })
        .collect();
    assert_eq!(got, want, "{err}");
    // Exact counts over 1,000 terms; no stop.
    let (out, err, got) = inproc_report(&exe, "whole_funcs", "1000");
    assert_eq!(out, format!("{}\n", sum(1000)), "{err}");
    assert!(!err.contains("ptrace stops"), "{err}");
    assert!(!err.contains("a trap instead"), "{err}");
    let twice = (0..1000).filter(|i| i % 7 > 0).count() as u64;
    let recsum: u64 = (0..1000).map(|i| i % 5 + 1).sum();
    let want = counts(&[
        ("callsum", 1000),
        ("coldsum", 1000),
        ("filler_a", 1),
        ("filler_b", 1),
        ("leafsum", 1000),
        ("main", 1),
        ("recsum", recsum),
        ("term", 1000),
        ("twice", twice),
    ]);
    assert_eq!(got, want, "{err}");
    let total: u64 = want.values().sum();
    assert!(
        err.contains(&format!(
            "trace: {total} calls ({total} returned, 0 unwound)"
        )),
        "{err}"
    );
}

/// `whole_funcs` reading its input, traced by `wprobe trace -p` under
/// inproc: once armed (a `jmp` at the entries of `leafsum`, `callsum`,
/// `recsum` and `coldsum`, at the return addresses of the calls of the
/// middle two, and where `coldsum.cold` jumps back), 30 terms are traced;
/// after SIGINT (wprobe detaches) the code from `filler_a` to the end of
/// `coldsum.cold` is the file's, and the program goes on with the right
/// results.
fn detach_puts_the_copied_functions_code_back() {
    let exe = whole_funcs();
    let (lo, orig) = shapes(&exe);
    let (leaf, _) = func(&exe, "leafsum");
    let (calls, _) = func(&exe, "callsum");
    let (rec, _) = func(&exe, "recsum");
    let (cold, _) = func(&exe, "coldsum");
    let [calls_next, rec_next, cold_back] = returns(&exe);
    let jumps = [leaf, calls, rec, cold, calls_next, rec_next, cold_back];
    let (mut target, mut to, mut from) = spawn_piped(&exe, &[]);
    let pid = target.id();
    let out = scratch().join("whole_funcs_attached.json");
    let w = wprobe()
        .args(["trace", "--transport", "inproc", "-p", &pid.to_string()])
        .args([
            "-F", "leafsum", "-F", "callsum", "-F", "recsum", "-F", "coldsum",
        ])
        .args(["--report", "--format", "json", "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while jumps.iter().any(|&at| live_bytes(pid, at, 1) != [0xe9]) {
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
    let calls_of = |name: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|r| r["function"] == name)
            .unwrap_or_else(|| panic!("{v}"))["calls"]
            .clone()
    };
    assert_eq!(calls_of("leafsum"), 30, "{v}");
    assert_eq!(calls_of("callsum"), 30, "{v}");
    assert_eq!(
        calls_of("recsum"),
        (0..30).map(|i| i % 5 + 1).sum::<i64>(),
        "{v}"
    );
    assert_eq!(calls_of("coldsum"), 30, "{v}");
    writeln!(to, "970").unwrap();
    drop(to);
    assert_eq!(from.next().unwrap().unwrap(), format!("sum {}", sum(1000)));
    assert_eq!(from.next().unwrap().unwrap(), format!("done {}", sum(1000)));
    assert!(target.wait().unwrap().success());
}

/// `copy_throw.cpp`, non-PIE, its symbols exported (for `dladdr`).
fn copy_throw() -> PathBuf {
    gcc(
        "copy_throw",
        &progs().join("copy_throw.cpp"),
        &[
            "-O2",
            "-fcf-protection=none",
            "-fno-pie",
            "-no-pie",
            "-rdynamic",
            "-lstdc++",
        ],
    )
}

/// `through` runs as a copy (its `ret` takes no jump) while `thrower`,
/// which it calls, throws through it 4 times out of 20 and once calls
/// `backtrace()`: the exceptions are caught in `main` and the backtrace
/// names `through` then `main`, the output the untraced one's; no stop.
fn an_exception_thrown_through_a_copy_is_caught_as_untraced() {
    let exe = copy_throw();
    let (through, len) = func(&exe, "through");
    // `main` catches (its unwind entry has an LSDA: a function that calls
    // and has one is not copied); `through` has none.
    let elf = wprobe_elf::ElfInfo::open(&exe).unwrap();
    let (main, main_len) = func(&exe, "main");
    assert!(elf.has_landing_pads(main, main + main_len));
    assert!(!elf.has_landing_pads(through, through + len));
    let plain = Command::new(&exe).arg("20").output().unwrap();
    assert!(plain.status.success());
    let want = String::from_utf8_lossy(&plain.stdout).to_string();
    assert_eq!(want, "frame 1: through\nframe 2: main\n42311\n");
    let out = scratch().join("copy_throw.report.json");
    let mut c = wprobe();
    c.args(["trace", "--transport", "inproc", "--report"])
        .args(["--format", "json", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg("20")
        .env("WPROBE_DEBUG", "1")
        .current_dir(scratch());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), want, "{err}");
    assert!(
        err.contains(&format!(
            ": {through:#x} through: its `ret`s ({:#x}) run in a relocated copy",
            through + len - 1
        )) && err.contains(&format!(
            "; 1 jump back into the copy at ({:#x}), where its calls return or branches \
             from outside it land\n",
            through + 13
        )),
        "{err}"
    );
    assert!(!err.contains("ptrace stops"), "{err}");
    assert!(!err.contains("a trap instead"), "{err}");
    // 20 calls of `through`, 19 of `thrower` (not for 0), `main` and
    // `filler`; 4 throws unwind `thrower` and `through`.
    assert!(
        err.contains("trace: 41 calls (33 returned, 8 unwound)"),
        "{err}"
    );
    let got = report_calls(&out);
    let want = counts(&[("filler", 1), ("main", 1), ("through", 20), ("thrower", 19)]);
    assert_eq!(got, want, "{err}");
}
