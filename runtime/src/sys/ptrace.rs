//! Thin wrappers over the ptrace and wait system calls. Each returns
//! `Err(Errno)` exactly as the kernel reported it; the callers decide what
//! `ESRCH` means (the thread is gone: a tracee can vanish between any two calls). Nothing here keeps
//! state or retries anything but `EINTR`.

use nix::errno::Errno;

use crate::sys::regs::{FpRegs, Regs};

/// `PTRACE_O_*` options every tracee gets (forks, clones and execs are
/// reported: a child must never run into a breakpoint nobody handles).
pub const OPTIONS_BASE: libc::c_int = libc::PTRACE_O_TRACESYSGOOD
    | libc::PTRACE_O_TRACEFORK
    | libc::PTRACE_O_TRACEVFORK
    | libc::PTRACE_O_TRACECLONE
    | libc::PTRACE_O_TRACEEXEC
    | libc::PTRACE_O_TRACEEXIT
    | libc::PTRACE_O_TRACEVFORKDONE;

fn req(request: libc::c_uint, tid: i32, addr: usize, data: usize) -> Result<libc::c_long, Errno> {
    Errno::clear();
    // SAFETY: ptrace with an integer addr/data pair; requests that write
    // through `data` are not issued via this helper (they use `req_ptr` with
    // a pointer to a live, correctly sized buffer).
    let r = unsafe {
        libc::ptrace(
            request,
            tid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    };
    if r == -1 {
        let e = Errno::last();
        // PEEK* requests return data, so -1 is ambiguous: errno decides.
        if e != Errno::UnknownErrno {
            return Err(e);
        }
    }
    Ok(r)
}

fn req_ptr<T>(request: libc::c_uint, tid: i32, addr: usize, data: *mut T) -> Result<(), Errno> {
    // SAFETY: `data` points to a live buffer of the type the kernel writes or
    // reads for this request (checked at each call site below).
    let r = unsafe {
        libc::ptrace(
            request,
            tid,
            addr as *mut libc::c_void,
            data.cast::<libc::c_void>(),
        )
    };
    if r == -1 { Err(Errno::last()) } else { Ok(()) }
}

/// PTRACE_SEIZE with `options`.
pub fn seize(tid: i32, options: libc::c_int) -> Result<(), Errno> {
    req(libc::PTRACE_SEIZE, tid, 0, options as usize).map(drop)
}

/// PTRACE_SETOPTIONS.
pub fn setoptions(tid: i32, options: libc::c_int) -> Result<(), Errno> {
    req(libc::PTRACE_SETOPTIONS, tid, 0, options as usize).map(drop)
}

/// PTRACE_INTERRUPT.
pub fn interrupt(tid: i32) -> Result<(), Errno> {
    req(libc::PTRACE_INTERRUPT, tid, 0, 0).map(drop)
}

/// PTRACE_LISTEN (stay in group-stop, report SIGCONT and new signals).
pub fn listen(tid: i32) -> Result<(), Errno> {
    req(libc::PTRACE_LISTEN, tid, 0, 0).map(drop)
}

/// PTRACE_CONT delivering `sig` (0 for none).
pub fn cont(tid: i32, sig: i32) -> Result<(), Errno> {
    req(libc::PTRACE_CONT, tid, 0, sig as usize).map(drop)
}

/// PTRACE_SINGLESTEP delivering `sig`.
pub fn singlestep(tid: i32, sig: i32) -> Result<(), Errno> {
    req(libc::PTRACE_SINGLESTEP, tid, 0, sig as usize).map(drop)
}

/// PTRACE_DETACH delivering `sig`.
pub fn detach(tid: i32, sig: i32) -> Result<(), Errno> {
    req(libc::PTRACE_DETACH, tid, 0, sig as usize).map(drop)
}

/// PTRACE_GETREGS.
pub fn getregs(tid: i32, out: &mut Regs) -> Result<(), Errno> {
    // `out` is a user_regs_struct, what PTRACE_GETREGS writes.
    req_ptr(libc::PTRACE_GETREGS, tid, 0, out as *mut Regs)
}

/// PTRACE_SETREGS.
pub fn setregs(tid: i32, regs: &Regs) -> Result<(), Errno> {
    // The kernel only reads the user_regs_struct.
    req_ptr(
        libc::PTRACE_SETREGS,
        tid,
        0,
        regs as *const Regs as *mut Regs,
    )
}

/// PTRACE_GETFPREGS.
pub fn getfpregs(tid: i32, out: &mut FpRegs) -> Result<(), Errno> {
    // `out` is a user_fpregs_struct (512 bytes, FXSAVE layout).
    req_ptr(libc::PTRACE_GETFPREGS, tid, 0, out as *mut FpRegs)
}

/// PTRACE_SETFPREGS (the FXSAVE image [`getfpregs`] read).
pub fn setfpregs(tid: i32, regs: &FpRegs) -> Result<(), Errno> {
    req_ptr(
        libc::PTRACE_SETFPREGS,
        tid,
        0,
        regs as *const FpRegs as *mut FpRegs,
    )
}

/// PTRACE_SYSCALL: resume until the next system call's entry or exit.
pub fn syscall(tid: i32, sig: i32) -> Result<(), Errno> {
    req(libc::PTRACE_SYSCALL, tid, 0, sig as usize).map(drop)
}

/// Whether a thread in a syscall-stop is at the system call's entry
/// (`Ok(true)`), its exit (`Ok(false)`), per PTRACE_GET_SYSCALL_INFO.
pub fn at_syscall_entry(tid: i32) -> Result<bool, Errno> {
    const GET_SYSCALL_INFO: libc::c_uint = 0x420e;
    const ENTRY: u8 = 1;
    const EXIT: u8 = 2;
    // struct ptrace_syscall_info: `op` is its first byte (88 bytes in all).
    let mut info = [0u64; 11];
    let r = req_ptr(
        GET_SYSCALL_INFO,
        tid,
        std::mem::size_of_val(&info),
        info.as_mut_ptr(),
    );
    r.and_then(|()| match info[0] as u8 {
        ENTRY => Ok(true),
        EXIT => Ok(false),
        _ => Err(Errno::EINVAL),
    })
}

/// PTRACE_GETSIGINFO.
pub fn getsiginfo(tid: i32) -> Result<libc::siginfo_t, Errno> {
    // SAFETY: siginfo_t is plain data; all-zero is a valid value.
    let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
    req_ptr(
        libc::PTRACE_GETSIGINFO,
        tid,
        0,
        &mut si as *mut libc::siginfo_t,
    )?;
    Ok(si)
}

/// `si_code` of a SIGTRAP sent by a perf event with `sigtrap` set.
pub const TRAP_PERF: i32 = 6;

/// The `sig_data` of the perf event that sent `si` (a SIGTRAP with
/// `si_code` [`TRAP_PERF`]: `si_perf_data`, after `si_addr`), else `None`.
pub fn perf_trap_data(si: &libc::siginfo_t) -> Option<u64> {
    if si.si_signo != libc::SIGTRAP || si.si_code != TRAP_PERF {
        return None;
    }
    const _: () = assert!(std::mem::size_of::<libc::siginfo_t>() >= 32);
    // SAFETY: siginfo_t is 128 bytes of plain data; for TRAP_PERF the
    // kernel's `_sigfault._perf._data` (an unsigned long) is at byte 24,
    // after si_signo, si_errno, si_code, padding and si_addr.
    let data = unsafe {
        (si as *const libc::siginfo_t as *const u8)
            .add(24)
            .cast::<u64>()
            .read_unaligned()
    };
    Some(data)
}

/// `PTRACE_GET_RSEQ_CONFIGURATION` (Linux 5.13): the address of the
/// thread's registered `struct rseq` (0 when it registered none).
pub fn rseq_area(tid: i32) -> Result<u64, Errno> {
    /// `struct ptrace_rseq_configuration`.
    #[repr(C)]
    #[derive(Default)]
    struct RseqConfig {
        rseq_abi_pointer: u64,
        rseq_abi_size: u32,
        signature: u32,
        flags: u32,
        pad: u32,
    }
    const PTRACE_GET_RSEQ_CONFIGURATION: libc::c_uint = 0x420f;
    let mut c = RseqConfig::default();
    // SAFETY: the kernel writes at most `addr` bytes (the struct's size)
    // into `c`, which lives for the call.
    let r = unsafe {
        libc::ptrace(
            PTRACE_GET_RSEQ_CONFIGURATION,
            tid,
            std::mem::size_of::<RseqConfig>(),
            &mut c as *mut RseqConfig,
        )
    };
    if r < 0 {
        return Err(Errno::last());
    }
    Ok(c.rseq_abi_pointer)
}

/// PTRACE_GETEVENTMSG.
pub fn geteventmsg(tid: i32) -> Result<u64, Errno> {
    let mut v: libc::c_ulong = 0;
    req_ptr(
        libc::PTRACE_GETEVENTMSG,
        tid,
        0,
        &mut v as *mut libc::c_ulong,
    )?;
    Ok(v)
}

/// PTRACE_PEEKUSER at byte offset `off` of `struct user`.
pub fn peekuser(tid: i32, off: usize) -> Result<u64, Errno> {
    req(libc::PTRACE_PEEKUSER, tid, off, 0).map(|v| v as u64)
}

/// PTRACE_POKEUSER.
pub fn pokeuser(tid: i32, off: usize, val: u64) -> Result<(), Errno> {
    req(libc::PTRACE_POKEUSER, tid, off, val as usize).map(drop)
}

/// PTRACE_PEEKDATA (one word).
pub fn peekdata(tid: i32, addr: u64) -> Result<u64, Errno> {
    req(libc::PTRACE_PEEKDATA, tid, addr as usize, 0).map(|v| v as u64)
}

/// PTRACE_POKEDATA (one word).
pub fn pokedata(tid: i32, addr: u64, val: u64) -> Result<(), Errno> {
    req(libc::PTRACE_POKEDATA, tid, addr as usize, val as usize).map(drop)
}

/// waitpid with `__WALL | __WNOTHREAD | flags` (only this thread's tracees
/// and children: other threads of the host process keep theirs);
/// `Ok(None)` when WNOHANG found nothing.
pub fn wait(pid: i32, flags: libc::c_int) -> Result<Option<(i32, i32)>, Errno> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a live c_int the kernel writes.
        let r =
            unsafe { libc::waitpid(pid, &mut status, libc::__WALL | libc::__WNOTHREAD | flags) };
        match r {
            -1 if Errno::last() == Errno::EINTR => continue,
            -1 => return Err(Errno::last()),
            0 => return Ok(None),
            tid => return Ok(Some((tid, status))),
        }
    }
}

/// Waits for the next stop of seized thread `tid`, which was asked to stop
/// (`PTRACE_INTERRUPT`) and then resumed from a ptrace event stop (a
/// fork, vfork, clone or exec of its own): any trap clears a pending
/// interrupt (the kernel's `ptrace_stop`), so when the event came after
/// the request, no stop follows and a blocking wait would never end (the
/// thread runs on, or sleeps in a system call). Polls for `grace`; if
/// nothing comes, asks again and waits. An interrupt asked twice stops
/// the thread once.
pub fn wait_after_event(tid: i32, grace: std::time::Duration) -> Result<Option<(i32, i32)>, Errno> {
    let deadline = std::time::Instant::now() + grace;
    loop {
        if let Some(s) = wait(tid, libc::WNOHANG)? {
            return Ok(Some(s));
        }
        if std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(250));
    }
    interrupt(tid)?;
    wait(tid, 0)
}

/// How long a thread resumed from an event stop is given to reach the
/// stop an interrupt asked for before it is asked again
/// ([`wait_after_event`]).
pub const EVENT_GRACE: std::time::Duration = std::time::Duration::from_millis(20);

/// The next stop of interrupted thread `tid`: after an event stop
/// (`after_event`), asked again if it does not come
/// ([`wait_after_event`]).
pub fn wait_interrupted(tid: i32, after_event: bool) -> Result<Option<(i32, i32)>, Errno> {
    if after_event {
        wait_after_event(tid, EVENT_GRACE)
    } else {
        wait(tid, 0)
    }
}

/// Whether `st` is a ptrace event stop other than an interrupt's (a fork,
/// vfork, clone, exec or exit of the thread): see [`wait_after_event`].
pub fn is_event_stop(st: Status) -> bool {
    matches!(st, Status::Stopped { event, .. } if event != 0 && event != libc::PTRACE_EVENT_STOP)
}

/// Decoded `waitpid` status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Exited with a code.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
    /// ptrace-stopped: `sig` = WSTOPSIG, `event` = status >> 16.
    Stopped {
        /// WSTOPSIG.
        sig: i32,
        /// PTRACE_EVENT_* or 0.
        event: i32,
    },
    /// Anything else (continued).
    Other,
}

/// Decodes a raw wait status.
pub fn decode_status(st: i32) -> Status {
    if libc::WIFEXITED(st) {
        Status::Exited(libc::WEXITSTATUS(st))
    } else if libc::WIFSIGNALED(st) {
        Status::Signaled(libc::WTERMSIG(st))
    } else if libc::WIFSTOPPED(st) {
        Status::Stopped {
            sig: libc::WSTOPSIG(st),
            event: (st >> 16) & 0xff,
        }
    } else {
        Status::Other
    }
}
