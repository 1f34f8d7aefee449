//! Stopping the target for the moments the in-process transport changes it
//! (arming, teardown) and letting it go: every thread seized and
//! interrupted (or, for a launched command, the one thread stopped at its
//! entry point), signals that arrive meanwhile held and delivered when the
//! thread is let go; and one stopped thread made to run system calls and
//! calls for the agent's loader ([`agent_loader::Target`]), through the
//! injection cave (`cave`): whenever wprobe dies, that thread goes on as it
//! was. Between those moments the target is not traced at all.

use std::collections::BTreeMap;
use std::fs::File;

use anyhow::{Context, bail, ensure};
use nix::errno::Errno;

use super::cave;
use crate::arch::{FpRegs, Regs};
use crate::sys::ptrace::{self as sys, Status};

mod chunks;
mod pin;

/// How long attaching may take before the process is deemed unattachable.
const ATTACH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// One stopped thread.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    /// A signal that stopped it while we held it, delivered at release.
    sig: i32,
    /// Stopped in a group-stop (job control): not used to run code.
    group_stop: bool,
    /// Stopped at a ptrace event inside a system call (a fork's, held
    /// until the child's start is reported): not used to run code either,
    /// the system call's return would overwrite the registers an injected
    /// call sets (its `rax`: the injected `mmap` got the child's pid as its
    /// number, and failed with ENOSYS).
    in_syscall: bool,
}

/// The stopped threads of one process.
#[derive(Debug)]
pub(super) struct World {
    pid: i32,
    threads: BTreeMap<i32, Held>,
    mem: File,
    /// A `syscall` instruction of the process (the vDSO's, found once).
    syscall_insn: Option<u64>,
    /// `PTRACE_O_EXITKILL` for a launched command while it is armed (it has
    /// run none of its own code: it dies with a wprobe killed meanwhile,
    /// rather than go on untraced or on a half-made agent); 0 otherwise.
    kill_on_exit: libc::c_int,
    /// The raw wait status of the process, when waiting for a stop of its
    /// main thread reaped it (it died meanwhile: a terminal's Ctrl-C).
    reaped: Option<i32>,
    /// The injection cave, once a thread ran injected code (`None` also
    /// when the process has no vDSO to put one in: then system calls are
    /// single-stepped in the vDSO and calls return to the agent's `int3`,
    /// which a death of wprobe in the middle does not survive).
    cave: Option<Cave>,
    /// Looked for a cave already (and found none, if `cave` is `None`).
    cave_sought: bool,
    /// Injections made so far (for [`World::injection_pause`]).
    injections: u32,
    /// The process's memory read by [`World::peek_code`], in chunks
    /// (`chunks::Chunks`); what [`World::poke`] (which the loader's
    /// writes go through too) writes put in them, all forgotten at the
    /// release.
    code: chunks::Chunks,
    /// The launched command's thread and wprobe's (this one) on one CPU
    /// while the command is stopped for arming ([`World::pin_together`]):
    /// the CPUs each may run on otherwise, put back at the release.
    pinned: Option<pin::Pinned>,
}

/// The injection cave of one thread: where it is, the thread's state when
/// it was first taken (what every injection puts back), and its FXSAVE
/// image in the process (for the calls, whose code may change the FPU and
/// SSE registers).
#[derive(Debug)]
struct Cave {
    tid: i32,
    addr: u64,
    layout: cave::Layout,
    saved: Regs,
    fp: FpRegs,
    /// Address of the FXSAVE image in the process (0: not written yet).
    fx: u64,
}

/// The process ended while it was being stopped, and its status was reaped
/// then: the raw wait status, for the transport's report (the launcher's
/// own wait would find nothing left).
#[derive(Debug)]
pub(super) struct Reaped(pub(super) i32);

impl std::fmt::Display for Reaped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the process ended (wait status {:#x})", self.0)
    }
}

impl std::error::Error for Reaped {}

/// The tids of `/proc/PID/task`.
fn tasks(pid: i32) -> Vec<i32> {
    crate::transport::list_tasks(pid)
}

fn open_mem(pid: i32) -> anyhow::Result<File> {
    File::options()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .with_context(|| format!("opening /proc/{pid}/mem"))
}

impl World {
    /// The world of `pid` with the stopped threads `threads` (their
    /// signals held), killed with wprobe when `kill_on_exit` is
    /// `PTRACE_O_EXITKILL`.
    fn with_threads(
        pid: i32,
        threads: BTreeMap<i32, Held>,
        kill_on_exit: libc::c_int,
    ) -> anyhow::Result<World> {
        Ok(World {
            pid,
            threads,
            mem: open_mem(pid)?,
            syscall_insn: None,
            kill_on_exit,
            reaped: None,
            cave: None,
            cave_sought: false,
            injections: 0,
            code: Default::default(),
            pinned: None,
        })
    }

    /// The launched command, stopped at its entry point (single-threaded,
    /// our `PTRACE_TRACEME` tracee).
    pub(super) fn launched(pid: i32) -> anyhow::Result<World> {
        let threads = BTreeMap::from([(pid, Held::default())]);
        World::with_threads(pid, threads, libc::PTRACE_O_EXITKILL)
    }

    /// Threads already seized and stopped by us (`traps::Traps::stop_all`),
    /// with the signal each holds for its release.
    pub(super) fn adopt(pid: i32, stopped: BTreeMap<i32, i32>) -> anyhow::Result<World> {
        let threads = stopped.into_iter().map(|(tid, sig)| {
            let held = Held {
                sig,
                group_stop: false,
                in_syscall: false,
            };
            (tid, held)
        });
        World::with_threads(pid, threads.collect(), 0)
    }

    /// Seizes and stops every thread of `pid` (threads created meanwhile
    /// included: the list is read again until it is stable).
    pub(super) fn stop(pid: i32) -> anyhow::Result<World> {
        let mut w = World::with_threads(pid, BTreeMap::new(), 0)?;
        let deadline = std::time::Instant::now() + ATTACH_DEADLINE;
        loop {
            let mut added = Vec::new();
            for tid in tasks(pid) {
                if w.threads.contains_key(&tid) {
                    continue;
                }
                match sys::seize(tid, 0) {
                    Ok(()) => {
                        if sys::interrupt(tid).is_ok() {
                            added.push(tid);
                        } else {
                            let _ = sys::detach(tid, 0);
                        }
                    }
                    Err(Errno::EPERM) if w.threads.is_empty() => {
                        let why = crate::proc::procinfo::untraceable(pid);
                        match why.explain(pid) {
                            Some(reason) => bail!("{reason}"),
                            // An OS failure, by its errno (`wprobe repair`
                            // says it as a permission error).
                            None => {
                                return Err(crate::transport::Error::Os {
                                    pid: Some(pid),
                                    addr: None,
                                    errno: Some(libc::EPERM),
                                    message: format!(
                                        "not permitted to trace process {pid}: {}",
                                        crate::transport::common::ptrace_hint()
                                    ),
                                }
                                .into());
                            }
                        }
                    }
                    // Exited meanwhile.
                    Err(_) => {}
                }
            }
            if added.is_empty() {
                break;
            }
            for tid in added {
                if let Some(h) = w.wait_stop(tid) {
                    w.threads.insert(tid, h);
                }
            }
            if std::time::Instant::now() > deadline {
                w.release();
                bail!("attaching to process {pid}: threads kept appearing for 2 s");
            }
        }
        if w.threads.is_empty() {
            if let Some(raw) = w.reaped {
                return Err(Reaped(raw).into());
            }
            bail!("no such process: {pid}");
        }
        Ok(w)
    }

    /// Waits for the interrupt stop of a just-seized thread; `None` if it
    /// exited.
    fn wait_stop(&mut self, tid: i32) -> Option<Held> {
        let mut h = Held::default();
        loop {
            let raw = match sys::wait(tid, 0) {
                Ok(Some((_, raw))) => raw,
                _ => return None,
            };
            match sys::decode_status(raw) {
                Status::Exited(_) | Status::Signaled(_) => {
                    if tid == self.pid {
                        self.reaped = Some(raw);
                    }
                    return None;
                }
                Status::Stopped { sig, event } if event == libc::PTRACE_EVENT_STOP => {
                    h.group_stop = matches!(
                        sig,
                        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                    );
                    if !h.group_stop {
                        cave::restart_if_failed_by_our_stop(tid);
                    }
                    return Some(h);
                }
                // A signal arrived first: hold it and take the interrupt's
                // stop, which follows.
                Status::Stopped { sig, event: 0 } => {
                    h.sig = sig;
                    if sys::cont(tid, 0).is_err() {
                        return None;
                    }
                }
                _ => {
                    if sys::cont(tid, 0).is_err() {
                        return None;
                    }
                }
            }
        }
    }

    /// The process.
    pub(super) fn pid(&self) -> i32 {
        self.pid
    }

    /// The stopped threads.
    pub(super) fn tids(&self) -> Vec<i32> {
        self.threads.keys().copied().collect()
    }

    /// The stopped threads with their program counters (the threads whose
    /// registers can be read).
    pub(super) fn thread_pcs(&self) -> Vec<(i32, u64)> {
        let tids = self.tids().into_iter();
        tids.filter_map(|tid| self.regs(tid).map(|r| (tid, r.rip)))
            .collect()
    }

    /// The registers of stopped thread `tid`.
    pub(super) fn regs(&self, tid: i32) -> Option<Regs> {
        let mut r = crate::sys::regs::zero_regs();
        sys::getregs(tid, &mut r).ok().map(|()| r)
    }

    /// Moves stopped thread `tid` to `pc`.
    pub(super) fn set_pc(&self, tid: i32, pc: u64) -> anyhow::Result<()> {
        let mut r = self
            .regs(tid)
            .ok_or_else(|| anyhow::anyhow!("PTRACE_GETREGS of thread {tid} failed"))?;
        r.rip = pc;
        sys::setregs(tid, &r).map_err(|e| anyhow::anyhow!("PTRACE_SETREGS: {e}"))
    }

    /// Marks threads `tids` as stopped at a ptrace event inside a system
    /// call (a fork's): not used to run injected code.
    pub(super) fn in_syscall(&mut self, tids: impl IntoIterator<Item = i32>) {
        for tid in tids {
            if let Some(h) = self.threads.get_mut(&tid) {
                h.in_syscall = true;
            }
        }
    }

    /// A thread to run injected code on: the main thread if it is not in a
    /// group-stop nor inside a system call, else another.
    pub(super) fn runner(&self) -> anyhow::Result<i32> {
        let ok = |t: &i32| {
            self.threads
                .get(t)
                .is_some_and(|h| !h.group_stop && !h.in_syscall)
        };
        if ok(&self.pid) {
            return Ok(self.pid);
        }
        self.threads.keys().copied().find(ok).with_context(|| {
            format!(
                "process {} is stopped (job control): continue it (kill -CONT {}) first",
                self.pid, self.pid
            )
        })
    }

    /// Writes `data` at `addr` whatever the page protections (the
    /// process's text, stub pages).
    pub(super) fn poke(&self, addr: u64, data: &[u8]) -> anyhow::Result<()> {
        let written = crate::sys::mem::pwrite(&self.mem, data, addr);
        // What `peek_code` read of those bytes: the bytes written, or, if
        // not all were, forgotten.
        match written {
            Ok(n) if n == data.len() => self.code.written(addr, data),
            _ => self.forget_code(addr, data.len()),
        }
        match written {
            Ok(n) if n == data.len() => Ok(()),
            Ok(n) => bail!(
                "writing {} bytes at {addr:#x} in process {}: only {n}",
                data.len(),
                self.pid
            ),
            Err(e) => bail!(
                "writing {} bytes at {addr:#x} in process {}: {e}",
                data.len(),
                self.pid
            ),
        }
    }

    /// Reads memory; the number of leading bytes read.
    pub(super) fn peek(&self, addr: u64, buf: &mut [u8]) -> usize {
        crate::sys::mem::pread(&self.mem, buf, addr).unwrap_or(0)
    }

    /// [`World::peek`] for the many small reads of planning (each window's
    /// bytes checked against its file's): served from chunks read once
    /// while the process stays stopped (`chunks::Chunks`); what a chunk
    /// cannot give is read directly.
    pub(super) fn peek_code(&self, addr: u64, buf: &mut [u8]) -> usize {
        if self.code.read(addr, buf, |at, chunk| self.peek(at, chunk)) {
            return buf.len();
        }
        // A chunk cut short (an unreadable page before the address): as
        // the process says.
        self.peek(addr, buf)
    }

    /// Forgets what [`World::peek_code`] read of the `len` bytes at `addr`
    /// (written), or everything (`len` 0: the process runs).
    fn forget_code(&self, addr: u64, len: usize) {
        self.code.forget(addr, len);
    }

    /// Hands the stopped threads over, still stopped and traced, with the
    /// signal each holds (`traps::Traps` resumes them).
    pub(super) fn into_stopped(mut self) -> BTreeMap<i32, i32> {
        self.unpin();
        std::mem::take(&mut self.threads)
            .into_iter()
            .map(|(tid, h)| (tid, h.sig))
            .collect()
    }

    /// Lets every thread go, delivering the signals held meanwhile. The
    /// injection cave goes back to the vDSO's zeros first (no thread runs
    /// it once its injection ended).
    pub(super) fn release(&mut self) {
        self.unpin();
        self.forget_code(0, 0);
        if let Some(c) = self.cave.take() {
            let _ = self.poke(c.addr, &[0; cave::CAVE_BYTES as usize]);
        }
        for (tid, h) in std::mem::take(&mut self.threads) {
            let _ = sys::detach(tid, h.sig);
        }
    }

    /// Tests of tracer death (debug builds only): at the injection
    /// `WPROBE_INJECTION_PAUSE` counts (from 1), with the thread set up to
    /// run it (a call: running it), says so on standard error and waits
    /// ten seconds, for the test to kill wprobe there.
    /// `WPROBE_NO_INJECTION_CAVE` makes injections run the way they did
    /// before the cave (to show what it prevents).
    fn injection_pause(&mut self) {
        self.injections += 1;
        if !cfg!(debug_assertions) {
            return;
        }
        let at = std::env::var("WPROBE_INJECTION_PAUSE")
            .ok()
            .and_then(|v| v.parse::<u32>().ok());
        if at == Some(self.injections) {
            crate::elog!("wprobe: debug: injection {} paused", self.injections);
            std::thread::sleep(std::time::Duration::from_secs(10));
        }
    }

    /// Injections made so far.
    pub(super) fn injections(&self) -> u32 {
        self.injections
    }

    /// The injection cave for thread `tid`, made at its first injection:
    /// `None` when the process has no vDSO with room past its image.
    fn cave(&mut self, tid: i32) -> anyhow::Result<Option<&mut Cave>> {
        if self.cave.as_ref().is_some_and(|c| c.tid != tid) {
            bail!(
                "injections on a second thread ({tid}) of process {}",
                self.pid
            );
        }
        if self.cave.is_none() && !self.cave_sought {
            self.cave_sought = true;
            if cfg!(debug_assertions) && std::env::var_os("WPROBE_NO_INJECTION_CAVE").is_some() {
                return Ok(None);
            }
            let maps = crate::proc::procmaps::read(self.pid).map_err(|e| anyhow::anyhow!("{e}"))?;
            let Some(v) = maps.iter().find(|m| m.path == "[vdso]") else {
                return Ok(None);
            };
            let mut image = vec![0u8; (v.end - v.start) as usize];
            if self.peek(v.start, &mut image) != image.len() {
                return Ok(None);
            }
            let Some(addr) = cave::place(v.start, &image) else {
                return Ok(None);
            };
            let saved = self.regs(tid).context("reading registers")?;
            let mut fp = crate::sys::regs::zero_fpregs();
            sys::getfpregs(tid, &mut fp).map_err(|e| anyhow::anyhow!("PTRACE_GETFPREGS: {e}"))?;
            // Syscall-stops tell themselves apart from SIGTRAPs.
            sys::setoptions(tid, libc::PTRACE_O_TRACESYSGOOD | self.kill_on_exit)
                .map_err(|e| anyhow::anyhow!("PTRACE_SETOPTIONS: {e}"))?;
            let (code, layout) = cave::code(addr, &saved, 0);
            self.poke(addr, &code)?;
            self.cave = Some(Cave {
                tid,
                addr,
                layout,
                saved,
                fp,
                fx: 0,
            });
        }
        Ok(self.cave.as_mut())
    }

    /// Sets `tid`, whose registers were `saved`, on the way into a call of
    /// `func` with the arguments `a` that returns to `return_to` (then
    /// the injection's pause): the return address below the red zone,
    /// 16-aligned, so that the callee starts with RSP ≡ 8 (mod 16), as
    /// after a `call`.
    fn start_call(
        &mut self,
        tid: i32,
        saved: &Regs,
        func: u64,
        a: [u64; 6],
        return_to: u64,
    ) -> anyhow::Result<()> {
        let mut r = *saved;
        let sp = ((saved.rsp - 128 - 64) & !15) - 8;
        self.poke(sp, &return_to.to_le_bytes())?;
        r.rsp = sp;
        r.rip = func;
        r.orig_rax = u64::MAX;
        r.rax = 0;
        r.eflags &= !(0x100 | 0x400); // TF, DF
        (r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        sys::setregs(tid, &r).map_err(|e| anyhow::anyhow!("PTRACE_SETREGS: {e}"))?;
        self.injection_pause();
        Ok(())
    }

    /// Sets `tid`, whose registers were `saved`, at the `syscall`
    /// instruction `at` for system call `nr` with the arguments `a` (then
    /// the injection's pause).
    fn start_syscall(
        &mut self,
        tid: i32,
        saved: &Regs,
        nr: u64,
        a: [u64; 6],
        at: u64,
    ) -> anyhow::Result<()> {
        let mut r = *saved;
        r.rax = nr;
        r.orig_rax = u64::MAX;
        (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        r.rip = at;
        r.eflags &= !0x100;
        sys::setregs(tid, &r).map_err(|e| anyhow::anyhow!("PTRACE_SETREGS: {e}"))?;
        self.injection_pause();
        Ok(())
    }

    /// Resumes `tid` (in the cave) system call by system call until it
    /// stops at the entry of the system call ending at `stop`; the result
    /// of the one ending at `after` (the injected system call), if given.
    /// Other signals are held for its release.
    fn run_to_cave_stop(&mut self, tid: i32, stop: u64, after: u64) -> anyhow::Result<Option<u64>> {
        let mut result = None;
        loop {
            sys::syscall(tid, 0).map_err(|e| anyhow::anyhow!("resuming thread {tid}: {e}"))?;
            if !self.injected_stop(tid, libc::SIGTRAP | 0x80)? {
                continue;
            }
            let r = self.regs(tid).context("reading registers")?;
            let entry = sys::at_syscall_entry(tid).unwrap_or(true);
            if entry && r.rip == stop {
                return Ok(result);
            }
            if !entry && r.rip == after {
                result = Some(r.rax);
            }
        }
    }

    /// Waits for the next stop of `tid` during an injected call: whether
    /// it is one of signal `wanted` (`SIGTRAP | 0x80`: a system call
    /// stop); another signal is held for its release. An error when the
    /// thread is gone or faulted (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`,
    /// or a `SIGTRAP` not wanted).
    fn injected_stop(&mut self, tid: i32, wanted: i32) -> anyhow::Result<bool> {
        let raw = match sys::wait(tid, 0) {
            Ok(Some((_, raw))) => raw,
            _ => bail!("thread {tid} vanished during an injected call"),
        };
        match sys::decode_status(raw) {
            Status::Exited(_) | Status::Signaled(_) => {
                self.threads.remove(&tid);
                bail!("thread {tid} ended during an injected call");
            }
            Status::Stopped { sig, event: 0 } if sig == wanted => return Ok(true),
            Status::Stopped { sig, event: 0 }
                if matches!(
                    sig,
                    libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP
                ) =>
            {
                let rip = self.regs(tid).map_or(0, |r| r.rip);
                bail!("thread {tid} got signal {sig} at {rip:#x} during an injected call");
            }
            Status::Stopped { sig, event: 0 } => {
                if let Some(h) = self.threads.get_mut(&tid) {
                    h.sig = sig;
                }
            }
            _ => {}
        }
        Ok(false)
    }

    /// Puts thread `tid` back as the cave found it (its registers; `fp`:
    /// its FPU and SSE registers too), in the stop it is in: at a system
    /// call's entry, the interrupted system call (if any) is made there.
    fn put_back(&mut self, tid: i32, fp: bool) -> anyhow::Result<()> {
        let Some(c) = &self.cave else {
            bail!("no injection cave");
        };
        let at_entry = matches!(sys::at_syscall_entry(tid), Ok(true));
        let r = if at_entry {
            cave::at_entry_stop(&c.saved)
        } else {
            c.saved
        };
        sys::setregs(tid, &r).map_err(|e| anyhow::anyhow!("PTRACE_SETREGS: {e}"))?;
        if fp {
            sys::setfpregs(tid, &c.fp).map_err(|e| anyhow::anyhow!("PTRACE_SETFPREGS: {e}"))?;
        }
        Ok(())
    }

    /// A `syscall` instruction in an executable mapping (vDSO first).
    fn syscall_insn(&mut self) -> anyhow::Result<u64> {
        if let Some(a) = self.syscall_insn {
            return Ok(a);
        }
        let maps = crate::proc::procmaps::read(self.pid).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut cands: Vec<&crate::proc::procmaps::Mapping> =
            maps.iter().filter(|m| m.exec && m.read).collect();
        cands.sort_by_key(|m| m.path != "[vdso]");
        for m in cands {
            let mut buf = vec![0u8; (m.end - m.start).min(1 << 20) as usize];
            let n = self.peek(m.start, &mut buf);
            if let Some(i) = buf[..n].windows(2).position(|w| w == [0x0f, 0x05]) {
                self.syscall_insn = Some(m.start + i as u64);
                return Ok(m.start + i as u64);
            }
        }
        bail!("no syscall instruction in process {}", self.pid)
    }

    /// Resumes `tid` with `step` (single-step) or not until a SIGTRAP stop;
    /// other signals are held for its release.
    fn run_until_trap(&mut self, tid: i32, step: bool) -> anyhow::Result<()> {
        loop {
            let r = if step {
                sys::singlestep(tid, 0)
            } else {
                sys::cont(tid, 0)
            };
            r.map_err(|e| anyhow::anyhow!("resuming thread {tid}: {e}"))?;
            if self.injected_stop(tid, libc::SIGTRAP)? {
                return Ok(());
            }
        }
    }

    /// The loader's view of stopped thread `tid`.
    pub(super) fn target(&mut self, tid: i32) -> Injector<'_> {
        Injector { w: self, tid }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.release();
    }
}

/// A stopped thread running system calls and calls for the loader. Its
/// registers are restored after each (with `orig_rax = -1` meanwhile, so
/// that a system call it was stopped in restarts normally afterwards).
pub(super) struct Injector<'a> {
    w: &'a mut World,
    tid: i32,
}

impl Injector<'_> {
    /// A call of `func(a…)` that returns into the cave (see [`cave`]): the
    /// FXSAVE image the cave restores from, if wprobe dies, is written into
    /// the process first (a page of its own, mapped at the first call).
    fn call_through_cave(&mut self, func: u64, a: [u64; 6]) -> anyhow::Result<u64> {
        let tid = self.tid;
        let needs_fx = self.w.cave.as_ref().is_some_and(|c| c.fx == 0);
        if needs_fx {
            let rw = (libc::PROT_READ | libc::PROT_WRITE) as u64;
            let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
            let page = agent_loader::Target::inject_syscall(
                self,
                libc::SYS_mmap as u64,
                [0, 4096, rw, flags, u64::MAX, 0],
            )?;
            agent_loader::loader::check(page, "mmap of the injection's FPU page")?;
            let c = self.w.cave.as_ref().context("the injection cave")?;
            let image = crate::sys::regs::fpregs_bytes(&c.fp).to_vec();
            let (code, _) = cave::code(c.addr, &c.saved, page);
            let addr = c.addr;
            self.w.poke(page, &image)?;
            self.w.poke(addr, &code)?;
            if let Some(c) = self.w.cave.as_mut() {
                c.fx = page;
            }
        }
        let c = self.w.cave.as_ref().context("the injection cave")?;
        let (base, l, saved) = (c.addr, c.layout, c.saved);
        // Returning into the cave.
        self.w.start_call(tid, &saved, func, a, base + l.ret)?;
        let ran = self.w.run_to_cave_stop(tid, base + l.ret_stop, 0);
        // The call's result, in `rdi` at the stop that ends it.
        let result = ran.and_then(|_| self.w.regs(tid).context("reading registers"));
        let back = self.w.put_back(tid, true);
        let result = result?.rdi;
        back?;
        Ok(result)
    }
}

impl agent_loader::Target for Injector<'_> {
    fn pid(&self) -> i32 {
        self.w.pid
    }

    fn inject_syscall(&mut self, nr: u64, a: [u64; 6]) -> anyhow::Result<u64> {
        let tid = self.tid;
        if let Some(c) = self.w.cave(tid)? {
            let (base, l, saved) = (c.addr, c.layout, c.saved);
            self.w.start_syscall(tid, &saved, nr, a, base + l.sys)?;
            let ran = self
                .w
                .run_to_cave_stop(tid, base + l.sys_stop, base + l.sys_after);
            let back = self.w.put_back(tid, false);
            let result = ran?;
            back?;
            return result
                .with_context(|| format!("system call {nr} in process {}: no result", self.w.pid));
        }
        let sc = self.w.syscall_insn()?;
        let saved = self.w.regs(self.tid).context("reading registers")?;
        self.w.start_syscall(self.tid, &saved, nr, a, sc)?;
        let result = loop {
            if let Err(e) = self.w.run_until_trap(self.tid, true) {
                let _ = sys::setregs(self.tid, &saved);
                return Err(e);
            }
            let now = self.w.regs(self.tid).context("reading registers")?;
            if now.rip == sc + 2 {
                break now.rax;
            }
        };
        sys::setregs(self.tid, &saved).map_err(|e| anyhow::anyhow!("PTRACE_SETREGS: {e}"))?;
        Ok(result)
    }

    fn write_mem(&mut self, addr: u64, bytes: &[u8]) -> anyhow::Result<()> {
        self.w.poke(addr, bytes)
    }

    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        let n = self.w.peek(addr, buf);
        ensure!(n == buf.len(), "reading {} bytes at {addr:#x}", buf.len());
        Ok(())
    }

    fn call(&mut self, func: u64, a: [u64; 6], return_to: u64) -> anyhow::Result<u64> {
        let tid = self.tid;
        if self.w.cave(tid)?.is_some() {
            return self.call_through_cave(func, a);
        }
        let saved = self.w.regs(self.tid).context("reading registers")?;
        self.w.start_call(self.tid, &saved, func, a, return_to)?;
        let res = self.w.run_until_trap(self.tid, false);
        let now = self.w.regs(self.tid);
        sys::setregs(self.tid, &saved).map_err(|e| anyhow::anyhow!("PTRACE_SETREGS: {e}"))?;
        res?;
        let now = now.context("reading registers")?;
        ensure!(
            now.rip == return_to + 1,
            "call of {func:#x} in process {} stopped at {:#x}, not at its return trap",
            self.w.pid,
            now.rip
        );
        Ok(now.rax)
    }
}

#[cfg(test)]
mod tests;
