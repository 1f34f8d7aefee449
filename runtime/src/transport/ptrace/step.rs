//! Step-over of a displaced instruction after a breakpoint hit, with the
//! `int3` left in place (DESIGN decision 6): emulation on the register
//! snapshot; else out-of-line execution from a scratch page mapped in the
//! tracee (one injected `mmap` per address space, slots holding the
//! relocated instruction and a jump back); else, as the last resort, a
//! single-step with the original byte restored while every other thread of
//! the process is stopped (so no hit of another thread is missed).

use nix::errno::Errno;

use super::events::zero_regs;
use super::mem::{OolSlot, ProcMem, Scratch};
use super::threads::TState;
use super::{PtraceError, PtraceTracer, StepPolicy};
use crate::arch::{self, BREAKPOINT_INSN, EmuMem, Emul, Insn, OOL_SLOT_BYTES, Regs, StepKind};
use crate::proc::procmaps::Mapping;
use crate::sys::ptrace::{self as sys, Status};

const PAGE: u64 = 4096;
const SLOTS_PER_PAGE: usize = PAGE as usize / OOL_SLOT_BYTES;

/// Emulation's view of the tracee memory: reads as the process sees them,
/// writes honouring page protections (a push onto a guard page fails and
/// the instruction is then executed for real, faulting as it should).
struct Emu<'a> {
    m: &'a mut ProcMem,
}

impl crate::arch::FaultMem for Emu<'_> {
    fn accessible(&mut self, addr: u64, len: u64, write: bool) -> bool {
        self.m.range_ok(addr, len, write) == len
    }
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        self.m.read(addr, buf) == buf.len()
    }
}

impl EmuMem for Emu<'_> {
    fn read_u64(&mut self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        (self.m.read(addr, &mut b) == 8).then(|| u64::from_le_bytes(b))
    }
    fn write_u64(&mut self, addr: u64, value: u64) -> bool {
        let b = value.to_le_bytes();
        if self.m.sites.range(addr..addr + 8).next().is_some() {
            return false;
        }
        crate::sys::mem::vm_write(self.m.pid, addr, &b) == Ok(8)
    }
}

/// Whether this machine gives user space CET shadow stacks (the kernel
/// lists `user_shstk` among the CPU flags when it supports them and the
/// CPU has them). Read once.
pub(crate) fn user_shadow_stacks() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
            c.lines()
                .find(|l| l.starts_with("flags"))
                .is_some_and(|l| l.split_whitespace().any(|f| f == "user_shstk"))
        })
    })
}

fn apply_policy(policy: StepPolicy, kind: StepKind) -> StepKind {
    // An emulated `call` pushes the return address on the stack only: a
    // process with a CET shadow stack would fault at the matching `ret`.
    // Where shadow stacks exist, calls run for real (return sites of
    // return probes often sit on one: `call f; call g`).
    if let StepKind::Emulate(Emul::Call(_) | Emul::CallInd) = kind
        && user_shadow_stacks()
    {
        return StepKind::SingleStep;
    }
    match (policy, kind) {
        (StepPolicy::Auto, k) => k,
        (StepPolicy::SingleStepOnly, _) => StepKind::SingleStep,
        (StepPolicy::NoEmulation, StepKind::Emulate(e)) => match e {
            // These depend on RIP (return address): cannot run out of line.
            Emul::Call(_) | Emul::CallInd => StepKind::SingleStep,
            _ => StepKind::OutOfLine,
        },
        (StepPolicy::NoEmulation, k) => k,
    }
}

impl PtraceTracer {
    /// Executes the displaced instruction at `addr` for `tid` (whose
    /// snapshot, possibly modified by a handler, is `regs` with RIP = addr)
    /// and resumes it. Returns the signal the instruction raised (SIGSEGV,
    /// SIGBUS, SIGFPE, SIGILL: delivered to the thread as without the
    /// probe), as seen when single-stepping or as predicted from its
    /// operands when it is executed out of line (its fault would reach the
    /// tracer only at the thread's next stop), for `logonfault`.
    pub(super) fn step_over(
        &mut self,
        tid: i32,
        pid: i32,
        addr: u64,
        mut regs: Regs,
    ) -> Result<Option<i32>, PtraceError> {
        let Some(p) = self.procs.get(&pid) else {
            return Ok(None);
        };
        let mem = p.mem.clone();
        let mut m = mem.borrow_mut();
        if m.code_dirty {
            m.replan_all();
        }
        let Some(site) = m.sites.get(&addr) else {
            // Removed by the handler: the original instruction is back.
            drop(m);
            regs.rip = addr;
            let _ = sys::setregs(tid, &regs);
            self.resume(tid);
            return Ok(None);
        };
        let (insn, kind, ool) = (site.insn, apply_policy(self.policy, site.kind), site.ool);
        let mut kind = kind;
        if let (StepKind::Emulate(e), Some(insn)) = (kind, insn) {
            if arch::emulate(&insn, e, &mut regs, &mut Emu { m: &mut m }) {
                drop(m);
                self.summary.emulated += 1;
                let _ = sys::setregs(tid, &regs);
                self.resume(tid);
                return Ok(None);
            }
            // A memory access failed: let the CPU execute it and fault for real.
            kind = match e {
                Emul::Call(_) | Emul::CallInd => StepKind::SingleStep,
                _ => StepKind::OutOfLine,
            };
        }
        if let (StepKind::OutOfLine, Some(insn)) = (kind, insn) {
            let fault = crate::arch::predict_fault(
                &insn,
                &regs,
                &mut self.insn_info,
                &mut Emu { m: &mut m },
            );
            drop(m);
            let slot = match ool {
                Some(s) => Some(s),
                None => self.alloc_slot(tid, pid, addr, &insn),
            };
            if let Some(s) = slot {
                self.summary.out_of_line += 1;
                regs.rip = s.addr;
                let _ = sys::setregs(tid, &regs);
                self.resume(tid);
                return Ok(fault);
            }
        } else {
            drop(m);
        }
        self.single_step_in_place(tid, pid, addr, regs)
    }

    /// Finds or makes an out-of-line slot for the site at `addr`.
    fn alloc_slot(&mut self, tid: i32, pid: i32, addr: u64, insn: &Insn) -> Option<OolSlot> {
        let mem = self.procs.get(&pid)?.mem.clone();
        for attempt in 0..2 {
            {
                let mut m = mem.borrow_mut();
                if m.scratch_failed {
                    return None;
                }
                for i in 0..m.scratch.len() {
                    let sc = m.scratch[i];
                    if sc.used >= SLOTS_PER_PAGE {
                        continue;
                    }
                    let slot_addr = sc.base + (sc.used * OOL_SLOT_BYTES) as u64;
                    let Some(rel) = arch::relocate(insn, slot_addr) else {
                        continue;
                    };
                    if m.poke(tid, slot_addr, &rel.code).is_err() {
                        continue;
                    }
                    m.scratch[i].used += 1;
                    let slot = OolSlot {
                        addr: slot_addr,
                        jump: slot_addr + u64::from(rel.jump_offset),
                    };
                    m.ool_index.push((slot.addr, slot.jump, addr, insn.len));
                    if let Some(s) = m.sites.get_mut(&addr) {
                        s.ool = Some(slot);
                    }
                    return Some(slot);
                }
            }
            if attempt == 1 {
                break;
            }
            match self.map_scratch(tid, pid, addr) {
                Some(base) => mem.borrow_mut().scratch.push(Scratch { base, used: 0 }),
                None => {
                    mem.borrow_mut().scratch_failed = true;
                    return None;
                }
            }
        }
        None
    }

    /// Maps one r-x scratch page near `near` in the tracee by injecting mmap.
    fn map_scratch(&mut self, tid: i32, pid: i32, near: u64) -> Option<u64> {
        let mem = self.procs.get(&pid)?.mem.clone();
        let hint = find_gap(&mem.borrow().maps, near);
        let prot = (libc::PROT_READ | libc::PROT_EXEC) as u64;
        let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
        let mut args = [
            hint.unwrap_or(0),
            PAGE,
            prot,
            flags | libc::MAP_FIXED_NOREPLACE as u64,
            u64::MAX,
            0,
        ];
        if hint.is_none() {
            args[3] = flags;
        }
        let is_err = |r: u64| r > (-4096i64) as u64;
        let mut r = self
            .inject_syscall(tid, pid, libc::SYS_mmap as u64, args)
            .ok()?;
        if is_err(r) {
            args[3] = flags;
            r = self
                .inject_syscall(tid, pid, libc::SYS_mmap as u64, args)
                .ok()?;
        }
        if is_err(r) {
            return None;
        }
        mem.borrow_mut().refresh_maps();
        Some(r)
    }

    /// Finds a `syscall` instruction in an executable mapping of `pid`.
    fn syscall_insn(&mut self, pid: i32) -> Option<u64> {
        let mem = self.procs.get(&pid)?.mem.clone();
        let mut m = mem.borrow_mut();
        if let Some(a) = m.syscall_insn {
            return Some(a);
        }
        let maps = m.maps.clone();
        let mut order: Vec<&Mapping> = maps.iter().filter(|x| x.exec && x.read).collect();
        order.sort_by_key(|x| (x.path != "[vdso]", !x.path.contains("libc")));
        let mut buf = vec![0u8; 65536];
        for map in order {
            let mut at = map.start;
            while at < map.end {
                let n = ((map.end - at) as usize).min(buf.len());
                let got = m.read_raw(at, &mut buf[..n]);
                if let Some(i) = buf[..got].windows(2).position(|w| w == [0x0f, 0x05]) {
                    let a = at + i as u64;
                    m.syscall_insn = Some(a);
                    return Some(a);
                }
                if got < n {
                    break;
                }
                // Overlap by one byte so a pair across chunks is found.
                at += (n as u64).saturating_sub(1).max(1);
            }
        }
        None
    }

    /// Runs one system call in the stopped thread `tid` and restores its registers.
    pub(super) fn inject_syscall(
        &mut self,
        tid: i32,
        pid: i32,
        nr: u64,
        a: [u64; 6],
    ) -> Result<u64, PtraceError> {
        let sc = self.syscall_insn(pid).ok_or(PtraceError::Sys {
            op: "finding a syscall instruction",
            pid,
            errno: Errno::ENOEXEC,
        })?;
        let mut saved = zero_regs();
        sys::getregs(tid, &mut saved).map_err(|e| PtraceError::sys("PTRACE_GETREGS", tid, e))?;
        let mut r = saved;
        r.rax = nr;
        r.orig_rax = u64::MAX;
        (r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9) = (a[0], a[1], a[2], a[3], a[4], a[5]);
        r.rip = sc;
        r.eflags &= !arch::EFLAGS_TF;
        sys::setregs(tid, &r).map_err(|e| PtraceError::sys("PTRACE_SETREGS", tid, e))?;
        let result = loop {
            sys::singlestep(tid, 0).map_err(|e| PtraceError::sys("PTRACE_SINGLESTEP", tid, e))?;
            let raw = match sys::wait(tid, 0) {
                Ok(Some((_, raw))) => raw,
                _ => return Err(PtraceError::TraceeDied { pid: tid }),
            };
            match sys::decode_status(raw) {
                Status::Stopped {
                    sig: libc::SIGTRAP,
                    event: 0,
                } => {
                    sys::getregs(tid, &mut r)
                        .map_err(|e| PtraceError::sys("PTRACE_GETREGS", tid, e))?;
                    if r.rip == sc + 2 {
                        break r.rax;
                    }
                }
                Status::Stopped { sig, event: 0 } => self.stash_signal(tid, sig),
                Status::Stopped { event, .. } if event == libc::PTRACE_EVENT_EXIT => {
                    self.queue.push_back((tid, raw));
                    return Err(PtraceError::TraceeDied { pid: tid });
                }
                Status::Stopped { .. } => {}
                _ => {
                    self.queue.push_back((tid, raw));
                    return Err(PtraceError::TraceeDied { pid: tid });
                }
            }
        };
        sys::setregs(tid, &saved).map_err(|e| PtraceError::sys("PTRACE_SETREGS", tid, e))?;
        Ok(result)
    }

    /// Keeps a signal that arrived while we were using the thread, to be
    /// delivered at its next resume (or re-sent if one is already pending).
    pub(super) fn stash_signal(&mut self, tid: i32, sig: i32) {
        if let Some(th) = self.threads.get_mut(&tid) {
            if th.sig == 0 {
                th.sig = sig;
            } else if th.sig == sig && sig < libc::SIGRTMIN() {
                // A standard signal is pending at most once.
            } else {
                let _ = crate::sys::process::tgkill(th.pid, tid, sig);
            }
        }
    }

    /// Last resort: original byte back, single-step, `int3` again, with every
    /// other thread of the process stopped meanwhile.
    fn single_step_in_place(
        &mut self,
        tid: i32,
        pid: i32,
        addr: u64,
        mut regs: Regs,
    ) -> Result<Option<i32>, PtraceError> {
        let held = self.stop_world(pid, tid);
        let Some(p) = self.procs.get(&pid) else {
            return Ok(None);
        };
        let mem = p.mem.clone();
        let orig = mem.borrow().sites.get(&addr).map(|s| s.orig);
        if let Some(o) = orig {
            let _ = mem.borrow().poke(tid, addr, &[o]);
        }
        regs.rip = addr;
        regs.eflags &= !arch::EFLAGS_TF;
        let _ = sys::setregs(tid, &regs);
        let mut deliver = 0;
        let mut requeued = false;
        loop {
            if sys::singlestep(tid, 0).is_err() {
                break;
            }
            let raw = match sys::wait(tid, 0) {
                Ok(Some((_, raw))) => raw,
                _ => break,
            };
            match sys::decode_status(raw) {
                Status::Stopped {
                    sig: libc::SIGTRAP,
                    event: 0,
                } => {
                    let si = sys::getsiginfo(tid);
                    match si.map(|s| s.si_code) {
                        Ok(arch::TRAP_HWBKPT) => {
                            // Stepped onto a watchpoint too: let the loop report it.
                            self.queue.push_back((tid, raw));
                            requeued = true;
                            break;
                        }
                        // Sent by a process (`kill`, `tgkill`), or the
                        // program's own `int3` stepped: the program's, for
                        // it after the step.
                        Ok(code)
                            if code <= 0
                                || (code == arch::SI_KERNEL && orig == Some(BREAKPOINT_INSN)) =>
                        {
                            self.stash_signal(tid, libc::SIGTRAP)
                        }
                        // The step's trap: TRAP_TRACE, or whatever else the
                        // kernel reports for it (an unreadable siginfo
                        // included). Delivered, a SIGTRAP would kill the
                        // program (seen once in 20,000 steps under load).
                        _ => {
                            // A rep-prefixed instruction traps after each
                            // iteration with RIP unchanged: step until it moves.
                            let mut now = zero_regs();
                            if sys::getregs(tid, &mut now).is_ok() && now.rip == addr {
                                continue;
                            }
                            break;
                        }
                    }
                }
                Status::Stopped { sig, event: 0 } => {
                    let mut now = zero_regs();
                    let _ = sys::getregs(tid, &mut now);
                    let code = sys::getsiginfo(tid).map(|s| s.si_code).unwrap_or(0);
                    let fault = matches!(
                        sig,
                        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE
                    );
                    if fault && code > 0 && now.rip == addr {
                        // The instruction itself faults: deliver as without the probe.
                        deliver = sig;
                        break;
                    }
                    self.stash_signal(tid, sig);
                }
                _ => {
                    // An event or exit in the middle: the instruction has been
                    // fetched; let the loop handle the stop.
                    if let Some(th) = self.threads.get_mut(&tid) {
                        th.state = TState::Held;
                    }
                    self.queue.push_back((tid, raw));
                    requeued = true;
                    break;
                }
            }
        }
        if orig.is_some() && mem.borrow().sites.contains_key(&addr) {
            let _ = mem.borrow().poke(tid, addr, &[BREAKPOINT_INSN]);
        }
        self.summary.single_stepped += 1;
        self.resume_all(&held);
        if !requeued {
            if deliver != 0
                && let Some(th) = self.threads.get_mut(&tid)
            {
                th.sig = deliver;
            }
            self.resume(tid);
        }
        Ok((deliver != 0).then_some(deliver))
    }
}

/// A free page-aligned address near `near` (for RIP-relative reach), from the
/// gaps between mappings.
fn find_gap(maps: &[Mapping], near: u64) -> Option<u64> {
    const MIN: u64 = 0x10_0000;
    const MAX: u64 = 0x7fff_ffff_0000;
    let mut best: Option<u64> = None;
    let mut consider = |cand: u64| {
        if (MIN..MAX).contains(&cand) && best.is_none_or(|b| cand.abs_diff(near) < b.abs_diff(near))
        {
            best = Some(cand);
        }
    };
    let mut prev_end = MIN;
    for m in maps {
        if m.start >= prev_end + PAGE {
            consider(prev_end);
            consider(m.start - PAGE);
        }
        prev_end = prev_end.max(m.end);
    }
    consider(prev_end);
    best.filter(|b| b.abs_diff(near) < (1 << 31) - (1 << 20))
}
