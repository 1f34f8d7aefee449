//! Return probes: the function's entry site and a return site at each of
//! its `ret`s and at those of the functions of other modules it
//! tail-calls, every window checked before any is added; the return sites
//! an earlier function took that one window of this function needs,
//! taken back.

use std::path::Path;

use agent_abi::site_kind;
use agent_loader::stub::Site;

use super::Patcher;
use super::Shape;
use super::check::Checked;
use super::outside::OUTSIDE_DEPTH;
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::world::World;
use crate::transport::retsites::ReturnSites;
use crate::transport::{Error, Rule};

/// Sites expected from which the return sites of a module's functions
/// are found ahead of the planning (about 500 return probes).
const RETS_AHEAD_FROM: usize = 1000;

impl Patcher {
    /// Plans the return probe `tag` on the function entered at `addr`: its
    /// entry site, and a return site at each `ret` through which its calls
    /// return (`crate::transport::retsites`). Every window is checked
    /// before any is added: a function with one `ret` that cannot be
    /// patched is refused whole. Returns the entry's site index. The
    /// return sites it adds are the probe's ([`super::Planned::ret_of`]).
    pub(in crate::transport::inproc) fn plan_return(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        tag: usize,
        addr: u64,
        opcode: Option<u8>,
    ) -> Result<usize, Error> {
        let outer = self.ret_owner.replace(tag);
        let planned = self.plan_return_sites(world, maps, tag, addr, opcode);
        self.ret_owner = outer;
        planned
    }

    /// [`Patcher::plan_return`].
    fn plan_return_sites(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        tag: usize,
        addr: u64,
        opcode: Option<u8>,
    ) -> Result<usize, Error> {
        self.read_ahead(maps);
        let m = super::mapping_of(maps, addr)
            .ok_or_else(|| Error::refused_at(Rule::NotExecutable, addr, "is not mapped"))?;
        let file_off = addr - m.start + m.offset;
        let (path, module) = self.module_of_mapping(m)?;
        let link = module.vaddr_of_offset(file_off);
        // Many return probes to plan (a whole program): their functions'
        // return sites found ahead on the other CPU.
        if self.expected >= RETS_AHEAD_FROM
            && let Some(link) = link
            && !self.rets_ahead.contains(path.as_os_str())
        {
            self.rets_ahead.insert(path.as_os_str().to_os_string());
            super::ahead::plan_ahead(&module, link, addr.wrapping_sub(link));
        }
        if let Some(link) = link
            && module.elf().is_plt_entry(link)
        {
            let bias = addr.wrapping_sub(link);
            return self.plan_plt_return(world, maps, tag, addr, opcode, &path, link, bias);
        }
        if !m.exec
            && let Some(link) = link
            && module.elf().is_import_slot(link)
        {
            let bias = addr.wrapping_sub(link);
            return self.plan_got_return(world, maps, tag, addr, &path, link, bias);
        }
        let mut entry = match self.by_probe_addr.get(&addr) {
            Some(_) => None,
            None => Some(self.check(world, maps, addr, opcode, Shape::Probe)),
        };
        // The entry's refusal first, as when it is checked alone.
        let found = match module.return_sites(file_off) {
            Ok(f) => f,
            Err(e) => {
                return Err(entry.and_then(Result::err).unwrap_or_else(|| e.at(addr)));
            }
        };
        // Where the module's GOT sends each function it tail-calls: the
        // implementation an IFUNC resolver chose, which no symbol names
        // (filled at load: the process stopped at its entry point, or
        // running; a slot bound lazily still points at the module's own
        // PLT, where no function starts).
        let bias = link.map_or(0, |link| addr.wrapping_sub(link));
        let slots: Vec<Option<u64>> = found
            .outside
            .iter()
            .map(|name| module.elf().got_slot(name).map(|s| s.wrapping_add(bias)))
            .collect();
        // A function whose `ret` an earlier function took as a return
        // site (it tail-calls this one) and whose entry's window meets
        // that `ret`'s: the two windows become this function's one.
        if matches!(entry, Some(Err(_))) {
            let own: Vec<u64> = found
                .rets
                .iter()
                .filter(|&&off| off >= m.offset && off - m.offset < m.end - m.start)
                .map(|&off| m.start + (off - m.offset))
                .collect();
            if self.absorb_rets(world, maps, addr, opcode, &own) {
                entry = Some(self.check(world, maps, addr, opcode, Shape::Probe));
            }
        }
        let entry = entry.transpose()?;
        let own_rets = !found.rets.is_empty();
        let mut rets = self.own_ret_windows(world, maps, m, &found.rets, &found.function)?;
        let outside = self.outside_ret_windows(world, maps, &found.outside, slots);
        // Calls that leave by a tail call through a pointer return where
        // the function they go to returns: paired there (the agent's
        // tail-call rule) when it is traced, else at the continuation
        // sites planned below, else closed as unwound.
        if !own_rets && !outside.found && !found.never_returns && found.indirect.is_empty() {
            return Err(no_returns(&found.function, &path, addr, outside.refused));
        }
        // An entry too close to a `ret` for two windows: one window for
        // both, if the code between is straight.
        let mut entry = entry.map(|e| (e, false));
        if let Some((e, whole)) = &mut entry
            && rets.iter().any(|r| overlap(&r.site, &e.site))
        {
            let w = self
                .check(world, maps, addr, opcode, Shape::Whole)
                .map_err(|why| {
                    why.context(format_args!(
                        "{} is too short for a jump at its entry and one at its `ret`, and \
                         cannot take one window for both",
                        found.function
                    ))
                })?;
            rets.retain(|r| r.site.probe != w.site.ret.map_or(0, |i| i.ip()));
            *e = w;
            *whole = true;
        }
        disjoint(entry.as_ref().map(|(c, _)| c), &rets, &found.function)?;
        // A `ret` that would trap: the whole function as a copy instead.
        let copy = match &entry {
            Some((e, false)) => {
                self.copy_candidate(world, maps, addr, Some(e), &mut rets, &found.function)
            }
            _ => None,
        };
        for r in rets.into_iter().chain(outside.rets) {
            self.add(world, r, site_kind::RET)?;
        }
        let i = match entry {
            Some((e, false)) => self.add(world, e, site_kind::PROBE)?,
            Some((e, true)) => self.add_whole(world, e)?,
            None => self.by_probe_addr[&addr],
        };
        if let Some(c) = copy {
            self.add_copy(world, i, c)?;
        }
        let s = &mut self.sites[i];
        if s.kind != site_kind::PROBE {
            return Err(Error::refused_at(
                Rule::Patch,
                addr,
                "is a return site of another function",
            ));
        }
        if !s.ret_tags.contains(&tag) {
            s.ret_tags.push(tag);
        }
        self.continue_tail_calls(world, maps, &path, bias, addr, &found, outside.unseen);
        Ok(i)
    }

    /// Takes back the return sites planned (not yet patched) at `rets`,
    /// the `ret`s of the function entered at `addr`, when without them one
    /// window could cover that function's entry and `ret` (what
    /// `plan_return` then plans): they were planned for the calls of
    /// functions that tail-call this one, which return through the return
    /// site planned in their place. Whether it took any.
    fn absorb_rets(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        addr: u64,
        opcode: Option<u8>,
        rets: &[u64],
    ) -> bool {
        let taken: Vec<usize> = rets
            .iter()
            .filter_map(|at| self.by_probe_addr.get(at).copied())
            .filter(|&i| {
                let s = &self.sites[i];
                s.kind == site_kind::RET && !s.patched && s.site.len > 0 && s.trap.is_none()
            })
            .collect();
        if taken.is_empty() {
            return false;
        }
        for &i in &taken {
            let s = &self.sites[i];
            self.by_probe_addr.remove(&s.site.probe);
            self.by_window.remove(s.site.addr, i);
        }
        if self.check(world, maps, addr, opcode, Shape::Whole).is_err() {
            for &i in &taken {
                let s = &self.sites[i];
                self.by_probe_addr.insert(s.site.probe, i);
                self.by_window.insert(s.site.addr, s.site.len, i);
            }
            return false;
        }
        for &i in &taken {
            self.retire(i);
        }
        true
    }

    /// The windows of the `ret`s of `function` (file offsets `found_rets`,
    /// in the mapping `m` of its entry), checked; those that have a return
    /// site already left out.
    fn own_ret_windows(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        m: &Mapping,
        found_rets: &[u64],
        function: &str,
    ) -> Result<Vec<Checked>, Error> {
        let mut rets = Vec::with_capacity(found_rets.len());
        for &off in found_rets {
            if off < m.offset || off - m.offset >= m.end - m.start {
                return Err(Error::refused(
                    Rule::Returns,
                    None,
                    format!(
                        "a `ret` of {function} (file offset {off:#x}) is outside the mapping of \
                         its entry"
                    ),
                ));
            }
            let at = m.start + (off - m.offset);
            match self.by_probe_addr.get(&at) {
                Some(&i) if self.sites[i].kind == site_kind::RET => {}
                Some(_) => {
                    return Err(Error::refused(
                        Rule::Patch,
                        Some(at),
                        format!(
                            "the `ret` at {at:#x} of {function} has a probe of its own, where \
                             its return site would go"
                        ),
                    ));
                }
                None => rets.push(self.check(world, maps, at, None, Shape::Ret)?),
            }
        }
        Ok(rets)
    }

    /// The windows of the `ret`s of the functions of other modules a
    /// function tail-calls (`outside`, by name; `slots`, their GOT slots'
    /// run-time addresses), checked. The `ret`s of the functions of other
    /// modules it tail-calls (`jmp malloc@plt`): its calls that go there
    /// return through them. Taken only where every one of a function's
    /// `ret`s takes a jump (a trap would cost every call of that function
    /// in the process a ptrace stop); otherwise those calls are seen
    /// returning at continuation sites ([`OutsideRets::unseen`]).
    fn outside_ret_windows(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        outside: &[String],
        slots: Vec<Option<u64>>,
    ) -> OutsideRets {
        let mut outside_rets: Vec<Checked> = Vec::new();
        let mut outside_found = false;
        // A function found whose `ret`s were not all taken.
        let mut outside_refused = false;
        // A function whose returns some `ret` taken would not see.
        let mut unseen = false;
        let mut planned: std::collections::HashSet<u64> = std::collections::HashSet::new();
        for (name, slot) in outside.iter().zip(slots) {
            let by_name = self.outside_rets(world, maps, name);
            let mut target = None;
            let Some(addrs) = by_name.or_else(|| {
                let mut w = [0u8; 8];
                let slot = slot?;
                (world.peek(slot, &mut w) == 8).then_some(())?;
                let at = u64::from_le_bytes(w);
                target = Some(at);
                self.rets_at(world, maps, at, OUTSIDE_DEPTH)
            }) else {
                unseen |= !self.never_returns(maps, name);
                continue;
            };
            unseen |= self.outside_partial(name, target);
            let mut checked = Vec::new();
            let mut ok = true;
            for at in addrs {
                match self.by_probe_addr.get(&at) {
                    Some(&i) if self.sites[i].kind == site_kind::RET => {}
                    Some(_) => ok = false,
                    None if planned.contains(&at) => {}
                    None => match self.check(world, maps, at, None, Shape::Ret) {
                        Ok(c) if c.trap.is_none() => checked.push(c),
                        _ => ok = false,
                    },
                }
                if !ok {
                    break;
                }
            }
            outside_refused |= !ok;
            unseen |= !ok;
            if ok {
                outside_found = true;
                for c in checked {
                    if planned.insert(c.site.probe) {
                        outside_rets.push(c);
                    }
                }
            }
        }
        OutsideRets {
            rets: outside_rets,
            found: outside_found,
            refused: outside_refused,
            unseen,
        }
    }

    /// The continuation sites of the function entered at `addr` (`found`,
    /// its return sites; module `path`, load bias `bias`) when it makes a
    /// tail call through a pointer, or one out of the module some of whose
    /// returns no return site sees (`unseen`: [`OutsideRets::unseen`]). A
    /// tail call through a pointer (`agent_loader::tailcall`) may go into
    /// code with no return site, and so may one into a function of another
    /// module whose `ret`s cannot all take a jump, or that leaves in turn
    /// by a jump through a pointer (`jmp __cxa_end_catch@plt`, which ends
    /// in `_Unwind_DeleteException`'s `jmp *%rax`): the instructions its
    /// direct calls return to take the calls it misses.
    #[allow(
        clippy::too_many_arguments,
        reason = "the planner's state, the stopped process and the entry's facts"
    )]
    fn continue_tail_calls(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        path: &Path,
        bias: u64,
        addr: u64,
        found: &ReturnSites,
        unseen: bool,
    ) {
        let tails = match self.modules.get(path.as_os_str()) {
            Some(Ok(module)) => module.tail_calls_through_pointer(found),
            _ => false,
        };
        if tails || unseen {
            let entry_link = addr.wrapping_sub(bias);
            self.plan_continuations(
                world,
                maps,
                path,
                bias,
                entry_link,
                &found.function,
                true,
                false,
            );
        }
    }
}

/// The `ret`s of the functions of other modules a function tail-calls
/// ([`Patcher::outside_ret_windows`]).
struct OutsideRets {
    /// Their windows, checked.
    rets: Vec<Checked>,
    /// Some function's `ret`s were all taken.
    found: bool,
    /// Some function's `ret`s were found, not all taken (one takes no
    /// jump).
    refused: bool,
    /// Some of the calls that go there return where no return site sees
    /// them: a function's `ret`s not found (and it may return), not all
    /// taken, or not all its returns ([`Patcher::outside_partial`]).
    unseen: bool,
}

/// The refusal of `function` (module `path`, entered at `addr`) when no
/// return of it can be seen: no `ret` of its own, and none found of the
/// functions of other modules it tail-calls (`outside_refused`: one of
/// those takes no jump).
fn no_returns(function: &str, path: &Path, addr: u64, outside_refused: bool) -> Error {
    if outside_refused {
        let why = "has no `ret` instruction of its own, and one of the `ret`s of the function of \
                   another module it tail-calls takes no jump (a trap there would stop every call \
                   of that function in the process): --transport inproc cannot observe its \
                   returns; use --transport ptrace";
        return Error::refused(
            Rule::Returns,
            Some(addr),
            format!("{function} in {} {why}", path.display()),
        )
        .alike(format!("it {why}"));
    }
    crate::transport::retsites::no_ret(function, path, "inproc", Some(addr))
}

/// Whether the windows of `a` and `b` meet.
fn overlap(a: &Site, b: &Site) -> bool {
    a.addr < b.addr + b.len as u64 && b.addr < a.addr + a.len as u64
}

/// Refused if two windows of `function` (its entry's, its `ret`s') overlap.
fn disjoint(entry: Option<&Checked>, rets: &[Checked], function: &str) -> Result<(), Error> {
    let windows: Vec<&Site> = entry
        .iter()
        .map(|c| &c.site)
        .chain(rets.iter().map(|c| &c.site))
        .collect();
    // Many windows of a byte or more, sorted by address, overlap only if
    // two neighbours do: every pair is looked at (for the pair said) only
    // then (a function of hundreds of `ret`s had each pair looked at).
    if windows.len() > 8 && windows.iter().all(|w| w.len > 0) {
        let mut sorted: Vec<(u64, u64)> = windows
            .iter()
            .map(|w| (w.addr, w.addr + w.len as u64))
            .collect();
        sorted.sort_unstable();
        if sorted.windows(2).all(|p| p[0].1 <= p[1].0) {
            return Ok(());
        }
    }
    for (k, a) in windows.iter().enumerate() {
        if let Some(b) = windows[k + 1..].iter().find(|b| overlap(a, b)) {
            return Err(Error::refused(
                Rule::Patch,
                Some(a.addr),
                format!(
                    "the windows at {:#x} and {:#x} of {function} overlap",
                    a.addr, b.addr
                ),
            ));
        }
    }
    Ok(())
}
