//! Raw Linux x86-64 system calls (no libc), and the few CPU instructions
//! the agent needs.

use core::arch::asm;

pub const SYS_READ: usize = 0;
pub const SYS_CLOSE: usize = 3;
pub const SYS_MMAP: usize = 9;
pub const SYS_MPROTECT: usize = 10;
pub const SYS_MUNMAP: usize = 11;
pub const SYS_SCHED_YIELD: usize = 24;
pub const SYS_GETPID: usize = 39;
pub const SYS_GETUID: usize = 102;
pub const SYS_GETPPID: usize = 110;
pub const SYS_GETGID: usize = 104;
pub const SYS_PRCTL: usize = 157;
pub const SYS_FUTEX: usize = 202;
pub const SYS_ARCH_PRCTL: usize = 158;
pub const SYS_GETTID: usize = 186;
pub const SYS_CLOCK_GETTIME: usize = 228;
pub const SYS_OPENAT: usize = 257;
pub const SYS_GETCPU: usize = 309;
pub const SYS_PROCESS_VM_READV: usize = 310;
pub const SYS_PROCESS_VM_WRITEV: usize = 311;

pub const PROT_READ: usize = 1;
pub const PROT_WRITE: usize = 2;
pub const PROT_EXEC: usize = 4;
pub const MAP_PRIVATE: usize = 0x02;
pub const MAP_FIXED: usize = 0x10;
pub const MAP_ANONYMOUS: usize = 0x20;
pub const MAP_NORESERVE: usize = 0x4000;
pub const ARCH_GET_FS: usize = 0x1003;
pub const ARCH_GET_GS: usize = 0x1004;
pub const AT_FDCWD: isize = -100;
pub const O_RDONLY: usize = 0;
pub const O_CLOEXEC: usize = 0o2000000;
pub const CLOCK_REALTIME: usize = 0;
pub const CLOCK_MONOTONIC: usize = 1;
pub const CLOCK_BOOTTIME: usize = 7;
pub const CLOCK_TAI: usize = 11;
pub const PR_GET_NAME: usize = 16;
pub const FUTEX_WAIT: usize = 0;
pub const FUTEX_WAKE: usize = 1;
pub const CLOCK_THREAD_CPUTIME_ID: usize = 3;
pub const ENOSYS: i32 = 38;

#[inline(always)]
pub unsafe fn syscall1(n: usize, a1: usize) -> isize {
    let r: isize;
    // SAFETY: the caller upholds the system call's contract.
    unsafe {
        asm!("syscall", inlateout("rax") n as isize => r, in("rdi") a1,
             lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    r
}

#[inline(always)]
pub unsafe fn syscall0(n: usize) -> isize {
    let r: isize;
    // SAFETY: as above.
    unsafe {
        asm!("syscall", inlateout("rax") n as isize => r,
             lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    r
}

#[inline(always)]
pub unsafe fn syscall2(n: usize, a1: usize, a2: usize) -> isize {
    let r: isize;
    // SAFETY: as above.
    unsafe {
        asm!("syscall", inlateout("rax") n as isize => r, in("rdi") a1, in("rsi") a2,
             lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    r
}

#[inline(always)]
pub unsafe fn syscall3(n: usize, a1: usize, a2: usize, a3: usize) -> isize {
    let r: isize;
    // SAFETY: as above.
    unsafe {
        asm!("syscall", inlateout("rax") n as isize => r, in("rdi") a1, in("rsi") a2,
             in("rdx") a3, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    r
}

#[inline(always)]
pub unsafe fn syscall4(n: usize, a1: usize, a2: usize, a3: usize, a4: usize) -> isize {
    let r: isize;
    // SAFETY: as above.
    unsafe {
        asm!("syscall", inlateout("rax") n as isize => r, in("rdi") a1, in("rsi") a2,
             in("rdx") a3, in("r10") a4, lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    r
}

#[inline(always)]
pub unsafe fn syscall6(
    n: usize,
    a1: usize,
    a2: usize,
    a3: usize,
    a4: usize,
    a5: usize,
    a6: usize,
) -> isize {
    let r: isize;
    // SAFETY: as above.
    unsafe {
        asm!("syscall", inlateout("rax") n as isize => r, in("rdi") a1, in("rsi") a2,
             in("rdx") a3, in("r10") a4, in("r8") a5, in("r9") a6,
             lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    r
}

/// `mmap`; `Err(errno)`.
pub fn mmap(addr: usize, len: usize, prot: usize, flags: usize) -> Result<*mut u8, i32> {
    // SAFETY: anonymous mappings at a kernel-chosen address cannot clobber
    // anything; MAP_FIXED callers only pass ranges they own.
    let r = unsafe { syscall6(SYS_MMAP, addr, len, prot, flags, usize::MAX, 0) };
    if (-4095..0).contains(&r) {
        Err(-r as i32)
    } else {
        Ok(r as *mut u8)
    }
}

/// `munmap`; 0 or errno.
pub unsafe fn munmap(addr: *mut u8, len: usize) -> i32 {
    // SAFETY: the caller owns the range.
    let r = unsafe { syscall2(SYS_MUNMAP, addr as usize, len) };
    if r < 0 { -r as i32 } else { 0 }
}

/// `mprotect`; 0 or errno.
pub unsafe fn mprotect(addr: *mut u8, len: usize, prot: usize) -> i32 {
    // SAFETY: the caller owns the range.
    let r = unsafe { syscall3(SYS_MPROTECT, addr as usize, len, prot) };
    if r < 0 { -r as i32 } else { 0 }
}

pub fn gettid() -> u32 {
    // SAFETY: no arguments, no memory.
    unsafe { syscall0(SYS_GETTID) as u32 }
}

pub fn getpid() -> u32 {
    // SAFETY: as above.
    unsafe { syscall0(SYS_GETPID) as u32 }
}

pub fn getppid() -> u32 {
    // SAFETY: as above.
    unsafe { syscall0(SYS_GETPPID) as u32 }
}

/// This process's id (`vm_read` and `vm_write` name it at every call):
/// the fork guard's ([`crate::init::pid`]), or a vfork child's own (it
/// shares its parent's memory, but may not be allowed to read its parent).
pub fn self_pid() -> u32 {
    crate::init::vfork_child().unwrap_or_else(crate::init::pid)
}

pub fn sched_yield() {
    // SAFETY: as above.
    unsafe {
        syscall0(SYS_SCHED_YIELD);
    }
}

/// The real user id of the process.
pub fn getuid() -> u32 {
    // SAFETY: no arguments, no memory.
    unsafe { syscall0(SYS_GETUID) as u32 }
}

/// The real group id of the calling thread.
pub fn getgid() -> u32 {
    // SAFETY: no arguments, no memory.
    unsafe { syscall0(SYS_GETGID) as u32 }
}

/// The calling thread's name (`PR_GET_NAME`: at most 15 bytes and a NUL).
pub fn thread_name() -> ([u8; 16], usize) {
    let mut b = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into `b`.
    let r = unsafe { syscall2(SYS_PRCTL, PR_GET_NAME, b.as_mut_ptr() as usize) };
    if r < 0 {
        return (b, 0);
    }
    let n = b.iter().position(|&c| c == 0).unwrap_or(16).min(15);
    (b, n)
}

/// `FUTEX_WAIT` (shared: the word may be in memory another process maps)
/// while `*w == val`, for at most `timeout_ns`.
pub fn futex_wait(w: &core::sync::atomic::AtomicU32, val: u32, timeout_ns: u64) {
    let ts = [
        (timeout_ns / 1_000_000_000) as i64,
        (timeout_ns % 1_000_000_000) as i64,
    ];
    // SAFETY: `w` is a live u32; `ts` a timespec; the kernel only reads them.
    unsafe {
        syscall4(
            SYS_FUTEX,
            w.as_ptr() as usize,
            FUTEX_WAIT,
            val as usize,
            ts.as_ptr() as usize,
        );
    }
}

/// `FUTEX_WAKE` (shared) of up to `n` waiters of `w`.
pub fn futex_wake(w: &core::sync::atomic::AtomicU32, n: u32) {
    // SAFETY: `w` is a live u32; nothing is written.
    unsafe {
        syscall3(SYS_FUTEX, w.as_ptr() as usize, FUTEX_WAKE, n as usize);
    }
}

/// `clock_gettime(clock)` in ns, by system call (see `vdso` for the fast one).
pub fn clock_ns(clock: usize) -> u64 {
    let mut ts = [0i64; 2];
    // SAFETY: `ts` is a writable timespec.
    unsafe { syscall2(SYS_CLOCK_GETTIME, clock, ts.as_mut_ptr() as usize) };
    (ts[0] as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts[1] as u64)
}

/// `arch_prctl(ARCH_GET_FS/GS)`.
pub fn arch_get(code: usize) -> u64 {
    let mut v = 0u64;
    // SAFETY: `v` is a writable u64.
    unsafe { syscall2(SYS_ARCH_PRCTL, code, &mut v as *mut u64 as usize) };
    v
}

#[repr(C)]
struct IoVec {
    base: usize,
    len: usize,
}

/// `process_vm_readv` of this process: copies `len` bytes at `addr` into
/// `dst`; returns how many leading bytes could be read (the kernel copies
/// page by page and stops at the first unreadable page). Never faults.
pub fn vm_read(addr: u64, dst: *mut u8, len: usize) -> usize {
    vm_copy(SYS_PROCESS_VM_READV, addr, dst as usize, len)
}

/// `process_vm_writev` of this process (honours page protections).
pub fn vm_write(addr: u64, src: *const u8, len: usize) -> usize {
    vm_copy(SYS_PROCESS_VM_WRITEV, addr, src as usize, len)
}

/// `process_vm_readv` or `process_vm_writev` (`nr`) of this process
/// between our `local..local+len` and `addr..addr+len`: how many leading
/// bytes were copied.
fn vm_copy(nr: usize, addr: u64, local: usize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let local = IoVec { base: local, len };
    let remote = IoVec {
        base: addr as usize,
        len,
    };
    // SAFETY: `local` is the caller's buffer (writable for a read); the
    // remote side is checked by the kernel.
    let r = unsafe {
        syscall6(
            nr,
            self_pid() as usize,
            &local as *const IoVec as usize,
            1,
            &remote as *const IoVec as usize,
            1,
            0,
        )
    };
    if r < 0 { 0 } else { r as usize }
}

/// Opens `path` read-only (close-on-exec): its descriptor.
pub fn open_read(path: &core::ffi::CStr) -> Option<usize> {
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe {
        syscall4(
            SYS_OPENAT,
            AT_FDCWD as usize,
            path.as_ptr() as usize,
            O_RDONLY | O_CLOEXEC,
            0,
        )
    };
    (fd >= 0).then_some(fd as usize)
}

/// `read(fd)` into `buf`: the bytes read, 0 at the end, negative errno.
pub fn read(fd: usize, buf: &mut [u8]) -> isize {
    // SAFETY: `buf` is writable for its length.
    unsafe { syscall3(SYS_READ, fd, buf.as_mut_ptr() as usize, buf.len()) }
}

/// Closes `fd`.
pub fn close(fd: usize) {
    // SAFETY: closing a descriptor touches no memory of ours.
    unsafe { syscall1(SYS_CLOSE, fd) };
}

/// Reads a whole small file (e.g. under /proc) into `buf`; returns the length.
pub fn read_file(path: &core::ffi::CStr, buf: &mut [u8]) -> Option<usize> {
    let fd = open_read(path)?;
    let mut n = 0;
    while n < buf.len() {
        let r = read(fd, &mut buf[n..]);
        if r <= 0 {
            break;
        }
        n += r as usize;
    }
    close(fd);
    Some(n)
}

#[inline(always)]
pub fn rdfsbase() -> u64 {
    let v: u64;
    // SAFETY: only called when the kernel enabled FSGSBASE (AT_HWCAP2).
    unsafe { asm!("rdfsbase {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

#[inline(always)]
pub fn rdgsbase() -> u64 {
    let v: u64;
    // SAFETY: as above.
    unsafe { asm!("rdgsbase {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC is available on every x86-64 CPU Linux runs on.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// (TSC, IA32_TSC_AUX): Linux stores `node << 12 | cpu` in TSC_AUX.
#[inline(always)]
pub fn rdtscp() -> (u64, u32) {
    let mut aux = 0u32;
    // SAFETY: only called when CPUID says RDTSCP exists.
    let t = unsafe { core::arch::x86_64::__rdtscp(&mut aux) };
    (t, aux)
}

/// IA32_TSC_AUX alone (`node << 12 | cpu`), without reading the TSC: a
/// few cycles where RDTSCP takes dozens.
#[inline(always)]
pub fn rdpid() -> u64 {
    let v: u64;
    // SAFETY: only called when CPUID says RDPID exists.
    unsafe { asm!("rdpid {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

#[inline(always)]
pub fn stmxcsr() -> u32 {
    let mut v = 0u32;
    // SAFETY: writes 4 bytes to `v`.
    unsafe { asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack, preserves_flags)) };
    v
}

#[inline(always)]
pub fn ldmxcsr(v: u32) {
    // SAFETY: reads 4 bytes from `v`; callers pass valid MXCSR values.
    unsafe { asm!("ldmxcsr [{}]", in(reg) &v, options(nostack, preserves_flags)) };
}

/// The segment selectors (cs, ds, es, fs, gs, ss) of the current thread,
/// which are those of the probed code (neither the stub nor the agent
/// changes them).
pub fn segment(i: u16) -> u64 {
    let v: u16;
    // SAFETY: reading a segment register has no side effects.
    unsafe {
        match i {
            0 => asm!("mov {0:x}, cs", out(reg) v, options(nomem, nostack, preserves_flags)),
            1 => asm!("mov {0:x}, ds", out(reg) v, options(nomem, nostack, preserves_flags)),
            2 => asm!("mov {0:x}, es", out(reg) v, options(nomem, nostack, preserves_flags)),
            3 => asm!("mov {0:x}, fs", out(reg) v, options(nomem, nostack, preserves_flags)),
            4 => asm!("mov {0:x}, gs", out(reg) v, options(nomem, nostack, preserves_flags)),
            _ => asm!("mov {0:x}, ss", out(reg) v, options(nomem, nostack, preserves_flags)),
        }
    }
    u64::from(v)
}

/// The FXSAVE image of the current x87/SSE state.
#[repr(C, align(16))]
pub struct FxArea(pub [u8; 512]);

pub fn fxsave() -> FxArea {
    let mut a = FxArea([0; 512]);
    // SAFETY: `a` is 512 bytes, 16-aligned.
    unsafe { asm!("fxsave64 [{}]", in(reg) a.0.as_mut_ptr(), options(nostack, preserves_flags)) };
    a
}

/// `mremap(old, old_len, new_len, MREMAP_MAYMOVE)`: the mapping grown
/// (perhaps moved: the old address is invalid on success); `Err(errno)`.
///
/// # Safety
/// `old..old+old_len` is a whole private anonymous mapping of the caller's,
/// which no other code uses.
pub unsafe fn mremap_maymove(old: *mut u8, old_len: usize, new_len: usize) -> Result<*mut u8, i32> {
    const SYS_MREMAP: usize = 25;
    const MREMAP_MAYMOVE: usize = 1;
    // SAFETY: the caller's mapping (see above).
    let r = unsafe {
        syscall6(
            SYS_MREMAP,
            old as usize,
            old_len.next_multiple_of(4096),
            new_len.next_multiple_of(4096),
            MREMAP_MAYMOVE,
            0,
            0,
        )
    };
    if (-4095..0).contains(&r) {
        Err(-r as i32)
    } else {
        Ok(r as *mut u8)
    }
}
