//! The per-CPU ring buffers of the perf transport: one per online CPU,
//! owned by a dummy software event on the main process (every probe event
//! of that CPU is redirected into it), sized to the locked-memory limit,
//! and read one record at a time into a reusable buffer (no allocation per
//! record). The dummy events are inherited by every thread and (`-f`)
//! child process, and keep the kernel from swapping their contexts (see
//! [`counter`]).

use perf_event::events::Software;
use perf_event::{Builder, Counter, Sampler};

use super::error::{open_error, permission_hint};
use super::{PerfError, sample};

/// Ring buffer per CPU, in pages (a power of two): 16 MiB holds about 2,000
/// samples with their 8 KiB stack snapshots before the kernel must drop.
pub(super) const RING_PAGES: usize = 4096;

/// Ring pages per CPU: [`RING_PAGES`], or `WPROBE_PERF_RING_PAGES` (a
/// power of two; a diagnostic knob for tests and measurements of loss).
pub(super) fn ring_pages() -> usize {
    std::env::var("WPROBE_PERF_RING_PAGES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| n.is_power_of_two() && *n <= RING_PAGES * 16)
        .unwrap_or(RING_PAGES)
}

/// The smallest ring tried when locked memory is limited (256 KiB: about
/// 30 samples; more are dropped — and counted — when the handler lags).
pub(super) const MIN_RING_PAGES: usize = 64;

/// One CPU's ring and the record at its head.
pub(super) struct Ring {
    pub(super) sampler: Sampler,
    /// The head record's body (copied out of the ring).
    pub(super) pending: Vec<u8>,
    /// Its type.
    pub(super) ty: u32,
    /// Whether `pending` holds a record not yet handled.
    pub(super) has: bool,
    /// Its time (0 for records other than samples: handled first).
    pub(super) time: u64,
}

impl Ring {
    /// Copies the next record (if any) into `pending`.
    pub(super) fn fill(&mut self) {
        if self.has {
            return;
        }
        let Some(rec) = self.sampler.next_record() else {
            return;
        };
        self.pending.clear();
        for part in rec.data() {
            self.pending.extend_from_slice(part);
        }
        self.ty = rec.ty();
        drop(rec);
        self.has = true;
        self.time = if self.ty == sample::RECORD_SAMPLE {
            sample::id_and_time(&self.pending).map_or(0, |(_, t)| t)
        } else {
            0 // bookkeeping records first
        };
    }
}

/// The online CPUs (`/sys/devices/system/cpu/online`).
pub(super) fn online_cpus() -> Vec<usize> {
    let parse = |s: &str| -> Option<Vec<usize>> {
        let mut v = Vec::new();
        for part in s.trim().split(',') {
            match part.split_once('-') {
                Some((a, b)) => v.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
                None => v.push(part.parse().ok()?),
            }
        }
        Some(v)
    };
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse(&s))
        .unwrap_or_else(|| {
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
        })
}

/// Opens and maps the ring of `cpu` for the tasks of `pid` (and, through
/// `inherit`, their threads; with `follow`, their children).
pub(super) fn open(pid: i32, cpu: usize, follow: bool, pages: usize) -> Result<Ring, PerfError> {
    let mut open = || counter(pid, cpu, follow);
    let c = open()?;
    let sampler = map(c, &mut open, cpu, pages)?;
    Ok(ring(sampler))
}

/// Opens and maps the ring of `cpu` for every process (a system-wide run:
/// the probe events are opened with pid -1 too).
pub(super) fn open_system(cpu: usize, pages: usize) -> Result<Ring, PerfError> {
    let mut open = || system_counter(cpu);
    let c = open()?;
    let sampler = map(c, &mut open, cpu, pages)?;
    Ok(ring(sampler))
}

fn ring(sampler: Sampler) -> Ring {
    Ring {
        sampler,
        pending: Vec::with_capacity(1 << 16),
        ty: 0,
        has: false,
        time: 0,
    }
}

/// Maps the ring of `c`: `pages`, or as much as the locked-memory limit
/// allows (`kernel.perf_event_mlock_kb` for users without CAP_IPC_LOCK),
/// down to [`MIN_RING_PAGES`].
fn map(
    mut c: Counter,
    open: &mut dyn FnMut() -> Result<Counter, PerfError>,
    cpu: usize,
    want: usize,
) -> Result<Sampler, PerfError> {
    let mut pages = want;
    loop {
        match c.sampled(pages * 4096) {
            Ok(s) => return Ok(s),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) && pages > MIN_RING_PAGES.min(want) => {
                pages /= 2;
                // `sampled` consumed the counter: open it again.
                c = open()?;
            }
            Err(e) => {
                return Err(PerfError::PermissionDenied {
                    what: format!("ring buffer of CPU {cpu} ({} KiB): {e}", pages * 4),
                    hint: format!(
                        "locked memory for perf buffers is limited by kernel.perf_event_mlock_kb = {} \
                         (per user, without CAP_IPC_LOCK); {}",
                        std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb")
                            .map_or("unreadable".into(), |s| s.trim().to_string()),
                        permission_hint(
                            std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                                .ok()
                                .as_deref()
                        )
                    ),
                });
            }
        }
    }
}

/// The dummy event owning a system-wide ring: every process on `cpu`
/// (nothing inherited: there is no task to inherit from).
fn system_counter(cpu: usize) -> Result<Counter, PerfError> {
    let mut b = Builder::new(Software::DUMMY);
    b.any_pid()
        .one_cpu(cpu)
        .enabled(true)
        .clockid(perf_event::Clock::MONOTONIC)
        .sample(perf_event::SampleFlag::TID)
        // The names of the processes (at exec) and of their new tasks:
        // known even when a process exits before its samples are read.
        .comm(true)
        .comm_exec(true)
        .task(true)
        .wakeup_watermark(MIN_RING_PAGES * 4096 / 4);
    b.build()
        .map_err(|e| open_error(format!("system-wide ring buffer of CPU {cpu}"), e))
}

fn counter(pid: i32, cpu: usize, follow: bool) -> Result<Counter, PerfError> {
    let mut b = Builder::new(Software::DUMMY);
    b.observe_pid(pid)
        .one_cpu(cpu)
        .inherit(true)
        .enabled(true)
        // The clock of the sampled events writing into this ring (the
        // kernel refuses a ring shared by events on different clocks).
        .clockid(perf_event::Clock::MONOTONIC)
        // Never sampled (a dummy), but an inherited event that samples
        // READ keeps the kernel from swapping the contexts of processes
        // forked from one another at a context switch (`nr_no_switch_fast`,
        // Linux 6.12): a swap leaves each probe event's target task behind,
        // and when the task it names exits, the kernel's uprobe filter no
        // longer matches the process still running with it, and removes
        // the uprobes from that process - its later calls go unseen and
        // uncounted.
        .sample(perf_event::SampleFlag::READ | perf_event::SampleFlag::TID)
        .wakeup_watermark(MIN_RING_PAGES * 4096 / 4);
    if follow {
        // Forks and exits of the tree (`tasks`).
        b.task(true);
    } else {
        b.inherit_thread(true);
    }
    match b.build() {
        // Before Linux 6.12 an inherited event cannot sample READ (nor
        // stop context swaps).
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            b.sample(perf_event::SampleFlag::TID);
            b.build()
        }
        r => r,
    }
    .map_err(|e| open_error(format!("ring buffer of CPU {cpu}"), e))
}
