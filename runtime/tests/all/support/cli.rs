//! Helpers of the tests that run the `wprobe` binary (cli.rs, guests.rs,
//! sandbox.rs, bench_cmd.rs, the transport tests): build C targets with
//! gcc, write programs, run `wprobe run` with a transport and a timeout,
//! parse its JSON lines.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// This test process's scratch directory (gcc builds, copies of `wprobe`,
/// programs), created on first use; the test binary removes it when it
/// ends, and the first use sweeps those of test processes that are gone.
pub fn scratch() -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| sweep_stale_scratch("wprobe-tests-"));
    let d = scratch_path();
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The path of [`scratch`], without creating it.
pub fn scratch_path() -> PathBuf {
    std::env::temp_dir().join(format!("wprobe-tests-{}", std::process::id()))
}

/// Removes the directories `PREFIX<pid>` of the temporary directory whose
/// process no longer exists (a run killed before it could remove its own).
pub fn sweep_stale_scratch(prefix: &str) {
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

pub fn progs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/progs")
}

pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/examples")
}

/// gcc `src` (a path) into the scratch directory as `name` (cached per process).
pub fn gcc(name: &str, src: &Path, flags: &[&str]) -> PathBuf {
    // One build per name and process, under a lock: rebuilding a binary a
    // parallel test is running would show it as "(deleted)" in its maps.
    // A name names one build: asking for it with another source or other
    // flags is a mistake of the test, not a cache hit.
    type Built = Vec<(String, PathBuf, Vec<String>)>;
    static BUILT: std::sync::Mutex<Built> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let out = scratch().join(name);
    let wanted: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
    if let Some((_, s, f)) = built.iter().find(|(n, _, _)| n == name) {
        assert!(
            s == src && *f == wanted,
            "test program {name} built twice differently: {s:?} {f:?} and {src:?} {wanted:?}"
        );
        return out;
    }
    built.push((name.to_string(), src.to_path_buf(), wanted));
    let tmp = scratch().join(format!("{name}.tmp"));
    let st = Command::new("gcc")
        .arg(src)
        .arg("-o")
        .arg(&tmp)
        .args(flags)
        .args(["-pthread", "-I"])
        .arg(progs())
        .status()
        .expect("gcc must be installed to build the test programs");
    assert!(st.success(), "gcc {src:?} {flags:?}");
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// The watchpoint target (`progs/wtarget.c`), PIE (addresses relocated by the load bias).
pub fn wtarget() -> PathBuf {
    gcc(
        "wtarget",
        &progs().join("wtarget.c"),
        &["-O2", "-fPIE", "-pie"],
    )
}

/// `probe_target` built with the examples' flags.
pub fn probe_target() -> PathBuf {
    gcc(
        "probe_target",
        &examples().join("probe_target.c"),
        &[
            "-O0",
            "-g",
            "-fno-pie",
            "-no-pie",
            "-fcf-protection=none",
            "-fno-omit-frame-pointer",
        ],
    )
}

/// `tests/progs/slow_target.c` (calls `work()` slowly, for attaching), non-PIE.
pub fn slow_target() -> PathBuf {
    gcc(
        "slow_target",
        &repo().join("tests/progs/slow_target.c"),
        &["-O0", "-fno-pie", "-no-pie", "-fcf-protection=none"],
    )
}

/// Writes `bytes` (a program's text, a module) to a scratch file.
///
/// Written to a temporary file and renamed into place: tests running in
/// parallel (one per transport) may write the same file, and a reader
/// must never see it half written.
pub fn write(name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let p = scratch().join(name);
    let tmp = scratch().join(format!(".{name}.{}.tmp", N.fetch_add(1, Ordering::SeqCst)));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, &p).unwrap();
    p
}

/// A command's standard error, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The function column of `wprobe trace`'s default view (`text`, its
/// header line skipped): each line after its `| ` (durations and thread
/// ids left out), one per line.
pub fn function_column(text: &str) -> String {
    let funcs: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| match l.split_once("| ") {
            Some((_, f)) => f,
            None => l,
        })
        .collect();
    funcs.join("\n")
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn wprobe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wprobe"))
}

/// Runs `cmd` with a deadline; kills it (and fails) when it is exceeded.
pub fn output_within(mut cmd: Command, secs: u64) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    output_within_child(child, secs)
}

/// Collects the output of a spawned `child` (with piped stdout and
/// stderr) with a deadline; kills it (and fails) when it is exceeded.
pub fn output_within_child(child: std::process::Child, secs: u64) -> Output {
    let pid = child.id() as i32;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (d, f) = (done.clone(), fired.clone());
    let dog = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !d.load(std::sync::atomic::Ordering::SeqCst) {
            if Instant::now() > deadline {
                // Where it waits, for the failure message.
                let state = where_it_waits(pid);
                f.store(true, std::sync::atomic::Ordering::SeqCst);
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                return state;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        String::new()
    });
    let o = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let state = dog.join().unwrap();
    assert!(
        !fired.load(std::sync::atomic::Ordering::SeqCst),
        "timed out after {secs} s: {}\n{state}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Each thread of process `pid` and its children: state and kernel wait
/// channel (a timed-out test's message says where they were).
fn where_it_waits(pid: i32) -> String {
    let mut out = String::new();
    let mut pids = vec![pid.to_string()];
    if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
        pids.extend(c.split_whitespace().map(String::from));
    }
    for p in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let dir = t.path();
            let read = |f: &str| {
                std::fs::read_to_string(dir.join(f))
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            };
            let state = read("status")
                .lines()
                .find(|l| l.starts_with("State:"))
                .unwrap_or_default()
                .to_string();
            out.push_str(&format!(
                "  pid {p} tid {}: {} {state} wchan {} syscall {}\n",
                t.file_name().to_string_lossy(),
                read("comm"),
                read("wchan"),
                read("syscall")
            ));
        }
    }
    out
}

/// `wprobe run PROGRAM --transport T --format json -- ARGV`; returns (JSON lines, stderr, exit code).
pub fn run(
    transport: &str,
    programs: &[&Path],
    argv: &[&str],
) -> (Vec<serde_json::Value>, String, Option<i32>) {
    let mut c = wprobe();
    c.arg("run")
        .args(programs)
        .args(["--transport", transport, "--format", "json", "--"])
        .args(argv)
        .current_dir(scratch())
        // Rings large enough for every sample of these tests even if wprobe
        // is not scheduled for a while (the machine is shared): counts are
        // then exact, not only accounted for (losses: perf_transport.rs).
        .env("WPROBE_PERF_RING_PAGES", "8192");
    let o = output_within(c, 60);
    let lines = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        lines,
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code(),
    )
}

/// A WAT handler `h` that logs `rdi` (a raw word, major 1) and ends with
/// outcome 3 (`exit 1`, debugger hand-off) when `rdi` is even, 5 (`exit 3`,
/// core dump) when it is odd: outcomes no compiler can see before the run.
pub fn handoff_wat() -> PathBuf {
    write(
        "handoff.wat",
        r#"(module
  (import "wprobe" "read_reg" (func $read_reg (param i32 i32) (result i64)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "h") (result i32)
    (i64.store (i32.const 0) (call $read_reg (i32.const 0x0a) (i32.const 0)))
    (i32.store (i32.const 64) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 8) (i32.const 64) (i32.const 1)))
    (select (i32.const 3) (i32.const 5)
      (i64.eqz (i64.and (i64.load (i32.const 0)) (i64.const 1))))))"#,
    )
}

/// The `stats` line.
pub fn stats(lines: &[serde_json::Value]) -> &serde_json::Value {
    let s = lines.last().expect("a stats line");
    assert_eq!(s["kind"], "stats");
    s
}

/// First word value of every log record.
pub fn first_words(lines: &[serde_json::Value]) -> Vec<u64> {
    lines
        .iter()
        .filter(|v| v["kind"] == "log")
        .map(|v| v["items"][0]["values"][0].as_u64().unwrap())
        .collect()
}

/// Link-time value of `sym` in `file`.
pub fn sym(file: &Path, name: &str) -> u64 {
    let info = wprobe_elf::ElfInfo::open(file).unwrap();
    match info.lookup(name) {
        wprobe_elf::Lookup::Found(s) => s.value,
        other => panic!("{name}: {other:?}"),
    }
}

/// The first byte of function `name` (its `opcode =`).
pub fn opcode(file: &Path, name: &str) -> u8 {
    let info = wprobe_elf::ElfInfo::open(file).unwrap();
    info.first_byte(sym(file, name)).unwrap()
}

/// Bytes of `len` at `addr` in a live process.
pub fn live_bytes(pid: u32, addr: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0; len];
    // A read that races with a tracer replacing the page can fail with
    // EIO once (seen on a loaded machine): retried, a real error is not.
    let mut last = None;
    for _ in 0..20 {
        match std::fs::File::open(format!("/proc/{pid}/mem"))
            .and_then(|f| f.read_exact_at(&mut b, addr))
        {
            Ok(()) => return b,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("reading {len} bytes at {addr:#x} in process {pid}: {last:?}")
}

/// Waits until the byte at `addr` of process `pid` is no longer
/// `unpatched` (a probe armed there: int3, jump or uprobe), at most 20 s.
pub fn wait_patched(pid: u32, addr: u64, unpatched: u8) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while live_bytes(pid, addr, 1) == [unpatched] {
        assert!(
            std::time::Instant::now() < deadline,
            "no probe armed at {addr:#x} in process {pid} within 20 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Sends signal `sig` (a name: `INT`, `TERM`, `USR1`…) to process `pid`.
pub fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid}");
}

/// A JSON statistics object without what names the transport that ran
/// (`transport`, `transport_auto`, `transport_reason`, each probe's
/// `sites`): for comparing the statistics of two transports.
pub fn without_transport(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(m) = v.as_object_mut() {
        for k in ["transport", "transport_auto", "transport_reason"] {
            m.remove(k);
        }
        // How each probe's sites were armed (the in-process transport's
        // jumps and traps).
        if let Some(serde_json::Value::Array(probes)) = m.get_mut("probes") {
            for p in probes {
                if let Some(o) = p.as_object_mut() {
                    o.remove("sites");
                }
            }
        }
    }
    v
}

/// The load bias of module file `path` in process `pid`: 0 for a non-PIE
/// executable, else where its first segment is mapped minus its link-time
/// address.
pub fn load_bias(pid: u32, path: &Path) -> u64 {
    let elf = wprobe_elf::ElfInfo::open(path).unwrap();
    if !elf.is_dyn {
        return 0;
    }
    let (vaddr, off) = elf.first_load.unwrap_or((0, 0));
    let canon = std::fs::canonicalize(path).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    for l in maps.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() >= 6 && Path::new(w[5]) == canon && u64::from_str_radix(w[2], 16) == Ok(off) {
            let start = u64::from_str_radix(w[0].split('-').next().unwrap(), 16).unwrap();
            return start - (vaddr & !0xfff);
        }
    }
    panic!("{} is not mapped in process {pid}", path.display())
}
