//! Jump tables the in-process transport's reader (agent-loader's
//! `jumptable`) once missed (`tests/progs/switch_shapes.c`, GCC -O2,
//! PIE): a bound checked on a 16-bit register (`classify`), an index
//! masked with no check (`masked`), a table's base loaded once before the
//! loop that dispatches (`run`). With the table unread, every `ret` of
//! `classify` and `masked` was a trap (a ptrace stop per call) and `run`'s
//! only a near jump; read, each takes a 5-byte jump: no site is refused
//! for a table, no ptrace stop, the counts and return values exact, the
//! output the untraced one.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, progs};
use crate::support::target::{counts, file_bytes, func, inproc_report, inproc_tree};

pub const CASES: &[Case] = &[case!(
    switches_gcc_bounds_in_other_shapes_take_jumps_not_traps,
    Need::Ptrace
)];

/// `switch_shapes.c`, PIE (GCC's tables of offsets from a `lea`).
fn switch_shapes() -> PathBuf {
    gcc(
        "switch_shapes",
        &progs().join("switch_shapes.c"),
        &["-O2", "-fcf-protection=none", "-fpie", "-pie"],
    )
}

/// Where `needle` is in the code of function `name`, as an offset from
/// its start.
fn offset_in(exe: &Path, name: &str, needle: &[u8]) -> usize {
    let (at, len) = func(exe, name);
    let code = file_bytes(exe, at, len as usize);
    code.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{name}: no {needle:02x?} in {code:02x?}"))
}

/// `classify(&{type = i % 10}, i)` as the program computes it (32 bits).
fn classify(i: u32) -> u32 {
    match i % 10 {
        0 => i + 11,
        1 => i * 3,
        2 => i.wrapping_sub(7),
        3 => 42,
        4 => i ^ 5,
        5 => i << 2,
        6 => 2 * i + 1,
        7 => 1000,
        8 => i.wrapping_sub(100),
        _ => u32::MAX,
    }
}

/// `masked(i * 13, i)` as the program computes it (32 bits).
fn masked(i: u32) -> u32 {
    match ((i * 13) >> 3) & 7 {
        0 => i + 1,
        1 => i * 5,
        2 => i.wrapping_sub(9),
        3 => 77,
        4 => i ^ 0x33,
        5 => i << 3,
        6 => 3 * i + 2,
        _ => i.wrapping_sub(1),
    }
}

/// The shapes first (what the test is about); then, over 1,000 rounds,
/// the counts and no stop; over 10, the return values of `classify` and
/// `masked` through their `ret`s' jumps.
fn switches_gcc_bounds_in_other_shapes_take_jumps_not_traps() {
    let exe = switch_shapes();
    // cmp $8, %dx; ja
    offset_in(&exe, "classify", &[0x66, 0x83, 0xfa, 0x08, 0x77]);
    // and $7, %edi; movslq (%rdx,%rdi,4), %rax; add %rdx, %rax; jmp *%rax
    offset_in(
        &exe,
        "masked",
        &[
            0x83, 0xe7, 0x07, 0x48, 0x63, 0x04, 0xba, 0x48, 0x01, 0xd0, 0xff, 0xe0,
        ],
    );
    // lea TABLE(%rip), %r8 ... movslq (%r8,%rax,4), %rax; add %r8, %rax;
    // jmp *%rax, more than 16 instructions (64 bytes) after it.
    let lea = offset_in(&exe, "run", &[0x4c, 0x8d, 0x05]);
    let read = offset_in(
        &exe,
        "run",
        &[0x49, 0x63, 0x04, 0x80, 0x4c, 0x01, 0xc0, 0xff, 0xe0],
    );
    assert!(read > lea + 64, "{lea:#x} {read:#x}");

    let plain = Command::new(&exe).arg("1000").output().unwrap();
    let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
    let (out, err, got) = inproc_report(&exe, "switch_shapes", "1000");
    assert_eq!(out, plain, "{err}");
    assert!(!err.contains("a jump table may land"), "{err}");
    assert!(!err.contains("no jump can go"), "{err}");
    assert!(!err.contains("ptrace stops at trap sites"), "{err}");
    let want = counts(&[
        ("classify", 1000),
        ("main", 1),
        ("masked", 1000),
        ("run", 1000),
    ]);
    assert_eq!(got, want, "{err}");

    for (name, values) in [
        ("classify", (0..10).map(classify).collect::<Vec<_>>()),
        ("masked", (0..10).map(masked).collect()),
    ] {
        let (_, err, got) = inproc_tree(&exe, &format!("switch_shapes.{name}"), name, "10");
        let want: String = values
            .iter()
            .map(|v| format!("==> {name}()\n<== {name}() [rax = {v:#x}]\n"))
            .collect();
        assert_eq!(got, want, "{err}");
    }
}
