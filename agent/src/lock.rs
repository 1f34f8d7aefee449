//! The store lock: a futex mutex (Drepper's three-state word: 0 free, 1
//! held, 2 held with waiters) in the shared control region, taken by the
//! target's threads around handler runs and by the tracer around reading or
//! writing the map regions. The futex operations are the shared (not
//! `_PRIVATE`) ones: the word is in memory two processes map. A waiter
//! gives up after a deadline, so a holder that does not run (a thread
//! stopped by a debugger) cannot stop every other thread for good.
//!
//! Hits take it through [`store`], which adds the bias of
//! [`agent_abi::bias`]: the one thread of a process whose handlers run on
//! one thread takes the store with plain stores.

use crate::{sys, vdso};
use agent_abi::{ControlHeader, bias};
use core::sync::atomic::{AtomicU32, Ordering};

/// How a thread holds the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// It does not.
    No,
    /// As the bias owner, without the lock (`bias.inside` is 1).
    Bias,
    /// With the futex.
    Lock,
}

/// Registers the process for the membarriers that revoke the bias and
/// enables the bias; without them (an old kernel, a seccomp filter) the
/// bias stays off and every hit takes the futex.
pub fn enable_bias(c: &ControlHeader) {
    // SAFETY: membarrier takes no pointers.
    let r = unsafe {
        sys::syscall3(
            bias::SYS_MEMBARRIER,
            bias::MEMBARRIER_REGISTER_GLOBAL_EXPEDITED,
            0,
            0,
        )
    };
    if r == 0 {
        crate::init::note_registered();
        c.bias.owner.store(bias::FREE, Ordering::Release);
    }
}

/// Takes the store for a hit of thread `me` (0: a taker that is no hit,
/// which never claims the bias), waiting at most `max_ns`.
#[inline(always)]
pub fn store(c: &ControlHeader, me: u32, max_ns: u64) -> Held {
    if me != 0 && c.bias.owner.load(Ordering::Relaxed) == me {
        c.bias.inside.store(1, Ordering::Relaxed);
        // No fence: a revoker's membarrier is the other half (see
        // `agent_abi::bias`); the compiler must keep the store first.
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        if c.bias.owner.load(Ordering::Relaxed) == me {
            return Held::Bias;
        }
        c.bias.inside.store(0, Ordering::Release);
    }
    store_locked(c, me, max_ns)
}

/// [`store`] without waiting, for the fast path (`crate::fast`): the
/// bias, or the futex when it is free and no other thread owns the bias
/// (claimed when it is free, as [`store_locked`] does); [`Held::No`] when
/// the hit would have to wait. Uses no vector register.
#[inline(always)]
pub fn try_store(c: &ControlHeader, me: u32) -> Held {
    let owner = c.bias.owner.load(Ordering::Relaxed);
    if owner == me {
        // As in `store`.
        c.bias.inside.store(1, Ordering::Relaxed);
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        if c.bias.owner.load(Ordering::Relaxed) == me {
            return Held::Bias;
        }
        c.bias.inside.store(0, Ordering::Release);
        return Held::No;
    }
    if owner != bias::FREE && owner != bias::OFF {
        return Held::No;
    }
    if c.store_lock
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return Held::No;
    }
    let owner = c.bias.owner.load(Ordering::Acquire);
    if owner == bias::FREE && crate::init::registered() {
        c.bias.owner.store(me, Ordering::Relaxed);
    } else if owner != bias::FREE
        && (owner != bias::OFF || c.bias.inside.load(Ordering::Acquire) != 0)
    {
        // Owned by another thread since, or a former owner still inside.
        unlock(&c.store_lock);
        return Held::No;
    }
    Held::Lock
}

/// The futex path of [`store`]: a claim of a free bias, the revocation of
/// another thread's, or the wait for a former owner to leave.
#[cold]
fn store_locked(c: &ControlHeader, me: u32, max_ns: u64) -> Held {
    if !lock(&c.store_lock, max_ns) {
        return Held::No;
    }
    let owner = c.bias.owner.load(Ordering::Acquire);
    if owner == bias::FREE {
        if me != 0 && crate::init::registered() {
            // Nobody can hold the bias while the futex is held: claim it
            // (not in a fork child, whose CPUs the revoker's membarrier
            // would not reach).
            c.bias.owner.store(me, Ordering::Relaxed);
        }
        return Held::Lock;
    }
    let revoked = c.bias.revoke(
        // SAFETY: membarrier takes no pointers.
        || unsafe { sys::syscall3(bias::SYS_MEMBARRIER, bias::MEMBARRIER_GLOBAL_EXPEDITED, 0, 0) } == 0,
        || sys::futex_wait(&AtomicU32::new(0), 0, 1_000_000),
    );
    if revoked {
        c.stats.bias_revoked.fetch_add(1, Ordering::Relaxed);
    }
    // A former owner may still be inside (the deadline read only then).
    let mut deadline = 0;
    let out = c.bias.wait_out(
        || {
            let now = vdso::clock_ns(sys::CLOCK_MONOTONIC);
            if deadline == 0 {
                deadline = now.saturating_add(max_ns);
            }
            now >= deadline
        },
        // SAFETY: no arguments.
        || unsafe {
            sys::syscall0(sys::SYS_SCHED_YIELD);
        },
    );
    if !out {
        unlock(&c.store_lock);
        return Held::No;
    }
    Held::Lock
}

/// Leaves the store as [`store`] took it.
#[inline(always)]
pub fn release(c: &ControlHeader, held: Held) {
    match held {
        Held::Bias => c.bias.inside.store(0, Ordering::Release),
        Held::Lock => unlock(&c.store_lock),
        Held::No => {}
    }
}

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
