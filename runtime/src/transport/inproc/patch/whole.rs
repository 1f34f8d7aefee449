//! A return probe's function run as a relocated copy of the whole
//! function, its `ret`s instrumented inline (`agent_loader::whole`), when
//! one of its `ret`s would otherwise trap: the entry's window jumps to a
//! stub that dispatches the entry and goes on in the copy, whose `ret`s
//! jump to return stubs of their own (return sites with no window). Its
//! `call`s push the original's return addresses (the copy's addresses are
//! never a return address on the stack), and a window at each of those
//! addresses in the original, and at each instruction a branch from
//! outside the function lands on, jumps back to the copy (a redirect: no
//! dispatch), planned with the window rules like any. The copy lives in a
//! stub area and stays mapped as the stubs do; the entry's window and the
//! redirects are written, journaled and restored.

use agent_abi::site_kind;
use agent_loader::stub::{self, Site};
use agent_loader::whole::{self, Whole};
use agent_loader::{nearjump, window::Function};

use super::Shape;
use super::check::Checked;
use super::stubs::AREA_BYTES;
use super::{Cave, Patcher, Planned};
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::code::ModuleCode;
use crate::transport::inproc::plans::CopyKey;
use crate::transport::inproc::world::World;
use crate::transport::{Error, Rule};

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
    /// The sites of the jumps back into the copy at its calls' return
    /// addresses (windows of their own, forgotten with their module).
    pub(super) redirects: Vec<usize>,
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
    /// The windows checked at the return addresses of its calls and where
    /// branches from outside land, for the jumps back into the copy (not
    /// added), each with the instruction of the original it goes on at in
    /// the copy: its own address, or (a far jump from outside rewritten)
    /// the jump's target.
    redirects: Vec<(Checked, u64)>,
    /// The continuation sites (not patched yet) at the return addresses
    /// of its calls whose bytes its redirects took: (the address, the
    /// site), dispatched on the way back into the copy.
    conts: Vec<(u64, usize)>,
    /// Its module and load bias: its plans keep the copy and its return
    /// stubs.
    module: Option<(std::sync::Arc<ModuleCode>, u64)>,
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
        world: &mut World,
        maps: &[Mapping],
        addr: u64,
        entry: Option<&Checked>,
        rets: &mut Vec<Checked>,
        name: &str,
    ) -> Option<Candidate> {
        let entry = entry.filter(|e| e.trap.is_none())?;
        let (start, end) = self.function_range(maps, addr)?;
        let own = |c: &Checked| (start..end).contains(&c.site.probe);
        // One of its `ret`s traps: checked now, or planned before as the
        // return site of a function that jumps there (not patched yet).
        let trapped_before = || {
            self.trapped_rets.range(start..end).next().is_some()
                && self
                    .by_window
                    .starting_in(start, end)
                    .map(|(_, i)| &self.sites[i])
                    .any(|s| s.kind == site_kind::RET && s.trap.is_some() && !s.patched)
        };
        if start != addr || !(rets.iter().any(|c| own(c) && c.trap.is_some()) || trapped_before()) {
            return None;
        }
        let found = self.copy_rule(maps, addr).and_then(|w| {
            let taken = self.copy_refusal(&w, rets, start, end)?;
            // Last: the jumps back from the original's return addresses.
            let (redirects, conts) = self.redirects(world, maps, &w, &entry.site)?;
            Ok((w, taken, redirects, conts))
        });
        let (whole, taken, redirects, conts) = match found {
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
            redirects,
            conts,
            module: entry.module.clone(),
        })
    }

    /// The windows at the return addresses of the calls of `whole` inside
    /// it and at the instructions branches from outside it land on (for
    /// the jumps back into its copy), checked as a probe's are and
    /// clear of the entry's window `entry` and of each other; why not (a
    /// process with CET shadow stacks, where a pushed return address is
    /// not a call's; a window refused, or one that would trap).
    fn redirects(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        whole: &Whole,
        entry: &Site,
    ) -> Result<Redirects, String> {
        let returns = whole.returns_inside();
        if !whole.calls.is_empty() && self.shadow_stacks(world.pid()) {
            return Err(format!(
                "it calls (at {:#x}), and the process has CET shadow stacks, where the copy's \
                 push of a return address and jump is no call",
                whole.calls[0].0
            ));
        }
        let mut out: Vec<(Checked, u64)> = Vec::with_capacity(returns.len());
        let mut conts = Vec::new();
        let mut refusal = None;
        for next in returns {
            let call = whole.calls.iter().find(|&&(_, n)| n == next);
            // A continuation site there gives its bytes up to the redirect
            // (`check`), and is dispatched on the way back into the copy.
            let cont = self
                .by_probe_addr
                .get(&next)
                .copied()
                .filter(|&i| self.sites[i].kind == site_kind::CONT && !self.sites[i].patched);
            let what = match call {
                Some((call, _)) => {
                    format!("the return address {next:#x} of its `call` at {call:#x}")
                }
                None => format!("{next:#x}, where a branch from outside it lands,"),
            };
            let why = match self.check(world, maps, next, None, Shape::Probe) {
                Ok(c) => {
                    let clash = std::iter::once(entry)
                        .chain(out.iter().map(|o| &o.0.site))
                        .find(|o| overlap(o, &c.site))
                        .map(|o| o.addr);
                    let why = if c.trap.is_some() {
                        Some(c.trap.as_ref().map_or(String::new(), |t| t.1.clone()))
                    } else {
                        clash.map(|o| format!("its window meets the one at {o:#x}"))
                    };
                    if why.is_none() {
                        out.push((c, next));
                        if let Some(i) = cont.filter(|&i| self.sites[i].site.len == 0) {
                            conts.push((next, i));
                        }
                        continue;
                    }
                    self.release(&c);
                    why
                }
                Err(e) => Some(e.to_string()),
            };
            // Where only branches from outside land: those jumps rewritten
            // to go to the copy, when they are all far jumps.
            if call.is_none() {
                let taken: Vec<Site> = std::iter::once(entry.clone())
                    .chain(out.iter().map(|o| o.0.site.clone()))
                    .collect();
                match self.outside_jumps(world, maps, whole, next, &taken) {
                    Ok(jumps) => {
                        out.extend(jumps.into_iter().map(|c| (c, next)));
                        continue;
                    }
                    Err(no) => {
                        refusal = why.map(|w| {
                            format!("{what} takes no jump back into the copy ({w}; {no})")
                        });
                        break;
                    }
                }
            }
            refusal = why.map(|w| format!("{what} takes no jump back into the copy ({w})"));
            break;
        }
        if let Some(why) = refusal {
            for (c, _) in &out {
                self.release(c);
            }
            return Err(why);
        }
        Ok((out, conts))
    }

    /// The windows of the far jumps from outside `whole` that land on
    /// `next`, each exactly the jump's bytes, checked clear of the windows
    /// `taken` (and of each other), when they are all the branches from
    /// outside there; else why not.
    fn outside_jumps(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        whole: &Whole,
        next: u64,
        taken: &[Site],
    ) -> Result<Vec<Checked>, String> {
        let (module, link, bias) = self.module_link(maps, next)?;
        let all = module.targets.2.get(&link).copied().unwrap_or(0) as usize;
        let outside = all.saturating_sub(whole.branches_to(next));
        let mut out: Vec<Checked> = Vec::new();
        let mut no = None;
        for s_link in module.far_jumps_to(link) {
            let s = s_link.wrapping_add(bias);
            if (whole.start..whole.end).contains(&s)
                || !super::fragments::far_jump_at(&module, s_link, bias, next)
            {
                continue;
            }
            match self.check(world, maps, s, None, Shape::Probe) {
                Ok(c) => {
                    let clear = c.trap.is_none()
                        && c.cave.is_none()
                        && c.site.addr == s
                        && c.site.len == c.orig.len()
                        && !taken
                            .iter()
                            .chain(out.iter().map(|o| &o.site))
                            .any(|o| overlap(o, &c.site));
                    if clear {
                        out.push(c);
                        continue;
                    }
                    self.release(&c);
                    no = Some(format!("the jump at {s:#x} cannot be sent to the copy"));
                }
                Err(e) => {
                    no = Some(format!(
                        "the jump at {s:#x} cannot be sent to the copy: {e}"
                    ))
                }
            }
            break;
        }
        if no.is_none() && out.len() != outside {
            no = Some(format!(
                "{} of the {outside} branches from outside there are far jumps",
                out.len()
            ));
        }
        match no {
            Some(no) => {
                for c in &out {
                    self.release(c);
                }
                Err(no)
            }
            None => Ok(out),
        }
    }

    /// Gives up what checking `c` reserved (a near jump's cave).
    pub(super) fn release(&mut self, c: &Checked) {
        if let Some((addr, _, _)) = &c.cave {
            self.caves.remove(addr);
        }
    }

    /// Whether the process `pid` uses CET shadow stacks
    /// (`x86_Thread_features:` in its `/proc/PID/status` names `shstk`),
    /// read once per process.
    fn shadow_stacks(&mut self, pid: i32) -> bool {
        *self.shstk.get_or_insert_with(|| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                s.lines()
                    .filter_map(|l| l.strip_prefix("x86_Thread_features:"))
                    .any(|f| f.split_whitespace().any(|w| w == "shstk"))
            })
        })
    }

    /// The run-time range of the function containing `addr`.
    fn function_range(&mut self, maps: &[Mapping], addr: u64) -> Option<(u64, u64)> {
        let m = super::mapping_of(maps, addr)?;
        let (_, module) = self.module_of_mapping(m).ok()?;
        let link = module.vaddr_of_offset(addr - m.start + m.offset)?;
        let f = module.function(link, addr.wrapping_sub(link))?;
        Some((f.start, f.start + f.code.len() as u64))
    }

    /// The module mapped at run-time address `addr`, the address's
    /// link-time one and the module's load bias; why not.
    fn module_link(
        &mut self,
        maps: &[Mapping],
        addr: u64,
    ) -> Result<(std::sync::Arc<ModuleCode>, u64, u64), String> {
        let m = super::mapping_of(maps, addr).ok_or("not mapped")?;
        let (_, module) = self.module_of_mapping(m).map_err(|e| e.to_string())?;
        let link = module
            .vaddr_of_offset(addr - m.start + m.offset)
            .ok_or("not in a loaded segment")?;
        Ok((module, link, addr.wrapping_sub(link)))
    }

    /// The function entered at `addr` decoded for a copy, or why the rules
    /// refuse it.
    fn copy_rule(&mut self, maps: &[Mapping], addr: u64) -> Result<Whole, String> {
        let (module, link, bias) = self.module_link(maps, addr)?;
        let f = module.function(link, bias).ok_or("no function there")?;
        let func = Function {
            start: f.start,
            code: f.code,
            bias,
        };
        let tables = super::copy_tables::own_tables(&module, &func);
        let mut w = whole::analyse(func, &module.targets, &module.tail_jumps, &tables)?;
        // Its tables' entries: entered from outside too where a jump from
        // outside the function lands there (its own tables' entries and
        // other branches are one count in the module's targets).
        for at in w.table_targets() {
            if super::copy_tables::entered_from_outside(&module, &w, at, bias) {
                w.entered.push(at);
            }
        }
        w.entered.sort_unstable();
        w.entered.dedup();
        // An exception caught in it (or a cleanup) resumes at a landing
        // pad in the original, past the copy's return stubs.
        if let Some(&(c, _)) = w.calls.first()
            && module
                .elf()
                .has_landing_pads(w.start.wrapping_sub(bias), w.end.wrapping_sub(bias))
        {
            return Err(format!(
                "it calls (at {c:#x}) and has exception landing pads (an LSDA in its unwind \
                 entry), where the unwinder would resume in the original"
            ));
        }
        Ok(w)
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
        // No other window inside it (a probe's would never run), but a
        // continuation site not patched yet at the return address of one
        // of its calls (its redirect's, then: `redirects`).
        let returns = whole.returns_inside();
        if let Some(&(at, _)) = self
            .by_window
            .near_sorted(start, end)
            .iter()
            .find(|&&(at, i)| {
                let s = &self.sites[i];
                let cont = s.kind == site_kind::CONT
                    && !s.patched
                    && whole.calls.iter().any(|&(_, n)| n == s.site.probe)
                    && returns.contains(&s.site.probe);
                at + s.site.len as u64 > start && !taken.contains(&i) && s.site.len > 0 && !cont
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
            Ok((at, returns)) => {
                // Why a `ret` had no window: one held, else one planned
                // before by a function that jumps there.
                let (ret, why) = c
                    .held
                    .iter()
                    .find_map(|h| Some((h.site.probe, h.trap.as_ref()?.1.clone())))
                    .or_else(|| {
                        c.taken.iter().find_map(|&i| {
                            let s = &self.sites[i];
                            Some((s.site.probe, s.trap.clone()?))
                        })
                    })
                    .unwrap_or_default();
                for &i in &c.taken {
                    // Its trap, if any, is neither written nor said.
                    self.retire(i);
                }
                for h in &c.held {
                    if let Some((addr, _, _)) = &h.cave {
                        self.caves.remove(addr);
                    }
                }
                let rets: Vec<String> = c.whole.rets.iter().map(|r| format!("{r:#x}")).collect();
                let calls = match returns.len() {
                    0 => String::new(),
                    n => format!(
                        "; {n} jump{} back into the copy at ({}), where its calls return or \
                         branches from outside it land",
                        if n == 1 { "" } else { "s" },
                        returns
                            .iter()
                            .map(|r| format!("{r:#x}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                let tables = match c.whole.tables.len() {
                    0 => String::new(),
                    n => format!(
                        "; its jump table{} at ({}) copied with it",
                        if n == 1 { "" } else { "s" },
                        c.whole
                            .tables
                            .iter()
                            .map(|t| format!("{:#x}", t.addr))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                self.near_notes.push(format!(
                    "{:#x} {}: its `ret`s ({}) run in a relocated copy of the whole function at \
                     {at:#x}, each a jump to its return stub (the `ret` at {ret:#x} \
                     {why}){calls}{tables}",
                    c.whole.start,
                    c.name,
                    rets.join(", ")
                ));
                Ok(())
            }
            Err(why) => {
                for (r, _) in &c.redirects {
                    self.release(r);
                }
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
    /// areas, the entry site `entry` sent to the copy, the redirects at
    /// its calls' return addresses added; its address, and the addresses
    /// redirected.
    fn make_copy(
        &mut self,
        world: &mut World,
        entry: usize,
        c: &Candidate,
    ) -> Result<(u64, Vec<u64>), String> {
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
            // Why no copy, in words (a note of the trap instead).
            let (area, at, code) = self
                .stub_for(world, &site, id, c.module.as_ref())
                .map_err(|e| e.to_string())?;
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
        // The copy an earlier run kept for the same inputs, else made now
        // (and kept).
        let key = |base: u64, at: u64| {
            c.module.as_ref().map(|(m, bias)| {
                let key = CopyKey {
                    link: c.whole.start.wrapping_sub(*bias),
                    bias: *bias,
                    window: (site.addr, site.len as u32, site.displaced.len() as u32),
                    id: entry as u32,
                    base,
                    at,
                    ret_stubs: ret_stubs.clone(),
                };
                (m, key)
            })
        };
        let kept = std::cell::Cell::new(false);
        let (area, at, code) = self.place_copy(world, &site, cave, |base, at| {
            if let Some((m, k)) = key(base, at)
                && let Some(copy) = m.kept_copy(&k)
            {
                kept.set(true);
                return Ok(copy);
            }
            kept.set(false);
            whole::generate(&site, &c.whole, &ret_stubs, entry as u32, base, at)
                .map_err(|e| format!("{e:#}"))
        })?;
        if kept.get() {
            self.copies_kept += 1;
        } else if let Some((m, k)) = key(self.areas[area].base, at) {
            m.keep_copy(k, &code);
        }
        let whole::Copy { code, returns } = code;
        let a = &mut self.areas[area];
        let off = (at - a.base) as usize;
        a.code[off..off + code.len()].copy_from_slice(&code);
        a.next = at - a.base + code.len() as u64;
        // Each redirect's jump (and its cave's) to the copy's instruction,
        // through the stub of the continuation site it took the place of.
        let mut redirects = Vec::with_capacity(c.redirects.len());
        for (r, goes_on) in &c.redirects {
            let mut to = returns
                .iter()
                .find(|&&(n, _)| n == *goes_on)
                .map(|&(_, to)| to)
                .ok_or_else(|| format!("no copy of the instruction at {goes_on:#x}"))?;
            if let Some(&(_, i)) = c.conts.iter().find(|&&(n, _)| n == *goes_on) {
                to = self.cont_stub(world, i, *goes_on, to)?;
            }
            let (patch, cave) = match &r.cave {
                Some((addr, orig, _)) => (
                    nearjump::near_patch(&r.site, *addr)
                        .ok_or_else(|| format!("the cave at {addr:#x} is out of reach"))?,
                    Some(Cave {
                        addr: *addr,
                        orig: orig.clone(),
                        patch: nearjump::cave_patch(*addr, to).ok_or_else(|| {
                            format!("the copy at {to:#x} is out of reach of the cave at {addr:#x}")
                        })?,
                    }),
                ),
                // A far jump from outside: the same jump, to the copy.
                None if *goes_on != r.site.addr => (
                    super::fragments::jump_to(&r.orig, r.site.addr, to)
                        .ok_or_else(|| format!("the copy at {to:#x} is out of reach"))?,
                    None,
                ),
                None => (
                    stub::site_patch(&r.site, to).map_err(|e| e.to_string())?,
                    None,
                ),
            };
            redirects.push(Planned {
                site: r.site.clone(),
                tags: Vec::new(),
                ret_tags: Vec::new(),
                kind: site_kind::RET,
                orig: r.orig.clone(),
                patch,
                inode: r.inode,
                patched: false,
                trap: None,
                stub: to,
                cave,
                // A redirect is no return site of the statistics.
                ret_of: None,
            });
        }
        let redirected: Vec<u64> = redirects.iter().map(|r| r.site.addr).collect();
        let first_redirect = self.sites.len();
        for r in redirects {
            self.push_site(r);
        }
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
        // By start (functions do not overlap): `outside_copies` looks one
        // up rather than scanning them all at every window checked.
        let k = self.copies.partition_point(|o| o.start < c.whole.start);
        self.copies.insert(
            k,
            Copied {
                start: c.whole.start,
                end: c.whole.end,
                name: c.name.clone(),
                entry,
                rets: (first..first + c.whole.rets.len()).collect(),
                redirects: (first_redirect..first_redirect + redirected.len()).collect(),
            },
        );
        Ok((at, redirected))
    }

    /// The stub of continuation site `i` (at `next`, its window given up
    /// to a redirect) that dispatches it and goes on at `to` in the copy;
    /// its address.
    fn cont_stub(
        &mut self,
        world: &mut World,
        i: usize,
        next: u64,
        to: u64,
    ) -> Result<u64, String> {
        let site = Site {
            probe: next,
            addr: to,
            displaced: Vec::new(),
            len: 0,
            ret: None,
        };
        let (area, at, code) = self
            .stub_for(world, &site, i as u32, None)
            .map_err(|e| e.to_string())?;
        self.areas[area].put(at, &code);
        self.sites[i].stub = at;
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
        generate: impl Fn(u64, u64) -> Result<whole::Copy, String>,
    ) -> Result<(usize, u64, whole::Copy), String> {
        let from = cave.unwrap_or(site.addr);
        let reaches = |at: u64| {
            i32::try_from((at as i64).wrapping_sub((from + stub::JMP_LEN as u64) as i64)).is_ok()
        };
        let fits =
            |base: u64, at: u64, c: &whole::Copy| at - base + c.code.len() as u64 <= AREA_BYTES;
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
        self.new_area(world, from).map_err(|e| e.to_string())?;
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
            return Err(format!("no room for a copy of {} bytes", code.code.len()));
        }
        Ok((i, at, code))
    }

    /// Refuses a window at `addr` inside a function that runs as a copy
    /// (but at its entry): the original's code there never runs.
    pub(super) fn outside_copies(&self, addr: u64) -> Result<(), Error> {
        // The copies are sorted by start and do not overlap: only the last
        // to start before `addr` may hold it.
        let k = self.copies.partition_point(|c| c.start < addr);
        match k
            .checked_sub(1)
            .map(|k| &self.copies[k])
            .filter(|c| addr < c.end)
        {
            Some(c) => Err(Error::refused_at(
                Rule::Patch,
                addr,
                format_args!(
                    "is inside {}, whose calls run a relocated copy of it (its `ret`s have no \
                     room for a jump)",
                    c.name
                ),
            )),
            None => Ok(()),
        }
    }

    /// The sites of the copies whose entry's site is in `gone` (its module
    /// unmapped): their return sites forgotten too, added to `gone` (their
    /// redirects, windows in the same module, are there already).
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
            debug_assert!(c.redirects.iter().all(|i| gone.contains(i)));
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

/// The redirects of a copy (each with the instruction it goes on at) and
/// the continuation sites they took the place of.
type Redirects = (Vec<(Checked, u64)>, Vec<(u64, usize)>);

/// Whether the windows of `a` and `b` meet.
fn overlap(a: &Site, b: &Site) -> bool {
    a.addr < b.addr + b.len as u64 && b.addr < a.addr + a.len as u64
}
