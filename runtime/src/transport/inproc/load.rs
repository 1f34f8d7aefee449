//! Loading the handlers into the stopped target (the commit of what was
//! inserted): the programs precompiled for the agent's engine, the shared
//! region laid out, the agent and the modules loaded through injected
//! calls, the sites registered, the heartbeat started, then the stubs and
//! jumps written and the target let go. Each phase is timed for
//! `WPROBE_DEBUG`.

use std::time::{Duration, Instant};

use crate::transport::RunCounts;
use agent_loader::{LoadedAgent, ModuleSpec, ProbeSpec, RegionLayout, RunFacts, SiteSpec};

use super::patch::Patcher;
use super::world::World;
use super::{INFO, InProc, ProbeMarks};
use crate::transport::{Error, HandlerSet};

/// Bytes of the record ring (`WPROBE_INPROC_RING_BYTES` overrides it: tests
/// and measurements of drops).
const RING_BYTES: u64 = 4 << 20;

/// After this long without a beat, the agent's probes go dormant.
const STALE_AFTER: Duration = Duration::from_secs(2);
/// How often the heartbeat thread beats.
const BEAT_EVERY: Duration = Duration::from_millis(100);

/// The artifact of `wasm` for the agent's engine: from the compiled-module
/// cache (keyed by the engine's configuration, so never an artifact of the
/// runtime's own engine), or compiled and stored there.
fn compile_for_agent(
    cache: &crate::wasm::cache::Cache,
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
        self.report_as(pid, "");
    }

    /// [`Phases::report`], the phases said to be of `what` (none: the
    /// commit).
    fn report_as(&self, pid: i32, what: &str) {
        if self.on {
            let parts: Vec<String> = self
                .done
                .iter()
                .map(|(w, d)| format!("{w} {:.3} ms", d.as_secs_f64() * 1e3))
                .collect();
            let what = if what.is_empty() {
                String::new()
            } else {
                format!(" {what}:")
            };
            crate::elog!("wprobe: debug: process {pid}:{what} {}", parts.join(", "));
        }
    }
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
    /// Starts the watchdog that trap sites need (`hold::go`) without
    /// waiting for it: it gets ready on the other CPU while planning goes
    /// on and the agent loads (a failure to start is said in `go`). Not
    /// for a program a followed child executed, which joins its parent's
    /// region (`go` may not run for it; when it does, it starts the
    /// watchdog itself). Once.
    pub(super) fn start_watchdog(&mut self) {
        if self.join.is_none() && self.watchdog.is_none() && self.watchdog_starting.is_none() {
            self.watchdog_starting = crate::transport::common::watchdog::start(self.pid).ok();
        }
    }

    /// Loads the agent and the programs, writes the stubs and the jumps,
    /// and lets the target go (the commit of everything inserted). A
    /// failure in the target names the process (and the errno, when
    /// known).
    pub(super) fn commit(&mut self, set: &HandlerSet<'_>) -> Result<(), Error> {
        let pid = self.pid;
        // The agent loaded before planning (`preload`), or loaded below.
        let preloaded = self.preloaded.take().transpose()?;
        // Where arming fell back to traps, said once for every probe armed
        // at start (later insertions say theirs as they come).
        let Some(world) = self.world.as_mut() else {
            return Err(Error::unsupported(INFO.name, "the target is not stopped"));
        };
        // Far jumps to trapped epilogues sent to stubs of their own, once
        // every probe's window is planned.
        self.patcher.plan_vfork_marks(world, &self.maps);
        self.patcher.plan_fragments(world, &self.maps);
        self.say_fallbacks();
        // Every window and stub is planned: what planning learnt of the
        // module files is saved for the next run from now, while the
        // agent is loaded and the target runs (on a thread of its own,
        // waited for at the detach).
        self.patcher.save_plans_behind();
        // Trap sites need the watchdog (`hold::go`): started at the first
        // trap planned, or now.
        if self.patcher.has_traps() {
            self.start_watchdog();
        }
        let Some(world) = self.world.as_mut() else {
            return Err(Error::unsupported(INFO.name, "the target is not stopped"));
        };
        world.pin_together();
        let mut phases = Phases::start();
        let joined = self.join.is_some();
        let fresh = preloaded.is_none();
        let mut laid_out = Vec::new();
        let (cwasm, layout) = match &preloaded {
            Some((agent, _)) => (Vec::new(), agent.region.layout()),
            None => {
                // Programs precompiled for the agent's engine.
                let cwasm = compile_programs(set)?;
                // The region: probes, variables, maps, ring, scratch (a
                // region joined has its own, and its programs' maps where
                // they are).
                let layout = region_layout(
                    if joined {
                        &mut laid_out
                    } else {
                        &mut self.program_maps
                    },
                    set,
                    &cwasm,
                    self.patcher.sites.len(),
                );
                (cwasm, layout)
            }
        };
        let probes_cap = layout.probes_cap;
        let facts = run_facts(set);
        phases.mark("compiled for the agent");
        let runner = world
            .runner()
            .map_err(|e| Error::anyhow(Some(pid), &e, format!("{e:#}")))?;
        // The agent's view of the sites and their journal's lines made on
        // a thread of their own while the target loads the agent and the
        // programs (neither needs the agent).
        let n_sites = self.patcher.sites.len();
        let patcher = &self.patcher;
        let (loaded, ahead, specs_here) = std::thread::scope(|scope| {
            let ahead = scope.spawn(move || {
                // Beside the agent's loading, not on its one CPU.
                crate::sys::process::run_on_unpinned();
                let specs = fresh.then(|| Self::site_specs(patcher, 0..n_sites));
                (specs, patcher.journal_lines_ahead())
            });
            let loaded = match preloaded {
                Some((agent, biases)) => {
                    // What the run and arming decided since: the run's
                    // facts (the launched command's pid), the maps (begin
                    // probes may have written them), the probes' limits
                    // and flags; the load biases that changed, told with
                    // the sites.
                    agent.region.set_facts(facts);
                    let fill = Fill {
                        gvars: &[],
                        marks: &self.marks,
                    };
                    fill_region(&agent, set, (&mut self.program_maps, false), &fill);
                    let changed = set
                        .probes
                        .iter()
                        .filter(|p| biases.get(p.tag) != Some(&p.load_bias))
                        .map(|p| (p.tag as u32, p.load_bias))
                        .collect();
                    Ok((agent, changed))
                }
                None => load_agent(world, runner, self.join.take(), layout, facts, pid).and_then(
                    |mut agent| {
                        let gvars = match joined {
                            true => Vec::new(),
                            false => std::mem::take(&mut self.carried_gvars),
                        };
                        let fill = (!joined).then_some(Fill {
                            gvars: &gvars,
                            marks: &self.marks,
                        });
                        let mut t = (&mut *world, runner);
                        let maps = &mut self.program_maps;
                        load_programs(&mut agent, &mut t, set, &cwasm, maps, fill, &mut phases)?;
                        Ok((agent, Vec::new()))
                    },
                ),
            };
            // With the agent loaded already, the view made here meanwhile.
            let specs_here = (!fresh).then(|| Self::site_specs(patcher, 0..n_sites));
            let ahead = ahead
                .join()
                .map_err(|_| Error::other("the sites' specifications: their thread panicked"));
            (loaded, ahead, specs_here)
        });
        let (mut agent, biases) = loaded?;
        let (specs, journal) = ahead?;
        self.patcher.keep_journal_ahead(journal);
        let sites = specs.or(specs_here).unwrap_or_default();
        phases.mark("sites specified (waited for)");
        let requests = {
            let mut t = world.target(runner);
            agent
                .set_sites(&mut t, &sites, &biases)
                .map_err(|e| Error::anyhow(Some(pid), &e, format!("{e:#}")))?
        };
        self.sites_sent = sites.len();
        drop_behind(sites);
        for &tag in self.armed.keys() {
            agent.region.set_probe_enabled(tag as u32, true);
            self.enabled.insert(tag);
        }
        agent.region.free_scratch();
        if !joined {
            self.heartbeat = start_heartbeat(&agent, self.tsc0, self.ring_full);
        }
        if !joined {
            // A region joined keeps its counters, reported so far.
            self.reported = vec![RunCounts::default(); probes_cap as usize];
        }
        let slots = agent.slots();
        self.agent = Some(agent);
        phases.mark(if requests > 1 {
            "sites registered (in parts)"
        } else {
            "sites registered"
        });
        if cfg!(debug_assertions) && std::env::var_os("WPROBE_INJECTION_PAUSE").is_some() {
            crate::elog!("wprobe: debug: {} injections", world.injections());
        }
        self.patcher.install(world, slots)?;
        phases.mark("stubs and jumps written");
        phases.report(self.pid);
        if phases.on && self.patcher.copies_kept > 0 {
            crate::elog!(
                "wprobe: debug: process {}: {} relocated copies of whole functions as an earlier \
                 run made them (plan cache)",
                self.pid,
                std::mem::take(&mut self.patcher.copies_kept)
            );
        }
        if let Some(a) = &self.agent {
            self.allocations_armed = a.region.stats().allocations;
        }
        if joined && self.joined_parent != 0 {
            // A child stopped still: the transport that serves its threads
            // takes them (`joined`).
            self.patcher.save_plans();
            return Ok(());
        }
        // Let the target go (seized, when some site traps).
        if let Some(w) = self.world.take() {
            self.go(w)?;
        }
        self.pidfd = crate::sys::process::pidfd_open(self.pid);
        // What the commit learnt too (none, as a rule: saved above).
        self.patcher.save_plans_behind();
        Ok(())
    }

    /// Loads the agent and the programs into the launched command before
    /// any probe is planned (`InTarget::preload_handlers`): the planning
    /// of a program never traced before waits for the reading of its
    /// code (python3.11: 15–30 ms), and a warm one for its plans' reading,
    /// where the agent's loading (about 10 ms) then goes; the commit
    /// finds it done. Its region is laid out for three sites a probe (a
    /// request of more goes in parts: `LoadedAgent::set_sites`); the
    /// probes' load biases, unknown yet, are told with the sites. A
    /// failure is the commit's to say (an error here would stop arming
    /// as a mistake of the user's). Not for a process attached to, which
    /// would keep the agent if arming failed, nor for a region joined or
    /// an image after an exec.
    pub(super) fn preload(&mut self, set: &HandlerSet<'_>) {
        let pid = self.pid;
        if !self.launched
            || self.join.is_some()
            || self.reload
            || self.agent.is_some()
            || self.preloaded.is_some()
        {
            return;
        }
        let Some(world) = self.world.as_mut() else {
            return;
        };
        world.pin_together();
        let mut phases = Phases::start();
        let loaded = (|| -> Result<LoadedAgent, Error> {
            let cwasm = compile_programs(set)?;
            // (`WPROBE_INPROC_PRELOAD_SITES`, tests: laid out for that
            // many.)
            let sites = std::env::var("WPROBE_INPROC_PRELOAD_SITES")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(set.probes.len().saturating_mul(3));
            let layout = region_layout(&mut self.program_maps, set, &cwasm, sites);
            phases.mark("compiled for the agent");
            let runner = world
                .runner()
                .map_err(|e| Error::anyhow(Some(pid), &e, format!("{e:#}")))?;
            let mut agent = load_agent(world, runner, None, layout, run_facts(set), pid)?;
            let fill = Fill {
                gvars: &[],
                marks: &self.marks,
            };
            let mut t = (&mut *world, runner);
            let maps = &mut self.program_maps;
            load_programs(
                &mut agent,
                &mut t,
                set,
                &cwasm,
                maps,
                Some(fill),
                &mut phases,
            )?;
            Ok(agent)
        })();
        // Planning is better off with wprobe's other threads beside it.
        world.unpin();
        let agent = match loaded {
            Ok(a) => a,
            Err(e) => {
                // Said by the commit, as a failure to load there is.
                self.preloaded = Some(Err(e));
                return;
            }
        };
        phases.report_as(pid, "loaded before planning");
        let mut biases = vec![0; set.probes.iter().map(|p| p.tag + 1).max().unwrap_or(0)];
        for p in &set.probes {
            biases[p.tag] = p.load_bias;
        }
        self.preloaded = Some(Ok((agent, biases)));
    }

    /// The agent's view of the sites `range`.
    pub(super) fn site_specs(patcher: &Patcher, range: std::ops::Range<usize>) -> Vec<SiteSpec> {
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
                vfork: patcher.vfork_mark(s.site.probe),
            })
            .collect()
    }
}

/// The programs precompiled for the agent's engine (a failure is no
/// process's: [`Error::Other`]).
fn compile_programs(set: &HandlerSet<'_>) -> Result<Vec<Vec<u8>>, Error> {
    let engine =
        agent_loader::compile::agent_engine().map_err(|e| Error::other(format!("{e:#}")))?;
    let cache = if set.use_cache {
        crate::wasm::cache::Cache::from_env()
            .unwrap_or_else(|_| crate::wasm::cache::Cache::disabled())
    } else {
        crate::wasm::cache::Cache::disabled()
    };
    // `WPROBE_INPROC_FOREIGN_ARTIFACT` (tests): hand the agent what
    // wprobe's own engine compiles, which the agent must refuse.
    let engine = match std::env::var_os("WPROBE_INPROC_FOREIGN_ARTIFACT") {
        Some(_) => crate::wasm::engine::new_engine().map_err(|e| Error::other(format!("{e:#}")))?,
        None => engine,
    };
    let mut cwasm = Vec::with_capacity(set.programs.len());
    for p in &set.programs {
        cwasm.push(
            compile_for_agent(&cache, &engine, p.wasm).map_err(|e| {
                Error::other(format!("compiling `{}` for the target: {e:#}", p.label))
            })?,
        );
    }
    Ok(cwasm)
}

/// What the agent's imports report that wprobe knows of the run.
fn run_facts(set: &HandlerSet<'_>) -> RunFacts {
    RunFacts {
        start_mono_ns: set.start_mono_ns,
        mono_offset_ns: set.mono_offset_ns,
        child_pid: set.child_pid,
    }
}

/// The layout of the shared region: probes, variables, maps, ring,
/// scratch; each program's map region (its offset among the maps) in
/// `program_maps`.
fn region_layout(
    program_maps: &mut Vec<(u64, u64)>,
    set: &HandlerSet<'_>,
    cwasm: &[Vec<u8>],
    sites: usize,
) -> RegionLayout {
    let mut maps_size = 0u64;
    *program_maps = set
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
    // What loading a module puts there besides it: each probe's export
    // name and USDT arguments' text (put at a multiple of 8), and entry.
    let names: u64 = set
        .probes
        .iter()
        .map(|p| {
            p.export.len() as u64
                + 8
                + hostabi::usdt::render_args(p.usdt_args).len() as u64
                + 8
                + std::mem::size_of::<agent_abi::ProbeEntry>() as u64
        })
        .sum();
    RegionLayout {
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
            + 128 * sites as u64
            + (64 << 10),
    }
}

/// The agent mapped into the stopped target and initialised, with a
/// region of its own (`layout`), or joining the region of the agent a fork
/// child that executed a program was forked with (`join`).
fn load_agent(
    world: &mut World,
    runner: i32,
    join: Option<(agent_loader::region::Region, String)>,
    layout: RegionLayout,
    facts: RunFacts,
    pid: i32,
) -> Result<LoadedAgent, Error> {
    let image =
        agent_loader::agent_image().map_err(|e| Error::other(format!("the agent: {e:#}")))?;
    let mut t = world.target(runner);
    match join {
        Some((region, path)) => agent_loader::loader::join_agent(&mut t, &image, region, &path),
        None => agent_loader::load_agent(&mut t, &image, layout, facts),
    }
    .map_err(|e| {
        Error::anyhow(
            Some(pid),
            &e,
            format!("loading the agent into process {pid}: {e:#}"),
        )
    })
}

/// What [`fill_region`] writes besides the maps and the probes' limits:
/// the global variables carried over an exec, the return probes' marks.
struct Fill<'a> {
    gvars: &'a [u64],
    marks: &'a ProbeMarks,
}

/// The agent just mapped (in the process of `t`, a world and its runner
/// thread): its region filled (`fill`; none for a region joined, whose
/// maps are where they are), then the programs loaded (`cwasm`, compiled
/// for its engine), each step marked in `phases`.
fn load_programs(
    agent: &mut LoadedAgent,
    t: &mut (&mut World, i32),
    set: &HandlerSet<'_>,
    cwasm: &[Vec<u8>],
    program_maps: &mut [(u64, u64)],
    fill: Option<Fill<'_>>,
    phases: &mut Phases,
) -> Result<(), Error> {
    phases.mark("agent mapped");
    if let Some(f) = fill {
        fill_region(agent, set, (program_maps, true), &f);
    }
    let pid = t.0.pid();
    load_modules(agent, t.0, t.1, set, cwasm, program_maps, pid)?;
    phases.mark("agent initialized and modules loaded");
    Ok(())
}

/// The loaded agent's region filled: the programs' maps (`program_maps`,
/// with `true`: made offsets in the region first), the probes' limits,
/// and what `fill` has.
fn fill_region(
    agent: &LoadedAgent,
    set: &HandlerSet<'_>,
    program_maps: (&mut [(u64, u64)], bool),
    fill: &Fill<'_>,
) {
    // Each program's maps, placed in the region first (their offsets made
    // the region's) unless an earlier fill did.
    let (program_maps, place) = program_maps;
    let maps_off = agent.region.layout().maps_off();
    for (i, p) in set.programs.iter().enumerate() {
        if let Some(m) = p.maps {
            if place {
                program_maps[i].0 += maps_off;
            }
            agent.region.write_maps(program_maps[i].0, m);
        }
    }
    for p in &set.probes {
        agent
            .region
            .set_probe_limits(p.tag as u32, p.ignore, p.maxhits);
    }
    agent.region.set_gvars(fill.gvars);
    fill.marks.write_into(&agent.region);
}

/// Each program loaded into the agent, with every probe of it.
fn load_modules(
    agent: &mut LoadedAgent,
    world: &mut World,
    runner: i32,
    set: &HandlerSet<'_>,
    cwasm: &[Vec<u8>],
    program_maps: &[(u64, u64)],
    pid: i32,
) -> Result<(), Error> {
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
                program_maps[i]
            } else {
                (0, 0)
            },
            writes_allowed: p.writes,
        };
        let mut t = world.target(runner);
        agent.load_module(&mut t, &spec).map_err(|e| {
            let message = format!("loading `{}` into process {pid}: {e:#}", p.label);
            Error::anyhow(Some(pid), &e, message)
        })?;
    }
    Ok(())
}

/// The agent's heartbeat (its probes dormant after [`STALE_AFTER`] without
/// a beat) and the policy of a full ring set, the handlers enabled.
fn start_heartbeat(
    agent: &LoadedAgent,
    tsc0: (u64, u64),
    ring_full: crate::transport::RingFull,
) -> Option<agent_loader::region::Heartbeat> {
    let tsc1 = agent_loader::region::tsc_now();
    let hz = agent_loader::region::tsc_hz(tsc0, tsc1).unwrap_or(0.0);
    if hz > 0.0 {
        agent
            .region
            .set_stale_ticks((hz * STALE_AFTER.as_secs_f64()) as u64);
    }
    agent
        .region
        .set_drop_when_full(ring_full == crate::transport::RingFull::Drop);
    agent.region.beat();
    let heartbeat = agent.region.start_heartbeat(BEAT_EVERY).ok();
    agent.region.set_enabled(true);
    heartbeat
}

/// Drops `sites` on a thread of its own when they are many: tens of
/// thousands of small buffers, made on another thread, freed while the
/// stubs and jumps are written rather than before.
fn drop_behind(sites: Vec<SiteSpec>) {
    if sites.len() >= 1000 {
        // A thread that cannot start drops the closure, and them, here.
        let _ = std::thread::Builder::new()
            .name("wprobe-drop".into())
            .spawn(move || {
                crate::sys::process::run_on_unpinned();
                drop(sites)
            });
    }
}
