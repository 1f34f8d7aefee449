//! What the patcher needs to know of a module file, read once per module:
//! its functions (by address, from the symbol tables, and from the unwind
//! table for those no symbol names), its code, and the
//! targets of every direct branch in its executable sections (a linear
//! sweep with iced-x86), so that a jump is never written over an
//! instruction some branch lands on.

use rustc_hash::FxHashSet as HashSet;
use std::path::Path;

use agent_loader::stub::Site;
use agent_loader::window::{BranchTargets, Function, Noted};
use goblin::elf::Elf;

use self::sweep::{calls_of, exec_sections};
use super::far_jumps::FarJumps;
use super::plans::{self, WindowShape};
use crate::proc::procmaps::Mapping;
use crate::transport::Error;
use crate::transport::retsites::{Decodings, ReturnSites};

/// A module's code, in link-time addresses.
pub(super) struct ModuleCode {
    /// Functions with a size, and unnamed ones from the unwind table:
    /// (start, end), sorted, innermost last.
    funcs: Vec<(u64, u64)>,
    /// `reach[k]`: the largest end of `funcs[..=k]`, so that a search back
    /// for the functions covering an address stops at the first whose
    /// reach falls short of it, not at the first function.
    reach: Vec<u64>,
    /// Direct branch targets of every executable section.
    pub(super) targets: BranchTargets,
    /// The module's file (ELF info: bytes and segments), parsed once in
    /// the run (`ElfInfo::open_shared`).
    elf: std::sync::Arc<wprobe_elf::info::ElfInfo>,
    /// `PT_LOAD` segments: (file offset, file size, link-time address).
    loads: Vec<(u64, u64, u64)>,
    /// The indirect `jmp`s that are tail calls through a pointer
    /// (`agent_loader::tailcall`), link-time.
    pub(super) tail_jumps: HashSet<u64>,
    /// Direct call targets (and the GOT slots of `call *slot(%rip)`) → the
    /// addresses those calls return to, from the executable sections'
    /// sweep: the module's own when it was swept in this run, else made
    /// at the first need the plans do not answer.
    calls: std::sync::OnceLock<Calls>,
    /// The `jmp rel32`/`jcc rel32` by where they land (link-time), found
    /// at the first need ([`ModuleCode::far_jumps_to`]).
    far_jumps: std::sync::OnceLock<FarJumps>,
    /// The file's path and its key in the plan cache (`None`: no
    /// metadata).
    key: Option<(std::path::PathBuf, plans::Key)>,
    /// The plans kept (from the plan cache, and those made in this run).
    plans: std::sync::Mutex<plans::Plans>,
    /// Stubs generated in this run, in order, kept in `plans` when they are
    /// saved ([`ModuleCode::keep_stub`]).
    stubs_made: std::sync::Mutex<Vec<(plans::StubKey, Vec<u8>)>>,
    /// Set when the plans are saved: the windows planned ahead
    /// (`patch::ahead`) stop there.
    planned: std::sync::atomic::AtomicBool,
    /// The functions decoded for their return sites
    /// ([`ModuleCode::return_sites`]), each once.
    decodings: Decodings,
    /// The sweep's part of the plan file (`plans::encode_sweep`), made at
    /// the first save, or ahead after a fresh sweep
    /// ([`ModuleCode::encode_sweep_ahead`]).
    swept: std::sync::OnceLock<Vec<u8>>,
}

/// One reading of a module file: done once, by whichever thread asks
/// first (the others wait for it).
type Reading = std::sync::Arc<std::sync::OnceLock<Result<std::sync::Arc<ModuleCode>, Error>>>;

/// The module files read (or being read) in this run, by path and version
/// (inode, size, modification time): every process image that maps a file
/// (a program executed again and again under `-f`, the C library of each)
/// shares one reading of it, and a reading started ahead ([`prefetch`])
/// is waited for rather than done twice.
type Shared = rustc_hash::FxHashMap<(std::path::PathBuf, u64, u64, i64), Reading>;

static SHARED: std::sync::OnceLock<std::sync::Mutex<Shared>> = std::sync::OnceLock::new();

/// The code of module file `path`, read once per version of the file in a
/// run (see [`Shared`]); a failure is kept for the run too.
pub(super) fn read_shared(path: &Path) -> Result<std::sync::Arc<ModuleCode>, Error> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return read_timed(path).map(std::sync::Arc::new);
    };
    let key = (
        path.to_path_buf(),
        meta.ino(),
        meta.size(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
    );
    let shared = SHARED.get_or_init(Default::default);
    let reading = match shared.lock() {
        Ok(mut s) => s.entry(key).or_default().clone(),
        Err(_) => return read_timed(path).map(std::sync::Arc::new),
    };
    reading
        .get_or_init(|| {
            let m = read_timed(path).map(std::sync::Arc::new);
            if let Ok(m) = &m {
                m.encode_sweep_ahead();
            }
            m
        })
        .clone()
}

/// Whether a reading of module file `path` (any version) was started in
/// this run ([`read_shared`], [`prefetch`]).
pub(super) fn reading_started(path: &Path) -> bool {
    SHARED
        .get()
        .and_then(|s| s.lock().ok())
        .is_some_and(|s| s.keys().any(|k| k.0 == path))
}

/// Starts reading module file `path` on a thread of its own, for a
/// reading of it to come: the executable of a run about to be armed in
/// process, whose reading (a tenth of a second for a 10,000-function
/// program) would otherwise start only when its first probe is planned.
pub fn prefetch(path: &Path) {
    let path = path.to_path_buf();
    let _ = std::thread::Builder::new()
        .name("wprobe-prefetch".into())
        .spawn(move || {
            // Then the unwind table's landing pads, read once at the first
            // function that may run as a relocated copy (`patch::whole`:
            // a parse of all of `.eh_frame`, 3 ms for python3.11), read
            // here while the target is launched and planning begins.
            if let Ok(m) = read_shared(&path) {
                m.elf().has_landing_pads(0, 0);
            }
        });
}

/// [`ModuleCode::read`], its time said under `WPROBE_DEBUG`.
fn read_timed(path: &Path) -> Result<ModuleCode, Error> {
    let t0 = std::time::Instant::now();
    let m = ModuleCode::read(path);
    if std::env::var_os("WPROBE_DEBUG").is_some() {
        crate::elog!(
            "wprobe: debug: {} read and swept in {:.3} ms",
            path.display(),
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    m
}

impl ModuleCode {
    /// Reads `path` and sweeps its code, or takes the sweep from the plan
    /// cache (`super::plans`).
    pub(super) fn read(path: &Path) -> Result<ModuleCode, Error> {
        let meta = std::fs::metadata(path).ok();
        let elf = wprobe_elf::info::ElfInfo::open_shared(path).map_err(|e| Error::file(path, e))?;
        let key = meta.map(|m| (path.to_path_buf(), plans::Key::of(&m, elf.file_bytes())));
        let parsed = Elf::parse(elf.file_bytes())
            .map_err(|e| Error::file(path, format!("{}: {e}", path.display())))?;
        let loads = parsed
            .program_headers
            .iter()
            .filter(|p| p.p_type == goblin::elf::program_header::PT_LOAD)
            .map(|p| (p.p_offset, p.p_filesz, p.p_vaddr))
            .collect();
        let kept = key.as_ref().and_then(|(p, k)| plans::load(p, k));
        let mut calls = std::sync::OnceLock::new();
        let mut decodings = Decodings::default();
        let (sweep, kept) = match kept {
            Some((sweep, kept)) => (sweep, kept),
            None => {
                let (sweep, found, flow) = Self::sweep_with_calls(&elf, &parsed);
                calls = std::sync::OnceLock::from(found);
                decodings = Decodings::with_flow(flow);
                // Saved now: a module whose functions are all refused
                // still skips its sweep next time.
                let fresh = plans::Plans {
                    added: true,
                    ..Default::default()
                };
                (sweep, fresh)
            }
        };
        Ok(ModuleCode {
            reach: reach_of(&sweep.funcs),
            funcs: sweep.funcs,
            targets: sweep.targets,
            elf,
            loads,
            tail_jumps: sweep.tail_jumps,
            calls,
            far_jumps: std::sync::OnceLock::new(),
            key,
            plans: std::sync::Mutex::new(kept),
            stubs_made: Default::default(),
            swept: std::sync::OnceLock::new(),
            decodings,
            planned: Default::default(),
        })
    }

    /// Keeps the window `site` of `shape` chosen at link-time address
    /// `link` (load bias `bias`).
    fn keep_window(&self, shape: WindowShape, link: u64, site: &Site, bias: u64) {
        let mut p = self.lock_plans();
        p.windows.keep((shape, link), plans::Window::of(site, bias));
        p.added = true;
    }

    /// The window of `shape` at link-time address `link` (load bias
    /// `bias`), or why no jump can take it, as an earlier planning chose
    /// (the plan cache: a refusal only at the bias it was made at), else
    /// as `plan` says now, kept. A refusal is kept unless one at another
    /// bias is kept there (a module loaded elsewhere at each run: kept
    /// once, not rewritten at every run).
    pub(super) fn kept_or_planned(
        &self,
        shape: WindowShape,
        link: u64,
        bias: u64,
        plan: impl FnOnce() -> Result<Site, String>,
    ) -> Result<Site, String> {
        // The window kept, else the refusal kept, in one look at the plans
        // (another thread plans ahead into them: `patch::ahead`).
        let (win, refused) = {
            let mut p = self.lock_plans();
            match p.windows.look(&(shape, link)) {
                Some(w) => (Some(w), None),
                None => (None, p.refusals.get(&(shape, link)).cloned()),
            }
        };
        if let Some(win) = win
            && let Some(code) = self.elf.bytes_at(win.link_addr(), win.len())
            && let Some(site) = win.site(code, bias)
        {
            return Ok(site);
        }
        let refused = match win {
            Some(_) => self.lock_plans().refusals.get(&(shape, link)).cloned(),
            None => refused,
        };
        if let Some((b, why)) = refused
            && b == bias
        {
            return Err(why);
        }
        let planned = plan();
        match &planned {
            Ok(site) => self.keep_window(shape, link, site, bias),
            Err(why) => {
                let mut p = self.lock_plans();
                if let std::collections::hash_map::Entry::Vacant(v) =
                    p.refusals.entry((shape, link))
                {
                    v.insert((bias, why.clone()));
                    p.added = true;
                }
            }
        }
        planned
    }

    /// The stub kept for `key` (`plans::Plans::stubs`), if the one kept
    /// for its window has that key.
    pub(super) fn kept_stub(&self, key: &plans::StubKey) -> Option<Vec<u8>> {
        self.lock_plans().stubs.get(key).map(<[u8]>::to_vec)
    }

    /// The relocated copy of a whole function kept for `key`
    /// (`plans::Plans::copies`).
    pub(super) fn kept_copy(&self, key: &plans::CopyKey) -> Option<agent_loader::whole::Copy> {
        self.lock_plans()
            .copies
            .get(key)
            .map(|k| agent_loader::whole::Copy {
                code: k.code.clone(),
                returns: k.returns.clone(),
            })
    }

    /// Keeps the copy `copy` made for `key` ([`plans::KeptCopies::keep`]).
    pub(super) fn keep_copy(&self, key: plans::CopyKey, copy: &agent_loader::whole::Copy) {
        let mut p = self.lock_plans();
        if p.copies.keep(plans::KeptCopy {
            key,
            code: copy.code.clone(),
            returns: copy.returns.clone(),
        }) {
            p.added = true;
        }
    }

    /// Keeps the stub `code` generated for `key` ([`plans::KeptStubs::keep`])
    /// when the plans are saved, not now: the planner makes 20,000 of them
    /// for a whole program, and their keeping (the stubs' table grown and
    /// hashed, under the lock the planning thread takes too) is work the
    /// thread that saves the plans can do. [`ModuleCode::kept_stub`] does
    /// not see them meanwhile: a stub asked for again in the same run is
    /// generated again, the same. Where no plan is saved (no plan cache,
    /// or no key for the file), kept now, as the plans keep them for the
    /// run.
    pub(super) fn keep_stub(&self, key: plans::StubKey, code: &[u8]) {
        if self.key.is_none() || !plans::enabled() {
            let mut p = self.lock_plans();
            if p.stubs.keep(key, code) {
                p.added = true;
            }
            return;
        }
        self.stubs_made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, code.to_vec()));
    }

    /// Keeps in the plans the stubs generated since the last time
    /// ([`ModuleCode::keep_stub`]), in the order they were.
    fn keep_stubs_made(&self) {
        let made = std::mem::take(&mut *self.stubs_made.lock().unwrap_or_else(|e| e.into_inner()));
        if made.is_empty() {
            return;
        }
        let mut p = self.lock_plans();
        for (key, code) in made {
            if p.stubs.keep(key, &code) {
                p.added = true;
            }
        }
    }

    /// The return sites of the function entered at file offset `entry`
    /// (`crate::transport::retsites::return_sites` for `--transport
    /// inproc`), kept from an earlier planning or found and kept.
    pub(super) fn return_sites(&self, entry: u64) -> Result<std::sync::Arc<ReturnSites>, Error> {
        if let Some(r) = self.lock_plans().rets.look(&entry) {
            return Ok(r);
        }
        let r = std::sync::Arc::new(crate::transport::retsites::return_sites_in(
            &self.elf,
            entry,
            "inproc",
            Some(&self.decodings),
        )?);
        let mut p = self.lock_plans();
        p.rets.keep(entry, r.clone());
        p.added = true;
        Ok(r)
    }

    /// Whether return sites are kept for the module (from the plan
    /// cache, or found in this run).
    pub(super) fn rets_kept(&self) -> bool {
        !self.lock_plans().rets.is_empty()
    }

    /// The starts of the module's functions from link-time `from` on, in
    /// address order.
    pub(super) fn function_starts_from(&self, from: u64) -> impl Iterator<Item = u64> + '_ {
        let i = self.funcs.partition_point(|&(s, _)| s < from);
        self.funcs[i..].iter().map(|&(s, _)| s)
    }

    /// Whether the module's plans were saved: planning is over
    /// (`patch::ahead` stops there).
    pub(super) fn planning_over(&self) -> bool {
        self.planned.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether [`ModuleCode::save_plans`] has something to write.
    pub(super) fn plans_to_save(&self) -> bool {
        self.key.is_some()
            && plans::enabled()
            && (self.lock_plans().added
                || !self
                    .stubs_made
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .is_empty())
    }

    /// Saves the sweep and the plans in the plan cache if any were made
    /// since it was read or saved.
    pub(super) fn save_plans(&self) {
        // Planning is over: the windows ahead are not needed any more.
        self.planned
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let Some((path, key)) = self.key.as_ref().filter(|_| plans::enabled()) else {
            return;
        };
        self.keep_stubs_made();
        // The sweep's part made (or waited for) only when there is
        // something to save, and not with the plans locked.
        if !self.lock_plans().added {
            return;
        }
        let swept = self.swept();
        let mut p = self.lock_plans();
        if !p.added {
            return;
        }
        plans::save(path, key, swept, &p);
        p.added = false;
    }

    /// The sweep's part of the plan file ([`ModuleCode::swept`]).
    fn swept(&self) -> &[u8] {
        self.swept
            .get_or_init(|| plans::encode_sweep(&self.funcs, &self.targets, &self.tail_jumps))
    }

    /// Makes the sweep's part of the plan file on a thread of its own, for
    /// a module swept afresh (its plans will be saved): sorting a large
    /// module's branch targets took a fifth of the time its plans were
    /// written in, after the target's run.
    fn encode_sweep_ahead(self: &std::sync::Arc<Self>) {
        if !self.plans_to_save() {
            return;
        }
        let me = std::sync::Arc::clone(self);
        let _ = std::thread::Builder::new()
            .name("wprobe-swept".into())
            .spawn(move || {
                me.swept();
            });
    }

    /// The plans, locked (a panic while they were locked leaves them
    /// usable: each change is one insertion).
    fn lock_plans(&self) -> std::sync::MutexGuard<'_, plans::Plans> {
        self.plans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The function containing link-time address `link` (the innermost,
    /// when symbols overlap), with its code; `bias` is the module's load bias.
    pub(super) fn function(&self, link: u64, bias: u64) -> Option<Function<'_>> {
        self.function_and_padding(link, bias).map(|(f, _)| f)
    }

    /// [`ModuleCode::function`] and [`ModuleCode::padding_after`] its end,
    /// with one search of the functions (a window checked asks for both).
    pub(super) fn function_and_padding(
        &self,
        link: u64,
        bias: u64,
    ) -> Option<(Function<'_>, &[u8])> {
        let i = self.funcs.partition_point(|&(s, _)| s <= link);
        let (start, end) = self.covering(i, link)?;
        let code = self.elf.bytes_at(start, (end - start) as usize)?;
        // The first function starting at or after its end: after the
        // functions starting before `link`, those from `i` on, in order
        // (what `padding_after` finds by a search of all).
        let next = i + self.funcs[i..]
            .iter()
            .take_while(|&&(s, _)| s < end)
            .count();
        let after = self.padding_between(end, self.funcs.get(next).map(|&(s, _)| s));
        Some((
            Function {
                start: start.wrapping_add(bias),
                code,
                bias,
            },
            after,
        ))
    }

    /// The innermost of `funcs[..i]` (those starting at or before `link`)
    /// covering `link`: the nearest start first, back only while some
    /// function's end (`reach`) is past `link`.
    fn covering(&self, i: usize, link: u64) -> Option<(u64, u64)> {
        self.funcs[..i]
            .iter()
            .zip(&self.reach[..i])
            .rev()
            .take_while(|&(_, &r)| r > link)
            .map(|(&f, _)| f)
            .find(|&(s, e)| s <= link && link < e)
    }

    /// Whether the function whose return sites are `found` tail-calls
    /// through a pointer (one of its indirect `jmp`s is among the module's
    /// `tail_jumps`): its calls are seen returning at continuation sites
    /// too (`patch::continuations`).
    pub(super) fn tail_calls_through_pointer(&self, found: &ReturnSites) -> bool {
        found.indirect.iter().any(|j| self.tail_jumps.contains(j))
    }

    /// Whether the indirect `jmp` at link-time `jmp` may leave its
    /// function (a tail call through a pointer, or a jump whose targets
    /// are not known), rather than take a jump table into it.
    pub(super) fn may_leave_by(&self, jmp: u64) -> bool {
        self.tail_jumps.contains(&jmp) || !self.targets.1.contains(&jmp)
    }

    /// The link-time addresses that direct `call`s to `target` (a
    /// link-time address: a function, or a PLT entry) return to where a
    /// continuation site may go, sorted: kept from an earlier planning (the
    /// plan cache), else found in the module's map of calls (built at the
    /// first need) and, with `keep`, kept (the planner keeps what it
    /// plans; the planning ahead only looks).
    pub(super) fn returns_of_calls_to(&self, target: u64, keep: bool) -> Vec<u64> {
        let elf = &self.elf;
        self.kept_or_found(
            target,
            |p| &mut p.calls,
            || self.calls().get(&target).cloned().unwrap_or_default(),
            keep,
            // Not a function's first instruction (after a call that does
            // not return), nor a `ret`: sites of their own may need them.
            |c| {
                elf.function_starting_at(c).is_none()
                    && elf.unnamed_function_at(c).is_none()
                    && !matches!(elf.first_byte(c), Some(0xC3 | 0xC2) | None)
            },
        )
    }

    /// The addresses under `target` in the plans' map `kept`, else those
    /// `found` gives (from a map of the module's, built at the first need)
    /// that `take` takes, sorted and, with `keep`, kept.
    fn kept_or_found(
        &self,
        target: u64,
        kept: fn(&mut plans::Plans) -> &mut plans::AddrMap<u64, Vec<u64>>,
        found: impl FnOnce() -> Vec<u64>,
        keep: bool,
        take: impl Fn(u64) -> bool,
    ) -> Vec<u64> {
        if let Some(r) = kept(&mut self.lock_plans()).get(&target) {
            return r.clone();
        }
        let mut r = found();
        r.retain(|&a| take(a));
        r.sort_unstable();
        if !keep {
            return r;
        }
        let mut p = self.lock_plans();
        kept(&mut p).insert(target, r.clone());
        p.added = true;
        r
    }

    /// Direct call targets (and the GOT slots of `call *slot(%rip)`) → the
    /// addresses those calls return to: a sweep of the executable
    /// sections, at the first need.
    fn calls(&self) -> &Calls {
        self.calls.get_or_init(|| {
            let Ok(parsed) = Elf::parse(self.elf.file_bytes()) else {
                return Calls::default();
            };
            let mut targets = BranchTargets::default();
            let mut noted = Noted::default();
            for (addr, code) in exec_sections(self.elf.file_bytes(), &parsed) {
                targets.sweep_noting(code, addr, &[], &mut noted);
            }
            calls_of(noted.calls)
        })
    }

    /// The `jmp rel32` and `jcc rel32` instructions (link-time addresses)
    /// that land on the branch target `target` (link-time), sorted: kept
    /// from an earlier planning (the plan cache), else found in the
    /// module's scan of them (made at the first need) and kept. None for
    /// an address the sweep found no branch to.
    pub(super) fn far_jumps_to(&self, target: u64) -> Vec<u64> {
        self.kept_or_found(
            target,
            |p| &mut p.jumps,
            || match self.targets.0.contains(&target) {
                true => self.far_jumps().to(target),
                false => Vec::new(),
            },
            true,
            |_| true,
        )
    }

    /// The module's far jumps ([`FarJumps`]), scanned at the first need.
    pub(super) fn far_jumps(&self) -> &FarJumps {
        self.far_jumps
            .get_or_init(|| match Elf::parse(self.elf.file_bytes()) {
                Ok(parsed) => FarJumps::scan(&exec_sections(self.elf.file_bytes(), &parsed)),
                Err(_) => FarJumps::default(),
            })
    }

    /// The module file.
    pub(super) fn elf(&self) -> &wprobe_elf::info::ElfInfo {
        &self.elf
    }

    /// The bytes from link-time address `end` (a function's end) to the
    /// next function's start, at most 16: the alignment padding a return
    /// site's window may take.
    pub(super) fn padding_after(&self, end: u64) -> &[u8] {
        let i = self.funcs.partition_point(|&(s, _)| s < end);
        self.padding_between(end, self.funcs.get(i).map(|&(s, _)| s))
    }

    /// The file's bytes from `end` to `next` (the start of the function
    /// after; none: 16 bytes on), at most 16.
    fn padding_between(&self, end: u64, next: Option<u64>) -> &[u8] {
        let next = next.unwrap_or(end + 16);
        let n = next.saturating_sub(end).min(16) as usize;
        self.elf.bytes_at(end, n).unwrap_or(&[])
    }

    /// The blocks of padding after the functions ending within rel8 reach
    /// of `link` a near jump's cave may take
    /// (`agent_loader::nearjump::padding_block`): run-time start (`bias`
    /// added) and length, each outside every function.
    pub(super) fn padding_blocks_near(&self, link: u64, bias: u64) -> Vec<(u64, usize)> {
        const REACH: u64 = 256;
        let lo = link.saturating_sub(REACH);
        let hi = link.saturating_add(REACH);
        let mut ends: Vec<(u64, u64)> = Vec::new();
        // The functions starting near, and the few before them (a long
        // function's start is far before its end).
        let first = self.funcs.partition_point(|&(s, _)| s < lo);
        let from = first.saturating_sub(4);
        for &(s, e) in self.funcs[from..].iter().take_while(|&&(s, _)| s <= hi) {
            ends.push((s, e));
        }
        let i = self.funcs.partition_point(|&(s, _)| s <= link);
        if let Some(f) = self.covering(i, link) {
            ends.push(f);
        }
        ends.sort_unstable();
        ends.dedup();
        // The blocks found, kept in the plans (`plans::Plans::blocks`).
        let mut plans = self.lock_plans();
        let plans = &mut *plans;
        let mut out = Vec::new();
        for &(start, end) in &ends {
            if end < lo || end > hi {
                continue;
            }
            let n = *plans.blocks.entry(end).or_insert_with(|| {
                plans.added = true;
                // No function may cover its bytes.
                if self.function(end, 0).is_some() {
                    return 0;
                }
                let j = self.funcs.partition_point(|&(s, _)| s < end);
                let next = self.funcs.get(j).map_or(end, |&(s, _)| s);
                let room =
                    next.saturating_sub(end)
                        .min(agent_loader::nearjump::MAX_BLOCK as u64) as usize;
                let (Some(after), Some(code)) = (
                    self.elf.bytes_at(end, room),
                    self.elf.bytes_at(start, (end - start) as usize),
                ) else {
                    return 0;
                };
                let func = Function {
                    start,
                    code,
                    bias: 0,
                };
                agent_loader::nearjump::padding_block(func, after, &self.targets)
            });
            if n > 0 {
                out.push((end.wrapping_add(bias), n));
            }
        }
        // The padding inside the functions near (after their `jmp`s).
        for (start, end) in ends {
            if end < lo || start > hi {
                continue;
            }
            let blocks = plans.inner.entry(start).or_insert_with(|| {
                plans.added = true;
                let Some(code) = self.elf.bytes_at(start, (end - start) as usize) else {
                    return Vec::new();
                };
                let func = Function {
                    start,
                    code,
                    bias: 0,
                };
                agent_loader::nearjump::inner_padding(func, &self.targets)
            });
            out.extend(
                blocks
                    .iter()
                    .filter(|&&(a, _)| lo <= a && a <= hi)
                    .map(|&(a, n)| (a.wrapping_add(bias), n)),
            );
        }
        out
    }

    /// The file's bytes at link-time address `link`.
    pub(super) fn bytes_at(&self, link: u64, n: usize) -> Option<&[u8]> {
        self.elf.bytes_at(link, n)
    }

    /// The link-time address of file offset `off`, if a `PT_LOAD` segment
    /// maps it.
    pub(super) fn vaddr_of_offset(&self, off: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|&&(o, n, _)| o <= off && off < o + n)
            .map(|&(o, _, va)| va + (off - o))
    }

    /// The load bias of the module where `m`, one of its mappings, maps
    /// it (run-time minus link-time addresses), if a `PT_LOAD` segment
    /// maps `m`'s offset.
    pub(super) fn bias_of(&self, m: &Mapping) -> Option<u64> {
        self.vaddr_of_offset(m.offset)
            .map(|link| m.start.wrapping_sub(link))
    }
}

/// Call targets (and the GOT slots of `call *slot(%rip)`) → the addresses
/// those calls return to ([`ModuleCode::calls`]).
type Calls = rustc_hash::FxHashMap<u64, Vec<u64>>;

/// The running largest end of `funcs` (sorted by start): `ModuleCode::reach`.
fn reach_of(funcs: &[(u64, u64)]) -> Vec<u64> {
    funcs
        .iter()
        .scan(0, |r, &(_, e)| {
            *r = e.max(*r);
            Some(*r)
        })
        .collect()
}

mod sweep;
#[cfg(test)]
mod tests;
