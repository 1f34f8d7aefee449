//! The agent's heap: `dlmalloc` over anonymous mappings of its own (never
//! the target's malloc), behind a spin lock. Allocation happens at `init`
//! and `load`, and on rare paths of a hit (trap messages); a thread never
//! re-enters the agent (the per-thread busy flag), so the lock cannot be
//! taken twice by one thread.

use crate::sync::SpinLock;
use crate::sys;
use core::alloc::{GlobalAlloc, Layout};
use core::ptr;
use dlmalloc::Dlmalloc;

struct Pages;

// SAFETY: `alloc` returns fresh, exclusively owned, zeroed anonymous
// mappings; `free`/`free_part` unmap only ranges dlmalloc got from `alloc`.
unsafe impl dlmalloc::Allocator for Pages {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        match sys::mmap(
            0,
            size,
            sys::PROT_READ | sys::PROT_WRITE,
            sys::MAP_PRIVATE | sys::MAP_ANONYMOUS,
        ) {
            Ok(p) => (p, size, 0),
            Err(_) => (ptr::null_mut(), 0, 0),
        }
    }

    fn remap(&self, _ptr: *mut u8, _old: usize, _new: usize, _can_move: bool) -> *mut u8 {
        ptr::null_mut()
    }

    fn free_part(&self, ptr: *mut u8, old: usize, new: usize) -> bool {
        // SAFETY: the tail of a region this allocator returned.
        unsafe { sys::munmap(ptr.add(new), old - new) == 0 }
    }

    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        // SAFETY: a whole region this allocator returned.
        unsafe { sys::munmap(ptr, size) == 0 }
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        true
    }

    fn allocates_zeros(&self) -> bool {
        true
    }

    fn page_size(&self) -> usize {
        4096
    }
}

struct Heap(SpinLock<Dlmalloc<Pages>>);

/// Counts an allocation in the shared statistics (once there is a region).
#[inline]
fn count() {
    crate::ctrl::stats(|s| {
        s.allocations
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed)
    });
}

/// Bytes the heap grows by at least (dlmalloc's granularity; its own is
/// 64 KiB). The loader runs the agent's `init` and `load` system call by
/// system call (every one a ptrace stop, there and back, of the target's
/// thread): loading the handlers of a whole-program trace grew a heap of
/// 64 KiB mappings nine times. Pages of a mapping not touched cost
/// nothing.
const GRANULARITY: usize = 1 << 20;

#[global_allocator]
static HEAP: Heap = Heap(SpinLock::new({
    let mut d = Dlmalloc::new_with_allocator(Pages);
    assert!(d.set_granularity(GRANULARITY));
    d
}));

// SAFETY: every operation runs under the lock; dlmalloc upholds the
// GlobalAlloc contract for the layouts it is given.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { self.0.lock().malloc(l.size(), l.align()) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { self.0.lock().calloc(l.size(), l.align()) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded contract.
        unsafe { self.0.lock().realloc(p, l.size(), l.align(), new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { self.0.lock().free(p, l.size(), l.align()) }
    }
}
