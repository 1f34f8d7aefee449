//! `--transport perf` on real processes, compared with `--transport ptrace`
//! on the same deterministic targets: hit counts (threads, forks), the
//! records of the same handlers where no live memory is involved (the
//! examples), exact accounting of lost samples, the target's integrity when
//! wprobe is SIGKILLed, `-p` attach, the outcomes perf cannot honour, and
//! the errors (writing handlers, missing permissions).

use crate::case;
use crate::support::case::{Case, Need};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(hit_counts_equal_ptrace_with_four_threads, Need::Perf),
    case!(
        same_handler_same_records_where_no_live_memory_is_read,
        Need::Perf
    ),
    case!(sampled_registers_follow_what_handlers_read, Need::Perf),
    case!(forked_children_inherit_probes_with_f_only, Need::Perf),
    case!(
        children_and_grandchildren_running_at_once_lose_no_call_uncounted,
        Need::Perf
    ),
    case!(
        with_f_a_daemon_is_traced_after_the_command_exits_until_it_exits,
        Need::Perf
    ),
    case!(
        calls_from_a_library_constructor_before_the_entry_point_count_as_under_ptrace,
        Need::Perf
    ),
    case!(
        mallocs_of_ls_from_its_exec_on_count_as_under_ptrace,
        Need::Perf
    ),
    case!(lost_samples_are_counted_exactly, Need::Perf),
    case!(
        sigkill_of_wprobe_leaves_the_target_running_unharmed,
        Need::Perf
    ),
    case!(
        attach_with_p_observes_all_threads_and_leaves_the_process_running,
        Need::Perf
    ),
    case!(
        handler_that_writes_is_refused_naming_program_and_import,
        Need::Perf
    ),
    case!(
        exit_1_and_exit_3_are_counted_and_reported_once_under_perf,
        Need::Perf
    ),
    case!(
        perf_not_permitted_names_the_sysctl_and_the_capability,
        Need::Perf,
        Need::Setpriv
    ),
    case!(tracefs_is_mounted_when_missing, Need::Perf, Need::Unshare),
    case!(
        missing_tracefs_without_privilege_names_the_mount_command,
        Need::Perf,
        Need::Unshare,
        Need::Setpriv
    ),
    case!(
        with_f_a_program_exec_d_by_a_child_is_probed_with_its_own_load_bias,
        Need::Perf
    ),
    case!(
        selection_ignore_maxhits_and_probes_sharing_an_address_match_ptrace,
        Need::Perf
    ),
    case!(
        a_process_probed_by_a_ptrace_instance_is_refused_and_left_traced,
        Need::Perf
    ),
    case!(
        a_ptrace_instance_on_a_perf_probed_instruction_is_refused,
        Need::Perf
    ),
];

use crate::support::cli::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn calls() -> PathBuf {
    gcc("calls", &progs().join("calls.c"), &["-O2", "-fPIE", "-pie"])
}

fn count_program(exe: &Path, name: &str, func: &str) -> PathBuf {
    write(
        name,
        format!(
            "name = {}\ngvars = 1\noffset = {func}\nopcode = 0x{:02x}\n inc gv, 0\n abort\n",
            exe.display(),
            opcode(exe, func)
        ),
    )
}

fn plain(argv: &[&str]) -> String {
    let o = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    assert!(o.status.success());
    String::from_utf8(o.stdout).unwrap()
}

fn hit_counts_equal_ptrace_with_four_threads() {
    let exe = calls();
    let p = count_program(&exe, "count_calls.rpn", "target");
    let argv = [exe.to_str().unwrap(), "1500", "4"];
    let want = plain(&argv);
    for tr in ["ptrace", "perf"] {
        let mut c = wprobe();
        c.arg("run")
            .arg(&p)
            .args(["--transport", tr, "--format", "json", "--"])
            .args(argv)
            // 64 MiB rings hold all 6,000 samples even if wprobe were not
            // scheduled at all until the end (the machine is shared): the
            // count is then exact, not merely accounted for.
            .env("WPROBE_PERF_RING_PAGES", "16384");
        let o = output_within(c, 60);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{tr}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let out = String::from_utf8(o.stdout).unwrap();
        let s: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(s["dropped"], 0, "{tr}");
        assert_eq!(
            (s["hits"].as_u64(), s["runs"].as_u64()),
            (Some(6_000), Some(6_000)),
            "{tr}"
        );
        let own: Vec<&str> = out.lines().filter(|l| !l.starts_with('{')).collect();
        assert_eq!(
            own.join("\n"),
            want.trim_end(),
            "{tr}: the program's own output"
        );
    }
}

fn same_handler_same_records_where_no_live_memory_is_read() {
    // The examples whose handlers read registers, the stack and constants
    // only (02, 09 and 11 read globals: live memory under perf, which may
    // be newer than the hit, or gone once the short target exited).
    let target = probe_target();
    for ex in [
        "01_log_args.rpn",
        "03_branches.rpn",
        "04_loop_abort_remove.rpn",
        "05_procs.rpn",
        "06_exceptions.rpn",
        "07_variables.rpn",
        "08_jmpmax.rpn",
        "10_stacktrace.rpn",
        "12_user_exceptions.rpn",
        "13_preprocessor.rpn",
        "15_stack_arith.rpn",
    ] {
        let file = examples().join(ex);
        let mut got = Vec::new();
        for tr in ["ptrace", "perf"] {
            let (lines, err, code) = run(tr, &[&file], &[target.to_str().unwrap()]);
            assert_eq!(code, Some(0), "{ex} {tr}: {err}");
            let recs: Vec<(String, String, u64, u64, String)> = lines
                .iter()
                .filter(|v| v["kind"] != "stats")
                .map(|v| {
                    (
                        v["kind"].to_string(),
                        v["probe"].to_string(),
                        v["major"].as_u64().unwrap(),
                        v["minor"].as_u64().unwrap(),
                        v["data_hex"].to_string(),
                    )
                })
                .collect();
            let mut s = crate::support::cli::without_transport(stats(&lines).clone());
            s.as_object_mut().unwrap().remove("kind");
            got.push((recs, s));
        }
        assert!(!got[0].0.is_empty(), "{ex}: records");
        assert_eq!(got[0], got[1], "{ex}: ptrace vs perf");
    }
}

/// Perf samples only the registers the handlers can read (found in their
/// code): a guest that names its registers by constants and the same guest
/// computing one register id (so every register is sampled) log the same
/// records under perf, and the same as under ptrace.
fn sampled_registers_follow_what_handlers_read() {
    let target = probe_target();
    // Logs rdi, rsi and rsp - rbp of target_fn(a, b, s) as raw words.
    let guest = |rdi: &str| {
        format!(
            r#"(module
  (import "wprobe" "read_reg" (func $r (param i32 i32) (result i64)))
  (import "wprobe" "emit_log" (func $e (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $rdi (mut i32) (i32.const 0x0a))
  (func (export "h") (result i32)
    (i64.store (i32.const 0) (call $r {rdi} (i32.const 0)))
    (i64.store (i32.const 8) (call $r (i32.const 0x0b) (i32.const 0)))
    (i64.store (i32.const 16) (i64.sub (call $r (i32.const 0x0e) (i32.const 0))
                                       (call $r (i32.const 0x0f) (i32.const 0))))
    (drop (call $e (i32.const 1) (i32.const 1) (i32.const 0) (i32.const 24) (i32.const 0) (i32.const 0)))
    (i32.const 0))
  (@custom "wprobe.manifest" "wprobe-manifest 1\nabi 2\nmodule probe_target\nmajor 1\nprobe h\n  location offset target_fn\n  opcode 0x55\n  minor 1\n"))"#
        )
    };
    let constant = write("regs_constant.wat", guest("(i32.const 0x0a)"));
    let computed = write("regs_computed.wat", guest("(global.get $rdi)"));
    let records = |tr: &str, prog: &Path| -> Vec<String> {
        let (lines, err, code) = run(tr, &[prog], &[target.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{tr} {}: {err}", prog.display());
        lines
            .iter()
            .filter(|v| v["kind"] == "log")
            .map(|v| v["data_hex"].to_string())
            .collect()
    };
    let want = records("ptrace", &constant);
    assert_eq!(want.len(), 3, "{want:?}");
    // a = 1, b = 7, and rsp - rbp = -56 at the `push %rbp` of target_fn
    // (rbp is still main's frame).
    assert_eq!(
        want[1], "\"01000000000000000700000000000000c8ffffffffffffff\"",
        "{want:?}"
    );
    assert_eq!(records("perf", &constant), want);
    assert_eq!(records("perf", &computed), want);
}

fn forked_children_inherit_probes_with_f_only() {
    let exe = gcc(
        "forker",
        &progs().join("forker.c"),
        &["-O2", "-fPIE", "-pie"],
    );
    let p = count_program(&exe, "count_fork.rpn", "target");
    let argv = [exe.to_str().unwrap(), "4", "100"];
    let want = plain(&argv);
    for (follow, hits) in [(true, 500), (false, 100)] {
        for tr in ["ptrace", "perf"] {
            let mut c = wprobe();
            c.arg("run")
                .arg(&p)
                .args(["--transport", tr, "--format", "json"]);
            if follow {
                c.arg("-f");
            }
            c.arg("--").args(argv);
            let o = output_within(c, 60);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{tr}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let out = String::from_utf8(o.stdout).unwrap();
            let s: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
            assert_eq!(s["hits"], hits, "{tr} -f={follow}");
            assert!(out.starts_with(&want), "{tr} -f={follow}: {out}");
        }
    }
}

fn forkall() -> PathBuf {
    gcc(
        "forkall",
        &progs().join("forkall.c"),
        &["-O2", "-fPIE", "-pie"],
    )
}

/// The `stats` line of a `wprobe run --format json` that exited 0.
fn run_stats(c: Command, what: &str) -> serde_json::Value {
    let o = output_within(c, 120);
    assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    serde_json::from_str(out.lines().last().unwrap()).unwrap()
}

/// Processes forked from one another run at once (8 children, each with 2
/// children of its own, all calling the probed function 3,000 times):
/// every call is a hit or a counted drop. (The kernel swaps the perf
/// contexts of such processes at context switches; once the process a
/// swapped context names exits, the uprobes were removed from the one
/// still running with it, and its calls went unseen, uncounted.)
fn children_and_grandchildren_running_at_once_lose_no_call_uncounted() {
    let exe = forkall();
    let p = count_program(&exe, "count_forkall.rpn", "target");
    for round in 0..2 {
        let mut c = wprobe();
        c.arg("run")
            .arg(&p)
            .args(["--transport", "perf", "-f", "--format", "json", "--"])
            .args([exe.to_str().unwrap(), "8", "3000", "2"]);
        let s = run_stats(c, "perf -f");
        let (hits, dropped) = (s["hits"].as_u64(), s["dropped"].as_u64());
        assert_eq!(
            hits.zip(dropped).map(|(h, d)| h + d),
            Some(8 * 3000 * 3),
            "round {round}: {s}"
        );
    }
}

/// A daemonizing command (double fork, in a new session; the command and
/// its child exit at once): with -f its grandchild's 2,000 calls, all made
/// after the command exited, are traced - the run ends when the daemon
/// exits - as under ptrace.
fn with_f_a_daemon_is_traced_after_the_command_exits_until_it_exits() {
    let exe = forkall();
    let p = count_program(&exe, "count_daemon.rpn", "target");
    for tr in ["perf", "ptrace"] {
        let mut c = wprobe();
        c.arg("run")
            .arg(&p)
            .args(["--transport", tr, "-f", "--format", "json", "--"])
            .args([exe.to_str().unwrap(), "daemon", "2000"]);
        let s = run_stats(c, tr);
        assert_eq!(
            (s["hits"].as_u64(), s["dropped"].as_u64()),
            (Some(2000), Some(0)),
            "{tr}: {s}"
        );
    }
}

/// A library the program links (found through its `DT_RUNPATH`
/// `$ORIGIN`, named by its base name) calls the probed function 40 times
/// from its constructor, before the program's entry point, and the program
/// 25 times: 65 hits under perf, as under ptrace (the perf transport arms
/// the startup libraries on their files at the exec), and under inproc
/// (armed once the dynamic linker has relocated the libraries, before
/// their initializers: it counted the program's 25 only).
fn calls_from_a_library_constructor_before_the_entry_point_count_as_under_ptrace() {
    let lib = gcc(
        "libctorlib.so",
        &progs().join("ctorlib.c"),
        &["-O2", "-shared", "-fPIC"],
    );
    let dir = lib.parent().unwrap().to_path_buf();
    let exe = gcc(
        "ctor_user",
        &progs().join("ctor_user.c"),
        &[
            "-O2",
            "-fPIE",
            "-pie",
            &format!("-L{}", dir.display()),
            "-lctorlib",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN",
        ],
    );
    let p = write(
        "count_ctor.rpn",
        format!(
            "name = libctorlib.so\ngvars = 1\noffset = ctor_target\nopcode = 0x{:02x}\n inc gv, 0\n abort\n",
            opcode(&lib, "ctor_target")
        ),
    );
    for tr in ["ptrace", "perf", "inproc"] {
        let mut c = wprobe();
        c.current_dir(&dir)
            .env("CTOR_CALLS", "40")
            .arg("run")
            .arg(&p)
            .args(["--transport", tr, "--format", "json", "--"])
            .args([exe.to_str().unwrap(), "25"]);
        let o = output_within(c, 60);
        assert_eq!(o.status.code(), Some(0), "{tr}: {}", stderr(&o));
        let err = stderr(&o);
        let out = String::from_utf8(o.stdout).unwrap();
        assert!(out.starts_with("ctor_sum=820 sum=325\n"), "{tr}: {out}");
        let s: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(s["hits"], 65, "{tr}: {s}");
        // The expected case: no note about the library's file.
        assert!(!err.contains("armed on the file"), "{tr}: {err}");
    }
}

/// `ls -l` of a directory: its mallocs from the exec on (the dynamic
/// linker's and libc's own initialisation among them) count the same
/// under perf and inproc as under ptrace (inproc counted 347 of 350).
fn mallocs_of_ls_from_its_exec_on_count_as_under_ptrace() {
    let dir = scratch().join("ls_dir");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["a", "b", "c"] {
        std::fs::write(dir.join(f), f).unwrap();
    }
    let p = write(
        "count_malloc.rpn",
        "name = libc\ngvars = 1\noffset = malloc\n inc gv, 0\n abort\n",
    );
    let mut hits = Vec::new();
    for tr in ["ptrace", "perf", "inproc"] {
        let mut c = wprobe();
        c.env("LC_ALL", "C")
            .arg("run")
            .arg(&p)
            .args(["--transport", tr, "--format", "json", "--", "ls", "-l"])
            .arg(&dir);
        let s = run_stats(c, tr);
        assert_eq!(s["dropped"], 0, "{tr}: {s}");
        hits.push(s["hits"].as_u64().unwrap());
    }
    assert!(hits[0] > 10, "{hits:?}");
    assert_eq!(hits[0], hits[1], "ptrace, perf");
    assert_eq!(hits[0], hits[2], "ptrace, inproc");
}

fn lost_samples_are_counted_exactly() {
    // A one-page ring cannot hold one sample with its 8 KiB stack snapshot
    // (taken because the handler reads memory): every hit is lost, and
    // every loss is counted.
    let exe = wtarget();
    let p = write(
        "count_w.rpn",
        format!(
            "name = {}
offset = watched_fn
opcode = 0x{:02x}
 push r, rsp
 push mem, u64
 abort
",
            exe.display(),
            opcode(&exe, "watched_fn")
        ),
    );
    let mut c = wprobe();
    c.arg("run")
        .arg(&p)
        .args(["--transport", "perf", "--format", "json", "--"])
        .args([exe.to_str().unwrap(), "700"])
        .env("WPROBE_PERF_RING_PAGES", "1");
    let o = output_within(c, 60);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8(o.stdout).unwrap();
    let s: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(
        (s["hits"].as_u64(), s["dropped"].as_u64()),
        (Some(0), Some(700)),
        "{out}"
    );
    assert_eq!(s["probes"][0]["dropped"], 700);
    let e = String::from_utf8_lossy(&o.stderr);
    let row = e
        .lines()
        .find(|l| l.contains("count_w:watched_fn"))
        .unwrap();
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        [
            "count_w:watched_fn",
            "0",
            "0",
            "0",
            "0",
            "0",
            "700",
            "0",
            "0",
            "0",
            "0"
        ]
    );
}

fn children_of(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            let c = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            v.extend(c.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
        }
    }
    v
}

fn live_byte(pid: u32, addr: u64) -> Option<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut b = [0u8];
    f.read_exact_at(&mut b, addr).ok()?;
    Some(b[0])
}

fn sigkill_of_wprobe_leaves_the_target_running_unharmed() {
    let exe = calls();
    let p = count_program(&exe, "count_kill.rpn", "target");
    // 300 calls, 2 ms apart: 0.6 s.
    let want = plain(&[exe.to_str().unwrap(), "300", "1", "2000"]);
    let out = scratch().join("killed.out");
    let _ = std::fs::remove_file(&out);
    let mut w = wprobe()
        .arg("run")
        .arg(&p)
        .args(["--transport", "perf", "--"])
        .arg(&exe)
        .arg(format!(">{}", out.display()))
        .args(["300", "1", "2000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let target = loop {
        if let Some(&c) = children_of(w.id()).first() {
            break c;
        }
        assert!(Instant::now() < deadline, "target not started");
        std::thread::sleep(Duration::from_millis(5));
    };
    std::thread::sleep(Duration::from_millis(150));
    w.kill().unwrap(); // SIGKILL
    w.wait().unwrap();
    // No byte of the target was patched (the kernel owned the uprobe and
    // removed it with the last descriptor).
    let bias = {
        let maps = runtime::proc::procmaps::read(target as i32).unwrap();
        let key = runtime::proc::procmaps::canonical(&exe);
        let info = wprobe_elf::ElfInfo::open(&exe).unwrap();
        runtime::proc::procmaps::load_bias(
            &maps,
            &runtime::proc::procmaps::ModuleKey::Path(&key),
            info.first_load.unwrap(),
        )
        .unwrap()
    };
    assert_eq!(
        live_byte(target, bias + sym(&exe, "target")),
        Some(opcode(&exe, "target"))
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if text.ends_with('\n') {
            assert_eq!(text, want, "the target finished with its normal output");
            break;
        }
        assert!(Instant::now() < deadline, "target did not finish: {text:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn attach_with_p_observes_all_threads_and_leaves_the_process_running() {
    let exe = calls();
    let p = write(
        "log_attach.rpn",
        format!(
            "name = {}\noffset = target\nopcode = 0x{:02x}\n push r, rdi\n log 1\n",
            exe.display(),
            opcode(&exe, "target")
        ),
    );
    // Forever, 2 threads, 1 ms between calls.
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut target = KillOnDrop(
        Command::new(&exe)
            .args(["0", "2", "1000"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(100));
    let w = wprobe()
        .arg("run")
        .arg(&p)
        .args(["--transport", "perf", "--format", "json", "-p"])
        .arg(target.0.id().to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Armed once its uprobe is defined (start-up takes longer on a loaded
    // machine than any fixed delay), then half a second of hits.
    let events = [
        "/sys/kernel/tracing/uprobe_events",
        "/sys/kernel/debug/tracing/uprobe_events",
    ];
    let tag = format!("wprobe_{}/", w.id());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !events
        .iter()
        .any(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains(&tag)))
    {
        assert!(Instant::now() < deadline, "no uprobe defined within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let st = Command::new("kill")
        .args(["-INT", &w.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = w.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let s = stats(&lines);
    let hits = s["hits"].as_u64().unwrap();
    // Both worker threads observed: records from exactly the two threads
    // that call target() (not the main thread, which only joins them).
    let pid = u64::from(target.0.id());
    let workers: std::collections::BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .filter(|t| *t != pid)
        .collect();
    assert_eq!(workers.len(), 2, "{workers:?}");
    let tids: std::collections::BTreeSet<u64> = lines
        .iter()
        .filter(|v| v["kind"] == "log")
        .map(|v| v["tid"].as_u64().unwrap())
        .collect();
    assert_eq!(
        tids, workers,
        "records of both worker threads ({hits} hits)"
    );
    assert!(
        lines
            .iter()
            .filter(|v| v["kind"] == "log")
            .all(|v| v["pid"] == pid)
    );
    assert_eq!(s["records"], s["hits"]);
    // Still running, and unpatched.
    assert!(
        target.0.try_wait().unwrap().is_none(),
        "the process runs on"
    );
}

fn handler_that_writes_is_refused_naming_program_and_import() {
    let target = probe_target();
    let (_, err, code) = run(
        "perf",
        &[&examples().join("14_registers_memory.rpn")],
        &[target.to_str().unwrap()],
    );
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        "error: program `14_registers_memory` imports `write_reg`: handlers that write \
         registers or memory cannot run under --transport perf (the target does not stop for \
         the handler); use --transport ptrace\n"
    );
}

/// `exit 1`/`exit 3` need the target stopped at the hit: an RPN program
/// that uses them is refused at load, naming ptrace; a handler whose
/// outcome no compiler can see (WAT) is run, and each such run counted and
/// reported once.
fn exit_1_and_exit_3_are_counted_and_reported_once_under_perf() {
    let exe = calls();
    let p = write(
        "exit13.rpn",
        format!(
            "name = {}\noffset = target\nopcode = 0x{:02x}\n push r, rdi\n log 1\n push r, rdi\n push 1\n and\n jz odd\n exit 1\nodd:\n exit 3\n",
            exe.display(),
            opcode(&exe, "target")
        ),
    );
    let (lines, err, code) = run("perf", &[&p], &[exe.to_str().unwrap(), "10"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(lines.is_empty(), "the command did not run");
    assert_eq!(
        err,
        "error: program `exit13` uses `exit 1` (a debugger hand-off), which needs the target \
         stopped at the hit: --transport perf cannot honour it; use --transport ptrace\n"
    );
    let mut c = wprobe();
    c.arg("run")
        .arg(handoff_wat())
        .args([
            "--probe",
            "target=h",
            "--transport",
            "perf",
            "--format",
            "json",
            "--",
        ])
        .arg(&exe)
        .arg("10");
    let o = output_within(c, 60);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(first_words(&lines), (0..10).collect::<Vec<_>>());
    assert_eq!(
        err.matches("cannot be honoured under --transport perf")
            .count(),
        2,
        "{err}"
    );
    assert!(
        err.contains("exit 1 (debugger hand-off) not honoured under --transport perf: 5 run(s)"),
        "{err}"
    );
    assert!(
        err.contains("exit 3 (core dump) not honoured under --transport perf: 5 run(s)"),
        "{err}"
    );
}

fn perf_not_permitted_names_the_sysctl_and_the_capability() {
    // Real, not simulated: wprobe runs as `nobody` (no capabilities), so
    // tracefs (where uprobes are defined) is closed to it. The watchpoint
    // side of the hint (kernel.perf_event_paranoid) is checked through
    // `permission_hint` in the unit tests: changing the sysctl would
    // disturb everything else running on the machine.
    let dir = scratch();
    let exe = dir.join("wprobe-nobody");
    std::fs::copy(env!("CARGO_BIN_EXE_wprobe"), &exe).unwrap();
    let t = wtarget();
    let p = count_program(&t, "count_nobody.rpn", "watched_fn");
    for f in [&dir, &exe, &p, &t] {
        let _ = Command::new("chmod").arg("a+rx").arg(f).status();
    }
    let o = output_within(
        {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&exe)
                .args(["run", "--transport", "perf"])
                .arg(&p)
                .arg("--")
                .arg(&t)
                .arg("5");
            c
        },
        30,
    );
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap();
    assert!(
        e.contains(&format!(
            ": opening /sys/kernel/tracing/uprobe_events: not permitted: \
             kernel.perf_event_paranoid = {}; uprobes need root (they are defined in tracefs, \
             and need CAP_PERFMON or CAP_SYS_ADMIN); watchpoints need \
             kernel.perf_event_paranoid <= 2 for processes of your own user, CAP_PERFMON for \
             others; or use --transport ptrace\n",
            paranoid.trim()
        )),
        "{e}"
    );
    // Refused before the command is launched.
    assert!(!e.contains("no probe could be armed"), "{e}");
}

/// Runs `script` with `sh -c` in a private mount namespace where tracefs
/// is not mounted (as after a fresh boot); the machine's mounts are
/// untouched. `$W`, `$P`, `$T` are wprobe, the program and the target.
fn in_namespace_without_tracefs(script: &str, wprobe: &Path, prog: &Path, target: &Path) -> Output {
    let full = format!(
        "umount /sys/kernel/tracing 2>/dev/null; umount /sys/kernel/debug/tracing 2>/dev/null; \
         if [ -e /sys/kernel/tracing/uprobe_events ]; then echo 'tracefs still mounted' >&2; exit 99; fi; \
         {script}"
    );
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c", &full])
        .env("W", wprobe)
        .env("P", prog)
        .env("T", target);
    output_within(c, 60)
}

/// After a fresh boot tracefs is not mounted: wprobe (as root) mounts it,
/// as perf and bpftrace do, and counts every call.
fn tracefs_is_mounted_when_missing() {
    let exe = calls();
    let p = count_program(&exe, "count_fresh.rpn", "target");
    let o = in_namespace_without_tracefs(
        "\"$W\" run \"$P\" --transport perf --format json -- \"$T\" 300 1; st=$?; \
         [ -e /sys/kernel/tracing/uprobe_events ] && echo MOUNTED; exit $st",
        Path::new(env!("CARGO_BIN_EXE_wprobe")),
        &p,
        &exe,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.contains("MOUNTED"), "{out}");
    let stats = out
        .lines()
        .find(|l| l.starts_with("{\"kind\":\"stats\""))
        .expect("stats line");
    let v: serde_json::Value = serde_json::from_str(stats).unwrap();
    assert_eq!(
        (v["hits"].as_u64(), v["dropped"].as_u64()),
        (Some(300), Some(0)),
        "{out}"
    );
}

/// Without the right to mount it, the error names the real cause and the
/// one command that fixes it, before anything is launched.
fn missing_tracefs_without_privilege_names_the_mount_command() {
    let dir = scratch();
    let exe = dir.join("wprobe-nobody-ns");
    std::fs::copy(env!("CARGO_BIN_EXE_wprobe"), &exe).unwrap();
    let t = calls();
    let p = count_program(&t, "count_fresh_nobody.rpn", "target");
    for f in [&dir, &exe, &p, &t] {
        let _ = Command::new("chmod").arg("a+rx").arg(f).status();
    }
    let o = in_namespace_without_tracefs(
        "setpriv --reuid=65534 --regid=65534 --clear-groups \"$W\" run \"$P\" --transport perf -- \"$T\" 5",
        &exe,
        &p,
        &t,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "error: uprobes cannot be defined: tracefs is not mounted at /sys/kernel/tracing and \
         wprobe may not mount it (that needs root or CAP_SYS_ADMIN); run `sudo mount -t tracefs \
         nodev /sys/kernel/tracing`, or use --transport ptrace\n"
    );
    assert!(o.stdout.is_empty(), "the command never ran");
}

fn with_f_a_program_exec_d_by_a_child_is_probed_with_its_own_load_bias() {
    // The probed module (a PIE) is not mapped in the shell at start: perf
    // arms the uprobe on the file; each child maps it at its own address,
    // and `push target` (relocated by the load bias the handler sees) must
    // equal rip in every process. The command's status comes back.
    let exe = calls();
    let p = write(
        "bias.rpn",
        format!(
            "name = calls\noffset = target\nopcode = 0x{:02x}\n push r, rip\n push target\n sub\n log 1\n",
            opcode(&exe, "target")
        ),
    );
    for tr in ["ptrace", "perf"] {
        let mut c = wprobe();
        c.arg("run")
            .arg(&p)
            .args(["--transport", tr, "-f", "--format", "json", "--"])
            .args(["/bin/sh", "-c", "./calls 2; ./calls 1; exit 7"])
            .current_dir(scratch());
        let o = output_within(c, 60);
        assert_eq!(
            o.status.code(),
            Some(7),
            "{tr}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(first_words(&lines), [0, 0, 0], "{tr}");
        let pids: std::collections::BTreeSet<u64> = lines
            .iter()
            .filter(|v| v["kind"] == "log")
            .map(|v| v["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(pids.len(), 2, "{tr}: two children");
    }
}

fn selection_ignore_maxhits_and_probes_sharing_an_address_match_ptrace() {
    // Two programs probing target_fn (two uprobes at one address: one hit
    // each, run in probe order under both transports), sharing global
    // variable 0, with ignore, maxhits and group/type filters.
    let target = probe_target();
    let a = write(
        "sel_a.rpn",
        "name = probe_target\nmajor = 1\ngvars = 1\ngroupdef = g1 g2\ntypedef = t1\n\
         offset = target_fn\nopcode = 0x55\ngroup = g1\ntype = t1\nignore = 1\n inc gv, 0\n push gv, 0\n log 1\n\
         offset = bump\nopcode = 0x55\ngroup = g2\n push 0xb\n log 1\n",
    );
    let b = write(
        "sel_b.rpn",
        "name = probe_target\nmajor = 2\ngvars = 1\noffset = target_fn\nopcode = 0x55\nmaxhits = 2\n inc gv, 0\n push gv, 0\n log 1\n",
    );
    let records = |tr: &str, extra: &[&str]| -> (Vec<(u64, u64)>, serde_json::Value) {
        let mut c = wprobe();
        c.arg("run")
            .args([&a, &b])
            .args(extra)
            .args(["--transport", tr, "--format", "json", "--"])
            .arg(&target)
            .current_dir(scratch());
        let o = output_within(c, 60);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let recs = lines
            .iter()
            .filter(|v| v["kind"] == "log")
            .map(|v| {
                (
                    v["major"].as_u64().unwrap(),
                    v["items"][0]["values"][0].as_u64().unwrap(),
                )
            })
            .collect();
        (
            recs,
            crate::support::cli::without_transport(lines.last().unwrap().clone()),
        )
    };
    for extra in [
        &[][..],
        &["--group", "g2"][..],
        &["--group", "g1", "--type", "t1"][..],
    ] {
        let p = records("ptrace", extra);
        let f = records("perf", extra);
        assert_eq!(p, f, "{extra:?}");
    }
    assert_eq!(
        records("perf", &[]).0,
        [(2, 1), (1, 2), (2, 3), (1, 4), (1, 0xb)]
    );
}

/// Bug 11 of the first-contact review: a perf instance on a process whose
/// probed instruction holds the int3 of a ptrace instance would take that
/// breakpoint's hits (and vanish when it is removed), blinding both. The
/// perf instance refuses, naming the other tracer; the ptrace instance
/// goes on counting every call, and stops cleanly.
fn a_process_probed_by_a_ptrace_instance_is_refused_and_left_traced() {
    two_instances_on_one_instruction("ptrace", "perf", |pid, first, at| {
        format!(
            "process {pid} is traced by process {first} (wprobe), whose breakpoint is at {at:#x}"
        )
    });
}

/// The other order: a perf instance's uprobe is an `int3` in the process's
/// page; a ptrace instance arming the same instruction is refused with
/// the reason (it would take the uprobe's traps, and the uprobe its), and
/// the perf instance goes on seeing every call.
fn a_ptrace_instance_on_a_perf_probed_instruction_is_refused() {
    two_instances_on_one_instruction("perf", "ptrace", |_, _, at| {
        format!(
            "address {at:#x} already holds an int3: the program's own, or the breakpoint of \
             another tool (a uprobe of perf, bpftrace or wprobe --transport perf; a debugger)"
        )
    });
}

/// A `first` instance (`--transport first`) probes
/// `target` of a running process; a `second` instance on the same
/// instruction exits 1 with `refusal(pid, first's pid, address)` in its
/// message, leaving the process untouched by it; the first instance goes
/// on seeing calls and detaches cleanly on SIGINT.
fn two_instances_on_one_instruction(
    first: &str,
    second: &str,
    refusal: impl Fn(u32, u32, u64) -> String,
) {
    // Not PIE: the symbol's value is the run-time address.
    let exe = gcc("calls_nopie", &progs().join("calls.c"), &["-O2", "-no-pie"]);
    let p = write(
        "log_both.rpn",
        format!(
            "name = {}\noffset = target\n push r, rdi\n log 1\n",
            exe.display()
        ),
    );
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    // Forever, 1 thread, 1 ms between calls.
    let target = KillOnDrop(
        Command::new(&exe)
            .args(["0", "1", "1000"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = target.0.id();
    let mut first_w = KillOnDrop(
        wprobe()
            .arg("run")
            .arg(&p)
            .args(["--transport", first, "--format", "json", "-p"])
            .arg(pid.to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let at = sym(&exe, "target");
    let live = |pid: u32| {
        let mut b = [0u8];
        let f = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, at).map(|()| b[0])
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while live(pid).ok() != Some(0xcc) {
        assert!(Instant::now() < deadline, "{first}: not armed within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second_o = wprobe()
        .arg("run")
        .arg(&p)
        .args(["--transport", second, "-p"])
        .arg(pid.to_string())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second_o.stderr);
    assert_eq!(second_o.status.code(), Some(1), "{err}");
    assert!(err.contains(&refusal(pid, first_w.0.id(), at)), "{err}");
    assert_eq!(
        live(pid).unwrap(),
        0xcc,
        "the first instance's int3 is left"
    );
    if first == "perf" {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(status.contains("TracerPid:\t0\n"), "{status}");
    }
    // The first instance still sees calls, and detaches on SIGINT.
    std::thread::sleep(Duration::from_millis(200));
    let st = Command::new("kill")
        .args(["-INT", &first_w.0.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = std::mem::replace(&mut first_w.0, Command::new("true").spawn().unwrap())
        .wait_with_output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(stats(&lines)["hits"].as_u64().unwrap() > 50, "{lines:?}");
    assert_ne!(live(pid).unwrap(), 0xcc);
}
