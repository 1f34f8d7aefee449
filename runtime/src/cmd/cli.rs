//! The `wprobe` command line: argument parsing and the subcommands.
//! Exit status: 0 success, 1 user error (bad input or arguments), 2 internal
//! error; `wprobe run` exits with the traced command's status.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

use crate::cmd::bench::BenchArgs;
use crate::cmd::compile::CompileArgs;
use crate::cmd::list::ListArgs;
use crate::cmd::repair::RepairArgs;
use crate::cmd::run::RunArgs;
use crate::cmd::trace::TraceArgs;
use crate::cmd::{self, report};

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
    /// Run probe programs on a command (`-- CMD ARGS`), a process (`-p PID`), or, with neither, system-wide (one-liners: every process running the probed files).
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

/// Joins `-D NAME = VALUE` (three arguments) into `-D NAME=VALUE`.
pub fn normalize_args(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::with_capacity(args.len());
    // A one-liner run (`-e`, a `.bt` file, `-` for standard input) speaks
    // bpftrace's command line: there `-f FORMAT` is the output format
    // whatever the word (wprobe's own -f keeps its long name, --follow).
    let bpftrace_mode = args.get(1).is_some_and(|a| a == "run")
        && args
            .iter()
            .any(|a| a == "-e" || a == "-" || a.to_string_lossy().ends_with(".bt"));
    let mut i = 0;
    while i < args.len() {
        // bpftrace's `-f json` / `-f text` is `--format` (wprobe's -f is --follow).
        if args[i] == "-f"
            && i + 1 < args.len()
            && (bpftrace_mode || args[i + 1] == "json" || args[i + 1] == "text")
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

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let given: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match crate::cmd::cmdline::check_run(&given) {
        crate::cmd::cmdline::Early::Parse => {}
        crate::cmd::cmdline::Early::Version(v) => {
            let _ = crate::out::output::print_stdout(&v);
            return ExitCode::SUCCESS;
        }
        crate::cmd::cmdline::Early::Refused(d) => {
            crate::elog!("{d}error: could not start `run`");
            return ExitCode::from(1);
        }
    }
    let args = normalize_args(given.clone());
    // The commands that trace catch stopping signals from their first
    // moment (not a listing: `run -l`, which a Ctrl-C just ends).
    let tracing = matches!(args.get(1).and_then(|a| a.to_str()), Some("run" | "trace"));
    if tracing && !args.iter().any(|a| a == "-l" || a == "--help" || a == "-h") {
        crate::proc::stopsig::StopSignals::early();
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            // `wprobe run`'s unknown options and bad values at their place.
            if let Some(d) = crate::cmd::cmdline::clap_error(&given, &e) {
                crate::elog!("{d}error: could not start `run`");
                return ExitCode::from(1);
            }
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
            return crate::transport::common::watchdog::run(pid, detached);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{Cli, Command};

    /// Every program option of `bench --end-to-end` reaches the traced
    /// `wprobe run`, which parses it back to the same values.
    #[test]
    fn end_to_end_passes_the_program_options_on_to_run() {
        use clap::Parser;
        use std::path::PathBuf;
        let bench = Cli::try_parse_from([
            "wprobe",
            "bench",
            "--end-to-end",
            "--no-cache",
            "--fuel",
            "777",
            "-D",
            "A=1",
            "-D",
            "B",
            "-I",
            "inc",
            "-I",
            "/x/y",
            "p1.rpn",
            "p2.wasm",
            "--",
            "cmd",
            "arg 1",
            "-D",
        ])
        .unwrap();
        let Command::Bench(b) = bench.command else {
            panic!("not bench");
        };
        let argv = crate::cmd::bench::traced_argv(
            &b,
            std::path::Path::new("/bin/wprobe"),
            "perf",
            std::path::Path::new("/tmp/r.jsonl"),
        );
        let Command::Run(r) = Cli::try_parse_from(&argv).unwrap().command else {
            panic!("not run: {argv:?}");
        };
        assert_eq!(argv[0], "/bin/wprobe");
        assert_eq!(r.transport, "perf");
        assert_eq!(
            (r.format, r.output),
            (
                crate::out::format::Format::Json,
                Some("/tmp/r.jsonl".into())
            )
        );
        assert!(r.opts.no_cache);
        assert_eq!(r.opts.fuel, Some(777));
        assert_eq!(r.opts.define, ["A=1", "B"]);
        assert_eq!(
            r.opts.include,
            [PathBuf::from("inc"), PathBuf::from("/x/y")]
        );
        assert_eq!(
            r.programs,
            [PathBuf::from("p1.rpn"), PathBuf::from("p2.wasm")]
        );
        assert_eq!(r.command, ["cmd", "arg 1", "-D"]);
    }
}
