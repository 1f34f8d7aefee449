//! Return probes on PLT entries (`trace --plt`): the entry's site, the
//! `ret`s of the function the import leads to where every one takes a
//! jump, and continuation sites after the entry's direct calls.

use std::path::Path;

use agent_abi::site_kind;

use super::Patcher;
use super::Shape;
use super::outside::OUTSIDE_DEPTH;
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::world::World;

impl Patcher {
    /// The name of the function of another module the PLT entry or GOT
    /// slot at link-time `link` of module `path` leads to (`?` where
    /// unknown).
    pub(super) fn import_name(&self, path: &Path, link: u64) -> String {
        match self.modules.get(path.as_os_str()) {
            Some(Ok(m)) => m.elf().import_at(link).unwrap_or("?").to_string(),
            _ => "?".into(),
        }
    }

    /// Plans return sites at the `ret`s of the function that the import
    /// `name` (the PLT entry at link-time `link` of module `path`) leads
    /// to, when every one takes a jump (a trap there would stop every call
    /// of it in the process); how many `ret`s are covered (0: none;
    /// `usize::MAX`: the function has none, its calls never return).
    pub(super) fn plan_import_rets(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        path: &Path,
        link: u64,
        name: &str,
    ) -> usize {
        let addrs = match self.outside_rets(world, maps, name) {
            Some(a) => a,
            None => {
                // The implementation the GOT slot holds (an IFUNC's).
                let slot = match self.modules.get(path.as_os_str()) {
                    Some(Ok(m)) => m
                        .elf()
                        .imports
                        .iter()
                        .find(|(a, n)| n == name && (*a != link || m.elf().is_import_slot(*a)))
                        .map(|&(a, _)| a),
                    _ => None,
                };
                let bias = maps
                    .iter()
                    .find(|m| {
                        m.is_file() && crate::proc::procmaps::canonical(Path::new(&m.path)) == path
                    })
                    .and_then(|m| match self.modules.get(path.as_os_str()) {
                        Some(Ok(code)) => code.bias_of(m),
                        _ => None,
                    });
                if self.never_returns(maps, name) {
                    return usize::MAX;
                }
                let (Some(slot), Some(bias)) = (slot, bias) else {
                    return 0;
                };
                let mut w = [0u8; 8];
                if world.peek(slot.wrapping_add(bias), &mut w) != 8 {
                    return 0;
                }
                match self.rets_at(world, maps, u64::from_le_bytes(w), OUTSIDE_DEPTH) {
                    Some(a) => a,
                    None => return 0,
                }
            }
        };
        if addrs.is_empty() {
            // It never returns (`abort`, `exit`): its calls end unwound,
            // as under ptrace.
            return usize::MAX;
        }
        self.add_ret_sites(world, maps, &addrs)
    }

    /// Return sites at `addrs` (`ret`s), when every one takes a jump; how
    /// many (0: none added).
    fn add_ret_sites(&mut self, world: &mut World, maps: &[Mapping], addrs: &[u64]) -> usize {
        let mut checked = Vec::new();
        let mut existing = 0;
        for &at in addrs {
            match self.by_probe_addr.get(&at) {
                Some(&i) if self.sites[i].kind == site_kind::RET => existing += 1,
                Some(_) => return 0,
                None => match self.check(world, maps, at, None, Shape::Ret) {
                    Ok(c) if c.trap.is_none() => checked.push(c),
                    _ => return 0,
                },
            }
        }
        let mut n = existing;
        for c in checked {
            if self.add(world, c, site_kind::RET).is_ok() {
                n += 1;
            }
        }
        n
    }

    /// Plans return sites at the `ret`s of the function named `name` (found
    /// in the process's modules) where every one takes a jump; how many.
    fn plan_named_rets(&mut self, world: &mut World, maps: &[Mapping], name: &str) -> usize {
        let Some(addrs) = self.outside_rets(world, maps, name) else {
            return 0;
        };
        self.add_ret_sites(world, maps, &addrs)
    }

    /// Plans the return probe `tag` on the PLT entry at `addr` (`trace
    /// --plt`; link-time `link`, load bias `bias`, module `path`): a site
    /// at the entry (its `jmp *GOT` relocated into the stub), and, since
    /// the call leaves the entry by that jump and returns from the other
    /// module, a continuation site after each direct `call` of the entry
    /// in its module, where the call is seen returning (paired by `rsp`).
    /// A call of the entry through a pointer (its address taken) returns
    /// unseen, counted as missed.
    #[allow(
        clippy::too_many_arguments,
        reason = "the planner's state, the stopped process and the entry's facts"
    )]
    pub(super) fn plan_plt_return(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        tag: usize,
        addr: u64,
        opcode: Option<u8>,
        path: &Path,
        link: u64,
        bias: u64,
    ) -> Result<usize, crate::transport::Error> {
        use crate::transport::{Error, Rule};
        let name = self.import_name(path, link);
        // The entry checked first (its refusal is the error), added last.
        let entry = match self.by_probe_addr.get(&addr) {
            Some(&i) if self.sites[i].kind == site_kind::PROBE => Ok(i),
            Some(_) => {
                return Err(Error::refused_at(
                    Rule::Patch,
                    addr,
                    "is a return site of another function",
                ));
            }
            None => Err(self.check(world, maps, addr, opcode, Shape::Probe)?),
        };
        // Both: the `ret`s of the function it leads to see every return
        // (also of calls that reach the entry by a tail jump, `jmp
        // f@plt`), where every one takes a jump; the continuations see the
        // returns of its direct calls whatever that function is.
        let mut conts = self.plan_continuations(world, maps, path, bias, link, &name, false, false);
        let rets = self.plan_import_rets(world, maps, path, link, &name);
        if name == "swapcontext" {
            // A `swapcontext` call is resumed by the `ret` of whatever
            // restores its context: another `swapcontext`, or
            // `setcontext` (a finished context's `uc_link`, or a call of
            // its own), whose `ret`s are return sites too.
            self.plan_named_rets(world, maps, "setcontext");
        }
        if rets == 0 {
            // The calls whose next instruction takes no jump: a trap there
            // (a stop per return, as ptrace does it) rather than a return
            // unseen or a library call left untraced.
            conts = self.plan_continuations(world, maps, path, bias, link, &name, false, true);
        }
        if conts == 0 && rets == 0 {
            return Err(Error::refused(
                Rule::Returns,
                Some(addr),
                format!(
                    "{name}@plt in {}: no direct call of it where a jump fits after the call, \
                     where its returns would be seen: --transport inproc cannot observe its \
                     returns; use --transport ptrace",
                    path.display()
                ),
            ));
        }
        let i = match entry {
            Ok(i) => i,
            Err(c) => self.add(world, c, site_kind::PROBE)?,
        };
        let s = &mut self.sites[i];
        if !s.ret_tags.contains(&tag) {
            s.ret_tags.push(tag);
        }
        Ok(i)
    }
}
