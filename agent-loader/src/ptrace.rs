//! A [`Target`] over raw ptrace: one thread of a process, seized and
//! stopped. System calls run on a `syscall` instruction found in the
//! target's code (single-stepped, like wprobe's `Tracer::inject_syscall`);
//! calls run the thread from the function's entry with a return address
//! pointing at an `int3`. Registers are restored after each, with
//! `orig_rax = -1` meanwhile so that an interrupted system call of the
//! target is neither restarted into our code nor lost.
//!
//! This is a test vehicle for the loader: it handles one thread, and
//! signals arriving meanwhile are held and re-delivered at detach.

use crate::target::Target;
use anyhow::{Context, Result, bail, ensure};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// A seized, stopped thread.
pub struct PtraceTarget {
    tid: i32,
    pid: i32,
    mem: File,
    syscall_insn: Option<u64>,
    held_signal: i32,
}

fn regs(tid: i32) -> Result<libc::user_regs_struct> {
    // SAFETY: user_regs_struct is plain integers.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer for PTRACE_GETREGS.
    let rc = unsafe { libc::ptrace(libc::PTRACE_GETREGS, tid, 0, &mut r as *mut _) };
    ensure!(
        rc == 0,
        "PTRACE_GETREGS: {}",
        std::io::Error::last_os_error()
    );
    Ok(r)
}

fn set_regs(tid: i32, r: &libc::user_regs_struct) -> Result<()> {
    // SAFETY: a valid in pointer for PTRACE_SETREGS.
    let rc = unsafe { libc::ptrace(libc::PTRACE_SETREGS, tid, 0, r as *const _) };
    ensure!(
        rc == 0,
        "PTRACE_SETREGS: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

fn wait(tid: i32) -> Result<i32> {
    let mut st = 0;
    // SAFETY: a valid status pointer.
    let r = unsafe { libc::waitpid(tid, &mut st, libc::__WALL) };
    ensure!(r == tid, "waitpid: {}", std::io::Error::last_os_error());
    ensure!(
        libc::WIFSTOPPED(st),
        "thread {tid} did not stop (status 0x{st:x}): it exited or was killed"
    );
    Ok(st)
}

impl PtraceTarget {
    /// Seizes thread `tid` of process `pid` and stops it.
    pub fn seize(pid: i32, tid: i32) -> Result<PtraceTarget> {
        // SAFETY: plain ptrace requests on a thread id.
        unsafe {
            ensure!(
                libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) == 0,
                "PTRACE_SEIZE {tid}: {}",
                std::io::Error::last_os_error()
            );
            ensure!(
                libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) == 0,
                "PTRACE_INTERRUPT {tid}: {}",
                std::io::Error::last_os_error()
            );
        }
        let mut t = PtraceTarget {
            tid,
            pid,
            mem: File::options()
                .read(true)
                .write(true)
                .open(format!("/proc/{pid}/mem"))
                .context("opening the target's memory")?,
            syscall_insn: None,
            held_signal: 0,
        };
        // Until the interrupt's event stop (signals may stop it first).
        loop {
            let st = wait(tid)?;
            if st >> 16 == libc::PTRACE_EVENT_STOP {
                break;
            }
            let sig = libc::WSTOPSIG(st);
            t.hold(sig);
            // SAFETY: resume without the signal (held), the interrupt is pending.
            unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, 0) };
        }
        Ok(t)
    }

    fn hold(&mut self, sig: i32) {
        if sig != libc::SIGTRAP && sig != 0 {
            self.held_signal = sig;
        }
    }

    /// Detaches, delivering a signal held meanwhile.
    pub fn detach(self) -> Result<()> {
        // SAFETY: plain ptrace request on our tracee.
        let rc = unsafe {
            libc::ptrace(
                libc::PTRACE_DETACH,
                self.tid,
                0,
                self.held_signal as libc::c_long,
            )
        };
        ensure!(
            rc == 0,
            "PTRACE_DETACH: {}",
            std::io::Error::last_os_error()
        );
        Ok(())
    }

    /// The thread's registers (for tests).
    pub fn regs(&self) -> Result<libc::user_regs_struct> {
        regs(self.tid)
    }

    /// A `syscall` instruction in an executable mapping (vDSO first).
    fn syscall_insn(&mut self) -> Result<u64> {
        if let Some(a) = self.syscall_insn {
            return Ok(a);
        }
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid))?;
        let mut cands: Vec<(u64, u64, bool)> = Vec::new();
        for l in maps.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 2 || !f[1].contains('x') || !f[1].starts_with('r') {
                continue;
            }
            let (a, b) = f[0].split_once('-').context("maps line")?;
            let (a, b) = (u64::from_str_radix(a, 16)?, u64::from_str_radix(b, 16)?);
            cands.push((a, b, f.get(5) == Some(&"[vdso]")));
        }
        cands.sort_by_key(|c| !c.2);
        for (a, b, _) in cands {
            let mut buf = vec![0u8; (b - a) as usize];
            let n = self.mem.read_at(&mut buf, a).unwrap_or(0);
            if let Some(i) = buf[..n].windows(2).position(|w| w == [0x0f, 0x05]) {
                self.syscall_insn = Some(a + i as u64);
                return Ok(a + i as u64);
            }
        }
        bail!("no syscall instruction in pid {}", self.pid)
    }

    /// Resumes with `req` until a SIGTRAP stop; other signals are held.
    fn run_until_trap(&mut self, req: libc::c_uint) -> Result<()> {
        loop {
            // SAFETY: resuming our stopped tracee.
            let rc = unsafe { libc::ptrace(req, self.tid, 0, 0) };
            ensure!(rc == 0, "resuming: {}", std::io::Error::last_os_error());
            let st = wait(self.tid)?;
            let sig = libc::WSTOPSIG(st);
            if st >> 16 != 0 {
                continue; // an event stop (e.g. a late interrupt): go on
            }
            if sig == libc::SIGTRAP {
                return Ok(());
            }
            if matches!(
                sig,
                libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE
            ) {
                let r = regs(self.tid)?;
                bail!(
                    "thread {} got signal {sig} at rip 0x{:x} during an injected call",
                    self.tid,
                    r.rip
                );
            }
            self.hold(sig);
        }
    }
}

impl Target for PtraceTarget {
    fn pid(&self) -> i32 {
        self.pid
    }

    fn inject_syscall(&mut self, nr: u64, a: [u64; 6]) -> Result<u64> {
        let sc = self.syscall_insn()?;
        let saved = regs(self.tid)?;
        let mut r = saved;
        r.rax = nr;
        r.orig_rax = u64::MAX;
        (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        r.rip = sc;
        r.eflags &= !0x100;
        set_regs(self.tid, &r)?;
        let result = loop {
            self.run_until_trap(libc::PTRACE_SINGLESTEP)?;
            let now = regs(self.tid)?;
            if now.rip == sc + 2 {
                break now.rax;
            }
        };
        set_regs(self.tid, &saved)?;
        Ok(result)
    }

    fn write_mem(&mut self, addr: u64, bytes: &[u8]) -> Result<()> {
        self.mem
            .write_all_at(bytes, addr)
            .with_context(|| format!("writing {} bytes at 0x{addr:x}", bytes.len()))
    }

    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.mem
            .read_exact_at(buf, addr)
            .with_context(|| format!("reading {} bytes at 0x{addr:x}", buf.len()))
    }

    fn call(&mut self, func: u64, a: [u64; 6], return_to: u64) -> Result<u64> {
        let saved = regs(self.tid)?;
        let mut r = saved;
        // Below the red zone, 16-aligned, then the return address: the
        // callee starts with RSP ≡ 8 (mod 16), as after a `call`.
        let sp = (saved.rsp - 128 - 64) & !15;
        let sp = sp - 8;
        self.write_mem(sp, &return_to.to_le_bytes())?;
        r.rsp = sp;
        r.rip = func;
        r.orig_rax = u64::MAX;
        r.rax = 0;
        r.eflags &= !(0x100 | 0x400); // TF, DF
        (r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        set_regs(self.tid, &r)?;
        self.run_until_trap(libc::PTRACE_CONT)?;
        let now = regs(self.tid)?;
        ensure!(
            now.rip == return_to + 1,
            "call of 0x{func:x} stopped at 0x{:x}, not at its return trap",
            now.rip
        );
        set_regs(self.tid, &saved)?;
        Ok(now.rax)
    }
}
