//! The installation: the stub areas written (with the agent's `dispatch`,
//! fast path and fast table in their slots), the sites journaled, then the jumps and their caves.

use super::Patcher;
use super::stubs::SLOT_OFF;
use crate::transport::Error;
use crate::transport::inproc::journal::{Journal, line_into};
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
        // Nothing to patch (watchpoints only): no journal, which a killed
        // run would leave behind with nothing in it.
        if !self.journal_new(pid)? {
            return Ok(());
        }
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

    /// The journal's lines of the sites not journaled yet, made ahead of
    /// [`Patcher::install`] (while the target loads the agent), which
    /// writes them: the journal is created there, just before the jumps,
    /// so that a wprobe killed before leaves none behind. Made without
    /// changing the patcher (on a thread beside another that reads it):
    /// the range of sites and their lines, for
    /// [`Patcher::keep_journal_ahead`].
    pub(in crate::transport::inproc) fn journal_lines_ahead(&self) -> (usize, usize, String) {
        let (from, to) = (self.journaled, self.sites.len());
        (from, to, self.journal_lines(from..to))
    }

    /// Keeps the lines [`Patcher::journal_lines_ahead`] made for
    /// [`Patcher::install`].
    pub(in crate::transport::inproc) fn keep_journal_ahead(
        &mut self,
        lines: (usize, usize, String),
    ) {
        self.journal_ahead = Some(lines);
    }

    /// The journal's lines of the sites `range` with bytes to write (a
    /// near site's cave after its window).
    fn journal_lines(&self, range: std::ops::Range<usize>) -> String {
        let mut text = String::with_capacity(range.len() * 64);
        for s in &self.sites[range] {
            if s.patch.is_empty() {
                continue;
            }
            line_into(&mut text, s.site.addr, &s.orig, &s.patch, s.inode);
            if let Some(c) = &s.cave {
                line_into(&mut text, c.addr, &c.orig, &c.patch, s.inode);
            }
        }
        text
    }

    /// Journals the sites with bytes to write that are not journaled yet
    /// (the journal created at the first); whether there were any.
    fn journal_new(&mut self, pid: i32) -> Result<bool, Error> {
        let (from, to) = (self.journaled, self.sites.len());
        let text = match self.journal_ahead.take() {
            Some((f, t, text)) if (f, t) == (from, to) => text,
            _ => self.journal_lines(from..to),
        };
        if text.is_empty() {
            return Ok(false);
        }
        let j = match &mut self.journal {
            Some(j) => j,
            None => self.journal.insert(
                Journal::create(pid).map_err(|e| Error::io(Some(pid), None, &e, e.to_string()))?,
            ),
        };
        j.append(&text).map_err(|e| {
            Error::io(
                Some(pid),
                None,
                &e,
                format!("writing the patch journal: {e}"),
            )
        })?;
        self.journaled = to;
        Ok(true)
    }
}

/// Writes each `(address, bytes, site)` of `writes`, those that start in
/// one page as one write of the bytes from the first to the end of the
/// last (the bytes between as they are, `World::peek_code`); returns the
/// sites written. An
/// error names the address (after `what`) of the first write that failed.
fn poke_by_page(
    world: &World,
    mut writes: Vec<(u64, &[u8], usize)>,
    what: &str,
) -> Result<Vec<usize>, Error> {
    const PAGE: u64 = 4096;
    // Addresses are distinct (one site a window, one cave a near site).
    writes.sort_unstable_by_key(|&(addr, _, _)| addr);
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
            // (Read through the chunks planning read the code by: the
            // process is stopped, and they hold what was written since.)
            if world.peek_code(lo, &mut buf) != buf.len() {
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
