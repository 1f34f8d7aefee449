//! USDT semaphores (`sys/sdt.h`): the 2-byte counter a program checks
//! before it computes a probe's arguments. Enabling a USDT site with a
//! semaphore adds one to it in the process; disabling subtracts it again
//! (DTrace's `dtps_enable`/`dtps_disable` of a "is-enabled" probe). Only
//! wprobe's own increments are ever undone: another tracer's stay.
//!
//! Each change is journaled in `PID.sem`, next to the transports' patch
//! journals ([`crate::transport::common::journal`], same safety rules: a
//! directory of the user's own, a new file, no symlinks), so that the
//! watchdog or `wprobe repair --pid PID` subtracts what a killed
//! wprobe added. An increment is journaled after it is written, a
//! decrement before: a wprobe killed in between leaves at worst a counter
//! one too high (the program computes arguments nobody reads), never one
//! too low (a live tracer's probe going silent). Undoing never takes a
//! counter below zero. The writes go through `/proc/PID/mem` (safe file
//! I/O): a counter is data, written while the process runs, as libbpf and
//! systemtap do.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::transport::Error;

/// The semaphore journal of `pid` (wherever a wprobe wrote it).
pub fn path(pid: i32) -> PathBuf {
    crate::transport::common::journal::find(&format!("{pid}.sem"))
}

/// An open journal: the file, its path, the net change made so far.
type Open = (File, PathBuf, i64);

/// The open journal of each process this wprobe changed a semaphore in.
static OPEN: Mutex<Option<HashMap<i32, Open>>> = Mutex::new(None);

fn mem(pid: i32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/mem"))
}

fn read_counter(mem: &File, addr: u64) -> io::Result<u16> {
    let mut b = [0u8; 2];
    mem.read_exact_at(&mut b, addr)?;
    Ok(u16::from_le_bytes(b))
}

fn inode_at(pid: i32, addr: u64) -> u64 {
    crate::proc::procmaps::read(pid)
        .ok()
        .and_then(|m| crate::proc::procmaps::find(&m, addr).map(|m| m.inode))
        .unwrap_or(0)
}

/// Adds `delta` (+1 or -1) to the semaphore at `addr` in `pid`, journaled
/// (see the module's comment); returns the counter's new value. The error
/// names the process, the address and the cause (an [`Error::Os`] with
/// its errno).
pub fn adjust(pid: i32, addr: u64, delta: i16) -> Result<u16, Error> {
    let fail = |what: &str, e: &io::Error| {
        Error::io(
            Some(pid),
            Some(addr),
            e,
            format!("USDT semaphore at {addr:#x} in process {pid}: {what}: {e}"),
        )
    };
    let m = mem(pid).map_err(|e| fail("opening /proc/PID/mem", &e))?;
    let mut guard = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    let open = guard.get_or_insert_with(HashMap::new);
    let (file, _, net) = match open.entry(pid) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            let path = crate::transport::common::journal::dir().join(format!("{pid}.sem"));
            let file = crate::transport::common::journal::create_file(
                pid,
                &path,
                "that raised a USDT semaphore of",
            )
            .map_err(|e| fail("journal", &e))?;
            v.insert((file, path, 0))
        }
    };
    let inode = inode_at(pid, addr);
    let line = format!("sem {addr:x} {delta} {inode}\n");
    let journal = |file: &mut File| {
        file.write_all(line.as_bytes())
            .and_then(|()| file.sync_data())
    };
    if delta < 0 {
        journal(file).map_err(|e| fail("writing the journal", &e))?;
    }
    let now = read_counter(&m, addr).map_err(|e| fail("reading", &e))?;
    let new = if delta < 0 {
        now.saturating_sub(delta.unsigned_abs())
    } else {
        now.saturating_add(delta as u16)
    };
    m.write_all_at(&new.to_le_bytes(), addr)
        .map_err(|e| fail("writing", &e))?;
    if delta > 0 {
        journal(file).map_err(|e| fail("writing the journal", &e))?;
    }
    *net += i64::from(delta);
    if *net <= 0
        && let Some((_, path, _)) = open.remove(&pid)
    {
        let _ = std::fs::remove_file(path);
    }
    Ok(new)
}

/// Forgets process `pid` (it ended or exec'd: its counters are gone):
/// its journal is removed.
pub fn forget(pid: i32) {
    let mut guard = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(open) = guard.as_mut()
        && let Some((_, path, _)) = open.remove(&pid)
    {
        let _ = std::fs::remove_file(path);
    }
}

/// The net change per address of `pid`'s journal: (address, change, inode).
fn read(pid: i32) -> io::Result<Vec<(u64, i64, u64)>> {
    let f = crate::transport::common::journal::open_own(&path(pid))?;
    let mut net: Vec<(u64, i64, u64)> = Vec::new();
    for line in io::BufReader::new(f).lines() {
        let line = line?;
        let mut it = line.split_whitespace();
        let (Some("sem"), Some(a), Some(d), Some(i)) = (it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let (Ok(a), Ok(d), Ok(i)) = (u64::from_str_radix(a, 16), d.parse::<i64>(), i.parse())
        else {
            continue;
        };
        match net.iter_mut().find(|e| e.0 == a) {
            Some(e) => e.1 += d,
            None => net.push((a, d, i)),
        }
    }
    Ok(net)
}

/// Whether `pid` has a semaphore journal (a wprobe raised a counter and
/// has not lowered it).
pub fn has_journal(pid: i32) -> bool {
    path(pid).exists()
}

/// Undoes what a killed wprobe's journal of `pid` says it added, through
/// `mem` (the process's `/proc/PID/mem` opened for writing), then removes
/// the journal. A journal written for an earlier process with this pid is
/// removed without being applied. Returns how many counters were lowered.
pub fn repair_with(pid: i32, mem: &File) -> io::Result<usize> {
    let p = path(pid);
    if crate::transport::common::journal::start_in(&p)
        .is_some_and(|t| Some(t) != crate::proc::procinfo::start_time(pid))
    {
        let _ = std::fs::remove_file(&p);
        return Ok(0);
    }
    let entries = read(pid)?;
    let maps = crate::proc::procmaps::read(pid).unwrap_or_default();
    let mut n = 0;
    for (addr, net, inode) in entries {
        if net <= 0 {
            continue;
        }
        if let Some(m) = crate::proc::procmaps::find(&maps, addr)
            && m.inode != inode
        {
            continue;
        }
        let Ok(now) = read_counter(mem, addr) else {
            continue;
        };
        let new = now.saturating_sub(u16::try_from(net).unwrap_or(u16::MAX));
        mem.write_all_at(&new.to_le_bytes(), addr)?;
        n += 1;
    }
    let _ = std::fs::remove_file(&p);
    Ok(n)
}

/// [`repair_with`], opening the process's memory.
pub fn repair(pid: i32) -> io::Result<usize> {
    repair_with(pid, &mem(pid)?)
}
