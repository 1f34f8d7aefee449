//! User-space symbolization for printing (`ustack`, `usym`, `func`): a
//! process's mappings (read when the process is first seen, re-read when an
//! address falls outside them) and each mapped ELF file's function symbols,
//! sorted for binary search. Symbols print as bpftrace prints them: `name`
//! or `name+offset` (decimal); an unknown address as `0x…`. C++ and Rust
//! names are demangled (`ns::f(int)+4`, as bpftrace and perf print them)
//! unless turned off (`--no-demangle`, `config = { cpp_demangle = 0 }`),
//! once per symbol when its file is read. Never panics;
//! a process that has exited keeps the mappings read while it lived.

use crate::proc::procmaps::{self, Mapping, ModuleKey};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Function symbols of one file, sorted by address.
struct Table {
    /// `(value, size, name)`.
    funcs: Vec<(u64, u64, String)>,
    first_load: (u64, u64),
    is_dyn: bool,
}

/// Symbol tables by file, mappings by process.
pub struct Symbolizer {
    maps: HashMap<u64, Vec<Mapping>>,
    tables: HashMap<PathBuf, Option<Table>>,
    demangle: bool,
}

impl Default for Symbolizer {
    fn default() -> Symbolizer {
        Symbolizer {
            maps: HashMap::new(),
            tables: HashMap::new(),
            demangle: true,
        }
    }
}

impl Table {
    fn load(path: &Path, demangle: bool) -> Option<Table> {
        let elf = wprobe_elf::ElfInfo::open(path).ok()?;
        // One name per address, by the project's one rule
        // (`wprobe_elf::functions`): its preferred `STT_FUNC` alias
        // (IFUNC resolvers, run once at load, are left out).
        let funcs = wprobe_elf::functions::named(&elf)
            .into_iter()
            .filter_map(|f| {
                let s = f
                    .aliases
                    .into_iter()
                    .find(|s| s.kind == wprobe_elf::SymKind::Func)?;
                let name = if demangle {
                    wprobe_elf::demangle(&s.name).into_owned()
                } else {
                    s.name
                };
                Some((s.value, s.size, name))
            })
            .collect();
        Some(Table {
            funcs,
            first_load: elf.first_load.unwrap_or((0, 0)),
            is_dyn: elf.is_dyn,
        })
    }

    /// The function containing link-time address `v`, with the offset.
    fn find(&self, v: u64) -> Option<(&str, u64)> {
        let i = self.funcs.partition_point(|f| f.0 <= v);
        let (start, size, name) = self.funcs.get(i.checked_sub(1)?)?;
        let off = v - start;
        (off < (*size).max(1)).then_some((name.as_str(), off))
    }
}

impl Symbolizer {
    /// Whether names are demangled (the default); set before the first
    /// lookup.
    pub fn set_demangle(&mut self, yes: bool) {
        if yes != self.demangle {
            self.tables.clear();
            self.demangle = yes;
        }
    }

    /// Reads the mappings of `pid` if not known yet (call while it lives).
    pub fn note(&mut self, pid: u64) {
        if !self.maps.contains_key(&pid) {
            // A process already gone (a system-wide perf run reads its
            // samples after the hit) is noted with no mappings: not read
            // again at each of its hits.
            let m = procmaps::read(pid as i32).unwrap_or_default();
            if self.maps.len() > 1024 {
                self.maps.clear();
            }
            self.maps.insert(pid, m);
        }
    }

    /// Drops the mappings known for `pid` (it exec'd: its addresses now
    /// belong to another program).
    pub fn forget(&mut self, pid: u64) {
        self.maps.remove(&pid);
    }

    fn lookup(&mut self, pid: u64, addr: u64) -> Option<(String, u64)> {
        self.note(pid);
        let mut m = procmaps::find(self.maps.get(&pid)?, addr).cloned();
        if m.is_none() {
            // Mapped since we read the mappings (dlopen)?
            if let Ok(fresh) = procmaps::read(pid as i32) {
                m = procmaps::find(&fresh, addr).cloned();
                self.maps.insert(pid, fresh);
            }
        }
        let m = m.filter(|m| m.is_file())?;
        let path = PathBuf::from(&m.path);
        let demangle = self.demangle;
        let table = self
            .tables
            .entry(path.clone())
            .or_insert_with(|| Table::load(&path, demangle))
            .as_ref()?;
        let bias = if table.is_dyn {
            let maps = self.maps.get(&pid)?;
            procmaps::load_bias(maps, &ModuleKey::Path(&path), table.first_load)?
        } else {
            0
        };
        let (name, off) = table.find(addr.wrapping_sub(bias))?;
        Some((name.to_string(), off))
    }

    /// `name+off (path)`, else `0x… ([unknown])` (perf's stack style).
    pub fn resolve_with_module(&mut self, pid: u64, addr: u64) -> String {
        let found = self.lookup(pid, addr);
        let path = self
            .maps
            .get(&pid)
            .and_then(|m| procmaps::find(m, addr))
            .filter(|m| m.is_file())
            .map(|m| m.path.clone());
        match (found, path) {
            (Some((n, o)), Some(p)) => format!("{n}+{o} ({p})"),
            (Some((n, o)), None) => format!("{n}+{o} ([unknown])"),
            (None, Some(p)) => format!("{addr:#x} ({p})"),
            (None, None) => format!("{addr:#x} ([unknown])"),
        }
    }

    /// `name+off` (or `name` without `offset`), else `0x…`.
    pub fn resolve(&mut self, pid: u64, addr: u64, offset: bool) -> String {
        match self.lookup(pid, addr) {
            Some((n, o)) if offset => format!("{n}+{o}"),
            Some((n, _)) => n,
            None => format!("{addr:#x}"),
        }
    }
}
