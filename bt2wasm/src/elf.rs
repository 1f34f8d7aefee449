//! What the compiler reads from a probed binary, through `wprobe-elf` (the
//! one ELF reader of the project, with its symbol rule and library search):
//! its function symbols (wildcard expansion, `-l`), the bytes of its code
//! (instruction-boundary checks), and which file a uprobe's binary name
//! means, in bpftrace's order. Never panics on any file.

use std::path::{Path, PathBuf};

pub use wprobe_elf::glob;
use wprobe_elf::{ElfInfo, SymKind, Symbol};

/// A function symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Func {
    /// Its name.
    pub name: String,
    /// Link-time address.
    pub value: u64,
    /// Size in bytes (0 when the symbol table does not say).
    pub size: u64,
}

/// A probed binary, read once.
pub struct Binary {
    /// The path it was read from.
    pub path: PathBuf,
    /// Its functions, one per name (an alias of another function's
    /// address is one of its own), sorted by name (see
    /// `Binary::from_info`).
    pub funcs: Vec<Func>,
    /// `ET_DYN` (PIE executable or shared library).
    pub is_dyn: bool,
    info: ElfInfo,
}

impl Binary {
    /// Reads and parses the ELF file at `path` (a regular file of bounded
    /// size: see `wprobe_elf::MAX_MODULE_BYTES`).
    pub fn open(path: &Path) -> Result<Binary, String> {
        ElfInfo::open(path)
            .map(Binary::from_info)
            .map_err(|e| e.to_string())
    }

    /// Parses ELF bytes.
    pub fn from_bytes(path: PathBuf, bytes: Vec<u8>) -> Result<Binary, String> {
        ElfInfo::from_bytes(&path, bytes)
            .map(Binary::from_info)
            .map_err(|e| e.to_string())
    }

    /// The binary's functions by the project's one rule
    /// ([`wprobe_elf::functions`]), one entry per name: bpftrace probes
    /// names, so two aliases of one address are two functions here (two
    /// probes); a name defined twice (local functions of two files) means
    /// its largest definition.
    fn from_info(info: ElfInfo) -> Binary {
        let mut funcs: Vec<Func> = wprobe_elf::functions::named(&info)
            .iter()
            .flat_map(|f| f.aliases.iter())
            .map(|s| Func {
                name: s.name.clone(),
                value: s.value,
                size: s.size,
            })
            .collect();
        funcs.sort_by(|a, b| a.name.cmp(&b.name).then(b.size.cmp(&a.size)));
        funcs.dedup_by(|a, b| a.name == b.name);
        Binary {
            path: info.path.clone(),
            funcs,
            is_dyn: info.is_dyn,
            info,
        }
    }

    /// Its functions (one per name) whose name matches `pattern` (a glob)
    /// in one of `forms`.
    pub fn matching(&self, pattern: &str, forms: &[wprobe_elf::NameForm]) -> Vec<&Func> {
        let m = wprobe_elf::Matcher::new(pattern, forms);
        self.funcs
            .iter()
            .filter(|f| m.matches_name(&f.name))
            .collect()
    }

    /// The libraries it needs (`DT_NEEDED`), in order.
    pub fn needed(&self) -> &[String] {
        &self.info.needed
    }

    /// Its USDT probe sites (`.note.stapsdt`), in note order.
    pub fn usdt_sites(&self) -> Vec<wprobe_elf::usdt::UsdtSite> {
        wprobe_elf::usdt::sites(&self.info)
    }

    /// The link-time value and size of data symbol `name` (a variable).
    pub fn object(&self, name: &str) -> Option<(u64, u64)> {
        self.info
            .symbols
            .iter()
            .find(|s| s.name == name && s.kind == wprobe_elf::SymKind::Object)
            .map(|s| (s.value, s.size))
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.info.file_bytes()
    }

    /// The function named `name`.
    pub fn func(&self, name: &str) -> Option<&Func> {
        self.funcs
            .binary_search_by(|f| f.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.funcs[i])
    }

    /// The function whose extent contains `vaddr`, by the project's one
    /// rule (`wprobe_elf::ElfInfo::function_containing`: the innermost, a
    /// global symbol before a local one at the same start).
    pub fn func_at(&self, vaddr: u64) -> Option<Func> {
        self.info.function_containing(vaddr).map(|s| Func {
            name: s.name.clone(),
            value: s.value,
            size: s.size,
        })
    }

    /// Up to `n` file bytes at link-time address `vaddr` (empty outside the file).
    pub fn bytes_at(&self, vaddr: u64, n: u64) -> &[u8] {
        self.info
            .bytes_at(vaddr, usize::try_from(n).unwrap_or(usize::MAX))
            .unwrap_or(&[])
    }

    /// The link-time address of file offset `off` (in a loaded segment).
    pub fn vaddr_of_offset(&self, off: u64) -> Option<u64> {
        self.info.vaddr_of_offset(off)
    }

    /// The link-time address of the symbol named `name` (data included),
    /// by the project's one symbol rule (`wprobe_elf::ElfInfo::lookup`).
    pub fn data_symbol(&self, name: &str) -> Option<u64> {
        match self.info.lookup(name) {
            wprobe_elf::Lookup::Found(s) => Some(s.value),
            _ => None,
        }
    }

    /// Whether `vaddr` is in an executable segment.
    pub fn is_code(&self, vaddr: u64) -> bool {
        self.info.is_exec_vaddr(vaddr)
    }

    /// Offsets (from the function's start) of every instruction of `f`,
    /// decoded from its first byte; `None` when its bytes are not all in
    /// the file.
    pub fn boundaries(&self, f: &Func) -> Option<Vec<u64>> {
        let sym = Symbol {
            name: f.name.clone(),
            value: f.value,
            size: f.size,
            kind: SymKind::Func,
            global: true,
            dynamic: false,
        };
        if f.size == 0 || (self.bytes_at(f.value, f.size).len() as u64) < f.size {
            return None;
        }
        // Bytes that do not decode (data in code) end the list there.
        let (insns, _) = wprobe_elf::disasm::decode_function(&self.info, &sym);
        Some(insns.iter().map(|(ip, _)| ip - f.value).collect())
    }
}

/// Where the dynamic linker would find library `name` (`libc`,
/// `libc.so.6`, `libpthread`).
pub fn find_library(name: &str) -> Option<PathBuf> {
    wprobe_elf::locate::library(name)
}

/// Resolves the binary of a uprobe as bpftrace does: a path (containing
/// `/`) as given; a name found in `mapped` (the files a traced process maps,
/// by base name, soname version or short library name); a `lib...` name
/// through the dynamic linker's search; a file in the current directory;
/// an executable on `PATH`.
pub fn resolve_binary(target: &str, mapped: &[String]) -> Option<PathBuf> {
    if target.contains('/') {
        let p = PathBuf::from(target);
        return p.is_file().then_some(p);
    }
    if let Some(m) = mapped
        .iter()
        .find(|m| wprobe_elf::locate::matches_mapped(target, m, || None))
    {
        return Some(PathBuf::from(m));
    }
    if target.starts_with("lib")
        && let Some(p) = find_library(target)
    {
        return Some(p);
    }
    let here = PathBuf::from(target);
    if here.is_file() {
        return Some(here);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(target))
        .find(|p| p.is_file())
}

/// The binaries a wildcard target names (`./testprogs/uprobe*`, `*`): with
/// `-p`, the files the process maps whose path or base name matches;
/// otherwise the ELF files of the directory matching the last component.
pub fn glob_binaries(target: &str, mapped: &[String]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if !mapped.is_empty() {
        let mut mapped = mapped.to_vec();
        mapped.sort();
        mapped.dedup();
        for m in &mapped {
            let base = std::path::Path::new(m)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            if glob(target, m) || glob(target, &base) {
                out.push(PathBuf::from(m));
            }
        }
    } else {
        let (dir, pat) = match target.rsplit_once('/') {
            Some((d, p)) => (if d.is_empty() { "/" } else { d }, p),
            None => (".", target),
        };
        if !dir.contains(['*', '?']) {
            let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| glob(pat, &e.file_name().to_string_lossy()))
                .map(|e| {
                    if target.contains('/') {
                        PathBuf::from(format!("{dir}/{}", e.file_name().to_string_lossy()))
                    } else {
                        PathBuf::from(e.file_name())
                    }
                })
                .filter(|p| {
                    p.is_file()
                        && std::fs::read(p)
                            .map(|b| b.starts_with(b"\x7fELF"))
                            .unwrap_or(false)
                })
                .collect();
            found.sort();
            out = found;
        }
    }
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_test_binary_has_functions_and_boundaries() {
        let exe = std::env::current_exe().unwrap();
        let b = Binary::open(&exe).unwrap();
        assert!(!b.funcs.is_empty());
        let f = b
            .funcs
            .iter()
            .find(|f| f.size > 16 && b.is_code(f.value))
            .unwrap();
        let bounds = b.boundaries(f).unwrap();
        assert_eq!(bounds[0], 0);
        assert!(bounds.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn libc_is_found_by_its_short_name() {
        let p = find_library("libc").expect("libc");
        assert!(p.to_string_lossy().contains("libc.so"), "{p:?}");
        assert_eq!(
            resolve_binary("libc", &["/usr/lib/x86_64-linux-gnu/libc.so.6".into()]),
            Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"))
        );
    }
}
