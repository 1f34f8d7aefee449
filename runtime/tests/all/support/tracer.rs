//! Shared helpers of the ptrace provider tests: build the C programs (with
//! the tests' one gcc helper), tell whether ptrace is permitted, give
//! each test a timeout, resolve symbols, run a tracee untraced.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use runtime::proc::procmaps::{self, ModuleKey};
use runtime::transport::ptrace::{PtraceError, PtraceTracer, TraceOptions};
use wprobe_elf::{ElfInfo, Lookup};

/// The scratch directory of this test process (see [`super::cli::scratch`]).
pub fn out_dir() -> PathBuf {
    super::cli::scratch()
}

/// Compiles `src` (a file of tests/progs) into `name` with `flags`, through
/// the one C-build helper of the tests ([`super::cli::gcc`]); cached.
pub fn build(name: &str, src: &str, flags: &[&str]) -> PathBuf {
    super::cli::gcc(name, &super::cli::progs().join(src), flags)
}

/// Whether ptrace works here (`Err`: why not).
pub fn ptrace_status() -> Result<(), String> {
    match PtraceTracer::launch(&["/bin/true".into()], TraceOptions::default()) {
        Ok(mut t) => {
            let _ = t.detach_all();
            Ok(())
        }
        Err(PtraceError::PermissionDenied { hint, .. }) => {
            Err(format!("ptrace not permitted: {hint}"))
        }
        Err(e) => Err(format!("cannot trace: {e}")),
    }
}

/// Aborts the whole test process if the test is still running after `secs`.
pub struct Timeout(std::sync::Arc<std::sync::atomic::AtomicBool>);
pub fn timeout(name: &'static str, secs: u64) -> Timeout {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        for _ in 0..secs * 10 {
            std::thread::sleep(Duration::from_millis(100));
            if d.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
        }
        eprintln!("TIMEOUT: {name} still running after {secs} s");
        std::process::abort();
    });
    Timeout(done)
}
impl Drop for Timeout {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Link-time value of `sym` in `file`.
pub fn sym(file: &Path, sym: &str) -> (u64, u64) {
    let info = ElfInfo::open(file).unwrap();
    match info.lookup(sym) {
        Lookup::Found(s) => (s.value, s.size),
        other => panic!("{sym}: {other:?}"),
    }
}

/// Run-time address of `sym` of module `file` in traced process `pid`.
pub fn addr_of(t: &mut PtraceTracer, pid: i32, file: &Path, name: &str) -> u64 {
    let info = ElfInfo::open(file).unwrap();
    let value = match info.lookup(name) {
        Lookup::Found(s) => s.value,
        other => panic!("{name}: {other:?}"),
    };
    if !info.is_dyn {
        return value;
    }
    let maps = t.maps(pid).to_vec();
    let canon = procmaps::canonical(file);
    let bias = procmaps::load_bias(&maps, &ModuleKey::Path(&canon), info.first_load.unwrap())
        .unwrap_or_else(|| panic!("{} not mapped in {pid}", file.display()));
    bias + value
}

/// The first byte of `name` in `file` (the probe's opcode).
pub fn opcode(file: &Path, name: &str) -> u8 {
    let info = ElfInfo::open(file).unwrap();
    let v = match info.lookup(name) {
        Lookup::Found(s) => s.value,
        other => panic!("{name}: {other:?}"),
    };
    info.first_byte(v).unwrap()
}

/// Runs `argv` untraced; returns stdout.
pub fn run_plain(argv: &[&str]) -> String {
    let out = Command::new(argv[0]).args(&argv[1..]).output().unwrap();
    assert!(out.status.success(), "{argv:?}: {:?}", out.status);
    String::from_utf8(out.stdout).unwrap()
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

/// A fresh output file path.
pub fn out_file() -> PathBuf {
    out_dir().join(format!("out-{}", unique()))
}

/// Reads `/proc/PID/mem` at `addr`.
pub fn read_mem(pid: i32, addr: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, addr).unwrap();
    b
}
