//! A run's session: the probes of the loaded programs, armed through a
//! transport ([`crate::transport`]) in the processes it traces, a handler
//! run at every hit, and the records, statistics and summary. One run loop
//! for every transport: a transport reports hits and process events; the
//! session resolves and arms (`arm`), counts and applies
//! `ignore`/`maxhits`/`remove` (the rules of `agent_abi::policy`, which
//! the in-process agent applies too), runs the handler, writes its records
//! (`records`), and asks the transport for what a handler's outcome needs
//! (`exit 1`, `exit 3`) when the transport can do it, counting it once
//! otherwise. Per hit: no allocation once buffers are warm, no `/proc`
//! reads, no symbol lookups (addresses and biases are resolved when a
//! process or library appears).

mod arm;
mod capture;
pub mod hook;
mod in_target;
mod metrics;
mod oneliner;
mod records;
mod stats;
mod usdt;

use rustc_hash::FxHashMap as HashMap;
use std::io::Write;
use std::sync::atomic::AtomicBool;

use agent_abi::policy;
use hostabi::Outcome;
use hostabi::env::HitEnv;
use hostabi::manifest::{Manifest, ProbeKind, Trigger};

pub use self::stats::ProbeStats;
use crate::out::format::Format;
use crate::probe::addr::{LinkAddr, RunAddr};
pub use crate::probe::programs::LoadedProgram;
use crate::probe::resolve::Resolver;
pub use crate::transport::RunEnv;
use crate::transport::{Action, Armed, Event, ExitStatus, Transport, TransportHit, TransportInfo};
use crate::wasm::regscan::RegsRead;
use crate::wasm::runner::{RunOutcome, Runner};
use hook::HookEvent;
use oneliner::{BtState, Special};

/// Live calls per process a return probe of a program that tracks every
/// call ([`Session::track_every_call`]) may have: no limit of its own
/// (every transport tracks at most `agent_abi::MAX_TRACKED_CALLS` per
/// thread, and counts the calls beyond as missed, `missed_depth`).
pub const EVERY_CALL: u32 = u32::MAX;

/// `-v` says how each probe's sites were armed, a line per probe, up to
/// this many probes (`wprobe trace` arms thousands: one line of totals).
const SITES_LISTED: usize = 20;

/// Run options.
pub struct RunOptions {
    /// `-f`.
    pub follow_forks: bool,
    /// Verify `opcode =` before arming (spec §6.2).
    pub verify_opcodes: bool,
    /// `--group` filters (empty: no filter).
    pub groups: Vec<String>,
    /// `--type` filters.
    pub types: Vec<String>,
    /// `--fuel`.
    pub fuel: Option<u64>,
    /// Output format.
    pub format: Format,
    /// How text records are written (`-t`, `--radix`).
    pub text: crate::out::format::TextStyle,
}

impl RunOptions {
    /// The run options of the fake-transport tests: text records, no
    /// filter, no opcode check (the fake module files hold no code), `-f`
    /// as `follow_forks` says.
    #[cfg(test)]
    pub(crate) fn for_tests(follow_forks: bool) -> RunOptions {
        RunOptions {
            follow_forks,
            verify_opcodes: false,
            groups: Vec::new(),
            types: Vec::new(),
            fuel: None,
            format: Format::Text,
            text: Default::default(),
        }
    }
}

struct ProbeState {
    prog: usize,
    index: usize,
    label: String,
    enabled: bool,
    /// Where it is armed: (pid, the transport's handle).
    armed: Vec<(i32, Armed)>,
    /// Armed in some process at some time.
    ever_armed: bool,
    stats: ProbeStats,
    /// Breakpoints: the probe's link-time address; a hit's address minus
    /// it is the module's load bias in whichever process hit it.
    link: Option<LinkAddr>,
}

/// The running session.
pub struct Session {
    runner: Runner<RunEnv>,
    manifests: Vec<std::sync::Arc<Manifest>>,
    /// In (program, manifest index) order, as built.
    probes: Vec<ProbeState>,
    /// Load bias of each program's module, by (program, pid).
    bias: HashMap<(usize, i32), u64>,
    /// First bias seen per program: used for processes a transport reports
    /// hits of without arming there (fork children sharing the layout).
    bias_default: HashMap<usize, u64>,
    /// Programs importing a writing function: (label, import).
    writers: Vec<(String, String)>,
    /// Each program's label, Wasm bytes and whether it imports
    /// `thread_pointer`: scanned by `check` for what a transport that
    /// samples registers cannot give (`regscan`).
    program_code: Vec<(String, std::sync::Arc<[u8]>, bool)>,
    /// How the transport armed each probe's sites, where it chose per
    /// site: `(tag, mechanism, sites)` ([`Transport::site_counts`]).
    site_counts: Vec<(usize, &'static str, u32)>,
    /// `-v`: how each probe's sites were armed is said at the start.
    verbose: bool,
    /// The registers the programs read (see [`Session::registers_read`]).
    registers: RegsRead,
    /// How the transport was chosen: (chosen by `auto`, why), for the
    /// statistics ([`Session::set_plan`]).
    plan: Option<(bool, String)>,
    /// Each program's label and the `exit 1`/`exit 3` it uses (`stops`
    /// of its manifest): refused by a transport that cannot honour them.
    program_stops: Vec<(String, Vec<u8>)>,
    /// Whether any program imports `read_mem` or `read_str`, or reads a
    /// USDT argument in memory (`usdt_arg` on a site with a memory operand).
    reads_memory: bool,
    /// USDT semaphores this run raised: (probe, pid, run-time address).
    semaphores: Vec<(usize, i32, u64)>,
    /// Lost hits the transport did not attribute to a known probe.
    dropped_unattributed: u64,
    /// `exit 1` / `exit 3` runs that the transport cannot honour.
    unhonoured: [u64; 2],
    /// The transport of the run (set by [`Session::run`]).
    transport: Option<&'static TransportInfo>,
    resolver: Resolver,
    opts: RunOptions,
    out: crate::out::output::RecordOut,
    line: String,
    seq: u64,
    /// Warnings printed at arming time (also for tests).
    pub warnings: Vec<String>,
    /// Time spent arming (resolving and inserting probes), all calls.
    arm_time: std::time::Duration,
    /// Watchpoints wait (arming at a launched command's exec, where the
    /// dynamic linker has yet to relocate and initialise).
    breakpoints_only: bool,
    /// Time spent disarming at the end of the run.
    disarm_time: std::time::Duration,
    /// Hits recorded for `wprobe bench -- CMD`.
    capture: Option<capture::Capture>,
    /// Fault injection for the clean-failure tests (debug builds only):
    /// panic at this hit (`WPROBE_PANIC_AT_HIT=N`).
    panic_at_hit: Option<u64>,
    hits_seen: u64,
    /// One-liner support (`begin`/`end`/`interval` probes, output events,
    /// maps printed at exit): see `oneliner`.
    bt: BtState,
    /// Each program's label and Wasm bytes, for a transport that runs the
    /// handlers itself (see `in_target`).
    program_wasm: Vec<(String, std::sync::Arc<[u8]>)>,
    /// Where records go instead of being formatted (see `hook`).
    hook: Option<Box<dyn hook::RecordHook>>,
    /// Probes that could not be armed: (program, manifest index, why).
    failures: Vec<(usize, usize, crate::transport::Error)>,
    /// Records of the current breakpoint hit, until its step (`logonfault`).
    held: records::Held,
    /// A transport that compiles the programs again (for the target) may
    /// use the compiled-module cache.
    use_cache: bool,
    /// The programs whose return probes report each call as it enters
    /// (see `request_entry_notices`).
    entry_notices: Vec<usize>,
    /// Programs whose return probes track every call (`track_every_call`).
    every_call: Vec<usize>,
    /// Return probes (by index) on functions that switch stacks
    /// (`mark_stack_switch`).
    stack_switch: Vec<usize>,
    /// Modules checked for being Go programs (once each, at arming: the
    /// check parses the file's section headers), Go ones said so.
    go_noted: rustc_hash::FxHashSet<std::ffi::OsString>,
    /// `--metrics`: where snapshots go when a scrape asks (see `metrics`).
    metrics: Option<std::sync::Arc<crate::out::metrics::Feed>>,
    /// Reading the target's maps for a snapshot failed (said once).
    metrics_pull_failed: bool,
    /// Symbolized map keys of earlier snapshots (see `metrics`).
    metrics_keys: metrics::KeyCache,
}

/// Whether a program reads the target's memory (`read_mem`, `read_str`,
/// a `usdt_arg` of a site whose spec has a memory operand).
fn reads_memory(programs: &[LoadedProgram]) -> bool {
    // `usdt_arg` reads memory only for a site whose spec has a memory
    // operand (a stack slot wants the sample's snapshot under perf).
    let usdt_in_memory = |m: &Manifest| {
        m.probes.iter().any(|p| {
            p.usdt_args
                .iter()
                .any(|a| matches!(a.loc, hostabi::usdt::UsdtLoc::Mem { .. }))
        })
    };
    programs.iter().any(|p| {
        p.module.module.imports().any(|i| {
            i.module() == hostabi::IMPORT_MODULE
                && (matches!(i.name(), "read_mem" | "read_str")
                    || (i.name() == "usdt_arg" && usdt_in_memory(&p.module.manifest)))
        })
    })
}

/// The programs that write the target (`write_reg`, `write_mem`), with
/// what they import.
fn writers(programs: &[LoadedProgram]) -> Vec<(String, String)> {
    let mut writers = Vec::new();
    for p in programs {
        if p.module.writes {
            for imp in p.module.module.imports() {
                if imp.module() == hostabi::IMPORT_MODULE
                    && matches!(imp.name(), "write_reg" | "write_mem")
                {
                    writers.push((p.label.clone(), imp.name().to_string()));
                }
            }
        }
    }
    writers
}

/// The probes of program `pi` that `opts` selects: those of hits in
/// `probes`, the special ones (begin, end, intervals) in `bt`.
fn select_probes(
    pi: usize,
    p: &LoadedProgram,
    opts: &RunOptions,
    bt: &mut BtState,
    probes: &mut Vec<ProbeState>,
) {
    let m = &p.module.manifest;
    for i in 0..m.probes.len() {
        if !selected(m, i, opts) {
            continue;
        }
        if m.probes[i].trigger != Trigger::Hit {
            bt.specials.push(Special {
                prog: pi,
                index: i,
                trigger: m.probes[i].trigger,
                next: None,
            });
            continue;
        }
        // `PROGRAM:LOCATION`, for each of thousands of probes (a whole
        // program traced): put together, not formatted.
        let mut label = String::with_capacity(p.label.len() + 24);
        label.push_str(&p.label);
        label.push(':');
        m.probes[i].location.render_into(&mut label);
        probes.push(ProbeState {
            prog: pi,
            index: i,
            label,
            enabled: true,
            armed: Vec::new(),
            ever_armed: false,
            stats: ProbeStats::default(),
            link: None,
        });
    }
}

/// Labels told apart: `LABEL#2`, `#3`… for a location a program probes
/// again.
fn distinct_labels(probes: &mut [ProbeState]) {
    // Counted on the labels as they are (no copy of each), then renamed.
    let mut seen: rustc_hash::FxHashMap<&str, usize> = Default::default();
    let nth: Vec<usize> = probes
        .iter()
        .map(|p| {
            let n = seen.entry(p.label.as_str()).or_insert(0);
            *n += 1;
            *n
        })
        .collect();
    drop(seen);
    for (p, n) in probes.iter_mut().zip(nth) {
        if n > 1 {
            p.label = format!("{}#{}", p.label, n);
        }
    }
}

fn selected(m: &Manifest, i: usize, opts: &RunOptions) -> bool {
    let p = &m.probes[i];
    let g_ok = opts.groups.is_empty()
        || p.group
            .as_ref()
            .is_some_and(|g| opts.groups.iter().any(|x| x.eq_ignore_ascii_case(g)));
    let t_ok = opts.types.is_empty()
        || p.r#type
            .as_ref()
            .is_some_and(|t| opts.types.iter().any(|x| x.eq_ignore_ascii_case(t)));
    g_ok && t_ok
}

impl Session {
    /// The registers the programs' handlers read: what a transport that
    /// samples registers (perf) must sample.
    pub fn registers_read(&self) -> RegsRead {
        self.registers
    }

    /// Records how the transport was chosen (`--transport auto` or
    /// forced, and why), for the JSON statistics.
    pub fn set_plan(&mut self, plan: &crate::plan::Plan) {
        let mut why = plan.reason.clone();
        for (name, w) in &plan.passed_over {
            why.push_str(&format!("; not {name}: {w}"));
        }
        self.plan = Some((!plan.forced, why));
    }

    /// `-v`: says, once armed, how each probe's sites were (where the
    /// transport chooses per site: a jump or a trap).
    pub fn set_verbose(&mut self, on: bool) {
        self.verbose = on;
    }

    /// Says how each probe's sites were armed (`-v`): a line per probe,
    /// or beyond [`SITES_LISTED`] probes one line of totals.
    fn say_sites(&self) {
        if self.site_counts.is_empty() {
            return;
        }
        let mut per: Vec<(usize, Vec<(&str, u32)>)> = Vec::new();
        for &(tag, how, n) in &self.site_counts {
            match per.last_mut() {
                Some((t, v)) if *t == tag => v.push((how, n)),
                _ => per.push((tag, vec![(how, n)])),
            }
        }
        let words = |v: &[(&str, u32)]| {
            v.iter()
                .map(|&(how, n)| format!("{n} {how}{}", if n == 1 { "" } else { "s" }))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if per.len() > SITES_LISTED {
            let mut total: Vec<(&str, u32)> = Vec::new();
            for (_, v) in &per {
                for &(how, n) in v {
                    match total.iter_mut().find(|(h, _)| *h == how) {
                        Some(e) => e.1 += n,
                        None => total.push((how, n)),
                    }
                }
            }
            crate::elog!(
                "wprobe: sites of {} probes: {} (the JSON statistics have each probe's)",
                per.len(),
                words(&total)
            );
            return;
        }
        for (tag, v) in &per {
            if let Some(p) = self.probes.get(*tag) {
                crate::elog!("wprobe: sites of {}: {}", p.label, words(v));
            }
        }
    }

    /// Loads the programs into a fresh store.
    pub fn new(
        engine: &wasmtime::Engine,
        programs: Vec<LoadedProgram>,
        opts: RunOptions,
        out: Box<dyn Write + Send>,
    ) -> anyhow::Result<Session> {
        let gvars = programs
            .iter()
            .map(|p| p.module.manifest.gvars as usize)
            .max()
            .unwrap_or(0);
        let env = RunEnv {
            gvars: vec![0; gvars],
            ..RunEnv::default()
        };
        let reads_memory = reads_memory(&programs);
        let writers = writers(&programs);
        let registers = programs
            .iter()
            .map(|p| p.module.registers_read())
            .fold(RegsRead::Only(0), RegsRead::union);
        let program_code = programs
            .iter()
            .map(|p| {
                let tp =
                    p.module.module.imports().any(|i| {
                        i.module() == hostabi::IMPORT_MODULE && i.name() == "thread_pointer"
                    });
                (p.label.clone(), p.module.wasm.clone(), tp)
            })
            .collect();
        let program_stops = programs
            .iter()
            .filter(|p| !p.module.manifest.stops.is_empty())
            .map(|p| (p.label.clone(), p.module.manifest.stops.clone()))
            .collect();
        let mut runner = Runner::new(engine, env)?;
        let mut bt = BtState {
            events: programs.iter().map(|p| p.module.events.clone()).collect(),
            ..BtState::default()
        };
        let mut probes = Vec::with_capacity(
            programs
                .iter()
                .map(|p| p.module.manifest.probes.len())
                .sum(),
        );
        let mut manifests = Vec::new();
        for (pi, p) in programs.iter().enumerate() {
            runner.add(&p.module, opts.fuel)?;
            let m = &p.module.manifest;
            select_probes(pi, p, &opts, &mut bt, &mut probes);
            manifests.push(m.clone());
        }
        // Same location twice in one program: tell them apart.
        distinct_labels(&mut probes);
        let program_wasm = programs
            .iter()
            .map(|p| (p.label.clone(), p.module.wasm.clone()))
            .collect();
        Ok(Session {
            registers,
            plan: None,
            site_counts: Vec::new(),
            verbose: false,
            program_wasm,
            runner,
            manifests,
            probes,
            bias: HashMap::default(),
            bias_default: HashMap::default(),
            writers,
            program_code,
            program_stops,
            reads_memory,
            semaphores: Vec::new(),
            dropped_unattributed: 0,
            unhonoured: [0; 2],
            transport: None,
            resolver: Resolver::default(),
            opts,
            out: crate::out::output::RecordOut::new(out),
            line: String::with_capacity(4096),
            seq: 0,
            warnings: Vec::new(),
            arm_time: std::time::Duration::ZERO,
            breakpoints_only: false,
            disarm_time: std::time::Duration::ZERO,
            capture: None,
            panic_at_hit: if cfg!(debug_assertions) {
                std::env::var("WPROBE_PANIC_AT_HIT")
                    .ok()
                    .and_then(|v| v.parse().ok())
            } else {
                None
            },
            hits_seen: 0,
            bt,
            hook: None,
            failures: Vec::new(),
            held: Default::default(),
            use_cache: true,
            entry_notices: Vec::new(),
            every_call: Vec::new(),
            stack_switch: Vec::new(),
            go_noted: Default::default(),
            metrics: None,
            metrics_pull_failed: false,
            metrics_keys: Default::default(),
        })
    }

    /// The return probes of program `prog` report each call as it enters
    /// and as it returns ([`hook::RecordHook::call`]) instead of running
    /// their handlers, where the transport can
    /// ([`crate::transport::Capabilities::entry_notices`]): `wprobe trace`'s
    /// built-in handlers run nowhere.
    pub fn request_entry_notices(&mut self, prog: usize) {
        self.entry_notices.push(prog);
    }

    /// The return probes of program `prog` track every call a thread can
    /// track ([`EVERY_CALL`]), not their manifest's `maxactive` (at most
    /// 4096): `wprobe trace` follows recursions of any depth a program
    /// reaches.
    pub fn track_every_call(&mut self, prog: usize) {
        self.every_call.push(prog);
    }

    /// Probe `index` of program `prog` is a return probe on a function that
    /// switches stacks (`swapcontext`): the transport pairs calls knowing
    /// it ([`crate::transport::Transport::mark_stack_switch`]).
    pub fn mark_stack_switch(&mut self, prog: usize, index: usize) {
        if let Some(pi) = self
            .probes
            .iter()
            .position(|p| p.prog == prog && p.index == index)
            && !self.stack_switch.contains(&pi)
        {
            self.stack_switch.push(pi);
        }
    }

    /// `maxactive` of probe `pi`'s return probe as armed.
    pub(crate) fn maxactive(&self, pi: usize, spec: &hostabi::manifest::ProbeSpec) -> u32 {
        if self.every_call.contains(&self.probes[pi].prog) {
            EVERY_CALL
        } else {
            spec.maxactive_or_default()
        }
    }

    /// Whether a transport that compiles the programs again for the target
    /// (the in-process transport) may use the compiled-module cache
    /// (`--no-cache` says no; on by default).
    pub fn set_use_cache(&mut self, on: bool) {
        self.use_cache = on;
    }

    /// Whether any handler can read memory (`read_mem`, `read_str`): the
    /// perf transport then takes a stack snapshot with every sample.
    pub fn reads_memory(&self) -> bool {
        self.reads_memory
    }

    /// Whether any selected probe is a breakpoint (not a watchpoint).
    pub fn has_breakpoints(&self) -> bool {
        self.probes
            .iter()
            .any(|p| self.manifests[p.prog].probes[p.index].kind == ProbeKind::Breakpoint)
    }

    /// Writes each batch of records at once (a terminal), and/or sets
    /// `stop` when records cannot be written (the run then detaches).
    pub fn set_output(&mut self, immediate: bool, stop: std::sync::Arc<AtomicBool>) {
        let out = std::mem::replace(
            &mut self.out,
            crate::out::output::RecordOut::new(Box::new(std::io::sink())),
        );
        self.out = out.immediate(immediate).stop_on_failure(stop);
    }

    /// Records that could not be written, and why (after the run).
    pub fn records_lost(&self) -> Option<(u64, String)> {
        self.out.lost()
    }

    /// Number of programs loaded.
    pub fn program_count(&self) -> usize {
        self.manifests.len()
    }

    /// Number of probes selected.
    pub fn probe_count(&self) -> usize {
        self.probes.len()
    }

    /// The transport-agnostic part of a hit, with the hit already in the
    /// store: counts it, applies `ignore`, runs the handler, writes its
    /// records. `None` when the hit was ignored.
    fn run_hit(&mut self, pi: usize, bias: u64) -> Option<RunOutcome> {
        let (prog, index) = (self.probes[pi].prog, self.probes[pi].index);
        let spec_ignore = self.manifests[prog].probes[index].ignore as u64;
        let st = &mut self.probes[pi].stats;
        st.hits += 1;
        if policy::ignores(spec_ignore, st.ignored) {
            st.ignored += 1;
            return None;
        }
        let env = &mut self.runner.store.data_mut().env;
        let pid = env.pid();
        env.hit.set_module_bias(bias);
        if self.bt.active {
            self.bt.sym.note(pid);
        }
        let out = self.runner.run(prog, index);
        if out == RunOutcome::Returned(Outcome::Stop) {
            self.request_stop();
        }
        let st = &mut self.probes[pi].stats;
        st.runs += 1;
        match &out {
            RunOutcome::FuelExhausted => st.fuel_exhausted += 1,
            RunOutcome::Trapped(msg) => {
                st.traps += 1;
                if st.traps == 1 {
                    crate::elog!(
                        "wprobe: handler of {} trapped: {msg} (counted; later traps are not printed)",
                        self.probes[pi].label
                    );
                }
            }
            RunOutcome::Interrupted => {
                st.traps += 1;
                crate::elog!(
                    "wprobe: handler of {} interrupted: wprobe is stopping (counted as a trap)",
                    self.probes[pi].label
                );
            }
            RunOutcome::Returned(Outcome::Uncaught) => st.uncaught += 1,
            RunOutcome::Returned(_) => {}
        }
        self.write_records(pi);
        Some(out)
    }

    /// What a handler run of probe `pi` (counted in its `runs`) means for
    /// it ([`policy::after_run`]); `removed`: the handler returned `remove`.
    fn after_run(&self, pi: usize, removed: bool) -> policy::Next {
        let p = &self.probes[pi];
        let maxhits = self.manifests[p.prog].probes[p.index].maxhits as u64;
        policy::after_run(removed, maxhits, p.stats.runs)
    }

    /// Records the first hit of each probe for `wprobe bench -- CMD`; sets
    /// `done` (which stops [`Session::run`]) once every probe has one.
    pub fn enable_capture(&mut self, done: std::sync::Arc<AtomicBool>) {
        self.capture = Some(capture::Capture {
            hits: vec![None; self.probes.len()],
            done,
        });
    }

    /// The recorded hits, by selected probe, with the probe's program and index.
    pub fn take_capture(&mut self) -> Vec<((usize, usize), Option<rpn2wasm::model::ModelEnv>)> {
        let hits = self.capture.take().map(|c| c.hits).unwrap_or_default();
        self.probes
            .iter()
            .map(|p| (p.prog, p.index))
            .zip(hits)
            .collect()
    }

    /// Handles one hit of probe `pi`; returns what the transport should do
    /// with the thread.
    fn hit(&mut self, t: &mut dyn Transport, pi: usize, hit: &mut dyn TransportHit) -> Action {
        // A hit of a probe disabled meanwhile (maxhits, remove) that was in
        // flight (perf writes samples before the event is switched off) is
        // not a hit of an enabled probe.
        if !self.probes[pi].enabled {
            return Action::Continue;
        }
        self.hits_seen += 1;
        if self.panic_at_hit == Some(self.hits_seen) {
            panic!("WPROBE_PANIC_AT_HIT={}: injected fault", self.hits_seen);
        }
        let bias = self.bias_of(pi, hit);
        if self.capture.as_ref().is_some_and(|c| c.wants(pi)) {
            // The mappings now, not as they were when the probes were
            // armed: what the command mapped since is part of what its
            // handler sees.
            let maps = t.maps(hit.pid() as i32, true).unwrap_or_default();
            let env = capture::capture_hit(hit, &maps, bias);
            if let Some(c) = &mut self.capture {
                c.keep(pi, env);
            }
        }
        let slot = &mut self.runner.store.data_mut().env.hit;
        if !slot.swap_with(hit) {
            // Not this transport's hit type yet (set once per run).
            *slot = t.new_hit();
            if !slot.swap_with(hit) {
                return Action::Continue;
            }
        }
        let out = self.run_hit(pi, bias);
        self.runner.store.data_mut().env.hit.swap_with(hit);
        if hit.process_gone() {
            self.probes[pi].stats.gone += 1;
        }
        let Some(out) = out else {
            return Action::Continue;
        };
        let caps = t.info().caps;
        let mut action = Action::Continue;
        let removed = out == RunOutcome::Returned(Outcome::Remove);
        match out {
            RunOutcome::Returned(Outcome::DebuggerHandoff) if caps.debugger_handoff => {
                action = Action::HandoffToDebugger;
            }
            RunOutcome::Returned(Outcome::CoreDump) if caps.core_dump => {
                action = Action::CoreDump;
            }
            RunOutcome::Returned(o @ (Outcome::DebuggerHandoff | Outcome::CoreDump)) => {
                self.unhonoured(t.info(), pi, o);
            }
            RunOutcome::Returned(Outcome::CrashDump) => self.crash_dump_unavailable(pi),
            _ => {}
        }
        if self.after_run(pi, removed) == policy::Next::Disable {
            self.disable(t, pi);
        }
        action
    }

    /// The load bias of probe `pi`'s module in the process of `hit`.
    fn bias_of(&self, pi: usize, hit: &dyn TransportHit) -> u64 {
        let p = &self.probes[pi];
        if let Some(link) = p.link {
            return RunAddr(hit.ip()).bias_from(link);
        }
        let pid = hit.pid() as i32;
        self.bt
            .probe_bias
            .get(&(pi, pid))
            .or_else(|| self.bias.get(&(p.prog, pid)))
            .or_else(|| self.bias_default.get(&p.prog))
            .copied()
            .unwrap_or(0)
    }

    /// Counts an `exit 1`/`exit 3` the transport cannot honour; says so once.
    fn unhonoured(&mut self, info: &TransportInfo, pi: usize, o: Outcome) {
        let (k, what, alt) = if o == Outcome::DebuggerHandoff {
            (0, "exit 1 (debugger hand-off)", {
                crate::transport::TRANSPORTS
                    .iter()
                    .find(|t| t.caps.debugger_handoff)
            })
        } else {
            (
                1,
                "exit 3 (core dump)",
                crate::transport::TRANSPORTS
                    .iter()
                    .find(|t| t.caps.core_dump),
            )
        };
        self.unhonoured[k] += 1;
        if self.unhonoured[k] == 1 {
            crate::elog!(
                "wprobe: warning: probe {}: {what} needs a stopped target and cannot be \
                 honoured under --transport {}; counted, the process runs on (use \
                 --transport {})",
                self.probes[pi].label,
                info.name,
                alt.map_or("ptrace", |t| t.name)
            );
        }
    }

    fn crash_dump_unavailable(&self, pi: usize) {
        crate::elog!(
            "wprobe: probe {}: exit 2 (system crash dump) is unavailable in user space",
            self.probes[pi].label
        );
    }

    /// Runs the transport's event loop until the traced processes end or
    /// `stop` is set, then detaches (every probe removed, every process let
    /// go as it was); returns how the launched command ended, if it did.
    pub fn run(
        &mut self,
        t: &mut dyn Transport,
        stop: &AtomicBool,
    ) -> anyhow::Result<Option<ExitStatus>> {
        self.transport = Some(t.info());
        // Counted once the handlers are loaded where the target runs them
        // (the sites are final then), else now.
        if t.in_target().is_none() {
            self.site_counts = t.site_counts();
        }
        self.runner.store.data_mut().env.hit = t.new_hit();
        if self.hook.is_some() && self.tick_period().is_none() {
            // With interval probes the hook has their tick (the command
            // set it), a shorter one would pause the handlers more often.
            t.set_tick(hook::HOOK_TICK);
        }
        let loaded = if let Some(t) = t.in_target() {
            // Part of arming: the agent, the modules, the stubs, the jumps.
            let t0 = std::time::Instant::now();
            let main = t.main_pid();
            if self.pending() > 0
                && let Err(e) = t.watch_libraries(main)
            {
                self.warn(
                    true,
                    format!(
                        "{} probe(s) not armed: their module is not mapped in process {main}, \
                         and libraries it maps later cannot be watched: {e}",
                        self.pending()
                    ),
                );
            }
            let set = self.handler_set(main);
            let r = t.load_handlers(&set).map_err(anyhow::Error::msg);
            self.site_counts = t.site_counts();
            if r.is_ok() && self.verbose {
                self.say_sites();
            }
            self.arm_time += t0.elapsed();
            if r.is_err() {
                // A launched command has not run any of its own code yet:
                // it does not run untraced (as when arming fails).
                t.kill_launched();
            }
            r
        } else {
            Ok(())
        };
        let res = match loaded {
            Ok(()) => t.run(stop, &mut |t: &mut dyn Transport, ev: Event<'_>| {
                self.on_event(t, ev)
            }),
            Err(e) => Err(e),
        };
        self.settle_held(None);
        let t0 = std::time::Instant::now();
        self.lower_all_semaphores(t);
        let detached = t.detach();
        self.disarm_time = t0.elapsed() + t.report().detach_time;
        if let Some(t) = t.in_target() {
            self.pull_target_maps(t);
        }
        self.out.flush();
        let status = res?;
        detached?;
        Ok(status)
    }

    /// One event of the transport.
    fn on_event(&mut self, t: &mut dyn Transport, ev: Event<'_>) -> Action {
        match ev {
            Event::Hit { tags, hit } => return self.on_hit(t, tags, hit),
            Event::Stepped { fault, .. } => self.settle_held(fault),
            Event::ProcessStarted { pid, parent } => {
                self.hook_event(HookEvent::ProcessStarted { pid, parent });
                self.inherit_semaphores(pid, parent);
                self.arm(t, pid, false);
            }
            Event::Exec { pid } => {
                self.hook_event(HookEvent::Exec { pid });
                // `comm` is the new program's.
                self.runner.store.data_mut().services.forget_names();
                if let Some(t) = t.in_target() {
                    // The maps of the agent of the old image, which the
                    // new image's agent starts from.
                    self.pull_target_maps(t);
                }
                self.forget(pid);
                // Its stacks and symbols are the new program's from now on.
                self.bt.sym.forget(pid as u64);
                self.rearm(t, pid);
            }
            Event::LibrariesChanged { pid } => {
                // The handles of the probes armed in the libraries `pid`
                // unmapped: gone from `pid` only (the in-process
                // transport's handle is the probe's tag, the same in a
                // fork child that closed a library and in its parent,
                // which keeps it).
                let gone = t.take_unmapped();
                if !gone.is_empty() {
                    for p in &mut self.probes {
                        p.armed.retain(|&(at, a)| at != pid || !gone.contains(&a));
                    }
                }
                self.rearm(t, pid);
            }
            Event::ProcessExited { pid, status } => {
                self.hook_event(HookEvent::ProcessExited { pid, status });
                self.forget(pid);
            }
            Event::Lost { tag, count } => {
                let origin = self.origin(tag);
                self.hook_event(HookEvent::Lost {
                    prog: origin.map(|o| o.0),
                    index: origin.map_or(0, |o| o.1),
                    count,
                });
                match self.probes.get_mut(tag) {
                    Some(p) => p.stats.dropped += count,
                    None => self.dropped_unattributed += count,
                }
            }
            Event::Missed { tag, count, depth } => {
                if let Some((prog, index)) = self.origin(tag) {
                    self.hook_event(HookEvent::Missed { prog, index, count });
                }
                if let Some(p) = self.probes.get_mut(tag) {
                    p.stats.missed += count;
                    p.stats.missed_depth += depth;
                }
            }
            Event::LeftRunning { tag, count } => {
                // Not a hook event: a call tree closes its open calls
                // itself when the run ends.
                if let Some(p) = self.probes.get_mut(tag) {
                    p.stats.missed += count;
                }
            }
            Event::Entered { tag, .. } => self.hook_call(tag, &ev),
            Event::Returned { tag, .. } => {
                // A return probe's hit is a return, told here by every
                // transport (no handler runs: nothing else counts it).
                if let Some(p) = self.probes.get_mut(tag) {
                    p.stats.hits += 1;
                }
                self.hook_call(tag, &ev);
            }
            Event::Unwound { tag, cause, .. } => {
                self.hook_call(tag, &ev);
                if let Some(p) = self.probes.get_mut(tag) {
                    p.stats.missed += 1;
                    if cause == crate::transport::calls::Left::Unwound {
                        p.stats.unwound += 1;
                    }
                }
            }
            Event::Tick => self.on_tick(t),
            Event::Ran { tag, run } => {
                if tag < self.probes.len() {
                    self.target_ran(t, tag, run);
                }
            }
            Event::Counted { tag, counts } => {
                if tag < self.probes.len() {
                    self.target_counted(tag, counts);
                    // The target stops running a probe that used up its
                    // `maxhits` (`policy::after_run`): its sites go too,
                    // as under the transports that run handlers here.
                    if self.probes[tag].enabled
                        && self.after_run(tag, false) == policy::Next::Disable
                    {
                        self.disable(t, tag);
                    }
                }
            }
        }
        Action::Continue
    }

    /// Probes fired: the session's `tags` of every probe at the place, in
    /// the order the transport lists them, and the hit.
    fn on_hit(
        &mut self,
        t: &mut dyn Transport,
        tags: &[usize],
        hit: &mut dyn TransportHit,
    ) -> Action {
        // A hit nobody settled (a transport path without a step):
        // its records go out as they are.
        self.settle_held(None);
        if t.info().caps.step_faults
            && tags.iter().any(|&pi| {
                // A return probe's hit is at the return, not at an
                // instruction of its own that is stepped.
                self.probes.get(pi).is_some_and(|p| {
                    let spec = &self.manifests[p.prog].probes[p.index];
                    spec.kind == ProbeKind::Breakpoint && !spec.r#return
                })
            })
        {
            self.held.active = true;
            self.held.tags.clear();
            self.held.tags.extend_from_slice(tags);
        }
        let mut action = Action::Continue;
        // Probes sharing the site run in program order (a
        // transport may list them in another: return probes of one
        // function, for one), without sorting a copy per hit.
        let mut last = None;
        while let Some(pi) = tags
            .iter()
            .copied()
            .filter(|&pi| last.is_none_or(|l| pi > l))
            .min()
        {
            last = Some(pi);
            if pi < self.probes.len() {
                let a = self.hit(t, pi, hit);
                if a != Action::Continue {
                    action = a;
                }
            }
        }
        if action == Action::HandoffToDebugger {
            // No step: the process goes to the debugger as it is,
            // its records first (spec §14).
            self.settle_held(None);
        }
        action
    }

    /// Arms the probes of process `pid` again after an exec or a change of
    /// its libraries, with the handlers of a transport that runs them
    /// brought up to date.
    fn rearm(&mut self, t: &mut dyn Transport, pid: i32) {
        self.arm(t, pid, true);
        if let Some(t) = t.in_target() {
            let set = self.handler_set(pid);
            if let Err(e) = t.update_handlers(&set) {
                self.warn(true, e.to_string());
            }
        }
        self.site_counts = t.site_counts();
    }
}

#[cfg(test)]
mod tests;
