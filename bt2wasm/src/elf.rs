//! What the compiler reads from a probed binary: its function symbols
//! (wildcard expansion, `-l`), the bytes of its code (instruction-boundary
//! checks with iced-x86), and where a library name such as `libc` leads
//! (the dynamic linker's search: `/etc/ld.so.cache`, then the standard
//! directories, as bpftrace resolves it). Never panics on any file.

use goblin::elf::{Elf, program_header::PT_LOAD, sym};
use std::path::{Path, PathBuf};

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
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Defined function symbols, sorted by name, one per name.
    pub funcs: Vec<Func>,
    /// `PT_LOAD` segments: (vaddr, file offset, file size, executable).
    segments: Vec<(u64, u64, u64, bool)>,
    /// `ET_DYN` (PIE executable or shared library).
    pub is_dyn: bool,
}

/// Files larger than this are not read (a probed binary of 1 GiB is a mistake).
const MAX_BINARY_BYTES: u64 = 1 << 30;

impl Binary {
    /// Reads and parses the ELF file at `path`.
    pub fn open(path: &Path) -> Result<Binary, String> {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.len() > MAX_BINARY_BYTES {
            return Err(format!("{}: larger than 1 GiB", path.display()));
        }
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Binary::from_bytes(path.to_path_buf(), bytes)
    }

    /// Parses ELF bytes.
    pub fn from_bytes(path: PathBuf, bytes: Vec<u8>) -> Result<Binary, String> {
        let elf =
            Elf::parse(&bytes).map_err(|e| format!("{}: not an ELF file ({e})", path.display()))?;
        let mut funcs: Vec<Func> = Vec::new();
        for (syms, strs) in [(&elf.syms, &elf.strtab), (&elf.dynsyms, &elf.dynstrtab)] {
            for s in syms.iter() {
                let t = s.st_type();
                if (t != sym::STT_FUNC && t != sym::STT_GNU_IFUNC) || s.st_shndx == 0 {
                    continue;
                }
                let Some(name) = strs.get_at(s.st_name) else {
                    continue;
                };
                if name.is_empty() {
                    continue;
                }
                // Versioned dynamic names (`malloc@@GLIBC_2.2.5`) are not
                // in .dynsym's strings; symtab names are plain.
                funcs.push(Func {
                    name: name.to_string(),
                    value: s.st_value,
                    size: s.st_size,
                });
            }
        }
        funcs.sort_by(|a, b| a.name.cmp(&b.name).then(b.size.cmp(&a.size)));
        funcs.dedup_by(|a, b| a.name == b.name);
        let segments = elf
            .program_headers
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .map(|p| (p.p_vaddr, p.p_offset, p.p_filesz, p.is_executable()))
            .collect();
        let is_dyn = elf.header.e_type == goblin::elf::header::ET_DYN;
        Ok(Binary {
            path,
            bytes,
            funcs,
            segments,
            is_dyn,
        })
    }

    /// The function named `name`.
    pub fn func(&self, name: &str) -> Option<&Func> {
        self.funcs
            .binary_search_by(|f| f.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.funcs[i])
    }

    /// The function whose extent contains `vaddr`.
    pub fn func_at(&self, vaddr: u64) -> Option<&Func> {
        self.funcs
            .iter()
            .filter(|f| f.size > 0 && f.value <= vaddr && vaddr < f.value.saturating_add(f.size))
            .min_by_key(|f| f.size)
    }

    /// Up to `n` file bytes at link-time address `vaddr` (empty outside the file).
    pub fn bytes_at(&self, vaddr: u64, n: u64) -> &[u8] {
        for &(va, off, sz, _) in &self.segments {
            if vaddr >= va && vaddr < va.saturating_add(sz) {
                let start = off.saturating_add(vaddr - va);
                let avail = sz - (vaddr - va);
                let end = start.saturating_add(n.min(avail));
                return self
                    .bytes
                    .get(start as usize..end.min(self.bytes.len() as u64) as usize)
                    .unwrap_or(&[]);
            }
        }
        &[]
    }

    /// The link-time address of file offset `off` (in a loaded segment).
    pub fn vaddr_of_offset(&self, off: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(_, o, sz, _)| off >= o && off < o.saturating_add(sz))
            .map(|&(va, o, _, _)| va + (off - o))
    }

    /// The link-time address of any defined symbol named `name` (data
    /// included), from the symbol tables.
    pub fn data_symbol(&self, name: &str) -> Option<u64> {
        let elf = Elf::parse(&self.bytes).ok()?;
        for (syms, strs) in [(&elf.syms, &elf.strtab), (&elf.dynsyms, &elf.dynstrtab)] {
            for s in syms.iter() {
                if s.st_shndx != 0 && strs.get_at(s.st_name) == Some(name) {
                    return Some(s.st_value);
                }
            }
        }
        None
    }

    /// Whether `vaddr` is in an executable segment.
    pub fn is_code(&self, vaddr: u64) -> bool {
        self.segments
            .iter()
            .any(|&(va, _, sz, x)| x && vaddr >= va && vaddr < va.saturating_add(sz))
    }

    /// Offsets (from the function's start) of every instruction of `f`,
    /// decoded from its first byte; `None` when its bytes are not in the file.
    pub fn boundaries(&self, f: &Func) -> Option<Vec<u64>> {
        let code = self.bytes_at(f.value, f.size);
        if code.is_empty() || (code.len() as u64) < f.size {
            return None;
        }
        let mut d = iced_x86::Decoder::with_ip(64, code, f.value, iced_x86::DecoderOptions::NONE);
        let mut v = Vec::new();
        let mut ins = iced_x86::Instruction::default();
        while d.can_decode() {
            v.push(d.ip() - f.value);
            d.decode_out(&mut ins);
        }
        Some(v)
    }
}

/// Whether `name` matches the glob `pat` (`*` any run, `?` one character).
pub fn glob(pat: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pat.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Library directories searched after `/etc/ld.so.cache` (x86-64 Debian,
/// Fedora and generic layouts).
pub const LIB_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/local/lib",
];

/// `(soname, path)` pairs of the x86-64 libraries in `/etc/ld.so.cache`
/// (the glibc "1.1" format), in cache order.
pub fn ld_cache(bytes: &[u8]) -> Vec<(String, String)> {
    const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
    // Old-format caches start with "ld.so-1.7.0" and carry the new one after.
    let start = match bytes.windows(MAGIC.len()).position(|w| w == MAGIC) {
        Some(s) => s,
        None => return Vec::new(),
    };
    let b = &bytes[start..];
    let u32_at = |o: usize| -> Option<u32> {
        b.get(o..o + 4)
            .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
    };
    let Some(n) = u32_at(20) else {
        return Vec::new();
    };
    let header = 48usize;
    let cstr = |o: u32| -> Option<String> {
        let o = o as usize;
        let s = b.get(o..)?;
        let end = s.iter().position(|c| *c == 0)?;
        Some(String::from_utf8_lossy(&s[..end]).into_owned())
    };
    let mut out = Vec::new();
    for i in 0..(n as usize).min(1 << 20) {
        let e = header + i * 24;
        let (Some(flags), Some(k), Some(v)) = (u32_at(e), u32_at(e + 4), u32_at(e + 8)) else {
            break;
        };
        // FLAG_ELF_LIBC6 (3) with FLAG_X8664_LIB64 (0x0300).
        if flags & 0xff00 != 0x0300 || flags & 0xff != 3 {
            continue;
        }
        if let (Some(k), Some(v)) = (cstr(k), cstr(v)) {
            out.push((k, v));
        }
    }
    out
}

/// Where the dynamic linker would find library `name` (`libc`,
/// `libc.so.6`, `libpthread`): the cache first, then [`LIB_DIRS`].
pub fn find_library(name: &str) -> Option<PathBuf> {
    let cache = std::fs::read("/etc/ld.so.cache").unwrap_or_default();
    let entries = ld_cache(&cache);
    let prefix = format!("{name}.so");
    let hit = entries
        .iter()
        .find(|(k, _)| k == name)
        .or_else(|| entries.iter().find(|(k, _)| k.starts_with(&prefix)));
    if let Some((_, p)) = hit {
        return Some(PathBuf::from(p));
    }
    for d in LIB_DIRS {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|f| f == name || f.starts_with(&prefix))
            .collect();
        names.sort();
        if let Some(f) = names.first() {
            return Some(Path::new(d).join(f));
        }
    }
    None
}

/// Resolves the binary of a uprobe as bpftrace does: a path (containing
/// `/`) as given; a name found in `mapped` (the files a traced process maps,
/// by base name); a `lib...` name through the dynamic linker's search; a
/// file in the current directory; an executable on `PATH`.
pub fn resolve_binary(target: &str, mapped: &[String]) -> Option<PathBuf> {
    if target.contains('/') {
        let p = PathBuf::from(target);
        return p.is_file().then_some(p);
    }
    let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let so = format!("{target}.so");
    if let Some(m) = mapped
        .iter()
        .find(|m| base(m) == target || base(m).starts_with(&so))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("f*", "foo"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(!glob("a*b", "ab c"));
        assert!(glob("ma?loc", "malloc"));
    }

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
        assert_eq!(ld_cache(b"garbage"), vec![]);
        let mut junk = b"glibc-ld.so.cache1.1".to_vec();
        junk.extend_from_slice(&[0xff; 40]);
        let _ = ld_cache(&junk);
    }
}
