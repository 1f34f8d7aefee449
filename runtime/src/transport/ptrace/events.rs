//! The event loop: waits for ptrace stops (fairly: every pending stop is
//! queued and handled in order before waiting again), classifies them
//! (our breakpoint or watchpoint trap, another signal to re-inject,
//! group-stop, clone/fork/vfork/exec/exit events, exits) and reports
//! events. Also the paths that stop a whole process (`stop_world`) and
//! detach it cleanly. A thread that vanishes (ESRCH) is removed, never fatal.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use nix::errno::Errno;

use super::hit::HitKind;
use super::mem::ProcMem;
use super::threads::{ProcKind, Process, TState, Thread};
use super::{Action, Event, ExitStatus, ProviderError, RunSummary, Tracer, rdebug, tgid_of};
use crate::arch::{self, BREAKPOINT_INSN, Regs};
use crate::sys::ptrace::{self as sys, Status};

/// How often the waker thread looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(20);

fn is_group_stop_sig(sig: i32) -> bool {
    matches!(
        sig,
        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
    )
}

pub(super) use crate::sys::regs::zero_regs;

type Cb<'c> = &'c mut dyn FnMut(&mut Tracer, Event<'_>) -> Action;

impl Tracer {
    /// Runs until every traced process has exited, or `stop` becomes true
    /// (then everything is restored and detached; launched commands run on).
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut Tracer, Event<'_>) -> Action,
    ) -> Result<RunSummary, ProviderError> {
        self.resume_held_unqueued();
        // The waker: a child of this thread blocked on a pipe; when `stop`
        // becomes true a helper thread writes the pipe, the child exits, and
        // our blocking waitpid returns to look at the flag.
        let (child, wpipe) = crate::sys::process::waker_child()
            .map_err(|e| ProviderError::sys("fork (waker)", 0, e))?;
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

    fn resume_held_unqueued(&mut self) {
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

    fn event_loop(
        &mut self,
        stop: &AtomicBool,
        waker_pid: &AtomicI32,
        cb: Cb<'_>,
    ) -> Result<(), ProviderError> {
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
                        Err(e) => return Err(ProviderError::sys("waitpid", -1, e)),
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
            // Fairness (RELIABILITY H7): take every stop already pending
            // before waiting again, and handle them in arrival order.
            while self.queue.len() < 256 {
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

    fn handle(&mut self, tid: i32, raw: i32, cb: Cb<'_>) -> Result<(), ProviderError> {
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
                self.fix_ool_pc(tid, pid);
                if let Some(th) = self.threads.get_mut(&tid) {
                    th.sig = sig;
                }
                self.summary.signals_forwarded += 1;
                self.resume(tid);
            }
            _ => self.resume(tid),
        }
        Ok(())
    }

    /// The first stop of an auto-attached thread or child.
    fn first_stop(&mut self, tid: i32, pid: i32) -> Result<(), ProviderError> {
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
    ) -> Result<(), ProviderError> {
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
                cb(
                    self,
                    Event::ProcessStarted {
                        pid: child,
                        parent: pid,
                    },
                );
                if let Some(raw) = self.orphans.remove(&child) {
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

    fn on_exec(&mut self, tid: i32, pid: i32, cb: Option<Cb<'_>>) -> Result<(), ProviderError> {
        let former = sys::geteventmsg(tid).map(|v| v as i32).unwrap_or(tid);
        let _ = former;
        // Every other thread is gone (RELIABILITY H3); the execing thread now
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
        p.wps = [None; 4];
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
            cb(self, Event::Exec { pid });
        }
        self.arm_rdebug(pid);
        self.resume(tid);
        Ok(())
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
    ) -> Result<(), ProviderError> {
        self.orphans.remove(&tid);
        let Some(th) = self.threads.remove(&tid) else {
            return Ok(());
        };
        let pid = th.pid;
        if let Some(p) = self.procs.get_mut(&pid) {
            p.threads.retain(|t| *t != tid);
        }
        if tid != pid {
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
                cb(self, Event::ProcessExited { pid, status });
            } else {
                self.exited.push((pid, status));
            }
        }
        Ok(())
    }

    fn on_sigtrap(&mut self, tid: i32, pid: i32, cb: Cb<'_>) -> Result<(), ProviderError> {
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

    fn breakpoint_hit(
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
        let internal = {
            let m = mem.borrow();
            let s = &m.sites[&addr];
            self.ids.clear();
            self.ids.extend_from_slice(&s.ids);
            s.internal
        };
        if !self.ids.is_empty() && !quiet {
            self.summary.breakpoint_hits += 1;
            let stat = self.threads.get_mut(&tid).and_then(|t| t.stat.take());
            let mut hit = std::mem::take(&mut self.hit);
            hit.reset(tid, pid, HitKind::Breakpoint(addr), regs, mem, stat);
            let ids = std::mem::take(&mut self.ids);
            self.in_flight = Some((tid, addr));
            let action = cb(
                self,
                Event::Breakpoint {
                    bp: &ids,
                    hit: &mut hit,
                },
            );
            self.in_flight = None;
            regs = hit.take_regs();
            regs.rip = addr;
            let stat = hit.stat.get_mut().take();
            hit.mem = None;
            self.hit = hit;
            if let Some(th) = self.threads.get_mut(&tid) {
                th.stat = stat;
            }
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

    fn library_event(&mut self, pid: i32, cb: Cb<'_>) {
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

    fn watchpoint_hit(
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

    fn handoff(&mut self, tid: i32, pid: i32, regs: Regs) -> Result<(), ProviderError> {
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

    /// Stops every running thread of `pid` except `except`; returns those
    /// stopped only by our interrupt (to resume later). Other stops that
    /// arrive are queued for normal handling.
    pub(super) fn stop_world(&mut self, pid: i32, except: i32) -> Vec<i32> {
        let tids: Vec<i32> = match self.procs.get(&pid) {
            Some(p) => p
                .threads
                .iter()
                .copied()
                .filter(|t| {
                    *t != except
                        && self
                            .threads
                            .get(t)
                            .is_some_and(|th| th.state == TState::Running)
                })
                .collect(),
            None => return Vec::new(),
        };
        self.collect_stops(&tids, true)
    }

    /// Waits for the attach stops of every running thread of `pid` (already
    /// seized and interrupted).
    pub(super) fn settle(&mut self, pid: i32) {
        let tids: Vec<i32> = match self.procs.get(&pid) {
            Some(p) => p
                .threads
                .iter()
                .copied()
                .filter(|t| {
                    self.threads
                        .get(t)
                        .is_some_and(|th| th.state == TState::Running)
                })
                .collect(),
            None => return,
        };
        self.collect_stops(&tids, false);
    }

    fn collect_stops(&mut self, tids: &[i32], interrupt: bool) -> Vec<i32> {
        let mut held = Vec::new();
        for &t in tids {
            if interrupt && sys::interrupt(t).is_err() {
                continue;
            }
            match sys::wait(t, 0) {
                Ok(Some((_, raw))) => {
                    let th = self.threads.get_mut(&t).expect("invariant: listed thread");
                    th.state = TState::Held;
                    match sys::decode_status(raw) {
                        Status::Stopped { sig, event }
                            if event == libc::PTRACE_EVENT_STOP
                                && !is_group_stop_sig(sig)
                                && !th.new =>
                        {
                            held.push(t)
                        }
                        _ => self.queue.push_back((t, raw)),
                    }
                }
                _ => {
                    // Gone without a status for us.
                    if let Some(th) = self.threads.get_mut(&t) {
                        th.state = TState::Held;
                    }
                }
            }
        }
        held
    }

    /// Restores and detaches every traced process.
    pub fn detach_all(&mut self) -> Result<(), ProviderError> {
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
    ) -> Result<(), ProviderError> {
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
        // 1. Every thread held; pending stops folded in.
        for _ in 0..64 {
            let _ = self.stop_world(pid, 0);
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
                    self.threads
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
        if !shared {
            match p.mem.borrow_mut().restore_all(tid0) {
                Ok(left) => self
                    .code_left_alone
                    .extend(left.into_iter().map(|(a, b)| (pid, a, b))),
                Err((_, Errno::ESRCH)) => {}
                Err((addr, errno)) => res = Err(ProviderError::Restore { pid, addr, errno }),
            }
        }
        let had_wps = p.wps.iter().any(Option::is_some);
        let tids = p.threads.clone();
        // 3. Debug registers, PCs in slots, detach.
        for t in tids {
            if had_wps {
                let _ = super::sites::set_debugregs(t, &[None; 4], 0);
            }
            self.fix_ool_pc(t, pid);
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

    fn flush_pending_traps(&mut self, pid: i32) {
        for _ in 0..8 {
            let tids: Vec<i32> = match self.procs.get(&pid) {
                Some(p) => p
                    .threads
                    .iter()
                    .copied()
                    .filter(|t| {
                        self.threads
                            .get(t)
                            .is_some_and(|th| th.state == TState::Held)
                            && sigtrap_pending(*t)
                    })
                    .collect(),
                None => return,
            };
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
    fn absorb_for_detach(&mut self, pid: i32, tid: i32, raw: i32) -> bool {
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
                    p.wps = [None; 4];
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

// Ticks (interval probes): a child that sleeps until the next due time
// and exits wakes the blocking `waitpid` of the event loop.
impl Tracer {
    /// Delivers [`Event::Tick`] every `period` during [`Tracer::run`].
    pub fn set_tick(&mut self, period: Duration) {
        self.tick = Some((period, std::time::Instant::now() + period, 0));
    }

    /// Starts the sleeping child for the next tick, if none is running.
    fn arm_tick(&mut self) {
        let Some((_, due, child)) = self.tick else {
            return;
        };
        if child != 0 {
            return;
        }
        let wait = due.saturating_duration_since(std::time::Instant::now());
        let pid = crate::sys::process::sleeper_child(wait).unwrap_or(0);
        if pid > 0
            && let Some(t) = self.tick.as_mut()
        {
            t.2 = pid;
        }
    }

    /// The tick child exited: deliver the tick, schedule the next one.
    fn tick_fired(&mut self, cb: Cb<'_>) {
        if let Some(t) = self.tick.as_mut() {
            t.2 = 0;
            let now = std::time::Instant::now();
            while t.1 <= now {
                t.1 += t.0;
            }
        }
        let _ = cb(self, Event::Tick);
    }

    /// Kills and reaps a tick child still sleeping.
    fn end_tick(&mut self) {
        if let Some(t) = self.tick.as_mut()
            && t.2 > 0
        {
            let _ = crate::sys::process::kill(t.2, libc::SIGKILL);
            let _ = sys::wait(t.2, 0);
            t.2 = 0;
        }
    }
}

/// The waker thread: when `stop` becomes true, writes the waker pipe.
fn waker(stop: &AtomicBool, done: &AtomicBool, wfd: i32) {
    while !done.load(Ordering::SeqCst) {
        if stop.load(Ordering::SeqCst) {
            // The descriptor stays open until this scoped thread is joined.
            crate::sys::process::poke_pipe(wfd);
            return;
        }
        std::thread::sleep(STOP_POLL);
    }
}

/// Whether SIGTRAP is pending for thread `tid` (thread-private set).
fn sigtrap_pending(tid: i32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{tid}/status")) else {
        return false;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("SigPnd:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGTRAP - 1)) != 0)
}
