//! The shared control region (mapped `MAP_SHARED` by the tracer too): its
//! header, the error message area, the global variables and the record ring.

use agent_abi::{ControlHeader, ERR_MSG_BYTES, RecordHeader, Stats, rec, record_size};
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
    let len = c.gvars_len.load(Ordering::Relaxed) as usize;
    // SAFETY: `init` checked that gvars_off + 8 * gvars_cap is inside the
    // region and 8-aligned, and `load` keeps gvars_len <= gvars_cap. Only the
    // thread holding the store lock writes them.
    unsafe {
        core::slice::from_raw_parts_mut(
            (c as *const ControlHeader as *mut u8).add(c.gvars_off as usize) as *mut u64,
            len,
        )
    }
}

/// Appends one record to the ring; `false` (and a drop counted) when the
/// consumer has not made room. Only the thread holding the store lock calls
/// this: the ring has a single producer at any time.
pub fn ring_push(c: &ControlHeader, mut h: RecordHeader, data: &[u8], items: &[u8]) -> bool {
    let cap = c.ring_size;
    let size = record_size(data.len(), items.len() / 4) as u64;
    h.size = size as u32;
    h.data_len = data.len() as u32;
    h.n_items = (items.len() / 4) as u32;
    let head = c.ring.head.load(Ordering::Relaxed);
    let tail = c.ring.tail.load(Ordering::Acquire);
    let off = head & (cap - 1);
    let pad = if off + size > cap { cap - off } else { 0 };
    if size > cap || head + pad + size - tail > cap {
        c.stats.records_dropped.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    // SAFETY: `init` checked ring_off + ring_size is inside the region; the
    // bytes written lie in [head, head + pad + size), which the consumer has
    // released (tail); records and the data area are 8-aligned.
    unsafe {
        let base = (c as *const ControlHeader as *mut u8).add(c.ring_off as usize);
        let mut at = off;
        if pad != 0 {
            let p = RecordHeader {
                size: pad as u32,
                kind: rec::PAD,
                ..Default::default()
            };
            // A pad needs only `size` and `kind` (8 bytes); the tail end of
            // the ring is a multiple of 8.
            core::ptr::copy_nonoverlapping(
                &p as *const RecordHeader as *const u8,
                base.add(at as usize),
                8,
            );
            at = 0;
        }
        let dst = base.add(at as usize);
        core::ptr::copy_nonoverlapping(
            &h as *const RecordHeader as *const u8,
            dst,
            agent_abi::RECORD_HEADER_SIZE,
        );
        let d = dst.add(agent_abi::RECORD_HEADER_SIZE);
        core::ptr::copy_nonoverlapping(data.as_ptr(), d, data.len());
        core::ptr::copy_nonoverlapping(items.as_ptr(), d.add(data.len()), items.len());
    }
    c.ring.head.store(head + pad + size, Ordering::Release);
    true
}
