//! The tracer's view of the shared control region: a memfd mapped
//! `MAP_SHARED` both here and in the target. Layout:
//!
//! | offset | what |
//! |---|---|
//! | 0 | [`ControlHeader`] (one page) |
//! | 4096 | global variables (`gvars_cap` × u64) |
//! | after | record ring (`ring_size`, a power of two) |
//! | after | scratch: load requests, site names, precompiled modules |

use agent_abi::{
    AGENT_ABI_VERSION, CONTROL_HEADER_SIZE, CTRL_MAGIC, ControlHeader, RECORD_HEADER_SIZE,
    RecordHeader, rec,
};
use anyhow::{Result, ensure};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

/// Sizes of the parts of a region.
#[derive(Clone, Copy, Debug)]
pub struct RegionLayout {
    /// Global variables the region holds.
    pub gvars_cap: u64,
    /// Bytes of the record ring (power of two).
    pub ring_size: u64,
    /// Bytes of scratch (modules are copied here for `load`).
    pub scratch_size: u64,
}

impl Default for RegionLayout {
    fn default() -> Self {
        RegionLayout {
            gvars_cap: 512,
            ring_size: 1 << 20,
            scratch_size: 8 << 20,
        }
    }
}

impl RegionLayout {
    /// Offset of the global variables.
    pub fn gvars_off(&self) -> u64 {
        4096
    }
    /// Offset of the ring.
    pub fn ring_off(&self) -> u64 {
        (self.gvars_off() + 8 * self.gvars_cap).next_multiple_of(4096)
    }
    /// Offset of the scratch area.
    pub fn scratch_off(&self) -> u64 {
        self.ring_off() + self.ring_size
    }
    /// Total size.
    pub fn size(&self) -> u64 {
        self.scratch_off() + self.scratch_size
    }
}

/// One record read from the ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The header (kind, codes, site, tid, TSC).
    pub header: RecordHeader,
    /// Data bytes.
    pub data: Vec<u8>,
    /// Item descriptors.
    pub items: Vec<u32>,
}

/// A snapshot of the agent's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs, reason = "the fields mirror agent_abi::Stats")]
pub struct StatsSnapshot {
    pub handled: u64,
    pub dormant: u64,
    pub no_handler: u64,
    pub reentered: u64,
    pub contended: u64,
    pub fuel_exhausted: u64,
    pub trapped: u64,
    pub records_dropped: u64,
    pub threads: u64,
    pub no_slot: u64,
    pub allocations: u64,
}

/// The tracer's mapping of a shared region.
pub struct Region {
    ptr: *mut u8,
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
    pub fn map(file: File, layout: RegionLayout) -> Result<Region> {
        let size = layout.size() as usize;
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
            layout,
            file,
            scratch_next: layout.scratch_off(),
        };
        // SAFETY: the header is at offset 0 of the mapping, zeroed by the memfd.
        unsafe {
            let h = r.ptr as *mut ControlHeader;
            (&raw mut (*h).magic).write(CTRL_MAGIC);
            (&raw mut (*h).abi_version).write(AGENT_ABI_VERSION);
            (&raw mut (*h).header_size).write(CONTROL_HEADER_SIZE as u32);
            (&raw mut (*h).region_size).write(size as u64);
            (&raw mut (*h).gvars_off).write(layout.gvars_off());
            (&raw mut (*h).gvars_cap).write(layout.gvars_cap);
            (&raw mut (*h).ring_off).write(layout.ring_off());
            (&raw mut (*h).ring_size).write(layout.ring_size);
        }
        Ok(r)
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

    /// The counters.
    pub fn stats(&self) -> StatsSnapshot {
        let s = &self.header().stats;
        let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            handled: l(&s.handled),
            dormant: l(&s.dormant),
            no_handler: l(&s.no_handler),
            reentered: l(&s.reentered),
            contended: l(&s.contended),
            fuel_exhausted: l(&s.fuel_exhausted),
            trapped: l(&s.trapped),
            records_dropped: l(&s.records_dropped),
            threads: l(&s.threads),
            no_slot: l(&s.no_slot),
            allocations: l(&s.allocations),
        }
    }

    /// Consumes every complete record in the ring.
    pub fn drain(&self) -> Vec<Record> {
        let h = self.header();
        let cap = self.layout.ring_size;
        let base = self.layout.ring_off() as usize;
        let head = h.ring.head.load(Ordering::Acquire);
        let mut tail = h.ring.tail.load(Ordering::Relaxed);
        let mut out = Vec::new();
        while tail < head {
            let off = (tail & (cap - 1)) as usize;
            let mut hb = [0u8; RECORD_HEADER_SIZE];
            let avail = (cap as usize - off).min(RECORD_HEADER_SIZE);
            self.copy_out(base + off, &mut hb[..avail]);
            // SAFETY: RecordHeader is plain data; a pad record uses only its
            // first 8 bytes (the rest may be stale, and is ignored).
            let rh: RecordHeader = unsafe { std::ptr::read_unaligned(hb.as_ptr() as *const _) };
            if rh.kind == rec::PAD {
                tail += u64::from(rh.size);
                continue;
            }
            let body = base + off + RECORD_HEADER_SIZE;
            let mut data = vec![0u8; rh.data_len as usize];
            self.copy_out(body, &mut data);
            let mut ib = vec![0u8; 4 * rh.n_items as usize];
            self.copy_out(body + data.len(), &mut ib);
            let items = ib
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            out.push(Record {
                header: rh,
                data,
                items,
            });
            tail += u64::from(rh.size);
        }
        h.ring.tail.store(tail, Ordering::Release);
        out
    }

    fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.len());
        // SAFETY: inside the mapping (asserted).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) };
    }

    /// Copies `bytes` into the scratch area (8-aligned); returns its offset.
    pub fn put(&mut self, bytes: &[u8]) -> Result<u64> {
        let off = self.scratch_next.next_multiple_of(8);
        let end = off + bytes.len() as u64;
        ensure!(
            end <= self.layout.size(),
            "region scratch full ({} bytes needed)",
            bytes.len()
        );
        // SAFETY: inside the scratch area (checked), which only the tracer writes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(off as usize), bytes.len())
        };
        self.scratch_next = end;
        Ok(off)
    }

    /// Forgets everything in the scratch area (after `load` returned, the
    /// agent holds its own copies).
    pub fn reset_scratch(&mut self) {
        self.scratch_next = self.layout.scratch_off();
    }

    /// Sets the tracer's enable switch.
    pub fn set_enabled(&self, on: bool) {
        self.header()
            .enabled
            .store(u32::from(on), Ordering::Release);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len()) };
    }
}
