//! The `ret`s of functions of other modules that traced functions
//! tail-call or call through a PLT entry: the function a name or a GOT
//! slot leads to (an IFUNC's choice among them), its `ret`s and those of
//! the functions it tail-calls in turn, cached; and the functions that
//! never return.

use std::path::{Path, PathBuf};

use super::Patcher;
use super::module::{module_at, run_time_at};
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::world::World;

/// How many modules deep the `ret`s of tail-called functions of other
/// modules are looked for (`operator delete(void*, size_t)` in libstdc++
/// ends in `jmp free@plt`, into libc).
pub(super) const OUTSIDE_DEPTH: usize = 3;

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

/// Where a function another module calls by name is entered: a file
/// offset of a module, or, for an IFUNC, the run-time address of the slot
/// where the dynamic linker wrote its resolver's choice (with the
/// resolver's run-time address).
enum Entered {
    Offset(PathBuf, u64),
    Slot(u64, u64),
}

impl Patcher {
    /// Whether the function `name` of the first executable module that
    /// defines it (a sized global function symbol) never returns: no
    /// `ret`, no tail call out of its module, no indirect jump (`abort`),
    /// or one of [`NEVER_RETURN`] (`longjmp` leaves by an indirect jump).
    pub(super) fn never_returns(&mut self, maps: &[Mapping], name: &str) -> bool {
        if NEVER_RETURN.contains(&name) {
            return true;
        }
        for p in Self::exec_paths(maps) {
            // The symbol tables only (shared with the module's reading):
            // not each module's sweep, waited for in turn.
            let Ok(elf) = wprobe_elf::info::ElfInfo::open_shared(&p) else {
                continue;
            };
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
            return crate::transport::retsites::return_sites(&elf, off, "inproc")
                .is_ok_and(|r| r.rets.is_empty() && r.outside.is_empty() && r.indirect.is_empty());
        }
        false
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
    pub(super) fn outside_rets(
        &mut self,
        world: &World,
        maps: &[Mapping],
        name: &str,
    ) -> Option<Vec<u64>> {
        self.outside_rets_at(world, maps, name, OUTSIDE_DEPTH)
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
        let mut at = None;
        for p in &Self::exec_paths(maps) {
            // The symbol tables only: the sweep of the module that defines
            // `name` is waited for by `rets_of`, not every module's before.
            let Ok(elf) = wprobe_elf::info::ElfInfo::open_shared(p) else {
                continue;
            };
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
                    let Ok(module) = self.module(p).as_ref() else {
                        continue;
                    };
                    let bias = exec
                        .iter()
                        .filter(|(q, _)| q == p)
                        .find_map(|(_, m)| module.bias_of(m));
                    at = elf.irelative_slot(sym.value).zip(bias).map(|(slot, b)| {
                        Entered::Slot(slot.wrapping_add(b), sym.value.wrapping_add(b))
                    });
                }
                _ => continue,
            }
            break;
        }
        let (found, partial) = match at {
            Some(Entered::Offset(p, off)) => self.rets_of(world, maps, &p, off, depth),
            Some(Entered::Slot(slot, resolver)) => {
                let mut w = [0u8; 8];
                let chosen = (world.peek(slot, &mut w) == 8).then(|| u64::from_le_bytes(w));
                // Before the dynamic linker ran the resolver the slot holds
                // the resolver (or the file's bytes): no choice to follow.
                match chosen.filter(|&a| a != resolver && a != 0) {
                    Some(a) => {
                        let found = self.rets_at(world, maps, a, depth);
                        (found, self.outside_partial.contains(&at_key(a)))
                    }
                    None => (None, false),
                }
            }
            None => (None, false),
        };
        if partial {
            self.outside_partial.insert(name.to_string());
        }
        self.outside.insert(name.to_string(), found.clone());
        found
    }

    /// Whether the `ret`s [`Self::outside_rets`] found for `name` (or,
    /// with `name` not found, [`Self::rets_at`] for the function at
    /// run-time address `at`) miss some of its returns: a function on the
    /// way leaves by a jump through a pointer (`_Unwind_DeleteException`'s
    /// `jmp *%rax` to the exception's cleanup), or tail-calls a function
    /// of another module whose `ret`s were not found (deeper than
    /// [`OUTSIDE_DEPTH`], or not decodable) and that may return.
    pub(super) fn outside_partial(&self, name: &str, at: Option<u64>) -> bool {
        self.outside_partial.contains(name)
            || (self.outside.get(name).is_none_or(Option::is_none)
                && at.is_some_and(|a| self.outside_partial.contains(&at_key(a))))
    }

    /// The run-time addresses of the `ret`s of the function entered at
    /// run-time address `addr` (an address a GOT slot holds), as
    /// [`Self::outside_rets`] takes them; the function may be one no symbol
    /// names (bounded by its unwind table entry). Cached by address.
    pub(super) fn rets_at(
        &mut self,
        world: &World,
        maps: &[Mapping],
        addr: u64,
        depth: usize,
    ) -> Option<Vec<u64>> {
        let key = at_key(addr);
        if let Some(r) = self.outside.get(&key) {
            return r.clone();
        }
        self.outside.insert(key.clone(), None);
        let at = module_at(maps, addr).filter(|a| a.m.exec && a.m.is_file())?;
        let (found, partial) = self.rets_of(world, maps, &at.path, at.file_off, depth);
        if partial {
            self.outside_partial.insert(key.clone());
        }
        self.outside.insert(key, found.clone());
        found
    }

    /// The run-time addresses of the `ret`s of the function of module `p`
    /// entered at file offset `off`, and of those of the functions of
    /// other modules it tail-calls (`depth - 1` deep); `None` when it has
    /// none or they cannot be placed. With whether they miss some of its
    /// returns ([`Self::outside_partial`]).
    fn rets_of(
        &mut self,
        world: &World,
        maps: &[Mapping],
        p: &Path,
        off: u64,
        depth: usize,
    ) -> (Option<Vec<u64>>, bool) {
        let Ok(module) = self.module(p).as_ref().cloned() else {
            return (None, false);
        };
        // Found once per module file and kept with its plans, as a traced
        // function's are (a C library's `free` and `realloc` followed
        // through their tail calls: a third of a million instructions each).
        let Ok(sites) = module.return_sites(off) else {
            return (None, false);
        };
        let mut partial = sites.indirect.iter().any(|&j| module.may_leave_by(j));
        let exec = Self::exec_files(maps);
        let Some(mut rets) = sites
            .rets
            .iter()
            .map(|&off| run_time_at(&exec, p, off))
            .collect::<Option<Vec<u64>>>()
        else {
            return (None, partial);
        };
        for next in &sites.outside {
            match self.outside_rets_at(world, maps, next, depth - 1) {
                Some(more) => {
                    rets.extend(more);
                    partial |= self.outside_partial.contains(next.as_str());
                }
                None => partial |= !self.never_returns(maps, next),
            }
        }
        rets.sort_unstable();
        rets.dedup();
        (Some(rets).filter(|r| !r.is_empty()), partial)
    }
}

/// The key of [`Patcher::rets_at`]'s function at run-time address `addr`
/// in the caches of outside `ret`s.
fn at_key(addr: u64) -> String {
    format!("@{addr:#x}")
}
