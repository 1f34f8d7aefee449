//! Eviction of the compiled-module cache (load stage, after a store): keeps
//! the total size of the cache's entries under its bound
//! ([`super::Cache::max_bytes`]) and their number under [`MAX_ENTRIES`] by
//! removing the least recently used ones, and removes temporary files that
//! a killed wprobe left behind.
//!
//! **Recency** is an entry's modification time: a store sets it when it
//! writes the entry and a hit sets it again (`futimens` on the open entry,
//! nothing rewritten), both from the fine-grained clock
//! (`SystemTime::now`), so entries used a microsecond apart are ordered.
//! Ties are broken by file name.
//!
//! **Only the cache's own files** are considered: a regular file (not
//! followed through a symlink) named `<64 lower-case hex digits>.cwasm`,
//! owned by the effective user and not writable by group or others, the
//! checks a lookup makes before it trusts an entry. Everything else in the
//! directory is neither counted nor removed. The entry just written is never
//! removed, even when it alone exceeds the bound. Temporary files
//! (`.tmp-<key>-…`) are removed only when older than [`STALE_TEMP_SECS`]:
//! a younger one may be another process's entry being written.
//!
//! Never here: errors or panics. A file that cannot be removed is reported
//! in [`Eviction::problems`] and the scan goes on; a file that changed since
//! the scan (touched by a hit, rewritten, replaced) is left alone.

use std::path::Path;
use std::time::{Duration, SystemTime};

/// Largest number of entries kept, whatever their size (4,096). It bounds
/// the eviction scan, which runs after every store: listing 4,096 entries
/// and `statx` of each took 25 ms on the tests' 2-core VM under load
/// (ext4, 6 µs a file, as for Python's `os.scandir`), against the
/// 11–110 ms compilation that every store follows. With the default size
/// bound and typical entries (a 1,200-program cache measured 43 MB, 36 KB
/// an entry), the size alone would allow about 7,000.
pub const MAX_ENTRIES: usize = 4096;

/// Age after which a temporary file is taken as left behind by a killed
/// wprobe and removed (one hour). Writing an entry takes milliseconds (it
/// starts after the module is compiled, and ends with a rename), so a
/// younger temporary file may belong to a live writer and is kept.
pub const STALE_TEMP_SECS: u64 = 3600;

/// What an eviction pass removed, and what it could not do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Eviction {
    /// Entries removed (least recently used first).
    pub entries: usize,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Stale temporary files removed.
    pub stale_temp_files: usize,
    /// What went wrong (a directory that cannot be listed, a file that
    /// cannot be removed); never an error of the load.
    pub problems: Vec<String>,
}

impl Eviction {
    /// Whether nothing was removed and nothing went wrong.
    pub fn is_empty(&self) -> bool {
        *self == Eviction::default()
    }
}

impl std::fmt::Display for Eviction {
    /// `evicted 2 entries (612000 bytes); removed 1 stale temporary file;
    /// eviction: …` (the parts that apply, empty when nothing happened).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.entries > 0 {
            let s = if self.entries == 1 {
                "entry"
            } else {
                "entries"
            };
            parts.push(format!(
                "evicted {} {s} ({} bytes)",
                self.entries, self.bytes
            ));
        }
        if self.stale_temp_files > 0 {
            let s = if self.stale_temp_files == 1 { "" } else { "s" };
            parts.push(format!(
                "removed {} stale temporary file{s}",
                self.stale_temp_files
            ));
        }
        parts.extend(self.problems.iter().map(|p| format!("eviction: {p}")));
        f.write_str(&parts.join("; "))
    }
}

/// Whether `name` is `<64 lower-case hex digits>.cwasm`, an entry's name.
pub(crate) fn is_entry_name(name: &str) -> bool {
    name.strip_suffix(super::ENTRY_SUFFIX)
        .is_some_and(|key| key.len() == 64 && key.bytes().all(is_lower_hex))
}

/// Whether `name` is `.tmp-<64 lower-case hex digits>-…`, a temporary file
/// of `store`.
fn is_temp_name(name: &str) -> bool {
    name.strip_prefix(".tmp-").is_some_and(|rest| {
        rest.len() > 65 && rest.as_bytes()[64] == b'-' && rest.bytes().take(64).all(is_lower_hex)
    })
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// A regular file of the user's own that no one else can change (the
/// lookup's trust checks, without following symlinks).
fn own_file(meta: &std::fs::Metadata) -> bool {
    meta.is_file() && crate::proc::privdir::owner_and_mode(meta).is_ok()
}

/// An entry found by the scan.
struct Candidate {
    name: String,
    modified: SystemTime,
    len: u64,
}

/// Removes least-recently-used entries of `dir` until their total size is
/// at most `max_bytes` and their number at most [`MAX_ENTRIES`], never
/// `keep` (the file name of the entry just written); removes stale
/// temporary files. See the module documentation.
pub(crate) fn evict(dir: &Path, keep: &str, max_bytes: u64) -> Eviction {
    let mut ev = Eviction::default();
    let mut found = scan(dir, &mut ev);
    found.sort_by(|a, b| (a.modified, &a.name).cmp(&(b.modified, &b.name)));
    let mut total: u64 = found.iter().map(|c| c.len).sum();
    let mut count = found.len();
    for c in &found {
        if total <= max_bytes && count <= MAX_ENTRIES {
            break;
        }
        if c.name == keep {
            continue;
        }
        let path = dir.join(&c.name);
        // Changed since the scan (a hit touched it, a writer replaced it):
        // no longer the entry chosen, so it stays.
        match std::fs::symlink_metadata(&path) {
            Ok(m) if own_file(&m) && m.len() == c.len && m.modified().ok() == Some(c.modified) => {}
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Another process evicted it meanwhile.
                total -= c.len;
                count -= 1;
                continue;
            }
            Err(e) => {
                ev.problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                ev.entries += 1;
                ev.bytes += c.len;
                total -= c.len;
                count -= 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                total -= c.len;
                count -= 1;
            }
            Err(e) => ev
                .problems
                .push(format!("cannot remove {}: {e}", path.display())),
        }
    }
    ev
}

/// The cache's own entries in `dir`; removes stale temporary files on the
/// way. Other files are skipped.
fn scan(dir: &Path, ev: &mut Eviction) -> Vec<Candidate> {
    let now = SystemTime::now();
    let stale = Duration::from_secs(STALE_TEMP_SECS);
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => {
            ev.problems
                .push(format!("cannot list {}: {e}", dir.display()));
            return found;
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                ev.problems.push(format!("listing {}: {e}", dir.display()));
                break;
            }
        };
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let entry_name = is_entry_name(&name);
        if !entry_name && !is_temp_name(&name) {
            continue;
        }
        // `DirEntry::metadata` does not follow symlinks.
        let Ok(meta) = entry.metadata() else { continue };
        if !own_file(&meta) {
            continue;
        }
        let Ok(modified) = meta.modified() else {
            continue;
        };
        if entry_name {
            found.push(Candidate {
                name,
                modified,
                len: meta.len(),
            });
        } else if now.duration_since(modified).is_ok_and(|age| age > stale) {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => ev.stale_temp_files += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => ev
                    .problems
                    .push(format!("cannot remove {}: {e}", entry.path().display())),
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_entries_and_temporary_files() {
        let key = "0123456789abcdef".repeat(4);
        assert!(is_entry_name(&format!("{key}.cwasm")));
        assert!(!is_entry_name(&format!("{}.cwasm", key.to_uppercase())));
        assert!(!is_entry_name(&format!("{key}0.cwasm")));
        assert!(!is_entry_name(&format!("{}.cwasm", &key[1..])));
        assert!(!is_entry_name(&format!("{key}.cwasm.bak")));
        assert!(!is_entry_name(&key));
        assert!(!is_entry_name(".cwasm"));
        assert!(is_temp_name(&format!(".tmp-{key}-12-0-99")));
        assert!(!is_temp_name(&format!(".tmp-{key}")));
        assert!(!is_temp_name(&format!(".tmp-{key}-")));
        assert!(!is_temp_name(&format!(".tmp-{}-1", key.to_uppercase())));
        assert!(!is_temp_name(".tmp-notes"));
        assert!(!is_temp_name(&format!("tmp-{key}-1")));
        // Multi-byte text never panics.
        assert!(!is_temp_name(&format!(".tmp-{}é-1", &key[..63])));
        assert!(!is_entry_name(&format!("{}é.cwasm", &key[..62])));
    }

    #[test]
    fn eviction_reads_as_one_line() {
        assert_eq!(Eviction::default().to_string(), "");
        assert!(Eviction::default().is_empty());
        let ev = Eviction {
            entries: 1,
            bytes: 300,
            stale_temp_files: 2,
            problems: vec!["cannot remove /c/x: denied".into()],
        };
        assert_eq!(
            ev.to_string(),
            "evicted 1 entry (300 bytes); removed 2 stale temporary files; eviction: cannot remove /c/x: denied"
        );
        let ev = Eviction {
            entries: 3,
            bytes: 9,
            ..Eviction::default()
        };
        assert_eq!(ev.to_string(), "evicted 3 entries (9 bytes)");
    }
}
