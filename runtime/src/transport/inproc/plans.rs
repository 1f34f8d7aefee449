//! The plan cache: what planning learns of a module file that does not
//! depend on where the file is mapped, kept on disk so that the next run
//! tracing the same file skips it. Per module file: its sweep (the
//! functions' bounds, the branch targets, the resolved indirect jumps and
//! the tail calls through a pointer: `ModuleCode::read`), and per function
//! planned, its return sites (`crate::transport::retsites::return_sites`)
//! and the windows chosen (`agent_loader::window`: where, how long, how
//! many instructions displaced), the addresses its direct calls return to
//! (where continuation sites go) and the padding blocks near jumps' caves
//! may take, all in link-time addresses and file offsets; the windows
//! refused, with why, at the load bias where they were (their text names
//! run-time addresses: used again only at that bias); and the stubs
//! generated, under their inputs in run-time addresses ([`StubKey`]: used
//! again only where all are the same).
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

use by_address::HashMap;
pub(super) use by_address::HashMap as AddrMap;
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
/// The layout's version; bump it when the layout or what is kept changes,
/// or what is planned (9: the relocated copies of whole functions kept; 8: refusals and near jumps' windows kept; 7: the addresses direct calls return to kept only
/// where a continuation site may go; 6: the stubs start after a longer trampoline, the
/// fast path's, and are kept by window and probe; 5: jump tables whose check on a copy of the index is
/// entered from before it, agent-loader's `jumptable/paths.rs`).
const VERSION: u32 = 9;
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
    /// A probe's address, for a near jump (`jmp rel8`).
    NearProbe = 3,
    /// A `ret`, for a near jump.
    NearRet = 4,
    /// A whole short function, for a near jump.
    NearWhole = 5,
}

impl WindowShape {
    /// The shape written as `n` in a plan file.
    fn from_u64(n: u64) -> Option<WindowShape> {
        Some(match n {
            0 => WindowShape::Probe,
            1 => WindowShape::Ret,
            2 => WindowShape::Whole,
            3 => WindowShape::NearProbe,
            4 => WindowShape::NearRet,
            5 => WindowShape::NearWhole,
            _ => return None,
        })
    }
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

    /// The stubs' key in [`Plans::stubs`]: the window's link-time address,
    /// its probe's, and whether a `ret` ends it (two sites of one run may
    /// share a window's address: a whole function's and its entry's, a
    /// `ret`'s; keyed by the address alone, each replaced the other's
    /// stub, and the plan was written again at every run). A few stubs are
    /// kept under one key: a window planned twice in a run (its first
    /// site dropped, planned again later with another id and area) has
    /// both.
    pub(super) fn link(&self) -> StubSlot {
        (
            self.addr.wrapping_sub(self.bias),
            self.probe.wrapping_sub(self.bias),
            self.ret,
        )
    }
}

/// Where a stub is kept in [`Plans::stubs`] ([`StubKey::link`]).
pub(super) type StubSlot = (u64, u64, bool);

pub(super) use kept_copies::{CopyKey, KeptCopies, KeptCopy};
pub(super) use kept_stubs::KeptStubs;
pub(super) use ordered::{KeptWindows, Ordered, plan_ahead_here};

/// What a module file's sweep found (`ModuleCode::read`), link-time.
#[derive(Clone, Debug, Default)]
pub(super) struct Sweep {
    /// Functions: (start, end), sorted.
    pub(super) funcs: Vec<(u64, u64)>,
    /// The branch targets (their `.3` filled).
    pub(super) targets: BranchTargets,
    /// The tail calls through a pointer.
    pub(super) tail_jumps: rustc_hash::FxHashSet<u64>,
}

/// The plans of one module file: kept from an earlier run and added to
/// in this one.
#[derive(Debug, Default)]
pub(super) struct Plans {
    /// Windows by shape and link-time address, in the order the planner
    /// asked for them (`ordered`).
    pub(super) windows: KeptWindows,
    /// The windows no jump can take, by shape and link-time address: the
    /// load bias at which they were refused and why (the reason names
    /// run-time addresses: used again only at that bias, as a non-PIE
    /// executable's always is; a refusal at another bias is planned
    /// afresh, not kept).
    pub(super) refusals: HashMap<(WindowShape, u64), (u64, String)>,
    /// Return sites by the entry's file offset, in the order the planner
    /// asked for them (`ordered`).
    pub(super) rets: Ordered<u64, std::sync::Arc<ReturnSites>>,
    /// The link-time addresses the direct calls of a function (by its
    /// link-time address, or its GOT slot's) return to, sorted: where its
    /// continuation sites go, for the functions asked.
    pub(super) calls: HashMap<u64, Vec<u64>>,
    /// The `jmp rel32`/`jcc rel32` instructions that land on a branch
    /// target (link-time), sorted, by the target: for the targets asked
    /// (`ModuleCode::far_jumps_to`).
    pub(super) jumps: HashMap<u64, Vec<u64>>,
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
    pub(super) stubs: KeptStubs,
    /// The relocated copies of whole functions made, under their inputs
    /// in run-time addresses (the same bytes only for the same function,
    /// load bias, entry window and id, stub area, place and return
    /// stubs), one a function ([`KeptCopies`]).
    pub(super) copies: KeptCopies,
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
fn open_envelope<'a>(bytes: &'a [u8], key: &Key) -> Result<&'a [u8], &'static str> {
    let (head, payload) = bytes
        .split_at_checked(ENVELOPE)
        .ok_or("truncated: shorter than the envelope")?;
    if head[..8] != MAGIC {
        return Err("not a plan file");
    }
    if head[8..12] != VERSION.to_le_bytes() {
        return Err("another format version");
    }
    if head[12..44] != key.0 {
        return Err("stale: the module file or wprobe changed");
    }
    if head[44..52] != (payload.len() as u64).to_le_bytes() {
        return Err("truncated or extended");
    }
    if head[52..84] != *blake3::hash(payload).as_bytes() {
        return Err("corrupt: its hash does not match");
    }
    Ok(payload)
}

/// Saves the plans of module `path` (under `key`), if the cache is on;
/// a failure is said under `WPROBE_DEBUG`, never an error.
pub(super) fn save(path: &Path, key: &Key, swept: &[u8], plans: &Plans) {
    if let Some(dir) = dir()
        && let Err(why) = save_in(dir, path, key, swept, plans)
    {
        debug(format_args!("{} not saved: {why}", path.display()));
    }
}

/// [`save`] in `dir`.
pub(super) fn save_in(
    dir: &Path,
    path: &Path,
    key: &Key,
    swept: &[u8],
    plans: &Plans,
) -> Result<(), String> {
    crate::proc::privdir::ensure_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let payload = encode_after(swept, plans);
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
    debug(format_args!(
        "{} saved ({} bytes)",
        path.display(),
        out.len()
    ));
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

mod by_address;
mod codec;
mod kept_copies;
mod kept_stubs;
mod ordered;
pub(super) use codec::encode_sweep;
use codec::{decode, encode_after};

#[cfg(test)]
mod tests;
