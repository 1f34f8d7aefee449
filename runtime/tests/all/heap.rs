//! What wprobe's own speed-ups leave of the traced program: wprobe's heap
//! is in pages of 4 KiB, not transparent huge pages (its allocator's arena
//! is advised `MADV_NOHUGEPAGE` at start-up, `runtime/src/sys/alloc.rs`;
//! docs/architecture.md, "wprobe's heap in pages of 4 KiB"), and the
//! program it traces keeps its own use of huge pages (not
//! `PR_SET_THP_DISABLE`, which it would inherit); the launched command and
//! wprobe's thread share one CPU while the agent is loaded
//! (`World::pin_together`), and both have their CPUs back once the command
//! runs; wprobe's memory is freed after its exit by a child that shares
//! it (`sys::process::free_memory_after_exit`), gone once wprobe is.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{scratch, wprobe};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(
        the_heap_is_in_small_pages_and_the_target_keeps_huge_ones,
        Need::Ptrace
    ),
    case!(
        the_traced_command_and_wprobe_have_their_cpus_back,
        Need::Ptrace
    ),
    case!(
        the_child_that_frees_wprobes_memory_goes_with_it,
        Need::Ptrace
    ),
];

/// The children of every thread of process `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// `wprobe trace --transport inproc` of `sleep SECONDS` (its records in
/// `out` in the scratch directory), and the traced sleep's pid, half a
/// second after it started: armed (the agent loaded, wprobe's heap
/// grown) and running.
fn trace_sleep(out: &str, seconds: &str) -> (std::process::Child, u32) {
    let w = wprobe()
        .args(["trace", "--transport", "inproc", "-o"])
        .arg(scratch().join(out))
        .args(["--", "/usr/bin/sleep", seconds])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let target = traced_sleep(w.id());
    std::thread::sleep(Duration::from_millis(500));
    (w, target)
}

/// The traced `sleep` of wprobe `wpid`: its child once it executes
/// /usr/bin/sleep (waited for up to 10 s).
fn traced_sleep(wpid: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sleeping = children(wpid).into_iter().find(|&c| {
            std::fs::read_link(format!("/proc/{c}/exe"))
                .is_ok_and(|e| e == std::path::Path::new("/usr/bin/sleep"))
        });
        if let Some(t) = sleeping {
            return t;
        }
        assert!(Instant::now() < deadline, "no traced sleep after 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The anonymous mappings of process `pid` of at least `min` bytes that
/// can be read and written (not the reservations without access that
/// wasmtime makes for its memories): their range, their `VmFlags` line
/// and their `AnonHugePages` line (`/proc/PID/smaps`).
fn large_anonymous_mappings(pid: u32, min: u64) -> Vec<(String, String, String)> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut huge = String::new();
    for l in smaps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if let Some((lo, hi)) = f.first().and_then(|r| r.split_once('-'))
            && let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16))
        {
            // An anonymous mapping has no sixth field (no path).
            current = (f.len() == 5 && hi - lo >= min).then(|| f[0].to_string());
            continue;
        }
        if l.starts_with("AnonHugePages:") {
            huge = l.split_whitespace().collect::<Vec<_>>().join(" ");
        }
        if let (Some(range), Some(flags)) = (&current, l.strip_prefix("VmFlags:")) {
            if flags.contains(" rd") && flags.contains(" wr") {
                out.push((range.clone(), flags.to_string(), huge.clone()));
            }
            current = None;
        }
    }
    out
}

fn the_heap_is_in_small_pages_and_the_target_keeps_huge_ones() {
    let (mut w, target) = trace_sleep("heap-trace.txt", "3");
    let wpid = w.id();
    // mimalloc's arena: a reservation of 1 GiB.
    let arenas = large_anonymous_mappings(wpid, 256 << 20);
    assert!(!arenas.is_empty(), "no arena found in wprobe's mappings");
    for (range, flags, huge) in &arenas {
        assert!(flags.contains(" nh"), "{range}: {flags}");
        assert!(!flags.contains(" hg"), "{range}: {flags}");
        // Not one, not even those touched before `main` advised it.
        assert_eq!(huge, "AnonHugePages: 0 kB", "{range}");
    }
    let status = std::fs::read_to_string(format!("/proc/{target}/status")).unwrap();
    assert!(
        status.lines().any(|l| l == "THP_enabled:\t1"),
        "the traced program may not use huge pages:\n{status}"
    );
    // wprobe's own flag given back too (`sys::alloc::no_huge_pages`).
    let status = std::fs::read_to_string(format!("/proc/{wpid}/status")).unwrap();
    assert!(
        status.lines().any(|l| l == "THP_enabled:\t1"),
        "wprobe kept huge pages off:\n{status}"
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = w.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = w.kill();
            panic!("wprobe did not end 15 s after a sleep of 3 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

/// The `Cpus_allowed_list` line of `/proc/PATH/status`.
fn cpus_allowed(path: &str) -> String {
    std::fs::read_to_string(format!("/proc/{path}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .unwrap()
        .to_string()
}

fn the_traced_command_and_wprobe_have_their_cpus_back() {
    let mine = cpus_allowed("self");
    let (mut w, target) = trace_sleep("cpus-trace.txt", "2");
    let wpid = w.id();
    assert_eq!(cpus_allowed(&target.to_string()), mine, "the traced sleep");
    assert_eq!(
        cpus_allowed(&format!("{wpid}/task/{wpid}")),
        mine,
        "wprobe's main thread"
    );
    // And every thread it started meanwhile (its heartbeat's).
    for t in std::fs::read_dir(format!("/proc/{wpid}/task")).unwrap() {
        let t = t.unwrap().file_name().into_string().unwrap();
        let comm =
            std::fs::read_to_string(format!("/proc/{wpid}/task/{t}/comm")).unwrap_or_default();
        assert_eq!(
            cpus_allowed(&format!("{wpid}/task/{t}")),
            mine,
            "wprobe's thread {t} ({})",
            comm.trim()
        );
    }
    let status = w.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// Whether process `pid` is gone (or a zombie its new parent has yet to
/// reap).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn the_child_that_frees_wprobes_memory_goes_with_it() {
    let py = std::path::Path::new("/usr/bin/python3.11");
    assert!(
        py.exists(),
        "/usr/bin/python3.11 is missing (Debian's python3.11)"
    );
    let out = wprobe()
        .env("WPROBE_DEBUG", "1")
        .args(["trace", "--transport", "inproc", "-o"])
        .arg(scratch().join("keeper-trace.txt"))
        .arg("--")
        .arg(py)
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Python 3.11.2\n");
    let err = String::from_utf8_lossy(&out.stderr);
    let pid: u32 = err
        .lines()
        .find_map(|l| l.strip_prefix("wprobe: debug: memory freed after the exit by process "))
        .unwrap_or_else(|| panic!("no keeper said (a trace of python3.11 is large):\n{err}"))
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} still there 5 s after wprobe's exit"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
