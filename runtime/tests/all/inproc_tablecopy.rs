//! A function with a jump table (a dense `switch`, absolute addresses:
//! non-PIE) one of whose `ret`s no jump can cover, under the in-process
//! transport (`tests/progs/table_copy.c`): it runs as a relocated copy of
//! the whole function carrying a copy of its table, whose entries lead to
//! the copy's cases. No trap, no ptrace stop; every call and return value
//! exact, the program's output unchanged.

use std::path::PathBuf;
use std::process::Command;

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, progs};
use crate::support::target::{counts, file_bytes, func, inproc_report, inproc_tree};

pub const CASES: &[Case] = &[case!(
    a_switch_whose_ret_takes_no_window_runs_as_a_copy_with_its_table,
    Need::Ptrace
)];

/// `table_copy.c`, non-PIE (link-time addresses are run-time ones).
fn table_copy() -> PathBuf {
    gcc(
        "table_copy",
        &progs().join("table_copy.c"),
        &["-O2", "-fcf-protection=none", "-fno-pie", "-no-pie"],
    )
}

/// `sw_func(n)` as the program computes it.
fn sw_func(n: i64) -> i64 {
    match n {
        0 => 0,
        1 => 3,
        2 => 6,
        3 => 12,
        4 => 32,
        _ => -1,
    }
}

/// The program's output for `n`.
fn sum(n: i64) -> String {
    let fillers = 26 + 2 * 26;
    format!(
        "{}\n",
        fillers + (0..n).map(|i| sw_func(i % 7)).sum::<i64>()
    )
}

/// `sw_func`'s `ret` after case 0's `xor` has no window (the `xor` a
/// table entry and a branch target, a `jmp` before it, case 2's entry
/// right after it) and no padding is near: under inproc it runs as a copy
/// with its table copied (said under `WPROBE_DEBUG`), no trap, no ptrace
/// stop; 1,000 calls counted, the return values of 14 exact. The shape is
/// checked first (what the test is about).
fn a_switch_whose_ret_takes_no_window_runs_as_a_copy_with_its_table() {
    let exe = table_copy();
    let (sw, sw_len) = func(&exe, "sw_func");
    assert_eq!(sw_len, 55);
    // `cmp $4,%rdi; ja; jmp *TABLE(,%rdi,8)`.
    let jmp = file_bytes(&exe, sw + 4 + 2, 7);
    assert_eq!(jmp[..3], [0xff, 0x24, 0xfd]);
    let table = u64::from(u32::from_le_bytes(jmp[3..].try_into().unwrap()));
    let entries: Vec<u64> = file_bytes(&exe, table, 40)
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let (xor, ret) = (sw + 28, sw + 30);
    assert_eq!(entries, [xor, sw + 21, ret + 1, sw + 36, sw + 47]);
    // `lea; jmp .out` (leaves), `xor %eax,%eax; ret`.
    assert_eq!(file_bytes(&exe, sw + 26, 5), [0xeb, 0x1a, 0x31, 0xc0, 0xc3]);
    let plain = Command::new(&exe).arg("1000").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), sum(1000));

    let (out, err, got) = inproc_report(&exe, "table_copy", "1000");
    assert_eq!(out, sum(1000), "{err}");
    let copied: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("run in a relocated copy of the whole function"))
        .collect();
    assert_eq!(copied.len(), 1, "{err}");
    assert!(
        copied[0].contains(&format!(
            ": {sw:#x} sw_func: its `ret`s ({:#x}, {ret:#x}, {:#x}, {:#x}) run in a relocated \
             copy",
            sw + 20,
            sw + 35,
            sw + 54
        )) && copied[0].contains(&format!(" (the `ret` at {ret:#x} in sw_func: no jump"))
            && copied[0].ends_with(&format!("; its jump table at ({table:#x}) copied with it")),
        "{}",
        copied[0]
    );
    assert!(!err.contains("ptrace stops"), "{err}");
    assert!(!err.contains("a trap instead"), "{err}");
    let want = counts(&[
        ("filler_a", 1),
        ("filler_b", 1),
        ("main", 1),
        ("sw_func", 1000),
    ]);
    assert_eq!(got, want, "{err}");

    // The return values, each case through the copy's table.
    let (out, err, got) = inproc_tree(&exe, "table_copy.sw", "sw_func", "14");
    assert_eq!(out, sum(14), "{err}");
    let want: String = (0..14)
        .map(|i| {
            format!(
                "==> sw_func()\n<== sw_func() [rax = {:#x}]\n",
                sw_func(i % 7)
            )
        })
        .collect();
    assert_eq!(got, want, "{err}");
}
