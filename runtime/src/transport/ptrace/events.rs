//! The event loop: waits for ptrace stops (fairly: every pending stop is
//! queued and handled in order before waiting again), classifies them
//! (our breakpoint or watchpoint trap, another signal to re-inject,
//! group-stop, clone/fork/vfork/exec/exit events, exits) and reports
//! events (our traps in `hits`, stopping a process in `world`, detaching
//! in `detach`, ticks in `tick`). A thread that vanishes (ESRCH) is
//! removed, never fatal.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use nix::errno::Errno;

use super::mem::ProcMem;
use super::threads::{ProcKind, Process, TState, Thread};
use super::{
    ExitStatus, PtraceAction, PtraceError, PtraceEvent, PtraceTracer, RunSummary, tgid_of,
};
use crate::sys::ptrace::{self as sys, Status};
use crate::transport::common::rdebug;

pub(super) fn is_group_stop_sig(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

use super::tick::waker;
pub(super) use crate::sys::regs::zero_regs;

use super::Cb;

impl PtraceTracer {
    /// Runs until every traced process has exited, or `stop` becomes true
    /// (then everything is restored and detached; launched commands run on).
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut PtraceTracer, PtraceEvent<'_>) -> PtraceAction,
    ) -> Result<RunSummary, PtraceError> {
        self.resume_held_unqueued();
        // The waker: a child of this thread blocked on a pipe; when `stop`
        // becomes true a helper thread writes the pipe, the child exits, and
        // our blocking waitpid returns to look at the flag.
        let (child, wpipe) = crate::sys::process::waker_child()
            .map_err(|e| PtraceError::sys("fork (waker)", 0, e))?;
        let waker_pid = AtomicI32::new(child);
        let done = AtomicBool::new(false);
        let wfd = std::os::fd::AsRawFd::as_raw_fd(&wpipe);
        let res = std::thread::scope(|s| {
            s.spawn(|| waker(stop, &done, wfd));
            // A panic of the event handler must still end the waker thread,
            // or the scope would wait for it forever instead of unwinding
            // (and dropping the tracer, which detaches everything).
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.event_loop(stop, &waker_pid, on_event)
            }));
            done.store(true, Ordering::SeqCst);
            r
        });
        crate::sys::process::poke_pipe(wfd);
        drop(wpipe);
        self.end_tick();
        if child > 0 {
            let _ = sys::wait(child, 0);
        }
        match res {
            Ok(r) => r?,
            Err(panic) => std::panic::resume_unwind(panic),
        }
        Ok(self.summary)
    }

    pub(super) fn resume_held_unqueued(&mut self) {
        let tids: Vec<i32> = self
            .threads
            .iter()
            .filter(|(t, th)| th.state == TState::Held && !self.queue.iter().any(|(q, _)| q == *t))
            .map(|(t, _)| *t)
            .collect();
        for t in tids {
            self.resume(t);
        }
    }

    pub(super) fn event_loop(
        &mut self,
        stop: &AtomicBool,
        waker_pid: &AtomicI32,
        cb: Cb<'_>,
    ) -> Result<(), PtraceError> {
        loop {
            if stop.load(Ordering::SeqCst) {
                let t0 = std::time::Instant::now();
                self.detach_all()?;
                self.summary.detach_time = t0.elapsed();
                self.summary.detached = true;
                return Ok(());
            }
            if self.procs.is_empty() {
                return Ok(());
            }
            let (tid, raw) = match self.queue.pop_front() {
                Some(e) => e,
                None => {
                    self.arm_tick();
                    match sys::wait(-1, 0) {
                        Ok(Some(e)) => e,
                        Ok(None) => continue,
                        Err(Errno::ECHILD) => {
                            // Nothing left to wait for: every tracee is gone.
                            self.procs.clear();
                            self.threads.clear();
                            return Ok(());
                        }
                        Err(e) => return Err(PtraceError::sys("waitpid", -1, e)),
                    }
                }
            };
            if tid == waker_pid.load(Ordering::SeqCst) {
                continue;
            }
            if self.tick.is_some_and(|t| t.2 == tid) {
                self.tick_fired(cb);
                continue;
            }
            self.handle(tid, raw, cb)?;
            // Fairness (no thread starves the others): take every stop already pending
            // before waiting again, and handle them in arrival order. With
            // one traced thread there can be none (one system call less
            // per hit): its next stop is what the blocking wait returns.
            while self.threads.len() > 1 && self.queue.len() < 256 {
                match sys::wait(-1, libc::WNOHANG) {
                    Ok(Some((t, raw))) => {
                        // Taken from the kernel: the thread is stopped (or gone).
                        if let Some(th) = self.threads.get_mut(&t) {
                            th.state = TState::Held;
                        }
                        self.queue.push_back((t, raw));
                    }
                    _ => break,
                }
            }
        }
    }

    /// Resumes a held thread with its pending signal.
    pub(super) fn resume(&mut self, tid: i32) {
        if let Some(th) = self.threads.get_mut(&tid)
            && th.state == TState::Held
        {
            let sig = std::mem::take(&mut th.sig);
            th.state = TState::Running;
            // ESRCH: the thread is gone; its exit status will be reported.
            let _ = sys::cont(tid, sig);
        }
    }

    pub(super) fn resume_all(&mut self, tids: &[i32]) {
        for &t in tids {
            self.resume(t);
        }
    }

    pub(super) fn handle(&mut self, tid: i32, raw: i32, cb: Cb<'_>) -> Result<(), PtraceError> {
        let (sig, event) = match sys::decode_status(raw) {
            Status::Exited(c) => return self.on_gone(tid, ExitStatus::Code(c), Some(cb)),
            Status::Signaled(s) => return self.on_gone(tid, ExitStatus::Signal(s), Some(cb)),
            Status::Other => return Ok(()),
            Status::Stopped { sig, event } => (sig, event),
        };
        let Some(th) = self.threads.get_mut(&tid) else {
            // A new task whose creation event has not been seen yet.
            self.orphans.insert(tid, raw);
            return Ok(());
        };
        th.state = TState::Held;
        let pid = th.pid;
        match event {
            libc::PTRACE_EVENT_STOP => {
                if is_group_stop_sig(sig) {
                    if let Some(th) = self.threads.get_mut(&tid) {
                        th.state = TState::Listening;
                    }
                    let _ = sys::listen(tid);
                    return Ok(());
                }
                if std::mem::take(&mut self.threads.get_mut(&tid).expect("invariant: present").new)
                {
                    return self.first_stop(tid, pid);
                }
                self.resume(tid);
            }
            libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                let child = sys::geteventmsg(tid).map(|v| v as i32);
                if let Ok(child) = child {
                    self.new_task(pid, child, event, Some(cb))?;
                }
                self.resume(tid);
            }
            libc::PTRACE_EVENT_EXEC => return self.on_exec(tid, pid, Some(cb)),
            libc::PTRACE_EVENT_EXIT | libc::PTRACE_EVENT_VFORK_DONE => self.resume(tid),
            0 if sig == libc::SIGTRAP => return self.on_sigtrap(tid, pid, cb),
            0 if sig == (libc::SIGTRAP | 0x80) => self.resume(tid),
            0 => {
                // The displaced instruction's own fault, raised in its
                // slot: re-executed after the program's signal handler (or
                // never, after a longjmp) as a new execution of the probed
                // instruction, not as the rest of this hit.
                let own_fault = matches!(
                    sig,
                    libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL
                ) && sys::getsiginfo(tid).is_ok_and(|si| si.si_code > 0);
                self.fix_ool_pc(tid, pid, own_fault);
                self.stash_signal(tid, sig);
                self.summary.signals_forwarded += 1;
                self.resume(tid);
            }
            _ => self.resume(tid),
        }
        Ok(())
    }

    /// The first stop of an auto-attached thread or child.
    pub(super) fn first_stop(&mut self, tid: i32, pid: i32) -> Result<(), PtraceError> {
        let Some(p) = self.procs.get(&pid) else {
            self.resume(tid);
            return Ok(());
        };
        if p.kind == ProcKind::Scrub {
            return self.detach_process(pid, None);
        }
        if p.wps.iter().any(Option::is_some) {
            let (wps, dr7) = (p.wps, p.dr7());
            let _ = super::sites::set_debugregs(tid, &wps, dr7);
        }
        self.resume(tid);
        Ok(())
    }

    /// Registers a task announced by a clone/fork/vfork event of `pid`.
    pub(super) fn new_task(
        &mut self,
        pid: i32,
        child: i32,
        event: i32,
        cb: Option<Cb<'_>>,
    ) -> Result<(), PtraceError> {
        if self.threads.contains_key(&child) {
            return Ok(());
        }
        let is_thread =
            event == libc::PTRACE_EVENT_CLONE && tgid_of(child).is_none_or(|g| g == pid);
        if is_thread {
            self.threads
                .insert(child, Thread::new(pid, TState::Running, true));
            if let Some(p) = self.procs.get_mut(&pid) {
                p.threads.push(child);
            }
        } else {
            let Some(parent) = self.procs.get(&pid) else {
                return Ok(());
            };
            let vfork = event == libc::PTRACE_EVENT_VFORK;
            let kind = if parent.kind == ProcKind::VforkShadow || !self.opts.follow_forks {
                if vfork {
                    ProcKind::VforkShadow
                } else {
                    ProcKind::Scrub
                }
            } else {
                ProcKind::Traced
            };
            let mem = if vfork {
                parent.mem.clone()
            } else {
                Rc::new(RefCell::new(parent.mem.borrow().fork_copy(child)))
            };
            let mut p = Process::new(child, mem, kind, pid, parent.launched);
            p.rdebug = parent.rdebug;
            p.threads.push(child);
            let parent_kind = parent.kind;
            self.procs.insert(child, p);
            self.threads
                .insert(child, Thread::new(child, TState::Running, true));
            if parent_kind == ProcKind::Traced
                && let Some(cb) = cb
            {
                // A first stop that came before the fork event: the child
                // is stopped already, and the session's arming (which may
                // stop the process's threads) must not wait for another.
                let early = self.orphans.remove(&child);
                if early.is_some()
                    && let Some(th) = self.threads.get_mut(&child)
                {
                    th.state = TState::Held;
                }
                cb(
                    self,
                    PtraceEvent::ProcessStarted {
                        pid: child,
                        parent: pid,
                    },
                );
                if let Some(raw) = early.or_else(|| self.orphans.remove(&child)) {
                    return self.handle(child, raw, cb);
                }
                return Ok(());
            }
        }
        if let Some(raw) = self.orphans.remove(&child) {
            // Its first stop already arrived: take it now.
            if let Some(th) = self.threads.get_mut(&child) {
                th.state = TState::Held;
            }
            self.queue.push_front((child, raw));
        }
        Ok(())
    }

    pub(super) fn on_exec(
        &mut self,
        tid: i32,
        pid: i32,
        cb: Option<Cb<'_>>,
    ) -> Result<(), PtraceError> {
        let former = sys::geteventmsg(tid).map(|v| v as i32).unwrap_or(tid);
        let _ = former;
        // Every other thread is gone (exec kills them); the execing thread now
        // has the leader's tid.
        let others: Vec<i32> = self
            .procs
            .get(&pid)
            .map(|p| p.threads.clone())
            .unwrap_or_default();
        for t in others {
            if t != tid {
                self.threads.remove(&t);
            }
        }
        let Some(p) = self.procs.get_mut(&pid) else {
            self.resume(tid);
            return Ok(());
        };
        p.threads = vec![tid];
        // The old image's sites are dropped without writing anything.
        p.mem = Rc::new(RefCell::new(ProcMem::open(pid)));
        p.wps = [None; crate::arch::DEBUG_REGISTERS];
        p.rdebug = None;
        let kind = p.kind;
        self.bps.retain(|_, (bp_pid, _)| *bp_pid != pid);
        self.wps.retain(|_, (wp_pid, _)| *wp_pid != pid);
        if kind == ProcKind::VforkShadow {
            // The vfork child left the shared image: nothing of ours is in it.
            let _ = sys::detach(tid, 0);
            self.threads.remove(&tid);
            self.procs.remove(&pid);
            return Ok(());
        }
        if let Some(cb) = cb {
            cb(self, PtraceEvent::Exec { pid });
        }
        self.arm_rdebug(pid);
        self.arm_entry(pid);
        self.resume(tid);
        Ok(())
    }

    /// Arms the internal breakpoint on the program's entry point, for a
    /// process stopped at its exec: by then the dynamic linker has loaded
    /// and relocated everything, IFUNC choices included, which its `r_brk`
    /// events (before relocation) come too early to show. The hit reports
    /// `LibrariesChanged`.
    pub(super) fn arm_entry(&mut self, pid: i32) {
        if let Some(entry) = crate::proc::procmaps::entry_point(pid) {
            let _ = self.insert_site(pid, entry, None, true);
        }
    }

    /// Arms the internal breakpoint on the dynamic linker's `r_brk`.
    pub(super) fn arm_rdebug(&mut self, pid: i32) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let maps = p.mem.borrow().maps.clone();
        if let Some(rd) = rdebug::find(&maps)
            && self.insert_site(pid, rd.brk, None, true).is_ok()
            && let Some(p) = self.procs.get_mut(&pid)
        {
            p.rdebug = Some(rd);
        }
    }

    pub(super) fn on_gone(
        &mut self,
        tid: i32,
        status: ExitStatus,
        cb: Option<Cb<'_>>,
    ) -> Result<(), PtraceError> {
        self.orphans.remove(&tid);
        let Some(th) = self.threads.remove(&tid) else {
            return Ok(());
        };
        let pid = th.pid;
        if let Some(p) = self.procs.get_mut(&pid) {
            p.threads.retain(|t| *t != tid);
        }
        if tid != pid {
            if let Some(cb) = cb
                && self
                    .procs
                    .get(&pid)
                    .is_some_and(|p| p.kind == ProcKind::Traced)
            {
                cb(self, PtraceEvent::ThreadExited { pid, tid });
            }
            return Ok(());
        }
        let Some(p) = self.procs.remove(&pid) else {
            return Ok(());
        };
        for t in &p.threads {
            self.threads.remove(t);
        }
        if !self.procs.values().any(|q| Rc::ptr_eq(&q.mem, &p.mem)) {
            self.bps.retain(|_, (bp_pid, _)| *bp_pid != pid);
        }
        self.wps.retain(|_, (wp_pid, _)| *wp_pid != pid);
        if p.kind == ProcKind::Traced {
            if let Some(cb) = cb {
                cb(self, PtraceEvent::ProcessExited { pid, status });
            } else {
                self.exited.push((pid, status));
            }
        }
        Ok(())
    }
}
