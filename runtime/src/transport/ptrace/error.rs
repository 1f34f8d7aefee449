//! The errors of the ptrace transport, with what a user needs to act on
//! them (the pid, the address, the errno, the ptrace policy's hint).

use nix::errno::Errno;

/// A failure of the tracer or of a traced process.
#[derive(Debug, thiserror::Error)]
pub enum PtraceError {
    /// The thread or process no longer exists (ESRCH).
    #[error("tracee {pid} died")]
    TraceeDied {
        /// The tid.
        pid: i32,
    },
    /// No process with this pid.
    #[error("no such process: {pid}")]
    NoSuchProcess {
        /// The pid.
        pid: i32,
    },
    /// The process cannot be traced for a reason of its own (a zombie, a
    /// kernel thread, already traced).
    #[error("{reason}")]
    Untraceable {
        /// The pid.
        pid: i32,
        /// Why.
        reason: String,
    },
    /// Not allowed to trace.
    #[error("not permitted to trace process {pid}: {hint}")]
    PermissionDenied {
        /// The pid.
        pid: i32,
        /// What to change.
        hint: String,
    },
    /// The command to launch was not found.
    #[error("{cmd}: command not found")]
    CommandNotFound {
        /// The command.
        cmd: String,
    },
    /// exec of the command failed.
    #[error("cannot execute {cmd}: {errno}")]
    Exec {
        /// The command.
        cmd: String,
        /// errno of execvp.
        errno: Errno,
    },
    /// A ptrace or related system call failed.
    #[error("{op} on {pid} failed: {errno}")]
    Sys {
        /// The operation.
        op: &'static str,
        /// The tid.
        pid: i32,
        /// errno.
        errno: Errno,
    },
    /// Restoring the original byte failed.
    #[error("cannot restore the original byte at {addr:#x} in process {pid}: {errno}")]
    Restore {
        /// The process.
        pid: i32,
        /// The address.
        addr: u64,
        /// errno.
        errno: Errno,
    },
    /// The tracee did not stop within the deadline.
    #[error("process {pid}: {what} timed out")]
    Timeout {
        /// The pid.
        pid: i32,
        /// What was waited for.
        what: &'static str,
    },
    /// Unknown breakpoint or watchpoint id, or unknown process.
    #[error("unknown {what} {id}")]
    Unknown {
        /// "breakpoint", "watchpoint" or "process".
        what: &'static str,
        /// The id.
        id: i64,
    },
}

impl PtraceError {
    pub(super) fn sys(op: &'static str, pid: i32, errno: Errno) -> PtraceError {
        if errno == Errno::ESRCH {
            PtraceError::TraceeDied { pid }
        } else {
            PtraceError::Sys { op, pid, errno }
        }
    }
}

/// A probe that could not be armed.
#[derive(Debug, thiserror::Error)]
pub enum ArmError {
    /// The first byte differs from the probe's `opcode`.
    #[error("opcode mismatch at {addr:#x}: expected {expected:#04x}, found {found:#04x}")]
    OpcodeMismatch {
        /// Run-time address.
        addr: u64,
        /// The probe's opcode.
        expected: u8,
        /// The byte in memory.
        found: u8,
    },
    /// An `int3` is already there (not ours).
    #[error(
        "address {addr:#x} already holds an int3: the program's own, or the breakpoint of \
         another tool (a uprobe of perf, bpftrace or wprobe --transport perf; a debugger). Two \
         tracers on one instruction take each other's hits: stop the other one first"
    )]
    AlreadyTrapped {
        /// Run-time address.
        addr: u64,
    },
    /// The address is not in an executable mapping of the process.
    #[error("address {addr:#x} is not in an executable mapping of process {pid}")]
    NotExecutable {
        /// The process.
        pid: i32,
        /// Run-time address.
        addr: u64,
    },
    /// The bytes at the address do not decode as an instruction.
    #[error("address {addr:#x} is not an instruction boundary")]
    NotAnInstructionBoundary {
        /// Run-time address.
        addr: u64,
    },
    /// All debug registers are in use.
    #[error("debug register unavailable (at most {limit} watchpoints per process)")]
    NoDebugRegister {
        /// How many exist.
        limit: u8,
    },
    /// Bad watchpoint length, alignment or kind.
    #[error(transparent)]
    BadWatchpoint(#[from] crate::transport::BadWatchpoint),
    /// Attach mode: the patch could not be recorded in the journal that
    /// `wprobe repair` needs if wprobe is killed, so it is not made.
    #[error("not armed: {reason}")]
    Journal {
        /// What went wrong with the journal.
        reason: String,
    },
    /// Not traced.
    #[error("process {pid} is not traced")]
    NotTraced {
        /// The pid.
        pid: i32,
    },
    /// A tracer failure while arming.
    #[error(transparent)]
    Provider(#[from] PtraceError),
}

pub(super) fn ptrace_hint() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    format!(
        "ptrace is restricted (/proc/sys/kernel/yama/ptrace_scope = {scope}); \
         run as the same user with ptrace_scope 0, or with CAP_SYS_PTRACE"
    )
}

/// The seam's kind of each tracer failure, its text unchanged.
impl From<PtraceError> for crate::transport::Error {
    fn from(e: PtraceError) -> crate::transport::Error {
        use crate::transport::Error;
        let message = e.to_string();
        match e {
            PtraceError::TraceeDied { pid } | PtraceError::NoSuchProcess { pid } => {
                Error::Gone { pid, message }
            }
            PtraceError::PermissionDenied { pid, .. } => Error::Os {
                pid: Some(pid),
                addr: None,
                errno: Some(Errno::EPERM as i32),
                message,
            },
            PtraceError::Exec { errno, .. } => Error::Os {
                pid: None,
                addr: None,
                errno: Some(errno as i32),
                message,
            },
            PtraceError::Sys { pid, errno, .. } => Error::Os {
                pid: Some(pid),
                addr: None,
                errno: Some(errno as i32),
                message,
            },
            PtraceError::Restore { pid, addr, errno } => Error::Os {
                pid: Some(pid),
                addr: Some(addr),
                errno: Some(errno as i32),
                message,
            },
            PtraceError::Untraceable { .. }
            | PtraceError::CommandNotFound { .. }
            | PtraceError::Timeout { .. }
            | PtraceError::Unknown { .. } => Error::Other(message),
        }
    }
}

/// The seam's kind of each arming failure (a rule of the site, a resource,
/// the tracer's own failure), its text unchanged.
impl From<ArmError> for crate::transport::Error {
    fn from(e: ArmError) -> crate::transport::Error {
        use crate::transport::{Error, Rule};
        let message = e.to_string();
        match e {
            ArmError::OpcodeMismatch { addr, .. } => {
                Error::refused(Rule::OpcodeMismatch, Some(addr), message)
            }
            ArmError::AlreadyTrapped { addr } => {
                Error::refused(Rule::Occupied, Some(addr), message)
            }
            ArmError::NotExecutable { addr, .. } => {
                Error::refused(Rule::NotExecutable, Some(addr), message)
            }
            ArmError::NotAnInstructionBoundary { addr } => {
                Error::refused(Rule::InstructionBoundary, Some(addr), message)
            }
            ArmError::BadWatchpoint(b) => b.into(),
            ArmError::NoDebugRegister { .. } | ArmError::Journal { .. } => Error::arm(message),
            ArmError::NotTraced { pid } => Error::gone(pid, message),
            ArmError::Provider(p) => p.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{Error, Rule};

    /// At the seam an arming failure keeps its words and says its kind.
    #[test]
    fn arm_errors_keep_their_text_at_the_seam() {
        let cases: Vec<ArmError> = vec![
            ArmError::NotExecutable { pid: 5, addr: 0x10 },
            ArmError::NoDebugRegister { limit: 4 },
            ArmError::NotTraced { pid: 5 },
            ArmError::Provider(PtraceError::sys("PTRACE_POKEDATA", 5, Errno::ESRCH)),
        ];
        let text: Vec<String> = cases.iter().map(|e| e.to_string()).collect();
        let seam: Vec<Error> = cases.into_iter().map(Error::from).collect();
        for (t, e) in text.iter().zip(&seam) {
            assert_eq!(*t, e.to_string());
        }
        assert_eq!(seam[0].rule(), Some(Rule::NotExecutable));
        assert!(matches!(seam[1], Error::Arm { .. }));
        assert!(matches!(seam[2], Error::Gone { pid: 5, .. }));
        assert!(matches!(seam[3], Error::Gone { pid: 5, .. }));
    }
}
