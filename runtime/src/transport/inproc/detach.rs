//! Putting the original bytes back: when the probes are suspended (and
//! the jumps written again at resume, with no thread inside a window), at
//! detach (every thread stopped, the sites restored, the traps' threads,
//! the watchdog and the heartbeat let go), and when the transport is
//! dropped (a launch abandoned before the commit is killed).

use std::time::{Duration, Instant};

use super::world::{self, World};
use super::{InProc, Life, Phase, Run};
use crate::transport::{Error, ExitStatus, Transport};

impl InProc {
    /// [`Transport::suspend`]: the probes dormant, the bytes restored.
    pub(super) fn suspend_probes(&mut self) -> Result<(), Error> {
        let Some(a) = &self.agent else {
            return Err(Error::unsupported(
                super::INFO.name,
                "--transport inproc: nothing is armed yet",
            ));
        };
        if self.phase != Phase::Armed {
            return Ok(());
        }
        // Dormant first: a thread already in a stub runs the displaced
        // instructions and goes on; none starts a handler.
        a.region.set_enabled(false);
        let pid = self.pid;
        let mut w = self
            .stop_world()
            .map_err(|e| Error::anyhow(Some(pid), &e, format!("{e:#}")))?;
        let restored = self.patcher.restore(&w);
        w.release();
        let left = restored?;
        self.code_left_alone
            .extend(left.into_iter().map(|(a, b)| (self.pid, a, b)));
        self.phase = Phase::Suspended;
        Ok(())
    }

    /// [`Transport::resume`]: the jumps written again, the probes enabled.
    pub(super) fn resume_probes(&mut self) -> Result<(), Error> {
        let Some(slots) = self.agent.as_ref().map(|a| a.slots()) else {
            return Err(Error::unsupported(
                super::INFO.name,
                "--transport inproc: nothing is armed yet",
            ));
        };
        if self.phase != Phase::Suspended {
            return Ok(());
        }
        // No thread may stand inside a window the jump would replace: stop
        // the process until none does (a thread is there only for the few
        // instructions of a window).
        for _ in 0..100 {
            let mut w = World::stop(self.pid)
                .map_err(|e| Error::anyhow(Some(self.pid), &e, format!("{e:#}")))?;
            let inside = w.tids().into_iter().any(|tid| {
                w.regs(tid)
                    .is_some_and(|r| self.patcher.inside_a_window(r.rip))
            });
            if inside {
                w.release();
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let installed = self.patcher.install(&w, slots);
            if let Err(e) = installed {
                w.release();
                return Err(e);
            }
            self.go(w)?;
            if let Some(a) = &self.agent {
                a.region.set_enabled(true);
            }
            self.phase = Phase::Armed;
            return Ok(());
        }
        Err(Error::arm(format!(
            "process {}: a thread stayed inside a probed window; the probes stay dormant",
            self.pid
        )))
    }

    /// [`Transport::detach`]: every site restored, the target let go.
    pub(super) fn detach_now(&mut self) -> anyhow::Result<()> {
        let t0 = Instant::now();
        if let Some(a) = &self.agent {
            a.region.set_enabled(false);
        }
        if self.life.ended() {
            // The process is gone, and its patched image with it: nothing
            // to restore, and the journal must not outlive it.
            self.patcher.forget();
        }
        // Threads seized with nothing patched (the sites of a library
        // that was unmapped) are let go through a stopped world too.
        let seized = !self.life.ended() && self.traps.as_ref().is_some_and(|t| t.active());
        if self.patcher.any_patched() || seized {
            if self.world.is_none() {
                match self.stop_world() {
                    Ok(w) => self.world = Some(w),
                    // Died while being stopped (a terminal's Ctrl-C reaches
                    // the launched command too), and reaped then: its
                    // status is the run's, nothing left to restore.
                    Err(e) if let Some(&world::Reaped(raw)) = e.downcast_ref() => {
                        let status = if self.launched {
                            Some(ExitStatus::from_wait(raw))
                        } else {
                            self.life.status()
                        };
                        self.life = Life::Ended(status);
                        self.patcher.forget();
                    }
                    // Gone (or dead, not yet reaped): nothing left to
                    // restore.
                    Err(_) if crate::proc::procinfo::ended(self.pid) => {
                        self.patcher.forget();
                    }
                    Err(e) => anyhow::bail!("stopping process {} to restore it: {e:#}", self.pid),
                }
            }
            if let Some(w) = &self.world {
                let left = self.patcher.restore(w).map_err(anyhow::Error::msg)?;
                self.code_left_alone
                    .extend(left.into_iter().map(|(a, b)| (self.pid, a, b)));
            }
        }
        if let Some(mut w) = self.world.take() {
            w.release();
        }
        // Followed fork children (their agents are dormant: the region is
        // shared and disabled).
        let mut children = std::mem::take(&mut self.children);
        if let Some(t) = self.traps.as_mut() {
            let kids = std::mem::take(&mut t.kids);
            children.kids.extend(kids.kids);
            children.threads.extend(kids.threads);
            children.vforked.extend(kids.vforked);
            children.held.extend(kids.held);
            children.at_library.extend(kids.at_library);
            children.pre_exec.extend(kids.pre_exec);
        }
        let failed = children.restore_all();
        self.patcher.wait_for_plans();
        self.traps = None;
        self.watchdog = None;
        self.heartbeat = None;
        self.detach_time = t0.elapsed();
        if let Some(e) = failed.into_iter().next() {
            anyhow::bail!("restoring a fork child: {e}");
        }
        Ok(())
    }
}

impl Drop for InProc {
    fn drop(&mut self) {
        if self.run != Run::Finished
            && self.launched
            && self.agent.is_none()
            && self.world.is_some()
        {
            // Never ran: the launch was abandoned before the commit.
            self.kill_launched();
            return;
        }
        let _ = self.detach();
    }
}
