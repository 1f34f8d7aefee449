//! `wprobe run`: load programs, arm their probes in real processes, run
//! the handler at every hit, print what it logged, and leave the traced
//! program as it was. Per hit: no allocation once buffers are warm, no
//! `/proc` reads but the lazy CPU number, no symbol lookups (addresses and
//! biases are resolved when a process or library appears).

use crate::format::{self, Format, RecordView};
use crate::handlers::{RunOutcome, Runner};
use crate::load::LoadedModule;
use crate::provider::ptrace::{Action, BpId, Event, ExitStatus, Hit, HitWithGvars, Tracer, WpId};
use crate::resolve::Resolver;
use crate::sink::RecordKind;
use hostabi::Outcome;
use hostabi::env::HitEnv;
use hostabi::manifest::{Manifest, ProbeKind};
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::AtomicBool;

/// The environment handlers see: the current ptrace hit (swapped in from
/// the tracer for each handler run) and the run's global variables.
pub type RunEnv = HitWithGvars<Hit, Vec<u64>>;

/// A program given on the command line, loaded.
pub struct ProgramInput {
    /// Label for output (file stem).
    pub label: String,
    /// The loaded module.
    pub module: LoadedModule,
}

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
}

/// Per-probe counters, reported at exit.
#[derive(Clone, Debug, Default)]
pub struct ProbeStats {
    /// Hits seen (including ignored ones).
    pub hits: u64,
    /// Hits skipped by `ignore`.
    pub ignored: u64,
    /// Handler runs.
    pub runs: u64,
    /// Records emitted.
    pub records: u64,
    /// Record data bytes emitted.
    pub bytes: u64,
    /// Runs that exhausted their fuel.
    pub fuel_exhausted: u64,
    /// Runs that trapped.
    pub traps: u64,
    /// Runs ended by an uncaught exception.
    pub uncaught: u64,
    /// Records dropped (none under ptrace: the handler runs while the thread waits).
    pub dropped: u64,
}

struct ProbeRt {
    prog: usize,
    index: usize,
    label: String,
    enabled: bool,
    armed: Vec<(i32, Armed)>,
    stats: ProbeStats,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Armed {
    Bp(BpId),
    Wp(WpId),
}

/// The running session.
pub struct Session {
    runner: Runner<RunEnv>,
    manifests: Vec<Manifest>,
    probes: Vec<ProbeRt>,
    by_bp: HashMap<BpId, usize>,
    by_wp: HashMap<WpId, usize>,
    bias: HashMap<(usize, i32), u64>,
    resolver: Resolver,
    opts: RunOptions,
    out: Box<dyn Write>,
    line: String,
    seq: u64,
    /// Warnings printed at arming time (also for tests).
    pub warnings: Vec<String>,
    main_status: Option<ExitStatus>,
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
    /// Loads the programs into a fresh store.
    pub fn new(
        engine: &wasmtime::Engine,
        programs: Vec<ProgramInput>,
        opts: RunOptions,
        out: Box<dyn Write>,
    ) -> anyhow::Result<Session> {
        let gvars = programs
            .iter()
            .map(|p| p.module.manifest.gvars as usize)
            .max()
            .unwrap_or(0);
        let env = RunEnv {
            hit: Hit::default(),
            gvars: vec![0; gvars],
        };
        let mut runner = Runner::new(engine, env)?;
        let mut probes = Vec::new();
        let mut manifests = Vec::new();
        for (pi, p) in programs.iter().enumerate() {
            runner.add(&p.module, opts.fuel)?;
            let m = &p.module.manifest;
            for i in 0..m.probes.len() {
                if !selected(m, i, &opts) {
                    continue;
                }
                let loc = m.probes[i].location.render();
                probes.push(ProbeRt {
                    prog: pi,
                    index: i,
                    label: format!("{}:{}", p.label, loc),
                    enabled: true,
                    armed: Vec::new(),
                    stats: ProbeStats::default(),
                });
            }
            manifests.push(m.clone());
        }
        // Same location twice in one program: tell them apart.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for p in &mut probes {
            let n = seen.entry(p.label.clone()).or_insert(0);
            *n += 1;
            if *n > 1 {
                p.label = format!("{}#{}", p.label, n);
            }
        }
        Ok(Session {
            runner,
            manifests,
            probes,
            by_bp: HashMap::new(),
            by_wp: HashMap::new(),
            bias: HashMap::new(),
            resolver: Resolver::default(),
            opts,
            out,
            line: String::with_capacity(4096),
            seq: 0,
            warnings: Vec::new(),
            main_status: None,
        })
    }

    /// Number of probes selected.
    pub fn probe_count(&self) -> usize {
        self.probes.len()
    }

    /// Arms every enabled probe not yet armed in `pid`; returns how many are armed there.
    pub fn arm(&mut self, tracer: &mut Tracer, pid: i32, report: bool) -> usize {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        let maps = tracer.maps(pid).to_vec();
        let mut armed = 0;
        for pi in 0..self.probes.len() {
            if !self.probes[pi].enabled {
                continue;
            }
            if self.probes[pi].armed.iter().any(|(p, _)| *p == pid) {
                armed += 1;
                continue;
            }
            let (prog, index) = (self.probes[pi].prog, self.probes[pi].index);
            let m = &self.manifests[prog];
            let spec = &m.probes[index];
            let loc = match self.resolver.locate(&maps, &m.module, exe.as_deref()) {
                Ok(l) => l,
                Err(crate::resolve::ResolveError::NotMapped(_)) => {
                    if std::env::var_os("WPROBE_DEBUG").is_some() {
                        eprintln!(
                            "wprobe: debug: {} not mapped in {pid} ({} mappings)",
                            m.module,
                            maps.len()
                        );
                    }
                    continue; // maybe later (dlopen)
                }
                Err(e) => {
                    self.warn(
                        report,
                        format!(
                            "probe {} not applied in pid {pid}: {e}",
                            self.probes[pi].label
                        ),
                    );
                    self.probes[pi].enabled = false;
                    continue;
                }
            };
            self.bias.insert((prog, pid), loc.bias);
            let addr = match crate::resolve::probe_address(spec, &loc, &maps, &m.module) {
                Ok(a) => a,
                Err(e) => {
                    self.warn(
                        report,
                        format!(
                            "probe {} not applied in pid {pid}: {e}",
                            self.probes[pi].label
                        ),
                    );
                    self.probes[pi].enabled = false;
                    continue;
                }
            };
            let res = match spec.kind {
                ProbeKind::Breakpoint => tracer
                    .insert_breakpoint(
                        pid,
                        addr,
                        if self.opts.verify_opcodes {
                            spec.opcode
                        } else {
                            None
                        },
                    )
                    .map(Armed::Bp),
                k => {
                    let kind = match k {
                        ProbeKind::WatchExec => crate::arch::WatchKind::Exec,
                        ProbeKind::WatchWrite => crate::arch::WatchKind::Write,
                        _ => crate::arch::WatchKind::ReadWrite,
                    };
                    tracer
                        .insert_watchpoint(pid, addr, spec.length, kind)
                        .map(Armed::Wp)
                }
            };
            match res {
                Ok(a) => {
                    match a {
                        Armed::Bp(id) => self.by_bp.insert(id, pi),
                        Armed::Wp(id) => self.by_wp.insert(id, pi),
                    };
                    self.probes[pi].armed.push((pid, a));
                    armed += 1;
                }
                Err(e) => {
                    self.warn(
                        report,
                        format!(
                            "probe {} not applied in pid {pid}: {e}",
                            self.probes[pi].label
                        ),
                    );
                    self.probes[pi].enabled = false;
                }
            }
        }
        armed
    }

    fn warn(&mut self, report: bool, msg: String) {
        if report {
            eprintln!("wprobe: warning: {msg}");
        }
        self.warnings.push(msg);
    }

    /// Probes that could not be armed anywhere yet (module not mapped).
    pub fn pending(&self) -> usize {
        self.probes
            .iter()
            .filter(|p| p.enabled && p.armed.is_empty())
            .count()
    }

    fn disable(&mut self, tracer: &mut Tracer, pi: usize) {
        self.probes[pi].enabled = false;
        for (_, a) in std::mem::take(&mut self.probes[pi].armed) {
            match a {
                Armed::Bp(id) => {
                    let _ = tracer.remove_breakpoint(id);
                    self.by_bp.remove(&id);
                }
                Armed::Wp(id) => {
                    let _ = tracer.remove_watchpoint(id);
                    self.by_wp.remove(&id);
                }
            }
        }
    }

    /// Handles one hit of probe `pi`; returns what the tracer should do with the thread.
    fn hit(&mut self, tracer: &mut Tracer, pi: usize, hit: &mut Hit) -> Action {
        let (prog, index) = (self.probes[pi].prog, self.probes[pi].index);
        let spec_ignore = self.manifests[prog].probes[index].ignore as u64;
        let maxhits = self.manifests[prog].probes[index].maxhits as u64;
        let st = &mut self.probes[pi].stats;
        st.hits += 1;
        if st.ignored < spec_ignore {
            st.ignored += 1;
            return Action::Continue;
        }
        let bias = self
            .bias
            .get(&(prog, hit.pid() as i32))
            .copied()
            .unwrap_or(0);
        hit.set_module_bias(bias);
        std::mem::swap(&mut self.runner.store.data_mut().env.hit, hit);
        let out = self.runner.run(prog, index);
        std::mem::swap(&mut self.runner.store.data_mut().env.hit, hit);
        let st = &mut self.probes[pi].stats;
        st.runs += 1;
        match &out {
            RunOutcome::FuelExhausted => st.fuel_exhausted += 1,
            RunOutcome::Trapped(msg) => {
                st.traps += 1;
                if st.traps == 1 {
                    eprintln!(
                        "wprobe: handler of {} trapped: {msg} (counted; later traps are not printed)",
                        self.probes[pi].label
                    );
                }
            }
            RunOutcome::Returned(Outcome::Uncaught) => st.uncaught += 1,
            RunOutcome::Returned(_) => {}
        }
        self.write_records(pi, hit);
        let mut action = Action::Continue;
        match out {
            RunOutcome::Returned(Outcome::Remove) => self.disable(tracer, pi),
            RunOutcome::Returned(Outcome::DebuggerHandoff) => {
                let pid = hit.pid();
                eprintln!(
                    "wprobe: process {pid} handed off to a debugger, stopped at {:#x}: run `gdb -p {pid}`",
                    hit.address()
                );
                action = Action::HandoffToDebugger;
            }
            RunOutcome::Returned(Outcome::CrashDump) => {
                eprintln!(
                    "wprobe: probe {}: exit 2 (system crash dump) is unavailable in user space",
                    self.probes[pi].label
                );
            }
            RunOutcome::Returned(Outcome::CoreDump) => {
                let pid = hit.pid() as i32;
                match crate::coredump::write_core(pid, hit) {
                    Ok(path) => eprintln!(
                        "wprobe: core file of process {pid} written to {}",
                        path.display()
                    ),
                    Err(e) => eprintln!("wprobe: core file of process {pid} not written: {e:#}"),
                }
            }
            _ => {}
        }
        if self.probes[pi].enabled && self.probes[pi].stats.runs >= maxhits {
            self.disable(tracer, pi);
        }
        action
    }

    fn write_records(&mut self, pi: usize, hit: &Hit) {
        let data = self.runner.store.data();
        if data.sink.records.is_empty() {
            return;
        }
        let cpu = hit.cpu() as u32;
        self.line.clear();
        for r in &data.sink.records {
            let view = RecordView {
                seq: self.seq,
                stacktrace: r.kind == RecordKind::StackTrace,
                probe: &self.probes[pi].label,
                pid: hit.pid() as u32,
                tid: hit.tid() as u32,
                cpu,
                major: r.major,
                minor: r.minor,
                time_ns: hit.now_ns(),
                data: data.sink.data(r),
                items: data.sink.item_words(r),
            };
            format::record(&mut self.line, self.opts.format, &view);
            self.seq += 1;
            self.probes[pi].stats.records += 1;
            self.probes[pi].stats.bytes += r.data.len() as u64;
        }
        let _ = self.out.write_all(self.line.as_bytes());
        self.runner.store.data_mut().sink.clear();
    }

    /// Runs the event loop until the traced processes exit or `stop` is set.
    pub fn run(
        &mut self,
        tracer: &mut Tracer,
        stop: &AtomicBool,
    ) -> anyhow::Result<Option<ExitStatus>> {
        let main = tracer.main_pid();
        let mut on_event = |t: &mut Tracer, ev: Event<'_>| -> Action {
            match ev {
                Event::Breakpoint { bp, hit } => {
                    let mut action = Action::Continue;
                    for id in bp {
                        if let Some(&pi) = self.by_bp.get(id) {
                            let a = self.hit(t, pi, hit);
                            if a != Action::Continue {
                                action = a;
                            }
                        }
                    }
                    action
                }
                Event::Watchpoint { wp, hit } => match self.by_wp.get(&wp) {
                    Some(&pi) => self.hit(t, pi, hit),
                    None => Action::Continue,
                },
                Event::ProcessStarted { pid, .. } => {
                    self.arm(t, pid, false);
                    Action::Continue
                }
                Event::Exec { pid } => {
                    for p in &mut self.probes {
                        p.armed.retain(|(q, _)| *q != pid);
                    }
                    self.arm(t, pid, true);
                    Action::Continue
                }
                Event::LibrariesChanged { pid } => {
                    self.arm(t, pid, true);
                    Action::Continue
                }
                Event::ProcessExited { pid, status } => {
                    for p in &mut self.probes {
                        p.armed.retain(|(q, _)| *q != pid);
                    }
                    if pid == main {
                        self.main_status = Some(status);
                    }
                    Action::Continue
                }
            }
        };
        tracer.run(stop, &mut on_event)?;
        let _ = self.out.flush();
        Ok(self.main_status)
    }

    /// Per-probe statistics.
    pub fn stats(&self) -> Vec<(String, ProbeStats)> {
        self.probes
            .iter()
            .map(|p| (p.label.clone(), p.stats.clone()))
            .collect()
    }

    /// Writes the exit summary (stderr) and, in JSON mode, a last `stats` object.
    pub fn summary(&mut self) {
        let mut total = ProbeStats::default();
        eprintln!("wprobe: summary ({} probes)", self.probes.len());
        eprintln!(
            "  {:<40} {:>9} {:>8} {:>9} {:>9} {:>9} {:>7} {:>6} {:>6} {:>8}",
            "probe",
            "hits",
            "ignored",
            "runs",
            "records",
            "bytes",
            "dropped",
            "fuel",
            "traps",
            "uncaught"
        );
        for p in &self.probes {
            let s = &p.stats;
            eprintln!(
                "  {:<40} {:>9} {:>8} {:>9} {:>9} {:>9} {:>7} {:>6} {:>6} {:>8}",
                p.label,
                s.hits,
                s.ignored,
                s.runs,
                s.records,
                s.bytes,
                s.dropped,
                s.fuel_exhausted,
                s.traps,
                s.uncaught
            );
            total.hits += s.hits;
            total.ignored += s.ignored;
            total.runs += s.runs;
            total.records += s.records;
            total.bytes += s.bytes;
            total.fuel_exhausted += s.fuel_exhausted;
            total.traps += s.traps;
            total.uncaught += s.uncaught;
        }
        if self.opts.format == Format::Json {
            let mut line = String::from("{\"kind\":\"stats\",\"probes\":[");
            for (i, p) in self.probes.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                line.push_str("{\"probe\":");
                format::json_string(&mut line, p.label.as_bytes());
                let s = &p.stats;
                line.push_str(&format!(
                    ",\"hits\":{},\"ignored\":{},\"runs\":{},\"records\":{},\"bytes\":{},\"dropped\":{},\"fuel_exhausted\":{},\"traps\":{},\"uncaught\":{}}}",
                    s.hits, s.ignored, s.runs, s.records, s.bytes, s.dropped, s.fuel_exhausted, s.traps, s.uncaught
                ));
            }
            line.push_str(&format!(
                "],\"hits\":{},\"runs\":{},\"records\":{},\"bytes\":{},\"dropped\":0,\"fuel_exhausted\":{},\"traps\":{},\"uncaught\":{}}}\n",
                total.hits, total.runs, total.records, total.bytes, total.fuel_exhausted, total.traps, total.uncaught
            ));
            let _ = self.out.write_all(line.as_bytes());
            let _ = self.out.flush();
        }
    }
}
