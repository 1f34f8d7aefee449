//! The in-process transport (`--transport inproc`): the handlers run inside
//! the target. Each probe's first instructions are replaced by a 5-byte
//! jump to a stub that saves the registers and calls an agent mapped into
//! the process (`agent/`: wasmtime built without std, no signal handlers,
//! no TLS, no libc), which runs the same Wasm handlers with the same host
//! imports (`hostfns`) as the session does for ptrace and perf; the stub
//! then restores the registers (with the handler's writes) and runs the
//! displaced instructions, relocated, before jumping back. No trap, no
//! system call per hit.
//!
//! The target is ptrace-stopped only while the transport changes it: at
//! the start (a launched command at its entry point, `-p PID` with every
//! thread seized) the agent is loaded, the programs are loaded into it
//! (precompiled here for its engine), the stubs and jumps are written; at
//! the end every thread is stopped again and the original bytes are put
//! back. Meanwhile the target runs untraced, and the transport reads the
//! agent's ring of handler runs and its counters in shared memory, and
//! keeps a heartbeat: if wprobe dies, the probes go dormant by themselves
//! and `wprobe repair --pid` restores the bytes from the journal.
//!
//! See `docs/architecture.md`, "The in-process transport".

mod cave;
mod code;
pub use code::prefetch;
mod counts;
mod detach;
mod events;
mod fallbacks;
mod far_jumps;
mod forklibs;
mod forks;
mod hold;
mod joined;
pub mod journal;
mod later;
mod launch;
mod load;
mod open;
mod patch;
mod plans;
mod radix;
pub use plans::configure as configure_plan_cache;
pub mod repair;
mod ring;
mod seam;
mod seized;
mod traps;
pub use traps::TRAP_INSN;
mod world;

use rustc_hash::FxHashMap as HashMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use crate::transport::RunCounts;
use agent_loader::LoadedAgent;

use self::patch::Patcher;
use self::world::World;
use crate::out::sink::Sink;
use crate::proc::procmaps::Mapping;
use crate::transport::{Armed, Capabilities, Error, ExitStatus, TransportInfo};

/// The in-process transport in the registry.
pub static INFO: TransportInfo = TransportInfo {
    name: "inproc",
    about: "runs the handlers inside the target, where a jump replaces each probe's first \
            instructions (no trap per hit); handlers may write registers and memory",
    caps: Capabilities {
        writes: true,
        synchronous: true,
        watchpoints: true,
        follows_forks: true,
        debugger_handoff: false,
        core_dump: false,
        later_libraries: true,
        follows_exec: true,
        follows_exec_in_children: true,
        arms_files: false,
        uses_ptrace: true,
        return_probes: true,
        step_faults: false,
        write_checks: true,
        entry_notices: true,
        system_wide: false,
    },
    // Every register but the debug registers, which user space cannot read.
    registers: Some(|id| !matches!(id, 0x2C..=0x2F | 0x32 | 0x33)),
    preflight: |_| Ok(()),
    open: open::open,
};

/// What the agent's region says of the return probes armed, besides their
/// handlers ([`ProbeMarks::write_into`]).
#[derive(Clone, Debug, Default)]
struct ProbeMarks {
    /// `maxactive` of each return probe (by tag).
    maxactive: HashMap<usize, u32>,
    /// The return probes whose calls are reported as they enter.
    entry_notices: Vec<usize>,
    /// The return probes on functions that switch stacks
    /// (`Transport::mark_stack_switch`).
    switch_tags: Vec<usize>,
}

impl ProbeMarks {
    /// Writes them into the agent's `region`.
    fn write_into(&self, region: &agent_loader::region::Region) {
        for (&tag, &max) in &self.maxactive {
            region.set_probe_maxactive(tag as u32, u64::from(max));
        }
        for &tag in &self.entry_notices {
            region.set_probe_entry_notice(tag as u32, true);
        }
        for &tag in &self.switch_tags {
            region.set_probe_flags(tag as u32, agent_abi::probe_flag::SWITCHES_STACK);
        }
    }
}

/// The in-process transport's state.
pub struct InProc {
    pid: i32,
    launched: bool,
    /// The stopped threads, while arming and detaching.
    world: Option<World>,
    maps: Vec<Mapping>,
    patcher: Patcher,
    /// Site of each probe armed (by tag; a return probe's entry site).
    armed: HashMap<usize, usize>,
    /// What the agent is told of the return probes armed.
    marks: ProbeMarks,
    /// Where the run stands: arming, running, handing runs on, returned.
    run: Run,
    /// The probes removed while runs are handed on ([`Run::Draining`]).
    removed: Vec<usize>,
    agent: Option<LoadedAgent>,
    /// The agent loaded before the probes were planned (`load::preload`),
    /// for the commit, with the load bias each probe (by tag) was loaded
    /// with; or why that failed, the commit's error (the session kills
    /// the launched command then, as when the loading fails there).
    preloaded: Option<Result<(LoadedAgent, Vec<u64>), Error>>,
    /// Map region of each program: (offset, length) in the shared region.
    program_maps: Vec<(u64, u64)>,
    /// The counters last reported, by tag.
    reported: Vec<RunCounts>,
    sink: Sink,
    items: Vec<u32>,
    tick: Option<(Duration, Instant)>,
    /// Whether the process ended, and how.
    life: Life,
    pidfd: Option<OwnedFd>,
    heartbeat: Option<agent_loader::region::Heartbeat>,
    code_left_alone: Vec<(i32, u64, u8)>,
    detach_time: Duration,
    /// `(TSC, ns)` at open, to measure the TSC's rate for the heartbeat.
    tsc0: (u64, u64),
    handlers_paused: bool,
    /// Where the probes' image stands: armed, suspended, or gone with an
    /// exec.
    phase: Phase,
    /// The agent's heap allocations once armed (`WPROBE_DEBUG` reports the
    /// ones made while running: none per hit).
    allocations_armed: u64,
    /// The seized threads while some site traps instead of jumping.
    traps: Option<traps::Traps>,
    /// The watchpoints (in the debug registers while the threads are seized).
    watches: traps::Watches,
    /// Restores the traps' bytes if wprobe dies.
    watchdog: Option<crate::transport::common::watchdog::Watchdog>,
    /// The watchdog started at the commit, once trap sites are planned,
    /// while the agent loads (`hold::go` waits for it).
    watchdog_starting: Option<crate::transport::common::watchdog::Starting>,
    /// What a run that finds the ring full does.
    ring_full: crate::transport::RingFull,
    /// Sites before this index are in the agent's table.
    sites_sent: usize,
    /// Sites of libraries unmapped since, to send the agent again with
    /// no probes.
    sites_dropped: Vec<usize>,
    /// The probes enabled in the agent.
    enabled: rustc_hash::FxHashSet<usize>,
    /// Probes armed after the handlers were loaded, whose module's bias
    /// the agent has not been told (from `update_handlers`).
    later_biases: Vec<(u32, u64)>,
    /// Probes whose sites went with an unmapped library (`take_unmapped`).
    unmapped: Vec<Armed>,
    /// The dynamic linker's hooks, when libraries mapped later are armed
    /// (`watch_libraries`): its `r_brk` has a trap site.
    rdebug: Option<crate::transport::common::rdebug::RDebug>,
    /// Library events handled (`WPROBE_DEBUG` says how many).
    library_events: u64,
    /// The threads were taken by [`traps::Traps`] once.
    taken: bool,
    /// The fallback notes said so far.
    said: rustc_hash::FxHashSet<String>,
    /// Fork children not let go yet when the threads were last stopped.
    children: traps::Children,
    /// The ptrace stops at each trap site (by address), over every
    /// [`traps::Traps`] of the run.
    trap_stops: HashMap<u64, u64>,
    /// The threads stay seized to see an exec, after which the agent is
    /// loaded into the new image and the probes armed there
    /// (`watch_libraries`: some probes' modules are not mapped yet).
    follow_exec: bool,
    /// The process executed a new program and waits, stopped, for the
    /// handlers (`update_handlers` loads them into the new image). Not a
    /// `Phase`: the phase before the exec (`Suspended`, or `Execed` when
    /// `check_exec` saw the exec first) stays through it.
    reload: bool,
    /// The global variables of the agent of the image before the exec.
    carried_gvars: Vec<u64>,
    /// `-f`: fork children are followed (`forks`); the threads stay seized.
    follow_forks: bool,
    /// The region this process's agent is to join, and the path the
    /// process opens it at (a followed fork child that executed a program:
    /// `joined`).
    join: Option<(agent_loader::region::Region, String)>,
    /// Followed fork children that executed a program, being armed
    /// (`joined`), by pid.
    execs: HashMap<i32, Box<InProc>>,
    /// The parent of the child this transport arms (`joined`).
    joined_parent: i32,
    /// Followed children that ended, reported in their place among the
    /// runs (pid, status, wall-clock ns when the end was seen).
    exits_due: Vec<(i32, ExitStatus, u64)>,
    /// Followed fork children's transports of their own, for the
    /// libraries they map later (`forklibs`), by pid.
    child_arms: HashMap<i32, forklibs::ChildArm>,
    /// The child whose library event the session is arming.
    child_event: Option<i32>,
}

/// Where the run stands ([`Transport::run`](crate::transport::Transport::run)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    /// Not run yet: the probes are being armed (a launched command dropped
    /// now, before the commit, is killed).
    Arming,
    /// The event loop goes on.
    Running,
    /// Runs are handed on (`drain_runs`): the agent is taken out meanwhile,
    /// and the probes removed then are disabled once it is back. The run
    /// returns to where it stood before.
    Draining,
    /// The event loop returned.
    Finished,
}

/// Where the probes' image stands. An exec the transport follows
/// (`reload`, see `on_exec`) leaves the phase as it was: a new image armed
/// meanwhile keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The probes' jumps are written, or are to be (before the commit):
    /// `suspend` restores the bytes.
    Armed,
    /// `suspend` restored the bytes; `resume` writes the jumps again.
    Suspended,
    /// The process executed a new program (see `check_exec`): the sites
    /// went with the old image, there is nothing to suspend or resume.
    /// Final.
    Execed,
}

impl Phase {
    /// Whether the process executed a new program that took the sites.
    fn execed(self) -> bool {
        self == Phase::Execed
    }
}

/// Whether the process ended. Once `Ended`, it stays so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    /// Still there, as far as the transport saw.
    Alive,
    /// The process ended (exited or was killed), with its status when it
    /// is known (a launched command's).
    Ended(Option<ExitStatus>),
}

impl Life {
    /// Whether the process ended (exited or was killed).
    fn ended(self) -> bool {
        matches!(self, Life::Ended(_))
    }

    /// The process's exit status, when it ended and it is known.
    fn status(self) -> Option<ExitStatus> {
        match self {
            Life::Ended(status) => status,
            Life::Alive => None,
        }
    }
}

/// Why the eligibility rules refuse a jump at link-time address `link` of
/// the module file `path` (`None`: a jump can go there). The rules that do
/// not depend on the process (function bounds, branch targets into the
/// window, instructions that cannot be relocated); a run may refuse more
/// (code changed in memory, a thread inside the window, no stub area in
/// reach). For `wprobe list`-like reports and tests.
pub fn refusal(path: &std::path::Path, link: u64) -> Result<Option<String>, Error> {
    let module = code::ModuleCode::read(path)?;
    let Some(func) = module.function(link, 0) else {
        return Ok(Some(agent_loader::window::Refusal::NoFunction.to_string()));
    };
    Ok(agent_loader::window::plan(link, func, &module.targets)
        .err()
        .map(|r| r.to_string()))
}
