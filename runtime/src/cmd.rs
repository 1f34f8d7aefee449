//! The subcommands of `wprobe`: each module holds its arguments (clap) and
//! what it does; `cli` parses the command line and dispatches. What the
//! commands share is here: the `--transport` values, the engine and the
//! program loading of `run` and `bench` (the program options themselves
//! are [`crate::probe::programs`]'s, which imports nothing from here), and the
//! error type that carries a command's exit status.

use clap::builder::{PossibleValue, PossibleValuesParser};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::transport::ExitStatus;

pub mod bench;
pub mod cli;
pub mod cmdline;
pub mod compile;
pub mod list;
pub mod repair;
pub mod run;
pub mod trace;

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

/// The engine of `run` and `bench` (an internal error, exit status 2,
/// when wasmtime cannot be set up).
pub fn cli_engine() -> Result<wasmtime::Engine, CliError> {
    crate::wasm::engine::new_engine().map_err(|e| CliError::internal(format!("{e:#}")))
}

/// Loads every program with `load`, in order; the first error is the
/// command's (exit status 1).
pub fn load_each<T>(
    paths: &[PathBuf],
    mut load: impl FnMut(&Path) -> Result<T, String>,
) -> Result<Vec<T>, CliError> {
    paths
        .iter()
        .map(|p| load(p))
        .collect::<Result<Vec<T>, String>>()
        .map_err(CliError::user)
}

/// Reports a command's result: prints a failure as `error: MESSAGE` (after
/// the compiler's diagnostics, when it carries them) and turns it into its
/// exit status.
pub fn report(result: CmdResult) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            match crate::probe::programs::split_diagnostics(&e.message) {
                Some((diagnostics, summary)) => {
                    crate::elog!("{diagnostics}error: {summary}")
                }
                None => crate::elog!("error: {}", e.message),
            }
            ExitCode::from(e.code)
        }
    }
}

/// Whether `path` is a one-liner program file (`-`: one on standard input).
pub fn is_bt(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "bt") || path.as_os_str() == "-"
}

/// The location of a probe as the user wrote it.
pub fn location_text(module: &str, p: &hostabi::manifest::ProbeSpec) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if p.location.kind == hostabi::manifest::LocationKind::Address {
        s.push('@');
    } else {
        let _ = write!(s, "{module}:");
    }
    match &p.location.symbol {
        Some(sym) if p.location.addend != 0 => {
            let _ = write!(s, "{sym}+{:#x}", p.location.addend);
        }
        Some(sym) => s.push_str(sym),
        None => {
            let _ = write!(s, "{:#x}", p.location.addend);
        }
    }
    s
}
