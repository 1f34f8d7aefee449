//! System-wide probes (`wprobe run -e` with neither `-c` nor `-p`,
//! bpftrace's default): the probes are armed on their files through the
//! perf transport and fire in every process that runs them, here processes
//! started only after the attach was confirmed. Each test uses test
//! programs built under names of its own: a uprobe is on the file, and a
//! test running alongside must not hit another's probes.

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, output_within, output_within_child, progs, stderr, wprobe};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(
        processes_started_later_hit_with_their_pid_comm_args_and_strings,
        Need::Perf
    ),
    case!(uretprobe_retval_of_processes_started_later, Need::Perf),
    case!(
        bashreadline_shape_uretprobe_on_a_library_runs_unchanged,
        Need::Perf
    ),
    case!(
        usdt_semaphore_is_raised_in_a_process_started_later,
        Need::Perf
    ),
    case!(auto_says_perf_and_why_others_refuse, Need::Perf),
    case!(
        a_library_named_by_its_short_name_is_probed_where_the_linker_finds_it,
        Need::Perf
    ),
    case!(exit_in_a_handler_ends_the_run_with_end_and_maps, Need::Perf),
];

/// `syswide` and its library, built as `NAME` and `libNAME.so` (the
/// executable names its library by path).
fn target(name: &str) -> (PathBuf, PathBuf) {
    let lib = gcc(
        &format!("lib{name}.so"),
        &progs().join("libsyswide.c"),
        &["-O1", "-g", "-shared", "-fPIC"],
    );
    let exe = gcc(
        name,
        &progs().join("syswide.c"),
        &["-O1", "-g", lib.to_str().unwrap()],
    );
    (exe, lib)
}

/// A system-wide `wprobe run` whose standard output is read as it comes.
struct Run {
    child: Option<Child>,
    out: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Run {
    /// Starts `wprobe run -e PROG` (plus `args`) with no process, and waits
    /// until its `BEGIN` printed `ready` (every probe is armed by then).
    fn start(prog: &str, args: &[&str]) -> Run {
        let mut c = wprobe();
        c.args(["run"])
            .args(args)
            .args(["-e", prog])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let o = out.clone();
        let reader = std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                o.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut run = Run {
            child: Some(child),
            out,
            reader: Some(reader),
        };
        run.wait_for(30, "the BEGIN probe's `ready`", |s| {
            s.lines().any(|l| l == "ready")
        });
        run
    }

    /// Waits until the output so far satisfies `ok`.
    fn wait_for(&mut self, secs: u64, what: &str, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if ok(&self.out.lock().unwrap()) {
                return;
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if Instant::now() > deadline || exited.is_some() {
                let o = self.stop();
                panic!(
                    "waited for {what} in vain (exited: {exited:?}); stdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&o.stdout),
                    stderr(&o)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGINT (as Ctrl-C), then the run's whole output.
    fn stop(&mut self) -> std::process::Output {
        self.end(true)
    }

    /// The run's whole output once it exits (after a SIGINT when `int`).
    fn end(&mut self, int: bool) -> std::process::Output {
        let mut child = self.child.take().expect("stopped once");
        if int {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
        }
        let mut err = child.stderr.take().unwrap();
        let e = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = err.read_to_end(&mut s);
            s
        });
        let mut o = output_within_child(child, 60);
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        o.stdout = self.out.lock().unwrap().clone().into_bytes();
        o.stderr = e.join().unwrap();
        o
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A target process started after the attach; it waits at EOF of stdin.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Target {
    fn start(exe: &Path, args: &[String]) -> Target {
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        Target { child, stdin }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets it exit; its "done" line.
    fn finish(mut self) -> String {
        drop(self.stdin.take());
        let mut s = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert!(self.child.wait().unwrap().success());
        s
    }
}

/// The lines of `out` that start with `prefix ` (without it), sorted.
fn lines_of(out: &str, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix(prefix)?.strip_prefix(' '))
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

fn processes_started_later_hit_with_their_pid_comm_args_and_strings() {
    let (exe, _) = target("syswide_hits");
    let prog = format!(
        "BEGIN {{ printf(\"ready\\n\"); }}
         uprobe:{e}:probed {{ @n[pid, comm] = count(); printf(\"hit %d %s %d %s\\n\", pid, comm, arg0, str(arg1)); }}",
        e = exe.display()
    );
    let mut run = Run::start(&prog, &[]);
    // Three processes, started after the attach, calling probed() 1, 2
    // and 3 times with a tag of their own.
    let targets: Vec<(Target, usize)> = (1..=3)
        .map(|k| (Target::start(&exe, &[k.to_string(), format!("tag-{k}")]), k))
        .collect();
    run.wait_for(60, "6 hits", |s| {
        s.lines().filter(|l| l.starts_with("hit ")).count() >= 6
    });
    let mut want_hits = Vec::new();
    let mut want_maps = Vec::new();
    for (t, k) in &targets {
        for i in 1..=*k {
            want_hits.push(format!("{} syswide_hits {} tag-{k}", t.pid(), 100 + i));
        }
        want_maps.push(format!("@n[{}, syswide_hits]: {k}", t.pid()));
    }
    for (t, _) in targets {
        assert!(t.finish().starts_with("done "));
    }
    let o = run.stop();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    want_hits.sort();
    assert_eq!(lines_of(&out, "hit"), want_hits, "{out}\n{err}");
    let mut maps: Vec<&str> = out.lines().filter(|l| l.starts_with("@n[")).collect();
    maps.sort();
    want_maps.sort();
    assert_eq!(maps, want_maps, "{out}\n{err}");
    assert!(!err.contains("exited before"), "{err}");
}

fn uretprobe_retval_of_processes_started_later() {
    let (exe, _) = target("syswide_ret");
    let prog = format!(
        "BEGIN {{ printf(\"ready\\n\"); }}
         uretprobe:{e}:probed {{ @r[pid, retval] = count(); printf(\"ret %d %d\\n\", pid, retval); }}",
        e = exe.display()
    );
    let mut run = Run::start(&prog, &[]);
    let a = Target::start(&exe, &["2".into(), "x".into()]);
    let b = Target::start(&exe, &["1".into(), "y".into()]);
    run.wait_for(60, "3 returns", |s| {
        s.lines().filter(|l| l.starts_with("ret ")).count() >= 3
    });
    // probed(x) returns 3x.
    let mut want = vec![
        format!("{} 303", a.pid()),
        format!("{} 306", a.pid()),
        format!("{} 303", b.pid()),
    ];
    want.sort();
    let mut maps = BTreeMap::new();
    maps.insert(format!("@r[{}, 303]: 1", a.pid()), ());
    maps.insert(format!("@r[{}, 306]: 1", a.pid()), ());
    maps.insert(format!("@r[{}, 303]: 1", b.pid()), ());
    a.finish();
    b.finish();
    let o = run.stop();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(lines_of(&out, "ret"), want, "{out}\n{err}");
    let got: BTreeMap<String, ()> = out
        .lines()
        .filter(|l| l.starts_with("@r["))
        .map(|l| (l.to_string(), ()))
        .collect();
    assert_eq!(got, maps, "{out}\n{err}");
}

/// bpftrace's `tools/bashreadline.bt` with its probe on a library function
/// of a test program instead of bash's `readline` (which needs an
/// interactive shell): a `uretprobe` reading the returned line with
/// `str(retval)`, `time()`, its BEGIN banner, unchanged otherwise.
fn bashreadline_shape_uretprobe_on_a_library_runs_unchanged() {
    let (exe, lib) = target("syswide_rl");
    let prog = format!(
        "BEGIN
{{
	printf(\"Tracing bash commands... Hit Ctrl-C to end.\\n\");
	printf(\"%-9s %-6s %s\\n\", \"TIME\", \"PID\", \"COMMAND\");
	printf(\"ready\\n\");
}}

uretprobe:{l}:lib_line
{{
	time(\"%H:%M:%S  \");
	printf(\"%-6d %s\\n\", pid, str(retval));
}}
",
        l = lib.display()
    );
    let mut run = Run::start(&prog, &[]);
    let t = Target::start(&exe, &["3".into(), "t".into()]);
    let pid = t.pid();
    run.wait_for(60, "3 lines", |s| {
        s.lines().filter(|l| l.contains("echo ")).count() >= 3
    });
    t.finish();
    let o = run.stop();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "Attaching 2 probes...",
            "Tracing bash commands... Hit Ctrl-C to end.",
            "TIME      PID    COMMAND",
            "ready"
        ],
        "{out}"
    );
    let cmds: Vec<String> = lines[4..]
        .iter()
        .filter(|l| !l.is_empty())
        .map(|l| {
            // "HH:MM:SS  PID    COMMAND"
            let (time, rest) = l.split_at(10);
            assert!(
                time.len() == 10 && time.as_bytes()[2] == b':' && time.ends_with("  "),
                "{l}"
            );
            rest.to_string()
        })
        .collect();
    assert_eq!(
        cmds,
        [
            format!("{pid:<6} echo one"),
            format!("{pid:<6} echo two"),
            format!("{pid:<6} echo three"),
        ],
        "{out}\n{err}"
    );
}

fn usdt_semaphore_is_raised_in_a_process_started_later() {
    let have = Path::new("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists()
        || Path::new("/usr/include/sys/sdt.h").exists();
    assert!(
        have || !crate::support::case::in_ci(),
        "sys/sdt.h is missing: scripts/setup.sh installs systemtap-sdt-dev"
    );
    if !have {
        return;
    }
    let exe = gcc(
        "usdt_demo_syswide",
        &progs().join("usdt_demo.c"),
        &[
            "-O1",
            "-g",
            progs().join("usdt_demo_gated.c").to_str().unwrap(),
            "-ldl",
        ],
    );
    let prog = format!(
        "BEGIN {{ printf(\"ready\\n\"); }}
         usdt:{e}:demo:gated {{ @g[pid] = count(); printf(\"gated %d %d\\n\", pid, arg0); }}",
        e = exe.display()
    );
    let mut run = Run::start(&prog, &[]);
    // Started after the attach: the kernel raised the semaphore when the
    // process mapped the file (the probe fires only when it is raised).
    let mut c = Command::new(&exe);
    c.args(["run", "2"]);
    let first = output_within(c, 60);
    let mut c = Command::new(&exe);
    c.args(["run", "1"]);
    let second = output_within(c, 60);
    for o in [&first, &second] {
        assert!(o.status.success());
        assert_eq!(String::from_utf8_lossy(&o.stdout), "sem 1 0\n");
    }
    run.wait_for(60, "3 gated hits", |s| {
        s.lines().filter(|l| l.starts_with("gated ")).count() >= 3
    });
    let o = run.stop();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    // The pids are the processes' (output() does not say them): one with
    // two hits, 10 and 20, one with one hit, 10.
    let hits = lines_of(&out, "gated");
    assert_eq!(hits.len(), 3, "{out}");
    let mut by_pid: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for h in &hits {
        let (pid, v) = h.split_once(' ').unwrap();
        by_pid.entry(pid.into()).or_default().push(v.into());
    }
    let mut vals: Vec<Vec<String>> = by_pid.values().cloned().collect();
    vals.sort();
    assert_eq!(
        vals,
        [vec!["10".to_string()], vec!["10".into(), "20".into()]]
    );
    let mut maps: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with("@g["))
        .map(str::to_string)
        .collect();
    maps.sort();
    let mut want: Vec<String> = by_pid
        .iter()
        .map(|(p, v)| format!("@g[{p}]: {}", v.len()))
        .collect();
    want.sort();
    assert_eq!(maps, want, "{out}");
    // After the run, a new process finds its semaphore 0 again.
    let mut c = Command::new(&exe);
    c.args(["run", "1"]);
    let after = output_within(c, 60);
    assert_eq!(String::from_utf8_lossy(&after.stdout), "sem 0 0\n");
}

fn auto_says_perf_and_why_others_refuse() {
    let (exe, _) = target("syswide_plan");
    let prog = format!(
        "BEGIN {{ printf(\"ready\\n\"); }} uprobe:{e}:probed {{ @ = count(); }}",
        e = exe.display()
    );
    let mut run = Run::start(&prog, &["-v"]);
    let o = run.stop();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(
            "wprobe: transport perf: system-wide (no -c/-p): kernel uprobes on the probed files \
             fire in every process that runs them, those started later included; not inproc:"
        ),
        "{err}"
    );
    for t in ["inproc", "ptrace"] {
        let mut c = wprobe();
        c.args(["run", "--transport", t, "-e", &prog]);
        let o = output_within(c, 60);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains(&format!(
                "--transport {t}: a probe with no -c/-p is system-wide: it must fire in every \
                 process that runs the file, started later too, which only the kernel's uprobes \
                 do (--transport perf)"
            )),
            "{e}"
        );
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

fn exit_in_a_handler_ends_the_run_with_end_and_maps() {
    let (exe, _) = target("syswide_exit");
    let prog = format!(
        "BEGIN {{ printf(\"ready\\n\"); }}
         uprobe:{e}:probed {{ @c[comm] = count(); if (arg0 == 102) {{ exit(); }} }}
         END {{ printf(\"end\\n\"); }}",
        e = exe.display()
    );
    let mut run = Run::start(&prog, &[]);
    let t = Target::start(&exe, &["2".into(), "x".into()]);
    t.finish();
    // No signal: exit() in the handler ends the run.
    let o = run.end(false);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let tail: Vec<&str> = out.lines().skip(2).filter(|l| !l.is_empty()).collect();
    assert_eq!(tail, ["end", "@c[syswide_exit]: 2"], "{out}\n{e}");
}

/// `uprobe:libc:l64a`: the library found as the dynamic linker finds
/// it (no process to read it from); every process calling it fires (a
/// function hardly anything calls: the breakpoint is in every process's
/// libc, other tests' too), and the program keeps its test program's.
fn a_library_named_by_its_short_name_is_probed_where_the_linker_finds_it() {
    let (exe, _) = target("syswide_libc");
    let prog = "BEGIN { printf(\"ready\\n\"); }
         uprobe:libc:l64a /comm == \"syswide_libc\"/ { @g[pid] = count(); printf(\"l64a %d %d\\n\", pid, arg0); }";
    let mut run = Run::start(prog, &[]);
    let a = Target::start(&exe, &["1".into(), "x".into()]);
    let b = Target::start(&exe, &["1".into(), "y".into()]);
    // Each calls l64a(1) once, then waits until its stdin closes.
    run.wait_for(60, "2 calls", |s| {
        s.lines().filter(|l| l.starts_with("l64a ")).count() >= 2
    });
    let mut calls = lines_of(&run.out.lock().unwrap(), "l64a");
    calls.sort();
    let mut want_calls = vec![format!("{} 1", a.pid()), format!("{} 1", b.pid())];
    want_calls.sort();
    assert_eq!(calls, want_calls);
    let mut want = vec![format!("@g[{}]: 1", a.pid()), format!("@g[{}]: 1", b.pid())];
    want.sort();
    a.finish();
    b.finish();
    let o = run.stop();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut maps: Vec<&str> = out.lines().filter(|l| l.starts_with("@g[")).collect();
    maps.sort();
    assert_eq!(maps, want, "{out}\n{err}");
}
