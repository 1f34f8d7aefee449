//! Holding the target stopped and letting it go: every thread stopped
//! through the threads the trap sites keep seized (`traps`) or by seizing
//! them (`world`); let go released, or kept seized when some site traps,
//! a watchpoint is set or an exec is to be seen (the watchdog started and
//! the traps written first).

use super::world::World;
use super::{InProc, traps};
use crate::transport::Error;

impl InProc {
    /// Lets the stopped target go; with trap sites, its threads stay
    /// seized (`traps`): the watchdog is started and the `int3`s written
    /// first. Not for vfork children: the target marks them itself
    /// (`patch::vfork_marks`); held anyway, the tracer counts those it sees
    /// made in the agent's fork-guard page too.
    pub(super) fn go(&mut self, mut w: World) -> Result<(), Error> {
        let guard = self.agent.as_ref().map(|a| a.guard).filter(|&g| g != 0);
        if !self.patcher.has_traps()
            && !self.watches.any()
            && !self.follow_exec
            && !self.follow_forks
        {
            w.release();
            return Ok(());
        }
        // Traps need the watchdog (their `int3`s would kill the process
        // after wprobe's death); watchpoints alone do not (their perf
        // events die with wprobe). Started once (the threads are taken
        // again after each library event).
        if self.patcher.has_traps() && self.watchdog.is_none() {
            let ready = match self.watchdog_starting.take() {
                Some(s) => s.ready(),
                None => crate::transport::common::watchdog::spawn(self.pid),
            };
            match ready {
                Ok(d) => self.watchdog = Some(d),
                Err(e) => {
                    w.release();
                    return Err(e.context(
                        "the watchdog that restores the traps if wprobe dies did not start",
                    ));
                }
            }
        }
        let (redirect, orig) = self.patcher.trap_maps();
        // A launched command (a `PTRACE_TRACEME` tracee) is let go and
        // seized anew the first time; later worlds are of seized threads.
        let launched = self.launched && !self.taken;
        self.taken = true;
        let library = self.rdebug.map(|r| r.brk);
        let mut children = std::mem::take(&mut self.children);
        children.vfork_guard = guard;
        if self.follow_forks {
            // Where a child's agent is woken (none: the kernel lacks
            // MADV_WIPEONFORK, and children are let go as without -f).
            children.follow = self.agent.as_ref().map(|a| a.guard).filter(|&g| g != 0);
        }
        let mut t =
            traps::Traps::take(w, launched, redirect, orig, self.watches, library, children)
                .map_err(|e| Error::anyhow(Some(self.pid), &e, format!("{e:#}")))?;
        // Under -f the threads are seized anyway: an exec of the process
        // is followed too (its new image's agent joins the region, where
        // the followed children's agents write).
        t.follow_exec = self.follow_exec || self.follow_forks;
        let armed = self.patcher.arm_traps(self.pid);
        t.go();
        self.traps = Some(t);
        armed
    }

    /// Stops every thread of the target: through the seized threads when
    /// some site traps, else by seizing them.
    pub(super) fn stop_world(&mut self) -> anyhow::Result<World> {
        self.keep_trap_stops();
        match self.traps.take() {
            // Its end seen (and reaped) by the seized threads: said by
            // `stop_all` too.
            Some(t) if t.active() || t.exit.is_some() => {
                let (w, children) = t.stop_all();
                self.children = children;
                w
            }
            _ => World::stop(self.pid),
        }
    }
}
