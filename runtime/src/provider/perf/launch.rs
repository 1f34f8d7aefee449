//! Starting a command for the perf transport without keeping it traced:
//! fork, `PTRACE_TRACEME`, exec (the kernel stops the new image before its
//! first instruction), run it to its ELF entry point with one temporary
//! `int3` so that the dynamic linker has mapped every startup library, let
//! the caller resolve and open the perf events, then detach. No
//! `PR_SET_PDEATHSIG` and no `PTRACE_O_EXITKILL`: once detached, the command
//! is independent of wprobe and survives its SIGKILL. Between the `int3` and
//! its removal (microseconds, before detaching) the command is stopped.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use super::PerfError;
use crate::arch::Regs;
use crate::provider::ptrace::sys;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Waits for the child `pid` (the ptrace layer's `waitpid`); its status.
fn wait(pid: i32) -> Result<i32, i32> {
    match sys::wait(pid, 0) {
        Ok(Some((_, st))) => Ok(st),
        Ok(None) => Err(libc::ECHILD),
        Err(e) => Err(e as i32),
    }
}

fn died(pid: i32) -> PerfError {
    PerfError::TraceeDied { pid }
}

/// Forks and execs `argv`; returns the child's pid, stopped at its entry
/// point and still ptrace-attached (call [`detach`] after arming).
pub fn launch(argv: &[OsString]) -> Result<i32, PerfError> {
    let Some(first) = argv.first() else {
        return Err(PerfError::CommandNotFound { cmd: String::new() });
    };
    let cmd = first.to_string_lossy().into_owned();
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| PerfError::Exec {
            cmd: cmd.clone(),
            errno: libc::EINVAL,
        })?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let mut err = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the live array.
    if unsafe { libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(PerfError::Sys {
            op: "pipe2",
            errno: errno(),
        });
    }
    // SAFETY: fork; the child only calls async-signal-safe functions
    // (ptrace, execvp, write, _exit) on data prepared before the fork.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(PerfError::Sys {
            op: "fork",
            errno: errno(),
        });
    }
    if child == 0 {
        // SAFETY: async-signal-safe calls only (see above); never returns.
        unsafe {
            libc::close(err[0]);
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0usize, 0usize) != 0 {
                libc::_exit(126);
            }
            libc::execvp(ptrs[0], ptrs.as_ptr());
            let e = *libc::__errno_location();
            libc::write(err[1], (&e as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    // SAFETY: closing the write end we do not use.
    unsafe { libc::close(err[1]) };
    let st = wait(child).map_err(|e| PerfError::Sys {
        op: "waitpid",
        errno: e,
    });
    let mut e = 0i32;
    // SAFETY: reads at most 4 bytes into a live i32, then closes our descriptor.
    let n = unsafe {
        let n = libc::read(err[0], (&mut e as *mut i32).cast(), 4);
        libc::close(err[0]);
        n
    };
    let st = st?;
    if n == 4 {
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        return Err(if e == libc::ENOENT {
            PerfError::CommandNotFound { cmd }
        } else {
            PerfError::Exec { cmd, errno: e }
        });
    }
    if !(libc::WIFSTOPPED(st) && libc::WSTOPSIG(st) == libc::SIGTRAP) {
        return Err(died(child));
    }
    if let Err(e) = run_to_entry(child) {
        // SAFETY: killing and reaping our own child, which never ran user code.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        return Err(e);
    }
    Ok(child)
}

/// `AT_ENTRY` of the process (from `/proc/PID/auxv`).
fn entry_point(pid: i32) -> Option<u64> {
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    auxv.chunks_exact(16).find_map(|c| {
        let k = u64::from_le_bytes(c[..8].try_into().ok()?);
        let v = u64::from_le_bytes(c[8..].try_into().ok()?);
        (k == libc::AT_ENTRY).then_some(v)
    })
}

/// Runs the stopped child to its entry point (libraries mapped, no user
/// code of the program run yet) with a temporary `int3`.
fn run_to_entry(pid: i32) -> Result<(), PerfError> {
    let err = |op: &'static str, e: nix::errno::Errno| PerfError::Sys {
        op,
        errno: e as i32,
    };
    let Some(entry) = entry_point(pid) else {
        return Ok(()); // no auxv: arm at the exec stop
    };
    let word = sys::peekdata(pid, entry).map_err(|e| err("PTRACE_PEEKTEXT", e))?;
    let patched = (word & !0xFF) | 0xCC;
    sys::pokedata(pid, entry, patched).map_err(|e| err("PTRACE_POKETEXT", e))?;
    let mut sig = 0;
    loop {
        sys::cont(pid, sig).map_err(|_| died(pid))?;
        let st = wait(pid).map_err(|_| died(pid))?;
        if !libc::WIFSTOPPED(st) {
            return Err(died(pid));
        }
        sig = libc::WSTOPSIG(st);
        if sig != libc::SIGTRAP {
            continue; // deliver it (a signal before main is the program's business)
        }
        // SAFETY: user_regs_struct is plain integers; all-zero is valid.
        let mut regs: Regs = unsafe { std::mem::zeroed() };
        sys::getregs(pid, &mut regs).map_err(|e| err("PTRACE_GETREGS", e))?;
        if regs.rip != entry + 1 {
            continue;
        }
        sys::pokedata(pid, entry, word).map_err(|e| err("PTRACE_POKETEXT", e))?;
        regs.rip = entry;
        sys::setregs(pid, &regs).map_err(|e| err("PTRACE_SETREGS", e))?;
        return Ok(());
    }
}

/// Lets the launched child run on, no longer traced.
pub fn detach(pid: i32) -> Result<(), PerfError> {
    sys::detach(pid, 0).map_err(|_| died(pid))
}
