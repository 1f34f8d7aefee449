//! Every example program runs in both engines — the reference interpreter
//! and the compiled module under wasmtime — on the hits the reference build
//! of `probe_target` makes, and both produce identical records (data, item
//! descriptors, major/minor), outcomes, environment changes and variables.
//! (The interpreter's own tests check those records against the examples'
//! headers byte for byte; here a few headline figures are checked again.)

use hostabi::Outcome;
use rpn2wasm::ast::Program;
use rpn2wasm::interp::{Record, RecordKind};
use wprobe_tests::{Pair, build_file, examples_dir};

/// Runs the whole target scenario in both engines.
fn scenario(program: Program) -> (Vec<Record>, Vec<Outcome>) {
    let mut pair = Pair::new(program.clone(), None);
    wprobe_tests::scenario(&program, |i, env, what| pair.both(i, env, &what))
}

fn run(file: &str, defines: &[(&str, &str)]) -> (Vec<Record>, Vec<Outcome>) {
    scenario(build_file(&examples_dir().join(file), defines))
}

fn log_sizes(records: &[Record]) -> Vec<(u16, u16, usize)> {
    records
        .iter()
        .filter_map(|r| match r.kind {
            RecordKind::Log { major, minor } => Some((major, minor, r.data.len())),
            RecordKind::StackTrace => None,
        })
        .collect()
}

fn traces(records: &[Record]) -> Vec<usize> {
    records
        .iter()
        .filter(|r| r.kind == RecordKind::StackTrace)
        .map(|r| r.data.len())
        .collect()
}

#[test]
fn ex01_log_args() {
    let (r, _) = run("01_log_args.rpn", &[]);
    assert_eq!(log_sizes(&r), [(1, 1, 35); 3]);
    assert_eq!(&r[2].data[..8], &2u64.to_le_bytes());
}

#[test]
fn ex02_strings_memory() {
    let (r, _) = run("02_strings_memory.rpn", &[]);
    assert_eq!(log_sizes(&r), [(2, 0, 53); 3]);
    assert_eq!(&r[0].data[3..16], b"hello, probes");
}

#[test]
fn ex03_branches() {
    let (r, _) = run("03_branches.rpn", &[]);
    assert_eq!(log_sizes(&r), [(3, 0, 16); 3]);
    assert_eq!(&r[1].data[..8], &0xddu64.to_le_bytes());
}

#[test]
fn ex04_loop_abort_remove() {
    let (r, o) = run("04_loop_abort_remove.rpn", &[]);
    assert_eq!(o, [Outcome::Abort, Outcome::Remove]);
    assert_eq!(log_sizes(&r), [(4, 0, 8)]);
    assert_eq!(r[0].data, 10u64.to_le_bytes());
}

#[test]
fn ex05_procs() {
    let (r, _) = run("05_procs.rpn", &[]);
    assert_eq!(&r[2].data[..8], &24u64.to_le_bytes());
    assert_eq!(&r[2].data[8..], &11u64.to_le_bytes());
}

#[test]
fn ex06_exceptions() {
    let (r, _) = run("06_exceptions.rpn", &[]);
    assert_eq!(log_sizes(&r), [(6, 0, 155); 3]);
}

#[test]
fn ex07_variables() {
    let (r, _) = run("07_variables.rpn", &[]);
    assert_eq!(log_sizes(&r), [(7, 1, 0), (7, 1, 0), (7, 1, 0), (7, 2, 46)]);
}

#[test]
fn ex08_jmpmax() {
    let (r, o) = run("08_jmpmax.rpn", &[]);
    assert_eq!(
        log_sizes(&r),
        [(8, 1, 32), (8, 1, 32), (8, 1, 32), (8, 2, 8)]
    );
    assert_eq!(o.last(), Some(&Outcome::Uncaught));
}

#[test]
fn ex09_log_overflow() {
    let (r, _) = run("09_log_overflow.rpn", &[]);
    assert_eq!(
        log_sizes(&r),
        [(9, 1, 40), (9, 1, 40), (9, 1, 40), (9, 2, 40)]
    );
}

#[test]
fn ex10_stacktrace() {
    let (r, _) = run("10_stacktrace.rpn", &[]);
    assert_eq!(
        log_sizes(&r),
        [(10, 0, 24), (10, 0, 24), (10, 0, 24), (10, 2, 8)]
    );
    assert_eq!(traces(&r), [149, 149, 149, 67]);
}

#[test]
fn ex11_watchpoint() {
    let (r, _) = run("11_watchpoint.rpn", &[]);
    assert_eq!(log_sizes(&r), [(11, 0, 16), (11, 0, 16)]);
    assert_eq!(&r[1].data[..8], &1u64.to_le_bytes());
}

#[test]
fn ex12_user_exceptions() {
    let (r, _) = run("12_user_exceptions.rpn", &[]);
    assert_eq!(
        log_sizes(&r),
        [(12, 1, 8), (12, 1, 8), (12, 1, 32), (12, 2, 24)]
    );
}

#[test]
fn ex13_preprocessor_three_builds() {
    let (r, _) = run("13_preprocessor.rpn", &[]);
    assert_eq!(log_sizes(&r), [(13, 0, 16); 3]);
    let (r, _) = run("13_preprocessor.rpn", &[("SCALE", "3"), ("TERSE", "1")]);
    assert_eq!(log_sizes(&r), [(13, 0, 8); 3]);
    assert_eq!(r[2].data, 6u64.to_le_bytes());
    let (r, _) = run(
        "13_preprocessor.rpn",
        &[("VERBOSE", "1"), ("MARKER", "0x99")],
    );
    assert_eq!(log_sizes(&r), [(13, 0, 24); 3]);
}

#[test]
fn ex14_registers_memory() {
    let (r, _) = run("14_registers_memory.rpn", &[]);
    assert_eq!(
        log_sizes(&r),
        [(14, 1, 48), (14, 1, 48), (14, 1, 48), (14, 2, 24)]
    );
}

#[test]
fn ex15_stack_arith() {
    let (r, _) = run("15_stack_arith.rpn", &[]);
    assert_eq!(log_sizes(&r), [(15, 0x99, 200)]);
}

#[test]
fn compiling_twice_gives_identical_bytes() {
    for e in std::fs::read_dir(examples_dir()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "rpn") {
            let p = build_file(&path, &[]);
            let a = rpn2wasm::compile_program(p.clone()).wasm;
            let b = rpn2wasm::compile_program(build_file(&path, &[])).wasm;
            assert_eq!(a, b, "{}", path.display());
            wprobe_tests::validate(&a);
        }
    }
}
