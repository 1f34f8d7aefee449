//! What `/proc` says about a process when wprobe cannot trace it, so that
//! the refusal names the real cause: a zombie, a kernel thread, a process
//! another tracer holds, another user's process (and what the ptrace policy
//! is). Read only on those error paths, never per hit.

/// Why a process cannot be traced, as far as `/proc` tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Untraceable {
    /// No such process.
    Gone,
    /// It has exited and waits for its parent to reap it.
    Zombie,
    /// A kernel thread: no user space to probe.
    KernelThread,
    /// Another process traces it (a debugger, strace, another wprobe).
    Traced {
        /// The tracer's pid.
        tracer: i32,
        /// The tracer's command name.
        comm: String,
    },
    /// Nothing of the above: a permission question.
    Other {
        /// The process's real uid.
        uid: Option<u32>,
    },
}

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim())
}

/// `PF_KTHREAD` in `/proc/PID/stat`'s flags field.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Whether process `pid` has ended: gone, dying (its address space
/// already released: `/proc/PID/mem` cannot be opened, ESRCH), or a zombie
/// waiting to be reaped (a thread-group leader that exited while other
/// threads run is not: its process lives on).
pub fn ended(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    if let Err(e) = std::fs::File::open(format!("/proc/{pid}/mem"))
        && e.raw_os_error() == Some(libc::ESRCH)
    {
        return true;
    }
    status_field(&status, "State:").is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
        && status_field(&status, "Threads:").and_then(|n| n.parse::<u32>().ok()) <= Some(1)
}

/// Looks at process `pid`.
pub fn untraceable(pid: i32) -> Untraceable {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Untraceable::Gone;
    };
    if status_field(&status, "State:").is_some_and(|s| s.starts_with('Z') || s.starts_with('X')) {
        return Untraceable::Zombie;
    }
    let flags = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the parenthesised command name; flags is field 9.
            let rest = s.rsplit_once(')')?.1;
            rest.split_whitespace().nth(6)?.parse::<u64>().ok()
        })
        .unwrap_or(0);
    if flags & PF_KTHREAD != 0 {
        return Untraceable::KernelThread;
    }
    if let Some(t) = status_field(&status, "TracerPid:").and_then(|v| v.parse::<i32>().ok())
        && t != 0
    {
        let comm = std::fs::read_to_string(format!("/proc/{t}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_default();
        return Untraceable::Traced { tracer: t, comm };
    }
    let uid = status_field(&status, "Uid:")
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok());
    Untraceable::Other { uid }
}

impl Untraceable {
    /// The refusal's explanation, or `None` when it is a permission matter
    /// (the caller then gives its hint).
    pub fn explain(&self, pid: i32) -> Option<String> {
        Some(match self {
            Untraceable::Gone => format!("no such process: {pid}"),
            Untraceable::Zombie => format!(
                "process {pid} is a zombie: it has exited and waits for its parent to reap it; \
                 there is nothing left to trace"
            ),
            Untraceable::KernelThread => {
                format!("process {pid} is a kernel thread: wprobe traces user-space processes")
            }
            Untraceable::Traced { tracer, comm } => format!(
                "process {pid} is already traced by process {tracer} ({comm}): a process has \
                 one tracer at a time; end that one first (or use --transport perf, which \
                 does not trace)"
            ),
            Untraceable::Other { .. } => return None,
        })
    }
}

/// The start time of process `pid` (clock ticks since boot, field 22 of
/// `/proc/PID/stat`): with the pid, it names one process (a pid is
/// reused, a start time with it is not).
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_and_kernel_threads() {
        let me = std::process::id() as i32;
        assert!(matches!(
            untraceable(me),
            Untraceable::Other { .. } | Untraceable::Traced { .. }
        ));
        // kthreadd is pid 2 on Linux.
        assert_eq!(untraceable(2), Untraceable::KernelThread);
        assert_eq!(untraceable(i32::MAX), Untraceable::Gone);
    }
}
