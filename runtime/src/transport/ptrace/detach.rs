//! Detaching: every byte and debug register restored, pending traps of
//! ours absorbed (rewinding the PC of a thread that hit an `int3` we
//! remove), and each thread let go with the signal it stopped with.

use std::cell::RefCell;
use std::rc::Rc;

use nix::errno::Errno;

use super::hits::sigtrap_pending;
use super::mem::ProcMem;
use super::threads::{ProcKind, TState};
use super::{ExitStatus, PtraceError, PtraceTracer};
use crate::arch::{self};
use crate::sys::ptrace::{self as sys, Status};
use crate::sys::regs::zero_regs;

impl PtraceTracer {
    /// Restores and detaches every traced process.
    pub fn detach_all(&mut self) -> Result<(), PtraceError> {
        let mut first_err = None;
        // Detaching can discover children (pending fork events): repeat.
        for _ in 0..64 {
            let mut pids: Vec<i32> = self.procs.keys().copied().collect();
            if pids.is_empty() {
                break;
            }
            // Children before parents (vfork children share memory).
            pids.sort_by_key(|p| std::cmp::Reverse(self.procs[p].parent != 0));
            for pid in pids {
                if self.procs.contains_key(&pid)
                    && let Err(e) = self.detach_process(pid, None)
                    && first_err.is_none()
                {
                    first_err = Some(e);
                }
            }
        }
        for (t, _) in std::mem::take(&mut self.orphans) {
            let _ = sys::detach(t, 0);
        }
        match self.journal.take() {
            Some(Ok(j)) if first_err.is_none() => j.remove(),
            other => self.journal = other,
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Stops, restores and detaches one process. `handoff`: that thread is
    /// left stopped by SIGSTOP (debugger hand-off).
    pub(super) fn detach_process(
        &mut self,
        pid: i32,
        handoff: Option<i32>,
    ) -> Result<(), PtraceError> {
        // 0. A thread whose hit was being handled (we are unwinding from the
        // handler) resumes at the probe address, not past the int3.
        if let Some((t, addr)) = self.in_flight
            && self.threads.get(&t).is_some_and(|th| th.pid == pid)
        {
            self.in_flight = None;
            let mut regs = zero_regs();
            if sys::getregs(t, &mut regs).is_ok() && regs.rip == addr + arch::pc_after_trap() {
                regs.rip = addr;
                let _ = sys::setregs(t, &regs);
            }
        }
        // 1. Every thread held (but those asleep in a system call, when
        // the kernel is to release them: see `quiet`); pending stops
        // folded in.
        let asleep = self.sleepers(pid, handoff);
        let left: Vec<i32> = asleep.iter().map(|(t, _)| *t).collect();
        for _ in 0..64 {
            let _ = self.stop_world_except(pid, &left);
            let mut grew = false;
            let mut i = 0;
            while i < self.queue.len() {
                let (t, raw) = self.queue[i];
                if self.threads.get(&t).is_some_and(|th| th.pid == pid) {
                    self.queue.remove(i);
                    grew |= self.absorb_for_detach(pid, t, raw);
                } else {
                    i += 1;
                }
            }
            let running = self.procs.get(&pid).is_some_and(|p| {
                p.threads.iter().any(|t| {
                    !left.contains(t)
                        && self
                            .threads
                            .get(t)
                            .is_some_and(|th| th.state == TState::Running)
                })
            });
            if !grew && !running {
                break;
            }
        }
        // 1b. An interrupt stop can be reported before a trap already raised
        // (int3 executed, SIGTRAP still pending): let each such thread take
        // its trap now, so that the PC is rewound and the signal discarded,
        // instead of an untraced thread dying of it after the detach.
        self.flush_pending_traps(pid);
        let Some(p) = self.procs.get(&pid) else {
            return Ok(());
        };
        // 2. Restore the bytes unless another traced process shares the memory.
        let shared = self
            .procs
            .values()
            .any(|q| q.pid != pid && Rc::ptr_eq(&q.mem, &p.mem));
        let tid0 = p.threads.first().copied().unwrap_or(pid);
        let mut res = Ok(());
        // A child not followed (only scrubbed of our bytes) rewrote
        // nothing: it was forked before a site its parent armed was
        // written (a library event while the process forked), so its copy
        // of the sites lists it, not its memory.
        let scrubbed = p.kind == ProcKind::Scrub;
        if !shared {
            match p.mem.borrow_mut().restore_all(tid0) {
                Ok(left) if scrubbed => drop(left),
                // Likewise a site its parent armed in a library mapped
                // after the fork: not mapped in the child.
                Err((_, Errno::EIO | Errno::EFAULT)) if scrubbed => {}
                Ok(left) => self
                    .code_left_alone
                    .extend(left.into_iter().map(|(a, b)| (pid, a, b))),
                Err((_, Errno::ESRCH)) => {}
                Err((addr, errno)) => res = Err(PtraceError::Restore { pid, addr, errno }),
            }
        }
        let had_wps = p.wps.iter().any(Option::is_some);
        // 2b. A sleeper that ran meanwhile (it may have hit a breakpoint
        // before the bytes were restored) is stopped and detached as any
        // other thread; those that did not are left to the kernel.
        let mut left = left;
        let woke: Vec<i32> = asleep
            .iter()
            .filter(|(t, a)| super::quiet::asleep(pid, *t) != Some(*a))
            .map(|(t, _)| *t)
            .collect();
        if !woke.is_empty() {
            left.retain(|t| !woke.contains(t));
            self.collect_stops(&woke, true);
            let mut i = 0;
            while i < self.queue.len() {
                let (t, raw) = self.queue[i];
                if woke.contains(&t) {
                    self.queue.remove(i);
                    self.absorb_for_detach(pid, t, raw);
                } else {
                    i += 1;
                }
            }
            self.flush_pending_traps(pid);
        }
        let Some(p) = self.procs.get(&pid) else {
            return res;
        };
        let tids = p.threads.clone();
        // 3. Debug registers, PCs in slots, detach.
        for t in tids {
            if left.contains(&t) {
                self.threads.remove(&t);
                self.left_asleep += 1;
                continue;
            }
            if had_wps {
                let _ = super::sites::set_debugregs(t, &[None; crate::arch::DEBUG_REGISTERS], 0);
            }
            self.fix_ool_pc(t, pid, false);
            let sig = match (handoff, self.threads.get(&t)) {
                (Some(h), _) if h == t => libc::SIGSTOP,
                (_, Some(th)) if th.state == TState::Held => th.sig,
                _ => 0,
            };
            if sig != 0 && handoff.is_none() {
                self.detach_signals.push((pid, sig));
            }
            let _ = sys::detach(t, sig);
            self.threads.remove(&t);
        }
        self.procs.remove(&pid);
        self.bps.retain(|_, (bp_pid, _)| *bp_pid != pid);
        self.wps.retain(|_, (wp_pid, _)| *wp_pid != pid);
        res
    }

    /// The threads of `pid` that detaching may leave seized, asleep in a
    /// system call, for the kernel to release when wprobe exits: only when
    /// that was asked for, not for a debugger hand-off, not with debug
    /// registers to clear, and not in an out-of-line step (`quiet`).
    fn sleepers(&self, pid: i32, handoff: Option<i32>) -> Vec<(i32, super::quiet::Asleep)> {
        let Some(p) = self.procs.get(&pid) else {
            return Vec::new();
        };
        if !self.leave_sleepers || handoff.is_some() || p.wps.iter().any(Option::is_some) {
            return Vec::new();
        }
        let in_flight = self.in_flight.map(|(t, _)| t);
        p.threads
            .iter()
            .copied()
            .filter(|t| {
                Some(*t) != in_flight
                    && self
                        .threads
                        .get(t)
                        .is_some_and(|th| matches!(th.state, TState::Running | TState::Free))
            })
            .filter_map(|t| {
                let a = super::quiet::asleep(pid, t)?;
                p.mem.borrow().ool_at(a.pc).is_none().then_some((t, a))
            })
            .collect()
    }

    pub(super) fn flush_pending_traps(&mut self, pid: i32) {
        for _ in 0..8 {
            let Some(mut tids) = self.threads_in(pid, TState::Held) else {
                return;
            };
            tids.retain(|t| sigtrap_pending(*t));
            if tids.is_empty() {
                return;
            }
            for t in tids {
                let sig = self
                    .threads
                    .get_mut(&t)
                    .map_or(0, |th| std::mem::take(&mut th.sig));
                if sys::cont(t, sig).is_err() {
                    continue;
                }
                if let Some(th) = self.threads.get_mut(&t) {
                    th.state = TState::Running;
                }
                if let Ok(Some((_, raw))) = sys::wait(t, 0) {
                    self.absorb_for_detach(pid, t, raw);
                }
            }
        }
    }

    /// Folds a queued stop into the detach of `pid`. Returns whether new
    /// tasks appeared (another round of stopping is needed).
    pub(super) fn absorb_for_detach(&mut self, pid: i32, tid: i32, raw: i32) -> bool {
        let (sig, event) = match sys::decode_status(raw) {
            Status::Exited(c) => {
                let _ = self.on_gone(tid, ExitStatus::Code(c), None);
                return false;
            }
            Status::Signaled(s) => {
                let _ = self.on_gone(tid, ExitStatus::Signal(s), None);
                return false;
            }
            Status::Other => return false,
            Status::Stopped { sig, event } => (sig, event),
        };
        if let Some(th) = self.threads.get_mut(&tid) {
            th.state = TState::Held;
        }
        let mut deliver = 0;
        match event {
            0 if sig == libc::SIGTRAP => {
                let mut regs = zero_regs();
                let si = sys::getsiginfo(tid);
                if let (Ok(si), Ok(())) = (si, sys::getregs(tid, &mut regs)) {
                    let ours_bp = si.si_code == arch::SI_KERNEL
                        && self.procs.get(&pid).is_some_and(|p| {
                            let m = p.mem.borrow();
                            let a = regs.rip.wrapping_sub(1);
                            m.sites.contains_key(&a) || m.ever_armed.contains(&a)
                        });
                    if ours_bp {
                        regs.rip -= arch::pc_after_trap();
                        let _ = sys::setregs(tid, &regs);
                    } else if si.si_code != arch::TRAP_HWBKPT && si.si_code != arch::TRAP_TRACE {
                        deliver = libc::SIGTRAP;
                    }
                }
            }
            0 if sig == (libc::SIGTRAP | 0x80) => {}
            0 => deliver = sig,
            libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                if let Ok(child) = sys::geteventmsg(tid) {
                    let _ = self.new_task(pid, child as i32, event, None);
                    return true;
                }
            }
            libc::PTRACE_EVENT_EXEC => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    // New image: nothing of ours in it.
                    p.mem = Rc::new(RefCell::new(ProcMem::open(pid)));
                    p.wps = [None; crate::arch::DEBUG_REGISTERS];
                }
            }
            libc::PTRACE_EVENT_STOP => {
                if let Some(th) = self.threads.get_mut(&tid) {
                    th.new = false;
                }
            }
            _ => {}
        }
        if let Some(th) = self.threads.get_mut(&tid) {
            th.sig = deliver;
        }
        false
    }
}
