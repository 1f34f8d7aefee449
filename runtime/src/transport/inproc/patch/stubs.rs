//! Stub areas (`r-x` mappings made in the target within rel32 reach of
//! the sites: the shared trampoline, the dispatch slot, the stubs), a
//! site's stub generated in one, and the stubs of watchpoints.

use agent_abi::site_kind;
use agent_loader::stub::{self, Site};

use super::{Area, Patcher, Planned};
use crate::transport::inproc::world::World;

/// Bytes of one stub area (the trampoline and about 3,000 stubs).
pub(super) const AREA_BYTES: u64 = 256 << 10;

/// Offset of the dispatch slot in an area (after the trampoline).
pub(super) const SLOT_OFF: u64 = 512;

/// Offset of the first stub.
pub(super) const STUBS_OFF: u64 = 576;

/// Room below which an area is not tried for another stub (smaller than
/// any stub).
const MIN_STUB_ROOM: u64 = 32;

impl Patcher {
    /// Generates the stub of `site` in an area within reach (making one if
    /// none is): (area, stub address, code).
    pub(super) fn stub_for(
        &mut self,
        world: &mut World,
        site: &Site,
        id: u32,
    ) -> Result<(usize, u64, Vec<u8>), String> {
        let mut last = String::new();
        // The newest areas first (the older ones fill up), and only where
        // the jump reaches and some room is left: a stub generated only to
        // find it does not fit would cost as much as one that does.
        for (i, a) in self.areas.iter().enumerate().rev() {
            let at = a.base + a.next.next_multiple_of(16);
            let reach = (at as i64).wrapping_sub((site.addr + stub::JMP_LEN as u64) as i64);
            if at + MIN_STUB_ROOM > a.base + AREA_BYTES || i32::try_from(reach).is_err() {
                continue;
            }
            match stub::generate(site, id, a.base, at) {
                Ok(code) if at - a.base + code.len() as u64 <= AREA_BYTES => {
                    if stub::site_patch(site, at).is_ok() {
                        return Ok((i, at, code));
                    }
                }
                Ok(_) => {}
                Err(e) => last = e.to_string(),
            }
        }
        self.new_area(world, site.addr)?;
        let i = self.areas.len() - 1;
        let base = self.areas[i].base;
        let at = base + STUBS_OFF;
        let code = stub::generate(site, id, base, at).map_err(|e| {
            if last.is_empty() {
                e.to_string()
            } else {
                format!("{e} ({last})")
            }
        })?;
        stub::site_patch(site, at).map_err(|e| e.to_string())?;
        Ok((i, at, code))
    }

    /// Maps a new stub area within rel32 reach of `near` (its trampoline
    /// written, its dispatch slot empty until `install`).
    pub(super) fn new_area(&mut self, world: &mut World, near: u64) -> Result<(), String> {
        let base = {
            let mut t = world.target(world.runner().map_err(|e| e.to_string())?);
            agent_loader::loader::map_near(
                &mut t,
                near,
                AREA_BYTES,
                libc::PROT_READ | libc::PROT_EXEC,
            )
            .map_err(|e| format!("mapping a stub area near {near:#x}: {e:#}"))?
        };
        let mut code = vec![0xCCu8; AREA_BYTES as usize];
        let tr = stub::trampoline(base + SLOT_OFF, base).map_err(|e| e.to_string())?;
        code[..tr.len()].copy_from_slice(&tr);
        code[SLOT_OFF as usize..SLOT_OFF as usize + 8].fill(0);
        self.areas.push(Area {
            base,
            code,
            next: STUBS_OFF,
        });
        Ok(())
    }

    /// The stub of a watchpoint (no window: the tracer moves a thread that
    /// triggers it there), in any area with room, or a new one near
    /// `near`. Returns the site index.
    pub(in crate::transport::inproc) fn plan_watch(
        &mut self,
        world: &mut World,
        near: u64,
    ) -> Result<usize, String> {
        let id = self.sites.len() as u32;
        let fits = |a: &Area| -> Option<(u64, Vec<u8>)> {
            let at = a.base + a.next.next_multiple_of(16);
            let code = stub::watch_stub(id, a.base + SLOT_OFF, at).ok()?;
            (at - a.base + code.len() as u64 <= AREA_BYTES).then_some((at, code))
        };
        let found = self.areas.iter().position(|a| fits(a).is_some());
        let area = match found {
            Some(i) => i,
            None => {
                self.new_area(world, near)?;
                self.areas.len() - 1
            }
        };
        let (at, code) = fits(&self.areas[area]).ok_or("no room for a watchpoint's stub")?;
        let a = &mut self.areas[area];
        let off = (at - a.base) as usize;
        a.code[off..off + code.len()].copy_from_slice(&code);
        a.next = at - a.base + code.len() as u64;
        self.push_site(Planned {
            site: Site {
                probe: 0,
                addr: 0,
                displaced: Vec::new(),
                len: 0,
                ret: None,
            },
            tags: Vec::new(),
            ret_tags: Vec::new(),
            kind: site_kind::WATCH,
            orig: Vec::new(),
            patch: Vec::new(),
            inode: 0,
            patched: false,
            trap: None,
            stub: at,
            cave: None,
        });
        Ok(id as usize)
    }
}
