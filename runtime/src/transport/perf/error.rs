//! Errors of the perf transport, with the hints a user needs to act on a
//! refusal (the sysctl's value, the capabilities, the locked-memory limit).

/// A failure of the perf transport.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// perf_event_open refused for lack of privileges.
    #[error("{what}: not permitted: {hint}")]
    PermissionDenied {
        /// What was being opened.
        what: String,
        /// What to change.
        hint: String,
    },
    /// tracefs (where uprobes are defined) is missing and cannot be mounted.
    #[error("uprobes cannot be defined: {reason}; {hint}")]
    NoTracefs {
        /// What is missing, and why it could not be fixed.
        reason: String,
        /// The one thing to do about it.
        hint: String,
    },
    /// A perf event could not be opened for another reason.
    #[error("perf_event_open ({what}) failed: {source}")]
    Open {
        /// What was being opened.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The hardware has no free debug register for another watchpoint.
    #[error("debug register unavailable (at most 4 watchpoints per process; the kernel said: {0})")]
    NoDebugRegister(std::io::Error),
    /// The process ended (or never started).
    #[error("process {pid} died")]
    TraceeDied {
        /// The pid.
        pid: i32,
    },
    /// The process has nothing to observe (a zombie, a kernel thread).
    #[error("{reason}")]
    Untraceable {
        /// Why.
        reason: String,
    },
    /// No such process (`-p`).
    #[error("no such process: {pid}")]
    NoSuchProcess {
        /// The pid.
        pid: i32,
    },
    /// The command to launch was not found.
    #[error("{cmd}: command not found")]
    CommandNotFound {
        /// The command.
        cmd: String,
    },
    /// exec of the command failed.
    #[error("cannot execute {cmd}: {}", std::io::Error::from_raw_os_error(*errno))]
    Exec {
        /// The command.
        cmd: String,
        /// errno of execvp.
        errno: i32,
    },
    /// A system call failed.
    #[error("{op} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Sys {
        /// The call.
        op: &'static str,
        /// errno.
        errno: i32,
    },
}

/// The hint for a refused `perf_event_open`: the sysctl value and the capabilities.
pub fn permission_hint(paranoid: Option<&str>) -> String {
    let v = paranoid.map_or("unreadable".to_string(), |s| s.trim().to_string());
    format!(
        "kernel.perf_event_paranoid = {v}; uprobes need root (they are defined in tracefs, and \
         need CAP_PERFMON or CAP_SYS_ADMIN); watchpoints need kernel.perf_event_paranoid <= 2 \
         for processes of your own user, CAP_PERFMON for others; or use --transport ptrace"
    )
}

pub(crate) fn open_error(what: String, e: std::io::Error) -> PerfError {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => PerfError::PermissionDenied {
            what: format!("perf_event_open of {what}"),
            hint: permission_hint(
                std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                    .ok()
                    .as_deref(),
            ),
        },
        Some(libc::ENOSPC) => PerfError::NoDebugRegister(e),
        Some(libc::ESRCH) => PerfError::NoSuchProcess { pid: 0 },
        _ => PerfError::Open { what, source: e },
    }
}
