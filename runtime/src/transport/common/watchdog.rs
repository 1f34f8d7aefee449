//! The attach-mode watchdog: a process of its own that restores the bytes
//! of the patch journal the moment wprobe ends without detaching (SIGKILL,
//! OOM kill, a crash), so that a probe hit after that does not kill the
//! process with SIGTRAP (or SIGSEGV at an in-process trap site). The
//! ptrace transport starts it in attach mode, the in-process one with its
//! trap sites. `wprobe repair --pid` does the same later; the
//! watchdog does it within microseconds of wprobe's death.
//!
//! wprobe starts `wprobe __watchdog PID`, which starts the real watchdog
//! (`--detached`) and exits at once: the watchdog is then nobody's child of
//! wprobe's, so the tracer's `waitpid(-1)` never sees it, and in a process
//! group of its own, so a terminal's Ctrl-C does not reach it. It opens the
//! process's `/proc/PID/mem` for writing while wprobe is alive, says
//! `ready` on its standard output (a pipe wprobe reads), then blocks
//! reading its standard input, the read end of a pipe only wprobe holds:
//! end of file means wprobe's file descriptors were closed, which the
//! kernel does when wprobe exits, before it detaches the traced threads.
//! A journal still present then means wprobe did not detach: the watchdog
//! restores every journaled byte that is still an `int3` and removes the
//! journal. After a clean detach the journal is gone and it exits silently.
//!
//! What it cannot save: a thread stopped at one of our breakpoints when
//! wprobe dies is detached by the kernel with the SIGTRAP of its stop
//! pending, and dies of it; on a busy probe that is often the case
//! (docs/BENCHMARKS.md measures it).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{ChildStdin, Command, ExitCode, Stdio};

use super::journal;
use crate::transport::Error;

/// The running watchdog of an attached process: dropping it (wprobe's
/// exit, or the tracer's end) lets the watchdog wake up.
#[derive(Debug)]
pub struct Watchdog {
    _stdin: ChildStdin,
}

/// Starts the watchdog of `pid` and waits until it holds the process's
/// memory open. The error says why the process is unprotected (with the
/// errno of a failure to start it).
pub fn spawn(pid: i32) -> Result<Watchdog, Error> {
    start(pid)?.ready()
}

/// A watchdog started ([`start`]), not yet known to be ready: its start
/// (two executions of wprobe's binary) overlaps what wprobe does
/// meanwhile. Dropped, it reaps the process that started the watchdog,
/// whose pipe closed lets the watchdog end.
#[derive(Debug)]
pub struct Starting {
    pid: i32,
    child: std::process::Child,
    stdin: Option<ChildStdin>,
}

/// Starts the watchdog of `pid` without waiting for it ([`Starting::ready`]
/// does).
pub fn start(pid: i32) -> Result<Starting, Error> {
    use std::os::unix::process::CommandExt;
    let failed = |e: &std::io::Error, message: String| Error::io(Some(pid), None, e, message);
    let exe = std::env::current_exe()
        .map_err(|e| failed(&e, format!("finding wprobe's executable: {e}")))?;
    let mut child = Command::new(exe)
        .args(["__watchdog", &pid.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .map_err(|e| failed(&e, format!("starting it: {e}")))?;
    let stdin = child.stdin.take();
    Ok(Starting { pid, child, stdin })
}

impl Starting {
    /// Waits until the watchdog holds the process's memory open. The error
    /// says why the process is unprotected.
    pub fn ready(mut self) -> Result<Watchdog, Error> {
        let pid = self.pid;
        let stdin = self.stdin.take().expect("invariant: piped");
        let stdout = self.child.stdout.take().expect("invariant: piped");
        // The first process exits as soon as it started the watchdog.
        let _ = self.child.wait();
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        match line.trim_end() {
            "ready" => Ok(Watchdog { _stdin: stdin }),
            // Its own words (its stdout): no errno.
            why => Err(Error::Os {
                pid: Some(pid),
                addr: None,
                errno: None,
                message: if why.is_empty() {
                    "it ended before it was ready".into()
                } else {
                    why.to_string()
                },
            }),
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        // Not a zombie a `waitpid(-1)` of the tracer could take: the
        // first process exits at once (`ready` waited for it already).
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// `wprobe __watchdog PID [--detached]`: the watchdog's body (see the
/// module's documentation).
pub fn run(pid: i32, detached: bool) -> ExitCode {
    if !detached {
        // Start the real watchdog with our standard streams and leave it:
        // init (or the nearest subreaper) becomes its parent.
        return match std::env::current_exe().and_then(|exe| {
            Command::new(exe)
                .args(["__watchdog", &pid.to_string(), "--detached"])
                .spawn()
        }) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                let _ = writeln!(std::io::stdout(), "starting it: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mem = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
    {
        Ok(m) => m,
        Err(e) => {
            let _ = writeln!(std::io::stdout(), "it cannot open /proc/{pid}/mem: {e}");
            return ExitCode::FAILURE;
        }
    };
    {
        let mut out = std::io::stdout().lock();
        if out
            .write_all(b"ready\n")
            .and_then(|()| out.flush())
            .is_err()
        {
            return ExitCode::FAILURE;
        }
    }
    // Block until wprobe's end closes the pipe (nothing is ever written).
    let mut sink = [0u8; 64];
    let mut input = std::io::stdin().lock();
    while matches!(input.read(&mut sink), Ok(n) if n > 0) {}
    if crate::transport::semaphores::has_journal(pid) {
        match crate::transport::semaphores::repair_with(pid, &mem) {
            Ok(n) if n > 0 => crate::elog!(
                "wprobe: watchdog: wprobe ended without detaching from process {pid}; lowered \
                 {n} USDT semaphore{} it had raised",
                if n == 1 { "" } else { "s" }
            ),
            Ok(_) => {}
            Err(e) => crate::elog!(
                "wprobe: watchdog: lowering the USDT semaphores of process {pid} failed: {e}; run \
                 `wprobe repair --pid {pid}`"
            ),
        }
    }
    if !journal::path(pid).exists() {
        return ExitCode::SUCCESS; // detached cleanly
    }
    match journal::repair_with(pid, &mem) {
        Ok(n) => {
            crate::elog!(
                "wprobe: watchdog: wprobe ended without detaching from process {pid}; restored \
                 {n} byte{} of its breakpoints",
                if n == 1 { "" } else { "s" }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            crate::elog!(
                "wprobe: watchdog: wprobe ended without detaching from process {pid}, and \
                 restoring its bytes failed: {e}; run `wprobe repair --pid {pid}`"
            );
            ExitCode::FAILURE
        }
    }
}
