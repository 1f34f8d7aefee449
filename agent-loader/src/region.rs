//! The tracer's view of the shared control region: a memfd mapped
//! `MAP_SHARED` both here and in the target. Layout (every part 4 KiB
//! aligned):
//!
//! | part | what |
//! |---|---|
//! | header | [`ControlHeader`] (one page) |
//! | probes | `probes_cap` × [`ProbeSlot`]: settings and counters |
//! | gvars | `gvars_cap` × u64, the run's global variables |
//! | maps | the programs' `mapstore` regions |
//! | ring | the record ring (`ring_size`, a power of two) |
//! | scratch | load requests, site tables, export names, precompiled modules |
//!
//! Everything read back from the region is bounds-checked: the target owns
//! the other mapping and may have written anything there.

use agent_abi::{
    AGENT_ABI_VERSION, CONTROL_HEADER_SIZE, CTRL_MAGIC, ControlHeader, PROBE_SLOT_SIZE, ProbeSlot,
    RECORD_HEADER_SIZE, RUN_HEADER_SIZE, RecordHeader, RunCounts, RunHeader, entry,
};
use anyhow::{Result, ensure};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};

const PAGE: u64 = 4096;

/// Sizes of the parts of a region.
#[derive(Clone, Copy, Debug)]
pub struct RegionLayout {
    /// Probes the region holds.
    pub probes_cap: u64,
    /// Global variables the region holds.
    pub gvars_cap: u64,
    /// Bytes of the map regions.
    pub maps_size: u64,
    /// Bytes of the record ring (power of two).
    pub ring_size: u64,
    /// Bytes of scratch (modules are copied here for `load`).
    pub scratch_size: u64,
}

impl Default for RegionLayout {
    fn default() -> Self {
        RegionLayout {
            probes_cap: 64,
            gvars_cap: 512,
            maps_size: 0,
            ring_size: 1 << 20,
            scratch_size: 8 << 20,
        }
    }
}

fn page_up(v: u64) -> u64 {
    v.div_ceil(PAGE) * PAGE
}

impl RegionLayout {
    /// Offset of the probe table.
    pub fn probes_off(&self) -> u64 {
        page_up(CONTROL_HEADER_SIZE as u64)
    }
    /// Offset of the global variables.
    pub fn gvars_off(&self) -> u64 {
        page_up(self.probes_off() + self.probes_cap * PROBE_SLOT_SIZE as u64)
    }
    /// Offset of the map regions.
    pub fn maps_off(&self) -> u64 {
        page_up(self.gvars_off() + 8 * self.gvars_cap)
    }
    /// Offset of the ring.
    pub fn ring_off(&self) -> u64 {
        page_up(self.maps_off() + self.maps_size)
    }
    /// Offset of the scratch area.
    pub fn scratch_off(&self) -> u64 {
        self.ring_off() + self.ring_size
    }
    /// Total size.
    pub fn size(&self) -> u64 {
        page_up(self.scratch_off() + self.scratch_size)
    }
}

/// What the agent's imports report that the tracer knows: its clocks and
/// the launched command.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunFacts {
    /// `CLOCK_MONOTONIC` when the run started.
    pub start_mono_ns: u64,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC` of the tracer.
    pub mono_offset_ns: u64,
    /// Pid of the launched command (0 when attached).
    pub child_pid: u64,
}

/// A snapshot of the agent's process-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs, reason = "the fields mirror agent_abi::Stats")]
pub struct StatsSnapshot {
    pub dormant: u64,
    pub reentered: u64,
    pub contended: u64,
    pub no_slot: u64,
    pub threads: u64,
    pub lock_waits: u64,
    pub ring_waits: u64,
    pub allocations: u64,
    pub bias_revoked: u64,
    pub memory_syscalls: u64,
    pub trap_net: u64,
}

/// One record of a handler run read from the ring.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    /// `agent_abi::rec` kind.
    pub kind: u16,
    /// Major code (event kind).
    pub major: u16,
    /// Minor code (event id).
    pub minor: u16,
    /// Data bytes.
    pub data: &'a [u8],
    /// Item descriptors, as little-endian u32 bytes.
    pub items: &'a [u8],
}

/// One handler run read from the ring.
#[derive(Clone, Debug)]
pub struct RunView<'a> {
    /// Its header (probe, thread, CPU, outcome, time), read in place: a
    /// copy made apart and read back in other widths cost the drain a
    /// store-forwarding stall per entry.
    pub header: &'a RunHeader,
    /// Its records (checked by the parse), in emission order: see
    /// [`RunView::records`].
    body: &'a [u8],
}

impl<'a> RunView<'a> {
    /// An [`agent_abi::entry::ENTERED`] entry's `rsp` at the entry (`None`
    /// for a run).
    #[inline]
    pub fn entered_rsp(&self) -> Option<u64> {
        if self.header.kind != entry::ENTERED {
            return None;
        }
        let w = self.body.get(..8)?;
        Some(u64::from_le_bytes(w.try_into().ok()?))
    }

    /// An [`agent_abi::entry::RETURNED`] entry's words: `rax` after the
    /// return, `rsp` at the entry, the duration in ns (`None` for a run).
    #[inline]
    pub fn returned(&self) -> Option<[u64; 3]> {
        if self.header.kind != entry::RETURNED {
            return None;
        }
        let w = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                self.body.get(8 * i..8 * i + 8)?.try_into().ok()?,
            ))
        };
        Some([w(0)?, w(1)?, w(2)?])
    }

    /// Its records, in emission order (no allocation: they are read from
    /// the entry, which the drain checked whole).
    #[inline]
    pub fn records(&self) -> impl Iterator<Item = RecordView<'a>> + 'a {
        let body = self.body;
        let mut at = 0usize;
        (0..self.header.n_records).map_while(move |_| {
            let r = record_at(body, at)?;
            at = r.1;
            Some(r.0)
        })
    }
}

/// The record at byte `at` of a run's body, and where the next starts;
/// `None` when it does not fit.
#[inline]
fn record_at(body: &[u8], at: usize) -> Option<(RecordView<'_>, usize)> {
    let hb = body.get(at..at.checked_add(RECORD_HEADER_SIZE)?)?;
    // SAFETY: RECORD_HEADER_SIZE bytes of plain data.
    let rh: RecordHeader = unsafe { std::ptr::read_unaligned(hb.as_ptr() as *const _) };
    let d0 = at + RECORD_HEADER_SIZE;
    let d1 = d0.checked_add(rh.data_len as usize)?;
    let i1 = d1.checked_add((rh.n_items as usize).checked_mul(4)?)?;
    if i1 > body.len() {
        return None;
    }
    let next = agent_abi::record_size(rh.data_len as usize, rh.n_items as usize).checked_add(at)?;
    Some((
        RecordView {
            kind: rh.kind,
            major: rh.major,
            minor: rh.minor,
            data: &body[d0..d1],
            items: &body[d1..i1],
        },
        next,
    ))
}

/// What a drain found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Runs handed to the callback.
    pub runs: u64,
    /// Bytes consumed.
    pub bytes: u64,
    /// Entries that did not parse (the ring was corrupted): the drain
    /// stops there and skips to the producer's head.
    pub corrupt: u64,
}

/// The tracer's mapping of the region (unmapped when the [`Region`] and
/// every [`Heartbeat`] using it are gone).
#[derive(Debug)]
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: process-wide memory; accessed through atomics or by its owner.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our mapping, no longer referenced.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// A thread that shows the agent the tracer is alive
/// ([`ControlHeader::heartbeat_tsc`]) every period, whatever the tracer's
/// main thread is busy with; stopped and joined on drop.
pub struct Heartbeat {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// The tracer's mapping of a shared region.
pub struct Region {
    ptr: *mut u8,
    map: std::sync::Arc<Mapping>,
    layout: RegionLayout,
    /// The memfd (kept so the region can be re-mapped or passed on).
    pub file: File,
    /// Next free byte of the scratch area.
    scratch_next: u64,
}

// SAFETY: the mapping is process-wide memory; `Region` hands out shared
// references to atomics and copies of plain data only.
unsafe impl Send for Region {}

impl Region {
    /// Maps `file` (a memfd of `layout.size()` bytes) and writes the header
    /// the agent's `init` expects.
    pub fn map(file: File, layout: RegionLayout, facts: RunFacts) -> Result<Region> {
        let size = layout.size() as usize;
        ensure!(
            layout.ring_size.is_power_of_two() && layout.ring_size >= PAGE,
            "ring size {} is not a power of two of at least a page",
            layout.ring_size
        );
        ensure!(
            file.metadata()?.len() >= size as u64,
            "region file too small"
        );
        // SAFETY: a shared mapping of our own file; unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        ensure!(
            ptr != libc::MAP_FAILED,
            "mmap of the region: {}",
            std::io::Error::last_os_error()
        );
        let r = Region {
            ptr: ptr as *mut u8,
            map: std::sync::Arc::new(Mapping {
                ptr: ptr as *mut u8,
                len: size,
            }),
            layout,
            file,
            scratch_next: layout.scratch_off(),
        };
        // SAFETY: the header is at offset 0 of the mapping, zeroed by the
        // memfd; nothing else maps it yet.
        unsafe {
            let h = r.ptr as *mut ControlHeader;
            (&raw mut (*h).magic).write(CTRL_MAGIC);
            (&raw mut (*h).abi_version).write(AGENT_ABI_VERSION);
            (&raw mut (*h).header_size).write(CONTROL_HEADER_SIZE as u32);
            (&raw mut (*h).region_size).write(size as u64);
            (&raw mut (*h).probes_off).write(layout.probes_off());
            (&raw mut (*h).probes_cap).write(layout.probes_cap);
            (&raw mut (*h).gvars_off).write(layout.gvars_off());
            (&raw mut (*h).gvars_cap).write(layout.gvars_cap);
            (&raw mut (*h).maps_off).write(layout.maps_off());
            (&raw mut (*h).maps_size).write(layout.maps_size);
            (&raw mut (*h).ring_off).write(layout.ring_off());
            (&raw mut (*h).ring_size).write(layout.ring_size);
            (&raw mut (*h).scratch_off).write(layout.scratch_off());
            (&raw mut (*h).scratch_size).write(layout.scratch_size);
            (&raw mut (*h).start_mono_ns).write(facts.start_mono_ns);
            (&raw mut (*h).mono_offset_ns).write(facts.mono_offset_ns);
            (&raw mut (*h).child_pid).write(facts.child_pid);
        }
        Ok(r)
    }

    /// Another handle on the same mapping (for an agent that joins this
    /// region: `loader::join_agent`), with its own scratch cursor.
    pub fn share(&self) -> Result<Region> {
        Ok(Region {
            ptr: self.ptr,
            map: self.map.clone(),
            layout: self.layout,
            file: self.file.try_clone()?,
            scratch_next: self.layout.scratch_off(),
        })
    }

    /// The header.
    pub fn header(&self) -> &ControlHeader {
        // SAFETY: mapped, aligned, initialised; fields the agent writes are atomics.
        unsafe { &*(self.ptr as *const ControlHeader) }
    }

    /// The layout.
    pub fn layout(&self) -> RegionLayout {
        self.layout
    }

    /// Total size.
    pub fn len(&self) -> usize {
        self.layout.size() as usize
    }

    /// Whether the region is empty (never).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The agent's last error: (code, message).
    pub fn error(&self) -> (i32, String) {
        let h = self.header();
        let n = (h.err_len.load(Ordering::Acquire) as usize).min(h.err_msg.len());
        (
            h.err_code.load(Ordering::Acquire),
            String::from_utf8_lossy(&h.err_msg[..n]).into_owned(),
        )
    }

    /// Probe slot `p` (`None` beyond the table).
    pub fn probe(&self, p: u32) -> Option<&ProbeSlot> {
        if u64::from(p) >= self.layout.probes_cap {
            return None;
        }
        // SAFETY: inside the probe table, 64-aligned (page-aligned table,
        // 128-byte slots); the fields the agent writes are atomics.
        Some(unsafe {
            &*(self
                .ptr
                .add(self.layout.probes_off() as usize + p as usize * PROBE_SLOT_SIZE)
                as *const ProbeSlot)
        })
    }

    /// Sets probe `p`'s `ignore` and `maxhits` (before it is enabled).
    pub fn set_probe_limits(&self, p: u32, ignore: u64, maxhits: u64) {
        if u64::from(p) < self.layout.probes_cap {
            let at = self.layout.probes_off() as usize + p as usize * PROBE_SLOT_SIZE;
            // SAFETY: inside the probe table; the agent reads these plain
            // fields only after `enabled` is set (release) below them.
            unsafe {
                let s = self.ptr.add(at) as *mut ProbeSlot;
                (&raw mut (*s).ignore).write(ignore);
                (&raw mut (*s).maxhits).write(maxhits);
            }
        }
    }

    /// Makes probe `p` a return probe tracking at most `maxactive` calls.
    pub fn set_probe_maxactive(&self, p: u32, maxactive: u64) {
        if u64::from(p) < self.layout.probes_cap {
            let at = self.layout.probes_off() as usize + p as usize * PROBE_SLOT_SIZE;
            // SAFETY: as in `set_probe_limits`.
            unsafe {
                let s = self.ptr.add(at) as *mut ProbeSlot;
                (&raw mut (*s).maxactive).write(maxactive);
            }
        }
    }

    /// Makes each call the return probe `p` tracks told to the tracer at
    /// once ([`agent_abi::entry::ENTERED`]).
    pub fn set_probe_entry_notice(&self, p: u32, on: bool) {
        if u64::from(p) < self.layout.probes_cap {
            let at = self.layout.probes_off() as usize + p as usize * PROBE_SLOT_SIZE;
            // SAFETY: as in `set_probe_limits`.
            unsafe {
                let s = self.ptr.add(at) as *mut ProbeSlot;
                (&raw mut (*s).entry_notice).write(u64::from(on));
            }
        }
    }

    /// Sets [`agent_abi::probe_flag`] bits `bits` of probe `p` (before it
    /// is enabled).
    pub fn set_probe_flags(&self, p: u32, bits: u32) {
        if let Some(s) = self.probe(p) {
            s.flags.fetch_or(bits, Ordering::Relaxed);
        }
    }

    /// Enables or disables probe `p`.
    pub fn set_probe_enabled(&self, p: u32, on: bool) {
        if let Some(s) = self.probe(p) {
            s.enabled.store(u32::from(on), Ordering::Release);
        }
    }

    /// Probe `p`'s counters.
    pub fn probe_counts(&self, p: u32) -> RunCounts {
        let Some(s) = self.probe(p) else {
            return RunCounts::default();
        };
        let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        RunCounts {
            hits: l(&s.hits),
            ignored: l(&s.ignored),
            runs: l(&s.runs),
            fuel_exhausted: l(&s.fuel_exhausted),
            traps: l(&s.traps),
            uncaught: l(&s.uncaught),
            dropped: l(&s.dropped),
            missed: l(&s.missed),
            missed_depth: l(&s.missed_depth),
        }
    }

    /// Whether probe `p` is enabled.
    pub fn probe_enabled(&self, p: u32) -> bool {
        self.probe(p)
            .is_some_and(|s| s.enabled.load(Ordering::Relaxed) != 0)
    }

    /// Calls of return probe `p` tracked now (entered, not yet returned).
    pub fn probe_live(&self, p: u32) -> u64 {
        self.probe(p).map_or(0, |s| {
            s.live
                .load(Ordering::Relaxed)
                .wrapping_sub(s.live_lost.load(Ordering::Relaxed))
        })
    }

    /// Global variables in use.
    pub fn gvars(&self) -> Vec<u64> {
        let h = self.header();
        let n = h.gvars_len.load(Ordering::Acquire) as usize;
        (0..n.min(self.layout.gvars_cap as usize))
            .map(|i| {
                // SAFETY: inside the gvars array; a racy read of a u64 the
                // agent may be writing is a plain (aligned) load.
                unsafe {
                    (self.ptr.add(self.layout.gvars_off() as usize) as *const u64)
                        .add(i)
                        .read_volatile()
                }
            })
            .collect()
    }

    /// Sets what the agent's imports report of the run (`clock_ns`'s
    /// clocks, `child_pid`) again: the agent reads them from the header
    /// at each call. For a region made before the run's facts were all
    /// known (an agent loaded before the probes were planned), while no
    /// handler can run (no stub reachable yet).
    pub fn set_facts(&self, facts: RunFacts) {
        let h = self.ptr as *mut ControlHeader;
        // SAFETY: the header is mapped, aligned and initialised (`map`);
        // the agent only reads these fields, and runs no handler until
        // the stubs are reachable, after this.
        unsafe {
            (&raw mut (*h).start_mono_ns).write_volatile(facts.start_mono_ns);
            (&raw mut (*h).mono_offset_ns).write_volatile(facts.mono_offset_ns);
            (&raw mut (*h).child_pid).write_volatile(facts.child_pid);
        }
    }

    /// Sets the global variables (those of an agent this one takes over
    /// from: the process executed a new program).
    pub fn set_gvars(&self, values: &[u64]) {
        let h = self.header();
        let n = values.len().min(self.layout.gvars_cap as usize);
        for (i, v) in values[..n].iter().enumerate() {
            // SAFETY: inside the gvars array (i < gvars_cap), aligned.
            unsafe {
                (self.ptr.add(self.layout.gvars_off() as usize) as *mut u64)
                    .add(i)
                    .write_volatile(*v)
            };
        }
        h.gvars_len.fetch_max(n as u64, Ordering::AcqRel);
    }

    /// The counters.
    pub fn stats(&self) -> StatsSnapshot {
        let s = &self.header().stats;
        let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            dormant: l(&s.dormant),
            reentered: l(&s.reentered),
            contended: l(&s.contended),
            no_slot: l(&s.no_slot),
            threads: l(&s.threads),
            lock_waits: l(&s.lock_waits),
            ring_waits: l(&s.ring_waits),
            allocations: l(&s.allocations),
            bias_revoked: l(&s.bias_revoked),
            memory_syscalls: l(&s.memory_syscalls),
            trap_net: l(&s.trap_net),
        }
    }

    /// Copies `len` bytes at offset `off` out of the region.
    fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.len());
        // SAFETY: inside the mapping (asserted).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) };
    }

    /// Copies `src` into the region at offset `off` (the caller owns those
    /// bytes: the scratch area, or map regions while holding the store).
    fn copy_in(&self, off: usize, src: &[u8]) {
        assert!(off + src.len() <= self.len());
        // SAFETY: inside the mapping (asserted); plain bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) };
    }

    /// Reads bytes `[off, off + out.len())` of the map area (the caller
    /// holds the store lock, or no handler can run).
    pub fn read_maps(&self, off: u64, out: &mut [u8]) -> bool {
        let end = off.saturating_add(out.len() as u64);
        if off < self.layout.maps_off() || end > self.layout.maps_off() + self.layout.maps_size {
            return false;
        }
        self.copy_out(off as usize, out);
        true
    }

    /// Writes bytes at `off` of the map area (same rule as [`Region::read_maps`]).
    pub fn write_maps(&self, off: u64, data: &[u8]) -> bool {
        let end = off.saturating_add(data.len() as u64);
        if off < self.layout.maps_off() || end > self.layout.maps_off() + self.layout.maps_size {
            return false;
        }
        self.copy_in(off as usize, data);
        true
    }

    /// Consumes every complete entry in the ring, handing each handler run
    /// (and each call entered, [`RunView::entered_rsp`]) to `f` in the
    /// order the agent wrote them; wakes a producer waiting for room.
    pub fn drain(&mut self, mut f: impl FnMut(&RunView<'_>)) -> Drained {
        let cap = self.layout.ring_size;
        let base = self.layout.ring_off() as usize;
        let end = self.len();
        let h = self.header();
        let head = h.ring.head.load(Ordering::Acquire);
        let mut tail = h.ring.tail.load(Ordering::Relaxed);
        let mut out = Drained::default();
        while tail < head {
            let off = (tail & (cap - 1)) as usize;
            // Every entry starts with its size and kind (8 bytes, which
            // fit before the ring's end: offsets and sizes are multiples of 8).
            let (size, kind) = size_and_kind(self.ring_entry(end, base + off, 8));
            let size = u64::from(size);
            let fits = size >= 8
                && size.is_multiple_of(8)
                && off as u64 + size <= cap
                && tail + size <= head;
            if !fits
                || !matches!(
                    kind,
                    entry::PAD | entry::RUN | entry::ENTERED | entry::RETURNED
                )
            {
                out.corrupt += 1;
                tail = head;
                break;
            }
            if kind == entry::PAD {
                tail += size;
                continue;
            }
            match parse_run(self.ring_entry(end, base + off, size as usize)) {
                Some(run) => {
                    f(&run);
                    out.runs += 1;
                }
                None => out.corrupt += 1,
            }
            tail += size;
        }
        out.bytes = tail - h.ring.tail.load(Ordering::Relaxed);
        h.ring.tail.store(tail, Ordering::Release);
        if h.ring.producer_waiting.swap(0, Ordering::SeqCst) != 0 {
            futex_wake(&h.ring.producer_waiting);
        }
        out
    }

    /// The `len` bytes of a complete ring entry at offset `off`, read in
    /// place (no copy): the drain hands them to its callback before it
    /// moves the tail past them. `end` is the region's size
    /// ([`Region::len`], computed once per drain: it adds up the layout).
    #[inline]
    fn ring_entry(&self, end: usize, off: usize, len: usize) -> &[u8] {
        assert!(off + len <= end);
        // SAFETY: inside the mapping (asserted). The bytes are those of an
        // entry between the ring's tail and the head the producer
        // published (acquire): the producer wrote them before and does not
        // write there again until the consumer moves the tail past them,
        // which it does after the borrow ends. An agent that wrote there
        // anyway could only change what the bytes say: they are plain data,
        // and every read of a record is bounds-checked (`record_at`).
        unsafe { std::slice::from_raw_parts(self.ptr.add(off), len) }
    }

    /// Bytes waiting in the ring.
    pub fn pending(&self) -> u64 {
        let h = self.header();
        h.ring
            .head
            .load(Ordering::Acquire)
            .saturating_sub(h.ring.tail.load(Ordering::Relaxed))
    }

    /// Copies `bytes` into the scratch area (8-aligned); returns its offset.
    pub fn put(&mut self, bytes: &[u8]) -> Result<u64> {
        let off = self.scratch_next.next_multiple_of(8);
        let end = off + bytes.len() as u64;
        ensure!(
            end <= self.layout.scratch_off() + self.layout.scratch_size,
            "region scratch full ({} bytes needed)",
            bytes.len()
        );
        self.copy_in(off as usize, bytes);
        self.scratch_next = end;
        Ok(off)
    }

    /// Forgets everything in the scratch area (after a control call
    /// returned, the agent holds its own copies).
    pub fn reset_scratch(&mut self) {
        self.scratch_next = self.layout.scratch_off();
    }

    /// Releases the memory of the scratch area (the modules copied there
    /// for loading), in the target too: a hole punched in the memfd.
    pub fn free_scratch(&mut self) {
        self.reset_scratch();
        // SAFETY: a range of our own memfd; both mappings read zeros after.
        unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                self.layout.scratch_off() as libc::off_t,
                self.layout.scratch_size as libc::off_t,
            );
        }
    }

    /// Sets the tracer's enable switch.
    pub fn set_enabled(&self, on: bool) {
        self.header()
            .enabled
            .store(u32::from(on), Ordering::Release);
    }

    /// Shows the agent the tracer is alive: its TSC now; a hit that sees
    /// it older than `stale_ticks` goes dormant.
    pub fn beat(&self) {
        self.header()
            .heartbeat_tsc
            .store(rdtsc(), Ordering::Release);
    }

    /// Starts a [`Heartbeat`] thread beating every `period`.
    pub fn start_heartbeat(&self, period: std::time::Duration) -> std::io::Result<Heartbeat> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let map = self.map.clone();
        let flag = stop.clone();
        let invariant = invariant_tsc();
        let thread = std::thread::Builder::new()
            .name("wprobe-heartbeat".into())
            .spawn(move || {
                // SAFETY: the header at offset 0 of the mapping, kept alive
                // by `map`; the fields are atomics.
                let h = unsafe { &*(map.ptr as *const ControlHeader) };
                let first = invariant.then(|| *CLOCK_START.get_or_init(tsc_realtime));
                while !flag.load(Ordering::SeqCst) {
                    h.heartbeat_tsc.store(rdtsc(), Ordering::Release);
                    let published = match first {
                        Some((tsc0, ns0)) => publish_clock(h, tsc0, ns0),
                        None => true,
                    };
                    // Until the first anchor, looked at again soon: hits
                    // without one take the agent's full path.
                    std::thread::park_timeout(if published {
                        period
                    } else {
                        period.min(std::time::Duration::from_millis(1))
                    });
                }
            })?;
        Ok(Heartbeat {
            stop,
            thread: Some(thread),
        })
    }

    /// Sets the staleness bound of the heartbeat, in TSC ticks (0: none).
    pub fn set_stale_ticks(&self, ticks: u64) {
        self.header().stale_ticks.store(ticks, Ordering::Release);
    }

    /// What a run that finds the ring full does: drop its records at once
    /// (`true`), or wait for room at most `agent_abi::RING_WAIT_MAX_NS`.
    pub fn set_drop_when_full(&self, drop: bool) {
        self.header()
            .ring
            .drop_when_full
            .store(u32::from(drop), Ordering::Release);
    }

    /// Takes the store lock (no handler of the target runs until
    /// [`Region::unlock_store`]), waiting at most `max`; `false` if it
    /// could not.
    ///
    /// A thread of the target that owns the store's bias
    /// ([`agent_abi::bias`]) loses it for good: this revokes it and waits
    /// for the owner to leave the store.
    pub fn lock_store(&self, max: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + max;
        if !self.lock_futex(deadline) {
            return false;
        }
        let h = self.header();
        let owner = h.bias.owner.load(Ordering::Acquire);
        if owner == agent_abi::bias::FREE {
            // No thread can claim it while the futex is held.
            return true;
        }
        h.bias.revoke(
            // SAFETY: membarrier takes no pointers. The agent enabled the
            // bias only after registering the target for this command.
            || unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    agent_abi::bias::MEMBARRIER_GLOBAL_EXPEDITED as libc::c_long,
                    0 as libc::c_long,
                    0 as libc::c_long,
                )
            } == 0,
            || std::thread::sleep(std::time::Duration::from_millis(1)),
        );
        // A former owner may still be inside.
        if !h.bias.wait_out(
            || std::time::Instant::now() >= deadline,
            std::thread::yield_now,
        ) {
            self.unlock_store();
            return false;
        }
        true
    }

    /// The futex of [`Region::lock_store`].
    fn lock_futex(&self, deadline: std::time::Instant) -> bool {
        let w = &self.header().store_lock;
        if w.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        loop {
            if w.swap(2, Ordering::Acquire) == 0 {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            futex_wait(
                w,
                2,
                (deadline - now).min(std::time::Duration::from_millis(50)),
            );
        }
    }

    /// Releases the store lock.
    pub fn unlock_store(&self) {
        let w = &self.header().store_lock;
        if w.swap(0, Ordering::Release) == 2 {
            futex_wake(w);
        }
    }
}

/// The `size` and `kind` of the entry whose first 8 bytes are `w`.
#[inline]
fn size_and_kind(w: &[u8]) -> (u32, u16) {
    const SIZE: usize = std::mem::offset_of!(RunHeader, size);
    const KIND: usize = std::mem::offset_of!(RunHeader, kind);
    const _: () = assert!(SIZE + 4 <= 8 && KIND + 2 <= 8);
    let size = u32::from_ne_bytes(w[SIZE..SIZE + 4].try_into().expect("invariant: 4 bytes"));
    let kind = u16::from_ne_bytes(w[KIND..KIND + 2].try_into().expect("invariant: 2 bytes"));
    (size, kind)
}

/// Parses one run entry (bounds-checked).
#[inline]
fn parse_run(e: &[u8]) -> Option<RunView<'_>> {
    // `e` holds at least the header's size (the caller checked `size >=
    // 8`; a shorter run entry fails here) and starts 8-aligned (the ring
    // is page-aligned, entries' sizes are multiples of 8).
    if e.len() < RUN_HEADER_SIZE
        || !(e.as_ptr() as usize).is_multiple_of(std::mem::align_of::<RunHeader>())
    {
        return None;
    }
    // SAFETY: RUN_HEADER_SIZE bytes, aligned (checked above), borrowed for
    // `e`'s lifetime; RunHeader is plain data (any bytes are a valid one).
    let header: &RunHeader = unsafe { &*(e.as_ptr() as *const RunHeader) };
    let body = &e[RUN_HEADER_SIZE..];
    let mut at = 0usize;
    for _ in 0..header.n_records {
        at = record_at(body, at)?.1;
    }
    Some(RunView { header, body })
}

fn rdtsc() -> u64 {
    // SAFETY: RDTSC is available on every x86-64 CPU Linux runs on.
    #[allow(unused_unsafe, reason = "safe in newer toolchains")]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

/// Whether the TSC ticks at a constant rate through every power state
/// (`constant_tsc` and `nonstop_tsc` among the CPU flags): only then may
/// the agent tell the time from it.
fn invariant_tsc() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
        c.lines().find(|l| l.starts_with("flags")).is_some_and(|l| {
            let flags: Vec<&str> = l.split_whitespace().collect();
            flags.contains(&"constant_tsc") && flags.contains(&"nonstop_tsc")
        })
    })
}

/// The `(TSC, CLOCK_REALTIME ns)` pair the TSC's rate is measured from:
/// the first of [`anchor_clock`] and the first heartbeat.
static CLOCK_START: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();

/// Takes the pair the TSC's rate published to the agents is measured from
/// now, unless taken already: called when a transport starts, so that the
/// first anchor is published when its heartbeat starts (at least 5 ms
/// later, a heartbeat looking again every millisecond until it is).
pub fn anchor_clock() {
    CLOCK_START.get_or_init(tsc_realtime);
}

/// A `(TSC, CLOCK_REALTIME ns)` pair, the TSC read on both sides of the
/// clock (their midpoint).
fn tsc_realtime() -> (u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let a = rdtsc();
    // SAFETY: a writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let b = rdtsc();
    (
        a + (b.wrapping_sub(a)) / 2,
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
    )
}

/// Publishes the wall clock in TSC ticks for the agent (`ControlHeader::
/// clock_*`): anchored now, its rate measured since `(tsc0, ns0)` (at
/// least 5 ms before, else not yet: false; the rate's error, two clock
/// reads' over the interval, ≈ 2·10⁻⁵ over 5 ms, shrinks at each later
/// anchor, measured since the same start).
fn publish_clock(h: &ControlHeader, tsc0: u64, ns0: u64) -> bool {
    let (tsc, ns) = tsc_realtime();
    let (dt, dn) = (tsc.wrapping_sub(tsc0), ns.wrapping_sub(ns0));
    if dn < 5_000_000 || dt == 0 {
        return false;
    }
    let mult = ((u128::from(dn) << 32) / u128::from(dt)) as u64;
    let seq = h.clock_seq.load(Ordering::Relaxed);
    h.clock_seq.store(seq.wrapping_add(1), Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    h.clock_tsc.store(tsc, Ordering::Relaxed);
    h.clock_ns.store(ns, Ordering::Relaxed);
    h.clock_mult.store(mult, Ordering::Relaxed);
    h.clock_seq.store(seq.wrapping_add(2), Ordering::Release);
    true
}

/// `FUTEX_WAKE` (shared) of one waiter of `w`.
fn futex_wake(w: &AtomicU32) {
    // SAFETY: `w` is a live u32 of the mapping; nothing is written.
    unsafe {
        libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, 1);
    }
}

/// `FUTEX_WAIT` (shared) while `*w == val`, at most `d`.
fn futex_wait(w: &AtomicU32, val: u32, d: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `w` is a live u32 of the mapping; `ts` a timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAIT,
            val,
            &ts as *const libc::timespec,
        );
    }
}

/// The TSC ticks per second, measured against the monotonic clock between
/// two readings (`(tsc, ns)` pairs taken at least a few milliseconds apart).
pub fn tsc_hz(a: (u64, u64), b: (u64, u64)) -> Option<f64> {
    let dt = b.1.checked_sub(a.1)?;
    let dtsc = b.0.checked_sub(a.0)?;
    (dt > 0).then(|| dtsc as f64 * 1e9 / dt as f64)
}

/// A `(TSC, monotonic ns)` pair, for [`tsc_hz`].
pub fn tsc_now() -> (u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (
        rdtsc(),
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
    )
}
