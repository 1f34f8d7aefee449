//! The perf transport: breakpoint probes are uprobes defined in tracefs
//! (file + file offset) and opened as tracepoint events with
//! `perf_event_open`, so the kernel owns the breakpoint and removes it when
//! the last descriptor closes, even if wprobe is killed (see `tracefs` for
//! why not the uprobe PMU); watchpoints are `PERF_TYPE_BREAKPOINT` events. Every
//! event samples registers, a user stack snapshot, pid/tid, time and CPU
//! into one ring buffer per CPU (`inherit`, so threads created later — and
//! with `-f`, forked children — are covered); the event loop polls the
//! rings, merges them by time and hands each sample to the caller as a
//! [`PerfHit`]. The target never stops for a hit; lost samples are counted
//! (`PERF_RECORD_LOST`), never silent.
//!
//! Never writes the target's memory or registers (the launch helper's one
//! temporary `int3` at the entry point aside, removed before the command
//! runs any of its own code).

pub(crate) mod error;
mod hit;
mod launch;
mod regbits;
mod ring;
mod sample;
mod seam;
mod tasks;
mod tracefs;

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use perf_event::events::{Breakpoint, Software};
use perf_event::{Builder, Counter, ReadFormat};

use self::error::open_error;
pub use self::error::{PerfError, permission_hint};
pub use self::hit::PerfHit;
pub use self::regbits::regs_mask;
use self::ring::Ring;
pub use self::seam::INFO;
pub use crate::arch::WatchKind;
use crate::transport::ExitStatus;

/// How long the event loop sleeps in `poll` when nothing arrives (it also
/// bounds the delay before a record is printed).
const POLL_MS: i32 = 20;

/// Threads that close the events at the end of a run.
const CLOSERS: usize = 16;

/// `PERF_TYPE_TRACEPOINT`.
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// Reads live memory of `pid` (`process_vm_readv`); returns the bytes read.
pub fn read_live(pid: i32, addr: u64, buf: &mut [u8]) -> usize {
    hit::live_read(pid as u32, addr, buf)
}

/// Checks, before anything is launched, that uprobes can be defined
/// (tracefs is mounted, or is mounted now): a run with breakpoint probes
/// fails here, with the cause and its fix, rather than after the command
/// started.
pub fn check_uprobes() -> Result<(), PerfError> {
    tracefs::root().map(drop)
}

/// A probe of the perf transport (one per `insert_*` call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PerfId(pub u32);

/// What to probe.
#[derive(Clone, Debug)]
pub enum PerfProbe {
    /// A uprobe at `offset` in file `path`.
    Uprobe {
        /// The ELF file.
        path: String,
        /// File offset of the instruction.
        offset: u64,
        /// A USDT site's semaphore, by its file offset: the kernel raises
        /// it in every process that maps the file while the uprobe is
        /// registered (`ref_ctr_offset`), and lowers it when it goes.
        ref_ctr: Option<u64>,
    },
    /// A hardware watchpoint.
    Watch {
        /// Run-time address.
        addr: u64,
        /// 1, 2, 4 or 8.
        len: u8,
        /// Access kind.
        kind: WatchKind,
    },
}

struct ProbeEvents {
    key: EvKey,
    counters: Vec<Counter>,
}

/// A kernel event's key and what its samples carry.
type EventOf = (EvKey, SampleCfg);

/// What an event is for: a probe of the caller (its tag), or one of the
/// events of return probes (the entry of a probed function, a `ret` where
/// its calls return; indexes of the seam's tables). Samples of one hit are
/// delivered in this order: entries, then plain probes, then returns (a
/// function whose first instruction is its `ret` enters, then returns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EvKey {
    /// The entry of return-probed function `n`.
    Entry(usize),
    /// A probe of the caller.
    Plain(usize),
    /// Return site `n`.
    Ret(usize),
}

/// What the events of one probe sample, when not the tracer's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleCfg {
    /// Bytes of user stack (0: none).
    pub stack_bytes: u32,
    /// User registers (`sample_regs_user`; 0: none).
    pub regs_mask: u64,
}

/// What the event loop reports.
#[derive(Debug)]
pub enum PerfEvent<'a> {
    /// A probe fired; `key` is the one given at insertion.
    Sample {
        /// The event's key ([`EvKey::Plain`] with the caller's tag for
        /// [`PerfTracer::insert`]).
        key: EvKey,
        /// The sample.
        hit: &'a mut PerfHit,
    },
    /// The tick period set with [`PerfTracer::set_tick`] elapsed.
    Tick,
    /// The kernel dropped `count` samples of a probe (ring buffer full);
    /// reported once per probe, at the end of the run.
    Lost {
        /// The probe's key.
        key: EvKey,
        /// How many.
        count: u64,
    },
}

/// Options of the perf transport.
#[derive(Clone, Copy, Debug)]
pub struct PerfOptions {
    /// `-f`: forked children inherit the probes (otherwise only threads do).
    pub follow_forks: bool,
    /// Bytes of user stack copied into each sample (rounded down to a
    /// multiple of 8, at most 32 KiB): [`STACK_SNAPSHOT_BYTES`] when
    /// handlers read memory; 0 (no snapshot at all) when none can — the
    /// kernel would copy it at every hit for nothing.
    pub stack_bytes: u32,
    /// User registers sampled (`sample_regs_user`, see
    /// [`regbits::regs_mask`]): those the handlers can read, the stack
    /// pointer with a stack snapshot; 0 samples none.
    pub regs_mask: u64,
}

impl Default for PerfOptions {
    fn default() -> PerfOptions {
        PerfOptions {
            follow_forks: false,
            stack_bytes: STACK_SNAPSHOT_BYTES,
            regs_mask: regbits::REGS_MASK,
        }
    }
}

/// The default stack snapshot per sample.
pub const STACK_SNAPSHOT_BYTES: u32 = sample::STACK_SNAPSHOT_BYTES;

/// The perf transport: the target's events and their rings.
pub struct PerfTracer {
    /// Periodic ticks: the period and the next due time.
    tick: Option<(std::time::Duration, std::time::Instant)>,
    opts: PerfOptions,
    main_pid: i32,
    launched: bool,
    held: bool,
    pidfd: Option<OwnedFd>,
    tids: Vec<i32>,
    rings: Vec<Ring>,
    /// Per CPU: the ring's descriptor (every event of that CPU writes there).
    ring_fds: Vec<RawFd>,
    cpus: Vec<usize>,
    probes: HashMap<PerfId, ProbeEvents>,
    /// Per kernel event id: its key and what its samples carry.
    by_kernel_id: HashMap<u64, EventOf>,
    next_id: u32,
    hit: PerfHit,
    time_offset: u64,
    exited: Option<ExitStatus>,
    /// Lost-sample counts of removed probes: (key, count).
    lost_removed: Vec<(EvKey, u64)>,
    ring_pages: usize,
    /// Tracefs uprobe definitions (created on first use; dropped after the events).
    uprobes: Option<tracefs::Uprobes>,
    /// The samples of one hit being delivered: (event, record body).
    group: Vec<(Option<EventOf>, Vec<u8>)>,
    /// Record buffers not in use (kept to avoid allocating per hit).
    spare: Vec<Vec<u8>>,
    /// The transport seam's state (mappings read for arming).
    seam: seam::SeamState,
    /// With `-f`: the live tasks of the traced tree.
    tasks: tasks::Tasks,
    /// The main process has exited.
    main_gone: bool,
    /// The launched command is stopped at its exec (not yet run to its
    /// entry point).
    at_exec: bool,
    /// System-wide (no process named): every event is opened with pid -1
    /// on each online CPU, so a uprobe fires in every process that runs
    /// its file, started before or after the run; the run ends only when
    /// stopped.
    system: bool,
    /// System-wide: thread names from the kernel's comm and fork records.
    comms: tasks::Comms,
}

impl std::fmt::Debug for PerfTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfTracer")
            .field("main_pid", &self.main_pid)
            .field("tids", &self.tids)
            .finish()
    }
}

/// Samples the kernel could not write for this event (`PERF_FORMAT_LOST`).
fn lost_of(c: &mut Counter) -> u64 {
    c.read_full().ok().and_then(|d| d.lost()).unwrap_or(0)
}

impl PerfTracer {
    fn empty(opts: PerfOptions, pid: i32) -> PerfTracer {
        let mut hit = PerfHit::default();
        hit.rec.reserve(1 << 16);
        PerfTracer {
            opts,
            main_pid: pid,
            launched: false,
            held: false,
            pidfd: None,
            tids: Vec::new(),
            rings: Vec::new(),
            ring_fds: Vec::new(),
            cpus: ring::online_cpus(),
            probes: HashMap::new(),
            by_kernel_id: HashMap::new(),
            next_id: 1,
            hit,
            // The perf clock is CLOCK_MONOTONIC; records carry wall-clock time.
            time_offset: crate::sys::time::realtime_minus_monotonic(),
            exited: None,
            lost_removed: Vec::new(),
            ring_pages: ring::ring_pages(),
            uprobes: None,
            group: Vec::with_capacity(8),
            spare: Vec::new(),
            tick: None,
            seam: Default::default(),
            tasks: Default::default(),
            main_gone: false,
            at_exec: false,
            system: false,
            comms: Default::default(),
        }
    }

    /// Delivers [`PerfEvent::Tick`] every `period` during [`PerfTracer::run`].
    pub fn set_tick(&mut self, period: std::time::Duration) {
        self.tick = Some((period, std::time::Instant::now() + period));
    }

    /// Launches `argv`, stopped at its exec ([`PerfTracer::run_to_entry`]
    /// runs it to its entry point) until [`PerfTracer::start`].
    pub fn launch(argv: &[OsString], opts: PerfOptions) -> Result<PerfTracer, PerfError> {
        let pid = launch::launch(argv)?;
        let mut t = PerfTracer::empty(opts, pid);
        t.launched = true;
        t.held = true;
        t.at_exec = true;
        t.tids = vec![pid];
        t.pidfd = crate::sys::process::pidfd_open(pid);
        if let Err(e) = t.open_rings() {
            t.kill_launched();
            return Err(e);
        }
        Ok(t)
    }

    /// Observes a running process (all its threads); it never stops.
    pub fn attach(pid: i32, opts: PerfOptions) -> Result<PerfTracer, PerfError> {
        if pid <= 0 || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(PerfError::NoSuchProcess { pid });
        }
        // A zombie or a kernel thread has no user space to observe (being
        // traced by someone else does not matter to perf).
        match crate::proc::procinfo::untraceable(pid) {
            w @ (crate::proc::procinfo::Untraceable::Zombie
            | crate::proc::procinfo::Untraceable::KernelThread) => {
                return Err(PerfError::Untraceable {
                    reason: w.explain(pid).unwrap_or_default(),
                });
            }
            crate::proc::procinfo::Untraceable::Gone => {
                return Err(PerfError::NoSuchProcess { pid });
            }
            _ => {}
        }
        let mut t = PerfTracer::empty(opts, pid);
        t.tids = crate::transport::list_tasks(pid);
        if t.tids.is_empty() {
            return Err(PerfError::NoSuchProcess { pid });
        }
        t.pidfd = crate::sys::process::pidfd_open(pid);
        t.open_rings()?;
        Ok(t)
    }

    /// Observes the whole system: no process of its own; uprobes on a
    /// file fire in every process that runs the file's code, those started
    /// later included (`perf_event_open` with pid -1 on each online CPU,
    /// which needs CAP_PERFMON or `kernel.perf_event_paranoid` <= 0 — and
    /// uprobes root anyway). Each sample names the process that hit.
    pub fn system(opts: PerfOptions) -> Result<PerfTracer, PerfError> {
        let mut t = PerfTracer::empty(
            PerfOptions {
                // Nothing to follow: every process is observed already.
                follow_forks: false,
                ..opts
            },
            -1,
        );
        t.system = true;
        t.tids = vec![-1];
        t.open_rings()?;
        Ok(t)
    }

    /// Whether this run observes the whole system ([`PerfTracer::system`]).
    pub fn is_system(&self) -> bool {
        self.system
    }

    fn kill_launched(&mut self) {
        if self.launched {
            crate::sys::process::kill_and_reap(self.main_pid);
            self.held = false;
        }
    }

    /// One ring per CPU, owned by a dummy event on the main process.
    fn open_rings(&mut self) -> Result<(), PerfError> {
        if !self.system {
            self.tasks = tasks::Tasks::new(&self.tids);
        }
        for &cpu in &self.cpus {
            let r = if self.system {
                ring::open_system(cpu, self.ring_pages)?
            } else {
                ring::open(self.main_pid, cpu, self.opts.follow_forks, self.ring_pages)?
            };
            self.ring_fds.push(r.sampler.as_counter().as_raw_fd());
            self.rings.push(r);
        }
        Ok(())
    }

    /// Runs a launched command stopped at its exec to its entry point
    /// (its startup libraries mapped, their constructors run: the probes
    /// armed so far saw them), where it stays until [`PerfTracer::start`].
    /// Nothing to do otherwise.
    pub fn run_to_entry(&mut self) -> Result<(), PerfError> {
        if self.at_exec && self.held {
            self.at_exec = false;
            self.seam.forget_maps(self.main_pid);
            launch::run_to_entry(self.main_pid)?;
        }
        Ok(())
    }

    /// The launched or observed process.
    pub fn main_pid(&self) -> i32 {
        self.main_pid
    }

    /// Lets a launched command run (detaches the launch-time ptrace).
    pub fn start(&mut self) -> Result<(), PerfError> {
        if self.held {
            self.held = false;
            launch::detach(self.main_pid)?;
        }
        Ok(())
    }

    /// Opens the events of one probe on every task and CPU; `tag` comes back with each sample.
    pub fn insert(&mut self, probe: &PerfProbe, tag: usize) -> Result<PerfId, PerfError> {
        let cfg = SampleCfg {
            stack_bytes: self.opts.stack_bytes,
            regs_mask: self.opts.regs_mask,
        };
        self.insert_keyed(probe, EvKey::Plain(tag), cfg)
    }

    /// [`PerfTracer::insert`] with a key and sampling of the caller's choice.
    pub fn insert_keyed(
        &mut self,
        probe: &PerfProbe,
        key: EvKey,
        cfg: SampleCfg,
    ) -> Result<PerfId, PerfError> {
        let stack_bytes = cfg.stack_bytes.min(32768) & !7;
        let mut counters = Vec::with_capacity(self.tids.len() * self.cpus.len());
        let what = match probe {
            PerfProbe::Uprobe { path, offset, .. } => format!("uprobe {path}:{offset:#x}"),
            PerfProbe::Watch { addr, len, kind } => {
                format!("{kind:?} watchpoint at {addr:#x} length {len}")
            }
        };
        let tp_id = match probe {
            PerfProbe::Uprobe {
                path,
                offset,
                ref_ctr,
            } => self.uprobes()?.define(path, *offset, *ref_ctr)?,
            PerfProbe::Watch { .. } => 0,
        };
        for &tid in &self.tids {
            for (ci, &cpu) in self.cpus.iter().enumerate() {
                let mut b = match probe {
                    PerfProbe::Uprobe { .. } => {
                        // The tracefs uprobe's tracepoint (see `tracefs` for
                        // why not the uprobe PMU).
                        let mut b = Builder::new(Software::DUMMY);
                        let a = b.attrs_mut();
                        a.type_ = PERF_TYPE_TRACEPOINT;
                        a.config = tp_id;
                        b
                    }
                    PerfProbe::Watch { addr, len, kind } => Builder::new(match kind {
                        WatchKind::Exec => Breakpoint::execute(*addr),
                        WatchKind::Write => Breakpoint::write(*addr, u64::from(*len)),
                        WatchKind::ReadWrite => Breakpoint::read_write(*addr, u64::from(*len)),
                    }),
                };
                if self.system {
                    // Every process, on this CPU.
                    b.any_pid();
                } else {
                    b.observe_pid(tid);
                }
                b.one_cpu(cpu)
                    .inherit(!self.system)
                    // Sample times on CLOCK_MONOTONIC, which `time_offset`
                    // turns into wall-clock time (the default perf clock is
                    // the scheduler's, milliseconds apart after hours).
                    .clockid(perf_event::Clock::MONOTONIC)
                    .sample_period(1)
                    .sample(sample::sample_flags(stack_bytes > 0, cfg.regs_mask != 0))
                    // Exact per-event count of samples the kernel could not
                    // write (ring full), inherited events included.
                    .read_format(ReadFormat::LOST)
                    .enabled(false);
                if cfg.regs_mask != 0 {
                    b.sample_regs_user(cfg.regs_mask);
                }
                if stack_bytes > 0 {
                    b.sample_stack_user(stack_bytes);
                }
                if !self.opts.follow_forks && !self.system {
                    b.inherit_thread(true);
                }
                if matches!(probe, PerfProbe::Watch { .. }) {
                    // An address means nothing in another image.
                    b.remove_on_exec(true);
                }
                let c = b.build().map_err(|e| match open_error(what.clone(), e) {
                    PerfError::NoSuchProcess { .. } => PerfError::TraceeDied { pid: tid },
                    other => other,
                })?;
                crate::sys::process::perf_set_output(c.as_raw_fd(), self.ring_fds[ci]).map_err(
                    |e| PerfError::Sys {
                        op: "PERF_EVENT_IOC_SET_OUTPUT",
                        errno: e as i32,
                    },
                )?;
                self.by_kernel_id.insert(c.id(), (key, cfg));
                counters.push(c);
            }
        }
        for c in &mut counters {
            c.enable().map_err(|e| PerfError::Open {
                what: what.clone(),
                source: e,
            })?;
        }
        let id = PerfId(self.next_id);
        self.next_id += 1;
        self.probes.insert(id, ProbeEvents { key, counters });
        Ok(id)
    }

    fn uprobes(&mut self) -> Result<&mut tracefs::Uprobes, PerfError> {
        if self.uprobes.is_none() {
            self.uprobes = Some(tracefs::Uprobes::new()?);
        }
        Ok(self.uprobes.as_mut().expect("invariant: set just above"))
    }

    /// Disables and closes the events of a probe (samples already in the
    /// rings still arrive; the caller ignores them). Its lost-sample count
    /// is kept for [`PerfEvent::Lost`].
    pub fn remove(&mut self, id: PerfId) {
        if let Some(mut p) = self.probes.remove(&id) {
            let mut lost = 0;
            for c in &mut p.counters {
                let _ = c.disable();
                lost += lost_of(c);
                self.by_kernel_id.remove(&c.id());
            }
            if lost > 0 {
                self.lost_removed.push((p.key, lost));
            }
        }
    }

    /// Reports every probe's lost samples (once, at the end of the run).
    fn report_lost(&mut self, on_event: &mut dyn FnMut(&mut PerfTracer, PerfEvent<'_>)) {
        let mut all = std::mem::take(&mut self.lost_removed);
        for p in self.probes.values_mut() {
            let lost: u64 = p.counters.iter_mut().map(lost_of).sum();
            if lost > 0 {
                all.push((p.key, lost));
            }
        }
        all.sort_unstable();
        for (key, count) in all {
            on_event(self, PerfEvent::Lost { key, count });
        }
    }

    /// The status of the main process once it has exited (launched commands only).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exited
    }

    fn main_exited(&mut self) -> bool {
        if self.system {
            // No process of its own: the run ends when stopped.
            return false;
        }
        let Some(fd) = &self.pidfd else {
            return !std::path::Path::new(&format!("/proc/{}", self.main_pid)).exists();
        };
        let mut p = [libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if crate::sys::process::poll(&mut p, 0) == 0 || p[0].revents == 0 {
            return false;
        }
        if self.launched {
            // Our own child, a zombie now (its pidfd is readable).
            if let Some(st) = crate::sys::process::reap_nohang(self.main_pid) {
                self.exited = Some(ExitStatus::from_wait(st));
            }
        }
        true
    }

    /// Delivers every record available now, in time order across CPUs.
    fn drain(&mut self, on_event: &mut dyn FnMut(&mut PerfTracer, PerfEvent<'_>)) {
        loop {
            let mut best: Option<usize> = None;
            for i in 0..self.rings.len() {
                self.rings[i].fill();
                if self.rings[i].has && best.is_none_or(|b| self.rings[i].time < self.rings[b].time)
                {
                    best = Some(i);
                }
            }
            let Some(i) = best else { return };
            self.rings[i].has = false;
            // Other records (PERF_RECORD_LOST among them) are skipped: losses
            // are counted exactly per event with PERF_FORMAT_LOST (`report_lost`).
            match self.rings[i].ty {
                sample::RECORD_SAMPLE => self.deliver_hit_group(i, on_event),
                ty @ (tasks::RECORD_FORK | tasks::RECORD_EXIT | tasks::RECORD_COMM)
                    if self.system =>
                {
                    self.comms.record(ty, &self.rings[i].pending);
                }
                ty @ (tasks::RECORD_FORK | tasks::RECORD_EXIT) => {
                    self.tasks.record(ty, &self.rings[i].pending);
                }
                _ => {}
            }
        }
    }

    /// Delivers the sample at the head of ring `i` together with the samples
    /// of the same hit that follow it (same thread and IP, other probes: the
    /// kernel writes one sample per event of a uprobe, newest event first),
    /// in probe order, which is the order the ptrace transport runs them in.
    fn deliver_hit_group(
        &mut self,
        i: usize,
        on_event: &mut dyn FnMut(&mut PerfTracer, PerfEvent<'_>),
    ) {
        let key = |b: &[u8]| sample::hit_key(b);
        let mut group = std::mem::take(&mut self.group);
        let head = std::mem::replace(
            &mut self.rings[i].pending,
            self.spare.pop().unwrap_or_default(),
        );
        let first = key(&head);
        group.push((self.tag_of(&head), head));
        loop {
            let r = &mut self.rings[i];
            r.fill();
            if !r.has
                || r.ty != sample::RECORD_SAMPLE
                || key(&r.pending) != first
                || first.is_none()
            {
                break;
            }
            let tag = self.tag_of(&self.rings[i].pending);
            if tag.is_none() || group.iter().any(|(t, _)| *t == tag) {
                break;
            }
            let spare = self.spare.pop().unwrap_or_default();
            let r = &mut self.rings[i];
            r.has = false;
            group.push((tag, std::mem::replace(&mut r.pending, spare)));
        }
        // Insertion sort: a handful of probes at one address at most.
        for k in 1..group.len() {
            let mut j = k;
            while j > 0 && group[j - 1].0.map(|e| e.0) > group[j].0.map(|e| e.0) {
                group.swap(j - 1, j);
                j -= 1;
            }
        }
        let mut hit = std::mem::take(&mut self.hit);
        for (ev, buf) in group.iter_mut() {
            std::mem::swap(&mut hit.rec, buf);
            if let Some((key, cfg)) = *ev
                && sample::decode(
                    &mut hit,
                    self.time_offset,
                    cfg.stack_bytes >= 8,
                    cfg.regs_mask,
                )
                .is_some()
            {
                hit.set_return(None);
                hit.gone = false;
                hit.comm = if self.system {
                    self.comms.get(hit.tid)
                } else {
                    None
                };
                on_event(self, PerfEvent::Sample { key, hit: &mut hit });
            }
            std::mem::swap(&mut hit.rec, buf);
        }
        self.hit = hit;
        for (_, buf) in group.drain(..) {
            self.spare.push(buf);
        }
        self.group = group;
    }

    /// The event of a sample body (`None`: not one of ours any more).
    fn tag_of(&self, body: &[u8]) -> Option<EventOf> {
        sample::id_and_time(body).and_then(|(kid, _)| self.by_kernel_id.get(&kid).copied())
    }

    /// Runs until the main process exits (with `-f`: until every process
    /// of its tree has exited) or `stop` is set; returns its exit status
    /// when it was launched by us.
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut PerfTracer, PerfEvent<'_>),
    ) -> Result<Option<ExitStatus>, PerfError> {
        self.start()?;
        let mut fds: Vec<libc::pollfd> = self
            .ring_fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        if let Some(p) = &self.pidfd {
            fds.push(libc::pollfd {
                fd: p.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        let mut pruned = std::time::Instant::now();
        loop {
            self.drain(on_event);
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if !self.main_gone && self.main_exited() {
                self.main_gone = true;
                // Its pidfd stays readable: poll the rings only.
                if let Some(p) = fds.last_mut().filter(|_| self.pidfd.is_some()) {
                    p.fd = -1;
                }
            }
            if self.main_gone {
                // With -f, processes it forked may still run (a daemon):
                // the run goes on until the last one exits.
                self.drain(on_event);
                if self.opts.follow_forks && pruned.elapsed().as_millis() >= POLL_MS as u128 {
                    // Reads /proc per live task: not at every wake-up.
                    self.tasks.prune();
                    pruned = std::time::Instant::now();
                }
                if !self.opts.follow_forks || self.tasks.is_empty() {
                    break;
                }
            }
            let mut timeout = POLL_MS;
            if let Some((period, due)) = self.tick.as_mut() {
                let now = std::time::Instant::now();
                if *due <= now {
                    while *due <= now {
                        *due += *period;
                    }
                    on_event(self, PerfEvent::Tick);
                    continue;
                }
                timeout = timeout.min(due.duration_since(now).as_millis() as i32 + 1);
            }
            crate::sys::process::poll(&mut fds, timeout);
        }
        self.drain(on_event);
        self.report_lost(on_event);
        if self.opts.follow_forks && !self.tasks.is_empty() {
            self.tasks.prune();
            let n = self.tasks.processes();
            if n > 0 {
                crate::elog!(
                    "wprobe: warning: {n} process{} of the traced tree still running, no longer \
                     traced",
                    if n == 1 { "" } else { "es" }
                );
            }
        }
        Ok(self.exited)
    }
}

impl PerfTracer {
    /// Disarms: closes every event, then removes the uprobe definitions
    /// they use. Samples not yet read are lost; call after [`Self::run`].
    /// Also done on drop.
    pub fn close(&mut self) {
        // Closing a uprobe's event waits for the kernel to take its
        // breakpoints out (tens of milliseconds each): closed from several
        // threads at once, the waits overlap.
        let mut all: Vec<Counter> = self.probes.drain().flat_map(|(_, p)| p.counters).collect();
        if all.len() > 1 {
            let per = all.len().div_ceil(CLOSERS);
            std::thread::scope(|s| {
                while !all.is_empty() {
                    let chunk: Vec<Counter> = all.split_off(all.len().saturating_sub(per));
                    // No thread to be had: closed here (the chunk comes
                    // back with the error).
                    let _ = std::thread::Builder::new().spawn_scoped(s, move || drop(chunk));
                }
            });
        }
        self.probes.clear();
        self.by_kernel_id.clear();
        self.rings.clear();
        self.ring_fds.clear();
        if let Some(u) = self.uprobes.as_mut() {
            u.remove_all();
        }
    }
}

impl Drop for PerfTracer {
    fn drop(&mut self) {
        if self.held {
            // Never ran: the launch was abandoned before `start`.
            self.kill_launched();
        }
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_errors_name_the_sysctl_and_the_capabilities() {
        let e = open_error(
            "Write watchpoint at 0x4010 length 8".into(),
            std::io::Error::from_raw_os_error(libc::EACCES),
        );
        let PerfError::PermissionDenied { what, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(
            what,
            "perf_event_open of Write watchpoint at 0x4010 length 8"
        );
        assert_eq!(
            permission_hint(Some("3\n")),
            "kernel.perf_event_paranoid = 3; uprobes need root (they are defined in tracefs, and \
             need CAP_PERFMON or CAP_SYS_ADMIN); watchpoints need kernel.perf_event_paranoid <= 2 \
             for processes of your own user, CAP_PERFMON for others; or use --transport ptrace"
        );
        assert!(permission_hint(None).starts_with("kernel.perf_event_paranoid = unreadable;"));
        assert!(matches!(
            open_error("x".into(), std::io::Error::from_raw_os_error(libc::ENOSPC)),
            PerfError::NoDebugRegister(_)
        ));
    }

    #[test]
    fn cpu_list_parsing() {
        assert!(!ring::online_cpus().is_empty());
    }
}
