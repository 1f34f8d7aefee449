//! The installation: the stub areas written (with the agent's `dispatch`
//! in their slots), the sites journaled, then the jumps and their caves.

use super::Patcher;
use super::stubs::SLOT_OFF;
use crate::transport::inproc::journal::{Entry, Journal};
use crate::transport::inproc::world::World;

impl Patcher {
    /// Writes the stub areas (with `dispatch` in their slots), journals the
    /// sites, then writes every jump. The target must be stopped.
    pub(in crate::transport::inproc) fn install(
        &mut self,
        world: &World,
        dispatch: u64,
    ) -> Result<(), String> {
        for a in &mut self.areas {
            a.code[SLOT_OFF as usize..SLOT_OFF as usize + 8]
                .copy_from_slice(&dispatch.to_le_bytes());
            let n = a.next.next_multiple_of(16) as usize;
            world
                .poke(a.base, &a.code[..n])
                .map_err(|e| format!("writing stubs: {e:#}"))?;
        }
        let entries: Vec<Entry> = self.sites[self.journaled..]
            .iter()
            .filter(|s| !s.patch.is_empty())
            .flat_map(|s| {
                let window = Entry {
                    addr: s.site.addr,
                    orig: s.orig.clone(),
                    patch: s.patch.clone(),
                    inode: s.inode,
                };
                let cave = s.cave.as_ref().map(|c| Entry {
                    addr: c.addr,
                    orig: c.orig.clone(),
                    patch: c.patch.clone(),
                    inode: s.inode,
                });
                std::iter::once(window).chain(cave)
            })
            .collect();
        // Nothing to patch (watchpoints only): no journal, which a killed
        // run would leave behind with nothing in it.
        if entries.is_empty() {
            return Ok(());
        }
        let j = match &mut self.journal {
            Some(j) => j,
            None => self
                .journal
                .insert(Journal::create(world.pid()).map_err(|e| e.to_string())?),
        };
        j.record(&entries)
            .map_err(|e| format!("writing the patch journal: {e}"))?;
        self.journaled = self.sites.len();
        for s in self
            .sites
            .iter_mut()
            .filter(|s| !s.patch.is_empty() && s.trap.is_none())
        {
            // The cave first: the near jump goes there.
            if let Some(c) = &s.cave {
                world
                    .poke(c.addr, &c.patch)
                    .map_err(|e| format!("patching the cave at {:#x}: {e:#}", c.addr))?;
            }
            world
                .poke(s.site.addr, &s.patch)
                .map_err(|e| format!("patching {:#x}: {e:#}", s.site.addr))?;
            s.patched = true;
        }
        Ok(())
    }
}
