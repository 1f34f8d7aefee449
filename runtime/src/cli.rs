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

/// Run WebAssembly probe handlers when breakpoints and watchpoints fire in Linux processes.
#[derive(Parser, Debug)]
#[command(name = "wprobe", version, about, long_about = None)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compile an RPN probe program to a Wasm module (dprobes --build-ppdf).
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
    match cli.command {
        Command::Compile(a) => cmd::compile::compile(a),
        Command::Run(a) => cmd::run::run(a),
        Command::List(a) => cmd::list::list(a),
        Command::Bench(a) => cmd::bench::bench(a),
        Command::Repair(a) => cmd::repair::repair(a),
        Command::Trace(a) => cmd::trace::trace(a),
    }
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
