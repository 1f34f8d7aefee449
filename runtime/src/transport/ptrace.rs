//! The ptrace provider: launches or attaches to Linux x86-64 processes,
//! arms `int3` breakpoints and debug-register watchpoints, runs the event
//! loop and hands each hit to the caller with a [`Hit`] context, steps over
//! displaced instructions without removing the `int3` (emulation, then
//! out-of-line execution, single-step with all threads stopped as the last
//! resort), follows or scrubs forks, handles exec, threads, signals and job
//! control, and detaches leaving every byte and debug register as it was.
//!
//! It must never harm the tracee: every signal that is not ours is
//! re-injected unchanged, `ESRCH` means "thread gone" (never fatal), and
//! every exit path restores the original bytes (`Drop` included).
//!
//! Not thread-safe: use a `Tracer` from the thread that created it (ptrace
//! requests are per tracer thread).

mod events;
mod hit;
pub mod journal;
mod mem;
mod rdebug;
mod step;

mod threads;

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::errno::Errno;

pub use self::hit::{Hit, HitKind, HitWithGvars};
use self::mem::{ProcMem, Site};
use self::threads::{ProcKind, Process, TState, Thread, WatchSlot};
pub use crate::arch::WatchKind;
use crate::arch::{self, BREAKPOINT_INSN};
use crate::procmaps::{self, Mapping};
use crate::sys::ptrace as sys;

/// How processes are traced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceOptions {
    /// `-f`: trace fork/vfork children (otherwise they are scrubbed and detached).
    pub follow_forks: bool,
    /// Check each breakpoint's `expected` first byte before arming.
    pub verify_opcodes: bool,
}

/// Which step-over mechanisms may be used (for tests and measurements).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StepPolicy {
    /// Emulate, else out of line, else single-step (the default).
    #[default]
    Auto,
    /// Never emulate: out of line, else single-step.
    NoEmulation,
    /// Always single-step in place with all other threads stopped.
    SingleStepOnly,
}

/// A logical breakpoint probe (one per `insert_breakpoint` call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BpId(pub u32);

/// A watchpoint probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WpId(pub u32);

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// `exit(code)`.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

/// What the event loop reports.
#[derive(Debug)]
pub enum Event<'a> {
    /// A breakpoint hit; `bp` lists every logical probe at that address.
    Breakpoint {
        /// The probes at the address.
        bp: &'a [BpId],
        /// The stopped thread.
        hit: &'a mut Hit,
    },
    /// A watchpoint fired.
    Watchpoint {
        /// The watchpoint.
        wp: WpId,
        /// The stopped thread.
        hit: &'a mut Hit,
    },
    /// A new process appeared (fork, vfork, clone of a process). Traced (with
    /// our breakpoints, per process) under `follow_forks`; otherwise only
    /// informative (the child is scrubbed and detached).
    ProcessStarted {
        /// The child.
        pid: i32,
        /// Its parent.
        parent: i32,
    },
    /// A traced process called exec: its breakpoints and watchpoints are gone
    /// (dropped without writing); re-resolve and re-arm.
    Exec {
        /// The process.
        pid: i32,
    },
    /// The dynamic linker changed the link map: mappings were refreshed.
    LibrariesChanged {
        /// The process.
        pid: i32,
    },
    /// The tick period set with [`Tracer::set_tick`] elapsed (no thread is
    /// stopped for it).
    Tick,
    /// A traced process ended.
    ProcessExited {
        /// The process.
        pid: i32,
        /// How.
        status: ExitStatus,
    },
}

/// What to do after an event (only meaningful for hits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Action {
    /// Resume the thread.
    #[default]
    Continue,
    /// Remove the probe(s) of this event for good (every `BpId` of the
    /// event, or the `WpId`), then resume.
    DisableProbe,
    /// Restore all bytes and debug registers of this process, detach it
    /// stopped (SIGSTOP) at the probe address with the handler's registers.
    HandoffToDebugger,
}

/// Counters of one `run`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Breakpoint hits reported.
    pub breakpoint_hits: u64,
    /// Watchpoint hits reported.
    pub watchpoint_hits: u64,
    /// Displaced instructions emulated.
    pub emulated: u64,
    /// Displaced instructions executed out of line.
    pub out_of_line: u64,
    /// Displaced instructions single-stepped in place.
    pub single_stepped: u64,
    /// Signals passed on to the tracee.
    pub signals_forwarded: u64,
    /// `run` ended by the stop flag (everything detached).
    pub detached: bool,
    /// Time spent restoring and detaching when `run` ended by the stop flag.
    pub detach_time: std::time::Duration,
}

/// A failure of the tracer or of a traced process.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The thread or process no longer exists (ESRCH).
    #[error("tracee {pid} died")]
    TraceeDied {
        /// The tid.
        pid: i32,
    },
    /// No process with this pid.
    #[error("no such process: {pid}")]
    NoSuchProcess {
        /// The pid.
        pid: i32,
    },
    /// The process cannot be traced for a reason of its own (a zombie, a
    /// kernel thread, already traced).
    #[error("{reason}")]
    Untraceable {
        /// The pid.
        pid: i32,
        /// Why.
        reason: String,
    },
    /// Not allowed to trace.
    #[error("not permitted to trace process {pid}: {hint}")]
    PermissionDenied {
        /// The pid.
        pid: i32,
        /// What to change.
        hint: String,
    },
    /// The command to launch was not found.
    #[error("{cmd}: command not found")]
    CommandNotFound {
        /// The command.
        cmd: String,
    },
    /// exec of the command failed.
    #[error("cannot execute {cmd}: {errno}")]
    Exec {
        /// The command.
        cmd: String,
        /// errno of execvp.
        errno: Errno,
    },
    /// A ptrace or related system call failed.
    #[error("{op} on {pid} failed: {errno}")]
    Sys {
        /// The operation.
        op: &'static str,
        /// The tid.
        pid: i32,
        /// errno.
        errno: Errno,
    },
    /// Restoring the original byte failed.
    #[error("cannot restore the original byte at {addr:#x} in process {pid}: {errno}")]
    Restore {
        /// The process.
        pid: i32,
        /// The address.
        addr: u64,
        /// errno.
        errno: Errno,
    },
    /// The tracee did not stop within the deadline.
    #[error("process {pid}: {what} timed out")]
    Timeout {
        /// The pid.
        pid: i32,
        /// What was waited for.
        what: &'static str,
    },
    /// Unknown breakpoint or watchpoint id, or unknown process.
    #[error("unknown {what} {id}")]
    Unknown {
        /// "breakpoint", "watchpoint" or "process".
        what: &'static str,
        /// The id.
        id: i64,
    },
}

impl ProviderError {
    fn sys(op: &'static str, pid: i32, errno: Errno) -> ProviderError {
        if errno == Errno::ESRCH {
            ProviderError::TraceeDied { pid }
        } else {
            ProviderError::Sys { op, pid, errno }
        }
    }
}

/// A probe that could not be armed.
#[derive(Debug, thiserror::Error)]
pub enum ArmError {
    /// The first byte differs from the probe's `opcode`.
    #[error("opcode mismatch at {addr:#x}: expected {expected:#04x}, found {found:#04x}")]
    OpcodeMismatch {
        /// Run-time address.
        addr: u64,
        /// The probe's opcode.
        expected: u8,
        /// The byte in memory.
        found: u8,
    },
    /// An `int3` is already there (not ours).
    #[error("address {addr:#x} already holds an int3")]
    AlreadyTrapped {
        /// Run-time address.
        addr: u64,
    },
    /// The address is not in an executable mapping of the process.
    #[error("address {addr:#x} is not in an executable mapping of process {pid}")]
    NotExecutable {
        /// The process.
        pid: i32,
        /// Run-time address.
        addr: u64,
    },
    /// The bytes at the address do not decode as an instruction.
    #[error("address {addr:#x} is not an instruction boundary")]
    NotAnInstructionBoundary {
        /// Run-time address.
        addr: u64,
    },
    /// All debug registers are in use.
    #[error("debug register unavailable (at most {limit} watchpoints per process)")]
    NoDebugRegister {
        /// How many exist.
        limit: u8,
    },
    /// Bad watchpoint length, alignment or kind.
    #[error("invalid watchpoint at {addr:#x} length {len}: {reason}")]
    BadWatchpoint {
        /// Address.
        addr: u64,
        /// Length.
        len: u8,
        /// Why.
        reason: &'static str,
    },
    /// Attach mode: the patch could not be recorded in the journal that
    /// `wprobe repair` needs if wprobe is killed, so it is not made.
    #[error("not armed: {reason}")]
    Journal {
        /// What went wrong with the journal.
        reason: String,
    },
    /// Not traced.
    #[error("process {pid} is not traced")]
    NotTraced {
        /// The pid.
        pid: i32,
    },
    /// A provider failure while arming.
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// The ptrace tracer: the set of traced processes and their probes.
pub struct Tracer {
    opts: TraceOptions,
    policy: StepPolicy,
    main_pid: i32,
    procs: HashMap<i32, Process>,
    threads: HashMap<i32, Thread>,
    /// Stops of tids not known yet (their CLONE/FORK event comes later).
    orphans: HashMap<i32, i32>,
    /// Stops received while waiting for something else: (tid, raw status).
    queue: VecDeque<(i32, i32)>,
    bps: HashMap<BpId, (i32, u64)>,
    next_bp: u32,
    wps: HashMap<WpId, (i32, usize)>,
    next_wp: u32,
    hit: Hit,
    ids: Vec<BpId>,
    summary: RunSummary,
    /// Attach mode: the patch journal, or why it could not be created (then
    /// no breakpoint is armed).
    journal: Option<Result<journal::Journal, String>>,
    /// Exit statuses seen while the process could not be reported yet.
    exited: Vec<(i32, ExitStatus)>,
    /// Keeps the mappings returned by [`Tracer::maps`] alive.
    maps_cache: Option<Rc<Vec<Mapping>>>,
    /// Signals delivered to threads as they were detached: `(pid, signal)`.
    detach_signals: Vec<(i32, i32)>,
    /// Sites the process rewrote itself while probed, left as it wrote
    /// them when detaching: `(pid, address, byte found)`.
    code_left_alone: Vec<(i32, u64, u8)>,
    /// The thread whose breakpoint hit is being handled, and the address:
    /// its program counter is still past the `int3` in the kernel, so a
    /// detach while the handler runs (a panic unwinding) must rewind it.
    in_flight: Option<(i32, u64)>,
    /// Periodic [`Event::Tick`]s: the period, the next due time, and the
    /// child process whose exit wakes the event loop then (0: none).
    tick: Option<(Duration, std::time::Instant, i32)>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("main_pid", &self.main_pid)
            .field("processes", &self.procs.keys().collect::<Vec<_>>())
            .field("threads", &self.threads.len())
            .finish()
    }
}

/// Deadline for attaching to every thread of a process.
const ATTACH_DEADLINE: Duration = Duration::from_secs(2);

fn ptrace_hint() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    format!(
        "ptrace is restricted (/proc/sys/kernel/yama/ptrace_scope = {scope}); \
         run as the same user with ptrace_scope 0, or with CAP_SYS_PTRACE"
    )
}

impl Tracer {
    fn empty(opts: TraceOptions) -> Tracer {
        Tracer {
            opts,
            policy: StepPolicy::Auto,
            main_pid: 0,
            procs: HashMap::new(),
            threads: HashMap::new(),
            orphans: HashMap::new(),
            queue: VecDeque::with_capacity(64),
            bps: HashMap::new(),
            next_bp: 1,
            wps: HashMap::new(),
            next_wp: 1,
            hit: Hit::empty(),
            ids: Vec::with_capacity(16),
            summary: RunSummary::default(),
            journal: None,
            exited: Vec::new(),
            maps_cache: None,
            detach_signals: Vec::new(),
            code_left_alone: Vec::new(),
            in_flight: None,
            tick: None,
        }
    }

    /// Starts `argv` traced: returns once the new image is stopped at its
    /// entry (exec stop), before any of its code ran.
    pub fn launch(argv: &[OsString], opts: TraceOptions) -> Result<Tracer, ProviderError> {
        let Some(first) = argv.first() else {
            return Err(ProviderError::CommandNotFound { cmd: String::new() });
        };
        let cmd = first.to_string_lossy().into_owned();
        let mut spawned = crate::sys::process::spawn(argv, crate::sys::process::Start::Gated)
            .map_err(|errno| match errno {
                Errno::EINVAL => ProviderError::Exec {
                    cmd: cmd.clone(),
                    errno,
                },
                e => ProviderError::sys("fork", 0, e),
            })?;
        let child = spawned.pid;
        let opts_bits = sys::OPTIONS_BASE | libc::PTRACE_O_EXITKILL;
        if let Err(e) = sys::seize(child, opts_bits) {
            crate::sys::process::kill_and_reap(child);
            return Err(if e == Errno::EPERM {
                ProviderError::PermissionDenied {
                    pid: child,
                    hint: ptrace_hint(),
                }
            } else {
                ProviderError::sys("PTRACE_SEIZE", child, e)
            });
        }
        spawned.release();
        let mut t = Tracer::empty(opts);
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
                Ok(t)
            }
            Err(_) if exec_errno.is_some() => {
                let errno = exec_errno.expect("invariant: checked by the guard");
                Err(if errno == Errno::ENOENT {
                    ProviderError::CommandNotFound { cmd }
                } else {
                    ProviderError::Exec { cmd, errno }
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Waits for the launched child's exec stop (or its death).
    fn wait_exec(&mut self, child: i32) -> Result<(), ProviderError> {
        loop {
            let Some((_, st)) =
                sys::wait(child, 0).map_err(|e| ProviderError::sys("waitpid", child, e))?
            else {
                continue;
            };
            match sys::decode_status(st) {
                sys::Status::Exited(_) | sys::Status::Signaled(_) => {
                    return Err(ProviderError::TraceeDied { pid: child });
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
                        return Err(ProviderError::TraceeDied { pid: child });
                    }
                }
                sys::Status::Other => {}
            }
        }
    }

    /// Attaches to every thread of a running process and stops them all.
    pub fn attach(pid: i32, opts: TraceOptions) -> Result<Tracer, ProviderError> {
        if pid <= 0 {
            return Err(ProviderError::NoSuchProcess { pid });
        }
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(ProviderError::NoSuchProcess { pid });
        }
        let mut t = Tracer::empty(opts);
        t.main_pid = pid;
        let mem = Rc::new(RefCell::new(ProcMem::open(pid)));
        t.procs
            .insert(pid, Process::new(pid, mem, ProcKind::Traced, 0, false));
        let deadline = Instant::now() + ATTACH_DEADLINE;
        loop {
            let tids = super::list_tasks(pid);
            if tids.is_empty() && t.threads.is_empty() {
                t.procs.clear();
                return Err(ProviderError::NoSuchProcess { pid });
            }
            let mut added = false;
            for tid in tids {
                if t.threads.contains_key(&tid) {
                    continue;
                }
                match sys::seize(tid, sys::OPTIONS_BASE) {
                    Ok(()) => {
                        let _ = sys::interrupt(tid);
                    }
                    Err(Errno::EPERM) if t.threads.is_empty() => {
                        t.procs.clear();
                        let why = crate::procinfo::untraceable(pid);
                        return Err(match why.explain(pid) {
                            Some(reason) => ProviderError::Untraceable { pid, reason },
                            None => ProviderError::PermissionDenied {
                                pid,
                                hint: ptrace_hint(),
                            },
                        });
                    }
                    Err(Errno::ESRCH) if tid == pid && t.threads.is_empty() => {
                        t.procs.clear();
                        return Err(ProviderError::NoSuchProcess { pid });
                    }
                    // Already ours (auto-attached clone), or exited meanwhile.
                    Err(_) => continue,
                }
                added = true;
                t.threads
                    .insert(tid, Thread::new(pid, TState::Running, false));
                t.proc_mut(pid).threads.push(tid);
            }
            // Collect stops until every known thread is held.
            t.settle(pid);
            if !added {
                break;
            }
            if Instant::now() > deadline {
                return Err(ProviderError::Timeout {
                    pid,
                    what: "attaching to all threads",
                });
            }
        }
        t.journal = Some(journal::Journal::create(pid).map_err(|e| e.to_string()));
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

    /// How `pid` ended, when it ended while it could not be reported as an
    /// event (during a detach).
    pub fn exit_status(&self, pid: i32) -> Option<ExitStatus> {
        self.exited.iter().find(|(p, _)| *p == pid).map(|(_, s)| *s)
    }

    /// The registers of every other thread of `pid` than `except` (which is
    /// stopped at a hit): each is stopped for the read, then resumed as it
    /// was. For a core file of the whole process.
    pub fn other_threads_registers(
        &mut self,
        pid: i32,
        except: i32,
    ) -> Vec<(i32, arch::Regs, Option<arch::FpRegs>)> {
        let held = self.stop_world(pid, except);
        let tids: Vec<i32> = self
            .procs
            .get(&pid)
            .map(|p| p.threads.iter().copied().filter(|t| *t != except).collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        for t in tids {
            let mut r = events::zero_regs();
            if sys::getregs(t, &mut r).is_err() {
                continue;
            }
            let mut f = crate::sys::regs::zero_fpregs();
            let fp = sys::getfpregs(t, &mut f).ok().map(|()| f);
            out.push((t, r, fp));
        }
        self.resume_all(&held);
        out
    }

    /// Probed sites a process rewrote itself (a JIT) while traced: on
    /// detach their bytes were left as the process wrote them, not
    /// restored: `(pid, address, byte found)`.
    pub fn code_left_alone(&self) -> &[(i32, u64, u8)] {
        &self.code_left_alone
    }

    /// The signals the threads of `pid` were given when they were detached
    /// (signals that had stopped them and were passed on).
    pub fn detach_signals(&self, pid: i32) -> Vec<i32> {
        self.detach_signals
            .iter()
            .filter(|(p, _)| *p == pid)
            .map(|(_, s)| *s)
            .collect()
    }

    /// The launched or attached process.
    pub fn main_pid(&self) -> i32 {
        self.main_pid
    }

    /// Chooses the step-over mechanisms (default [`StepPolicy::Auto`]).
    pub fn set_step_policy(&mut self, policy: StepPolicy) {
        self.policy = policy;
    }

    /// Counters so far.
    pub fn summary(&self) -> RunSummary {
        self.summary
    }

    /// The pids of the traced processes.
    pub fn pids(&self) -> Vec<i32> {
        self.procs.keys().copied().collect()
    }

    /// The mappings of `pid` (cached; refreshed after exec and library
    /// events). Empty for an unknown pid.
    pub fn maps(&mut self, pid: i32) -> &[Mapping] {
        self.maps_cache = self.procs.get(&pid).map(|p| p.mem.borrow().maps.clone());
        self.maps_cache.as_deref().map_or(&[], Vec::as_slice)
    }

    /// Re-reads the mappings of `pid`.
    pub fn refresh_maps(&mut self, pid: i32) {
        if let Some(p) = self.procs.get(&pid) {
            p.mem.borrow_mut().refresh_maps();
        }
    }

    fn proc_mut(&mut self, pid: i32) -> &mut Process {
        self.procs
            .get_mut(&pid)
            .expect("invariant: thread's process is registered")
    }

    /// A held thread of `pid` (for memory writes through ptrace).
    fn any_tid(&self, pid: i32) -> i32 {
        self.procs
            .get(&pid)
            .and_then(|p| {
                p.threads.iter().copied().find(|t| {
                    self.threads
                        .get(t)
                        .is_some_and(|t| t.state != TState::Running)
                })
            })
            .unwrap_or(pid)
    }

    /// Arms an `int3` at `addr` in `pid` (shared by its threads). Several
    /// probes may share an address: one `int3`, one id per call.
    pub fn insert_breakpoint(
        &mut self,
        pid: i32,
        addr: u64,
        expected: Option<u8>,
    ) -> Result<BpId, ArmError> {
        self.insert_site(pid, addr, expected, false)?;
        let id = BpId(self.next_bp);
        self.next_bp += 1;
        let p = self.procs.get(&pid).ok_or(ArmError::NotTraced { pid })?;
        p.mem
            .borrow_mut()
            .sites
            .get_mut(&addr)
            .expect("invariant: site just inserted")
            .ids
            .push(id);
        self.bps.insert(id, (pid, addr));
        Ok(id)
    }

    fn insert_site(
        &mut self,
        pid: i32,
        addr: u64,
        expected: Option<u8>,
        internal: bool,
    ) -> Result<(), ArmError> {
        let tid = self.any_tid(pid);
        let p = self.procs.get(&pid).ok_or(ArmError::NotTraced { pid })?;
        let launched = p.launched;
        let mut m = p.mem.borrow_mut();
        if let Some(s) = m.sites.get_mut(&addr) {
            if let Some(e) = expected
                && self.opts.verify_opcodes
                && e != s.orig
            {
                return Err(ArmError::OpcodeMismatch {
                    addr,
                    expected: e,
                    found: s.orig,
                });
            }
            s.internal |= internal;
            return Ok(());
        }
        if !m.is_exec(addr) {
            return Err(ArmError::NotExecutable { pid, addr });
        }
        let mut b = [0u8];
        if m.read_raw(addr, &mut b) != 1 {
            return Err(ArmError::NotExecutable { pid, addr });
        }
        if b[0] == BREAKPOINT_INSN {
            return Err(ArmError::AlreadyTrapped { addr });
        }
        if let Some(e) = expected
            && self.opts.verify_opcodes
            && e != b[0]
        {
            return Err(ArmError::OpcodeMismatch {
                addr,
                expected: e,
                found: b[0],
            });
        }
        let (insn, kind) = m.plan(addr);
        if insn.is_none() && !internal {
            return Err(ArmError::NotAnInstructionBoundary { addr });
        }
        if !launched {
            // Attach mode: never an int3 that `repair` could not undo.
            let inode = procmaps::find(&m.maps, addr).map_or(0, |mp| mp.inode);
            match self.journal.as_mut() {
                Some(Ok(j)) => j.record(addr, b[0], inode).map_err(|e| ArmError::Journal {
                    reason: format!("writing the patch journal: {e}"),
                })?,
                Some(Err(e)) => return Err(ArmError::Journal { reason: e.clone() }),
                None => {
                    return Err(ArmError::Journal {
                        reason: "no patch journal".into(),
                    });
                }
            }
        }
        m.poke(tid, addr, &[BREAKPOINT_INSN])
            .map_err(|e| ProviderError::sys("writing int3", pid, e))?;
        m.ever_armed.insert(addr);
        m.sites.insert(
            addr,
            Site {
                orig: b[0],
                ids: Vec::new(),
                internal,
                insn,
                kind,
                ool: None,
            },
        );
        Ok(())
    }

    /// Removes one logical probe; the `int3` goes when its last probe does.
    /// Removing an id whose process exited or exec'd is not an error.
    pub fn remove_breakpoint(&mut self, id: BpId) -> Result<(), ProviderError> {
        let Some((_, addr)) = self.bps.remove(&id) else {
            return Ok(());
        };
        let pids: Vec<i32> = self.procs.keys().copied().collect();
        let mut first_err = None;
        for pid in pids {
            let tid = self.any_tid(pid);
            let p = &self.procs[&pid];
            let mut m = p.mem.borrow_mut();
            let Some(s) = m.sites.get_mut(&addr) else {
                continue;
            };
            let Some(i) = s.ids.iter().position(|x| *x == id) else {
                continue;
            };
            s.ids.remove(i);
            if s.ids.is_empty() && !s.internal {
                let orig = s.orig;
                m.sites.remove(&addr);
                // Only over our own int3 (see `ProcMem::restore_all`).
                let mut now = [0u8];
                if m.read_raw(addr, &mut now) == 1 && now[0] != BREAKPOINT_INSN {
                    continue;
                }
                if let Err(e) = m.poke(tid, addr, &[orig])
                    && e != Errno::ESRCH
                    && first_err.is_none()
                {
                    first_err = Some(ProviderError::Restore {
                        pid,
                        addr,
                        errno: e,
                    });
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Arms a hardware watchpoint on every thread of `pid` (and on threads
    /// created later).
    pub fn insert_watchpoint(
        &mut self,
        pid: i32,
        addr: u64,
        len: u8,
        kind: WatchKind,
    ) -> Result<WpId, ArmError> {
        if !matches!(len, 1 | 2 | 4 | 8) {
            return Err(ArmError::BadWatchpoint {
                addr,
                len,
                reason: "length must be 1, 2, 4 or 8",
            });
        }
        if !addr.is_multiple_of(u64::from(len)) {
            return Err(ArmError::BadWatchpoint {
                addr,
                len,
                reason: "address must be a multiple of the length",
            });
        }
        if kind == WatchKind::Exec && len != 1 {
            return Err(ArmError::BadWatchpoint {
                addr,
                len,
                reason: "execute watchpoints have length 1",
            });
        }
        let p = self.procs.get(&pid).ok_or(ArmError::NotTraced { pid })?;
        let Some(slot) = p.wps.iter().position(Option::is_none) else {
            return Err(ArmError::NoDebugRegister { limit: 4 });
        };
        let id = WpId(self.next_wp);
        self.next_wp += 1;
        self.proc_mut(pid).wps[slot] = Some(WatchSlot {
            id,
            addr,
            len,
            kind,
        });
        if let Err(e) = self.apply_debugregs(pid) {
            self.proc_mut(pid).wps[slot] = None;
            let _ = self.apply_debugregs(pid);
            return Err(ArmError::Provider(e));
        }
        self.wps.insert(id, (pid, slot));
        Ok(id)
    }

    /// Removes a watchpoint.
    pub fn remove_watchpoint(&mut self, id: WpId) -> Result<(), ProviderError> {
        let Some((pid, slot)) = self.wps.remove(&id) else {
            return Ok(());
        };
        match self.procs.get_mut(&pid) {
            Some(p) if p.wps[slot].is_some_and(|w| w.id == id) => p.wps[slot] = None,
            _ => return Ok(()),
        }
        self.apply_debugregs(pid)
    }

    /// Writes DR0-3 and DR7 of every thread of `pid`, stopping running ones
    /// for the duration.
    fn apply_debugregs(&mut self, pid: i32) -> Result<(), ProviderError> {
        let held = self.stop_world(pid, 0);
        let p = &self.procs[&pid];
        let dr7 = p.dr7();
        let wps = p.wps;
        let tids = p.threads.clone();
        let mut res = Ok(());
        for tid in tids {
            if self.threads.get(&tid).is_none_or(|t| t.new) {
                continue;
            }
            if let Err(e) = set_debugregs(tid, &wps, dr7)
                && e != Errno::ESRCH
            {
                res = Err(ProviderError::sys(
                    "PTRACE_POKEUSER (debug registers)",
                    tid,
                    e,
                ));
            }
        }
        self.resume_all(&held);
        res
    }
}

/// Writes the debug registers of one stopped thread.
fn set_debugregs(tid: i32, wps: &[Option<WatchSlot>; 4], dr7: u64) -> Result<(), Errno> {
    // Disable first so that changing addresses never arms a stale combination.
    sys::pokeuser(tid, arch::debugreg_offset(7), 0)?;
    for (i, w) in wps.iter().enumerate() {
        if let Some(w) = w {
            sys::pokeuser(tid, arch::debugreg_offset(i), w.addr)?;
        }
    }
    if dr7 != 0 {
        sys::pokeuser(tid, arch::debugreg_offset(7), dr7)?;
    }
    Ok(())
}

/// The thread group id of `tid` from `/proc/TID/status`.
fn tgid_of(tid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.detach_all();
    }
}
