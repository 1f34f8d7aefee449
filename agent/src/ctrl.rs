//! The shared control region (mapped `MAP_SHARED` by the tracer too): its
//! header, the probe table, the global variables, the programs' map
//! regions, the error message area. Every offset was validated by `init`
//! (the header's) or `load` (a program's map region) before it is used.

use agent_abi::{ControlHeader, ERR_MSG_BYTES, PROBE_SLOT_SIZE, ProbeSlot, Stats};
use core::sync::atomic::{AtomicPtr, Ordering};

/// The region, once `init` validated it.
pub static CTRL: AtomicPtr<ControlHeader> = AtomicPtr::new(core::ptr::null_mut());

#[inline(always)]
pub fn get() -> Option<&'static ControlHeader> {
    let p = CTRL.load(Ordering::Acquire);
    // SAFETY: set once by `init` to a validated, live mapping that is
    // never unmapped while the agent may run.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Runs `f` on the counters, if there is a region.
#[inline(always)]
pub fn stats<R>(f: impl FnOnce(&Stats) -> R) -> Option<R> {
    get().map(|c| f(&c.stats))
}

/// The base address of the region.
#[inline(always)]
pub fn base(c: &ControlHeader) -> *mut u8 {
    c as *const ControlHeader as *mut u8
}

/// Probe slot `p`, if it is inside the table.
#[inline(always)]
pub fn probe(c: &ControlHeader, p: u32) -> Option<&'static ProbeSlot> {
    if u64::from(p) >= c.probes_cap {
        return None;
    }
    // SAFETY: `init` checked that probes_off + probes_cap * PROBE_SLOT_SIZE
    // lies inside the region and is 64-aligned; `p` is below the capacity.
    Some(unsafe {
        &*(base(c).add(c.probes_off as usize + p as usize * PROBE_SLOT_SIZE) as *const ProbeSlot)
    })
}

/// Writes `code` and `msg` (truncated) into the region's error area.
/// Concurrent writers may interleave bytes; the message is diagnostics only.
pub fn set_error(code: i32, msg: &[u8]) {
    if let Some(c) = get() {
        let n = msg.len().min(ERR_MSG_BYTES);
        let dst = c.err_msg.as_ptr() as *mut u8;
        // SAFETY: `err_msg` is ERR_MSG_BYTES bytes inside the region.
        unsafe { core::ptr::copy_nonoverlapping(msg.as_ptr(), dst, n) };
        c.err_len.store(n as u32, Ordering::Release);
        c.err_code.store(code, Ordering::Release);
    }
}

/// A `core::fmt::Write` into a fixed buffer (no allocation: usable in the
/// panic handler and on out-of-memory paths).
pub struct FixedBuf<const N: usize> {
    pub buf: [u8; N],
    pub len: usize,
}

impl<const N: usize> FixedBuf<N> {
    pub const fn new() -> Self {
        FixedBuf {
            buf: [0; N],
            len: 0,
        }
    }
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> core::fmt::Write for FixedBuf<N> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// The global-variable array of the region (`gvars_len` entries in use).
pub fn gvars(c: &ControlHeader) -> &'static mut [u64] {
    let len = (c.gvars_len.load(Ordering::Relaxed) as usize).min(c.gvars_cap as usize);
    // SAFETY: `init` checked that gvars_off + 8 * gvars_cap is inside the
    // region and 8-aligned; `len` is at most the capacity. Only the holder
    // of the store lock touches them.
    unsafe { core::slice::from_raw_parts_mut(base(c).add(c.gvars_off as usize) as *mut u64, len) }
}

/// The bytes `[off, off + len)` of the region, if they are inside it.
pub fn bytes(c: &ControlHeader, off: u64, len: u64) -> Option<&'static mut [u8]> {
    let end = off.checked_add(len)?;
    if end > c.region_size {
        return None;
    }
    // SAFETY: inside the validated region; callers hold the store lock (map
    // regions) or run the tracer-serialised control path (requests).
    Some(unsafe { core::slice::from_raw_parts_mut(base(c).add(off as usize), len as usize) })
}
