//! Our traps: a breakpoint or watchpoint hit reported to the caller with a
//! [`super::Hit`], the dynamic linker's breakpoint (library events), the
//! hand-off of a process to a debugger, and a thread's PC put back when it
//! stopped inside an out-of-line slot.

use super::hit::HitKind;
use super::threads::ProcKind;
use super::{Action, Event, ProviderError, Tracer, rdebug};
use crate::arch::{self, BREAKPOINT_INSN, Regs};
use crate::sys::ptrace::{self as sys};
use crate::sys::regs::zero_regs;

use super::events::Cb;

impl Tracer {
    pub(super) fn on_sigtrap(
        &mut self,
        tid: i32,
        pid: i32,
        cb: Cb<'_>,
    ) -> Result<(), ProviderError> {
        let si = match sys::getsiginfo(tid) {
            Ok(si) => si,
            Err(_) => return Ok(()),
        };
        let mut regs = zero_regs();
        if sys::getregs(tid, &mut regs).is_err() {
            return Ok(());
        }
        let Some(p) = self.procs.get(&pid) else {
            self.resume(tid);
            return Ok(());
        };
        if si.si_code == arch::SI_KERNEL {
            let addr = regs.rip.wrapping_sub(arch::pc_after_trap());
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
    ) -> Result<(), ProviderError> {
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
                return self.step_over(tid, pid, addr, regs);
            }
            if regs.rsp >= sp {
                th.rerun = None;
            }
        }
        let p = &self.procs[&pid];
        let mem = p.mem.clone();
        let quiet = p.kind != ProcKind::Traced;
        let ret_site = mem.borrow().sites[&addr].ret;
        if ret_site && !quiet {
            // A return address of tracked calls: the seam pairs the return
            // (and may drop the site when nothing returns there).
            let (action, r) = self.deliver((tid, pid, addr), regs, &mem, cb, |t, hit, cb| {
                cb(t, Event::ReturnSite { hit })
            });
            regs = r;
            if action == Action::HandoffToDebugger {
                return self.handoff(tid, pid, regs);
            }
        }
        let internal = {
            let m = mem.borrow();
            let Some(s) = m.sites.get(&addr) else {
                drop(m);
                return self.step_over(tid, pid, addr, regs);
            };
            self.ids.clear();
            self.ids.extend_from_slice(&s.ids);
            s.internal
        };
        if !self.ids.is_empty() && !quiet {
            self.summary.breakpoint_hits += 1;
            let ids = std::mem::take(&mut self.ids);
            let (action, r) = self.deliver((tid, pid, addr), regs, &mem, cb, |t, hit, cb| {
                cb(t, Event::Breakpoint { bp: &ids, hit })
            });
            regs = r;
            self.ids = ids;
            match action {
                Action::Continue => {}
                Action::DisableProbe => {
                    let ids = std::mem::take(&mut self.ids);
                    for id in &ids {
                        self.remove_breakpoint(*id)?;
                    }
                    self.ids = ids;
                }
                Action::HandoffToDebugger => return self.handoff(tid, pid, regs),
            }
        }
        if internal && !quiet {
            self.library_event(pid, cb);
        }
        self.step_over(tid, pid, addr, regs)
    }

    /// Runs `f` with the tracer's hit set up for a breakpoint trap of
    /// `tid` at `addr` with registers `regs`; returns what the callback
    /// asked and the registers as the handlers left them (RIP at `addr`).
    fn deliver(
        &mut self,
        (tid, pid, addr): (i32, i32, u64),
        regs: Regs,
        mem: &std::rc::Rc<std::cell::RefCell<super::mem::ProcMem>>,
        cb: Cb<'_>,
        f: impl FnOnce(&mut Tracer, &mut super::Hit, Cb<'_>) -> Action,
    ) -> (Action, Regs) {
        let stat = self.threads.get_mut(&tid).and_then(|t| t.stat.take());
        let mut hit = std::mem::take(&mut self.hit);
        hit.reset(tid, pid, HitKind::Breakpoint(addr), regs, mem.clone(), stat);
        self.in_flight = Some((tid, addr));
        let action = f(self, &mut hit, cb);
        self.in_flight = None;
        let mut regs = hit.take_regs();
        regs.rip = addr;
        let stat = hit.stat.get_mut().take();
        hit.mem = None;
        self.hit = hit;
        if let Some(th) = self.threads.get_mut(&tid) {
            th.stat = stat;
        }
        (action, regs)
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
            cb(self, Event::LibrariesChanged { pid });
        }
    }

    pub(super) fn watchpoint_hit(
        &mut self,
        tid: i32,
        pid: i32,
        mut regs: Regs,
        bits: u8,
        cb: Cb<'_>,
    ) -> Result<(), ProviderError> {
        let orig = regs;
        for slot in 0..4 {
            if bits & (1 << slot) == 0 {
                continue;
            }
            let Some(p) = self.procs.get(&pid) else { break };
            let Some(w) = p.wps[slot] else { continue };
            let mem = p.mem.clone();
            self.summary.watchpoint_hits += 1;
            let stat = self.threads.get_mut(&tid).and_then(|t| t.stat.take());
            let mut hit = std::mem::take(&mut self.hit);
            hit.reset(tid, pid, HitKind::Watchpoint(w.addr, slot), regs, mem, stat);
            let action = cb(
                self,
                Event::Watchpoint {
                    wp: w.id,
                    hit: &mut hit,
                },
            );
            regs = hit.take_regs();
            let stat = hit.stat.get_mut().take();
            hit.mem = None;
            self.hit = hit;
            if let Some(th) = self.threads.get_mut(&tid) {
                th.stat = stat;
            }
            match action {
                Action::Continue => {}
                Action::DisableProbe => self.remove_watchpoint(w.id)?,
                Action::HandoffToDebugger => return self.handoff(tid, pid, regs),
            }
        }
        if regs != orig {
            let _ = sys::setregs(tid, &regs);
        }
        self.resume(tid);
        Ok(())
    }

    pub(super) fn handoff(&mut self, tid: i32, pid: i32, regs: Regs) -> Result<(), ProviderError> {
        let _ = sys::setregs(tid, &regs);
        self.detach_process(pid, Some(tid))
    }

    /// If `tid` stopped inside an out-of-line slot, moves its PC back to the
    /// equivalent original address (so a signal handler or a debugger sees
    /// the program's own address).
    pub(super) fn fix_ool_pc(&mut self, tid: i32, pid: i32) {
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
            // probe, where the int3 traps a second time for this same hit.
            if let Some(th) = self.threads.get_mut(&tid) {
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
