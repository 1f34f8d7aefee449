//! The transport seam: how probes reach a traced process and how its hits
//! reach the session. In the spirit of the DTrace provider interface
//! (provide / enable / disable / suspend / resume / getargval / destroy):
//! the session resolves probes and calls [`Transport::insert`] and
//! [`Transport::remove`]; the transport runs its event loop and hands every
//! hit to the session as an [`Event::Hit`] whose [`TransportHit`] is the
//! hit's environment for handlers (registers, memory, identity); at the end
//! the session calls [`Transport::detach`], which leaves the target as it
//! was. Each transport declares its [`Capabilities`], and the session
//! refuses a program that needs what the transport lacks, with one message
//! format for all of them. Every fallible call of the seam (and a
//! transport's preflight and open) returns [`Error`]: its kind is what the
//! session, the planner and the commands act on (a site refused by a
//! [`Rule`], a process gone, what this transport cannot do ...), its text
//! the message the user reads.
//!
//! **Adding a transport** is a folder (`transport/NAME.rs` and
//! `transport/NAME/`), an `impl Transport`, a `TransportInfo`, and one line
//! in [`TRANSPORTS`] (the command line's `--transport` values come from
//! that list). Only a transport that runs the handlers itself, in the
//! target, also implements [`InTarget`] (given by
//! [`Transport::in_target`]).
//!
//! Never here: resolution (the session's), handler runs (the runner's),
//! output.

pub mod calls;
pub mod common;
pub mod error;
#[cfg(test)]
pub mod fake;
pub mod inproc;
pub mod perf;
pub mod ptrace;
pub mod retsites;
pub mod semaphores;

use std::any::Any;
use std::ffi::OsString;
use std::sync::atomic::AtomicBool;

use hostabi::Status;
use hostabi::env::HitEnv;

use crate::arch::WatchKind;
use crate::probe::addr::RunAddr;
use crate::proc::procmaps::Mapping;
use crate::wasm::regscan::RegsRead;

pub use self::error::{Error, Rule};
pub use crate::wasm::host::NoHit;

/// How a process ended (every transport reports it the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// `exit(code)`.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl ExitStatus {
    /// The end a raw `waitpid` status of an exited or killed process says.
    pub fn from_wait(st: i32) -> ExitStatus {
        if libc::WIFSIGNALED(st) {
            ExitStatus::Signal(libc::WTERMSIG(st))
        } else {
            ExitStatus::Code(libc::WEXITSTATUS(st))
        }
    }
}

/// What a transport can do. The session checks programs against it before
/// anything is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Handlers may write registers and memory (`write_reg`, `write_mem`).
    pub writes: bool,
    /// The hit thread waits for its handlers (live memory is the hit's).
    pub synchronous: bool,
    /// Hardware watchpoints.
    pub watchpoints: bool,
    /// `-f`: fork children are traced.
    pub follows_forks: bool,
    /// `exit 1`: the stopped process is handed to a debugger.
    pub debugger_handoff: bool,
    /// `exit 3`: a core file of the process at the hit.
    pub core_dump: bool,
    /// Probes in libraries mapped after the start (`dlopen`) are armed
    /// when they appear.
    pub later_libraries: bool,
    /// The probes of the program a traced process executes (`exec`) are
    /// armed in its new image.
    pub follows_exec: bool,
    /// Under `-f`, the probes of the programs fork children execute are
    /// armed in their new images too.
    pub follows_exec_in_children: bool,
    /// A probe can be armed on a module file before any process maps it
    /// ([`Transport::insert_on_file`]).
    pub arms_files: bool,
    /// Traces with ptrace: a process another tracer (gdb, strace) holds
    /// cannot be traced.
    pub uses_ptrace: bool,
    /// Return probes ([`Insert::Return`]).
    pub return_probes: bool,
    /// The transport executes a breakpoint's displaced instruction itself
    /// and reports whether it faulted ([`Event::Stepped`] after each
    /// breakpoint hit), so that `logonfault` applies.
    pub step_faults: bool,
    /// `check_access` can tell whether the process may write (RPN
    /// `vfyrw`).
    pub write_checks: bool,
    /// A return probe can report its calls as typed events instead of
    /// running its handler ([`Insert::Return::entry_notice`]): each as it
    /// enters ([`Event::Entered`]) and as it returns ([`Event::Returned`]).
    pub entry_notices: bool,
    /// Probes on files can be armed for every process of the system, those
    /// started later included ([`Target::System`]).
    pub system_wide: bool,
}

/// Who is traced.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    /// A command launched for the run (`-- CMD ARGS`).
    Launch(&'a [OsString]),
    /// A running process (`-p PID`), all of its threads.
    Attach(i32),
    /// No process: probes on files fire in every process that runs them,
    /// those started later included (bpftrace's default without `-c`/`-p`;
    /// only where [`Capabilities::system_wide`]).
    System,
}

/// Why a transport without [`Capabilities::system_wide`] cannot serve a
/// run with no `-c`/`-p`.
pub const NOT_SYSTEM_WIDE: &str = "a probe with no -c/-p is system-wide: it must fire in every \
    process that runs the file, started later too, which only the kernel's uprobes do \
    (--transport perf); give -c CMD, a command after `--`, or -p PID to trace one process";

/// What opening a transport needs to know of the run.
#[derive(Clone, Copy, Debug)]
pub struct OpenOptions {
    /// `-f`.
    pub follow_forks: bool,
    /// Check `opcode =` (and instruction boundaries) before arming.
    pub verify_opcodes: bool,
    /// Some handler reads memory (`read_mem`, `read_str`).
    pub reads_memory: bool,
    /// The registers the handlers can read.
    pub registers: RegsRead,
    /// What a handler run that finds the record ring full does (transports
    /// whose handlers write into a ring in the target: in-process).
    pub ring_full: RingFull,
}

/// What a handler run that finds the in-process record ring full does
/// (`--ring-full`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RingFull {
    /// The thread waits until wprobe made room, at most a second per run
    /// (then its records are dropped and counted): no record is lost to a
    /// burst, the program is slowed down to wprobe's pace meanwhile.
    #[default]
    Block,
    /// The run's records are dropped at once and counted (`dropped`): the
    /// program never waits for wprobe.
    Drop,
}

/// How a transport starts or attaches to its target.
pub type OpenFn = fn(Target<'_>, &OpenOptions) -> Result<Box<dyn Transport>, Error>;

/// A transport of the registry.
#[derive(Debug)]
pub struct TransportInfo {
    /// The `--transport` value.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// What it can do.
    pub caps: Capabilities,
    /// The registers its hits carry (by base register id), when not every
    /// register: programs that read another one are refused.
    pub registers: Option<fn(u16) -> bool>,
    /// Checks, before anything is launched, what the machine must provide
    /// (the argument: whether any breakpoint probe is selected); the error
    /// says what is missing and how to fix it.
    pub preflight: fn(bool) -> Result<(), Error>,
    /// Starts or attaches to the target.
    pub open: OpenFn,
}

/// `-v`: transports say more of how they arm (the inproc transport lists
/// its near-jump sites).
pub static VERBOSE: AtomicBool = AtomicBool::new(false);

/// Every transport, in `--help` order; the first is the default.
pub static TRANSPORTS: &[&TransportInfo] = &[&ptrace::INFO, &perf::INFO, &inproc::INFO];

/// The transport named `name`.
pub fn by_name(name: &str) -> Option<&'static TransportInfo> {
    TRANSPORTS.iter().copied().find(|t| t.name == name)
}

/// A watchpoint the debug registers cannot hold (its length, alignment or
/// kind), refused alike by every transport that has watchpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid watchpoint at {addr:#x} length {len}: {reason}")]
pub struct BadWatchpoint {
    /// Address.
    pub addr: u64,
    /// Length.
    pub len: u8,
    /// Why.
    pub reason: &'static str,
}

impl BadWatchpoint {
    /// Checks a watchpoint's address, length and kind against what the
    /// debug registers can hold ([`crate::arch::check_watchpoint`]).
    pub fn check(addr: u64, len: u8, kind: crate::arch::WatchKind) -> Result<(), BadWatchpoint> {
        crate::arch::check_watchpoint(addr, len, kind).map_err(|reason| BadWatchpoint {
            addr,
            len,
            reason,
        })
    }
}

/// What to arm at a run-time address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    /// A breakpoint; with the byte `opcode =` says must be there.
    Breakpoint {
        /// The expected first byte, when the program gives one.
        opcode: Option<u8>,
    },
    /// A hardware watchpoint.
    Watchpoint {
        /// 1, 2, 4 or 8 bytes.
        len: u8,
        /// Access kind.
        kind: WatchKind,
    },
    /// A return probe (`return yes`): the address is a function's entry;
    /// a hit is delivered at each return of a call that entered there,
    /// with the registers after the `ret` and the entry's state
    /// (`HitEnv::entry_reg`, `HitEnv::elapsed_ns`). Calls beyond
    /// `maxactive` live ones per process or beyond
    /// `agent_abi::MAX_TRACKED_CALLS` live ones in their thread, and calls
    /// that leave without returning (longjmp, unwinding, thread exit, exec,
    /// detach), run no handler and are reported as [`Event::Missed`].
    Return {
        /// The expected first byte, when the program gives one.
        opcode: Option<u8>,
        /// Live calls tracked per process (already defaulted: never 0).
        maxactive: u32,
        /// The probe's calls are reported as they enter
        /// ([`Event::Entered`]) and as they return ([`Event::Returned`]),
        /// and its handler never runs (only where
        /// [`Capabilities::entry_notices`]).
        entry_notice: bool,
    },
}

/// How a USDT site's semaphore is held while the site is armed
/// ([`Transport::insert_usdt`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SemaphoreHold {
    /// Raised through [`Transport::semaphore`]: the session lowers it when
    /// the probe is disabled or the run detaches.
    Raised,
    /// Counted by the kernel with the probe (perf's `ref_ctr_offset`):
    /// lowered when the probe is removed, also when wprobe dies.
    Kernel,
    /// Not raised: why (the site stays armed; the program skips it while
    /// no one else raises the semaphore).
    Failed(String),
}

/// An armed probe, as its transport identifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Armed(pub u64);

/// What a transport reports to the session.
#[derive(Debug)]
pub enum Event<'a> {
    /// Probes fired: the session's tags of every probe at the place, in
    /// the order their handlers run, and the hit.
    Hit {
        /// The probes (the tags given to [`Transport::insert`]).
        tags: &'a [usize],
        /// The hit's environment.
        hit: &'a mut dyn TransportHit,
    },
    /// A new traced process (a fork child under `-f`).
    ProcessStarted {
        /// The child.
        pid: i32,
        /// Its parent.
        parent: i32,
    },
    /// A traced process exec'd: its probes are gone; re-arm.
    Exec {
        /// The process.
        pid: i32,
    },
    /// The dynamic linker changed the process's libraries.
    LibrariesChanged {
        /// The process.
        pid: i32,
    },
    /// A traced process ended.
    ProcessExited {
        /// The process.
        pid: i32,
        /// How.
        status: ExitStatus,
    },
    /// Hits of a probe the transport could not deliver (counted as
    /// `dropped`: `hits + dropped` is every hit).
    Lost {
        /// The probe's tag.
        tag: usize,
        /// How many.
        count: u64,
    },
    /// The interval of [`Transport::set_tick`] elapsed.
    Tick,
    /// The displaced instruction of the breakpoint hit just reported was
    /// executed (transports with [`Capabilities::step_faults`]): `fault` is
    /// the signal it raised, delivered to the thread as without the probe.
    /// The records of that hit's probes without `logonfault = yes` are
    /// then discarded (spec §14 step 8), and counted.
    Stepped {
        /// The thread.
        tid: i32,
        /// SIGSEGV, SIGBUS, SIGFPE or SIGILL.
        fault: Option<i32>,
    },
    /// Calls of a return probe that ran no handler: beyond `maxactive` or
    /// beyond what their thread tracks (`agent_abi::MAX_TRACKED_CALLS`),
    /// or left without returning (counted as `missed`).
    Missed {
        /// The probe's tag.
        tag: usize,
        /// How many.
        count: u64,
        /// How many of them were not tracked because their thread already
        /// tracked as many calls as it can (counted as `missed_depth` too).
        depth: u64,
    },
    /// Calls of a return probe still live when the run ended (their
    /// process ended or is let go before they returned), which the
    /// transport cannot name one by one (inproc: they are in the target's
    /// own call stacks). They ran no handler: counted as `missed`, as the
    /// [`Event::Unwound`] of a call left running is by other transports.
    LeftRunning {
        /// The probe's tag.
        tag: usize,
        /// How many.
        count: u64,
    },
    /// A tracked call of a return probe ended without returning: its frame
    /// was abandoned (`longjmp`, an exception unwinding through it), or
    /// its thread or process ended, exec'd, or is let go. One event per
    /// call, delivered when the transport notices (at the thread's next
    /// entry or return of a traced call, or when the thread, process or
    /// run ends), innermost call first, and always before any later
    /// [`Event::Hit`] of the same thread. No handler runs; `wprobe run`
    /// counts it as `missed`. Calls of a probe that was disabled end
    /// without this event.
    Unwound {
        /// The probe's tag.
        tag: usize,
        /// The process.
        pid: i32,
        /// The thread that made the call.
        tid: i32,
        /// `rsp` at the call's entry (identifies its frame).
        entry_rsp: u64,
        /// Monotonic time of the entry, in ns.
        entry_ns: u64,
        /// Why the call ended without a return.
        cause: calls::Left,
    },
    /// A call of a return probe armed with `entry_notice` entered,
    /// delivered in order with the thread's other events (no handler runs:
    /// what the built-in `trace_entry` handler would have logged). Every
    /// transport tells every entry, tracked or not; a call not tracked is
    /// also [`Event::Missed`] (the in-process agent counts it), and has no
    /// [`Event::Returned`].
    Entered {
        /// The probe's tag.
        tag: usize,
        /// The process.
        pid: i32,
        /// The thread that made the call.
        tid: i32,
        /// `rsp` at the entry (the call's identity in its thread).
        rsp: u64,
        /// Wall-clock time of the entry, in ns.
        time_ns: u64,
        /// The function's entry address.
        ip: u64,
    },
    /// The return of a tracked call of a return probe armed with
    /// `entry_notice` (no handler runs at it; what the built-in
    /// `trace_exit` handler would have logged).
    Returned {
        /// The probe's tag.
        tag: usize,
        /// The process.
        pid: i32,
        /// The thread that made the call.
        tid: i32,
        /// Wall-clock time of the return, in ns.
        time_ns: u64,
        /// The function's entry address.
        ip: u64,
        /// `rax` after the return.
        rax: u64,
        /// `rsp` at the entry (the call's identity in its thread).
        entry_rsp: u64,
        /// The call's duration, in ns.
        elapsed_ns: u64,
    },
    /// A transport that runs the handlers itself
    /// ([`Transport::in_target`]): one handler run in the target whose
    /// records (or outcome) the session must see; runs without either are
    /// only counted ([`Event::Counted`]).
    Ran {
        /// The probe's tag.
        tag: usize,
        /// The run.
        run: &'a TargetRun<'a>,
    },
    /// A transport that runs the handlers itself: what happened to a
    /// probe's hits since the last report (added to its statistics).
    Counted {
        /// The probe's tag.
        tag: usize,
        /// The increments.
        counts: RunCounts,
    },
}

impl<'a> Event<'a> {
    /// The hit of one probe (`tag`): a hit of a watchpoint, or of a return
    /// probe at one call's return.
    pub fn hit_of(tag: &'a usize, hit: &'a mut dyn TransportHit) -> Event<'a> {
        Event::Hit {
            tags: std::slice::from_ref(tag),
            hit,
        }
    }
}

/// A handler run in the target, as a transport that runs handlers reports
/// it ([`Event::Ran`]): the hit's identity and the records, which the
/// session formats as it formats the records of its own runs.
#[derive(Debug)]
pub struct TargetRun<'a> {
    /// Process of the hit.
    pub pid: i32,
    /// Thread of the hit.
    pub tid: i32,
    /// CPU of the hit.
    pub cpu: u32,
    /// Wall-clock time of the hit, ns since the epoch.
    pub time_ns: u64,
    /// The probe's run-time address (a return probe's: its function's entry).
    pub ip: u64,
    /// How the handler ended.
    pub outcome: TargetOutcome,
    /// The message of the probe's first trap (sent once per probe).
    pub trap: Option<&'a str>,
    /// The records of the run, in emission order.
    pub records: &'a crate::out::sink::Sink,
}

/// How a handler run in the target ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetOutcome {
    /// The handler returned this outcome.
    Returned(hostabi::Outcome),
    /// Fuel ran out.
    FuelExhausted,
    /// The handler trapped.
    Trapped,
}

/// Increments of a probe's statistics reported by a transport that runs
/// the handlers itself ([`Event::Counted`]): the agent's counters.
pub use agent_abi::RunCounts;

/// A program, for a transport that runs the handlers itself
/// ([`InTarget::load_handlers`]).
#[derive(Clone, Copy, Debug)]
pub struct HandlerProgram<'a> {
    /// The label (file stem) for messages.
    pub label: &'a str,
    /// The Wasm module.
    pub wasm: &'a [u8],
    /// Global variables it declares.
    pub gvars: u32,
    /// Fuel per handler run.
    pub fuel: u64,
    /// Whether it imports `write_reg` or `write_mem`.
    pub writes: bool,
    /// Its map region as it is now (`mapstore` layout), if it declares maps.
    pub maps: Option<&'a [u8]>,
}

/// A probe of such a program.
#[derive(Clone, Copy, Debug)]
pub struct HandlerProbe<'a> {
    /// The tag the probe is inserted with.
    pub tag: usize,
    /// Its program (index into [`HandlerSet::programs`]).
    pub program: usize,
    /// Its handler export.
    pub export: &'a str,
    /// `ignore`.
    pub ignore: u64,
    /// `maxhits` (0: no limit).
    pub maxhits: u64,
    /// Load bias of its module in the main process (the `load_bias` import).
    pub load_bias: u64,
    /// Its handler's parameters (the manifest's `args`).
    pub args: &'a [hostabi::manifest::ArgSource],
    /// Its USDT site's arguments (the manifest's `usdt_args`; the
    /// `usdt_arg` import), empty for other probes.
    pub usdt_args: &'a [hostabi::usdt::UsdtArg],
}

/// Everything a transport that runs the handlers itself needs of them.
#[derive(Clone, Debug)]
pub struct HandlerSet<'a> {
    /// The programs, in load order.
    pub programs: Vec<HandlerProgram<'a>>,
    /// The probes.
    pub probes: Vec<HandlerProbe<'a>>,
    /// `CLOCK_MONOTONIC` when the run started (the `clock_ns` import).
    pub start_mono_ns: u64,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC` (the `clock_ns` import).
    pub mono_offset_ns: u64,
    /// The launched command's pid (the `child_pid` import; 0 when attached).
    pub child_pid: u64,
    /// Whether compiled artifacts may come from and go to the compiled-module
    /// cache (`--no-cache` says no).
    pub use_cache: bool,
}

/// What the session asks of the transport after a hit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Action {
    /// Resume the thread.
    #[default]
    Continue,
    /// Hand the stopped process to a debugger (`exit 1`).
    HandoffToDebugger,
    /// Write a core file of the process, then resume (`exit 3`).
    CoreDump,
}

/// The transport's account of the run, after [`Transport::detach`].
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// How the launched command ended, when it ended while the transport
    /// could not report it as an event (during a detach).
    pub exit_status: Option<ExitStatus>,
    /// Signals the launched command's threads were detached with (they
    /// reach it: wprobe need not pass them on).
    pub detach_signals: Vec<i32>,
    /// Processes handed to a debugger (`exit 1`).
    pub handed_off: Vec<i32>,
    /// Probed sites a process rewrote itself: left as it wrote them
    /// (`pid`, address, byte found).
    pub code_left_alone: Vec<(i32, u64, u8)>,
    /// Time spent detaching inside [`Transport::run`] (when `stop` was
    /// set), not counting [`Transport::detach`].
    pub detach_time: std::time::Duration,
}

/// A transport: arms probes in its target and delivers their hits.
pub trait Transport {
    /// Which transport this is.
    fn info(&self) -> &'static TransportInfo;

    /// The launched or attached process.
    fn main_pid(&self) -> i32;

    /// The mappings of `pid` (`fresh`: read now, not as cached).
    fn maps(&mut self, pid: i32, fresh: bool) -> Result<Vec<Mapping>, Error>;

    /// Arms probe `tag` at run-time address `addr` in `pid`.
    fn insert(&mut self, tag: usize, pid: i32, addr: RunAddr, what: Insert)
    -> Result<Armed, Error>;

    /// Arms breakpoint probe `tag` at `offset` in module file `file`, which
    /// no process maps yet (only with [`Capabilities::arms_files`]); the
    /// caller has checked the instruction there.
    fn insert_on_file(
        &mut self,
        tag: usize,
        file: &std::path::Path,
        offset: u64,
    ) -> Result<Armed, Error> {
        let _ = (tag, file, offset);
        let name = self.info().name;
        Err(Error::unsupported(
            name,
            format!("--transport {name} arms probes in mapped modules only"),
        ))
    }

    /// Arms return probe `tag` on the function whose entry is at `offset`
    /// in module file `file` (as [`Transport::insert_on_file`] does for a
    /// breakpoint; only with [`Capabilities::arms_files`] and
    /// [`Capabilities::return_probes`]), `maxactive` and `entry_notice` as
    /// [`Insert::Return`]'s.
    fn insert_return_on_file(
        &mut self,
        tag: usize,
        file: &std::path::Path,
        offset: u64,
        maxactive: u32,
        entry_notice: bool,
    ) -> Result<Armed, Error> {
        let _ = (tag, file, offset, maxactive, entry_notice);
        let name = self.info().name;
        Err(Error::unsupported(
            name,
            format!("--transport {name} arms return probes in mapped modules only"),
        ))
    }

    /// Return probe `tag` is on a function that switches stacks
    /// (`swapcontext`): its open calls keep the calls of the stack left
    /// behind from being judged by the other stack's stack pointer
    /// ([`agent_abi::pairing`]). Called before the probe is armed; a
    /// transport that pairs no calls ignores it.
    fn mark_stack_switch(&mut self, tag: usize) {
        let _ = tag;
    }

    /// About `probes` probes are to be inserted in a row (arming): a
    /// transport that keeps a record per site may make room for them at
    /// once. A hint; nothing changes if fewer or more come.
    fn expect_inserts(&mut self, probes: usize) {
        let _ = probes;
    }

    /// Whether the launched command is stopped at its exec: the executable
    /// and the dynamic linker mapped, nothing run. The caller arms what is
    /// mapped, and the startup libraries on their files
    /// ([`Transport::insert_on_file`]) so that their constructors are
    /// seen, then calls [`Transport::run_to_entry`].
    fn at_exec(&self) -> bool {
        false
    }

    /// Runs a launched command stopped at its exec to its entry point (its
    /// startup libraries mapped, relocated and initialised), where what
    /// needed the dynamic linker (IFUNCs) can be armed. Nothing to do for
    /// a transport that starts at the entry point.
    fn run_to_entry(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// Disarms a probe (its later hits, if any were in flight, are not
    /// reported as hits of an enabled probe).
    fn remove(&mut self, armed: Armed);

    /// The probes armed in a library the process has unmapped since the
    /// last call (`dlclose`, or another library mapped at its address):
    /// gone with it, nothing to remove. The session forgets them, so that
    /// they are armed again where their module is mapped next.
    fn take_unmapped(&mut self) -> Vec<Armed> {
        Vec::new()
    }

    /// How the sites of each probe were armed, where a transport chooses
    /// per site (the in-process transport: a `jump`, or a `trap` where no
    /// jump fits): `(tag, mechanism, sites)`, for the statistics. Empty
    /// where every site is armed one way (ptrace's `int3`, perf's uprobe).
    fn site_counts(&self) -> Vec<(usize, &'static str, u32)> {
        Vec::new()
    }

    /// Arms USDT site `tag` (a breakpoint, as [`Transport::insert`]) at
    /// `addr` in `pid`, with its semaphore at `sem` held raised while it is
    /// armed (DTrace's enable of an is-enabled probe). By default
    /// [`Transport::semaphore`] `+1`, then the breakpoint; the session
    /// lowers the semaphore again; a transport whose kernel counts the semaphore with the
    /// probe (perf) overrides it.
    fn insert_usdt(
        &mut self,
        tag: usize,
        pid: i32,
        addr: RunAddr,
        opcode: Option<u8>,
        sem: RunAddr,
    ) -> Result<(Armed, SemaphoreHold), Error> {
        // The semaphore first: the site's first hit already sees it
        // raised, as under the kernel's counting (the program may read it
        // right before the site, to build an argument).
        let hold = match self.semaphore(pid, sem, 1) {
            Ok(()) => SemaphoreHold::Raised,
            Err(e) => SemaphoreHold::Failed(e.to_string()),
        };
        match self.insert(tag, pid, addr, Insert::Breakpoint { opcode }) {
            Ok(armed) => Ok((armed, hold)),
            Err(e) => {
                if hold == SemaphoreHold::Raised {
                    let _ = self.semaphore(pid, sem, -1);
                }
                Err(e)
            }
        }
    }

    /// Arms USDT site `tag` at `offset` in module file `file` (as
    /// [`Transport::insert_on_file`]), its semaphore at file offset
    /// `sem_offset` counted by the kernel in every process that maps the
    /// file. By default the site alone, its semaphore not raised.
    fn insert_usdt_on_file(
        &mut self,
        tag: usize,
        file: &std::path::Path,
        offset: u64,
        sem_offset: u64,
    ) -> Result<(Armed, SemaphoreHold), Error> {
        let _ = sem_offset;
        let armed = self.insert_on_file(tag, file, offset)?;
        Ok((
            armed,
            SemaphoreHold::Failed(format!(
                "--transport {} cannot raise USDT semaphores in files",
                self.info().name
            )),
        ))
    }

    /// Adds `delta` (+1 when a USDT site with a semaphore is armed in
    /// `pid`, -1 when it is disarmed) to the site's 2-byte semaphore at
    /// `addr` (DTrace's enable/disable, reference-counted by the program's
    /// counter), journaled so that a killed wprobe's increment is undone
    /// ([`semaphores`]). By default a transport that writes the target
    /// does it through `/proc/PID/mem`; one that does not must let the
    /// kernel do it (perf: the uprobe's `ref_ctr_offset`) or refuse.
    fn semaphore(&mut self, pid: i32, addr: RunAddr, delta: i16) -> Result<(), Error> {
        if self.info().caps.writes {
            semaphores::adjust(pid, addr.0, delta).map(|_| ())
        } else {
            let name = self.info().name;
            Err(Error::unsupported(
                name,
                format!("--transport {name} cannot raise USDT semaphores"),
            ))
        }
    }

    /// Makes every probe dormant without forgetting it: no hit after this
    /// returns (a hit already caught by the kernel may still be
    /// delivered), and a transport that patches the target restores its
    /// bytes. For a pause, or a quiescent teardown. The session's
    /// [`Armed`] handles stay valid. Transports that cannot say so.
    fn suspend(&mut self) -> Result<(), Error> {
        let name = self.info().name;
        Err(Error::unsupported(
            name,
            format!("--transport {name} cannot suspend its probes"),
        ))
    }

    /// Arms again every probe [`Transport::suspend`] made dormant (in the
    /// processes still traced).
    fn resume(&mut self) -> Result<(), Error> {
        let name = self.info().name;
        Err(Error::unsupported(
            name,
            format!("--transport {name} cannot resume its probes"),
        ))
    }

    /// Delivers [`Event::Tick`] every `period` while running.
    fn set_tick(&mut self, period: std::time::Duration);

    /// Runs until every traced process has ended or `stop` is set; the
    /// callback may arm and disarm through the transport it is given.
    /// Returns how the launched command ended, if it did.
    fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> anyhow::Result<Option<ExitStatus>>;

    /// Disarms everything and lets every process go, as it was.
    fn detach(&mut self) -> anyhow::Result<()>;

    /// Kills a launched command that never ran (nothing could be armed).
    fn kill_launched(&mut self);

    /// What happened, after [`Transport::detach`].
    fn report(&self) -> Report;

    /// A hit value of this transport (the session's store holds one, into
    /// which each hit is swapped).
    fn new_hit(&self) -> Box<dyn TransportHit>;

    /// The hooks of a transport that runs the handlers itself, in the
    /// target ([`InTarget`]); `None` (the default) for a transport whose
    /// hits the session's runner handles. The session gives such a
    /// transport the programs ([`InTarget::load_handlers`]) and receives
    /// their runs ([`Event::Ran`]) and counts ([`Event::Counted`]) instead
    /// of hits.
    fn in_target(&mut self) -> Option<&mut dyn InTarget> {
        None
    }
}

/// What only a transport that runs the handlers itself, in the target (the
/// in-process transport), is asked for: the programs and probes to run,
/// again when probes were armed later, and its map regions. Reached through
/// [`Transport::in_target`]; a transport whose hits the session's runner
/// handles implements only [`Transport`].
pub trait InTarget: Transport {
    /// Asks to be told of libraries `pid` maps from now on
    /// ([`Event::LibrariesChanged`], with the process stopped so that the
    /// probes inserted then are armed before any code of the library
    /// runs): some probes' modules are not mapped yet. Called before
    /// [`InTarget::load_handlers`]; an error says why libraries mapped
    /// later cannot be watched (the probes waiting for one stay unarmed).
    fn watch_libraries(&mut self, pid: i32) -> Result<(), Error>;

    /// The programs and probes before any probe is inserted in the
    /// launched command (`pid`, stopped at its start): what of
    /// [`InTarget::load_handlers`] needs no probe planned may be done now,
    /// while the planning of the probes waits for the reading of the
    /// program's code (the in-process transport loads its agent and the
    /// programs). The probes' load biases are not known yet: `set` has
    /// them as they are then, and [`InTarget::load_handlers`] has the
    /// final ones. An error leaves nothing running (the session kills the
    /// command). Nothing by default.
    fn preload_handlers(&mut self, pid: i32, set: &HandlerSet<'_>) -> Result<(), Error> {
        let _ = (pid, set);
        Ok(())
    }

    /// The programs and probes, after the probes were inserted and before
    /// [`Transport::run`]. An error leaves nothing running (the session
    /// kills a launched command, [`Transport::kill_launched`]).
    fn load_handlers(&mut self, set: &HandlerSet<'_>) -> Result<(), Error>;

    /// The programs and probes again after probes were inserted at an
    /// [`Event::LibrariesChanged`] or an [`Event::Exec`] (their modules'
    /// load biases known now).
    fn update_handlers(&mut self, set: &HandlerSet<'_>) -> Result<(), Error>;

    /// Holds every handler until [`InTarget::resume_handlers`], so that the
    /// map regions can be read and written ([`InTarget::handler_maps`]);
    /// `false` when they could not be held.
    fn pause_handlers(&mut self) -> bool;

    /// Lets the handlers run again after [`InTarget::pause_handlers`].
    fn resume_handlers(&mut self);

    /// Copies program `program`'s map region into `bytes` (`write`: from
    /// `bytes` into the region). `false` when it has none of that size.
    fn handler_maps(&mut self, program: usize, bytes: &mut [u8], write: bool) -> bool;
}

/// The hit of one transport, as handlers see it.
pub trait TransportHit: HitEnv + Any + std::fmt::Debug {
    /// The probe's address for a breakpoint hit (the load bias of its
    /// module is this minus the probe's link-time address); the
    /// instruction pointer for other hits.
    fn ip(&self) -> u64;

    /// Sets the load bias the handler sees.
    fn set_module_bias(&mut self, bias: u64);

    /// Swaps this hit's value with `other`'s when it is of the same type;
    /// false otherwise.
    fn swap_with(&mut self, other: &mut dyn TransportHit) -> bool;

    /// As `Any`, to swap values of the same concrete type.
    fn as_any_mut(&mut self) -> &mut dyn Any;

    /// Whether a memory read of the last handler run failed because the
    /// hit's process had exited (a transport that reads the memory after
    /// the hit, not while the thread waits: perf). Such a read gives
    /// nothing, never another process's bytes; the session counts it.
    fn process_gone(&self) -> bool {
        false
    }
}

/// Implements [`TransportHit::swap_with`] and [`TransportHit::as_any_mut`]
/// for a hit type.
#[macro_export]
macro_rules! swap_hit_impl {
    () => {
        fn swap_with(&mut self, other: &mut dyn $crate::transport::TransportHit) -> bool {
            match other.as_any_mut().downcast_mut::<Self>() {
                Some(o) => {
                    std::mem::swap(self, o);
                    true
                }
                None => false,
            }
        }

        fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
            self
        }
    };
}

impl TransportHit for NoHit {
    fn ip(&self) -> u64 {
        0
    }
    fn set_module_bias(&mut self, _bias: u64) {}
    swap_hit_impl!();
}

/// The environment handlers see: the current hit and the run's global
/// variables. The hit is swapped in for each handler run (two moves of the
/// hit's value, no allocation).
pub struct RunEnv {
    /// The hit.
    pub hit: Box<dyn TransportHit>,
    /// The run's shared global variables.
    pub gvars: Vec<u64>,
}

impl std::fmt::Debug for RunEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunEnv")
            .field("gvars", &self.gvars.len())
            .finish()
    }
}

impl Default for RunEnv {
    fn default() -> RunEnv {
        RunEnv {
            hit: Box::new(NoHit),
            gvars: Vec::new(),
        }
    }
}

impl HitEnv for RunEnv {
    fn read_reg(&mut self, reg: u16, part: u8) -> Option<u64> {
        self.hit.read_reg(reg, part)
    }
    fn write_reg(&mut self, reg: u16, value: u64) -> Status {
        self.hit.write_reg(reg, value)
    }
    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        self.hit.read_mem(addr, buf)
    }
    fn write_mem(&mut self, addr: u64, data: &[u8]) -> Status {
        self.hit.write_mem(addr, data)
    }
    fn check_access(&mut self, addr: u64, write: bool) -> bool {
        self.hit.check_access(addr, write)
    }
    fn tid(&self) -> u64 {
        self.hit.tid()
    }
    fn pid(&self) -> u64 {
        self.hit.pid()
    }
    fn cpu(&self) -> u64 {
        self.hit.cpu()
    }
    fn thread_pointer(&self) -> u64 {
        self.hit.thread_pointer()
    }
    fn load_bias(&self) -> u64 {
        self.hit.load_bias()
    }
    fn now_ns(&self) -> u64 {
        self.hit.now_ns()
    }
    fn cpuid(&mut self, leaf: u32, subleaf: u32) -> [u32; 4] {
        self.hit.cpuid(leaf, subleaf)
    }
    fn gvars(&mut self) -> &mut [u64] {
        &mut self.gvars
    }
    fn read_str(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, usize> {
        self.hit.read_str(addr, buf)
    }
    fn entry_reg(&mut self, reg: u16) -> Option<u64> {
        self.hit.entry_reg(reg)
    }
    fn elapsed_ns(&self) -> Option<u64> {
        self.hit.elapsed_ns()
    }
    fn comm(&self) -> Option<[u8; 16]> {
        self.hit.comm()
    }
}

/// The tids of `/proc/PID/task`, sorted (empty when the process is gone).
pub(crate) fn list_tasks(pid: i32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut v: Vec<i32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}
