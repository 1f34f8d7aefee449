//! Stub areas (`r-x` mappings made in the target within rel32 reach of
//! the sites: the shared trampoline, the dispatch slot, the stubs), a
//! site's stub generated in one, and the stubs of watchpoints.

use agent_abi::site_kind;
use agent_loader::stub::{self, Site};

use super::{Area, Patcher, Planned};
use crate::transport::Error;
use crate::transport::inproc::code::ModuleCode;
use crate::transport::inproc::plans::StubKey;
use crate::transport::inproc::world::World;

/// Bytes of one stub area (the trampoline and about 3,000 stubs).
pub(super) const AREA_BYTES: u64 = 256 << 10;

/// Offset of the slots in an area (after the trampoline): `dispatch`, the
/// fast path, the fast table's pointer (`agent_loader::stub::trampoline`).
pub(super) const SLOT_OFF: u64 = stub::TRAMPOLINE_ROOM;

/// Offset of the first stub.
pub(super) const STUBS_OFF: u64 = SLOT_OFF + 64;

/// Room below which an area is not tried for another stub (smaller than
/// any stub).
const MIN_STUB_ROOM: u64 = 32;

impl Area {
    /// Where the area's next stub would start (16-byte aligned).
    fn next_stub(&self) -> u64 {
        self.base + self.next.next_multiple_of(16)
    }

    /// Writes `bytes` at `at` (in the area).
    pub(super) fn write(&mut self, at: u64, bytes: &[u8]) {
        let off = (at - self.base) as usize;
        self.code[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// Writes the stub `code` at `at`; the next stub goes after it.
    pub(super) fn put(&mut self, at: u64, code: &[u8]) {
        self.write(at, code);
        self.next = at - self.base + code.len() as u64;
    }
}

impl Patcher {
    /// The newest area (the older ones fill up) where `fit` makes a stub
    /// at the area's next stub address, with what it made: the choice of
    /// area of every stub of a site.
    pub(super) fn fit_in_area<T>(
        &self,
        mut fit: impl FnMut(&Area, u64) -> Option<T>,
    ) -> Option<(usize, T)> {
        let mut areas = self.areas.iter().enumerate().rev();
        areas.find_map(|(i, a)| fit(a, a.next_stub()).map(|t| (i, t)))
    }

    /// A new stub area near `near` ([`Patcher::new_area`]) for a stub that
    /// fits in no other: its index, base and first stub address.
    pub(super) fn fresh_area(
        &mut self,
        world: &mut World,
        near: u64,
    ) -> Result<(usize, u64, u64), Error> {
        self.new_area(world, near)?;
        let i = self.areas.len() - 1;
        let base = self.areas[i].base;
        Ok((i, base, base + STUBS_OFF))
    }

    /// Generates the stub of `site` in an area within reach (making one if
    /// none is): (area, stub address, code). With `module` (the site's
    /// module and its load bias), a stub its plans keep for the same site,
    /// area, address and id is taken rather than generated again, and the
    /// one generated for the place chosen is kept.
    pub(super) fn stub_for(
        &mut self,
        world: &mut World,
        site: &Site,
        id: u32,
        module: Option<&(std::sync::Arc<ModuleCode>, u64)>,
    ) -> Result<(usize, u64, Vec<u8>), Error> {
        let key =
            |base: u64, at: u64| module.map(|(_, bias)| StubKey::of(site, id, base, at, *bias));
        // The stub, and whether it was generated (not kept).
        let generate = |base: u64, at: u64| -> Result<(Vec<u8>, bool), String> {
            if let (Some((m, _)), Some(k)) = (module, key(base, at))
                && let Some(code) = m.kept_stub(&k)
            {
                return Ok((code, false));
            }
            stub::generate(site, id, base, at)
                .map(|c| (c, true))
                .map_err(|e| e.to_string())
        };
        let keep = |base: u64, at: u64, code: &[u8]| {
            if let (Some((m, _)), Some(k)) = (module, key(base, at)) {
                m.keep_stub(k, code);
            }
        };
        let mut last = String::new();
        // Only where the jump reaches and some room is left: a stub
        // generated only to find it does not fit would cost as much as one
        // that does.
        let found = self.fit_in_area(|a, at| {
            let reach = (at as i64).wrapping_sub((site.addr + stub::JMP_LEN as u64) as i64);
            if at + MIN_STUB_ROOM > a.base + AREA_BYTES || i32::try_from(reach).is_err() {
                return None;
            }
            match generate(a.base, at) {
                // The jump reaches `at` (`reach`, what `site_patch` checks).
                Ok((code, fresh)) if at - a.base + code.len() as u64 <= AREA_BYTES => {
                    Some((a.base, at, code, fresh))
                }
                Ok(_) => None,
                Err(e) => {
                    last = e;
                    None
                }
            }
        });
        if let Some((i, (base, at, code, fresh))) = found {
            if fresh {
                keep(base, at, &code);
            }
            return Ok((i, at, code));
        }
        let (i, base, at) = self.fresh_area(world, site.addr)?;
        let (code, fresh) = generate(base, at).map_err(|e| {
            Error::arm(if last.is_empty() {
                e
            } else {
                format!("{e} ({last})")
            })
        })?;
        stub::site_patch(site, at).map_err(|e| Error::arm(e.to_string()))?;
        if fresh {
            keep(base, at, &code);
        }
        Ok((i, at, code))
    }

    /// Maps a new stub area within rel32 reach of `near` (its trampoline
    /// written, its dispatch slot empty until `install`).
    /// A failure names the process, the address and the errno.
    pub(super) fn new_area(&mut self, world: &mut World, near: u64) -> Result<(), Error> {
        let pid = world.pid();
        let base = {
            let runner = world
                .runner()
                .map_err(|e| Error::anyhow(Some(pid), &e, e.to_string()))?;
            let mut t = world.target(runner);
            agent_loader::loader::map_near(
                &mut t,
                near,
                AREA_BYTES,
                libc::PROT_READ | libc::PROT_EXEC,
            )
            .map_err(|e| {
                Error::anyhow(
                    Some(pid),
                    &e,
                    format!("mapping a stub area near {near:#x}: {e:#}"),
                )
                .at(near)
            })?
        };
        let mut code = vec![0xCCu8; AREA_BYTES as usize];
        let tr = stub::trampoline(base + SLOT_OFF, base).map_err(|e| Error::arm(e.to_string()))?;
        if tr.len() as u64 > SLOT_OFF {
            return Err(Error::arm(format!(
                "the trampoline ({} bytes) would overlap its slots at {SLOT_OFF}",
                tr.len()
            )));
        }
        code[..tr.len()].copy_from_slice(&tr);
        code[SLOT_OFF as usize..SLOT_OFF as usize + 24].fill(0);
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
    ) -> Result<usize, Error> {
        let id = self.sites.len() as u32;
        let fits = |a: &Area| -> Option<(u64, Vec<u8>)> {
            let at = a.next_stub();
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
        let (at, code) =
            fits(&self.areas[area]).ok_or_else(|| Error::arm("no room for a watchpoint's stub"))?;
        self.areas[area].put(at, &code);
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
            ret_of: None,
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
