//! Our traps: a breakpoint or watchpoint hit reported to the caller with a
//! [`super::PtraceHit`], the dynamic linker's breakpoint (library events), the
//! hand-off of a process to a debugger, and a thread's PC put back when it
//! stopped inside an out-of-line slot.

use super::hit::HitKind;
use super::threads::ProcKind;
use super::{PtraceAction, PtraceError, PtraceEvent, PtraceTracer, rdebug};
use crate::arch::{self, BREAKPOINT_INSN, Regs};
use crate::sys::ptrace::{self as sys};
use crate::sys::regs::zero_regs;

use super::events::Cb;

impl PtraceTracer {
    pub(super) fn on_sigtrap(&mut self, tid: i32, pid: i32, cb: Cb<'_>) -> Result<(), PtraceError> {
        let mut regs = zero_regs();
        if sys::getregs(tid, &mut regs).is_err() {
            return Ok(());
        }
        let Some(p) = self.procs.get(&pid) else {
            self.resume(tid);
            return Ok(());
        };
        // The common case without asking the kernel why (one system call
        // less per hit): the PC is just past one of our int3s and no
        // watchpoint could have trapped. Our own single-steps are waited
        // for where they are made, never here.
        let addr = regs.rip.wrapping_sub(arch::pc_after_trap());
        if p.wps.iter().all(Option::is_none) && p.mem.borrow().sites.contains_key(&addr) {
            return self.breakpoint_hit(tid, pid, addr, regs, cb);
        }
        let si = match sys::getsiginfo(tid) {
            Ok(si) => si,
            Err(_) => return Ok(()),
        };
        if si.si_code == arch::SI_KERNEL {
            let (site, stale) = {
                let m = p.mem.borrow();
                (m.sites.contains_key(&addr), m.ever_armed.contains(&addr))
            };
            if site {
                return self.breakpoint_hit(tid, pid, addr, regs, cb);
            }
            if stale {
                // Our int3 was removed while this trap was pending: rewind.
                let mut b = [0u8];
                let n = p.mem.borrow().read_raw(addr, &mut b);
                if n == 1 && b[0] != BREAKPOINT_INSN {
                    regs.rip = addr;
                    let _ = sys::setregs(tid, &regs);
                    self.resume(tid);
                    return Ok(());
                }
            }
        } else if si.si_code == arch::TRAP_HWBKPT {
            let dr6 = sys::peekuser(tid, arch::debugreg_offset(6)).unwrap_or(0);
            let mut bits = 0u8;
            for (i, w) in p.wps.iter().enumerate() {
                if w.is_some() && dr6 & (1 << i) != 0 {
                    bits |= 1 << i;
                }
            }
            if bits != 0 {
                return self.watchpoint_hit(tid, pid, regs, bits, cb);
            }
        }
        // Not ours: the program's own SIGTRAP (raise, int3, debugger library).
        if let Some(th) = self.threads.get_mut(&tid) {
            th.sig = libc::SIGTRAP;
        }
        self.summary.signals_forwarded += 1;
        self.resume(tid);
        Ok(())
    }

    pub(super) fn breakpoint_hit(
        &mut self,
        tid: i32,
        pid: i32,
        addr: u64,
        mut regs: Regs,
        cb: Cb<'_>,
    ) -> Result<(), PtraceError> {
        regs.rip = addr;
        // The second trap of a hit interrupted by a signal (see
        // `Thread::rerun`): step over without running the handler again.
        // Any other hit at or above that stack frame means the thread moved
        // on (the signal handler left by longjmp, say): forget it. Hits
        // below it are nested in the signal handler.
        if let Some(th) = self.threads.get_mut(&tid)
            && let Some((a, sp)) = th.rerun
        {
            if a == addr && sp == regs.rsp {
                th.rerun = None;
                return self.step_over(tid, pid, addr, regs).map(drop);
            }
            if regs.rsp >= sp {
                th.rerun = None;
            }
        }
        let p = &self.procs[&pid];
        let mem = p.mem.clone();
        let quiet = p.kind != ProcKind::Traced;
        let internal = {
            let m = mem.borrow();
            let s = &m.sites[&addr];
            self.ids.clear();
            self.ids.extend_from_slice(&s.ids);
            s.internal
        };
        if !self.ids.is_empty() && !quiet {
            self.summary.breakpoint_hits += 1;
            let cpu_src = self
                .threads
                .get_mut(&tid)
                .map(|t| std::mem::take(&mut t.cpu_src))
                .unwrap_or_default();
            let mut hit = std::mem::take(&mut self.hit);
            hit.reset(tid, pid, HitKind::Breakpoint(addr), regs, mem, cpu_src);
            let ids = std::mem::take(&mut self.ids);
            self.in_flight = Some((tid, addr));
            let action = cb(
                self,
                PtraceEvent::Breakpoint {
                    bp: &ids,
                    hit: &mut hit,
                },
            );
            self.in_flight = None;
            regs = hit.take_regs();
            regs.rip = addr;
            let cpu_src = std::mem::take(hit.cpu_src.get_mut());
            hit.mem = None;
            self.hit = hit;
            if let Some(th) = self.threads.get_mut(&tid) {
                th.cpu_src = cpu_src;
            }
            self.ids = ids;
            match action {
                PtraceAction::Continue => {}
                PtraceAction::DisableProbe => {
                    let ids = std::mem::take(&mut self.ids);
                    for id in &ids {
                        self.remove_breakpoint(*id)?;
                    }
                    self.ids = ids;
                }
                PtraceAction::HandoffToDebugger => return self.handoff(tid, pid, regs),
            }
        }
        if internal && !quiet {
            self.library_event(pid, cb);
        }
        let reported = !self.ids.is_empty() && !quiet;
        let fault = self.step_over(tid, pid, addr, regs)?;
        if reported {
            cb(self, PtraceEvent::Stepped { tid, fault });
        }
        Ok(())
    }

    pub(super) fn library_event(&mut self, pid: i32, cb: Cb<'_>) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let consistent = {
            let mut m = p.mem.borrow_mut();
            m.refresh_maps();
            match p.rdebug.and_then(|r| r.r_debug) {
                Some(a) => {
                    let mut b = [0u8; 4];
                    m.read(a + rdebug::R_STATE_OFFSET, &mut b) != 4
                        || u32::from_le_bytes(b) == rdebug::RT_CONSISTENT
                }
                None => true,
            }
        };
        if consistent {
            cb(self, PtraceEvent::LibrariesChanged { pid });
        }
    }

    pub(super) fn watchpoint_hit(
        &mut self,
        tid: i32,
        pid: i32,
        mut regs: Regs,
        bits: u8,
        cb: Cb<'_>,
    ) -> Result<(), PtraceError> {
        let orig = regs;
        for slot in 0..4 {
            if bits & (1 << slot) == 0 {
                continue;
            }
            let Some(p) = self.procs.get(&pid) else { break };
            let Some(w) = p.wps[slot] else { continue };
            let mem = p.mem.clone();
            self.summary.watchpoint_hits += 1;
            let cpu_src = self
                .threads
                .get_mut(&tid)
                .map(|t| std::mem::take(&mut t.cpu_src))
                .unwrap_or_default();
            let mut hit = std::mem::take(&mut self.hit);
            hit.reset(
                tid,
                pid,
                HitKind::Watchpoint(w.addr, slot),
                regs,
                mem,
                cpu_src,
            );
            let action = cb(
                self,
                PtraceEvent::Watchpoint {
                    wp: w.id,
                    hit: &mut hit,
                },
            );
            regs = hit.take_regs();
            let cpu_src = std::mem::take(hit.cpu_src.get_mut());
            hit.mem = None;
            self.hit = hit;
            if let Some(th) = self.threads.get_mut(&tid) {
                th.cpu_src = cpu_src;
            }
            match action {
                PtraceAction::Continue => {}
                PtraceAction::DisableProbe => self.remove_watchpoint(w.id)?,
                PtraceAction::HandoffToDebugger => return self.handoff(tid, pid, regs),
            }
        }
        if regs != orig {
            let _ = sys::setregs(tid, &regs);
        }
        self.resume(tid);
        Ok(())
    }

    pub(super) fn handoff(&mut self, tid: i32, pid: i32, regs: Regs) -> Result<(), PtraceError> {
        let _ = sys::setregs(tid, &regs);
        self.detach_process(pid, Some(tid))
    }

    /// If `tid` stopped inside an out-of-line slot, moves its PC back to the
    /// equivalent original address (so a signal handler or a debugger sees
    /// the program's own address).
    pub(super) fn fix_ool_pc(&mut self, tid: i32, pid: i32, own_fault: bool) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let m = p.mem.borrow();
        if m.scratch.is_empty() {
            return;
        }
        let mut regs = zero_regs();
        if sys::getregs(tid, &mut regs).is_err() {
            return;
        }
        let Some((_slot, jump, orig, len)) = m.ool_at(regs.rip) else {
            return;
        };
        let restarting =
            regs.rip == jump && (regs.orig_rax as i64) >= 0 && arch::is_restart_code(regs.rax);
        if restarting {
            // An interrupted syscall in the slot: the kernel rewinds RIP by 2
            // to the slot's syscall, which then jumps back normally.
            return;
        }
        regs.rip = if regs.rip == jump {
            orig + u64::from(len)
        } else {
            // At the slot, or inside an expanded form of the instruction
            // (not yet completed): the instruction runs again from the
            // probe, where the int3 traps a second time for this same hit
            // (an asynchronous signal interrupted the step). When the
            // instruction itself faulted, its next execution is a new one
            // (the program's handler fixed the cause, or longjmp'd and
            // called again): a new hit.
            if !own_fault && let Some(th) = self.threads.get_mut(&tid) {
                th.rerun = Some((orig, regs.rsp));
            }
            orig
        };
        let _ = sys::setregs(tid, &regs);
    }
}

/// Whether SIGTRAP is pending for thread `tid` (thread-private set).
pub(super) fn sigtrap_pending(tid: i32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return false;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("SigPnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGTRAP - 1)) != 0)
}
