//! The random-program differential on a real process: random programs
//! (`randprog`, the generator of the compiler's differential), placed on
//! `probe_target`'s `target_fn` and `bump`, traced under the ptrace and the
//! in-process transports and under `auto` (the planner's choice: inproc,
//! or ptrace for programs that may `exit 1`/`exit 3`) with address-space
//! randomization off, give the
//! same records (every field but pid, tid, CPU and time), the same
//! statistics, the same program output and exit status (return probes
//! included). Programs that read a debug register (user space cannot),
//! `cpuid` (its answer depends on the CPU that runs the handler) or
//! that may `exit 1`/`exit 3` (a stopped target: a debugger, a core file;
//! refused at load by the in-process transport; `auto` is checked to
//! choose ptrace for them) are not run, and counted.
//! `WPROBE_INPROC_DIFF_PROGRAMS` (default 200) and `WPROBE_DIFF_SEED` override.

use runtime::out::format::Format;
use runtime::session::{LoadedProgram, RunOptions, Session};
use runtime::transport::{OpenOptions, Target};
use runtime::wasm::regscan::RegsRead;
use std::sync::atomic::AtomicBool;
use wprobe_tests::randprog::{self, Rng};
use wprobe_tests::{SharedBuf, build_text, engine, probe_target, scratch_dir};

/// Traces `probe_target` under `transport` with the program `src`; returns
/// (JSON lines without pid/tid/cpu/time, the program's output, its status).
fn trace(
    transport: &str,
    src: &str,
    n: usize,
) -> (&'static str, Vec<serde_json::Value>, String, String) {
    let program = build_text(src);
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
        label: "diff".into(),
        module,
    };
    let mut session =
        Session::new(engine(), vec![input], opts, Box::new(buf.clone())).expect("session");
    let out = scratch_dir().join(format!("inproc-diff-{n}.{transport}.out"));
    let target = probe_target();
    // The program's output through a shell-free redirection: the target
    // itself is the launched command (its entry point is where inproc
    // stops it), stdout to a file by the launcher's inherited descriptor.
    let file = std::fs::File::create(&out).unwrap();
    let argv: Vec<std::ffi::OsString> = vec![target.into_os_string()];
    // `auto`: the planner's choice, checked as `wprobe run` checks it.
    let info = runtime::plan::choose(transport, &Default::default(), &|i| session.check(i))
        .expect("a transport for the program")
        .info;
    let saved = redirect_stdout(&file);
    let opened = (info.open)(
        Target::Launch(&argv),
        &OpenOptions {
            follow_forks: false,
            verify_opcodes: true,
            reads_memory: session.reads_memory(),
            registers: RegsRead::All,
            ring_full: Default::default(),
        },
    );
    restore_stdout(saved);
    let mut t = opened.expect("open");
    let main = t.main_pid();
    session.arm(t.as_mut(), main, true);
    let status = session.run(t.as_mut(), &AtomicBool::new(false));
    let status = format!("{status:?}");
    let chosen = info.name;
    session.summary();
    drop(t);
    let lines = buf
        .json_lines()
        .into_iter()
        .map(|mut v| {
            if let Some(m) = v.as_object_mut() {
                for k in ["pid", "tid", "cpu", "time_ns", "transport"] {
                    m.remove(k);
                }
                // How the in-process transport armed each probe's sites.
                if let Some(serde_json::Value::Array(probes)) = m.get_mut("probes") {
                    for p in probes {
                        if let Some(o) = p.as_object_mut() {
                            o.remove("sites");
                        }
                    }
                }
            }
            v
        })
        .collect();
    // The test harness may print a result line while this process's
    // stdout points at the file (other tests run in parallel): not the
    // target's.
    let output = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .filter(|l| {
            !(l.starts_with("test ")
                && (l.contains(" ... ") || l.contains(" has been running for over ")))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    (chosen, lines, output, status)
}

/// The transport `auto` chooses for the program `src`.
fn planned(src: &str) -> &'static str {
    let wasm = wprobe_tests::compile(&build_text(src));
    let module = runtime::wasm::load::load(engine(), &wasm, None).expect("load");
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
        label: "diff".into(),
        module,
    };
    let session =
        Session::new(engine(), vec![input], opts, Box::new(std::io::sink())).expect("session");
    runtime::plan::choose("auto", &Default::default(), &|i| session.check(i))
        .expect("a transport for the program")
        .info
        .name
}

/// Points this process's stdout at `file` (the launched target inherits
/// it); returns the saved descriptor.
fn redirect_stdout(file: &std::fs::File) -> std::os::fd::OwnedFd {
    use std::os::fd::AsFd;
    let saved = std::io::stdout().as_fd().try_clone_to_owned().unwrap();
    nix::unistd::dup2_stdout(file).unwrap();
    saved
}

fn restore_stdout(saved: std::os::fd::OwnedFd) {
    nix::unistd::dup2_stdout(saved).unwrap();
}

#[test]
fn random_programs_give_the_ptrace_records_under_inproc_and_auto() {
    // Inherited by the launched targets (personality is per thread):
    // stacks and heaps at the same addresses in both runs.
    nix::sys::personality::set(nix::sys::personality::Persona::ADDR_NO_RANDOMIZE).unwrap();
    let seed = std::env::var("WPROBE_DIFF_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5EED_2026_1125u64);
    let n: usize = std::env::var("WPROBE_INPROC_DIFF_PROGRAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut r = Rng::new(seed);
    let (mut compared, mut stopping, mut skipped, mut records) = (0, 0, 0, 0);
    for i in 0..n {
        let src = randprog::program(&mut r);
        // exit 1 and exit 3 need a stopped target: ptrace hands the process
        // to a debugger or writes a core file, inproc refuses the program
        // (tested in runtime/tests/all/inproc.rs), `auto` chooses ptrace.
        let stops = src.lines().any(|l| matches!(l.trim(), "exit 1" | "exit 3"));
        // cpuid's answer depends on the CPU that runs it (the APIC id of
        // leaf 1): the handler runs in wprobe under ptrace, in the target
        // under inproc, each on whichever CPU.
        if src.contains("push r, cpuid")
            || ["dr0", "dr1", "dr2", "dr3", "dr6", "dr7"]
                .iter()
                .any(|d| src.split(|c: char| !c.is_alphanumeric()).any(|w| w == *d))
        {
            skipped += 1;
            continue;
        }
        let src = src
            .replace(
                "name = diff",
                &format!("name = {}", probe_target().display()),
            )
            .replace("address = 0x401000", "offset = target_fn")
            .replace("address = 0x401001", "offset = bump");
        if stops {
            // Not run: a hand-off leaves the target stopped for a debugger.
            assert_eq!(planned(&src), "ptrace", "program {i}: what auto chose");
            stopping += 1;
            continue;
        }
        let (_, want, want_out, want_status) = trace("ptrace", &src, i);
        let want = (want, want_out, want_status);
        let (chosen, auto, auto_out, auto_status) = trace("auto", &src, i);
        assert_eq!(chosen, "inproc", "program {i}: what auto chose");
        assert_eq!(
            (auto, auto_out, auto_status),
            want,
            "seed {seed:#x}, program {i} under auto:\n{src}"
        );
        let (_, got, got_out, got_status) = trace("inproc", &src, i);
        assert_eq!(
            (got, got_out, got_status),
            want,
            "seed {seed:#x}, program {i}:\n{src}"
        );
        records += want.0.len();
        compared += 1;
    }
    eprintln!(
        "{compared} programs compared under ptrace, inproc and auto ({records} JSON lines), \
         {stopping} that may stop the target (auto: ptrace, not run), {skipped} skipped"
    );
    // Some read a debug register or cpuid, or stop the target.
    assert!(compared >= n / 3, "{compared} of {n}");
}
