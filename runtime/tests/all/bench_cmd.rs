//! `wprobe bench` as users run it, with tiny iteration counts: the report
//! lists every probe and engine, its numbers are present and well formed,
//! and the per-run facts (records, bytes, work, outcome) are exact. The
//! timings themselves are measured, never asserted.

use crate::case;
use crate::support::case::{Case, Need};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(text_report_lists_every_probe_and_engine_with_exact_facts),
    case!(json_report_has_one_object_per_probe_and_engine),
    case!(a_runaway_handler_is_reported_as_fuel_exhausted),
    case!(compile_errors_are_reported_like_run_does),
    case!(
        end_to_end_reports_exact_hits_and_per_hit_overhead,
        Need::Perf
    ),
    case!(
        end_to_end_passes_defines_and_include_dirs_to_the_traced_runs,
        Need::Perf
    ),
    case!(a_captured_hit_keeps_to_its_budget_and_keeps_the_stack),
    case!(with_a_command_handlers_run_on_its_first_real_hit),
    case!(compare_script_prints_its_table_and_cleans_up),
];

use crate::support::cli::{examples, gcc, probe_target, scratch, wprobe, write};
use std::path::PathBuf;
use std::process::Command;

/// Two probes at fixed addresses (no symbols needed): a 100-iteration loop
/// that logs its sum, and a handler that logs three registers.
const PROGRAM: &str = "name = bench_target
major = 9
address = 0x401000
opcode = 0x55
        push 0
        push 100
top:    dup 1
        push tsp, 2
        add
        pop tsp, 2
        loop top
        ros 1
        log 1
address = 0x401010
opcode = 0x55
        push r, rdi
        push r, rsi
        push r, rdx
        log 3
";

/// Runs `c`, checks that it exits with `status` (showing both outputs when
/// not), and returns its standard output.
fn stdout_of(c: &mut Command, status: i32) -> String {
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(status),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn columns(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

fn text_report_lists_every_probe_and_engine_with_exact_facts() {
    let p = write("two.rpn", PROGRAM);
    let stdout = stdout_of(
        wprobe()
            .args(["bench", "--iterations", "200", "--interp"])
            .arg(&p),
        0,
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        columns(lines[0]),
        [
            "PROGRAM",
            "PROBE",
            "LOCATION",
            "ENGINE",
            "MEDIAN_NS",
            "P10_NS",
            "P90_NS",
            "WORK/RUN",
            "RECORDS/RUN",
            "BYTES/RUN",
            "OUTCOME"
        ]
    );
    assert_eq!(lines.len(), 5, "{stdout}");
    let rows: Vec<Vec<&str>> = lines[1..].iter().map(|l| columns(l)).collect();
    let expect = [
        ("0", "@0x401000", "compiled", "8"),
        ("0", "@0x401000", "interp", "8"),
        ("1", "@0x401010", "compiled", "24"),
        ("1", "@0x401010", "interp", "24"),
    ];
    for (row, (probe, loc, engine, bytes)) in rows.iter().zip(expect) {
        assert_eq!(row.len(), 11, "{row:?}");
        assert_eq!(
            (row[0], row[1], row[2], row[3]),
            ("two", probe, loc, engine)
        );
        let (median, p10, p90): (f64, f64, f64) = (
            row[4].parse().unwrap(),
            row[5].parse().unwrap(),
            row[6].parse().unwrap(),
        );
        assert!(median > 0.0 && p10 <= median && median <= p90, "{row:?}");
        assert!(row[7].parse::<u64>().unwrap() > 0, "{row:?}");
        assert_eq!((row[8], row[9], row[10]), ("1", bytes, "exit"), "{row:?}");
    }
    // The interpreter's work is instructions: 2 + 5 × 100 + 2 + the implicit exit.
    assert_eq!(rows[1][7], "505");
    assert_eq!(rows[3][7], "5");
}

fn json_report_has_one_object_per_probe_and_engine() {
    let p = write("two_json.rpn", PROGRAM);
    let stdout = stdout_of(
        wprobe()
            .args(["bench", "--iterations", "50", "--format", "json"])
            .arg(&p),
        0,
    );
    let rows: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["program"], "two_json");
        assert_eq!(r["probe"], i);
        assert_eq!(r["engine"], "compiled");
        assert_eq!(r["runs"], 50);
        assert_eq!(r["records_per_run"], 1);
        assert_eq!(r["bytes_per_run"], if i == 0 { 8 } else { 24 });
        assert_eq!(r["outcome"], "exit");
        assert!(r["median_ns"].as_f64().unwrap() > 0.0);
    }
}

fn a_runaway_handler_is_reported_as_fuel_exhausted() {
    let p = write(
        "spin.wat",
        r#"(module
  (@custom "wprobe.manifest" "wprobe-manifest 1\nabi 2\nmodule bench_target\nmajor 1\nprobe spin\n  location address 0x401000\n")
  (memory (export "memory") 1)
  (func (export "spin") (result i32) (loop (br 0)) (i32.const 0)))"#,
    );
    let stdout = stdout_of(
        wprobe()
            .args(["bench", "--iterations", "3", "--fuel", "5000"])
            .arg(&p),
        0,
    );
    let row = columns(stdout.lines().nth(1).unwrap());
    assert_eq!(
        (row[3], row[7], row[8]),
        ("compiled", "5000", "0"),
        "{stdout}"
    );
    assert_eq!(row[10..].join(" "), "fuel exhausted");
}

fn compile_errors_are_reported_like_run_does() {
    let p = write(
        "bench_bad.rpn",
        "name = x\nmajor = 1\naddress = 0x1\nopcode = 0x55\n  frobnicate\n",
    );
    let out = wprobe().args(["bench"]).arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.rpn:5:3: error[E"), "{err}");
    assert!(err.contains("could not compile"), "{err}");
}

/// `benches/ptrace/loop_target.c` built as `loop_target` (the name its
/// handler's `name =` gives) in the scratch directory.
fn loop_target() -> PathBuf {
    let src =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/ptrace/loop_target.c");
    gcc(
        "loop_target",
        &src,
        &["-O0", "-fno-omit-frame-pointer", "-fcf-protection=none"],
    )
}

fn end_to_end_reports_exact_hits_and_per_hit_overhead() {
    let exe = loop_target();
    let prog =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/ptrace/trivial.rpn");
    let stdout = stdout_of(
        wprobe()
            .args(["bench", "--end-to-end", "--repeat", "1"])
            .arg(&prog)
            .arg("--")
            .arg(&exe)
            .arg("300"),
        0,
    );
    let rows: Vec<Vec<&str>> = stdout.lines().map(columns).collect();
    assert_eq!(
        rows[0],
        [
            "MODE",
            "HITS",
            "WALL_MS",
            "CPU_MS",
            "WALL_NS/HIT",
            "CPU_NS/HIT"
        ]
    );
    // The default (`auto`) and every transport, each with the exact
    // number of calls.
    assert_eq!(rows.len(), 6, "{stdout}");
    assert_eq!((rows[1][0], rows[1][1], rows[1][4]), ("untraced", "0", "-"));
    assert_eq!((rows[2][0], rows[2][1]), ("auto", "300"), "{stdout}");
    assert_eq!((rows[3][0], rows[3][1]), ("ptrace", "300"), "{stdout}");
    assert_eq!((rows[4][0], rows[4][1]), ("perf", "300"), "{stdout}");
    assert_eq!((rows[5][0], rows[5][1]), ("inproc", "300"), "{stdout}");
    for r in &rows[1..] {
        assert!(r[2].parse::<f64>().unwrap() > 0.0, "{r:?}");
        assert!(r[3].parse::<f64>().is_ok(), "{r:?}");
    }
    for r in &rows[2..] {
        assert!(
            r[4].parse::<i64>().is_ok() && r[5].parse::<i64>().is_ok(),
            "{r:?}"
        );
    }
}

/// `-D` and `-I` reach the traced runs: the probed function comes from a
/// macro of an included file, chosen by a definition (`main`, called once,
/// instead of `hit`, called 300 times); without `-I` the program does not
/// build and each transport says so.
fn end_to_end_passes_defines_and_include_dirs_to_the_traced_runs() {
    let exe = loop_target();
    let dir = scratch().join("e2e-defines");
    std::fs::create_dir_all(dir.join("inc")).unwrap();
    std::fs::write(
        dir.join("inc/where.inc"),
        "#ifdef ONCE\n#define PROBED main\n#else\n#define PROBED hit\n#endif\n",
    )
    .unwrap();
    let prog = dir.join("where.rpn");
    std::fs::write(
        &prog,
        "#include \"where.inc\"\nname = loop_target\noffset = PROBED\nopcode = 0x55\n        abort\n",
    )
    .unwrap();
    // The exit status is 1 when no transport could run.
    let run = |extra: &[&str], status: i32| {
        stdout_of(
            wprobe()
                .args(["bench", "--end-to-end", "--repeat", "1"])
                .args(extra)
                .arg(&prog)
                .arg("--")
                .arg(&exe)
                .arg("300"),
            status,
        )
    };
    let inc = dir.join("inc");
    let inc = inc.to_str().unwrap();
    let hits = |stdout: &str| -> Vec<(String, String)> {
        stdout
            .lines()
            .skip(2)
            .map(|l| {
                let c = columns(l);
                (c[0].to_string(), c[1..].join(" "))
            })
            .collect()
    };
    let once = run(&["-I", inc, "-D", "ONCE"], 0);
    let rows = hits(&once);
    assert_eq!(rows.len(), 4, "{once}");
    for (row, mode) in rows.iter().zip(["auto", "ptrace", "perf", "inproc"]) {
        assert_eq!(row.0, mode, "{once}");
        assert!(row.1.starts_with("1 "), "main is called once: {once}");
    }
    let every = run(&["-I", inc], 0);
    for row in hits(&every) {
        assert!(
            row.1.starts_with("300 "),
            "hit is called 300 times: {every}"
        );
    }
    let missing = run(&[], 1);
    let rows = hits(&missing);
    assert_eq!(rows.len(), 4, "{missing}");
    let path = prog.display();
    for row in rows {
        assert_eq!(
            row.1,
            format!("unavailable: {path}:1:11: error[E0015]: include file `where.inc` not found"),
            "{missing}"
        );
    }
}

/// A captured hit copies at most 64 MiB of the command's memory, the stack
/// and what the registers point to first: on a target with 80 MiB of small
/// readable mappings, the handler still reads its return address and the
/// lowest mapping's marker, while the highest mapping, past the budget,
/// faults (the marker lies beyond the part copied around the pointer).
fn a_captured_hit_keeps_to_its_budget_and_keeps_the_stack() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/progs/many_maps.c");
    let exe = gcc(
        "many_maps",
        &src,
        &["-O0", "-fno-omit-frame-pointer", "-fcf-protection=none"],
    );
    let prog = write(
        "many_maps.rpn",
        r#"name = many_maps
offset = probe_low
opcode = 0x55
        push r, rsp
        push mem, u64           // the return address, on the stack
        jz bad
        push r, rdi
        push 0x20000
        add
        push mem, u64           // the lowest mapping's marker
        push 0x5EEDC0DE
        xor
        jnz bad
        exit
bad:    abort
offset = probe_high
opcode = 0x55
        push r, rdi
        push 0x20000
        add
        push mem, u64           // the highest mapping's marker
        log 1
"#,
    );
    let stdout = stdout_of(
        wprobe()
            .args(["bench", "--iterations", "10", "--format", "json"])
            .arg(&prog)
            .arg("--")
            .arg(&exe),
        0,
    );
    let outcomes: Vec<String> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["outcome"].to_string())
        .collect();
    assert_eq!(outcomes, ["\"exit\"", "\"uncaught exception\""], "{stdout}");
}

fn with_a_command_handlers_run_on_its_first_real_hit() {
    let target = probe_target();
    let examples = examples();
    let run = |with_command: bool| {
        let mut c = wprobe();
        c.args(["bench", "--iterations", "20", "--interp"])
            .arg(examples.join("02_strings_memory.rpn"));
        if with_command {
            // `name = probe_target` is found next to the command.
            c.arg("--").arg(&target);
        } else {
            c.current_dir(target.parent().unwrap());
        }
        stdout_of(&mut c, 0)
    };
    // On a real hit the example logs its 53 bytes (strings, a memory block,
    // bytes and a word read from the target's globals), in both engines;
    // the target's own output never reaches the report.
    let real = run(true);
    let rows: Vec<Vec<&str>> = real.lines().skip(1).map(columns).collect();
    assert_eq!(rows.len(), 2, "{real}");
    for (row, engine) in rows.iter().zip(["compiled", "interp"]) {
        assert_eq!(
            (row[3], row[8], row[9], row[10]),
            (engine, "1", "53", "exit"),
            "{real}"
        );
    }
    // On the all-zero synthetic hit the first string read faults.
    let synthetic = run(false);
    let row = columns(synthetic.lines().nth(1).unwrap());
    assert_eq!((row[8], row[9]), ("1", "11"), "{synthetic}");
    assert_eq!(row[10..].join(" "), "uncaught exception");
}

/// `benches/compare` end to end with tiny counts and only the rows that need
/// neither bpftrace nor perf (the untraced loop, wprobe's ptrace transport,
/// the minimal ptrace loop; a few seconds): the table is printed, every
/// tool's hit count is confirmed (no `!`), and the scratch directory is
/// gone afterwards. The figures themselves are not asserted.
fn compare_script_prints_its_table_and_cleans_up() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tmp = scratch().join("compare-tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let stdout = stdout_of(
        Command::new(root.join("benches/compare"))
            .args(["200", "400", "1"])
            .env("WPROBE", env!("CARGO_BIN_EXE_wprobe"))
            .env("PTRACE_N1", "20")
            .env("PTRACE_N2", "40")
            .env(
                "COMPARE_SKIP",
                "bpftrace perf wprobe-perf oneliner inproc auto uftrace",
            )
            .env("COMPARE_NO_INSTALL", "1")
            .env("TMPDIR", &tmp),
        0,
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("machine: ") && lines[0].contains("kernel"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("N1=200 N2=400 (ptrace rows: 20/40) REPEATS=1"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("tracer") && lines[2].contains("wall ns/hit"),
        "{stdout}"
    );
    for (line, name) in lines[3..].iter().zip([
        "untraced loop (ns per call)",
        "wprobe --transport ptrace",
        "minimal ptrace loop (baseline.c)",
    ]) {
        assert!(line.starts_with(name), "{stdout}");
        let cols = columns(&line[name.len()..]);
        assert_eq!(cols.len(), 4, "{line}");
        assert!(
            cols[0].parse::<i64>().is_ok() && cols[1].parse::<i64>().is_ok(),
            "{line}"
        );
        assert_eq!(&cols[2..], ["-", "-"], "{line}");
    }
    assert_eq!(lines.len(), 6, "{stdout}");
    assert!(!stdout.contains('!'), "{stdout}");
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "scratch left behind"
    );
}
