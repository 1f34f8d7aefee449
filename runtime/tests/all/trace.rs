//! `wprobe trace` on real programs (`tests/progs/trace_*.c`, `.cpp`) under
//! every transport with return probes: exact call counts per function
//! (hand-computed, and uftrace's where it is installed) through recursion,
//! mutual recursion, a tail call, `longjmp`, a signal handler and threads;
//! well-nested trees whose depth returns to 0 when a thread ends; a C++
//! exception through traced frames (the program's output and status
//! unchanged, the frames reported unwound); Chrome trace events and flame
//! graphs checked against the same run's report; the text views asserted
//! exactly on a fixed tree (times and ids normalized); a custom handler;
//! fork children; `-p`; and the errors.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, output_within, progs, repo, scratch, stderr, wprobe};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(report_gives_the_hand_computed_call_counts @ every_transport),
    case!(counts_equal_uftraces @ every_transport, Need::Uftrace),
    case!(every_thread_tree_is_well_nested_and_ends_at_depth_0 @ every_transport),
    case!(a_cxx_exception_through_traced_frames_is_caught_and_reported_unwound @ every_transport),
    case!(chrome_events_match_every_call_of_the_report @ every_transport),
    case!(the_flame_graph_names_every_traced_function @ every_transport),
    case!(the_duration_view_is_exact @ every_transport),
    case!(the_call_tree_view_is_exact @ every_transport),
    case!(the_report_is_exact @ every_transport),
    case!(depth_and_min_duration_filters @ every_transport),
    case!(a_custom_handler_logs_an_argument_of_one_function @ every_transport),
    case!(fork_children_have_their_own_trees @ per_transport),
    case!(per_thread_files_hold_each_threads_tree @ every_transport),
    case!(attaching_with_p_traces_new_calls_and_leaves_the_process_running @ every_transport),
    case!(a_terminals_ctrl_c_ends_the_trace_cleanly @ every_transport),
    case!(lib_traces_the_functions_of_linked_and_dlopened_libraries @ per_transport),
    case!(excluded_functions_are_not_traced @ every_transport),
    case!(notrace_hides_a_function_and_everything_it_calls @ every_transport),
    case!(cold_fragments_are_parts_of_their_function @ every_transport),
    case!(aliases_are_one_function_any_of_whose_names_selects_it @ every_transport),
    case!(list_shows_each_name_of_a_function),
    case!(setjmp_is_traced_and_longjmp_unwinds_past_calls @ every_transport),
    case!(functions_taking_their_own_address_still_get_it @ every_transport),
    case!(the_flags_survive_a_traced_calls_entry_and_return @ every_transport),
    case!(many_trap_sites_are_said_in_one_line),
    case!(tail_calls_into_another_module_are_seen_returning @ every_transport),
    case!(a_switchs_returns_take_jumps @ every_transport),
    case!(rets_a_branch_lands_on_take_jumps @ every_transport),
    case!(a_stripped_program_is_traced_in_its_libraries @ every_transport),
    case!(calls_leaving_by_a_tail_call_out_of_traced_code @ every_transport),
    case!(tail_calls_into_unnamed_functions_are_seen_returning @ every_transport),
    case!(functions_no_symbol_names_are_traced_by_address @ every_transport),
    case!(a_probe_at_the_entry_point_leaves_the_command_running @ every_transport),
    case!(the_duration_view_with_time_of_day_and_source_lines_is_exact @ every_transport),
    case!(rust_names_are_demangled_by_default @ every_transport),
    case!(cxx_names_are_demangled_as_uftrace_shows_them @ every_transport),
    case!(
        functions_not_traced_are_listed_once_with_the_reason,
        Need::Ptrace
    ),
    case!(bad_arguments_are_refused_with_exact_messages),
    case!(
        plt_calls_give_the_ptrace_tree_under_inproc_and_auto,
        Need::Ptrace
    ),
    case!(no_plt_calls_are_traced_through_their_got_slots @ every_transport),
    case!(a_got_slot_is_restored_when_the_trace_ends, Need::Ptrace),
];

fn trace_calls() -> PathBuf {
    gcc(
        "trace_calls",
        &progs().join("trace_calls.c"),
        &["-O1", "-g", "-fpatchable-function-entry=5"],
    )
}

/// Built without optimisation: each function's first instruction is on
/// the line that opens it (the line `-l` shows).
fn trace_det() -> PathBuf {
    gcc("trace_det", &progs().join("trace_det.c"), &["-O0", "-g"])
}

fn trace_throw() -> PathBuf {
    gcc(
        "trace_throw",
        &progs().join("trace_throw.cpp"),
        &["-O1", "-g", "-lstdc++"],
    )
}

fn trace_fork() -> PathBuf {
    gcc("trace_fork", &progs().join("trace_fork.c"), &["-O1", "-g"])
}

/// `tests/progs/libshared.c` as a shared library, and `lib_user.c` linked
/// with it (found through its `DT_RUNPATH`) and loading it with `dlopen`.
fn libshared() -> (PathBuf, PathBuf, PathBuf) {
    let lib = gcc(
        "libtrace_shared.so",
        &progs().join("libshared.c"),
        &["-O1", "-shared", "-fPIC"],
    );
    let dir = scratch();
    let linked = gcc(
        "trace_lib_linked",
        &progs().join("lib_user.c"),
        &[
            "-O1",
            "-DLINKED",
            &format!("-L{}", dir.display()),
            "-Wl,--no-as-needed",
            "-l:libtrace_shared.so",
            "-Wl,--enable-new-dtags",
            &format!("-Wl,-rpath,{}", dir.display()),
        ],
    );
    let dl = gcc(
        "trace_lib_dl",
        &progs().join("lib_user.c"),
        &["-O1", "-ldl"],
    );
    (lib, linked, dl)
}

/// `tests/progs/trace_rust.rs`, built by rustc with std as a shared
/// library (the executable holds only its own functions).
fn trace_rust() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
            let sysroot = Command::new(&rustc)
                .args(["--print", "sysroot"])
                .output()
                .expect("rustc");
            let lib = Path::new(String::from_utf8_lossy(&sysroot.stdout).trim())
                .join("lib/rustlib/x86_64-unknown-linux-gnu/lib");
            let out = scratch().join("trace_rust");
            let st = Command::new(&rustc)
                .args(["-O", "-g", "-C", "prefer-dynamic", "-C"])
                .arg(format!("link-args=-Wl,-rpath,{}", lib.display()))
                .arg("-o")
                .arg(&out)
                .arg(progs().join("trace_rust.rs"))
                .status()
                .expect("rustc");
            assert!(st.success(), "rustc trace_rust.rs");
            out
        })
        .clone()
}

/// `wprobe trace --transport TR ARGS -- PROG`, within 120 s.
fn trace(tr: &str, args: &[&str], prog: &Path) -> Output {
    trace_argv(tr, args, prog, &[])
}

/// `wprobe trace --transport TR ARGS -- PROG PROG_ARGS`, within 120 s.
fn trace_argv(tr: &str, args: &[&str], prog: &Path, prog_args: &[&str]) -> Output {
    let mut c = wprobe();
    c.arg("trace")
        .args(["--transport", tr])
        .args(args)
        .arg("--")
        .arg(prog)
        .args(prog_args)
        .current_dir(scratch())
        .env("WPROBE_PERF_RING_PAGES", "8192");
    output_within(c, 120)
}

/// A scratch file name unique to this test and transport.
fn file(name: &str, tr: &str) -> PathBuf {
    scratch().join(format!("trace-{name}.{tr}"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `--report --format json` written to `out`: function → (calls, total, self).
fn report_of(out: &Path) -> BTreeMap<String, (u64, u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(&read(out)).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
            assert_eq!(keys.len(), 4, "{r}");
            (
                r["function"].as_str().unwrap().to_string(),
                (
                    r["calls"].as_u64().unwrap(),
                    r["total_ns"].as_u64().unwrap(),
                    r["self_ns"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

/// The calls of trace_calls.c, counted by hand (its header comment).
const HAND_COUNTS: &[(&str, u64)] = &[
    ("main", 1),
    ("fact", 5),
    ("is_even", 4),
    ("is_odd", 3),
    ("tail_caller", 1),
    ("tail_target", 1),
    ("try_jump", 1),
    ("jumper", 3),
    ("sig_during", 1),
    ("on_signal", 1),
    ("worker", 4),
    ("leaf", 41),
];

/// Functions the C run-time links into every executable: traced under
/// ptrace, refused by perf (they have no size, so their returns cannot be
/// found by decoding them).
const CRT: &[(&str, u64)] = &[
    ("_init", 1),
    ("_fini", 1),
    ("frame_dummy", 1),
    ("register_tm_clones", 1),
    ("deregister_tm_clones", 1),
    ("__do_global_dtors_aux", 1),
];

fn report_gives_the_hand_computed_call_counts(tr: &str) {
    let out = file("counts.json", tr);
    let o = trace(
        tr,
        &["--report", "--format", "json", "-o", out.to_str().unwrap()],
        &trace_calls(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "sum 349\n");
    let got = report_of(&out);
    let mut want: BTreeMap<String, u64> = HAND_COUNTS
        .iter()
        .map(|(n, c)| (n.to_string(), *c))
        .collect();
    if tr == "ptrace" {
        want.extend(CRT.iter().map(|(n, c)| (n.to_string(), *c)));
    }
    let calls: BTreeMap<String, u64> = got.iter().map(|(n, v)| (n.clone(), v.0)).collect();
    assert_eq!(calls, want, "{}", stderr(&o));
    // Recursion counts the outermost calls' time once; self times are
    // disjoint parts of it.
    for (n, (_, total, own)) in &got {
        assert!(own <= total, "{n}: self {own} > total {total}");
    }
    let err = stderr(&o);
    assert!(
        err.contains("wprobe: trace: 72 calls")
            || err.contains(&format!("wprobe: trace: {} calls", 72 - CRT.len())),
        "{err}"
    );
    assert!(err.contains(" 3 unwound)"), "{err}");
}

/// uftrace's own report of trace_calls (`uftrace record -P .`): function →
/// calls. uftrace counts a call when it returns, so `jumper` (left by
/// `longjmp`) is not in it. Its data directory is the case's own (`tr`):
/// the cases of the transports run at once, and one directory for all
/// made uftrace fail now and then ("creating directory failed: File
/// exists", "cannot open record data").
fn uftrace_counts(prog: &Path, tr: &str) -> BTreeMap<String, u64> {
    let dir = scratch().join(format!("uftrace.{tr}.data"));
    let _ = std::fs::remove_dir_all(&dir);
    let rec = Command::new("uftrace")
        .args(["record", "-P", ".", "-d"])
        .arg(&dir)
        .arg(prog)
        .current_dir(scratch())
        .output()
        .unwrap();
    assert!(rec.status.success(), "{}", stderr(&rec));
    let rep = Command::new("uftrace")
        .args(["report", "-f", "call", "-d"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(rep.status.success(), "{}", stderr(&rep));
    String::from_utf8_lossy(&rep.stdout)
        .lines()
        .skip(2)
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let n: u64 = w.next()?.parse().ok()?;
            Some((w.collect::<Vec<_>>().join(" "), n))
        })
        .collect()
}

fn counts_equal_uftraces(tr: &str) {
    let prog = trace_calls();
    let theirs = uftrace_counts(&prog, tr);
    let out = file("uftrace.json", tr);
    let o = trace(
        tr,
        &["--report", "--format", "json", "-o", out.to_str().unwrap()],
        &prog,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ours = report_of(&out);
    for (name, _) in HAND_COUNTS {
        let o = ours.get(*name).map(|v| v.0);
        let t = theirs.get(*name).copied();
        if *name == "jumper" {
            assert_eq!((o, t), (Some(3), None), "uftrace counts returns only");
        } else {
            assert_eq!(o, t, "{name}: wprobe {o:?}, uftrace {t:?}");
        }
    }
}

/// Lines of `-T --no-pid`-less output by thread: (tid, depth, line).
fn tree_lines(text: &str, offset: usize) -> Vec<(i32, usize, String)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("[pid ")?;
            let (tid, body) = rest.split_once("] ")?;
            let depth = body.len() - body.trim_start().len();
            Some((
                tid.parse().ok()?,
                depth / offset,
                body.trim_start().to_string(),
            ))
        })
        .collect()
}

/// Checks that every thread's `==>`/`<==` lines nest and end at depth 0;
/// returns the number of calls per thread.
fn check_nesting(text: &str) -> HashMap<i32, usize> {
    let mut stacks: HashMap<i32, Vec<String>> = HashMap::new();
    let mut calls: HashMap<i32, usize> = HashMap::new();
    for (tid, depth, body) in tree_lines(text, 3) {
        let st = stacks.entry(tid).or_default();
        if let Some(f) = body.strip_prefix("==> ") {
            assert_eq!(depth, st.len(), "{tid}: {body}\n{text}");
            st.push(f.split(['(', ' ']).next().unwrap().to_string());
            *calls.entry(tid).or_default() += 1;
        } else if let Some(f) = body.strip_prefix("<== ") {
            let name = f.split(['(', ' ']).next().unwrap();
            assert_eq!(st.pop().as_deref(), Some(name), "{tid}: {body}\n{text}");
            assert_eq!(depth, st.len(), "{tid}: {body}\n{text}");
        }
    }
    for (tid, st) in &stacks {
        assert!(st.is_empty(), "thread {tid} ends inside {st:?}\n{text}");
    }
    calls
}

fn every_thread_tree_is_well_nested_and_ends_at_depth_0(tr: &str) {
    let out = file("nest.txt", tr);
    let o = trace(tr, &["-T", "-o", out.to_str().unwrap()], &trace_calls());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = read(&out);
    let calls = check_nesting(&text);
    // The main thread and the four workers, each worker 1 + 10 calls.
    assert_eq!(calls.len(), 5, "{text}");
    let mut workers: Vec<usize> = calls.values().copied().filter(|&n| n == 11).collect();
    workers.sort();
    assert_eq!(workers, [11, 11, 11, 11], "{calls:?}");
    // The three frames longjmp left, and the tail call returning through
    // its target.
    let unwound = text
        .lines()
        .filter(|l| l.contains("<== jumper() [unwound"))
        .count();
    assert_eq!(unwound, 3, "{text}");
    let tail: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("tail_"))
        .map(|l| l.split_once("] ").unwrap().1)
        .collect();
    assert_eq!(tail.len(), 4, "{text}");
    assert!(tail[0].trim_start().starts_with("==> tail_caller() at 0x"));
    assert!(tail[1].trim_start().starts_with("==> tail_target() at 0x"));
    assert_eq!(tail[2].trim_start(), "<== tail_target() [rax = 0x6]");
    assert_eq!(tail[3].trim_start(), "<== tail_caller() [rax = 0x6]");
}

fn a_cxx_exception_through_traced_frames_is_caught_and_reported_unwound(tr: &str) {
    let prog = trace_throw();
    let plain = Command::new(&prog).output().unwrap();
    assert_eq!(plain.status.code(), Some(3));
    let out = file("throw.txt", tr);
    let o = trace(
        tr,
        &["-T", "--demangle=full", "-i", "-o", out.to_str().unwrap()],
        &prog,
    );
    assert_eq!(o.status.code(), plain.status.code(), "{}", stderr(&o));
    assert_eq!(o.stdout, plain.stdout);
    let text = read(&out);
    check_nesting(&text);
    let bodies: Vec<String> = tree_lines(&text, 3)
        .into_iter()
        .filter(|(_, _, b)| b.contains("level"))
        .map(|(_, d, b)| format!("{d} {b}"))
        .collect();
    let mut want = Vec::new();
    for _ in 0..3 {
        want.extend([
            "1 ==> level1(int)",
            "2 ==> level2(int)",
            "3 ==> level3(int)",
            "3 <== level3(int) [unwound]",
            "2 <== level2(int) [unwound]",
            "1 <== level1(int) [unwound]",
        ]);
    }
    want.extend([
        "1 ==> level1(int)",
        "2 ==> level2(int)",
        "3 ==> level3(int)",
        "3 <== level3(int) [rax = 0x0]",
        "2 <== level2(int) [rax = 0x1]",
        "1 <== level1(int) [rax = 0x2]",
    ]);
    assert_eq!(bodies, want, "{text}");
    assert!(stderr(&o).contains("9 unwound"), "{}", stderr(&o));
    // The duration view says which calls were unwound (a leaf left at
    // once has no time of its own).
    let out = file("throw-duration.txt", tr);
    let o = trace(tr, &["-F", "level1*", "-o", out.to_str().unwrap()], &prog);
    assert_eq!(o.status.code(), plain.status.code(), "{}", stderr(&o));
    // Demangled by default, without the parameters (uftrace's form).
    let unwound = [
        "            [   TID] | level1() {",
        "            [   TID] |   level2() {",
        "            [   TID] |     level3(); /* unwound */",
        "       TIME [   TID] |   } /* level2: unwound */",
        "       TIME [   TID] | } /* level1: unwound */",
    ];
    let mut want = vec!["# DURATION     TID     FUNCTION"];
    for _ in 0..3 {
        want.extend(unwound);
    }
    want.extend([
        "            [   TID] | level1() {",
        "            [   TID] |   level2() {",
        "       TIME [   TID] |     level3();",
        "       TIME [   TID] |   } /* level2 */",
        "       TIME [   TID] | } /* level1 */",
    ]);
    let want = want.join("\n");
    assert_eq!(normalize_durations(&read(&out)), want);
}

fn chrome_events_match_every_call_of_the_report(tr: &str) {
    let chrome = file("chrome.json", tr);
    let rep = file("chrome-report.json", tr);
    let o = trace(
        tr,
        &[
            "--report",
            "--format",
            "json",
            "-o",
            rep.to_str().unwrap(),
            "--chrome",
            chrome.to_str().unwrap(),
        ],
        &trace_calls(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&read(&chrome)).unwrap();
    assert_eq!(v["displayTimeUnit"], "ns");
    let events = v["traceEvents"].as_array().unwrap();
    for e in events {
        let mut keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys.retain(|k| *k != "args");
        assert_eq!(keys, ["cat", "name", "ph", "pid", "tid", "ts"], "{e}");
        assert_eq!(e["cat"], "function", "{e}");
        if let Some(args) = e.get("args") {
            assert_eq!(args, &serde_json::json!({"exit": "unwound"}), "{e}");
        }
    }
    // The three frames longjmp left.
    let unwound = events.iter().filter(|e| e.get("args").is_some()).count();
    assert_eq!(unwound, 3);
    let mut stacks: HashMap<(u64, u64), Vec<(String, f64)>> = HashMap::new();
    let mut begins: BTreeMap<String, u64> = BTreeMap::new();
    for e in events {
        let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
        let name = e["name"].as_str().unwrap().to_string();
        let ts = e["ts"].as_f64().unwrap();
        let st = stacks.entry(key).or_default();
        match e["ph"].as_str().unwrap() {
            "B" => {
                *begins.entry(name.clone()).or_default() += 1;
                st.push((name, ts));
            }
            "E" => {
                let (n, t0) = st.pop().expect("an E without its B");
                assert_eq!(n, name);
                assert!(ts >= t0, "{name}: ends at {ts} before its start {t0}");
            }
            ph => panic!("unexpected phase {ph}"),
        }
    }
    assert!(stacks.values().all(Vec::is_empty), "{stacks:?}");
    let calls: BTreeMap<String, u64> = report_of(&rep).into_iter().map(|(n, v)| (n, v.0)).collect();
    assert_eq!(begins, calls);
}

fn the_flame_graph_names_every_traced_function(tr: &str) {
    let svg = file("flame.svg", tr);
    let rep = file("flame-report.json", tr);
    let o = trace(
        tr,
        &[
            "--report",
            "--format",
            "json",
            "-o",
            rep.to_str().unwrap(),
            "--flame",
            svg.to_str().unwrap(),
        ],
        &trace_calls(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = read(&svg);
    assert!(text.starts_with("<?xml") && text.contains("<svg"), "{text}");
    let report = report_of(&rep);
    assert!(report.len() >= HAND_COUNTS.len());
    for name in report.keys() {
        assert!(
            text.contains(&format!("<title>{name} (")),
            "{name} not in the SVG"
        );
    }
}

/// Replaces the duration column (non-blank) by `TIME` and thread ids by
/// `TID` in the duration view.
fn normalize_durations(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with('#') || l.len() < 21 {
                return l.to_string();
            }
            let (dur, rest) = l.split_at(11);
            let dur = if dur.trim().is_empty() {
                dur.to_string()
            } else {
                "       TIME".to_string()
            };
            let (_, after) = rest.split_once(']').unwrap();
            format!("{dur} [   TID]{after}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn the_duration_view_is_exact(tr: &str) {
    let o = trace(tr, &["-F", "main"], &trace_det());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        normalize_durations(&String::from_utf8_lossy(&o.stdout)),
        "\
# DURATION     TID     FUNCTION
            [   TID] | main() {
            [   TID] |   top() {
            [   TID] |     middle() {
       TIME [   TID] |       leaf();
       TIME [   TID] |       leaf();
       TIME [   TID] |     } /* middle */
            [   TID] |     middle() {
       TIME [   TID] |       leaf();
       TIME [   TID] |       leaf();
       TIME [   TID] |     } /* middle */
       TIME [   TID] |   } /* top */
       TIME [   TID] | } /* main */"
    );
}

/// The line of `needle` in trace_det.c (1-based).
fn line_of(needle: &str) -> usize {
    read(&progs().join("trace_det.c"))
        .lines()
        .position(|l| l.starts_with(needle))
        .unwrap()
        + 1
}

fn the_call_tree_view_is_exact(tr: &str) {
    let o = trace(tr, &["-F", "main", "-T", "--no-pid", "-i"], &trace_det());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("+++")).collect();
    assert_eq!(
        lines.join("\n"),
        "\
==> main()
   ==> top()
      ==> middle()
         ==> leaf()
         <== leaf() [rax = 0x1]
         ==> leaf()
         <== leaf() [rax = 0x2]
      <== middle() [rax = 0x3]
      ==> middle()
         ==> leaf()
         <== leaf() [rax = 0x2]
         ==> leaf()
         <== leaf() [rax = 0x3]
      <== middle() [rax = 0x5]
   <== top() [rax = 0x8]
<== main() [rax = 0x0]"
    );
    // Addresses, source lines, the thread and the time of day.
    let o = trace(
        tr,
        &["-F", "main", "-T", "-l", "-u", "--offset", "1"],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let leaf = text.lines().find(|l| l.contains("==> leaf()")).unwrap();
    // [pid TID] HH:MM:SS.uuuuuu    ==> leaf() at 0xADDR [/…/trace_det.c:N]
    let (pid, rest) = leaf.split_once("] ").unwrap();
    assert!(pid.starts_with("[pid "), "{leaf}");
    let (clock, rest) = rest.split_at(16);
    assert!(
        clock.len() == 16 && clock.as_bytes()[2] == b':' && clock.as_bytes()[8] == b'.',
        "{leaf}"
    );
    assert!(rest.starts_with("   ==> leaf() at 0x"), "{leaf}");
    assert!(
        rest.ends_with(&format!("trace_det.c:{}]", line_of("NI int leaf("))),
        "{leaf}"
    );
}

fn the_report_is_exact(tr: &str) {
    let o = trace(tr, &["-F", "main", "--report"], &trace_det());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..2],
        [
            "  Total time   Self time       Calls  Function",
            "  ==========  ==========  ==========  ===================="
        ]
    );
    // Each row: two times (10 columns each, uftrace's units), the calls
    // (10 columns), the name.
    let rows: Vec<String> = lines[2..]
        .iter()
        .map(|l| {
            let (times, rest) = l.split_at(24);
            for t in [&times[2..12], &times[14..24]] {
                assert!(
                    t.ends_with(" us") || t.ends_with(" ms") || t.trim().is_empty(),
                    "{l}"
                );
            }
            rest.split_whitespace().collect::<Vec<_>>().join(" ")
        })
        .collect();
    assert_eq!(rows, ["1 main", "1 top", "2 middle", "4 leaf"]);
}

fn depth_and_min_duration_filters(tr: &str) {
    let o = trace(
        tr,
        &["-F", "main", "-T", "--no-pid", "-i", "--depth", "2"],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("+++")).collect();
    assert_eq!(
        lines.join("\n"),
        "==> main()\n   ==> top()\n   <== top() [rax = 0x8]\n<== main() [rax = 0x0]"
    );
    // --depth counts from the nearest call -F names (uftrace's -D with
    // -F): middle is one level below top, hidden; leaf, named too, is
    // shown inside it with its own depth.
    let o = trace(
        tr,
        &[
            "-F", "top", "-F", "leaf", "-T", "--no-pid", "-i", "--depth", "1",
        ],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("+++")).collect();
    assert_eq!(
        lines.join("\n"),
        "==> top()
   ==> leaf()
   <== leaf() [rax = 0x1]
   ==> leaf()
   <== leaf() [rax = 0x2]
   ==> leaf()
   <== leaf() [rax = 0x2]
   ==> leaf()
   <== leaf() [rax = 0x3]
<== top() [rax = 0x8]"
    );
    // -F middle: its calls and theirs.
    let o = trace(
        tr,
        &["-F", "middle", "--report", "--format", "json"],
        &trace_det(),
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["function"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{v}");
    assert!(names.contains(&"middle") && names.contains(&"leaf"), "{v}");
    // Calls shorter than an hour: none shown.
    let o = trace(
        tr,
        &["-F", "main", "-T", "--min-duration", "3600s"],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("==>"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // A minimum of 1 ns hides nothing.
    let o = trace(
        tr,
        &["-F", "main", "-T", "--min-duration", "1ns"],
        &trace_det(),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        text.lines().filter(|l| l.contains("==>")).count(),
        8,
        "{text}"
    );
}

fn a_custom_handler_logs_an_argument_of_one_function(tr: &str) {
    let args = repo().join("guests/trace/args.wat");
    let spec = format!("leaf={}", args.display());
    let o = trace(tr, &["-F", "main", "--handler", &spec], &trace_det());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = normalize_durations(&String::from_utf8_lossy(&o.stdout));
    let leaves: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("leaf"))
        .map(|l| l.split_once("| ").unwrap().1.trim())
        .collect();
    assert_eq!(
        leaves,
        [
            "leaf(0) = 1;",
            "leaf(1) = 2;",
            "leaf(1) = 2;",
            "leaf(2) = 3;"
        ]
    );
    assert!(text.contains("|     middle() {"), "{text}");
    // `--handler FILE`: for every function, in tracef's view.
    let o = trace(
        tr,
        &[
            "-F",
            "main",
            "--handler",
            args.to_str().unwrap(),
            "-T",
            "--no-pid",
            "-i",
        ],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        calls_only(&o.stdout),
        "\
==> main(1)
   ==> top(2)
      ==> middle(0)
         ==> leaf(0)
         <== leaf() [rax = 0x1] = 1
         ==> leaf(1)
         <== leaf() [rax = 0x2] = 2
      <== middle() [rax = 0x3] = 3
      ==> middle(1)
         ==> leaf(1)
         <== leaf() [rax = 0x2] = 2
         ==> leaf(2)
         <== leaf() [rax = 0x3] = 3
      <== middle() [rax = 0x5] = 5
   <== top() [rax = 0x8] = 8
<== main() [rax = 0x0] = 0"
    );
    // Errors: a pattern matching nothing, the default module twice.
    let o = trace(tr, &["--handler", "nomatch=x.wat"], &trace_det());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).ends_with("error: --handler nomatch=…: no traced function matches `nomatch`\n"),
        "{}",
        stderr(&o)
    );
    let a = args.to_str().unwrap();
    let o = trace(tr, &["--handler", a, "--handler", a], &trace_det());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).ends_with("error: --handler FILE (for every function) given twice\n"),
        "{}",
        stderr(&o)
    );
}

fn fork_children_have_their_own_trees(tr: &str) {
    let out = file("fork.txt", tr);
    let o = trace(
        tr,
        &["-f", "-T", "-o", out.to_str().unwrap()],
        &trace_fork(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = read(&out);
    let lines = tree_lines(&text, 3);
    let pid_of = |f: &str| -> Vec<i32> {
        lines
            .iter()
            .filter(|(_, _, b)| b.starts_with(&format!("==> {f}(")))
            .map(|l| l.0)
            .collect()
    };
    let parent = pid_of("parent_work");
    let child = pid_of("child_work");
    assert_eq!(parent.len(), 1, "{text}");
    assert_eq!(child.len(), 1, "{text}");
    assert_ne!(parent, child);
    // Each process its tree: the child's work returns in the child.
    assert!(
        lines
            .iter()
            .any(|(t, _, b)| *t == child[0] && b == "<== child_work() [rax = 0x2]"),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|(t, _, b)| *t == parent[0] && b == "<== main() [rax = 0x0]"),
        "{text}"
    );
    // With the call to fork traced: the child's tree starts with fork's
    // return (uftrace's `} /* fork */`), and the child's calls are
    // fork's siblings, not nested inside it. (perf reports no fork: a
    // child's tree starts empty there.)
    if tr == "perf" {
        return;
    }
    let o = trace(
        tr,
        &[
            "-f",
            "--plt",
            "-F",
            "main",
            "-T",
            "-i",
            "-o",
            out.to_str().unwrap(),
        ],
        &trace_fork(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = read(&out);
    let lines = tree_lines(&text, 3);
    let child = lines
        .iter()
        .find(|(_, _, b)| b.starts_with("==> child_work("))
        .map(|l| l.0)
        .unwrap_or_else(|| panic!("{text}"));
    let of_child: Vec<String> = lines
        .iter()
        .filter(|(t, _, b)| *t == child && !b.starts_with("+++"))
        .map(|(_, d, b)| format!("{d} {b}"))
        .filter(|l| {
            ["fork@plt(", "child_work(", "spawn(", "main("]
                .iter()
                .any(|f| l.contains(f))
        })
        .collect();
    let ok = |l: &str, want: &str| l == want || l.starts_with(&format!("{want} ["));
    assert!(
        of_child.len() == 5
            && ok(&of_child[0], "2 <== fork@plt()")
            && of_child[1] == "2 ==> child_work()"
            && of_child[2] == "2 <== child_work() [rax = 0x2]"
            && ok(&of_child[3], "1 <== spawn()")
            && ok(&of_child[4], "0 <== main()"),
        "{text}"
    );
    let parent: Vec<String> = lines
        .iter()
        .filter(|(t, _, b)| *t != child && !b.starts_with("+++"))
        .map(|(_, d, b)| format!("{d} {b}"))
        .filter(|l| {
            ["fork@plt(", "parent_work(", "spawn(", "main("]
                .iter()
                .any(|f| l.contains(f))
        })
        .filter(|l| l.contains("==>"))
        .collect();
    assert_eq!(
        parent,
        [
            "0 ==> main()",
            "1 ==> spawn()",
            "2 ==> fork@plt()",
            "2 ==> parent_work()"
        ],
        "{text}"
    );
}

fn per_thread_files_hold_each_threads_tree(tr: &str) {
    per_thread_files(tr, "ff", &["-T"], |text| {
        let lines = tree_lines(text, 3);
        (
            lines.iter().map(|(t, _, _)| *t).collect(),
            check_nesting(text).values().sum::<usize>(),
        )
    });
    // The duration view (each thread's held-back entry in its own file).
    per_thread_files(tr, "ffd", &[], |text| {
        let mut tids = Vec::new();
        let mut calls = 0;
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, rest) = l.split_once('[').expect(l);
            let (tid, body) = rest.split_once("] |").expect(l);
            tids.push(tid.trim().parse::<i32>().expect(l));
            let body = body.trim();
            if !body.starts_with('}') && (body.ends_with(';') || body.ends_with('{')) {
                calls += 1;
            }
        }
        (tids, calls)
    });
}

/// `--ff -o BASE` with `view_args`: one file per thread (5), each line of
/// which `parse` finds to be of the file's thread; four of them (the
/// workers) hold 11 calls each.
fn per_thread_files(
    tr: &str,
    name: &str,
    view_args: &[&str],
    parse: impl Fn(&str) -> (Vec<i32>, usize),
) {
    let base = file(name, tr);
    let dir = base.parent().unwrap().to_path_buf();
    let stem = base.file_name().unwrap().to_string_lossy().into_owned();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with(&format!("{stem}."))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let mut args = view_args.to_vec();
    args.extend(["--ff", "-o", base.to_str().unwrap()]);
    let o = trace(tr, &args, &trace_calls());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{stem}."))
        })
        .map(|e| e.path())
        .collect();
    assert_eq!(files.len(), 5, "{files:?}");
    let mut workers = 0;
    for f in &files {
        let text = read(f);
        let tid = f.extension().unwrap().to_string_lossy().into_owned();
        let (tids, calls) = parse(&text);
        assert!(!tids.is_empty(), "{}", f.display());
        for t in tids {
            assert_eq!(t.to_string(), tid, "{}", f.display());
        }
        if calls == 11 {
            workers += 1;
        }
    }
    assert_eq!(workers, 4, "{files:?}");
}

fn attaching_with_p_traces_new_calls_and_leaves_the_process_running(tr: &str) {
    let prog = crate::support::cli::slow_target();
    let n = 3000;
    let mut child = Command::new(&prog)
        .arg(n.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let pid = child.id().to_string();
    let out = file("attach.txt", tr);
    let _ = std::fs::remove_file(&out);
    let w = wprobe()
        .args([
            "trace",
            "--transport",
            tr,
            "-T",
            "-i",
            "-o",
            out.to_str().unwrap(),
            "-p",
            &pid,
        ])
        .env("WPROBE_PERF_RING_PAGES", "8192")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_work_calls(&out, 10, 5);
    let _ = Command::new("kill")
        .args(["-INT", &w.id().to_string()])
        .status();
    let o = crate::support::cli::output_within_child(w, 60);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = read(&out);
    check_nesting(&text);
    assert!(work_calls(&out) >= 10, "{text}\n{}", stderr(&o));
    let status = child.wait().unwrap();
    assert!(status.success());
    let mut s = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut s).unwrap();
    assert_eq!(s, format!("acc={}\n", (n - 1) * n / 2));
}

/// `tests/progs/selfref.c`: two functions whose first instruction is a
/// `lea` of their own address (one of them `lea; ret`, a single window
/// for its entry and return under inproc). Traced, the program computes
/// what it does untraced (under inproc the `lea` once pointed at the
/// stub's copy: the comparisons failed, and CPython looped for ever), and
/// every call is counted.
fn functions_taking_their_own_address_still_get_it(tr: &str) {
    let prog = gcc("selfref", &progs().join("selfref.c"), &["-O1", "-g"]);
    let out = file("selfref.json", tr);
    let o = trace_argv(
        tr,
        &["--report", "--format", "json", "-o", out.to_str().unwrap()],
        &prog,
        &["5"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "10\n", "{}", stderr(&o));
    let r = report_of(&out);
    assert_eq!(r.get("is_self").map(|c| c.0), Some(5), "{r:?}");
    assert_eq!(r.get("self_addr").map(|c| c.0), Some(5), "{r:?}");
}

/// `tests/progs/flags_calls.c`: each arithmetic flag and DF, alone and
/// together, set before a traced function's entry window and again before
/// its return window, is what the function and its caller see after each
/// (the in-process fast path saves the flags with `pushfq` and puts back
/// what its call can change with `sahf`, `std` and an `add` for OF; the
/// first round takes the full path, the next ones, after the program's
/// pause past wprobe's first clock anchor, the fast one: with the fast
/// path's restore of OF and DF left out, those rounds print 0x0 for
/// them); all 3 × 10 calls traced and returned.
fn the_flags_survive_a_traced_calls_entry_and_return(tr: &str) {
    let prog = gcc("flags_calls", &progs().join("flags_calls.c"), &["-O1"]);
    let untraced = std::process::Command::new(&prog).arg("3").output().unwrap();
    assert!(untraced.status.success());
    let want = String::from_utf8_lossy(&untraced.stdout).into_owned();
    // The premise: each line shows a flag setting come back as it was set.
    for l in want.lines() {
        let w: Vec<&str> = l.split(' ').collect();
        assert_eq!((w[0], w[2]), (w[1], w[3]), "{want}");
    }
    let out = file("flags_calls.json", tr);
    let o = trace_argv(
        tr,
        &["--report", "--format", "json", "-o", out.to_str().unwrap()],
        &prog,
        &["3"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), want, "{}", stderr(&o));
    let r = report_of(&out);
    assert_eq!(r.get("flags_pass").map(|c| c.0), Some(30), "{r:?}");
    assert_eq!(r.get("flags_round").map(|c| c.0), Some(30), "{r:?}");
}

/// `tests/progs/short_funcs.c` under inproc: forty functions too short
/// for a jump, an `int3` at each of their 80 sites. wprobe says so in one
/// line naming 30 of them (libc traced with `--lib` has 90 such sites: one
/// line each was a screenful; a Rust program has thousands), and with
/// `WPROBE_DEBUG` a line per site and, at the end, the stops they cost and
/// the busiest sites; every call is traced either way.
fn many_trap_sites_are_said_in_one_line() {
    let prog = gcc("short_funcs", &progs().join("short_funcs.c"), &["-O1"]);
    let names: Vec<String> = (0..40).map(|k| format!("s{k}")).collect();
    for debug in [false, true] {
        let out = file(&format!("short{debug}.json"), "inproc");
        let mut c = wprobe();
        c.args([
            "trace",
            "--transport",
            "inproc",
            "--report",
            "--format",
            "json",
            "-o",
        ])
        .arg(&out)
        .args(["-X", "_*", "-X", "*tm_clones", "-X", "frame_dummy", "--"])
        .arg(&prog)
        .arg("4")
        .current_dir(scratch());
        if debug {
            c.env("WPROBE_DEBUG", "1");
        }
        let o = output_within(c, 120);
        let err = stderr(&o);
        assert!(o.status.success(), "{err}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "3360\n", "{err}");
        let per_site = err
            .lines()
            .filter(|l| l.contains(": no jump can go there ("))
            .count();
        let grouped: Vec<&str> = err
            .lines()
            .filter(|l| l.contains(": no jump can go at "))
            .collect();
        if debug {
            assert_eq!(per_site, 80, "{err}");
            assert!(grouped.is_empty(), "{err}");
            // Each call stops twice (its entry and its `ret`): 40 × 4 × 2.
            assert!(
                err.lines().any(|l| l.starts_with("wprobe: debug: process ")
                    && l.contains(": 320 ptrace stops at trap sites; the busiest: ")
                    && l.matches(" (4)").count() == 10),
                "{err}"
            );
        } else {
            assert_eq!(per_site, 0, "{err}");
            assert_eq!(grouped.len(), 1, "{err}");
            let line = grouped[0];
            let head = ": no jump can go at 80 sites (a function too short for one, or code \
                        branching into the bytes it would replace): a trap (`hlt`) at each \
                        instead, a ptrace stop per hit; in 40 functions: ";
            let tail = " and 10 more (WPROBE_DEBUG=1 lists each site and why)";
            assert!(line.starts_with("wprobe: process "), "{line}");
            let (_, listed) = line.split_once(head).unwrap_or_else(|| panic!("{line}"));
            let listed = listed
                .strip_suffix(tail)
                .unwrap_or_else(|| panic!("{line}"));
            let listed: Vec<&str> = listed.split(", ").collect();
            assert_eq!(listed.len(), 30, "{line}");
            assert!(
                listed.iter().all(|n| names.iter().any(|m| m == n)),
                "{line}"
            );
        }
        let r = report_of(&out);
        for n in &names {
            assert_eq!(r.get(n.as_str()).map(|c| c.0), Some(4), "{n}: {r:?}");
        }
    }
}

/// The call tree (`-T --no-pid -i`) of the calls under `func` in `prog
/// ARGS` traced under `tr`, and wprobe's standard error; the run must
/// succeed and the program print `stdout`.
fn tree_under(tr: &str, func: &str, prog: &Path, args: &[&str], stdout: &str) -> (String, String) {
    let out = file(&format!("{func}.tree"), tr);
    let o = trace_argv(
        tr,
        &[
            "-F",
            func,
            "-T",
            "--no-pid",
            "-i",
            "-o",
            out.to_str().unwrap(),
        ],
        prog,
        args,
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), stdout, "{err}");
    (read(&out), err)
}

/// `tests/progs/tail_plt.c`, linked with libtail.so: `wrap` ends in `jmp
/// lib_twice@plt` and `alloc` in `jmp malloc@plt`, neither has a `ret`.
/// ptrace sees their returns at the return address; inproc through the
/// `ret`s of `lib_twice` and `malloc`, found in their modules (these calls
/// were shown unwound, and functions with no `ret` not traced: a Rust
/// program's allocator shims, C++ deleting destructors); perf, which would
/// pay a uprobe at every return of `malloc` in the process, lists them as
/// not traced.
/// `tests/progs/tail_plt.c` built as `name` with `flags` (and -O2), linked
/// with libtail.so (`tests/progs/libtail.c`), found through its rpath.
fn tail_plt(name: &str, flags: &[&str]) -> PathBuf {
    let dir = scratch();
    let _lib = gcc(
        "libtail.so",
        &progs().join("libtail.c"),
        &["-O1", "-shared", "-fPIC"],
    );
    let link = [
        format!("-L{}", dir.display()),
        "-Wl,--no-as-needed".into(),
        "-l:libtail.so".into(),
        format!("-Wl,-rpath,{}", dir.display()),
    ];
    let mut all = vec!["-O2"];
    all.extend_from_slice(flags);
    all.extend(link.iter().map(String::as_str));
    gcc(name, &progs().join("tail_plt.c"), &all)
}

fn tail_calls_into_another_module_are_seen_returning(tr: &str) {
    let prog = tail_plt("tail_plt", &[]);
    let (text, err) = tree_under(tr, "main", &prog, &["3"], "18\n");
    // The values of `alloc` (a pointer) vary: only that it returned one.
    let lines: Vec<String> = text
        .lines()
        .map(|l| match l.split_once("<== alloc() [rax = 0x") {
            Some((pre, _)) => format!("{pre}<== alloc() [rax = P]"),
            None => l.to_string(),
        })
        .collect();
    let call = |i: u64| {
        vec![
            "   ==> alloc()".to_string(),
            "   <== alloc() [rax = P]".to_string(),
            "   ==> twice_plus()".to_string(),
            "      ==> wrap()".to_string(),
            format!("      <== wrap() [rax = {:#x}]", 2 * (i + 1)),
            format!("   <== twice_plus() [rax = {:#x}]", 2 * i + 3),
        ]
    };
    let no_tail = |i: u64| {
        vec![
            "   ==> twice_plus()".to_string(),
            format!("   <== twice_plus() [rax = {:#x}]", 2 * i + 3),
        ]
    };
    let body: Vec<String> = (0..3)
        .flat_map(|i| if tr == "perf" { no_tail(i) } else { call(i) })
        .collect();
    let mut want = vec!["==> main()".to_string()];
    want.extend(body);
    want.push("<== main() [rax = 0x0]".to_string());
    let got: Vec<&String> = lines.iter().filter(|l| !l.starts_with("+++")).collect();
    assert_eq!(got, want.iter().collect::<Vec<_>>(), "{text}\n{err}");
    let no_ret: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("wprobe: not traced (it has no `ret` instruction"))
        .collect();
    if tr == "perf" {
        assert_eq!(no_ret.len(), 1, "{err}");
        assert!(
            no_ret[0].ends_with(": wrap, alloc") || no_ret[0].ends_with(": alloc, wrap"),
            "{err}"
        );
    } else {
        assert!(no_ret.is_empty(), "{err}");
    }
}

/// `tests/progs/switchy.c`: `pick` is a `switch` on a jump table whose
/// cases return in the middle of the function. Under inproc the windows at
/// those `ret`s (with the instruction before) were refused, the function
/// having an indirect `jmp`, and each became an `int3`; the table's
/// targets are read now, and every `ret` takes a jump. Every transport
/// gives the same values.
fn a_switchs_returns_take_jumps(tr: &str) {
    let prog = gcc("switchy", &progs().join("switchy.c"), &["-O2"]);
    let (text, err) = tree_under(tr, "pick", &prog, &["9"], "1084\n");
    assert!(!err.contains("no jump can go"), "{err}");
    let want: Vec<String> = [11u32, 3, 0xffff_fffb, 42, 4 ^ 5, 20, 13, 1000, 0xffff_ffff]
        .iter()
        .flat_map(|v| {
            [
                "==> pick()".to_string(),
                format!("<== pick() [rax = {v:#x}]"),
            ]
        })
        .collect();
    let got: Vec<&str> = text.lines().filter(|l| !l.starts_with("+++")).collect();
    assert_eq!(got, want, "{text}\n{err}");
}

/// `tests/progs/tail_plt.c` stripped (no function symbols, as the
/// programs of a distribution) traced with `--lib libtail*`: its library's
/// functions by name, its own by address (`sub_ADDR`). Under ptrace, which arms at the command's exec,
/// before the dynamic linker maps its libraries, nothing could be armed
/// yet and wprobe gave up ("no function could be traced"); the library's
/// probes are armed when it is mapped now.
fn a_stripped_program_is_traced_in_its_libraries(tr: &str) {
    let prog = tail_plt("tail_plt_stripped", &["-s"]);
    let out = file("stripped.json", tr);
    let o = trace_argv(
        tr,
        &[
            "--lib",
            "libtail*",
            "-X",
            "_init",
            "-X",
            "_fini",
            "-X",
            "*tm_clones",
            "-X",
            "__do_global_dtors_aux",
            "-X",
            "frame_dummy",
            "--report",
            "--format",
            "json",
            "-o",
            out.to_str().unwrap(),
        ],
        &prog,
        &["3"],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "18\n", "{err}");
    let r = report_of(&out);
    let calls: Vec<(&str, u64)> = r.iter().map(|(f, c)| (f.as_str(), c.0)).collect();
    let named: Vec<&(&str, u64)> = calls.iter().filter(|c| !c.0.starts_with("sub_")).collect();
    assert_eq!(named, [&("lib_twice", 3)], "{err}");
    // Its own functions, which no symbol names, by address: `main` once,
    // `twice_plus`, `wrap` and `alloc` three times (the last two end in
    // tail calls into other modules: not traced under perf).
    let mut own: Vec<u64> = calls
        .iter()
        .filter(|c| c.0.starts_with("sub_"))
        .map(|c| c.1)
        .collect();
    own.sort_unstable();
    let want: &[u64] = if tr == "perf" { &[1, 3] } else { &[1, 3, 3, 3] };
    assert_eq!(own, want, "{calls:?}\n{err}");
}

/// `tests/progs/ret_targets.c`: `untrack` and `trash_end` have a `ret` a
/// `je` lands on, with no room after it for a jump (CPython's
/// `PyObject_GC_UnTrack` and `_PyTrash_end`, two thirds of the ptrace
/// stops of a traced `python3 -c pass`); `add_words` has a loop between
/// its entry and its `ret`, entered by a `jmp` forward, and a `jle` to its
/// `ret` (OpenSSL's `bn_add_words` in Node.js); `pick8` returns from the
/// cases of a jump table indexed by a byte it checked as a byte (V8's
/// deserializer, the busiest trap site of a traced `node`), `pickm` by a
/// byte it checked in memory (OpenSSL's `asn1_item_embed_d2i`); `vtail`
/// has a `ret` in its middle and ends in a tail call through a pointer it
/// was given (CPython's traverse functions), which is not a jump table's
/// `jmp`. Under inproc
/// each was an `int3`; now the windows take the branches and the loop,
/// the table is read, and no site traps. Every transport gives the same
/// values, on every path.
fn rets_a_branch_lands_on_take_jumps(tr: &str) {
    let prog = gcc(
        "ret_targets",
        &progs().join("ret_targets.c"),
        &["-O2", "-no-pie"],
    );
    let want: [(&str, [u64; 6]); 5] = [
        ("untrack", [0, 46, 0, 48, 0, 50]),
        ("trash_end", [0xffff_ffff, 100, 1, 2, 3, 4]),
        ("add_words", [0, 1, 1, 0, 0, 1]),
        ("pick8", [1, 2, (-2i64) as u64, 77, u64::MAX, 6]),
        ("pickm", [1, 2, (-2i64) as u64, 77, u64::MAX, 6]),
    ];
    for (func, values) in want {
        let (text, err) = tree_under(tr, func, &prog, &["6"], "482\n");
        assert!(!err.contains("no jump can go"), "{err}");
        let got: Vec<&str> = text.lines().filter(|l| !l.starts_with("+++")).collect();
        assert_eq!(got, calls_returning(func, &values), "{text}\n{err}");
    }
    // `vtail`'s calls that went on in `thrice` return with its value.
    let (text, err) = tree_under(tr, "vtail", &prog, &["6"], "482\n");
    assert!(!err.contains("no jump can go"), "{err}");
    let want: Vec<String> = [0u64, 1, 2, 0, 4, 5]
        .iter()
        .flat_map(|&x| match x {
            0 => vec![
                "==> vtail()".to_string(),
                "<== vtail() [rax = 0x5]".to_string(),
            ],
            x => vec![
                "==> vtail()".to_string(),
                "   ==> thrice()".to_string(),
                format!("   <== thrice() [rax = {:#x}]", 3 * x),
                format!("<== vtail() [rax = {:#x}]", 3 * x),
            ],
        })
        .collect();
    let got: Vec<&str> = text.lines().filter(|l| !l.starts_with("+++")).collect();
    assert_eq!(got, want, "{text}\n{err}");
}

/// `tests/progs/tail_unnamed.c`, bound lazily, its functions exported
/// (`-rdynamic`), stripped (`-s`) when `strip`; linked with libifunc.so
/// (`tests/progs/libifunc.c`, stripped), found through its rpath.
fn tail_unnamed(strip: bool) -> PathBuf {
    let dir = scratch();
    let _lib = gcc(
        "libifunc.so",
        &progs().join("libifunc.c"),
        &["-O2", "-shared", "-fPIC", "-s"],
    );
    let lib = format!("-L{}", dir.display());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let mut flags = vec!["-O2", "-rdynamic", "-Wl,-z,lazy"];
    if strip {
        flags.push("-s");
    }
    flags.extend([
        lib.as_str(),
        "-Wl,--no-as-needed",
        "-l:libifunc.so",
        rpath.as_str(),
    ]);
    let name = if strip {
        "tail_unnamed"
    } else {
        "tail_unnamed_g"
    };
    gcc(name, &progs().join("tail_unnamed.c"), &flags)
}

/// The lines of `-T --no-pid -i` for calls of `func` returning `values`,
/// one after the other.
fn calls_returning(func: &str, values: &[u64]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| {
            [
                format!("==> {func}()"),
                format!("<== {func}() [rax = {v:#x}]"),
            ]
        })
        .collect()
}

/// `tests/progs/tail_unnamed.c`, stripped (`-s`, its functions exported
/// with `-rdynamic`), bound lazily, and its library `libifunc.c`,
/// stripped: `via_hidden` ends in `jmp hidden` (a static function no
/// symbol names), `via_ifunc` in `jmp lib_thrice@plt` and `via_got` in
/// `jmp *lib_four@GOTPCREL(%rip)` (IFUNCs, whose implementations have no
/// symbol either). None has a `ret`: their returns are the `ret`s of the
/// functions they jump to, bounded by their unwind table entries; the
/// IFUNCs' implementations found where the library's IRELATIVE slot
/// (`lib_thrice`, whose PLT slot in the program is not bound yet at
/// start) or the program's GOT slot (`lib_four`) points. ptrace and
/// inproc see every return, with its value; perf sees `via_hidden`'s and
/// lists the other two as not traced (a uprobe in another module would
/// cost its calls from anywhere). Before, inproc and perf traced none of
/// them (no `ret` found).
fn tail_calls_into_unnamed_functions_are_seen_returning(tr: &str) {
    let prog = tail_unnamed(true);
    let want = [
        ("via_hidden", [6u64, 11, 16, 21]),
        ("via_ifunc", [6, 9, 12, 15]),
        ("via_got", [12, 16, 20, 24]),
    ];
    for (func, values) in want {
        let (text, err) = tree_under(tr, func, &prog, &["4"], "168\n");
        // `hidden`, which `via_hidden` calls, is traced too, by address
        // (the next test).
        let got: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("+++") && !l.contains("sub_"))
            .collect();
        let refused = err
            .lines()
            .any(|l| l.starts_with("wprobe: not traced") && l.contains(func));
        if tr == "perf" && func != "via_hidden" {
            assert!(got.is_empty() && refused, "{text}\n{err}");
            continue;
        }
        assert!(!refused, "{err}");
        assert_eq!(got, calls_returning(func, &values), "{text}\n{err}");
    }
}

/// The stripped `tail_unnamed` of the previous test: its static `hidden`
/// has no symbol, and is traced as `sub_ADDR` (its link-time address, read
/// from the same program built unstripped), bounded by its unwind table
/// entry, with the calls `via_hidden` makes; the entry point, which has
/// no symbol either, is `_start`, not traced. Before, such a function was
/// not traced at all, and a program stripped whole was refused.
fn functions_no_symbol_names_are_traced_by_address(tr: &str) {
    let prog = tail_unnamed(true);
    let named = tail_unnamed(false);
    let info = wprobe_elf::ElfInfo::open(&named).unwrap();
    let hidden = info
        .symbols
        .iter()
        .find(|s| s.name.starts_with("hidden") && s.size > 0)
        .expect("hidden's symbol in the unstripped build");
    let out = file("unnamed.json", tr);
    let o = trace_argv(
        tr,
        &["--report", "--format", "json", "-o", out.to_str().unwrap()],
        &prog,
        &["4"],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "168\n", "{err}");
    assert!(
        err.lines().any(
            |l| l.starts_with("wprobe: not traced (C start-up code") && l.ends_with(": _start")
        ),
        "{err}"
    );
    let r = report_of(&out);
    let calls = |f: &str| r.get(f).map(|c| c.0);
    let sub = format!("sub_{:x}", hidden.value);
    assert_eq!(calls(&sub), Some(4), "{sub}: {r:?}\n{err}");
    assert_eq!(calls("via_hidden"), Some(4), "{r:?}\n{err}");
    assert_eq!(calls("main"), Some(1), "{r:?}\n{err}");
}

/// `-F _start`: a probe at the command's entry point, where the launch's
/// own breakpoint stops it once the dynamic linker has run. Under perf the
/// uprobe armed there first made the command run past that breakpoint:
/// wprobe reported "process N died" and traced nothing. The probe is
/// armed at the entry point now; the command runs to its end.
fn a_probe_at_the_entry_point_leaves_the_command_running(tr: &str) {
    let prog = gcc("trace_tailout", &progs().join("trace_tailout.c"), &["-O2"]);
    let o = trace_argv(
        tr,
        &["-F", "_start", "--report", "-o", "/dev/null"],
        &prog,
        &["4"],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "72\n", "{err}");
    assert!(!err.contains("died"), "{err}");
}

/// `tests/progs/trace_tailout.c` traced with `-X leaf -X k`: calls that
/// leave by a tail call into code not traced. `f` (no `ret` at all, only
/// `jmp *fp`) is traced by ptrace (a breakpoint at the return address sees
/// every return) and by inproc (a continuation site after `main`'s `call
/// f`), with `leaf`'s values, never unwound; perf says it cannot and shows
/// none of its calls (under inproc, before continuation sites, its entry
/// probe once stayed on: every call left a frame open). `g`'s odd
/// calls leave by `jmp *fp`: ptrace sees them return at the return
/// address, inproc at the instruction after `main`'s `call g` (a
/// continuation site, planned because `g` tail-calls through a pointer;
/// they were shown unwound before), both with `leaf`'s value; perf does
/// not see them (unwound), and `h` nests in the unwound `g` there
/// (docs/trace.md, Limits).
fn calls_leaving_by_a_tail_call_out_of_traced_code(tr: &str) {
    let prog = gcc("trace_tailout", &progs().join("trace_tailout.c"), &["-O2"]);
    let out = file("tailout.txt", tr);
    let o = trace_argv(
        tr,
        &[
            "-X",
            "leaf",
            "-X",
            "k",
            "-T",
            "-i",
            "-o",
            out.to_str().unwrap(),
        ],
        &prog,
        &["4"],
    );
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "72\n", "{err}");
    let text = read(&out);
    check_nesting(&text);
    let depths = |f: &str| -> Vec<usize> {
        tree_lines(&text, 3)
            .into_iter()
            .filter(|(_, _, b)| b.starts_with(&format!("==> {f}()")))
            .map(|(_, d, _)| d)
            .collect()
    };
    let f_refused = err
        .lines()
        .any(|l| l.starts_with("wprobe: not traced") && l.ends_with(": f"));
    if tr == "perf" {
        assert_eq!(depths("f"), [0usize; 0], "{text}");
        assert!(f_refused, "{err}");
    } else {
        assert_eq!(depths("f"), [1, 1, 1, 1], "{text}");
        assert!(!f_refused, "{err}");
        assert!(!text.contains("[unwound"), "{text}");
        let f: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once("<== f() ").map(|(_, v)| v))
            .collect();
        assert_eq!(
            f,
            ["[rax = 0x3]", "[rax = 0x6]", "[rax = 0x9]", "[rax = 0xc]"],
            "{text}"
        );
    }
    if tr == "perf" {
        assert_eq!(text.matches("<== g() [unwound]").count(), 2, "{text}");
    } else {
        // Under inproc the odd ones are seen returning at `main`'s
        // instruction after `call g` (a continuation site), with the value
        // `leaf` gave.
        let g: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once("<== g() ").map(|(_, v)| v))
            .collect();
        assert_eq!(
            g,
            ["[rax = 0x5]", "[rax = 0x3]", "[rax = 0x7]", "[rax = 0x9]"],
            "{text}"
        );
    }
    assert_eq!(depths("g"), [1, 1, 1, 1], "{text}");
    let h = if tr == "perf" {
        [1, 2, 1, 2]
    } else {
        [1, 1, 1, 1]
    };
    assert_eq!(depths("h"), h, "{text}");
}

/// A terminal's Ctrl-C: SIGINT to the foreground process group, wprobe
/// and the command it launched alike. The trace ends as an interrupted
/// one (status 130, the summary, the tree written, well nested), with no
/// error (the command dying at the same time leaves nothing to restore)
/// and no warning about calls not tracked (calls still open are the
/// tree's, not missed ones).
fn a_terminals_ctrl_c_ends_the_trace_cleanly(tr: &str) {
    use std::os::unix::process::CommandExt;
    let prog = crate::support::cli::slow_target();
    let out = file("ctrl-c.txt", tr);
    let _ = std::fs::remove_file(&out);
    let w = wprobe()
        .args(["trace", "--transport", tr, "-T", "-i", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .arg("100000")
        .env("WPROBE_PERF_RING_PAGES", "8192")
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_work_calls(&out, 10, 20);
    let st = Command::new("kill")
        .args(["-INT", "--", &format!("-{}", w.id())])
        .status()
        .unwrap();
    assert!(st.success());
    let o = crate::support::cli::output_within_child(w, 60);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(!err.contains("error"), "{err}");
    assert!(!err.contains("not tracked to their return"), "{err}");
    assert!(err.contains("wprobe: trace: "), "{err}");
    let text = read(&out);
    check_nesting(&text);
    assert!(work_calls(&out) >= 10, "{text}\n{err}");
}

/// Calls of `work` (`==> work()` lines) in the `-T` output at `p` so far.
fn work_calls(p: &Path) -> usize {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("==> work()"))
        .count()
}

/// Waits until the `-T` output at `p` holds `n` calls of `work`, at most
/// `secs` seconds (arming takes a while under perf).
fn wait_for_work_calls(p: &Path, n: usize, secs: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while work_calls(p) < n && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The lines of a `-T` output other than the `+++ process … +++` ones.
fn calls_only(text: &[u8]) -> String {
    String::from_utf8_lossy(text)
        .lines()
        .filter(|l| !l.starts_with("+++"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn lib_traces_the_functions_of_linked_and_dlopened_libraries(tr: &str) {
    let (lib, linked, dl) = libshared();
    // A library the executable links, named by its short name: lib_fn(x)
    // returns 3x + 1.
    let out = file("lib-linked.txt", tr);
    let o = trace_argv(
        tr,
        &[
            "--lib",
            "libtrace_shared",
            "-F",
            "main",
            "-T",
            "--no-pid",
            "-i",
            "-o",
            out.to_str().unwrap(),
        ],
        &linked,
        &["3"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "sum=12\n");
    assert_eq!(
        calls_only(read(&out).as_bytes()),
        "\
==> main()
   ==> lib_fn()
   <== lib_fn() [rax = 0x1]
   ==> lib_fn()
   <== lib_fn() [rax = 0x4]
   ==> lib_fn()
   <== lib_fn() [rax = 0x7]
<== main() [rax = 0x0]",
        "{}",
        stderr(&o)
    );
    // By a wildcard, with the report.
    let out = file("lib-glob.json", tr);
    let o = trace_argv(
        tr,
        &[
            "--lib",
            "libtrace_sh*",
            "-F",
            "lib_fn",
            "--report",
            "--format",
            "json",
            "-o",
            out.to_str().unwrap(),
        ],
        &linked,
        &["4"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let calls: Vec<(String, u64)> = report_of(&out).into_iter().map(|(n, v)| (n, v.0)).collect();
    assert_eq!(calls, [("lib_fn".to_string(), 4)]);
    // A library loaded with dlopen after start, named by its path.
    let out = file("lib-dl.json", tr);
    let o = trace_argv(
        tr,
        &[
            "--lib",
            lib.to_str().unwrap(),
            "-F",
            "lib_fn",
            "--report",
            "--format",
            "json",
            "-o",
            out.to_str().unwrap(),
        ],
        &dl,
        &["5", lib.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "sum=35\n");
    let calls: Vec<(String, u64)> = report_of(&out).into_iter().map(|(n, v)| (n, v.0)).collect();
    assert_eq!(calls, [("lib_fn".to_string(), 5)], "{}", stderr(&o));
    // Without --lib, the library's functions are not traced.
    let out = file("lib-none.txt", tr);
    let o = trace_argv(
        tr,
        &[
            "-T",
            "--no-pid",
            "-i",
            "-F",
            "main",
            "-o",
            out.to_str().unwrap(),
        ],
        &linked,
        &["2"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        calls_only(read(&out).as_bytes()),
        "==> main()\n<== main() [rax = 0x0]"
    );
}

fn excluded_functions_are_not_traced(tr: &str) {
    let o = trace(
        tr,
        &[
            "-F", "main", "-X", "leaf", "-X", "mid*", "-T", "--no-pid", "-i",
        ],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        calls_only(&o.stdout),
        "==> main()\n   ==> top()\n   <== top() [rax = 0x8]\n<== main() [rax = 0x0]"
    );
    // Excluded functions are not traced, not listed as untraceable.
    let err = stderr(&o);
    assert!(!err.contains("leaf") && !err.contains("middle"), "{err}");
    assert!(
        err.contains("wprobe: trace: 2 calls (2 returned, 0 unwound)")
            || err.contains(&format!(
                "wprobe: trace: {} calls ({0} returned, 0 unwound)",
                2 + CRT.len()
            )),
        "{err}"
    );
}

fn aliases() -> PathBuf {
    gcc("aliases", &progs().join("aliases.c"), &["-O0"])
}

/// One function under two names (`__count_impl` and its alias `count`,
/// tests/progs/aliases.c): traced once, under its public name (the fewest
/// leading underscores); `-F` and `-X` by either name select it.
fn aliases_are_one_function_any_of_whose_names_selects_it(tr: &str) {
    let prog = aliases();
    for name in ["count", "__count_impl", "__count*"] {
        let o = trace(tr, &["-F", name, "-T", "--no-pid", "-i"], &prog);
        assert_eq!(o.status.code(), Some(0), "-F {name}: {}", stderr(&o));
        assert_eq!(
            calls_only(&o.stdout),
            "==> count()\n<== count() [rax = 0x1]\n\
             ==> count()\n<== count() [rax = 0x2]\n\
             ==> count()\n<== count() [rax = 0x3]",
            "-F {name}"
        );
    }
    for name in ["count", "__count_impl"] {
        let o = trace(
            tr,
            &["-F", "main", "-X", name, "-T", "--no-pid", "-i"],
            &prog,
        );
        assert_eq!(o.status.code(), Some(0), "-X {name}: {}", stderr(&o));
        assert_eq!(
            calls_only(&o.stdout),
            "==> main()\n<== main() [rax = 0x0]",
            "-X {name}"
        );
    }
}

/// `wprobe list` shows a function under each of its names, a row each
/// (as `nm` and `bpftrace -l` do), at one address.
fn list_shows_each_name_of_a_function() {
    let o = wprobe()
        .args(["list", "--no-demangle"])
        .arg(aliases())
        .arg("*count*")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<(&str, &str)> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("address"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0], f[f.len() - 1])
        })
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!(rows[0].0, rows[1].0, "{text}");
    assert_eq!([rows[0].1, rows[1].1], ["__count_impl", "count"], "{text}");
}

/// The local time of day, `HH:MM:SS`.
/// `-N` (uftrace's): a call of a matching function is hidden with every
/// call inside it; `-X` hides only the function (its callees move up).
fn notrace_hides_a_function_and_everything_it_calls(tr: &str) {
    let o = trace(
        tr,
        &["-F", "main", "-N", "mid*", "-T", "--no-pid", "-i"],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        calls_only(&o.stdout),
        "==> main()\n   ==> top()\n   <== top() [rax = 0x8]\n<== main() [rax = 0x0]"
    );
    // The hidden calls were traced (counted), only not shown.
    let err = stderr(&o);
    assert!(
        err.contains("wprobe: trace: 8 calls (8 returned, 0 unwound)")
            || err.contains(&format!(
                "wprobe: trace: {} calls ({0} returned, 0 unwound)",
                8 + CRT.len()
            )),
        "{err}"
    );
    let o = trace(
        tr,
        &["-F", "main", "-X", "middle", "-T", "--no-pid", "-i"],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        calls_only(&o.stdout),
        "\
==> main()
   ==> top()
      ==> leaf()
      <== leaf() [rax = 0x1]
      ==> leaf()
      <== leaf() [rax = 0x2]
      ==> leaf()
      <== leaf() [rax = 0x2]
      ==> leaf()
      <== leaf() [rax = 0x3]
   <== top() [rax = 0x8]
<== main() [rax = 0x0]"
    );
    // Of a -F and a -N naming one function, the later one counts
    // (uftrace's rule): middle named by -N, then by -F, is shown with its
    // calls; named by -F, then by -N, hidden.
    let o = trace(
        tr,
        &[
            "-N", "mid*", "-F", "main", "-F", "middle", "-T", "--no-pid", "-i",
        ],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        calls_only(&o.stdout),
        "\
==> main()
   ==> top()
      ==> middle()
         ==> leaf()
         <== leaf() [rax = 0x1]
         ==> leaf()
         <== leaf() [rax = 0x2]
      <== middle() [rax = 0x3]
      ==> middle()
         ==> leaf()
         <== leaf() [rax = 0x2]
         ==> leaf()
         <== leaf() [rax = 0x3]
      <== middle() [rax = 0x5]
   <== top() [rax = 0x8]
<== main() [rax = 0x0]"
    );
    let o = trace(
        tr,
        &[
            "-F", "main", "-F", "middle", "-N", "mid*", "-T", "--no-pid", "-i",
        ],
        &trace_det(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        calls_only(&o.stdout),
        "==> main()\n   ==> top()\n   <== top() [rax = 0x8]\n<== main() [rax = 0x0]"
    );
    let o = trace(tr, &["-N", "nothing*"], &trace_det());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).ends_with("error: -N nothing*: no traced function matches\n"),
        "{}",
        stderr(&o)
    );
}

/// GCC's `.cold` fragments (`work.cold`, `main.cold`, built at -O2) are
/// parts of their function: not shown as calls, the calls made in them
/// nested in their function's call, their `ret`s their function's; in a
/// stripped build too, where no symbol names them (when their unwind
/// entries start inside a frame).
fn cold_fragments_are_parts_of_their_function(tr: &str) {
    let prog = gcc("trace_cold", &progs().join("trace_cold.c"), &["-O2", "-g"]);
    let syms = Command::new("nm").arg(&prog).output().unwrap();
    let syms = String::from_utf8_lossy(&syms.stdout);
    assert!(
        syms.contains(" work.cold\n") && syms.contains(" main.cold\n"),
        "gcc -O2 made no .cold fragments:\n{syms}"
    );
    let o = trace(tr, &["-F", "main", "-T", "--no-pid", "-i"], &prog);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let want = "\
==> main()
   ==> work()
      ==> report()
      <== report() [rax = 0x7]
   <== work() [rax = 0x1]
   ==> work()
   <== work() [rax = 0x0]
   ==> work()
   <== work() [rax = 0x2]
   ==> work()
   <== work() [rax = 0x4]
<== main() [rax = 0x0]";
    assert_eq!(calls_only(&o.stdout), want);
    let err = stderr(&o);
    assert!(err.contains("odd -1\n") && !err.contains(".cold"), "{err}");
    // Stripped: the functions by address, no fragment among them.
    let stripped = scratch().join(format!("trace_cold_stripped_{tr}"));
    let st = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&prog)
        .status()
        .unwrap();
    assert!(st.success());
    let o = trace(tr, &["--report"], &stripped);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report = String::from_utf8_lossy(&o.stdout);
    let names: Vec<&str> = report
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    let sym = |name: &str| -> String {
        let addr = syms
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .and_then(|l| l.split_whitespace().next())
            .unwrap();
        format!("sub_{}", addr.trim_start_matches('0'))
    };
    for f in ["main", "work", "report"] {
        assert!(names.contains(&sym(f).as_str()), "{f}: {report}");
    }
    // `main.cold` runs in main's frame (its unwind entry says so). A
    // fragment entered before its function sets up a frame (GCC may move
    // all of work's unlikely path, prologue and `ret` included, into
    // `work.cold`) looks like a function to the unwind table, and is shown
    // as a tail call when stripped.
    assert!(!names.contains(&sym("main.cold").as_str()), "{report}");
}

/// `_setjmp` is traced (uftrace traces it): its first return is its
/// call's; the `longjmp` back to it closes the calls it leaves as unwound
/// and shows no second return, under every transport.
fn setjmp_is_traced_and_longjmp_unwinds_past_calls(tr: &str) {
    let prog = gcc(
        "trace_setjmp",
        &progs().join("trace_setjmp.c"),
        &["-O0", "-g"],
    );
    let o = trace(tr, &["--plt", "-F", "main", "-T", "--no-pid", "-i"], &prog);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    // `foo` ends in `longjmp`: no `ret`, its calls never return. inproc
    // and perf track it from its entry with no return site (they refused
    // it before). perf puts no uprobe in a PLT entry (it is in no
    // function of the symbol table, and says so).
    let plt = tr != "perf";
    let mut want = vec!["==> main()"];
    if plt {
        want.extend(["   ==> _setjmp@plt()", "   <== _setjmp@plt() [rax = 0x0]"]);
    }
    want.push("   ==> foo()");
    if plt {
        want.extend([
            "      ==> longjmp@plt()",
            "      <== longjmp@plt() [unwound]",
        ]);
    }
    want.extend([
        "   <== foo() [unwound]",
        "   ==> bar()",
        "   <== bar() [rax = 0xffffffff]",
        "<== main() [rax = 0x0]",
    ]);
    assert_eq!(calls_only(&o.stdout), want.join("\n"), "{tr}: {err}");
    assert!(
        !err.contains(": foo") && !err.contains(" foo,"),
        "{tr}: {err}"
    );
    if plt {
        assert!(!err.contains("_setjmp"), "{err}");
    }
}

fn time_of_day() -> String {
    let o = Command::new("date").arg("+%H:%M:%S").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn the_duration_view_with_time_of_day_and_source_lines_is_exact(tr: &str) {
    let before = time_of_day();
    let o = trace(tr, &["-F", "main", "-t", "-l"], &trace_det());
    let after = time_of_day();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    // Each line after the header: `HH:MM:SS ` (between the clock before
    // and after the run, unless midnight passed), then the view.
    let mut rest = vec![text.lines().next().unwrap().to_string()];
    for l in text.lines().skip(1) {
        let (clock, view) = l.split_at(9);
        let b = clock.as_bytes();
        assert!(b[2] == b':' && b[5] == b':' && b[8] == b' ', "{l}");
        let clock = clock.trim_end();
        assert!(
            (before.as_str()..=after.as_str()).contains(&clock) || before > after,
            "{clock} not in [{before}, {after}]"
        );
        rest.push(view.to_string());
    }
    // Source lines: `/* …/trace_det.c:N */` after entries.
    let src = |l: &str| -> String {
        match l.split_once("/* ") {
            Some((head, path)) if path.contains("trace_det.c:") => {
                let (_, line) = path.rsplit_once("trace_det.c:").unwrap();
                format!("{head}/* trace_det.c:{line}")
            }
            _ => l.to_string(),
        }
    };
    let got: Vec<String> = normalize_durations(&rest.join("\n"))
        .lines()
        .map(src)
        .collect();
    let (m, t, mi, le) = (
        line_of("int main("),
        line_of("NI int top("),
        line_of("NI int middle("),
        line_of("NI int leaf("),
    );
    let want = format!(
        "\
# DURATION     TID     FUNCTION
            [   TID] | main() {{ /* trace_det.c:{m} */
            [   TID] |   top() {{ /* trace_det.c:{t} */
            [   TID] |     middle() {{ /* trace_det.c:{mi} */
       TIME [   TID] |       leaf(); /* trace_det.c:{le} */
       TIME [   TID] |       leaf(); /* trace_det.c:{le} */
       TIME [   TID] |     }} /* middle */
            [   TID] |     middle() {{ /* trace_det.c:{mi} */
       TIME [   TID] |       leaf(); /* trace_det.c:{le} */
       TIME [   TID] |       leaf(); /* trace_det.c:{le} */
       TIME [   TID] |     }} /* middle */
       TIME [   TID] |   }} /* top */
       TIME [   TID] | }} /* main */"
    );
    assert_eq!(got.join("\n"), want);
}

fn rust_names_are_demangled_by_default(tr: &str) {
    let prog = trace_rust();
    let out = file("rust.txt", tr);
    // `-C` is accepted and changes nothing.
    let o = trace(
        tr,
        &[
            "-C",
            "-F",
            "*::shapes::total",
            "-T",
            "--no-pid",
            "-i",
            "-o",
            out.to_str().unwrap(),
        ],
        &prog,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "total 13\n");
    assert_eq!(
        calls_only(read(&out).as_bytes()),
        "\
==> trace_rust::shapes::total()
   ==> trace_rust::shapes::Square::area()
   <== trace_rust::shapes::Square::area() [rax = 0x4]
   ==> trace_rust::shapes::Square::area()
   <== trace_rust::shapes::Square::area() [rax = 0x9]
<== trace_rust::shapes::total() [rax = 0xd]"
    );
    // With --no-demangle: the symbols (legacy mangling, with their hash).
    let o = trace(
        tr,
        &[
            "--no-demangle",
            "-F",
            "*shapes*total*",
            "-T",
            "--no-pid",
            "-i",
            "-o",
            out.to_str().unwrap(),
        ],
        &prog,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = read(&out);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("==> _ZN10trace_rust6shapes5total17h") && first.ends_with("E()"),
        "{text}"
    );
}

fn trace_names() -> PathBuf {
    gcc(
        "trace_names",
        &progs().join("trace_names.cpp"),
        &["-O0", "-g", "-lstdc++"],
    )
}

fn cxx_names_are_demangled_as_uftrace_shows_them(tr: &str) {
    let prog = trace_names();
    let out = file("names.txt", tr);
    let tree = |mode: &[&str]| -> String {
        let mut args = mode.to_vec();
        args.extend(["-F", "main", "-T", "--no-pid", "-i", "-o"]);
        args.push(out.to_str().unwrap());
        let o = trace(tr, &args, &prog);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        calls_only(read(&out).as_bytes())
    };
    // The default, and `-C` (accepted, changes nothing): uftrace's simple
    // form, no parameters or template arguments.
    let simple = "\
==> main()
   ==> ns::ns1::foo::foo()
   <== ns::ns1::foo::foo() [rax = ADDR]
   ==> ns::ns1::foo::bar()
      ==> ns::ns1::foo::bar3()
      <== ns::ns1::foo::bar3() [rax = 0x1]
   <== ns::ns1::foo::bar() [rax = 0x2]
   ==> twice()
   <== twice() [rax = 0x6]
   ==> ns::ns1::foo::operator+()
   <== ns::ns1::foo::operator+() [rax = 0x2]
<== main() [rax = 0x0]";
    let addr = |t: String| -> String {
        t.lines()
            .map(|l| match l.find("[rax = 0x") {
                Some(i) if l.contains("foo::foo") => format!("{}[rax = ADDR]", &l[..i]),
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(addr(tree(&[])), simple);
    assert_eq!(addr(tree(&["-C"])), simple);
    // uftrace's --demangle=full: with the parameters.
    let full = addr(tree(&["--demangle=full"]));
    assert!(
        full.contains("   ==> ns::ns1::foo::foo(int)\n")
            && full.contains("   ==> int twice<int>(int)\n")
            && full.contains("   <== ns::ns1::foo::operator+(int) const [rax = 0x2]"),
        "{full}"
    );
    // A PLT entry's full name ends with its parameters and `@plt`: no
    // second parameter list (`operator new(unsigned long)@plt()` before).
    // (Only `ptrace` traces PLT entries: `inproc` and `perf` refuse them,
    // listed at start.)
    if tr == "ptrace" {
        let plt = tree(&["--demangle=full", "--plt"]);
        assert!(
            plt.contains("\n         ==> operator new(unsigned long)@plt\n")
                && plt.contains("\n         <== operator new(unsigned long)@plt [rax = 0x")
                && plt.contains("\n         ==> operator delete(void*")
                && !plt.contains(")@plt("),
            "{plt}"
        );
    }
    // The symbols.
    let raw = addr(tree(&["--no-demangle"]));
    assert!(
        raw.contains("   ==> _ZN2ns3ns13fooC1Ei()\n")
            && raw.contains("   ==> _Z5twiceIiET_S0_()\n"),
        "{raw}"
    );
    // Filters match the shown name.
    let o = trace(
        tr,
        &[
            "-F",
            "ns::ns1::foo::bar",
            "-T",
            "--no-pid",
            "-i",
            "-o",
            out.to_str().unwrap(),
        ],
        &prog,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        calls_only(read(&out).as_bytes()),
        "\
==> ns::ns1::foo::bar()
   ==> ns::ns1::foo::bar3()
   <== ns::ns1::foo::bar3() [rax = 0x1]
<== ns::ns1::foo::bar() [rax = 0x2]"
    );
}

fn functions_not_traced_are_listed_once_with_the_reason() {
    let o = trace("ptrace", &["--plt", "--report"], &trace_calls());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let listed: Vec<&str> = err.lines().filter(|l| l.contains("not traced")).collect();
    assert_eq!(
        listed,
        // `_setjmp@plt` is traced (its first return is its call's).
        ["wprobe: not traced (C start-up code (name it with -F to trace it)): _start"],
        "{err}"
    );
    // --plt: the library calls are in the report.
    let text = String::from_utf8_lossy(&o.stdout);
    for f in ["pthread_create@plt", "pthread_join@plt", "raise@plt"] {
        let row = text
            .lines()
            .find(|l| l.ends_with(&format!("  {f}")))
            .unwrap_or_else(|| panic!("{f}\n{text}"));
        assert!(
            row.contains(if f == "raise@plt" { "  1  " } else { "  4  " }),
            "{row}"
        );
    }
}

/// `trace --plt` of a real program nobody here wrote (`ls -U -l DIR`,
/// unsorted: no `qsort` comparator, whose tail calls through a pointer no
/// transport but ptrace sees returning): every library call, entered at
/// its PLT entry and seen returning at the continuation after its `call`
/// or at the `ret`s of the function it leads to, gives the ptrace
/// transport's call tree line for line under inproc and under `auto`,
/// which chooses inproc (it refused every PLT entry before); and the
/// report of a threaded program counts the same library calls.
fn plt_calls_give_the_ptrace_tree_under_inproc_and_auto() {
    let dir = scratch().join("plt-ls");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["a", "b", "c"] {
        std::fs::write(dir.join(f), f).unwrap();
    }
    let tree = |tr: &str| -> (Vec<String>, String) {
        let out = file("plt-ls", tr);
        let o = trace_argv(
            tr,
            &["-v", "--plt", "-o", out.to_str().unwrap()],
            Path::new("/bin/ls"),
            &["-U", "-l", dir.to_str().unwrap()],
        );
        assert_eq!(o.status.code(), Some(0), "{tr}: {}", stderr(&o));
        // Durations and thread ids aside.
        let lines = read(&out)
            .lines()
            .filter_map(|l| l.split_once('|').map(|(_, f)| f.to_string()))
            .collect();
        (lines, stderr(&o))
    };
    let (want, _) = tree("ptrace");
    assert!(
        want.iter().any(|l| l.trim() == "getenv@plt();") && want.len() > 200,
        "{want:?}"
    );
    for tr in ["inproc", "auto"] {
        let (got, err) = tree(tr);
        if tr == "auto" {
            assert!(
                err.contains(
                    "wprobe: transport inproc: the fastest; the run needs nothing it lacks"
                ),
                "{err}"
            );
        }
        // Not one refused (`abort@plt`, whose calls end their callers,
        // needs no return site: it never returns).
        assert!(
            !err.contains("@plt in /"),
            "{tr}: a PLT entry refused: {err}"
        );
        assert_eq!(got, want, "{tr}: {err}");
    }
    let counts = |tr: &str| -> Vec<String> {
        let o = trace(tr, &["--plt", "--report"], &trace_calls());
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let mut rows: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.ends_with("@plt"))
            .map(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                format!("{} {}", c[c.len() - 1], c[c.len() - 2])
            })
            .collect();
        rows.sort();
        rows
    };
    let want = counts("ptrace");
    assert!(
        want.contains(&"pthread_create@plt 4".to_string()),
        "{want:?}"
    );
    assert_eq!(counts("inproc"), want);
}

fn bad_arguments_are_refused_with_exact_messages() {
    let det = trace_det();
    let run = |args: &[&str]| -> (Option<i32>, String) {
        let o = wprobe()
            .arg("trace")
            .args(args)
            .current_dir(scratch())
            .output()
            .unwrap();
        (o.status.code(), stderr(&o))
    };
    let d = det.to_str().unwrap();
    let (code, err) = run(&["--", "/nonexistent/prog"]);
    assert_eq!(
        (code, err.trim()),
        (Some(1), "error: /nonexistent/prog: command not found")
    );
    let (code, err) = run(&["-F", "nomatch*", "--", d]);
    assert_eq!(code, Some(1));
    assert!(
        err.ends_with("error: -F nomatch*: no traced function matches\n"),
        "{err}"
    );
    let (code, err) = run(&["--format", "json", "--", d]);
    assert_eq!(
        (code, err.trim()),
        (Some(1), "error: --format json is the form of --report")
    );
    let (code, err) = run(&["--min-duration", "3h", "--", d]);
    assert_eq!(
        (code, err.trim()),
        (
            Some(1),
            "error: --min-duration 3h: unknown unit (ns, us, ms or s)"
        )
    );
    let (code, err) = run(&["--handler", "x.rpn", "--", d]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("error: --handler x.rpn: give a .wasm or .wat module exporting `trace_entry` and `trace_exit`"),
        "{err}"
    );
    let bad = crate::support::cli::write(
        "trace-bad-handler.wat",
        "(module (func (export \"trace_entry\") (result i32) (i32.const 0)))",
    );
    let (code, err) = run(&["--handler", bad.to_str().unwrap(), "--", d]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("handler export `trace_exit` is not exported by the module"),
        "{err}"
    );
    let (code, err) = run(&["--ff", "--", d]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--output <FILE>"), "{err}");
    let (code, err) = run(&["--lib", "libnosuchlib", "--", d]);
    assert_eq!(
        (code, err.trim()),
        (Some(1), "error: --lib libnosuchlib: no such library")
    );
    // A program stripped of its symbols, built without unwind tables: only
    // the start-up code's entry, `_start`, is bounded.
    let bare = gcc(
        "no_unwind",
        &progs().join("trace_tailout.c"),
        &[
            "-O2",
            "-s",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
        ],
    );
    let b = bare.to_str().unwrap();
    let (code, err) = run(&["--", b]);
    assert_eq!(code, Some(1));
    assert!(
        err.ends_with(&format!(
            "error: no function to trace in {b} (no function symbols and no unwind table: \
             trace its calls to libraries with --plt, a library's functions with --lib GLOB)\n"
        )),
        "{err}"
    );
    let (code, err) = run(&["-X", "*", "--", d]);
    assert_eq!(code, Some(1));
    assert!(
        err.ends_with(&format!(
            "error: no function to trace in {d} (all excluded by -X, or none has a symbol or \
             an unwind table entry)\n"
        )),
        "{err}"
    );
    let (code, err) = run(&["-t", "-u", "--", d]);
    assert_eq!((code, err.trim()), (Some(1), "error: -t and -u: give one"));
    let (code, err) = run(&[]);
    assert_eq!(
        (code, err.trim()),
        (
            Some(1),
            "error: give the command to trace after `--`, or -p PID"
        )
    );
}

/// `tests/progs/noplt.c` built with `-fno-plt -Wl,-z,now` at `-O0` or
/// `-O2`: its library calls go through GOT slots, no PLT entry.
fn noplt(opt: &str) -> PathBuf {
    gcc(
        &format!("noplt{opt}"),
        &progs().join("noplt.c"),
        &[opt, "-fno-plt", "-Wl,-z,now", "-Wl,-z,relro"],
    )
}

/// The call tree of `noplt 2` traced with `--plt`, as written down by
/// hand: the library calls through GOT slots are `NAME@plt` as calls
/// through PLT entries are, each nested where it was called (at -O2
/// `atoi` is `strtol`, and `tail` ends in `jmp *getpid@GOTPCREL(%rip)`:
/// both end at `getpid`'s return). `tail` is left out where `has_tail` is
/// false (perf: at -O2 it has no `ret` of its own).
fn noplt_tree(opt: &str, got: bool, has_tail: bool) -> Vec<String> {
    let lib = |name: &str, depth: usize| -> Vec<String> {
        if got {
            vec![format!("{}{name}@plt();", "  ".repeat(depth))]
        } else {
            Vec::new()
        }
    };
    let open = |name: &str, depth: usize| format!("{}{name}() {{", "  ".repeat(depth));
    let close = |name: &str, depth: usize| format!("{}}} /* {name} */", "  ".repeat(depth));
    let mut want = vec![open("main", 0)];
    want.extend(lib(if opt == "-O2" { "strtol" } else { "atoi" }, 1));
    for _ in 0..2 {
        want.extend([open("a", 1), open("b", 2)]);
        if got {
            want.push(open("c", 3));
            want.extend(lib("strlen", 4));
            want.extend(lib("getpid", 4));
            want.push(close("c", 3));
        } else {
            want.push("      c();".into());
        }
        want.extend([close("b", 2), close("a", 1)]);
        if got {
            want.push(open("tail", 1));
            want.extend(lib("getpid", 2));
            want.push(close("tail", 1));
        } else if has_tail {
            want.push("  tail();".into());
        }
        want.extend(lib("getpid", 1));
    }
    want.extend(lib("printf", 1));
    want.extend(lib("fflush", 1));
    want.push(close("main", 0));
    want
}

/// `trace --plt` of a program built with `-fno-plt` (uftrace's t212 is
/// this shape): every library call goes through a GOT slot, which the
/// in-process transport points at a stub (`auto` takes it for `--plt`);
/// the tree is the one written down by hand, at -O0 and -O2, with the tail
/// call through a slot and the calls through a pointer taken from one.
/// ptrace and perf break in code: they list those functions as not
/// traced, with why, and trace the rest.
fn no_plt_calls_are_traced_through_their_got_slots(tr: &str) {
    for opt in ["-O0", "-O2"] {
        let prog = noplt(opt);
        let o = trace_argv(tr, &["--plt", "--no-pid"], &prog, &["2"]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{tr} {opt}: {err}");
        let text = String::from_utf8_lossy(&o.stdout);
        // From `main` on (ptrace traces the C run-time's `_init` and
        // destructors around it).
        let got: Vec<String> = text
            .lines()
            .filter_map(|l| l.split_once("| ").map(|(_, f)| f.to_string()))
            .skip_while(|l| l != "main() {")
            .take_while(|l| l != "} /* main */")
            .chain(["} /* main */".to_string()])
            .collect();
        let in_process = tr == "inproc" || tr == "auto";
        let has_tail = !(tr == "perf" && opt == "-O2");
        assert_eq!(
            got,
            noplt_tree(opt, in_process, has_tail),
            "{tr} {opt}: {text}\n{err}"
        );
        assert!(
            text.starts_with("16\n") || text.contains("\n16\n"),
            "{text}"
        );
        let refused = err
            .lines()
            .find(|l| l.contains("called through its GOT slot"))
            .unwrap_or("");
        if in_process {
            assert_eq!(refused, "", "{tr} {opt}: {err}");
            assert!(err.contains("20 calls (20 returned, 0 unwound)"), "{err}");
        } else {
            assert!(
                refused.starts_with(
                    "wprobe: not traced (called through its GOT slot, with no PLT entry (code \
                     built with -fno-plt): only --transport inproc traces such calls): "
                ),
                "{tr} {opt}: {err}"
            );
            let atoi = if opt == "-O2" { "strtol" } else { "atoi" };
            for f in ["getpid", "strlen", "printf", atoi] {
                assert!(refused.contains(&format!("{f}@plt")), "{f}: {err}");
            }
        }
    }
}

/// A `-fno-plt` program attached with `-p` and let go (SIGINT to wprobe):
/// its GOT slot holds the stub's address while traced and the function's
/// again after, and the program goes on calling through it (under
/// inproc, and under `auto`, which takes it).
fn a_got_slot_is_restored_when_the_trace_ends() {
    for tr in ["inproc", "auto"] {
        got_slot_restored(tr);
    }
}

fn got_slot_restored(tr: &str) {
    let prog = noplt("-O2");
    let mut child = Command::new(&prog)
        .args(["1", "spin"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "8\n");
    let elf = wprobe_elf::ElfInfo::open(&prog).unwrap();
    let slot = crate::support::cli::load_bias(pid, &prog) + elf.got_slot("getpid").unwrap();
    let before = crate::support::cli::live_bytes(pid, slot, 8);
    let out = file("noplt-attach", tr);
    let w = wprobe()
        .args(["trace", "--transport", tr, "--plt", "-o"])
        .arg(&out)
        .args(["-p", &pid.to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while crate::support::cli::live_bytes(pid, slot, 8) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the slot was never pointed at a stub"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Calls traced through the slot, then the trace ended.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&out).is_ok_and(|t| t.matches("getpid@plt();").count() >= 10) {
        assert!(
            std::time::Instant::now() < deadline,
            "no getpid@plt calls traced"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    crate::support::cli::signal(w.id(), "INT");
    let o = crate::support::cli::output_within_child(w, 60);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(crate::support::cli::live_bytes(pid, slot, 8), before);
    // Still running, still calling through the slot.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(child.try_wait().unwrap().is_none(), "the program ended");
    child.kill().unwrap();
    child.wait().unwrap();
}
