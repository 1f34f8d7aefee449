//! The plan cache: what planning learns of a module file that does not
//! depend on where the file is mapped, kept on disk so that the next run
//! tracing the same file skips it. Per module file: its sweep (the
//! functions' bounds, the branch targets, the resolved indirect jumps and
//! the tail calls through a pointer: `ModuleCode::read`), and per function
//! planned, its return sites (`crate::transport::retsites::return_sites`)
//! and the windows chosen (`agent_loader::window`: where, how long, how
//! many instructions displaced), all in link-time addresses and file
//! offsets. Only what succeeded is kept: a refusal is planned afresh each
//! time (its text names run-time addresses; refusals are few).
//!
//! **Where.** `plans/` in the compiled-module cache's directory
//! (`$WPROBE_CACHE_DIR`, else `$XDG_CACHE_HOME/wprobe`, else
//! `~/.cache/wprobe`), one file per module path (`<BLAKE3 of the
//! path>.plan`); off with `--no-cache` or `WPROBE_NO_CACHE=1`.
//!
//! **Key.** The module file's device, inode, size, modification time and
//! GNU build-id, wprobe's version and its own executable's identity
//! (device, inode, size, modification time: another build of wprobe may
//! plan otherwise), and this format's version. An entry whose key is not
//! the file's now is ignored (and replaced at the next save).
//!
//! **Trust.** A plan says where jumps go in a process, so an entry is used
//! only when the directory and the file are the user's own and writable
//! by no one else (`crate::proc::privdir`), and its payload has the length
//! and BLAKE3 hash the envelope records; a window is also decoded again
//! from the file's bytes at its use and dropped unless it decodes as
//! recorded. Anything else is ignored with a `WPROBE_DEBUG` line. Written
//! atomically (a temporary file renamed); a directory that cannot be
//! created or written never fails a trace.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use agent_loader::stub::Site;
use agent_loader::window::BranchTargets;
use iced_x86::{Decoder, DecoderOptions, FlowControl};

use crate::transport::retsites::ReturnSites;

/// First bytes of every plan file.
const MAGIC: [u8; 8] = *b"WPRBPLAN";
/// The layout's version; bump it when the layout or what is kept changes.
const VERSION: u32 = 1;
/// Magic, version, key (32), payload length (8), payload hash (32).
const ENVELOPE: usize = 8 + 4 + 32 + 8 + 32;
/// Largest plan file read.
const MAX_BYTES: u64 = 256 << 20;

/// The plan cache's directory for this run (`None`: off). Set by the
/// command line ([`configure`]); otherwise from the environment as the
/// compiled-module cache reads it.
static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Sets whether the in-process transport's plan cache is used: not with
/// the command line's `--no-cache`; otherwise where and whether the
/// environment says, as for the compiled-module cache (`plans/` in its
/// directory). Only the first call counts; without one, the environment
/// decides.
pub fn configure(no_cache: bool) {
    let _ = DIR.set(if no_cache { None } else { from_env() });
}

/// `plans/` in the compiled-module cache's directory, if that is on.
fn from_env() -> Option<PathBuf> {
    crate::wasm::cache::Cache::from_env()
        .ok()
        .and_then(|c| c.dir().map(|d| d.join("plans")))
}

/// The directory, if the cache is on.
fn dir() -> Option<&'static Path> {
    DIR.get_or_init(from_env).as_deref()
}

/// Whether the plan cache is on.
pub(super) fn enabled() -> bool {
    dir().is_some()
}

/// Says `what` under `WPROBE_DEBUG`.
fn debug(what: std::fmt::Arguments<'_>) {
    if std::env::var_os("WPROBE_DEBUG").is_some() {
        crate::elog!("wprobe: debug: plan cache: {what}");
    }
}

/// What a window is for (the key of a window kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum WindowShape {
    /// A probe's address.
    Probe = 0,
    /// A `ret`.
    Ret = 1,
    /// A whole short function.
    Whole = 2,
}

/// A window chosen, in link-time addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Window {
    /// The probe's address.
    probe: u64,
    /// The first displaced instruction's.
    addr: u64,
    /// The window's bytes.
    len: u32,
    /// How many instructions are displaced (the `ret` not counted).
    displaced: u32,
    /// Whether a `ret` follows them (a return site, a whole function).
    ret: bool,
}

impl Window {
    /// The link-time address of its first displaced byte.
    pub(super) fn link_addr(&self) -> u64 {
        self.addr
    }

    /// Its length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len as usize
    }

    /// The window of `site`, planned in a module loaded at `bias`.
    pub(super) fn of(site: &Site, bias: u64) -> Window {
        Window {
            probe: site.probe.wrapping_sub(bias),
            addr: site.addr.wrapping_sub(bias),
            len: site.len as u32,
            displaced: site.displaced.len() as u32,
            ret: site.ret.is_some(),
        }
    }

    /// The site again, its instructions decoded from `code` (the file's
    /// bytes from the window's start on) at run-time addresses (`bias`
    /// added); `None` unless they decode as recorded (valid, within the
    /// window, the last a `ret` where one was).
    pub(super) fn site(&self, code: &[u8], bias: u64) -> Option<Site> {
        let len = self.len as usize;
        let addr = self.addr.wrapping_add(bias);
        let code = code.get(..len)?;
        let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
        let mut displaced = Vec::with_capacity(self.displaced as usize);
        let mut used = 0usize;
        let mut next = || {
            if !d.can_decode() {
                return None;
            }
            let i = d.decode();
            (!i.is_invalid()).then_some(i)
        };
        for _ in 0..self.displaced {
            let i = next()?;
            used += i.len();
            displaced.push(i);
        }
        let ret = if self.ret {
            let r = next()?;
            used += r.len();
            (r.flow_control() == FlowControl::Return).then_some(r)?;
            Some(r)
        } else {
            None
        };
        (used <= len && (self.ret || used == len)).then_some(Site {
            probe: self.probe.wrapping_add(bias),
            addr,
            displaced,
            len,
            ret,
        })
    }
}

/// What a module file's sweep found (`ModuleCode::read`), link-time.
#[derive(Clone, Debug, Default)]
pub(super) struct Sweep {
    /// Functions: (start, end), sorted.
    pub(super) funcs: Vec<(u64, u64)>,
    /// The branch targets (their `.3` filled).
    pub(super) targets: BranchTargets,
    /// The tail calls through a pointer.
    pub(super) tail_jumps: HashSet<u64>,
}

/// The plans of one module file: kept from an earlier run and added to
/// in this one.
#[derive(Debug, Default)]
pub(super) struct Plans {
    /// Windows by shape and link-time address.
    pub(super) windows: HashMap<(WindowShape, u64), Window>,
    /// Return sites by the entry's file offset.
    pub(super) rets: HashMap<u64, ReturnSites>,
    /// Something was added since read or saved.
    pub(super) added: bool,
}

/// The identity of a module file's version and of the wprobe planning it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Key(pub(super) [u8; 32]);

impl Key {
    /// The key of the module file whose metadata is `meta` and whose bytes
    /// are `bytes`.
    pub(super) fn of(meta: &std::fs::Metadata, bytes: &[u8]) -> Key {
        let mut h = blake3::Hasher::new();
        h.update(b"wprobe plan cache\0");
        h.update(env!("CARGO_PKG_VERSION").as_bytes());
        h.update(&VERSION.to_le_bytes());
        h.update(&self_identity());
        for v in [
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime() as u64,
            meta.mtime_nsec() as u64,
        ] {
            h.update(&v.to_le_bytes());
        }
        let id = build_id(bytes).unwrap_or_default();
        h.update(&(id.len() as u64).to_le_bytes());
        h.update(&id);
        Key(*h.finalize().as_bytes())
    }
}

/// wprobe's own executable's device, inode, size and modification time
/// (zeros when unknown): another build plans with other rules.
fn self_identity() -> [u8; 32] {
    static ID: OnceLock<[u8; 32]> = OnceLock::new();
    *ID.get_or_init(|| {
        let mut out = [0u8; 32];
        if let Ok(m) = std::env::current_exe().and_then(std::fs::metadata) {
            let t = m.mtime_nsec() as u64 ^ (m.mtime() as u64).rotate_left(32);
            for (k, v) in [m.dev(), m.ino(), m.size(), t].into_iter().enumerate() {
                out[k * 8..k * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        out
    })
}

/// The GNU build-id of the ELF file `bytes`, if it has one.
fn build_id(bytes: &[u8]) -> Option<Vec<u8>> {
    let elf = goblin::elf::Elf::parse_header(bytes).ok()?;
    let phs = goblin::elf::ProgramHeader::parse(
        bytes,
        elf.e_phoff as usize,
        elf.e_phnum as usize,
        goblin::container::Ctx::new(
            goblin::container::Container::Big,
            goblin::container::Endian::Little,
        ),
    )
    .ok()?;
    let mut notes = phs
        .iter()
        .filter(|p| p.p_type == goblin::elf::program_header::PT_NOTE);
    notes.find_map(|p| {
        let mut at = p.p_offset as usize;
        let end = at.checked_add(p.p_filesz as usize)?.min(bytes.len());
        while at + 12 <= end {
            let word = |o: usize| {
                u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or_default()) as usize
            };
            let (namesz, descsz, ty) = (word(at), word(at + 4), word(at + 8));
            let name_at = at + 12;
            let desc_at = name_at.checked_add(namesz.checked_add(3)? & !3)?;
            let next = desc_at.checked_add(descsz.checked_add(3)? & !3)?;
            if ty == 3 && bytes.get(name_at..name_at + namesz)? == b"GNU\0" {
                return bytes.get(desc_at..desc_at + descsz).map(<[u8]>::to_vec);
            }
            at = next;
        }
        None
    })
}

/// The plan file of module `path` in `dir`.
fn file_of(dir: &Path, path: &Path) -> PathBuf {
    let h = blake3::hash(path.as_os_str().as_encoded_bytes());
    dir.join(format!("{}.plan", h.to_hex()))
}

/// The plans kept for module `path` under `key`: `None` when the cache is
/// off, has none, or has one it cannot trust (said under `WPROBE_DEBUG`).
pub(super) fn load(path: &Path, key: &Key) -> Option<(Sweep, Plans)> {
    let dir = dir()?;
    match load_in(dir, path, key) {
        Ok(p) => p,
        Err(why) => {
            debug(format_args!("{} ignored: {why}", path.display()));
            None
        }
    }
}

/// [`load`] in `dir`: `Ok(None)` when there is no file.
pub(super) fn load_in(
    dir: &Path,
    path: &Path,
    key: &Key,
) -> Result<Option<(Sweep, Plans)>, String> {
    let file = file_of(dir, path);
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&file)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", file.display())),
    };
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", file.display()));
    }
    let dmeta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    crate::proc::privdir::owner_and_mode(&dmeta)
        .and_then(|()| crate::proc::privdir::owner_and_mode(&meta))
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if meta.len() > MAX_BYTES {
        return Err(format!("{}: too large", file.display()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&mut f)
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let payload = open_envelope(&bytes, key)?;
    decode(payload)
        .map(Some)
        .ok_or_else(|| format!("{}: malformed", file.display()))
}

/// The payload of `bytes` if its envelope is this version's, names `key`
/// and records the payload's length and hash.
fn open_envelope<'a>(bytes: &'a [u8], key: &Key) -> Result<&'a [u8], String> {
    let (head, payload) = bytes
        .split_at_checked(ENVELOPE)
        .ok_or("truncated: shorter than the envelope")?;
    if head[..8] != MAGIC {
        return Err("not a plan file".into());
    }
    if head[8..12] != VERSION.to_le_bytes() {
        return Err("another format version".into());
    }
    if head[12..44] != key.0 {
        return Err("stale: the module file or wprobe changed".into());
    }
    if head[44..52] != (payload.len() as u64).to_le_bytes() {
        return Err("truncated or extended".into());
    }
    if head[52..84] != *blake3::hash(payload).as_bytes() {
        return Err("corrupt: its hash does not match".into());
    }
    Ok(payload)
}

/// Saves the plans of module `path` (under `key`), if the cache is on;
/// a failure is said under `WPROBE_DEBUG`, never an error.
pub(super) fn save(path: &Path, key: &Key, sweep: &Sweep, plans: &Plans) {
    if let Some(dir) = dir()
        && let Err(why) = save_in(dir, path, key, sweep, plans)
    {
        debug(format_args!("{} not saved: {why}", path.display()));
    }
}

/// [`save`] in `dir`.
pub(super) fn save_in(
    dir: &Path,
    path: &Path,
    key: &Key,
    sweep: &Sweep,
    plans: &Plans,
) -> Result<(), String> {
    crate::proc::privdir::ensure_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let payload = encode(sweep, plans);
    let mut out = Vec::with_capacity(ENVELOPE + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&key.0);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(blake3::hash(&payload).as_bytes());
    out.extend_from_slice(&payload);
    let file = file_of(dir, path);
    let tmp = file.with_extension(format!("plan.{}.tmp", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&out))
        .and_then(|()| std::fs::rename(&tmp, &file));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("{}: {e}", file.display()));
    }
    Ok(())
}

/// Appends little-endian numbers and lengths.
struct W(Vec<u8>);

impl W {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64s<'a>(&mut self, vs: impl ExactSizeIterator<Item = &'a u64>) {
        self.u64(vs.len() as u64);
        for v in vs {
            self.u64(*v);
        }
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn strs(&mut self, ss: &[String]) {
        self.u64(ss.len() as u64);
        for s in ss {
            self.str(s);
        }
    }
}

/// Reads what [`W`] wrote; `None` past the end.
struct R<'a>(&'a [u8]);

impl R<'_> {
    fn u64(&mut self) -> Option<u64> {
        let (h, t) = self.0.split_at_checked(8)?;
        self.0 = t;
        Some(u64::from_le_bytes(h.try_into().ok()?))
    }
    /// A count of items of at least `each` bytes (bounded by what is left).
    fn count(&mut self, each: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n <= self.0.len() / each.max(1)).then_some(n)
    }
    fn u64s(&mut self) -> Option<Vec<u64>> {
        let n = self.count(8)?;
        (0..n).map(|_| self.u64()).collect()
    }
    fn str(&mut self) -> Option<String> {
        let n = self.count(1)?;
        let (h, t) = self.0.split_at_checked(n)?;
        self.0 = t;
        String::from_utf8(h.to_vec()).ok()
    }
    fn strs(&mut self) -> Option<Vec<String>> {
        let n = self.count(8)?;
        (0..n).map(|_| self.str()).collect()
    }
}

/// Sorted, for a deterministic file.
fn sorted<'a>(s: impl Iterator<Item = &'a u64>) -> Vec<u64> {
    let mut v: Vec<u64> = s.copied().collect();
    v.sort_unstable();
    v
}

/// The payload of `sweep` and `plans`.
fn encode(sweep: &Sweep, plans: &Plans) -> Vec<u8> {
    let mut w = W(Vec::new());
    w.u64(sweep.funcs.len() as u64);
    for &(s, e) in &sweep.funcs {
        w.u64(s);
        w.u64(e);
    }
    let t = &sweep.targets;
    w.u64s(sorted(t.0.iter()).iter());
    w.u64s(sorted(t.1.iter()).iter());
    let mut counts: Vec<(u64, u32)> = t.2.iter().map(|(&a, &n)| (a, n)).collect();
    counts.sort_unstable();
    w.u64(counts.len() as u64);
    for (a, n) in counts {
        w.u64(a);
        w.u64(u64::from(n));
    }
    let mut unknown: Vec<(u64, u64)> = t.3.iter().flatten().map(|(&a, &b)| (a, b)).collect();
    unknown.sort_unstable();
    w.u64(u64::from(t.3.is_some()));
    w.u64(unknown.len() as u64);
    for (a, b) in unknown {
        w.u64(a);
        w.u64(b);
    }
    w.u64s(sorted(sweep.tail_jumps.iter()).iter());
    let mut windows: Vec<(&(WindowShape, u64), &Window)> = plans.windows.iter().collect();
    windows.sort_unstable_by_key(|(k, _)| (k.0 as u8, k.1));
    w.u64(windows.len() as u64);
    for (&(shape, at), win) in windows {
        w.u64(shape as u64);
        w.u64(at);
        w.u64(win.probe);
        w.u64(win.addr);
        w.u64(u64::from(win.len));
        w.u64(u64::from(win.displaced));
        w.u64(u64::from(win.ret));
    }
    let mut rets: Vec<(&u64, &ReturnSites)> = plans.rets.iter().collect();
    rets.sort_unstable_by_key(|(off, _)| **off);
    w.u64(rets.len() as u64);
    for (&off, r) in rets {
        w.u64(off);
        w.str(&r.function);
        w.u64s(r.rets.iter());
        w.strs(&r.followed);
        w.strs(&r.outside);
        w.u64s(r.indirect.iter());
        w.u64(u64::from(r.never_returns));
    }
    w.0
}

/// [`encode`]'s payload read back; `None` if it is not one.
fn decode(payload: &[u8]) -> Option<(Sweep, Plans)> {
    let mut r = R(payload);
    let n = r.count(16)?;
    let funcs = (0..n)
        .map(|_| Some((r.u64()?, r.u64()?)))
        .collect::<Option<Vec<_>>>()?;
    // Sorted, each no longer than its end (as the sweep makes them).
    if funcs.iter().any(|&(s, e)| s > e) || !funcs.is_sorted() {
        return None;
    }
    let t0: HashSet<u64> = r.u64s()?.into_iter().collect();
    let t1: HashSet<u64> = r.u64s()?.into_iter().collect();
    let n = r.count(16)?;
    let mut t2 = HashMap::with_capacity(n);
    for _ in 0..n {
        t2.insert(r.u64()?, u32::try_from(r.u64()?).ok()?);
    }
    let has_unknown = r.u64()? != 0;
    let n = r.count(16)?;
    let mut unknown = HashMap::with_capacity(n);
    for _ in 0..n {
        unknown.insert(r.u64()?, r.u64()?);
    }
    let tail_jumps = r.u64s()?.into_iter().collect();
    let n = r.count(56)?;
    let mut windows = HashMap::with_capacity(n);
    for _ in 0..n {
        let shape = match r.u64()? {
            0 => WindowShape::Probe,
            1 => WindowShape::Ret,
            2 => WindowShape::Whole,
            _ => return None,
        };
        let at = r.u64()?;
        let win = Window {
            probe: r.u64()?,
            addr: r.u64()?,
            len: u32::try_from(r.u64()?).ok()?,
            displaced: u32::try_from(r.u64()?).ok()?,
            ret: r.u64()? != 0,
        };
        windows.insert((shape, at), win);
    }
    let n = r.count(8)?;
    let mut rets = HashMap::with_capacity(n);
    for _ in 0..n {
        let off = r.u64()?;
        let sites = ReturnSites {
            function: r.str()?,
            rets: r.u64s()?,
            followed: r.strs()?,
            outside: r.strs()?,
            indirect: r.u64s()?,
            never_returns: r.u64()? != 0,
        };
        rets.insert(off, sites);
    }
    if !r.0.is_empty() {
        return None;
    }
    let sweep = Sweep {
        funcs,
        targets: BranchTargets(t0, t1, t2, has_unknown.then_some(unknown)),
        tail_jumps,
    };
    Some((
        sweep,
        Plans {
            windows,
            rets,
            added: false,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::inproc::code::ModuleCode;
    use agent_loader::window::{self, Function};

    /// A directory of its own under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("wprobe-plans-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch directory");
        d
    }

    /// A small executable of the system's, read and swept fresh.
    const MODULE: &str = "/usr/bin/ls";

    fn fresh() -> (Key, Sweep) {
        let path = Path::new(MODULE);
        let bytes = std::fs::read(path).expect("read the module");
        let key = Key::of(&std::fs::metadata(path).expect("metadata"), &bytes);
        let elf = wprobe_elf::info::ElfInfo::open(path).expect("open the module");
        let parsed = goblin::elf::Elf::parse(elf.file_bytes()).expect("parse");
        (key, ModuleCode::sweep(&elf, &parsed))
    }

    fn same_sweep(a: &Sweep, b: &Sweep) {
        assert_eq!(a.funcs, b.funcs);
        assert_eq!(a.targets.0, b.targets.0);
        assert_eq!(a.targets.1, b.targets.1);
        assert_eq!(a.targets.2, b.targets.2);
        assert_eq!(a.targets.3, b.targets.3);
        assert_eq!(a.tail_jumps, b.tail_jumps);
    }

    fn same_site(a: &Site, b: &Site) {
        assert_eq!((a.probe, a.addr, a.len), (b.probe, b.addr, b.len));
        let ips = |s: &Site| -> Vec<(u64, usize, iced_x86::Code)> {
            s.displaced
                .iter()
                .chain(s.ret.iter())
                .map(|i| (i.ip(), i.len(), i.code()))
                .collect()
        };
        assert_eq!(ips(a), ips(b));
        assert_eq!(a.ret.is_some(), b.ret.is_some());
        assert_eq!(a.displaced, b.displaced);
        assert_eq!(a.ret, b.ret);
    }

    /// Every window of every function's entry and `ret`s planned fresh at
    /// a load bias, kept, saved, read back and rebuilt at another bias is
    /// the window planned fresh there.
    #[test]
    fn plans_from_the_cache_are_the_fresh_ones() {
        let dir = scratch("same");
        let (key, sweep) = fresh();
        let elf = wprobe_elf::info::ElfInfo::open(Path::new(MODULE)).expect("open");
        let mut plans = Plans::default();
        let fresh_at = |bias: u64, plans: Option<&mut Plans>| {
            let mut out = Vec::new();
            let mut plans = plans;
            for &(s, e) in &sweep.funcs {
                let Some(code) = elf.bytes_at(s, (e - s) as usize) else {
                    continue;
                };
                let func = Function {
                    start: s.wrapping_add(bias),
                    code,
                    bias,
                };
                let after = elf.bytes_at(e, 16).unwrap_or(&[]);
                let mut planned = vec![(
                    WindowShape::Probe,
                    s,
                    window::plan(func.start, func, &sweep.targets),
                )];
                let d = window::Decoded::new(func, &sweep.targets);
                let mut dec = Decoder::with_ip(64, code, func.start, DecoderOptions::NONE);
                for i in &mut dec {
                    if i.flow_control() == FlowControl::Return {
                        let w = window::plan_ret_in(i.ip(), func, &d, after, &sweep.targets, 5);
                        planned.push((WindowShape::Ret, i.ip().wrapping_sub(bias), w));
                    }
                }
                planned.push((
                    WindowShape::Whole,
                    s,
                    window::plan_whole(func.start, func, after, &sweep.targets),
                ));
                for (shape, link, w) in planned {
                    if let Ok(site) = w {
                        if let Some(p) = plans.as_deref_mut() {
                            p.windows.insert((shape, link), Window::of(&site, bias));
                        }
                        out.push((shape, link, site));
                    }
                }
            }
            out
        };
        let first = fresh_at(0x5555_0000_0000, Some(&mut plans));
        assert!(first.len() > 100, "{} windows", first.len());
        save_in(&dir, Path::new(MODULE), &key, &sweep, &plans).expect("saved");
        let (kept_sweep, kept) = load_in(&dir, Path::new(MODULE), &key)
            .expect("read")
            .expect("found");
        same_sweep(&sweep, &kept_sweep);
        assert_eq!(kept.windows, plans.windows);
        let bias = 0x7f00_1234_0000;
        let second = fresh_at(bias, None);
        assert_eq!(first.len(), second.len());
        for (shape, link, site) in second {
            let win = kept.windows[&(shape, link)];
            let code = elf
                .bytes_at(win.link_addr(), win.len())
                .expect("window's bytes");
            same_site(&win.site(code, bias).expect("rebuilt"), &site);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn roundtrip_of_return_sites_and_windows() {
        let dir = scratch("roundtrip");
        let (key, sweep) = fresh();
        let mut plans = Plans::default();
        plans.rets.insert(
            0x1040,
            ReturnSites {
                function: "f".into(),
                rets: vec![0x1050, 0x1060],
                followed: vec!["f".into(), "g".into()],
                outside: vec!["malloc".into()],
                indirect: vec![0x1070],
                never_returns: false,
            },
        );
        plans.windows.insert(
            (WindowShape::Ret, 0x1050),
            Window {
                probe: 0x1050,
                addr: 0x104c,
                len: 5,
                displaced: 1,
                ret: true,
            },
        );
        save_in(&dir, Path::new(MODULE), &key, &sweep, &plans).expect("saved");
        let (s, p) = load_in(&dir, Path::new(MODULE), &key)
            .expect("read")
            .expect("found");
        same_sweep(&sweep, &s);
        assert_eq!(p.rets, plans.rets);
        assert_eq!(p.windows, plans.windows);
        assert!(!p.added);
        // None for another module's path.
        assert!(
            load_in(&dir, Path::new("/usr/bin/other"), &key)
                .expect("read")
                .is_none()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stale_key_is_ignored() {
        let dir = scratch("stale");
        let (key, sweep) = fresh();
        save_in(&dir, Path::new(MODULE), &key, &sweep, &Plans::default()).expect("saved");
        let mut other = key.clone();
        other.0[0] ^= 1;
        let e = load_in(&dir, Path::new(MODULE), &other).expect_err("stale");
        assert!(e.contains("stale"), "{e}");
        // The file's own key: another modification time or size is another key.
        let m = std::fs::metadata("/bin/true").expect("metadata");
        assert_ne!(Key::of(&m, b""), key);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_corrupt_file_is_ignored() {
        let dir = scratch("corrupt");
        let (key, sweep) = fresh();
        save_in(&dir, Path::new(MODULE), &key, &sweep, &Plans::default()).expect("saved");
        let file = file_of(&dir, Path::new(MODULE));
        let good = std::fs::read(&file).expect("read");
        let mut flipped = good.clone();
        let n = flipped.len();
        flipped[n - 3] ^= 0x40;
        let cases: [(&[u8], &str); 4] = [
            (&flipped, "corrupt"),
            (&good[..good.len() / 2], "truncated"),
            (&good[..10], "truncated"),
            (b"not a plan file at all, but long enough to have an envelope's bytes in it...........", "not a plan file"),
        ];
        for (bytes, why) in cases {
            std::fs::write(&file, bytes).expect("write");
            let e = load_in(&dir, Path::new(MODULE), &key).expect_err(why);
            assert!(e.contains(why), "{e} (expected {why})");
        }
        // A payload whose hash matches but does not decode.
        assert!(decode(&[1, 2, 3]).is_none());
        assert!(decode(&[0xff; 64]).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_directory_fails_no_trace() {
        let dir = scratch("unwritable");
        let (key, sweep) = fresh();
        // A file where the directory would be: it cannot be created.
        let blocked = dir.join("file");
        std::fs::write(&blocked, b"").expect("write");
        let plans_dir = blocked.join("plans");
        assert!(
            save_in(
                &plans_dir,
                Path::new(MODULE),
                &key,
                &sweep,
                &Plans::default()
            )
            .is_err()
        );
        assert!(load_in(&plans_dir, Path::new(MODULE), &key).is_err());
        // A symbolic link as the directory is not used.
        let link = dir.join("link");
        std::os::unix::fs::symlink(&dir, &link).expect("symlink");
        assert!(save_in(&link, Path::new(MODULE), &key, &sweep, &Plans::default()).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
