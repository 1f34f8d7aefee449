//! The in-process transport on real processes: the shared examples give
//! the ptrace transport's records byte for byte (example 14 changes the
//! program's output the same way); faulting reads are statuses; fuel stops
//! a runaway handler at every hit; every function of generated programs
//! probed (-O0/-O2, PIE/non-PIE, CET) leaves their output unchanged, and
//! the sites left unpatched are exactly those the eligibility rules
//! refuse; a SIGKILL of wprobe leaves the target running (dormant probes)
//! and `wprobe repair` restores the file's bytes; SIGINT restores them at
//! once; fork, exec, 64 threads, the program's own SIGSEGV/SIGTRAP
//! handlers and a static executable give the right output and counts.

use crate::case;
use crate::support::case::{Case, Need};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(
        auto_hands_a_run_inproc_cannot_start_to_ptrace_before_the_command_runs,
        Need::Ptrace
    ),
    case!(
        examples_give_the_ptrace_records_byte_for_byte,
        Need::Ptrace,
        Need::DebugRegisters
    ),
    case!(faulting_reads_are_statuses_as_under_ptrace, Need::Ptrace),
    case!(
        an_infinite_loop_is_stopped_by_fuel_at_every_hit,
        Need::Ptrace
    ),
    case!(
        every_function_probed_leaves_the_output_unchanged,
        Need::Ptrace
    ),
    case!(
        sigkill_of_wprobe_attached_then_repair_restores_the_file_bytes,
        Need::Ptrace
    ),
    case!(
        sigkill_of_wprobe_launched_then_repair_restores_the_file_bytes,
        Need::Ptrace
    ),
    case!(
        sigkill_of_wprobe_with_a_trap_site_leaves_the_target_running,
        Need::Ptrace
    ),
    case!(
        sigkill_of_wprobe_with_a_watchpoint_leaves_the_target_running,
        Need::Ptrace,
        Need::DebugRegisters
    ),
    case!(
        sigint_restores_the_bytes_and_the_target_runs_on,
        Need::Ptrace
    ),
    case!(
        sixty_four_threads_fork_signals_and_static_counts,
        Need::Ptrace
    ),
    case!(exec_leaves_the_new_image_unprobed_and_says_so, Need::Ptrace),
    case!(
        global_variables_from_8_threads_x_100000_calls_equal_ptrace_s,
        Need::Ptrace
    ),
    case!(a_full_ring_counts_every_dropped_run, Need::Ptrace),
    case!(
        suspend_restores_the_bytes_and_resume_patches_again,
        Need::Ptrace
    ),
    case!(
        sigterm_of_wprobe_launched_restores_and_passes_the_signal_on,
        Need::Ptrace
    ),
    case!(exit_1_and_3_are_counted_and_name_ptrace, Need::Ptrace),
    case!(
        an_artifact_of_another_engine_is_refused_by_the_agent,
        Need::Ptrace
    ),
    case!(no_heap_allocation_per_hit_in_the_agent, Need::Ptrace),
    case!(attaching_to_threads_that_exist_counts_every_call @ every_transport),
    case!(
        a_hit_from_a_signal_handler_during_a_hit_is_missed_and_counted,
        Need::Ptrace
    ),
    case!(a_reused_thread_control_block_is_a_new_thread @ every_transport),
    case!(the_probed_codes_flags_survive_a_hit @ every_transport),
    case!(a_second_thread_takes_the_store_from_the_first_exactly),
    case!(a_hit_writes_no_deeper_than_the_stack_footprint_below_rsp),
    case!(
        sigint_with_a_trap_site_restores_it_and_lets_the_threads_go,
        Need::Ptrace
    ),
];

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::target::{Lines, spawn_piped};

use crate::support::cli::{
    examples, gcc, output_within, probe_target, progs, scratch, stderr, wprobe, write,
};

/// `wprobe run ARGS` (JSON records); returns (records without the varying
/// pid/tid/cpu/time, the target's own output lines, stderr).
fn run_json(transport: &str, args: &[&str]) -> (Vec<serde_json::Value>, Vec<String>, String) {
    run_json_env(transport, args, &[])
}

/// [`run_json`] with environment variables for wprobe.
fn run_json_env(
    transport: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Vec<serde_json::Value>, Vec<String>, String) {
    let mut c = wprobe();
    c.envs(env.iter().copied());
    c.arg("run")
        .args(["--transport", transport, "--format", "json"])
        .args(args)
        .current_dir(scratch());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{transport} {args:?}: {err}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (json, text): (Vec<&str>, Vec<&str>) = out.lines().partition(|l| l.starts_with('{'));
    let records = json
        .into_iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            // What differs between transports by design: who ran and how,
            // and the identities and times of the hits.
            let mut v = crate::support::cli::without_transport(v);
            if let Some(m) = v.as_object_mut() {
                for k in ["pid", "tid", "cpu", "time_ns"] {
                    m.remove(k);
                }
            }
            v
        })
        .collect();
    (records, text.into_iter().map(String::from).collect(), err)
}

/// Examples 1–15 under both transports: the same records (every field but
/// pid, tid, CPU and time), the same summary counts, the same program
/// output; example 11 (a watchpoint) is refused, naming the transport that
/// has them.
fn examples_give_the_ptrace_records_byte_for_byte() {
    let target = probe_target();
    let t = target.to_str().unwrap();
    let mut compared = 0;
    for n in 1..=15 {
        let file = std::fs::read_dir(examples())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.extension().is_some_and(|x| x == "rpn")
                    && p.file_name()
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .starts_with(&format!("{n:02}_"))
            })
            .unwrap();
        let f = file.to_str().unwrap();
        let (want, want_out, _) = run_json("ptrace", &[f, "--", t]);
        let (got, got_out, err) = run_json("inproc", &[f, "--", t]);
        assert_eq!(got, want, "{f}: {err}");
        assert_eq!(got_out, want_out, "{f}: the program's output");
        // The default, `auto`, chooses inproc for every example and
        // gives the same records.
        let (auto, auto_out, err) = run_json("auto", &["-v", f, "--", t]);
        assert!(
            err.contains("wprobe: transport inproc: the fastest; the run needs nothing it lacks"),
            "{f}: {err}"
        );
        assert_eq!(auto, want, "{f} under auto: {err}");
        assert_eq!(auto_out, want_out, "{f} under auto: the program's output");
        let expect = if n == 14 {
            "counter=1001 last=213"
        } else {
            "counter=4 last=27"
        };
        assert_eq!(got_out, [expect], "{f}");
        assert!(got.len() >= 2, "{f}: records and the stats line");
        compared += 1;
    }
    assert_eq!(compared, 15);
}

/// The agent checks what it is handed: a module precompiled by wprobe's
/// own engine (another configuration: AVX allowed, signals-based traps)
/// instead of the agent's is refused by the agent's wasmtime, the error
/// names the setting, wprobe exits 2, and the launched command, which has
/// run none of its own code, does not run at all (it ran untraced, then
/// wprobe reported the failure).
fn an_artifact_of_another_engine_is_refused_by_the_agent() {
    let t = probe_target();
    let prog = write(
        "inproc_foreign.rpn",
        "name = probe_target\nvars = 1\noffset = target_fn\n inc lv, 0\n abort\n",
    );
    let mut c = wprobe();
    c.args(["run", "--no-cache", "--transport", "inproc"])
        .arg(&prog)
        .arg("--")
        .arg(&t)
        .env("WPROBE_INPROC_FOREIGN_ARTIFACT", "1");
    let o = output_within(c, 60);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: loading `inproc_foreign` into process "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains(
            ": agent: Incompatible: compilation settings of module incompatible with \
                       native host: compilation setting "
        ),
        "{line}"
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "");
}

/// A handler reads (read_mem, read_str), checks and writes unmapped,
/// kernel and non-canonical addresses: the statuses logged are the ptrace
/// transport's, nothing traps, the program's output is unchanged.
fn faulting_reads_are_statuses_as_under_ptrace() {
    let mut body = String::new();
    for (i, addr) in [0x10u64, 0xffff_ffff_8100_0000, 0x0000_8000_0000_0000]
        .iter()
        .enumerate()
    {
        let at = 256 + 32 * i;
        body += &format!(
            "(i64.store (i32.const {a0}) (i64.extend_i32_s (call $read_mem (i64.const {addr}) (i32.const 64) (i32.const 8))))
             (i64.store (i32.const {a1}) (i64.extend_i32_s (call $read_str (i64.const {addr}) (i32.const 64) (i32.const 8))))
             (i64.store (i32.const {a2}) (i64.extend_i32_s (call $check_access (i64.const {addr}) (i32.const 1))))
             (i64.store (i32.const {a3}) (i64.extend_i32_s (call $write_mem (i64.const {addr}) (i32.const 64) (i32.const 8))))\n",
            addr = *addr as i64,
            a0 = at,
            a1 = at + 8,
            a2 = at + 16,
            a3 = at + 24,
        );
    }
    let wat = format!(
        r#"(module
  (import "wprobe" "read_mem" (func $read_mem (param i64 i32 i32) (result i32)))
  (import "wprobe" "read_str" (func $read_str (param i64 i32 i32) (result i32)))
  (import "wprobe" "check_access" (func $check_access (param i64 i32) (result i32)))
  (import "wprobe" "write_mem" (func $write_mem (param i64 i32 i32) (result i32)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "h") (result i32)
    {body}
    (drop (call $emit_log (i32.const 1) (i32.const 1) (i32.const 256) (i32.const 96) (i32.const 0) (i32.const 0)))
    (i32.const 0)))"#
    );
    let p = write("inproc_faults.wat", wat);
    let t = probe_target();
    let args = [
        p.to_str().unwrap(),
        "--probe",
        "target_fn=h",
        "--",
        t.to_str().unwrap(),
    ];
    let (want, want_out, _) = run_json("ptrace", &args);
    let (got, got_out, err) = run_json("inproc", &args);
    assert_eq!(got, want, "{err}");
    assert_eq!(got_out, ["counter=4 last=27"]);
    assert_eq!(got_out, want_out);
    let stats = got.last().unwrap();
    assert_eq!((&stats["runs"], &stats["traps"]), (&3.into(), &0.into()));
    // Every read short (0 bytes), every string unreadable at byte 0, every
    // check and write FAULT.
    let hex = got[0]["data_hex"].as_str().unwrap();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|k| u8::from_str_radix(&hex[k..k + 2], 16).unwrap())
        .collect();
    let words: Vec<i64> = bytes
        .chunks(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let fault = hostabi::Status::Fault as i64;
    assert_eq!(words, [0, -1, fault, fault].repeat(3), "{got:?}");
}

/// 1,000 hits of a handler that loops forever: every run ends by fuel,
/// the program's output is unchanged.
fn an_infinite_loop_is_stopped_by_fuel_at_every_hit() {
    let p = write(
        "inproc_spin.wat",
        "(module (func (export \"h\") (result i32) (loop $l (br $l)) (i32.const 0)))",
    );
    let t = probe_target();
    let (got, out, err) = run_json(
        "inproc",
        &[
            p.to_str().unwrap(),
            "--probe",
            "target_fn=h",
            "--fuel",
            "100000",
            "--",
            t.to_str().unwrap(),
            "1000",
        ],
    );
    let last = (0..1000u64).sum::<u64>() + 1;
    assert_eq!(out, [format!("counter={last} last={}", 999 * 7 + 13)]);
    let s = got.last().unwrap();
    assert_eq!(
        (&s["hits"], &s["runs"], &s["fuel_exhausted"], &s["traps"]),
        (&1000.into(), &1000.into(), &1000.into(), &0.into()),
        "{err}"
    );
}

/// A generated program of functions of many shapes (tiny, empty, loops
/// whose back edge lands in the first bytes, recursion, RIP-relative
/// accesses at entry, switch tables, tail calls), built at -O0 and -O2,
/// PIE and non-PIE, with and without CET: every function probed with a
/// handler that does nothing. The output is the untraced output, every
/// probe counts the calls ptrace counts, and the probes that take a near
/// jump into padding or a trap instead of a 5-byte jump are exactly the
/// sites the eligibility rules refuse (each named with its reason).
fn every_function_probed_leaves_the_output_unchanged() {
    let src = scratch().join("inproc_shapes.c");
    std::fs::write(&src, shapes_program()).unwrap();
    let (mut refused_total, mut applied_total, mut near_total) = (0, 0, 0);
    for opt in ["-O0", "-O2"] {
        for pie in [["-fPIE", "-pie"], ["-fno-pie", "-no-pie"]] {
            for cet in ["-fcf-protection=full", "-fcf-protection=none"] {
                let name = format!("shapes{opt}{}{}", pie[1], &cet[16..]);
                let exe = gcc(&name, &src, &[opt, pie[0], pie[1], cet]);
                let e = exe.to_str().unwrap();
                let plain = Command::new(&exe).output().unwrap();
                let untraced = String::from_utf8(plain.stdout).unwrap();
                let prog = format!("uprobe:{e}:s_* {{ @[probe] = count(); }}");
                let (ptrace_out, _) = oneliner("ptrace", &prog, e);
                // A line per trap site (beyond 8 they are said in one).
                let (out, err) = oneliner_env("inproc", &prog, e, &[("WPROBE_DEBUG", "1")]);
                let (maps, text) = split_maps(&out);
                assert_eq!(text, untraced, "{name}: the program's output");
                let (pmaps, _) = split_maps(&ptrace_out);
                // The sites that trap, each with the eligibility rule's
                // reason, and those that took a near jump to a cave in
                // padding instead (`-v` names them, with the same reason).
                let refused: Vec<String> = err
                    .lines()
                    .filter_map(|l| {
                        let (_, l) = l.split_once(" in ")?;
                        let (f, rest) = l.split_once(": ")?;
                        (rest.starts_with("no jump can go there (")
                            || rest.starts_with("a near jump (`jmp rel8`)"))
                        .then(|| f.to_string())
                    })
                    .collect();
                near_total += err
                    .lines()
                    .filter(|l| l.contains(": a near jump (`jmp rel8`)"))
                    .count();
                let mut refused = refused;
                refused.sort();
                let want_refused = refused_by_rules(&exe);
                assert_eq!(refused, want_refused, "{name}: {err}");
                refused_total += refused.len();
                applied_total += maps.len() - refused.len();
                // Every probe, jump or trap, counts what ptrace counts.
                assert_eq!(maps, pmaps, "{name}: {out}\n{err}");
            }
        }
    }
    // Both kinds of site exist in these builds, and near jumps among the
    // refused ones (-O2 aligns functions: padding between them).
    assert!(
        refused_total > 0 && applied_total > 200 && near_total > 0,
        "{refused_total} {applied_total} {near_total}"
    );
}

/// `wprobe run --transport T -e PROG -c CMD`: (stdout, stderr).
fn oneliner(transport: &str, prog: &str, cmd: &str) -> (String, String) {
    oneliner_env(transport, prog, cmd, &[])
}

/// [`oneliner`] with environment variables set for wprobe.
fn oneliner_env(transport: &str, prog: &str, cmd: &str, env: &[(&str, &str)]) -> (String, String) {
    let mut c = wprobe();
    c.args(["run", "-v", "--transport", transport, "-e", prog, "-c", cmd]);
    c.envs(env.iter().copied());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{transport}: {err}");
    (String::from_utf8(o.stdout).unwrap(), err)
}

/// The `@[probe]: N` lines of a one-liner's output, and the rest.
fn split_maps(out: &str) -> (Vec<(String, u64)>, String) {
    let mut maps = Vec::new();
    let mut text = String::new();
    for l in out.lines() {
        if let Some(rest) = l.strip_prefix("@[") {
            let (k, v) = rest.split_once("]: ").unwrap();
            maps.push((k.to_string(), v.parse().unwrap()));
        } else if !l.is_empty() && l != "Attaching 1 probe..." && !l.starts_with("Attaching ") {
            text += l;
            text += "\n";
        }
    }
    maps.sort();
    (maps, text)
}

/// The `s_*` functions of `exe` whose entry the eligibility rules refuse,
/// in symbol order as wprobe reports them.
fn refused_by_rules(exe: &Path) -> Vec<String> {
    let elf = wprobe_elf::ElfInfo::open(exe).unwrap();
    let mut funcs: Vec<String> = (0..40)
        .map(|i| format!("s_{i}"))
        .filter(|f| matches!(elf.lookup(f), wprobe_elf::Lookup::Found(_)))
        .filter(|f| {
            let wprobe_elf::Lookup::Found(s) = elf.lookup(f) else {
                unreachable!()
            };
            runtime::transport::inproc::refusal(exe, s.value)
                .unwrap()
                .is_some()
        })
        .collect();
    funcs.sort();
    funcs
}

/// The generated program of [`every_function_probed_leaves_the_output_unchanged`].
fn shapes_program() -> String {
    let mut s =
        String::from("#include <stdio.h>\nvolatile long g, h[8];\nlong (*volatile fp)(long);\n");
    let mut calls = String::new();
    for i in 0..40 {
        let f = match i % 10 {
            0 => format!("long s_{i}(long n) {{ return n + {i}; }}"),
            1 => format!("void s_{i}(long n) {{ (void)n; }}"),
            2 => format!(
                "long s_{i}(long n) {{ long s = 0; while (n-- > 0) s += n ^ g; return s; }}"
            ),
            3 => format!("long s_{i}(long n) {{ return n <= 1 ? 1 : n + s_{i}(n - 1); }}"),
            4 => format!("long s_{i}(long n) {{ g += n; return g * {i}; }}"),
            5 => format!(
                "long s_{i}(long n) {{ switch (n & 7) {{ case 0: return 3; case 1: return g; \
                 case 2: return n * 5; case 3: return n - 1; case 4: return 9; case 5: return n ^ 3; \
                 default: return h[n & 7]; }} }}"
            ),
            6 => format!("long s_{i}(long n) {{ return fp(n + {i}); }}"),
            7 => format!(
                "long s_{i}(long n) {{ long a[16]; for (int k = 0; k < 16; k++) a[k] = n * k; \
                 return a[n & 15] + h[n & 7]; }}"
            ),
            8 => format!(
                "long s_{i}(long n) {{ return n > 3 ? s_{}(n - 1) : n; }}",
                i - 1
            ),
            _ => format!(
                "long s_{i}(long n) {{ l: if (n > 100) {{ n -= 7; goto l; }} return n * {i}; }}"
            ),
        };
        s += &format!("__attribute__((noinline)) {f}\n");
        calls += &if i % 10 == 1 {
            format!("    s_{i}(k); t += k;\n")
        } else {
            format!("    t += s_{i}(k % 300);\n")
        };
    }
    s += "static long id(long n) { return n; }\n";
    s += "int main(void) {\n  long t = 0;\n  fp = id;\n  for (long k = 0; k < 500; k++) {\n";
    s += &calls;
    s += "  }\n  printf(\"total %ld g %ld\\n\", t, g);\n  return 0;\n}\n";
    s
}

/// `gated` (reads counts on stdin, calls `work` that many times, prints the
/// running sum) and its `work` symbol's file bytes.
fn gated() -> (PathBuf, u64, Vec<u8>) {
    crate::support::target::gated("inproc_gated", 16)
}

/// The end of a `gated` run: `more` calls after `before` ones, then its
/// input closed; its two sums, and its exit status 0.
fn finish_gated(
    mut target: std::process::Child,
    mut to: std::process::ChildStdin,
    mut from: Lines,
    before: i64,
    more: i64,
) {
    writeln!(to, "{more}").unwrap();
    drop(to);
    let sum = gated_sum(before + more);
    assert_eq!(from.next().unwrap().unwrap(), format!("sum {sum}"));
    assert_eq!(from.next().unwrap().unwrap(), format!("done {sum}"));
    assert!(target.wait().unwrap().success());
}

/// Bytes of a live process.
fn live(pid: u32, addr: u64, len: usize) -> Vec<u8> {
    crate::support::cli::live_bytes(pid, addr, len)
}

/// Waits until `work`'s first byte is a jump (armed).
fn wait_armed(pid: u32, work: u64) {
    crate::support::target::wait_bytes(pid, work, &[0xe9], 20);
}

/// The handler of the gated tests: logs `work`'s argument.
fn gated_prog(exe: &Path) -> PathBuf {
    write(
        "inproc_gated.rpn",
        format!(
            "name = {}\noffset = work\nopcode = 0x55\n push r, rdi\n log 1\n",
            exe.display()
        ),
    )
}

fn repair(pid: u32) -> std::process::Output {
    wprobe()
        .args(["repair", "--pid", &pid.to_string()])
        .output()
        .unwrap()
}

/// Sum `gated` prints after its first `n` calls.
fn gated_sum(n: i64) -> i64 {
    (0..n).map(|i| i * 3 + 1).sum()
}

/// After wprobe (attached) is killed: the jump stays (no tracer can
/// prevent it), the probes go dormant, the program's calls go on through
/// the stub; `wprobe repair` puts the file's bytes back; 10,000 more calls
/// run unharmed.
fn sigkill_of_wprobe_attached_then_repair_restores_the_file_bytes() {
    let (exe, work, orig) = gated();
    let (target, mut to, mut from) = spawn_piped(&exe, &[]);
    let pid = target.id();
    let mut w = wprobe()
        .arg("run")
        .arg(gated_prog(&exe))
        .args(["--transport", "inproc", "-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_armed(pid, work);
    writeln!(to, "3").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(3))
    );
    w.kill().unwrap();
    w.wait().unwrap();
    // Calls before and after the probes went dormant (2 s without a beat).
    writeln!(to, "100").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(103))
    );
    std::thread::sleep(Duration::from_millis(2500));
    writeln!(to, "100").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(203))
    );
    assert_eq!(live(pid, work, 1), [0xe9], "the jump is still there");
    let r = repair(pid);
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        format!("wprobe: restored 1 site in process {pid}\n"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(r.status.success());
    assert_eq!(live(pid, work, 16), orig, "the file's bytes");
    assert_eq!(repair(pid).status.code(), Some(1), "nothing left to repair");
    finish_gated(target, to, from, 203, 10_000);
}

/// `gated` with wprobe attached (`run PROG --transport inproc OUT -p
/// PID`, standard output piped), PROG one probe logging `rdi` on the `ret`
/// that ends `work` — no window fits there: its site traps — once the
/// trap (`hlt`) is in place and the target made `calls` calls through it.
struct TrapSiteRun {
    target: std::process::Child,
    to: std::process::ChildStdin,
    from: Lines,
    wprobe: std::process::Child,
    pid: u32,
    ret: u64,
}

fn attach_at_ret_of_work(name: &str, out: &[&str], calls: i64) -> TrapSiteRun {
    let (exe, work, _) = gated();
    let elf = wprobe_elf::ElfInfo::open(&exe).unwrap();
    let wprobe_elf::Lookup::Found(f) = elf.lookup("work") else {
        panic!("no work");
    };
    let ret = work + f.size - 1;
    assert_eq!(elf.bytes_at(ret, 1).unwrap(), [0xc3], "work ends in ret");
    let prog = write(
        name,
        format!(
            "name = {}\noffset = work + {}\nopcode = 0xc3\n push r, rdi\n log 1\n",
            exe.display(),
            f.size - 1
        ),
    );
    let (target, mut to, mut from) = spawn_piped(&exe, &[]);
    let pid = target.id();
    let wprobe = wprobe()
        .arg("run")
        .arg(&prog)
        .args(["--transport", "inproc"])
        .args(out)
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::support::cli::wait_patched(pid, ret, 0xc3);
    assert_eq!(live(pid, ret, 1), [0xf4], "a trap (`hlt`), not a jump");
    writeln!(to, "{calls}").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(calls))
    );
    TrapSiteRun {
        target,
        to,
        from,
        wprobe,
        pid,
        ret,
    }
}

/// A site where no window fits traps instead (a probe on the `ret` that
/// ends `work`): every thread stays seized. When wprobe (attached) is
/// killed, the kernel lets the threads go with the trap in place; the
/// watchdog puts the byte back at once, and the program's later calls run
/// unharmed.
fn sigkill_of_wprobe_with_a_trap_site_leaves_the_target_running() {
    let TrapSiteRun {
        target,
        to,
        from,
        wprobe: mut w,
        pid,
        ret,
    } = attach_at_ret_of_work("inproc_trap.rpn", &["-o", "/dev/null"], 3);
    w.kill().unwrap();
    w.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut w.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains(&format!(
            "wprobe: process {pid}: {ret:#x} in work: no jump can go there ("
        )),
        "{err}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while live(pid, ret, 1) != [0xc3] {
        assert!(Instant::now() < deadline, "the trap is still there: {err}");
        std::thread::sleep(Duration::from_millis(10));
    }
    finish_gated(target, to, from, 3, 1000);
    // The journal of the killed run stays for `wprobe repair` while the
    // process lives; it ended: no journal left behind for a later process
    // with its pid (the suite left one per run before).
    let _ = std::fs::remove_file(runtime::transport::inproc::journal::path(pid as i32));
}

/// A watchpoint in an inproc run, then a SIGKILL of wprobe (attached):
/// the watchpoint is a perf breakpoint event of wprobe's, which the kernel
/// removes with wprobe's descriptors, so the program's later writes do
/// not trap and it runs to its end; before the kill every write ran the
/// handler in the target (`rip` after the store).
fn sigkill_of_wprobe_with_a_watchpoint_leaves_the_target_running() {
    let exe = gcc(
        "inproc_watched",
        &progs().join("watched.c"),
        &["-O1", "-fno-pie", "-no-pie"],
    );
    let prog = write(
        "inproc_watched.rpn",
        format!(
            "name = {}\noffset = g:g+7\nwatchpoint = w\n push r, rip\n log 1\n",
            exe.display()
        ),
    );
    let recs = scratch().join("inproc_watched.out");
    let (mut target, mut to, mut from) = spawn_piped(&exe, &[]);
    let pid = target.id();
    // A journal an earlier process with this pid left is not this run's.
    let _ = std::fs::remove_file(runtime::transport::inproc::journal::path(pid as i32));
    let mut w = wprobe()
        .arg("run")
        .arg(&prog)
        .args(["--transport", "inproc", "--format", "json", "-o"])
        .arg(&recs)
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Armed once the process is traced by wprobe.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .any(|l| l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0"))
    {
        assert!(Instant::now() < deadline, "not traced within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    writeln!(to, "3").unwrap();
    assert_eq!(from.next().unwrap().unwrap(), "g 3");
    // The three records are written.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&recs)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"kind\":\"log\""))
        .count()
        < 3
    {
        assert!(Instant::now() < deadline, "no records");
        std::thread::sleep(Duration::from_millis(20));
    }
    w.kill().unwrap();
    w.wait().unwrap();
    // Watchpoints alone need no watchdog (nothing to restore): none spoke.
    let mut err = String::new();
    std::io::Read::read_to_string(&mut w.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!err.contains("watchdog"), "{err}");
    writeln!(to, "5").unwrap();
    assert_eq!(from.next().unwrap().unwrap(), "g 8");
    drop(to);
    assert_eq!(from.next().unwrap().unwrap(), "done");
    assert!(target.wait().unwrap().success());
    // Nothing was patched: no journal was written.
    assert!(!runtime::transport::inproc::journal::path(pid as i32).exists());
}

/// The same with a command wprobe launched: the command outlives wprobe
/// (it is not traced while it runs) and finishes with its untraced output.
fn sigkill_of_wprobe_launched_then_repair_restores_the_file_bytes() {
    let (exe, work, orig) = gated();
    let mut w = wprobe()
        .arg("run")
        .arg(gated_prog(&exe))
        .args(["--transport", "inproc", "-o", "/dev/null", "--"])
        .arg(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = w.stdin.take().unwrap();
    let mut from = BufReader::new(w.stdout.take().unwrap()).lines();
    let wpid = w.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid: u32 = loop {
        let kids = std::fs::read_to_string(format!("/proc/{wpid}/task/{wpid}/children"))
            .unwrap_or_default();
        if let Some(p) = kids.split_whitespace().next() {
            break p.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "no child");
        std::thread::sleep(Duration::from_millis(20));
    };
    wait_armed(pid, work);
    writeln!(to, "5").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(5))
    );
    w.kill().unwrap();
    w.wait().unwrap();
    writeln!(to, "1000").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(1005))
    );
    let r = repair(pid);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(live(pid, work, 16), orig, "the file's bytes");
    drop(to);
    let sum = gated_sum(1005);
    assert_eq!(from.next().unwrap().unwrap(), format!("done {sum}"));
}

/// SIGINT while attached: wprobe restores the bytes itself, removes its
/// journal and exits 0; the program runs on.
fn sigint_restores_the_bytes_and_the_target_runs_on() {
    let (exe, work, orig) = gated();
    let (target, mut to, mut from) = spawn_piped(&exe, &[]);
    let pid = target.id();
    let w = wprobe()
        .arg("run")
        .arg(gated_prog(&exe))
        .args([
            "--transport",
            "inproc",
            "--format",
            "json",
            "-p",
            &pid.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_armed(pid, work);
    writeln!(to, "7").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(7))
    );
    crate::support::cli::signal(w.id(), "INT");
    let o = output_within_child(w, 30);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(live(pid, work, 16), orig, "the file's bytes");
    assert!(!runtime::transport::inproc::journal::path(pid as i32).exists());
    let records = String::from_utf8(o.stdout).unwrap();
    assert_eq!(records.lines().filter(|l| l.contains("\"log\"")).count(), 7);
    finish_gated(target, to, from, 7, 10_000);
}

/// SIGINT while attached with a site that got a trap (the `ret` of
/// `work`, reached by no jump: no room for a 5-byte jump): wprobe puts the
/// byte back itself (its trap journal and its patch journal are gone, so
/// no watchdog did it), lets the threads it kept seized go (no tracer
/// left) and exits 0; every hit before the signal has its record, and the
/// program runs on.
fn sigint_with_a_trap_site_restores_it_and_lets_the_threads_go() {
    let TrapSiteRun {
        target,
        to,
        from,
        wprobe: w,
        pid,
        ret,
    } = attach_at_ret_of_work("inproc_trap_int.rpn", &["--format", "json"], 7);
    crate::support::cli::signal(w.id(), "INT");
    let o = output_within_child(w, 30);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(live(pid, ret, 1), [0xc3], "the ret is back: {err}");
    assert!(!runtime::transport::inproc::journal::path(pid as i32).exists());
    assert!(!runtime::transport::common::journal::path(pid as i32).exists());
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("\nTracerPid:\t0\n"), "{status}");
    let records = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        records.lines().filter(|l| l.contains("\"log\"")).count(),
        7,
        "{records}"
    );
    finish_gated(target, to, from, 7, 10_000);
}

use crate::support::cli::output_within_child;

/// Waits until process `pid` has had the same number of perf events open
/// (at least one) for 300 ms, at most 30 s.
fn wait_perf_events_settled(pid: u32) {
    let count = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .filter(|l| l.to_string_lossy() == "anon_inode:[perf_event]")
                    .count()
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut last, mut since) = (count(), Instant::now());
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let n = count();
        if n != last || n == 0 {
            (last, since) = (n, Instant::now());
        } else if since.elapsed() >= Duration::from_millis(300) {
            return;
        }
    }
    panic!("the perf events of process {pid} did not settle within 30 s ({last} open)");
}

/// `progs/inproc_target.c`, dynamic or static.
fn inproc_target(static_: bool) -> PathBuf {
    let src = progs().join("inproc_target.c");
    if static_ {
        gcc("inproc_target_static", &src, &["-O0", "-static"])
    } else {
        gcc("inproc_target", &src, &["-O0"])
    }
}

/// `@n: COUNT` of `count()` on `target` under a transport; (count, the
/// program's output lines).
fn count_calls(transport: &str, exe: &Path, args: &str) -> (u64, Vec<String>, String) {
    let prog = format!("uprobe:{}:target {{ @n = count(); }}", exe.display());
    let (out, err) = oneliner(transport, &prog, &format!("{} {args}", exe.display()));
    let n = out
        .lines()
        .find_map(|l| l.strip_prefix("@n: "))
        .map_or(0, |v| v.parse().unwrap());
    let text = out
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('@') && !l.starts_with("Attaching"))
        .map(String::from)
        .collect();
    (n, text, err)
}

/// 64 threads created and joined, a fork (the child's probes dormant: its
/// calls are not counted, as under ptrace without -f), the program's own
/// SIGSEGV and SIGTRAP handlers (an int3 of its own included), a static
/// executable: the program's output and the counts are ptrace's.
fn sixty_four_threads_fork_signals_and_static_counts() {
    let dynamic = inproc_target(false);
    let fixed = inproc_target(true);
    let cases: [(&Path, &str, u64, &[&str]); 4] = [
        (
            &dynamic,
            "threads 64 2000",
            128_000,
            &["threads 64 sum 128064000"],
        ),
        (
            &dynamic,
            "fork 1000",
            2000,
            &["child sum 500500", "parent sum 1001000 child status 0"],
        ),
        (
            &dynamic,
            "signals 1000",
            1000,
            &["signals segv 1 trap 2 sum 250500 own handlers 1 altstack 0"],
        ),
        (
            &fixed,
            "threads 8 10000",
            80_000,
            &["threads 8 sum 400040000"],
        ),
    ];
    for (exe, args, calls, text) in cases {
        let (n, out, err) = count_calls("inproc", exe, args);
        assert_eq!(out, text, "{args}: {err}");
        assert_eq!(n, calls, "{args}: {err}");
        let (pn, pout, _) = count_calls("ptrace", exe, args);
        assert_eq!((n, &out), (pn, &pout), "{args}: as under ptrace");
    }
}

/// exec replaces the image the probes were in: the calls before it are
/// counted, the new image runs unprobed (ptrace re-arms it; inproc says it
/// does not), and the program's output is its untraced output.
fn exec_leaves_the_new_image_unprobed_and_says_so() {
    let exe = inproc_target(false);
    // Long enough after the exec for the transport to notice it.
    let (n, out, err) = count_calls("inproc", &exe, "exec 100 linger");
    assert_eq!(out, ["before exec sum 5050", "threads 1 sum 5050"], "{err}");
    assert_eq!(n, 100, "{err}");
    let pid = err
        .lines()
        .find_map(|l| l.strip_prefix("wprobe: process ")?.split_once(' '))
        .map(|(p, _)| p.to_string())
        .unwrap_or_else(|| panic!("no exec message: {err}"));
    assert!(
        !runtime::transport::inproc::journal::path(pid.parse().unwrap()).exists(),
        "no journal outlives the process"
    );
    assert!(
        err.contains(&format!(
            "wprobe: process {pid} executed a new program: its probes went with the old one \
             (--transport ptrace arms them in the new program)\n"
        )),
        "{err}"
    );
}

/// `inproc_target` and a program `name` of global variables on it: a
/// count of `target`'s calls and a read-modify-write sum of their argument
/// (which a concurrent run would lose updates of), both logged at `done`.
fn globals_program(name: &str) -> (PathBuf, PathBuf) {
    let exe = inproc_target(false);
    let p = write(
        name,
        format!(
            "name = {}\ngvars = 2\noffset = target\n inc gv, 0\n push gv, 1\n push r, rdi\n add\n \
             pop gv, 1\n abort\noffset = done\n push 0\n push 2\n log gv\n",
            exe.display()
        ),
    );
    (exe, p)
}

/// 8 threads × 100,000 calls with a program of global variables (a count
/// and a read-modify-write sum of the argument, which a concurrent run
/// would lose updates of): the values logged once every thread was joined
/// are exact and the ptrace transport's.
fn global_variables_from_8_threads_x_100000_calls_equal_ptrace_s() {
    let (exe, p) = globals_program("inproc_globals.rpn");
    let args = [
        p.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "threads",
        "8",
        "100000",
    ];
    let (want, want_out, _) = run_json("ptrace", &args);
    let (got, got_out, err) = run_json("inproc", &args);
    assert_eq!(got_out, ["threads 8 sum 40000400000"], "{err}");
    assert_eq!(got_out, want_out);
    let log = &got[0];
    let calls = 800_000u64;
    let sum: u64 = 8 * (0..100_000u64).sum::<u64>();
    assert_eq!(
        log["items"][0]["values"],
        serde_json::json!([calls, sum]),
        "{got:?}"
    );
    assert_eq!(got, want, "{err}");
    let s = got.last().unwrap();
    assert_eq!(
        (&s["hits"], &s["missed"]),
        (&(calls + 1).into(), &0.into()),
        "{err}"
    );
}

/// A ring of one page while wprobe is stopped (SIGSTOP): the producer
/// waits for room a bounded time (1 s), then drops the run and counts it;
/// once the heartbeat is stale the probes are dormant and further calls are
/// counted as missed; after SIGCONT the probes work again. Every call is
/// accounted for: hits + missed is every call, records + dropped is every
/// hit, and the target finished its calls in bounded time.
fn a_full_ring_counts_every_dropped_run() {
    let (exe, work, _) = gated();
    let (mut target, mut to, mut from) = spawn_piped(&exe, &[]);
    let pid = target.id();
    let w = wprobe()
        .arg("run")
        .arg(gated_prog(&exe))
        .args([
            "--transport",
            "inproc",
            "--format",
            "json",
            "-p",
            &pid.to_string(),
        ])
        .env("WPROBE_INPROC_RING_BYTES", "4096")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_armed(pid, work);
    let signal = |sig: &str| {
        assert!(
            Command::new("kill")
                .args([sig, &w.id().to_string()])
                .status()
                .unwrap()
                .success()
        );
    };
    signal("-STOP");
    let t0 = Instant::now();
    writeln!(to, "300").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(300))
    );
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(10), "the target waited {took:?}");
    signal("-CONT");
    // The heartbeat is fresh again within a beat or two.
    std::thread::sleep(Duration::from_millis(500));
    writeln!(to, "10").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(310))
    );
    signal("-INT");
    let o = output_within_child(w, 30);
    let err = stderr(&o);
    let out = String::from_utf8(o.stdout).unwrap();
    let logs = out
        .lines()
        .filter(|l| l.contains("\"kind\":\"log\""))
        .count() as u64;
    let stats: serde_json::Value =
        serde_json::from_str(out.lines().rfind(|l| l.starts_with('{')).unwrap()).unwrap();
    let n = |k: &str| stats[k].as_u64().unwrap();
    assert_eq!(n("hits") + n("missed"), 310, "{stats}\n{err}");
    assert_eq!(logs, n("records"), "every record counted was written");
    assert_eq!(n("records") + n("dropped"), n("hits"), "{stats}");
    assert!(n("dropped") > 0 && n("missed") > 0, "{stats}");
    assert!(
        n("records") >= 10,
        "the probes work again after SIGCONT: {stats}"
    );
    drop(to);
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("done {}", gated_sum(310))
    );
    assert!(target.wait().unwrap().success());
}

/// The seam's suspend and resume, driven directly: after 10 runs `suspend`
/// puts the file's bytes back (no run while suspended: the probes are
/// dormant and unpatched), `resume` writes the jump again and runs come
/// back; the command runs to its end.
fn suspend_restores_the_bytes_and_resume_patches_again() {
    use runtime::transport::{
        Action, Event, HandlerProbe, HandlerProgram, HandlerSet, Insert, OpenOptions, Target,
    };
    use std::cell::Cell;
    let exe = gcc(
        "slow_target_nopie_inproc",
        &progs().join("slow_target.c"),
        &["-O0", "-fno-pie", "-no-pie"],
    );
    let elf = wprobe_elf::ElfInfo::open(&exe).unwrap();
    let wprobe_elf::Lookup::Found(work) = elf.lookup("work") else {
        panic!("no work");
    };
    let work = work.value;
    let orig = elf.bytes_at(work, 8).unwrap().to_vec();
    let wasm =
        wat::parse_str(r#"(module (func (export "h") (result i32) (i32.const 0)))"#).unwrap();
    let argv = [exe.clone().into_os_string(), "300".into()];
    let info = runtime::transport::by_name("inproc").unwrap();
    let mut t = (info.open)(
        Target::Launch(&argv),
        &OpenOptions {
            follow_forks: false,
            verify_opcodes: true,
            reads_memory: false,
            registers: runtime::wasm::regscan::RegsRead::All,
            ring_full: Default::default(),
        },
    )
    .unwrap();
    let pid = t.main_pid();
    t.insert(
        7,
        pid,
        runtime::probe::addr::RunAddr(work),
        Insert::Breakpoint { opcode: None },
    )
    .unwrap();
    t.in_target()
        .unwrap()
        .load_handlers(&HandlerSet {
            programs: vec![HandlerProgram {
                label: "h",
                wasm: &wasm,
                gvars: 0,
                fuel: 1_000_000,
                writes: false,
                maps: None,
            }],
            probes: vec![HandlerProbe {
                tag: 7,
                program: 0,
                export: "h",
                ignore: 0,
                maxhits: 0,
                load_bias: 0,
                args: &[],
                usdt_args: &[],
            }],
            start_mono_ns: 0,
            mono_offset_ns: 0,
            child_pid: pid as u64,
            use_cache: false,
        })
        .unwrap();
    assert_eq!(live(pid as u32, work, 1), [0xe9]);
    t.set_tick(Duration::from_millis(100));
    let runs = Cell::new(0u64);
    let (at_suspend, at_resume) = (Cell::new(None::<u64>), Cell::new(None::<u64>));
    let ticks = Cell::new(0);
    let at_tick1 = Cell::new(0u64);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let status = t
        .run(&stop, &mut |t, ev| {
            match ev {
                // Runs without records are reported as counts.
                Event::Counted { tag, counts } => {
                    assert_eq!(tag, 7);
                    runs.set(runs.get() + counts.runs);
                    if runs.get() >= 10 && at_suspend.get().is_none() {
                        t.suspend().unwrap();
                        assert_eq!(live(pid as u32, work, 8), orig, "the file's bytes");
                        at_suspend.set(Some(runs.get()));
                    }
                }
                Event::Tick if at_suspend.get().is_some() && at_resume.get().is_none() => {
                    ticks.set(ticks.get() + 1);
                    if ticks.get() == 1 {
                        at_tick1.set(runs.get());
                    }
                    if ticks.get() == 3 {
                        at_resume.set(Some(runs.get()));
                        t.resume().unwrap();
                        assert_eq!(live(pid as u32, work, 1), [0xe9], "patched again");
                    }
                }
                _ => {}
            }
            Action::Continue
        })
        .unwrap();
    t.detach().unwrap();
    assert_eq!(status, Some(runtime::transport::ExitStatus::Code(0)));
    // Counts reported after `suspend` are of runs made before it (the
    // counters are read every 100 ms: at most ~50 calls of 2 ms).
    let (s, r) = (at_suspend.get().unwrap(), at_resume.get().expect("resumed"));
    assert!(r - s <= 60, "{s} then {r}");
    assert_eq!(at_tick1.get(), r, "no run for 200 ms while suspended");
    let total = runs.get();
    assert!(
        total > r && total < 300,
        "runs came back, the dormant calls were not runs: {total}"
    );
}

/// SIGTERM to wprobe running a launched command: the probes are made
/// dormant and the bytes restored, the signal is passed on to the command as
/// under the other transports, wprobe exits 128+15 once the command ended,
/// and no journal is left.
fn sigterm_of_wprobe_launched_restores_and_passes_the_signal_on() {
    let (exe, work, _) = gated();
    let mut w = wprobe()
        .arg("run")
        .arg(gated_prog(&exe))
        .args(["--transport", "inproc", "-o", "/dev/null", "--"])
        .arg(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = w.stdin.take().unwrap();
    let mut from = BufReader::new(w.stdout.take().unwrap()).lines();
    let wpid = w.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid: u32 = loop {
        let kids = std::fs::read_to_string(format!("/proc/{wpid}/task/{wpid}/children"))
            .unwrap_or_default();
        if let Some(p) = kids.split_whitespace().next() {
            break p.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "no child");
        std::thread::sleep(Duration::from_millis(20));
    };
    wait_armed(pid, work);
    writeln!(to, "5").unwrap();
    assert_eq!(
        from.next().unwrap().unwrap(),
        format!("sum {}", gated_sum(5))
    );
    assert!(
        Command::new("kill")
            .args(["-TERM", &wpid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let o = output_within_child(w, 30);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(143), "{err}");
    assert!(
        err.contains(&format!(
            "wprobe: detached; signal 15 passed on to process {pid}, waiting for it to exit"
        )),
        "{err}"
    );
    assert!(!runtime::transport::inproc::journal::path(pid as i32).exists());
    drop(to);
}

/// `exit 1` (debugger hand-off) and `exit 3` (core dump) need the target
/// stopped at the hit: under inproc, as under perf, an RPN program that
/// uses them is refused at load naming ptrace; a handler whose outcome is
/// known only when it runs (WAT) has each such run counted and said once,
/// and the process runs on.
fn exit_1_and_3_are_counted_and_name_ptrace() {
    let t = probe_target();
    // An RPN program that uses them: refused at load, the command not run.
    for (code, what) in [(1, "a debugger hand-off"), (3, "a core dump")] {
        let p = write(
            &format!("inproc_exit{code}.rpn"),
            format!(
                "name = {}\noffset = target_fn\nopcode = 0x55\n push r, rdi\n log 1\n exit {code}\n",
                t.display()
            ),
        );
        let mut c = wprobe();
        c.args(["run", "--transport", "inproc"])
            .arg(&p)
            .arg("--")
            .arg(&t);
        let o = output_within(c, 60);
        assert_eq!(o.status.code(), Some(1));
        assert!(o.stdout.is_empty(), "the command did not run");
        assert_eq!(
            stderr(&o),
            format!(
                "error: program `inproc_exit{code}` uses `exit {code}` ({what}), which needs the \
                 target stopped at the hit: --transport inproc cannot honour it; use --transport \
                 ptrace\n"
            )
        );
    }
    // A WAT handler whose outcome no compiler sees: counted, said once each.
    let mut c = wprobe();
    c.arg("run")
        .arg(crate::support::cli::handoff_wat())
        .args([
            "--probe",
            "target_fn=h",
            "--transport",
            "inproc",
            "--format",
            "json",
            "--",
        ])
        .arg(&t);
    let o = output_within(c, 60);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("counter=4 last=27"), "{out}");
    assert_eq!(out.matches("\"kind\":\"log\"").count(), 3, "{out}");
    for what in ["exit 1 (debugger hand-off)", "exit 3 (core dump)"] {
        let warning = format!(
            "{what} needs a stopped target and cannot be honoured under --transport inproc; \
             counted, the process runs on (use --transport ptrace)\n"
        );
        assert_eq!(err.matches(&warning).count(), 1, "{err}");
    }
}

/// The agent allocates nothing per hit: the heap allocations it makes
/// while running (the first hit of each thread sets up buffers that are
/// reused) are the same for 100 and for 10,000 calls per thread, with a
/// handler that writes a record at every hit, in one thread and in eight.
fn no_heap_allocation_per_hit_in_the_agent() {
    let exe = inproc_target(false);
    let p = write(
        "inproc_allocs.rpn",
        format!(
            "name = {}\noffset = target\n push r, rdi\n log 1\n",
            exe.display()
        ),
    );
    let allocations = |threads: u32, calls: u32| -> u64 {
        let mut c = wprobe();
        c.arg("run")
            .args(["--transport", "inproc", "-o", "/dev/null"])
            .arg(&p)
            .arg("--")
            .arg(&exe)
            .args(["threads", &threads.to_string(), &calls.to_string()])
            .env("WPROBE_DEBUG", "1");
        let o = output_within(c, 120);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{err}");
        err.lines()
            .find_map(|l| {
                let rest = l.strip_prefix("wprobe: debug: agent in process ")?;
                // "PID: T threads, N heap allocations while running (…"
                rest.split(", ").nth(1)?.split(" heap").next()
            })
            .and_then(|n| n.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no agent line: {err}"))
    };
    for threads in [1, 8] {
        let few = allocations(threads, 100);
        let many = allocations(threads, 10_000);
        assert_eq!(few, many, "{threads} threads: 100 vs 10,000 calls each");
    }
}

/// `-p` on a multi-threaded process whose four workers exist (asleep)
/// before wprobe comes, dynamic and static: a round of 4 × 1,000 calls
/// after arming gives exactly 4,000 hits with the right arguments; after
/// SIGINT the original bytes are back and the process computes on, with
/// no hit. Under every transport.
fn attaching_to_threads_that_exist_counts_every_call(transport: &str) {
    for (name, flags) in [
        (
            "gated_threads",
            &["-O0", "-fno-pie", "-no-pie", "-fcf-protection=none"][..],
        ),
        (
            "gated_threads_static",
            &[
                "-O0",
                "-fno-pie",
                "-no-pie",
                "-fcf-protection=none",
                "-static",
            ][..],
        ),
    ] {
        let exe = gcc(name, &progs().join("gated_threads.c"), flags);
        let elf = wprobe_elf::ElfInfo::open(&exe).unwrap();
        let wprobe_elf::Lookup::Found(work) = elf.lookup("work") else {
            panic!("no work in {}", exe.display());
        };
        let orig = elf.bytes_at(work.value, 16).unwrap().to_vec();
        let (mut target, mut to, mut from) = spawn_piped(&exe, &[]);
        let pid = target.id();
        assert_eq!(from.next().unwrap().unwrap(), "ready");
        let prog = write(
            &format!("{name}.rpn"),
            format!(
                "name = {}\noffset = work\n push r, rdi\n log 1\n",
                exe.display()
            ),
        );
        // Records to a file: 4,000 of them would fill a pipe nobody reads
        // until wprobe exits.
        let records = scratch().join(format!("{name}-{transport}.json"));
        let w = wprobe()
            .arg("run")
            .arg(&prog)
            .args(["--transport", transport, "--format", "json", "-o"])
            .arg(&records)
            .arg("-p")
            .arg(pid.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        crate::support::cli::wait_patched(pid, work.value, orig[0]);
        if transport == "perf" {
            // The uprobe's int3 appears when the first per-thread event is
            // opened; the events are enabled once all are open. A call in
            // between is made before the tracing began (not a hit, not a
            // loss), so this test, which counts every call, lets the
            // arming finish: until wprobe's perf events stop growing in
            // number (opening one took 1–10 ms here, and seconds while the
            // kernel was busy unregistering thousands of uprobes), then a
            // little longer for their enabling.
            wait_perf_events_settled(w.id());
            std::thread::sleep(Duration::from_millis(50));
        }
        writeln!(to, "1000").unwrap();
        assert_eq!(from.next().unwrap().unwrap(), "sum 2002000", "{name}");
        crate::support::cli::signal(w.id(), "INT");
        let o = w.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&records)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let st = crate::support::cli::stats(&lines);
        let dropped = st["dropped"].as_u64().unwrap_or(0);
        assert_eq!(st["hits"].as_u64().unwrap() + dropped, 4000, "{name}: {st}");
        let mut args = crate::support::cli::first_words(&lines);
        assert_eq!(args.len() as u64 + dropped, 4000, "{name}");
        if dropped == 0 {
            args.sort_unstable();
            let want: Vec<u64> = (0..1000).flat_map(|i| [i; 4]).collect();
            assert_eq!(args, want, "{name}: each worker's arguments 0..1000");
        }
        assert_eq!(live(pid, work.value, 16), orig, "{name}: the file's bytes");
        writeln!(to, "10").unwrap();
        assert_eq!(from.next().unwrap().unwrap(), "sum 220", "{name}");
        drop(to);
        assert!(target.wait().unwrap().success(), "{name}");
    }
}

/// A hit that arrives while its thread is already inside a handler — here
/// from the program's SIGALRM handler, which calls the probed function,
/// with a timer faster than the handler — is skipped and counted as
/// missed: the handler does not run inside itself, the program's output is
/// unchanged, and every call is either a hit or a missed one.
fn a_hit_from_a_signal_handler_during_a_hit_is_missed_and_counted() {
    let exe = gcc(
        "reenter",
        &progs().join("reenter.c"),
        &["-O0", "-fno-pie", "-no-pie", "-fcf-protection=none"],
    );
    // About 10 us of handler per hit against a 100 us timer.
    let wat = write(
        "spin_20k.wat",
        "(module (func (export \"h\") (result i32) (local i32)\n\
         (local.set 0 (i32.const 20000))\n\
         (loop $l (local.set 0 (i32.sub (local.get 0) (i32.const 1))) (br_if $l (local.get 0)))\n\
         (i32.const 0)))",
    );
    let (records, out, err) = run_json(
        "inproc",
        &[
            wat.to_str().unwrap(),
            "--probe",
            "f=h",
            "--",
            exe.to_str().unwrap(),
            "20000",
        ],
    );
    assert_eq!(out.len(), 2, "{out:?}\n{err}");
    assert_eq!(out[0], "main 20000", "{err}");
    let from_signals: u64 = out[1].strip_prefix("signal ").unwrap().parse().unwrap();
    let st = records.last().unwrap();
    assert_eq!(st["kind"], "stats");
    let (hits, missed) = (st["hits"].as_u64().unwrap(), st["missed"].as_u64().unwrap());
    assert_eq!(hits + missed, 20000 + from_signals, "{st}");
    assert!(
        missed > 0 && from_signals > 0,
        "no signal landed in a handler: {st}"
    );
    assert_eq!(st["runs"].as_u64().unwrap(), hits, "{st}");
    assert!(
        err.contains("missed"),
        "the summary shows the missed hits: {err}"
    );
}

/// Threads created and joined one after another get the previous one's
/// TCB (the same thread pointer) with a new tid: every hit's record names
/// the thread that made it, not the TCB's earlier owner, and carries its
/// argument.
fn a_reused_thread_control_block_is_a_new_thread(transport: &str) {
    let exe = gcc(
        "tcb_reuse",
        &progs().join("tcb_reuse.c"),
        &["-O0", "-fno-pie", "-no-pie", "-fcf-protection=none"],
    );
    let prog = write(
        "tcb_reuse.rpn",
        format!(
            "name = {}\noffset = f\n push r, rdi\n log 1\n",
            exe.display()
        ),
    );
    let mut c = wprobe();
    c.arg("run")
        .args(["--transport", transport, "--format", "json"])
        .arg(&prog)
        .arg("--")
        .arg(&exe)
        .arg("20")
        .current_dir(scratch());
    let o = output_within(c, 120);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (json, text): (Vec<&str>, Vec<&str>) = out.lines().partition(|l| l.starts_with('{'));
    let threads: Vec<(u64, u64, String)> = text
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].to_string(),
            )
        })
        .collect();
    assert_eq!(threads.len(), 20, "{out}");
    // The premise: the TCB was reused.
    assert!(
        threads.iter().filter(|t| t.2 == threads[0].2).count() >= 10,
        "glibc did not reuse the thread's TCB: {threads:?}"
    );
    let got: Vec<(u64, u64)> = json
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "log")
        .map(|v| {
            (
                v["tid"].as_u64().unwrap(),
                v["items"][0]["values"][0].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(u64, u64)> = threads
        .iter()
        .flat_map(|&(r, tid, _)| [(tid, r); 3])
        .collect();
    assert_eq!(got, want, "{transport}");
}

/// A probe between a `popfq` and a `pushfq` (tests/progs/flags.c): each
/// arithmetic flag and DF, alone and together, comes back as it was set,
/// and the handler reads the flags the probed code had (= `rdi`, what the
/// `popfq` loaded). The in-process stubs restore the flags with `sahf`
/// and friends instead of `popfq`: every bit of that is checked here.
fn the_probed_codes_flags_survive_a_hit(transport: &str) {
    let exe = gcc("flags", &progs().join("flags.c"), &["-O1"]);
    let prog = write(
        "flags.rpn",
        format!(
            "name = {}\noffset = flags_probe + 2\n push r, rflags\n push r, rdi\n log 2\n",
            exe.display()
        ),
    );
    let (records, text, _) = run_json(
        transport,
        &[prog.to_str().unwrap(), "--", exe.to_str().unwrap()],
    );
    let bits = [0x1u64, 0x4, 0x10, 0x40, 0x80, 0x400, 0x800, 0x8d5, 0xcd5, 0];
    let want_text: Vec<String> = bits.iter().map(|b| format!("{b:#x} {b:#x}")).collect();
    assert_eq!(text, want_text, "{transport}");
    let got: Vec<serde_json::Value> = records
        .iter()
        .filter(|v| v["kind"] == "log")
        .map(|v| v["items"][0]["values"].clone())
        .collect();
    let want: Vec<serde_json::Value> = bits
        .iter()
        .map(|b| serde_json::json!([0x202 | b, 0x202 | b]))
        .collect();
    assert_eq!(got, want, "{transport}");
}

/// The store's bias (`agent_abi::bias`): the main thread runs the handlers
/// alone (it owns the bias, no atomic operation per hit), then a second
/// thread hits the same probe while the first goes on, and revokes the
/// bias in the middle of the first one's hits. A run that overlapped
/// another would lose an update of the read-modify-write sum: the counts
/// and sums are exact, run after run.
fn a_second_thread_takes_the_store_from_the_first_exactly() {
    let (exe, p) = globals_program("inproc_handover.rpn");
    let m = 200_000u64;
    // Each call of target(i) returns i + 1; three series of m calls.
    let sum = 3 * (1..=m).sum::<u64>();
    let args_sum = 3 * (0..m).sum::<u64>();
    for round in 0..5 {
        let (got, out, err) = run_json_env(
            "inproc",
            &[
                p.to_str().unwrap(),
                "--",
                exe.to_str().unwrap(),
                "handover",
                &m.to_string(),
            ],
            &[("WPROBE_DEBUG", "1")],
        );
        assert_eq!(out, [format!("handover sum {sum}")], "round {round}: {err}");
        // The premise: the second thread took the bias from the first.
        assert!(err.contains(" 1 bias revoked"), "round {round}: {err}");
        let logged: Vec<&serde_json::Value> = got.iter().filter(|v| v["kind"] == "log").collect();
        assert_eq!(logged.len(), 1, "round {round}: {got:?}");
        assert_eq!(
            logged[0]["items"][0]["values"],
            serde_json::json!([3 * m, args_sum]),
            "round {round}: {err}"
        );
    }
}

/// How deep below the probed code's stack pointer a hit writes before the
/// agent is on its own stack (tests/progs/footprint.c paints 16 KiB below
/// its `rsp`, calls the probed function, and finds the lowest byte that
/// changed): at most `agent_loader::stub::STACK_FOOTPRINT` beyond the
/// call's return address, at the thread's first hit (which makes its slot
/// and agent stack) and at later ones. A thread on a small stack (a signal
/// handler on a `sigaltstack`, a coroutine) must not be written past its
/// end. The untraced run shows what the painting cannot see.
fn a_hit_writes_no_deeper_than_the_stack_footprint_below_rsp() {
    let exe = gcc("footprint", &progs().join("footprint.c"), &["-O1"]);
    let prog = write(
        "footprint.rpn",
        format!(
            "name = {}\nvars = 1\noffset = target\n inc lv, 0\n abort\n",
            exe.display()
        ),
    );
    let depths = |out: &str| -> (usize, usize) {
        let f: Vec<&str> = out.split_whitespace().collect();
        assert_eq!((f.len(), f[0], f[2]), (4, "first", "later"), "{out}");
        (f[1].parse().unwrap(), f[3].parse().unwrap())
    };
    let o = Command::new(&exe).output().unwrap();
    let (base, base_later) = depths(&String::from_utf8_lossy(&o.stdout));
    assert_eq!((base, base_later), (256, 256), "the painting's blind spot");
    let (_, text, err) = run_json(
        "inproc",
        &[prog.to_str().unwrap(), "--", exe.to_str().unwrap()],
    );
    let (first, later) = depths(&text.join("\n"));
    // From the caller's rsp: its call's return address, then the stub.
    let most = 8 + agent_loader::stub::STACK_FOOTPRINT;
    assert!(
        first <= most && later <= most,
        "first {first} later {later} > {most}: {err}"
    );
    // The premise: the hit did write below the return address.
    assert!(later > base + 128, "first {first} later {later}: {err}");
}

/// `--transport auto` whose first choice fails to start (here inproc, made
/// to fail after it launched the command, by a debug build's
/// `WPROBE_FAIL_OPEN`) goes on with the next candidate, saying so, and the
/// command runs once, traced: its first act, a line appended to a file, is
/// there once, and every call is counted.
fn auto_hands_a_run_inproc_cannot_start_to_ptrace_before_the_command_runs() {
    let exe = crate::support::cli::gcc(
        "once_marker",
        &crate::support::cli::progs().join("once_marker.c"),
        &["-O0"],
    );
    let marker = crate::support::cli::scratch().join("once_marker.txt");
    let _ = std::fs::remove_file(&marker);
    let prog = format!("uprobe:{}:f {{ @f = count(); }}", exe.display());
    let mut c = crate::support::cli::wprobe();
    c.args(["run", "-v", "-e", &prog, "-c"])
        .arg(format!("{} {}", exe.display(), marker.display()))
        .env("WPROBE_FAIL_OPEN", "inproc");
    let o = crate::support::cli::output_within(c, 60);
    let err = crate::support::cli::stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out, "Attaching 1 probe...\nsum=20\n\n\n@f: 5\n", "{err}");
    assert!(err.contains("wprobe: transport inproc:"), "{err}");
    assert!(
        err.contains("wprobe: note: --transport inproc could not start (process ")
            && err.contains(
                ": failing as WPROBE_FAIL_OPEN asks (a test)); --transport auto goes on with ptrace"
            ),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "started\n",
        "the command ran once"
    );
}
