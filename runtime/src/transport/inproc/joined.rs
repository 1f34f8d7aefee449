//! A followed fork child that executes a program (`-f`; `posix_spawn`'s
//! and `vfork`'s children included). Its new image has no agent: while it
//! is stopped at its exec it is run to its entry point (the dynamic linker
//! maps its libraries), a transport of its own (an [`InProc`] for that
//! image, held in [`InProc::execs`]) plans its probes and loads an agent
//! that *joins* the region of the agent the child was followed with
//! (`agent_loader::loader::join_agent`: one ring, one set of counters,
//! maps and global variables, as under ptrace), the session arms it as
//! after any exec (`Event::Exec`), and its stubs, jumps and traps are
//! written. Then its thread is handed to the threads this transport keeps
//! seized (`forks::Children::joined`), with the image's journals and trap
//! sites, and the transport of its own is dissolved, or kept for the
//! libraries the new image maps later (`forklibs`, when libraries mapped
//! later are armed: its `r_brk` gets a trap site before its commit): the
//! child is served, detached and repaired like any followed child. Nothing of the new
//! program runs before its probes are armed.

use std::os::fd::AsRawFd;

use super::InProc;
use super::launch;
use super::world::World;
use crate::transport::{Action, Error, Event, InTarget, Transport};

impl InProc {
    /// Follows child `pid` (of `parent`), stopped at its exec (thread
    /// `tid`) into its new program; an error (it was let go untraced)
    /// says why.
    pub(super) fn follow_exec_child(
        &mut self,
        pid: i32,
        tid: i32,
        parent: i32,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> Result<(), Error> {
        let prog = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "a program".into());
        let not_traced = |e: String| {
            format!(
                "process {pid} (forked by {parent}) executed {prog}, which is not traced: {e} \
                 (--transport ptrace follows it)"
            )
        };
        let let_go = |e: String| {
            let _ = crate::sys::ptrace::detach(tid, 0);
            not_traced(e)
        };
        let Some(a) = &self.agent else {
            return Err(Error::other(let_go("no agent to join".into())));
        };
        let failed = |e: anyhow::Error| Error::anyhow(Some(pid), &e, let_go(format!("{e:#}")));
        let region = a.region.share().map_err(failed)?;
        let path = format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            region.file.as_raw_fd()
        );
        let t0 = std::time::Instant::now();
        launch::run_to_entry(tid).map_err(failed)?;
        let t1 = t0.elapsed();
        let w = World::adopt(pid, std::iter::once((tid, 0)).collect()).map_err(failed)?;
        let mut c = InProc::blank(pid, false, self.tsc0, self.ring_full, self.follow_forks);
        c.patcher.thread_pcs = w.thread_pcs();
        c.world = Some(w);
        c.reload = true;
        c.join = Some((region, path));
        c.program_maps = self.program_maps.clone();
        c.joined_parent = parent;
        self.execs.insert(pid, Box::new(c));
        let t2 = t0.elapsed();
        on_event(self, Event::Exec { pid });
        if std::env::var_os("WPROBE_DEBUG").is_some() {
            crate::elog!(
                "wprobe: debug: process {pid} executed {prog}: run to its entry {:.3} ms, \
                 set up {:.3} ms, armed {:.3} ms",
                t1.as_secs_f64() * 1e3,
                (t2 - t1).as_secs_f64() * 1e3,
                (t0.elapsed() - t2).as_secs_f64() * 1e3
            );
        }
        if let Some(mut c) = self.execs.remove(&pid) {
            // The session gave no handlers for it: let it go.
            c.agent = None;
            if let Some(mut w) = c.world.take() {
                w.release();
            }
            return Err(Error::other(not_traced(
                "no handlers were given for it".into(),
            )));
        }
        Ok(())
    }

    /// `update_handlers` for the children stopped at their exec: each
    /// commits (its agent joins the region) and is handed to the seized
    /// threads; one that cannot be is let go, and said.
    pub(super) fn commit_execs(&mut self, set: &crate::transport::HandlerSet<'_>) {
        let pids: Vec<i32> = self.execs.keys().copied().collect();
        for pid in pids {
            let Some(mut c) = self.execs.remove(&pid) else {
                continue;
            };
            if c.armed.is_empty() && self.rdebug.is_none() {
                // None of the run's probes in its image (a shell's `seq`)
                // and no library it may open later to watch: followed with
                // no agent, for the programs it runs. (With libraries
                // watched, it gets an agent as the process does: the
                // probes of a library it `dlopen`s are armed in it.)
                c.join = None;
                if let Err(e) = self.hand_over(pid, &mut c) {
                    crate::elog!("wprobe: {e}");
                }
                c.patcher = super::patch::Patcher::default();
                continue;
            }
            if self.rdebug.is_some() {
                // The libraries it maps later are armed in it, as in the
                // process (`forklibs`).
                c.watch_child_libraries();
            }
            let r = c.update_handlers(set);
            let r = r.and_then(|()| self.hand_over(pid, &mut c));
            match r {
                Ok(()) if c.rdebug.is_some() && c.agent.is_some() => {
                    // Kept for them, its sites and agent as written.
                    self.keep_child_arm(pid, c);
                    continue;
                }
                Ok(()) => {}
                Err(e) => crate::elog!("wprobe: {e}"),
            }
            // Dissolved: its agent lives on in the child, its region is
            // this transport's; its bytes are the child's, restored with
            // it.
            c.patcher = super::patch::Patcher::default();
            c.agent = None;
            if let Some(mut w) = c.world.take() {
                w.release();
            }
        }
    }

    /// The joined child `pid`'s thread, journals and trap sites handed to
    /// the seized threads.
    fn hand_over(&mut self, pid: i32, c: &mut InProc) -> Result<(), Error> {
        let w = c
            .world
            .take()
            .ok_or_else(|| Error::other(format!("process {pid}: not stopped")))?;
        let tids = w.into_stopped();
        let Some(&tid) = tids.keys().next() else {
            return Err(Error::gone(pid, format!("process {pid}: no thread")));
        };
        let (redirect, _) = c.patcher.trap_maps();
        if let Err(e) = c.patcher.arm_traps(pid) {
            crate::elog!("wprobe: process {pid}: {e}");
        }
        let guard = c.agent.as_ref().map_or(0, |a| a.guard);
        let journals = c.patcher.lend_journals((None, None));
        let parent = c.joined_parent;
        let Some(t) = self.traps.as_mut() else {
            let _ = crate::sys::ptrace::detach(tid, 0);
            return Err(Error::other(format!(
                "process {pid}: no seized threads to join"
            )));
        };
        t.kids.joined(pid, tid, parent, journals, redirect, guard);
        Ok(())
    }
}
