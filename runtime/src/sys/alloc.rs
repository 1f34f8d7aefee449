//! The binary's allocator (mimalloc, `src/main.rs`): its options.

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

/// The allocator's purge delay (milliseconds; -1: never).
pub fn purge_delay() -> std::os::raw::c_long {
    // SAFETY: reads one of mimalloc's process-wide options.
    unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
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
