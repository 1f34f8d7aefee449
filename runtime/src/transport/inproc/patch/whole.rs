//! A return probe's function run as a relocated copy of the whole
//! function, its `ret`s instrumented inline (`agent_loader::whole`), when
//! one of its `ret`s would otherwise trap: the entry's window jumps to a
//! stub that dispatches the entry and goes on in the copy, whose `ret`s
//! jump to return stubs of their own (return sites with no window). Only
//! a function with no `call` is copied (the copy's addresses are then
//! never a return address on the stack). The copy lives in a stub area
//! and stays mapped as the stubs do; only the entry's window is written,
//! journaled and restored.

use agent_abi::site_kind;
use agent_loader::stub::{self, Site};
use agent_loader::whole::{self, Whole};
use agent_loader::{nearjump, window::Function};

use super::check::Checked;
use super::stubs::AREA_BYTES;
use super::{Patcher, Planned, mapping_of};
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::world::World;

/// A function run as a relocated copy.
#[derive(Clone, Debug)]
pub(super) struct Copied {
    /// Run-time range of the original.
    pub(super) start: u64,
    pub(super) end: u64,
    /// Its name, for the refusals of windows inside it.
    name: String,
    /// The site of its entry, and the return sites of its `ret`s.
    pub(super) entry: usize,
    pub(super) rets: Vec<usize>,
}

/// A function found eligible for a copy while its return probe is
/// planned: what `plan_return` adds once the entry has its site.
pub(super) struct Candidate {
    whole: Whole,
    name: String,
    /// The windows of its `ret`s checked (one at least a trap), not added.
    held: Vec<Checked>,
    /// The return sites other functions planned at its `ret`s (not
    /// patched: they tail-call it), given up to the copy's.
    taken: Vec<usize>,
}

impl Patcher {
    /// Whether the function entered at `addr` (its entry's window
    /// `entry`, its `ret`s' windows checked among `rets`) runs as a copy:
    /// when one of its `ret`s would trap and the function is eligible,
    /// those windows are taken out of `rets`. Otherwise the trap stays,
    /// the reason added to its note (none when the entry traps too: no
    /// copy can be entered then).
    pub(super) fn copy_candidate(
        &mut self,
        maps: &[Mapping],
        addr: u64,
        entry: Option<&Checked>,
        rets: &mut Vec<Checked>,
        name: &str,
    ) -> Option<Candidate> {
        entry.filter(|e| e.trap.is_none())?;
        let (start, end) = self.function_range(maps, addr)?;
        let own = |c: &Checked| (start..end).contains(&c.site.probe);
        if start != addr || !rets.iter().any(|c| own(c) && c.trap.is_some()) {
            return None;
        }
        let found = self.copy_rule(maps, addr).and_then(|w| {
            let taken = self.copy_refusal(&w, rets, start, end)?;
            // Last: the one rule a copy could do without if calls pushed
            // the original's return addresses.
            if let Some(c) = w.first_call {
                return Err(format!(
                    "it calls (at {c:#x}), and a return address into a copy must never be on \
                     the stack"
                ));
            }
            Ok((w, taken))
        });
        let (whole, taken) = match found {
            Ok(f) => f,
            Err(why) => {
                for c in rets.iter_mut().filter(|c| own(c)) {
                    say_why_not(c, &why);
                }
                return None;
            }
        };
        let (held, kept): (Vec<Checked>, Vec<Checked>) =
            std::mem::take(rets).into_iter().partition(own);
        *rets = kept;
        Some(Candidate {
            whole,
            name: name.to_string(),
            held,
            taken,
        })
    }

    /// The run-time range of the function containing `addr`.
    fn function_range(&mut self, maps: &[Mapping], addr: u64) -> Option<(u64, u64)> {
        let m = mapping_of(maps, addr)?;
        let path = crate::proc::procmaps::canonical(std::path::Path::new(&m.path));
        let module = self.module(&path).as_ref().ok()?;
        let link = module.vaddr_of_offset(addr - m.start + m.offset)?;
        let f = module.function(link, addr.wrapping_sub(link))?;
        Some((f.start, f.start + f.code.len() as u64))
    }

    /// The function entered at `addr` decoded for a copy, or why the rules
    /// refuse it.
    fn copy_rule(&mut self, maps: &[Mapping], addr: u64) -> Result<Whole, String> {
        let m = mapping_of(maps, addr).ok_or("not mapped")?;
        let path = crate::proc::procmaps::canonical(std::path::Path::new(&m.path));
        let module = self.module(&path).as_ref().map_err(Clone::clone)?.clone();
        let link = module
            .vaddr_of_offset(addr - m.start + m.offset)
            .ok_or("not in a loaded segment")?;
        let bias = addr.wrapping_sub(link);
        let f = module.function(link, bias).ok_or("no function there")?;
        let func = Function {
            start: f.start,
            code: f.code,
            bias,
        };
        whole::analyse(func, &module.targets)
    }

    /// Why the sites planned so far keep `whole` from running as a copy
    /// (its `ret`s' windows checked among `rets`), or the return sites
    /// planned at its `ret`s it takes over.
    fn copy_refusal(
        &self,
        whole: &Whole,
        rets: &[Checked],
        start: u64,
        end: u64,
    ) -> Result<Vec<usize>, String> {
        let mut taken = Vec::new();
        for &r in &whole.rets {
            if rets.iter().any(|c| c.site.probe == r) {
                continue;
            }
            match self.by_probe_addr.get(&r).map(|&i| (i, &self.sites[i])) {
                Some((i, s)) if s.kind == site_kind::RET && !s.patched => taken.push(i),
                Some(_) => return Err(format!("the `ret` at {r:#x} has a site of its own")),
                None => {
                    return Err(format!(
                        "the `ret` at {r:#x} is none its calls were found returning through"
                    ));
                }
            }
        }
        // No other window inside it (a probe's would never run).
        if let Some(&(at, _)) = self
            .by_window
            .range((start.saturating_sub(self.longest), 0)..(end, 0))
            .find(|&&(at, i)| {
                let s = &self.sites[i];
                at + s.site.len as u64 > start && !taken.contains(&i) && s.site.len > 0
            })
        {
            return Err(format!("a site's window at {at:#x} is inside it"));
        }
        Ok(taken)
    }

    /// Makes the copy of `c`'s function, entered from the site `entry`
    /// (added): the return stubs of its `ret`s, then the copy, the
    /// entry's jump sent to it. When that fails, the `ret`s' windows held
    /// are added as they were checked (traps), with the reason.
    pub(super) fn add_copy(
        &mut self,
        world: &mut World,
        entry: usize,
        c: Candidate,
    ) -> Result<(), crate::transport::Error> {
        match self.make_copy(world, entry, &c) {
            Ok(at) => {
                for &i in &c.taken {
                    self.retire(i);
                    let s = &mut self.sites[i];
                    if s.trap.take().is_some() {
                        let at = s.site.addr;
                        self.trap_funcs.remove(&at);
                        // Its trap is not said either.
                        let head = format!("{at:#x} ");
                        self.notes.retain(|(_, n)| !n.starts_with(&head));
                    }
                }
                for h in &c.held {
                    if let Some((addr, _, _)) = &h.cave {
                        self.caves.remove(addr);
                    }
                }
                let rets: Vec<String> = c.whole.rets.iter().map(|r| format!("{r:#x}")).collect();
                let (ret, why) = c
                    .held
                    .iter()
                    .find_map(|h| Some((h.site.probe, h.trap.as_ref()?.1.as_str())))
                    .unwrap_or_default();
                self.near_notes.push(format!(
                    "{:#x} {}: its `ret`s ({}) run in a relocated copy of the whole function at \
                     {at:#x}, each a jump to its return stub (the `ret` at {ret:#x} {why})",
                    c.whole.start,
                    c.name,
                    rets.join(", ")
                ));
                Ok(())
            }
            Err(why) => {
                for mut h in c.held {
                    if h.trap.is_some() {
                        say_why_not(&mut h, &why);
                    }
                    self.add(world, h, site_kind::RET)?;
                }
                Ok(())
            }
        }
    }

    /// The return stubs and the copy of `c`'s function written into stub
    /// areas, the entry site `entry` sent to the copy; its address.
    fn make_copy(&mut self, world: &mut World, entry: usize, c: &Candidate) -> Result<u64, String> {
        let mut ret_stubs = Vec::with_capacity(c.whole.rets.len());
        let first = self.sites.len();
        for &r in &c.whole.rets {
            let insn = c
                .whole
                .insns
                .iter()
                .find(|i| i.ip() == r)
                .copied()
                .ok_or_else(|| format!("no `ret` at {r:#x}"))?;
            let site = Site {
                probe: r,
                addr: r,
                displaced: Vec::new(),
                len: 0,
                ret: Some(insn),
            };
            let id = self.sites.len() as u32;
            let (area, at, code) = self.stub_for(world, &site, id, None)?;
            let a = &mut self.areas[area];
            let off = (at - a.base) as usize;
            a.code[off..off + code.len()].copy_from_slice(&code);
            a.next = at - a.base + code.len() as u64;
            ret_stubs.push((r, at));
            // No window, no bytes: what `add_whole`'s return site is.
            self.push_site(Planned::bare_return(site, at));
        }
        let e = &self.sites[entry];
        let (site, cave) = (e.site.clone(), e.cave.as_ref().map(|c| c.addr));
        let (area, at, code) = self.place_copy(world, &site, cave, |base, at| {
            whole::generate(&site, &c.whole, &ret_stubs, entry as u32, base, at)
                .map_err(|e| format!("{e:#}"))
        })?;
        let a = &mut self.areas[area];
        let off = (at - a.base) as usize;
        a.code[off..off + code.len()].copy_from_slice(&code);
        a.next = at - a.base + code.len() as u64;
        let e = &mut self.sites[entry];
        e.stub = at;
        match &mut e.cave {
            Some(cv) => {
                cv.patch = nearjump::cave_patch(cv.addr, at)
                    .ok_or_else(|| format!("the copy at {at:#x} is out of reach of the cave"))?;
            }
            None => e.patch = stub::site_patch(&site, at).map_err(|e| e.to_string())?,
        }
        for (k, &r) in c.whole.rets.iter().enumerate() {
            self.by_probe_addr.insert(r, first + k);
        }
        self.copies.push(Copied {
            start: c.whole.start,
            end: c.whole.end,
            name: c.name.clone(),
            entry,
            rets: (first..first + c.whole.rets.len()).collect(),
        });
        Ok(at)
    }

    /// Room for a copy (`generate(area base, address)` its code) in a
    /// stub area within rel32 reach of the window of `site` (and of its
    /// near jump's cave at `cave`), a new area made when none has it.
    fn place_copy(
        &mut self,
        world: &mut World,
        site: &Site,
        cave: Option<u64>,
        generate: impl Fn(u64, u64) -> Result<Vec<u8>, String>,
    ) -> Result<(usize, u64, Vec<u8>), String> {
        let from = cave.unwrap_or(site.addr);
        let reaches = |at: u64| {
            i32::try_from((at as i64).wrapping_sub((from + stub::JMP_LEN as u64) as i64)).is_ok()
        };
        let fits = |base: u64, at: u64, code: &[u8]| at - base + code.len() as u64 <= AREA_BYTES;
        let mut last = String::new();
        for i in (0..self.areas.len()).rev() {
            let a = &self.areas[i];
            let at = a.base + a.next.next_multiple_of(16);
            if !reaches(at) || at >= a.base + AREA_BYTES {
                continue;
            }
            match generate(a.base, at) {
                Ok(code) if fits(a.base, at, &code) => return Ok((i, at, code)),
                Ok(_) => {}
                Err(e) => last = e,
            }
        }
        self.new_area(world, from)?;
        let i = self.areas.len() - 1;
        let base = self.areas[i].base;
        let at = base + super::stubs::STUBS_OFF;
        let code = generate(base, at).map_err(|e| {
            if last.is_empty() {
                e
            } else {
                format!("{e} ({last})")
            }
        })?;
        if !fits(base, at, &code) || !reaches(at) {
            return Err(format!("no room for a copy of {} bytes", code.len()));
        }
        Ok((i, at, code))
    }

    /// Refuses a window at `addr` inside a function that runs as a copy
    /// (but at its entry): the original's code there never runs.
    pub(super) fn outside_copies(&self, addr: u64) -> Result<(), String> {
        match self.copies.iter().find(|c| c.start < addr && addr < c.end) {
            Some(c) => Err(format!(
                "{addr:#x} is inside {}, whose calls run a relocated copy of it (its `ret`s have \
                 no room for a jump)",
                c.name
            )),
            None => Ok(()),
        }
    }

    /// The sites of the copies whose entry's site is in `gone` (its module
    /// unmapped): their return sites forgotten too, added to `gone`.
    pub(super) fn drop_copies(&mut self, gone: &mut Vec<usize>) {
        let (dropped, kept): (Vec<Copied>, Vec<Copied>) = std::mem::take(&mut self.copies)
            .into_iter()
            .partition(|c| gone.contains(&c.entry));
        self.copies = kept;
        for c in dropped {
            for i in c.rets {
                let s = &self.sites[i];
                if self.by_probe_addr.get(&s.site.probe) == Some(&i) {
                    self.by_probe_addr.remove(&s.site.probe);
                }
                if !gone.contains(&i) {
                    gone.push(i);
                }
            }
        }
    }
}

/// Adds why no copy takes a `ret` to the note of its trap.
fn say_why_not(c: &mut Checked, why: &str) {
    if let Some((_, note)) = &mut c.trap
        && note.ends_with(')')
    {
        note.pop();
        note.push_str(&format!(
            "; nor a relocated copy of the whole function: {why})"
        ));
    }
}
