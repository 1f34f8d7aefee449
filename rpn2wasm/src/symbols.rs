//! Symbol lookup for symbolic expressions (spec §2.7): exact match first,
//! then a unique case-insensitive match. Two sources: [`ElfSymbols`] reads
//! the module file through `wprobe_elf` (lazily, on the first lookup, so a
//! program without symbols never needs the file), with the very rule the
//! runtime uses ([`wprobe_elf::ElfInfo::lookup`]: of several definitions
//! of one name, the single global one); [`MapSymbols`] is an in-memory
//! table for tests and tools. Nothing here touches a running process.

use std::cell::OnceCell;
use std::path::PathBuf;

/// Why a symbol could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymbolError {
    /// No symbol of that name (even case-insensitively).
    Unknown,
    /// Several symbols match case-insensitively and none exactly.
    Ambiguous(Vec<String>),
    /// The module file could not be read or parsed (message says why).
    Module(String),
}

/// A source of ELF symbols: `st_value` by name.
pub trait Symbols {
    /// Looks a symbol up; returns its exact name and `st_value`.
    fn lookup(&self, name: &str) -> Result<(String, u64), SymbolError>;
}

/// The matching rule of §2.7 over `(name, value)` pairs in priority order:
/// the first exact match; else the case-insensitive matches, accepted if
/// they all have one name.
pub fn resolve<'a>(
    table: impl Iterator<Item = (&'a str, u64)> + Clone,
    name: &str,
) -> Result<(String, u64), SymbolError> {
    if let Some((n, v)) = table.clone().find(|(n, _)| *n == name) {
        return Ok((n.to_string(), v));
    }
    let mut found: Option<(&str, u64)> = None;
    let mut names: Vec<String> = Vec::new();
    for (n, v) in table.filter(|(n, _)| n.eq_ignore_ascii_case(name)) {
        if !names.iter().any(|x| x == n) {
            names.push(n.to_string());
        }
        found.get_or_insert((n, v));
    }
    match (found, names.len()) {
        (Some((n, v)), 1) => Ok((n.to_string(), v)),
        (None, _) => Err(SymbolError::Unknown),
        _ => {
            names.sort();
            Err(SymbolError::Ambiguous(names))
        }
    }
}

/// An in-memory symbol table: `(name, st_value)` pairs, searched in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapSymbols(pub Vec<(String, u64)>);

impl MapSymbols {
    /// A table from `(name, value)` pairs.
    pub fn new<S: Into<String>>(pairs: impl IntoIterator<Item = (S, u64)>) -> Self {
        MapSymbols(pairs.into_iter().map(|(n, v)| (n.into(), v)).collect())
    }
}

impl Symbols for MapSymbols {
    fn lookup(&self, name: &str) -> Result<(String, u64), SymbolError> {
        resolve(self.0.iter().map(|(n, v)| (n.as_str(), *v)), name)
    }
}

/// The symbols of a module file, read on the first lookup.
#[derive(Debug)]
pub struct ElfSymbols {
    module: String,
    dirs: Vec<PathBuf>,
    info: OnceCell<Result<wprobe_elf::ElfInfo, String>>,
}

impl ElfSymbols {
    /// Symbols of the module named `module` (the value of `name =`),
    /// located when first needed as spec §5 says.
    pub fn new(module: &str) -> Self {
        Self::with_dirs(module, Vec::new())
    }

    /// Like [`ElfSymbols::new`], also looking for a bare module name in
    /// `dirs` (after the current directory, before `PATH`).
    pub fn with_dirs(module: &str, dirs: Vec<PathBuf>) -> Self {
        ElfSymbols {
            module: module.to_string(),
            dirs,
            info: OnceCell::new(),
        }
    }

    fn info(&self) -> &Result<wprobe_elf::ElfInfo, String> {
        self.info.get_or_init(|| {
            let path = locate_module_in(&self.module, &self.dirs)?;
            wprobe_elf::ElfInfo::open(&path).map_err(|e| e.to_string())
        })
    }
}

impl ElfSymbols {
    /// The sites of USDT probe `provider:name` of the module (exact names),
    /// in note order; an error when the module cannot be read.
    pub fn usdt_sites(
        &self,
        provider: &str,
        name: &str,
    ) -> Result<Vec<wprobe_elf::usdt::UsdtSite>, String> {
        match self.info() {
            Ok(info) => Ok(wprobe_elf::usdt::sites(info)
                .into_iter()
                .filter(|s| s.provider == provider && s.name == name)
                .collect()),
            Err(e) => Err(e.clone()),
        }
    }
}

impl Symbols for ElfSymbols {
    fn lookup(&self, name: &str) -> Result<(String, u64), SymbolError> {
        use wprobe_elf::Lookup;
        match self.info() {
            Ok(info) => match info.lookup(name) {
                Lookup::Found(s) => Ok((s.name.clone(), s.value)),
                Lookup::NotFound => Err(SymbolError::Unknown),
                Lookup::Ambiguous(c) => {
                    let mut names: Vec<String> = c
                        .iter()
                        .map(|s| {
                            if c.iter().all(|o| o.name == s.name) {
                                format!("{} at {:#x}", s.name, s.value)
                            } else {
                                s.name.clone()
                            }
                        })
                        .collect();
                    names.sort();
                    names.dedup();
                    Err(SymbolError::Ambiguous(names))
                }
            },
            Err(e) => Err(SymbolError::Module(e.clone())),
        }
    }
}

/// Locates the module file (spec §5): a name containing `/` is a path; a
/// bare name is looked for in the current directory, then in each directory
/// of `PATH`, then as the dynamic linker finds a library (soname, or a
/// short name such as `libc`: see [`wprobe_elf::locate`]).
pub fn locate_module(module: &str) -> Result<PathBuf, String> {
    locate_module_in(module, &[])
}

/// [`locate_module`] with extra directories searched after the current one.
pub fn locate_module_in(module: &str, dirs: &[PathBuf]) -> Result<PathBuf, String> {
    wprobe_elf::locate::locate_file(module, dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_then_unique_case_insensitive() {
        let t = MapSymbols::new([("Foo", 1), ("foo", 2), ("Bar", 3), ("BAZ", 4), ("baz", 5)]);
        assert_eq!(t.lookup("foo"), Ok(("foo".into(), 2)));
        assert_eq!(t.lookup("bar"), Ok(("Bar".into(), 3)));
        assert_eq!(
            t.lookup("FOO"),
            Err(SymbolError::Ambiguous(vec!["Foo".into(), "foo".into()]))
        );
        assert_eq!(
            t.lookup("Baz"),
            Err(SymbolError::Ambiguous(vec!["BAZ".into(), "baz".into()]))
        );
        assert_eq!(t.lookup("nope"), Err(SymbolError::Unknown));
    }

    #[test]
    fn same_name_twice_is_not_ambiguous() {
        let t = MapSymbols::new([("Foo", 1), ("Foo", 9)]);
        assert_eq!(t.lookup("foo"), Ok(("Foo".into(), 1)));
    }

    #[test]
    fn missing_module_is_an_error_only_on_lookup() {
        let s = ElfSymbols::new("/nonexistent/dir/module");
        match s.lookup("main") {
            Err(SymbolError::Module(m)) => assert!(m.contains("not found"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
