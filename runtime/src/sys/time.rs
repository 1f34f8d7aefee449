//! Clocks, and the local time (`strftime`).

/// The time of `clock` in ns.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a live timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// CLOCK_REALTIME in ns.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC in ns (the perf clock).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC` now, in ns: what turns a monotonic
/// time (the perf clock, a hit's monotonic time) into wall-clock time.
/// The realtime read is bracketed by two monotonic reads, five times, and
/// the tightest bracket wins: a thread preempted between two plain reads
/// would be off by the whole preemption (milliseconds on a loaded
/// machine); this is off by at most half the tightest bracket.
pub fn realtime_minus_monotonic() -> u64 {
    let mut best = (u64::MAX, 0u64);
    for _ in 0..5 {
        let m1 = monotonic_ns();
        let r = realtime_ns();
        let m2 = monotonic_ns();
        let width = m2.wrapping_sub(m1);
        if width < best.0 {
            best = (width, r.wrapping_sub(m1 + width / 2));
        }
    }
    best.1
}

/// `strftime(fmt)` of the local time now (at most 512 bytes).
pub fn strftime_now(fmt: &std::ffi::CStr) -> Vec<u8> {
    let mut buf = vec![0u8; 512];
    // SAFETY: `t` and `tm` are live locals the calls write; `buf` has
    // `buf.len()` writable bytes and strftime writes at most that many;
    // `fmt` is a NUL-terminated string.
    let n = unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm)
    };
    buf.truncate(n);
    buf
}

/// `strftime(fmt)` of the local time `secs` seconds after the epoch (at
/// most 512 bytes).
pub fn strftime_at(fmt: &std::ffi::CStr, secs: i64) -> Vec<u8> {
    let mut buf = vec![0u8; 512];
    // SAFETY: `t` and `tm` are live locals the calls read and write; `buf`
    // has `buf.len()` writable bytes and strftime writes at most that
    // many; `fmt` is a NUL-terminated string.
    let n = unsafe {
        let t: libc::time_t = secs as libc::time_t;
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&t, &mut tm);
        libc::strftime(buf.as_mut_ptr().cast(), buf.len(), fmt.as_ptr(), &tm)
    };
    buf.truncate(n);
    buf
}
