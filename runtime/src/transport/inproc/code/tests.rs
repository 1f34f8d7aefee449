//! The module files' code: unit tests.

use super::sweep::{may_jump_indirectly, swept};
use super::*;

/// A system binary, the C library and python3.11: small, hand-written
/// assembly among compiled code, and 10,000 functions.
const MODULES: [&str; 3] = [
    "/usr/bin/ls",
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
    "/usr/bin/python3.11",
];

/// The largest section swept in two parts on two threads finds what
/// one linear sweep of each section finds: every target, as many
/// branches to each, every call and indirect jump (a system binary's
/// and the C library's code).
#[test]
fn a_sweep_in_two_parts_is_the_sweep_whole() {
    for path in ["/usr/bin/ls", "/usr/lib/x86_64-linux-gnu/libc.so.6"] {
        let elf = wprobe_elf::info::ElfInfo::open(Path::new(path)).expect("open");
        let parsed = Elf::parse(elf.file_bytes()).expect("parse");
        let sections = exec_sections(elf.file_bytes(), &parsed);
        let mut whole = BranchTargets::default();
        let mut noted = Noted::default();
        for &(addr, code) in &sections {
            whole.sweep_noting(code, addr, &[], &mut noted);
        }
        whole.settle();
        let mut funcs = elf.named_functions();
        funcs.extend(elf.unnamed_functions());
        funcs.sort_unstable();
        let (parts, mut in_parts) = swept(&sections, &funcs);
        assert!(whole.0.len() > 1000, "{path}: {} targets", whole.0.len());
        assert_eq!(parts.0, whole.0, "{path}");
        assert_eq!(parts.2, whole.2, "{path}");
        // The calls too (the map the continuation sites ask), and the
        // indirect jumps.
        noted.calls.sort_unstable();
        in_parts.calls.sort_unstable();
        assert!(
            noted.calls.len() > 1000,
            "{path}: {} calls",
            noted.calls.len()
        );
        assert_eq!(in_parts.calls, noted.calls, "{path}");
        assert_eq!(in_parts.indirect, noted.indirect, "{path}");
        // The `ret`s, direct jumps and invalid bytes (`retsites::Flow`).
        assert!(noted.rets.len() > 300, "{path}: {} rets", noted.rets.len());
        assert_eq!(in_parts.rets, noted.rets, "{path}");
        assert_eq!(in_parts.jumps, noted.jumps, "{path}");
        assert_eq!(in_parts.invalid, noted.invalid, "{path}");
    }
}

/// A function's returns read from the sweep's notes (`retsites::Flow`)
/// are those its own decoding finds, for every function of a system
/// binary, the C library and python3.11 (named, unnamed and PLT
/// entries, as the sweep has them); and the notes serve for most.
#[test]
fn returns_from_the_sweep_are_the_functions_decodings() {
    for path in MODULES {
        let elf = wprobe_elf::info::ElfInfo::open(Path::new(path)).expect("open");
        let parsed = Elf::parse(elf.file_bytes()).expect("parse");
        let (sweep, _, flow) = ModuleCode::sweep_with_calls(&elf, &parsed);
        let (mut served, mut declined) = (0, 0);
        for &(start, end) in &sweep.funcs {
            match crate::transport::retsites::flow_agrees(&elf, &flow, start, end) {
                Some(same) => {
                    assert!(same, "{path}: {start:#x}..{end:#x}");
                    served += 1;
                }
                None => declined += 1,
            }
        }
        assert!(
            served > 10 * declined && served > 300,
            "{path}: {served} served, {declined} declined"
        );
    }
}

/// A function the sweep rules out of having an indirect `jmp` has
/// none when decoded from its start (every function of a system
/// binary, the C library and python3.11), and most functions are
/// ruled out.
#[test]
fn a_function_without_indirect_jumps_is_told_by_the_sweep() {
    use iced_x86::{Decoder, DecoderOptions, FlowControl};
    for path in MODULES {
        let elf = wprobe_elf::info::ElfInfo::open(Path::new(path)).expect("open");
        let parsed = Elf::parse(elf.file_bytes()).expect("parse");
        let mut funcs = elf.named_functions();
        funcs.extend(elf.unnamed_functions());
        funcs.sort_unstable();
        funcs.dedup();
        let (_, noted) = swept(&exec_sections(elf.file_bytes(), &parsed), &funcs);
        let mut ruled_out = 0;
        for &(s, e) in &funcs {
            let code = elf.bytes_at(s, (e - s) as usize);
            if may_jump_indirectly(&noted, (s, e), code) {
                continue;
            }
            ruled_out += 1;
            let Some(code) = code else { continue };
            let jmp = Decoder::with_ip(64, code, s, DecoderOptions::NONE)
                .into_iter()
                .find(|i| i.flow_control() == FlowControl::IndirectBranch);
            assert_eq!(jmp.map(|i| i.ip()), None, "{path}: function {s:#x}");
        }
        assert!(
            ruled_out * 4 > funcs.len() * 3,
            "{path}: {ruled_out} of {}",
            funcs.len()
        );
    }
}

/// A function and the padding after it found with one search are those
/// of a scan of every function starting at or before the address, the
/// nearest first, and of a search of the padding (every function's
/// start, a byte inside it, its last byte and its end, in a system
/// binary and the C library, nested symbols included).
#[test]
fn function_and_padding_are_the_two_searches() {
    for path in ["/usr/bin/ls", "/usr/lib/x86_64-linux-gnu/libc.so.6"] {
        let m = ModuleCode::read(Path::new(path)).expect("read");
        let bias = 0x7f00_0000_0000;
        let mut checked = 0;
        for &(s, e) in &m.funcs {
            for link in [s, s + (e - s) / 2, e - 1, e] {
                let one = m.function_and_padding(link, bias);
                let i = m.funcs.partition_point(|&(s, _)| s <= link);
                let scan = m.funcs[..i]
                    .iter()
                    .rev()
                    .find(|&&(s, e)| s <= link && link < e);
                let two = scan.and_then(|&(s, e)| {
                    let f = Function {
                        start: s.wrapping_add(bias),
                        code: m.bytes_at(s, (e - s) as usize)?,
                        bias,
                    };
                    Some((f, m.padding_after(e)))
                });
                match (one, two) {
                    (Some((f1, a1)), Some((f2, a2))) => {
                        assert_eq!((f1.start, f1.code, a1), (f2.start, f2.code, a2), "{path}");
                        checked += 1;
                    }
                    (None, None) => {}
                    (a, b) => panic!("{path} {link:#x}: {:?} / {:?}", a.is_some(), b.is_some()),
                }
            }
        }
        assert!(checked > 1000, "{path}: {checked}");
    }
}
