//! The event loop while the target runs untraced ([`Transport::run`]):
//! the trap sites' stops polled, library events and an exec handled, the
//! ring drained (`ring`) and the counters reported (`counts`) at a pace
//! that follows the runs, ticks, and the process's exit or exec noticed;
//! at the end, the handlers made dormant and everything left reported.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{InProc, Life, Phase, Run};
use crate::transport::{Action, Event, ExitStatus, Transport};

/// How often the counters are reported while running.
const COUNTS_EVERY: Duration = Duration::from_millis(100);
/// Pending bytes below which a busy event loop naps for [`RING_NAP`]
/// before the next drain (the ring holds `RING_BYTES`: far from full).
const RING_NAP_BELOW: u64 = 256 << 10;
/// The nap of a busy event loop with little pending.
const RING_NAP: Duration = Duration::from_micros(100);
/// How soon after runs the counters are reported (while runs keep coming,
/// the ring is drained without sleeping).
const COUNTS_AFTER_RUNS: Duration = Duration::from_millis(1);
/// Longest sleep of the event loop when nothing happens.
const IDLE_SLEEP_MS: i32 = 10;
/// For this long after a thread stopped at a trap site, the event loop
/// looks for the next stop every [`TRAP_NAP`]: a thread at a trap waits
/// for wprobe, and the millisecond of an idle poll would be most of what a
/// hit costs (a stop itself is some 40 µs).
const TRAP_BUSY: Duration = Duration::from_millis(100);
/// The nap between looks while traps are busy.
const TRAP_NAP: Duration = Duration::from_micros(10);

impl InProc {
    /// [`Transport::run`]: runs the event loop until `stop`, the process's
    /// end or exec; then reports what is left.
    pub(super) fn event_loop(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> anyhow::Result<Option<ExitStatus>> {
        if self.agent.is_none() {
            anyhow::bail!("--transport inproc: no handlers were loaded");
        }
        self.run = Run::Running;
        let mut deltas = Vec::new();
        let mut last_counts = Instant::now();
        let mut busy = false;
        let mut last_trap: Option<Instant> = None;
        loop {
            let trapped = self.poll_traps(&mut last_trap, on_event);
            let drained = self.drain_runs(on_event);
            // Counts follow the runs within a millisecond, not at every
            // drain: a busy ring is drained in small batches.
            let since = last_counts.elapsed();
            if (drained > 0 && since >= COUNTS_AFTER_RUNS) || since >= COUNTS_EVERY {
                self.report_counts(&mut deltas, on_event);
                last_counts = Instant::now();
                self.check_exec();
            }
            if stop.load(Ordering::SeqCst) || (self.life.ended() && !self.kids_alive()) {
                break;
            }
            if !self.life.ended()
                && let Some(status) = self.ended()
            {
                self.life = Life::Ended(status);
                if !self.kids_alive() {
                    break;
                }
            }
            let mut timeout = self.next_timeout(trapped, drained, busy, last_trap);
            busy = drained > 0;
            if let Some((period, due)) = self.tick {
                let now = Instant::now();
                if due <= now {
                    let mut next = due;
                    while next <= now {
                        next += period;
                    }
                    self.tick = Some((period, next));
                    on_event(self, Event::Tick);
                    continue;
                }
                timeout = timeout.min(due.duration_since(now).as_millis() as i32 + 1);
            }
            self.wait(timeout);
        }
        self.quiesce();
        self.drain_runs(on_event);
        self.report_counts(&mut deltas, on_event);
        self.keep_trap_stops();
        self.say_trap_stops();
        self.say_debug_stats();
        self.report_live_calls(on_event);
        if let Some(status) = self.life.status() {
            let pid = self.pid;
            on_event(self, Event::ProcessExited { pid, status });
        }
        self.run = Run::Finished;
        Ok(self.life.status())
    }

    /// Polls the trap sites' stops; handles a library event, an exec, the
    /// process's exit or exec the seized threads saw. Returns the stops.
    fn poll_traps(
        &mut self,
        last_trap: &mut Option<Instant>,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> usize {
        let trapped = self.traps.as_mut().map_or(0, |t| t.poll());
        if trapped > 0 {
            *last_trap = Some(Instant::now());
        }
        self.report_children(on_event);
        // A child's first: its thread at `r_brk` would be held through the
        // parent's.
        self.on_child_library_events(on_event);
        if self.traps.as_ref().is_some_and(|t| t.library_event())
            && let Err(e) = self.on_library_event(on_event)
        {
            crate::elog!("wprobe: {e}");
        }
        if self.traps.as_ref().is_some_and(|t| t.exec_stop.is_some())
            && let Err(e) = self.on_exec(on_event)
        {
            crate::elog!("wprobe: {e}");
        }
        if let Some(t) = &self.traps {
            if t.exit.is_some() {
                self.life = Life::Ended(t.exit);
            }
            if t.execed && !self.phase.execed() {
                self.keep_trap_stops();
                self.traps = None;
                self.went_with_the_old_image();
            }
        }
        trapped
    }

    /// How long the event loop may wait for the process (ms), after the
    /// short nap it takes itself while traps or runs are coming.
    fn next_timeout(
        &self,
        trapped: usize,
        drained: u64,
        busy: bool,
        last_trap: Option<Instant>,
    ) -> i32 {
        if self.traps.is_some() {
            // Traps wait for us: look again at once while they come,
            // after a short nap for a while after the last one, then
            // every millisecond.
            if trapped > 0 || drained > 0 {
                0
            } else if last_trap.is_some_and(|t| t.elapsed() < TRAP_BUSY) {
                std::thread::sleep(TRAP_NAP);
                0
            } else {
                1
            }
        } else if drained > 0 {
            // Runs are coming: drain again soon. A sleep here of a
            // millisecond lets a fast target fill the ring and wait for
            // room; draining at once, entry by entry, makes both sides
            // fight over the ring's lines (the one the target writes
            // next holds the end of the entry just read). A short nap
            // while little is pending lets whole lines accumulate.
            if self.ring_pending() < RING_NAP_BELOW {
                std::thread::sleep(RING_NAP);
            }
            0
        } else if busy {
            1
        } else {
            IDLE_SLEEP_MS
        }
    }

    /// Hands the session the fork children followed that started and
    /// ended (`-f`), and says what happened to those let go.
    fn report_children(
        &mut self,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) {
        let Some(t) = self.traps.as_mut() else { return };
        if t.kids.started.is_empty()
            && t.kids.exited.is_empty()
            && t.kids.notes.is_empty()
            && t.kids.exec_stops.is_empty()
        {
            return;
        }
        let execs = std::mem::take(&mut t.kids.exec_stops);
        let started = std::mem::take(&mut t.kids.started);
        let exited = std::mem::take(&mut t.kids.exited);
        let notes = std::mem::take(&mut t.kids.notes);
        // The parents' runs before the fork first (no child has run
        // yet); a child's end in its place among the runs, after its own
        // (which came before its end was seen) and before what its parent
        // did once it knew (`drain_runs`).
        self.forget_child_arms(exited.iter().map(|e| e.0).chain(execs.iter().map(|e| e.0)));
        for &(pid, parent) in &started {
            // Before its start is reported (its parent held at the fork).
            let t0 = std::time::Instant::now();
            if let Some(c) = self.child_arm(pid, parent) {
                if std::env::var_os("WPROBE_DEBUG").is_some() {
                    crate::elog!(
                        "wprobe: debug: process {pid}: its parent's sites copied for the \
                         libraries it maps ({} sites, {:.3} ms)",
                        c.sites(),
                        t0.elapsed().as_secs_f64() * 1e3
                    );
                }
                if let (Some(t), Some(brk)) = (self.traps.as_mut(), c.r_brk()) {
                    t.kids.r_brk.insert(pid, brk);
                }
                self.child_arms.insert(pid, c);
            }
        }
        self.exits_due.extend(exited);
        self.drain_runs(on_event);
        for (pid, status, _) in std::mem::take(&mut self.exits_due) {
            on_event(self, Event::ProcessExited { pid, status });
        }
        for &(pid, parent) in &started {
            on_event(self, Event::ProcessStarted { pid, parent });
        }
        if let Some(t) = self.traps.as_mut() {
            t.kids.reported.extend(started.iter().map(|s| s.0));
            t.kids.release_held();
        }
        for (pid, tid, parent) in execs {
            if let Err(e) = self.follow_exec_child(pid, tid, parent, on_event) {
                crate::elog!("wprobe: {e}");
            }
        }
        for n in notes {
            if self.said.insert(n.clone()) {
                crate::elog!("wprobe: {n}");
            }
        }
    }

    /// Whether a fork child followed (`-f`) is still running.
    pub(super) fn kids_alive(&self) -> bool {
        self.traps.as_ref().is_some_and(|t| t.kids.alive()) || self.children.alive()
    }

    /// Waits up to `timeout` ms for the process to end.
    fn wait(&self, timeout: i32) {
        match &self.pidfd {
            // Ended already (followed children still run): a nap.
            Some(_) if self.life.ended() => {
                std::thread::sleep(Duration::from_millis(timeout.max(1) as u64));
            }
            Some(fd) => {
                let mut p = [libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                crate::sys::process::poll(&mut p, timeout);
            }
            None => std::thread::sleep(Duration::from_millis(timeout as u64)),
        }
    }

    /// `WPROBE_DEBUG`: the library events and the agent's statistics.
    fn say_debug_stats(&self) {
        if std::env::var_os("WPROBE_DEBUG").is_some() && self.rdebug.is_some() {
            crate::elog!(
                "wprobe: debug: process {}: {} library events armed at (the dynamic linker's \
                 `r_brk`)",
                self.pid,
                self.library_events
            );
        }
        if std::env::var_os("WPROBE_DEBUG").is_some()
            && let Some(a) = &self.agent
        {
            let st = a.region.stats();
            crate::elog!(
                "wprobe: debug: agent in process {}: {} threads, {} heap allocations while \
                 running ({} when armed), {} dormant, {} reentered, {} contended, {} lock \
                 waits, {} ring waits, {} bias revoked, {} system calls for handlers' memory \
                 accesses",
                self.pid,
                st.threads,
                st.allocations - self.allocations_armed,
                self.allocations_armed,
                st.dormant,
                st.reentered,
                st.contended,
                st.lock_waits,
                st.ring_waits,
                st.bias_revoked,
                st.memory_syscalls
            );
        }
    }

    /// Whether the process exited (its pidfd is readable), without reaping.
    fn exited(&self) -> bool {
        let Some(fd) = self.pidfd.as_ref() else {
            return false;
        };
        let mut p = [libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        crate::sys::process::poll(&mut p, 0) != 0
    }

    /// Whether the process ended: its exit status when we launched it.
    fn ended(&mut self) -> Option<Option<ExitStatus>> {
        let fd = self.pidfd.as_ref()?;
        let mut p = [libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if crate::sys::process::poll(&mut p, 0) == 0 {
            return None;
        }
        if !self.launched {
            return Some(None);
        }
        let st = crate::sys::process::reap_nohang(self.pid)?;
        Some(Some(ExitStatus::from_wait(st)))
    }

    /// Notices that the process executed a new program (the agent's region
    /// is no longer mapped in it): says so once, and forgets the sites
    /// (they went with the old image; nothing to restore).
    fn check_exec(&mut self) {
        let Some(a) = &self.agent else { return };
        // With the threads seized (`traps::OPTIONS` has
        // `PTRACE_O_TRACEEXEC`) the exec is reported by its ptrace event,
        // and a followed one arms the new image: the old agent's memory,
        // gone before that event is polled, says nothing then.
        if self.phase.execed() || self.traps.is_some() {
            return;
        }
        let mut b = [0u8; 8];
        match crate::sys::mem::vm_read(self.pid, a.region_addr, &mut b) {
            Ok(8) => {}
            Err(nix::errno::Errno::ESRCH) => {}
            // Exited (a zombie has no memory either).
            _ if self.exited() => {}
            _ => self.went_with_the_old_image(),
        }
    }

    /// The process executed a new program that is not followed: says so
    /// once, and forgets the sites (they went with the old image; nothing
    /// to restore).
    fn went_with_the_old_image(&mut self) {
        self.phase = Phase::Execed;
        self.patcher.forget();
        crate::elog!(
            "wprobe: process {} executed a new program: its probes went with the old one (--transport ptrace arms them in the new program)",
            self.pid
        );
    }

    /// Stops handlers from starting (dormant) and waits for those running.
    fn quiesce(&mut self) {
        if let Some(a) = &self.agent {
            a.region.set_enabled(false);
            if a.region.lock_store(Duration::from_secs(1)) {
                a.region.unlock_store();
            }
        }
    }
}
