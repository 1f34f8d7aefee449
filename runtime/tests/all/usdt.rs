//! USDT probes (`sys/sdt.h`) on real processes: a C program with every
//! argument form, with and without semaphores, in the executable and in a
//! `dlopen`ed library, traced exactly on every transport; semaphores
//! raised in a live process and back to their values (another tracer's
//! increment kept) after wprobe exits, is interrupted or is killed;
//! Debian's python3.11 `function__entry` counted per function, launched
//! and attached; a real PostgreSQL 15 server's backends traced with `-p`
//! and, forked after the attach, with `-f -p` on the postmaster.

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, output_within, output_within_child, progs, stderr, wprobe};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(every_argument_form_is_exact @ every_transport),
    case!(semaphores_come_back_after_exit_sigint_and_sigkill @ every_transport),
    case!(python_function_entry_counts_per_function @ every_transport),
    case!(listing_shows_sites_and_argument_specs),
    case!(rpn_usdt_probe_point_reads_arguments_by_number @ every_transport),
    case!(wat_handler_reads_usdt_arguments @ every_transport),
    case!(
        postgres_backend_queries_are_counted_exactly,
        Need::Root,
        Need::Setpriv
    ),
    case!(
        postgres_backend_forked_after_attach_is_traced,
        Need::Root,
        Need::Setpriv
    ),
];

fn need_sdt() -> bool {
    let have = std::path::Path::new("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists()
        || std::path::Path::new("/usr/include/sys/sdt.h").exists();
    assert!(
        have || !crate::support::case::in_ci(),
        "sys/sdt.h is missing: scripts/setup.sh installs systemtap-sdt-dev"
    );
    have
}

/// The demo executable and its library.
fn demo() -> (PathBuf, PathBuf) {
    let exe = gcc(
        "usdt_demo",
        &progs().join("usdt_demo.c"),
        &[
            "-O1",
            "-g",
            progs().join("usdt_demo_gated.c").to_str().unwrap(),
            "-ldl",
        ],
    );
    let lib = gcc(
        "libusdt_demo.so",
        &progs().join("libusdt_demo.c"),
        &[
            "-O1",
            "-g",
            "-shared",
            "-fPIC",
            progs().join("libusdt_demo_gated.c").to_str().unwrap(),
        ],
    );
    (exe, lib)
}

fn every_argument_form_is_exact(transport: &str) {
    if !need_sdt() {
        return;
    }
    let (exe, lib) = demo();
    let (e, l) = (exe.display(), lib.display());
    let mut prog = format!(
        "usdt:{e}:demo:four {{ printf(\"four %d %d %d %d\\n\", arg0, arg1, arg2, arg3); }}
         usdt:{e}:demo:mem {{ printf(\"mem %d %d\\n\", arg0, arg1); }}
         usdt:{e}:stat {{ printf(\"stat %d\\n\", arg0); }}
         usdt:{e}:demo:two {{ printf(\"two %d\\n\", arg0); }}
         usdt:{e}:demo:gated {{ printf(\"gated %d\\n\", arg0); }}"
    );
    // Every transport arms the probes of a library `dlopen`ed after start.
    prog += &format!(
        " usdt:{l}:demolib:plain {{ printf(\"lib %d %d\\n\", arg0, arg1); }}
          usdt:{l}:demolib:gated {{ printf(\"libgated %d\\n\", arg0); }}"
    );
    let mut c = wprobe();
    c.args(["run", "--transport", transport, "-e", &prog, "-c"])
        .arg(format!("{e} run 2 {l}"))
        .env("USDT_DEMO_LINGER", "1");
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    let mut want = Vec::new();
    for k in 1..=2i64 {
        want.push("stat 40".to_string());
        want.push(format!("four {k} {} 99 42", -2 * k));
        want.push("mem 6 30".to_string());
        want.push("stat 77".to_string());
        want.push(format!("gated {}", 10 * k));
        want.push(format!("two {}", -2 * k));
        want.push(format!("lib {k} 1234"));
        want.push(format!("libgated {}", 100 * k));
    }
    let got: Vec<&str> = out
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("sem ") && !l.starts_with("Attaching"))
        .collect();
    assert_eq!(got, want, "stdout:\n{out}\nstderr:\n{err}");
    // The program saw its semaphores raised while traced.
    let sems = "sem 1 1";
    assert!(out.lines().any(|x| x == sems), "{out}");
    assert!(out.contains("Attaching 8 probes..."), "{out}");
}

/// The stdout of a running wprobe, collected by a thread.
struct Collected {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Collected {
    fn from(out: std::process::ChildStdout) -> Collected {
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let t = text.clone();
        let reader = std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                let mut g = t.lock().unwrap();
                g.push_str(&l);
                g.push('\n');
            }
        });
        Collected { text, reader }
    }

    fn wait_for(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.text.lock().unwrap().contains(what) {
            assert!(
                Instant::now() < deadline,
                "`{what}` not written in 60 s: {}",
                self.text.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn finish(self) -> String {
        let _ = self.reader.join();
        std::mem::take(&mut *self.text.lock().unwrap())
    }
}

/// A `usdt_demo wait` process: its pid, stdin, stdout lines, and the
/// addresses of its two semaphores.
struct Waiter {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    sem: u64,
}

impl Waiter {
    fn start(exe: &PathBuf, lib: &PathBuf) -> Waiter {
        let mut child = Command::new(exe)
            .arg("wait")
            .arg(lib)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().unwrap().unwrap();
        let w: Vec<&str> = ready.split_whitespace().collect();
        assert_eq!(w.first(), Some(&"ready"), "{ready}");
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        Waiter {
            sem: hex(w[1]),
            child,
            stdin,
            lines,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fires once; the semaphores the program saw.
    fn fire(&mut self) -> String {
        self.stdin.write_all(b"go\n").unwrap();
        self.stdin.flush().unwrap();
        self.lines.next().unwrap().unwrap()
    }

    fn semaphore(&self) -> u16 {
        let f = std::fs::File::open(format!("/proc/{}/mem", self.pid())).unwrap();
        let mut b = [0u8; 2];
        f.read_exact_at(&mut b, self.sem).unwrap();
        u16::from_le_bytes(b)
    }

    /// Another tracer's increment.
    fn raise(&self) {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/mem", self.pid()))
            .unwrap();
        let v = self.semaphore() + 1;
        f.write_all_at(&v.to_le_bytes(), self.sem).unwrap();
    }

    /// Whether the semaphore is `want` within `secs` seconds.
    fn semaphore_becomes(&self, want: u16, secs: u64) -> bool {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while self.semaphore() != want {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    fn wait_semaphore(&self, want: u16, why: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.semaphore() != want {
            assert!(
                Instant::now() < deadline,
                "{why}: semaphore {} not {want} within 30 s",
                self.semaphore()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn semaphores_come_back_after_exit_sigint_and_sigkill(transport: &str) {
    if !need_sdt() {
        return;
    }
    let (exe, lib) = demo();
    let mut w = Waiter::start(&exe, &lib);
    assert_eq!(w.fire(), "sem 0 0");
    // Another tracer raised it first: that increment stays.
    w.raise();
    assert_eq!(w.fire(), "sem 1 0");
    for how in ["exit", "INT", "KILL"] {
        let body = if how == "exit" {
            "printf(\"gated %d\\n\", arg0); exit();"
        } else {
            "printf(\"gated %d\\n\", arg0);"
        };
        let prog = format!("usdt:{}:demo:gated {{ {body} }}", exe.display());
        let mut child = wprobe()
            .args(["run", "--transport", transport, "-p"])
            .arg(w.pid().to_string())
            .args(["-e", &prog])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let tracer = child.id();
        let out = Collected::from(child.stdout.take().unwrap());
        // Armed: the semaphore raised and the probes announced (perf
        // enables its events after raising the semaphores).
        w.wait_semaphore(2, &format!("{transport} {how}: raised while attached"));
        out.wait_for("Attaching 1 probe...");
        assert_eq!(w.fire(), "sem 2 0", "{transport} {how}");
        if how != "exit" {
            // A transport that delivers after the fact writes the record
            // before it is stopped.
            out.wait_for("gated ");
            crate::support::cli::signal(tracer, how);
        }
        let o = output_within_child(child, 60);
        let out = out.finish();
        assert!(
            out.contains("gated "),
            "{transport} {how}: {out}\n{}",
            stderr(&o)
        );
        if how == "KILL" && transport == "inproc" && !w.semaphore_becomes(1, 5) {
            // Without a ptrace watchdog (no trap site in the run),
            // `wprobe repair` undoes what the killed run left.
            let r = output_within(
                {
                    let mut c = wprobe();
                    c.args(["repair", "--pid", &w.pid().to_string()]);
                    c
                },
                60,
            );
            let text = String::from_utf8_lossy(&r.stdout);
            assert!(
                text.contains("wprobe: lowered 1 USDT semaphore in process"),
                "{text}{}",
                stderr(&r)
            );
        }
        w.wait_semaphore(1, &format!("{transport} {how}: restored"));
        assert_eq!(w.fire(), "sem 1 0", "{transport} {how}");
    }
    drop(w.stdin);
    let _ = w.child.wait();
}

const PY_SCRIPT: &str = r#"
import sys
def alpha(n):
    return n + 1
def beta(n):
    return alpha(n) * 2
if len(sys.argv) > 1:
    print("ready", flush=True)
    sys.stdin.readline()
for i in range(7):
    beta(i)
for i in range(3):
    alpha(i)
print("done", flush=True)
if len(sys.argv) > 1:
    sys.stdin.readline()
else:
    # A tracer reading strings after the fact (perf) finds the process.
    import time
    time.sleep(0.5)
"#;

fn python_function_entry_counts_per_function(transport: &str) {
    let py = std::path::Path::new("/usr/bin/python3.11");
    if !py.exists() {
        assert!(
            !crate::support::case::in_ci(),
            "/usr/bin/python3.11 is missing (Debian's python3.11)"
        );
        return;
    }
    let script = crate::support::cli::write("usdt_calls.py", PY_SCRIPT);
    // CPython 3.11 reports `function__entry` of Python-to-Python calls
    // only on its eval loop's tracing path, which the `line` probe's
    // semaphore turns on: both are enabled, as a user of python's probes
    // must (with `function__entry` alone, 5 calls of 2,200 fire).
    let prog = format!(
        "usdt:/usr/bin/python3.11:python:function__entry /str(arg0) == \"{}\"/ {{ @[str(arg1)] = count(); }}
         usdt:/usr/bin/python3.11:python:line {{ @lines = count(); }}",
        script.display()
    );
    let want = "@[<module>]: 1\n@[beta]: 7\n@[alpha]: 10\n";
    // Launched.
    let mut c = wprobe();
    c.args(["run", "--transport", transport, "-e", &prog, "-c"])
        .arg(format!("/usr/bin/python3.11 {}", script.display()))
        .env("WPROBE_PERF_RING_PAGES", "8192");
    let o = output_within(c, 120);
    let err = stderr(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    // Under perf every sample of a program that reads strings carries an
    // 8 KiB stack snapshot: the interpreter's start (1,700 calls, 10,000
    // lines) can fill the rings of a loaded machine. Then the drops are
    // said (the summary's `dropped` column), never silent.
    assert_eq!(o.status.code(), Some(0), "{err}");
    let dropped = err
        .lines()
        .filter(|l| l.trim_start().starts_with("-e:0x"))
        .filter_map(|l| l.split_whitespace().nth(6)?.parse::<u64>().ok())
        .sum::<u64>();
    if transport != "perf" || dropped == 0 {
        assert!(out.contains(want), "{out}\n{err}");
    }
    // Attached to a running interpreter: the semaphore is raised live.
    let mut child = Command::new(py)
        .arg(&script)
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let mut tracer = wprobe()
        .args(["run", "--transport", transport, "-p"])
        .arg(child.id().to_string())
        .args(["-e", &prog])
        .env("WPROBE_PERF_RING_PAGES", "8192")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tid = tracer.id();
    let collected = Collected::from(tracer.stdout.take().unwrap());
    // Armed when the interpreter's semaphores of both probes are raised.
    let exe = wprobe_elf::ElfInfo::open(py).unwrap();
    let sems: Vec<u64> = wprobe_elf::usdt::sites(&exe)
        .into_iter()
        .filter(|s| s.name == "function__entry" || s.name == "line")
        .map(|s| s.semaphore.unwrap())
        .collect();
    assert_eq!(sems.len(), 2);
    let bias = crate::support::cli::load_bias(child.id(), py);
    let raised = |want: bool| {
        sems.iter()
            .all(|&s| (crate::support::cli::live_bytes(child.id(), s + bias, 2) != [0, 0]) == want)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !raised(true) {
        assert!(Instant::now() < deadline, "semaphores not raised in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    collected.wait_for("Attaching 2 probes...");
    stdin.write_all(b"go\n").unwrap();
    stdin.flush().unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "done");
    // A transport that delivers after the fact (perf) drains its rings.
    std::thread::sleep(Duration::from_millis(300));
    crate::support::cli::signal(tid, "INT");
    let o = output_within_child(tracer, 60);
    let out = collected.finish();
    // Attached after the module's frame was entered: its calls only.
    assert!(
        out.contains("\n@[beta]: 7\n@[alpha]: 10\n"),
        "{out}\n{}",
        stderr(&o)
    );
    assert!(!out.contains("<module>"), "{out}");
    // Lowered again after the detach.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !raised(false) {
        assert!(Instant::now() < deadline, "semaphores not lowered in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin);
    let _ = child.wait();
}

fn listing_shows_sites_and_argument_specs() {
    if !need_sdt() {
        return;
    }
    let (exe, _) = demo();
    let o = output_within(
        {
            let mut c = wprobe();
            c.args(["run", "-l"])
                .arg(format!("usdt:{}:demo:*", exe.display()));
            c
        },
        60,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let e = exe.display();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("usdt:{e}:demo:four"),
            format!("usdt:{e}:demo:gated"),
            format!("usdt:{e}:demo:mem"),
            format!("usdt:{e}:demo:stat"),
            format!("usdt:{e}:demo:two"),
        ],
        "{}",
        stderr(&o)
    );
}

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A PostgreSQL 15 server of the test's own: Debian's binaries run as the
/// `postgres` user (the server refuses root) on a scratch data directory
/// with a private socket directory, on 127.0.0.1 and a free port, every
/// statement logged with its backend's pid; stopped and removed at drop.
struct Pg {
    dir: PathBuf,
    port: u16,
    server: std::process::Child,
}

impl Pg {
    fn start(name: &str) -> Pg {
        let dir = std::env::temp_dir().join(format!("wprobe-pg-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::create_dir_all(dir.join("sock")).unwrap();
        let st = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success());
        let as_pg = |prog: &str| {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
                .arg(format!("{PG_BIN}/{prog}"));
            c
        };
        let o = as_pg("initdb")
            .args(["-A", "trust", "-U", "test", "-D"])
            .arg(dir.join("data"))
            .output()
            .unwrap();
        assert!(o.status.success(), "initdb: {}", stderr(&o));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let server = as_pg("postgres")
            .arg("-D")
            .arg(dir.join("data"))
            .arg("-k")
            .arg(dir.join("sock"))
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "log_statement=all", "-c", "log_line_prefix=%p "])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let pg = Pg { dir, port, server };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !Command::new(format!("{PG_BIN}/pg_isready"))
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(
                Instant::now() < deadline,
                "the server did not start in 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        pg
    }

    /// An interactive `psql` session: one backend for all its queries.
    fn session(&self) -> Psql {
        let mut child = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "test", "-d", "postgres", "-At"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut s = Psql {
            child,
            stdin,
            lines,
            backend: 0,
        };
        s.backend = s.query("select pg_backend_pid();").parse().unwrap();
        s
    }

    /// The statements the server logged for backend `pid`.
    fn logged(&self, pid: u32) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.join("log")).unwrap();
        let prefix = format!("{pid} LOG:  statement: ");
        log.lines()
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_string))
            .collect()
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        // SIGINT: the server's fast shutdown.
        crate::support::cli::signal(self.server.id(), "INT");
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Psql {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    backend: u32,
}

impl Psql {
    /// Runs one statement; its one-line result.
    fn query(&mut self, sql: &str) -> String {
        self.stdin.write_all(sql.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
        self.lines.next().unwrap().unwrap()
    }

    fn close(mut self) {
        let _ = self.stdin.write_all(b"\\q\n");
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn postgres_ready() -> bool {
    let have = std::path::Path::new(PG_BIN).join("postgres").exists()
        && Command::new("psql").arg("--version").output().is_ok();
    assert!(
        have || !crate::support::case::in_ci(),
        "PostgreSQL 15 is missing: scripts/setup.sh installs postgresql-15"
    );
    have
}

/// The value of a map line `@name: N` in `out`.
fn map_value(out: &str, name: &str) -> Option<u64> {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
}

/// A running backend traced with `-p`: its queries and commits counted
/// exactly, a semaphore-gated probe (`lwlock__acquire`) firing, the
/// server's log agreeing, the code bytes and semaphores as before after
/// the detach.
fn postgres_backend_queries_are_counted_exactly() {
    if !postgres_ready() {
        return;
    }
    let pg = Pg::start("backend");
    let mut s = pg.session();
    let bin = format!("{PG_BIN}/postgres");
    let elf = wprobe_elf::ElfInfo::open(std::path::Path::new(&bin)).unwrap();
    let sites = wprobe_elf::usdt::sites(&elf);
    let site = |n: &str| sites.iter().find(|x| x.name == n).unwrap().clone();
    let (qs, lw) = (site("query__start"), site("lwlock__acquire"));
    let bias = crate::support::cli::load_bias(s.backend, std::path::Path::new(&bin));
    let before_code = crate::support::cli::live_bytes(s.backend, bias + qs.addr, 16);
    let lw_sem = bias + lw.semaphore.expect("lwlock__acquire has a semaphore");
    assert_eq!(
        crate::support::cli::live_bytes(s.backend, lw_sem, 2),
        [0, 0]
    );
    let prog = format!(
        "usdt:{bin}:postgresql:query__start {{ @q = count(); }}
         usdt:{bin}:postgresql:transaction__commit {{ @c = count(); }}
         usdt:{bin}:postgresql:lwlock__acquire {{ @l = count(); }}"
    );
    let mut tracer = wprobe()
        .args(["run", "-p", &s.backend.to_string(), "-e", &prog])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = Collected::from(tracer.stdout.take().unwrap());
    out.wait_for("Attaching 3 probes...");
    // Raised in the live backend.
    assert_ne!(
        crate::support::cli::live_bytes(s.backend, lw_sem, 2),
        [0, 0]
    );
    let logged_before = pg.logged(s.backend).len();
    const N: usize = 25;
    for i in 0..N {
        assert_eq!(s.query(&format!("select {i} + 1;")), (i + 1).to_string());
    }
    std::thread::sleep(Duration::from_millis(200));
    crate::support::cli::signal(tracer.id(), "INT");
    let o = output_within_child(tracer, 60);
    let out = out.finish();
    assert_eq!(
        map_value(&out, "@q"),
        Some(N as u64),
        "{out}\n{}",
        stderr(&o)
    );
    assert_eq!(map_value(&out, "@c"), Some(N as u64), "{out}");
    assert!(map_value(&out, "@l").is_some_and(|l| l > 0), "{out}");
    // The server's own view: N statements logged for the backend.
    assert_eq!(pg.logged(s.backend).len() - logged_before, N);
    // After the detach: code and semaphores as before.
    assert_eq!(
        crate::support::cli::live_bytes(s.backend, bias + qs.addr, 16),
        before_code
    );
    assert_eq!(
        crate::support::cli::live_bytes(s.backend, lw_sem, 2),
        [0, 0]
    );
    assert_eq!(s.query("select 41 + 1;"), "42");
    s.close();
}

/// `-f -p <postmaster>`: a backend forked after the attach is traced, its
/// queries counted exactly, keyed by its pid.
fn postgres_backend_forked_after_attach_is_traced() {
    if !postgres_ready() {
        return;
    }
    let pg = Pg::start("fork");
    let bin = format!("{PG_BIN}/postgres");
    let prog = format!("usdt:{bin}:postgresql:query__start {{ @[pid] = count(); }}");
    let mut tracer = wprobe()
        .args([
            "run",
            "--follow",
            "-p",
            &pg.server.id().to_string(),
            "-e",
            &prog,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = Collected::from(tracer.stdout.take().unwrap());
    out.wait_for("Attaching 1 probe...");
    let mut s = pg.session();
    const N: usize = 10;
    for i in 0..N {
        assert_eq!(s.query(&format!("select {i} * 2;")), (i * 2).to_string());
    }
    let backend = s.backend;
    s.close();
    std::thread::sleep(Duration::from_millis(300));
    crate::support::cli::signal(tracer.id(), "INT");
    let o = output_within_child(tracer, 60);
    let out = out.finish();
    // `select pg_backend_pid()` and the N queries.
    assert_eq!(
        map_value(&out, &format!("@[{backend}]")),
        Some(N as u64 + 1),
        "{out}\n{}",
        stderr(&o)
    );
    assert_eq!(pg.logged(backend).len(), N + 1);
}

/// The RPN probe point `usdt = PROVIDER:NAME` (one probe per site) and
/// `push usdt, N`, on every transport.
fn rpn_usdt_probe_point_reads_arguments_by_number(transport: &str) {
    if !need_sdt() {
        return;
    }
    let (exe, _) = demo();
    let src = format!(
        "name = {}\nmajor = 1\n\n\
         usdt = demo:four\nminor = 1\n        push usdt, 3\n        push usdt, 2\n        push usdt, 1\n        push usdt, 0\n        log 4\n\n\
         usdt = demo:stat\nminor = 2\n        push usdt, 0\n        log 1\n\n\
         usdt = demo:gated\nminor = 3\n        push usdt, 0\n        log 1\n",
        exe.display()
    );
    let rpn = crate::support::cli::write(&format!("usdt_{transport}.rpn"), src);
    let mut c = wprobe();
    c.args(["run", "--transport", transport])
        .arg(&rpn)
        .arg("--")
        .arg(&exe)
        .args(["run", "2"])
        .env("USDT_DEMO_LINGER", "1");
    let o = output_within(c, 120);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let got: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once(" 1.").map(|(_, r)| r))
        .collect();
    let mut want = Vec::new();
    for k in 1..=2i64 {
        want.push("2: (40)".to_string());
        want.push(format!("1: ({k}, {}, 99, 42)", -2 * k));
        want.push("2: (77)".to_string());
        want.push(format!("3: ({})", 10 * k));
    }
    assert_eq!(got, want, "{out}\n{}", stderr(&o));
    assert!(out.lines().any(|l| l == "sem 1 0"), "{out}");
}

/// A WAT handler names a USDT probe in its manifest (`usdt
/// PROVIDER:NAME`, expanded into the sites at load) and reads the
/// arguments with the `usdt_arg` import, on every transport.
fn wat_handler_reads_usdt_arguments(transport: &str) {
    if !need_sdt() {
        return;
    }
    let (exe, _) = demo();
    let wat = format!(
        r#"(module
  (import "wprobe" "usdt_arg" (func $arg (param i32) (result i64)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (@custom "wprobe.manifest" "wprobe-manifest 1\nabi 4\nmodule {}\nprobe four\n  usdt demo:four\nprobe stat\n  usdt demo:stat\n")
  (func $log (param $n i32) (result i32)
    (i32.store (i32.const 64) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 1) (i32.const 0) (i32.const 0) (local.get $n)
                (i32.const 64) (i32.const 1)))
    (i32.const 0))
  (func (export "four") (result i32)
    (i64.store (i32.const 0) (call $arg (i32.const 0)))
    (i64.store (i32.const 8) (call $arg (i32.const 1)))
    (i64.store (i32.const 16) (call $arg (i32.const 2)))
    (i64.store (i32.const 24) (call $arg (i32.const 3)))
    (call $log (i32.const 32)))
  (func (export "stat") (result i32)
    (i64.store (i32.const 0) (call $arg (i32.const 0)))
    (call $log (i32.const 8))))
"#,
        exe.display()
    );
    let file = crate::support::cli::write(&format!("usdt_{transport}.wat"), wat);
    let mut c = wprobe();
    c.args(["run", "--transport", transport])
        .arg(&file)
        .arg("--")
        .arg(&exe)
        .args(["run", "2"])
        .env("USDT_DEMO_LINGER", "1");
    let o = output_within(c, 120);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let got: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once(" 1.0: ").map(|(_, r)| r))
        .collect();
    let mut want = Vec::new();
    for k in 1..=2i64 {
        want.push("(40)".to_string());
        want.push(format!("({k}, {}, 99, 42)", -2 * k));
        want.push("(77)".to_string());
    }
    assert_eq!(got, want, "{out}\n{}", stderr(&o));
}
