//! Returns of the in-process transport that took a trap until the
//! patcher read more of the code (`tests/progs/goto_funcs.c`, built PIE
//! and not): `run`, an interpreter loop whose indirect jumps go through a
//! table of its own labels (GCC's labels as values, CPython's eval loop
//! shape), takes windows past its entry because the labels are read from
//! the data; `pad_ret`, whose `ret` has room for a near jump only and no
//! padding between functions in reach, takes a near jump to a cave in
//! the dead padding after a `jmp` inside it. Neither traps: the call
//! trees and counts are exact, and no ptrace stop happens.

use std::path::PathBuf;

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, progs};
use crate::support::target::{counts, inproc_report, inproc_tree};

pub const CASES: &[Case] = &[case!(
    computed_gotos_and_inner_padding_take_jumps_not_traps,
    Need::Ptrace
)];

/// `goto_funcs.c` built with `flags` as `name`.
fn goto_funcs(name: &str, flags: &[&str]) -> PathBuf {
    let mut all = vec!["-O2", "-fcf-protection=none"];
    all.extend_from_slice(flags);
    gcc(name, &progs().join("goto_funcs.c"), &all)
}

/// The near-jump lines of wprobe's standard error: (function, cave minus
/// site).
fn near_jumps(err: &str) -> Vec<(String, i64)> {
    let hex = |s: &str| i64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    err.lines()
        .filter(|l| l.contains(": a near jump (`jmp rel8`) to a `jmp` to its stub"))
        .map(|l| {
            let (_, rest) = l.split_once(": 0x").unwrap();
            let (site, rest) = rest.split_once(" in ").unwrap();
            let (func, rest) = rest.split_once(':').unwrap();
            let (_, rest) = rest.split_once("in the padding at ").unwrap();
            let cave = rest.split_whitespace().next().unwrap();
            (func.to_string(), hex(cave) - hex(site))
        })
        .collect()
}

/// Under `--transport inproc`, both builds: every site a jump (`pad_ret`'s
/// `ret` a near jump to the padding 7 bytes after its window, inside
/// it), no trap and no ptrace stop; the tree of 3 calls of `outer` exact
/// with return values; 1,000 calls counted exactly; the output the
/// untraced one.
fn computed_gotos_and_inner_padding_take_jumps_not_traps() {
    for (name, flags) in [
        ("goto_funcs", &["-fno-pie", "-no-pie"][..]),
        ("goto_funcs_pie", &["-fpie", "-pie"][..]),
    ] {
        let exe = goto_funcs(name, flags);
        let (out, err, got) = inproc_tree(&exe, name, "outer", "3");
        assert_eq!(out, "10\n", "{name}: {err}");
        assert_eq!(
            near_jumps(&err),
            [("pad_ret".to_string(), 7)],
            "{name}: {err}"
        );
        assert!(!err.contains("no jump can go"), "{name}: {err}");
        assert!(!err.contains("ptrace stops at trap sites"), "{name}: {err}");
        // outer(i) = run(progs[i % 3], i) + pad_ret(i % 4 - 1)
        let rows = [(2u64, 0xffff_ffffu64, 1u64), (5, 0, 5), (2, 2, 4)];
        let mut want = String::new();
        for (run, pad, outer) in rows {
            want += &format!(
                "==> outer()\n   ==> run()\n   <== run() [rax = {run:#x}]\n   ==> pad_ret()\n   \
                 <== pad_ret() [rax = {pad:#x}]\n<== outer() [rax = {outer:#x}]\n"
            );
        }
        assert_eq!(got, want, "{name}: {err}");
        // Exact counts over 1,000 calls.
        let (out, err, calls) = inproc_report(&exe, name, "1000");
        assert_eq!(out, "1166835\n", "{name}: {err}");
        assert!(!err.contains("ptrace stops at trap sites"), "{name}: {err}");
        let want = counts(&[
            ("main", 1),
            ("outer", 1000),
            ("pad_ret", 1000),
            ("run", 1000),
        ]);
        assert_eq!(calls, want, "{name}: {err}");
    }
}
