//! Writing handler runs into the shared ring. One producer at a time (the
//! holder of the store lock), one consumer (the tracer). An entry is a
//! [`RunHeader`] and its records, contiguous: one that would cross the
//! ring's end is preceded by a pad entry to the end. When the ring has no
//! room the producer waits for the tracer to drain it (a futex on
//! `producer_waiting`, which the tracer wakes), at most
//! [`RING_WAIT_MAX_NS`] and never once the tracer's heartbeat is stale, or
//! not at all when the tracer said so (`drop_when_full`,
//! `--ring-full=drop`); then the run's records are dropped and counted,
//! never lost silently.

use crate::{sys, vdso};
use agent_abi::{ControlHeader, RING_WAIT_MAX_NS, RunHeader, entry};
use core::sync::atomic::{AtomicU64, Ordering};

/// How far past the end of a run's entry the next runs' lines are
/// prefetched for writing (a few entries of a traced call).
const PREFETCH_AHEAD: u64 = 256;

/// Most lines prefetched per entry.
const PREFETCH_LINES: u64 = 4;

/// Longest single futex sleep while waiting for room.
const SLEEP_NS: u64 = 10_000_000;

/// Whether the tracer's heartbeat is stale (it stopped or died).
#[inline]
pub fn heartbeat_stale(c: &ControlHeader, tsc: u64) -> bool {
    let stale = c.stale_ticks.load(Ordering::Relaxed);
    if stale == 0 {
        return false;
    }
    let beat = c.heartbeat_tsc.load(Ordering::Relaxed);
    // Signed: the tracer's TSC may be read on a CPU slightly ahead of ours.
    (tsc.wrapping_sub(beat) as i64) > stale as i64
}

/// Writes one run's entry, built whole by the run's sink
/// ([`crate::host::RunSink::entry`]); `false` when there was no room in
/// time (the caller counts the drop).
pub fn push_entry(c: &ControlHeader, e: &[u8]) -> bool {
    let cap = c.ring_size;
    let size = e.len() as u64;
    if size > cap / 2 {
        return false;
    }
    let Some(at) = reserve(c, size) else {
        return false;
    };
    // SAFETY: `reserve` gave `size` bytes at `at`, released by the consumer.
    unsafe { core::ptr::copy_nonoverlapping(e.as_ptr(), at.0, e.len()) };
    c.ring.head.store(at.1, Ordering::Release);
    true
}

/// Writes a notice: `head` (its `size` and `kind` set here) and `words`
/// after it ([`entry::ENTERED`]: the entry's `rsp`; [`entry::RETURNED`]:
/// `rax`, the entry's `rsp`, the duration); `false` when there was no
/// room in time.
#[inline(always)]
pub fn push_notice<const N: usize>(
    c: &ControlHeader,
    mut head: RunHeader,
    kind: u16,
    words: [u64; N],
) -> bool {
    let size = agent_abi::RUN_HEADER_SIZE + 8 * N;
    head.size = size as u32;
    head.kind = kind;
    let Some(at) = reserve(c, size as u64) else {
        return false;
    };
    // SAFETY: `reserve` gave `size` bytes at `at` (8-aligned), released by
    // the consumer; RunHeader is plain data of RUN_HEADER_SIZE bytes.
    unsafe {
        core::ptr::write_unaligned(at.0 as *mut RunHeader, head);
        core::ptr::write_unaligned(at.0.add(agent_abi::RUN_HEADER_SIZE) as *mut [u64; N], words);
    }
    c.ring.head.store(at.1, Ordering::Release);
    true
}

/// Room for an entry of `size` bytes (8-aligned) at the ring's head, a pad
/// entry written before it when it would cross the ring's end: where to
/// write it, and the head to publish once it is written. `None` when the
/// ring stayed full.
#[inline(always)]
fn reserve(c: &ControlHeader, size: u64) -> Option<(*mut u8, u64)> {
    reserve_with(c, size, wait_for_room)
}

/// [`reserve`] without waiting: `None` at once when the ring has no room
/// now (the fast path then leaves the hit to `dispatch`, which waits).
/// Uses no vector register (see `crate::fast`).
#[inline(always)]
pub fn reserve_now(c: &ControlHeader, size: u64) -> Option<(*mut u8, u64)> {
    reserve_with(c, size, |c, head, need| {
        head + need - TAIL_SEEN.load(Ordering::Relaxed) <= c.ring_size || {
            let tail = c.ring.tail.load(Ordering::Acquire);
            TAIL_SEEN.store(tail, Ordering::Relaxed);
            head + need - tail <= c.ring_size
        }
    })
}

/// [`reserve`], room waited for by `room(c, head, need)`.
#[inline(always)]
fn reserve_with(
    c: &ControlHeader,
    size: u64,
    room: impl FnOnce(&ControlHeader, u64, u64) -> bool,
) -> Option<(*mut u8, u64)> {
    let cap = c.ring_size;
    let h = c.ring.head.load(Ordering::Relaxed);
    let off = h & (cap - 1);
    let pad = if off + size > cap { cap - off } else { 0 };
    if !room(c, h, pad + size) {
        return None;
    }
    // SAFETY: `init` checked ring_off + ring_size is inside the region; the
    // bytes written lie in [h, h + pad + size), which the consumer has
    // released (tail); entries and the ring's end are 8-aligned.
    unsafe {
        let base = crate::ctrl::base(c).add(c.ring_off as usize);
        // The lines the next runs will write were last read by the tracer
        // on another CPU: ask for them in exclusive state now, so that the
        // next runs' stores do not wait for them (a hint: it cannot fault).
        // As many lines as this entry took, at least two: an entry of a
        // traced call (72 or 88 bytes) spans two lines as often as one, and
        // one line per entry left the other's stores waiting (6 ns per
        // call in `wprobe trace`).
        let ahead = off + size + PREFETCH_AHEAD;
        for line in 0..size.div_ceil(64).clamp(2, PREFETCH_LINES) {
            let at = (ahead + 64 * line) & (cap - 1);
            core::arch::asm!("prefetchw [{}]", in(reg) base.add(at as usize),
                             options(nostack, preserves_flags, readonly));
        }
        let mut at = off as usize;
        if pad != 0 {
            // A pad needs only `size` and `kind`, its first 8 bytes
            // (`RunHeader`'s first fields), written as one word.
            let word = pad | u64::from(entry::PAD) << 32;
            (base.add(at) as *mut u64).write_volatile(word);
            at = 0;
        }
        Some((base.add(at), h + pad + size))
    }
}

/// The consumer's `tail` as the producer last read it: `tail` only grows,
/// so while this one leaves room the shared word (which the tracer writes
/// at every drain: a cache miss here each time) need not be read. Written
/// by the holder of the store lock only.
static TAIL_SEEN: AtomicU64 = AtomicU64::new(0);

/// Waits until `need` bytes from `head` are free.
#[inline(always)]
fn wait_for_room(c: &ControlHeader, head: u64, need: u64) -> bool {
    head + need - TAIL_SEEN.load(Ordering::Relaxed) <= c.ring_size
        || wait_for_room_slow(c, head, need)
}

#[cold]
fn wait_for_room_slow(c: &ControlHeader, head: u64, need: u64) -> bool {
    let room = |c: &ControlHeader| {
        let tail = c.ring.tail.load(Ordering::Acquire);
        TAIL_SEEN.store(tail, Ordering::Relaxed);
        head + need - tail <= c.ring_size
    };
    if room(c) {
        return true;
    }
    if c.ring.drop_when_full.load(Ordering::Relaxed) != 0 {
        return false;
    }
    c.stats.ring_waits.fetch_add(1, Ordering::Relaxed);
    let deadline = vdso::clock_ns(sys::CLOCK_MONOTONIC).saturating_add(RING_WAIT_MAX_NS);
    loop {
        if heartbeat_stale(c, sys::rdtsc()) {
            return false;
        }
        c.ring.producer_waiting.store(1, Ordering::SeqCst);
        if room(c) {
            return true;
        }
        let now = vdso::clock_ns(sys::CLOCK_MONOTONIC);
        if now >= deadline {
            return false;
        }
        sys::futex_wait(&c.ring.producer_waiting, 1, (deadline - now).min(SLEEP_NS));
        if room(c) {
            return true;
        }
    }
}
