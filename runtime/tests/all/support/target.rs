//! The traced program's side of the tests: started with its input and
//! output piped, its functions and code as the file has them (to compare
//! with `/proc/PID/mem`), waited for until a probe is armed there, and
//! what `wprobe trace --transport inproc` showed of its calls (a tree, or
//! each function's count).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::cli::{live_bytes, output_within, scratch, stderr, wprobe};

/// A program's output, line by line.
pub type Lines = std::io::Lines<BufReader<ChildStdout>>;

/// Starts `exe` with `args`, its standard input and output piped: the
/// child, its input, and its output's lines.
pub fn spawn_piped(exe: &Path, args: &[&str]) -> (Child, ChildStdin, Lines) {
    let mut c = Command::new(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", exe.display()));
    let to = c.stdin.take().unwrap();
    let from = BufReader::new(c.stdout.take().unwrap()).lines();
    (c, to, from)
}

/// Start and size of function `name` of `exe` (its symbol).
pub fn func(exe: &Path, name: &str) -> (u64, u64) {
    let elf = wprobe_elf::ElfInfo::open(exe).unwrap();
    match elf.lookup(name) {
        wprobe_elf::Lookup::Found(s) => (s.value, s.size),
        other => panic!("{name}: {other:?}"),
    }
}

/// `len` bytes of `exe` at link-time address `addr`: the code as the file
/// has it.
pub fn file_bytes(exe: &Path, addr: u64, len: usize) -> Vec<u8> {
    let elf = wprobe_elf::ElfInfo::open(exe).unwrap();
    elf.bytes_at(addr, len)
        .unwrap_or_else(|| panic!("{}: no {len} bytes at {addr:#x}", exe.display()))
        .to_vec()
}

/// Waits until the bytes at `addr` of process `pid` are `want` (a probe
/// armed: a jump, an `int3`; or taken away), at most `secs` seconds.
pub fn wait_bytes(pid: u32, addr: u64, want: &[u8], secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while live_bytes(pid, addr, want.len()) != want {
        assert!(
            Instant::now() < deadline,
            "process {pid}: not {want:02x?} at {addr:#x} within {secs} s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `wprobe trace --transport inproc OPTIONS -- EXE ARG` with
/// `WPROBE_DEBUG`, in the scratch directory: its standard output and
/// error. Fails unless wprobe exits 0.
fn trace_inproc(
    options: &[&str],
    out: &Path,
    exe: &Path,
    arg: &str,
    name: &str,
) -> (String, String) {
    let mut c = wprobe();
    c.args(["trace", "--transport", "inproc"])
        .args(options)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(exe)
        .arg(arg)
        .env("WPROBE_DEBUG", "1")
        .current_dir(scratch());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert!(o.status.success(), "{name}: {err}");
    (String::from_utf8_lossy(&o.stdout).into_owned(), err)
}

/// `wprobe trace --transport inproc -v -F FUNC -T --no-pid -i` of `exe ARG`,
/// with `WPROBE_DEBUG` (its tree written to a scratch file `NAME.tree`):
/// its standard output and error, and the tree without its process lines
/// (`+++ `). Fails unless wprobe exits 0.
pub fn inproc_tree(exe: &Path, name: &str, func: &str, arg: &str) -> (String, String, String) {
    let tree = scratch().join(format!("{name}.tree"));
    let options = ["-v", "-F", func, "-T", "--no-pid", "-i"];
    let (out, err) = trace_inproc(&options, &tree, exe, arg, name);
    let lines: String = std::fs::read_to_string(&tree)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("+++ "))
        .map(|l| format!("{l}\n"))
        .collect();
    (out, err, lines)
}

/// `wprobe trace --transport inproc --report --format json` of `exe ARG`,
/// the C run-time's functions left out, with `WPROBE_DEBUG` (the report
/// written to a scratch file `NAME.report.json`): its standard output and
/// error, and the calls of each function. Fails unless wprobe exits 0.
pub fn inproc_report(exe: &Path, name: &str, arg: &str) -> (String, String, BTreeMap<String, u64>) {
    let report = scratch().join(format!("{name}.report.json"));
    let options = ["--report", "--format", "json"];
    let runtime = ["-X", "_*", "-X", "*tm_clones", "-X", "frame_dummy"];
    let (out, err) = trace_inproc(
        &[&options[..], &runtime[..]].concat(),
        &report,
        exe,
        arg,
        name,
    );
    (out, err, report_calls(&report))
}

/// The calls of each function in a `wprobe trace --report --format json`
/// file.
pub fn report_calls(path: &Path) -> BTreeMap<String, u64> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v.as_array()
        .unwrap_or_else(|| panic!("{}: not a report: {v}", path.display()))
        .iter()
        .map(|r| {
            (
                r["function"].as_str().unwrap().to_string(),
                r["calls"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `(name, count)` pairs as the map [`inproc_report`] gives.
pub fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|&(k, n)| (k.to_string(), n)).collect()
}

/// `tests/progs/gated.c` built as `name` (-O0, not PIE, no CET): it reads
/// counts on its input, calls `work` that many times and prints the
/// running sum. With `work`'s address and the file's first `len` bytes
/// there.
pub fn gated(name: &str, len: usize) -> (std::path::PathBuf, u64, Vec<u8>) {
    let exe = super::cli::gcc(
        name,
        &super::cli::progs().join("gated.c"),
        &["-O0", "-fno-pie", "-no-pie", "-fcf-protection=none"],
    );
    let (work, _) = func(&exe, "work");
    let orig = file_bytes(&exe, work, len);
    (exe, work, orig)
}
