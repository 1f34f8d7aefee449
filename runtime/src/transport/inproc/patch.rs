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
//!
//! In modules: the module files' code, read at a first need or ahead on
//! a thread of its own (`module`); a probe's site planned and given its
//! stub (`plan`); a window checked against the rules, the file and the
//! process (`check`), or, where no 5-byte jump fits, a near jump to a cave
//! in padding (`near`); return probes, their entry and their `ret`s
//! (`plan_return`), the `ret`s of the functions of other modules they
//! tail-call (`outside`); continuation sites after the calls of a
//! function (`continuations`) and the return probes of PLT entries
//! (`plt`) and of GOT slots (`got`, `-fno-plt` calls); a function whose
//! `ret` no jump can cover run as a relocated copy (`whole`); a trapped
//! `ret`'s epilogue run in a stub of its own, entered by the far jumps to
//! it (`fragments`); the sites where the target counts its calls that
//! make a vfork child (`vfork_marks`); the stub areas and their stubs, and the watchpoints' stubs
//! (`stubs`); the jumps written (`install`) and the bytes put back or
//! forgotten (`restore`); the sites that trap instead (`trap_sites`).

mod ahead;
mod check;
mod continuations;
mod copy_tables;
mod fragments;
mod got;
mod install;
mod module;
mod near;
mod outside;
mod plan;
mod plan_return;
mod plt;
mod restore;
mod stubs;
mod trap_sites;
mod vfork_marks;
mod whole;
mod window_index;
mod windows;

use rustc_hash::FxHashMap as HashMap;
use std::path::PathBuf;

use agent_loader::nearjump::CAVE_LEN;
use agent_loader::stub::Site;

use self::module::LastModule;
use super::code::ModuleCode;
use super::journal::Journal;
use crate::proc::procmaps::Mapping;

/// An `r-x` mapping in the target holding stubs.
#[derive(Clone, Debug)]
pub(super) struct Area {
    /// Its address.
    pub(super) base: u64,
    /// Its contents as they will be written.
    code: Vec<u8>,
    /// Next free byte.
    next: u64,
}

/// What a window is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// A probe's address (`window::plan`).
    Probe,
    /// A `ret` (`window::plan_ret`).
    Ret,
    /// A whole short function, entry through first `ret` (`window::plan_whole`).
    Whole,
}

/// A patched (or to-be-patched) site.
#[derive(Clone, Debug)]
pub(super) struct Planned {
    /// The window.
    pub(super) site: Site,
    /// The probes at the site, in insertion order.
    pub(super) tags: Vec<usize>,
    /// Return probes whose function enters here.
    pub(super) ret_tags: Vec<usize>,
    /// A return site's: the return probe whose planning added it, under
    /// which the statistics count it (a return site shared by the
    /// functions that tail-call one another is counted once).
    pub(super) ret_of: Option<usize>,
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
#[derive(Clone, Debug)]
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
    /// By canonical path, as bytes (hashed as bytes: a `Path` hashes
    /// component by component, at every lookup of planning).
    modules:
        HashMap<std::ffi::OsString, Result<std::sync::Arc<ModuleCode>, crate::transport::Error>>,
    /// Whether a thread of its own reads the module files ahead
    /// ([`Patcher::read_ahead`]).
    reading_ahead: bool,
    /// The `ret`s of functions of other modules that traced functions
    /// tail-call, by name (`None`: not found, or not decodable).
    outside: HashMap<String, Option<Vec<u64>>>,
    /// The keys of `outside` whose `ret`s do not see every return: a
    /// function on the way leaves by a jump through a pointer, or
    /// tail-calls a function of another module whose `ret`s were not
    /// found (`Patcher::outside_partial`).
    outside_partial: rustc_hash::FxHashSet<String>,
    pub(super) areas: Vec<Area>,
    /// Sites by window address.
    pub(super) sites: Vec<Planned>,
    by_probe_addr: HashMap<u64, usize>,
    /// Every site's window by address (`window_index`).
    by_window: window_index::WindowIndex,
    /// Program counters of the stopped threads (nothing may be patched
    /// under them).
    pub(super) thread_pcs: Vec<(i32, u64)>,
    journal: Option<Journal>,
    /// What planning fell back to, for the user (drained by the
    /// transport): (the function, the site and why).
    pub(super) notes: Vec<(String, String)>,
    /// The journal of the trap sites (the ptrace transport's format).
    trap_journal: Option<crate::transport::common::journal::Journal>,
    /// Sites before this index are in the journal (sites are journaled
    /// as they are added, a library mapped later appending its own).
    journaled: usize,
    /// The same for the trap journal.
    traps_journaled: usize,
    /// The journal's lines of the sites from the first to the second
    /// index, made ahead of their installation ([`Patcher::journal_ahead`]).
    journal_ahead: Option<(usize, usize, String)>,
    /// The plan cache being written behind ([`Patcher::save_plans_behind`]).
    saving: Option<std::thread::JoinHandle<()>>,
    /// The names each module imports, for continuation sites in the
    /// modules that call a traced function: by the path its mappings name
    /// (a string hashed, not a path made canonical and hashed component
    /// by component, for each function planned), with the canonical path.
    imports: HashMap<String, (PathBuf, rustc_hash::FxHashSet<String>)>,
    /// The caves taken (or reserved by a window checked), by address.
    caves: window_index::CaveSet,
    /// The padding after functions that windows of `ret`s take (checked):
    /// start → end. No cave goes there.
    tails: std::collections::BTreeMap<u64, u64>,
    /// The near sites planned, for `-v` and `WPROBE_DEBUG` (drained by
    /// the transport).
    pub(super) near_notes: Vec<String>,
    /// The function of each trap site (by the trap's address), for the
    /// count of stops at the end.
    pub(super) trap_funcs: HashMap<u64, String>,
    /// The function whose `ret` was checked last, decoded: its other
    /// `ret`s, checked next, need it too.
    decoded: Option<agent_loader::window::Decoded>,
    /// The functions run as relocated copies (`whole`), by start.
    copies: Vec<whole::Copied>,
    /// The module code of the mapping asked for last, by the mapping's
    /// range, offset and inode, with its file's canonical path
    /// ([`Patcher::module_of_mapping`]).
    last_module: Option<LastModule>,
    /// The window addresses of every return site added as a trap (some
    /// since retired or patched): where no such site is, a function has
    /// no trapped `ret` planned before it (`whole`), found without a look
    /// at the sites.
    trapped_rets: std::collections::BTreeSet<u64>,
    /// How many of those copies are an earlier run's, kept in the plan
    /// cache (for `WPROBE_DEBUG`).
    pub(super) copies_kept: usize,
    /// The return probe being planned (`plan_return`): the return sites
    /// added meanwhile are its ([`Planned::ret_of`]).
    ret_owner: Option<usize>,
    /// Sites expected ([`Patcher::expect_sites`]).
    expected: usize,
    /// The modules whose return sites a thread finds ahead of the
    /// planning (`ahead::plan_ahead`).
    rets_ahead: rustc_hash::FxHashSet<std::ffi::OsString>,
    /// Whether the process uses CET shadow stacks (read at the first copy
    /// of a function that calls).
    shstk: Option<bool>,
    /// Sites before this index were looked at for epilogues to run in a
    /// stub of their own (`fragments`).
    fragments_from: usize,
    /// What each marked site (by probe address) does to the count of
    /// calls that make a vfork child (`vfork_marks`).
    vfork_marks: HashMap<u64, u32>,
    /// The marks around vfork children were planned (or found needless).
    vfork_marked: bool,
}

/// A process's patch journal and trap journal.
pub(super) type Journals = (
    Option<Journal>,
    Option<crate::transport::common::journal::Journal>,
);

/// Mappings of `pid` (for planning).
fn mapping_of(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    crate::proc::procmaps::find(maps, addr)
}

impl Planned {
    /// A return site with no window of its own (no bytes replaced): `site`
    /// reached through `stub` (0: none yet), the return of a call seen
    /// there without a jump written at it.
    pub(super) fn bare_return(site: Site, stub: u64) -> Planned {
        Planned {
            site,
            tags: Vec::new(),
            ret_tags: Vec::new(),
            ret_of: None,
            kind: agent_abi::site_kind::RET,
            orig: Vec::new(),
            patch: Vec::new(),
            inode: 0,
            patched: false,
            trap: None,
            stub,
            cave: None,
        }
    }

    /// The address of the first byte the site's jump (or `int3`) replaces,
    /// and the bytes it replaces.
    pub(super) fn window(&self) -> (u64, Vec<u8>) {
        (self.site.addr, self.orig.clone())
    }
}

impl Patcher {
    /// Room for about `n` more sites.
    pub(super) fn expect_sites(&mut self, n: usize) {
        self.expected = self.expected.saturating_add(n);
        // And room for the continuation sites, about a third more in a
        // whole program (python3.11: 14,078 probe sites, 19,432 in all).
        let more = n.saturating_add(n / 2);
        self.sites.reserve(more);
        self.by_probe_addr.reserve(more);
    }

    /// Whether half the sites expected ([`Patcher::expect_sites`]) are
    /// planned.
    pub(super) fn half_planned(&self) -> bool {
        self.sites.len().saturating_mul(2) >= self.expected
    }

    /// Adds a site (indexed by its window).
    fn push_site(&mut self, p: Planned) {
        self.by_window
            .insert(p.site.addr, p.site.len, self.sites.len());
        self.sites.push(p);
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

    /// The sites, stub areas and caves of a fork child of the process, a
    /// copy of its parent's memory: what this patcher knows, without its
    /// journals (the child's are its own: [`Patcher::lend_journals`]), its
    /// reads ahead and its notes.
    pub(super) fn fork_copy(&self) -> Patcher {
        Patcher {
            modules: self.modules.clone(),
            reading_ahead: false,
            outside: self.outside.clone(),
            outside_partial: self.outside_partial.clone(),
            areas: self.areas.clone(),
            sites: self.sites.clone(),
            by_probe_addr: self.by_probe_addr.clone(),
            by_window: self.by_window.clone(),
            thread_pcs: Vec::new(),
            journal: None,
            notes: Vec::new(),
            trap_journal: None,
            journaled: self.journaled,
            traps_journaled: self.traps_journaled,
            journal_ahead: None,
            saving: None,
            imports: self.imports.clone(),
            caves: self.caves.clone(),
            tails: self.tails.clone(),
            near_notes: Vec::new(),
            trap_funcs: self.trap_funcs.clone(),
            decoded: None,
            copies: self.copies.clone(),
            copies_kept: 0,
            trapped_rets: self.trapped_rets.clone(),
            last_module: None,
            ret_owner: None,
            shstk: self.shstk,
            fragments_from: self.fragments_from,
            vfork_marks: self.vfork_marks.clone(),
            vfork_marked: self.vfork_marked,
            expected: 0,
            rets_ahead: Default::default(),
        }
    }

    /// Gives the patcher the journals its sites are recorded in (a fork
    /// child's, which its `forks::Kid` keeps), and takes back those it
    /// had: lent for an installation, handed back after it.
    pub(super) fn lend_journals(&mut self, journals: Journals) -> Journals {
        let had = (self.journal.take(), self.trap_journal.take());
        self.journal = journals.0;
        self.trap_journal = journals.1;
        had
    }

    /// Whether a jump is in place somewhere.
    pub(super) fn any_patched(&self) -> bool {
        self.sites.iter().any(|s| s.patched)
    }
}
