//! The patch journal of attach mode: before each
//! `int3` is written into a process we did not launch, one line records the
//! address, the original byte and the inode of the mapping, so that a later
//! `repair --pid N` can restore the bytes if the tracer was killed with
//! SIGKILL. The file is removed after a clean detach. Launched commands need
//! no journal (PTRACE_O_EXITKILL kills them with the tracer). The
//! in-process transport journals its trap sites (a [`TRAP_INSN`] each) in
//! the same format; its jumps have a format of their own
//! (`transport/inproc/journal.rs`, at [`inproc_path`]), in the same
//! directory under the same rules ([`create_file`]).
//!
//! The directory ([`dir`]) is one no other user can create first: root's
//! is `/run/wprobe`, another user's `$XDG_RUNTIME_DIR/wprobe`, or without
//! one a directory of theirs made with `mkdtemp` in `/tmp`
//! (`/tmp/wprobe-UID-XXXXXX`, found again by `repair`). Whatever it is, it
//! is used only when it is a directory of the user's own, writable by no
//! one else ([`crate::proc::privdir`]), and a journal is created only as a new
//! file (`O_EXCL | O_NOFOLLOW`), never through a symlink and never over an
//! existing file. A breakpoint that cannot be journaled is not armed.
//!
//! Each journal names the wprobe that holds it (`tracer PID START`):
//! `repair` refuses a process a live wprobe still traces. Journals of
//! processes that have ended are removed whenever a journal is created.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::transport::Error;

/// Directory of journals, one no other user can create first:
/// `$XDG_RUNTIME_DIR/wprobe` when the session has one; without it (sudo,
/// cron, ssh without a session) root's is `/run/wprobe`, another user's a
/// private directory of theirs in `/tmp` made by `mkdtemp`
/// (`/tmp/wprobe-UID-*`, the first valid one found, made when there is
/// none). Root without a writable `/run` falls back to the same rule as
/// other users.
pub fn dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let uid = crate::proc::privdir::euid();
        if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(d).join("wprobe");
        }
        if uid == 0 && Path::new("/run").is_dir() {
            let run = PathBuf::from("/run/wprobe");
            if crate::proc::privdir::ensure_dir(&run).is_ok() {
                return run;
            }
        }
        tmp_dirs(uid).into_iter().next().unwrap_or_else(|| {
            let template = format!("/tmp/wprobe-{uid}-XXXXXX");
            nix::unistd::mkdtemp(template.as_str())
                // Not creatable: `create_file` reports the directory.
                .unwrap_or_else(|_| PathBuf::from(format!("/tmp/wprobe-{uid}-unavailable")))
        })
    })
    .clone()
}

/// The user's private journal directories in `/tmp` (`wprobe-UID-*`, of
/// theirs, writable by no one else), sorted.
fn tmp_dirs(uid: u32) -> Vec<PathBuf> {
    let prefix = format!("wprobe-{uid}-");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/tmp")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .filter(|p| {
            std::fs::symlink_metadata(p)
                .is_ok_and(|m| m.is_dir() && crate::proc::privdir::owner_and_mode(&m).is_ok())
        })
        .collect();
    dirs.sort();
    dirs
}

/// Every directory a journal of this user may be in, [`dir`] first: a
/// wprobe started with another environment (with or without
/// `XDG_RUNTIME_DIR`: a session's, sudo's) wrote its journals in one of
/// the others: `/run/user/UID/wprobe`, root's `/run/wprobe`, and every
/// private one in `/tmp` (two wprobes started at once may each have made
/// one).
pub fn dirs() -> Vec<PathBuf> {
    let uid = crate::proc::privdir::euid();
    let mut all = vec![dir(), PathBuf::from(format!("/run/user/{uid}/wprobe"))];
    if uid == 0 {
        all.push(PathBuf::from("/run/wprobe"));
    }
    all.extend(tmp_dirs(uid));
    let mut seen = Vec::new();
    all.retain(|d| {
        let new = !seen.contains(d);
        seen.push(d.clone());
        new
    });
    all
}

/// Path of the journal of `pid` (where it is, in any of [`dirs`]; else
/// where it would be written).
pub fn path(pid: i32) -> PathBuf {
    find(&format!("{pid}.journal"))
}

/// Path of the in-process transport's journal of the jumps of `pid`
/// (`PID.inproc`; its format is `transport/inproc/journal.rs`'s), where it
/// is in any of [`dirs`]; else where it would be written.
pub fn inproc_path(pid: i32) -> PathBuf {
    find(&format!("{pid}.inproc"))
}

/// The byte an in-process trap site gets: `hlt`, which faults in user mode
/// (see `transport/inproc/traps.rs`). Journaled here like an `int3`, and
/// put back likewise.
pub const TRAP_INSN: u8 = 0xf4;

/// Where the journal file `name` is, in any of [`dirs`]; else where it
/// would be written.
pub(crate) fn find(name: &str) -> PathBuf {
    // This run's directory first: listing every candidate directory
    // reads `/tmp`.
    let own = dir().join(name);
    if own.exists() {
        return own;
    }
    let all = dirs();
    all.iter()
        .map(|d| d.join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| all[0].join(name))
}

/// The wprobe holding a journal (its `tracer PID START` line), when it is
/// alive: its pid.
pub fn live_holder(path: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(path).ok()?;
    let (pid, start) = text.lines().find_map(|l| {
        let mut w = l.strip_prefix("tracer ")?.split_whitespace();
        Some((
            w.next()?.parse::<i32>().ok()?,
            w.next()?.parse::<u64>().ok()?,
        ))
    })?;
    (crate::proc::procinfo::start_time(pid) == Some(start)).then_some(pid)
}

/// Refuses a process another wprobe patched: a live one traces it (its
/// journal names it), or a killed one left its jumps (or traps) in it,
/// which `wprobe repair` puts back first: `--transport TRANSPORT` cannot
/// attach to it ([`Error::Unsupported`]).
pub(crate) fn held_by_another_run(pid: i32, transport: &'static str) -> Result<(), Error> {
    let now = crate::proc::procinfo::start_time(pid);
    for path in [inproc_path(pid), path(pid)] {
        // Only a journal of ours (a plant is refused where a journal is
        // created, with its own message).
        let ours = std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_file() && crate::proc::privdir::owner_and_mode(&m).is_ok());
        if !ours || start_in(&path).is_some_and(|t| Some(t) != now) {
            continue;
        }
        let why = match live_holder(&path) {
            Some(holder) => traced_by(pid, holder),
            None => format!(
                "process {pid} still holds the probes of a wprobe that was killed ({}): run \
                 `wprobe repair --pid {pid}` first",
                path.display()
            ),
        };
        return Err(Error::unsupported(transport, why));
    }
    Ok(())
}

/// The refusal of a process a live wprobe (`holder`) traces, as the one of
/// a process another tracer holds by ptrace.
pub fn traced_by(pid: i32, holder: i32) -> String {
    format!(
        "process {pid} is traced by process {holder} (wprobe), which restores it when it stops: \
         stop that with SIGINT (`kill -INT {holder}`)"
    )
}

/// Removes the journals (of either transport) of processes that have
/// ended, or whose pid another process has now: nothing of them applies
/// any more (34 piled up in an afternoon of killed runs).
pub fn sweep() {
    for d in dirs() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let Some(pid) = name
                .strip_suffix(".journal")
                .or_else(|| name.strip_suffix(".inproc"))
                .or_else(|| name.strip_suffix(".sem"))
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            let p = e.path();
            let ok = std::fs::symlink_metadata(&p)
                .is_ok_and(|m| m.is_file() && crate::proc::privdir::owner_and_mode(&m).is_ok());
            if !ok {
                continue;
            }
            let now = crate::proc::procinfo::start_time(pid);
            if now.is_none() || start_in(&p).is_some_and(|then| Some(then) != now) {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
}

/// Creates the journal file `path` of process `pid` (for both transports'
/// journals): the journal directory checked ([`crate::proc::privdir`]), a new
/// file of mode 0600 never opened through a symlink, and a first line
/// `start T` with the process's start time. A journal left for an earlier
/// process with this pid (killed with its wprobe, the pid reused since) is
/// replaced: nothing of it applies here. Any other existing journal is an
/// error saying to run `wprobe repair` (`who`: how that wprobe touched the
/// process, as the message says it).
pub fn create_file(pid: i32, path: &Path, who: &str) -> io::Result<File> {
    let d = path.parent().map_or_else(dir, Path::to_path_buf);
    crate::proc::privdir::ensure_dir(&d).map_err(|problem| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("journal directory {}: {problem}", d.display()),
        )
    })?;
    sweep();
    let open = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    };
    let now = crate::proc::procinfo::start_time(pid);
    let mut opened = open();
    if opened
        .as_ref()
        .is_err_and(|e| e.kind() == io::ErrorKind::AlreadyExists)
        && now.is_some()
        && start_in(path).is_some_and(|then| Some(then) != now)
    {
        let _ = std::fs::remove_file(path);
        opened = open();
    }
    let mut file = opened.map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists
            && let Some(holder) = live_holder(path)
        {
            io::Error::new(e.kind(), traced_by(pid, holder))
        } else if e.kind() == io::ErrorKind::AlreadyExists {
            io::Error::new(
                e.kind(),
                format!(
                    "{} already exists: a wprobe {who} process {pid} was killed; run `wprobe \
                     repair --pid {pid}` first",
                    path.display()
                ),
            )
        } else {
            io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))
        }
    })?;
    let me = std::process::id() as i32;
    let mut head = String::new();
    if let Some(t) = now {
        head += &format!("start {t}\n");
    }
    if let Some(t) = crate::proc::procinfo::start_time(me) {
        head += &format!("tracer {me} {t}\n");
    }
    file.write_all(head.as_bytes())?;
    Ok(file)
}

/// The start time recorded in the journal file `path` (its `start` line),
/// when it has one.
pub fn start_in(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("start "))
        .and_then(|t| t.trim().parse().ok())
}

/// A journal file open for appending (either transport's format).
#[derive(Debug)]
pub struct JournalFile {
    file: File,
    path: PathBuf,
}

impl JournalFile {
    /// Creates the journal file `path` of `pid` as [`create_file`] does
    /// (`who`: how this wprobe touches the process).
    pub fn create(pid: i32, path: PathBuf, who: &str) -> io::Result<JournalFile> {
        let file = create_file(pid, &path, who)?;
        Ok(JournalFile { file, path })
    }

    /// Appends `text` (whole lines): one write, no sync. A journal is
    /// for wprobe's death (its writes are the kernel's once made, whatever
    /// becomes of wprobe); the bytes it lists are in the memory of a
    /// process, which a crash of the machine takes with it: a sync would
    /// only make a journal outlive its process's patches (7 ms for the
    /// 14,000 sites of `python3.11`, on a disk-backed `/run`).
    pub fn append(&mut self, text: &str) -> io::Result<()> {
        self.file.write_all(text.as_bytes())
    }

    /// Removes the file (every byte restored).
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The entries of the journal file `path`, opened as [`open_own`] opens
/// it: what `parse` makes of each line, the lines it gives nothing for
/// (the `start` and `tracer` lines, a torn last line) passed over.
pub fn read_entries<T>(
    path: &Path,
    mut parse: impl FnMut(&str) -> Option<T>,
) -> io::Result<Vec<T>> {
    let f = open_own(path)?;
    let mut out = Vec::new();
    for line in io::BufReader::new(f).lines() {
        out.extend(parse(&line?));
    }
    Ok(out)
}

/// An open journal.
#[derive(Debug)]
pub struct Journal(JournalFile);

impl Journal {
    /// Creates the journal of `pid`: a new file (mode 0600) in a directory
    /// only the user can change. An existing journal is an error: a wprobe
    /// attached to the process was killed and its bytes may still be
    /// patched (`wprobe repair`), or something else planted the file.
    pub fn create(pid: i32) -> io::Result<Journal> {
        // Written in this wprobe's directory (an older one of this process
        // elsewhere is found by `path`, for `repair`).
        let path = dir().join(format!("{pid}.journal"));
        JournalFile::create(pid, path, "attached to").map(Journal)
    }

    /// Records a patch before it is written.
    pub fn record(&mut self, addr: u64, orig: u8, inode: u64) -> io::Result<()> {
        self.record_all(&[(addr, orig, inode)])
    }

    /// Records patches `(address, original byte, inode)` before they are
    /// written: one write and one sync for all (a sync each cost `wprobe
    /// trace` of python3.11 a tenth of its arming).
    pub fn record_all(&mut self, patches: &[(u64, u8, u64)]) -> io::Result<()> {
        if patches.is_empty() {
            return Ok(());
        }
        let mut text = String::with_capacity(patches.len() * 32);
        for (addr, orig, inode) in patches {
            use std::fmt::Write as _;
            let _ = writeln!(text, "{addr:x} {orig:02x} {inode}");
        }
        self.0.append(&text)
    }

    /// Removes the journal (all bytes restored).
    pub fn remove(self) {
        self.0.remove();
    }
}

/// The start time of the process the journal of `pid` was written for
/// (its `start` line), when it has one.
pub fn journal_start(pid: i32) -> Option<u64> {
    start_in(&path(pid))
}

/// Opens a journal file for reading: a regular file of the user's own,
/// opened without following symlinks (the same rule as for creating it).
pub fn open_own(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    crate::proc::privdir::owner_and_mode(&meta)
        .map_err(|e| io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()))?;
    Ok(f)
}

/// Entries of the journal of `pid`: (address, original byte, inode). The
/// file must be a regular file of the user's own, opened without following
/// symlinks (the same rule as for creating it).
pub fn read(pid: i32) -> io::Result<Vec<(u64, u8, u64)>> {
    read_entries(&path(pid), |line| {
        let mut it = line.split_whitespace();
        let (a, b, i) = (it.next()?, it.next()?, it.next()?);
        Some((
            u64::from_str_radix(a, 16).ok()?,
            u8::from_str_radix(b, 16).ok()?,
            i.parse().ok()?,
        ))
    })
}

/// Restores the journaled bytes of `pid` where an `int3` is still present
/// and the mapping's inode matches, then removes the journal. Returns how
/// many bytes were restored. Writes through /proc/PID/mem (needs the same
/// permission as attaching).
pub fn repair(pid: i32) -> io::Result<usize> {
    stale_check(pid)?;
    let entries = read(pid)?;
    let maps = maps_of(pid)?;
    let mem = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))?;
    restore(pid, entries, &maps, &mem)
}

/// [`repair`] through `mem`, the process's `/proc/PID/mem` opened for
/// writing (the watchdog opens it while wprobe is alive).
pub fn repair_with(pid: i32, mem: &File) -> io::Result<usize> {
    stale_check(pid)?;
    let entries = read(pid)?;
    let maps = maps_of(pid)?;
    restore(pid, entries, &maps, mem)
}

/// A journal written for an earlier process with this pid is removed,
/// not applied: its addresses mean nothing in this one.
fn stale_check(pid: i32) -> io::Result<()> {
    if let Some(then) = journal_start(pid)
        && crate::proc::procinfo::start_time(pid).is_some_and(|now| now != then)
    {
        let _ = std::fs::remove_file(path(pid));
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the patch journal was written for an earlier process with pid {pid} (it has \
                 ended); removed, nothing restored"
            ),
        ));
    }
    Ok(())
}

/// The mappings of `pid`, keeping the kind of an I/O error
/// (PermissionDenied gets the CLI's hint).
fn maps_of(pid: i32) -> io::Result<Vec<crate::proc::procmaps::Mapping>> {
    crate::proc::procmaps::read(pid).map_err(|e| {
        let kind = match &e {
            crate::proc::procmaps::MapsError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    })
}

fn restore(
    pid: i32,
    entries: Vec<(u64, u8, u64)>,
    maps: &[crate::proc::procmaps::Mapping],
    mem: &File,
) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut n = 0;
    for (addr, orig, inode) in entries {
        let Some(m) = crate::proc::procmaps::find(maps, addr) else {
            continue;
        };
        if m.inode != inode {
            continue;
        }
        let mut b = [0u8];
        // An `int3` of the ptrace transport, or the `hlt` of an in-process
        // trap site.
        let ours = [crate::arch::BREAKPOINT_INSN, TRAP_INSN];
        if mem.read_at(&mut b, addr).is_ok() && ours.contains(&b[0]) {
            mem.write_at(&[orig], addr)?;
            n += 1;
        }
    }
    let _ = std::fs::remove_file(path(pid));
    Ok(n)
}
