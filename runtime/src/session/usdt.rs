//! USDT semaphores in the session: raised when a site with one is armed
//! in a process, lowered when the probe is disabled and before the
//! transport detaches, inherited by fork children that the transport
//! follows (their memory is a copy, increment included), forgotten with a
//! process that exits or execs. The writes and their journal are the
//! transport's ([`crate::transport::Transport::insert_usdt`],
//! [`crate::transport::Transport::semaphore`]); a transport whose kernel
//! counts them (perf) leaves the session nothing to lower.

use super::Session;
use crate::probe::addr::RunAddr;
use crate::transport::Transport;

impl Session {
    /// Records the semaphores the transport raised for the sites just
    /// armed in `pid` (`(probe, run-time address)`), which the session
    /// lowers later, and warns of those it could not raise.
    pub(super) fn held_semaphores(
        &mut self,
        pid: i32,
        raised: Vec<(usize, u64)>,
        failed: Vec<(usize, String)>,
        report: bool,
    ) {
        for (pi, addr) in raised {
            self.semaphores.push((pi, pid, addr));
        }
        for (pi, e) in failed {
            let msg = format!(
                "probe {}: {e}; the program skips the site while its semaphore is 0",
                self.probes[pi].label
            );
            self.warn(report, msg);
        }
    }

    /// Lowers the semaphores probe `pi` raised (it is disabled).
    pub(super) fn lower_semaphores_of(&mut self, t: &mut dyn Transport, pi: usize) {
        let (mine, rest) = std::mem::take(&mut self.semaphores)
            .into_iter()
            .partition(|s| s.0 == pi);
        self.semaphores = rest;
        for (_, pid, addr) in mine {
            let _ = t.semaphore(pid, RunAddr(addr), -1);
        }
    }

    /// Lowers every semaphore still raised (before detaching). A process
    /// that has gone meanwhile has nothing to lower.
    pub(super) fn lower_all_semaphores(&mut self, t: &mut dyn Transport) {
        for (_, pid, addr) in std::mem::take(&mut self.semaphores) {
            if let Err(e) = t.semaphore(pid, RunAddr(addr), -1)
                && std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                self.warn(true, e.to_string());
            }
        }
    }

    /// A fork child of `parent` has its parent's raised counters.
    pub(super) fn inherit_semaphores(&mut self, child: i32, parent: i32) {
        let inherited: Vec<_> = self
            .semaphores
            .iter()
            .filter(|s| s.1 == parent)
            .map(|&(pi, _, addr)| (pi, child, addr))
            .collect();
        self.semaphores.extend(inherited);
    }

    /// Forgets the counters of `pid` (it exited or exec'd).
    pub(super) fn forget_semaphores(&mut self, pid: i32) {
        self.semaphores.retain(|s| s.1 != pid);
        crate::transport::semaphores::forget(pid);
    }
}
