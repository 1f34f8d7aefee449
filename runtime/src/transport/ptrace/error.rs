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
