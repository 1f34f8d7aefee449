//! The plan cache: what planning learns of a module file that does not
//! depend on where the file is mapped, kept on disk so that the next run
//! tracing the same file skips it. Per module file: its sweep (the
//! functions' bounds, the branch targets, the resolved indirect jumps and
//! the tail calls through a pointer: `ModuleCode::read`), and per function
//! planned, its return sites (`crate::transport::retsites::return_sites`)
//! and the windows chosen (`agent_loader::window`: where, how long, how
//! many instructions displaced), the addresses its direct calls return to
//! (where continuation sites go) and the padding blocks near jumps' caves
//! may take, all in link-time addresses and file offsets; and the stubs
//! generated, under their inputs in run-time addresses ([`StubKey`]: used
//! again only where all are the same). Only what succeeded is kept: a
//! refusal is planned afresh each time (its text names run-time
//! addresses; refusals are few).
//!
//! **Where.** `plans/` in the compiled-module cache's directory
//! (`$WPROBE_CACHE_DIR`, else `$XDG_CACHE_HOME/wprobe`, else
//! `~/.cache/wprobe`), one file per module path (`<BLAKE3 of the
//! path>.plan`); off with `--no-cache` or `WPROBE_NO_CACHE=1`. Bounded: past
//! [`MAX_DIR_BYTES`], the least recently used files are removed after a
//! save ([`evict_in`]); a file read is made recent.
//!
//! **Key.** The module file's device, inode, size, modification time and
//! GNU build-id, wprobe's version and its own executable's identity
//! (device, inode, size, modification time: another build of wprobe may
//! plan otherwise), and this format's version. An entry whose key is not
//! the file's now is ignored (and replaced at the next save).
//!
//! **Format.** Varints, addresses as differences, names in a string table,
//! each branch target once (see [`encode`]).
//!
//! **Trust.** A plan says where jumps go in a process and holds code it
//! runs (the stubs), so an entry is used
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
const VERSION: u32 = 2;
/// Magic, version, key (32), payload length (8), payload hash (32).
const ENVELOPE: usize = 8 + 4 + 32 + 8 + 32;
/// Largest plan file read.
const MAX_BYTES: u64 = 256 << 20;
/// Most bytes the plan files of the directory take together: past it, the
/// least recently used are removed after a save ([`evict_in`]). A plan
/// file is about 50 bytes a function planned (python3.11's 10,000: 0.6
/// MB), so this keeps those of about a hundred such programs.
pub(super) const MAX_DIR_BYTES: u64 = 64 << 20;
/// Age after which a temporary file is taken as left by a killed wprobe.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(3600);

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

/// What a stub was generated for (`agent_loader::stub::generate`), in
/// run-time addresses: the same key, the same bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StubKey {
    /// The site's window address.
    addr: u64,
    /// Its probe's address.
    probe: u64,
    /// The window's length.
    len: u32,
    /// How many instructions are displaced.
    displaced: u32,
    /// Whether a `ret` follows them.
    ret: bool,
    /// The site's id.
    id: u32,
    /// The stub area's base (its trampoline).
    base: u64,
    /// The stub's address.
    at: u64,
    /// The module's load bias (its window's bytes the file's there).
    bias: u64,
}

impl StubKey {
    /// The key of the stub of `site` (id `id`) at `at` in the area at
    /// `base`, its module loaded at `bias`.
    pub(super) fn of(site: &Site, id: u32, base: u64, at: u64, bias: u64) -> StubKey {
        StubKey {
            addr: site.addr,
            probe: site.probe,
            len: site.len as u32,
            displaced: site.displaced.len() as u32,
            ret: site.ret.is_some(),
            id,
            base,
            at,
            bias,
        }
    }

    /// The module's load bias.
    pub(super) fn bias(&self) -> u64 {
        self.bias
    }

    /// The window's link-time address (the stubs' key in
    /// [`Plans::stubs`]).
    pub(super) fn link(&self) -> u64 {
        self.addr.wrapping_sub(self.bias)
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
    /// The link-time addresses the direct calls of a function (by its
    /// link-time address, or its GOT slot's) return to, sorted: where its
    /// continuation sites go, for the functions asked.
    pub(super) calls: HashMap<u64, Vec<u64>>,
    /// The usable padding after a function (`agent_loader::nearjump::
    /// padding_block`), by the function's end (0: none), for the functions
    /// near a near jump.
    pub(super) blocks: HashMap<u64, usize>,
    /// The padding inside a function (`agent_loader::nearjump::
    /// inner_padding`: start, length), by the function's start.
    pub(super) inner: HashMap<u64, Vec<(u64, usize)>>,
    /// The stubs generated, under their inputs in run-time addresses (the
    /// same bytes only for the same site, stub area, place in it and site
    /// id, which a module loaded at the same address, as a non-PIE
    /// executable is, and the same probes give again), by their window's
    /// link-time address ([`StubKey::link`]: one per window, whatever the
    /// load bias).
    pub(super) stubs: HashMap<u64, (StubKey, Vec<u8>)>,
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
    let found = decode(payload).ok_or_else(|| format!("{}: malformed", file.display()))?;
    // Used now: the last to be evicted (a read-only file system leaves it
    // as old as it was).
    let _ = f.set_modified(std::time::SystemTime::now());
    Ok(Some(found))
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
    let evicted = evict_in(dir, &file, MAX_DIR_BYTES);
    if evicted > 0 {
        debug(format_args!(
            "{evicted} least recently used plan files removed"
        ));
    }
    Ok(())
}

/// Whether `name` is `<64 lower-case hex digits>.plan`, a plan file's.
fn is_plan_name(name: &str) -> bool {
    name.strip_suffix(".plan").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Removes the least recently used plan files of `dir` (by modification
/// time: a save writes it, a use sets it) until they take at most
/// `max_bytes`, never `keep` (the one just saved); removes temporary
/// files older than an hour (a killed wprobe's). Only the cache's own
/// files are counted and removed: regular files of the user's named as
/// plan files are. Returns how many plan files it removed; never fails
/// (a file it cannot remove stays).
pub(super) fn evict_in(dir: &Path, keep: &Path, max_bytes: u64) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let now = std::time::SystemTime::now();
    let mut found: Vec<(std::time::SystemTime, String, u64)> = Vec::new();
    for e in entries.flatten() {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.is_file() || crate::proc::privdir::owner_and_mode(&meta).is_err() {
            continue;
        }
        let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        if is_plan_name(&name) {
            found.push((modified, name, meta.len()));
        } else if name.ends_with(".tmp")
            && name
                .split('.')
                .next()
                .is_some_and(|h| is_plan_name(&format!("{h}.plan")))
            && now
                .duration_since(modified)
                .is_ok_and(|age| age > STALE_TEMP)
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
    found.sort();
    let mut total: u64 = found.iter().map(|f| f.2).sum();
    let mut removed = 0;
    for (modified, name, len) in found {
        if total <= max_bytes {
            break;
        }
        let path = dir.join(&name);
        if path == keep {
            continue;
        }
        // Used or rewritten since the scan: no longer the one chosen.
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.len() == len && m.modified().ok() == Some(modified) => {}
            _ => continue,
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
            removed += 1;
        }
    }
    removed
}

/// Appends numbers as LEB128 varints (signed ones zigzag-encoded) and
/// strings as indices into a table written before them.
#[derive(Default)]
struct W {
    out: Vec<u8>,
    /// The strings, in the order of their first use.
    table: Vec<String>,
    /// Their indices.
    index: HashMap<String, u64>,
}

impl W {
    fn u64(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }
    /// A difference, zigzag-encoded (small either way).
    fn delta(&mut self, from: u64, to: u64) {
        let d = to.wrapping_sub(from) as i64;
        self.u64(((d << 1) ^ (d >> 63)) as u64);
    }
    /// Sorted addresses, each as the difference from the one before.
    fn addrs(&mut self, vs: &[u64]) {
        self.u64(vs.len() as u64);
        let mut last = 0;
        for &v in vs {
            self.delta(last, v);
            last = v;
        }
    }
    fn str(&mut self, s: &str) {
        let n = self.table.len() as u64;
        let i = *self.index.entry(s.to_string()).or_insert_with(|| {
            self.table.push(s.to_string());
            n
        });
        self.u64(i);
    }
    fn strs(&mut self, ss: &[String]) {
        self.u64(ss.len() as u64);
        for s in ss {
            self.str(s);
        }
    }
    /// The string table, then the numbers.
    fn finish(self) -> Vec<u8> {
        let mut head = W::default();
        head.u64(self.table.len() as u64);
        for s in &self.table {
            head.u64(s.len() as u64);
            head.out.extend_from_slice(s.as_bytes());
        }
        head.out.extend_from_slice(&self.out);
        head.out
    }
}

/// Reads what [`W`] wrote; `None` past the end or on a malformed number.
struct R<'a> {
    bytes: &'a [u8],
    table: Vec<String>,
}

impl R<'_> {
    fn u64(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for k in 0..10 {
            let (&b, t) = self.bytes.split_first()?;
            self.bytes = t;
            // The tenth byte holds bit 63 only.
            if k == 9 && b > 1 {
                return None;
            }
            v |= u64::from(b & 0x7f) << (7 * k);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }
    fn delta(&mut self, from: u64) -> Option<u64> {
        let z = self.u64()?;
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        Some(from.wrapping_add(d as u64))
    }
    /// A count of items of at least `each` bytes (bounded by what is left).
    fn count(&mut self, each: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n <= self.bytes.len() / each.max(1)).then_some(n)
    }
    fn addrs(&mut self) -> Option<Vec<u64>> {
        let n = self.count(1)?;
        let mut last = 0;
        (0..n)
            .map(|_| {
                last = self.delta(last)?;
                Some(last)
            })
            .collect()
    }
    fn str(&mut self) -> Option<String> {
        let i = usize::try_from(self.u64()?).ok()?;
        self.table.get(i).cloned()
    }
    fn strs(&mut self) -> Option<Vec<String>> {
        let n = self.count(1)?;
        (0..n).map(|_| self.str()).collect()
    }
    /// The string table [`W::finish`] wrote first.
    fn table(&mut self) -> Option<()> {
        let n = self.count(1)?;
        let mut table = Vec::with_capacity(n);
        for _ in 0..n {
            let len = self.count(1)?;
            let (h, t) = self.bytes.split_at_checked(len)?;
            self.bytes = t;
            table.push(String::from_utf8(h.to_vec()).ok()?);
        }
        self.table = table;
        Some(())
    }
}

/// Sorted, for a deterministic file.
fn sorted<'a>(s: impl Iterator<Item = &'a u64>) -> Vec<u64> {
    let mut v: Vec<u64> = s.copied().collect();
    v.sort_unstable();
    v
}

/// The payload of `sweep` and `plans`: varints, addresses as differences
/// (from the address before in a sorted list, or from the entry they
/// belong to), names once in a table. The branch targets are kept once:
/// the sweep's counts by target (`.2`), and apart only the targets of
/// `.0` without a count (none, as the sweep makes them).
fn encode(sweep: &Sweep, plans: &Plans) -> Vec<u8> {
    let mut w = W::default();
    w.u64(sweep.funcs.len() as u64);
    let mut last = 0;
    for &(s, e) in &sweep.funcs {
        w.delta(last, s);
        w.u64(e - s);
        last = s;
    }
    let t = &sweep.targets;
    let mut counts: Vec<(u64, u32)> = t.2.iter().map(|(&a, &n)| (a, n)).collect();
    counts.sort_unstable();
    w.u64(counts.len() as u64);
    let mut last = 0;
    for (a, n) in counts {
        w.delta(last, a);
        // `u32::MAX` (a jump table's target) as 0, one byte.
        w.u64(u64::from(n.wrapping_add(1)));
        last = a;
    }
    w.addrs(&sorted(t.0.iter().filter(|a| !t.2.contains_key(a))));
    w.addrs(&sorted(t.1.iter()));
    let mut unknown: Vec<(u64, u64)> = t.3.iter().flatten().map(|(&a, &b)| (a, b)).collect();
    unknown.sort_unstable();
    w.u64(u64::from(t.3.is_some()));
    w.u64(unknown.len() as u64);
    let mut last = 0;
    for (a, b) in unknown {
        w.delta(last, a);
        w.delta(a, b);
        last = a;
    }
    w.addrs(&sorted(sweep.tail_jumps.iter()));
    let mut windows: Vec<(&(WindowShape, u64), &Window)> = plans.windows.iter().collect();
    windows.sort_unstable_by_key(|(k, _)| (k.0 as u8, k.1));
    w.u64(windows.len() as u64);
    let mut last = 0;
    for (&(shape, at), win) in windows {
        w.u64(shape as u64);
        w.delta(last, at);
        w.delta(at, win.probe);
        w.delta(at, win.addr);
        w.u64(u64::from(win.len));
        w.u64(u64::from(win.displaced) << 1 | u64::from(win.ret));
        last = at;
    }
    let mut rets: Vec<(&u64, &ReturnSites)> = plans.rets.iter().collect();
    rets.sort_unstable_by_key(|(off, _)| **off);
    w.u64(rets.len() as u64);
    let mut last = 0;
    for (&off, r) in rets {
        w.delta(last, off);
        w.str(&r.function);
        w.u64(r.rets.len() as u64);
        for &a in &r.rets {
            w.delta(off, a);
        }
        w.strs(&r.followed);
        w.strs(&r.outside);
        w.u64(r.indirect.len() as u64);
        for &a in &r.indirect {
            w.delta(off, a);
        }
        w.u64(u64::from(r.never_returns));
        last = off;
    }
    let mut calls: Vec<(&u64, &Vec<u64>)> = plans.calls.iter().collect();
    calls.sort_unstable_by_key(|(t, _)| **t);
    w.u64(calls.len() as u64);
    let mut last = 0;
    for (&target, after) in calls {
        w.delta(last, target);
        w.addrs(after);
        last = target;
    }
    let mut blocks: Vec<(&u64, &usize)> = plans.blocks.iter().collect();
    blocks.sort_unstable();
    w.u64(blocks.len() as u64);
    let mut last = 0;
    for (&end, &n) in blocks {
        w.delta(last, end);
        w.u64(n as u64);
        last = end;
    }
    let mut inner: Vec<(&u64, &Vec<(u64, usize)>)> = plans.inner.iter().collect();
    inner.sort_unstable_by_key(|(s, _)| **s);
    w.u64(inner.len() as u64);
    let mut last = 0;
    for (&start, blocks) in inner {
        w.delta(last, start);
        w.u64(blocks.len() as u64);
        for &(at, n) in blocks {
            w.delta(start, at);
            w.u64(n as u64);
        }
        last = start;
    }
    let mut stubs: Vec<&(StubKey, Vec<u8>)> = plans.stubs.values().collect();
    stubs.sort_unstable_by_key(|(k, _)| (k.addr, k.bias));
    w.u64(stubs.len() as u64);
    let mut last = 0;
    for (k, code) in stubs {
        w.delta(last, k.addr);
        w.delta(k.addr, k.probe);
        w.u64(u64::from(k.len));
        w.u64(u64::from(k.displaced) << 1 | u64::from(k.ret));
        w.u64(u64::from(k.id));
        w.delta(k.addr, k.base);
        w.delta(k.base, k.at);
        w.u64(k.bias);
        w.u64(code.len() as u64);
        w.out.extend_from_slice(code);
        last = k.addr;
    }
    w.finish()
}

/// [`encode`]'s payload read back; `None` if it is not one.
fn decode(payload: &[u8]) -> Option<(Sweep, Plans)> {
    let mut r = R {
        bytes: payload,
        table: Vec::new(),
    };
    r.table()?;
    let n = r.count(2)?;
    let mut last = 0;
    let funcs = (0..n)
        .map(|_| {
            let s = r.delta(last)?;
            last = s;
            Some((s, s.checked_add(r.u64()?)?))
        })
        .collect::<Option<Vec<_>>>()?;
    // Sorted (as the sweep makes them; each no longer than its end).
    if !funcs.is_sorted() {
        return None;
    }
    let n = r.count(2)?;
    let mut t0 = HashSet::with_capacity(n);
    let mut t2 = HashMap::with_capacity(n);
    let mut last = 0;
    for _ in 0..n {
        let a = r.delta(last)?;
        t2.insert(a, r.u32()?.wrapping_sub(1));
        t0.insert(a);
        last = a;
    }
    t0.extend(r.addrs()?);
    let t1: HashSet<u64> = r.addrs()?.into_iter().collect();
    let has_unknown = r.u64()? != 0;
    let n = r.count(2)?;
    let mut unknown = HashMap::with_capacity(n);
    let mut last = 0;
    for _ in 0..n {
        let a = r.delta(last)?;
        unknown.insert(a, r.delta(a)?);
        last = a;
    }
    let tail_jumps = r.addrs()?.into_iter().collect();
    let n = r.count(6)?;
    let mut windows = HashMap::with_capacity(n);
    let mut last = 0;
    for _ in 0..n {
        let shape = match r.u64()? {
            0 => WindowShape::Probe,
            1 => WindowShape::Ret,
            2 => WindowShape::Whole,
            _ => return None,
        };
        let at = r.delta(last)?;
        let probe = r.delta(at)?;
        let addr = r.delta(at)?;
        let len = r.u32()?;
        let d = r.u64()?;
        let win = Window {
            probe,
            addr,
            len,
            displaced: u32::try_from(d >> 1).ok()?,
            ret: d & 1 != 0,
        };
        windows.insert((shape, at), win);
        last = at;
    }
    let n = r.count(7)?;
    let mut rets = HashMap::with_capacity(n);
    let mut last = 0;
    for _ in 0..n {
        let off = r.delta(last)?;
        let function = r.str()?;
        let k = r.count(1)?;
        let ret_offs = (0..k).map(|_| r.delta(off)).collect::<Option<_>>()?;
        let followed = r.strs()?;
        let outside = r.strs()?;
        let k = r.count(1)?;
        let indirect = (0..k).map(|_| r.delta(off)).collect::<Option<_>>()?;
        let sites = ReturnSites {
            function,
            rets: ret_offs,
            followed,
            outside,
            indirect,
            never_returns: r.u64()? != 0,
        };
        rets.insert(off, sites);
        last = off;
    }
    let n = r.count(2)?;
    let mut calls = HashMap::with_capacity(n);
    let mut last = 0;
    for _ in 0..n {
        let target = r.delta(last)?;
        calls.insert(target, r.addrs()?);
        last = target;
    }
    let n = r.count(2)?;
    let mut blocks = HashMap::with_capacity(n);
    let mut last = 0;
    for _ in 0..n {
        let end = r.delta(last)?;
        blocks.insert(end, usize::try_from(r.u64()?).ok()?);
        last = end;
    }
    let n = r.count(2)?;
    let mut inner = HashMap::with_capacity(n);
    let mut last = 0;
    for _ in 0..n {
        let start = r.delta(last)?;
        let k = r.count(2)?;
        let found = (0..k)
            .map(|_| Some((r.delta(start)?, usize::try_from(r.u64()?).ok()?)))
            .collect::<Option<Vec<_>>>()?;
        inner.insert(start, found);
        last = start;
    }
    let n = r.count(9)?;
    let mut stubs = HashMap::with_capacity(n);
    let mut last = 0;
    for _ in 0..n {
        let addr = r.delta(last)?;
        let probe = r.delta(addr)?;
        let len = r.u32()?;
        let d = r.u64()?;
        let id = r.u32()?;
        let base = r.delta(addr)?;
        let at = r.delta(base)?;
        let bias = r.u64()?;
        let key = StubKey {
            addr,
            probe,
            len,
            displaced: u32::try_from(d >> 1).ok()?,
            ret: d & 1 != 0,
            id,
            base,
            at,
            bias,
        };
        let k = r.count(1)?;
        let (code, rest) = r.bytes.split_at_checked(k)?;
        r.bytes = rest;
        stubs.insert(key.link(), (key, code.to_vec()));
        last = addr;
    }
    if !r.bytes.is_empty() {
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
            calls,
            blocks,
            inner,
            stubs,
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
        plans.windows.insert(
            (WindowShape::Probe, 0x1040),
            Window {
                probe: 0x1040,
                addr: 0x1040,
                len: 6,
                displaced: 2,
                ret: false,
            },
        );
        plans.calls.insert(0x1040, vec![0x900, 0x1100, 0x2f00]);
        plans.calls.insert(0x4000, Vec::new());
        plans.blocks.insert(0x1080, 12);
        plans.blocks.insert(0x2000, 0);
        plans.inner.insert(0x1040, vec![(0x1070, 9), (0x1078, 3)]);
        let site = Site {
            probe: 0x40_1040,
            addr: 0x40_1040,
            displaced: Vec::new(),
            len: 5,
            ret: None,
        };
        let k = StubKey::of(&site, 7, 0x3c_0000, 0x3c_0250, 0);
        plans
            .stubs
            .insert(k.link(), (k, vec![0xe8, 1, 2, 3, 4, 0xc3]));
        let k = StubKey::of(
            &site,
            8,
            0x7f00_0000_0000,
            0x7f00_0000_0250,
            0x7eff_0000_0000,
        );
        plans.stubs.insert(k.link(), (k, vec![0x90; 40]));
        save_in(&dir, Path::new(MODULE), &key, &sweep, &plans).expect("saved");
        let (s, p) = load_in(&dir, Path::new(MODULE), &key)
            .expect("read")
            .expect("found");
        same_sweep(&sweep, &s);
        assert_eq!(p.rets, plans.rets);
        assert_eq!(p.windows, plans.windows);
        assert_eq!(p.calls, plans.calls);
        assert_eq!(p.blocks, plans.blocks);
        assert_eq!(p.inner, plans.inner);
        assert_eq!(p.stubs, plans.stubs);
        assert!(!p.added);
        // None for another module's path.
        assert!(
            load_in(&dir, Path::new("/usr/bin/other"), &key)
                .expect("read")
                .is_none()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Branch targets of every kind (a jump table's, a target without a
    /// count, the unknown jumps) and numbers at the ends of their range
    /// read back as they were.
    #[test]
    fn roundtrip_of_extreme_values() {
        let mut sweep = Sweep {
            funcs: vec![(0, 0), (0x10, u64::MAX)],
            ..Default::default()
        };
        sweep.targets.0.extend([1, u64::MAX, 0x500]);
        sweep
            .targets
            .2
            .extend([(1, u32::MAX), (u64::MAX, 3), (7, 0)]);
        sweep.targets.0.insert(7);
        sweep.targets.1.extend([0x20, 0x10]);
        sweep.targets.3 = Some(HashMap::from([(0x10, 0x8), (0x30, u64::MAX)]));
        sweep.tail_jumps.extend([u64::MAX - 1, 2]);
        let plans = Plans {
            windows: HashMap::from([(
                (WindowShape::Whole, u64::MAX - 4),
                Window {
                    probe: u64::MAX - 4,
                    addr: 0,
                    len: u32::MAX,
                    displaced: u32::MAX >> 1,
                    ret: true,
                },
            )]),
            ..Default::default()
        };
        let (s, p) = decode(&encode(&sweep, &plans)).expect("decoded");
        same_sweep(&sweep, &s);
        assert_eq!(p.windows, plans.windows);
        // Not sorted: not a sweep's.
        let unsorted = Sweep {
            funcs: vec![(0x20, 0x30), (0x10, 0x18)],
            ..Default::default()
        };
        assert!(decode(&encode(&unsorted, &Plans::default())).is_none());
        // Any byte cut off: never decoded (nor a panic).
        let full = encode(&sweep, &plans);
        for n in 0..full.len() {
            assert!(decode(&full[..n]).is_none(), "{n} bytes");
        }
    }

    /// The plan file of a system binary takes each branch target once:
    /// far less than the 8-byte numbers of the first format (4.3 MB for
    /// python3.11).
    #[test]
    fn plan_files_are_compact() {
        let (_, sweep) = fresh();
        let payload = encode(&sweep, &Plans::default());
        let t = &sweep.targets;
        assert!(t.2.len() > 1000, "{} targets", t.2.len());
        // The first format: every number in 8 bytes, the targets twice.
        let unknown = t.3.as_ref().map_or(0, HashMap::len);
        let first = 8
            * (2 * sweep.funcs.len()
                + t.0.len()
                + t.1.len()
                + 2 * t.2.len()
                + 2 * unknown
                + sweep.tail_jumps.len());
        assert!(
            payload.len() * 4 < first,
            "{} bytes, against {first} in the first format",
            payload.len()
        );
    }

    /// Past the bound, the plan files used least recently go first; the one
    /// just saved, other files and young temporary files stay.
    #[test]
    fn the_directory_is_bounded_least_recently_used_first() {
        use std::time::{Duration, SystemTime};
        let dir = scratch("evict");
        let name = |c: char| format!("{}.plan", c.to_string().repeat(64));
        let now = SystemTime::now();
        let put = |file: &str, len: usize, age_s: u64| {
            let p = dir.join(file);
            std::fs::write(&p, vec![0u8; len]).expect("write");
            std::fs::File::options()
                .write(true)
                .open(&p)
                .and_then(|f| f.set_modified(now - Duration::from_secs(age_s)))
                .expect("set its time");
            p
        };
        // Used oldest first: a, b, c, d (the one just saved: e, the oldest).
        put(&name('a'), 1000, 400);
        put(&name('b'), 1000, 300);
        put(&name('c'), 1000, 200);
        put(&name('d'), 1000, 100);
        let keep = put(&name('e'), 1000, 500);
        let other = put("notes.txt", 100_000, 900);
        let stale = put(&format!("{}.7.tmp", name('f')), 10, 7200);
        let young = put(&format!("{}.8.tmp", name('f')), 10, 10);
        // 5,000 bytes of plans: 2,500 at most keeps d and e only.
        assert_eq!(evict_in(&dir, &keep, 2500), 3);
        let left = |c: char| dir.join(name(c)).exists();
        assert!(!left('a') && !left('b') && !left('c'));
        assert!(left('d') && left('e'));
        assert!(other.exists() && young.exists());
        assert!(!stale.exists());
        // Within the bound: nothing more.
        assert_eq!(evict_in(&dir, &keep, 2500), 0);
        // Room for one: d goes, e (just saved) stays though it is older.
        assert_eq!(evict_in(&dir, &keep, 1000), 1);
        assert!(!left('d') && left('e'));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A save evicts; a load makes its file the most recently used.
    #[test]
    fn a_load_makes_its_file_recent() {
        use std::time::{Duration, SystemTime};
        let dir = scratch("recent");
        let (key, sweep) = fresh();
        save_in(&dir, Path::new(MODULE), &key, &sweep, &Plans::default()).expect("saved");
        let file = file_of(&dir, Path::new(MODULE));
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_modified(old))
            .expect("set its time");
        assert!(
            load_in(&dir, Path::new(MODULE), &key)
                .expect("read")
                .is_some()
        );
        let t = std::fs::metadata(&file)
            .and_then(|m| m.modified())
            .expect("time");
        assert!(t > old + Duration::from_secs(60), "{t:?}");
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
