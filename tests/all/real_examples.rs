//! Every example program traces the real `probe_target` (built with the
//! examples' flags) under the ptrace transport, and produces exactly the
//! records the reference interpreter produces on the modelled run — which
//! the interpreter's own tests check against each example's header — raw
//! bytes and decoded items both. The target's own output is checked too
//! (example 14 changes it).

use rpn2wasm::interp::RecordKind;
use runtime::out::format::Format;
use runtime::session::{LoadedProgram, RunOptions, Session};
use runtime::transport::ptrace::{ExitStatus, PtraceTracer, TraceOptions};
use std::sync::atomic::AtomicBool;
use wprobe_tests::{
    SharedBuf, build_file, engine, examples_dir, interpreter_scenario, probe_target, scratch_dir,
};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Traces `probe_target` with one example; returns (JSON lines, target stdout, exit status).
fn trace(
    file: &str,
    defines: &[(&str, &str)],
) -> (Vec<serde_json::Value>, String, Option<ExitStatus>) {
    let target = probe_target();
    let program = build_file(&examples_dir().join(file), defines);
    let wasm = wprobe_tests::compile(&program);
    let module = runtime::wasm::load::load(engine(), &wasm, None).expect("load");
    let buf = SharedBuf::default();
    let opts = RunOptions {
        follow_forks: false,
        verify_opcodes: true,
        groups: vec![],
        types: vec![],
        fuel: None,
        format: Format::Json,
        text: Default::default(),
    };
    let input = LoadedProgram {
        label: file.trim_end_matches(".rpn").to_string(),
        module,
    };
    let mut session =
        Session::new(engine(), vec![input], opts, Box::new(buf.clone())).expect("session");
    let out = scratch_dir().join(format!("{file}.{}.out", defines.len()));
    let cmd = format!("exec {} > {}", target.display(), out.display());
    let argv: Vec<std::ffi::OsString> = ["/bin/sh", "-c", &cmd].iter().map(Into::into).collect();
    let mut tracer = PtraceTracer::launch(
        &argv,
        TraceOptions {
            follow_forks: false,
            verify_opcodes: true,
        },
    )
    .expect("launch");
    let main = tracer.main_pid();
    session.arm(&mut tracer, main, true);
    let status = session
        .run(&mut tracer, &AtomicBool::new(false))
        .expect("run");
    session.summary();
    let stdout = std::fs::read_to_string(&out).unwrap_or_default();
    (buf.json_lines(), stdout, status)
}

fn check(file: &str, defines: &[(&str, &str)], expect_stdout: &str) {
    let program = build_file(&examples_dir().join(file), defines);
    let want = interpreter_scenario(&program);
    let (lines, stdout, status) = trace(file, defines);
    let got: Vec<(String, u64, u64, String)> = lines
        .iter()
        .filter(|v| v["kind"] != "stats")
        .map(|v| {
            (
                v["kind"].as_str().unwrap().to_string(),
                v["major"].as_u64().unwrap(),
                v["minor"].as_u64().unwrap(),
                v["data_hex"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, u64, u64, String)> = want
        .iter()
        .map(|r| match r.kind {
            RecordKind::Log { major, minor } => {
                ("log".to_string(), major as u64, minor as u64, hex(&r.data))
            }
            RecordKind::StackTrace => ("stacktrace".to_string(), 0, 0, hex(&r.data)),
        })
        .collect();
    assert_eq!(got, want, "{file} {defines:?}: records of the real trace");
    assert_eq!(stdout, expect_stdout, "{file}: the target's output");
    assert_eq!(status, Some(ExitStatus::Code(0)));
    let stats = lines.last().expect("stats line");
    assert_eq!(stats["kind"], "stats");
    assert_eq!(stats["records"].as_u64().unwrap(), want.len() as u64);
    assert_eq!(stats["traps"], 0);
}

const NORMAL: &str = "counter=4 last=27\n";

#[test]
fn ex01_to_ex15_on_the_real_target() {
    for f in [
        "01_log_args.rpn",
        "02_strings_memory.rpn",
        "03_branches.rpn",
        "04_loop_abort_remove.rpn",
        "05_procs.rpn",
        "06_exceptions.rpn",
        "07_variables.rpn",
        "08_jmpmax.rpn",
        "09_log_overflow.rpn",
        "10_stacktrace.rpn",
        "11_watchpoint.rpn",
        "12_user_exceptions.rpn",
        "13_preprocessor.rpn",
        "15_stack_arith.rpn",
    ] {
        check(f, &[], NORMAL);
    }
    check(
        "13_preprocessor.rpn",
        &[("SCALE", "3"), ("TERSE", "1")],
        NORMAL,
    );
    check("14_registers_memory.rpn", &[], "counter=1001 last=213\n");
}

/// Example 16 (a return probe) on the real target: the records of the
/// interpreter on the modelled returns, word for word but the first of
/// each, the call's elapsed time, which only a real run knows (checked to
/// be positive and under a second).
#[test]
fn ex16_return_probe_on_the_real_target() {
    let file = "16_return_probe.rpn";
    let program = build_file(&examples_dir().join(file), &[]);
    let want = interpreter_scenario(&program);
    let (lines, stdout, status) = trace(file, &[]);
    assert_eq!(stdout, NORMAL, "the target's output");
    assert_eq!(status, Some(ExitStatus::Code(0)));
    let logs: Vec<&serde_json::Value> = lines.iter().filter(|v| v["kind"] == "log").collect();
    assert_eq!(logs.len(), 3, "one record per return");
    assert_eq!(want.len(), 3);
    for (got, want) in logs.iter().zip(&want) {
        assert_eq!(
            (got["major"].as_u64(), got["minor"].as_u64()),
            (Some(16), Some(1))
        );
        let data = got["data_hex"].as_str().unwrap();
        let want_hex = hex(&want.data);
        assert_eq!(&data[16..], &want_hex[16..], "all but the elapsed time");
        let mut b = [0u8; 8];
        for (i, x) in b.iter_mut().enumerate() {
            *x = u8::from_str_radix(&data[2 * i..2 * i + 2], 16).unwrap();
        }
        let elapsed = u64::from_le_bytes(b);
        assert!(
            (1..1_000_000_000).contains(&elapsed),
            "elapsed {elapsed} ns"
        );
    }
    let stats = lines.last().expect("stats line");
    assert_eq!(stats["missed"], 0);
    assert_eq!(stats["traps"], 0);
}

#[test]
fn decoded_items_match_the_example_header() {
    let (lines, _, _) = trace("02_strings_memory.rpn", &[]);
    let items = &lines[0]["items"];
    assert_eq!(items[0]["type"], "str");
    assert_eq!(items[0]["value"], "hello, probes");
    assert_eq!(items[1]["value"], "hello");
    assert_eq!(items[2]["type"], "mem");
    assert_eq!(items[2]["hex"], "0300000000000000fcffffffffffffff");
    assert_eq!(items[3]["type"], "bytes");
    assert_eq!(items[3]["hex"], "2170");
    assert_eq!(items[4]["values"][0].as_u64(), Some(-4i64 as u64));
}
