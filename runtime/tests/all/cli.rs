//! The `wprobe` binary as users run it: exit codes, error messages with
//! positions, `compile --emit wat`, `list`, and `run` on real programs
//! (errors for missing symbols, wrong opcodes, missing pids; the traced
//! command's exit status; JSON output).

use crate::case;
use crate::support::case::{Case, Need};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(attach_refusals_name_the_real_cause, Need::Perf),
    case!(
        exit_3_core_of_a_threaded_pie_has_every_thread_and_its_symbols,
        Need::Gdb
    ),
    case!(ctrl_c_in_a_terminal_reaches_the_command_once, Need::Script),
    case!(a_stopping_signal_reaches_the_command_and_the_status_says_what_happened @ every_transport),
    case!(
        attach_journal_refuses_planted_directories_and_files,
        Need::Root
    ),
    case!(compile_errors_name_file_line_column_and_exit_1),
    case!(compile_writes_a_module_and_annotated_wat),
    case!(list_shows_address_size_and_first_byte),
    case!(run_json_output_and_exit_status_of_the_command),
    case!(run_errors_are_clear),
    case!(a_probe_on_a_library_the_command_never_maps_is_reported),
    case!(probe_selection_ignore_maxhits_and_programs_sharing_globals @ every_transport),
    case!(attach_then_sigint_leaves_the_process_running_and_unpatched),
    case!(attach_and_detach_leave_a_thread_asleep_in_epoll_wait_undisturbed_ptrace),
    case!(attach_and_detach_leave_a_thread_asleep_in_epoll_wait_undisturbed_inproc),
    case!(code_the_process_rewrote_while_probed_is_left_alone_and_reported),
    case!(a_module_file_over_64_mib_is_refused),
    case!(exit_3_writes_a_core_file_gdb_can_read, Need::Gdb),
    case!(eight_threads_times_100000_calls_give_exactly_800000_handler_runs),
    case!(command_not_found_and_permission_denied_are_clear_errors),
    case!(
        attach_without_permission_names_the_process_and_the_capability,
        Need::Root,
        Need::Setpriv
    ),
    case!(
        repair_without_permission_explains_it_and_keeps_the_journal,
        Need::Root,
        Need::Setpriv
    ),
    case!(reads_after_a_handler_write_see_the_written_value),
    case!(records_go_to_the_file_given_with_o),
    case!(text_records_with_timestamps_and_one_radix),
    case!(exit_1_hands_the_stopped_process_to_gdb, Need::Gdb),
    case!(fp_registers_thread_pointer_cpu_and_cpuid_on_a_real_thread),
];

use crate::support::cli::{
    examples, live_bytes, probe_target, scratch, signal, slow_target, stderr, wait_patched, wprobe,
    write,
};
use std::path::Path;
use std::process::Command;

fn compile_errors_name_file_line_column_and_exit_1() {
    let p = write(
        "bad.rpn",
        "name = t\n\noffset = 0x10\nopcode = 0x55\n  push r, rzx\n  jmp nowhere\n",
    );
    let o = wprobe().arg("compile").arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    let path = p.display().to_string();
    assert!(e.contains(&format!("{path}:5:11: error[E0065]: ")), "{e}");
    assert!(e.contains(&format!("{path}:6:7: error[E0050]: ")), "{e}");
    assert!(e.contains("  |   push r, rzx\n  |           ^^^"), "{e}");
    assert!(e.contains("(2 errors)"), "{e}");
}

fn compile_writes_a_module_and_annotated_wat() {
    let out = scratch().join("ex01.wasm");
    let o = wprobe()
        .args(["compile", "--symbols-from"])
        .arg(probe_target())
        .arg(examples().join("01_log_args.rpn"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let wasm = std::fs::read(&out).unwrap();
    assert_eq!(&wasm[..4], b"\0asm");
    let o = wprobe()
        .args(["compile", "--emit", "wat", "-o", "-", "--symbols-from"])
        .arg(probe_target())
        .arg(examples().join("13_preprocessor.rpn"))
        .args(["-D", "SCALE", "=", "3"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let wat = String::from_utf8(o.stdout).unwrap();
    assert!(wat.contains("(func $probe0_body"), "{wat}");
    assert!(
        wat.contains("13_preprocessor.rpn:30: push SCALE   [code offset 3]"),
        "{wat}"
    );
    assert!(wat.contains("(@custom \"wprobe.manifest\"") || wat.contains("wprobe.manifest"));
    // Instructions without code of their own share a code offset: each
    // still gets its own comment line.
    let p = write(
        "notes.rpn",
        "name = /bin/true\naddress = 0x1000\nopcode = 0x55\n        nop\n        nop\n        push 1\n        log 1\n",
    );
    let o = wprobe()
        .args(["compile", "--emit", "wat", "-o", "-"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let wat = String::from_utf8(o.stdout).unwrap();
    let notes: Vec<&str> = wat
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(";; ") && l.contains("notes.rpn:"))
        .collect();
    let lines: Vec<&str> = notes
        .iter()
        .map(|l| l.split(':').nth(1).unwrap_or(""))
        .collect();
    assert_eq!(lines, ["4", "5", "6", "7"], "{wat}");
    assert!(
        notes.iter().all(|l| l.matches("notes.rpn").count() == 1),
        "{wat}"
    );
}

fn list_shows_address_size_and_first_byte() {
    let o = wprobe()
        .arg("list")
        .arg(probe_target())
        .arg("target_*")
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.ends_with(" target_fn"))
        .expect(&text);
    assert!(line.starts_with("0x0000000000401146"), "{line}");
    assert!(line.contains(" 0x55 "), "{line}");
    let o = wprobe()
        .arg("list")
        .arg(probe_target())
        .arg("no_such_*")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
}

fn run_json_output_and_exit_status_of_the_command() {
    let o = wprobe()
        .arg("run")
        .arg(examples().join("01_log_args.rpn"))
        .args(["--format", "json", "--"])
        .arg(probe_target())
        .current_dir(scratch())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<serde_json::Value> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[2]["items"][0]["values"], serde_json::json!([2, 7]));
    assert_eq!(lines[3]["kind"], "stats");
    assert_eq!(lines[3]["hits"], 3);
    // The command's own status comes back, and -f follows the fork and exec
    // of the target by a shell: 3 hits in the child, then `exit 7`.
    let o = wprobe()
        .arg("run")
        .arg(examples().join("01_log_args.rpn"))
        .args([
            "-f",
            "--format",
            "json",
            "--",
            "/bin/sh",
            "-c",
            "./probe_target; exit 7",
        ])
        .current_dir(scratch())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("\"kind\":\"log\""))
            .count(),
        3,
        "{out}"
    );
}

fn run_errors_are_clear() {
    // Unknown symbol in the module: a compile error with its position.
    let p = write(
        "nosym.rpn",
        format!(
            "name = {}\noffset = no_such_function\nopcode = 0x55\n",
            probe_target().display()
        ),
    );
    let o = wprobe()
        .arg("run")
        .arg(&p)
        .arg("--")
        .arg(probe_target())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(":2:10: error[E0080]"), "{}", stderr(&o));
    // Wrong opcode: not armed, both bytes and the address named.
    let p = write(
        "badop.rpn",
        format!(
            "name = {}\noffset = target_fn\nopcode = 0x90\n",
            probe_target().display()
        ),
    );
    let o = wprobe()
        .arg("run")
        .arg(&p)
        .arg("--")
        .arg(probe_target())
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("0x401146") && e.contains("0x90") && e.contains("0x55"),
        "{e}"
    );
    // No such process.
    let o = wprobe()
        .arg("run")
        .arg(examples().join("01_log_args.rpn"))
        .args(["-p", "999999999"])
        .current_dir(scratch())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("999999999"), "{}", stderr(&o));
    // Missing command.
    let o = wprobe()
        .arg("run")
        .arg(examples().join("01_log_args.rpn"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("after `--`"));
}

fn probe_selection_ignore_maxhits_and_programs_sharing_globals(transport: &str) {
    // Two programs in one run, both probing target_fn (several probes at one
    // address), sharing global variable 0: each counts into it.
    let a = write(
        "a.rpn",
        "name = probe_target\nmajor = 1\ngvars = 1\ngroupdef = g1 g2\ntypedef = t1\n\
         offset = target_fn\nopcode = 0x55\ngroup = g1\ntype = t1\nignore = 1\n inc gv, 0\n push gv, 0\n log 1\n\
         offset = bump\nopcode = 0x55\ngroup = g2\n push 0xb\n log 1\n",
    );
    let b = write(
        "b.rpn",
        "name = probe_target\nmajor = 2\ngvars = 1\noffset = target_fn\nopcode = 0x55\nmaxhits = 2\n inc gv, 0\n push gv, 0\n log 1\n",
    );
    let run = |extra: &[&str]| -> Vec<(u64, u64)> {
        let o = wprobe()
            .arg("run")
            .args([&a, &b])
            .args(extra)
            .args(["--transport", transport, "--format", "json", "--"])
            .arg(probe_target())
            .current_dir(scratch())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"kind\":\"log\""))
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["major"].as_u64().unwrap(),
                    v["items"][0]["values"][0].as_u64().unwrap(),
                )
            })
            .collect()
    };
    // All probes: hit 1 of target_fn: a ignores, b counts 1; hit 2: a -> 2, b -> 3 (last for b);
    // hit 3: a -> 4; then bump logs 0xb.
    assert_eq!(run(&[]), [(2, 1), (1, 2), (2, 3), (1, 4), (1, 0xb)]);
    // --group g2 selects only a's bump probe (b's probes have no group).
    assert_eq!(run(&["--group", "g2"]), [(1, 0xb)]);
    // --group g1 --type t1: a's target_fn probe only.
    assert_eq!(run(&["--group", "g1", "--type", "t1"]), [(1, 1), (1, 2)]);
}

fn attach_then_sigint_leaves_the_process_running_and_unpatched() {
    let exe = slow_target();
    let elf = wprobe_elf::ElfInfo::open(&exe).unwrap();
    let work = match elf.lookup("work") {
        wprobe_elf::Lookup::Found(s) => s.value,
        _ => panic!("no work"),
    };
    let original = elf.bytes_at(work, 16).unwrap().to_vec();
    let target = Command::new(&exe)
        .arg("500")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = target.id();
    let prog = write(
        "slow.rpn",
        format!(
            "name = {}\noffset = work\nopcode = 0x55\n push r, rdi\n log 1\n",
            exe.display()
        ),
    );
    let w = wprobe()
        .args(["run", "--transport", "ptrace"])
        .arg(&prog)
        .args(["-p", &pid.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while live_bytes(pid, work, 1) != [0xcc] {
        assert!(
            std::time::Instant::now() < deadline,
            "not armed within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let st = Command::new("kill")
        .args(["-INT", &w.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = w.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records = String::from_utf8_lossy(&out.stdout).lines().count();
    assert!(records > 10, "records while attached: {records}");
    // Detached: original bytes back, and the process runs to completion.
    assert_eq!(live_bytes(pid, work, 16), original);
    let res = target.wait_with_output().unwrap();
    assert!(res.status.success());
    assert_eq!(
        String::from_utf8_lossy(&res.stdout),
        format!("acc={}\n", (0..500).sum::<i64>())
    );
}

fn exit_3_writes_a_core_file_gdb_can_read() {
    let dir = scratch().join("cores");
    std::fs::create_dir_all(&dir).unwrap();
    let p = write(
        "core.rpn",
        "name = probe_target\noffset = target_fn\nopcode = 0x55\nmaxhits = 1\n push r, rdi\n log 1\n exit 3\n",
    );
    let o = wprobe()
        .arg("run")
        .arg(&p)
        .arg("--")
        .arg(probe_target())
        .env("WPROBE_DUMP_DIR", &dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("counter="))
            .count(),
        1,
        "the process ran on"
    );
    let cores: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cores.len(), 1, "{cores:?}");
    let core = std::fs::read(&cores[0]).unwrap();
    assert_eq!(&core[..4], b"\x7fELF");
    assert_eq!(u16::from_le_bytes([core[16], core[17]]), 4, "ET_CORE");
    // gdb reads the registers and memory.
    let g = Command::new("gdb")
        .args([
            "-batch",
            "-ex",
            "info registers rip",
            "-ex",
            "x/s 0x404040",
            "-ex",
            "x/1xb 0x401146",
        ])
        .arg(probe_target())
        .arg(&cores[0])
        .output()
        .expect("running gdb");
    let out = String::from_utf8_lossy(&g.stdout);
    assert!(
        out.contains("0x401146") && out.contains("<target_fn>"),
        "{out}"
    );
    assert!(out.contains("\"hello, probes\""), "{out}");
    assert!(out.contains("0x55"), "original byte, not int3: {out}");
}

fn eight_threads_times_100000_calls_give_exactly_800000_handler_runs() {
    let exe = crate::support::cli::gcc(
        "calls_threads",
        &crate::support::cli::progs().join("calls.c"),
        &["-O2", "-fPIE", "-pie"],
    );
    let plain = Command::new(&exe).args(["100000", "8"]).output().unwrap();
    assert!(plain.status.success());
    let op = {
        let elf = wprobe_elf::ElfInfo::open(&exe).unwrap();
        match elf.lookup("target") {
            wprobe_elf::Lookup::Found(s) => elf.first_byte(s.value).unwrap(),
            _ => panic!("no target"),
        }
    };
    // Every hit runs the handler: it counts in a global and emits no
    // record; report(), called once after every thread has finished, logs
    // the global.
    let p = write(
        "count.rpn",
        format!(
            "name = {}\ngvars = 1\noffset = target\nopcode = 0x{op:02x}\n inc gv, 0\n abort\n\
             offset = report\nopcode = 0x{:02x}\n push gv, 0\n log 1\n",
            exe.display(),
            {
                let elf = wprobe_elf::ElfInfo::open(&exe).unwrap();
                match elf.lookup("report") {
                    wprobe_elf::Lookup::Found(s) => elf.first_byte(s.value).unwrap(),
                    _ => panic!("no report"),
                }
            }
        ),
    );
    let o = wprobe()
        .arg("run")
        .arg(&p)
        .args(["--format", "json", "--"])
        .arg(&exe)
        .args(["100000", "8"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let stats: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(stats["hits"], 800_001, "{out}");
    assert_eq!(stats["runs"], 800_001);
    assert_eq!(stats["probes"][0]["hits"], 800_000, "{out}");
    let logged: Vec<serde_json::Value> = out
        .lines()
        .filter(|l| l.starts_with("{\"kind\":\"log\"") || l.contains("\"kind\":\"log\""))
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["items"][0]["values"].clone()
        })
        .collect();
    assert_eq!(
        logged,
        [serde_json::json!([800_000])],
        "the global the handler wrote"
    );
    assert_eq!(stats["traps"], 0);
    // The program's own output (a checksum of every call) is unchanged.
    let traced_lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('{')).collect();
    assert_eq!(
        traced_lines.join("\n"),
        String::from_utf8_lossy(&plain.stdout).trim_end()
    );
}

fn command_not_found_and_permission_denied_are_clear_errors() {
    probe_target(); // the program's module, in the scratch directory
    let o = wprobe()
        .arg("run")
        .arg(examples().join("01_log_args.rpn"))
        .args(["--", "./does_not_exist"])
        .current_dir(scratch())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("./does_not_exist: command not found"),
        "{}",
        stderr(&o)
    );
}

/// Attaching to a root process as an unprivileged user: the error names
/// the process and the capability.
fn attach_without_permission_names_the_process_and_the_capability() {
    {
        let exe = scratch().join("wprobe-copy");
        std::fs::copy(env!("CARGO_BIN_EXE_wprobe"), &exe).unwrap();
        let prog = scratch().join("perm.rpn");
        std::fs::write(
            &prog,
            "name = /bin/sleep\naddress = 0x1000\nopcode = 0x55\n",
        )
        .unwrap();
        for p in [scratch(), exe.clone(), prog.clone()] {
            let _ = Command::new("chmod").arg("a+rx").arg(&p).status();
        }
        let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
        let o = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .arg("run")
            .arg(&prog)
            .args(["-p", &victim.id().to_string()])
            .output()
            .unwrap();
        victim.kill().unwrap();
        victim.wait().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains(&format!("not permitted to trace process {}", victim.id())),
            "{e}"
        );
        assert!(e.contains("CAP_SYS_PTRACE"), "{e}");
    }
}

/// `wprobe repair` run by a user who may not trace the process: the error
/// names the process and what failed, and says which permission it needs;
/// the journal stays for a privileged retry.
fn repair_without_permission_explains_it_and_keeps_the_journal() {
    let dir = scratch().join("repair-perm");
    std::fs::create_dir_all(dir.join("wprobe")).unwrap();
    let exe = dir.join("wprobe-copy");
    std::fs::copy(env!("CARGO_BIN_EXE_wprobe"), &exe).unwrap();
    let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = victim.id();
    let journal = dir.join("wprobe").join(format!("{pid}.journal"));
    std::fs::write(&journal, "401000 55 1\n").unwrap();
    for p in [scratch(), dir.clone(), exe.clone()] {
        let _ = Command::new("chmod").arg("a+rx").arg(&p).status();
    }
    // The journal is the user's own (as the one its wprobe wrote would be).
    for (p, mode) in [(dir.join("wprobe"), "0700"), (journal.clone(), "0600")] {
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        let _ = Command::new("chmod").arg(mode).arg(&p).status();
    }
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["repair", "--pid", &pid.to_string()])
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    victim.kill().unwrap();
    victim.wait().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "error: repairing process {pid}: reading /proc/{pid}/maps: Permission denied (os error 13) \
             (writing /proc/PID/mem needs the permission attaching needs: same user and \
             kernel.yama.ptrace_scope, or CAP_SYS_PTRACE)\n"
        )
    );
    assert!(journal.exists(), "the journal must survive a failed repair");
    assert!(o.stdout.is_empty());
}

/// Memory reads within a hit share one fetch of the bytes around them; a
/// handler's write drops it, so a read after a write sees the new value at
/// every width, and what the target reads afterwards is what was written.
fn reads_after_a_handler_write_see_the_written_value() {
    let prog = write(
        "reread.rpn",
        r#"name = probe_target
offset = bump
opcode = 0x55
        push counter
        push mem, u64
        push greeting
        push mem, u8
        push counter
        push 0x1122334455667788
        pop mem, u64
        push counter
        push mem, u64
        push counter + 1
        push mem, u16
        push counter
        push 1000
        pop mem, u64
        push counter
        push mem, u32
        log 5
"#,
    );
    let o = wprobe()
        .arg("run")
        .arg(&prog)
        .args(["--format", "json", "--"])
        .arg(probe_target())
        .current_dir(scratch())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let log: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["kind"] == "log")
        .collect();
    assert_eq!(log.len(), 1, "{stdout}");
    // First popped first: the u32 after the second write, the u16 at
    // counter + 1 after the first, the u64 after it, 'h', the old counter (3).
    assert_eq!(
        log[0]["items"][0]["values"],
        serde_json::json!([1000, 0x6677, 0x1122_3344_5566_7788u64, u64::from(b'h'), 3]),
        "{stdout}"
    );
    assert!(stdout.contains("counter=1001 last=27"), "{stdout}");
}

fn records_go_to_the_file_given_with_o() {
    let out = scratch().join("records.jsonl");
    let o = wprobe()
        .arg("run")
        .arg(examples().join("01_log_args.rpn"))
        .args(["--format", "json", "-o"])
        .arg(&out)
        .arg("--")
        .arg(probe_target())
        .current_dir(scratch())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("\"kind\""),
        "records must not go to stdout"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds, ["log", "log", "log", "stats"]);
}

/// `-t` starts each text record with the seconds since tracing began
/// (non-decreasing, with microseconds); `--radix hex|dec` writes every
/// number one way (`auto` mixes small decimal and large hex).
fn text_records_with_timestamps_and_one_radix() {
    let exe = slow_target();
    let p = crate::support::cli::write(
        "radix.rpn",
        format!(
            "name = {}\noffset = work\n push r, rdi\n push 0x123456\n log 2\n",
            exe.display()
        ),
    );
    let lines = |extra: &[&str]| -> Vec<String> {
        let o = wprobe()
            .arg("run")
            .arg(&p)
            .args(extra)
            .arg("--")
            .arg(&exe)
            .arg("3")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("radix:work"))
            .map(str::to_string)
            .collect()
    };
    let tail = |l: &str| l.split_once(" 1.0: ").unwrap().1.to_string();
    let auto = lines(&[]);
    assert_eq!(
        auto.iter().map(|l| tail(l)).collect::<Vec<_>>(),
        ["(0x123456, 0)", "(0x123456, 1)", "(0x123456, 2)"]
    );
    assert!(auto[0].starts_with("radix:work pid "), "{auto:?}");
    let hex = lines(&["--radix", "hex"]);
    assert_eq!(
        hex.iter().map(|l| tail(l)).collect::<Vec<_>>(),
        ["(0x123456, 0x0)", "(0x123456, 0x1)", "(0x123456, 0x2)"]
    );
    let dec = lines(&["--radix", "dec", "-t"]);
    assert_eq!(
        dec.iter().map(|l| tail(l)).collect::<Vec<_>>(),
        ["(1193046, 0)", "(1193046, 1)", "(1193046, 2)"]
    );
    let times: Vec<f64> = dec
        .iter()
        .map(|l| {
            let (t, rest) = l.split_once(' ').unwrap();
            assert!(rest.starts_with("radix:work pid "), "{l}");
            let (s, us) = t.split_once('.').unwrap();
            assert_eq!(us.len(), 6, "{l}");
            assert!(s.chars().all(|c| c.is_ascii_digit()), "{l}");
            t.parse().unwrap()
        })
        .collect();
    // Calls 2 ms apart, the first within seconds of the start.
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(times[0] < 30.0 && times[2] - times[0] >= 0.004, "{times:?}");
}

fn exit_1_hands_the_stopped_process_to_gdb() {
    let p = write(
        "handoff.rpn",
        "name = probe_target\noffset = target_fn\nopcode = 0x55\n push 42\n pop r, rax\n exit 1\n",
    );
    let mut w = wprobe()
        .arg("run")
        .arg(&p)
        .arg("--")
        .arg(probe_target())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // wprobe reports the hand-off and goes on waiting for the process, which
    // is no longer its tracee: read the message, then find the pid in it.
    use std::io::BufRead;
    let mut err = std::io::BufReader::new(w.stderr.take().unwrap());
    let mut line = String::new();
    let pid: i32 = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "no hand-off message");
        if let Some(rest) = line.strip_prefix("wprobe: process ") {
            assert!(
                line.contains("handed off to a debugger, stopped at 0x401146: run `gdb -p "),
                "{line}"
            );
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // Stopped (SIGSTOP), unpatched, at the probe address with the handler's register write.
    // (The message comes just before the detach: wait for it.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let state = stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap();
        let tracer = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:").map(|v| v.trim().to_string()))
            .unwrap();
        if state == 'T' && tracer == "0" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{state} tracer {tracer}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(live_bytes(pid as u32, 0x401146, 1), [0x55]);
    let g = Command::new("gdb")
        .args([
            "-batch",
            "-p",
            &pid.to_string(),
            "-ex",
            "p/x $pc",
            "-ex",
            "p $rax",
        ])
        .output()
        .expect("running gdb");
    let out = String::from_utf8_lossy(&g.stdout);
    assert!(out.contains("= 0x401146"), "{out}");
    assert!(out.contains("= 42"), "{out}");
    // wprobe waits for the debugging session to end, then exits with the
    // command's status (here: killed, 128 + 9).
    assert_eq!(
        w.try_wait().unwrap(),
        None,
        "wprobe still waits for its command"
    );
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    assert_eq!(w.wait().unwrap().code(), Some(137));
}

/// What a handler sees of a real thread that is not the main thread, under
/// ptrace: SSE and x87 registers the program loaded, default MXCSR and FCW,
/// the CPU it is pinned to (`push procid`), its thread pointer (`push
/// task`, equal to the `pthread_self()` it printed) and CPUID leaf 0.
fn fp_registers_thread_pointer_cpu_and_cpuid_on_a_real_thread() {
    // CPU 0, and CPU 1 where there is one: a CPU number read wrong would
    // be 0, so 0 alone proves little.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for cpu in 0..cpus.min(2) {
        fp_registers_on_cpu(cpu);
    }
}

fn fp_registers_on_cpu(cpu: usize) {
    let exe = crate::support::cli::gcc(
        "fpregs",
        &crate::support::cli::progs().join("fpregs.c"),
        &["-O2"],
    );
    let p = write(
        "fpregs.rpn",
        format!(
            "name = {}\noffset = probed\nopcode = 0x{:02x}\n\
             push r, xmm0\n log 2\n push r, fr0\n log 2\n push r, fr1\n log 2\n\
             push r, mxcsr\n push r, fcw\n log 2\n push procid\n push task\n log 2\n\
             push 0\n push r, cpuid\n log 4\n",
            exe.display(),
            crate::support::cli::opcode(&exe, "probed")
        ),
    );
    let o = wprobe()
        .arg("run")
        .arg(&p)
        .args(["--format", "json", "--", "taskset", "-c", &cpu.to_string()])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let self_ptr = out
        .lines()
        .find_map(|l| l.strip_prefix("self=0x"))
        .map(|v| u64::from_str_radix(v, 16).unwrap())
        .expect("the thread printed pthread_self()");
    let log: serde_json::Value = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "log")
        .expect("one record");
    let items: Vec<&serde_json::Value> = log["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["values"])
        .collect();
    let id = std::arch::x86_64::__cpuid(0);
    let want = [
        // xmm0: low then high 64 bits.
        serde_json::json!([0x1122_3344_5566_7788u64, 0x99aa_bbcc_ddee_ff00u64]),
        // ST(0) = pi: significand, sign and exponent.
        serde_json::json!([0xc90f_daa2_2168_c235u64, 0x4000]),
        // ST(1) = 1.0.
        serde_json::json!([0x8000_0000_0000_0000u64, 0x3fff]),
        // FCW and MXCSR at their defaults.
        serde_json::json!([0x37f, 0x1f80]),
        // The thread pointer, and the CPU taskset pinned it to.
        serde_json::json!([self_ptr, cpu]),
        // CPUID leaf 0: eax, ebx, ecx, edx.
        serde_json::json!([id.eax, id.ebx, id.ecx, id.edx]),
    ];
    assert_eq!(items, want.iter().collect::<Vec<_>>(), "{out}");
    assert_ne!(
        log["tid"], log["pid"],
        "a thread other than the main thread"
    );
    assert_eq!(log["cpu"], cpu, "the record's CPU");
}

/// The attach journal is never written through what another user could
/// have planted: a journal directory owned by someone else or a symlink is
/// refused, an existing journal file (here a symlink to a file the attack
/// wants overwritten) is neither followed nor truncated, and in every case
/// no breakpoint is armed (nothing `wprobe repair` could not undo) and the
/// process runs on untouched.
fn attach_journal_refuses_planted_directories_and_files() {
    use std::os::unix::fs::PermissionsExt;
    let exe = slow_target();
    let prog = write(
        "journal_plant.rpn",
        format!(
            "name = {}\noffset = work\n push r, rdi\n log 1\n",
            exe.display()
        ),
    );
    let victim = scratch().join("victim-file");
    std::fs::write(&victim, "precious\n").unwrap();
    let mut target = Command::new(&exe)
        .arg("100000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id();
    let base = scratch().join("journal-plants");
    let _ = std::fs::remove_dir_all(&base);
    type Plant<'a> = Box<dyn Fn(&Path) + 'a>;
    let cases: [(&str, Plant<'_>, String); 3] = [
        (
            "other owner",
            Box::new(|d: &Path| {
                std::fs::create_dir_all(d).unwrap();
                std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
            }),
            "owned by uid 65534, not by the current user (uid 0)".to_string(),
        ),
        (
            "symlinked directory",
            Box::new(|d: &Path| {
                let real = d.with_file_name("real-dir");
                std::fs::create_dir_all(&real).unwrap();
                std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
                std::os::unix::fs::symlink(&real, d).unwrap();
            }),
            "it is a symbolic link".to_string(),
        ),
        (
            "planted journal",
            Box::new(|d: &Path| {
                std::fs::create_dir_all(d).unwrap();
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
                std::os::unix::fs::symlink(
                    scratch().join("victim-file"),
                    d.join(format!("{pid}.journal")),
                )
                .unwrap();
            }),
            format!(
                "already exists: a wprobe attached to process {pid} was killed; run `wprobe repair --pid {pid}` first"
            ),
        ),
    ];
    for (i, (what, plant, want)) in cases.iter().enumerate() {
        let xdg = base.join(format!("xdg{i}"));
        std::fs::create_dir_all(&xdg).unwrap();
        plant(&xdg.join("wprobe"));
        let o = crate::support::cli::output_within(
            {
                let mut c = wprobe();
                c.args(["run", "--transport", "ptrace"])
                    .arg(&prog)
                    .args(["-p", &pid.to_string()])
                    .env("XDG_RUNTIME_DIR", &xdg);
                c
            },
            30,
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("not armed: "), "{what}: {err}");
        assert!(err.contains(want.as_str()), "{what}: {err}");
        assert!(
            err.contains("error: no probe could be armed"),
            "{what}: {err}"
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let work = crate::support::cli::sym(&exe, "work");
    assert_ne!(live_bytes(pid, work, 1), [0xcc], "nothing armed");
    assert!(target.try_wait().unwrap().is_none(), "the process runs on");
    target.kill().unwrap();
    target.wait().unwrap();
}

/// SIGTERM or SIGINT sent to `wprobe run -- CMD`: wprobe detaches cleanly,
/// the command receives the signal as it would untraced (its handler runs,
/// or the default action kills it), and wprobe exits with the command's
/// status (128 + signal when it was killed), under every transport.
fn a_stopping_signal_reaches_the_command_and_the_status_says_what_happened(tr: &'static str) {
    let exe = crate::support::cli::gcc(
        "term_handler",
        &crate::support::cli::progs().join("term_handler.c"),
        &["-O1"],
    );
    let p = write(
        &format!("tick_{tr}.rpn"),
        format!(
            "name = {}\noffset = tick\n push r, rdi\n log 1\n",
            exe.display()
        ),
    );
    for (sig, want_out, want_code) in [
        ("TERM", "got TERM\n", 3),
        // SIGINT's default action kills the command: 128 + 2.
        ("INT", "", 130),
    ] {
        let mut w = wprobe()
            .arg("run")
            .arg(&p)
            .args(["--transport", tr, "-o", "/dev/null", "--"])
            .arg(&exe)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(w.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line, "ready\n");
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(
            Command::new("kill")
                .args([&format!("-{sig}"), &w.id().to_string()])
                .status()
                .unwrap()
                .success()
        );
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let st = w.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut w.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(rest, want_out, "{tr} SIG{sig}: {err}");
        assert_eq!(st.code(), Some(want_code), "{tr} SIG{sig}: {err}");
        assert!(err.contains("passed on to process"), "{tr} SIG{sig}: {err}");
    }
}

/// Ctrl-C in a terminal: the kernel sends SIGINT to the whole foreground
/// process group, so the command has its own; wprobe detaches, does not
/// send it a second one, and exits with the command's status (130).
fn ctrl_c_in_a_terminal_reaches_the_command_once() {
    let exe = crate::support::cli::gcc(
        "term_handler",
        &crate::support::cli::progs().join("term_handler.c"),
        &["-O1"],
    );
    let p = write(
        "tick_tty.rpn",
        format!(
            "name = {}\noffset = tick\n push r, rdi\n log 1\n",
            exe.display()
        ),
    );
    // `script` runs the command line on a new terminal; a 0x03 written to
    // its input is the terminal's Ctrl-C.
    let line = format!(
        "{} run {} -o /dev/null -- {}; echo EXIT=$?",
        env!("CARGO_BIN_EXE_wprobe"),
        p.display(),
        exe.display()
    );
    // `script -c` runs the line with $SHELL: bash, whatever the caller's
    // is (CI runs without SHELL, and dash, as sh, dies of the terminal's
    // SIGINT itself instead of running the `echo`).
    let mut s = Command::new("script")
        .env("SHELL", "/bin/bash")
        .args(["-qfec", &line, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = s.stdin.take().unwrap();
    // Ctrl-C once the command printed "ready" (it is running, traced), not
    // after a guessed delay: on a loaded machine start-up can take seconds.
    let mut stdout = s.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        let mut told = false;
        loop {
            match std::io::Read::read(&mut stdout, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
            }
            if !told && String::from_utf8_lossy(&all).contains("ready") {
                told = true;
                let _ = tx.send(());
            }
        }
        all
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the traced command printed \"ready\" within 60 s");
    std::io::Write::write_all(&mut input, b"\x03").unwrap();
    let o = crate::support::cli::output_within_child(s, 30);
    drop(input);
    let out = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    assert!(o.stdout.is_empty());
    assert!(out.contains("EXIT=130"), "{out}");
    assert!(!out.contains("passed on"), "{out}");
}

/// `exit 3` in a multi-threaded PIE: the core holds every thread (the hit
/// thread first) and the notes gdb needs to place the PIE and its
/// libraries (NT_AUXV, NT_FILE), so gdb names the function at the hit.
fn exit_3_core_of_a_threaded_pie_has_every_thread_and_its_symbols() {
    let dir = scratch().join("cores-pie");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = crate::support::cli::gcc(
        "calls_pie",
        &crate::support::cli::progs().join("calls.c"),
        &["-O1", "-fPIE", "-pie", "-g"],
    );
    let p = write(
        "core_pie.rpn",
        format!(
            "name = {}\noffset = target\nmaxhits = 1\n exit 3\n",
            exe.display()
        ),
    );
    // 4 threads, 1,000 calls each, 1 ms apart: every thread is alive at
    // the first hit.
    let o = wprobe()
        .arg("run")
        .arg(&p)
        .arg("--")
        .arg(&exe)
        .args(["1000", "4", "1000"])
        .env("WPROBE_DUMP_DIR", &dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let cores: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cores.len(), 1, "{cores:?}");
    let g = Command::new("gdb")
        .args(["-batch", "-ex", "info threads", "-ex", "info symbol $pc"])
        .arg(&exe)
        .arg(&cores[0])
        .output()
        .expect("running gdb");
    let out = String::from_utf8_lossy(&g.stdout);
    // The table of `info threads`: the hit thread (a worker, current) and
    // at least the main thread, which waits in pthread_join (workers start
    // one by one, so how many exist at the first hit varies).
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| {
            l.trim_start()
                .starts_with(|c: char| c == '*' || c.is_ascii_digit())
                // `Thread 0x… (LWP n)` with libthread_db, `LWP n` without.
                && l.contains("LWP ")
        })
        .collect();
    assert!(
        rows.len() >= 2,
        "more than the hit thread: {out}\n--- gdb stderr\n{}\n--- wprobe stderr\n{}",
        String::from_utf8_lossy(&g.stderr),
        stderr(&o)
    );
    assert!(rows[0].starts_with("* 1 "), "the hit thread first: {out}");
    assert!(
        out.contains("target in section .text"),
        "the PIE's symbol at the hit: {out}"
    );
}

/// Refusals that name the real cause instead of blaming permissions: a
/// zombie, a kernel thread, a process another tracer (here another
/// wprobe) holds; and `repair` refuses to write under a live wprobe.
fn attach_refusals_name_the_real_cause() {
    let wat = write(
        "refusal.wat",
        "(module (func (export \"h\") (result i32) (i32.const 0)))",
    );
    let attach = |pid: u32, tr: &str| {
        wprobe()
            .arg("run")
            .arg(&wat)
            .args([
                "--probe",
                "main=h",
                "--transport",
                tr,
                "-p",
                &pid.to_string(),
            ])
            .output()
            .unwrap()
    };
    // A zombie: the child of a process that never reaps it (it exits once
    // the shell has become `sleep 30`: a shell still running might reap it).
    let mut parent = Command::new("sh")
        .args(["-c", "sleep 0.3 & echo $!; exec sleep 30"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(parent.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let zombie: u32 = line.trim().parse().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !std::fs::read_to_string(format!("/proc/{zombie}/stat"))
        .unwrap()
        .contains(") Z ")
    {
        assert!(std::time::Instant::now() < deadline, "no zombie");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for tr in ["ptrace", "perf"] {
        let o = attach(zombie, tr);
        assert_eq!(o.status.code(), Some(1));
        assert!(
            stderr(&o).ends_with(&format!(
                "error: process {zombie} is a zombie: it has exited and waits for its parent to \
                 reap it; there is nothing left to trace\n"
            )),
            "{tr}: {}",
            stderr(&o)
        );
    }
    parent.kill().unwrap();
    parent.wait().unwrap();
    // A kernel thread (kthreadd).
    let o = attach(2, "ptrace");
    assert!(
        stderr(&o)
            .ends_with("error: process 2 is a kernel thread: wprobe traces user-space processes\n"),
        "{}",
        stderr(&o)
    );
    // Already traced: by a first wprobe.
    let exe = slow_target();
    let mut target = Command::new(&exe)
        .arg("100000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id();
    let mut first = wprobe()
        .args(["run", "--transport", "ptrace"])
        .arg(&wat)
        .args([
            "--probe",
            "work=h",
            "-o",
            "/dev/null",
            "-p",
            &pid.to_string(),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let work = crate::support::cli::sym(&exe, "work");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while live_bytes(pid, work, 1) != [0xcc] {
        assert!(
            std::time::Instant::now() < deadline,
            "not armed within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = attach(pid, "ptrace");
    assert!(
        stderr(&o).ends_with(&format!(
            "error: process {pid} is already traced by process {} (wprobe): a process has one \
             tracer at a time; end that one first (or use --transport perf, which does not \
             trace)\n",
            first.id()
        )),
        "{}",
        stderr(&o)
    );
    // `repair` under the live wprobe: refused, nothing written.
    let o = wprobe()
        .args(["repair", "--pid", &pid.to_string()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with(&format!(
            "error: process {pid} is traced by process {} (wprobe), which restores it when it stops",
            first.id()
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        live_bytes(pid, work, 1),
        [0xcc],
        "still armed by the first wprobe"
    );
    Command::new("kill")
        .args(["-INT", &first.id().to_string()])
        .status()
        .unwrap();
    first.wait().unwrap();
    assert_ne!(live_bytes(pid, work, 1), [0xcc]);
    target.kill().unwrap();
    target.wait().unwrap();
}

/// A probe on a library the command never maps cannot fire: its 0 hits
/// are not left to look like "never called". The run succeeds and says
/// which probe and which module.
fn a_probe_on_a_library_the_command_never_maps_is_reported() {
    // probe_target links libc only; libm is on every machine with gcc.
    let p = write(
        "never_mapped.rpn",
        "name = libm.so.6\nmajor = 1\noffset = cos\n push 1\n log 1\n",
    );
    let o = wprobe()
        .arg("run")
        .arg(&p)
        .arg("--")
        .arg(probe_target())
        .current_dir(scratch())
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(
        e.contains(
            "wprobe: warning: probe never_mapped:cos was never armed: no traced process mapped \
             module `libm.so.6`"
        ),
        "{e}"
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "counter=4 last=27\n");
}

/// Attaching with `-p` and detaching (SIGINT) stop no thread asleep in a
/// system call: a thread in `epoll_wait` sees no EINTR (stopping it would
/// make the call fail so, as strace -f and gdb do), while the probe on
/// the main thread's `tick` is hit, and the process is left untraced.
fn attach_and_detach_leave_a_thread_asleep_in_epoll_wait_undisturbed_ptrace() {
    asleep_in_epoll_wait_undisturbed("ptrace");
}

/// The in-process transport stops every thread to patch and to detach:
/// the stop ends `epoll_wait` with `EINTR` (signal(7)), which wprobe
/// undoes by restarting the call (it failed with `EINTR` twice before).
fn attach_and_detach_leave_a_thread_asleep_in_epoll_wait_undisturbed_inproc() {
    asleep_in_epoll_wait_undisturbed("inproc");
}

fn asleep_in_epoll_wait_undisturbed(transport: &str) {
    let exe = crate::support::cli::gcc(
        "epoll_waiter",
        &crate::support::cli::progs().join("epoll_waiter.c"),
        &["-O0", "-fno-pie", "-no-pie", "-fcf-protection=none"],
    );
    let tick = match wprobe_elf::ElfInfo::open(&exe).unwrap().lookup("tick") {
        wprobe_elf::Lookup::Found(s) => s.value,
        _ => panic!("no tick"),
    };
    let mut target = Command::new(&exe)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = target.id();
    let mut out = std::io::BufReader::new(target.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    // The waiter is asleep in epoll_wait before wprobe comes.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let prog = write(
        "epoll_tick.rpn",
        format!(
            "name = {}\noffset = tick\n push r, rdi\n log 1\n",
            exe.display()
        ),
    );
    let w = wprobe()
        .args(["run", "--transport", transport])
        .arg(&prog)
        .args(["-p", &pid.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_patched(pid, tick, 0x55); // push %rbp (-O0)
    std::thread::sleep(std::time::Duration::from_millis(200));
    signal(w.id(), "INT");
    let o = w.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let records = String::from_utf8_lossy(&o.stdout).lines().count();
    assert!(records > 10, "records while attached: {records}");
    // wprobe has exited: nothing traces the process any more.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("TracerPid:\t0\n"), "{status}");
    signal(pid, "USR1");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(target.wait().unwrap().success());
    assert_eq!(rest, "woken\ndone\n", "the waiter saw EINTR");
}

/// A JIT rewrites the code wprobe probes (`tests/progs/jit.c`): detaching
/// leaves the process's new code in place and says so on the command line,
/// and the process runs the new code. An absolute address outside every
/// file without `opcode =` is refused, naming the address as given.
fn code_the_process_rewrote_while_probed_is_left_alone_and_reported() {
    let exe = crate::support::cli::gcc(
        "jit_cli",
        &crate::support::cli::progs().join("jit.c"),
        &["-O0"],
    );
    let mut target = Command::new(&exe)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = target.id();
    let mut to = target.stdin.take().unwrap();
    let mut from = std::io::BufRead::lines(std::io::BufReader::new(target.stdout.take().unwrap()));
    assert_eq!(from.next().unwrap().unwrap(), "ready");
    // No opcode: refused, with the address as given.
    let plain = write(
        "jit_plain.wat",
        "(module (func (export \"h\") (result i32) (i32.const 0)))",
    );
    let o = wprobe()
        .args(["run", "--transport", "ptrace"])
        .arg(&plain)
        .args(["--probe", "@0x70000000=h", "-p", &pid.to_string()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!(
            "0x70000000 is not in the file of module `{}`, so its instruction boundaries \
             cannot be verified; give the first byte with `opcode =`",
            exe.display()
        )),
        "{}",
        stderr(&o)
    );
    // With the first byte (mov $1, %eax): armed.
    let wat = write(
        "jit_probe.wat",
        "(module (func (export \"h\") (result i32) (i32.const 0))\n\
         (@custom \"wprobe.manifest\" \"wprobe-manifest 1\\n\" \"abi 2\\n\" \
         \"module jit_cli\\n\" \"probe h\\n\" \"  location address 0x70000000\\n\" \
         \"  opcode 0xb8\\n\"))",
    );
    let w = wprobe()
        .args(["run", "--transport", "ptrace"])
        .arg(&wat)
        .args(["-p", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_patched(pid, 0x7000_0000, 0xb8);
    std::io::Write::write_all(&mut to, b"c").unwrap();
    std::io::Write::flush(&mut to).unwrap();
    assert_eq!(from.next().unwrap().unwrap(), "1");
    std::io::Write::write_all(&mut to, b"r").unwrap();
    std::io::Write::flush(&mut to).unwrap();
    assert_eq!(from.next().unwrap().unwrap(), "rewritten");
    signal(w.id(), "INT");
    let o = w.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "wprobe: warning: process {pid} rewrote its code at 0x70000000 (now 0x31) while it \
             was probed there: left as the process wrote it"
        )),
        "{err}"
    );
    assert_eq!(
        live_bytes(pid, 0x7000_0000, 1),
        [0x31],
        "the process's own code"
    );
    std::io::Write::write_all(&mut to, b"cq").unwrap();
    drop(to);
    assert_eq!(from.next().unwrap().unwrap(), "2");
    assert!(target.wait().unwrap().success());
}

/// A handler file larger than any module (64 MiB) is refused with its
/// path and the bound, before the command runs.
fn a_module_file_over_64_mib_is_refused() {
    let big = scratch().join("big.wasm");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len((64 << 20) + 1).unwrap();
    let o = wprobe()
        .arg("run")
        .arg(&big)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "error: reading {}: larger than 67108864 bytes, not a handler module\n",
            big.display()
        )
    );
    std::fs::remove_file(&big).unwrap();
}
