//! The store lock: a futex mutex (Drepper's three-state word: 0 free, 1
//! held, 2 held with waiters) in the shared control region, taken by the
//! target's threads around handler runs and by the tracer around reading or
//! writing the map regions. The futex operations are the shared (not
//! `_PRIVATE`) ones: the word is in memory two processes map. A waiter
//! gives up after a deadline, so a holder that does not run (a thread
//! stopped by a debugger) cannot stop every other thread for good.

use crate::{sys, vdso};
use core::sync::atomic::{AtomicU32, Ordering};

/// Spins before sleeping (a handler run takes tens of nanoseconds).
const SPINS: u32 = 200;
/// Longest single futex sleep (the deadline is checked between sleeps).
const SLEEP_NS: u64 = 50_000_000;

/// Takes the lock, waiting at most `max_ns`; `false` if it could not.
#[inline]
pub fn lock(w: &AtomicU32, max_ns: u64) -> bool {
    if w.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return true;
    }
    lock_slow(w, max_ns)
}

#[cold]
fn lock_slow(w: &AtomicU32, max_ns: u64) -> bool {
    for _ in 0..SPINS {
        core::hint::spin_loop();
        if w.load(Ordering::Relaxed) == 0
            && w.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return true;
        }
    }
    crate::ctrl::stats(|s| s.lock_waits.fetch_add(1, Ordering::Relaxed));
    let deadline = vdso::clock_ns(sys::CLOCK_MONOTONIC).saturating_add(max_ns);
    loop {
        if w.swap(2, Ordering::Acquire) == 0 {
            return true;
        }
        let now = vdso::clock_ns(sys::CLOCK_MONOTONIC);
        if now >= deadline {
            return false;
        }
        sys::futex_wait(w, 2, (deadline - now).min(SLEEP_NS));
    }
}

/// Releases the lock, waking one waiter if there may be one.
#[inline]
pub fn unlock(w: &AtomicU32) {
    if w.swap(0, Ordering::Release) == 2 {
        sys::futex_wake(w, 1);
    }
}
