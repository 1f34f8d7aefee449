//! The patch journal of the in-process transport: before the jumps are
//! written into a process, one line per site records its address, the
//! original bytes, the bytes written and the inode of the mapping, so that
//! `wprobe repair --pid N` can restore the bytes after wprobe was killed
//! (the probes are dormant by then; the bytes are still patched). Kept next
//! to the other journals ([`crate::transport::common::journal`]), with the
//! same safety rules (a directory of the user's own, a new file, no
//! symlinks), and removed after a clean detach. A site that cannot be
//! journaled is not patched.

use std::io;
use std::path::PathBuf;

use crate::transport::common::journal;

/// Path of the journal of `pid`.
pub fn path(pid: i32) -> PathBuf {
    journal::inproc_path(pid)
}

/// One journaled site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// First byte of the window.
    pub addr: u64,
    /// The bytes the window held.
    pub orig: Vec<u8>,
    /// The bytes written (the jump and its padding).
    pub patch: Vec<u8>,
    /// Inode of the mapping.
    pub inode: u64,
}

/// Appends `b` in hex (lower case) to `out`.
fn hex_into(out: &mut String, b: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &x in b {
        out.push(char::from(DIGITS[usize::from(x >> 4)]));
        out.push(char::from(DIGITS[usize::from(x & 15)]));
    }
}

/// Appends the journal's line of one site to `text`: its window's
/// address, the bytes it held and those written (in hex), the inode of
/// the mapping.
pub fn line_into(text: &mut String, addr: u64, orig: &[u8], patch: &[u8], inode: u64) {
    use std::fmt::Write as _;
    let _ = write!(text, "{addr:x} ");
    hex_into(text, orig);
    text.push(' ');
    hex_into(text, patch);
    let _ = writeln!(text, " {inode}");
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// An open journal.
#[derive(Debug)]
pub struct Journal(journal::JournalFile);

impl Journal {
    /// Creates the journal of `pid` (a new file, mode 0600, in a directory
    /// only the user can change); an existing one is an error that says to
    /// run `wprobe repair` first.
    pub fn create(pid: i32) -> io::Result<Journal> {
        let path = journal::dir().join(format!("{pid}.inproc"));
        journal::JournalFile::create(pid, path, "that patched").map(Journal)
    }

    /// Records the sites about to be patched.
    pub fn record(&mut self, entries: &[Entry]) -> io::Result<()> {
        // 20,000 sites: one string, no allocation per byte or line.
        let mut text = String::with_capacity(entries.len() * 64);
        for e in entries {
            line_into(&mut text, e.addr, &e.orig, &e.patch, e.inode);
        }
        self.append(&text)
    }

    /// Records the sites whose lines ([`line_into`]) are `text`.
    pub fn append(&mut self, text: &str) -> io::Result<()> {
        self.0.append(text)
    }

    /// Removes the journal (every byte restored).
    pub fn remove(self) {
        self.0.remove();
    }
}

/// The start time of the process the journal of `pid` was written for
/// (its `start` line), when it has one.
pub fn journal_start(pid: i32) -> Option<u64> {
    journal::start_in(&path(pid))
}

/// The entries of the journal of `pid` (a regular file of the user's own,
/// opened without following symlinks).
pub fn read(pid: i32) -> io::Result<Vec<Entry>> {
    journal::read_entries(&path(pid), |line| {
        let mut it = line.split_whitespace();
        let (a, o, p, i) = (it.next()?, it.next()?, it.next()?, it.next()?);
        let (addr, orig, patch, inode) = (
            u64::from_str_radix(a, 16).ok()?,
            unhex(o)?,
            unhex(p)?,
            i.parse().ok()?,
        );
        (orig.len() == patch.len()).then_some(Entry {
            addr,
            orig,
            patch,
            inode,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal left by an earlier process with this pid is replaced; one
    /// of this very process is an error naming the live wprobe holding it
    /// (here this test), or, once that one is gone, `wprobe repair`.
    #[test]
    fn a_journal_of_an_earlier_process_with_the_pid_is_stale() {
        let pid = std::process::id() as i32;
        let _ = std::fs::remove_file(path(pid));
        let j = Journal::create(pid).unwrap();
        assert_eq!(journal_start(pid), crate::proc::procinfo::start_time(pid));
        let e = Journal::create(pid).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "process {pid} is traced by process {pid} (wprobe)"
            )),
            "{e}"
        );
        // Held by a wprobe that is gone (pid 1 never started at time 1).
        let start = crate::proc::procinfo::start_time(pid).unwrap();
        std::fs::write(path(pid), format!("start {start}\ntracer 1 1\n")).unwrap();
        let e = Journal::create(pid).unwrap_err();
        assert!(e.to_string().contains("wprobe repair --pid"), "{e}");
        j.remove();
        std::fs::write(path(pid), "start 1\n1000 55 e9 7\n").unwrap();
        let j = Journal::create(pid).unwrap();
        assert_eq!(journal_start(pid), crate::proc::procinfo::start_time(pid));
        assert!(read(pid).unwrap().is_empty());
        j.remove();
        assert!(!path(pid).exists());
    }
}
