//! The one error of the transport seam ([`Error`]): what a transport says
//! when it cannot do what the session asked, sorted by what the caller does
//! about it (another transport, another site, nothing: the process is
//! gone), with the very words the user reads as its text (`Display`). Each
//! transport's own errors (ptrace's, perf's) become one of its kinds at
//! the seam, their text unchanged.

use std::fmt::Display;

/// The rule by which a site refuses a probe ([`Error::Refused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The first byte there is not the probe's `opcode =`.
    OpcodeMismatch,
    /// The address does not start an instruction, or it cannot be told
    /// whether it does.
    InstructionBoundary,
    /// The address is not in code of a file: no executable mapping or
    /// segment holds it.
    NotExecutable,
    /// A breakpoint not of this run is already there (the program's own,
    /// another tracer's).
    Occupied,
    /// A watchpoint the debug registers cannot hold (length, alignment,
    /// kind).
    Watchpoint,
    /// A return probe not at a function's entry, or on a function whose
    /// returns cannot be found.
    Returns,
    /// What the in-process transport's jump may replace: a window that
    /// overlaps another's, crosses a branch target, or has no room.
    Patch,
}

/// Why a transport could not do what the seam asked (open, arm, suspend,
/// load the handlers ...). The kinds are what the session, the planner and
/// the commands act on; the text is the message the user reads, the same
/// whatever the kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// This transport cannot do it at all, here (another may): `what`
    /// says what, and the remedy.
    #[error("{what}")]
    Unsupported {
        /// The transport's `--transport` name.
        transport: &'static str,
        /// What it cannot do, in words.
        what: String,
    },
    /// The process ended, never existed, or is not (or no longer) traced.
    #[error("{message}")]
    Gone {
        /// The process (or thread).
        pid: i32,
        /// In words.
        message: String,
    },
    /// A system call failed.
    #[error("{message}")]
    Os {
        /// The process it was about, when one.
        pid: Option<i32>,
        /// The address it was about, when one.
        addr: Option<u64>,
        /// The errno, when known.
        errno: Option<i32>,
        /// In words.
        message: String,
    },
    /// The site cannot take the probe, by `rule` (another site, or
    /// another transport, may).
    #[error("{message}")]
    Refused {
        /// The rule that refuses it.
        rule: Rule,
        /// The site, when it has a run-time address.
        addr: Option<u64>,
        /// In words.
        message: String,
    },
    /// Arming failed for want of a resource, not by a rule of the site: no
    /// debug register free, the patch not journaled, no room for a stub.
    #[error("{message}")]
    Arm {
        /// In words.
        message: String,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// [`Error::Other`].
    pub fn other(message: impl Into<String>) -> Error {
        Error::Other(message.into())
    }

    /// [`Error::Unsupported`].
    pub fn unsupported(transport: &'static str, what: impl Into<String>) -> Error {
        Error::Unsupported {
            transport,
            what: what.into(),
        }
    }

    /// [`Error::Gone`].
    pub fn gone(pid: i32, message: impl Into<String>) -> Error {
        Error::Gone {
            pid,
            message: message.into(),
        }
    }

    /// [`Error::Os`] of an I/O error (its errno, when it has one).
    pub fn io(
        pid: Option<i32>,
        addr: Option<u64>,
        e: &std::io::Error,
        message: impl Into<String>,
    ) -> Error {
        Error::Os {
            pid,
            addr,
            errno: e.raw_os_error(),
            message: message.into(),
        }
    }

    /// A failure to read the mappings of `pid` (`e`), said `message`: the
    /// process is gone when its `/proc` file is.
    pub(crate) fn maps(
        pid: i32,
        e: &crate::proc::procmaps::MapsError,
        message: impl Into<String>,
    ) -> Error {
        use crate::proc::procmaps::MapsError;
        match e {
            MapsError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::gone(pid, message)
            }
            MapsError::Io { source, .. } => Error::io(Some(pid), None, source, message),
            MapsError::Malformed { .. } => Error::other(message),
        }
    }

    /// [`Error::Refused`].
    pub fn refused(rule: Rule, addr: Option<u64>, message: impl Into<String>) -> Error {
        Error::Refused {
            rule,
            addr,
            message: message.into(),
        }
    }

    /// [`Error::Arm`].
    pub fn arm(message: impl Into<String>) -> Error {
        Error::Arm {
            message: message.into(),
        }
    }

    /// The rule of a refused site.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            Error::Refused { rule, .. } => Some(*rule),
            _ => None,
        }
    }

    /// The same error, its text prefixed by `prefix` and `": "` (what it
    /// was doing, where), its kind kept.
    pub fn context(mut self, prefix: impl Display) -> Error {
        let text = match &mut self {
            Error::Unsupported { what: m, .. }
            | Error::Gone { message: m, .. }
            | Error::Os { message: m, .. }
            | Error::Refused { message: m, .. }
            | Error::Arm { message: m }
            | Error::Other(m) => m,
        };
        *text = format!("{prefix}: {text}");
        self
    }
}

/// A message alone is [`Error::Other`].
impl From<String> for Error {
    fn from(message: String) -> Error {
        Error::Other(message)
    }
}

/// A message alone is [`Error::Other`].
impl From<&str> for Error {
    fn from(message: &str) -> Error {
        Error::Other(message.to_string())
    }
}

impl From<super::BadWatchpoint> for Error {
    fn from(e: super::BadWatchpoint) -> Error {
        Error::refused(Rule::Watchpoint, Some(e.addr), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_kind_and_prefixes_the_text() {
        let e = Error::refused(Rule::OpcodeMismatch, Some(0x10), "opcode mismatch");
        let e = e.context(format_args!("process {}", 7));
        assert_eq!(e.to_string(), "process 7: opcode mismatch");
        assert_eq!(e.rule(), Some(Rule::OpcodeMismatch));
        let e = Error::unsupported("perf", "no").context("x");
        assert_eq!(e.to_string(), "x: no");
        assert!(matches!(e, Error::Unsupported { .. }));
        assert_eq!(Error::from("words").to_string(), "words");
    }
}
