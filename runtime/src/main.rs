//! The `wprobe` binary.

/// mimalloc rather than the C library's allocator: arming a large program
/// makes and frees several hundred thousand small values (sites, windows,
/// stubs, journal lines); mimalloc's thread-local free lists cut the
/// warm-cache start-up of `wprobe trace` on `python3.11` by about a
/// sixth (docs/BENCHMARKS.md, "Arming, a ninth time").
#[global_allocator]
static ALLOC: runtime::sys::alloc::Heap = runtime::sys::alloc::Heap;

/// Small pages for the heap from the start: run by the C runtime before
/// the Rust runtime's first allocation (`sys::alloc::no_huge_pages`, the
/// first thing `main` does, turns huge pages back on for the process once
/// the heap is advised against them).
#[used]
#[unsafe(link_section = ".init_array")]
static SMALL_PAGES_FROM_THE_START: extern "C" fn() =
    runtime::sys::alloc::small_pages_from_the_start;

fn main() -> std::process::ExitCode {
    runtime::sys::alloc::keep_freed_memory();
    runtime::sys::alloc::no_huge_pages();
    let code = runtime::cmd::cli::main();
    let keeper = runtime::sys::process::free_memory_after_exit();
    if let Some(pid) = keeper
        && std::env::var_os("WPROBE_DEBUG").is_some()
    {
        runtime::elog!("wprobe: debug: memory freed after the exit by process {pid}");
    }
    code
}
