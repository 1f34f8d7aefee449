//! The original bytes put back where our jumps still are (a thread
//! between a near jump and its cave moved to the stub), the journals
//! removed; the sites of modules unmapped, and all of them when the
//! process executed a new program, forgotten without writing.

use agent_abi::site_kind;

use super::{Patcher, mapping_of};
use crate::proc::procmaps::Mapping;
use crate::transport::Error;
use crate::transport::inproc::world::World;

impl Patcher {
    /// Puts the original bytes back wherever our jump still is (the target
    /// stopped); returns the sites the process rewrote meanwhile, left as
    /// they are: (address, first byte found). Removes the journal when
    /// every site is done. A failure names the process and the address.
    pub(in crate::transport::inproc) fn restore(
        &mut self,
        world: &World,
    ) -> Result<Vec<(u64, u8)>, Error> {
        let pid = world.pid();
        let mut left = Vec::new();
        let mut first_err = None;
        // A thread between a near jump and its cave's jump goes on at the
        // stub (the cave becomes padding again).
        let at_caves: Vec<(i32, u64)> = if self.caves.is_empty() {
            Vec::new()
        } else {
            world
                .tids()
                .into_iter()
                .filter_map(|tid| Some((tid, world.regs(tid)?.rip)))
                .filter(|(_, pc)| self.caves.contains(pc))
                .collect()
        };
        for (tid, pc) in at_caves {
            if let Some(s) = self
                .sites
                .iter()
                .find(|s| s.patched && s.cave.as_ref().is_some_and(|c| c.addr == pc))
            {
                world.set_pc(tid, s.stub).map_err(|e| {
                    let message = format!("moving thread {tid} from the cave at {pc:#x}: {e:#}");
                    Error::anyhow(Some(pid), &e, message).at(pc)
                })?;
            }
        }
        for s in &mut self.sites {
            if !s.patched {
                continue;
            }
            let mut now = vec![0u8; s.patch.len()];
            let n = world.peek(s.site.addr, &mut now);
            if n != now.len() {
                // The mapping is gone (unmapped, or the process exec'd).
                s.patched = false;
                continue;
            }
            if now != s.patch {
                left.push((s.site.addr, now[0]));
                s.patched = false;
                continue;
            }
            match world.poke(s.site.addr, &s.orig) {
                Ok(()) => s.patched = false,
                Err(e) => {
                    let at = s.site.addr;
                    first_err.get_or_insert_with(|| {
                        Error::anyhow(Some(pid), &e, format!("{e:#}")).at(at)
                    });
                    continue;
                }
            }
            // Then its cave, where it is still ours.
            if let Some(c) = &s.cave {
                let mut now = vec![0u8; c.patch.len()];
                if world.peek(c.addr, &mut now) == now.len()
                    && now == c.patch
                    && let Err(e) = world.poke(c.addr, &c.orig)
                {
                    first_err.get_or_insert_with(|| {
                        Error::anyhow(Some(pid), &e, format!("{e:#}")).at(c.addr)
                    });
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        self.remove_journals();
        Ok(left)
    }

    /// Removes both journals (nothing of ours left in the code).
    fn remove_journals(&mut self) {
        if let Some(j) = self.journal.take() {
            j.remove();
        }
        if let Some(j) = self.trap_journal.take() {
            j.remove();
        }
        self.journaled = 0;
        self.traps_journaled = 0;
    }

    /// Forgets the sites whose module is no longer mapped where they were
    /// planned (`dlclose`, or another file mapped at its address since),
    /// without writing: their code went with the module. Their windows
    /// are free for new sites. Returns their indices (their probes are
    /// armed again if the module comes back).
    pub(in crate::transport::inproc) fn drop_unmapped(&mut self, maps: &[Mapping]) -> Vec<usize> {
        let mut gone = Vec::new();
        for (i, s) in self.sites.iter_mut().enumerate() {
            if s.inode == 0 || s.patch.is_empty() {
                continue;
            }
            let still = mapping_of(maps, s.site.addr).is_some_and(|m| m.inode == s.inode);
            if still {
                continue;
            }
            s.patch.clear();
            s.patched = false;
            s.trap = None;
            if let Some(c) = s.cave.take() {
                self.caves.remove(&c.addr);
            }
            self.by_window.remove(s.site.addr, i);
            if self.by_probe_addr.get(&s.site.probe) == Some(&i) {
                self.by_probe_addr.remove(&s.site.probe);
            }
            gone.push(i);
        }
        // The padding that windows of `ret`s took there is gone too.
        self.tails
            .retain(|&start, _| mapping_of(maps, start).is_some());
        // A whole function's return site follows its entry's (no window;
        // the entry's window holds that `ret`: another site with no
        // window, an epilogue's stub, may follow any site).
        for &i in &gone.clone() {
            if let Some(next) = self.sites.get(i + 1)
                && next.kind == site_kind::RET
                && next.patch.is_empty()
                && next.site.len == 0
                && self.sites[i]
                    .site
                    .ret
                    .is_some_and(|r| r.ip() == next.site.probe)
                && !gone.contains(&(i + 1))
            {
                if self.by_probe_addr.get(&next.site.probe) == Some(&(i + 1)) {
                    self.by_probe_addr.remove(&next.site.probe);
                }
                gone.push(i + 1);
            }
        }
        self.drop_copies(&mut gone);
        gone
    }

    /// The process executed a new program: the patched image, the stubs
    /// and the agent are gone with the old one; nothing is left to restore.
    pub(in crate::transport::inproc) fn forget(&mut self) {
        for s in &mut self.sites {
            s.patched = false;
        }
        self.remove_journals();
    }
}
