//! The per-site fallback of the in-process transport: where no 5-byte
//! window can go (a function too short, a branch into the window, a `ret`
//! reached by a jump with no room around it), the site gets a trap, and
//! every thread of the process stays seized (`PTRACE_SEIZE`, never
//! interrupted while it runs) for the rest of the run. At each trap the
//! thread, stopped at the site, is moved to the site's stub (the same stub
//! a jump would reach: `dispatch`, then the instruction relocated, then a
//! jump back) and resumed: the handlers run in the agent, with the same
//! state and records as at a jump; the trap costs a ptrace stop. Signals
//! pass through; new threads are seized by the kernel
//! (`PTRACE_O_TRACECLONE`); a fork child is seized, its traps are put back
//! to the original bytes and it is let go, unless it is followed (`-f`:
//! see `forks`), when its threads are served like the parent's (a `vfork`
//! child, which shares the memory, is kept until it execs or exits, its
//! traps moved to the stubs like the parent's: the agent, shared too, runs
//! the handlers there, as the child's when it is followed — see `forks`);
//! an exec ends the
//! tracing (the image with the traps is gone).
//!
//! The trap is an `hlt` ([`TRAP_INSN`]), not an `int3`: a privileged
//! instruction, it faults (SIGSEGV, `rip` left at the site) where an
//! `int3` traps (SIGTRAP, `rip` past it). The difference is what happens
//! when wprobe dies with a thread stopped at a trap: the kernel lets the
//! thread go and drops the signal it was stopped for. Past an `int3`, the
//! thread would run the rest of the displaced instruction's bytes as code;
//! at an `hlt` it executes the site again: the original instruction if
//! the watchdog put it back meanwhile, else the `hlt`, whose SIGSEGV the
//! agent's handler (installed while SIGSEGV is at its default) sends to
//! the stub, as wprobe would have.
//!
//! Watchpoints use the same seized threads: see
//! [`Traps::open_watch_events`].
//!
//! If wprobe dies, the kernel detaches every thread with the traps in
//! place: the watchdog (`transport::common::watchdog`, started with the
//! traps, fed the byte journal of ptrace's `int3`s) restores them within
//! microseconds, and `wprobe repair --pid` later.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::bail;

pub(super) use super::forks::Children;
use super::world::World;
use crate::sys::ptrace::{self as sys, Status};
use crate::transport::ExitStatus;

/// The byte a trap site gets: `hlt`, which faults in user mode (see the
/// module's documentation). Defined with the journal its sites are
/// recorded in, whose restore puts it back as it does an `int3`.
pub use crate::transport::common::journal::TRAP_INSN;

/// The signal a trap site's `hlt` raises.
const TRAP_SIGNAL: i32 = libc::SIGSEGV;

pub(super) use super::seized::{OPTIONS, Watch, Watches};

/// The seized threads of a process with trap sites.
pub(super) struct Traps {
    pid: i32,
    /// Seized threads of the process.
    threads: BTreeSet<i32>,
    /// The fork and vfork children, and those followed (`-f`).
    pub(super) kids: Children,
    /// Trap address → stub address.
    redirect: HashMap<u64, u64>,
    /// Trap address → original byte.
    orig: HashMap<u64, u8>,
    /// Trap address → stops there (`WPROBE_DEBUG` reports the busiest).
    stops: HashMap<u64, u64>,
    /// Signals held for threads stopped by [`Traps::stop_all`].
    held: BTreeMap<i32, i32>,
    /// The process's exit, when the wait reaped it.
    pub(super) exit: Option<ExitStatus>,
    /// The process exec'd: nothing is traced any more.
    pub(super) execed: bool,
    /// The launched command was seized in a group-stop (see [`Traps::take`]).
    launched_stop: bool,
    /// The watchpoints.
    watch: Watches,
    /// Their perf breakpoint events, one per watchpoint and thread seized
    /// at the start or in a followed fork child (threads created later
    /// inherit them), with the process: the kernel removes them when
    /// wprobe's descriptors close, so that no trigger outlives wprobe.
    events: Vec<(i32, perf_event::Counter)>,
    /// The process's memory (to save a thread's `rip` on its stack).
    mem: Option<std::fs::File>,
    /// The trap at the dynamic linker's `r_brk`, when libraries mapped
    /// later are armed: a thread that hits it is moved to its stub and
    /// kept stopped (`at_library`; a followed fork child's at its own,
    /// `Children::r_brk`, in `Children::at_library`) until the transport
    /// armed them.
    library: Option<u64>,
    /// Threads stopped at the library event, moved to its stub.
    at_library: BTreeSet<i32>,
    /// An exec of the process is held at its stop for the transport, which
    /// loads the agent into the new image (else the threads are let go).
    pub(super) follow_exec: bool,
    /// The process, stopped at its exec, when [`Traps::follow_exec`].
    pub(super) exec_stop: Option<i32>,
}

impl Traps {
    /// Takes over the threads of `world`, stopped: a process we attached
    /// to keeps its seized threads; a launched command (a `PTRACE_TRACEME`
    /// tracee, which cannot be interrupted later) is let go with a SIGSTOP
    /// and seized in its stop. Nothing runs until [`Traps::go`].
    pub(super) fn take(
        world: World,
        launched: bool,
        redirect: HashMap<u64, u64>,
        orig: HashMap<u64, u8>,
        watch: Watches,
        library: Option<u64>,
        children: Children,
    ) -> anyhow::Result<Traps> {
        let pid = world.pid();
        let mut t = Traps {
            pid,
            threads: BTreeSet::new(),
            kids: children,
            redirect,
            orig,
            stops: HashMap::new(),
            held: BTreeMap::new(),
            exit: None,
            execed: false,
            launched_stop: false,
            watch,
            events: Vec::new(),
            mem: std::fs::File::options()
                .read(true)
                .write(true)
                .open(format!("/proc/{pid}/mem"))
                .ok(),
            library,
            at_library: BTreeSet::new(),
            follow_exec: false,
            exec_stop: None,
        };
        if launched {
            drop(world.into_stopped());
            sys::detach(pid, libc::SIGSTOP)
                .map_err(|e| anyhow::anyhow!("letting process {pid} go: {e}"))?;
            sys::seize(pid, OPTIONS).map_err(|e| anyhow::anyhow!("seizing process {pid}: {e}"))?;
            t.threads.insert(pid);
            // Its stop: the group-stop (or the SIGSTOP's delivery, which
            // is then not delivered).
            loop {
                let raw = match sys::wait(pid, 0) {
                    Ok(Some((_, raw))) => raw,
                    _ => bail!("process {pid} vanished while it was seized"),
                };
                match sys::decode_status(raw) {
                    Status::Stopped {
                        sig: libc::SIGSTOP,
                        event,
                    } => {
                        t.launched_stop = event == libc::PTRACE_EVENT_STOP;
                        t.held.insert(pid, 0);
                        break;
                    }
                    Status::Stopped { sig, event: 0 } => {
                        t.held.insert(pid, sig);
                        let _ = sys::cont(pid, 0);
                    }
                    Status::Stopped { .. } | Status::Other => {
                        let _ = sys::cont(pid, 0);
                    }
                    _ => bail!("process {pid} ended while it was seized"),
                }
            }
        } else {
            for (tid, sig) in world.into_stopped() {
                if sys::setoptions(tid, OPTIONS).is_ok() {
                    t.threads.insert(tid);
                    t.held.insert(tid, sig);
                }
            }
        }
        let tids: Vec<i32> = t.threads.iter().copied().collect();
        let watch = t.watch;
        for tid in tids {
            t.open_watch_events(tid, pid, &watch)?;
        }
        // The followed fork children's threads: their own events (a fork
        // child inherits none).
        let kid_threads: Vec<(i32, i32)> = t.kids.threads.iter().map(|(&t, &p)| (t, p)).collect();
        for (tid, kid) in kid_threads {
            t.open_kid_watch_events(tid, kid);
        }
        Ok(t)
    }

    /// [`Traps::open_watch_events`] for thread `tid` of followed fork child
    /// `kid`; a failure is said (the child runs on without them).
    fn open_kid_watch_events(&mut self, tid: i32, kid: i32) {
        let Some(watch) = self.kids.watches.get(&kid).copied() else {
            return;
        };
        if let Err(e) = self.open_watch_events(tid, kid, &watch) {
            self.kids
                .notes
                .push(format!("process {kid}: its watchpoints are not armed: {e}"));
        }
    }

    /// The perf breakpoint events of watchpoints `watch` on thread `tid` of
    /// process `pid`: a SIGTRAP to the thread (`sigtrap`, `sig_data` = the
    /// slot) after each access, inherited by the threads it creates (not
    /// by fork children: a followed child gets its own at its first stop),
    /// gone at exec.
    fn open_watch_events(&mut self, tid: i32, pid: i32, watch: &Watches) -> anyhow::Result<()> {
        use crate::arch::WatchKind;
        use perf_event::events::Breakpoint;
        for (slot, w) in watch.slots.iter().enumerate() {
            let Some(w) = w else { continue };
            let bp = match w.kind {
                WatchKind::Write => Breakpoint::write(w.addr, u64::from(w.len)),
                _ => Breakpoint::read_write(w.addr, u64::from(w.len)),
            };
            let mut b = perf_event::Builder::new(bp);
            b.observe_pid(tid)
                .any_cpu()
                .inherit(true)
                .inherit_thread(true)
                .remove_on_exec(true)
                .sigtrap(true)
                .sig_data(slot as u64)
                .sample_period(1)
                .enabled(true);
            let c = b.build().map_err(|e| {
                let what = format!("the watchpoint at {:#x} ({} bytes)", w.addr, w.len);
                anyhow::anyhow!(
                    "thread {tid}: {}",
                    crate::transport::common::perf_event::open_error(what, e)
                )
            })?;
            self.events.push((pid, c));
        }
        Ok(())
    }

    /// Moves `tid`, stopped by a SIGTRAP, to the stub of the watchpoint
    /// that fired (its `rip` saved below its red zone); false when none of
    /// ours did.
    fn move_to_watch_stub(&mut self, tid: i32) -> bool {
        // A followed child's own: those of its image.
        let kid = self.kids.pid_of(tid);
        let watch = match kid {
            Some(k) => self.kids.watches.get(&k).copied().unwrap_or_default(),
            None => self.watch,
        };
        if !watch.any() {
            return false;
        }
        let Some(slot) = sys::getsiginfo(tid)
            .ok()
            .and_then(|si| sys::perf_trap_data(&si))
        else {
            return false;
        };
        let Some(Some(w)) = watch.slots.get(slot as usize) else {
            return false;
        };
        let stub = w.stub;
        let mut r = crate::sys::regs::zero_regs();
        if sys::getregs(tid, &mut r).is_err() {
            return false;
        }
        let below = r.rsp.wrapping_sub(agent_abi::WATCH_RIP_BELOW);
        let saved = if kid.is_some() {
            // A followed child's memory is its own: written through the
            // thread (no descriptor kept per child).
            sys::pokedata(tid, below, r.rip).is_ok()
        } else {
            self.mem
                .as_ref()
                .and_then(|mem| crate::sys::mem::pwrite(mem, &r.rip.to_le_bytes(), below).ok())
                == Some(8)
        };
        if !saved {
            return false;
        }
        r.rsp = below;
        r.rip = stub;
        if sys::setregs(tid, &r).is_err() {
            return false;
        }
        true
    }

    /// Resumes the threads [`Traps::take`] holds, with their signals.
    pub(super) fn go(&mut self) {
        if self.launched_stop {
            // End the group-stop the SIGSTOP made (a SIGCONT at the entry
            // point, before the program could have a handler for it).
            let _ = crate::sys::process::kill(self.pid, libc::SIGCONT);
        }
        for (tid, sig) in std::mem::take(&mut self.held) {
            let _ = sys::cont(tid, sig);
        }
    }

    /// Whether any thread is still seized.
    pub(super) fn active(&self) -> bool {
        !self.threads.is_empty() || !self.kids.vforked.is_empty() || !self.kids.kids.is_empty()
    }

    /// Handles every stop waiting (without blocking); returns how many.
    pub(super) fn poll(&mut self) -> usize {
        let mut n = 0;
        while let Ok(Some((tid, raw))) = sys::wait(-1, libc::WNOHANG) {
            n += 1;
            self.on_stop(tid, sys::decode_status(raw), None);
        }
        n
    }

    /// Thread `tid` ended with `status`: forgotten, with its process's
    /// child state and watchpoint events when it was a child's last.
    fn thread_gone(&mut self, tid: i32, status: ExitStatus) {
        self.threads.remove(&tid);
        let kid = self.kids.pid_of(tid);
        self.kids.thread_ended(tid, Some(status));
        if let Some(kid) = kid.filter(|k| !self.kids.kids.contains_key(k)) {
            // The child is gone: its watchpoints' events with it.
            self.events.retain(|(p, _)| *p != kid);
            self.kids.watches.remove(&kid);
        }
        self.kids.forked.remove(&tid);
        self.kids.forget_pre_exec(tid);
        self.kids.early.remove(&tid);
        self.at_library.remove(&tid);
        if tid == self.pid {
            self.exit = Some(status);
        }
    }

    /// One wait status of `tid`. With `hold`, a signal is held (for
    /// [`Traps::stop_all`]) instead of delivered, and the thread is left
    /// stopped at an interrupt's stop (returns true then).
    fn on_stop(&mut self, tid: i32, st: Status, hold: Option<()>) -> bool {
        match st {
            Status::Exited(c) | Status::Signaled(c) => {
                let status = match st {
                    Status::Exited(_) => ExitStatus::Code(c),
                    _ => ExitStatus::Signal(c),
                };
                self.thread_gone(tid, status);
                false
            }
            Status::Stopped { sig, event: 0 } => {
                if let Some(parent) = self.kids.forked.remove(&tid) {
                    // A fork child's first stop (a signal-delivery stop).
                    self.first_stop(tid, parent);
                    return false;
                }
                let kid = self.kids.pid_of(tid).is_some();
                if sig == TRAP_SIGNAL
                    && let Some(at) = self.move_to_stub(tid)
                {
                    if hold.is_none() && Some(at) == self.library && !kid {
                        // Kept stopped: the transport arms what was mapped.
                        self.at_library.insert(tid);
                    } else if hold.is_none()
                        && let Some(pid) = self.kids.pid_of(tid)
                        && self.kids.r_brk.get(&pid) == Some(&at)
                    {
                        // A followed child's: likewise (`forklibs`).
                        self.kids.at_library.insert(tid, pid);
                    } else {
                        let _ = sys::cont(tid, 0);
                    }
                    return false;
                }
                if sig == libc::SIGTRAP && self.move_to_watch_stub(tid) {
                    let _ = sys::cont(tid, 0);
                    return false;
                }
                if hold.is_some() {
                    self.held.insert(tid, sig);
                    let _ = sys::cont(tid, 0);
                    return false;
                }
                let _ = sys::cont(tid, sig);
                false
            }
            Status::Stopped { event, sig } => match event {
                libc::PTRACE_EVENT_CLONE => {
                    if let Ok(new) = sys::geteventmsg(tid) {
                        let new = new as i32;
                        match self.kids.pid_of(tid) {
                            Some(pid) => {
                                self.kids.threads.insert(new, pid);
                            }
                            None => {
                                self.threads.insert(new);
                            }
                        }
                        if self.kids.early.remove(&new) {
                            let _ = sys::cont(new, 0);
                        }
                    }
                    let _ = sys::cont(tid, 0);
                    false
                }
                libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                    self.on_fork(tid, event == libc::PTRACE_EVENT_VFORK, hold.is_some());
                    false
                }
                libc::PTRACE_EVENT_EXEC => {
                    if let Some(kid) = self.kids.pid_of(tid) {
                        // Its watchpoints' events went with its image.
                        self.events.retain(|(p, _)| *p != kid);
                        self.kids.watches.remove(&kid);
                        self.kids.execed(tid);
                        return false;
                    }
                    if self.follow_exec {
                        // The other threads are gone; this one (the
                        // process's pid now) waits for the new agent.
                        self.threads.clear();
                        self.at_library.clear();
                        self.exec_stop = Some(tid);
                        return false;
                    }
                    // The image with the traps is gone: let every thread go.
                    self.execed = true;
                    let _ = sys::detach(tid, 0);
                    self.threads.remove(&tid);
                    self.release();
                    false
                }
                libc::PTRACE_EVENT_STOP => {
                    if let Some(parent) = self.kids.forked.remove(&tid) {
                        self.first_stop(tid, parent);
                        return false;
                    }
                    if self.kids.vfork_first.remove(&tid) {
                        self.kids.resume_child(tid);
                        return false;
                    }
                    if hold.is_none()
                        && sig == libc::SIGTRAP
                        && !self.threads.contains(&tid)
                        && self.kids.pid_of(tid).is_none()
                    {
                        // A new thread or process before the event that
                        // made it: held until that event says whose.
                        self.kids.early.insert(tid);
                        return false;
                    }
                    if hold.is_some() {
                        // The interrupt's stop (or a group-stop): stopped.
                        if !matches!(
                            sig,
                            libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                        ) {
                            super::cave::restart_if_failed_by_our_stop(tid);
                        }
                        return true;
                    }
                    if matches!(
                        sig,
                        libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                    ) {
                        // Job control: stay stopped until SIGCONT.
                        let _ = sys::listen(tid);
                    } else {
                        let _ = sys::cont(tid, 0);
                    }
                    false
                }
                _ => {
                    let _ = sys::cont(tid, 0);
                    false
                }
            },
            Status::Other => false,
        }
    }

    /// Thread `tid` forked (`vfork`: a child sharing its memory), stopped
    /// at the event: the child known, and `tid` resumed, or held until the
    /// child's start is reported (`-f`; not while `stop_all` holds the
    /// threads, `holding`).
    fn on_fork(&mut self, tid: i32, vfork: bool, holding: bool) {
        if let Ok(child) = sys::geteventmsg(tid) {
            let child = child as i32;
            let parent = self.kids.pid_of(tid).unwrap_or(self.pid);
            let hold_parent = self.kids.born(child, parent, vfork);
            if self.kids.early.remove(&child) {
                if vfork {
                    self.kids.vfork_first.remove(&child);
                    self.kids.resume_child(child);
                } else if let Some(parent) = self.kids.forked.remove(&child) {
                    self.first_stop(child, parent);
                }
            }
            if hold_parent && !holding {
                self.kids.held.push(tid);
                return;
            }
        }
        let _ = sys::cont(tid, 0);
    }

    /// A fork child's first stop: followed (`-f`), or let go.
    fn first_stop(&mut self, child: i32, parent: i32) {
        // Its parent executed a program since the fork: the child has the
        // old image, and its trap sites.
        let old = self.kids.pre_exec.get(&child).map(|o| o.orig.clone());
        // The watchpoints of the image it has: those kept for it at its
        // parent's exec, else its parent's (a followed child's own).
        let watch = if let Some(&w) = self.kids.watches.get(&child) {
            Some(w)
        } else if self.kids.kids.contains_key(&parent) {
            self.kids.watches.get(&parent).copied()
        } else {
            old.is_none().then_some(self.watch)
        };
        if self.kids.adopt(child, parent) {
            if let Some(w) = watch.filter(Watches::any) {
                self.kids.watches.insert(child, w);
                self.open_kid_watch_events(child, child);
            }
            self.kids.resume_child(child);
        } else {
            self.kids.watches.remove(&child);
            self.let_child_go(child, old.as_ref());
        }
    }

    /// A fork child: its traps (`orig`, else those of the process's
    /// image) back to the original bytes, then let go.
    fn let_child_go(&mut self, child: i32, orig: Option<&HashMap<u64, u8>>) {
        if let Ok(mem) = std::fs::File::options()
            .write(true)
            .open(format!("/proc/{child}/mem"))
        {
            for (&addr, &b) in orig.unwrap_or(&self.orig) {
                let _ = crate::sys::mem::pwrite(&mem, &[b], addr);
            }
        }
        let _ = sys::detach(child, 0);
    }

    /// Whether a thread waits at the library event (see [`Traps::library`]).
    pub(super) fn library_event(&self) -> bool {
        !self.at_library.is_empty()
    }

    /// Lets the threads waiting at the library event go on (their stubs
    /// run the displaced instruction): nothing to arm.
    pub(super) fn pass_library_event(&mut self) {
        for tid in std::mem::take(&mut self.at_library) {
            let _ = sys::cont(tid, 0);
        }
    }

    /// Moves `tid`, stopped by the fault of a trap site's `hlt` (its `rip`
    /// at the site), to the site's stub; the site's address, or `None` when
    /// the fault is not ours.
    fn move_to_stub(&mut self, tid: i32) -> Option<u64> {
        let mut r = crate::sys::regs::zero_regs();
        sys::getregs(tid, &mut r).ok()?;
        let at = r.rip;
        // A child that executed a program has trap sites of its own image.
        let map = match self
            .kids
            .pid_of(tid)
            .and_then(|p| self.kids.redirect.get(&p))
        {
            Some(m) => m,
            None => &self.redirect,
        };
        let &stub = map.get(&at)?;
        *self.stops.entry(at).or_default() += 1;
        r.rip = stub;
        sys::setregs(tid, &r).ok()?;
        Some(at)
    }

    /// Whether stopped thread `tid` has just hit one of our traps and not
    /// yet taken its signal: its `rip` is a trap site and a SIGSEGV is
    /// pending for it (`/proc`, read only when stopping).
    fn trap_pending(&self, tid: i32) -> bool {
        let mut r = crate::sys::regs::zero_regs();
        if sys::getregs(tid, &mut r).is_err() || !self.redirect.contains_key(&r.rip) {
            return false;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/task/{tid}/status", self.pid))
        else {
            return false;
        };
        status
            .lines()
            .filter_map(|l| {
                l.strip_prefix("SigPnd:")
                    .or_else(|| l.strip_prefix("ShdPnd:"))
            })
            .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
            .any(|m| m & (1 << (TRAP_SIGNAL - 1)) != 0)
    }

    /// The ptrace stops at each trap site so far, handed over (counted
    /// anew from zero).
    pub(super) fn take_stops(&mut self) -> HashMap<u64, u64> {
        std::mem::take(&mut self.stops)
    }

    /// Stops every seized thread (interrupted; a thread at a trap is moved
    /// to its stub first; signals that arrive meanwhile are held) and hands
    /// them over as a [`World`], to restore the bytes and let go, with the
    /// children. A process whose end was reaped here (before or while its
    /// threads were stopped: a terminal's Ctrl-C reaches it too) gives a
    /// [`super::world::Reaped`] error with its status.
    pub(super) fn stop_all(mut self) -> (anyhow::Result<World>, Children) {
        // No watchpoint triggers from now on; events already waiting first
        // (fork children cleaned, new threads known, triggers handled).
        self.events.clear();
        self.poll();
        // Threads held at a fork event are stopped already.
        let parents: Vec<i32> = self
            .kids
            .held
            .iter()
            .copied()
            .filter(|t| self.threads.contains(t))
            .collect();
        self.kids.held.retain(|t| !parents.contains(t));
        // Threads at the library event are stopped already (their fault
        // taken: they go on at its stub, with no signal).
        let mut stopped: BTreeMap<i32, i32> = std::mem::take(&mut self.at_library)
            .into_iter()
            .chain(parents.iter().copied())
            .map(|tid| (tid, 0))
            .collect();
        // New threads may appear while others are being stopped.
        while let Some(tid) = self
            .threads
            .iter()
            .copied()
            .find(|t| !stopped.contains_key(t))
        {
            if sys::interrupt(tid).is_err() {
                self.threads.remove(&tid);
                continue;
            }
            // The last stop was an event's, which may have taken the
            // interrupt's place.
            let mut after_event = false;
            loop {
                let raw = match sys::wait_interrupted(tid, after_event) {
                    Ok(Some((_, raw))) => raw,
                    _ => {
                        self.threads.remove(&tid);
                        break;
                    }
                };
                let st = sys::decode_status(raw);
                after_event = sys::is_event_stop(st);
                if matches!(st, Status::Exited(_) | Status::Signaled(_)) {
                    self.on_stop(tid, st, Some(()));
                    break;
                }
                // Else resumed (a trap moved to its stub, a signal held): on
                // to the interrupt's stop, which follows.
                if self.on_stop(tid, st, Some(())) {
                    // The interrupt's stop came before the signal of one of
                    // our traps the thread had just hit (job-control traps
                    // are taken before signals): let go with the bytes
                    // back, it would die of it. Take the trap first (the
                    // thread goes to its stub), then stop it again.
                    if self.trap_pending(tid) {
                        if sys::cont(tid, 0).is_err() {
                            self.threads.remove(&tid);
                            break;
                        }
                        // The trap's stop comes next (synchronous signals are
                        // taken first): moved to its stub, resumed.
                        let st = match sys::wait(tid, 0) {
                            Ok(Some((_, raw))) => sys::decode_status(raw),
                            _ => {
                                self.threads.remove(&tid);
                                break;
                            }
                        };
                        let gone = matches!(st, Status::Exited(_) | Status::Signaled(_));
                        self.on_stop(tid, st, Some(()));
                        if gone || sys::interrupt(tid).is_err() {
                            self.threads.remove(&tid);
                            break;
                        }
                        continue;
                    }
                    stopped.insert(tid, self.held.remove(&tid).unwrap_or(0));
                    break;
                }
            }
        }
        let pid = self.pid;
        self.threads.clear();
        let children = std::mem::take(&mut self.kids);
        if let Some(st) = self.exit.filter(|_| stopped.is_empty()) {
            let raw = match st {
                ExitStatus::Code(c) => (c & 0xff) << 8,
                ExitStatus::Signal(s) => s & 0x7f,
            };
            return (Err(super::world::Reaped(raw).into()), children);
        }
        let world = World::adopt(pid, stopped).map(|mut w| {
            w.in_syscall(parents);
            w
        });
        (world, children)
    }

    /// Stops every thread of followed child `pid` (interrupted; one at a
    /// trap is moved to its stub first; signals that arrive meanwhile are
    /// held), `parked` stopped already (at the library event): the threads
    /// and the signal each holds, to let go with. Empty when the child
    /// ended or executed a program meanwhile (its threads that were
    /// stopped are let go then).
    pub(super) fn stop_child(&mut self, pid: i32, parked: i32) -> BTreeMap<i32, i32> {
        let mut stopped: BTreeMap<i32, i32> = BTreeMap::new();
        stopped.insert(parked, 0);
        // Threads held for a start not yet reported are stopped already.
        for &t in &self.kids.held {
            if self.kids.pid_of(t) == Some(pid) {
                stopped.insert(t, 0);
            }
        }
        // New threads may appear while others are being stopped.
        while let Some(tid) = self
            .kids
            .threads
            .iter()
            .filter(|&(t, p)| *p == pid && !stopped.contains_key(t))
            .map(|(t, _)| *t)
            .next()
        {
            if sys::interrupt(tid).is_err() {
                self.kids.threads.remove(&tid);
                continue;
            }
            let mut after_event = false;
            loop {
                let raw = match sys::wait_interrupted(tid, after_event) {
                    Ok(Some((_, raw))) => raw,
                    _ => {
                        self.kids.threads.remove(&tid);
                        break;
                    }
                };
                let st = sys::decode_status(raw);
                after_event = sys::is_event_stop(st);
                let gone = matches!(st, Status::Exited(_) | Status::Signaled(_));
                if self.on_stop(tid, st, Some(())) {
                    stopped.insert(tid, self.held.remove(&tid).unwrap_or(0));
                    break;
                }
                if gone || self.kids.pid_of(tid) != Some(pid) {
                    // Ended, or the process executed a program.
                    break;
                }
            }
        }
        if self.kids.pid_of(parked) != Some(pid) {
            for (tid, sig) in stopped {
                if !self.kids.held.contains(&tid) && self.kids.pid_of(tid) == Some(pid) {
                    let _ = sys::cont(tid, sig);
                }
            }
            return BTreeMap::new();
        }
        stopped
    }

    /// Lets every thread go (the process exec'd, or seizing failed).
    fn release(&mut self) {
        for tid in std::mem::take(&mut self.threads) {
            let _ = sys::detach(tid, 0);
        }
    }
}
