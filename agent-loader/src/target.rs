//! What the loader needs from a target process, and the trivial target: the
//! calling process itself (tests and measurements run the very same loading
//! logic on it).

use anyhow::{Context, Result, bail};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// A process the loader can act on. `PtraceTarget` (a stopped thread) and
/// [`SelfTarget`] implement it; wprobe's ptrace `Tracer` can, by forwarding
/// to its `inject_syscall` and `/proc/PID/mem` writes.
pub trait Target {
    /// Process id.
    fn pid(&self) -> i32;

    /// Runs system call `nr` in the target; returns the raw kernel result
    /// (`-errno` as u64 on failure).
    fn inject_syscall(&mut self, nr: u64, args: [u64; 6]) -> Result<u64>;

    /// Writes `bytes` at `addr`, whatever the page protections (as
    /// `/proc/PID/mem` does for a tracer: `FOLL_FORCE`).
    fn write_mem(&mut self, addr: u64, bytes: &[u8]) -> Result<()>;

    /// Reads `buf.len()` bytes at `addr`.
    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> Result<()>;

    /// Makes a thread of the target call `func(args…)` (SysV ABI) and returns
    /// its RAX. `return_to` is the address of an `int3` in the target the
    /// call returns to (the agent's `wprobe_agent_trap`); a target that calls
    /// directly ignores it.
    fn call(&mut self, func: u64, args: [u64; 6], return_to: u64) -> Result<u64>;
}

/// Runs a system call, failing on a kernel error.
pub fn syscall_ok<T: Target + ?Sized>(t: &mut T, nr: i64, args: [u64; 6]) -> Result<u64> {
    let r = t.inject_syscall(nr as u64, args)?;
    if r > (-4096i64) as u64 {
        bail!(
            "system call {nr} in pid {}: {}",
            t.pid(),
            std::io::Error::from_raw_os_error(-(r as i64) as i32)
        );
    }
    Ok(r)
}

/// The calling process as a target: system calls and calls are made
/// directly; memory is written through `/proc/self/mem` (which honours no
/// page protection, exactly like a tracer's writes).
pub struct SelfTarget {
    mem: File,
}

impl SelfTarget {
    /// Opens `/proc/self/mem`.
    pub fn new() -> Result<SelfTarget> {
        Ok(SelfTarget {
            mem: File::options()
                .read(true)
                .write(true)
                .open("/proc/self/mem")
                .context("opening /proc/self/mem")?,
        })
    }
}

impl Target for SelfTarget {
    fn pid(&self) -> i32 {
        std::process::id() as i32
    }

    fn inject_syscall(&mut self, nr: u64, a: [u64; 6]) -> Result<u64> {
        // SAFETY: the loader only makes memory-management calls on ranges it
        // owns (fresh mappings), or calls without memory effects.
        let r = unsafe { libc::syscall(nr as libc::c_long, a[0], a[1], a[2], a[3], a[4], a[5]) };
        Ok(if r == -1 {
            (-(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO) as i64)) as u64
        } else {
            r as u64
        })
    }

    fn write_mem(&mut self, addr: u64, bytes: &[u8]) -> Result<()> {
        self.mem
            .write_all_at(bytes, addr)
            .with_context(|| format!("writing {} bytes at 0x{addr:x}", bytes.len()))
    }

    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.mem
            .read_exact_at(buf, addr)
            .with_context(|| format!("reading {} bytes at 0x{addr:x}", buf.len()))
    }

    fn call(&mut self, func: u64, a: [u64; 6], _return_to: u64) -> Result<u64> {
        type F = unsafe extern "C" fn(u64, u64, u64, u64, u64, u64) -> u64;
        // SAFETY: the loader passes the address of an agent entry point it
        // mapped, whose C signature takes at most six integer arguments
        // (extra ones are ignored by the callee, per the SysV ABI).
        let f: F = unsafe { std::mem::transmute::<u64, F>(func) };
        // SAFETY: see above.
        Ok(unsafe { f(a[0], a[1], a[2], a[3], a[4], a[5]) })
    }
}
