//! Processes and descriptors: starting the traced command (one spawner for
//! every transport), signals, reaping, pidfds, `poll`, the waker child that
//! interrupts a blocking `waitpid`, `mount` (tracefs) and the perf ioctl
//! that redirects an event's samples.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;

/// How a spawned command starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// It waits on a pipe before exec until [`Spawned::release`]: the
    /// parent seizes it first (ptrace transport). It dies with its parent
    /// (`PR_SET_PDEATHSIG`), also before that.
    Gated,
    /// It calls `PTRACE_TRACEME` and execs at once: the kernel stops the new
    /// image before its first instruction (perf transport's launch). It
    /// outlives its parent.
    TraceMe,
}

/// A command forked and (about to be) exec'd.
#[derive(Debug)]
pub struct Spawned {
    /// Its pid.
    pub pid: i32,
    go: Option<OwnedFd>,
    err: OwnedFd,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), Errno> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the live array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Errno::last());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Forks and execs `argv` (searching `PATH`), as `start` says. An exec
/// failure is reported through [`Spawned::exec_errno`]. `EINVAL` for an
/// argument with a NUL byte or an empty `argv`.
pub fn spawn(argv: &[OsString], start: Start) -> Result<Spawned, Errno> {
    if argv.is_empty() {
        return Err(Errno::EINVAL);
    }
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| Errno::EINVAL)?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    if start == Start::TraceMe {
        return spawn_traced(&ptrs);
    }
    let (go_r, go_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let parent = std::process::id() as i32;
    let (go_r_fd, err_w_fd) = (go_r.as_raw_fd(), err_w.as_raw_fd());
    // SAFETY: fork; the child only calls async-signal-safe functions
    // (prctl, getppid, read, execvp, write, _exit) on data prepared
    // before the fork, so a multi-threaded parent is fine.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(Errno::last());
    }
    if child == 0 {
        // SAFETY: async-signal-safe calls only (see above); never returns.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != parent {
                libc::_exit(127);
            }
            let mut b = 0u8;
            if libc::read(go_r_fd, (&mut b as *mut u8).cast(), 1) != 1 {
                libc::_exit(127);
            }
            libc::execvp(ptrs[0], ptrs.as_ptr());
            let e = *libc::__errno_location();
            libc::write(err_w_fd, (&e as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    drop((go_r, err_w));
    Ok(Spawned {
        pid: child,
        go: Some(go_w),
        err: err_r,
    })
}

/// Bytes of the stack a [`Start::TraceMe`] child runs on until its exec
/// (`execvp` builds each candidate path on it, and a script's
/// interpreter's arguments).
const TRACED_CHILD_STACK: usize = 256 << 10;

/// What a [`Start::TraceMe`] child needs, made before the clone.
struct TracedChild {
    argv: *const *const libc::c_char,
    err_w: RawFd,
    /// The signal mask to exec with (the parent's thread's).
    mask: libc::sigset_t,
}

/// [`spawn`] of a [`Start::TraceMe`] child as `posix_spawn` makes one: a
/// child that shares wprobe's memory until its exec (`CLONE_VM |
/// CLONE_VFORK`; this thread waits meanwhile), not a copy of it. A fork
/// copies the page tables of wprobe's whole heap (tens of MB by the time
/// a large program is launched), and every page wprobe writes afterwards
/// faults once more to be made writable again.
fn spawn_traced(ptrs: &[*const libc::c_char]) -> Result<Spawned, Errno> {
    let (err_r, err_w) = pipe()?;
    let stack = child_stack(TRACED_CHILD_STACK)?;
    let blocked = SignalsBlocked::new();
    // The child restores the mask before its exec, its handlers reset to
    // the default first.
    let args = TracedChild {
        argv: ptrs.as_ptr(),
        err_w: err_w.as_raw_fd(),
        mask: blocked.old,
    };
    let child = clone_vm(
        traced_child,
        stack,
        TRACED_CHILD_STACK,
        libc::CLONE_VFORK,
        &args,
    );
    drop(blocked);
    // SAFETY: the child no longer uses its stack (with CLONE_VFORK this
    // thread went on only once it exec'd or exited).
    unsafe { libc::munmap(stack, TRACED_CHILD_STACK) };
    let child = child?;
    drop(err_w);
    Ok(Spawned {
        pid: child,
        go: None,
        err: err_r,
    })
}

/// A stack of `len` bytes for a child made by [`clone_vm`] (a fresh
/// private mapping, the caller's to unmap).
fn child_stack(len: usize) -> Result<*mut libc::c_void, Errno> {
    // SAFETY: a fresh private mapping, owned by the caller.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    Ok(stack)
}

/// Every signal blocked for this thread while it lives, for a
/// [`clone_vm`] child to start with none of wprobe's handlers able to run
/// in it, on wprobe's memory; this thread's mask before (`old`) back when
/// dropped.
struct SignalsBlocked {
    old: libc::sigset_t,
}

impl SignalsBlocked {
    fn new() -> SignalsBlocked {
        // SAFETY: sigset_t is plain data that sigfillset/pthread_sigmask
        // fill; swaps this thread's mask for the full set, the old one
        // kept.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            SignalsBlocked { old }
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores this thread's mask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// Makes a child that shares wprobe's memory (`CLONE_VM`, and `flags`)
/// and runs `run(args)` on `stack` (`len` bytes); call it with
/// [`SignalsBlocked`]. `args` must stay alive as long as the child reads
/// it. Its pid.
fn clone_vm<T>(
    run: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack: *mut libc::c_void,
    len: usize,
    flags: libc::c_int,
    args: &T,
) -> Result<i32, Errno> {
    // SAFETY: the child runs `run` on its own stack (the top of the
    // mapping) with `args`, which the caller keeps alive while the child
    // reads it (it only reads it).
    let child = unsafe {
        libc::clone(
            run,
            stack.cast::<u8>().add(len).cast(),
            libc::CLONE_VM | flags | libc::SIGCHLD,
            std::ptr::from_ref(args).cast_mut().cast(),
        )
    };
    if child < 0 {
        return Err(Errno::last());
    }
    Ok(child)
}

/// The [`Start::TraceMe`] child: default actions for the signals wprobe
/// handles, the parent's signal mask back, `PTRACE_TRACEME`, exec; an exec
/// failure's errno written to the pipe.
extern "C" fn traced_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `TracedChild`, alive while the parent
    // is suspended (CLONE_VFORK). Only system calls and `execvp` are made,
    // on data prepared before the clone; wprobe's memory is written only
    // by `execvp`'s own stack use and the errno it sets (the suspended
    // thread's), as `posix_spawn`'s child does.
    unsafe {
        let a = &*arg.cast::<TracedChild>();
        for sig in 1..=libc::SIGRTMAX() {
            let mut act: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut act) == 0
                && act.sa_sigaction != libc::SIG_DFL
                && act.sa_sigaction != libc::SIG_IGN
            {
                act.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
        libc::sigprocmask(libc::SIG_SETMASK, &a.mask, std::ptr::null_mut());
        if libc::ptrace(libc::PTRACE_TRACEME, 0, 0usize, 0usize) != 0 {
            libc::_exit(126);
        }
        libc::execvp(*a.argv, a.argv);
        let e = *libc::__errno_location();
        libc::write(a.err_w, (&e as *const i32).cast(), 4);
        libc::_exit(127)
    }
}

impl Spawned {
    /// Lets a [`Start::Gated`] child go on to exec.
    pub fn release(&mut self) {
        if let Some(go) = self.go.take() {
            // SAFETY: writes one byte from a static to our own pipe.
            unsafe { libc::write(go.as_raw_fd(), b"g".as_ptr().cast(), 1) };
        }
    }

    /// After the child exec'd (or died): `Some(errno)` when its exec failed.
    pub fn exec_errno(self) -> Option<Errno> {
        drop(self.go);
        let mut e = 0i32;
        // SAFETY: reads at most 4 bytes into a live i32 from our own pipe,
        // whose write end the child closed by exec'ing (O_CLOEXEC) or exiting.
        let n = unsafe { libc::read(self.err.as_raw_fd(), (&mut e as *mut i32).cast(), 4) };
        (n == 4).then(|| Errno::from_raw(e))
    }
}

/// Resident memory below which [`free_memory_after_exit`] leaves the
/// exit as it is (freeing a few thousand pages takes under a millisecond).
const KEEP_FROM_BYTES: u64 = 32 << 20;

/// Bytes of the stack of the child that keeps the memory.
const KEEPER_STACK: usize = 64 << 10;

/// What the keeper needs, made before the clone.
struct Keeper {
    /// wprobe's pid.
    parent: i32,
    /// The write end of the pipe whose end tells wprobe the keeper closed
    /// its descriptors.
    done: RawFd,
}

/// Lets wprobe's exit end without freeing its memory first: a trace of a
/// large program leaves 70 MB and more resident, and the kernel frees a
/// process's memory before it tells the parent (a shell) that it exited —
/// 6 ms of python3.11's warm `wprobe trace` (docs/BENCHMARKS.md). So
/// this makes a child that shares the memory (`CLONE_VM`, no descriptor
/// kept: it closes its copies before this returns; every signal blocked)
/// and exits once wprobe has (its pidfd; without one, the kernel kills it
/// when wprobe's thread exits, `PR_SET_PDEATHSIG`): the memory is freed
/// as it exits, after wprobe's parent has its status. Call it last, just
/// before the process exits.
/// Returns the child's pid (None: not needed, or not made).
pub fn free_memory_after_exit() -> Option<i32> {
    let resident = std::fs::read_to_string("/proc/self/statm")
        .ok()?
        .split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()?
        * 4096;
    if resident < KEEP_FROM_BYTES {
        return None;
    }
    let (r, w) = pipe().ok()?;
    let keeper = Keeper {
        parent: std::process::id() as i32,
        done: w.as_raw_fd(),
    };
    // The keeper's stack, never unmapped: it is the keeper's until it
    // dies, and goes with the memory. `keeper` lives until this thread
    // has read the end of the pipe: the child reads it before it closes
    // its descriptors (the pipe's write end among them), and never after.
    // Every signal stays blocked in the keeper.
    let stack = child_stack(KEEPER_STACK).ok()?;
    let blocked = SignalsBlocked::new();
    let pid = clone_vm(keep_memory, stack, KEEPER_STACK, 0, &keeper);
    drop(blocked);
    drop(w);
    let pid = pid.ok()?;
    // The keeper closed its descriptors (or died): the end of the pipe.
    let mut b = 0u8;
    // SAFETY: reads at most one byte into a live byte from our own pipe.
    while unsafe { libc::read(r.as_raw_fd(), (&mut b as *mut u8).cast(), 1) } > 0 {}
    Some(pid)
}

/// The keeper of [`free_memory_after_exit`]: its descriptors closed, it
/// exits once wprobe has (killed when wprobe's thread exits, where there
/// is no pidfd).
extern "C" fn keep_memory(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Keeper`, read before the descriptors
    // are closed (see `free_memory_after_exit`). Only system calls follow,
    // on nothing of wprobe's memory but this stack.
    unsafe {
        let Keeper { parent, done, .. } = *arg.cast::<Keeper>();
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        // Without `close_range` (Linux before 5.9) the others stay open
        // until the keeper exits, but wprobe learns it can go on.
        libc::close(done);
        // Until wprobe has exited, every thread of it (its pidfd readable):
        // freeing the memory while the last of them are still exiting
        // held them up.
        let fd = libc::syscall(libc::SYS_pidfd_open, parent, 0) as i32;
        if fd >= 0 {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            while libc::poll(&mut p, 1, -1) == 0 {}
            libc::syscall(libc::SYS_exit, 0);
        }
        // No pidfd: killed when wprobe's thread exits.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if libc::getppid() != parent {
            libc::syscall(libc::SYS_exit, 0);
        }
        loop {
            libc::pause();
        }
    }
}

/// The CPUs wprobe's tracing thread had before it was put on one
/// ([`set_unpinned`]): a thread it starts meanwhile inherits its one CPU,
/// and takes these back ([`run_on_unpinned`]).
static UNPINNED: std::sync::Mutex<Option<libc::cpu_set_t>> = std::sync::Mutex::new(None);

/// Says which CPUs the tracing thread had before it was put on one CPU
/// (`None`: it has them back), for the threads it starts meanwhile.
pub fn set_unpinned(cpus: Option<libc::cpu_set_t>) {
    *UNPINNED.lock().unwrap_or_else(|e| e.into_inner()) = cpus;
}

/// Puts the calling thread (one the tracing thread started while it was
/// on one CPU, [`set_unpinned`]) back on the CPUs the tracing thread had:
/// its work goes on beside the tracer's, not in turn with it on one CPU.
/// Nothing when the tracer is not pinned.
pub fn run_on_unpinned() {
    let cpus = *UNPINNED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(set) = cpus {
        set_affinity(0, &set);
    }
}

/// Puts every thread of this process whose CPUs are exactly `one` back on
/// `cpus`: those a pinned tracing thread started ([`set_unpinned`]) that
/// are still confined to its one CPU when it gets its CPUs back (a thread
/// of another crate's that does not call [`run_on_unpinned`]: the agent
/// region's heartbeat). A thread that cannot be read or set is left.
pub fn threads_back_from(one: &libc::cpu_set_t, cpus: &libc::cpu_set_t) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: CPU_EQUAL reads two live sets of their size.
        if affinity(tid).is_some_and(|a| unsafe { libc::CPU_EQUAL(&a, one) }) {
            set_affinity(tid, cpus);
        }
    }
}

/// The CPU the calling thread runs on (`sched_getcpu`).
pub fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; returns a CPU number or -1.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// The CPUs thread `tid` (0: the calling thread) may run on.
pub fn affinity(tid: i32) -> Option<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data; the kernel fills the live set of
    // its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
            .then_some(set)
    }
}

/// Sets the CPUs thread `tid` (0: the calling thread) may run on; whether
/// it was set.
pub fn set_affinity(tid: i32, set: &libc::cpu_set_t) -> bool {
    // SAFETY: passes a live set of its size.
    unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), set) == 0 }
}

/// The set of the one CPU `cpu`, if `of` has it.
pub fn only_cpu(of: &libc::cpu_set_t, cpu: usize) -> Option<libc::cpu_set_t> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return None;
    }
    // SAFETY: CPU_ISSET/CPU_SET on live sets, `cpu` within their size.
    unsafe {
        if !libc::CPU_ISSET(cpu, of) {
            return None;
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        Some(one)
    }
}

/// kill(pid, sig).
pub fn kill(pid: i32, sig: i32) -> Result<(), Errno> {
    // SAFETY: plain syscall with integer arguments.
    if unsafe { libc::kill(pid, sig) } == -1 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// tgkill(tgid, tid, sig).
pub fn tgkill(tgid: i32, tid: i32, sig: i32) -> Result<(), Errno> {
    // SAFETY: plain syscall with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, sig) };
    if r == -1 { Err(Errno::last()) } else { Ok(()) }
}

/// Kills our child `pid` and reaps it.
pub fn kill_and_reap(pid: i32) {
    let _ = kill(pid, libc::SIGKILL);
    // SAFETY: reaps our own child; a null status pointer is allowed.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
}

/// Reaps our child `pid` if it has exited: its raw wait status.
pub fn reap_nohang(pid: i32) -> Option<i32> {
    let mut st = 0;
    // SAFETY: `st` is a live c_int the kernel writes.
    let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
    (r == pid).then_some(st)
}

/// A pidfd of `pid` (readable once it exits).
pub fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the descriptor was just returned to us and is owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// poll(2) on `fds` for up to `timeout_ms`; the number ready (0 on
/// timeout or `EINTR`).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> usize {
    // SAFETY: polls live descriptors described by a live array of its length.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    r.max(0) as usize
}

/// The waker: a child blocked reading a pipe, which exits (making a
/// blocking `waitpid(-1)` of its parent return) when the pipe is written
/// or its parent dies. Returns its pid and the pipe's write end.
pub fn waker_child() -> Result<(i32, OwnedFd), Errno> {
    let (r, w) = pipe()?;
    let (r_fd, w_fd) = (r.as_raw_fd(), w.as_raw_fd());
    // SAFETY: the child only calls close, prctl, read and _exit
    // (async-signal-safe) on descriptors it inherited.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(Errno::last());
    }
    if child == 0 {
        let mut b = 0u8;
        // SAFETY: closes the inherited write end (so that the parent's death
        // gives EOF), reads into a live byte, then terminates.
        unsafe {
            libc::close(w_fd);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            libc::read(r_fd, (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(r);
    Ok((child, w))
}

/// A child that sleeps for `d` and exits (dies with its parent): its exit
/// wakes a blocking `waitpid` of the parent at a given time.
pub fn sleeper_child(d: std::time::Duration) -> Result<i32, Errno> {
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    };
    // SAFETY: the child only calls prctl, nanosleep and _exit
    // (async-signal-safe) on a timespec prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Errno::last());
    }
    if pid == 0 {
        // SAFETY: sleeps on a live timespec, then terminates.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            libc::nanosleep(&ts, std::ptr::null_mut());
            libc::_exit(0);
        }
    }
    Ok(pid)
}

/// Writes one byte to `fd` (wakes a [`waker_child`]).
pub fn poke_pipe(fd: RawFd) {
    // SAFETY: writes one byte from a static to a descriptor the caller owns.
    unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) };
}

/// Mounts tracefs at `dir` (`mount -t tracefs nodev DIR`).
pub fn mount_tracefs(dir: &str) -> Result<(), Errno> {
    let target = CString::new(dir).map_err(|_| Errno::EINVAL)?;
    // SAFETY: every pointer is a live NUL-terminated string (or null for
    // `data`, which tracefs does not need); mount reads them only.
    let r = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r == -1 { Err(Errno::last()) } else { Ok(()) }
}

/// `PERF_EVENT_IOC_SET_OUTPUT` (`_IO('$', 5)`): the samples of event `fd`
/// go to the ring of event `ring`.
pub fn perf_set_output(fd: RawFd, ring: RawFd) -> Result<(), Errno> {
    const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
    // SAFETY: both descriptors are live perf events; the ioctl takes an fd
    // by value.
    if unsafe { libc::ioctl(fd, IOC_SET_OUTPUT, ring) } != 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field of `/proc/<pid>/status` (`SigBlk`, `SigIgn`…).
    fn status_field(pid: &str, name: &str) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap()
            .trim()
            .to_string()
    }

    /// A traced child stops at its exec with this thread's signal mask
    /// (not the all-blocked one of the clone).
    #[test]
    fn a_traced_child_execs_with_the_parents_signal_mask() {
        let mine = status_field("thread-self", "SigBlk");
        let argv = [OsString::from("true")];
        let spawned = spawn(&argv, Start::TraceMe).unwrap();
        let pid = spawned.pid;
        let mut st = 0;
        // SAFETY: waits for our own child into a live c_int.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        assert!(libc::WIFSTOPPED(st) && libc::WSTOPSIG(st) == libc::SIGTRAP);
        assert_eq!(spawned.exec_errno(), None);
        let theirs = status_field(&pid.to_string(), "SigBlk");
        kill_and_reap(pid);
        assert_eq!(theirs, mine);
    }

    /// A thread started while the tracing thread is on one CPU inherits
    /// that CPU, and [`run_on_unpinned`] gives it the CPUs the tracer had
    /// before (all of this test's, on a machine of several CPUs).
    #[test]
    fn a_thread_started_while_pinned_runs_on_the_tracers_cpus() {
        std::thread::spawn(|| {
            let all = affinity(0).unwrap();
            let one = only_cpu(&all, current_cpu().unwrap()).unwrap();
            assert!(set_affinity(0, &one));
            set_unpinned(Some(all));
            let (inherited, after) = std::thread::spawn(|| {
                let inherited = affinity(0).unwrap();
                run_on_unpinned();
                (inherited, affinity(0).unwrap())
            })
            .join()
            .unwrap();
            set_unpinned(None);
            // SAFETY: CPU_COUNT/CPU_EQUAL read live sets of their size.
            let (n, same) = unsafe { (libc::CPU_COUNT(&inherited), libc::CPU_EQUAL(&after, &all)) };
            assert_eq!(n, 1);
            assert!(same);
        })
        .join()
        .unwrap();
    }

    /// An exec that fails is reported with its errno, and the child is
    /// gone (it exited: nothing left stopped).
    #[test]
    fn a_traced_childs_failed_exec_says_its_errno() {
        let argv = [OsString::from("/nonexistent/wprobe-no-such-program")];
        let spawned = spawn(&argv, Start::TraceMe).unwrap();
        let pid = spawned.pid;
        let mut st = 0;
        // SAFETY: waits for our own child into a live c_int.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 127);
        assert_eq!(spawned.exec_errno(), Some(Errno::ENOENT));
    }
}
