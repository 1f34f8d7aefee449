//! The installation: the stub areas written (with the agent's `dispatch`,
//! fast path and fast table in their slots), the sites journaled, then the jumps and their caves.

use super::Patcher;
use super::stubs::SLOT_OFF;
use crate::transport::Error;
use crate::transport::inproc::journal::{Entry, Journal};
use crate::transport::inproc::world::World;

impl Patcher {
    /// Writes the stub areas (with `slots`, `LoadedAgent::slots`, in their
    /// slots), journals the
    /// sites, then writes every jump. The target must be stopped. A
    /// failure names the process and the address (and the errno, when
    /// known).
    pub(in crate::transport::inproc) fn install(
        &mut self,
        world: &World,
        slots: [u64; 3],
    ) -> Result<(), Error> {
        let pid = world.pid();
        for a in &mut self.areas {
            for (k, v) in slots.iter().enumerate() {
                let at = SLOT_OFF as usize + 8 * k;
                a.code[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            let n = a.next.next_multiple_of(16) as usize;
            world.poke(a.base, &a.code[..n]).map_err(|e| {
                Error::anyhow(Some(pid), &e, format!("writing stubs: {e:#}")).at(a.base)
            })?;
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
            None => self.journal.insert(
                Journal::create(pid).map_err(|e| Error::io(Some(pid), None, &e, e.to_string()))?,
            ),
        };
        j.record(&entries).map_err(|e| {
            Error::io(
                Some(pid),
                None,
                &e,
                format!("writing the patch journal: {e}"),
            )
        })?;
        self.journaled = self.sites.len();
        // The caves first (the near jumps go there), then the windows;
        // the writes of each pass that fall in one page are one write
        // (the bytes between read first: the process is stopped), not one
        // system call per site.
        let todo: Vec<usize> = (0..self.sites.len())
            .filter(|&i| {
                let s = &self.sites[i];
                !s.patch.is_empty() && s.trap.is_none()
            })
            .collect();
        let caves: Vec<(u64, &[u8], usize)> = todo
            .iter()
            .filter_map(|&i| {
                let c = self.sites[i].cave.as_ref()?;
                Some((c.addr, &c.patch[..], i))
            })
            .collect();
        poke_by_page(world, caves, "the cave at")?;
        let windows: Vec<(u64, &[u8], usize)> = todo
            .iter()
            .map(|&i| {
                let s = &self.sites[i];
                (s.site.addr, &s.patch[..], i)
            })
            .collect();
        let done = poke_by_page(world, windows, "")?;
        for i in done {
            self.sites[i].patched = true;
        }
        Ok(())
    }
}

/// Writes each `(address, bytes, site)` of `writes`, those that start in
/// one page as one write of the bytes from the first to the end of the
/// last (the bytes between as they are); returns the sites written. An
/// error names the address (after `what`) of the first write that failed.
fn poke_by_page(
    world: &World,
    mut writes: Vec<(u64, &[u8], usize)>,
    what: &str,
) -> Result<Vec<usize>, Error> {
    const PAGE: u64 = 4096;
    writes.sort_by_key(|&(addr, _, _)| addr);
    let mut done = Vec::with_capacity(writes.len());
    let mut buf: Vec<u8> = Vec::new();
    let fail = |addr: u64, e: &anyhow::Error| {
        let message = if what.is_empty() {
            format!("patching {addr:#x}: {e:#}")
        } else {
            format!("patching {what} {addr:#x}: {e:#}")
        };
        Error::anyhow(Some(world.pid()), e, message).at(addr)
    };
    let mut k = 0;
    while k < writes.len() {
        let (lo, _, _) = writes[k];
        let mut n = k + 1;
        while n < writes.len() && writes[n].0 / PAGE == lo / PAGE {
            n += 1;
        }
        let group = &writes[k..n];
        if let [(addr, bytes, i)] = group {
            world.poke(*addr, bytes).map_err(|e| fail(*addr, &e))?;
            done.push(*i);
        } else {
            let hi = group
                .iter()
                .map(|&(a, b, _)| a + b.len() as u64)
                .max()
                .unwrap_or(lo);
            buf.clear();
            buf.resize((hi - lo) as usize, 0);
            if world.peek(lo, &mut buf) != buf.len() {
                // Unreadable between: each on its own, as it would be.
                for &(addr, bytes, i) in group {
                    world.poke(addr, bytes).map_err(|e| fail(addr, &e))?;
                    done.push(i);
                }
            } else {
                for &(addr, bytes, _) in group {
                    let off = (addr - lo) as usize;
                    buf[off..off + bytes.len()].copy_from_slice(bytes);
                }
                world.poke(lo, &buf).map_err(|e| fail(lo, &e))?;
                done.extend(group.iter().map(|&(_, _, i)| i));
            }
        }
        k = n;
    }
    Ok(done)
}
