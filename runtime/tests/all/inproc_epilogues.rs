//! Far jumps (`jmp rel32`, `jcc rel32`) to code whose `ret` no jump can
//! cover, under the in-process transport (`tests/progs/far_epilogues.c`):
//! a jump into another function's trapped epilogue is sent to a return
//! stub of that epilogue (only the function's own calls still stop), and a
//! `.cold` part's jump back into a function is sent into the function's
//! relocated copy (no trap at all). Every call and return value exact,
//! the program's output unchanged.

use std::path::PathBuf;
use std::process::Command;

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, progs};
use crate::support::target::{counts, file_bytes, func, inproc_report, inproc_tree};

pub const CASES: &[Case] = &[case!(
    far_jumps_to_trapped_rets_go_to_stubs_and_copies,
    Need::Ptrace
)];

/// `far_epilogues.c`, non-PIE (link-time addresses are run-time ones).
fn far_epilogues() -> PathBuf {
    gcc(
        "far_epilogues",
        &progs().join("far_epilogues.c"),
        &["-O2", "-fcf-protection=none", "-fno-pie", "-no-pie"],
    )
}

/// `cp_func(n)` as the program computes it.
fn cp_func(n: i64) -> i64 {
    if n == 0 { 0 } else { 2 * n.abs() + 1 }
}

/// The program's output for `n`.
fn sum(n: i64) -> String {
    let fillers = 3 * 26;
    let owner: i64 = (0..3).map(|i| 3 * i).sum();
    let rest: i64 = (0..n).map(|i| i + 1 + cp_func(i % 5 - 2)).sum();
    format!("{}\n", fillers + owner + rest)
}

/// `ep_hot`'s 1,000 calls return through `ep_owner`'s trapped `ret` by a
/// jump sent to that epilogue's stub: the 3 stops are `ep_owner`'s own
/// calls (1,003 without it); `cp_func` runs as a copy, its cold part's
/// jump back sent into it: no trap. The shapes are checked first (what the
/// test is about), and the return values of the calls.
fn far_jumps_to_trapped_rets_go_to_stubs_and_copies() {
    let exe = far_epilogues();
    let (owner, owner_len) = func(&exe, "ep_owner");
    let (hot, _) = func(&exe, "ep_hot");
    let (cp, cp_len) = func(&exe, "cp_func");
    let (cold, _) = func(&exe, "cp_func.cold");
    // `ep_owner` ends in `pop %rbx; ret`; `ep_hot` jumps (`e9`) to its
    // `pop` after `push; lea; cmp; je`; `cp_func.cold` jumps back (`e9`)
    // to the `inc` before `cp_func`'s first `ret`.
    let (pop, ret) = (owner + owner_len - 2, owner + owner_len - 1);
    assert_eq!(file_bytes(&exe, pop, 2), [0x5b, 0xc3]);
    let jump = hot + 1 + 4 + 4 + 2;
    let j = file_bytes(&exe, jump, 5);
    assert_eq!(j[0], 0xe9);
    assert_eq!(
        (jump + 5).wrapping_add(i32::from_le_bytes(j[1..].try_into().unwrap()) as i64 as u64),
        pop
    );
    let back = cold + 3 + 4;
    let b = file_bytes(&exe, back, 5);
    let inc = cp + cp_len - 5;
    assert_eq!(file_bytes(&exe, inc, 5), [0x48, 0xff, 0xc0, 0xc3, 0xc3]);
    assert_eq!(
        (back + 5).wrapping_add(i32::from_le_bytes(b[1..].try_into().unwrap()) as i64 as u64),
        inc
    );
    let plain = Command::new(&exe).arg("1000").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), sum(1000));

    // Counts over 1,000 calls: the stops are `ep_owner`'s 3.
    let (out, err, got) = inproc_report(&exe, "far_epilogues", "1000");
    assert_eq!(out, sum(1000), "{err}");
    assert!(
        err.contains(&format!(
            ": {ret:#x}: its epilogue from {pop:#x} also runs in a return stub at "
        )) && err.contains(&format!(
            ", the jump at ({jump:#x}) sent there (the trap stays for the other ways in)\n"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            ": {cp:#x} cp_func: its `ret`s ({:#x}, {:#x}) run in a relocated copy",
            inc + 3,
            inc + 4
        )) && err.contains(&format!(
            "; 1 jump back into the copy at ({back:#x}), where its calls return or branches \
             from outside it land\n"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            ": 3 ptrace stops at trap sites; the busiest: ep_owner at {ret:#x} (3)\n"
        )),
        "{err}"
    );
    let want = counts(&[
        ("cp_func", 1000),
        ("ep_hot", 1000),
        ("ep_owner", 3),
        ("ep_twice", 3),
        ("filler_a", 1),
        ("filler_b", 1),
        ("filler_c", 1),
        ("main", 1),
    ]);
    assert_eq!(got, want, "{err}");

    // The return values, through the stub and the copy.
    let (out, err, got) = inproc_tree(&exe, "far_epilogues.hot", "ep_hot", "6");
    assert_eq!(out, sum(6), "{err}");
    let want: String = (0..6)
        .map(|i| format!("==> ep_hot()\n<== ep_hot() [rax = {:#x}]\n", i + 1))
        .collect();
    assert_eq!(got, want, "{err}");
    let (out, err, got) = inproc_tree(&exe, "far_epilogues.cp", "cp_func", "10");
    assert_eq!(out, sum(10), "{err}");
    let want: String = (0..10)
        .map(|i| {
            format!(
                "==> cp_func()\n<== cp_func() [rax = {:#x}]\n",
                cp_func(i % 5 - 2)
            )
        })
        .collect();
    assert_eq!(got, want, "{err}");
    // Every function is patched under `-F` too: `ep_owner`'s 3 calls stop.
    assert!(
        err.contains(&format!(
            ": 3 ptrace stops at trap sites; the busiest: ep_owner at {ret:#x} (3)\n"
        )),
        "{err}"
    );
}
