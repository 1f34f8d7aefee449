//! The compiled-module cache (load stage): keeps wasmtime's compilation of a
//! handler module (`Module::serialize`) on disk so that a later run of the
//! same program skips `Module::new` (10–100 ms per program, see
//! `docs/BENCHMARKS.md`). It only ever replaces `Module::new`: the ABI gate
//! and the manifest checks of `load.rs` run on every load. A cache problem
//! of any kind is never an error and never a panic: the module is compiled
//! as if there were no cache (and the entry rewritten), and the reason is
//! returned in [`CacheOutcome`] (printed by the CLI under `WPROBE_DEBUG`).
//!
//! **Where.** `$WPROBE_CACHE_DIR`, else `$XDG_CACHE_HOME/wprobe`, else
//! `~/.cache/wprobe`; `WPROBE_NO_CACHE=1` turns it off ([`Cache::from_env`]).
//! Deleting the directory, or any file in it, is always safe.
//!
//! **Bound.** After each store the least recently used entries are removed
//! until the entries total at most [`Cache::max_bytes`] (default
//! [`DEFAULT_MAX_BYTES`], `$WPROBE_CACHE_MAX_BYTES`) and number at most
//! [`MAX_ENTRIES`]; a hit makes an entry recent by setting its modification
//! time. Only the cache's own files are ever removed (see [`evict`]).
//!
//! **Keys.** BLAKE3 over a domain tag, the wprobe version, wasmtime's
//! `Engine::precompile_compatibility_hash` (target, Cranelift flags,
//! tunables such as fuel, Wasm features, wasmtime version) and the Wasm
//! bytes. A changed module, engine setting or wprobe version is a different
//! file name, so it can only miss.
//!
//! **Trust.** Deserializing runs the file's machine code, so an entry is
//! used only if all of these hold (anything else is a miss):
//! * the directory is owned by the effective user and not writable by group
//!   or others (created `0700`);
//! * the entry is a regular file (not followed through a symlink) owned by
//!   the effective user and not writable by group or others;
//! * it starts with this module's envelope ([`ENVELOPE_MAGIC`],
//!   [`ENVELOPE_VERSION`]), names the key it was looked up by, and its
//!   payload has the length and the BLAKE3 hash recorded in the envelope.
//!
//! So the bytes handed to wasmtime are, bit for bit, what this user's
//! wprobe got from `Module::serialize` for this key; a torn write, a
//! truncation, a flipped bit or another user's file cannot reach
//! `Module::deserialize`. wasmtime then checks its own version and engine
//! compatibility and refuses foreign artifacts with an error. Entries are
//! written to a temporary file (`0600`, `O_EXCL`) and renamed into place,
//! so readers see a whole entry or none, and concurrent writers of the same
//! key each rename a complete file. No `fsync`: an entry lost or torn by a
//! crash fails the checksum and is recompiled.
//!
//! Besides the system-call layer (`sys`), this is the only place in the
//! crate with `unsafe`: the deserialization, whose argument is the list
//! above.
//!
//! Never here: anything the load must check (the ABI gate stays in
//! `load.rs`), and errors: every failure is a [`CacheMiss`].

use std::fs::{File, FileTimes};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

pub mod evict;

pub use evict::{Eviction, MAX_ENTRIES, STALE_TEMP_SECS};

/// Environment variable naming the cache directory (highest precedence).
pub const ENV_CACHE_DIR: &str = "WPROBE_CACHE_DIR";

/// Environment variable that turns the cache off when set to anything but
/// empty or `0`.
pub const ENV_NO_CACHE: &str = "WPROBE_NO_CACHE";

/// Environment variable bounding the total size of the cache's entries: a
/// number of bytes, optionally followed by `K`, `M` or `G` (powers of 1024,
/// also written `KiB`, `MiB`, `GiB`; any case), such as `256M`. `0` keeps
/// only the entry just written. Read only when the cache is on.
pub const ENV_CACHE_MAX_BYTES: &str = "WPROBE_CACHE_MAX_BYTES";

/// Default bound on the total size of the entries (256 MiB). Entries are
/// 0.05–1 MB (a 1,000-instruction program serializes to well under 1 MiB; a
/// cache of 1,200 programs measured 43 MB), so this keeps at least 256 of the
/// largest programs and thousands of typical ones: far more than the
/// programs anyone runs repeatedly, which are what the cache is for (a miss
/// costs one 11–110 ms compilation). It is half of the default bound of
/// wasmtime's own cache (`files-total-size-soft-limit`, 512 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

/// First bytes of every entry.
pub const ENVELOPE_MAGIC: [u8; 8] = *b"WPRBMOD\0";

/// Version of the envelope layout; bump it when the layout changes.
pub const ENVELOPE_VERSION: u32 = 1;

/// Envelope size: magic, version (u32 LE), key, payload length (u64 LE),
/// payload BLAKE3 hash.
pub const ENVELOPE_BYTES: usize = 8 + 4 + 32 + 8 + 32;

/// Largest entry read (256 MiB): far above any handler module's compiled
/// size (a 1,000-instruction program serializes to well under 1 MiB), and a
/// bound on the allocation made for a file that claims to be an entry.
pub const MAX_ENTRY_BYTES: u64 = 256 << 20;

/// File name suffix of entries.
pub const ENTRY_SUFFIX: &str = ".cwasm";

/// The key of an entry: BLAKE3 of the inputs that determine the compiled code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey(pub [u8; 32]);

impl CacheKey {
    /// The key of `wasm` compiled by `engine` with this version of wprobe.
    pub fn new(engine: &wasmtime::Engine, wasm: &[u8]) -> CacheKey {
        use std::hash::Hash as _;
        let mut h = KeyHasher(blake3::Hasher::new());
        h.0.update(b"wprobe module cache\0");
        h.0.update(env!("CARGO_PKG_VERSION").as_bytes());
        h.0.update(b"\0");
        engine.precompile_compatibility_hash().hash(&mut h);
        h.0.update(&(wasm.len() as u64).to_le_bytes());
        h.0.update(wasm);
        CacheKey(*h.0.finalize().as_bytes())
    }

    /// Lower-case hex, the entry's file name without the suffix.
    pub fn hex(&self) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(DIGITS[(b >> 4) as usize] as char);
            s.push(DIGITS[(b & 15) as usize] as char);
        }
        s
    }
}

/// Feeds `std::hash::Hash` values (wasmtime's compatibility hash) into BLAKE3.
struct KeyHasher(blake3::Hasher);

impl std::hash::Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        // Never used: the key is the BLAKE3 state, finalized by its owner.
        0
    }
}

/// Why the cache was not used for a load (the module was compiled instead).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CacheMiss {
    /// The cache is turned off (`WPROBE_NO_CACHE`, or [`Cache::disabled`]).
    #[error("the cache is disabled")]
    Disabled,
    /// No directory could be determined (no `$WPROBE_CACHE_DIR`,
    /// `$XDG_CACHE_HOME` or `$HOME`).
    #[error("no cache directory (set {ENV_CACHE_DIR}, XDG_CACHE_HOME or HOME)")]
    NoDirectory,
    /// The directory cannot be created or is not trusted.
    #[error("cache directory {}: {problem}", path.display())]
    Directory {
        /// The directory.
        path: PathBuf,
        /// What is wrong (not owned by the user, writable by others, I/O error).
        problem: String,
    },
    /// There is no entry for this key.
    #[error("no entry")]
    Absent,
    /// An entry exists but was refused (corrupt, truncated, foreign, untrusted).
    #[error("entry {} refused: {problem}", path.display())]
    Refused {
        /// The entry.
        path: PathBuf,
        /// Why it was refused.
        problem: String,
    },
}

/// A cache setting of the environment that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CacheConfigError {
    /// [`ENV_CACHE_MAX_BYTES`] is not a size.
    #[error(
        "{ENV_CACHE_MAX_BYTES}=`{value}`: expected a size in bytes, optionally with a K, M or G suffix (powers of 1024), such as 256M"
    )]
    BadMaxBytes {
        /// The variable's value (lossily decoded).
        value: String,
    },
}

/// Why a compiled module was not written to the cache.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The cache is not in use (disabled, or no directory).
    #[error("the cache is not in use")]
    NotInUse,
    /// The module could not be serialized.
    #[error("serializing: {0}")]
    Serialize(String),
    /// A file of the cache could not be created or written.
    #[error("{what} {}: {message}", path.display())]
    Io {
        /// What was being done: `creating` (the temporary file) or
        /// `writing` (the entry).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The errno.
        errno: Option<i32>,
        /// The I/O error, in words.
        message: String,
    },
}

impl StoreError {
    /// [`StoreError::Io`] of `e`.
    fn io(what: &'static str, path: &Path, e: &std::io::Error) -> StoreError {
        StoreError::Io {
            what,
            path: path.to_path_buf(),
            errno: e.raw_os_error(),
            message: e.to_string(),
        }
    }
}

/// What the cache did for one load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// The module came from the cache; `Module::new` was skipped.
    Hit,
    /// The module was compiled.
    Miss {
        /// Why the cache could not supply it.
        why: CacheMiss,
        /// Whether the compiled module was written to the cache, or why not.
        stored: Result<(), StoreError>,
        /// What the eviction pass that follows a successful store removed
        /// (empty when nothing was stored).
        evicted: Eviction,
    },
}

impl CacheOutcome {
    /// Whether the module came from the cache.
    pub fn is_hit(&self) -> bool {
        matches!(self, CacheOutcome::Hit)
    }
}

/// A compiled-module cache: a directory, or nothing, and a size bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    state: State,
    max_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Off,
    NoDirectory,
    Dir(PathBuf),
}

impl Cache {
    /// A cache kept in `dir` (created `0700` at first use if missing),
    /// bounded to [`DEFAULT_MAX_BYTES`].
    pub fn at(dir: impl Into<PathBuf>) -> Cache {
        Cache {
            state: State::Dir(dir.into()),
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }

    /// No cache: every load compiles.
    pub fn disabled() -> Cache {
        Cache {
            state: State::Off,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }

    /// This cache with its entries bounded to `max_bytes` in total (the
    /// entry just written is kept even when it alone is larger).
    pub fn with_max_bytes(self, max_bytes: u64) -> Cache {
        Cache { max_bytes, ..self }
    }

    /// The bound on the total size of the entries, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The cache the environment asks for: off with `WPROBE_NO_CACHE` set
    /// (to anything but empty or `0`), else in `$WPROBE_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/wprobe` (if absolute), else `$HOME/.cache/wprobe`;
    /// bounded by `$WPROBE_CACHE_MAX_BYTES` ([`ENV_CACHE_MAX_BYTES`]), else
    /// [`DEFAULT_MAX_BYTES`]. A bound that is not a size is an error (the
    /// user asked for a bound; using another one silently would not be what
    /// they asked), unless the cache is off.
    pub fn from_env() -> Result<Cache, CacheConfigError> {
        Cache::from_vars(|k| std::env::var_os(k))
    }

    /// The cache of a command line: none with `--no-cache`, else [`Cache::from_env`].
    pub fn for_cli(no_cache: bool) -> Result<Cache, CacheConfigError> {
        if no_cache {
            Ok(Cache::disabled())
        } else {
            Cache::from_env()
        }
    }

    /// [`Cache::from_env`] with the variables given by `var` (for tests).
    pub fn from_vars(
        var: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Cache, CacheConfigError> {
        let set = |k: &str| var(k).filter(|v| !v.is_empty());
        if set(ENV_NO_CACHE).is_some_and(|v| v != "0") {
            return Ok(Cache::disabled());
        }
        let max_bytes =
            match set(ENV_CACHE_MAX_BYTES) {
                None => DEFAULT_MAX_BYTES,
                Some(v) => v.to_str().and_then(parse_size).ok_or_else(|| {
                    CacheConfigError::BadMaxBytes {
                        value: v.to_string_lossy().into_owned(),
                    }
                })?,
            };
        let cache = if let Some(d) = set(ENV_CACHE_DIR) {
            Cache::at(d)
        } else if let Some(x) = set("XDG_CACHE_HOME").map(PathBuf::from)
            && x.is_absolute()
        {
            Cache::at(x.join("wprobe"))
        } else {
            match set("HOME").map(PathBuf::from) {
                Some(h) if h.is_absolute() => Cache::at(h.join(".cache").join("wprobe")),
                _ => Cache {
                    state: State::NoDirectory,
                    max_bytes: DEFAULT_MAX_BYTES,
                },
            }
        };
        Ok(cache.with_max_bytes(max_bytes))
    }

    /// The directory, when the cache is on.
    pub fn dir(&self) -> Option<&Path> {
        match &self.state {
            State::Dir(d) => Some(d),
            _ => None,
        }
    }

    /// Where the entry of `key` lives (when the cache is on).
    pub fn entry_path(&self, key: &CacheKey) -> Option<PathBuf> {
        self.dir().map(|d| d.join(entry_name(key)))
    }

    /// The module of `wasm`: from the cache when a trusted entry exists,
    /// else compiled with `Module::new` and stored. Only compilation errors
    /// are errors; the outcome says what the cache did.
    pub fn get_or_compile(
        &self,
        engine: &wasmtime::Engine,
        wasm: &[u8],
    ) -> wasmtime::Result<(wasmtime::Module, CacheOutcome)> {
        match self.lookup(engine, wasm) {
            Lookup::Hit(m) => Ok((m, CacheOutcome::Hit)),
            Lookup::Miss(pending) => {
                let module = wasmtime::Module::new(engine, wasm)?;
                let outcome = pending.store(&module);
                Ok((module, outcome))
            }
        }
    }

    /// Looks `wasm` up: the deserialized module of a trusted entry, or why
    /// there is none and where the compiled module should go.
    pub fn lookup(&self, engine: &wasmtime::Engine, wasm: &[u8]) -> Lookup {
        let miss = |why| Lookup::Miss(PendingStore { why, target: None });
        let dir = match &self.state {
            State::Off => return miss(CacheMiss::Disabled),
            State::NoDirectory => return miss(CacheMiss::NoDirectory),
            State::Dir(d) => d,
        };
        if let Err(problem) = trusted_dir(dir) {
            return miss(CacheMiss::Directory {
                path: dir.clone(),
                problem: problem.to_string(),
            });
        }
        let key = CacheKey::new(engine, wasm);
        let path = dir.join(entry_name(&key));
        let why = match read_entry(&path, &key) {
            Ok((file, entry)) => {
                let payload = &entry[ENVELOPE_BYTES..];
                // SAFETY: `Module::deserialize` requires bytes produced by
                // `Module::serialize`/`Engine::precompile_module` of some
                // wasmtime, unmodified. `read_entry` returns the payload only
                // if the file is a regular file owned by the effective user,
                // not writable by group or others, in a directory with the
                // same properties (`trusted_dir`), and if the payload has
                // exactly the length and the BLAKE3 hash that `store` recorded
                // in the envelope next to this key when it wrote
                // `Module::serialize` output there. So these bytes are what
                // this user's wprobe serialized (only the user, or root,
                // could have written them otherwise, and they are trusted to
                // run code as the user anyway). Artifacts of another wasmtime
                // version or engine configuration are safe inputs: wasmtime
                // rejects them with an error (its documented guarantee).
                #[expect(
                    unsafe_code,
                    reason = "deserializing runs the entry's code: sound for trusted bytes only (see above)"
                )]
                // SAFETY: see the comment above: the payload is, bit for
                // bit, `Module::serialize` output of this user's wprobe.
                let module = unsafe { wasmtime::Module::deserialize(engine, payload) };
                match module {
                    Ok(m) => {
                        touch(&file);
                        return Lookup::Hit(m);
                    }
                    Err(e) => CacheMiss::Refused {
                        path: path.clone(),
                        problem: format!("wasmtime refused it: {e}"),
                    },
                }
            }
            Err(why) => why,
        };
        Lookup::Miss(PendingStore {
            why,
            target: Some(Target {
                dir: dir.clone(),
                path,
                key,
                max_bytes: self.max_bytes,
            }),
        })
    }
}

/// The result of [`Cache::lookup`].
pub enum Lookup {
    /// A trusted entry, deserialized.
    Hit(wasmtime::Module),
    /// No usable entry: compile, then [`PendingStore::store`].
    Miss(PendingStore),
}

/// A miss, with where the compiled module goes (if anywhere).
pub struct PendingStore {
    why: CacheMiss,
    target: Option<Target>,
}

/// Where a compiled module is to be stored, and the cache's bound.
struct Target {
    dir: PathBuf,
    path: PathBuf,
    key: CacheKey,
    max_bytes: u64,
}

impl PendingStore {
    /// Why the cache could not supply the module.
    pub fn why(&self) -> &CacheMiss {
        &self.why
    }

    /// Writes `module` (the compilation of the looked-up Wasm) to the
    /// cache when it is in use, then evicts least-recently-used entries
    /// down to the cache's bound ([`evict`]). Never fails: the outcome says
    /// what happened.
    pub fn store(self, module: &wasmtime::Module) -> CacheOutcome {
        let (stored, evicted) = match &self.target {
            Some(t) => {
                let stored = store(&t.dir, &t.path, &t.key, module);
                let evicted = match &stored {
                    Ok(()) => evict::evict(&t.dir, &entry_name(&t.key), t.max_bytes),
                    Err(_) => Eviction::default(),
                };
                (stored, evicted)
            }
            None => (Err(StoreError::NotInUse), Eviction::default()),
        };
        CacheOutcome::Miss {
            why: self.why,
            stored,
            evicted,
        }
    }
}

/// The file name of the entry of `key`: `<hex>.cwasm`.
fn entry_name(key: &CacheKey) -> String {
    format!("{}{ENTRY_SUFFIX}", key.hex())
}

/// Parses a size as `WPROBE_CACHE_MAX_BYTES` writes it: decimal digits,
/// then nothing (bytes) or `K`, `M`, `G` (powers of 1024), optionally
/// followed by `iB`, in any case. `None` for anything else (signs, spaces,
/// fractions, other units), or a size above `u64::MAX`.
pub fn parse_size(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// Makes a hit entry the most recently used: sets its modification time
/// (the recency [`evict`] orders by) to now, through the open file, without
/// rewriting it. A failure (a read-only file system) is ignored: the entry
/// then only ages as if it had not been used.
fn touch(file: &File) {
    let _ = file.set_times(FileTimes::new().set_modified(SystemTime::now()));
}

/// Creates `dir` if missing and checks that only the user can change it
/// (see [`crate::proc::privdir`]).
fn trusted_dir(dir: &Path) -> Result<(), crate::proc::privdir::PrivDirError> {
    crate::proc::privdir::ensure_dir(dir)
}

/// Owned by the effective user, not writable by group or others:
/// deserializing runs the entry's code.
fn trusted_owner_and_mode(meta: &std::fs::Metadata) -> Result<(), String> {
    use crate::proc::privdir::PrivDirError;
    crate::proc::privdir::owner_and_mode(meta).map_err(|e| match e {
        PrivDirError::Owner { .. } => {
            format!("{e}; deserializing runs its code, so only the user's own files are used")
        }
        _ => format!("{e}; only files no one else can change are used"),
    })
}

/// Reads the entry at `path` and returns it (with the open file) if it is
/// trusted (see the module documentation) and whole; the payload starts at
/// [`ENVELOPE_BYTES`].
fn read_entry(path: &Path, key: &CacheKey) -> Result<(File, Vec<u8>), CacheMiss> {
    let refused = |problem: String| CacheMiss::Refused {
        path: path.to_path_buf(),
        problem,
    };
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(CacheMiss::Absent),
        Err(e) => return Err(refused(format!("cannot open it: {e}"))),
    };
    let meta = f.metadata().map_err(|e| refused(e.to_string()))?;
    if !meta.is_file() {
        return Err(refused("not a regular file".into()));
    }
    trusted_owner_and_mode(&meta).map_err(refused)?;
    if meta.len() > MAX_ENTRY_BYTES {
        return Err(refused(format!(
            "{} bytes, more than the {MAX_ENTRY_BYTES} an entry may have",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&mut f)
        .take(MAX_ENTRY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refused(format!("reading it: {e}")))?;
    open_envelope(&bytes, key).map_err(|p| refused(p.to_string()))?;
    Ok((f, bytes))
}

/// Checks the envelope of `bytes` against `key` and returns the payload.
fn open_envelope<'a>(bytes: &'a [u8], key: &CacheKey) -> Result<&'a [u8], &'static str> {
    let Some((head, payload)) = bytes.split_at_checked(ENVELOPE_BYTES) else {
        return Err("truncated: shorter than the envelope");
    };
    let (magic, rest) = head.split_at(8);
    let (version, rest) = rest.split_at(4);
    let (entry_key, rest) = rest.split_at(32);
    let (len, sum) = rest.split_at(8);
    if magic != ENVELOPE_MAGIC {
        return Err("not a wprobe cache entry (bad magic)");
    }
    if version != ENVELOPE_VERSION.to_le_bytes() {
        return Err("written by a wprobe with another entry format");
    }
    if entry_key != key.0 {
        return Err("made for another key");
    }
    if len != (payload.len() as u64).to_le_bytes() {
        return Err("truncated or extended: the payload length differs from the envelope's");
    }
    if blake3::hash(payload).as_bytes() != sum {
        return Err("corrupt: the payload checksum differs from the envelope's");
    }
    Ok(payload)
}

/// The envelope for `payload` under `key`.
fn envelope(key: &CacheKey, payload: &[u8]) -> [u8; ENVELOPE_BYTES] {
    let mut e = [0u8; ENVELOPE_BYTES];
    e[..8].copy_from_slice(&ENVELOPE_MAGIC);
    e[8..12].copy_from_slice(&ENVELOPE_VERSION.to_le_bytes());
    e[12..44].copy_from_slice(&key.0);
    e[44..52].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    e[52..].copy_from_slice(blake3::hash(payload).as_bytes());
    e
}

/// Writes the entry of `module` at `path`: a temporary file in `dir`
/// (mode 0600, created exclusively), renamed over `path`. On any failure
/// the temporary file is removed and the reason returned.
fn store(
    dir: &Path,
    path: &Path,
    key: &CacheKey,
    module: &wasmtime::Module,
) -> Result<(), StoreError> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let payload = module
        .serialize()
        .map_err(|e| StoreError::Serialize(e.to_string()))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(
        ".tmp-{}-{}-{}-{nanos}",
        key.hex(),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let write = |f: &mut File| -> std::io::Result<()> {
        f.write_all(&envelope(key, &payload))?;
        f.write_all(&payload)?;
        // The recency of a new entry, from the clock a hit uses too (the
        // kernel's write time is coarser: a few milliseconds).
        touch(f);
        Ok(())
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| StoreError::io("creating", &tmp, &e))?;
    // `mode` is filtered by the umask; the entry must not be group/other-writable.
    let res = f
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| write(&mut f))
        .and_then(|()| {
            drop(f);
            std::fs::rename(&tmp, path)
        });
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        StoreError::io("writing", path, &e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_vars_precedence() {
        fn vars<'a>(
            pairs: &'a [(&'a str, &'a str)],
        ) -> impl Fn(&str) -> Option<std::ffi::OsString> + 'a {
            move |k| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        }
        let all = [
            ("WPROBE_CACHE_DIR", "/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(Cache::from_vars(vars(&all[..])), Ok(Cache::at("/c")));
        assert_eq!(
            Cache::from_vars(vars(&all[1..])),
            Ok(Cache::at("/x/wprobe"))
        );
        assert_eq!(
            Cache::from_vars(vars(&all[2..])),
            Ok(Cache::at("/h/.cache/wprobe"))
        );
        // A relative XDG_CACHE_HOME is ignored, as the XDG spec says.
        assert_eq!(
            Cache::from_vars(vars(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")])),
            Ok(Cache::at("/h/.cache/wprobe"))
        );
        assert_eq!(
            Cache::from_vars(vars(&[("WPROBE_NO_CACHE", "1"), ("HOME", "/h")])),
            Ok(Cache::disabled())
        );
        assert_eq!(
            Cache::from_vars(vars(&[("WPROBE_NO_CACHE", "0"), ("HOME", "/h")])),
            Ok(Cache::at("/h/.cache/wprobe"))
        );
        assert_eq!(Cache::from_vars(vars(&[])).unwrap().dir(), None);
    }

    #[test]
    fn sizes_parse_exactly() {
        let ok = [
            ("0", 0),
            ("1000", 1000),
            ("64K", 64 << 10),
            ("64k", 64 << 10),
            ("64KiB", 64 << 10),
            ("256M", 256 << 20),
            ("256mib", 256 << 20),
            ("2G", 2 << 30),
            ("2GiB", 2 << 30),
            ("17179869183G", 17179869183 << 30),
            ("18446744073709551615", u64::MAX),
        ];
        for (text, want) in ok {
            assert_eq!(parse_size(text), Some(want), "{text}");
        }
        for bad in [
            "",
            "K",
            "12X",
            "-1",
            "+1",
            "1.5M",
            " 5",
            "5 ",
            "5 M",
            "5MB",
            "5B",
            "5T",
            "0x10",
            "17179869183G1",
            "17179869184G",
            "18446744073709551616",
            "1é",
        ] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn envelope_round_trip_and_every_refusal() {
        let key = CacheKey([7; 32]);
        let payload = b"payload bytes".to_vec();
        let mut entry = envelope(&key, &payload).to_vec();
        entry.extend(&payload);
        assert_eq!(open_envelope(&entry, &key), Ok(&payload[..]));
        assert!(open_envelope(&entry, &CacheKey([8; 32])).is_err());
        for cut in 0..entry.len() {
            assert!(open_envelope(&entry[..cut], &key).is_err(), "cut {cut}");
        }
        for i in 0..entry.len() {
            let mut bad = entry.clone();
            bad[i] ^= 0x01;
            assert!(open_envelope(&bad, &key).is_err(), "flip at {i}");
        }
    }
}
