//! A probe's site planned (its window checked, then given its stub), the
//! dynamic linker's library event as a trap, and a whole short function's
//! one window for its entry and its `ret`.

use agent_abi::site_kind;
use agent_loader::nearjump;
use agent_loader::stub::{self, Site};
use agent_loader::window;

use super::Shape;
use super::check::Checked;
use super::{Cave, Patcher, Planned};
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::world::World;
use crate::transport::{Error, Rule};

impl Patcher {
    /// Plans the site of the probe `tag` at `addr`; returns the site index.
    pub(in crate::transport::inproc) fn plan(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        tag: usize,
        addr: u64,
        opcode: Option<u8>,
    ) -> Result<usize, Error> {
        let i = self.probe_site(world, maps, addr, opcode)?;
        let s = &mut self.sites[i];
        if !s.tags.contains(&tag) {
            s.tags.push(tag);
        }
        Ok(i)
    }

    /// The probe site at `addr`, planned if new.
    fn probe_site(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        addr: u64,
        opcode: Option<u8>,
    ) -> Result<usize, Error> {
        if let Some(&i) = self.by_probe_addr.get(&addr) {
            if self.sites[i].kind != site_kind::PROBE {
                return Err(Error::refused_at(
                    Rule::Patch,
                    addr,
                    "is a `ret` where a return probe's calls return: a probe cannot share it",
                ));
            }
            return Ok(i);
        }
        let c = self.check(world, maps, addr, opcode, Shape::Probe)?;
        self.add(world, c, site_kind::PROBE)
    }

    /// Plans the trap at the dynamic linker's `r_brk` (`_dl_debug_state`,
    /// called at each change of the link map): a site with no probe whose
    /// hit stops the thread for the transport, which arms the probes of a
    /// library just mapped before the thread goes on. Always a trap (a
    /// jump would not stop the thread); not said as a fallback. Returns
    /// the site index.
    pub(in crate::transport::inproc) fn plan_library_event(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        addr: u64,
    ) -> Result<usize, Error> {
        if let Some(&i) = self.by_probe_addr.get(&addr) {
            let probe = self.sites[i].site.probe;
            return Err(Error::refused(
                Rule::Patch,
                Some(addr),
                format!(
                    "{addr:#x}, where the dynamic linker reports library changes, has a probe's \
                     site ({probe}) already"
                ),
            )
            .alike(format!(
                "its entry where the dynamic linker reports library changes, has a probe's site \
                 ({probe}) already"
            )));
        }
        let mut c = self.check(world, maps, addr, None, Shape::Probe)?;
        let why = "the dynamic linker's library event".to_string();
        if c.trap.is_none() {
            // A near site's cave, reserved by the check: not taken.
            if let Some((addr, _, _)) = c.cave.take() {
                self.caves.remove(&addr);
            }
            let mut code = [0u8; 16];
            let n = world.peek(addr, &mut code);
            let ret = code.first() == Some(&0xc3);
            let site = window::plan_trap(addr, &code[..n], ret)
                .map_err(|r| Error::refused(Rule::Patch, Some(addr), r.to_string()))?;
            c = Checked {
                site,
                orig: code[..1].to_vec(),
                inode: c.inode,
                trap: Some(("_dl_debug_state".into(), why)),
                cave: None,
                module: None,
            };
        } else {
            c.trap = Some(("_dl_debug_state".into(), why));
        }
        let notes = self.notes.len();
        let i = self.add(world, c, site_kind::PROBE)?;
        self.notes.truncate(notes);
        Ok(i)
    }

    /// Gives a whole function's window its stub: the entry's site, and
    /// after it the return site of its `ret` (same stub, no window of its
    /// own). Returns the entry's site index.
    pub(super) fn add_whole(&mut self, world: &mut World, c: Checked) -> Result<usize, Error> {
        let ret = c.site.ret.map_or(0, |r| r.ip());
        let i = self.add(world, c, site_kind::PROBE)?;
        self.by_probe_addr.insert(ret, i + 1);
        self.push_site(Planned::bare_return(
            Site {
                probe: ret,
                addr: ret,
                displaced: Vec::new(),
                len: 0,
                ret: None,
            },
            0,
        ));
        Ok(i)
    }

    /// Gives a checked window its stub; returns the site index.
    pub(super) fn add(&mut self, world: &mut World, c: Checked, kind: u32) -> Result<usize, Error> {
        let id = self.sites.len() as u32;
        let (area, stub_addr, code) = self.stub_for(world, &c.site, id, c.module.as_ref())?;
        let patch = if let Some((func, why)) = &c.trap {
            self.trap_funcs.insert(c.site.addr, func.clone());
            if kind == site_kind::RET {
                self.trapped_rets.insert(c.site.addr);
            }
            self.notes.push((
                func.clone(),
                format!(
                    "{:#x} {why}: a trap instead (`hlt`), a ptrace stop per hit",
                    c.site.addr
                ),
            ));
            vec![crate::transport::inproc::traps::TRAP_INSN]
        } else if let Some((at, _, why)) = &c.cave {
            let (func, why) = why.split_once(": ").unwrap_or(("", why));
            self.near_notes.push(format!(
                "{:#x} {func}: a near jump (`jmp rel8`) to a `jmp` to its stub in the padding \
                 at {at:#x} (no 5-byte jump: {why})",
                c.site.addr
            ));
            nearjump::near_patch(&c.site, *at).ok_or_else(|| {
                Error::arm(format!(
                    "the cave at {at:#x} is out of reach of {:#x}",
                    c.site.addr
                ))
            })?
        } else {
            stub::site_patch(&c.site, stub_addr).map_err(|e| Error::arm(e.to_string()))?
        };
        let cave = match c.cave {
            Some((addr, orig, _)) => Some(Cave {
                addr,
                orig,
                patch: nearjump::cave_patch(addr, stub_addr).ok_or_else(|| {
                    Error::arm(format!(
                        "the stub at {stub_addr:#x} is out of reach of the cave at {addr:#x}"
                    ))
                })?,
            }),
            None => None,
        };
        self.areas[area].put(stub_addr, &code);
        self.by_probe_addr.insert(c.site.probe, id as usize);
        self.push_site(Planned {
            site: c.site,
            tags: Vec::new(),
            ret_tags: Vec::new(),
            ret_of: self.ret_owner.filter(|_| kind == site_kind::RET),
            kind,
            orig: c.orig,
            patch,
            inode: c.inode,
            patched: false,
            trap: c.trap.map(|(_, why)| why),
            stub: stub_addr,
            cave,
        });
        Ok(id as usize)
    }
}
