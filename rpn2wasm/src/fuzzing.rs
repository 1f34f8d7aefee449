//! Fuzzing oracles, as library code: the
//! `fuzz/` targets and the seeded smoke tests run under `cargo test` are thin
//! callers of these functions (the wasmtime `crates/fuzzing` split).
//!
//! An oracle takes arbitrary bytes and panics only when it finds a bug: a
//! panic inside the front end, the code generator, the interpreter or a
//! `hostabi` decoder, or a broken property (compilation that is not
//! deterministic, a manifest that does not survive its own encoding, a
//! decode error pointing outside its input). Validation of compiled modules
//! needs `wasmparser`, which this crate does not depend on: the callers
//! validate the modules [`parse_and_compile`] returns. Nothing here touches
//! a process, and nothing reads files except what a fuzz input's
//! `#include` names (regular files only, as in any build).

use crate::interp::{self, Limits, ProgramState};
use crate::model::{ModelEnv, probe_target as t};
use crate::symbols::MapSymbols;
use crate::{Diagnostics, Options, SourceMap, ast::Program};
use hostabi::manifest::Manifest;
use hostabi::record::{self, RecordHeader};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// Path given to the front end for fuzz inputs (messages and relative includes).
pub const FUZZ_PATH: &str = "fuzz-input.rpn";

/// Instruction budget of the interpreter run made on each compiled fuzz
/// program: enough to get through straight-line code, loops of a few
/// thousand iterations and exception dispatch, small enough to keep one
/// input well under the 1 s per-input limit of C7.
pub const FUZZ_INSN_BUDGET: u64 = 20_000;

/// Probes of a compiled fuzz program that the interpreter runs (at most).
pub const FUZZ_PROBES_RUN: usize = 4;

/// The symbols fuzz inputs can use: those of the reference build of the
/// examples' target program (`target_fn`, `bump`, `main`, `greeting`,
/// `origin`, `counter`).
pub fn symbols() -> MapSymbols {
    MapSymbols::new([
        ("target_fn", t::TARGET_FN),
        ("bump", t::BUMP),
        ("main", t::MAIN),
        ("greeting", t::GREETING),
        ("origin", t::ORIGIN),
        ("counter", t::COUNTER),
    ])
}

/// Build options of the fuzzers: [`symbols`], no definitions, the given
/// `-I` directories.
pub fn options(include_dirs: &[PathBuf]) -> Options {
    Options {
        defines: Vec::new(),
        include_dirs: include_dirs.to_vec(),
        symbols: Some(Box::new(symbols())),
        module_dirs: Vec::new(),
    }
}

/// Oracle C7/C8: runs the front end on `bytes` as they are (invalid UTF-8
/// included) and, when they are not UTF-8, also on their lossy UTF-8
/// reading through [`crate::frontend_str`]. For every input that builds,
/// compiles it twice (the bytes must be identical), checks that the
/// manifest decodes back to itself, and runs the interpreter on its first
/// probes against a [`ModelEnv`] hit. Diagnostics of inputs that do not
/// build are rendered (the renderer must not panic either).
///
/// Returns the modules compiled (zero, one or two); the caller validates
/// them with `wasmparser`.
pub fn parse_and_compile(bytes: &[u8]) -> Vec<Vec<u8>> {
    parse_and_compile_with(bytes, &[])
}

/// [`parse_and_compile`] with `-I` directories (so that inputs derived from
/// the example files can find `common.inc`).
pub fn parse_and_compile_with(bytes: &[u8], include_dirs: &[PathBuf]) -> Vec<Vec<u8>> {
    let opts = options(include_dirs);
    let path = Path::new(FUZZ_PATH);
    let mut out = Vec::new();
    let raw = crate::parse::parse_text(path, bytes.to_vec(), &opts);
    out.extend(compile_checked(raw));
    if let Cow::Owned(text) = String::from_utf8_lossy(bytes) {
        out.extend(compile_checked(crate::frontend_str(path, &text, &opts)));
    }
    out
}

fn compile_checked(r: Result<(Program, SourceMap), (Diagnostics, SourceMap)>) -> Option<Vec<u8>> {
    let program = match r {
        Ok((program, _)) => program,
        Err((diags, map)) => {
            assert!(
                !diags.is_empty(),
                "the front end failed without a diagnostic"
            );
            let _ = diags.render(&map);
            return None;
        }
    };
    let first = crate::compile_program(program.clone());
    let second = crate::compile_program(program);
    assert!(
        first.wasm == second.wasm,
        "compiling the same program twice gave different bytes (C8)"
    );
    let text = first.manifest.encode();
    match Manifest::decode(text.as_bytes()) {
        Ok(m) => assert!(
            m == first.manifest,
            "manifest does not decode to itself:\n{text}"
        ),
        Err(e) => panic!("compiled manifest does not decode: {e}\n{text}"),
    }
    run_interpreter(&first.program);
    Some(first.wasm)
}

/// Runs the first [`FUZZ_PROBES_RUN`] probes once each in the interpreter
/// (which must never panic, whatever the program).
fn run_interpreter(program: &Program) {
    let limits = Limits {
        insn_budget: FUZZ_INSN_BUDGET,
        capture_state: false,
    };
    let mut state = ProgramState::new(program);
    let mut env = ModelEnv::probe_target_hit(2);
    env.with_gvars(usize::from(program.header.gvars));
    for probe in 0..program.probes.len().min(FUZZ_PROBES_RUN) {
        // A return probe's hit is a return, with the entry state.
        if program.probes[probe].r#return {
            let gvars = std::mem::take(&mut env.gvars);
            env = ModelEnv::probe_target_return(2);
            env.gvars = gvars;
        }
        let r = interp::run(program, probe, &mut state, &mut env, &limits);
        assert!(
            r.insns <= FUZZ_INSN_BUDGET,
            "interpreter overran its budget"
        );
    }
}

/// Oracle S10: every `hostabi` decoder on arbitrary bytes. None may panic;
/// every error offset must lie within the decoded buffer; a decoded record
/// header re-encodes to the same bytes; a decoded manifest survives
/// encode + decode. The first byte of `bytes` picks how many u32 item
/// descriptors are taken from the front of the rest for `decode_log`.
pub fn decode_records(bytes: &[u8]) {
    // Record header.
    match RecordHeader::decode(bytes) {
        Ok((h, len)) => {
            assert!(len <= bytes.len(), "header length {len} beyond the input");
            let mut buf = vec![0u8; len];
            assert_eq!(
                h.encode(&mut buf),
                Some(len),
                "decoded header does not re-encode"
            );
            assert_eq!(
                buf.as_slice(),
                &bytes[..len],
                "decoded header re-encodes differently"
            );
        }
        Err(e) => check_offset(e, bytes.len(), "RecordHeader::decode"),
    }

    // Log data with item descriptors.
    let (n_items, rest) = match bytes.split_first() {
        Some((n, rest)) => (usize::from(*n), rest),
        None => (0, bytes),
    };
    let cut = (n_items * 4).min(rest.len() & !3);
    let items: Vec<u32> = rest[..cut]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    decode_log_checked(&rest[cut..], &items);
    // And the whole input as data, with no descriptors and with descriptors
    // made from itself.
    decode_log_checked(bytes, &[]);
    decode_log_checked(rest, &items);

    // Stack-trace area.
    let mut records = 0usize;
    let r = record::decode_stacktrace(bytes, |st| {
        records += 1;
        for f in st.frames() {
            match f {
                Ok(f) => {
                    for area in [f.slots, f.lvars, f.gvars] {
                        assert!(area.len() % 8 == 0, "frame area not made of words");
                    }
                }
                Err(e) => check_offset(e, bytes.len(), "StackTrace::frames"),
            }
        }
    });
    match r {
        Ok(h) => assert!(
            records == usize::from(h.count),
            "record count disagrees with the header"
        ),
        Err(e) => check_offset(e, bytes.len(), "decode_stacktrace"),
    }

    // Manifest.
    match Manifest::decode(bytes) {
        Ok(m) => {
            let text = m.encode();
            match Manifest::decode(text.as_bytes()) {
                Ok(again) => assert!(
                    again == m,
                    "manifest does not survive encode + decode:\n{text}"
                ),
                Err(e) => panic!("re-encoded manifest does not decode: {e}\n{text}"),
            }
        }
        Err(e) => check_offset(e, bytes.len(), "Manifest::decode"),
    }
}

fn decode_log_checked(data: &[u8], items: &[u32]) {
    // Every item consumes at least one byte, so more than `data.len()`
    // items means the iterator does not advance (a hang).
    let mut n = 0usize;
    for item in record::decode_log(data, items) {
        n += 1;
        assert!(n <= data.len() + 1, "decode_log does not advance");
        match item {
            Ok(_) => {}
            // Descriptor errors point into the descriptor buffer.
            Err(e) if e.kind == record::DecodeErrorKind::BadItemDescriptor => {
                check_offset(e, items.len() * 4, "decode_log descriptors")
            }
            Err(e) => check_offset(e, data.len(), "decode_log"),
        }
    }
}

fn check_offset(e: record::DecodeError, len: usize, what: &str) {
    assert!(
        e.offset <= len,
        "{what}: error offset {} beyond the input ({len} bytes): {e}",
        e.offset
    );
    // Rendering must not panic either.
    let _ = e.to_string();
}
