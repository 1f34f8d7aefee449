//! Stopping the target for the moments the in-process transport changes it
//! (arming, teardown) and letting it go: every thread seized and
//! interrupted (or, for a launched command, the one thread stopped at its
//! entry point), signals that arrive meanwhile held and delivered when the
//! thread is let go; and one stopped thread made to run system calls and
//! calls for the agent's loader ([`agent_loader::Target`]). Between those
//! moments the target is not traced at all.

use std::collections::BTreeMap;
use std::fs::File;

use anyhow::{Context, bail, ensure};
use nix::errno::Errno;

use crate::arch::Regs;
use crate::sys::ptrace::{self as sys, Status};

/// How long attaching may take before the process is deemed unattachable.
const ATTACH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// One stopped thread.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    /// A signal that stopped it while we held it, delivered at release.
    sig: i32,
    /// Stopped in a group-stop (job control): not used to run code.
    group_stop: bool,
}

/// The stopped threads of one process.
#[derive(Debug)]
pub(super) struct World {
    pid: i32,
    threads: BTreeMap<i32, Held>,
    mem: File,
    /// A `syscall` instruction of the process (the vDSO's, found once).
    syscall_insn: Option<u64>,
    /// The raw wait status of the process, when waiting for a stop of its
    /// main thread reaped it (it died meanwhile: a terminal's Ctrl-C).
    reaped: Option<i32>,
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

/// What to change when ptrace is refused.
pub(super) fn ptrace_hint() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    format!(
        "ptrace is restricted (/proc/sys/kernel/yama/ptrace_scope = {scope}); \
         run as the same user with ptrace_scope 0, or with CAP_SYS_PTRACE"
    )
}

fn open_mem(pid: i32) -> anyhow::Result<File> {
    File::options()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .with_context(|| format!("opening /proc/{pid}/mem"))
}

impl World {
    /// The launched command, stopped at its entry point (single-threaded,
    /// our `PTRACE_TRACEME` tracee).
    pub(super) fn launched(pid: i32) -> anyhow::Result<World> {
        let mut threads = BTreeMap::new();
        threads.insert(pid, Held::default());
        Ok(World {
            pid,
            threads,
            mem: open_mem(pid)?,
            syscall_insn: None,
            reaped: None,
        })
    }

    /// Threads already seized and stopped by us (`traps::Traps::stop_all`),
    /// with the signal each holds for its release.
    pub(super) fn adopt(pid: i32, stopped: BTreeMap<i32, i32>) -> anyhow::Result<World> {
        Ok(World {
            pid,
            threads: stopped
                .into_iter()
                .map(|(tid, sig)| {
                    (
                        tid,
                        Held {
                            sig,
                            group_stop: false,
                        },
                    )
                })
                .collect(),
            mem: open_mem(pid)?,
            syscall_insn: None,
            reaped: None,
        })
    }

    /// Seizes and stops every thread of `pid` (threads created meanwhile
    /// included: the list is read again until it is stable).
    pub(super) fn stop(pid: i32) -> anyhow::Result<World> {
        let mut w = World {
            pid,
            threads: BTreeMap::new(),
            mem: open_mem(pid)?,
            syscall_insn: None,
            reaped: None,
        };
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
                        let why = crate::procinfo::untraceable(pid);
                        match why.explain(pid) {
                            Some(reason) => bail!("{reason}"),
                            None => {
                                bail!("not permitted to trace process {pid}: {}", ptrace_hint())
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

    /// The registers of stopped thread `tid`.
    pub(super) fn regs(&self, tid: i32) -> Option<Regs> {
        let mut r = crate::sys::regs::zero_regs();
        sys::getregs(tid, &mut r).ok().map(|()| r)
    }

    /// A thread to run injected code on: the main thread if it is not in a
    /// group-stop, else another.
    pub(super) fn runner(&self) -> anyhow::Result<i32> {
        let ok = |t: &i32| self.threads.get(t).is_some_and(|h| !h.group_stop);
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
        match crate::sys::mem::pwrite(&self.mem, data, addr) {
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

    /// Hands the stopped threads over, still stopped and traced, with the
    /// signal each holds (`traps::Traps` resumes them).
    pub(super) fn into_stopped(mut self) -> BTreeMap<i32, i32> {
        std::mem::take(&mut self.threads)
            .into_iter()
            .map(|(tid, h)| (tid, h.sig))
            .collect()
    }

    /// Lets every thread go, delivering the signals held meanwhile.
    pub(super) fn release(&mut self) {
        for (tid, h) in std::mem::take(&mut self.threads) {
            let _ = sys::detach(tid, h.sig);
        }
    }

    /// A `syscall` instruction in an executable mapping (vDSO first).
    fn syscall_insn(&mut self) -> anyhow::Result<u64> {
        if let Some(a) = self.syscall_insn {
            return Ok(a);
        }
        let maps = crate::procmaps::read(self.pid).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut cands: Vec<&crate::procmaps::Mapping> =
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
            let raw = match sys::wait(tid, 0) {
                Ok(Some((_, raw))) => raw,
                _ => bail!("thread {tid} vanished during an injected call"),
            };
            match sys::decode_status(raw) {
                Status::Exited(_) | Status::Signaled(_) => {
                    self.threads.remove(&tid);
                    bail!("thread {tid} ended during an injected call");
                }
                Status::Stopped { sig, event: 0 } if sig == libc::SIGTRAP => return Ok(()),
                Status::Stopped { sig, event: 0 }
                    if matches!(
                        sig,
                        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE
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

impl agent_loader::Target for Injector<'_> {
    fn pid(&self) -> i32 {
        self.w.pid
    }

    fn inject_syscall(&mut self, nr: u64, a: [u64; 6]) -> anyhow::Result<u64> {
        let sc = self.w.syscall_insn()?;
        let saved = self.w.regs(self.tid).context("reading registers")?;
        let mut r = saved;
        r.rax = nr;
        r.orig_rax = u64::MAX;
        (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        r.rip = sc;
        r.eflags &= !0x100;
        sys::setregs(self.tid, &r).map_err(|e| anyhow::anyhow!("PTRACE_SETREGS: {e}"))?;
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
        let saved = self.w.regs(self.tid).context("reading registers")?;
        let mut r = saved;
        // Below the red zone, 16-aligned, then the return address: the
        // callee starts with RSP ≡ 8 (mod 16), as after a `call`.
        let sp = ((saved.rsp - 128 - 64) & !15) - 8;
        self.w.poke(sp, &return_to.to_le_bytes())?;
        r.rsp = sp;
        r.rip = func;
        r.orig_rax = u64::MAX;
        r.rax = 0;
        r.eflags &= !(0x100 | 0x400); // TF, DF
        (r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        sys::setregs(self.tid, &r).map_err(|e| anyhow::anyhow!("PTRACE_SETREGS: {e}"))?;
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
