//! The one-liner runtime on real processes: exact map counts from 8 threads
//! × 100,000 calls under both transports, the map bound reached and
//! reported, every fetch-arg form of `--event` on a known call with its
//! exact text, `-l`/`-lv`, `wprobe compile -e`, instruction-boundary
//! refusals, and uretprobes (`retval` summed and bucketed, and one return
//! per call of 8 threads under both transports).

use crate::case;
use crate::support::case::Case;

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(map_bound_is_reached_counted_and_reported),
    case!(every_fetch_arg_form_prints_exact_text),
    case!(fetch_arg_widths_offsets_and_nesting_are_exact @ every_transport),
    case!(script_files_output_files_attach_mixing_and_bench),
    case!(event_errors_point_into_the_event),
    case!(listing_functions_and_dwarf_arguments),
    case!(compile_e_writes_a_module_that_runs),
    case!(a_probe_inside_an_instruction_is_refused_with_the_nearest_boundaries),
    case!(uretprobe_retval_sums_the_returns @ every_transport),
    case!(aliases_of_one_address_are_a_probe_each_as_in_bpftrace @ every_transport),
    case!(uretprobes_of_8_threads_pair_every_call @ every_transport),
    case!(return_probes_of_one_function_run_in_program_order @ every_transport),
    case!(exit_is_asynchronous_as_in_bpftrace @ every_transport),
    case!(cpp_names_and_reference_parameters),
    case!(macaddr_spells_six_bytes_of_the_process),
    case!(uaddr_is_a_variable_of_the_probed_binary),
    case!(casts_between_integers_and_arrays),
    case!(return_events_print_the_caller_and_the_return_value @ every_transport),
    case!(exit_from_an_interval_stops_a_long_command),
    case!(map_counts_from_8_threads_x_100000_calls_are_exact @ every_transport),
    case!(intervals_tick_while_tracing @ every_transport),
    case!(cxx_names_in_ustack_and_usym_are_demangled_unless_turned_off @ every_transport),
    case!(a_function_libc_took_over_is_found_through_the_stub_library @ every_transport),
    case!(gid_numaid_clocks_and_the_exit_status_of_a_hit @ every_transport),
    case!(exit_code_of_a_special_probe_ends_the_run_with_it),
    case!(username_ntop_pton_and_fine_grained_hist_print_as_bpftrace_does @ every_transport),
];

use crate::support::cli::{gcc, output_within, progs, stderr, sym, wprobe};
use std::path::PathBuf;

fn target() -> PathBuf {
    gcc(
        "bt_target",
        &progs().join("bt_target.c"),
        &[
            "-O0",
            "-g",
            "-fno-omit-frame-pointer",
            "-no-pie",
            "-fcf-protection=none",
        ],
    )
}

fn run(args: &[&str], env: &[(&str, &str)]) -> (String, String, Option<i32>) {
    let mut c = wprobe();
    c.arg("run").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = output_within(c, 300);
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr(&o),
        o.status.code(),
    )
}

/// Map counts from 8 threads x 100,000 calls are exact.
fn map_counts_from_8_threads_x_100000_calls_are_exact(transport: &str) {
    let t = target();
    let prog = format!(
        "uprobe:{}:tick {{ @[arg0] = count(); @all = count(); @s = sum(arg0); }}",
        t.display()
    );
    let cmd = format!("{} threads 100000", t.display());
    let (out, err, code) = run(
        &["--transport", transport, "-e", &prog, "-c", &cmd],
        &[("WPROBE_PERF_RING_PAGES", "8192")],
    );
    assert_eq!(code, Some(0), "{err}");
    // Under perf the target does not wait for wprobe: on a loaded machine
    // the kernel may drop samples (ring full). They are then counted in
    // the summary (`dropped`), and every hit that was delivered is in the
    // maps: hits + dropped is every call.
    let dropped = err
        .lines()
        .find(|l| l.trim_start().starts_with("-e:tick"))
        .and_then(|l| l.split_whitespace().nth(6))
        .and_then(|d| d.parse::<u64>().ok())
        .unwrap_or(0);
    if transport == "perf" && dropped > 0 {
        let value = |key: &str| -> u64 {
            out.lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {key} in {out}"))
        };
        let per_thread: u64 = (0..8).map(|k| value(&format!("@[{k}]:"))).sum();
        let all = value("@all:");
        assert_eq!(per_thread, all, "{out}");
        assert_eq!(
            all + dropped,
            800_000,
            "hits + dropped is every call: {out}{err}"
        );
        eprintln!(
            "note: {dropped} samples dropped by the kernel (a loaded machine); accounted exactly"
        );
        return;
    }
    let mut want = String::from("Attaching 1 probe...\n\n\n");
    for k in 0..8 {
        want += &format!("@[{k}]: 100000\n");
    }
    want += "@all: 800000\n@s: 2800000\n";
    assert_eq!(out, want, "{err}");
}

fn map_bound_is_reached_counted_and_reported() {
    let t = target();
    let prog = format!(
        "uprobe:{}:key {{ @[arg0] = count(); @n = count(); }}",
        t.display()
    );
    let cmd = format!("{} keys 25", t.display());
    let (out, err, code) = run(
        &["-e", &prog, "-c", &cmd],
        &[("BPFTRACE_MAP_KEYS_MAX", "10")],
    );
    assert_eq!(code, Some(0), "{err}");
    let mut want = String::from("Attaching 1 probe...\n\n\n");
    for k in 0..10 {
        want += &format!("@[{k}]: 1\n");
    }
    want += "@n: 25\n";
    assert_eq!(out, want);
    assert!(
        err.contains(
            "wprobe: warning: map @: 15 update(s) dropped: the map is full (10 keys; set BPFTRACE_MAP_KEYS_MAX to allow more)"
        ),
        "{err}"
    );
}

fn every_fetch_arg_form_prints_exact_text() {
    let t = target();
    let b = t.display().to_string();
    let sink = sym(&t, "sink");
    let events = [
        // registers, types, strings, $comm, $argN
        format!("p:greet_ev {b}:greet name=%di:string n=%si:u32 c=$comm a1=$arg2:s64 raw=%si"),
        // $stackN and $stack: the return address is at $stack0 at the entry
        format!("p {b}:add st0=$stack0 spset=$stack:u8"),
        // signed and hex widths
        format!("p:sv {b}:signed_vals v=%di:s32 w=%si:s64 x=%di:x16 u=%di:u8"),
        // memory: absolute, by symbol, from the file start, and a dereference chain
        format!("p:mem {b}:scale abs=@{sink:#x}:s64 bysym=@sink:s64 dref=+0(%sp):x64"),
        // an offset into the function
        format!("p {b}:leaf+4"),
    ];
    let mut args: Vec<&str> = Vec::new();
    for e in &events {
        args.push("--event");
        args.push(e);
    }
    let cmd = format!("{b} calls");
    args.extend(["-c", &cmd]);
    let (out, err, code) = run(&args, &[]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "Attaching 5 probes...");
    let greet: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("greet_ev:"))
        .collect();
    assert_eq!(greet.len(), 6, "{out}");
    assert_eq!(
        *greet[0],
        "greet_ev: (greet) name=\"alice\" n=0 c=\"bt_target\" a1=0 raw=0x0"
    );
    assert_eq!(
        *greet[3],
        "greet_ev: (greet) name=\"carol\" n=3 c=\"bt_target\" a1=3 raw=0x3"
    );
    let add: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("p_bt_target_add:"))
        .collect();
    assert_eq!(add.len(), 10);
    // $stack0 is the return address into main: same for every call site
    // of the loop; $stack is the stack pointer (low byte only).
    let main = sym(&t, "main");
    for l in &add {
        let st0 = l.split("st0=0x").nth(1).unwrap().split(' ').next().unwrap();
        let v = u64::from_str_radix(st0, 16).unwrap();
        assert!(v > main && v < main + 0x1000, "{l}");
        assert!(l.contains(" spset="), "{l}");
    }
    let sv: Vec<&&str> = lines.iter().filter(|l| l.starts_with("sv:")).collect();
    assert_eq!(
        sv.iter().map(|s| **s).collect::<Vec<_>>(),
        [
            "sv: (signed_vals) v=-5 w=-100 x=0xfffb u=251",
            "sv: (signed_vals) v=7 w=9 x=0x7 u=7",
            "sv: (signed_vals) v=-5 w=1 x=0xfffb u=251",
        ]
    );
    let mem: Vec<&&str> = lines.iter().filter(|l| l.starts_with("mem:")).collect();
    assert_eq!(mem.len(), 12);
    // sink holds the running sum of the earlier calls' side effects:
    // absolute and symbolic reads agree.
    for l in &mem {
        let abs = l.split("abs=").nth(1).unwrap().split(' ').next().unwrap();
        let bysym = l.split("bysym=").nth(1).unwrap().split(' ').next().unwrap();
        assert_eq!(abs, bysym, "{l}");
        assert!(l.contains(" dref=0x"), "{l}");
    }
    let leaf: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("p_bt_target_leaf_4:"))
        .collect();
    assert_eq!(leaf.len(), 3);
    assert_eq!(*leaf[0], "p_bt_target_leaf_4: (leaf+4)");
}

fn event_errors_point_into_the_event() {
    let t = target();
    let b = t.display().to_string();
    for (ev, msg) in [
        (
            format!("x {b}:add"),
            "probe event must start with `p` or `r`, not `x`",
        ),
        (format!("p {b}:add a=%zz"), "unknown register `%zz`"),
        (format!("p {b}:add a=%di:u7"), "unknown type `u7`"),
        (
            format!("p {b}:add a=$retval"),
            "$retval is only available in return probes (r)",
        ),
        (format!("p {b}:nope"), "Could not resolve symbol"),
        (format!("p {b}:add a=@nosuch"), "symbol `nosuch` not found"),
    ] {
        let (_, err, code) = run(&["--event", &ev, "-c", &b], &[]);
        assert_eq!(code, Some(1), "{ev}: {err}");
        assert!(err.contains("--event #1:1:"), "{ev}: {err}");
        assert!(err.contains(msg), "{ev}: {err}");
        assert!(err.contains('^'), "{ev}: {err}");
    }
}

fn listing_functions_and_dwarf_arguments() {
    let t = target();
    let pat = format!("uprobe:{}:s*", t.display());
    let o = output_within(
        {
            let mut c = wprobe();
            c.args(["run", "-lv", &pat]);
            c
        },
        60,
    );
    let out = String::from_utf8_lossy(&o.stdout).replace(&t.display().to_string(), "T");
    assert_eq!(
        out,
        "uprobe:T:scale\n    long int v\n    long int by\nuprobe:T:signed_vals\n    int v\n    long int w\n"
    );
    let o = output_within(
        {
            let mut c = wprobe();
            c.args(["run", "-l", &format!("uprobe:{}:*a*", t.display())]);
            c
        },
        60,
    );
    let out = String::from_utf8_lossy(&o.stdout).replace(&t.display().to_string(), "T");
    assert!(
        out.contains("uprobe:T:add\n") && out.contains("uprobe:T:main\n"),
        "{out}"
    );
    assert!(!out.contains("    "), "no arguments without -v: {out}");
    // A program's probes (intervals without their count), and a wildcard
    // in the binary's path.
    let list = |args: &[&str]| {
        let o = output_within(
            {
                let mut c = wprobe();
                c.arg("run").args(args);
                c
            },
            60,
        );
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).replace(&t.display().to_string(), "T")
    };
    let prog = format!("uprobe:{}:sig* {{ }} i:ms:5 {{ }}", t.display());
    assert_eq!(
        list(&["-l", "-e", &prog]),
        "uprobe:T:signed_vals\ninterval:ms:\n"
    );
    let dir = t.parent().unwrap().display().to_string();
    let pat = format!("uprobe:{dir}/bt_targ*:scale");
    assert_eq!(list(&["-l", &pat]), "uprobe:T:scale\n");
    assert_eq!(
        list(&["-l", "interval:*"]),
        "interval:hz:\ninterval:ms:\ninterval:s:\ninterval:us:\n"
    );
}

fn compile_e_writes_a_module_that_runs() {
    let t = target();
    let out = crate::support::cli::scratch().join("oneliner.wasm");
    let prog = format!("uprobe:{}:add {{ @c = count(); }}", t.display());
    let o = output_within(
        {
            let mut c = wprobe();
            c.args(["compile", "-e", &prog, "-o"]).arg(&out);
            c
        },
        60,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = output_within(
        {
            let mut c = wprobe();
            c.arg("run").arg(&out).arg("--").arg(&t).arg("calls");
            c
        },
        60,
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "Attaching 1 probe...\n\n\n@c: 10\n"
    );
}

fn a_probe_inside_an_instruction_is_refused_with_the_nearest_boundaries() {
    let t = target();
    let prog = format!("uprobe:{}:add+2 {{ @ = count(); }}", t.display());
    let (_, err, code) = run(&["-e", &prog, "-c", &t.display().to_string()], &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("error[B0104]: Could not add uprobe into middle of instruction:")
            && err.contains(":add+2")
            && err.contains("= note: nearest instruction boundaries: add+1, add+4"),
        "{err}"
    );
}

/// `r:NAME MODULE:SYM FIELD=$retval`: one line per return, after the
/// entry's line, naming the caller and the function as the kernel's
/// kretprobe events do, with the value `add(i, 2i)` returned.
fn return_events_print_the_caller_and_the_return_value(transport: &str) {
    let t = target();
    let b = t.display();
    let (out, err, code) = run(
        &[
            "--transport",
            transport,
            "--event",
            &format!("p:in {b}:add a=%di"),
            "--event",
            &format!("r:out {b}:add ret=$retval"),
            "--",
            t.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("in:") || l.starts_with("out:"))
        .collect();
    assert_eq!(
        lines[..6],
        [
            "in: (add) a=0x0",
            "out: (main <- add) ret=0x0",
            "in: (add) a=0x1",
            "out: (main <- add) ret=0x3",
            "in: (add) a=0x2",
            "out: (main <- add) ret=0x6",
        ],
        "{out}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("in:")).count(),
        lines.iter().filter(|l| l.starts_with("out:")).count(),
        "{out}"
    );
}

/// `retval` is `rax` at the return of each call of `add(i, 2i)`.
fn uretprobe_retval_sums_the_returns(transport: &str) {
    let t = target();
    let prog = format!(
        "uretprobe:{}:add {{ @ = sum(retval); @h = lhist(retval, 0, 30, 10); }}",
        t.display()
    );
    let cmd = format!("{} calls", t.display());
    let (out, err, code) = run(&["--transport", transport, "-e", &prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "Attaching 1 probe...\n\n\n@: 135\n@h:\n\
         [0, 10)                4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
         [10, 20)               3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@             |\n\
         [20, 30)               3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@             |\n\n",
        "{err}"
    );
}

/// A glob matching two names of one function (`__count_impl` and its
/// alias `count`, tests/progs/aliases.c) places a probe on each name, as
/// bpftrace 0.17 does: each fires at every call (3).
fn aliases_of_one_address_are_a_probe_each_as_in_bpftrace(transport: &str) {
    let t = gcc("aliases", &progs().join("aliases.c"), &["-O0"]);
    let prog = format!("uprobe:{}:*count* {{ @[probe] = count(); }}", t.display());
    let cmd = t.display().to_string();
    let (out, err, code) = run(&["--transport", transport, "-e", &prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        format!(
            "Attaching 2 probes...\n\n\n@[uprobe:{0}:__count_impl]: 3\n@[uprobe:{0}:count]: 3\n",
            t.display()
        ),
        "{err}"
    );
}

/// 8 threads × 2,000 calls of `tick(t)`: every call returns once, in its
/// own thread (entry and return probes count the same per thread).
fn uretprobes_of_8_threads_pair_every_call(transport: &str) {
    let t = target();
    let prog = format!(
        "uprobe:{0}:tick {{ @in[arg0] = count(); }} uretprobe:{0}:tick {{ @out[tid] = count(); @all = count(); }}",
        t.display()
    );
    let cmd = format!("{} threads 2000", t.display());
    let (out, err, code) = run(
        &["--transport", transport, "-e", &prog, "-c", &cmd],
        &[("WPROBE_PERF_RING_PAGES", "8192")],
    );
    assert_eq!(code, Some(0), "{err}");
    let count = |prefix: &str| -> Vec<u64> {
        out.lines()
            .filter(|l| l.starts_with(prefix))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect()
    };
    assert_eq!(count("@in["), [2000; 8], "{out}");
    assert_eq!(count("@out["), [2000; 8], "{out}");
    assert_eq!(count("@all:"), [16000], "{out}");
    assert!(!err.contains("missed"), "{err}");
}

/// Three return probes of `add` (one spelled `ur:`) run in program order
/// at each of its 10 returns (bpftrace's `probe.uretprobe_order`), and all
/// three count as attached.
fn return_probes_of_one_function_run_in_program_order(transport: &str) {
    let t = target();
    let prog = format!(
        "uretprobe:{0}:add {{ printf(\"first %d\\n\", retval); }} \
         uretprobe:{0}:add {{ printf(\"second %d\\n\", retval); }} \
         ur:{0}:add {{ printf(\"third %d\\n\", retval); }}",
        t.display()
    );
    let cmd = format!("{} calls", t.display());
    let (out, err, code) = run(&["--transport", transport, "-e", &prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    let mut want = String::from("Attaching 3 probes...\n");
    for i in 0..10 {
        let r = 3 * i;
        want.push_str(&format!("first {r}\nsecond {r}\nthird {r}\n"));
    }
    want.push_str("\n\n");
    assert_eq!(out, want, "{err}");
}

/// `exit()` at the first of `add`'s 10 returns: as in bpftrace (its exit
/// is an event the tracer reads later; `intcast.Sum casted retval`), the
/// handlers that run until the probes are gone update the maps, and only
/// the exiting run's output is printed. How many of the 10 calls run
/// their handlers before the probes are gone is a race the program and
/// the tracer run (in bpftrace too): the in-process agent and the perf
/// transport run as many as the command makes meanwhile (all 10 when
/// nothing else runs: it makes them within microseconds), so the maps
/// must be those of the first N calls for some N — a count and the sum
/// of those calls' return values (`add(i, 2i)` returns `3i`), never a
/// second line printed; under ptrace every hit stops the thread, and the
/// run stops at the first.
fn exit_is_asynchronous_as_in_bpftrace(transport: &str) {
    let t = target();
    let prog = format!(
        "uretprobe:{}:add {{ @ = count(); @s = sum(retval); printf(\"ret %d\\n\", retval); exit(); }}",
        t.display()
    );
    let cmd = format!("{} calls", t.display());
    let (out, err, code) = run(&["--transport", transport, "-e", &prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    let head = "Attaching 1 probe...\nret 0\n\n\n";
    let maps = out
        .strip_prefix(head)
        .unwrap_or_else(|| panic!("{out:?}: not {head:?} first\n{err}"));
    let runs = (1..=10u64)
        .find(|n| maps == format!("@: {n}\n@s: {}\n", 3 * n * (n - 1) / 2))
        .unwrap_or_else(|| panic!("{maps:?}: not the maps of the first calls\n{err}"));
    if transport == "ptrace" {
        assert_eq!(runs, 1, "{out}\n{err}");
    }
}

/// bpftrace's threadsnoop.bt probes `uprobe:libpthread:pthread_create`;
/// since glibc 2.34 libpthread is a stub that needs libc, where the
/// function is: the probe goes there, as the dynamic linker binds the
/// name, and sees each of the 3 threads' start routine. A name neither
/// defines is still refused, with its position.
fn a_function_libc_took_over_is_found_through_the_stub_library(transport: &str) {
    let t = gcc(
        "pthread_creates",
        &progs().join("pthread_creates.c"),
        &["-O0", "-pthread"],
    );
    let prog = "uprobe:libpthread:pthread_create { @n = count(); printf(\"%s %s\\n\", comm, usym(arg2)); }";
    let cmd = t.display().to_string();
    let (out, err, code) = run(&["--transport", transport, "-e", prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "Attaching 1 probe...\npthread_creates w\npthread_creates w\npthread_creates w\n\n\n@n: 3\n",
        "{err}"
    );
    let (_, err, code) = run(
        &[
            "--transport",
            transport,
            "-e",
            "uprobe:libpthread:no_such_fn { }",
            "-c",
            &cmd,
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("-e:1:1: error[B0103]: Could not resolve symbol: libpthread:no_such_fn"),
        "{err}"
    );
}

/// `uprobe:BIN:cpp:NAME` names a C++ function by its demangled name
/// without parameters (`-l`, `-lv` with bpftrace's spelling of reference
/// types, probes); a reference parameter or member is the object it
/// refers to (`args.n`, `args.p.r`, `args.v[3]`), printed records show a
/// reference member as an address, and `args` as a whole is refused.
fn cpp_names_and_reference_parameters() {
    let t = gcc(
        "bt_cxx",
        &progs().join("bt_cxx.cpp"),
        &["-O0", "-g", "-fno-omit-frame-pointer", "-no-pie"],
    );
    let bin = t.display().to_string();
    let (out, err, code) = run(&["-lv", &format!("uprobe:{bin}:cpp:*")], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        format!(
            "uprobe:{bin}:cpp:first\n    int (&)[4] v\n\
             uprobe:{bin}:cpp:geo::area\n    int & n\n    Pair & p\n    Box & b\n"
        )
    );
    let prog = format!(
        "uprobe:{bin}:cpp:geo::area {{ printf(\"%d %d %d %d %d\\n\", args.n, args.p.a, args.p.b, args.p.r, args.b.h); print(args.p); }} \
         uprobe:{bin}:cpp:fir* {{ printf(\"%d %d\\n\", args.v[0], args.v[3]); }}"
    );
    let (out, err, code) = run(&["-e", &prog, "-c", &bin], &[]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["Attaching 2 probes...", "7 1 2 7 4"], "{out}");
    assert!(
        lines[2].starts_with("{ .a = 1, .b = 2, .r = 0x") && lines[2].ends_with(" }"),
        "{out}"
    );
    assert_eq!(lines[3], "10 40", "{out}");
    let prog = format!("uprobe:{bin}:cpp:geo::area {{ print(args); }}");
    let (_, err, code) = run(&["-e", &prog, "-c", &bin], &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(&format!(
            "-e:1:{}: error[B0400]: parameter n is a C++ reference, which args as a whole does not hold",
            prog.find("args").unwrap() + 1
        )),
        "{err}"
    );
}

/// `macaddr(ADDR)`: the six bytes at the first argument of `greet`'s
/// first call ("alice" and its NUL) spelled as bpftrace spells a MAC address, printed and as
/// a map key; a value that is not an address or an array is refused.
fn macaddr_spells_six_bytes_of_the_process() {
    let t = target();
    let prog = format!(
        "uprobe:{}:greet /arg1 == 0/ {{ printf(\"%s\\n\", macaddr(arg0)); @[macaddr(arg0)] = 1; }}",
        t.display()
    );
    let cmd = format!("{} calls", t.display());
    let (out, err, code) = run(&["-e", &prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "Attaching 1 probe...\n61:6C:69:63:65:00\n\n\n@[61:6C:69:63:65:00]: 1\n"
    );
    let (_, err, code) = run(&["-e", "BEGIN { $x = macaddr(comm); }"], &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(
            "-e:1:22: error[B0201]: macaddr() takes an array of 6 bytes or their address, not string[16]"
        ),
        "{err}"
    );
}

/// `uaddr("sink")`: the address of `bt_target`'s variable `sink` (a
/// `long`: an `int64 *`) in the process, built without and with PIE (the
/// load bias added); at `greet`'s first call the 10 `add` calls have
/// summed 0..9 into it. Outside uprobes, and for a name the binary does
/// not define, refused at the call.
fn uaddr_is_a_variable_of_the_probed_binary() {
    let pie = gcc(
        "bt_target_pie",
        &progs().join("bt_target.c"),
        &["-O0", "-g", "-fno-omit-frame-pointer", "-fPIE", "-pie"],
    );
    for t in [target(), pie] {
        let prog = format!(
            "uprobe:{}:greet /arg1 == 0/ {{ printf(\"%d %d\\n\", *uaddr(\"sink\"), sizeof(*uaddr(\"sink\"))); }}",
            t.display()
        );
        let cmd = format!("{} calls", t.display());
        let (out, err, code) = run(&["-e", &prog, "-c", &cmd], &[]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(out, "Attaching 1 probe...\n45 8\n\n\n", "{err}");
    }
    let (_, err, code) = run(&["-e", "BEGIN { $a = uaddr(\"sink\"); }"], &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with(
            "-e:1:14: error[B0202]: uaddr can only be used with uprobes and usdt probes"
        ),
        "{err}"
    );
    let t = target();
    let prog = format!("uprobe:{}:greet {{ $a = uaddr(\"nope\"); }}", t.display());
    let (_, err, code) = run(&["-e", &prog, "-c", &t.display().to_string()], &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(": error[B0103]: Could not resolve symbol: "),
        "{err}"
    );
    assert!(err.contains("bt_target:nope\n"), "{err}");
}

/// `(int8[8])x`, `(int16[4])x` and `(int32[])x`: an integer's bytes as an
/// array (little endian); `(uint32)s->c` of a `uint8[4]` in the process: its bytes as
/// the integer ("alice" read as 0x63696c61); sizes that differ refused.
fn casts_between_integers_and_arrays() {
    let (out, err, code) = run(
        &[
            "-e",
            "BEGIN { printf(\"%x\\n\", ((int8[8])12345)[0]); $a = (int16[4])0x0102030405060708; \
             printf(\"%x %x\\n\", $a[0], $a[3]); $b = (int32[])(int64)-2; printf(\"%d %d\\n\", $b[0], $b[1]); exit(); }",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "Attaching 1 probe...\n39\n708 102\n-2 -1\n\n\n");
    let t = target();
    let prog = format!(
        "struct S {{ uint8 c[4]; }} uprobe:{}:greet /arg1 == 0/ {{ printf(\"%x\\n\", (uint32)((struct S *)arg0)->c); }}",
        t.display()
    );
    let cmd = format!("{} calls", t.display());
    let (out, err, code) = run(&["-e", &prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "Attaching 1 probe...\n63696c61\n\n\n");
    let (_, err, code) = run(&["-e", "BEGIN { $a = (int8[3])1; }"], &[]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with("-e:1:14: error[B0201]: Cannot cast from \"int64\" to \"int8[3]\""),
        "{err}"
    );
}

fn intervals_tick_while_tracing(transport: &str) {
    let t = target();
    let prog = format!(
        "interval:ms:100 {{ @ticks++; }} uprobe:{}:add {{ printf(\"add\\n\"); }} END {{ printf(\"ticks>=3: %d\\n\", @ticks >= 3); clear(@ticks); }}",
        t.display()
    );
    let cmd = format!("{} sleep 500", t.display());
    let (out, err, code) = run(&["--transport", transport, "-e", &prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out, "Attaching 3 probes...\nadd\nticks>=3: 1\n\n\n\n",
        "{err}"
    );
}

fn exit_from_an_interval_stops_a_long_command() {
    let t = target();
    let prog = "interval:ms:200 { printf(\"bye\\n\"); exit(); } END { printf(\"end\\n\"); }";
    let cmd = format!("{} sleep 20000", t.display());
    let start = std::time::Instant::now();
    let (out, err, code) = run(&["-e", prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "Attaching 2 probes...\nbye\nend\n\n\n");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

/// The fetch-arg forms the first table leaves to shape checks, as exact
/// text on `scale(v, 3)` (v = 0, 1, 2, 3, 5, 8, 13, 100, 1000, 5000,
/// 70000, 1 << 20): every width of every kind, computed here from the
/// values; `@SYM+OFF` against the same address written out;
/// `$stackN` for N > 0 and negative and nested dereferences against the
/// same bytes reached another way. Under every transport (perf: but the
/// reads of main's code, see below).
fn fetch_arg_widths_offsets_and_nesting_are_exact(transport: &str) {
    let t = target();
    let b = t.display().to_string();
    let sink = sym(&t, "sink");
    let events = [
        format!(
            "p:w {b}:scale u8=%di:u8 u16=%di:u16 u32=%di:u32 u64=%di:u64 s8=%di:s8 \
             s16=%di:s16 s32=%di:s32 s64=%di:s64 x8=%di:x8 x16=%di:x16 x32=%di:x32 \
             x64=%di:x64 by=%si:u8"
        ),
        format!(
            "p:m {b}:scale off=@sink+8:x64 abs=@{:#x}:x64 st1=$stack1 sp8=+8(%sp):x64 \
             st2=$stack2 sp16=+16(%sp):x64 neg=-8(+0(%sp)):x64 nest=+0(+0(%sp)):x8 \
             ret=+0(%sp):x64",
            sink + 8
        ),
    ];
    let cmd = format!("{b} calls");
    let (out, err, code) = run(
        &[
            "--transport",
            transport,
            "--event",
            &events[0],
            "--event",
            &events[1],
            "-c",
            &cmd,
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let vals: [i64; 12] = [0, 1, 2, 3, 5, 8, 13, 100, 1000, 5000, 70000, 1 << 20];
    let want: Vec<String> = vals
        .iter()
        .map(|&v| {
            format!(
                "w: (scale) u8={} u16={} u32={} u64={} s8={} s16={} s32={} s64={} x8={:#x} \
                 x16={:#x} x32={:#x} x64={:#x} by=3",
                v as u8,
                v as u16,
                v as u32,
                v as u64,
                v as i8,
                v as i16,
                v as i32,
                v,
                v as u8,
                v as u16,
                v as u32,
                v as u64
            )
        })
        .collect();
    let got: Vec<&str> = out.lines().filter(|l| l.starts_with("w: ")).collect();
    assert_eq!(got, want, "{out}");
    let m: Vec<&str> = out.lines().filter(|l| l.starts_with("m: ")).collect();
    assert_eq!(m.len(), 12, "{out}");
    let field = |l: &str, k: &str| -> u64 {
        let v = l
            .split(&format!(" {k}="))
            .nth(1)
            .unwrap_or_else(|| panic!("{k} in {l}"))
            .split(' ')
            .next()
            .unwrap();
        u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("{l}"))
    };
    let main = sym(&t, "main");
    let bytes = std::fs::read(&t).unwrap();
    let elf = wprobe_elf::ElfInfo::open(&t).unwrap();
    for l in &m {
        assert_eq!(field(l, "off"), field(l, "abs"), "{l}");
        assert_eq!(field(l, "st1"), field(l, "sp8"), "{l}");
        assert_eq!(field(l, "st2"), field(l, "sp16"), "{l}");
        // The return address into main, and main's code around it read
        // through it: the byte there, and the 8 bytes before it (the end of
        // the call), as the file has them.
        let ret = field(l, "ret");
        assert!(ret > main && ret < main + 0x1000, "{l}");
        if transport == "perf" {
            // perf reads memory outside the sample's stack snapshot live,
            // when the sample is handled: this command has exited by then
            // (a documented limit of the perf transport).
            continue;
        }
        let off = elf.file_offset(ret).unwrap_or_else(|| panic!("{ret:#x}")) as usize;
        assert_eq!(field(l, "nest"), bytes[off] as u64, "{l}");
        let before = u64::from_le_bytes(bytes[off - 8..off].try_into().unwrap());
        assert_eq!(field(l, "neg"), before, "{l}");
    }
}

/// The command-line paths of one-liners beyond `-e … -c`: a `.bt` script
/// with `-o FILE` (the file holds what bpftrace's does, and the two blank
/// lines before the maps go to standard output, as bpftrace writes them,
/// in text and JSON); `-p PID` with `exit()`; `--event`, `-e` and an `.rpn`
/// program in one run; `bench -e`.
fn script_files_output_files_attach_mixing_and_bench() {
    let t = target();
    let b = t.display().to_string();
    let dir = crate::support::cli::scratch();
    let script = crate::support::cli::write(
        "count_add.bt",
        format!("uprobe:{b}:add {{ @n = count(); }}\nEND {{ printf(\"end\\n\"); }}\n"),
    );
    for (json, file, want) in [
        (false, "bt_out.txt", "Attaching 2 probes...\nend\n@n: 10\n"),
        (
            true,
            "bt_out.json",
            "{\"type\": \"attached_probes\", \"data\": {\"probes\": 2}}\n\
             {\"type\": \"printf\", \"data\": \"end\\n\"}\n\
             {\"type\": \"map\", \"data\": {\"@n\": 10}}\n",
        ),
    ] {
        let out = dir.join(file);
        let _ = std::fs::remove_file(&out);
        let cmd = format!("{b} calls");
        let mut args = vec![script.to_str().unwrap(), "-o", out.to_str().unwrap()];
        if json {
            args.extend(["-f", "json"]);
        }
        args.extend(["-c", &cmd]);
        let (stdout, err, code) = run(&args, &[]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(stdout, "\n\n");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), want);
    }
    // -p: the process sleeps 1.5 s, then calls add(1, 2) once.
    let mut child = std::process::Command::new(&t)
        .args(["sleep", "1500"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let pid = child.id().to_string();
    let (stdout, err, code) = run(
        &[
            "-e",
            &format!("uprobe:{b}:add {{ printf(\"%d %d %d\\n\", arg0, arg1, pid); exit(); }}"),
            "-p",
            &pid,
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(stdout, format!("Attaching 1 probe...\n1 2 {pid}\n\n\n"));
    assert!(child.wait().unwrap().success());
    // Probe events, a one-liner and an RPN program in one run.
    let rpn = crate::support::cli::write(
        "leaf_mixed.rpn",
        format!("name = {b}\nmajor = 7\noffset = leaf\n push r, rdi\n log 1\n"),
    );
    let (stdout, err, code) = run(
        &[
            rpn.to_str().unwrap(),
            "--event",
            &format!("p:ev {b}:mid x=%di:u32"),
            "-e",
            &format!("uprobe:{b}:leaf {{ @l = sum(arg0); }}"),
            "-c",
            &format!("{b} calls"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    let ev: Vec<&str> = stdout.lines().filter(|l| l.starts_with("ev: ")).collect();
    assert_eq!(
        ev,
        ["ev: (mid) x=0", "ev: (mid) x=1", "ev: (mid) x=2"],
        "{stdout}"
    );
    let logged: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" 7.0: ("))
        .map(|l| l.rsplit_once(' ').unwrap().1)
        .collect();
    assert_eq!(logged, ["(0)", "(2)", "(4)"], "{stdout}");
    assert!(stdout.ends_with("\n\n@l: 6\n"), "{stdout}");
    // bench -e: the one-liner's handler timed on a synthetic hit.
    let o = output_within(
        {
            let mut c = wprobe();
            c.args([
                "bench",
                "-e",
                &format!("uprobe:{b}:add {{ @c = count(); }}"),
            ]);
            c
        },
        120,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let row = text
        .lines()
        .find(|l| l.contains(&format!("{b}:add")))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[3], "compiled", "{row}");
    assert_eq!(cols[cols.len() - 1], "exit", "{row}");
    assert!(cols[4].parse::<f64>().unwrap() > 0.0, "{row}");
}

/// C++ names in `ustack` and `usym` output are demangled as bpftrace
/// prints them (`ns::f(int)+OFF`) unless `--no-demangle`, `config = {
/// cpp_demangle = 0 }` or `BPFTRACE_CPP_DEMANGLE=0` turns it off.
fn cxx_names_in_ustack_and_usym_are_demangled_unless_turned_off(tr: &str) {
    let prog = gcc(
        "trace_names",
        &progs().join("trace_names.cpp"),
        &["-O0", "-g", "-lstdc++"],
    );
    let p = prog.to_str().unwrap();
    let program = |config: &str| {
        format!(
            "{config}uprobe:{p}:_ZN2ns3ns13foo4bar3Ev {{ print(ustack(2)); print(usym(reg(\"ip\"))); }}"
        )
    };
    let with = |extra: &[&str], config: &str, env: &[(&str, &str)]| -> String {
        let text = program(config);
        let mut args = vec!["--transport", tr, "-q"];
        args.extend_from_slice(extra);
        args.extend(["-e", text.as_str(), "-c", p]);
        let (out, err, code) = run(&args, env);
        assert_eq!(code, Some(0), "{err}");
        out
    };
    // The first frame only: perf's unwinding from a function's entry
    // skips its caller (the frame pointer is still the caller's).
    let demangled = "\n        ns::ns1::foo::bar3()+0\n";
    let out = with(&[], "", &[]);
    assert!(out.starts_with(demangled), "{out}");
    assert!(out.contains("\nns::ns1::foo::bar3()\n"), "{out}");
    let mangled = "\n        _ZN2ns3ns13foo4bar3Ev+0\n";
    for out in [
        with(&["--no-demangle"], "", &[]),
        with(&[], "config = { cpp_demangle = 0 } ", &[]),
        with(&[], "", &[("BPFTRACE_CPP_DEMANGLE", "0")]),
    ] {
        assert!(out.starts_with(mangled), "{out}");
        assert!(out.contains("\n_ZN2ns3ns13foo4bar3Ev\n"), "{out}");
    }
}

/// The node of each CPU as sysfs lists them (every CPU 0 on one node).
fn numa_node_of(cpu: u64) -> u64 {
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else {
        return 0;
    };
    for ent in dir.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        let Some(node) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let list = std::fs::read_to_string(ent.path().join("cpulist")).unwrap_or_default();
        for part in list.trim().split(',').filter(|p| !p.is_empty()) {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            if let (Ok(a), Ok(b)) = (a.parse::<u64>(), b.parse::<u64>())
                && (a..=b).contains(&cpu)
            {
                return node;
            }
        }
    }
    0
}

/// `gid` is the hit thread's real group id, `numaid` the node of the CPU
/// it ran on, `nsecs(boot)` CLOCK_BOOTTIME (never behind the monotonic
/// clock), `nsecs(tai)` and `nsecs(sw_tai)` CLOCK_TAI (the wall clock plus
/// at most 37 s of leap seconds), and `exit(7)` ends wprobe with status 7
/// after the maps, under every transport.
fn gid_numaid_clocks_and_the_exit_status_of_a_hit(transport: &str) {
    let t = target();
    let prog = format!(
        "uprobe:{}:add /arg0 == 3/ {{ @n = count(); $m = nsecs; $b = nsecs(boot); $t = nsecs(tai); $s = nsecs(sw_tai); \
         printf(\"%d %d %d %d %d %llu %llu\\n\", gid, cpu, numaid, $b >= $m, $s >= $t, $t / 1000000000, $s / 1000000000); exit(7); }}",
        t.display()
    );
    let cmd = format!("{} calls", t.display());
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (out, err, code) = run(&["--transport", transport, "-e", &prog, "-c", &cmd], &[]);
    let after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(code, Some(7), "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}{err}");
    assert_eq!(lines[0], "Attaching 1 probe...");
    assert_eq!(&lines[2..], ["", "", "@n: 1"], "{out}");
    let f: Vec<u64> = lines[1].split(' ').map(|w| w.parse().unwrap()).collect();
    // SAFETY: getgid has no arguments and cannot fail.
    let gid = u64::from(unsafe { libc::getgid() });
    assert_eq!(f[0], gid, "{out}");
    assert_eq!(f[2], numa_node_of(f[1]), "{out}");
    assert_eq!((f[3], f[4]), (1, 1), "{out}");
    for tai in [f[5], f[6]] {
        assert!(
            tai >= before && tai <= after + 37,
            "{tai} not in {before}..={after}+37"
        );
    }
}

/// `exit(code)` in `BEGIN` and in an interval probe: wprobe prints what it
/// prints for `exit()` and ends with the code's low 8 bits; `exit()` is 0.
fn exit_code_of_a_special_probe_ends_the_run_with_it() {
    let (out, err, code) = run(&["-e", "BEGIN { exit(69); }"], &[]);
    assert_eq!(code, Some(69), "{err}");
    assert_eq!(out, "Attaching 1 probe...\n\n\n");
    let (out, err, code) = run(
        &[
            "-e",
            "i:ms:1 { @ = count(); printf(\"%d\\n\", gid); exit(256 + 3); }",
        ],
        &[],
    );
    assert_eq!(code, Some(3), "{err}");
    // SAFETY: getgid has no arguments and cannot fail.
    let gid = unsafe { libc::getgid() };
    assert_eq!(out, format!("Attaching 1 probe...\n{gid}\n\n\n@: 1\n"));
    let (_, err, code) = run(&["-e", "BEGIN { exit(); }"], &[]);
    assert_eq!(code, Some(0), "{err}");
}

/// The name `/etc/passwd` gives the user id `uid` (bpftrace's `username`).
fn passwd_name(uid: u32) -> String {
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 3 && f[2] == uid.to_string()).then(|| f[0].to_string())
        })
        .unwrap_or_default()
}

/// `username` prints the hit's user by name (in printf and as a map key),
/// `ntop` an IPv4 integer, a `pton` address with its family given or
/// taken from its size, and `hist(x, 2)` splits each power of two into 4
/// buckets with bpftrace's labels (5, 8 and 13 of `scale`'s arguments),
/// in text and in JSON, under every transport.
fn username_ntop_pton_and_fine_grained_hist_print_as_bpftrace_does(transport: &str) {
    let t = target();
    let prog = format!(
        "uprobe:{0}:add /arg0 == 3/ {{ printf(\"%s %s %s %s\\n\", username, ntop(arg0 + 0x0100007c), ntop(2, pton(\"10.0.0.1\")), ntop(pton(\"fe80::1\"))); }} \
         uprobe:{0}:scale {{ @k[username] = count(); if (arg0 >= 5 && arg0 <= 13) {{ @h = hist(arg0, 2); }} }}",
        t.display()
    );
    let cmd = format!("{} calls", t.display());
    // SAFETY: getuid has no arguments and cannot fail.
    let user = passwd_name(unsafe { libc::getuid() });
    let (out, err, code) = run(&["--transport", transport, "-e", &prog, "-c", &cmd], &[]);
    assert_eq!(code, Some(0), "{err}");
    let bar = "@".repeat(52);
    let none = " ".repeat(52);
    assert_eq!(
        out,
        format!(
            "Attaching 2 probes...\n{user} 127.0.0.1 10.0.0.1 fe80::1\n\n\n@h:\n\
             [5]                    1 |{bar}|\n\
             [6]                    0 |{none}|\n\
             [7]                    0 |{none}|\n\
             [8, 10)                1 |{bar}|\n\
             [10, 12)               0 |{none}|\n\
             [12, 14)               1 |{bar}|\n\
             \n@k[{user}]: 12\n"
        ),
        "{err}"
    );
    let (out, err, code) = run(
        &[
            "--transport",
            transport,
            "-f",
            "json",
            "-e",
            &prog,
            "-c",
            &cmd,
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(
            "{\"type\": \"hist\", \"data\": {\"@h\": [{\"min\": 5, \"max\": 5, \"count\": 1}, \
             {\"min\": 6, \"max\": 6, \"count\": 0}, {\"min\": 7, \"max\": 7, \"count\": 0}, \
             {\"min\": 8, \"max\": 9, \"count\": 1}, {\"min\": 10, \"max\": 11, \"count\": 0}, \
             {\"min\": 12, \"max\": 13, \"count\": 1}]}}\n"
        ),
        "{out}{err}"
    );
    assert!(
        out.contains(&format!(
            "{{\"type\": \"printf\", \"data\": \"{user} 127.0.0.1 10.0.0.1 fe80::1\\n\"}}\n"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{{\"type\": \"map\", \"data\": {{\"@k\": {{\"{user}\": 12}}}}}}\n"
        )),
        "{out}"
    );
}
