//! Tests of the process's memory as the in-process transport reads and
//! writes it.

use super::*;

/// What `peek_code` reads after a `poke` is what the process holds:
/// the bytes written, in a chunk read before (the write put in it) and
/// across two chunks, and the bytes put back.
#[test]
fn code_read_in_chunks_follows_the_writes() {
    let argv = [std::ffi::OsString::from("/bin/bash")];
    let spawned = crate::sys::process::spawn(&argv, crate::sys::process::Start::TraceMe).unwrap();
    let pid = spawned.pid;
    let st = sys::wait(pid, 0).unwrap().unwrap().1;
    assert!(libc::WIFSTOPPED(st) && libc::WSTOPSIG(st) == libc::SIGTRAP);
    assert_eq!(spawned.exec_errno(), None);
    let maps = crate::proc::procmaps::read(pid).unwrap();
    // A chunk boundary inside bash's code, 32 bytes on either side.
    let at = maps
        .iter()
        .filter(|m| m.exec && m.path.ends_with("bash"))
        .find_map(|m| {
            let b = (m.start + 32).next_multiple_of(chunks::CHUNK);
            (b + 32 <= m.end).then_some(b)
        })
        .expect("a chunk boundary in bash's code");
    let w = World::launched(pid).unwrap();
    let (lo, len) = (at - 16, 32usize);
    let mut before = vec![0u8; len];
    assert_eq!(w.peek_code(lo, &mut before), len);
    let mut direct = vec![0u8; len];
    assert_eq!(w.peek(lo, &mut direct), len);
    assert_eq!(before, direct);
    // Across the boundary, in both chunks read above.
    let new: Vec<u8> = (0..8u8).map(|i| 0xc0 | i).collect();
    w.poke(at - 4, &new).unwrap();
    let mut after = vec![0u8; len];
    assert_eq!(w.peek_code(lo, &mut after), len);
    let mut expect = before.clone();
    expect[12..20].copy_from_slice(&new);
    assert_eq!(after, expect);
    assert_eq!(w.peek(lo, &mut direct), len);
    assert_eq!(direct, expect);
    // Put back.
    w.poke(at - 4, &before[12..20]).unwrap();
    assert_eq!(w.peek_code(lo, &mut after), len);
    assert_eq!(after, before);
    drop(w);
    crate::sys::process::kill_and_reap(pid);
}
