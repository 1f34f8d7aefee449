//! The patcher: which probes get a jump, where their stubs go, and the
//! writing and restoring of the jumps, always with every thread of the
//! target stopped.
//!
//! At insertion (the target stopped since it was launched or attached), a
//! probe's site is planned: its module's file is read once (functions,
//! branch targets), the window is chosen by the eligibility rules
//! (`agent_loader::window`), the bytes in memory are checked to be the
//! file's, no stopped thread may stand inside the window, and the site's
//! stub is generated in a stub area within rel32 reach (an `r-x` mapping
//! made in the target next to the module, holding the shared trampoline,
//! the slot the agent's `dispatch` address is written to, and the stubs).
//! A site that fails any of this is refused with the reason. Nothing of
//! the program's code changes until [`Patcher::install`]: the stub areas
//! are written, the journal is written and synced, then the jumps.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_abi::site_kind;
use agent_loader::nearjump::{self, CAVE_LEN, NEAR_LEN};
use agent_loader::stub::{self, Site};
use agent_loader::window::{self, Refusal};

use super::code::ModuleCode;
use super::journal::{Entry, Journal};
use super::world::World;
use crate::procmaps::Mapping;

/// Bytes of one stub area (the trampoline and about 3,000 stubs).
const AREA_BYTES: u64 = 256 << 10;
/// Offset of the dispatch slot in an area (after the trampoline).
const SLOT_OFF: u64 = 512;
/// Offset of the first stub.
const STUBS_OFF: u64 = 576;
/// Room below which an area is not tried for another stub (smaller than
/// any stub).
const MIN_STUB_ROOM: u64 = 32;

/// An `r-x` mapping in the target holding stubs.
#[derive(Debug)]
pub(super) struct Area {
    /// Its address.
    pub(super) base: u64,
    /// Its contents as they will be written.
    code: Vec<u8>,
    /// Next free byte.
    next: u64,
}

/// A patched (or to-be-patched) site.
#[derive(Debug)]
pub(super) struct Planned {
    /// The window.
    pub(super) site: Site,
    /// The probes at the site, in insertion order.
    pub(super) tags: Vec<usize>,
    /// Return probes whose function enters here.
    pub(super) ret_tags: Vec<usize>,
    /// `agent_abi::site_kind`.
    pub(super) kind: u32,
    /// The window's bytes in the file (= in memory when planned).
    orig: Vec<u8>,
    /// The jump and its padding.
    patch: Vec<u8>,
    /// Inode of the module's mapping.
    inode: u64,
    /// The jump (or `int3`) is in place.
    pub(super) patched: bool,
    /// No window can go here: an `int3` at the site, the thread moved to
    /// the stub at each trap (`traps`); why no jump.
    pub(super) trap: Option<String>,
    /// The stub's address.
    pub(super) stub: u64,
    /// A near site's cave: its window holds a `jmp rel8` to it.
    pub(super) cave: Option<Cave>,
}

/// The `jmp rel32` to a near site's stub, in padding within rel8 reach of
/// its window (`agent_loader::nearjump`).
#[derive(Debug)]
pub(super) struct Cave {
    /// Its address.
    pub(super) addr: u64,
    /// The padding bytes it replaces (the file's).
    pub(super) orig: Vec<u8>,
    /// The jump.
    patch: Vec<u8>,
}

/// The sites of one process and their stubs.
#[derive(Default)]
pub(super) struct Patcher {
    modules: HashMap<PathBuf, Result<ModuleCode, String>>,
    /// The module files a thread of their own reads ahead
    /// ([`Patcher::read_ahead`]), and where each read ends up.
    ahead: Option<AheadReads>,
    /// The `ret`s of functions of other modules that traced functions
    /// tail-call, by name (`None`: not found, or not decodable).
    outside: HashMap<String, Option<Vec<u64>>>,
    pub(super) areas: Vec<Area>,
    /// Sites by window address.
    pub(super) sites: Vec<Planned>,
    by_probe_addr: HashMap<u64, usize>,
    /// `(window address, site index)` of every site, and the longest
    /// window: the sites a new window could overlap are found without a
    /// scan of all (arming 30,000 sites scanned them for each: seconds).
    by_window: std::collections::BTreeSet<(u64, usize)>,
    longest: u64,
    /// Program counters of the stopped threads (nothing may be patched
    /// under them).
    pub(super) thread_pcs: Vec<(i32, u64)>,
    journal: Option<Journal>,
    /// What planning fell back to, for the user (drained by the
    /// transport): (the function, the site and why).
    pub(super) notes: Vec<(String, String)>,
    /// The journal of the trap sites (the ptrace transport's format).
    trap_journal: Option<crate::transport::ptrace::journal::Journal>,
    /// Sites before this index are in the journal (sites are journaled
    /// as they are added, a library mapped later appending its own).
    journaled: usize,
    /// The same for the trap journal.
    traps_journaled: usize,
    /// The names each module imports (by path), for continuation sites in
    /// the modules that call a traced function.
    imports: HashMap<PathBuf, std::collections::HashSet<String>>,
    /// The caves taken (or reserved by a window checked), by address.
    caves: std::collections::BTreeSet<u64>,
    /// The padding after functions that windows of `ret`s take (checked):
    /// start → end. No cave goes there.
    tails: std::collections::BTreeMap<u64, u64>,
    /// The near sites planned, for `-v` and `WPROBE_DEBUG` (drained by
    /// the transport).
    pub(super) near_notes: Vec<String>,
    /// The function of each trap site (by the trap's address), for the
    /// count of stops at the end.
    pub(super) trap_funcs: HashMap<u64, String>,
}

/// Mappings of `pid` (for planning).
fn mapping_of(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    crate::procmaps::find(maps, addr)
}

/// Whether sites where no 5-byte jump fits may take a near jump to a cave
/// (`WPROBE_NO_NEAR_JUMPS=1`: a trap instead, as before near jumps; for
/// comparisons and for the tests of trap sites).
fn near_jumps() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("WPROBE_NO_NEAR_JUMPS").is_none_or(|v| v.is_empty()))
}

/// Longest run of padding a window takes after its function's end.
const MAX_TAIL: u64 = 64;

/// A cave of `caves` (5 bytes each, by address) meeting `lo..hi`.
fn cave_in(caves: &std::collections::BTreeSet<u64>, lo: u64, hi: u64) -> Option<u64> {
    caves
        .range(lo.saturating_sub(CAVE_LEN as u64 - 1)..hi)
        .next()
        .copied()
}

/// What a window is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A probe's address (`window::plan`).
    Probe,
    /// A `ret` (`window::plan_ret`).
    Ret,
    /// A whole short function, entry through first `ret` (`window::plan_whole`).
    Whole,
}

/// How many modules deep the `ret`s of tail-called functions of other
/// modules are looked for (`operator delete(void*, size_t)` in libstdc++
/// ends in `jmp free@plt`, into libc).
const OUTSIDE_DEPTH: usize = 3;

/// Functions of the C and C++ runtimes declared `noreturn`, whose code
/// may still end in a jump that decoding cannot follow (`longjmp`'s `jmp
/// *%rdx`): a PLT entry leading to one needs no return site.
const NEVER_RETURN: &[&str] = &[
    "abort",
    "exit",
    "_exit",
    "_Exit",
    "quick_exit",
    "longjmp",
    "_longjmp",
    "siglongjmp",
    "__longjmp_chk",
    "pthread_exit",
    "__stack_chk_fail",
    "__assert_fail",
    "__fortify_fail",
    "__chk_fail",
    "err",
    "errx",
    "verr",
    "verrx",
    "__cxa_throw",
    "__cxa_rethrow",
    "_Unwind_Resume",
    "__cxa_bad_cast",
    "__cxa_bad_typeid",
];

/// Module files read on a thread of their own: those not received yet,
/// and the channel each read comes back by.
type AheadReads = (
    std::collections::HashSet<PathBuf>,
    std::sync::mpsc::Receiver<(PathBuf, Result<ModuleCode, String>)>,
);

/// Most continuation sites planned for one function's calls.
const MAX_CONTINUATIONS: usize = 1024;

/// Where a function another module calls by name is entered: a file
/// offset of a module, or, for an IFUNC, the run-time address of the slot
/// where the dynamic linker wrote its resolver's choice (with the
/// resolver's run-time address).
enum Entered {
    Offset(PathBuf, u64),
    Slot(u64, u64),
}

/// A window checked against the process, not yet given a stub.
struct Checked {
    site: Site,
    orig: Vec<u8>,
    inode: u64,
    /// A trap site: its function, and why no jump.
    trap: Option<(String, String)>,
    /// A near site: its cave's address and the bytes there, and why no
    /// 5-byte jump.
    cave: Option<(u64, Vec<u8>, String)>,
}

impl Planned {
    /// The address of the first byte the site's jump (or `int3`) replaces,
    /// and the bytes it replaces.
    pub(super) fn window(&self) -> (u64, Vec<u8>) {
        (self.site.addr, self.orig.clone())
    }
}

impl Patcher {
    /// The code of module file `p`, read at its first need, or received
    /// from the thread that reads it ahead.
    fn module(&mut self, p: &Path) -> &Result<ModuleCode, String> {
        if !self.modules.contains_key(p) {
            if let Some((waiting, rx)) = &mut self.ahead
                && waiting.contains(p)
            {
                while let Ok((q, m)) = rx.recv() {
                    waiting.remove(&q);
                    let done = q == p;
                    self.modules.insert(q, m);
                    if done {
                        break;
                    }
                }
                // The thread ended without it (it cannot: a read's panic).
                waiting.remove(p);
            }
            if !self.modules.contains_key(p) {
                self.modules.insert(p.to_path_buf(), ModuleCode::read(p));
            }
        }
        &self.modules[p]
    }

    /// Starts reading, on a thread of its own, the code of the files the
    /// process maps executable that no one read yet (once per process):
    /// the return probes of one module ask for the others' too (the
    /// functions its functions tail-call, the calls of its PLT entries),
    /// and the process is stopped meanwhile, its CPU free.
    fn read_ahead(&mut self, maps: &[Mapping]) {
        if self.ahead.is_some() {
            return;
        }
        let mut paths: Vec<PathBuf> = Vec::new();
        for (p, _) in Self::exec_files(maps) {
            if !self.modules.contains_key(&p) && !paths.contains(&p) {
                paths.push(p);
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let waiting = paths.iter().cloned().collect();
        let spawned = std::thread::Builder::new()
            .name("wprobe-read".into())
            .spawn(move || {
                for p in paths {
                    let m = ModuleCode::read(&p);
                    if tx.send((p, m)).is_err() {
                        break;
                    }
                }
            });
        self.ahead = Some(match spawned {
            Ok(_) => (waiting, rx),
            // No thread: read at each first need, as without it.
            Err(_) => (Default::default(), rx),
        });
    }

    /// Adds a site (indexed by its window).
    fn push_site(&mut self, p: Planned) {
        self.by_window.insert((p.site.addr, self.sites.len()));
        self.longest = self.longest.max(p.site.len as u64);
        self.sites.push(p);
    }

    /// Plans the site of the probe `tag` at `addr`; returns the site index.
    pub(super) fn plan(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        tag: usize,
        addr: u64,
        opcode: Option<u8>,
    ) -> Result<usize, String> {
        let i = self.probe_site(world, maps, addr, opcode)?;
        let s = &mut self.sites[i];
        if !s.tags.contains(&tag) {
            s.tags.push(tag);
        }
        Ok(i)
    }

    /// Plans the return probe `tag` on the function entered at `addr`: its
    /// entry site, and a return site at each `ret` through which its calls
    /// return (`crate::transport::retsites`). Every window is checked
    /// before any is added: a function with one `ret` that cannot be
    /// patched is refused whole. Returns the entry's site index.
    pub(super) fn plan_return(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        tag: usize,
        addr: u64,
        opcode: Option<u8>,
    ) -> Result<usize, String> {
        self.read_ahead(maps);
        let mut entry = match self.by_probe_addr.get(&addr) {
            Some(_) => None,
            None => Some(self.check(world, maps, addr, opcode, Shape::Probe)),
        };
        let m = mapping_of(maps, addr).ok_or_else(|| format!("{addr:#x} is not mapped"))?;
        let path = crate::procmaps::canonical(std::path::Path::new(&m.path));
        let module = self
            .modules
            .get(&path)
            .and_then(|r| r.as_ref().ok())
            .ok_or_else(|| format!("reading {}", path.display()))?;
        let file_off = addr - m.start + m.offset;
        if let Some(link) = module.vaddr_of_offset(file_off)
            && module.elf().is_plt_entry(link)
        {
            let bias = addr.wrapping_sub(link);
            return self.plan_plt_return(world, maps, tag, addr, opcode, &path, link, bias);
        }
        // The entry's refusal first, as when it is checked alone.
        let mut found =
            match crate::transport::retsites::return_sites(module.elf(), file_off, "inproc") {
                Ok(f) => f,
                Err(e) => return Err(entry.and_then(Result::err).unwrap_or(e)),
            };
        // Where the module's GOT sends each function it tail-calls: the
        // implementation an IFUNC resolver chose, which no symbol names
        // (filled at load: the process stopped at its entry point, or
        // running; a slot bound lazily still points at the module's own
        // PLT, where no function starts).
        let bias = module
            .vaddr_of_offset(file_off)
            .map_or(0, |link| addr.wrapping_sub(link));
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
        let mut rets = Vec::with_capacity(found.rets.len());
        let own_rets = !found.rets.is_empty();
        for off in std::mem::take(&mut found.rets) {
            if off < m.offset || off - m.offset >= m.end - m.start {
                return Err(format!(
                    "a `ret` of {} (file offset {off:#x}) is outside the mapping of its entry",
                    found.function
                ));
            }
            let at = m.start + (off - m.offset);
            match self.by_probe_addr.get(&at) {
                Some(&i) if self.sites[i].kind == site_kind::RET => {}
                Some(_) => {
                    return Err(format!(
                        "the `ret` at {at:#x} of {} has a probe of its own, where its return \
                         site would go",
                        found.function
                    ));
                }
                None => rets.push(self.check(world, maps, at, None, Shape::Ret)?),
            }
        }
        // The `ret`s of the functions of other modules it tail-calls
        // (`jmp malloc@plt`): its calls that go there return through them.
        // Taken only where every one of a function's `ret`s takes a jump (a
        // trap would cost every call of that function in the process a
        // ptrace stop); otherwise those calls stay unseen, shown unwound.
        let mut outside_rets: Vec<Checked> = Vec::new();
        let mut outside_found = false;
        // A function found whose `ret`s were not all taken.
        let mut outside_refused = false;
        let mut planned: std::collections::HashSet<u64> = std::collections::HashSet::new();
        for (name, slot) in found.outside.iter().zip(slots) {
            let by_name = self.outside_rets(world, maps, name);
            let Some(addrs) = by_name.or_else(|| {
                let mut w = [0u8; 8];
                let slot = slot?;
                (world.peek(slot, &mut w) == 8).then_some(())?;
                self.rets_at(world, maps, u64::from_le_bytes(w), OUTSIDE_DEPTH)
            }) else {
                continue;
            };
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
            if ok {
                outside_found = true;
                for c in checked {
                    if planned.insert(c.site.probe) {
                        outside_rets.push(c);
                    }
                }
            }
        }
        if !own_rets && !outside_found {
            if outside_refused {
                return Err(format!(
                    "{} in {} has no `ret` instruction of its own, and one of the `ret`s of \
                     the function of another module it tail-calls takes no jump (a trap \
                     there would stop every call of that function in the process): \
                     --transport inproc cannot observe its returns; use --transport ptrace",
                    found.function,
                    path.display()
                ));
            }
            return Err(crate::transport::retsites::no_ret(
                &found.function,
                &path,
                "inproc",
            ));
        }
        let overlap =
            |a: &Site, b: &Site| a.addr < b.addr + b.len as u64 && b.addr < a.addr + a.len as u64;
        // An entry too close to a `ret` for two windows: one window for
        // both, if the code between is straight.
        let mut entry = entry.map(|e| (e, false));
        if let Some((e, whole)) = &mut entry
            && rets.iter().any(|r| overlap(&r.site, &e.site))
        {
            let w = self
                .check(world, maps, addr, opcode, Shape::Whole)
                .map_err(|why| {
                    format!(
                        "{} is too short for a jump at its entry and one at its `ret`, and \
                         cannot take one window for both: {why}",
                        found.function
                    )
                })?;
            rets.retain(|r| r.site.probe != w.site.ret.map_or(0, |i| i.ip()));
            *e = w;
            *whole = true;
        }
        let windows: Vec<&Site> = entry
            .iter()
            .map(|(c, _)| &c.site)
            .chain(rets.iter().map(|c| &c.site))
            .collect();
        for (k, a) in windows.iter().enumerate() {
            if let Some(b) = windows[k + 1..].iter().find(|b| overlap(a, b)) {
                return Err(format!(
                    "the windows at {:#x} and {:#x} of {} overlap",
                    a.addr, b.addr, found.function
                ));
            }
        }
        for r in rets.into_iter().chain(outside_rets) {
            self.add(world, r, site_kind::RET)?;
        }
        let i = match entry {
            Some((e, false)) => self.add(world, e, site_kind::PROBE)?,
            Some((e, true)) => self.add_whole(world, e)?,
            None => self.by_probe_addr[&addr],
        };
        let s = &mut self.sites[i];
        if s.kind != site_kind::PROBE {
            return Err(format!("{addr:#x} is a return site of another function"));
        }
        if !s.ret_tags.contains(&tag) {
            s.ret_tags.push(tag);
        }
        // A tail call through a pointer (`agent_loader::tailcall`) may go
        // into code with no return site: the instructions its direct calls
        // return to take the calls it misses.
        let tails = match self.modules.get(&path) {
            Some(Ok(module)) => found.indirect.iter().any(|j| module.tail_jumps.contains(j)),
            _ => false,
        };
        if tails {
            let entry_link = addr.wrapping_sub(bias);
            self.plan_continuations(
                world,
                maps,
                &path,
                bias,
                entry_link,
                &found.function,
                true,
                false,
            );
        }
        Ok(i)
    }

    /// Plans a continuation site ([`site_kind::CONT`]) at the instruction
    /// after each direct `call` of the function entered at `entry` (link-
    /// time; module `path`, load bias `bias`), or of its PLT entry or GOT
    /// slot in its own module or in the other modules that import it, at
    /// most [`MAX_CONTINUATIONS`]: where a jump fits and no other site is
    /// (a trap only with `traps`: every return there would stop). A later
    /// window that needs those bytes takes them back (`check`).
    #[allow(
        clippy::too_many_arguments,
        reason = "the planner's state, the stopped process and the entry's facts"
    )]
    fn plan_continuations(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        path: &Path,
        bias: u64,
        entry: u64,
        name: &str,
        elsewhere: bool,
        traps: bool,
    ) -> usize {
        let Some(Ok(module)) = self.modules.get(path) else {
            return 0;
        };
        let elf = module.elf();
        let mut targets = vec![entry];
        // Its PLT entry and its GOT slot (`call *slot(%rip)`).
        if elsewhere {
            targets.extend(
                elf.imports
                    .iter()
                    .filter(|(_, n)| n == name)
                    .map(|&(a, _)| a),
            );
        }
        let mut conts: Vec<u64> = targets
            .iter()
            .flat_map(|&t| module.returns_of_calls_to(t).iter().copied())
            .collect();
        // Not a function's first instruction (after a call that does not
        // return), nor a `ret`: sites of their own may need them.
        conts.retain(|&c| {
            elf.function_starting_at(c).is_none()
                && elf.unnamed_function_at(c).is_none()
                && !matches!(elf.first_byte(c), Some(0xC3 | 0xC2) | None)
        });
        conts.sort_unstable();
        conts.dedup();
        let mut sites: Vec<u64> = conts.iter().map(|&c| c.wrapping_add(bias)).collect();
        // The calls of the other modules that import it: through their PLT
        // entry, or `call *slot(%rip)` through their GOT slot (`-fno-plt`).
        if elsewhere {
            sites.extend(self.continuations_elsewhere(maps, path, name));
        }
        sites.truncate(MAX_CONTINUATIONS);
        let mut covered = 0;
        for at in sites {
            if let Some(&i) = self.by_probe_addr.get(&at) {
                covered += usize::from(self.sites[i].kind == site_kind::CONT);
                continue;
            }
            if let Ok(c) = self.check(world, maps, at, None, Shape::Probe)
                && (traps || c.trap.is_none())
                && self.add(world, c, site_kind::CONT).is_ok()
            {
                covered += 1;
            }
        }
        covered
    }

    /// Plans return sites at the `ret`s of the function that the import
    /// `name` (the PLT entry at link-time `link` of module `path`) leads
    /// to, when every one takes a jump (a trap there would stop every call
    /// of it in the process); how many `ret`s are covered (0: none;
    /// `usize::MAX`: the function has none, its calls never return).
    fn plan_import_rets(
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
                let slot = match self.modules.get(path) {
                    Some(Ok(m)) => m
                        .elf()
                        .imports
                        .iter()
                        .find(|(a, n)| n == name && *a != link)
                        .map(|&(a, _)| a),
                    _ => None,
                };
                let bias = maps
                    .iter()
                    .find(|m| m.is_file() && crate::procmaps::canonical(Path::new(&m.path)) == path)
                    .and_then(|m| match self.modules.get(path) {
                        Some(Ok(code)) => code
                            .vaddr_of_offset(m.offset)
                            .map(|l| m.start.wrapping_sub(l)),
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
        let mut checked = Vec::new();
        let mut existing = 0;
        for &at in &addrs {
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

    /// Whether the function `name` of the first executable module that
    /// defines it (a sized global function symbol) never returns: no
    /// `ret`, no tail call out of its module, no indirect jump (`abort`),
    /// or one of [`NEVER_RETURN`] (`longjmp` leaves by an indirect jump).
    fn never_returns(&mut self, maps: &[Mapping], name: &str) -> bool {
        if NEVER_RETURN.contains(&name) {
            return true;
        }
        let exec = Self::exec_files(maps);
        let mut paths: Vec<PathBuf> = Vec::new();
        for (p, _) in exec {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        for p in paths {
            let Ok(module) = self.module(&p).as_ref() else {
                continue;
            };
            let elf = module.elf();
            let wprobe_elf::Lookup::Found(sym) = elf.lookup(name) else {
                continue;
            };
            if sym.name != name
                || !sym.global
                || sym.size == 0
                || sym.kind != wprobe_elf::SymKind::Func
            {
                continue;
            }
            let Some(off) = elf.file_offset(sym.value) else {
                return false;
            };
            return crate::transport::retsites::return_sites(elf, off, "inproc")
                .is_ok_and(|r| r.rets.is_empty() && r.outside.is_empty() && r.indirect.is_empty());
        }
        false
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
    fn plan_plt_return(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        tag: usize,
        addr: u64,
        opcode: Option<u8>,
        path: &Path,
        link: u64,
        bias: u64,
    ) -> Result<usize, String> {
        let name = match self.modules.get(path) {
            Some(Ok(m)) => m.elf().import_at(link).unwrap_or("?").to_string(),
            _ => "?".into(),
        };
        // The entry checked first (its refusal is the error), added last.
        let entry = match self.by_probe_addr.get(&addr) {
            Some(&i) if self.sites[i].kind == site_kind::PROBE => Ok(i),
            Some(_) => return Err(format!("{addr:#x} is a return site of another function")),
            None => Err(self.check(world, maps, addr, opcode, Shape::Probe)?),
        };
        // Both: the `ret`s of the function it leads to see every return
        // (also of calls that reach the entry by a tail jump, `jmp
        // f@plt`), where every one takes a jump; the continuations see the
        // returns of its direct calls whatever that function is.
        let mut conts = self.plan_continuations(world, maps, path, bias, link, &name, false, false);
        let rets = self.plan_import_rets(world, maps, path, link, &name);
        if rets == 0 {
            // The calls whose next instruction takes no jump: a trap there
            // (a stop per return, as ptrace does it) rather than a return
            // unseen or a library call left untraced.
            conts = self.plan_continuations(world, maps, path, bias, link, &name, false, true);
        }
        if conts == 0 && rets == 0 {
            return Err(format!(
                "{name}@plt in {}: no direct call of it where a jump fits after the call, where \
                 its returns would be seen: --transport inproc cannot observe its returns; use \
                 --transport ptrace",
                path.display()
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

    /// The run-time addresses after the calls of `name` in the modules the
    /// process maps other than `own` that import it, by their PLT entry or
    /// their GOT slot (a module's imports read once; its code swept only
    /// when it imports a name a traced function needs).
    fn continuations_elsewhere(&mut self, maps: &[Mapping], own: &Path, name: &str) -> Vec<u64> {
        let mut out = Vec::new();
        let mut seen: Vec<PathBuf> = Vec::new();
        for m in maps.iter().filter(|m| m.exec && m.is_file()) {
            let p = crate::procmaps::canonical(Path::new(&m.path));
            if p == own || seen.contains(&p) {
                continue;
            }
            seen.push(p.clone());
            let imports = self.imports.entry(p.clone()).or_insert_with(|| {
                wprobe_elf::info::ElfInfo::open(&p)
                    .map(|e| e.imports.iter().map(|(_, n)| n.clone()).collect())
                    .unwrap_or_default()
            });
            if !imports.contains(name) {
                continue;
            }
            let Ok(module) = self.module(&p).as_ref() else {
                continue;
            };
            let Some(bias) = module
                .vaddr_of_offset(m.offset)
                .map(|link| m.start.wrapping_sub(link))
            else {
                continue;
            };
            let elf = module.elf();
            let mut conts: Vec<u64> = elf
                .imports
                .iter()
                .filter(|(_, n)| n == name)
                .flat_map(|&(a, _)| module.returns_of_calls_to(a).iter().copied())
                .filter(|&c| {
                    elf.function_starting_at(c).is_none()
                        && elf.unnamed_function_at(c).is_none()
                        && !matches!(elf.first_byte(c), Some(0xC3 | 0xC2) | None)
                })
                .collect();
            conts.sort_unstable();
            conts.dedup();
            out.extend(conts.into_iter().map(|c| c.wrapping_add(bias)));
        }
        out
    }

    /// The probe site at `addr`, planned if new.
    fn probe_site(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        addr: u64,
        opcode: Option<u8>,
    ) -> Result<usize, String> {
        if let Some(&i) = self.by_probe_addr.get(&addr) {
            if self.sites[i].kind != site_kind::PROBE {
                return Err(format!(
                    "{addr:#x} is a `ret` where a return probe's calls return: a probe cannot \
                     share it"
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
    pub(super) fn plan_library_event(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        addr: u64,
    ) -> Result<usize, String> {
        if let Some(&i) = self.by_probe_addr.get(&addr) {
            return Err(format!(
                "{addr:#x}, where the dynamic linker reports library changes, has a probe's \
                 site ({}) already",
                self.sites[i].site.probe
            ));
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
            let site = window::plan_trap(addr, &code[..n], ret).map_err(|r| r.to_string())?;
            c = Checked {
                site,
                orig: code[..1].to_vec(),
                inode: c.inode,
                trap: Some(("_dl_debug_state".into(), why)),
                cave: None,
            };
        } else {
            c.trap = Some(("_dl_debug_state".into(), why));
        }
        let notes = self.notes.len();
        let i = self.add(world, c, site_kind::PROBE)?;
        self.notes.truncate(notes);
        Ok(i)
    }

    /// The run-time addresses of the `ret`s of function `name` as a PLT or
    /// GOT entry of a module leads to it: the function of the first module
    /// mapped executable, in address order (the executable first), that
    /// defines it as a sized global function (possibly the calling module
    /// itself, as libstdc++'s `operator delete` calls its own through its
    /// PLT), following its own tail jumps within its module and,
    /// [`OUTSIDE_DEPTH`] deep, those into other modules (`operator delete`
    /// ends in `jmp free@plt`). For an IFUNC (glibc's `strchr`), whose
    /// implementation has no symbol, the function its resolver chose:
    /// where the defining module's own `IRELATIVE` slot for it points
    /// (glibc calls most of its string functions itself), else
    /// ([`Self::rets_at`], by the caller) where the caller's GOT does.
    /// Cached by name.
    fn outside_rets(&mut self, world: &World, maps: &[Mapping], name: &str) -> Option<Vec<u64>> {
        self.outside_rets_at(world, maps, name, OUTSIDE_DEPTH)
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
            self.by_window.remove(&(s.site.addr, i));
        }
        if self.check(world, maps, addr, opcode, Shape::Whole).is_err() {
            for &i in &taken {
                let s = &self.sites[i];
                self.by_probe_addr.insert(s.site.probe, i);
                self.by_window.insert((s.site.addr, i));
            }
            return false;
        }
        for &i in &taken {
            self.retire(i);
        }
        true
    }

    /// Takes site `i` (not patched) out: never patched now, no window, no
    /// bytes (its stub stays, unused).
    fn retire(&mut self, i: usize) {
        let s = &mut self.sites[i];
        if self.by_probe_addr.get(&s.site.probe) == Some(&i) {
            self.by_probe_addr.remove(&s.site.probe);
        }
        self.by_window.remove(&(s.site.addr, i));
        if let Some(c) = s.cave.take() {
            self.caves.remove(&c.addr);
        }
        s.patch.clear();
        s.orig.clear();
        s.site.len = 0;
    }

    /// The executable mappings of files, with their canonical paths.
    fn exec_files(maps: &[Mapping]) -> Vec<(PathBuf, &Mapping)> {
        maps.iter()
            .filter(|m| m.exec && m.is_file())
            .map(|m| (crate::procmaps::canonical(Path::new(&m.path)), m))
            .collect()
    }

    fn outside_rets_at(
        &mut self,
        world: &World,
        maps: &[Mapping],
        name: &str,
        depth: usize,
    ) -> Option<Vec<u64>> {
        if let Some(r) = self.outside.get(name) {
            return r.clone();
        }
        if depth == 0 {
            return None;
        }
        // Settled as not found while it is looked up: a cycle ends there.
        self.outside.insert(name.to_string(), None);
        let exec = Self::exec_files(maps);
        let mut paths: Vec<&PathBuf> = Vec::new();
        for (p, _) in &exec {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        let mut at = None;
        for p in paths {
            let Ok(module) = self.module(p).as_ref() else {
                continue;
            };
            let elf = module.elf();
            let wprobe_elf::Lookup::Found(sym) = elf.lookup(name) else {
                continue;
            };
            if sym.name != name || !sym.global {
                continue;
            }
            match sym.kind {
                wprobe_elf::SymKind::Func if sym.size > 0 => {
                    at = elf
                        .file_offset(sym.value)
                        .map(|off| Entered::Offset(p.clone(), off));
                }
                wprobe_elf::SymKind::Ifunc => {
                    let bias = exec.iter().filter(|(q, _)| q == p).find_map(|(_, m)| {
                        Some(m.start.wrapping_sub(module.vaddr_of_offset(m.offset)?))
                    });
                    at = elf.irelative_slot(sym.value).zip(bias).map(|(slot, b)| {
                        Entered::Slot(slot.wrapping_add(b), sym.value.wrapping_add(b))
                    });
                }
                _ => continue,
            }
            break;
        }
        let found = match at {
            Some(Entered::Offset(p, off)) => self.rets_of(world, maps, &p, off, depth),
            Some(Entered::Slot(slot, resolver)) => {
                let mut w = [0u8; 8];
                let chosen = (world.peek(slot, &mut w) == 8).then(|| u64::from_le_bytes(w));
                // Before the dynamic linker ran the resolver the slot holds
                // the resolver (or the file's bytes): no choice to follow.
                chosen
                    .filter(|&a| a != resolver && a != 0)
                    .and_then(|a| self.rets_at(world, maps, a, depth))
            }
            None => None,
        };
        self.outside.insert(name.to_string(), found.clone());
        found
    }

    /// The run-time addresses of the `ret`s of the function entered at
    /// run-time address `addr` (an address a GOT slot holds), as
    /// [`Self::outside_rets`] takes them; the function may be one no symbol
    /// names (bounded by its unwind table entry). Cached by address.
    fn rets_at(
        &mut self,
        world: &World,
        maps: &[Mapping],
        addr: u64,
        depth: usize,
    ) -> Option<Vec<u64>> {
        let key = format!("@{addr:#x}");
        if let Some(r) = self.outside.get(&key) {
            return r.clone();
        }
        self.outside.insert(key.clone(), None);
        let m = mapping_of(maps, addr).filter(|m| m.exec && m.is_file())?;
        let p = crate::procmaps::canonical(Path::new(&m.path));
        let off = addr - m.start + m.offset;
        let found = self.rets_of(world, maps, &p, off, depth);
        self.outside.insert(key, found.clone());
        found
    }

    /// The run-time addresses of the `ret`s of the function of module `p`
    /// entered at file offset `off`, and of those of the functions of
    /// other modules it tail-calls (`depth - 1` deep); `None` when it has
    /// none or they cannot be placed.
    fn rets_of(
        &mut self,
        world: &World,
        maps: &[Mapping],
        p: &Path,
        off: u64,
        depth: usize,
    ) -> Option<Vec<u64>> {
        let module = self.module(p).as_ref().ok()?;
        let sites = crate::transport::retsites::return_sites(module.elf(), off, "inproc").ok()?;
        let exec = Self::exec_files(maps);
        let mut rets = sites
            .rets
            .iter()
            .map(|&off| {
                exec.iter()
                    .filter(|(q, _)| q == p)
                    .find(|(_, m)| off >= m.offset && off - m.offset < m.end - m.start)
                    .map(|(_, m)| m.start + (off - m.offset))
            })
            .collect::<Option<Vec<u64>>>()?;
        for next in &sites.outside {
            if let Some(more) = self.outside_rets_at(world, maps, next, depth - 1) {
                rets.extend(more);
            }
        }
        rets.sort_unstable();
        rets.dedup();
        Some(rets).filter(|r| !r.is_empty())
    }

    /// Checks a window at `addr` (a `ret` when `ret`) against the rules,
    /// the file and the process, without changing anything but this: the
    /// continuation sites not yet patched that the window meets give their
    /// bytes up ([`Patcher::retire`]).
    fn check(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        addr: u64,
        opcode: Option<u8>,
        shape: Shape,
    ) -> Result<Checked, String> {
        let m = mapping_of(maps, addr)
            .filter(|m| m.exec)
            .ok_or_else(|| format!("invalid address: {addr:#x} is not in an executable mapping"))?;
        if !m.is_file() {
            return Err(format!(
                "{addr:#x} is in an anonymous mapping ({}): only code of module files can be patched",
                if m.path.is_empty() {
                    "no file"
                } else {
                    &m.path
                }
            ));
        }
        let path = crate::procmaps::canonical(std::path::Path::new(&m.path));
        self.module(&path);
        let module = self.modules[&path]
            .as_ref()
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let file_off = addr - m.start + m.offset;
        let link = module
            .vaddr_of_offset(file_off)
            .ok_or_else(|| format!("{addr:#x} is not in a loaded segment of {}", path.display()))?;
        let bias = addr.wrapping_sub(link);
        if let Some(op) = opcode {
            let mut b = [0u8];
            if world.peek(addr, &mut b) != 1 {
                return Err(format!("cannot read {addr:#x}"));
            }
            if b[0] != op {
                return Err(format!(
                    "opcode mismatch at {addr:#x}: expected {op:#04x}, found {:#04x}",
                    b[0]
                ));
            }
        }
        let func = module
            .function(link, bias)
            .ok_or_else(|| Refusal::NoFunction.to_string())?;
        let after = module.padding_after(func.start.wrapping_sub(bias) + func.code.len() as u64);
        let fend = func.start + func.code.len() as u64;
        let planned = match shape {
            Shape::Probe => window::plan(addr, func, &module.targets),
            Shape::Ret => window::plan_ret(addr, func, after, &module.targets),
            Shape::Whole => window::plan_whole(addr, func, after, &module.targets),
        }
        .map_err(|r| r.to_string())
        .and_then(|site| {
            // No jump under a stopped thread.
            match self
                .thread_pcs
                .iter()
                .find(|(_, pc)| *pc > site.addr && *pc < site.addr + site.len as u64)
            {
                Some((tid, pc)) => Err(format!(
                    "thread {tid} is stopped at {pc:#x}, inside the {} bytes the jump replaces",
                    site.len
                )),
                // Nor over a near jump's cave (a `ret`'s window completed
                // by padding).
                None => match cave_in(&self.caves, site.addr, site.addr + site.len as u64) {
                    Some(c) => Err(format!(
                        "the {} bytes the jump replaces at {:#x} meet the cave of a near jump \
                         at {c:#x}",
                        site.len, site.addr
                    )),
                    None => Ok(site),
                },
            }
        });
        // Where no 5-byte jump fits, a 2-byte one to a cave in padding.
        let mut cave = None;
        let planned = match planned {
            Ok(site) => Ok(site),
            Err(why) if !near_jumps() => Err(why),
            Err(why) => {
                let near = match shape {
                    Shape::Probe => window::plan_len(addr, func, &module.targets, NEAR_LEN),
                    Shape::Ret => {
                        window::plan_ret_len(addr, func, after, &module.targets, NEAR_LEN)
                    }
                    Shape::Whole => {
                        window::plan_whole_len(addr, func, after, &module.targets, NEAR_LEN)
                    }
                };
                let pcs = &self.thread_pcs;
                let (caves, tails, by_window, sites, longest) = (
                    &self.caves,
                    &self.tails,
                    &self.by_window,
                    &self.sites,
                    self.longest,
                );
                let found = near
                    .map_err(|r| {
                        // The rules' words, for the 2 bytes of a near jump.
                        r.to_string()
                            .replace("5-byte window", "2-byte window")
                            .replace(
                                "the 5 bytes the jump replaces",
                                "the bytes a near jump replaces",
                            )
                            .replace("a jump needs 5", "a near jump needs 2")
                    })
                    .and_then(|site| {
                        let (lo, hi) = (site.addr, site.addr + site.len as u64);
                        if pcs.iter().any(|(_, pc)| *pc > lo && *pc < hi) {
                            return Err("a thread is stopped inside its 2-byte window".to_string());
                        }
                        if let Some(c) = cave_in(caves, lo, hi) {
                            return Err(format!("its window meets the cave at {c:#x}"));
                        }
                        let blocks = module.padding_blocks_near(lo.wrapping_sub(bias), bias);
                        let taken = |a: u64, b: u64| {
                            if (a < hi && lo < b)
                                || cave_in(caves, a, b).is_some()
                                || tails
                                    .range(a.saturating_sub(MAX_TAIL)..b)
                                    .any(|(&t, &e)| t < b && a < e)
                                || by_window.range((a.saturating_sub(longest), 0)..(b, 0)).any(
                                    |&(_, i)| {
                                        let o = &sites[i].site;
                                        o.addr < b && a < o.addr + o.len as u64
                                    },
                                )
                                || pcs.iter().any(|(_, pc)| (a..b).contains(pc))
                            {
                                return true;
                            }
                            // The bytes in memory are the file's (its padding:
                            // `padding_block` decoded the block whole).
                            let file = module.bytes_at(a.wrapping_sub(bias), (b - a) as usize);
                            let mut now = vec![0u8; (b - a) as usize];
                            !(world.peek(a, &mut now) == now.len() && file == Some(&now[..]))
                        };
                        let c = nearjump::find_cave(lo, &blocks, taken).ok_or_else(|| {
                            format!(
                                "no free padding between functions within 127 bytes ({} blocks \
                             near)",
                                blocks.len()
                            )
                        })?;
                        Ok((site, c))
                    });
                match found {
                    Ok((site, c)) => {
                        cave = Some((c, why));
                        Ok(site)
                    }
                    Err(near) => Err(format!("{why}; nor a near jump: {near}")),
                }
            }
        };
        let (site, trap) = match planned {
            Ok(site) => (site, None),
            Err(why) if shape != Shape::Whole => {
                let code = module.bytes_at(link, 16).unwrap_or(&[]);
                let site = window::plan_trap(addr, code, shape == Shape::Ret)
                    .map_err(|r| format!("{why}; and no trap either: {r}"))?;
                let fstart = func.start.wrapping_sub(bias);
                let name = module
                    .elf()
                    .function_starting_at(fstart)
                    .map_or_else(|| format!("{fstart:#x}"), |s| s.name.clone());
                let why = format!("in {name}: no jump can go there ({why})");
                (site, Some((name, why)))
            }
            Err(why) => return Err(why),
        };
        let cave = match cave {
            Some((c, why)) => {
                let bytes = module
                    .bytes_at(c.wrapping_sub(bias), CAVE_LEN)
                    .ok_or_else(|| format!("{c:#x}: cave outside the file's code"))?
                    .to_vec();
                let fstart = func.start.wrapping_sub(bias);
                let name = module
                    .elf()
                    .function_starting_at(fstart)
                    .map_or_else(|| format!("{fstart:#x}"), |s| s.name.clone());
                Some((c, bytes, format!("in {name}: {why}")))
            }
            None => None,
        };
        let wlink = site.addr.wrapping_sub(bias);
        let orig = module
            .bytes_at(wlink, site.len)
            .filter(|b| b.len() == site.len)
            .ok_or_else(|| format!("{:#x}: window outside the file's code", site.addr))?
            .to_vec();
        let mut now = vec![0u8; site.len];
        if world.peek(site.addr, &mut now) != site.len || now != orig {
            // A jump or a trap where the file has neither: most likely a
            // wprobe's, killed before it could put the bytes back.
            let ours =
                matches!(now.first(), Some(0xe9 | 0xeb | 0xcc | 0xf4)) && now[..] != orig[..];
            return Err(format!(
                "the code at {:#x} in memory differs from {} (changed by the process or another \
                 tool{})",
                site.addr,
                path.display(),
                if ours {
                    format!(
                        "; a jump or a breakpoint there may be a killed wprobe's: `wprobe repair \
                         --pid {}` puts the file's bytes back",
                        world.pid()
                    )
                } else {
                    String::new()
                }
            ));
        }
        let (lo, hi) = (site.addr, site.addr + site.len as u64);
        let meeting: Vec<usize> = self
            .by_window
            .range((lo.saturating_sub(self.longest), 0)..(hi, 0))
            .map(|&(_, i)| i)
            .filter(|&i| {
                let o = &self.sites[i];
                o.site.addr < hi && lo < o.site.addr + o.site.len as u64
            })
            .collect();
        // Continuation sites not patched yet give their bytes up.
        if !meeting.is_empty()
            && meeting.iter().all(|&i| {
                let o = &self.sites[i];
                o.kind == site_kind::CONT && !o.patched
            })
        {
            for i in meeting {
                self.retire(i);
            }
        }
        if let Some(o) = self
            .by_window
            .range((lo.saturating_sub(self.longest), 0)..(hi, 0))
            .map(|&(_, i)| &self.sites[i])
            .find(|o| o.site.addr < hi && lo < o.site.addr + o.site.len as u64)
        {
            return Err(format!(
                "the {} bytes the jump replaces at {lo:#x} overlap those of the probe at {:#x}",
                site.len, o.site.probe
            ));
        }
        // Nor the cave of another site.
        if let Some(c) = cave_in(&self.caves, lo, hi) {
            return Err(format!(
                "the {} bytes the jump replaces at {lo:#x} overlap the near jump's cave at {c:#x}",
                site.len
            ));
        }
        // The padding a window takes is no cave's.
        if hi > fend {
            self.tails.insert(lo.max(fend), hi);
        }
        let orig = if trap.is_some() {
            orig[..1].to_vec()
        } else {
            orig
        };
        if let Some((c, _, _)) = &cave {
            self.caves.insert(*c);
        }
        Ok(Checked {
            site,
            orig,
            inode: m.inode,
            trap,
            cave,
        })
    }

    /// Gives a whole function's window its stub: the entry's site, and
    /// after it the return site of its `ret` (same stub, no window of its
    /// own). Returns the entry's site index.
    fn add_whole(&mut self, world: &mut World, c: Checked) -> Result<usize, String> {
        let ret = c.site.ret.map_or(0, |r| r.ip());
        let i = self.add(world, c, site_kind::PROBE)?;
        self.by_probe_addr.insert(ret, i + 1);
        self.push_site(Planned {
            site: Site {
                probe: ret,
                addr: ret,
                displaced: Vec::new(),
                len: 0,
                ret: None,
            },
            tags: Vec::new(),
            ret_tags: Vec::new(),
            kind: site_kind::RET,
            orig: Vec::new(),
            patch: Vec::new(),
            inode: 0,
            patched: false,
            trap: None,
            stub: 0,
            cave: None,
        });
        Ok(i)
    }

    /// Gives a checked window its stub; returns the site index.
    fn add(&mut self, world: &mut World, c: Checked, kind: u32) -> Result<usize, String> {
        let id = self.sites.len() as u32;
        let (area, stub_addr, code) = self.stub_for(world, &c.site, id)?;
        let patch = if let Some((func, why)) = &c.trap {
            self.trap_funcs.insert(c.site.addr, func.clone());
            self.notes.push((
                func.clone(),
                format!(
                    "{:#x} {why}: a trap instead (`hlt`), a ptrace stop per hit",
                    c.site.addr
                ),
            ));
            vec![super::traps::TRAP_INSN]
        } else if let Some((at, _, why)) = &c.cave {
            let (func, why) = why.split_once(": ").unwrap_or(("", why));
            self.near_notes.push(format!(
                "{:#x} {func}: a near jump (`jmp rel8`) to a `jmp` to its stub in the padding \
                 at {at:#x} (no 5-byte jump: {why})",
                c.site.addr
            ));
            nearjump::near_patch(&c.site, *at).ok_or_else(|| {
                format!("the cave at {at:#x} is out of reach of {:#x}", c.site.addr)
            })?
        } else {
            stub::site_patch(&c.site, stub_addr).map_err(|e| e.to_string())?
        };
        let cave = match c.cave {
            Some((addr, orig, _)) => Some(Cave {
                addr,
                orig,
                patch: nearjump::cave_patch(addr, stub_addr).ok_or_else(|| {
                    format!("the stub at {stub_addr:#x} is out of reach of the cave at {addr:#x}")
                })?,
            }),
            None => None,
        };
        let a = &mut self.areas[area];
        let off = (stub_addr - a.base) as usize;
        a.code[off..off + code.len()].copy_from_slice(&code);
        a.next = stub_addr - a.base + code.len() as u64;
        self.by_probe_addr.insert(c.site.probe, id as usize);
        self.push_site(Planned {
            site: c.site,
            tags: Vec::new(),
            ret_tags: Vec::new(),
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

    /// Generates the stub of `site` in an area within reach (making one if
    /// none is): (area, stub address, code).
    fn stub_for(
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
    fn new_area(&mut self, world: &mut World, near: u64) -> Result<(), String> {
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
    pub(super) fn plan_watch(&mut self, world: &mut World, near: u64) -> Result<usize, String> {
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

    /// Writes the stub areas (with `dispatch` in their slots), journals the
    /// sites, then writes every jump. The target must be stopped.
    pub(super) fn install(&mut self, world: &World, dispatch: u64) -> Result<(), String> {
        for a in &mut self.areas {
            a.code[SLOT_OFF as usize..SLOT_OFF as usize + 8]
                .copy_from_slice(&dispatch.to_le_bytes());
            let n = a.next.next_multiple_of(16) as usize;
            world
                .poke(a.base, &a.code[..n])
                .map_err(|e| format!("writing stubs: {e:#}"))?;
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
            None => self
                .journal
                .insert(Journal::create(world.pid()).map_err(|e| e.to_string())?),
        };
        j.record(&entries)
            .map_err(|e| format!("writing the patch journal: {e}"))?;
        self.journaled = self.sites.len();
        for s in self
            .sites
            .iter_mut()
            .filter(|s| !s.patch.is_empty() && s.trap.is_none())
        {
            // The cave first: the near jump goes there.
            if let Some(c) = &s.cave {
                world
                    .poke(c.addr, &c.patch)
                    .map_err(|e| format!("patching the cave at {:#x}: {e:#}", c.addr))?;
            }
            world
                .poke(s.site.addr, &s.patch)
                .map_err(|e| format!("patching {:#x}: {e:#}", s.site.addr))?;
            s.patched = true;
        }
        Ok(())
    }

    /// Whether some site traps instead of jumping.
    pub(super) fn has_traps(&self) -> bool {
        self.sites.iter().any(|s| s.trap.is_some())
    }

    /// Trap address → stub address, and trap address → original byte.
    pub(super) fn trap_maps(&self) -> (HashMap<u64, u64>, HashMap<u64, u8>) {
        let traps = self.sites.iter().filter(|s| s.trap.is_some());
        (
            traps.clone().map(|s| (s.site.addr, s.stub)).collect(),
            traps.map(|s| (s.site.addr, s.orig[0])).collect(),
        )
    }

    /// Writes the `int3` of every trap site (the process's threads seized
    /// by `traps::Traps`, so that a trap is never delivered as a signal),
    /// journaled first in the ptrace transport's journal, which its
    /// watchdog restores if wprobe dies.
    pub(super) fn arm_traps(&mut self, pid: i32) -> Result<(), String> {
        if !self.has_traps() {
            return Ok(());
        }
        let mem = std::fs::File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| format!("opening /proc/{pid}/mem: {e}"))?;
        let j = match &mut self.trap_journal {
            Some(j) => j,
            None => self.trap_journal.insert(
                crate::transport::ptrace::journal::Journal::create(pid)
                    .map_err(|e| format!("writing the trap journal: {e}"))?,
            ),
        };
        let patches: Vec<(u64, u8, u64)> = self.sites[self.traps_journaled..]
            .iter()
            .filter(|s| s.trap.is_some())
            .map(|s| (s.site.addr, s.orig[0], s.inode))
            .collect();
        j.record_all(&patches)
            .map_err(|e| format!("writing the trap journal: {e}"))?;
        self.traps_journaled = self.sites.len();
        for s in self
            .sites
            .iter_mut()
            .filter(|s| s.trap.is_some() && !s.patched)
        {
            match crate::sys::mem::pwrite(&mem, &s.patch, s.site.addr) {
                Ok(1) => s.patched = true,
                r => {
                    return Err(format!(
                        "writing a trap at {:#x} in process {pid}: {r:?}",
                        s.site.addr
                    ));
                }
            }
        }
        Ok(())
    }

    /// Puts the original bytes back wherever our jump still is (the target
    /// stopped); returns the sites the process rewrote meanwhile, left as
    /// they are: (address, first byte found). Removes the journal when
    /// every site is done.
    pub(super) fn restore(&mut self, world: &World) -> Result<Vec<(u64, u8)>, String> {
        let mut left = Vec::new();
        let mut first_err = None;
        // A thread between a near jump and its cave's jump goes on at the
        // stub (the cave becomes padding again).
        let at_caves: Vec<(i32, u64)> = if self.caves.is_empty() {
            Vec::new()
        } else {
            world
                .tids()
                .into_iter()
                .filter_map(|tid| Some((tid, world.regs(tid)?.rip)))
                .filter(|(_, pc)| self.caves.contains(pc))
                .collect()
        };
        for (tid, pc) in at_caves {
            if let Some(s) = self
                .sites
                .iter()
                .find(|s| s.patched && s.cave.as_ref().is_some_and(|c| c.addr == pc))
            {
                world
                    .set_pc(tid, s.stub)
                    .map_err(|e| format!("moving thread {tid} from the cave at {pc:#x}: {e:#}"))?;
            }
        }
        for s in &mut self.sites {
            if !s.patched {
                continue;
            }
            let mut now = vec![0u8; s.patch.len()];
            let n = world.peek(s.site.addr, &mut now);
            if n != now.len() {
                // The mapping is gone (unmapped, or the process exec'd).
                s.patched = false;
                continue;
            }
            if now != s.patch {
                left.push((s.site.addr, now[0]));
                s.patched = false;
                continue;
            }
            match world.poke(s.site.addr, &s.orig) {
                Ok(()) => s.patched = false,
                Err(e) => {
                    first_err.get_or_insert_with(|| format!("{e:#}"));
                    continue;
                }
            }
            // Then its cave, where it is still ours.
            if let Some(c) = &s.cave {
                let mut now = vec![0u8; c.patch.len()];
                if world.peek(c.addr, &mut now) == now.len()
                    && now == c.patch
                    && let Err(e) = world.poke(c.addr, &c.orig)
                {
                    first_err.get_or_insert_with(|| format!("{e:#}"));
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        self.remove_journals();
        Ok(left)
    }

    /// Removes both journals (nothing of ours left in the code).
    fn remove_journals(&mut self) {
        if let Some(j) = self.journal.take() {
            j.remove();
        }
        if let Some(j) = self.trap_journal.take() {
            j.remove();
        }
        self.journaled = 0;
        self.traps_journaled = 0;
    }

    /// Forgets the sites whose module is no longer mapped where they were
    /// planned (`dlclose`, or another file mapped at its address since),
    /// without writing: their code went with the module. Their windows
    /// are free for new sites. Returns their indices (their probes are
    /// armed again if the module comes back).
    pub(super) fn drop_unmapped(&mut self, maps: &[Mapping]) -> Vec<usize> {
        let mut gone = Vec::new();
        for (i, s) in self.sites.iter_mut().enumerate() {
            if s.inode == 0 || s.patch.is_empty() {
                continue;
            }
            let still = mapping_of(maps, s.site.addr).is_some_and(|m| m.inode == s.inode);
            if still {
                continue;
            }
            s.patch.clear();
            s.patched = false;
            s.trap = None;
            if let Some(c) = s.cave.take() {
                self.caves.remove(&c.addr);
            }
            self.by_window.remove(&(s.site.addr, i));
            if self.by_probe_addr.get(&s.site.probe) == Some(&i) {
                self.by_probe_addr.remove(&s.site.probe);
            }
            gone.push(i);
        }
        // The padding that windows of `ret`s took there is gone too.
        self.tails
            .retain(|&start, _| mapping_of(maps, start).is_some());
        // A whole function's return site follows its entry's (no window).
        for &i in &gone.clone() {
            if let Some(next) = self.sites.get(i + 1)
                && next.kind == site_kind::RET
                && next.patch.is_empty()
                && next.site.len == 0
                && !gone.contains(&(i + 1))
            {
                if self.by_probe_addr.get(&next.site.probe) == Some(&(i + 1)) {
                    self.by_probe_addr.remove(&next.site.probe);
                }
                gone.push(i + 1);
            }
        }
        gone
    }

    /// The process executed a new program: the patched image, the stubs
    /// and the agent are gone with the old one; nothing is left to restore.
    pub(super) fn forget(&mut self) {
        for s in &mut self.sites {
            s.patched = false;
        }
        self.remove_journals();
    }

    /// Whether `pc` is inside a window (past its first byte), where a jump
    /// must not be written under a thread.
    pub(super) fn inside_a_window(&self, pc: u64) -> bool {
        self.sites.iter().any(|s| {
            (pc > s.site.addr && pc < s.site.addr + s.site.len as u64)
                || s.cave
                    .as_ref()
                    .is_some_and(|c| pc >= c.addr && pc < c.addr + CAVE_LEN as u64)
        })
    }

    /// Whether a jump is in place somewhere.
    pub(super) fn any_patched(&self) -> bool {
        self.sites.iter().any(|s| s.patched)
    }
}
