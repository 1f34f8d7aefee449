//! The failures of `perf_event_open`, with the hints a user needs to act
//! on a refusal (the sysctl's value, the capabilities): the perf
//! transport's events and rings, and the in-process transport's
//! watchpoints, open perf events alike.

/// Why a perf event could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// perf_event_open refused for lack of privileges.
    #[error("{what}: not permitted: {hint}")]
    PermissionDenied {
        /// What was being opened.
        what: String,
        /// What to change.
        hint: String,
    },
    /// The hardware has no free debug register for another watchpoint.
    #[error("debug register unavailable (at most 4 watchpoints per process; the kernel said: {0})")]
    NoDebugRegister(std::io::Error),
    /// No such process.
    #[error("no such process: {pid}")]
    NoSuchProcess {
        /// The pid (0: not known here).
        pid: i32,
    },
    /// Another failure.
    #[error("perf_event_open ({what}) failed: {source}")]
    Open {
        /// What was being opened.
        what: String,
        /// The error.
        source: std::io::Error,
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

/// What a failed `perf_event_open` of `what` means, from its errno.
pub(crate) fn open_error(what: String, e: std::io::Error) -> OpenError {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => OpenError::PermissionDenied {
            what: format!("perf_event_open of {what}"),
            hint: permission_hint(
                std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                    .ok()
                    .as_deref(),
            ),
        },
        Some(libc::ENOSPC) => OpenError::NoDebugRegister(e),
        Some(libc::ESRCH) => OpenError::NoSuchProcess { pid: 0 },
        _ => OpenError::Open { what, source: e },
    }
}
