//! The marks around the C library's calls that make a vfork child: sites
//! at the entry and the `ret`s of `vfork`, `posix_spawn`, `posix_spawnp`
//! and `clone`, where the agent counts the calls under way
//! ([`agent_abi::fork_guard::VFORK_CALLS_WORD`]) before anything else.
//!
//! A vfork child runs on its parent's memory and thread pointer, so the
//! agent takes its hits for those of the thread that made it unless it
//! knows a child may be running; asking the kernel at every hit (`getpid`)
//! would cost each hit a system call. The thread that makes the child is
//! suspended from the child's start until it executes a program or exits,
//! inside one of these calls: while the count is not 0 the agent asks. So
//! the target marks its vfork children itself, and the tracer need not
//! hold its threads to see each one made (which would make the process
//! wait for wprobe at every signal and every new thread).
//!
//! `vfork` returns twice through the same `ret`, in the child (`rax` 0)
//! and then in the parent: the count drops at the parent's
//! ([`agent_abi::vfork_mark::LEAVE_UNLESS_CHILD`]). The child of
//! `posix_spawn` or `clone` never reaches its maker's `ret`s
//! ([`agent_abi::vfork_mark::LEAVE`]). A call whose child is made some
//! other way (a raw `clone` system call) is not marked: without `-f` its
//! hits count as its parent's, as before.
//!
//! Planned once a process has a probe's site (none for watchpoints alone:
//! a vfork child does not trigger its parent's) and a module that may make
//! a vfork child (one that imports a function of [`CALLERS`]: a program
//! that never does pays nothing); a function's marks only when every window of it takes a jump
//! (a trap at a `ret` the child reaches would stop a process wprobe does
//! not hold), and a site already there (a probe's) marked as it is.

use agent_abi::{site_kind, vfork_mark};

use super::Patcher;
use super::Shape;
use super::check::Checked;
use super::module::run_time_at;
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::world::World;

/// The functions that make a vfork child, and what their `ret`s do.
const MAKERS: &[(&str, u32)] = &[
    ("vfork", vfork_mark::LEAVE_UNLESS_CHILD),
    ("posix_spawn", vfork_mark::LEAVE),
    ("posix_spawnp", vfork_mark::LEAVE),
    ("clone", vfork_mark::LEAVE),
];

/// The functions a module calls (imports) when it may make a vfork child:
/// [`MAKERS`], and the C library's that make one inside (`system` and
/// `popen` call `posix_spawn`).
const CALLERS: &[&str] = &[
    "vfork",
    "__vfork",
    "posix_spawn",
    "posix_spawnp",
    "clone",
    "__clone",
    "system",
    "popen",
];

/// A window of a function's marks: an existing site's address, or one
/// checked to be added.
enum Mark {
    At(u64),
    New(Box<Checked>),
}

impl Patcher {
    /// Plans the marks of every function of [`MAKERS`] that an executable
    /// module mapped now defines (the C library's, or a static program's
    /// own), once the process has sites. What cannot be marked is left
    /// unmarked, said under `WPROBE_DEBUG`.
    pub(in crate::transport::inproc) fn plan_vfork_marks(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
    ) {
        let probed = self
            .sites
            .iter()
            .any(|s| s.kind != site_kind::WATCH && !(s.tags.is_empty() && s.ret_tags.is_empty()));
        if self.vfork_marked || !probed {
            return;
        }
        // Looked at again when a library is mapped (it may be the one).
        if !self.may_make_vfork_children(maps) {
            return;
        }
        self.vfork_marked = true;
        for &(name, leave) in MAKERS {
            for entry in self.entries_of(maps, name) {
                if let Err(why) = self.mark_function(world, maps, name, entry, leave) {
                    debug(format_args!("{name} at {entry:#x} not marked: {why}"));
                }
            }
        }
    }

    /// Whether a module mapped now may make vfork children: one imports
    /// a function of [`CALLERS`], or one with no imports (a static
    /// program) defines one of [`MAKERS`]. Only the modules' symbols are
    /// read (the C library's code is swept only when it is marked).
    fn may_make_vfork_children(&mut self, maps: &[Mapping]) -> bool {
        for p in Self::exec_paths(maps) {
            let Ok(elf) = wprobe_elf::info::ElfInfo::open_shared(&p) else {
                continue;
            };
            let imports: rustc_hash::FxHashSet<&str> =
                elf.imports.iter().map(|(_, n)| n.as_str()).collect();
            if CALLERS.iter().any(|&n| imports.contains(n)) {
                return true;
            }
            let defines = |name: &str| match elf.lookup(name) {
                wprobe_elf::Lookup::Found(s) => s.name == name && s.size > 0,
                wprobe_elf::Lookup::Ambiguous(v) => v.iter().any(|s| s.name == name),
                wprobe_elf::Lookup::NotFound => false,
            };
            if imports.is_empty() && MAKERS.iter().any(|&(n, _)| defines(n)) {
                return true;
            }
        }
        false
    }

    /// The run-time entries of the sized global functions called `name`
    /// of the first executable module that defines one (every version of
    /// it: glibc has two `posix_spawn`s).
    fn entries_of(&mut self, maps: &[Mapping], name: &str) -> Vec<u64> {
        let exec = Self::exec_files(maps);
        for p in Self::exec_paths(maps) {
            let Ok(module) = self.module(&p).as_ref() else {
                continue;
            };
            let elf = module.elf();
            let syms = match elf.lookup(name) {
                wprobe_elf::Lookup::Found(s) => vec![s],
                wprobe_elf::Lookup::Ambiguous(v) => v,
                wprobe_elf::Lookup::NotFound => continue,
            };
            let offsets: Vec<u64> = syms
                .into_iter()
                .filter(|s| {
                    s.name == name && s.global && s.size > 0 && s.kind == wprobe_elf::SymKind::Func
                })
                .filter_map(|s| elf.file_offset(s.value))
                .collect();
            if offsets.is_empty() {
                continue;
            }
            let mut at: Vec<u64> = offsets
                .iter()
                .filter_map(|&off| run_time_at(&exec, &p, off))
                .collect();
            at.sort_unstable();
            at.dedup();
            return at;
        }
        Vec::new()
    }

    /// Marks the function `name` entered at `entry`: its entry
    /// ([`vfork_mark::ENTER`]) and each of its `ret`s (`leave`), every new
    /// window checked before any is added.
    fn mark_function(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        name: &str,
        entry: u64,
        leave: u32,
    ) -> Result<(), String> {
        let rets = self
            .rets_at(world, maps, entry, 1)
            .ok_or_else(|| "its `ret`s are not known".to_string())?;
        let mut marks: Vec<(Mark, u32)> = Vec::new();
        let mut refused = None;
        for (at, shape, what) in std::iter::once((entry, Shape::Probe, vfork_mark::ENTER))
            .chain(rets.iter().map(|&r| (r, Shape::Ret, leave)))
        {
            if self.by_probe_addr.contains_key(&at) {
                marks.push((Mark::At(at), what));
                continue;
            }
            match self.check(world, maps, at, None, shape) {
                Ok(c) if c.trap.is_none() => marks.push((Mark::New(Box::new(c)), what)),
                Ok(c) => {
                    self.release(&c);
                    refused = Some(format!("no jump fits at {at:#x}"));
                    break;
                }
                Err(e) => {
                    refused = Some(e.to_string());
                    break;
                }
            }
        }
        // New windows of one function must not meet either.
        let mut spans: Vec<(u64, u64)> = marks
            .iter()
            .filter_map(|(m, _)| match m {
                Mark::New(c) => Some((c.site.addr, c.site.addr + c.site.len as u64)),
                Mark::At(_) => None,
            })
            .collect();
        spans.sort_unstable();
        if refused.is_none() && spans.windows(2).any(|w| w[0].1 > w[1].0) {
            refused = Some("its windows would overlap".to_string());
        }
        if let Some(why) = refused {
            for (m, _) in marks {
                if let Mark::New(c) = m {
                    self.release(&c);
                }
            }
            return Err(why);
        }
        for (m, what) in marks {
            let at = match m {
                Mark::At(at) => at,
                Mark::New(c) => {
                    let at = c.site.probe;
                    let kind = if what == vfork_mark::ENTER {
                        site_kind::PROBE
                    } else {
                        site_kind::RET
                    };
                    self.add(world, *c, kind).map_err(|e| e.to_string())?;
                    at
                }
            };
            self.vfork_marks.insert(at, what);
        }
        debug(format_args!(
            "{name} at {entry:#x}: its entry and {} `ret`s",
            rets.len()
        ));
        Ok(())
    }

    /// What the site at `addr` does to the count of calls that make a
    /// vfork child ([`agent_abi::vfork_mark`]; 0: nothing).
    pub(in crate::transport::inproc) fn vfork_mark(&self, addr: u64) -> u32 {
        self.vfork_marks.get(&addr).copied().unwrap_or(0)
    }
}

/// Says `what` under `WPROBE_DEBUG`.
fn debug(what: std::fmt::Arguments<'_>) {
    if std::env::var_os("WPROBE_DEBUG").is_some() {
        crate::elog!("wprobe: debug: vfork marks: {what}");
    }
}
