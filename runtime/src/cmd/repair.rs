//! `wprobe repair --pid PID`: restore the original bytes of a process a
//! killed `wprobe run -p` left breakpoints in, from its patch journal.

use std::process::ExitCode;

use crate::cmd::{CliError, CmdResult};

/// Examples shown under `--help`.
const EXAMPLES: &str = "\
Examples:
  wprobe repair --pid 1234    restore what a killed `wprobe run -p 1234` left patched";

/// `wprobe repair`.
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct RepairArgs {
    /// The process (its patch journal was written when wprobe attached).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: i32,
}

/// Runs `wprobe repair`.
pub fn repair(a: RepairArgs) -> CmdResult {
    use crate::transport::common::journal;
    let path = journal::path(a.pid);
    let inproc = journal::inproc_path(a.pid);
    let sem = crate::transport::semaphores::path(a.pid);
    if !path.exists() && !inproc.exists() && !sem.exists() {
        return Err(CliError::user(format!(
            "no patch journal for process {} ({}): nothing to repair (wprobe detached cleanly, or never attached)",
            a.pid,
            path.display()
        )));
    }
    // A live wprobe restores the process itself when it stops; writing
    // under it would silently disarm its probes. The in-process transport
    // lets the process go while it traces it: its journal names it.
    if let Some(holder) = [&path, &inproc, &sem]
        .into_iter()
        .filter(|p| p.exists())
        .find_map(|p| journal::live_holder(p))
    {
        return Err(CliError::user(format!(
            "{}; `wprobe repair` is for a wprobe that was killed",
            journal::traced_by(a.pid, holder)
        )));
    }
    if let crate::proc::procinfo::Untraceable::Traced { tracer, comm } =
        crate::proc::procinfo::untraceable(a.pid)
    {
        return Err(CliError::user(format!(
            "process {} is traced by process {tracer} ({comm}), which restores it when it \
             stops: stop that with SIGINT (`kill -INT {tracer}`); `wprobe repair` is for a wprobe \
             that was killed",
            a.pid
        )));
    }
    // The in-process transport's journal: sites (jumps and the traps of
    // its fallback, which its run also journals in the ptrace format for
    // the watchdog: that one goes too).
    // Either journal may be of an earlier process with this pid (then it
    // restores nothing and is removed): the count said is the other's.
    let patched = path.exists() || inproc.exists();
    let restored = (|| {
        let lowered = if sem.exists() {
            crate::transport::semaphores::repair(a.pid)?
        } else {
            0
        };
        if lowered > 0 {
            let _ = crate::out::output::print_stdout(&format!(
                "wprobe: lowered {lowered} USDT semaphore{} in process {}\n",
                if lowered == 1 { "" } else { "s" },
                a.pid
            ));
        }
        let sites = if inproc.exists() {
            Some(crate::transport::inproc::repair::repair(a.pid)?)
        } else {
            None
        };
        let bytes = if path.exists() {
            Some(journal::repair(a.pid)?)
        } else {
            None
        };
        Ok::<_, std::io::Error>(match (sites, bytes) {
            (Some(n), Some(0) | None) => (n, "site"),
            (Some(0) | None, Some(n)) => (n, "byte"),
            (Some(n), Some(_)) => (n, "site"),
            (None, None) => (0, "byte"),
        })
    })();
    match restored {
        Ok(_) if !patched => Ok(ExitCode::SUCCESS),
        Ok((n, what)) => {
            let _ = crate::out::output::print_stdout(&format!(
                "wprobe: restored {n} {what}{} in process {}\n",
                if n == 1 { "" } else { "s" },
                a.pid
            ));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (writing /proc/PID/mem needs the permission attaching needs: same user and kernel.yama.ptrace_scope, or CAP_SYS_PTRACE)"
            } else {
                ""
            };
            Err(CliError::user(format!(
                "repairing process {}: {e}{hint}",
                a.pid
            )))
        }
    }
}
