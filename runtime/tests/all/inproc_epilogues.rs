//! Far jumps (`jmp rel32`, `jcc rel32`) to code whose `ret` no jump can
//! cover, under the in-process transport (`tests/progs/far_epilogues.c`):
//! a jump into another function's trapped epilogue is sent to a return
//! stub of that epilogue (only the function's own calls still stop; none
//! when that jump was every branch there, the `ret` taking a window), and a
//! `.cold` part's jump back into a function is sent into the function's
//! relocated copy (no trap at all), as is a function whose call's return
//! address has a continuation site (of a callee that leaves by a tail call
//! through a pointer), dispatched on the way back into the copy. Every call
//! and return value exact,
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

/// `cc_func(n)` as the program computes it.
fn cc_func(n: i64) -> i64 {
    if n == 0 { 0 } else { n.abs() + n }
}

/// The program's output for `n`.
fn sum(n: i64) -> String {
    let fillers = 7 * 26;
    let owners: i64 = (0..3).map(|i| 2 * 3 * i).sum();
    let rest: i64 = (0..n)
        .map(|i| i + 1 + i + 2 + cp_func(i % 5 - 2) + cc_func(i % 5 - 2) + 3 * (i + 1))
        .sum();
    format!("{}\n", fillers + owners + rest)
}

/// `ep_hot`'s 1,000 calls return through `ep_owner`'s trapped `ret` by a
/// jump sent to that epilogue's stub: the 3 stops are `ep_owner`'s own
/// calls (1,003 without it); `ep_hot2`'s jump is every branch to
/// `ep_owner2`'s epilogue, whose `ret` then takes a window: no stop (1,003
/// without it); `cp_func` runs as a copy, its cold part's jump back sent
/// into it: no trap (1,000 stops without it); `cc_func` runs as a copy
/// too, the continuation site at its call's return address dispatched on
/// the way back into it: no trap, every call of `tp_func` (a tail call
/// through a pointer) seen returning there (1,000 stops without it);
/// `jb_owner` runs as a copy though `jt_tail`, which tail-calls it and is
/// planned first, took its `ret` as a return site (a trap) of its own
/// (1,000 stops without it). The shapes are checked first
/// (what the test is about), and the return values of the calls.
fn far_jumps_to_trapped_rets_go_to_stubs_and_copies() {
    let exe = far_epilogues();
    let (owner, _) = func(&exe, "ep_owner");
    let (owner2, owner2_len) = func(&exe, "ep_owner2");
    let (hot, _) = func(&exe, "ep_hot");
    let (hot2, _) = func(&exe, "ep_hot2");
    let (cp, cp_len) = func(&exe, "cp_func");
    let (cold, _) = func(&exe, "cp_func.cold");
    // `ep_owner` has `pop %rbx; ret` after `push; mov; test; js; call;
    // add`, `ep_owner2` ends in it; `ep_hot` and `ep_hot2` jump (`e9`) to
    // the `pop` after `push; lea; cmp; je`; `cp_func.cold` jumps back
    // (`e9`) to the `inc` before `cp_func`'s first `ret`.
    let e9_target = |at: u64| {
        let j = file_bytes(&exe, at, 5);
        assert_eq!(j[0], 0xe9, "{at:#x}");
        (at + 5).wrapping_add(i32::from_le_bytes(j[1..].try_into().unwrap()) as i64 as u64)
    };
    let (pop, ret) = (
        owner + 1 + 3 + 3 + 2 + 5 + 3,
        owner + 1 + 3 + 3 + 2 + 5 + 3 + 1,
    );
    assert_eq!(file_bytes(&exe, pop, 2), [0x5b, 0xc3]);
    let (pop2, ret2) = (owner2 + owner2_len - 2, owner2 + owner2_len - 1);
    assert_eq!(file_bytes(&exe, pop2, 2), [0x5b, 0xc3]);
    let (jump, jump2) = (hot + 1 + 4 + 4 + 2, hot2 + 1 + 4 + 4 + 2);
    assert_eq!(e9_target(jump), pop);
    assert_eq!(e9_target(jump2), pop2);
    let back = cold + 3 + 4;
    let inc = cp + cp_len - 5;
    assert_eq!(file_bytes(&exe, inc, 5), [0x48, 0xff, 0xc0, 0xc3, 0xc3]);
    assert_eq!(e9_target(back), inc);
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
            ": {ret2:#x}: its epilogue from {pop2:#x} also runs in a return stub at "
        )) && err.contains(&format!(
            ", the jump at ({jump2:#x}) sent there (every branch there: the `ret` takes a \
             window after all)\n"
        )),
        "{err}"
    );
    assert!(
        !err.contains(&format!("{ret2:#x} in ep_owner2: no jump")),
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
        ("cc_func", 1000),
        ("cp_func", 1000),
        ("ep_hot", 1000),
        ("ep_hot2", 1000),
        ("ep_owner", 3),
        ("ep_owner2", 3),
        ("ep_twice", 6),
        ("filler_a", 1),
        ("filler_b", 1),
        ("filler_c", 1),
        ("filler_d", 1),
        ("filler_e", 1),
        ("filler_f", 1),
        ("filler_g", 1),
        ("jb_owner", 1000),
        ("jt_tail", 1000),
        ("main", 1),
        ("tp_func", 800),
    ]);
    assert_eq!(got, want, "{err}");

    // The return values, through the stub and the copy.
    let (out, err, got) = inproc_tree(&exe, "far_epilogues.hot", "ep_hot", "6");
    assert_eq!(out, sum(6), "{err}");
    let want: String = (0..6)
        .map(|i| format!("==> ep_hot()\n<== ep_hot() [rax = {:#x}]\n", i + 1))
        .collect();
    assert_eq!(got, want, "{err}");
    let (out, err, got) = inproc_tree(&exe, "far_epilogues.hot2", "ep_hot2", "6");
    assert_eq!(out, sum(6), "{err}");
    let want: String = (0..6)
        .map(|i| format!("==> ep_hot2()\n<== ep_hot2() [rax = {:#x}]\n", i + 2))
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
    let (out, err, got) = inproc_tree(&exe, "far_epilogues.cc", "cc_func", "10");
    assert_eq!(out, sum(10), "{err}");
    let (cc, _) = func(&exe, "cc_func");
    assert!(
        err.contains(&format!(
            ": {cc:#x} cc_func: its `ret`s ({:#x}) run in a relocated copy",
            cc + 1 + 2 + 3 + 3 + 2 + 5 + 3 + 2 + 1
        )) && err.contains(&format!(
            "; 1 jump back into the copy at ({:#x}), where its calls return or branches from \
             outside it land\n",
            cc + 1 + 2 + 3 + 3 + 2 + 5
        )),
        "{err}"
    );
    let want: String = (0..10)
        .map(|i: i64| match i % 5 - 2 {
            0 => "==> cc_func()\n<== cc_func() [rax = 0x0]\n".to_string(),
            n => format!(
                "==> cc_func()\n   ==> tp_func()\n   <== tp_func() [rax = {:#x}]\n<== cc_func() \
                 [rax = {:#x}]\n",
                n.abs(),
                cc_func(n)
            ),
        })
        .collect();
    assert_eq!(got, want, "{err}");
    let (jbo, _) = func(&exe, "jb_owner");
    let (jt, _) = func(&exe, "jt_tail");
    assert!(jt < jbo);
    assert_eq!(e9_target(jt + 4), jbo);
    assert!(
        err.contains(&format!(
            ": {jbo:#x} jb_owner: its `ret`s ({:#x}) run in a relocated copy of the whole \
             function at ",
            jbo + 11
        )) && err.contains(&format!(
            "(the `ret` at {:#x} in jb_owner: no jump can go there",
            jbo + 11
        )),
        "{err}"
    );
    // Every function is patched under `-F` too: `ep_owner`'s 3 calls stop.
    assert!(
        err.contains(&format!(
            ": 3 ptrace stops at trap sites; the busiest: ep_owner at {ret:#x} (3)\n"
        )),
        "{err}"
    );
}
