//! The ptrace transport: launches or attaches to Linux x86-64 processes,
//! arms `int3` breakpoints and debug-register watchpoints, runs the event
//! loop and hands each hit to the caller with a [`PtraceHit`] context, steps over
//! displaced instructions without removing the `int3` (emulation, then
//! out-of-line execution, single-step with all threads stopped as the last
//! resort), follows or scrubs forks, handles exec, threads, signals and job
//! control, and detaches leaving every byte and debug register as it was.
//!
//! It must never harm the tracee: every signal that is not ours is
//! re-injected unchanged, `ESRCH` means "thread gone" (never fatal), and
//! every exit path restores the original bytes (`Drop` included).
//!
//! Not thread-safe: use a `PtraceTracer` from the thread that created it (ptrace
//! requests are per tracer thread).

mod coredump;
mod detach;
mod error;
mod events;
mod hit;
mod hits;
mod mem;
mod quiet;
mod seam;
mod sites;
mod start;
pub(crate) mod step;
mod threads;
mod tick;
mod world;

use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

pub use self::error::{ArmError, PtraceError};
pub use self::hit::{HitKind, HitWithGvars, PtraceHit};
pub use self::seam::INFO;
use self::threads::{Process, TState, Thread};
pub use crate::arch::WatchKind;
use crate::proc::procmaps::Mapping;

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

pub use crate::transport::ExitStatus;

/// The callback the event loop, the hits and the ticks are given: an
/// event in, the action to take out.
type Cb<'c> = &'c mut dyn FnMut(&mut PtraceTracer, PtraceEvent<'_>) -> PtraceAction;

/// What the event loop reports.
#[derive(Debug)]
pub enum PtraceEvent<'a> {
    /// A breakpoint hit; `bp` lists every logical probe at that address.
    Breakpoint {
        /// The probes at the address.
        bp: &'a [BpId],
        /// The stopped thread.
        hit: &'a mut PtraceHit,
    },
    /// A watchpoint fired.
    Watchpoint {
        /// The watchpoint.
        wp: WpId,
        /// The stopped thread.
        hit: &'a mut PtraceHit,
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
    /// The displaced instruction of the breakpoint hit just reported was
    /// executed (reported right after [`PtraceEvent::Breakpoint`] when a
    /// probe was there, unless the process was handed off): `fault` is the
    /// signal it raised, which the thread receives as it would untraced
    /// (spec §14 step 8: records are kept only with `logonfault = yes`).
    Stepped {
        /// The thread.
        tid: i32,
        /// SIGSEGV, SIGBUS, SIGFPE or SIGILL, when the instruction faults.
        fault: Option<i32>,
    },
    /// The dynamic linker changed the link map: mappings were refreshed.
    LibrariesChanged {
        /// The process.
        pid: i32,
    },
    /// The tick period set with [`PtraceTracer::set_tick`] elapsed (no thread is
    /// stopped for it).
    Tick,
    /// A traced process ended.
    ProcessExited {
        /// The process.
        pid: i32,
        /// How.
        status: ExitStatus,
    },
    /// A thread reached a return site ([`PtraceTracer::retain_return_site`]):
    /// the address a tracked call returns to. Delivered before
    /// [`PtraceEvent::Breakpoint`] when probes share the address.
    ReturnSite {
        /// The stopped thread (RIP is the site).
        hit: &'a mut PtraceHit,
    },
    /// A thread other than its process's main thread ended.
    ThreadExited {
        /// The process.
        pid: i32,
        /// The thread.
        tid: i32,
    },
}

/// What to do after an event (only meaningful for hits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PtraceAction {
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

/// The ptrace tracer: the set of traced processes and their probes.
pub struct PtraceTracer {
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
    /// Breakpoints whose library was unmapped, not yet told to the seam
    /// (see `ProcMem::drop_unmapped`).
    unmapped: Vec<BpId>,
    next_bp: u32,
    wps: HashMap<WpId, (i32, usize)>,
    next_wp: u32,
    hit: PtraceHit,
    ids: Vec<BpId>,
    summary: RunSummary,
    /// Attach mode: the patch journal, or why it could not be created (then
    /// no breakpoint is armed).
    journal: Option<Result<crate::transport::common::journal::Journal, crate::transport::Error>>,
    /// Attach mode: the watchdog that restores the journaled bytes if we
    /// die without detaching, or why there is none.
    watchdog: Option<Result<crate::transport::common::watchdog::Watchdog, crate::transport::Error>>,
    /// Exit statuses seen while the process could not be reported yet.
    exited: Vec<(i32, ExitStatus)>,
    /// Keeps the mappings returned by [`PtraceTracer::maps`] alive.
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
    /// Periodic [`PtraceEvent::Tick`]s: the period, the next due time, and the
    /// child process whose exit wakes the event loop then (0: none).
    tick: Option<(Duration, std::time::Instant, i32)>,
    /// The transport seam's state (probe tags).
    seam: seam::SeamState,
    /// Reused by fault prediction of out-of-line steps (no allocation per hit).
    insn_info: iced_x86::InstructionInfoFactory,
    /// Detaching leaves threads asleep in a system call seized, for the
    /// kernel to release when this process exits (see `quiet`); set by
    /// [`PtraceTracer::attach_quietly`].
    leave_sleepers: bool,
    /// Threads left that way by the last detach.
    left_asleep: usize,
}

impl std::fmt::Debug for PtraceTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtraceTracer")
            .field("main_pid", &self.main_pid)
            .field("processes", &self.procs.keys().collect::<Vec<_>>())
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl PtraceTracer {
    pub(super) fn empty(opts: TraceOptions) -> PtraceTracer {
        PtraceTracer {
            opts,
            policy: StepPolicy::Auto,
            main_pid: 0,
            procs: HashMap::new(),
            threads: HashMap::new(),
            orphans: HashMap::new(),
            queue: VecDeque::with_capacity(64),
            bps: HashMap::new(),
            unmapped: Vec::new(),
            next_bp: 1,
            wps: HashMap::new(),
            next_wp: 1,
            hit: PtraceHit::empty(),
            ids: Vec::with_capacity(16),
            summary: RunSummary::default(),
            journal: None,
            watchdog: None,
            exited: Vec::new(),
            maps_cache: None,
            detach_signals: Vec::new(),
            code_left_alone: Vec::new(),
            in_flight: None,
            tick: None,
            seam: Default::default(),
            insn_info: iced_x86::InstructionInfoFactory::new(),
            leave_sleepers: false,
            left_asleep: 0,
        }
    }

    /// How `pid` ended, when it ended while it could not be reported as an
    /// event (during a detach).
    pub fn exit_status(&self, pid: i32) -> Option<ExitStatus> {
        self.exited.iter().find(|(p, _)| *p == pid).map(|(_, s)| *s)
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

    pub(super) fn proc_mut(&mut self, pid: i32) -> &mut Process {
        self.procs
            .get_mut(&pid)
            .expect("invariant: thread's process is registered")
    }

    /// A held thread of `pid` (for memory writes through ptrace).
    pub(super) fn any_tid(&self, pid: i32) -> i32 {
        self.procs
            .get(&pid)
            .and_then(|p| {
                p.threads.iter().copied().find(|t| {
                    self.threads
                        .get(t)
                        .is_some_and(|t| matches!(t.state, TState::Held | TState::Listening))
                })
            })
            .unwrap_or(pid)
    }
}

/// The thread group id of `tid` from `/proc/TID/status`.
fn tgid_of(tid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

impl Drop for PtraceTracer {
    fn drop(&mut self) {
        let _ = self.detach_all();
    }
}
