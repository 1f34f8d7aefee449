//! The binary's allocator (mimalloc, `src/main.rs`): how Rust's
//! allocations reach it ([`Heap`]), and its options.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// The alignment every block of mimalloc's has (a machine word): an
/// allocation asking no more goes to its plain entry points.
const WORD: usize = std::mem::size_of::<usize>();

/// mimalloc as Rust's global allocator (`src/main.rs`). An allocation of
/// an alignment of a word or less (nearly every one: strings, vectors of
/// bytes, of addresses, of instructions) goes to `mi_malloc`, which gives
/// every block that alignment; a larger one to `mi_malloc_aligned`. The
/// `mimalloc` crate's allocator calls `mi_malloc_aligned` for every one:
/// 58 instructions an allocation, for the 360,000 a warm `wprobe trace`
/// of python3.11 makes before it is armed (callgrind), where the plain
/// entry point takes its fast path.
pub struct Heap;

// SAFETY: mimalloc's entry points return blocks of at least the size
// asked, aligned to a word at least (`mi_malloc`, `mi_zalloc`,
// `mi_realloc`) or to the alignment asked (the `_aligned` ones), or null;
// `mi_free` takes any block of theirs; a reallocation keeps the block's
// contents up to the smaller size and frees the old block when it moved.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl's comment; the size is nonzero (the
        // caller's contract).
        unsafe {
            if layout.align() <= WORD {
                libmimalloc_sys::mi_malloc(layout.size()).cast()
            } else {
                libmimalloc_sys::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe {
            if layout.align() <= WORD {
                libmimalloc_sys::mi_zalloc(layout.size()).cast()
            } else {
                libmimalloc_sys::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` is a block of this allocator (the caller's
        // contract).
        unsafe { libmimalloc_sys::mi_free(ptr.cast::<c_void>()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` is a block of this allocator allocated with
        // `layout`'s alignment (the caller's contract), kept by the entry
        // point of the same alignment.
        unsafe {
            if layout.align() <= WORD {
                libmimalloc_sys::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                libmimalloc_sys::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align())
                    .cast()
            }
        }
    }
}

/// mimalloc's `mi_option_purge_delay`: its index in `mi_option_e` of the
/// mimalloc v3 that `libmimalloc-sys` 0.1.49 builds (the crate names no
/// constant for it; `the_purge_delay_is_mimallocs` checks the index).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells the allocator to keep the memory freed rather than give it back
/// to the kernel after a delay: a trace's reader frees and allocates again
/// buffers of its records at every drain of the ring, and memory given
/// back in between came back as fresh (zeroed, huge) pages, page fault by
/// page fault — 10 % more per traced call (docs/BENCHMARKS.md, "Arming, a
/// ninth time"). The C library's allocator kept it the same way.
pub fn keep_freed_memory() {
    // SAFETY: sets one of mimalloc's process-wide options, which any
    // thread may do at any time (mimalloc reads them atomically).
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
}

/// Whether [`small_pages_from_the_start`] turned transparent huge pages
/// off for the process (they were on): [`no_huge_pages`] turns them back
/// on once the heap's arena is advised against them.
static THP_OFF_AT_START: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns transparent huge pages off for the whole process
/// (`PR_SET_THP_DISABLE`) until [`no_huge_pages`] runs: for the binary's
/// `.init_array` (`src/main.rs`), before the Rust runtime's first
/// allocation, which touches the arena mimalloc reserves first, and
/// before `main`, where [`no_huge_pages`] advises that arena against
/// them. Without it the pages touched before were huge (two, 4 MB, in
/// wprobe's arena while it traced: `/proc/PID/smaps`), each zeroed whole
/// at its first touch, 4–5 ms a page after a few seconds idle on a
/// virtual machine (docs/BENCHMARKS.md, "Arming, a thirteenth time").
/// Left as it was when they were off already (inherited: the traced
/// command inherits that, not wprobe's choice).
pub extern "C" fn small_pages_from_the_start() {
    // SAFETY: prctl with integer arguments only; reads and sets a flag of
    // the calling process.
    let off = unsafe {
        libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 0
            && libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0
    };
    THP_OFF_AT_START.store(off, std::sync::atomic::Ordering::Relaxed);
}

/// Turns transparent huge pages back on for the process if
/// [`small_pages_from_the_start`] turned them off: the command wprobe
/// starts inherits the flag.
fn huge_pages_back() {
    if THP_OFF_AT_START.swap(false, std::sync::atomic::Ordering::Relaxed) {
        // SAFETY: prctl with integer arguments only.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
        }
    }
}

/// mimalloc's `mi_option_allow_thp`: its index in `mi_option_e`
/// (`the_huge_page_option_is_mimallocs` checks it).
const ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Tells the allocator to back its memory with pages of 4 KiB, not
/// transparent huge pages: the arena mimalloc reserved at start-up
/// (`madvise(MADV_NOHUGEPAGE)` over its mapping, found in
/// `/proc/self/maps` by an address allocated in it) and any it reserves
/// later (`mi_option_allow_thp`, which mimalloc checks at each
/// reservation; set at start-up it would disable huge pages with
/// `PR_SET_THP_DISABLE`, which the traced program would inherit across
/// `execve`). A huge page is zeroed whole at its first touch, and where
/// the kernel must first compact memory or the hypervisor back the page
/// (a virtual machine reporting free pages to its host) that took 4–5 ms
/// a page: a warm `wprobe trace` of python3.11 `--version` took 207–297 ms
/// after a few seconds idle against 104–126 ms with pages of 4 KiB
/// (docs/BENCHMARKS.md, "Arming, a thirteenth time"). A failure leaves
/// the allocator as it was. Then huge pages are back on for the process
/// if [`small_pages_from_the_start`] turned them off.
pub fn no_huge_pages() {
    advise_the_arena();
    huge_pages_back();
}

/// [`no_huge_pages`]'s advice to the allocator and its arena.
fn advise_the_arena() {
    // SAFETY: sets one of mimalloc's process-wide options, which any
    // thread may do at any time (mimalloc reads them atomically).
    unsafe { libmimalloc_sys::mi_option_set(ALLOW_THP, 0) }
    let probe = Box::new(0u64);
    let at = std::ptr::from_ref(&*probe) as usize;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    let Some((start, end)) = maps.lines().find_map(|l| {
        let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        );
        (lo <= at && at < hi).then_some((lo, hi))
    }) else {
        return;
    };
    // SAFETY: advice on a mapping of this process's heap, found above,
    // that changes how later page faults are served, not its contents.
    unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            end - start,
            libc::MADV_NOHUGEPAGE,
        );
    }
}

/// Whether mimalloc may use transparent huge pages for the arenas it
/// reserves ([`no_huge_pages`]).
pub fn huge_pages_allowed() -> bool {
    // SAFETY: reads one of mimalloc's process-wide options.
    unsafe { libmimalloc_sys::mi_option_get(ALLOW_THP) != 0 }
}

/// The allocator's purge delay (milliseconds; -1: never).
pub fn purge_delay() -> std::os::raw::c_long {
    // SAFETY: reads one of mimalloc's process-wide options.
    unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    /// Blocks of every alignment from 1 to 4096 and of sizes around
    /// mimalloc's size classes are aligned as asked, keep their bytes when
    /// grown and shrunk, and come zeroed when asked.
    #[test]
    fn the_heap_gives_the_alignment_asked() {
        let h = super::Heap;
        for shift in 0..13 {
            let align = 1usize << shift;
            for size in [1, 7, 8, 9, 16, 24, 40, 48, 100, 1000, 5000, 70_000] {
                let size = size.max(align);
                let l = Layout::from_size_align(size, align).unwrap();
                // SAFETY: nonzero sizes; every block freed once, with the
                // layout it was made with.
                unsafe {
                    let p = h.alloc(l);
                    assert!(
                        !p.is_null() && (p as usize).is_multiple_of(align),
                        "{size} {align}"
                    );
                    std::ptr::write_bytes(p, 0xa5, size);
                    let q = h.realloc(p, l, size * 3);
                    assert!(
                        !q.is_null() && (q as usize).is_multiple_of(align),
                        "{size} {align} grown"
                    );
                    assert!((0..size).all(|i| *q.add(i) == 0xa5));
                    let l3 = Layout::from_size_align(size * 3, align).unwrap();
                    let r = h.realloc(q, l3, size);
                    assert!(
                        !r.is_null() && (r as usize).is_multiple_of(align),
                        "{size} {align} shrunk"
                    );
                    assert!((0..size).all(|i| *r.add(i) == 0xa5));
                    h.dealloc(r, l);
                    let z = h.alloc_zeroed(l);
                    assert!(!z.is_null() && (z as usize).is_multiple_of(align));
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    h.dealloc(z, l);
                }
            }
        }
    }

    /// Index 43 is `allow_thp`: on by default, then off once
    /// [`super::no_huge_pages`] ran, and the heap's mapping no longer
    /// advised for huge pages (`/proc/self/smaps`: no `hg` flag).
    #[test]
    fn the_huge_page_option_is_mimallocs() {
        if std::env::var_os("WPROBE_TEST_THP").is_some() {
            assert!(super::huge_pages_allowed());
            super::no_huge_pages();
            assert!(!super::huge_pages_allowed());
            let probe = Box::new(0u64);
            let at = std::ptr::from_ref(&*probe) as usize;
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut inside = false;
            for l in smaps.lines() {
                if let Some((lo, hi)) = l.split_whitespace().next().and_then(|r| r.split_once('-'))
                    && let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= at && at < hi;
                }
                if inside && let Some(flags) = l.strip_prefix("VmFlags:") {
                    assert!(flags.contains(" nh"), "{flags}");
                    assert!(!flags.contains(" hg"), "{flags}");
                    return;
                }
            }
            panic!("no mapping holds {at:#x}");
        }
        let me = std::env::current_exe().unwrap();
        let o = std::process::Command::new(me)
            .args([
                "--exact",
                "sys::alloc::tests::the_huge_page_option_is_mimallocs",
            ])
            .env("WPROBE_TEST_THP", "1")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
        assert!(String::from_utf8_lossy(&o.stdout).contains("1 passed"));
    }

    /// Index 15 is the purge delay: its default (1,000 ms in mimalloc v3),
    /// then what the environment variable of that option sets, in a child
    /// (options are read once, at the allocator's start).
    #[test]
    fn the_purge_delay_is_mimallocs() {
        if let Ok(v) = std::env::var("WPROBE_TEST_PURGE_DELAY") {
            assert_eq!(super::purge_delay().to_string(), v);
            return;
        }
        assert_eq!(super::purge_delay(), 1000);
        let me = std::env::current_exe().unwrap();
        let o = std::process::Command::new(me)
            .args(["--exact", "sys::alloc::tests::the_purge_delay_is_mimallocs"])
            .env("WPROBE_TEST_PURGE_DELAY", "123")
            .env("MIMALLOC_PURGE_DELAY", "123")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
        assert!(String::from_utf8_lossy(&o.stdout).contains("1 passed"));
    }
}
