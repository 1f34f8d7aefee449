//! `/proc/PID/maps` parsing: the address ranges of a traced process, their
//! permissions, file offsets, devices, inodes and paths, and the load bias of
//! a module in that process. Used by symbol resolution (offset → run-time
//! address) and by the ptrace transport (is this address executable, may the
//! process write here), and the program's entry point from `/proc/PID/auxv`.
//! Never touches the process beyond reading those files.

use std::io;
use std::path::{Path, PathBuf};

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address of the range.
    pub start: u64,
    /// One past the last address of the range.
    pub end: u64,
    /// Readable (`r`).
    pub read: bool,
    /// Writable (`w`).
    pub write: bool,
    /// Executable (`x`).
    pub exec: bool,
    /// Shared (`s`) rather than private (`p`).
    pub shared: bool,
    /// Offset in the mapped file.
    pub offset: u64,
    /// Device major number.
    pub dev_major: u32,
    /// Device minor number.
    pub dev_minor: u32,
    /// Inode of the mapped file (0 for anonymous mappings).
    pub inode: u64,
    /// Path or pseudo-path (`[heap]`, `[stack]`, `[vdso]`), empty when anonymous.
    /// A deleted file keeps the kernel's ` (deleted)` suffix.
    pub path: String,
}

impl Mapping {
    /// Whether `addr` lies in this range.
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// Whether the mapping is backed by a file (an absolute path).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }
}

/// A line of the maps file that could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum MapsError {
    /// The file could not be read (the process is gone, or permission).
    #[error("reading /proc/{pid}/maps: {source}")]
    Io {
        /// The process.
        pid: i32,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A line does not have the expected format.
    #[error("/proc/{pid}/maps line {line}: malformed: {text:?}")]
    Malformed {
        /// The process.
        pid: i32,
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
}

/// Reads and parses `/proc/PID/maps`.
pub fn read(pid: i32) -> Result<Vec<Mapping>, MapsError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|source| MapsError::Io { pid, source })?;
    parse(&text).map_err(|(line, text)| MapsError::Malformed { pid, line, text })
}

/// Parses the text of a maps file. On error returns the 1-based line number
/// and the offending line.
pub fn parse(text: &str) -> Result<Vec<Mapping>, (usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_line(line).ok_or_else(|| (i + 1, line.to_string()))?);
    }
    Ok(out)
}

/// Parses one line: `start-end perms offset major:minor inode   path`.
pub fn parse_line(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || -> Option<&str> {
        let t = rest.trim_start_matches(' ');
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        if f.is_empty() { None } else { Some(f) }
    };
    let range = field()?;
    let perms = field()?.as_bytes();
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    let path = rest.trim_start_matches(' ').to_string();
    let (s, e) = range.split_once('-')?;
    let (maj, min) = dev.split_once(':')?;
    if perms.len() < 4 {
        return None;
    }
    let m = Mapping {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        read: perms[0] == b'r',
        write: perms[1] == b'w',
        exec: perms[2] == b'x',
        shared: perms[3] == b's',
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev_major: u32::from_str_radix(maj, 16).ok()?,
        dev_minor: u32::from_str_radix(min, 16).ok()?,
        inode: inode.parse().ok()?,
        path,
    };
    (m.start <= m.end).then_some(m)
}

/// The mapping containing `addr`, if any (`maps` sorted, as the kernel lists them).
pub fn find(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    let i = maps.partition_point(|m| m.end <= addr);
    maps.get(i).filter(|m| m.contains(addr))
}

/// How a module is identified in the mappings: by path, or by device and inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleKey<'a> {
    /// The path as the kernel shows it (exact match, or same file by canonical path).
    Path(&'a Path),
    /// Device major, minor and inode.
    Inode {
        /// Device major number.
        dev_major: u32,
        /// Device minor number.
        dev_minor: u32,
        /// Inode.
        inode: u64,
    },
}

/// Whether mapping `m` maps the module `key`.
pub fn maps_module(m: &Mapping, key: &ModuleKey<'_>) -> bool {
    match key {
        ModuleKey::Inode {
            dev_major,
            dev_minor,
            inode,
        } => m.inode == *inode && m.dev_major == *dev_major && m.dev_minor == *dev_minor,
        ModuleKey::Path(p) => {
            if !m.is_file() {
                return false;
            }
            let mp = Path::new(&m.path);
            if mp == *p {
                return true;
            }
            match (std::fs::canonicalize(mp), std::fs::canonicalize(p)) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            }
        }
    }
}

/// The mappings of one module, in address order.
pub fn module_mappings<'m>(maps: &'m [Mapping], key: &ModuleKey<'_>) -> Vec<&'m Mapping> {
    maps.iter().filter(|m| maps_module(m, key)).collect()
}

/// Load bias of a module: run-time address minus link-time virtual address.
///
/// `first_load` is the link-time `(p_vaddr, p_offset)` of the module's first
/// `PT_LOAD` segment (see [`wprobe_elf::ElfInfo::first_load`]). The mapping
/// of the module with the lowest file offset gives the run-time start of
/// that segment: bias = (start − (map.offset − page(p_offset))) − page(p_vaddr).
/// For an `ET_EXEC` file the bias is 0. `None` when the module is not mapped.
pub fn load_bias(maps: &[Mapping], key: &ModuleKey<'_>, first_load: (u64, u64)) -> Option<u64> {
    let (vaddr, offset) = first_load;
    let m = maps
        .iter()
        .filter(|m| maps_module(m, key))
        .min_by_key(|m| (m.offset, m.start))?;
    let page = 0xfff_u64;
    // Run-time address of file offset page(p_offset).
    let runtime_seg = m.start.wrapping_sub(m.offset.wrapping_sub(offset & !page));
    Some(runtime_seg.wrapping_sub(vaddr & !page))
}

/// `AT_ENTRY` of process `pid` (from `/proc/PID/auxv`): where the kernel
/// (static executable) or the dynamic linker, once every library is loaded
/// and relocated, starts the program.
pub fn entry_point(pid: i32) -> Option<u64> {
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    auxv.chunks_exact(16).find_map(|c| {
        let k = u64::from_le_bytes(c[..8].try_into().ok()?);
        let v = u64::from_le_bytes(c[8..].try_into().ok()?);
        (k == libc::AT_ENTRY).then_some(v)
    })
}

/// Canonical form of a path for comparisons (falls back to the path itself;
/// one found is remembered for the rest of the run).
pub fn canonical(p: &Path) -> PathBuf {
    // The last one asked, on this thread: arming asks for one file's path
    // at each of a function's sites, one function after another.
    thread_local! {
        static LAST: std::cell::RefCell<Option<(PathBuf, PathBuf)>> =
            const { std::cell::RefCell::new(None) };
    }
    let last = LAST.with_borrow(|l| {
        l.as_ref()
            .filter(|(q, _)| q.as_os_str() == p.as_os_str())
            .map(|(_, c)| c.clone())
    });
    if let Some(c) = last {
        return c;
    }
    let (c, found) = canonical_remembered(p);
    if found {
        LAST.set(Some((p.to_path_buf(), c.clone())));
    }
    c
}

/// [`canonical`] without its last path, and whether it was found (not
/// the path itself for want of one).
fn canonical_remembered(p: &Path) -> (PathBuf, bool) {
    // Remembered once found: arming asks for the same few mapped files'
    // paths once per probe (a `readlink` per path component each time).
    static SEEN: std::sync::Mutex<Option<rustc_hash::FxHashMap<PathBuf, PathBuf>>> =
        std::sync::Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(Default::default);
    if let Some(c) = seen.get(p) {
        return (c.clone(), true);
    }
    match std::fs::canonicalize(p) {
        Ok(c) => {
            seen.insert(p.to_path_buf(), c.clone());
            (c, true)
        }
        Err(_) => (p.to_path_buf(), false),
    }
}

/// The file among `files` that module `module` names as programs name
/// modules: a path (compared canonical), or a bare name (base name,
/// soname, or short library name such as `libc`).
pub fn module_file<'a>(module: &str, files: &'a [PathBuf]) -> Option<&'a PathBuf> {
    if module.contains('/') {
        let want = canonical(Path::new(module));
        return files.iter().find(|f| **f == want);
    }
    files.iter().find(|f| {
        wprobe_elf::locate::matches_mapped(module, &f.to_string_lossy(), || {
            wprobe_elf::ElfInfo::open(f).ok().and_then(|e| e.soname)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234                       /usr/bin/prog
55d0c0a01000-55d0c0a02000 r-xp 00001000 fd:01 1234                       /usr/bin/prog
55d0c0a03000-55d0c0a04000 rw-p 00002000 fd:01 1234                       /usr/bin/prog with space
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]
7ffd3000-7ffd4000 r-xp 00000000 00:00 0 
";

    #[test]
    fn parses_lines() {
        let m = parse(SAMPLE).unwrap();
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].start, 0x55d0c0a01000);
        assert!(m[1].exec && !m[1].write && m[1].read && !m[1].shared);
        assert_eq!(m[1].offset, 0x1000);
        assert_eq!(
            (m[1].dev_major, m[1].dev_minor, m[1].inode),
            (0xfd, 1, 1234)
        );
        assert_eq!(m[2].path, "/usr/bin/prog with space");
        assert_eq!(m[3].path, "[stack]");
        assert_eq!(m[4].path, "");
        assert_eq!(find(&m, 0x55d0c0a01010).unwrap().offset, 0x1000);
        assert!(find(&m, 0x55d0c0a02010).is_none());
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert!(parse("zz-10 r-xp 0 0:0 0").is_err());
        assert!(parse("10-20 r-").is_err());
    }

    #[test]
    fn bias_of_pie() {
        let m = parse(SAMPLE).unwrap();
        let key = ModuleKey::Path(Path::new("/usr/bin/prog"));
        assert_eq!(load_bias(&m, &key, (0, 0)), Some(0x55d0c0a00000));
        let key = ModuleKey::Inode {
            dev_major: 0xfd,
            dev_minor: 1,
            inode: 1234,
        };
        assert_eq!(
            load_bias(&m, &key, (0x400000, 0)),
            Some(0x55d0c0a00000 - 0x400000)
        );
    }
}
