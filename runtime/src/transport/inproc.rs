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
pub mod journal;
mod later;
mod launch;
mod patch;
pub mod repair;
mod traps;
pub use traps::TRAP_INSN;
mod world;

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent_abi::{rec, run_outcome};
use agent_loader::region::{ProbeCounts, RunView};
use agent_loader::{LoadedAgent, ModuleSpec, ProbeSpec, RegionLayout, RunFacts, SiteSpec};
use hostabi::Outcome;

use self::patch::Patcher;
use self::world::World;
use crate::addr::RunAddr;
use crate::procmaps::Mapping;
use crate::sink::{RecordKind, Sink};
use crate::transport::{
    Action, Armed, Capabilities, Event, ExitStatus, HandlerSet, Insert, NoHit, OpenOptions, Report,
    RunCounts, Target, TargetOutcome, TargetRun, Transport, TransportHit, TransportInfo,
};

/// The in-process transport in the registry.
pub static INFO: TransportInfo = TransportInfo {
    name: "inproc",
    about: "runs the handlers inside the target, where a jump replaces each probe's first \
            instructions (no trap per hit); handlers may write registers and memory",
    caps: Capabilities {
        writes: true,
        synchronous: true,
        watchpoints: true,
        follows_forks: false,
        debugger_handoff: false,
        core_dump: false,
        later_libraries: true,
        follows_exec: true,
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
    open,
};

/// Bytes of the record ring (`WPROBE_INPROC_RING_BYTES` overrides it: tests
/// and measurements of drops).
const RING_BYTES: u64 = 4 << 20;

/// From this many ptrace stops at trap sites in a run, their cost is said
/// at its end (`InProc::say_trap_stops`).
const TRAP_STOPS_SAID: u64 = 1000;

/// Trap-site fallbacks said a line each up to this many; beyond, one line.
const FALLBACKS_LISTED: usize = 8;

/// Functions that line names at most (a Rust program had 6,000).
const FALLBACKS_NAMED: usize = 30;
/// After this long without a beat, the agent's probes go dormant.
const STALE_AFTER: Duration = Duration::from_secs(2);
/// How often the heartbeat thread beats.
const BEAT_EVERY: Duration = Duration::from_millis(100);
/// How often the counters are reported while running.
const COUNTS_EVERY: Duration = Duration::from_millis(100);
/// Pending bytes below which a busy event loop naps for [`RING_NAP`]
/// before the next drain (the ring holds `RING_BYTES`: far from full).
const RING_NAP_BELOW: u64 = 256 << 10;
/// The nap of a busy event loop with little pending.
const RING_NAP: Duration = Duration::from_micros(100);
/// How soon after runs the counters are reported (while runs keep coming,
/// the ring is drained without sleeping).
const COUNTS_AFTER_RUNS: Duration = Duration::from_millis(1);
/// Longest sleep of the event loop when nothing happens.
const IDLE_SLEEP_MS: i32 = 10;
/// For this long after a thread stopped at a trap site, the event loop
/// looks for the next stop every [`TRAP_NAP`]: a thread at a trap waits
/// for wprobe, and the millisecond of an idle poll would be most of what a
/// hit costs (a stop itself is some 40 µs).
const TRAP_BUSY: Duration = Duration::from_millis(100);
/// The nap between looks while traps are busy.
const TRAP_NAP: Duration = Duration::from_micros(10);

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
    /// `maxactive` of each return probe (by tag).
    maxactive: HashMap<usize, u32>,
    /// The return probes whose calls are reported as they enter.
    entry_notices: Vec<usize>,
    /// While runs are handed on (`drain_runs`, the agent taken out), and
    /// the probes removed meanwhile.
    draining: bool,
    removed: Vec<usize>,
    agent: Option<LoadedAgent>,
    /// Map region of each program: (offset, length) in the shared region.
    program_maps: Vec<(u64, u64)>,
    /// The counters last reported, by tag.
    reported: Vec<ProbeCounts>,
    sink: Sink,
    items: Vec<u32>,
    tick: Option<(Duration, Instant)>,
    exit: Option<ExitStatus>,
    pidfd: Option<OwnedFd>,
    heartbeat: Option<agent_loader::region::Heartbeat>,
    code_left_alone: Vec<(i32, u64, u8)>,
    detach_time: Duration,
    /// `(TSC, ns)` at open, to measure the TSC's rate for the heartbeat.
    tsc0: (u64, u64),
    handlers_paused: bool,
    finished: bool,
    /// The process executed a new program (see `check_exec`).
    execed: bool,
    /// `suspend` restored the bytes; `resume` writes the jumps again.
    suspended: bool,
    /// The process ended (exited or was killed).
    ended: bool,
    /// The agent's heap allocations once armed (`WPROBE_DEBUG` reports the
    /// ones made while running: none per hit).
    allocations_armed: u64,
    /// The seized threads while some site traps instead of jumping.
    traps: Option<traps::Traps>,
    /// The watchpoints (in the debug registers while the threads are seized).
    watches: traps::Watches,
    /// Restores the traps' bytes if wprobe dies.
    watchdog: Option<crate::transport::ptrace::watchdog::Watchdog>,
    /// What a run that finds the ring full does.
    ring_full: crate::transport::RingFull,
    /// Sites before this index are in the agent's table.
    sites_sent: usize,
    /// Sites of libraries unmapped since, to send the agent again with
    /// no probes.
    sites_dropped: Vec<usize>,
    /// The probes enabled in the agent.
    enabled: std::collections::HashSet<usize>,
    /// Probes armed after the handlers were loaded, whose module's bias
    /// the agent has not been told (from `update_handlers`).
    later_biases: Vec<(u32, u64)>,
    /// Probes whose sites went with an unmapped library (`take_unmapped`).
    unmapped: Vec<Armed>,
    /// The dynamic linker's hooks, when libraries mapped later are armed
    /// (`watch_libraries`): its `r_brk` has a trap site.
    rdebug: Option<crate::transport::ptrace::rdebug::RDebug>,
    /// Library events handled (`WPROBE_DEBUG` says how many).
    library_events: u64,
    /// The threads were taken by [`traps::Traps`] once.
    taken: bool,
    /// The fallback notes said so far.
    said: std::collections::HashSet<String>,
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
    /// handlers (`update_handlers` loads them into the new image).
    reload: bool,
    /// The global variables of the agent of the image before the exec.
    carried_gvars: Vec<u64>,
}

fn open(target: Target<'_>, o: &OpenOptions) -> Result<Box<dyn Transport>, String> {
    // The patch journal's directory, before anything is launched or
    // stopped: a command is never started only to be let go untraced.
    let dir = crate::transport::ptrace::journal::dir();
    crate::privdir::ensure_dir(&dir)
        .map_err(|problem| format!("journal directory {}: {problem}", dir.display()))?;
    let tsc0 = agent_loader::region::tsc_now();
    let (pid, launched, world) = match target {
        Target::System => {
            return Err(format!(
                "--transport inproc: {}",
                crate::transport::NOT_SYSTEM_WIDE
            ));
        }
        Target::Launch(argv) => {
            let pid = launch::launch(argv).map_err(|e| format!("{e:#}"))?;
            // `WPROBE_FAIL_OPEN=inproc` (debug builds, tests): fail here, the
            // command launched but none of its code run, as a failure to
            // start would.
            if cfg!(debug_assertions)
                && std::env::var("WPROBE_FAIL_OPEN").is_ok_and(|v| v == INFO.name)
            {
                crate::sys::process::kill_and_reap(pid);
                return Err(format!(
                    "process {pid}: failing as WPROBE_FAIL_OPEN asks (a test)"
                ));
            }
            match World::launched(pid) {
                Ok(w) => (pid, true, w),
                Err(e) => {
                    crate::sys::process::kill_and_reap(pid);
                    return Err(format!("{e:#}"));
                }
            }
        }
        Target::Attach(pid) => {
            if pid <= 0 || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(format!("no such process: {pid}"));
            }
            crate::transport::ptrace::journal::held_by_another_run(pid)?;
            (pid, false, World::stop(pid).map_err(|e| format!("{e:#}"))?)
        }
    };
    let mut t = InProc {
        pid,
        launched,
        world: None,
        maps: crate::procmaps::read(pid).unwrap_or_default(),
        patcher: Patcher::default(),
        armed: HashMap::new(),
        draining: false,
        removed: Vec::new(),
        maxactive: HashMap::new(),
        entry_notices: Vec::new(),
        agent: None,
        program_maps: Vec::new(),
        reported: Vec::new(),
        sink: Sink::default(),
        items: Vec::new(),
        tick: None,
        exit: None,
        pidfd: None,
        heartbeat: None,
        code_left_alone: Vec::new(),
        detach_time: Duration::ZERO,
        tsc0,
        handlers_paused: false,
        finished: false,
        execed: false,
        suspended: false,
        ended: false,
        allocations_armed: 0,
        traps: None,
        watches: traps::Watches::default(),
        watchdog: None,
        ring_full: o.ring_full,
        sites_sent: 0,
        sites_dropped: Vec::new(),
        enabled: std::collections::HashSet::new(),
        later_biases: Vec::new(),
        unmapped: Vec::new(),
        rdebug: None,
        library_events: 0,
        taken: false,
        said: std::collections::HashSet::new(),
        children: traps::Children::default(),
        trap_stops: HashMap::new(),
        follow_exec: false,
        reload: false,
        carried_gvars: Vec::new(),
    };
    t.patcher.thread_pcs = world
        .tids()
        .into_iter()
        .filter_map(|tid| world.regs(tid).map(|r| (tid, r.rip)))
        .collect();
    t.world = Some(world);
    Ok(Box::new(t))
}

/// The artifact of `wasm` for the agent's engine: from the compiled-module
/// cache (keyed by the engine's configuration, so never an artifact of the
/// runtime's own engine), or compiled and stored there.
fn compile_for_agent(
    cache: &crate::cache::Cache,
    engine: &wasmtime::Engine,
    wasm: &[u8],
) -> anyhow::Result<Vec<u8>> {
    let (module, _) = cache.get_or_compile(engine, wasm)?;
    Ok(module.serialize()?)
}

/// The phases of loading the handlers into the target, timed for
/// `WPROBE_DEBUG` (where arming time goes).
struct Phases {
    on: bool,
    last: Instant,
    done: Vec<(&'static str, Duration)>,
}

impl Phases {
    fn start() -> Phases {
        Phases {
            on: std::env::var_os("WPROBE_DEBUG").is_some(),
            last: Instant::now(),
            done: Vec::new(),
        }
    }

    fn mark(&mut self, what: &'static str) {
        if self.on {
            let now = Instant::now();
            self.done.push((what, now - self.last));
            self.last = now;
        }
    }

    fn report(&self, pid: i32) {
        if self.on {
            let parts: Vec<String> = self
                .done
                .iter()
                .map(|(w, d)| format!("{w} {:.3} ms", d.as_secs_f64() * 1e3))
                .collect();
            crate::elog!("wprobe: debug: process {pid}: {}", parts.join(", "));
        }
    }
}

/// Why the eligibility rules refuse a jump at link-time address `link` of
/// the module file `path` (`None`: a jump can go there). The rules that do
/// not depend on the process (function bounds, branch targets into the
/// window, instructions that cannot be relocated); a run may refuse more
/// (code changed in memory, a thread inside the window, no stub area in
/// reach). For `wprobe list`-like reports and tests.
pub fn refusal(path: &std::path::Path, link: u64) -> Result<Option<String>, String> {
    let module = code::ModuleCode::read(path)?;
    let Some(func) = module.function(link, 0) else {
        return Ok(Some(agent_loader::window::Refusal::NoFunction.to_string()));
    };
    Ok(agent_loader::window::plan(link, func, &module.targets)
        .err()
        .map(|r| r.to_string()))
}

/// The ring size asked for by `WPROBE_INPROC_RING_BYTES` (a power of two
/// of at least a page), or the default.
fn ring_bytes() -> u64 {
    std::env::var("WPROBE_INPROC_RING_BYTES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| n.is_power_of_two() && *n >= 4096)
        .unwrap_or(RING_BYTES)
}

impl InProc {
    /// Loads the agent and the programs, writes the stubs and the jumps,
    /// and lets the target go (the commit of everything inserted).
    fn commit(&mut self, set: &HandlerSet<'_>) -> Result<(), String> {
        // Where arming fell back to traps, said once for every probe armed
        // at start (later insertions say theirs as they come).
        self.say_fallbacks();
        let Some(world) = self.world.as_mut() else {
            return Err("the target is not stopped".into());
        };
        // Programs precompiled for the agent's engine.
        let mut phases = Phases::start();
        let engine = agent_loader::compile::agent_engine().map_err(|e| format!("{e:#}"))?;
        let cache = if set.use_cache {
            crate::cache::Cache::from_env().unwrap_or_else(|_| crate::cache::Cache::disabled())
        } else {
            crate::cache::Cache::disabled()
        };
        // `WPROBE_INPROC_FOREIGN_ARTIFACT` (tests): hand the agent what
        // wprobe's own engine compiles, which the agent must refuse.
        let engine = match std::env::var_os("WPROBE_INPROC_FOREIGN_ARTIFACT") {
            Some(_) => crate::engine::new_engine().map_err(|e| format!("{e:#}"))?,
            None => engine,
        };
        let mut cwasm = Vec::with_capacity(set.programs.len());
        for p in &set.programs {
            cwasm.push(
                compile_for_agent(&cache, &engine, p.wasm)
                    .map_err(|e| format!("compiling `{}` for the target: {e:#}", p.label))?,
            );
        }
        // The region: probes, variables, maps, ring, scratch.
        let mut maps_size = 0u64;
        self.program_maps = set
            .programs
            .iter()
            .map(|p| match p.maps {
                Some(m) => {
                    let at = maps_size;
                    maps_size += (m.len() as u64).next_multiple_of(64);
                    (at, m.len() as u64)
                }
                None => (0, 0),
            })
            .collect();
        let probes_cap = set.probes.iter().map(|p| p.tag + 1).max().unwrap_or(1) as u64;
        let names: u64 = set.probes.iter().map(|p| p.export.len() as u64 + 32).sum();
        let layout = RegionLayout {
            probes_cap,
            gvars_cap: set
                .programs
                .iter()
                .map(|p| u64::from(p.gvars))
                .max()
                .unwrap_or(0)
                .max(1),
            maps_size,
            ring_size: ring_bytes(),
            scratch_size: cwasm.iter().map(|c| c.len() as u64).max().unwrap_or(0)
                + names
                + 128 * self.patcher.sites.len() as u64
                + 32 * set.probes.len() as u64
                + (64 << 10),
        };
        let facts = RunFacts {
            start_mono_ns: set.start_mono_ns,
            mono_offset_ns: set.mono_offset_ns,
            child_pid: set.child_pid,
        };
        phases.mark("compiled for the agent");
        let image = agent_loader::agent_image().map_err(|e| format!("the agent: {e:#}"))?;
        let runner = world.runner().map_err(|e| format!("{e:#}"))?;
        let mut agent = {
            let mut t = world.target(runner);
            agent_loader::load_agent(&mut t, &image, layout, facts)
                .map_err(|e| format!("loading the agent into process {}: {e:#}", self.pid))?
        };
        let maps_off = agent.region.layout().maps_off();
        for (i, p) in set.programs.iter().enumerate() {
            if let Some(m) = p.maps {
                let at = maps_off + self.program_maps[i].0;
                self.program_maps[i].0 = at;
                agent.region.write_maps(at, m);
            }
        }
        for p in &set.probes {
            agent
                .region
                .set_probe_limits(p.tag as u32, p.ignore, p.maxhits);
        }
        agent
            .region
            .set_gvars(&std::mem::take(&mut self.carried_gvars));
        for (&tag, &max) in &self.maxactive {
            agent.region.set_probe_maxactive(tag as u32, u64::from(max));
        }
        for &tag in &self.entry_notices {
            agent.region.set_probe_entry_notice(tag as u32, true);
        }
        for (i, p) in set.programs.iter().enumerate() {
            // Every probe of the program, armed or not: one whose module is
            // mapped later is armed then (its bias told the agent then).
            let probes: Vec<ProbeSpec<'_>> = set
                .probes
                .iter()
                .filter(|q| q.program == i)
                .map(|q| ProbeSpec {
                    probe: q.tag as u32,
                    export: q.export,
                    load_bias: q.load_bias,
                    args: q.args,
                    usdt_args: q.usdt_args,
                })
                .collect();
            let spec = ModuleSpec {
                cwasm: &cwasm[i],
                probes: &probes,
                gvars: p.gvars,
                fuel: p.fuel,
                map: if p.maps.is_some() {
                    self.program_maps[i]
                } else {
                    (0, 0)
                },
                writes_allowed: p.writes,
            };
            let mut t = world.target(runner);
            agent
                .load_module(&mut t, &spec)
                .map_err(|e| format!("loading `{}` into process {}: {e:#}", p.label, self.pid))?;
        }
        phases.mark("agent and modules loaded");
        let sites = Self::site_specs(&self.patcher, 0..self.patcher.sites.len());
        {
            let mut t = world.target(runner);
            agent
                .set_sites(&mut t, &sites, &[])
                .map_err(|e| format!("{e:#}"))?;
        }
        self.sites_sent = sites.len();
        for &tag in self.armed.keys() {
            agent.region.set_probe_enabled(tag as u32, true);
            self.enabled.insert(tag);
        }
        agent.region.free_scratch();
        let tsc1 = agent_loader::region::tsc_now();
        let hz = agent_loader::region::tsc_hz(self.tsc0, tsc1).unwrap_or(0.0);
        if hz > 0.0 {
            agent
                .region
                .set_stale_ticks((hz * STALE_AFTER.as_secs_f64()) as u64);
        }
        agent
            .region
            .set_drop_when_full(self.ring_full == crate::transport::RingFull::Drop);
        agent.region.beat();
        self.heartbeat = agent.region.start_heartbeat(BEAT_EVERY).ok();
        agent.region.set_enabled(true);
        self.reported = vec![ProbeCounts::default(); probes_cap as usize];
        let dispatch = agent.dispatch;
        self.agent = Some(agent);
        phases.mark("sites registered");
        if cfg!(debug_assertions) && std::env::var_os("WPROBE_INJECTION_PAUSE").is_some() {
            crate::elog!("wprobe: debug: {} injections", world.injections());
        }
        self.patcher.install(world, dispatch)?;
        phases.mark("stubs and jumps written");
        phases.report(self.pid);
        if let Some(a) = &self.agent {
            self.allocations_armed = a.region.stats().allocations;
        }
        // Let the target go (seized, when some site traps).
        if let Some(w) = self.world.take() {
            self.go(w)?;
        }
        self.pidfd = crate::sys::process::pidfd_open(self.pid);
        Ok(())
    }

    /// Lets the stopped target go; with trap sites, its threads stay
    /// seized (`traps`): the watchdog is started and the `int3`s written
    /// first.
    fn go(&mut self, mut w: World) -> Result<(), String> {
        if !self.patcher.has_traps() && !self.watches.any() && !self.follow_exec {
            w.release();
            return Ok(());
        }
        // Traps need the watchdog (their `int3`s would kill the process
        // after wprobe's death); watchpoints alone do not (their perf
        // events die with wprobe). Started once (the threads are taken
        // again after each library event).
        if self.patcher.has_traps() && self.watchdog.is_none() {
            match crate::transport::ptrace::watchdog::spawn(self.pid) {
                Ok(d) => self.watchdog = Some(d),
                Err(e) => {
                    w.release();
                    return Err(format!(
                        "the watchdog that restores the traps if wprobe dies did not start: {e}"
                    ));
                }
            }
        }
        let (redirect, orig) = self.patcher.trap_maps();
        // A launched command (a `PTRACE_TRACEME` tracee) is let go and
        // seized anew the first time; later worlds are of seized threads.
        let launched = self.launched && !self.taken;
        self.taken = true;
        let library = self.rdebug.map(|r| r.brk);
        let children = std::mem::take(&mut self.children);
        let mut t =
            traps::Traps::take(w, launched, redirect, orig, self.watches, library, children)
                .map_err(|e| format!("{e:#}"))?;
        t.follow_exec = self.follow_exec;
        let armed = self.patcher.arm_traps(self.pid);
        t.go();
        self.traps = Some(t);
        armed
    }

    /// The agent's view of the sites `range`.
    fn site_specs(patcher: &Patcher, range: std::ops::Range<usize>) -> Vec<SiteSpec> {
        patcher.sites[range.clone()]
            .iter()
            .zip(range)
            .map(|(s, i)| SiteSpec {
                site: i as u32,
                addr: s.site.probe,
                probes: s.tags.iter().map(|&t| t as u32).collect(),
                kind: s.kind,
                ret_probes: s.ret_tags.iter().map(|&t| t as u32).collect(),
                window: s.window(),
                trap: s.trap.is_some(),
                stub: s.stub,
                cave: s.cave.as_ref().map(|c| (c.addr, c.orig.clone())),
            })
            .collect()
    }

    /// Prints where planning fell back to a trap, and why: a line per
    /// site, or beyond [`FALLBACKS_LISTED`] sites one line naming their
    /// functions (`WPROBE_DEBUG` lists every site).
    fn say_fallbacks(&mut self) {
        let near = std::mem::take(&mut self.patcher.near_notes);
        if crate::transport::VERBOSE.load(std::sync::atomic::Ordering::Relaxed)
            || std::env::var_os("WPROBE_DEBUG").is_some()
        {
            for n in near {
                if self.said.insert(n.clone()) {
                    crate::elog!("wprobe: process {}: {n}", self.pid);
                }
            }
        }
        let mut notes = std::mem::take(&mut self.patcher.notes);
        // A library opened again gets its sites again: said once.
        notes.retain(|(_, n)| self.said.insert(n.clone()));
        if notes.len() <= FALLBACKS_LISTED || std::env::var_os("WPROBE_DEBUG").is_some() {
            for (_, n) in notes {
                crate::elog!("wprobe: process {}: {n}", self.pid);
            }
            return;
        }
        let mut funcs: Vec<&str> = Vec::new();
        for (f, _) in &notes {
            if !funcs.contains(&f.as_str()) {
                funcs.push(f);
            }
        }
        let named = funcs.len().min(FALLBACKS_NAMED);
        let more = match funcs.len() - named {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        crate::elog!(
            "wprobe: process {}: no jump can go at {} sites (a function too short for one, or \
             code branching into the bytes it would replace): a trap (`hlt`) at each instead, \
             a ptrace stop per hit; in {} functions: {}{more} (WPROBE_DEBUG=1 lists each site and \
             why)",
            self.pid,
            notes.len(),
            funcs.len(),
            funcs[..named].join(", ")
        );
    }

    /// Adds the stops the current [`traps::Traps`] counted to the run's.
    fn keep_trap_stops(&mut self) {
        if let Some(t) = self.traps.as_mut() {
            for (at, n) in t.take_stops() {
                *self.trap_stops.entry(at).or_default() += n;
            }
        }
    }

    /// Says what the trap sites cost: with [`TRAP_STOPS_SAID`] stops or
    /// more, a warning naming the busiest sites' functions (a stop is tens
    /// of microseconds, against tens of nanoseconds for a jump);
    /// `WPROBE_DEBUG` lists the ten busiest whatever their count.
    fn say_trap_stops(&self) {
        let total: u64 = self.trap_stops.values().sum();
        let debug = std::env::var_os("WPROBE_DEBUG").is_some();
        if total == 0 || (total < TRAP_STOPS_SAID && !debug) {
            return;
        }
        let mut v: Vec<(u64, u64)> = self.trap_stops.iter().map(|(&a, &c)| (a, c)).collect();
        v.sort_by_key(|&(a, c)| (std::cmp::Reverse(c), a));
        let named = |&(a, c): &(u64, u64)| match self.patcher.trap_funcs.get(&a) {
            Some(f) if !f.is_empty() => format!("{f} at {a:#x} ({c})"),
            _ => format!("{a:#x} ({c})"),
        };
        if debug {
            let top: Vec<String> = v.iter().take(10).map(named).collect();
            crate::elog!(
                "wprobe: debug: process {}: {total} ptrace stops at trap sites; the busiest: {}",
                self.pid,
                top.join(", ")
            );
        }
        if total >= TRAP_STOPS_SAID {
            let top: Vec<String> = v.iter().take(3).map(named).collect();
            crate::elog!(
                "wprobe: warning: process {}: {total} ptrace stops at {} trap sites (no jump fits \
                 there: a stop per hit, tens of microseconds each); the busiest: {}",
                self.pid,
                v.len(),
                top.join(", ")
            );
        }
    }

    /// Stops every thread of the target: through the seized threads when
    /// some site traps, else by seizing them.
    fn stop_world(&mut self) -> anyhow::Result<World> {
        self.keep_trap_stops();
        match self.traps.take() {
            Some(t) if t.active() => {
                let (w, children) = t.stop_all()?;
                self.children = children;
                Ok(w)
            }
            _ => World::stop(self.pid),
        }
    }

    /// Whether the process exited (its pidfd is readable), without reaping.
    fn exited(&self) -> bool {
        let Some(fd) = self.pidfd.as_ref() else {
            return false;
        };
        let mut p = [libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        crate::sys::process::poll(&mut p, 0) != 0
    }

    /// Whether the process ended: its exit status when we launched it.
    fn ended(&mut self) -> Option<Option<ExitStatus>> {
        let fd = self.pidfd.as_ref()?;
        let mut p = [libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if crate::sys::process::poll(&mut p, 0) == 0 {
            return None;
        }
        if !self.launched {
            return Some(None);
        }
        let st = crate::sys::process::reap_nohang(self.pid)?;
        Some(Some(ExitStatus::from_wait(st)))
    }

    /// Notices that the process executed a new program (the agent's region
    /// is no longer mapped in it): says so once, and forgets the sites
    /// (they went with the old image; nothing to restore).
    fn check_exec(&mut self) {
        let Some(a) = &self.agent else { return };
        if self.execed {
            return;
        }
        let mut b = [0u8; 8];
        match crate::sys::mem::vm_read(self.pid, a.region_addr, &mut b) {
            Ok(8) => {}
            Err(nix::errno::Errno::ESRCH) => {}
            // Exited (a zombie has no memory either).
            _ if self.exited() => {}
            _ => {
                self.execed = true;
                self.patcher.forget();
                crate::elog!(
                    "wprobe: process {} executed a new program: its probes went with the old one (--transport ptrace arms them in the new program)",
                    self.pid
                );
            }
        }
    }

    /// Stops handlers from starting (dormant) and waits for those running.
    fn quiesce(&mut self) {
        if let Some(a) = &self.agent {
            a.region.set_enabled(false);
            if a.region.lock_store(Duration::from_secs(1)) {
                a.region.unlock_store();
            }
        }
    }

    /// The counters' increments since the last report, by tag.
    fn count_deltas(&mut self, out: &mut Vec<(usize, RunCounts)>) {
        out.clear();
        let Some(a) = &self.agent else { return };
        for (&tag, _) in self.armed.iter() {
            let now = a.region.probe_counts(tag as u32);
            let Some(last) = self.reported.get_mut(tag) else {
                continue;
            };
            if now != *last {
                out.push((
                    tag,
                    RunCounts {
                        hits: now.hits.saturating_sub(last.hits),
                        ignored: now.ignored.saturating_sub(last.ignored),
                        runs: now.runs.saturating_sub(last.runs),
                        fuel_exhausted: now.fuel_exhausted.saturating_sub(last.fuel_exhausted),
                        traps: now.traps.saturating_sub(last.traps),
                        uncaught: now.uncaught.saturating_sub(last.uncaught),
                        dropped: now.dropped.saturating_sub(last.dropped),
                        missed: now.missed.saturating_sub(last.missed),
                        missed_depth: now.missed_depth.saturating_sub(last.missed_depth),
                    },
                ));
                *last = now;
            }
        }
        out.sort_by_key(|(t, _)| *t);
    }
}

/// Fills `sink` with the records of `run` (item descriptors through
/// `items`); returns the trap message, if the run carries one.
fn fill_sink<'a>(sink: &mut Sink, items: &mut Vec<u32>, run: &'a RunView<'a>) -> Option<&'a [u8]> {
    sink.clear();
    let mut trap = None;
    for r in run.records() {
        let kind = match r.kind {
            rec::LOG => RecordKind::Log,
            rec::STACKTRACE => RecordKind::StackTrace,
            rec::EVENT => RecordKind::Event,
            rec::TRAP => {
                trap = Some(r.data);
                continue;
            }
            _ => continue,
        };
        items.clear();
        items.extend(
            r.items
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        sink.push(kind, r.major, r.minor, r.data, items);
    }
    trap
}

/// The [`Event::Unwound`] of an unwound record of the agent.
fn unwound<'a>(pid: i32, run: &RunView<'_>) -> Option<Event<'a>> {
    let r = run.records().find(|r| r.kind == rec::UNWOUND)?;
    let word = |i: usize| {
        r.data
            .get(8 * i..8 * i + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("invariant: 8 bytes")))
    };
    Some(Event::Unwound {
        tag: run.header.probe as usize,
        pid,
        tid: run.header.tid as i32,
        entry_rsp: word(0)?,
        entry_ns: word(1)?,
        cause: match word(2)? {
            agent_abi::left::THREAD_EXIT => crate::transport::calls::Left::ThreadExit,
            _ => crate::transport::calls::Left::Unwound,
        },
    })
}

fn outcome(code: i32) -> TargetOutcome {
    match code {
        run_outcome::FUEL => TargetOutcome::FuelExhausted,
        run_outcome::TRAPPED => TargetOutcome::Trapped,
        c => Outcome::from_code(c).map_or(TargetOutcome::Trapped, TargetOutcome::Returned),
    }
}

impl Transport for InProc {
    fn info(&self) -> &'static TransportInfo {
        &INFO
    }

    fn main_pid(&self) -> i32 {
        self.pid
    }

    fn maps(&mut self, pid: i32, fresh: bool) -> Result<Vec<Mapping>, String> {
        if pid != self.pid {
            return Err(format!("process {pid} is not traced"));
        }
        if fresh || self.maps.is_empty() {
            self.maps = crate::procmaps::read(pid).map_err(|e| e.to_string())?;
        }
        Ok(self.maps.clone())
    }

    fn insert(
        &mut self,
        tag: usize,
        pid: i32,
        addr: RunAddr,
        what: Insert,
    ) -> Result<Armed, String> {
        let addr = addr.0;
        if pid != self.pid {
            return Err(format!("process {pid} is not traced"));
        }
        let Some(world) = self.world.as_mut() else {
            return Err(
                "--transport inproc arms probes only with the target stopped: at start, or when \
                 the dynamic linker maps a library"
                    .into(),
            );
        };
        match what {
            Insert::Breakpoint { opcode } => {
                let site = self
                    .patcher
                    .plan(world, &self.maps, tag, addr, opcode)
                    .map_err(|e| format!("cannot patch {addr:#x}: {e}"))?;
                self.armed.insert(tag, site);
                if self.agent.is_some() {
                    self.say_fallbacks();
                }
                Ok(Armed(tag as u64))
            }
            Insert::Watchpoint { len, kind } => {
                if kind == crate::arch::WatchKind::Exec {
                    return Err(format!(
                        "an execute watchpoint at {addr:#x}: --transport inproc moves the \
                         thread out and back to the instruction, which would trigger it again; \
                         put a probe at that address instead (the same hit, without a trap)"
                    ));
                }
                crate::arch::check_watchpoint(addr, len, kind).map_err(|reason| {
                    crate::transport::ptrace::ArmError::BadWatchpoint { addr, len, reason }
                        .to_string()
                })?;
                let Some(slot) = self.watches.slots.iter().position(Option::is_none) else {
                    return Err(format!(
                        "all {} debug registers are in use",
                        crate::arch::DEBUG_REGISTERS
                    ));
                };
                let site = self.patcher.plan_watch(world, addr)?;
                self.patcher.sites[site].tags.push(tag);
                self.watches.slots[slot] = Some(traps::Watch {
                    addr,
                    len,
                    kind,
                    stub: self.patcher.sites[site].stub,
                });
                self.armed.insert(tag, site);
                Ok(Armed(tag as u64))
            }
            Insert::Return {
                opcode,
                maxactive,
                entry_notice,
            } => {
                let site = self
                    .patcher
                    .plan_return(world, &self.maps, tag, addr, opcode)
                    .map_err(|e| format!("cannot patch the function at {addr:#x}: {e}"))?;
                self.armed.insert(tag, site);
                self.maxactive.insert(tag, maxactive);
                if entry_notice {
                    self.entry_notices.push(tag);
                }
                if self.agent.is_some() {
                    self.say_fallbacks();
                }
                Ok(Armed(tag as u64))
            }
        }
    }

    fn watch_libraries(&mut self, pid: i32) -> Result<(), String> {
        if pid != self.pid {
            return Err(format!("process {pid} is not traced"));
        }
        if self.rdebug.is_some() {
            return Ok(());
        }
        let Some(world) = self.world.as_mut() else {
            return Err("the target is not stopped".into());
        };
        // A program the process executes may be where they are.
        self.follow_exec = true;
        let Some(rd) = crate::transport::ptrace::rdebug::find(&self.maps) else {
            return Err(format!(
                "process {pid} has no dynamic linker whose library events can be watched (a \
                 static program?)"
            ));
        };
        self.patcher
            .plan_library_event(world, &self.maps, rd.brk)
            .map_err(|e| {
                format!(
                    "the dynamic linker's `_dl_debug_state` at {:#x}: {e}",
                    rd.brk
                )
            })?;
        self.rdebug = Some(rd);
        Ok(())
    }

    fn update_handlers(&mut self, set: &HandlerSet<'_>) -> Result<(), String> {
        if self.reload {
            // The process executed a new program (`on_exec`): a new agent
            // in its image, every probe armed there; the old agent's
            // region (its maps read by the session) goes.
            self.reload = false;
            let old = self.agent.take();
            let r = self.commit(set);
            drop(old);
            if let Err(e) = r {
                // Let the new program go untraced, as it was.
                if let Some(mut w) = self.world.take() {
                    let _ = self.patcher.restore(&w);
                    w.release();
                }
                self.execed = true;
                return Err(format!(
                    "process {} executed a new program, which is not traced: {e}",
                    self.pid
                ));
            }
            return Ok(());
        }
        // The biases of the probes armed since the last commit (those not
        // enabled in the agent yet): told with their sites.
        self.later_biases = set
            .probes
            .iter()
            .filter(|p| self.armed.contains_key(&p.tag) && !self.enabled.contains(&p.tag))
            .map(|p| (p.tag as u32, p.load_bias))
            .collect();
        Ok(())
    }

    fn take_unmapped(&mut self) -> Vec<Armed> {
        std::mem::take(&mut self.unmapped)
    }

    fn site_counts(&self) -> Vec<(usize, &'static str, u32)> {
        let mut by: HashMap<(usize, &'static str), u32> = HashMap::new();
        for s in &self.patcher.sites {
            let how = if s.trap.is_some() {
                "trap"
            } else if s.cave.is_some() {
                "near"
            } else {
                "jump"
            };
            for &tag in s.tags.iter().chain(&s.ret_tags) {
                *by.entry((tag, how)).or_insert(0) += 1;
            }
        }
        let mut out: Vec<(usize, &'static str, u32)> =
            by.into_iter().map(|((t, h), n)| (t, h, n)).collect();
        out.sort_unstable();
        out
    }

    fn remove(&mut self, armed: Armed) {
        let tag = armed.0 as usize;
        match &self.agent {
            Some(a) => a.region.set_probe_enabled(tag as u32, false),
            // Taken out while its runs are handed on (`drain_runs`): done
            // once it is back.
            None if self.draining => self.removed.push(tag),
            // Not loaded yet: the probe is not enabled when it is (`wprobe
            // trace` removes the entry probe of a function whose return
            // probe could not be armed: both or neither).
            None => {
                self.armed.remove(&tag);
            }
        }
    }

    fn suspend(&mut self) -> Result<(), String> {
        let Some(a) = &self.agent else {
            return Err("--transport inproc: nothing is armed yet".into());
        };
        if self.suspended || self.execed {
            return Ok(());
        }
        // Dormant first: a thread already in a stub runs the displaced
        // instructions and goes on; none starts a handler.
        a.region.set_enabled(false);
        let mut w = self.stop_world().map_err(|e| format!("{e:#}"))?;
        let restored = self.patcher.restore(&w);
        w.release();
        let left = restored?;
        self.code_left_alone
            .extend(left.into_iter().map(|(a, b)| (self.pid, a, b)));
        self.suspended = true;
        Ok(())
    }

    fn resume(&mut self) -> Result<(), String> {
        let Some(dispatch) = self.agent.as_ref().map(|a| a.dispatch) else {
            return Err("--transport inproc: nothing is armed yet".into());
        };
        if !self.suspended || self.execed {
            return Ok(());
        }
        // No thread may stand inside a window the jump would replace: stop
        // the process until none does (a thread is there only for the few
        // instructions of a window).
        for _ in 0..100 {
            let mut w = World::stop(self.pid).map_err(|e| format!("{e:#}"))?;
            let inside = w.tids().into_iter().any(|tid| {
                w.regs(tid)
                    .is_some_and(|r| self.patcher.inside_a_window(r.rip))
            });
            if inside {
                w.release();
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let installed = self.patcher.install(&w, dispatch);
            if let Err(e) = installed {
                w.release();
                return Err(e);
            }
            self.go(w)?;
            if let Some(a) = &self.agent {
                a.region.set_enabled(true);
            }
            self.suspended = false;
            return Ok(());
        }
        Err(format!(
            "process {}: a thread stayed inside a probed window; the probes stay dormant",
            self.pid
        ))
    }

    fn set_tick(&mut self, period: Duration) {
        self.tick = Some((period, Instant::now() + period));
    }

    fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> anyhow::Result<Option<ExitStatus>> {
        if self.agent.is_none() {
            anyhow::bail!("--transport inproc: no handlers were loaded");
        }
        let mut deltas = Vec::new();
        let mut last_counts = Instant::now();
        let mut busy = false;
        let mut last_trap: Option<Instant> = None;
        loop {
            let trapped = self.traps.as_mut().map_or(0, |t| t.poll());
            if trapped > 0 {
                last_trap = Some(Instant::now());
            }
            if self.traps.as_ref().is_some_and(|t| t.library_event())
                && let Err(e) = self.on_library_event(on_event)
            {
                crate::elog!("wprobe: {e}");
            }
            if self.traps.as_ref().is_some_and(|t| t.exec_stop.is_some())
                && let Err(e) = self.on_exec(on_event)
            {
                crate::elog!("wprobe: {e}");
            }
            if let Some(t) = &self.traps {
                if t.exit.is_some() {
                    self.exit = t.exit;
                    self.ended = true;
                }
                if t.execed && !self.execed {
                    self.execed = true;
                    self.patcher.forget();
                    self.keep_trap_stops();
                    self.traps = None;
                }
            }
            let drained = self.drain_runs(on_event);
            // Counts follow the runs within a millisecond, not at every
            // drain: a busy ring is drained in small batches.
            let since = last_counts.elapsed();
            if (drained > 0 && since >= COUNTS_AFTER_RUNS) || since >= COUNTS_EVERY {
                self.report_counts(&mut deltas, on_event);
                last_counts = Instant::now();
                self.check_exec();
            }
            if stop.load(Ordering::SeqCst) || self.ended {
                break;
            }
            if let Some(status) = self.ended() {
                self.exit = status;
                self.ended = true;
                break;
            }
            let mut timeout = if self.traps.is_some() {
                // Traps wait for us: look again at once while they come,
                // after a short nap for a while after the last one, then
                // every millisecond.
                if trapped > 0 || drained > 0 {
                    0
                } else if last_trap.is_some_and(|t| t.elapsed() < TRAP_BUSY) {
                    std::thread::sleep(TRAP_NAP);
                    0
                } else {
                    1
                }
            } else if drained > 0 {
                // Runs are coming: drain again soon. A sleep here of a
                // millisecond lets a fast target fill the ring and wait for
                // room; draining at once, entry by entry, makes both sides
                // fight over the ring's lines (the one the target writes
                // next holds the end of the entry just read). A short nap
                // while little is pending lets whole lines accumulate.
                if self.ring_pending() < RING_NAP_BELOW {
                    std::thread::sleep(RING_NAP);
                }
                0
            } else if busy {
                1
            } else {
                IDLE_SLEEP_MS
            };
            busy = drained > 0;
            if let Some((period, due)) = self.tick {
                let now = Instant::now();
                if due <= now {
                    let mut next = due;
                    while next <= now {
                        next += period;
                    }
                    self.tick = Some((period, next));
                    on_event(self, Event::Tick);
                    continue;
                }
                timeout = timeout.min(due.duration_since(now).as_millis() as i32 + 1);
            }
            match &self.pidfd {
                Some(fd) => {
                    let mut p = [libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    }];
                    crate::sys::process::poll(&mut p, timeout);
                }
                None => std::thread::sleep(Duration::from_millis(timeout as u64)),
            }
        }
        self.quiesce();
        self.drain_runs(on_event);
        self.report_counts(&mut deltas, on_event);
        self.keep_trap_stops();
        self.say_trap_stops();
        if std::env::var_os("WPROBE_DEBUG").is_some() && self.rdebug.is_some() {
            crate::elog!(
                "wprobe: debug: process {}: {} library events armed at (the dynamic linker's \
                 `r_brk`)",
                self.pid,
                self.library_events
            );
        }
        if std::env::var_os("WPROBE_DEBUG").is_some()
            && let Some(a) = &self.agent
        {
            let st = a.region.stats();
            crate::elog!(
                "wprobe: debug: agent in process {}: {} threads, {} heap allocations while \
                 running ({} when armed), {} dormant, {} reentered, {} contended, {} lock \
                 waits, {} ring waits, {} bias revoked, {} system calls for handlers' memory \
                 accesses",
                self.pid,
                st.threads,
                st.allocations - self.allocations_armed,
                self.allocations_armed,
                st.dormant,
                st.reentered,
                st.contended,
                st.lock_waits,
                st.ring_waits,
                st.bias_revoked,
                st.memory_syscalls
            );
        }
        self.report_live_calls(on_event);
        if let Some(status) = self.exit {
            let pid = self.pid;
            on_event(self, Event::ProcessExited { pid, status });
        }
        self.finished = true;
        Ok(self.exit)
    }

    fn detach(&mut self) -> anyhow::Result<()> {
        let t0 = Instant::now();
        if let Some(a) = &self.agent {
            a.region.set_enabled(false);
        }
        if self.ended || self.exit.is_some() {
            // The process is gone, and its patched image with it: nothing
            // to restore, and the journal must not outlive it.
            self.patcher.forget();
        }
        if self.patcher.any_patched() {
            if self.world.is_none() {
                match self.stop_world() {
                    Ok(w) => self.world = Some(w),
                    // Died while being stopped (a terminal's Ctrl-C reaches
                    // the launched command too), and reaped then: its
                    // status is the run's, nothing left to restore.
                    Err(e) if let Some(&world::Reaped(raw)) = e.downcast_ref() => {
                        if self.launched {
                            self.exit = Some(ExitStatus::from_wait(raw));
                        }
                        self.ended = true;
                        self.patcher.forget();
                    }
                    // Gone (or dead, not yet reaped): nothing left to
                    // restore.
                    Err(_) if crate::procinfo::ended(self.pid) => {
                        self.patcher.forget();
                    }
                    Err(e) => anyhow::bail!("stopping process {} to restore it: {e:#}", self.pid),
                }
            }
            if let Some(w) = &self.world {
                let left = self.patcher.restore(w).map_err(anyhow::Error::msg)?;
                self.code_left_alone
                    .extend(left.into_iter().map(|(a, b)| (self.pid, a, b)));
            }
        }
        if let Some(mut w) = self.world.take() {
            w.release();
        }
        self.traps = None;
        self.watchdog = None;
        self.heartbeat = None;
        self.detach_time = t0.elapsed();
        Ok(())
    }

    fn kill_launched(&mut self) {
        if self.launched && self.world.is_some() {
            // Killed while still stopped: letting its threads go first would
            // let it run its own code a moment.
            crate::sys::process::kill_and_reap(self.pid);
            self.world = None;
        }
    }

    fn report(&self) -> Report {
        Report {
            exit_status: self.exit,
            detach_signals: Vec::new(),
            handed_off: Vec::new(),
            code_left_alone: self.code_left_alone.clone(),
            detach_time: Duration::ZERO,
        }
    }

    fn new_hit(&self) -> Box<dyn TransportHit> {
        Box::new(NoHit)
    }

    fn runs_handlers(&self) -> bool {
        true
    }

    fn load_handlers(&mut self, set: &HandlerSet<'_>) -> Result<(), String> {
        self.commit(set)
    }

    fn pause_handlers(&mut self) -> bool {
        match &self.agent {
            Some(a) if !self.handlers_paused => {
                self.handlers_paused = a.region.lock_store(Duration::from_secs(1));
                self.handlers_paused
            }
            _ => false,
        }
    }

    fn resume_handlers(&mut self) {
        if self.handlers_paused
            && let Some(a) = &self.agent
        {
            a.region.unlock_store();
            self.handlers_paused = false;
        }
    }

    fn handler_maps(&mut self, program: usize, bytes: &mut [u8], write: bool) -> bool {
        let (Some(a), Some(&(off, len))) = (&self.agent, self.program_maps.get(program)) else {
            return false;
        };
        if len != bytes.len() as u64 || len == 0 {
            return false;
        }
        if write {
            a.region.write_maps(off, bytes)
        } else {
            a.region.read_maps(off, bytes)
        }
    }
}

impl InProc {
    /// Hands every handler run waiting in the ring to the session.
    fn drain_runs(
        &mut self,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> u64 {
        let Some(mut agent) = self.agent.take() else {
            return 0;
        };
        self.draining = true;
        let mut sink = std::mem::take(&mut self.sink);
        let mut items = std::mem::take(&mut self.items);
        let pid = self.pid;
        let d = agent.region.drain(|run| {
            let h = run.header;
            if let Some(rsp) = run.entered_rsp() {
                on_event(
                    self,
                    Event::Entered {
                        tag: h.probe as usize,
                        pid,
                        tid: h.tid as i32,
                        rsp,
                        time_ns: h.time_ns,
                        ip: h.ip,
                    },
                );
                return;
            }
            if let Some([rax, entry_rsp, elapsed_ns]) = run.returned() {
                on_event(
                    self,
                    Event::Returned {
                        tag: h.probe as usize,
                        pid,
                        tid: h.tid as i32,
                        time_ns: h.time_ns,
                        ip: h.ip,
                        rax,
                        entry_rsp,
                        elapsed_ns,
                    },
                );
                return;
            }
            if h.outcome == run_outcome::UNWOUND {
                if let Some(ev) = unwound(pid, run) {
                    on_event(self, ev);
                }
                return;
            }
            let trap = fill_sink(&mut sink, &mut items, run);
            let trap = trap.map(String::from_utf8_lossy);
            let h = run.header;
            let r = TargetRun {
                pid,
                tid: h.tid as i32,
                cpu: h.cpu,
                time_ns: h.time_ns,
                ip: h.ip,
                outcome: outcome(h.outcome),
                trap: trap.as_deref(),
                records: &sink,
            };
            on_event(
                self,
                Event::Ran {
                    tag: h.probe as usize,
                    run: &r,
                },
            );
        });
        self.draining = false;
        for tag in self.removed.drain(..) {
            agent.region.set_probe_enabled(tag as u32, false);
        }
        self.agent = Some(agent);
        self.sink = sink;
        self.items = items;
        d.runs
    }

    /// Bytes waiting in the ring (0 without an agent).
    fn ring_pending(&self) -> u64 {
        self.agent.as_ref().map_or(0, |a| a.region.pending())
    }

    /// At the end of the run: the calls of return probes still tracked
    /// (their process ended, exec'd, or is let go before they returned)
    /// ran no handler ([`Event::LeftRunning`]).
    fn report_live_calls(
        &mut self,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) {
        let Some(a) = &self.agent else { return };
        let mut live: Vec<(usize, u64)> = self
            .maxactive
            .keys()
            .filter(|&&tag| a.region.probe_enabled(tag as u32))
            .map(|&tag| (tag, a.region.probe_live(tag as u32)))
            .filter(|&(_, n)| n > 0)
            .collect();
        live.sort_unstable();
        for (tag, count) in live {
            on_event(self, Event::LeftRunning { tag, count });
        }
    }

    /// Reports the counters that changed since the last report.
    fn report_counts(
        &mut self,
        deltas: &mut Vec<(usize, RunCounts)>,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) {
        self.count_deltas(deltas);
        for &(tag, counts) in deltas.iter() {
            on_event(self, Event::Counted { tag, counts });
        }
    }
}

impl Drop for InProc {
    fn drop(&mut self) {
        if !self.finished && self.launched && self.agent.is_none() && self.world.is_some() {
            // Never ran: the launch was abandoned before the commit.
            self.kill_launched();
            return;
        }
        let _ = self.detach();
    }
}
