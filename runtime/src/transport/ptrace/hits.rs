//! Our traps: a breakpoint or watchpoint hit reported to the caller with a
//! [`super::PtraceHit`], the dynamic linker's breakpoint (library events), the
//! hand-off of a process to a debugger, and a thread's PC put back when it
//! stopped inside an out-of-line slot.

use super::hit::HitKind;
use super::threads::ProcKind;
use super::{PtraceAction, PtraceError, PtraceEvent, PtraceTracer};
use crate::arch::{self, BREAKPOINT_INSN, Regs};
use crate::sys::ptrace::{self as sys};
use crate::sys::regs::zero_regs;
use crate::transport::common::rdebug;

use super::Cb;

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
        let ret_site = mem.borrow().sites[&addr].ret;
        if ret_site && !quiet {
            // A return address of tracked calls: the seam pairs the return
            // (and may drop the site when nothing returns there).
            let (action, r) = self.deliver((tid, pid, addr), regs, &mem, cb, |t, hit, cb| {
                cb(t, PtraceEvent::ReturnSite { hit })
            });
            regs = r;
            if action == PtraceAction::HandoffToDebugger {
                return self.handoff(tid, pid, regs);
            }
        }
        let internal = {
            let m = mem.borrow();
            let Some(s) = m.sites.get(&addr) else {
                drop(m);
                return self.step_over(tid, pid, addr, regs).map(drop);
            };
            self.ids.clear();
            self.ids.extend_from_slice(&s.ids);
            s.internal
        };
        if !self.ids.is_empty() && !quiet {
            self.summary.breakpoint_hits += 1;
            let ids = std::mem::take(&mut self.ids);
            let (action, r) = self.deliver((tid, pid, addr), regs, &mem, cb, |t, hit, cb| {
                cb(t, PtraceEvent::Breakpoint { bp: &ids, hit })
            });
            regs = r;
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

    /// Runs `f` with the tracer's hit set up for a breakpoint trap of
    /// `tid` at `addr` with registers `regs`; returns what the callback
    /// asked and the registers as the handlers left them (RIP at `addr`).
    fn deliver(
        &mut self,
        (tid, pid, addr): (i32, i32, u64),
        regs: Regs,
        mem: &std::rc::Rc<std::cell::RefCell<super::mem::ProcMem>>,
        cb: Cb<'_>,
        f: impl FnOnce(&mut PtraceTracer, &mut super::PtraceHit, Cb<'_>) -> PtraceAction,
    ) -> (PtraceAction, Regs) {
        self.in_flight = Some((tid, addr));
        let kind = HitKind::Breakpoint(addr);
        let (action, mut regs) =
            self.with_hit((tid, pid), kind, regs, mem.clone(), |t, hit| f(t, hit, cb));
        self.in_flight = None;
        regs.rip = addr;
        (action, regs)
    }

    /// Runs `f` with the tracer's (reused) hit set up for a stop of `tid`
    /// of kind `kind` with registers `regs`, the thread's CPU source lent
    /// to it meanwhile; returns what `f` returned and the registers as
    /// the handlers left them.
    fn with_hit<R>(
        &mut self,
        (tid, pid): (i32, i32),
        kind: HitKind,
        regs: Regs,
        mem: std::rc::Rc<std::cell::RefCell<super::mem::ProcMem>>,
        f: impl FnOnce(&mut PtraceTracer, &mut super::PtraceHit) -> R,
    ) -> (R, Regs) {
        let cpu_src = self
            .threads
            .get_mut(&tid)
            .map(|t| std::mem::take(&mut t.cpu_src))
            .unwrap_or_default();
        let mut hit = std::mem::take(&mut self.hit);
        hit.reset(tid, pid, kind, regs, mem, cpu_src);
        let out = f(self, &mut hit);
        let regs = hit.take_regs();
        let cpu_src = std::mem::take(hit.cpu_src.get_mut());
        hit.mem = None;
        self.hit = hit;
        if let Some(th) = self.threads.get_mut(&tid) {
            th.cpu_src = cpu_src;
        }
        (out, regs)
    }

    pub(super) fn library_event(&mut self, pid: i32, cb: Cb<'_>) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let gone;
        let consistent = {
            let mut m = p.mem.borrow_mut();
            m.refresh_maps();
            // Probes of a library closed (or replaced at its address) go
            // with it: the session arms them again if it comes back.
            gone = m.drop_unmapped();
            match p.rdebug.and_then(|r| r.r_debug) {
                Some(a) => {
                    let mut b = [0u8; 4];
                    m.read(a + rdebug::R_STATE_OFFSET, &mut b) != 4
                        || u32::from_le_bytes(b) == rdebug::RT_CONSISTENT
                }
                None => true,
            }
        };
        for id in gone {
            self.bps.remove(&id);
            self.unmapped.push(id);
        }
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
        for slot in 0..crate::arch::DEBUG_REGISTERS {
            if bits & (1 << slot) == 0 {
                continue;
            }
            let Some(p) = self.procs.get(&pid) else { break };
            let Some(w) = p.wps[slot] else { continue };
            let mem = p.mem.clone();
            self.summary.watchpoint_hits += 1;
            let kind = HitKind::Watchpoint(w.addr, slot);
            let (action, after) = self.with_hit((tid, pid), kind, regs, mem, |t, hit| {
                cb(t, PtraceEvent::Watchpoint { wp: w.id, hit })
            });
            regs = after;
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
        let Some((slot, jump, orig, len)) = m.ool_at(regs.rip) else {
            return;
        };
        let restarting =
            regs.rip == jump && (regs.orig_rax as i64) >= 0 && arch::is_restart_code(regs.rax);
        if restarting {
            // An interrupted syscall in the slot: the kernel rewinds RIP by 2
            // to the slot's syscall, which then jumps back normally.
            return;
        }
        if !own_fault && regs.rip != jump {
            drop(m);
            // An asynchronous signal before the displaced instruction ran:
            // finish it first, with the signal held, so that the signal is
            // delivered after it at the program's own address. Rewinding to
            // the probe instead would let a signal that fires faster than a
            // hit is handled (a 200 µs timer on a loaded machine) interrupt
            // every attempt: no progress, ever.
            let rerun = match self.finish_ool(tid, slot, jump, orig + u64::from(len)) {
                OolEnd::Done => return,
                OolEnd::OwnFault => false,
                OolEnd::Unfinished => true,
            };
            let in_slot = sys::getregs(tid, &mut regs).is_ok()
                && self
                    .procs
                    .get(&pid)
                    .is_some_and(|p| p.mem.borrow().ool_at(regs.rip).is_some());
            if in_slot {
                regs.rip = orig;
                if rerun && let Some(th) = self.threads.get_mut(&tid) {
                    th.rerun = Some((orig, regs.rsp));
                }
                let _ = sys::setregs(tid, &regs);
            }
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

impl PtraceTracer {
    /// Single-steps thread `tid` through its out-of-line slot (`slot` up to
    /// the jump back at `jump`, which goes to `back`) with every signal
    /// held (stashed for its next resume). When the displaced instruction
    /// completed, the thread is at `back`, or where the instruction
    /// branched to. (A watchpoint's trap during these steps is not told
    /// apart from the step's own.)
    fn finish_ool(&mut self, tid: i32, slot: u64, jump: u64, back: u64) -> OolEnd {
        let mut held: Vec<i32> = Vec::new();
        let end = self.step_through_ool(tid, slot, jump, back, &mut held);
        for sig in held {
            self.stash_signal(tid, sig);
        }
        end
    }

    fn step_through_ool(
        &mut self,
        tid: i32,
        slot: u64,
        jump: u64,
        back: u64,
        held: &mut Vec<i32>,
    ) -> OolEnd {
        let mut regs = zero_regs();
        // A `rep` instruction traps after each iteration: bounded.
        for _ in 0..64 {
            if sys::singlestep(tid, 0).is_err() {
                return OolEnd::Unfinished;
            }
            let raw = match sys::wait(tid, 0) {
                Ok(Some((_, raw))) => raw,
                _ => return OolEnd::Unfinished,
            };
            match sys::decode_status(raw) {
                sys::Status::Stopped {
                    sig: libc::SIGTRAP,
                    event: 0,
                } => {}
                sys::Status::Stopped { sig, event: 0 } => {
                    let own = matches!(
                        sig,
                        libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL
                    ) && sys::getsiginfo(tid).is_ok_and(|si| si.si_code > 0);
                    // Held until the step is done; a standard signal is
                    // pending at most once, as without us.
                    if sig >= libc::SIGRTMIN() || !held.contains(&sig) {
                        held.push(sig);
                    }
                    if own {
                        // The instruction's own fault: the caller delivers
                        // it with the PC moved back to the probe.
                        return OolEnd::OwnFault;
                    }
                    continue;
                }
                _ => {
                    self.queue.push_back((tid, raw));
                    return OolEnd::Unfinished;
                }
            }
            if sys::getregs(tid, &mut regs).is_err() {
                return OolEnd::Unfinished;
            }
            if regs.rip == jump {
                regs.rip = back;
                return if sys::setregs(tid, &regs).is_ok() {
                    OolEnd::Done
                } else {
                    OolEnd::Unfinished
                };
            }
            if !(slot..jump).contains(&regs.rip) {
                return OolEnd::Done; // the instruction branched
            }
        }
        OolEnd::Unfinished
    }
}

/// How [`PtraceTracer::finish_ool`] ended.
enum OolEnd {
    /// The displaced instruction completed.
    Done,
    /// It faulted (the signal is stashed): its next execution is a new hit.
    OwnFault,
    /// Not finished here (a long `rep`, an event, an error): the thread is
    /// where that left it.
    Unfinished,
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
