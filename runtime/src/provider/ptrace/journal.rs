//! The patch journal of attach mode (RELIABILITY §5, policy 2c): before each
//! `int3` is written into a process we did not launch, one line records the
//! address, the original byte and the inode of the mapping, so that a later
//! `repair --pid N` can restore the bytes if the tracer was killed with
//! SIGKILL. The file is removed after a clean detach. Launched commands need
//! no journal (PTRACE_O_EXITKILL kills them with the tracer).

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::PathBuf;

/// Directory of journals: `$XDG_RUNTIME_DIR/wprobe`, or `/tmp/wprobe-UID`.
pub fn dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("wprobe"),
        // SAFETY: getuid has no preconditions and cannot fail.
        _ => PathBuf::from(format!("/tmp/wprobe-{}", unsafe { libc::getuid() })),
    }
}

/// Path of the journal of `pid`.
pub fn path(pid: i32) -> PathBuf {
    dir().join(format!("{pid}.journal"))
}

/// An open journal.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    /// Creates (truncates) the journal of `pid`.
    pub fn create(pid: i32) -> io::Result<Journal> {
        std::fs::create_dir_all(dir())?;
        let path = path(pid);
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)?;
        Ok(Journal { file, path })
    }

    /// Records a patch before it is written.
    pub fn record(&mut self, addr: u64, orig: u8, inode: u64) -> io::Result<()> {
        writeln!(self.file, "{addr:x} {orig:02x} {inode}")?;
        self.file.sync_data()
    }

    /// Removes the journal (all bytes restored).
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Entries of the journal of `pid`: (address, original byte, inode).
pub fn read(pid: i32) -> io::Result<Vec<(u64, u8, u64)>> {
    let f = File::open(path(pid))?;
    let mut out = Vec::new();
    for line in io::BufReader::new(f).lines() {
        let line = line?;
        let mut it = line.split_whitespace();
        let (Some(a), Some(b), Some(i)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if let (Ok(a), Ok(b), Ok(i)) = (
            u64::from_str_radix(a, 16),
            u8::from_str_radix(b, 16),
            i.parse(),
        ) {
            out.push((a, b, i));
        }
    }
    Ok(out)
}

/// Restores the journaled bytes of `pid` where an `int3` is still present
/// and the mapping's inode matches, then removes the journal. Returns how
/// many bytes were restored. Writes through /proc/PID/mem (needs the same
/// permission as attaching).
pub fn repair(pid: i32) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let entries = read(pid)?;
    // Keep the kind of an I/O error (PermissionDenied gets the CLI's hint).
    let maps = crate::procmaps::read(pid).map_err(|e| {
        let kind = match &e {
            crate::procmaps::MapsError::Io { source, .. } => source.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    })?;
    let mem = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))?;
    let mut n = 0;
    for (addr, orig, inode) in entries {
        let Some(m) = crate::procmaps::find(&maps, addr) else {
            continue;
        };
        if m.inode != inode {
            continue;
        }
        let mut b = [0u8];
        if mem.read_at(&mut b, addr).is_ok() && b[0] == crate::arch::BREAKPOINT_INSN {
            mem.write_at(&[orig], addr)?;
            n += 1;
        }
    }
    let _ = std::fs::remove_file(path(pid));
    Ok(n)
}
