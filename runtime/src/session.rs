//! `wprobe run`: load programs, arm their probes in real processes, run
//! the handler at every hit, print what it logged, and leave the traced
//! program as it was. Per hit: no allocation once buffers are warm, no
//! `/proc` reads but the lazy CPU number (ptrace), no symbol lookups
//! (addresses and biases are resolved when a process or library appears).
//!
//! The handler, statistics and output part is transport-agnostic: both
//! transports swap their hit into the store's [`RunEnv`] and call the same
//! per-hit core (`run_hit`), so ignore/maxhits/remove, group/type
//! selection, record formatting, the summary and the JSON stats behave the
//! same under `ptrace` and `perf`. What differs is arming and what a
//! handler's outcome can do to the target (`exit 1`/`exit 3` need a stopped
//! target: under perf they are counted and reported once).

use crate::format::{self, Format, RecordView};
use crate::handlers::{RunOutcome, Runner};
use crate::load::LoadedModule;
use crate::procmaps::{self, Mapping};
use crate::resolve::{Located, ResolveError, Resolver};
use crate::sink::RecordKind;
pub use crate::transport::RunEnv;
use crate::transport::perf::{PerfEvent, PerfHit, PerfId, PerfProbe, PerfTracer};
use crate::transport::ptrace::{Action, BpId, Event, ExitStatus, Hit, Tracer, WpId};
use hostabi::Outcome;
use hostabi::env::HitEnv;
use hostabi::manifest::{Manifest, ProbeKind, Trigger};
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::AtomicBool;

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
    /// Hits whose sample the kernel dropped (perf ring buffer full;
    /// `PERF_RECORD_LOST`). Always 0 under ptrace, where the thread waits
    /// for the handler.
    pub dropped: u64,
}

struct ProbeRt {
    prog: usize,
    index: usize,
    label: String,
    enabled: bool,
    armed: Vec<(i32, Armed)>,
    /// Armed in some process at some time.
    ever_armed: bool,
    stats: ProbeStats,
    /// Perf uprobes: the probe's link-time address; the sample's IP minus
    /// it is the module's load bias in whichever process hit it.
    link: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Armed {
    Bp(BpId),
    Wp(WpId),
    Perf(PerfId),
}

/// The x86-64 debug registers usable for watchpoints (DR0–DR3).
pub const MAX_WATCHPOINTS: usize = 4;

/// The running session.
pub struct Session {
    runner: Runner<RunEnv>,
    manifests: Vec<Manifest>,
    probes: Vec<ProbeRt>,
    by_bp: HashMap<BpId, usize>,
    by_wp: HashMap<WpId, usize>,
    bias: HashMap<(usize, i32), u64>,
    /// First bias seen per program: used for processes the perf transport
    /// sees only through samples (fork children share the parent's layout).
    bias_default: HashMap<usize, u64>,
    /// Programs importing a writing function: (label, import).
    writers: Vec<(String, String)>,
    /// Whether any program imports `read_mem` or `read_str`.
    reads_memory: bool,
    /// Lost samples the kernel did not attribute to a known probe.
    dropped_unattributed: u64,
    /// `exit 1` / `exit 3` runs that the perf transport cannot honour.
    unhonoured: [u64; 2],
    resolver: Resolver,
    opts: RunOptions,
    out: crate::output::RecordOut,
    line: String,
    seq: u64,
    /// Warnings printed at arming time (also for tests).
    pub warnings: Vec<String>,
    main_status: Option<ExitStatus>,
    /// Time spent arming (resolving and inserting probes), all calls.
    arm_time: std::time::Duration,
    /// Time spent disarming at the end of the run (restoring bytes and
    /// detaching; closing events and removing uprobe definitions).
    disarm_time: std::time::Duration,
    /// Hits recorded for `wprobe bench -- CMD` (ptrace only).
    capture: Option<Capture>,
    /// Fault injection for the clean-failure tests (debug builds only):
    /// panic at this ptrace hit (`WPROBE_PANIC_AT_HIT=N`).
    panic_at_hit: Option<u64>,
    ptrace_hits: u64,
    /// Processes handed off to a debugger (`exit 1`).
    handed_off: Vec<i32>,
    /// One-liner support (`begin`/`end`/`interval` probes, output events,
    /// maps printed at exit): see the block at the end of this file.
    bt: BtState,
}

/// The first hit of each probe, recorded as a synthetic environment.
struct Capture {
    hits: Vec<Option<rpn2wasm::model::ModelEnv>>,
    done: std::sync::Arc<AtomicBool>,
}

/// Largest mapping copied whole into a captured hit.
const CAPTURE_MAPPING_MAX: u64 = 256 << 10;
/// Bytes of stack copied above the stack pointer (and the red zone below it).
const CAPTURE_STACK_BYTES: u64 = 64 << 10;
/// Bytes copied around each register value that points into readable memory.
const CAPTURE_AROUND_POINTER: u64 = 8 << 10;
/// Total budget of a captured memory image.
const CAPTURE_TOTAL_MAX: u64 = 64 << 20;

/// Copies what a handler can see at `hit` into a synthetic environment:
/// every register, the thread's identity, and a memory image of the stack
/// around the stack pointer, of memory around every register that points
/// into a readable mapping, and of every readable mapping of at most
/// 256 KiB (data segments, small heaps), within a 64 MiB budget that is
/// spent in that order (a piece that no longer fits is left out whole; a
/// small mapping partly copied as a pointer's surroundings may thus be
/// partly present).
fn capture_hit(hit: &mut Hit, maps: &[Mapping], bias: u64) -> rpn2wasm::model::ModelEnv {
    use hostabi::regs;
    let mut env = rpn2wasm::model::ModelEnv::new();
    let mut pointers = Vec::new();
    for r in regs::REGS {
        if r.is_alias() || r.id == regs::CPUID {
            continue;
        }
        for part in 0..r.parts() {
            if let Some(v) = hit.read_reg(r.id, part) {
                env.set_reg_part(r.id, part, v);
                pointers.push(v);
            }
        }
    }
    env.tid = hit.tid();
    env.pid = hit.pid();
    env.cpu = hit.cpu();
    env.thread_pointer = hit.thread_pointer();
    env.load_bias = bias;
    env.now_ns = hit.now_ns();
    let sp = hit.read_reg(regs::RSP, 0).unwrap_or(0);
    // In order of importance, so that a process with more readable memory
    // than the budget still gives the handler its stack and what its
    // registers point to: the stack, then around each pointer, then whole
    // small mappings.
    let stack = vec![(
        sp.saturating_sub(256),
        sp.saturating_add(CAPTURE_STACK_BYTES),
    )];
    let around = pointers
        .iter()
        .map(|p| {
            let page = p & !0xfff;
            (
                page.saturating_sub(CAPTURE_AROUND_POINTER / 2),
                page.saturating_add(CAPTURE_AROUND_POINTER),
            )
        })
        .collect();
    let small = maps
        .iter()
        .filter(|m| m.read && m.end - m.start <= CAPTURE_MAPPING_MAX)
        .map(|m| (m.start, m.end))
        .collect();
    let mut taken: Vec<(u64, u64)> = Vec::new();
    let mut total = 0;
    for class in [stack, around, small] {
        for (a, b) in readable_parts(class, maps) {
            for (a, b) in uncovered(a, b, &taken) {
                if total + (b - a) > CAPTURE_TOTAL_MAX {
                    continue;
                }
                let mut bytes = vec![0u8; (b - a) as usize];
                let n = hit.read_mem(a, &mut bytes);
                bytes.truncate(n);
                if !bytes.is_empty() {
                    total += bytes.len() as u64;
                    taken.push((a, a + bytes.len() as u64));
                    let writable = maps.iter().any(|m| m.write && m.start <= a && a < m.end);
                    env.map(a, bytes, true, writable);
                }
            }
        }
        taken = merge(taken);
    }
    env
}

/// `ranges` clipped to the readable mappings, sorted and merged.
fn readable_parts(ranges: Vec<(u64, u64)>, maps: &[Mapping]) -> Vec<(u64, u64)> {
    let mut clipped = Vec::new();
    for (a, b) in ranges {
        for m in maps.iter().filter(|m| m.read && m.start < b && a < m.end) {
            clipped.push((a.max(m.start), b.min(m.end)));
        }
    }
    merge(clipped)
}

/// Sorts ranges and merges those that overlap. Ranges that only touch stay
/// apart, so that adjacent mappings are budgeted one by one.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in ranges {
        match merged.last_mut() {
            Some(last) if a < last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// The parts of `[a, b)` outside the sorted, disjoint ranges of `taken`.
fn uncovered(a: u64, b: u64, taken: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut from = a;
    for &(x, y) in taken {
        if y <= from || x >= b {
            continue;
        }
        if x > from {
            out.push((from, x));
        }
        from = from.max(y);
    }
    if from < b {
        out.push((from, b));
    }
    out
}

/// How a transport arms one probe: `(probe index, spec, run-time address, maps)`.
type InsertFn<'a> =
    dyn FnMut(usize, &hostabi::manifest::ProbeSpec, u64, &[Mapping]) -> Result<Armed, String> + 'a;

fn watch_kind(k: ProbeKind) -> crate::arch::WatchKind {
    match k {
        ProbeKind::WatchExec => crate::arch::WatchKind::Exec,
        ProbeKind::WatchWrite => crate::arch::WatchKind::Write,
        _ => crate::arch::WatchKind::ReadWrite,
    }
}

/// The x86-64 rules for a debug-register range (the same for both
/// transports): length 1, 2, 4 or 8, start aligned to the length, `x` of
/// length 1. The message names the address, the length and the rule.
pub fn check_watchpoint(addr: u64, len: u8, kind: crate::arch::WatchKind) -> Result<(), String> {
    let reason = if !matches!(len, 1 | 2 | 4 | 8) {
        "length must be 1, 2, 4 or 8"
    } else if !addr.is_multiple_of(u64::from(len)) {
        "address must be a multiple of the length"
    } else if kind == crate::arch::WatchKind::Exec && len != 1 {
        "execute watchpoints have length 1"
    } else {
        return Ok(());
    };
    Err(crate::transport::ptrace::ArmError::BadWatchpoint { addr, len, reason }.to_string())
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
        out: Box<dyn Write + Send>,
    ) -> anyhow::Result<Session> {
        let gvars = programs
            .iter()
            .map(|p| p.module.manifest.gvars as usize)
            .max()
            .unwrap_or(0);
        let env = RunEnv {
            hit: Default::default(),
            gvars: vec![0; gvars],
        };
        let mut writers = Vec::new();
        let reads_memory = programs.iter().any(|p| {
            p.module.module.imports().any(|i| {
                i.module() == hostabi::IMPORT_MODULE && matches!(i.name(), "read_mem" | "read_str")
            })
        });
        for p in &programs {
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
        let mut runner = Runner::new(engine, env)?;
        let mut bt = BtState {
            events: programs.iter().map(|p| p.module.events.clone()).collect(),
            ..BtState::default()
        };
        let mut probes = Vec::new();
        let mut manifests = Vec::new();
        for (pi, p) in programs.iter().enumerate() {
            runner.add(&p.module, opts.fuel)?;
            let m = &p.module.manifest;
            for i in 0..m.probes.len() {
                if !selected(m, i, &opts) {
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
                let loc = m.probes[i].location.render();
                probes.push(ProbeRt {
                    prog: pi,
                    index: i,
                    label: format!("{}:{}", p.label, loc),
                    enabled: true,
                    armed: Vec::new(),
                    ever_armed: false,
                    stats: ProbeStats::default(),
                    link: None,
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
            bias_default: HashMap::new(),
            writers,
            reads_memory,
            dropped_unattributed: 0,
            unhonoured: [0; 2],
            resolver: Resolver::default(),
            opts,
            out: crate::output::RecordOut::new(out),
            line: String::with_capacity(4096),
            seq: 0,
            warnings: Vec::new(),
            main_status: None,
            arm_time: std::time::Duration::ZERO,
            disarm_time: std::time::Duration::ZERO,
            capture: None,
            panic_at_hit: if cfg!(debug_assertions) {
                std::env::var("WPROBE_PANIC_AT_HIT")
                    .ok()
                    .and_then(|v| v.parse().ok())
            } else {
                None
            },
            ptrace_hits: 0,
            handed_off: Vec::new(),
            bt,
        })
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
            crate::output::RecordOut::new(Box::new(std::io::sink())),
        );
        self.out = out.immediate(immediate).stop_on_failure(stop);
    }

    /// Records that could not be written, and why (after the run).
    pub fn records_lost(&self) -> Option<(u64, String)> {
        self.out.lost()
    }

    /// Number of probes selected.
    pub fn probe_count(&self) -> usize {
        self.probes.len()
    }

    /// Checks, before anything is launched, what no transport could arm:
    /// more watchpoint probes than debug registers, and (under perf)
    /// programs that write registers or memory.
    pub fn check(&self, perf: bool) -> Result<(), String> {
        if let Some(label) = self
            .probes
            .iter()
            .find(|p| self.manifests[p.prog].probes[p.index].ret)
            .map(|p| p.label.clone())
        {
            return Err(format!(
                "probe {label} is a return probe (`return yes`: uretprobe, r: event), and this \
                 wprobe has no return-probe mechanism yet; probe the function's entry instead"
            ));
        }
        let watch: Vec<&str> = self
            .probes
            .iter()
            .filter(|p| self.manifests[p.prog].probes[p.index].kind != ProbeKind::Breakpoint)
            .map(|p| p.label.as_str())
            .collect();
        if watch.len() > MAX_WATCHPOINTS {
            return Err(format!(
                "debug register unavailable: {} watchpoint probes selected ({}), but x86-64 has \
                 {MAX_WATCHPOINTS} debug registers (DR0-DR3), so at most {MAX_WATCHPOINTS} \
                 watchpoints per run; select fewer with --group/--type",
                watch.len(),
                watch.join(", ")
            ));
        }
        if perf && let Some((label, import)) = self.writers.first() {
            return Err(format!(
                "program `{label}` imports `{import}`: handlers that write registers or memory \
                 cannot run under --transport perf (the target does not stop for the handler); \
                 use --transport ptrace"
            ));
        }
        Ok(())
    }

    /// Arms every enabled probe not yet armed in `pid`; returns how many are armed there.
    pub fn arm(&mut self, tracer: &mut Tracer, pid: i32, report: bool) -> usize {
        let t0 = std::time::Instant::now();
        let maps = tracer.maps(pid).to_vec();
        let verify = self.opts.verify_opcodes;
        let n = self.arm_with(
            pid,
            &maps,
            report,
            &mut |_, spec, addr, _| match spec.kind {
                ProbeKind::Breakpoint => tracer
                    .insert_breakpoint(pid, addr, if verify { spec.opcode } else { None })
                    .map(Armed::Bp)
                    .map_err(|e| e.to_string()),
                k => tracer
                    .insert_watchpoint(pid, addr, spec.length, watch_kind(k))
                    .map(Armed::Wp)
                    .map_err(|e| e.to_string()),
            },
        );
        self.arm_time += t0.elapsed();
        n
    }

    /// Arms every enabled probe not yet armed in `pid` as perf events
    /// (uprobes and hardware breakpoints); returns how many are armed.
    pub fn arm_perf(&mut self, perf: &mut PerfTracer, pid: i32, report: bool) -> usize {
        let t0 = std::time::Instant::now();
        let n = self.arm_perf_in(perf, pid, report);
        self.arm_time += t0.elapsed();
        n
    }

    fn arm_perf_in(&mut self, perf: &mut PerfTracer, pid: i32, report: bool) -> usize {
        let maps = match procmaps::read(pid) {
            Ok(m) => m,
            Err(e) => {
                self.warn(report, format!("process {pid}: {e}"));
                return 0;
            }
        };
        let verify = self.opts.verify_opcodes;
        self.arm_with(pid, &maps, report, &mut |pi, spec, addr, maps| {
            let probe = match spec.kind {
                ProbeKind::Breakpoint => {
                    let m = procmaps::find(maps, addr)
                        .filter(|m| m.exec && m.is_file())
                        .ok_or_else(|| {
                            format!("address {addr:#x} is not in an executable file mapping of process {pid}")
                        })?;
                    let offset = addr - m.start + m.offset;
                    if verify && let Some(op) = spec.opcode {
                        // The file's byte: a uprobe is a place in a file, and
                        // live memory may already hold the kernel's int3 of
                        // another probe at the same place.
                        let mut b = [0u8];
                        let read = std::fs::File::open(&m.path)
                            .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, offset))
                            .is_ok()
                            || crate::transport::perf::read_live(pid, addr, &mut b) == 1;
                        if read && b[0] != op {
                            return Err(format!(
                                "opcode mismatch at {addr:#x}: expected {op:#04x}, found {:#04x}",
                                b[0]
                            ));
                        }
                    }
                    PerfProbe::Uprobe {
                        path: m.path.clone(),
                        offset,
                    }
                }
                k => {
                    check_watchpoint(addr, spec.length, watch_kind(k))?;
                    PerfProbe::Watch {
                        addr,
                        len: spec.length,
                        kind: watch_kind(k),
                    }
                }
            };
            perf.insert(&probe, pi)
                .map(Armed::Perf)
                .map_err(|e| e.to_string())
        })
    }

    /// Arms the breakpoint probes still pending (their module was not mapped
    /// at start) as uprobes on the module's file, found by path, or by base
    /// name in `dirs`: processes that inherit the events (threads; forked
    /// children with `-f`) hit them once they map the file, even through an
    /// exec. Returns how many were armed.
    pub fn arm_perf_by_file(
        &mut self,
        perf: &mut PerfTracer,
        pid: i32,
        dirs: &[std::path::PathBuf],
        report: bool,
    ) -> usize {
        let t0 = std::time::Instant::now();
        let mut armed = 0;
        for pi in 0..self.probes.len() {
            let p = &self.probes[pi];
            let (prog, index) = (p.prog, p.index);
            let spec = &self.manifests[prog].probes[index];
            if !p.enabled || !p.armed.is_empty() || spec.kind != ProbeKind::Breakpoint {
                continue;
            }
            let module = spec.module.as_ref().unwrap_or(&self.manifests[prog].module);
            let file = if module.contains('/') {
                Some(std::path::PathBuf::from(module))
            } else {
                dirs.iter().map(|d| d.join(module)).find(|f| f.is_file())
            };
            let Some(file) = file else { continue };
            let file = procmaps::canonical(&file);
            let res = self
                .resolver
                .elf(&file)
                .map_err(|e| e.to_string())
                .and_then(|elf| {
                    let link = crate::resolve::link_value(spec, &elf).map_err(|e| e.to_string())?;
                    let off = elf
                        .file_offset(link)
                        .filter(|_| elf.is_exec_vaddr(link))
                        .ok_or_else(|| {
                            format!(
                                "invalid offset: 0x{link:x} is not in an executable segment of {}",
                                file.display()
                            )
                        })?;
                    if self.opts.verify_opcodes
                        && let Some(op) = spec.opcode
                        && let Some(found) = elf.first_byte(link)
                        && found != op
                    {
                        return Err(format!(
                            "opcode mismatch at {link:#x}: expected {op:#04x}, found {found:#04x}"
                        ));
                    }
                    if self.opts.verify_opcodes && spec.opcode.is_none() {
                        wprobe_elf::disasm::check_boundary(&elf, link)
                            .map_err(|e| e.to_string())?;
                    }
                    let probe = PerfProbe::Uprobe {
                        path: file.to_string_lossy().into_owned(),
                        offset: off,
                    };
                    let id = perf.insert(&probe, pi).map_err(|e| e.to_string())?;
                    Ok((link, id))
                });
            match res {
                Ok((link, id)) => {
                    self.probes[pi].link = Some(link);
                    self.probes[pi].armed.push((pid, Armed::Perf(id)));
                    self.probes[pi].ever_armed = true;
                    armed += 1;
                    let msg = format!(
                        "probe {}: module not mapped at start; armed on the file {}",
                        self.probes[pi].label,
                        file.display()
                    );
                    if report {
                        crate::elog!("wprobe: {msg}");
                    }
                }
                Err(e) => {
                    let msg = format!("probe {} not applied: {e}", self.probes[pi].label);
                    self.warn(report, msg);
                    self.probes[pi].enabled = false;
                }
            }
        }
        self.arm_time += t0.elapsed();
        armed
    }

    /// Resolution and bookkeeping shared by both transports; `insert` arms
    /// one probe `(index, spec, address, maps)`.
    fn arm_with(
        &mut self,
        pid: i32,
        maps: &[Mapping],
        report: bool,
        insert: &mut InsertFn<'_>,
    ) -> usize {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        let mut armed = 0;
        // The module of a program is located once per call, not once per
        // probe (10,000 probes of one program: one maps scan, one bias).
        // Keyed by (program, module): a probe may name its own `module`.
        let mut located: HashMap<(usize, String), Result<Located, ResolveError>> = HashMap::new();
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
            let module = spec.module.as_ref().unwrap_or(&m.module).clone();
            let loc = located
                .entry((prog, module.clone()))
                .or_insert_with(|| self.resolver.locate(maps, &module, exe.as_deref()))
                .clone();
            let loc = match loc {
                Ok(l) => l,
                Err(ResolveError::NotMapped(_)) => {
                    if std::env::var_os("WPROBE_DEBUG").is_some() {
                        crate::elog!(
                            "wprobe: debug: {} not mapped in {pid} ({} mappings)",
                            module,
                            maps.len()
                        );
                    }
                    continue; // maybe later (dlopen)
                }
                Err(e) => {
                    let msg = format!(
                        "probe {} not applied in pid {pid}: {e}",
                        self.probes[pi].label
                    );
                    self.warn(report, msg);
                    self.probes[pi].enabled = false;
                    continue;
                }
            };
            if spec.module.is_none() {
                self.bias.insert((prog, pid), loc.bias);
                self.bias_default.entry(prog).or_insert(loc.bias);
            }
            self.bt.probe_bias.insert((pi, pid), loc.bias);
            let is_bp = spec.kind == ProbeKind::Breakpoint;
            let verify = self.opts.verify_opcodes;
            let res = crate::resolve::probe_address(spec, &loc, maps, &module)
                .map_err(|e| e.to_string())
                .and_then(|addr| {
                    if is_bp && verify && spec.opcode.is_none() {
                        // No `opcode =` to check: the address must start an
                        // instruction of its function, decoded from the file.
                        wprobe_elf::disasm::check_boundary(&loc.elf, addr.wrapping_sub(loc.bias))
                            .map_err(|e| e.to_string())?;
                    }
                    Ok((addr, insert(pi, spec, addr, maps)?))
                });
            match res {
                Ok((addr, a)) => {
                    if is_bp && matches!(a, Armed::Perf(_)) {
                        self.probes[pi].link = Some(addr.wrapping_sub(loc.bias));
                    }
                    match a {
                        Armed::Bp(id) => {
                            self.by_bp.insert(id, pi);
                        }
                        Armed::Wp(id) => {
                            self.by_wp.insert(id, pi);
                        }
                        Armed::Perf(_) => {}
                    }
                    self.probes[pi].armed.push((pid, a));
                    self.probes[pi].ever_armed = true;
                    armed += 1;
                }
                Err(e) => {
                    let msg = format!(
                        "probe {} not applied in pid {pid}: {e}",
                        self.probes[pi].label
                    );
                    self.warn(report, msg);
                    self.probes[pi].enabled = false;
                }
            }
        }
        armed
    }

    fn warn(&mut self, report: bool, msg: String) {
        if report {
            crate::elog!("wprobe: warning: {msg}");
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

    /// Disables probe `pi` and removes it from the ptrace tracer or perf transport.
    fn disable(
        &mut self,
        mut tracer: Option<&mut Tracer>,
        mut perf: Option<&mut PerfTracer>,
        pi: usize,
    ) {
        self.probes[pi].enabled = false;
        for (_, a) in std::mem::take(&mut self.probes[pi].armed) {
            match a {
                Armed::Bp(id) => {
                    if let Some(t) = tracer.as_deref_mut() {
                        let _ = t.remove_breakpoint(id);
                    }
                    self.by_bp.remove(&id);
                }
                Armed::Wp(id) => {
                    if let Some(t) = tracer.as_deref_mut() {
                        let _ = t.remove_watchpoint(id);
                    }
                    self.by_wp.remove(&id);
                }
                Armed::Perf(id) => {
                    if let Some(p) = perf.as_deref_mut() {
                        p.remove(id);
                    }
                }
            }
        }
    }

    /// The transport-agnostic part of a hit, with the hit already in the
    /// store: counts it, applies `ignore`, runs the handler, writes its
    /// records. `None` when the hit was ignored.
    fn run_hit(&mut self, pi: usize, bias_override: Option<u64>) -> Option<RunOutcome> {
        let (prog, index) = (self.probes[pi].prog, self.probes[pi].index);
        let spec_ignore = self.manifests[prog].probes[index].ignore as u64;
        let st = &mut self.probes[pi].stats;
        st.hits += 1;
        if st.ignored < spec_ignore {
            st.ignored += 1;
            return None;
        }
        let env = &mut self.runner.store.data_mut().env;
        let pid = env.pid() as i32;
        let known = self
            .bt
            .probe_bias
            .get(&(pi, pid))
            .or_else(|| self.bias.get(&(prog, pid)));
        let bias = match (bias_override, known) {
            (Some(b), _) | (None, Some(&b)) => b,
            (None, None) => self.bias_default.get(&prog).copied().unwrap_or(0),
        };
        env.hit.set_module_bias(bias);
        if self.bt.active {
            self.bt.sym.note(pid as u64);
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

    /// Whether probe `pi` has used up its `maxhits`.
    fn exhausted(&self, pi: usize) -> bool {
        let p = &self.probes[pi];
        let maxhits = self.manifests[p.prog].probes[p.index].maxhits as u64;
        // 0 means no limit, as `maxhits = 0` does in RPN (spec §6.1).
        p.enabled && maxhits != 0 && p.stats.runs >= maxhits
    }

    /// Processes handed off to a debugger by `exit 1`, in order.
    pub fn handed_off(&self) -> &[i32] {
        &self.handed_off
    }

    /// Records the first hit of each probe for `wprobe bench -- CMD`; sets
    /// `done` (which stops [`Session::run`]) once every probe has one.
    pub fn enable_capture(&mut self, done: std::sync::Arc<AtomicBool>) {
        self.capture = Some(Capture {
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

    /// Handles one ptrace hit of probe `pi`; returns what the tracer should do with the thread.
    fn hit(&mut self, tracer: &mut Tracer, pi: usize, hit: &mut Hit) -> Action {
        self.ptrace_hits += 1;
        if self.panic_at_hit == Some(self.ptrace_hits) {
            panic!("WPROBE_PANIC_AT_HIT={}: injected fault", self.ptrace_hits);
        }
        if let Some(c) = &self.capture
            && c.hits.get(pi).is_some_and(|h| h.is_none())
        {
            let pid = hit.pid() as i32;
            let bias = self
                .bias
                .get(&(self.probes[pi].prog, pid))
                .copied()
                .unwrap_or(0);
            // The mappings now, not as they were when the probes were armed:
            // what the command mapped since is part of what its handler sees.
            tracer.refresh_maps(pid);
            let maps = tracer.maps(pid).to_vec();
            let env = capture_hit(hit, &maps, bias);
            if let Some(c) = &mut self.capture {
                c.hits[pi] = Some(env);
                if c.hits.iter().all(Option::is_some) {
                    c.done.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
        std::mem::swap(self.runner.store.data_mut().env.hit.ptrace_slot(), hit);
        let out = self.run_hit(pi, None);
        std::mem::swap(self.runner.store.data_mut().env.hit.ptrace_slot(), hit);
        let Some(out) = out else {
            return Action::Continue;
        };
        let mut action = Action::Continue;
        match out {
            RunOutcome::Returned(Outcome::Remove) => self.disable(Some(tracer), None, pi),
            RunOutcome::Returned(Outcome::DebuggerHandoff) => {
                let pid = hit.pid();
                crate::elog!(
                    "wprobe: process {pid} handed off to a debugger, stopped at {:#x}: run `gdb -p {pid}`",
                    hit.address()
                );
                action = Action::HandoffToDebugger;
                self.handed_off.push(pid as i32);
            }
            RunOutcome::Returned(Outcome::CrashDump) => self.crash_dump_unavailable(pi),
            RunOutcome::Returned(Outcome::CoreDump) => {
                let pid = hit.pid() as i32;
                let others = tracer.other_threads_registers(pid, hit.tid() as i32);
                match crate::coredump::write_core(pid, hit, &others) {
                    Ok(path) => crate::elog!(
                        "wprobe: core file of process {pid} written to {}",
                        path.display()
                    ),
                    Err(e) => crate::elog!("wprobe: core file of process {pid} not written: {e:#}"),
                }
            }
            _ => {}
        }
        if self.exhausted(pi) {
            self.disable(Some(tracer), None, pi);
        }
        action
    }

    fn crash_dump_unavailable(&self, pi: usize) {
        crate::elog!(
            "wprobe: probe {}: exit 2 (system crash dump) is unavailable in user space",
            self.probes[pi].label
        );
    }

    /// Handles one perf sample of probe `pi`. Samples that arrive after the
    /// probe was disabled (maxhits, remove: the kernel wrote them before the
    /// event was switched off) are not hits of an enabled probe: ignored, as
    /// ptrace would never have seen them.
    fn perf_hit(&mut self, perf: &mut PerfTracer, pi: usize, hit: &mut PerfHit) {
        if !self.probes[pi].enabled {
            return;
        }
        let bias = self.probes[pi].link.map(|l| hit.ip().wrapping_sub(l));
        std::mem::swap(self.runner.store.data_mut().env.hit.perf_slot(), hit);
        let out = self.run_hit(pi, bias);
        std::mem::swap(self.runner.store.data_mut().env.hit.perf_slot(), hit);
        match out {
            Some(RunOutcome::Returned(Outcome::Remove)) => self.disable(None, Some(perf), pi),
            Some(RunOutcome::Returned(o @ (Outcome::DebuggerHandoff | Outcome::CoreDump))) => {
                let (k, what) = if o == Outcome::DebuggerHandoff {
                    (0, "exit 1 (debugger hand-off)")
                } else {
                    (1, "exit 3 (core dump)")
                };
                self.unhonoured[k] += 1;
                if self.unhonoured[k] == 1 {
                    crate::elog!(
                        "wprobe: warning: probe {}: {what} needs a stopped target and cannot be \
                         honoured under --transport perf; counted, the process runs on (use \
                         --transport ptrace)",
                        self.probes[pi].label
                    );
                }
            }
            Some(RunOutcome::Returned(Outcome::CrashDump)) => self.crash_dump_unavailable(pi),
            _ => {}
        }
        if self.exhausted(pi) {
            self.disable(None, Some(perf), pi);
        }
    }

    fn write_records(&mut self, pi: usize) {
        let data = self.runner.store.data();
        if data.sink.records.is_empty() {
            return;
        }
        let hit = &data.env;
        let cpu = hit.cpu() as u32;
        self.line.clear();
        // Records formatted into `line` and not yet handed to the output.
        let mut in_line = 0u64;
        for r in &data.sink.records {
            if r.kind == RecordKind::Event {
                // One-liner output, formatted as bpftrace does.
                let prog = self.probes[pi].prog;
                let maps = data.services.maps.get(prog).and_then(|m| m.as_ref());
                let mo = maps.map(|m| crate::btout::MapOutput {
                    decls: &m.decls,
                    view: m.view(),
                });
                let ev = self.bt.events.get(prog).cloned().unwrap_or_default();
                let mut bytes = std::mem::take(&mut self.bt.buf);
                crate::btout::event(
                    &mut bytes,
                    self.bt.mode,
                    crate::btout::EventRecord {
                        kind: r.major,
                        id: r.minor,
                        data: data.sink.data(r),
                    },
                    &ev,
                    mo.as_ref(),
                    &mut self.bt.sym,
                );
                // Bytes, not text: printf output may be any bytes.
                self.out.write(self.line.as_bytes(), in_line);
                self.line.clear();
                in_line = 0;
                self.out.write(&bytes, 1);
                bytes.clear();
                self.bt.buf = bytes;
                self.probes[pi].stats.records += 1;
                continue;
            }
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
            in_line += 1;
            self.seq += 1;
            self.probes[pi].stats.records += 1;
            self.probes[pi].stats.bytes += r.data.len() as u64;
        }
        self.out.write(self.line.as_bytes(), in_line);
        self.runner.store.data_mut().sink.clear();
    }

    /// Runs the perf transport's event loop until the main process exits or
    /// `stop` is set; returns the command's exit status when it was launched.
    pub fn run_perf(
        &mut self,
        perf: &mut PerfTracer,
        stop: &AtomicBool,
    ) -> anyhow::Result<Option<ExitStatus>> {
        let mut on_event = |p: &mut PerfTracer, ev: PerfEvent<'_>| match ev {
            PerfEvent::Sample { tag, hit } => self.perf_hit(p, tag, hit),
            PerfEvent::Tick => self.run_intervals(),
            PerfEvent::Lost { tag, count } => match self.probes.get_mut(tag) {
                Some(pr) => pr.stats.dropped += count,
                None => self.dropped_unattributed += count,
            },
        };
        let status = perf.run(stop, &mut on_event)?;
        let t0 = std::time::Instant::now();
        perf.close();
        self.disarm_time = t0.elapsed();
        self.out.flush();
        Ok(status)
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
                    for (k, id) in bp.iter().enumerate() {
                        if let Some(&pi) = self.by_bp.get(id) {
                            // A forked child carries its parent's breakpoint
                            // ids and the ones armed for it: one run per probe.
                            if bp[..k].iter().any(|j| self.by_bp.get(j) == Some(&pi)) {
                                continue;
                            }
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
                Event::Tick => {
                    self.run_intervals();
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
        // What is still traced (attach mode stopped by a signal detaches in
        // `run`; a command that exited leaves nothing to restore).
        let t0 = std::time::Instant::now();
        let res = tracer.detach_all();
        self.disarm_time = t0.elapsed() + tracer.summary().detach_time;
        res?;
        self.out.flush();
        Ok(self.main_status)
    }

    /// Lost perf samples not attributed to one probe.
    pub fn dropped_unattributed(&self) -> u64 {
        self.dropped_unattributed
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
        if self.bt.active && !self.abnormal() {
            return;
        }
        use std::fmt::Write as _;
        // One write for the whole summary (65,535 probes once took 127 s
        // to print row by row).
        let mut err = String::with_capacity(128 * (self.probes.len() + 4));
        let mut total = ProbeStats::default();
        let _ = writeln!(err, "wprobe: summary ({} probes)", self.probes.len());
        let _ = writeln!(
            err,
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
            let _ = writeln!(
                err,
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
            total.dropped += s.dropped;
            total.fuel_exhausted += s.fuel_exhausted;
            total.traps += s.traps;
            total.uncaught += s.uncaught;
        }
        total.dropped += self.dropped_unattributed;
        if std::env::var_os("WPROBE_DEBUG").is_some() {
            // Not in the JSON stats object, which stays deterministic
            // (tests compare it across runs and transports).
            let _ = writeln!(
                err,
                "wprobe: debug: {} probes: armed in {:.3} ms, disarmed in {:.3} ms",
                self.probes.len(),
                self.arm_time.as_secs_f64() * 1e3,
                self.disarm_time.as_secs_f64() * 1e3
            );
        }
        // A probe whose module no traced process ever mapped had no chance
        // to fire: 0 hits would otherwise look like "never called".
        for p in self.probes.iter().filter(|p| p.enabled && !p.ever_armed) {
            let _ = writeln!(
                err,
                "wprobe: warning: probe {} was never armed: no traced process mapped module `{}`",
                p.label, self.manifests[p.prog].module
            );
        }
        if self.dropped_unattributed > 0 {
            let _ = writeln!(
                err,
                "  {} samples lost by the kernel (ring buffer full) could not be attributed to a probe",
                self.dropped_unattributed
            );
        }
        for (n, what) in self
            .unhonoured
            .iter()
            .zip(["exit 1 (debugger hand-off)", "exit 3 (core dump)"])
        {
            if *n > 0 {
                let _ = writeln!(
                    err,
                    "  {what} not honoured under --transport perf: {n} run(s)"
                );
            }
        }
        {
            use std::io::Write as _;
            let _ = std::io::stderr().lock().write_all(err.as_bytes());
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
                "],\"hits\":{},\"runs\":{},\"records\":{},\"bytes\":{},\"dropped\":{},\"fuel_exhausted\":{},\"traps\":{},\"uncaught\":{}}}\n",
                total.hits, total.runs, total.records, total.bytes, total.dropped, total.fuel_exhausted, total.traps, total.uncaught
            ));
            self.out.write(line.as_bytes(), 0);
            self.out.flush();
        }
    }
}

// --- One-liner support (programs of bt2wasm and any module using the
// service imports): `begin`/`end`/`interval` probes, output events
// formatted as bpftrace formats them, `exit()` (Outcome::Stop), and the
// maps printed at exit. Kept in one block, apart from the transport code. ---

/// A probe fired by the run's life rather than a location.
#[derive(Clone, Copy, Debug)]
struct Special {
    prog: usize,
    index: usize,
    trigger: Trigger,
    /// Interval probes: when they fire next.
    next: Option<std::time::Instant>,
}

/// The one-liner state of a session.
struct BtState {
    /// One-liner output and quiet summary (set by [`Session::set_oneliner`]).
    active: bool,
    mode: crate::btout::Mode,
    specials: Vec<Special>,
    events: Vec<std::sync::Arc<hostabi::event::Events>>,
    sym: crate::symbolize::Symbolizer,
    buf: Vec<u8>,
    stop: Option<std::sync::Arc<AtomicBool>>,
    /// `exit()` was called.
    exited: bool,
    /// Load bias of each probe's own module, by (probe, pid): a program's
    /// probes may be in several modules (`load_bias` is the probe's).
    probe_bias: HashMap<(usize, i32), u64>,
}

impl Default for BtState {
    fn default() -> BtState {
        BtState {
            active: false,
            mode: crate::btout::Mode::Text,
            specials: Vec::new(),
            events: Vec::new(),
            sym: Default::default(),
            buf: Vec::new(),
            stop: None,
            exited: false,
            probe_bias: HashMap::new(),
        }
    }
}

impl Session {
    /// Turns on one-liner behaviour: bpftrace's output (`json` for `-f
    /// json`), no summary unless something went wrong, `exit()` setting
    /// `stop`, `cpid` = `child_pid`.
    pub fn set_oneliner(&mut self, json: bool, stop: std::sync::Arc<AtomicBool>, child_pid: u64) {
        self.bt.active = true;
        self.bt.mode = if json {
            crate::btout::Mode::Json
        } else {
            crate::btout::Mode::Text
        };
        self.bt.stop = Some(stop);
        self.runner.store.data_mut().services.child_pid = child_pid;
    }

    /// The launched command's pid (`cpid`).
    pub fn set_child_pid(&mut self, pid: u64) {
        self.runner.store.data_mut().services.child_pid = pid;
    }

    /// Whether `exit()` ended the run.
    pub fn exited(&self) -> bool {
        self.bt.exited
    }

    fn request_stop(&mut self) {
        self.bt.exited = true;
        if let Some(s) = &self.bt.stop {
            s.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Probes of the run, special ones included (bpftrace's "Attaching N probes").
    pub fn probe_total(&self) -> usize {
        self.probes.len() + self.bt.specials.len()
    }

    /// The shortest interval period, if any (the transport's tick).
    pub fn tick_period(&self) -> Option<std::time::Duration> {
        self.bt
            .specials
            .iter()
            .filter_map(|s| match s.trigger {
                Trigger::Interval { period_ns } => Some(period_ns),
                _ => None,
            })
            .reduce(gcd)
            .map(|ns| std::time::Duration::from_nanos(ns.max(1_000_000)))
    }

    /// Writes `text` to the output (not records: maps, the attach line).
    pub fn write_out(&mut self, text: &[u8]) {
        self.out.write(text, 0);
    }

    /// Prints bpftrace's "Attaching N probes..." line, then runs the
    /// `begin` probes and schedules the interval probes.
    pub fn begin(&mut self) {
        let n = self.probe_total();
        let line = match self.bt.mode {
            crate::btout::Mode::Text => {
                format!("Attaching {n} probe{}...\n", if n == 1 { "" } else { "s" })
            }
            crate::btout::Mode::Json => {
                format!("{{\"type\": \"attached_probes\", \"data\": {{\"probes\": {n}}}}}\n")
            }
        };
        self.write_out(line.as_bytes());
        let now = std::time::Instant::now();
        for s in &mut self.bt.specials {
            if let Trigger::Interval { period_ns } = s.trigger {
                s.next = Some(now + std::time::Duration::from_nanos(period_ns));
            }
        }
        self.run_specials(|t| t == Trigger::Begin);
        self.out.flush();
    }

    /// Runs the `end` probes, then prints every map (bpftrace's exit output)
    /// and reports maps that dropped updates.
    pub fn end(&mut self) {
        self.run_specials(|t| t == Trigger::End);
        self.write_out(b"\n\n");
        let mode = self.bt.mode;
        let data = self.runner.store.data();
        let mut out = Vec::new();
        let mut warnings = Vec::new();
        for region in data.services.maps.iter().flatten() {
            let mo = crate::btout::MapOutput {
                decls: &region.decls,
                view: region.view(),
            };
            let mut order: Vec<usize> = (0..region.decls.len()).collect();
            order.sort_by(|a, b| region.decls[*a].name.cmp(&region.decls[*b].name));
            for i in order {
                crate::btout::print_map(&mut out, mode, &mo, i as u32, 0, 0, &mut self.bt.sym);
                if let Ok(st) = region.view().stats(i as u32)
                    && st.dropped > 0
                {
                    warnings.push(format!(
                        "wprobe: warning: map {}: {} update(s) dropped: the map is full ({} keys; \
                         set BPFTRACE_MAP_KEYS_MAX to allow more)",
                        region.decls[i].name, st.dropped, st.capacity
                    ));
                }
            }
        }
        self.out.write(&out, 0);
        self.out.flush();
        for w in warnings {
            crate::elog!("{w}");
        }
    }

    /// Runs every special probe whose trigger `pick` selects.
    fn run_specials(&mut self, pick: impl Fn(Trigger) -> bool) {
        let list: Vec<Special> = self.bt.specials.clone();
        for s in list {
            if pick(s.trigger) && !(self.bt.exited && s.trigger != Trigger::End) {
                self.run_special(s.prog, s.index);
            }
        }
    }

    /// Runs the interval probes that are due (for runs without a transport).
    pub fn tick(&mut self) {
        self.run_intervals();
    }

    /// Runs the interval probes that are due.
    fn run_intervals(&mut self) {
        let now = std::time::Instant::now();
        let mut due = Vec::new();
        for s in &mut self.bt.specials {
            if let (Trigger::Interval { period_ns }, Some(next)) = (s.trigger, s.next)
                && next <= now + std::time::Duration::from_micros(500)
            {
                let p = std::time::Duration::from_nanos(period_ns);
                let mut n = next;
                while n <= now {
                    n += p;
                }
                s.next = Some(n);
                due.push((s.prog, s.index));
            }
        }
        for (prog, index) in due {
            if !self.bt.exited {
                self.run_special(prog, index);
            }
        }
        self.out.flush();
    }

    /// Runs one special probe: no hit (identity builtins describe wprobe).
    fn run_special(&mut self, prog: usize, index: usize) {
        let data = self.runner.store.data_mut();
        data.services.special = true;
        let mut empty = Default::default();
        std::mem::swap(&mut data.env.hit, &mut empty);
        let out = self.runner.run(prog, index);
        let data = self.runner.store.data_mut();
        std::mem::swap(&mut data.env.hit, &mut empty);
        data.services.special = false;
        match &out {
            RunOutcome::Returned(Outcome::Stop) => self.request_stop(),
            RunOutcome::Trapped(m) => crate::elog!("wprobe: special probe trapped: {m}"),
            RunOutcome::FuelExhausted => crate::elog!("wprobe: special probe ran out of fuel"),
            _ => {}
        }
        self.write_special_records(prog);
    }

    /// Writes the records of a special probe's run (events only).
    fn write_special_records(&mut self, prog: usize) {
        let data = self.runner.store.data();
        let maps = data.services.maps.get(prog).and_then(|m| m.as_ref());
        let mo = maps.map(|m| crate::btout::MapOutput {
            decls: &m.decls,
            view: m.view(),
        });
        let ev = self.bt.events.get(prog).cloned().unwrap_or_default();
        let mut bytes = std::mem::take(&mut self.bt.buf);
        let mut events = 0u64;
        for r in &data.sink.records {
            if r.kind == RecordKind::Event {
                events += 1;
                crate::btout::event(
                    &mut bytes,
                    self.bt.mode,
                    crate::btout::EventRecord {
                        kind: r.major,
                        id: r.minor,
                        data: data.sink.data(r),
                    },
                    &ev,
                    mo.as_ref(),
                    &mut self.bt.sym,
                );
            }
        }
        self.out.write(&bytes, events);
        bytes.clear();
        self.bt.buf = bytes;
        self.runner.store.data_mut().sink.clear();
    }

    /// Whether any probe trapped, ran out of fuel or lost samples (the
    /// one-liner summary is printed only then).
    fn abnormal(&self) -> bool {
        self.dropped_unattributed > 0
            || self.probes.iter().any(|p| {
                let s = &p.stats;
                s.traps + s.fuel_exhausted + s.uncaught + s.dropped > 0
            })
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::{merge, uncovered};

    #[test]
    fn merge_joins_overlapping_ranges_only() {
        assert_eq!(
            merge(vec![
                (30, 40),
                (0, 10),
                (10, 20),
                (35, 50),
                (60, 61),
                (5, 8)
            ]),
            [(0, 10), (10, 20), (30, 50), (60, 61)]
        );
        assert_eq!(merge(vec![]), []);
    }

    #[test]
    fn uncovered_leaves_out_what_is_taken() {
        let taken = [(10, 20), (30, 40)];
        assert_eq!(uncovered(0, 50, &taken), [(0, 10), (20, 30), (40, 50)]);
        assert_eq!(uncovered(12, 18, &taken), []);
        assert_eq!(uncovered(15, 35, &taken), [(20, 30)]);
        assert_eq!(uncovered(40, 45, &taken), [(40, 45)]);
        assert_eq!(uncovered(0, 5, &[]), [(0, 5)]);
    }
}
