//! What happens to traced processes when wprobe itself dies: a launched
//! command and every descendant it forked under `-f` are killed with the
//! tracer (PTRACE_O_EXITKILL), so nothing is left running with breakpoints
//! in it, nor stopped in a tracing stop.

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::target::{Lines, file_bytes, func, spawn_piped, wait_bytes};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(sigkill_of_wprobe_kills_the_launched_command_and_its_traced_children),
    case!(after_sigkill_in_attach_mode_the_watchdog_restores_the_process),
    case!(after_sigkill_of_wprobe_and_its_watchdog_repair_restores_the_process),
    case!(a_journal_of_an_earlier_process_with_the_pid_is_not_applied),
    case!(
        a_panic_in_attach_mode_leaves_the_process_unpatched_and_running,
        Need::DebugBuild
    ),
];

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A directory in the test process's scratch directory (removed with it).
fn scratch() -> PathBuf {
    let d = crate::support::cli::scratch().join("death");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Builds `src` (a file of tests/progs) once per test process, through
/// the tests' one gcc helper.
fn build(src: &str) -> PathBuf {
    crate::support::cli::gcc(
        src.trim_end_matches(".c"),
        &crate::support::cli::progs().join(src),
        &[
            "-O0",
            "-fno-omit-frame-pointer",
            "-fno-pie",
            "-no-pie",
            "-fcf-protection=none",
        ],
    )
}

/// The state letter of `/proc/PID/stat`, `None` when the process is gone.
fn state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    after.chars().next()
}

fn sigkill_of_wprobe_kills_the_launched_command_and_its_traced_children() {
    let exe = build("forever.c");
    let prog = scratch().join("count.rpn");
    std::fs::write(
        &prog,
        format!(
            "name = {}\noffset = target\nopcode = 0x55\n push r, rdi\n log 1\n",
            exe.display()
        ),
    )
    .unwrap();
    let mut w = Command::new(env!("CARGO_BIN_EXE_wprobe"))
        .args(["run", "--transport", "ptrace"])
        .arg("-f")
        .arg("-o")
        .arg(scratch().join("records.txt"))
        .arg(&prog)
        .arg("--")
        .arg(&exe)
        .arg("3")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The command's output is wprobe's standard output (records go to -o).
    let mut lines = BufReader::new(w.stdout.take().unwrap()).lines();
    let mut pids = Vec::new();
    while pids.len() < 4 {
        let l = lines.next().expect("the target prints its pids").unwrap();
        pids.push(l.strip_prefix("pid ").unwrap().parse::<i32>().unwrap());
    }
    // Let every process hit its breakpoint a few times.
    std::thread::sleep(Duration::from_millis(300));
    for p in &pids {
        assert!(
            matches!(state(*p), Some('R' | 'S' | 't')),
            "{p}: {:?}",
            state(*p)
        );
    }
    w.kill().unwrap(); // SIGKILL
    w.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let alive: Vec<(i32, char)> = pids
            .iter()
            .filter_map(|p| state(*p).filter(|s| *s != 'Z').map(|s| (*p, s)))
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still alive 1 s after the tracer's SIGKILL: {alive:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Bytes of `len` at `addr` in a live process.
fn live_bytes(pid: u32, addr: u64, len: usize) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    f.seek(SeekFrom::Start(addr)).unwrap();
    let mut b = vec![0; len];
    f.read_exact(&mut b).unwrap();
    b
}

/// `gated` running with pipes, and wprobe attached to it (`env` added to
/// wprobe's environment), armed: its `int3` is in place at `work`.
struct Attached {
    target: std::process::Child,
    pid: u32,
    to_target: std::process::ChildStdin,
    from_target: Lines,
    wprobe: std::process::Child,
    work: u64,
    /// The file's first bytes at `work`.
    original: Vec<u8>,
}

fn attach_to_gated(env: &[(&str, &str)]) -> Attached {
    let exe = build("gated.c");
    let (work, _) = func(&exe, "work");
    let original = file_bytes(&exe, work, 8);
    let (target, to_target, from_target) = spawn_piped(&exe, &[]);
    let pid = target.id();
    let prog = scratch().join("gated.rpn");
    std::fs::write(
        &prog,
        format!(
            "name = {}\noffset = work\nopcode = 0x55\n push r, rdi\n log 1\n",
            exe.display()
        ),
    )
    .unwrap();
    let wprobe = Command::new(env!("CARGO_BIN_EXE_wprobe"))
        .args(["run", "--transport", "ptrace"])
        .arg(&prog)
        .args(["-p", &pid.to_string()])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bytes(pid, work, &[0xcc], 10);
    Attached {
        target,
        pid,
        to_target,
        from_target,
        wprobe,
        work,
        original,
    }
}

/// The watchdog processes of attached process `pid` (`wprobe __watchdog
/// PID --detached`), found by their command lines.
fn watchdogs_of(pid: u32) -> Vec<i32> {
    let want = format!("__watchdog\0{pid}\0--detached\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).ends_with(&want))
        })
        .collect()
}

/// Bug 3 of the first-contact review: after a SIGKILL of wprobe in attach
/// mode, its watchdog restores the journaled bytes at once (no `wprobe
/// repair` needed), removes the journal and says so; the process, whose
/// next probed call would have died of SIGTRAP, runs 10,000 more calls
/// unharmed.
fn after_sigkill_in_attach_mode_the_watchdog_restores_the_process() {
    use std::io::Write;
    let Attached {
        mut target,
        pid,
        mut to_target,
        mut from_target,
        wprobe: mut w,
        work,
        original,
    } = attach_to_gated(&[]);
    assert_eq!(watchdogs_of(pid).len(), 1);
    writeln!(to_target, "3").unwrap();
    assert_eq!(from_target.next().unwrap().unwrap(), "sum 12");
    w.kill().unwrap();
    // The watchdog shares wprobe's standard error: this returns once it
    // has done its work and exited.
    let st = w.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&st.stderr);
    assert!(
        stderr.contains("If wprobe is killed with SIGKILL, a watchdog restores the original bytes"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "wprobe: watchdog: wprobe ended without detaching from process {pid}; restored 2 \
             bytes of its breakpoints"
        )),
        "{stderr}"
    );
    assert_eq!(live_bytes(pid, work, 8), original);
    assert!(!runtime::transport::common::journal::path(pid as i32).exists());
    assert!(watchdogs_of(pid).is_empty());
    writeln!(to_target, "10000").unwrap();
    drop(to_target);
    let sum: i64 = (0..10_003).map(|i: i64| i * 3 + 1).sum();
    assert_eq!(from_target.next().unwrap().unwrap(), format!("sum {sum}"));
    assert_eq!(from_target.next().unwrap().unwrap(), format!("done {sum}"));
    assert!(target.wait().unwrap().success());
}

/// T11, ptrace provider: after a SIGKILL of wprobe and of its watchdog in
/// attach mode, the breakpoint stays in the process (no user-space tracer
/// can prevent it); the journal exists, and `wprobe repair --pid` run
/// before the next hit restores the bytes (also with an in-process journal
/// of an earlier process with the same pid beside it, which failed a CI
/// run: repair said "restored 0 sites"), after which the process runs
/// 10,000 more calls unharmed.
fn after_sigkill_of_wprobe_and_its_watchdog_repair_restores_the_process() {
    use std::io::Write;
    let Attached {
        mut target,
        pid,
        mut to_target,
        mut from_target,
        wprobe: mut w,
        work,
        original,
    } = attach_to_gated(&[]);
    // Three probed calls go through the breakpoint (a call that hit an
    // unhandled int3 would kill the process with SIGTRAP instead).
    writeln!(to_target, "3").unwrap();
    assert_eq!(from_target.next().unwrap().unwrap(), "sum 12");
    let dogs = watchdogs_of(pid);
    assert_eq!(dogs.len(), 1);
    assert!(
        Command::new("kill")
            .args(["-KILL", &dogs[0].to_string()])
            .status()
            .unwrap()
            .success()
    );
    w.kill().unwrap();
    let _ = w.wait_with_output().unwrap();
    // The breakpoint is still there; the journal says what was under it.
    assert_eq!(live_bytes(pid, work, 1), [0xcc]);
    // Two patches: the probe, and the dynamic linker's r_debug breakpoint
    // (a `ret`) through which wprobe learns of dlopen.
    let journal = runtime::transport::common::journal::read(pid as i32).unwrap();
    assert_eq!(journal.len(), 2, "{journal:?}");
    assert!(
        journal.iter().any(|e| (e.0, e.1) == (work, original[0])),
        "{journal:?}"
    );
    assert!(
        journal.iter().any(|e| e.0 != work && e.1 == 0xc3),
        "{journal:?}"
    );
    // An in-process journal an earlier process with this pid left (a
    // recycled pid): repair ignores it and says what the live one restored.
    let stale = runtime::transport::inproc::journal::path(pid as i32);
    std::fs::write(&stale, "start 1\n401000 55 cc 12345\n").unwrap();
    let mut perm = std::fs::metadata(&stale).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
    std::fs::set_permissions(&stale, perm).unwrap();
    let rep = Command::new(env!("CARGO_BIN_EXE_wprobe"))
        .args(["repair", "--pid", &pid.to_string()])
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&rep.stdout),
        format!("wprobe: restored 2 bytes in process {pid}\n")
    );
    assert_eq!(live_bytes(pid, work, 8), original);
    assert!(!stale.exists());
    // A second repair finds nothing to do.
    let again = Command::new(env!("CARGO_BIN_EXE_wprobe"))
        .args(["repair", "--pid", &pid.to_string()])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("no patch journal"));
    // 10,000 more calls, unharmed.
    writeln!(to_target, "10000").unwrap();
    drop(to_target);
    let sum: i64 = (0..10_003).map(|i: i64| i * 3 + 1).sum();
    assert_eq!(from_target.next().unwrap().unwrap(), format!("sum {sum}"));
    assert_eq!(from_target.next().unwrap().unwrap(), format!("done {sum}"));
    assert!(target.wait().unwrap().success());
}

/// T10: a panic of wprobe itself in attach mode (fault injection at the
/// 500th hit, debug builds) leaves the process as it was: the unwinding
/// detaches everything, the text equals the file again, and the process
/// runs 10,000 more probed calls unharmed.
fn a_panic_in_attach_mode_leaves_the_process_unpatched_and_running() {
    use std::io::Write;
    let Attached {
        mut target,
        pid,
        mut to_target,
        mut from_target,
        wprobe: w,
        work,
        original,
    } = attach_to_gated(&[("WPROBE_PANIC_AT_HIT", "500")]);
    // 1,000 calls: wprobe panics at the 500th hit, mid-batch.
    writeln!(to_target, "1000").unwrap();
    let out = w.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(101), "{stderr}");
    assert!(
        stderr.contains("WPROBE_PANIC_AT_HIT=500: injected fault"),
        "{stderr}"
    );
    let sum = |n: i64| -> i64 { (0..n).map(|i| i * 3 + 1).sum() };
    assert_eq!(
        from_target.next().unwrap().unwrap(),
        format!("sum {}", sum(1000))
    );
    assert_eq!(
        live_bytes(pid, work, 8),
        original,
        "the text equals the file"
    );
    assert!(
        !runtime::transport::common::journal::path(pid as i32).exists(),
        "a clean detach removes the journal"
    );
    writeln!(to_target, "10000").unwrap();
    drop(to_target);
    assert_eq!(
        from_target.next().unwrap().unwrap(),
        format!("sum {}", sum(11_000))
    );
    assert_eq!(
        from_target.next().unwrap().unwrap(),
        format!("done {}", sum(11_000))
    );
    assert!(target.wait().unwrap().success());
}

/// A ptrace journal left by a killed wprobe for an earlier process whose
/// pid was reused (its `start` line names another start time): `repair`
/// removes it without writing anything, and attaching to the new process
/// replaces it instead of refusing.
fn a_journal_of_an_earlier_process_with_the_pid_is_not_applied() {
    use runtime::transport::common::journal;
    let mut target = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = target.id() as i32;
    let stale = |pid: i32| {
        let dir = journal::dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(journal::path(pid), "start 1\n401000 55 12345\n").unwrap();
        let mut perm = std::fs::metadata(journal::path(pid)).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
        std::fs::set_permissions(journal::path(pid), perm).unwrap();
    };
    // Any wprobe that creates a journal meanwhile (the suite's other
    // tests) sweeps such a journal away first, as it should: then repair
    // finds none, and the journal is written again.
    let mut rep;
    let mut tries = 0;
    loop {
        stale(pid);
        rep = Command::new(env!("CARGO_BIN_EXE_wprobe"))
            .args(["repair", "--pid", &pid.to_string()])
            .output()
            .unwrap();
        tries += 1;
        let swept = String::from_utf8_lossy(&rep.stderr)
            .contains(&format!("no patch journal for process {pid}"));
        if !swept || tries == 20 {
            break;
        }
    }
    assert_eq!(rep.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&rep.stderr).contains(&format!(
            "the patch journal was written for an earlier process with pid {pid} (it has ended); \
             removed, nothing restored"
        )),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    assert!(!journal::path(pid).exists());
    stale(pid);
    let j = journal::Journal::create(pid).expect("a stale journal is replaced");
    assert_eq!(
        journal::journal_start(pid),
        runtime::proc::procinfo::start_time(pid)
    );
    j.remove();
    target.kill().unwrap();
    target.wait().unwrap();
}
