//! Locks without libc or futexes: spin, then yield the CPU. Used for the
//! heap, the store, and wasmtime's `custom-sync-primitives` hooks (which
//! guard engine-wide registries touched at load time, never per hit).

use crate::sys;
use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Spins before each `sched_yield` while a lock is held by another thread.
const SPINS_BEFORE_YIELD: u32 = 128;

pub struct SpinLock<T> {
    locked: AtomicU32,
    data: UnsafeCell<T>,
}

// SAFETY: access to `data` is serialised by `locked`.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub const fn new(v: T) -> Self {
        SpinLock {
            locked: AtomicU32::new(0),
            data: UnsafeCell::new(v),
        }
    }

    pub fn lock(&self) -> Guard<'_, T> {
        raw_lock(&self.locked);
        Guard { l: self }
    }
}

pub struct Guard<'a, T> {
    l: &'a SpinLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the lock is held.
        unsafe { &*self.l.data.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the lock is held.
        unsafe { &mut *self.l.data.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.l.locked.store(0, Ordering::Release);
    }
}

fn raw_lock(w: &AtomicU32) {
    let mut spins = 0;
    while w
        .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spin_or_yield(&mut spins);
    }
}

#[inline]
fn spin_or_yield(spins: &mut u32) {
    *spins += 1;
    if *spins < SPINS_BEFORE_YIELD {
        core::hint::spin_loop();
    } else {
        *spins = 0;
        sys::sched_yield();
    }
}

// wasmtime's custom synchronisation hooks. A lock is one `usize` word,
// zero when free (the "lazy initialisation" is therefore a no-op).

const WRITER: usize = 1 << (usize::BITS - 1);

fn word<'a>(lock: *mut usize) -> &'a AtomicUsize {
    // SAFETY: wasmtime passes a pointer to a live, aligned `usize` lock word
    // that it only accesses through these functions.
    unsafe { AtomicUsize::from_ptr(lock) }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_sync_lock_free(_lock: *mut usize) {}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_sync_lock_acquire(lock: *mut usize) {
    let w = word(lock);
    let mut spins = 0;
    while w
        .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spin_or_yield(&mut spins);
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_sync_lock_release(lock: *mut usize) {
    word(lock).store(0, Ordering::Release);
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_sync_rwlock_free(_lock: *mut usize) {}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_sync_rwlock_read(lock: *mut usize) {
    let w = word(lock);
    let mut spins = 0;
    loop {
        let v = w.load(Ordering::Relaxed);
        if v & WRITER == 0
            && w.compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        spin_or_yield(&mut spins);
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_sync_rwlock_read_release(lock: *mut usize) {
    word(lock).fetch_sub(1, Ordering::Release);
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_sync_rwlock_write(lock: *mut usize) {
    let w = word(lock);
    let mut spins = 0;
    while w
        .compare_exchange_weak(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spin_or_yield(&mut spins);
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_sync_rwlock_write_release(lock: *mut usize) {
    word(lock).store(0, Ordering::Release);
}
