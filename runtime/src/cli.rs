//! The `wprobe` command line: argument parsing and the subcommands.
//! Exit status: 0 success, 1 user error (bad input or arguments), 2 internal
//! error; `wprobe run` exits with the traced command's status.

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::cmd;
use crate::cmd::bench::BenchArgs;
use crate::cmd::compile::CompileArgs;
use crate::cmd::list::ListArgs;
use crate::cmd::repair::RepairArgs;
use crate::cmd::run::RunArgs;
use crate::cmd::trace::TraceArgs;

/// Examples shown under `wprobe --help`.
const EXAMPLES: &str = "\
Examples:
  wprobe run -e 'uprobe:libc:malloc { @bytes = hist(arg0); }' -c 'ls -l /usr'
  wprobe run guests/rpn/malloc_count.rpn -- ls -l /usr
  wprobe run prog.rpn -p 1234                  attach to a running process
  wprobe run --transport perf prog.rpn -- CMD  the target never stops
  wprobe list ./prog 'target_*'                functions, sizes, first bytes
  wprobe compile prog.rpn -o prog.wasm
  wprobe bench prog.rpn --end-to-end -- CMD    per-hit cost of each transport
  wprobe repair --pid 1234                     after a killed `wprobe run -p`
  wprobe trace -T -C -- CMD                    every function call, as a tree

Exit status: 0 success; 1 bad input, or a target that cannot be traced; 2 an
internal error; `wprobe run` and `wprobe trace` exit with the traced
command's status.
Documentation: README.md, docs/rpn-language.md, docs/oneliners.md, docs/hostabi.md,
docs/trace.md.";

/// Run WebAssembly probe handlers when breakpoints and watchpoints fire in Linux processes.
#[derive(Parser, Debug)]
#[command(
    name = "wprobe",
    version,
    about = "Trace Linux x86-64 programs without changing them: run your own probe handlers \
             (dprobes .rpn, bpftrace one-liners, WAT, Rust, C), sandboxed, when a function is \
             called or returns or memory is touched",
    long_about = None,
    after_help = EXAMPLES
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compile a probe program (.rpn, or a one-liner with -e) to a Wasm module, to check it or run it later.
    Compile(CompileArgs),
    /// Run probe programs on a command (`-- CMD ARGS`) or a process (`-p PID`).
    Run(RunArgs),
    /// List the probe-able symbols of a binary or a process: address, size, first opcode byte.
    List(ListArgs),
    /// Time every handler of a program on a synthetic hit, without stopping anything.
    Bench(BenchArgs),
    /// Restore the original bytes of a process a killed `wprobe run -p` left breakpoints in.
    Repair(RepairArgs),
    /// Trace every function call of a command or a process: call trees, durations, reports.
    Trace(TraceArgs),
    /// The attach-mode watchdog (started by `run -p`, not by users).
    #[command(name = "__watchdog", hide = true)]
    Watchdog {
        /// The attached process.
        pid: i32,
        /// The real watchdog (the first process only starts it).
        #[arg(long)]
        detached: bool,
    },
}

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

/// Joins `-D NAME = VALUE` (three arguments) into `-D NAME=VALUE`.
pub fn normalize_args(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        // bpftrace's `-f json` / `-f text` is `--format` (wprobe's -f is --follow).
        if args[i] == "-f" && i + 1 < args.len() && (args[i + 1] == "json" || args[i + 1] == "text")
        {
            out.push("--format".into());
            out.push(args[i + 1].clone());
            i += 2;
            continue;
        }
        if args[i] == "-D" && i + 3 < args.len() && args[i + 2] == "=" {
            let mut joined = args[i + 1].clone();
            joined.push("=");
            joined.push(&args[i + 3]);
            out.push(args[i].clone());
            out.push(joined);
            i += 4;
            continue;
        }
        out.push(args[i].clone());
        i += 1;
    }
    out
}

/// Splits `NAME[=VALUE]` (`-D NAME` means 1).
pub fn parse_define(d: &str) -> (String, String) {
    match d.split_once('=') {
        Some((n, v)) => (n.trim().to_string(), v.trim().to_string()),
        None => (d.trim().to_string(), "1".to_string()),
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let args = normalize_args(std::env::args_os().collect());
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };

    report(match cli.command {
        Command::Compile(a) => cmd::compile::compile(a),
        Command::Run(a) => cmd::run::run(a),
        Command::List(a) => cmd::list::list(a),
        Command::Bench(a) => cmd::bench::bench(a),
        Command::Repair(a) => cmd::repair::repair(a),
        Command::Trace(a) => cmd::trace::trace(a),
        Command::Watchdog { pid, detached } => {
            return crate::transport::ptrace::watchdog::run(pid, detached);
        }
    })
}

/// The `--transport` values: the transport registry, each with its
/// one-line description.
pub(crate) fn transport_names() -> PossibleValuesParser {
    PossibleValuesParser::new(
        crate::transport::TRANSPORTS
            .iter()
            .map(|t| PossibleValue::new(t.name).help(t.about)),
    )
}

/// The `--transport` values of `wprobe trace`: the transports that arm
/// return probes.
pub(crate) fn return_probe_transport_names() -> PossibleValuesParser {
    PossibleValuesParser::new(
        crate::transport::TRANSPORTS
            .iter()
            .filter(|t| t.caps.return_probes)
            .map(|t| PossibleValue::new(t.name).help(t.about)),
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
