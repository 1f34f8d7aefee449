//! The subcommands of `wprobe`: each module holds its arguments (clap) and
//! what it does; `cli` parses the command line and dispatches. What the
//! commands share is here: the program options, the `--transport` values,
//! and the error type that carries a command's exit status.

use clap::builder::{PossibleValue, PossibleValuesParser};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::transport::ExitStatus;

pub mod bench;
pub mod compile;
pub mod list;
pub mod repair;
pub mod run;
pub mod trace;

/// The options of `run` and `bench` that say how their programs are built
/// and run (`bench --end-to-end` passes them on to `run`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ProgramOpts {
    /// Define a macro for .rpn programs.
    #[arg(short = 'D', value_name = "NAME[=VALUE]")]
    pub define: Vec<String>,
    /// Include directory for .rpn programs.
    #[arg(short = 'I', value_name = "DIR")]
    pub include: Vec<PathBuf>,
    /// Fuel per handler run (default: derived from the program's jmpmax).
    #[arg(long, value_name = "N")]
    pub fuel: Option<u64>,
    /// Compile modules afresh instead of using the compiled-module cache
    /// (also `WPROBE_NO_CACHE=1`; the cache holds at most
    /// `WPROBE_CACHE_MAX_BYTES`, default 256M, least recently used evicted).
    #[arg(long)]
    pub no_cache: bool,
}

/// Splits `NAME[=VALUE]` (`-D NAME` means 1).
pub fn parse_define(d: &str) -> (String, String) {
    match d.split_once('=') {
        Some((n, v)) => (n.trim().to_string(), v.trim().to_string()),
        None => (d.trim().to_string(), "1".to_string()),
    }
}

/// The `--transport` values: the transport registry, each with its
/// one-line description.
pub(crate) fn transport_names() -> PossibleValuesParser {
    PossibleValuesParser::new(
        crate::plan::names(|_| true)
            .into_iter()
            .map(|(name, about)| PossibleValue::new(name).help(about)),
    )
}

/// The `--transport` values of `wprobe trace`: `auto` and the transports
/// that arm return probes.
pub(crate) fn return_probe_transport_names() -> PossibleValuesParser {
    PossibleValuesParser::new(
        crate::plan::names(|t| t.caps.return_probes)
            .into_iter()
            .map(|(name, about)| PossibleValue::new(name).help(about)),
    )
}

/// A command's failure: what `wprobe` prints (`error: MESSAGE`) and the
/// exit status it gives (1: bad input or arguments, or a target that
/// cannot be traced; 2: an internal error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// The exit status.
    pub code: u8,
    /// The message, without the `error: ` prefix.
    pub message: String,
}

impl CliError {
    /// A failure with exit status `code`.
    pub fn new(code: u8, message: impl Into<String>) -> CliError {
        CliError {
            code,
            message: message.into(),
        }
    }

    /// Bad input, bad arguments, or a target that cannot be traced (1).
    pub fn user(message: impl Into<String>) -> CliError {
        CliError::new(1, message)
    }

    /// An internal error (2).
    pub fn internal(message: impl Into<String>) -> CliError {
        CliError::new(2, message)
    }
}

/// What a command returns: its exit status, or the failure to report.
pub type CmdResult = Result<ExitCode, CliError>;

/// wprobe's exit status for how the traced command ended: its own, 128 +
/// the signal that killed it, 0 when it did not end while traced.
pub(crate) fn command_exit_code(s: Option<ExitStatus>) -> ExitCode {
    match s {
        Some(ExitStatus::Code(c)) => ExitCode::from(c as u8),
        Some(ExitStatus::Signal(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
        None => ExitCode::SUCCESS,
    }
}

/// Waits for our child `pid` to exit (after it was detached); `None` if it
/// cannot be waited for.
pub(crate) fn wait_child(pid: i32) -> Option<ExitStatus> {
    use nix::sys::wait::{WaitStatus, waitpid};
    loop {
        match waitpid(nix::unistd::Pid::from_raw(pid), None) {
            Ok(WaitStatus::Exited(_, c)) => return Some(ExitStatus::Code(c)),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Some(ExitStatus::Signal(sig as i32)),
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        }
    }
}

/// Separates compiler diagnostics from the summary in an error message
/// (see [`diagnostics_failure`]).
const DIAGNOSTICS_END: char = '\u{1}';

/// An error message made of compiler diagnostics (already rendered, with
/// `file:line:col` and carets) and a one-line summary: reported as the
/// diagnostics as they are, then `error: SUMMARY`, whatever path the
/// message takes to the command's result.
pub fn diagnostics_failure(diagnostics: &str, summary: &str) -> String {
    format!("{diagnostics}{DIAGNOSTICS_END}{summary}")
}

/// Reports a command's result: prints a failure as `error: MESSAGE` (after
/// the compiler's diagnostics, when it carries them) and turns it into its
/// exit status.
pub fn report(result: CmdResult) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            match e.message.split_once(DIAGNOSTICS_END) {
                Some((diagnostics, summary)) => {
                    crate::elog!("{diagnostics}error: {summary}")
                }
                None => crate::elog!("error: {}", e.message),
            }
            ExitCode::from(e.code)
        }
    }
}
