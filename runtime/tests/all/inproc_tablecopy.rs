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

/// `table_copy.c`: non-PIE (a table of absolute addresses), or PIE with
/// `-DREL` (a table of offsets from itself).
fn table_copy(pie: bool) -> PathBuf {
    let (name, flags): (&str, &[&str]) = if pie {
        ("table_copy_pie", &["-fPIE", "-pie", "-DREL"])
    } else {
        ("table_copy", &["-fno-pie", "-no-pie"])
    };
    gcc(
        name,
        &progs().join("table_copy.c"),
        &[&["-O2", "-fcf-protection=none"][..], flags].concat(),
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
/// stop; 1,000 calls counted, the return values of 14 exact. Non-PIE
/// (absolute entries) and PIE (offsets). The shape is checked first (what
/// the test is about).
fn a_switch_whose_ret_takes_no_window_runs_as_a_copy_with_its_table() {
    for pie in [false, true] {
        copied_with_its_table(pie);
    }
}

/// The table's address and its entries (link-time), from the dispatch
/// of `sw_func` at `sw`; the dispatch's length.
fn dispatch(exe: &std::path::Path, sw: u64, pie: bool) -> (u64, Vec<u64>, u64) {
    let at = sw + 4 + 2;
    if pie {
        // `lea TABLE(%rip),%rdx; movslq (%rdx,%rdi,4),%rax; add %rdx,%rax;
        // jmp *%rax`.
        let d = file_bytes(exe, at, 16);
        assert_eq!(d[..3], [0x48, 0x8d, 0x15]);
        assert_eq!(
            d[7..],
            [0x48, 0x63, 0x04, 0xba, 0x48, 0x01, 0xd0, 0xff, 0xe0]
        );
        let rel = i32::from_le_bytes(d[3..7].try_into().unwrap());
        let table = (at + 7).wrapping_add(rel as i64 as u64);
        let entries = file_bytes(exe, table, 20)
            .chunks_exact(4)
            .map(|c| table.wrapping_add(i32::from_le_bytes(c.try_into().unwrap()) as i64 as u64))
            .collect();
        (table, entries, 16)
    } else {
        // `jmp *TABLE(,%rdi,8)`.
        let d = file_bytes(exe, at, 7);
        assert_eq!(d[..3], [0xff, 0x24, 0xfd]);
        let table = u64::from(u32::from_le_bytes(d[3..].try_into().unwrap()));
        let entries = file_bytes(exe, table, 40)
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        (table, entries, 7)
    }
}

/// [`a_switch_whose_ret_takes_no_window_runs_as_a_copy_with_its_table`]
/// for one build.
fn copied_with_its_table(pie: bool) {
    let exe = table_copy(pie);
    let name = if pie { "table_copy_pie" } else { "table_copy" };
    let (sw, sw_len) = func(&exe, "sw_func");
    let (table, entries, n) = dispatch(&exe, sw, pie);
    // After the dispatch: `mov $-1,%rax; ret` (7 + 1), case 1 `lea; jmp
    // .out` (5 + 2, leaves), case 0 `xor %eax,%eax; ret`, case 2 `lea;
    // ret`, case 3 (4 + 3 + 2 + 2), case 4 (3 + 4), `.out: ret`.
    let d = sw + 6 + n;
    assert_eq!(sw_len, 6 + n + 42);
    let (xor, ret) = (d + 15, d + 17);
    assert_eq!(entries, [xor, d + 8, ret + 1, d + 23, d + 34]);
    assert_eq!(file_bytes(&exe, d + 13, 5), [0xeb, 0x1a, 0x31, 0xc0, 0xc3]);
    let plain = Command::new(&exe).arg("1000").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), sum(1000));

    let (out, err, got) = inproc_report(&exe, name, "1000");
    assert_eq!(out, sum(1000), "{err}");
    let copied: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("run in a relocated copy of the whole function"))
        .collect();
    assert_eq!(copied.len(), 1, "{err}");
    // The load bias, from the note's first address (0 but for PIE).
    let at = copied[0]
        .split(" sw_func: its")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("{}", copied[0]));
    let bias = at - sw;
    assert_eq!(bias == 0, !pie, "{}", copied[0]);
    let ret_at = ret + bias;
    assert!(
        copied[0].contains(&format!(
            ": {:#x} sw_func: its `ret`s ({:#x}, {ret_at:#x}, {:#x}, {:#x}) run in a relocated \
             copy",
            sw + bias,
            d + 7 + bias,
            d + 22 + bias,
            d + 41 + bias
        )) && copied[0].contains(&format!(" (the `ret` at {ret_at:#x} in sw_func: no jump"))
            && copied[0].ends_with(&format!(
                "; its jump table at ({:#x}) copied with it",
                table + bias
            )),
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
    let (out, err, got) = inproc_tree(&exe, &format!("{name}.sw"), "sw_func", "14");
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
