//! Return probes on GOT slots (`trace --plt` of code built with
//! `-fno-plt`, whose calls of library functions are `call
//! *f@GOTPCREL(%rip)` and go through no PLT entry): the slot is pointed at
//! a stub that dispatches the entry and jumps on to the address the slot
//! held; the returns are caught as a PLT entry's are (continuation sites
//! after the calls through the slot, the `ret`s of the function it leads
//! to).

use std::path::Path;

use agent_abi::site_kind;
use agent_loader::stub::{self, Site};
use iced_x86::{Code, Instruction, MemoryOperand, Register};

use super::stubs::AREA_BYTES;
use super::{Patcher, Planned, mapping_of};
use crate::proc::procmaps::Mapping;
use crate::transport::Error;
use crate::transport::inproc::world::World;

/// Bytes before a GOT site's stub in its area: the address the slot held,
/// which the stub's last instruction jumps through.
const SAVED: u64 = 16;

impl Patcher {
    /// Plans the return probe `tag` on the GOT slot at `slot` (link-time
    /// `link`, load bias `bias`, module `path`) of the import `name`: the
    /// slot's site (its 8 bytes become the stub's address when installed,
    /// the address it held kept by the stub), a continuation site after
    /// each `call` through the slot, and return sites at the `ret`s of the
    /// function it leads to where every one takes a jump. A call that
    /// reaches the function through a pointer taken from the slot is
    /// traced too (the pointer is the stub's).
    #[allow(
        clippy::too_many_arguments,
        reason = "the planner's state, the stopped process and the slot's facts"
    )]
    pub(super) fn plan_got_return(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        tag: usize,
        slot: u64,
        path: &Path,
        link: u64,
        bias: u64,
    ) -> Result<usize, crate::transport::Error> {
        use crate::transport::Rule;
        let name = self.import_name(path, link);
        if let Some(&i) = self.by_probe_addr.get(&slot) {
            let s = &mut self.sites[i];
            if !s.ret_tags.contains(&tag) {
                s.ret_tags.push(tag);
            }
            return Ok(i);
        }
        let mut held = [0u8; 8];
        if world.peek(slot, &mut held) != 8 {
            return Err(Error::Os {
                pid: Some(world.pid()),
                addr: Some(slot),
                errno: None,
                message: format!("its GOT slot at {slot:#x} cannot be read"),
            });
        }
        let target = u64::from_le_bytes(held);
        if !mapping_of(maps, target).is_some_and(|m| m.exec) {
            return Err(Error::refused(
                Rule::Returns,
                Some(slot),
                format!(
                    "{name}@plt in {}: its GOT slot at {slot:#x} holds {target:#x}, which is \
                     not code (a weak function no module defines, or data)",
                    path.display()
                ),
            ));
        }
        let inode = mapping_of(maps, slot).map_or(0, |m| m.inode);
        let mut conts = self.plan_continuations(world, maps, path, bias, link, &name, false, false);
        let rets = self.plan_import_rets(world, maps, path, link, &name);
        if rets == 0 {
            conts = self.plan_continuations(world, maps, path, bias, link, &name, false, true);
        }
        if conts == 0 && rets == 0 {
            return Err(Error::refused(
                Rule::Returns,
                Some(slot),
                format!(
                    "{name}@plt in {}: no call through its GOT slot where a jump fits after the \
                     call, where its returns would be seen: --transport inproc cannot observe \
                     its returns",
                    path.display()
                ),
            ));
        }
        let id = self.sites.len() as u32;
        let (area, at, code, site) = self.got_stub_for(world, slot, id)?;
        let a = &mut self.areas[area];
        a.write(at, &target.to_le_bytes());
        let stub_at = at + SAVED;
        a.put(stub_at, &code);
        self.by_probe_addr.insert(slot, id as usize);
        self.push_site(Planned {
            site,
            tags: Vec::new(),
            ret_tags: vec![tag],
            ret_of: None,
            kind: site_kind::PROBE,
            orig: held.to_vec(),
            patch: stub_at.to_le_bytes().to_vec(),
            inode,
            patched: false,
            trap: None,
            stub: stub_at,
            cave: None,
        });
        Ok(id as usize)
    }

    /// Room for a GOT site's saved address and stub in an area within
    /// reach of the slot (a new one if none has room): (area, address of
    /// the saved address, the stub's code, the site).
    fn got_stub_for(
        &mut self,
        world: &mut World,
        slot: u64,
        id: u32,
    ) -> Result<(usize, u64, Vec<u8>, Site), Error> {
        let try_at = |base: u64, at: u64| -> Option<(u64, Vec<u8>, Site)> {
            let site = got_site(slot, at)?;
            let code = stub::generate(&site, id, base, at + SAVED).ok()?;
            (at + SAVED - base + code.len() as u64 <= AREA_BYTES).then_some((at, code, site))
        };
        let found = self.fit_in_area(|a, at| {
            let reach = (a.base as i64).wrapping_sub(slot as i64);
            i32::try_from(reach).ok().and_then(|_| try_at(a.base, at))
        });
        if let Some((i, (at, code, site))) = found {
            return Ok((i, at, code, site));
        }
        let (i, base, at) = self.fresh_area(world, slot)?;
        let (at, code, site) = try_at(base, at).ok_or_else(|| {
            Error::arm(format!("generating the stub of the GOT slot at {slot:#x}"))
        })?;
        Ok((i, at, code, site))
    }
}

/// The site of the GOT slot at `slot` whose original address is kept at
/// `saved`: the 8 bytes of the slot, and, as its one displaced
/// instruction, the jump through the saved address (`jmp *saved(%rip)`);
/// `None` when that instruction cannot be made.
fn got_site(slot: u64, saved: u64) -> Option<Site> {
    let mut j = Instruction::with1(
        Code::Jmp_rm64,
        MemoryOperand::with_base_displ(Register::RIP, saved as i64),
    )
    .ok()?;
    j.set_ip(slot);
    j.set_len(6);
    j.set_next_ip(slot + 6);
    Some(Site {
        probe: slot,
        addr: slot,
        displaced: vec![j],
        len: 8,
        ret: None,
    })
}
