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

pub use crate::transport::common::perf_event::permission_hint;
use crate::transport::common::perf_event::{self, OpenError};

impl From<OpenError> for PerfError {
    fn from(e: OpenError) -> PerfError {
        match e {
            OpenError::PermissionDenied { what, hint } => {
                PerfError::PermissionDenied { what, hint }
            }
            OpenError::NoDebugRegister(e) => PerfError::NoDebugRegister(e),
            OpenError::NoSuchProcess { pid } => PerfError::NoSuchProcess { pid },
            OpenError::Open { what, source } => PerfError::Open { what, source },
        }
    }
}

/// What a failed `perf_event_open` of `what` means
/// ([`perf_event::open_error`]), as the transport's error.
pub(crate) fn open_error(what: String, e: std::io::Error) -> PerfError {
    perf_event::open_error(what, e).into()
}

/// The seam's kind of each failure, its text unchanged.
impl From<PerfError> for crate::transport::Error {
    fn from(e: PerfError) -> crate::transport::Error {
        use crate::transport::Error;
        let message = e.to_string();
        match e {
            PerfError::PermissionDenied { .. } => Error::Os {
                pid: None,
                addr: None,
                errno: None,
                message,
            },
            PerfError::NoTracefs { .. } => Error::unsupported(super::INFO.name, message),
            PerfError::Open { source, .. } => Error::io(None, None, &source, message),
            PerfError::NoDebugRegister(_) => Error::arm(message),
            PerfError::TraceeDied { pid } | PerfError::NoSuchProcess { pid } => {
                Error::gone(pid, message)
            }
            PerfError::Exec { errno, .. } | PerfError::Sys { errno, .. } => Error::Os {
                pid: None,
                addr: None,
                errno: Some(errno),
                message,
            },
            PerfError::Untraceable { .. } | PerfError::CommandNotFound { .. } => {
                Error::Other(message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-process transport's watchpoints say a failed
    /// `perf_event_open` as the perf transport does.
    #[test]
    fn an_open_error_says_the_same_as_the_perf_error_it_becomes() {
        for errno in [libc::EACCES, libc::ENOSPC, libc::ESRCH, libc::EINVAL] {
            let e = || std::io::Error::from_raw_os_error(errno);
            assert_eq!(
                perf_event::open_error("x".into(), e()).to_string(),
                open_error("x".into(), e()).to_string()
            );
        }
    }
}
