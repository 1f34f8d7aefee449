//! Starting to trace: launching a command (seized before it execs, held at
//! its exec stop) or attaching to every thread of a running process (and
//! its patch journal); killing a launched command that never ran.

use std::cell::RefCell;
use std::ffi::OsString;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::mem::ProcMem;
use super::threads::{ProcKind, Process, TState, Thread};
use super::{PtraceError, PtraceTracer, TraceOptions};
use crate::sys::ptrace as sys;
use crate::transport::common::{journal, ptrace_hint, watchdog};

/// Deadline for attaching to every thread of a process.
const ATTACH_DEADLINE: Duration = Duration::from_secs(2);

impl PtraceTracer {
    /// Starts `argv` traced: returns once the new image is stopped at its
    /// entry (exec stop), before any of its code ran.
    pub fn launch(argv: &[OsString], opts: TraceOptions) -> Result<PtraceTracer, PtraceError> {
        let Some(first) = argv.first() else {
            return Err(PtraceError::CommandNotFound { cmd: String::new() });
        };
        let cmd = first.to_string_lossy().into_owned();
        let mut spawned = crate::sys::process::spawn(argv, crate::sys::process::Start::Gated)
            .map_err(|errno| match errno {
                Errno::EINVAL => PtraceError::Exec {
                    cmd: cmd.clone(),
                    errno,
                },
                e => PtraceError::sys("fork", 0, e),
            })?;
        let child = spawned.pid;
        let opts_bits = sys::OPTIONS_BASE | libc::PTRACE_O_EXITKILL;
        if let Err(e) = sys::seize(child, opts_bits) {
            crate::sys::process::kill_and_reap(child);
            return Err(if e == Errno::EPERM {
                PtraceError::PermissionDenied {
                    pid: child,
                    hint: ptrace_hint(),
                }
            } else {
                PtraceError::sys("PTRACE_SEIZE", child, e)
            });
        }
        spawned.release();
        let mut t = PtraceTracer::empty(opts);
        t.main_pid = child;
        let res = t.wait_exec(child);
        let exec_errno = spawned.exec_errno();
        match res {
            Ok(()) => {
                let mem = Rc::new(RefCell::new(ProcMem::open(child)));
                let mut p = Process::new(child, mem, ProcKind::Traced, 0, true);
                p.threads.push(child);
                t.procs.insert(child, p);
                t.threads
                    .insert(child, Thread::new(child, TState::Held, false));
                t.arm_rdebug(child);
                t.arm_entry(child);
                Ok(t)
            }
            Err(_) if exec_errno.is_some() => {
                let errno = exec_errno.expect("invariant: checked by the guard");
                Err(if errno == Errno::ENOENT {
                    PtraceError::CommandNotFound { cmd }
                } else {
                    PtraceError::Exec { cmd, errno }
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Waits for the launched child's exec stop (or its death).
    fn wait_exec(&mut self, child: i32) -> Result<(), PtraceError> {
        loop {
            let Some((_, st)) =
                sys::wait(child, 0).map_err(|e| PtraceError::sys("waitpid", child, e))?
            else {
                continue;
            };
            match sys::decode_status(st) {
                sys::Status::Exited(_) | sys::Status::Signaled(_) => {
                    return Err(PtraceError::TraceeDied { pid: child });
                }
                sys::Status::Stopped { event, .. } if event == libc::PTRACE_EVENT_EXEC => {
                    return Ok(());
                }
                sys::Status::Stopped { sig, event } => {
                    let deliver = if event == 0 && sig != libc::SIGTRAP {
                        sig
                    } else {
                        0
                    };
                    let deliver = if event == 0 && sig == libc::SIGTRAP {
                        sig
                    } else {
                        deliver
                    };
                    if sys::cont(child, deliver).is_err() {
                        return Err(PtraceError::TraceeDied { pid: child });
                    }
                }
                sys::Status::Other => {}
            }
        }
    }

    /// What happens to attached process `pid` if wprobe is killed with
    /// SIGKILL, for the message printed when attaching.
    pub(super) fn kill_note(&self, pid: i32) -> String {
        let alt = "--transport perf patches nothing; --transport inproc's probes go dormant \
                   by themselves";
        match &self.watchdog {
            Some(Ok(_)) => format!(
                "If wprobe is killed with SIGKILL, a watchdog restores the original bytes at \
                 once; a thread stopped at a probe at that moment still dies of its SIGTRAP, \
                 which a busy probe makes likely (a probe hit 100,000 times a second: 4 of 20 \
                 kills survived, docs/BENCHMARKS.md; {alt})."
            ),
            Some(Err(why)) => format!(
                "No watchdog ({why}): if wprobe is killed with SIGKILL, its breakpoints stay \
                 in the process and the next hit kills it; run `wprobe repair --pid {pid}` at \
                 once to restore the bytes ({alt})."
            ),
            None => String::new(),
        }
    }

    /// Attaches to every thread of a running process and stops them all.
    pub fn attach(pid: i32, opts: TraceOptions) -> Result<PtraceTracer, PtraceError> {
        PtraceTracer::attach_with(pid, opts, false)
    }

    /// Attaches to every thread of a running process, stopping those that
    /// run and leaving those asleep in a system call undisturbed (seized
    /// only: stopping one would make a call such as `epoll_wait` fail with
    /// `EINTR`; see `quiet`). Detaching then leaves them to the kernel
    /// (see `quiet`): for a tracer that
    /// exits once detached, as `wprobe run -p` does.
    pub fn attach_quietly(pid: i32, opts: TraceOptions) -> Result<PtraceTracer, PtraceError> {
        let mut t = PtraceTracer::attach_with(pid, opts, true)?;
        t.leave_sleepers = true;
        Ok(t)
    }

    fn attach_with(
        pid: i32,
        opts: TraceOptions,
        quietly: bool,
    ) -> Result<PtraceTracer, PtraceError> {
        if pid <= 0 {
            return Err(PtraceError::NoSuchProcess { pid });
        }
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(PtraceError::NoSuchProcess { pid });
        }
        let mut t = PtraceTracer::empty(opts);
        t.main_pid = pid;
        let mem = Rc::new(RefCell::new(ProcMem::open(pid)));
        t.procs
            .insert(pid, Process::new(pid, mem, ProcKind::Traced, 0, false));
        let deadline = Instant::now() + ATTACH_DEADLINE;
        loop {
            let mut tids = crate::transport::list_tasks(pid);
            if tids.is_empty() && t.threads.is_empty() {
                t.procs.clear();
                return Err(PtraceError::NoSuchProcess { pid });
            }
            // The main thread first: its refusal is the process's. Another
            // thread's may be that of a thread that exited after the
            // listing and whose id another process's thread, traced by
            // someone else, now has (ids wrap, and a thread's may be below
            // the process's).
            tids.sort_by_key(|&tid| tid != pid);
            let mut added = false;
            for tid in tids {
                if t.threads.contains_key(&tid) {
                    continue;
                }
                let mut state = TState::Running;
                match sys::seize(tid, sys::OPTIONS_BASE) {
                    Ok(()) => {
                        if quietly && super::quiet::asleep(pid, tid).is_some() {
                            state = TState::Free;
                        } else {
                            let _ = sys::interrupt(tid);
                        }
                    }
                    // (A leader that exited with its threads running is a
                    // zombie no one can seize: its threads still can be.)
                    Err(Errno::EPERM)
                        if tid == pid && t.threads.is_empty() && !leader_exited(pid) =>
                    {
                        t.procs.clear();
                        let why = crate::proc::procinfo::untraceable(pid);
                        return Err(match why.explain(pid) {
                            Some(reason) => PtraceError::Untraceable { pid, reason },
                            None => PtraceError::PermissionDenied {
                                pid,
                                hint: ptrace_hint(),
                            },
                        });
                    }
                    Err(Errno::ESRCH) if tid == pid && t.threads.is_empty() => {
                        t.procs.clear();
                        return Err(PtraceError::NoSuchProcess { pid });
                    }
                    // Already ours (auto-attached clone), or exited meanwhile.
                    Err(_) => continue,
                }
                added = true;
                t.threads.insert(tid, Thread::new(pid, state, false));
                t.proc_mut(pid).threads.push(tid);
            }
            // Collect stops until every known thread is held.
            t.settle(pid);
            if !added {
                break;
            }
            if Instant::now() > deadline {
                return Err(PtraceError::Timeout {
                    pid,
                    what: "attaching to all threads",
                });
            }
        }
        t.journal = Some(
            journal::Journal::create(pid)
                .map_err(|e| crate::transport::Error::io(Some(pid), None, &e, e.to_string())),
        );
        if matches!(t.journal, Some(Ok(_))) {
            t.watchdog = Some(watchdog::spawn(pid));
        }
        t.arm_rdebug(pid);
        Ok(t)
    }

    /// Kills and reaps the launched command (and forgets it) when nothing
    /// could be armed in it: it is still at its exec stop, so it has run
    /// none of its own code. No effect on an attached process.
    pub fn kill_launched(&mut self) {
        let main = self.main_pid;
        if !self.procs.get(&main).is_some_and(|p| p.launched) {
            return;
        }
        let _ = crate::sys::process::tgkill(main, main, libc::SIGKILL);
        // Its exit-event stop (PTRACE_O_TRACEEXIT) must be let go before
        // the exit status comes.
        while let Ok(Some((_, raw))) = sys::wait(main, 0) {
            match sys::decode_status(raw) {
                sys::Status::Exited(_) | sys::Status::Signaled(_) => break,
                _ => {
                    let _ = sys::cont(main, 0);
                }
            }
        }
        if let Some(p) = self.procs.remove(&main) {
            for t in p.threads {
                self.threads.remove(&t);
            }
        }
    }
}

/// Whether the thread-group leader `pid` has exited (a zombie: its threads
/// may run on).
fn leader_exited(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false)
}
