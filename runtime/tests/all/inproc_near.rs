//! Near jumps of the in-process transport: sites where no 5-byte jump
//! fits but alignment padding is near (`tests/progs/near_funcs.c`: two
//! 4-byte functions, a `ret` that is a branch target with 3 bytes of
//! padding after it) take a `jmp rel8` to a `jmp rel32` written into the
//! padding, never a trap: the calls and call trees are exact, the
//! statistics count `near` sites and no `trap`, the program's output is
//! unchanged, and after a detach (SIGINT) or a SIGKILL of wprobe and
//! `wprobe repair` the code, the padding included, is the file's again.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{
    gcc, live_bytes, output_within, output_within_child, progs, scratch, signal, stderr, wprobe,
    write,
};
use crate::support::target::{counts, func, inproc_report, inproc_tree, spawn_piped, wait_bytes};

pub const CASES: &[Case] = &[
    case!(
        short_sites_take_near_jumps_and_every_call_is_traced,
        Need::Ptrace
    ),
    case!(the_statistics_count_near_sites, Need::Ptrace),
    case!(the_statistics_count_return_sites, Need::Ptrace),
    case!(detach_and_repair_put_the_padding_back_too, Need::Ptrace),
    case!(
        a_ret_window_leaves_the_padding_to_the_near_jump_of_a_later_ret,
        Need::Ptrace
    ),
];

/// `near_funcs.c`, built so that its short functions are followed by
/// padding (non-PIE: link-time addresses are run-time ones).
fn near_funcs() -> PathBuf {
    gcc(
        "near_funcs",
        &progs().join("near_funcs.c"),
        &[
            "-O2",
            "-falign-functions=32",
            "-fcf-protection=none",
            "-fno-pie",
            "-no-pie",
        ],
    )
}

/// The program's shapes are the ones the tests are about: `inc` and
/// `twice` too short for a jump, `countdown`'s `ret` a branch target with
/// 3 bytes of padding after it. Returns the file's bytes of the code from
/// `countdown` to the end of `main` (the caves included), and where they
/// start.
fn shapes(exe: &Path) -> (u64, Vec<u8>) {
    let elf = wprobe_elf::ElfInfo::open(exe).unwrap();
    assert_eq!(func(exe, "inc").1, 4, "inc: lea; ret");
    assert_eq!(func(exe, "twice").1, 4, "twice: lea; ret");
    let (cd, _) = func(exe, "countdown");
    assert_eq!(
        elf.bytes_at(cd + 0xa, 6).unwrap(),
        [0x7f, 0x04, 0xc3, 0x0f, 0x1f, 0x00],
        "countdown: jg; ret; nopl (%rax)"
    );
    let (main, main_len) = func(exe, "main");
    let lo = cd.min(main);
    let hi = (main + main_len).max(func(exe, "outer").0 + func(exe, "outer").1);
    (lo, elf.bytes_at(lo, (hi - lo) as usize).unwrap().to_vec())
}

/// The near-jump lines of wprobe's standard error: the functions named.
fn near_lines(err: &str) -> Vec<String> {
    let mut v: Vec<String> = err
        .lines()
        .filter(|l| l.contains(": a near jump (`jmp rel8`) to a `jmp` to its stub"))
        .map(|l| {
            let (_, rest) = l.split_once(" in ").unwrap();
            rest.split_once(':').unwrap().0.to_string()
        })
        .collect();
    v.sort();
    v
}

/// Every site of `near_funcs` takes a jump (the three short ones a near
/// jump, said with -v), none a trap; every call is traced with its exact
/// return value; the program's output is its untraced one.
fn short_sites_take_near_jumps_and_every_call_is_traced() {
    let exe = near_funcs();
    shapes(&exe);
    let plain = Command::new(&exe).arg("1000").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "1499500\n");
    // The call tree under `outer`, 3 calls.
    let (out, err, got) = inproc_tree(&exe, "near_funcs", "outer", "3");
    assert_eq!(out, "12\n", "{err}");
    assert_eq!(near_lines(&err), ["countdown", "inc", "twice"], "{err}");
    assert!(!err.contains("no jump can go"), "{err}");
    assert!(!err.contains("ptrace stops at trap sites"), "{err}");
    let mut want = String::new();
    for i in 0..3u64 {
        want += &format!(
            "==> outer()\n   ==> countdown()\n   <== countdown() [rax = {:#x}]\n   ==> inc()\n   \
             <== inc() [rax = {:#x}]\n   ==> twice()\n   <== twice() [rax = {:#x}]\n\
             <== outer() [rax = {:#x}]\n",
            [0u64, 0xffff_ffff, 0][i as usize],
            i + 1,
            2 * i,
            3 * i + 1
        );
    }
    assert_eq!(got, want, "{err}");
    // Exact counts over 1,000 calls.
    let (out, err, calls) = inproc_report(&exe, "near_funcs", "1000");
    assert_eq!(out, "1499500\n", "{err}");
    assert!(!err.contains("no jump can go"), "{err}");
    let want = counts(&[
        ("countdown", 1000),
        ("inc", 1000),
        ("main", 1),
        ("outer", 1000),
        ("twice", 1000),
    ]);
    assert_eq!(calls, want, "{err}");
}

/// `"sites"` in the statistics: `{"near":1}` for a probe on `inc` and on
/// `twice`, `{"jump":1}` on `outer`; no `trap`.
fn the_statistics_count_near_sites() {
    let exe = near_funcs();
    let wat = write(
        "near_h.wat",
        "(module (func (export \"h\") (result i32) (i32.const 0)))",
    );
    let mut c = wprobe();
    c.args(["run", "--transport", "inproc", "--format", "json"])
        .arg(&wat)
        .args([
            "--probe", "inc=h", "--probe", "twice=h", "--probe", "outer=h",
        ])
        .arg("--")
        .arg(&exe)
        .arg("7")
        .current_dir(scratch());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().any(|l| l == "70"), "{out}");
    let st: serde_json::Value = out
        .lines()
        .find(|l| l.starts_with("{\"kind\":\"stats\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("{out}"));
    let sites: BTreeMap<String, (u64, serde_json::Value)> = st["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["probe"].as_str().unwrap().to_string(),
                (p["hits"].as_u64().unwrap(), p["sites"].clone()),
            )
        })
        .collect();
    let near = serde_json::json!({"near": 1});
    let jump = serde_json::json!({"jump": 1});
    let want: BTreeMap<String, (u64, serde_json::Value)> = [
        ("near_h:inc", (7, near.clone())),
        ("near_h:outer", (7, jump)),
        ("near_h:twice", (7, near)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(sites, want, "{st}");
}

/// A return probe's sites in the statistics (`-v`) are its entry's and
/// its `ret`s': on `countdown`, a jump at the entry and a near jump at its
/// `ret` (a branch target), where only the entry's jump was counted.
fn the_statistics_count_return_sites() {
    let exe = near_funcs();
    let prog = format!("uretprobe:{}:countdown {{ @c = count(); }}", exe.display());
    let mut c = wprobe();
    c.args(["run", "--transport", "inproc", "-v", "-e", &prog, "-c"])
        .arg(format!("{} 7", exe.display()))
        .current_dir(scratch());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("@c: 7"), "{out}{err}");
    let sites: Vec<&str> = err.lines().filter(|l| l.contains("sites of")).collect();
    assert_eq!(sites.len(), 1, "{err}");
    assert!(sites[0].ends_with(": 1 jump, 1 near"), "{err}");
}

/// `near_funcs` reading its input, traced by `wprobe trace -p` under
/// inproc: once its sites are armed (a `jmp rel8` at `inc`), 3 calls are
/// traced; then `end` ends wprobe; the code from `countdown` to `main`'s
/// end, the padding where the caves were included, must be the file's,
/// and the program runs on.
fn attached(name: &str, end: impl FnOnce(std::process::Child, u32)) {
    let exe = near_funcs();
    let (lo, orig) = shapes(&exe);
    let (inc, _) = func(&exe, "inc");
    let (mut target, mut to, mut from) = spawn_piped(&exe, &[]);
    let pid = target.id();
    let w = wprobe()
        .args(["trace", "--transport", "inproc", "-p", &pid.to_string()])
        .args(["-X", "_*", "-X", "*tm_clones", "-X", "frame_dummy"])
        .args(["-o", scratch().join(name).to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bytes(pid, inc, &[0xeb], 20);
    assert_ne!(live_bytes(pid, lo, orig.len()), orig, "patched");
    writeln!(to, "3").unwrap();
    assert_eq!(from.next().unwrap().unwrap(), "sum 12");
    end(w, pid);
    assert_eq!(
        live_bytes(pid, lo, orig.len()),
        orig,
        "the file's bytes, padding included"
    );
    writeln!(to, "997").unwrap();
    drop(to);
    assert_eq!(from.next().unwrap().unwrap(), "sum 1499500");
    assert_eq!(from.next().unwrap().unwrap(), "done 1499500");
    assert!(target.wait().unwrap().success());
}

/// After SIGINT (wprobe detaches) and after SIGKILL of wprobe then `wprobe
/// repair`, the code and the padding of the caves are the file's.
fn detach_and_repair_put_the_padding_back_too() {
    attached("near_int.out", |w, pid| {
        signal(w.id(), "INT");
        let o = output_within_child(w, 30);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(!runtime::transport::inproc::journal::path(pid as i32).exists());
    });
    attached("near_kill.out", |mut w, pid| {
        w.kill().unwrap();
        w.wait().unwrap();
        let r = wprobe()
            .args(["repair", "--pid", &pid.to_string()])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&r.stdout);
        assert!(
            r.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(
            out.starts_with("wprobe: restored ") && out.ends_with(&format!(" in process {pid}\n")),
            "{out}"
        );
        let again = wprobe()
            .args(["repair", "--pid", &pid.to_string()])
            .output()
            .unwrap();
        assert_eq!(again.status.code(), Some(1), "nothing left to repair");
    });
}

/// `near_fib.c`, gcc -O2's fib: its second `ret` (4 bytes, a branch
/// target, no padding after it) takes a near jump to a cave in the 6 bytes
/// of padding after its first `ret`, whose window is the epilogue before
/// it. The first `ret`'s window used to take 4 of those bytes, written
/// over the cave: the program died of SIGSEGV at its first leaf return.
/// Every call is traced and returns, the program's output unchanged.
fn a_ret_window_leaves_the_padding_to_the_near_jump_of_a_later_ret() {
    let exe = gcc(
        "near_fib",
        &progs().join("near_fib.c"),
        &["-O2", "-fcf-protection=none"],
    );
    let out = scratch().join("near_fib.report.json");
    let mut c = wprobe();
    c.args(["trace", "-v", "--transport", "inproc", "--report"])
        .args(["--format", "json", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg("20")
        .current_dir(scratch());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "6765\n", "{err}");
    assert_eq!(near_lines(&err), ["fib"], "{err}");
    assert!(
        err.contains("wprobe: trace: 10948 calls (10948 returned, 0 unwound)"),
        "{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let fib = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["function"] == "fib")
        .unwrap_or_else(|| panic!("no fib in {v}"));
    assert_eq!(fib["calls"].as_u64(), Some(10946), "{err}");
}
