//! Acceptance tests of the reference interpreter: every example program of
//! `tests/examples` is built by the front end (with the symbols of the
//! reference build of the target) and run against `ModelEnv` hits in the
//! order the target program makes them; the records must be exactly those
//! stated in each example's header comment.
//!
//! The examples directory is `$WPROBE_EXAMPLES` if set, else
//! `<repository>/tests/examples`.

use std::path::PathBuf;

use hostabi::Outcome;
use hostabi::record::decode_stacktrace;
use rpn2wasm::ast::Program;
use rpn2wasm::interp::{self, Limits, ProgramState, Record, RecordKind, RunResult};
use rpn2wasm::model::{ModelEnv, probe_target as t};
use rpn2wasm::symbols::MapSymbols;

fn examples_dir() -> PathBuf {
    match std::env::var_os("WPROBE_EXAMPLES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/examples"),
    }
}

fn reference_symbols() -> MapSymbols {
    MapSymbols::new([
        ("target_fn", t::TARGET_FN),
        ("bump", t::BUMP),
        ("main", t::MAIN),
        ("greeting", t::GREETING),
        ("origin", t::ORIGIN),
        ("counter", t::COUNTER),
    ])
}

fn build_with(file: &str, defines: &[(&str, &str)]) -> Program {
    let path = examples_dir().join(file);
    let opts = rpn2wasm::Options {
        defines: defines
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        include_dirs: Vec::new(),
        symbols: Some(Box::new(reference_symbols())),
        module_dirs: Vec::new(),
    };
    match rpn2wasm::frontend(&path, &opts) {
        Ok((p, _)) => p,
        Err((d, map)) => panic!("{file} does not build:\n{}", d.render(&map)),
    }
}

fn build(file: &str) -> Program {
    build_with(file, &[])
}

/// A loaded program in a fresh runtime: its local variables and the run's
/// global variables persist across hits.
struct Session {
    program: Program,
    state: ProgramState,
    gvars: Vec<u64>,
}

impl Session {
    fn new(program: Program) -> Session {
        let state = ProgramState::new(&program);
        let gvars = vec![0; usize::from(program.header.gvars)];
        Session {
            program,
            state,
            gvars,
        }
    }

    fn hit(&mut self, probe: usize, env: &mut ModelEnv) -> RunResult {
        env.gvars = self.gvars.clone();
        let r = interp::run(
            &self.program,
            probe,
            &mut self.state,
            env,
            &Limits::default(),
        );
        self.gvars = env.gvars.clone();
        r
    }
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn log(major: u16, minor: u16, data: Vec<u8>) -> Record {
    Record {
        kind: RecordKind::Log { major, minor },
        data,
        items: Vec::new(),
    }
}

/// Compares records ignoring item descriptors (checked separately).
fn assert_records(got: &RunResult, want: &[Record], what: &str) {
    let strip: Vec<Record> = got
        .records
        .iter()
        .map(|r| Record {
            items: Vec::new(),
            ..r.clone()
        })
        .collect();
    assert_eq!(strip, want, "{what}");
}

fn target_hits() -> impl Iterator<Item = (u64, ModelEnv)> {
    (0..3).map(|a| (a, ModelEnv::probe_target_hit(a)))
}

#[test]
fn ex01_log_args() {
    let mut s = Session::new(build("01_log_args.rpn"));
    for (a, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        let mut d = words(&[a, 7]);
        d.extend([7, 2, 0]);
        d.extend(words(&[t::TARGET_FN, t::GREETING]));
        assert_eq!(d.len(), 35);
        assert_records(&r, &[log(1, 1, d)], "a = {a}");
        assert_eq!(r.outcome, Outcome::Exit);
        assert_eq!(r.records[0].items, [0x80_0000, 0x82_0010]);
    }
}

#[test]
fn ex02_strings_memory() {
    let mut s = Session::new(build("02_strings_memory.rpn"));
    let mut d = vec![1, 13, 0];
    d.extend(b"hello, probes");
    d.extend([1, 5, 0]);
    d.extend(b"hello");
    d.extend([0, 16, 0]);
    d.extend(words(&[3, -4i64 as u64]));
    d.extend([0x21, 0x70]);
    d.extend(words(&[-4i64 as u64]));
    assert_eq!(d.len(), 53);
    for (a, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        assert_records(&r, &[log(2, 0, d.clone())], &format!("a = {a}"));
        assert_eq!(
            r.records[0].items,
            [0x82_0000, 0x82_0010, 0x82_0018, 0x81_002b, 0x80_002d]
        );
    }
}

#[test]
fn ex03_branches() {
    let mut s = Session::new(build("03_branches.rpn"));
    let want = [[0x5a5a, u64::MAX], [0x0dd, 0], [0xe7e, 1]];
    for (a, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        assert_records(&r, &[log(3, 0, words(&want[a as usize]))], "");
    }
}

#[test]
fn ex04_loop_abort_remove() {
    let mut s = Session::new(build("04_loop_abort_remove.rpn"));
    let mut records = Vec::new();
    for (_, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        records.extend(r.records.clone());
        if r.outcome == Outcome::Remove {
            break; // the runtime disables the probe: a = 2 never runs
        }
        assert_eq!(r.outcome, Outcome::Abort);
    }
    assert_eq!(
        records
            .into_iter()
            .map(|r| Record {
                items: Vec::new(),
                ..r
            })
            .collect::<Vec<_>>(),
        [log(4, 0, words(&[10]))]
    );
    assert_eq!(s.state.locals, [10]);
}

#[test]
fn ex05_procs() {
    let mut s = Session::new(build("05_procs.rpn"));
    let want = [[2, 7], [6, 8], [24, 11]];
    for (a, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        assert_records(&r, &[log(5, 0, words(&want[a as usize]))], "");
    }
}

#[test]
fn ex06_exceptions() {
    let mut s = Session::new(build("06_exceptions.rpn"));
    let mut d = words(&[1, 0x10, 0]);
    d.extend([0xff, 8, 0]);
    d.extend(words(&[0x20]));
    d.extend(words(&[
        1, 0x20, 0, 1, 0x20, 0, 0x20, 0, 0, 0x40, 4, 7, 0x80, 0x0f, 114,
    ]));
    assert_eq!(d.len(), 155);
    for (a, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        assert_records(&r, &[log(6, 0, d.clone())], &format!("a = {a}"));
        assert_eq!(r.outcome, Outcome::Exit);
    }
}

#[test]
fn ex07_variables() {
    let mut s = Session::new(build("07_variables.rpn"));
    for (_, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        assert_records(&r, &[log(7, 1, Vec::new())], "empty record");
    }
    let r = s.hit(1, &mut ModelEnv::probe_target_bump());
    let mut d = vec![5, 3, 0];
    d.extend(words(&[3, 3, 2]));
    d.extend([6, 1, 0]);
    d.extend(words(&[3, 2]));
    assert_eq!(d.len(), 46);
    assert_records(&r, &[log(7, 2, d)], "bump");
    assert_eq!(s.state.locals, [3, 2, 2]);
    assert_eq!(s.gvars, [3, 0]);
}

#[test]
fn ex08_jmpmax() {
    let mut s = Session::new(build("08_jmpmax.rpn"));
    for (_, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        assert_records(&r, &[log(8, 1, words(&[4, 10, 0, 11]))], "");
        assert_eq!(r.outcome, Outcome::Exit);
    }
    let r = s.hit(1, &mut ModelEnv::probe_target_bump());
    assert_records(&r, &[log(8, 2, words(&[0x1111]))], "bump");
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(r.last_exception, (4, 0xFFFF_FFFF, 10, 0));
}

#[test]
fn ex09_log_overflow() {
    let mut s = Session::new(build("09_log_overflow.rpn"));
    let mut d = words(&[0xaa]);
    d.extend([1, 13, 0]);
    d.extend(b"hello, probes");
    d.extend(words(&[0x1000, 40]));
    assert_eq!(d.len(), 40);
    for (_, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        assert_records(&r, &[log(9, 1, d.clone())], "");
        assert_eq!(r.records[0].items, [0x80_0000, 0x82_0008, 0x80_0018]);
    }
    let r = s.hit(1, &mut ModelEnv::probe_target_bump());
    assert_records(&r, &[log(9, 2, words(&[1, 2, 3, 4, 5]))], "bump");
    assert_eq!(r.outcome, Outcome::Exit);
}

fn st_header(loc: u64, minor: u16, count: u16) -> Vec<u8> {
    let mut v = vec![1, 12, 0];
    v.extend(b"probe_target");
    v.extend(loc.to_le_bytes());
    v.extend([0, 0, 10, 0]);
    v.extend(minor.to_le_bytes());
    v.extend([2]);
    v.extend(count.to_le_bytes());
    v
}

#[test]
fn ex10_stacktrace() {
    let mut s = Session::new(build("10_stacktrace.rpn"));
    for (a, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        let mut st = st_header(t::TARGET_FN, 0, 1);
        st.extend(words(&[0x20, 0xffff_ffff, 0, 0]));
        st.extend([3, 2, 0]);
        st.extend(words(&[52, 50]));
        st.extend([4, 1, 0]);
        st.extend(words(&[0xabc]));
        st.extend([5, 2, 0]);
        st.extend(words(&[a, 0x77]));
        st.extend([6, 1, 0]);
        st.extend(words(&[0]));
        st.extend(words(&[41, 36]));
        st.extend([4, 0, 0, 5, 0, 0, 6, 0, 0]);
        assert_eq!(st.len(), 149);
        let trace = Record {
            kind: RecordKind::StackTrace,
            data: st,
            items: Vec::new(),
        };
        assert_records(&r, &[log(10, 0, words(&[0x20, 0, 0])), trace], "");
        decode_stacktrace(&r.records[1].data, |_| {}).unwrap();
    }
    let r = s.hit(1, &mut ModelEnv::probe_target_bump());
    let mut st = st_header(t::BUMP, 2, 1);
    st.extend(words(&[0, 0xffff_ffff, 0, 0]));
    st.extend([3, 0, 0]);
    assert_eq!(st.len(), 67);
    let trace = Record {
        kind: RecordKind::StackTrace,
        data: st,
        items: Vec::new(),
    };
    assert_records(&r, &[log(10, 2, words(&[67])), trace], "bump");
}

#[test]
fn ex11_watchpoint() {
    let p = build("11_watchpoint.rpn");
    assert_eq!(p.probes[0].maxhits, 2);
    let mut s = Session::new(p);
    // counter is written with 0, 1, 3, 4; maxhits = 2: two runs.
    for a in 0..2 {
        let r = s.hit(0, &mut ModelEnv::probe_target_store(a));
        assert_records(&r, &[log(11, 0, words(&[a, t::AFTER_COUNTER_STORE]))], "");
    }
}

#[test]
fn ex12_user_exceptions() {
    let mut s = Session::new(build("12_user_exceptions.rpn"));
    let want: [&[u64]; 3] = [&[0x600d], &[0x600d], &[0x10ca1, 0x28000, 0xbad, 2]];
    for (a, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        assert_records(&r, &[log(12, 1, words(want[a as usize]))], "");
    }
    let r = s.hit(1, &mut ModelEnv::probe_target_bump());
    assert_records(&r, &[log(12, 2, words(&[0x8000, 0, 0]))], "bump");
}

/// A hit at `target_fn + 1` (after `push %rbp`).
fn second_insn_hit(a: u64) -> ModelEnv {
    let mut env = ModelEnv::probe_target_hit(a);
    env.set_reg(0x0D, t::TARGET_FN + 1)
        .set_reg(0x0E, t::RSP_IN_CALLEE - 8);
    env
}

#[test]
fn ex13_preprocessor_default() {
    let p = build("13_preprocessor.rpn");
    assert_eq!(p.probes[0].value, t::TARGET_FN + 1);
    assert_eq!(p.probes[0].opcode, Some(0x48));
    let mut s = Session::new(p);
    for a in 0..3 {
        let r = s.hit(0, &mut second_insn_hit(a));
        assert_records(&r, &[log(13, 0, words(&[a * 2, 0x4d41524b]))], "");
    }
}

#[test]
fn ex13_preprocessor_scale_terse() {
    let mut s = Session::new(build_with(
        "13_preprocessor.rpn",
        &[("SCALE", "3"), ("TERSE", "1")],
    ));
    for a in 0..3 {
        let r = s.hit(0, &mut second_insn_hit(a));
        assert_records(&r, &[log(13, 0, words(&[a * 3]))], "");
    }
}

#[test]
fn ex13_preprocessor_verbose_marker() {
    let mut s = Session::new(build_with(
        "13_preprocessor.rpn",
        &[("VERBOSE", "1"), ("MARKER", "0x99")],
    ));
    for a in 0..3 {
        let r = s.hit(0, &mut second_insn_hit(a));
        let rsp = t::RSP_IN_CALLEE - 8;
        assert_records(&r, &[log(13, 0, words(&[rsp, a * 2, 0x99]))], "");
    }
}

#[test]
fn ex14_registers_memory() {
    let mut s = Session::new(build("14_registers_memory.rpn"));
    for (_, mut env) in target_hits() {
        let r = s.hit(0, &mut env);
        assert_records(&r, &[log(14, 1, words(&[7, 100, 1, 1, 0, 0]))], "");
        assert_eq!(env.reg(0x0B), 100);
        assert_eq!(env.reg_writes, [(0x0B, 100)]);
        assert!(env.mem_writes.is_empty());
    }
    let mut env = ModelEnv::probe_target_bump();
    let r = s.hit(1, &mut env);
    assert_records(&r, &[log(14, 2, words(&[0x6c65, 0x68, 1000]))], "bump");
    assert_eq!(env.peek_u64(t::COUNTER), Some(1000));
    assert_eq!(
        env.mem_writes,
        [(t::COUNTER, 1000u64.to_le_bytes().to_vec())]
    );
    assert!(env.reg_writes.is_empty());
}

#[test]
fn ex15_stack_arith() {
    let mut s = Session::new(build("15_stack_arith.rpn"));
    let r = s.hit(0, &mut ModelEnv::probe_target_main());
    let w = [
        0xffff_ffff_ffff_fffe,
        3,
        2,
        0xffff_ffff_ffff_fffd,
        0xffff_ffff_ffff_fffe,
        0xffff_ffff_ffff_fff0,
        0x1000_0000_0000_0008,
        0xff80,
        0x1230,
        2,
        3,
        1,
        7,
        7,
        7,
        10,
        99,
        30,
        20,
        99,
        0x55,
        0x77,
        0x66,
        0x77,
        192,
    ];
    assert_records(&r, &[log(15, 0x99, words(&w))], "");
    assert_eq!(r.records[0].data.len(), 200);
}

#[test]
fn ex16_return_probe() {
    let p = build("16_return_probe.rpn");
    assert!(p.probes[0].r#return);
    let mut s = Session::new(p);
    for a in 0..3u64 {
        let r = s.hit(0, &mut ModelEnv::probe_target_return(a));
        let mut d = words(&[t::ELAPSED_BASE_NS + t::ELAPSED_STEP_NS * a, 7 * a + 13, a]);
        d.extend([1, 13, 0]);
        d.extend(b"hello, probes");
        d.extend(words(&[8, t::TARGET_FN_RETURN]));
        assert_eq!(d.len(), 56);
        assert_records(&r, &[log(16, 1, d)], &format!("a = {a}"));
        assert_eq!(r.outcome, Outcome::Exit);
        assert_eq!(r.records[0].items, [0x80_0000, 0x82_0018, 0x80_0028]);
    }
}
