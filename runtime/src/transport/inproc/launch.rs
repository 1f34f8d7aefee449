//! Starting a command for the in-process transport: fork,
//! `PTRACE_TRACEME`, exec (the kernel stops the new image before its first
//! instruction), then run it to its ELF entry point with one temporary
//! `int3`, so that the dynamic linker has mapped every startup library and
//! none of the program's own code has run. The agent is loaded and the
//! probes patched there; then the command is let go, untraced: no
//! `PR_SET_PDEATHSIG` (its probes go dormant if wprobe dies; the command
//! runs on). Until it is let go it has `PTRACE_O_EXITKILL`: a wprobe
//! killed before the command ran any code of its own takes it along
//! (SIGKILL), rather than leave it at the temporary `int3` of its entry
//! point or on a half-loaded agent.

use std::ffi::OsString;

use anyhow::{anyhow, bail};

use crate::sys::ptrace as sys;

fn wait(pid: i32) -> anyhow::Result<i32> {
    match sys::wait(pid, 0) {
        Ok(Some((_, st))) => Ok(st),
        Ok(None) => bail!("waitpid {pid}: no status"),
        Err(e) => bail!("waitpid {pid}: {e}"),
    }
}

/// Forks and execs `argv`; returns the child's pid, stopped at its entry
/// point and still ptrace-attached.
pub(super) fn launch(argv: &[OsString]) -> anyhow::Result<i32> {
    let Some(first) = argv.first() else {
        bail!("give the command to trace after `--`");
    };
    let cmd = first.to_string_lossy().into_owned();
    let spawned = crate::sys::process::spawn(argv, crate::sys::process::Start::TraceMe).map_err(
        |e| match e {
            nix::errno::Errno::EINVAL => anyhow!("cannot execute {cmd}: {e}"),
            e => anyhow!("fork failed: {e}"),
        },
    )?;
    let child = spawned.pid;
    let st = wait(child);
    if let Some(e) = spawned.exec_errno() {
        crate::sys::process::kill_and_reap(child);
        if e == nix::errno::Errno::ENOENT {
            bail!("{cmd}: command not found");
        }
        bail!("cannot execute {cmd}: {e}");
    }
    let st = st?;
    if !(libc::WIFSTOPPED(st) && libc::WSTOPSIG(st) == libc::SIGTRAP) {
        bail!("process {child} died before its first instruction");
    }
    if let Err(e) = sys::setoptions(child, libc::PTRACE_O_EXITKILL) {
        crate::sys::process::kill_and_reap(child);
        bail!("PTRACE_SETOPTIONS {child}: {e}");
    }
    if let Err(e) = run_to_entry(child) {
        // Our own child, which never ran code of its own.
        crate::sys::process::kill_and_reap(child);
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

/// Runs the stopped child to its entry point with a temporary `int3`.
fn run_to_entry(pid: i32) -> anyhow::Result<()> {
    let died = || anyhow!("process {pid} died before its entry point");
    let Some(entry) = entry_point(pid) else {
        return Ok(()); // no auxv: arm at the exec stop
    };
    let word = sys::peekdata(pid, entry).map_err(|e| anyhow!("PTRACE_PEEKTEXT {pid}: {e}"))?;
    let patched = (word & !0xFF) | 0xCC;
    sys::pokedata(pid, entry, patched).map_err(|e| anyhow!("PTRACE_POKETEXT {pid}: {e}"))?;
    let mut sig = 0;
    loop {
        sys::cont(pid, sig).map_err(|_| died())?;
        let st = wait(pid).map_err(|_| died())?;
        if !libc::WIFSTOPPED(st) {
            return Err(died());
        }
        sig = libc::WSTOPSIG(st);
        if sig != libc::SIGTRAP {
            continue; // deliver it (a signal before main is the program's business)
        }
        sig = 0;
        let mut regs = crate::sys::regs::zero_regs();
        sys::getregs(pid, &mut regs).map_err(|e| anyhow!("PTRACE_GETREGS {pid}: {e}"))?;
        if regs.rip != entry + 1 {
            continue;
        }
        sys::pokedata(pid, entry, word).map_err(|e| anyhow!("PTRACE_POKETEXT {pid}: {e}"))?;
        regs.rip = entry;
        sys::setregs(pid, &regs).map_err(|e| anyhow!("PTRACE_SETREGS {pid}: {e}"))?;
        return Ok(());
    }
}
