//! Starting a command for the perf transport without keeping it traced:
//! fork, `PTRACE_TRACEME`, exec (the kernel stops the new image before its
//! first instruction: the executable and the dynamic linker mapped, nothing
//! run), where the caller arms what is mapped and the startup libraries on
//! their files; then [`run_to_entry`], to the ELF entry point with one
//! temporary `int3` (the libraries mapped and their constructors run),
//! where the caller arms what needed the dynamic linker (IFUNCs); then
//! detach. No
//! `PR_SET_PDEATHSIG` and no `PTRACE_O_EXITKILL`: once detached, the command
//! is independent of wprobe and survives its SIGKILL. Between the `int3` and
//! its removal (microseconds, before detaching) the command is stopped.

use std::ffi::OsString;

use super::PerfError;
use crate::sys::ptrace as sys;

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

/// Forks and execs `argv`; returns the child's pid, stopped at its exec
/// and still ptrace-attached (call [`run_to_entry`], then [`detach`]).
pub fn launch(argv: &[OsString]) -> Result<i32, PerfError> {
    let Some(first) = argv.first() else {
        return Err(PerfError::CommandNotFound { cmd: String::new() });
    };
    let cmd = first.to_string_lossy().into_owned();
    let spawned = crate::sys::process::spawn(argv, crate::sys::process::Start::TraceMe).map_err(
        |e| match e {
            nix::errno::Errno::EINVAL => PerfError::Exec {
                cmd: cmd.clone(),
                errno: libc::EINVAL,
            },
            e => PerfError::Sys {
                op: "fork",
                errno: e as i32,
            },
        },
    )?;
    let child = spawned.pid;
    let st = wait(child).map_err(|e| PerfError::Sys {
        op: "waitpid",
        errno: e,
    });
    let exec_errno = spawned.exec_errno();
    let st = st?;
    if let Some(e) = exec_errno {
        crate::sys::process::kill_and_reap(child);
        return Err(if e == nix::errno::Errno::ENOENT {
            PerfError::CommandNotFound { cmd }
        } else {
            PerfError::Exec {
                cmd,
                errno: e as i32,
            }
        });
    }
    if !(libc::WIFSTOPPED(st) && libc::WSTOPSIG(st) == libc::SIGTRAP) {
        return Err(died(child));
    }
    Ok(child)
}

/// Runs the child stopped at its exec to its entry point (the dynamic
/// linker has mapped the startup libraries, relocated them and run their
/// constructors; no code of the program itself has run) with a temporary
/// `int3`.
pub(super) fn run_to_entry(pid: i32) -> Result<(), PerfError> {
    let err = |op: &'static str, e: nix::errno::Errno| PerfError::Sys {
        op,
        errno: e as i32,
    };
    let Some(entry) = crate::proc::procmaps::entry_point(pid) else {
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
        let mut regs = crate::sys::regs::zero_regs();
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
