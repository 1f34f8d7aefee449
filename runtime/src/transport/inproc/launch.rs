//! Starting a command for the in-process transport: fork,
//! `PTRACE_TRACEME`, exec (the kernel stops the new image before its first
//! instruction), then run it to the moment the dynamic linker has mapped
//! and relocated every startup library but run none of their initializers
//! (its last call of `_dl_debug_state`, the debuggers' hook, with
//! `_r_debug.r_state` back at `RT_CONSISTENT` after an `RT_ADD`: what
//! `init_complete` marks), with temporary `int3`s: the calls the
//! libraries' constructors make are traced. A static executable, or one
//! whose dynamic linker does not say so, is run to its ELF entry point. The agent is loaded and the
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

/// Whether command `cmd` (a path, or a name looked up in `PATH`) is a
/// script: a file that starts with `#!`.
pub(super) fn is_script(cmd: &std::ffi::OsStr) -> bool {
    use std::io::Read;
    let path = std::path::Path::new(cmd);
    let found = if cmd.as_encoded_bytes().contains(&b'/') {
        Some(path.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(path))
                .find(|f| f.is_file())
        })
    };
    let mut head = [0u8; 2];
    found
        .and_then(|f| std::fs::File::open(f).ok())
        .is_some_and(|mut f| f.read_exact(&mut head).is_ok() && &head == b"#!")
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

/// The dynamic linker's `_dl_debug_state` and `_r_debug`, at run time,
/// when the process has one (`AT_BASE`) that exports them.
fn rtld_hook(pid: i32, auxv: &[(u64, u64)]) -> Option<(u64, u64)> {
    let base = auxv.iter().find(|(k, _)| *k == libc::AT_BASE)?.1;
    if base == 0 {
        return None;
    }
    let maps = crate::proc::procmaps::read(pid).ok()?;
    let m = crate::proc::procmaps::find(&maps, base)?;
    let elf = wprobe_elf::ElfInfo::open(std::path::Path::new(&m.path)).ok()?;
    let sym = |n: &str| match elf.lookup(n) {
        wprobe_elf::Lookup::Found(s) => Some(base + s.value),
        _ => None,
    };
    Some((sym("_dl_debug_state")?, sym("_r_debug")?))
}

/// The process's auxiliary vector.
fn auxv(pid: i32) -> Vec<(u64, u64)> {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/auxv")) else {
        return Vec::new();
    };
    raw.chunks_exact(16)
        .map(|c| {
            (
                u64::from_le_bytes(c[..8].try_into().expect("invariant: 8 bytes")),
                u64::from_le_bytes(c[8..].try_into().expect("invariant: 8 bytes")),
            )
        })
        .collect()
}

/// `r_state` of `struct r_debug` (after `int r_version`, `r_map`, `r_brk`).
const R_STATE_OFF: u64 = 24;
/// `r_map`.
const R_MAP_OFF: u64 = 8;
const RT_CONSISTENT: u64 = 0;
const RT_ADD: u64 = 1;

/// A temporary `int3`.
struct Temp {
    addr: u64,
    word: u64,
}

impl Temp {
    fn put(pid: i32, addr: u64) -> anyhow::Result<Temp> {
        let word = sys::peekdata(pid, addr).map_err(|e| anyhow!("PTRACE_PEEKTEXT {pid}: {e}"))?;
        sys::pokedata(pid, addr, (word & !0xFF) | 0xCC)
            .map_err(|e| anyhow!("PTRACE_POKETEXT {pid}: {e}"))?;
        Ok(Temp { addr, word })
    }

    fn remove(&self, pid: i32) -> anyhow::Result<()> {
        sys::pokedata(pid, self.addr, self.word).map_err(|e| anyhow!("PTRACE_POKETEXT {pid}: {e}"))
    }
}

/// Runs the stopped child to where the libraries are ready (see the
/// module's documentation), or to its entry point.
pub(super) fn run_to_entry(pid: i32) -> anyhow::Result<()> {
    let died = || anyhow!("process {pid} died before its entry point");
    let aux = auxv(pid);
    let Some(entry) = aux.iter().find(|(k, _)| *k == libc::AT_ENTRY).map(|a| a.1) else {
        return Ok(()); // no auxv: arm at the exec stop
    };
    let hook = rtld_hook(pid, &aux);
    let mut temps = vec![Temp::put(pid, entry)?];
    if let Some((state_fn, _)) = hook
        && state_fn != entry
    {
        temps.push(Temp::put(pid, state_fn)?);
    }
    let mut seen_add = false;
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
        let Some(t) = temps.iter().find(|t| t.addr + 1 == regs.rip) else {
            continue;
        };
        let at = t.addr;
        let ready = match hook {
            Some((state_fn, r_debug)) if at == state_fn => {
                let r_state =
                    sys::peekdata(pid, r_debug + R_STATE_OFF).unwrap_or(u64::MAX) & 0xFFFF_FFFF;
                let r_map = sys::peekdata(pid, r_debug + R_MAP_OFF).unwrap_or(0);
                if r_state == RT_ADD && r_map != 0 {
                    seen_add = true;
                }
                seen_add && r_state == RT_CONSISTENT
            }
            _ => true, // the entry point
        };
        regs.rip = at;
        if ready {
            for t in &temps {
                t.remove(pid)?;
            }
            sys::setregs(pid, &regs).map_err(|e| anyhow!("PTRACE_SETREGS {pid}: {e}"))?;
            return Ok(());
        }
        // Not yet: over the `int3` (its byte back for one step), on.
        let t = temps
            .iter()
            .find(|t| t.addr == at)
            .expect("invariant: found above");
        t.remove(pid)?;
        sys::setregs(pid, &regs).map_err(|e| anyhow!("PTRACE_SETREGS {pid}: {e}"))?;
        sys::singlestep(pid, 0).map_err(|_| died())?;
        let st = wait(pid).map_err(|_| died())?;
        if !libc::WIFSTOPPED(st) {
            return Err(died());
        }
        if libc::WSTOPSIG(st) != libc::SIGTRAP {
            sig = libc::WSTOPSIG(st);
        }
        Temp::put(pid, at)?;
    }
}
