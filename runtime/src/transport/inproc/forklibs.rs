//! Libraries a followed fork child maps later (`-f`: `dlopen` and
//! `dlclose` in a fork child). The child inherited its parent's image: the
//! same sites, stub areas and trap at the dynamic linker's `r_brk`, and a
//! copy of the agent with its site table. At the start of the child (its
//! start reported) the transport keeps a [`ChildArm`]: a transport of the
//! child's own ([`InProc`], never run nor detached) whose patcher, sites
//! sent and probes armed are copies of the parent's as they were at the
//! fork. A thread of the child stopped at its `r_brk` (`traps`; the
//! address, its parent's, in `forks::Children::r_brk`) is held there; when
//! the link map is consistent again, every thread of the child is
//! stopped, the sites of libraries gone are forgotten, the session arms
//! what is new in the child (`Event::LibrariesChanged` with the child's
//! pid: the inserts go to its transport), the new sites are handed to the
//! child's agent and written, journaled in the child's journals (those
//! `forks::Kid` keeps, which `wprobe repair --pid` and the detach read),
//! and the child's threads go on, still seized. Nothing runs in the
//! library before its probes are armed, as in the main process (see
//! `later`).
//!
//! A child that executes a program is armed in its new image by a
//! transport of its own (`joined`), which is kept as its copy when
//! libraries mapped later are armed (its `r_brk` planned before its
//! commit): the same then holds for the libraries the new image maps.

use std::collections::BTreeMap;
use std::time::Duration;

use super::world::World;
use super::{InProc, Run, traps};
use crate::sys::ptrace as sys;
use crate::transport::{Action, Error, Event, Transport};

/// The transport of a followed fork child's own, for the libraries it maps
/// later: see the module's documentation.
pub(super) struct ChildArm(Box<InProc>);

impl Drop for ChildArm {
    fn drop(&mut self) {
        // Its bytes are the child's, restored with it (`forks`): dropping
        // it must restore nothing, stop nothing, remove no journal.
        for s in &mut self.0.patcher.sites {
            s.patched = false;
        }
        self.0.agent = None;
        self.0.world = None;
        self.0.run = Run::Finished;
    }
}

impl ChildArm {
    /// How many sites its patcher copied or planned.
    pub(super) fn sites(&self) -> usize {
        self.0.patcher.sites.len()
    }

    /// The child's `r_brk` (its parent's, where the trap is inherited).
    pub(super) fn r_brk(&self) -> Option<u64> {
        self.0.rdebug.map(|r| r.brk)
    }
}

impl InProc {
    /// The copy of `parent`'s state (this process, or a followed child
    /// with a copy of its own) for its fork child `child`, taken when the
    /// child's start is reported (the forking thread is held at its fork
    /// event until then: the parent's sites are still those the child
    /// inherited). None when libraries mapped later are not armed.
    pub(super) fn child_arm(&self, child: i32, parent: i32) -> Option<ChildArm> {
        if self
            .traps
            .as_ref()
            .is_some_and(|t| t.kids.vforked.contains_key(&child))
        {
            // It shares its parent's memory (and maps nothing of its own
            // before it executes a program).
            return None;
        }
        let from: &InProc = if parent == self.pid {
            self
        } else {
            &self.child_arms.get(&parent)?.0
        };
        let rdebug = from.rdebug?;
        let a = from.agent.as_ref()?;
        let agent = agent_loader::LoadedAgent {
            region: a.region.share().ok()?,
            ..*a
        };
        let mut c = InProc::blank(child, false, self.tsc0, self.ring_full, self.follow_forks);
        c.maps = Vec::new();
        c.patcher = from.patcher.fork_copy();
        c.armed = from.armed.clone();
        c.marks = from.marks.clone();
        c.enabled = from.enabled.clone();
        c.sites_sent = from.sites_sent;
        c.sites_dropped = from.sites_dropped.clone();
        c.said = from.said.clone();
        c.rdebug = Some(rdebug);
        c.agent = Some(agent);
        c.run = Run::Running;
        Some(ChildArm(Box::new(c)))
    }

    /// Keeps the transport that armed followed child `pid` in the program
    /// it executed (`joined`) as its copy, for the libraries it maps later.
    pub(super) fn keep_child_arm(&mut self, pid: i32, mut c: Box<InProc>) {
        c.run = Run::Running;
        c.world = None;
        let c = ChildArm(c);
        if let (Some(t), Some(brk)) = (self.traps.as_mut(), c.r_brk()) {
            t.kids.r_brk.insert(pid, brk);
        }
        self.child_arms.insert(pid, c);
    }

    /// A followed child stopped in the program it executed, being armed
    /// (`joined`): a trap site at its dynamic linker's `r_brk`, so that the
    /// libraries it maps later are armed in it.
    pub(super) fn watch_child_libraries(&mut self) {
        let Some(world) = self.world.as_mut() else {
            return;
        };
        if let Some(rd) = crate::transport::common::rdebug::find(&self.maps)
            && self
                .patcher
                .plan_library_event(world, &self.maps, rd.brk)
                .is_ok()
        {
            self.rdebug = Some(rd);
        }
    }

    /// The transport of child `pid`'s own while the session arms its
    /// libraries (`Event::LibrariesChanged` for it).
    pub(super) fn arming_child(&mut self, pid: i32) -> Option<&mut InProc> {
        if self.child_event != Some(pid) {
            return None;
        }
        self.child_arms.get_mut(&pid).map(|c| &mut *c.0)
    }

    /// The probes armed in followed child `pid` (its copy's, else this
    /// process's: a child has its parent's probes).
    pub(super) fn armed_in(&self, pid: i32) -> &rustc_hash::FxHashMap<usize, usize> {
        self.child_arms
            .get(&pid)
            .map_or(&self.armed, |c| &c.0.armed)
    }

    /// Forgets the copies of the children that ended or executed a program.
    pub(super) fn forget_child_arms(&mut self, pids: impl IntoIterator<Item = i32>) {
        for pid in pids {
            self.child_arms.remove(&pid);
        }
    }

    /// Handles the threads of followed children stopped at `r_brk`
    /// (`traps::Children::at_library`), one by one.
    pub(super) fn on_child_library_events(
        &mut self,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) {
        loop {
            let Some((tid, pid)) = self
                .traps
                .as_mut()
                .and_then(|t| t.kids.at_library.pop_first())
            else {
                return;
            };
            if let Err(e) = self.on_child_library_event(tid, pid, on_event) {
                crate::elog!("wprobe: {e}");
            }
        }
    }

    /// Thread `tid` of followed child `pid`, stopped at `r_brk` (moved to
    /// its stub): see the module's documentation.
    fn on_child_library_event(
        &mut self,
        tid: i32,
        pid: i32,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> Result<(), Error> {
        let pass = || {
            let _ = sys::cont(tid, 0);
        };
        let Some(c) = self.child_arms.get(&pid) else {
            // No copy (a child that executed a program): not armed.
            pass();
            return Ok(());
        };
        let consistent = match c.0.rdebug.and_then(|r| r.r_debug) {
            Some(a) => {
                let mut b = [0u8; 4];
                let at = a + crate::transport::common::rdebug::R_STATE_OFFSET;
                crate::sys::mem::vm_read(pid, at, &mut b).ok() != Some(4)
                    || u32::from_le_bytes(b) == crate::transport::common::rdebug::RT_CONSISTENT
            }
            None => true,
        };
        if !consistent {
            pass();
            return Ok(());
        }
        let Some(agent) = self.agent.as_ref() else {
            pass();
            return Ok(());
        };
        // As in the main process (`later`): no handler runs while the
        // child's threads are stopped (the store's lock is the region's).
        if !agent.region.lock_store(Duration::from_secs(1)) {
            pass();
            return Err(Error::arm(format!(
                "process {pid}: a library was mapped, but a handler held the agent for over a \
                 second: its probes are not armed"
            )));
        }
        let stopped = self
            .traps
            .as_mut()
            .map(|t| t.stop_child(pid, tid))
            .unwrap_or_default();
        if let Some(a) = &self.agent {
            a.region.unlock_store();
        }
        if stopped.is_empty() {
            // Ended (or executed a program) meanwhile.
            return Ok(());
        }
        // Threads held at a fork event are inside the system call.
        let held: Vec<i32> = self
            .traps
            .as_ref()
            .map(|t| t.kids.held.clone())
            .unwrap_or_default();
        let w = match World::adopt(pid, stopped.clone()) {
            Ok(mut w) => {
                w.in_syscall(held);
                w
            }
            Err(e) => {
                self.let_child_go(stopped);
                return Err(Error::anyhow(
                    Some(pid),
                    &e,
                    format!("process {pid}: {e:#}"),
                ));
            }
        };
        let Some(c) = self.child_arms.get_mut(&pid) else {
            return Ok(());
        };
        let c = &mut c.0;
        // Its transport's pid is the child's.
        c.take_library_world(w);
        c.library_events += 1;
        self.child_event = Some(pid);
        on_event(self, Event::LibrariesChanged { pid });
        self.child_event = None;
        self.commit_child(pid)
    }

    /// The new sites of child `pid` handed to its agent, journaled in its
    /// journals and written; its threads go on.
    fn commit_child(&mut self, pid: i32) -> Result<(), Error> {
        let Some(c) = self.child_arms.get_mut(&pid) else {
            return Ok(());
        };
        let c = &mut c.0;
        let Some(mut world) = c.world.take() else {
            return Ok(());
        };
        let Some(t) = self.traps.as_mut() else {
            // No seized threads to go back to: it goes on untraced.
            world.release();
            return Ok(());
        };
        let lent = t.kids.lend_journals(pid);
        c.patcher.lend_journals(lent);
        let mut done = c.send_later_sites(&mut world);
        if done.is_ok() && c.patcher.has_traps() {
            done = c.patcher.arm_traps(pid);
            t.kids.redirect.insert(pid, c.patcher.trap_maps().0);
        }
        let back = c.patcher.lend_journals((None, None));
        t.kids.return_journals(pid, back);
        let stopped = world.into_stopped();
        self.let_child_go(stopped);
        if let Some(c) = self.child_arms.get(&pid) {
            c.0.patcher.save_plans();
        }
        done.map_err(|e| e.context(format_args!("process {pid}")))
    }

    /// Lets the stopped threads of a followed child go on, seized (those
    /// held for a start not yet reported stay so).
    fn let_child_go(&mut self, stopped: BTreeMap<i32, i32>) {
        let held: Vec<i32> = self
            .traps
            .as_ref()
            .map(|t| t.kids.held.clone())
            .unwrap_or_default();
        for (tid, sig) in stopped {
            if held.contains(&tid) {
                continue;
            }
            // The injections set other options: its clones, forks and
            // execs are to be seen again.
            let _ = sys::setoptions(tid, traps::OPTIONS);
            let _ = sys::cont(tid, sig);
        }
    }
}
