//! What the in-process transport does while the target runs and maps a
//! library or executes a new program (docs/architecture.md, "Libraries
//! mapped later" and "A program executed later"): the thread that got there
//! is held at its stop, every thread is stopped, the session arms what is
//! new, and the new sites are handed to the agent and written before any
//! thread goes on.

use std::time::Duration;

use agent_loader::SiteSpec;

use super::patch::Patcher;
use super::world::World;
use super::{InProc, Phase, launch, traps};
use crate::transport::{Action, Armed, Error, Event, Transport};

impl InProc {
    /// A thread stopped at the dynamic linker's `r_brk`: when the link
    /// map is consistent again (a library added or removed), every thread
    /// is stopped, the sites of libraries gone are forgotten, the session
    /// arms what is new (`Event::LibrariesChanged`: the inserts of the
    /// probes whose module is mapped now), and [`InProc::commit_later`]
    /// hands the new sites to the agent and writes them, before any
    /// thread goes on: no call into a library just mapped runs unseen.
    pub(super) fn on_library_event(
        &mut self,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> Result<(), Error> {
        let consistent = match self.rdebug.and_then(|r| r.r_debug) {
            Some(a) => {
                let mut b = [0u8; 4];
                let at = a + crate::transport::common::rdebug::R_STATE_OFFSET;
                crate::sys::mem::vm_read(self.pid, at, &mut b).ok() != Some(4)
                    || u32::from_le_bytes(b) == crate::transport::common::rdebug::RT_CONSISTENT
            }
            None => true,
        };
        if !consistent {
            // The first of the pair (a library about to be added or
            // removed): nothing changed yet.
            if let Some(t) = self.traps.as_mut() {
                t.pass_library_event();
            }
            return Ok(());
        }
        self.library_events += 1;
        // No handler may be running in a thread while it is stopped and the
        // agent's tables change: hold the store (running handlers finish,
        // new hits wait for it), stop everything, then let go of it for the
        // agent's own control call.
        let Some(agent) = self.agent.as_ref() else {
            return Ok(());
        };
        if !agent.region.lock_store(Duration::from_secs(1)) {
            if let Some(t) = self.traps.as_mut() {
                t.pass_library_event();
            }
            return Err(Error::arm(format!(
                "process {}: a library was mapped, but a handler held the agent for over a                  second: its probes are not armed",
                self.pid
            )));
        }
        let stopped = self.stop_world();
        if let Some(a) = &self.agent {
            a.region.unlock_store();
        }
        let w = stopped.map_err(|e| Error::anyhow(Some(self.pid), &e, format!("{e:#}")))?;
        self.take_library_world(w);
        let pid = self.pid;
        on_event(self, Event::LibrariesChanged { pid });
        self.commit_later()
    }

    /// Takes `w`, the process stopped for the libraries it mapped or
    /// unmapped (or a followed fork child's, `forklibs`): each thread's
    /// `rip` for the patcher, the maps read again, the sites in files no
    /// longer mapped forgotten and the probes they armed reported
    /// unmapped.
    pub(super) fn take_library_world(&mut self, w: World) {
        self.patcher.thread_pcs = w.thread_pcs();
        self.world = Some(w);
        self.maps = crate::proc::procmaps::read(self.pid).unwrap_or_default();
        for i in self.patcher.drop_unmapped(&self.maps) {
            self.sites_dropped.push(i);
            let s = &self.patcher.sites[i];
            for &tag in s.tags.iter().chain(&s.ret_tags) {
                if self.armed.get(&tag) == Some(&i) {
                    self.armed.remove(&tag);
                    self.unmapped.push(Armed(tag as u64));
                }
            }
        }
    }

    /// The process, stopped at its exec (`traps::Traps::follow_exec`):
    /// the old image's runs and counts are handed on, the process is run
    /// to where its startup libraries are ready (as a launched command
    /// is), and the session arms every probe in the new image
    /// (`Event::Exec`) and gives the handlers again
    /// (`InTarget::update_handlers`), which loads a new agent there, its
    /// maps and global variables those of the old one. Nothing of the new
    /// program runs before its probes are armed.
    pub(super) fn on_exec(
        &mut self,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> Result<(), Error> {
        let Some(tid) = self.traps.as_mut().and_then(|t| t.exec_stop.take()) else {
            return Ok(());
        };
        let pid = self.pid;
        self.drain_runs(on_event);
        let mut deltas = Vec::new();
        self.report_counts(&mut deltas, on_event);
        self.carried_gvars = self
            .agent
            .as_ref()
            .map(|a| a.region.gvars())
            .unwrap_or_default();
        if self.follow_forks
            && let Some(a) = &self.agent
            && let Ok(region) = a.region.share()
        {
            // Followed children may write into this region: the new
            // image's agent joins it (its maps, variables and counters
            // go on there) rather than start one of its own.
            use std::os::fd::AsRawFd;
            let path = format!(
                "/proc/{}/fd/{}",
                std::process::id(),
                region.file.as_raw_fd()
            );
            self.join = Some((region, path));
        }
        // The sites went with the old image (nothing to restore).
        let (old_traps, old_orig) = self.patcher.trap_maps();
        self.keep_trap_stops();
        if let Some(t) = self.traps.take() {
            // Followed fork children go on with the old image's agent,
            // and its trap sites; those whose first stop is awaited are
            // adopted with them (their journals copied before the
            // parent's go).
            self.children = t.kids;
            let guard = self.children.follow.unwrap_or(0);
            let kids: Vec<i32> = self.children.kids.keys().copied().collect();
            for kid in kids {
                self.children
                    .redirect
                    .entry(kid)
                    .or_insert_with(|| old_traps.clone());
                self.children.guards.entry(kid).or_insert(guard);
            }
            self.children
                .parent_execed(pid, guard, &old_traps, &old_orig);
            // Those children have the old image's watchpoints, stubs
            // included (armed at their first stop).
            if self.watches.any() {
                let waiting: Vec<i32> = self.children.pre_exec.keys().copied().collect();
                for child in waiting {
                    self.children.watches.entry(child).or_insert(self.watches);
                }
            }
        }
        self.patcher.forget();
        let not_traced = |e: String| {
            format!(
                "process {pid} executed a new program, which is not traced: {e} (--transport \
                 ptrace follows it)"
            )
        };
        if let Err(e) = launch::run_to_entry(tid) {
            self.phase = Phase::Execed;
            let _ = crate::sys::ptrace::detach(tid, 0);
            return Err(Error::anyhow(Some(pid), &e, not_traced(format!("{e:#}"))));
        }
        let w = match World::adopt(pid, std::iter::once((tid, 0)).collect()) {
            Ok(w) => w,
            Err(e) => {
                self.phase = Phase::Execed;
                let _ = crate::sys::ptrace::detach(tid, 0);
                return Err(Error::anyhow(Some(pid), &e, not_traced(format!("{e:#}"))));
            }
        };
        self.patcher = Patcher::default();
        self.patcher.thread_pcs = w.thread_pcs();
        self.world = Some(w);
        self.maps = crate::proc::procmaps::read(pid).unwrap_or_default();
        self.armed.clear();
        self.marks.maxactive.clear();
        self.marks.entry_notices.clear();
        self.enabled.clear();
        self.sites_sent = 0;
        self.sites_dropped.clear();
        self.later_biases.clear();
        self.unmapped.clear();
        self.watches = traps::Watches::default();
        // Libraries the new program maps later are watched as before.
        self.rdebug = None;
        if let Some(rd) = crate::transport::common::rdebug::find(&self.maps)
            && let Some(world) = self.world.as_mut()
            && self
                .patcher
                .plan_library_event(world, &self.maps, rd.brk)
                .is_ok()
        {
            self.rdebug = Some(rd);
        }
        self.reload = true;
        on_event(self, Event::Exec { pid });
        if self.reload {
            // The session gave no handlers: let it go untraced.
            self.reload = false;
            self.phase = Phase::Execed;
            if let Some(mut w) = self.world.take() {
                w.release();
            }
            return Err(Error::other(not_traced(
                "no handlers were given for it".into(),
            )));
        }
        Ok(())
    }

    /// Hands the sites planned since the last commit to the agent (and the
    /// dropped ones, with no probes), enables their probes, writes their
    /// jumps and traps, and lets the stopped target go.
    pub(super) fn commit_later(&mut self) -> Result<(), Error> {
        let Some(mut world) = self.world.take() else {
            return Ok(());
        };
        let done = self.send_later_sites(&mut world);
        let go = self.go(world);
        // What planning learnt of the library mapped (and of the others),
        // for the next run, the target running meanwhile.
        self.patcher.save_plans();
        done.and(go)
    }

    /// See [`InProc::commit_later`]: everything but letting go.
    /// A failure names the process (and the errno, when known).
    pub(super) fn send_later_sites(&mut self, world: &mut World) -> Result<(), Error> {
        let pid = self.pid;
        let failed = |e: anyhow::Error| Error::anyhow(Some(pid), &e, format!("{e:#}"));
        self.patcher.plan_vfork_marks(world, &self.maps);
        self.patcher.plan_fragments(world, &self.maps);
        self.say_fallbacks();
        let Some(slots) = self.agent.as_ref().map(|a| a.slots()) else {
            return Ok(());
        };
        let mut specs = Self::site_specs(&self.patcher, self.sites_sent..self.patcher.sites.len());
        let biases = std::mem::take(&mut self.later_biases);
        if specs.is_empty() && biases.is_empty() {
            // Only sites dropped (a `dlclose`): told the agent with the
            // next sites added, not now, when its heap could grow into the
            // gap the library left (the next library opened would not be
            // mapped where it would have been without wprobe). Their
            // windows cannot be hit meanwhile: their code is gone.
            return Ok(());
        }
        for &i in &self.sites_dropped {
            specs.push(SiteSpec {
                site: i as u32,
                addr: self.patcher.sites[i].site.probe,
                probes: Vec::new(),
                kind: self.patcher.sites[i].kind,
                ret_probes: Vec::new(),
                window: (0, Vec::new()),
                trap: false,
                stub: 0,
                cave: None,
                vfork: 0,
            });
        }
        {
            let runner = world.runner().map_err(failed)?;
            let agent = self
                .agent
                .as_mut()
                .ok_or_else(|| Error::other("no agent"))?;
            // In as many requests as the scratch area needs.
            let mut t = world.target(runner);
            agent.set_sites(&mut t, &specs, &biases).map_err(failed)?;
            agent.region.free_scratch();
        }
        self.sites_sent = self.patcher.sites.len();
        self.sites_dropped.clear();
        if let Some(a) = &self.agent {
            for (&tag, _) in self.armed.iter() {
                if self.enabled.insert(tag) {
                    a.region.set_probe_enabled(tag as u32, true);
                }
            }
            self.marks.write_into(&a.region);
        }
        self.patcher.install(world, slots)
    }
}
