//! The one error of the transport seam ([`Error`]): what a transport says
//! when it cannot do what the session asked, sorted by what the caller does
//! about it (another transport, another site, nothing: the process is
//! gone), with the very words the user reads as its text (`Display`). Each
//! transport's own errors (ptrace's, perf's) become one of its kinds at
//! the seam, their text unchanged. No message becomes one by itself (there
//! is no `From<String>`): each is made with its kind where it happens,
//! with the process, the address and the errno it has; a refusal also
//! says what it says alike of every site it refuses (`wprobe trace` lists
//! the functions refused alike once).

use std::fmt::Display;

/// The rule by which a site refuses a probe ([`Error::Refused`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
    /// A file could not be read, or is not what it must be (a module's
    /// ELF file, its code).
    #[error("{message}")]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// The errno, when an I/O error.
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
        /// What it says alike of every site it refuses: `message` without
        /// what is particular to this site (its address, its function's
        /// name and file, the site's context: [`Error::site_context`]),
        /// given where the message is made ([`Error::alike`]), so that the
        /// sites refused for one reason are said once (`wprobe trace`).
        alike: String,
    },
    /// Arming failed for want of a resource, not by a rule of the site: no
    /// debug register free, the patch not journaled, no room for a stub.
    #[error("{message}")]
    Arm {
        /// In words.
        message: String,
        /// What it says alike of every site it fails at, as a refusal's
        /// (`message` without the site's context).
        alike: String,
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

    /// [`Error::File`] about `path`, with no errno.
    pub fn file(path: &std::path::Path, message: impl Into<String>) -> Error {
        Error::File {
            path: path.to_path_buf(),
            errno: None,
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

    /// [`Error::Refused`], whose message names nothing particular to the
    /// site (the sites it refuses are alike in it).
    pub fn refused(rule: Rule, addr: Option<u64>, message: impl Into<String>) -> Error {
        let message = message.into();
        Error::Refused {
            rule,
            addr,
            alike: message.clone(),
            message,
        }
    }

    /// [`Error::Refused`] of the site at `addr`, said `"{addr:#x} {rest}"`;
    /// alike of every site as `"its entry {rest}"` (the entry of the
    /// function a probe is on).
    pub fn refused_at(rule: Rule, addr: u64, rest: impl Display) -> Error {
        Error::Refused {
            rule,
            addr: Some(addr),
            message: format!("{addr:#x} {rest}"),
            alike: format!("its entry {rest}"),
        }
    }

    /// The same refusal (or failure to arm), said alike of every site it
    /// refuses as `alike` (its message without what is particular to the
    /// site); any other error unchanged.
    pub fn alike(mut self, words: impl Into<String>) -> Error {
        if let Error::Refused { alike, .. } | Error::Arm { alike, .. } = &mut self {
            *alike = words.into();
        }
        self
    }

    /// The same error, about the site at `addr` when it named none.
    pub fn at(mut self, site: u64) -> Error {
        match &mut self {
            Error::Refused { addr, .. } | Error::Os { addr, .. } => {
                addr.get_or_insert(site);
            }
            _ => {}
        }
        self
    }

    /// [`Error::Os`] of a failure `e` reported through `anyhow` (the
    /// in-process transport's launching, stopping and writing of the
    /// target), about process `pid` when one: its errno the first of its
    /// chain's (a `nix` errno or an I/O error); [`Error::Gone`] when that
    /// errno is `ESRCH`, or when none is known and the process has ended.
    /// The text is `message`.
    pub fn anyhow(pid: Option<i32>, e: &anyhow::Error, message: impl Into<String>) -> Error {
        let errno = e.chain().find_map(|c| {
            c.downcast_ref::<nix::errno::Errno>()
                .map(|n| *n as i32)
                .or_else(|| c.downcast_ref::<std::io::Error>()?.raw_os_error())
        });
        if let Some(pid) = pid {
            let gone = match errno {
                Some(n) => n == libc::ESRCH,
                None => crate::proc::procinfo::ended(pid),
            };
            if gone {
                return Error::gone(pid, message);
            }
        }
        Error::Os {
            pid,
            addr: None,
            errno,
            message: message.into(),
        }
    }

    /// [`Error::Arm`].
    pub fn arm(message: impl Into<String>) -> Error {
        let message = message.into();
        Error::Arm {
            alike: message.clone(),
            message,
        }
    }

    /// The rule of a refused site.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            Error::Refused { rule, .. } => Some(*rule),
            _ => None,
        }
    }

    /// The rule of a refused site and what the refusal says alike of
    /// every site it refuses ([`Error::Refused`]'s `alike`).
    pub fn refusal(&self) -> Option<(Rule, &str)> {
        match self {
            Error::Refused { rule, alike, .. } => Some((*rule, alike)),
            _ => None,
        }
    }

    /// What a refusal or a failure to arm says alike of every site
    /// (without the site's context); the text of any other error.
    pub fn said_alike(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Error::Refused { alike, .. } | Error::Arm { alike, .. } => alike.into(),
            e => e.to_string().into(),
        }
    }

    /// The same error, its text prefixed by `prefix` and `": "` (what it
    /// was doing), its kind kept; a refusal says it of every site alike
    /// too.
    pub fn context(mut self, prefix: impl Display) -> Error {
        if let Error::Refused { alike, .. } | Error::Arm { alike, .. } = &mut self {
            *alike = format!("{prefix}: {alike}");
        }
        self.site_context(prefix)
    }

    /// The same error, its text prefixed by `prefix` and `": "` where
    /// `prefix` names the site (its address): a refusal says it alike of
    /// every site without it.
    pub fn site_context(mut self, prefix: impl Display) -> Error {
        let text = match &mut self {
            Error::Unsupported { what: m, .. }
            | Error::Gone { message: m, .. }
            | Error::Os { message: m, .. }
            | Error::File { message: m, .. }
            | Error::Refused { message: m, .. }
            | Error::Arm { message: m, .. }
            | Error::Other(m) => m,
        };
        *text = format!("{prefix}: {text}");
        self
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
        assert_eq!(Error::other("words").to_string(), "words");
    }

    #[test]
    fn a_refusal_says_alike_of_every_site_what_is_not_its_own() {
        let e = Error::refused_at(Rule::Patch, 0x10, "is a return site of another function");
        assert_eq!(e.to_string(), "0x10 is a return site of another function");
        assert_eq!(
            e.refusal(),
            Some((
                Rule::Patch,
                "its entry is a return site of another function"
            ))
        );
        let e = e.site_context("cannot patch 0x10").context("process 7");
        assert_eq!(
            e.to_string(),
            "process 7: cannot patch 0x10: 0x10 is a return site of another function"
        );
        assert_eq!(
            e.refusal(),
            Some((
                Rule::Patch,
                "process 7: its entry is a return site of another function"
            ))
        );
        assert_eq!(Error::arm("no room").refusal(), None);
        let e = Error::refused(Rule::Returns, None, "f has no `ret`").alike("it has no `ret`");
        assert!(matches!(
            e.at(0x20),
            Error::Refused {
                addr: Some(0x20),
                ..
            }
        ));
    }

    #[test]
    fn an_anyhow_failure_keeps_its_errno_and_its_process() {
        let e = anyhow::Error::new(nix::errno::Errno::EPERM).context("writing");
        let e = Error::anyhow(Some(std::process::id() as i32), &e, format!("{e:#}")).at(0x40);
        assert_eq!(e.to_string(), "writing: EPERM: Operation not permitted");
        assert_eq!(
            e,
            Error::Os {
                pid: Some(std::process::id() as i32),
                addr: Some(0x40),
                errno: Some(libc::EPERM),
                message: "writing: EPERM: Operation not permitted".into(),
            }
        );
        let gone = anyhow::Error::new(nix::errno::Errno::ESRCH);
        assert!(matches!(
            Error::anyhow(Some(5), &gone, "x"),
            Error::Gone { pid: 5, .. }
        ));
        let launch = anyhow::anyhow!("no such file");
        assert!(matches!(
            Error::anyhow(None, &launch, "x"),
            Error::Os {
                pid: None,
                errno: None,
                ..
            }
        ));
    }
}
