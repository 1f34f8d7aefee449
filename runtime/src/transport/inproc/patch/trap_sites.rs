//! The sites that trap instead of jumping: their traps' and stubs'
//! addresses for `traps`, and their trap instructions written, journaled
//! first in the ptrace transport's journal.

use std::collections::HashMap;

use super::Patcher;
use crate::transport::Error;

impl Patcher {
    /// Whether some site traps instead of jumping.
    pub(in crate::transport::inproc) fn has_traps(&self) -> bool {
        self.sites.iter().any(|s| s.trap.is_some())
    }

    /// Trap address → stub address, and trap address → original byte.
    pub(in crate::transport::inproc) fn trap_maps(&self) -> (HashMap<u64, u64>, HashMap<u64, u8>) {
        let traps = self.sites.iter().filter(|s| s.trap.is_some());
        (
            traps.clone().map(|s| (s.site.addr, s.stub)).collect(),
            traps.map(|s| (s.site.addr, s.orig[0])).collect(),
        )
    }

    /// Writes the `int3` of every trap site (the process's threads seized
    /// by `traps::Traps`, so that a trap is never delivered as a signal),
    /// journaled first in the ptrace transport's journal, which its
    /// watchdog restores if wprobe dies. A failure names the process, the
    /// address and the errno.
    pub(in crate::transport::inproc) fn arm_traps(&mut self, pid: i32) -> Result<(), Error> {
        if !self.has_traps() {
            return Ok(());
        }
        let mem = std::fs::File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| Error::io(Some(pid), None, &e, format!("opening /proc/{pid}/mem: {e}")))?;
        let j = match &mut self.trap_journal {
            Some(j) => j,
            None => self.trap_journal.insert(
                crate::transport::common::journal::Journal::create(pid).map_err(|e| {
                    Error::io(
                        Some(pid),
                        None,
                        &e,
                        format!("writing the trap journal: {e}"),
                    )
                })?,
            ),
        };
        let patches: Vec<(u64, u8, u64)> = self.sites[self.traps_journaled..]
            .iter()
            .filter(|s| s.trap.is_some())
            .map(|s| (s.site.addr, s.orig[0], s.inode))
            .collect();
        j.record_all(&patches).map_err(|e| {
            Error::io(
                Some(pid),
                None,
                &e,
                format!("writing the trap journal: {e}"),
            )
        })?;
        self.traps_journaled = self.sites.len();
        for s in self
            .sites
            .iter_mut()
            .filter(|s| s.trap.is_some() && !s.patched)
        {
            match crate::sys::mem::pwrite(&mem, &s.patch, s.site.addr) {
                Ok(1) => s.patched = true,
                r => {
                    return Err(Error::Os {
                        pid: Some(pid),
                        addr: Some(s.site.addr),
                        errno: r.as_ref().err().map(|&e| e as i32),
                        message: format!(
                            "writing a trap at {:#x} in process {pid}: {r:?}",
                            s.site.addr
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
