//! The `wprobe` command line: argument parsing and the subcommands.
//! Exit status: 0 success, 1 user error (bad input or arguments), 2 internal
//! error; `wprobe run` exits with the traced command's status.

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

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
}

/// `wprobe repair`.
#[derive(clap::Args, Debug)]
pub struct RepairArgs {
    /// The process (its patch journal was written when wprobe attached).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: i32,
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

/// `wprobe bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Probe programs: .rpn (compiled on the fly), .wasm, .wat or .bt.
    #[arg(required_unless_present = "program_text")]
    pub programs: Vec<PathBuf>,
    /// A program in bpftrace's language.
    #[arg(short = 'e', value_name = "PROGRAM")]
    pub program_text: Option<String>,
    /// Runs of each handler (split into timed batches after a warm-up).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub iterations: u64,
    /// Also run the reference interpreter on the same hit (.rpn programs).
    #[arg(long)]
    pub interp: bool,
    /// How the programs are built and run.
    #[command(flatten)]
    pub opts: ProgramOpts,
    /// Output format.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub format: String,
    /// Instead of timing handlers alone, time the command (after `--`)
    /// untraced and traced under each transport, and report the overhead
    /// per hit (which includes wprobe's start-up: use a workload with many
    /// hits).
    #[arg(long, requires = "command")]
    pub end_to_end: bool,
    /// Runs of each configuration with `--end-to-end` (the median is reported).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeat: u32,
    /// Transports measured by `--end-to-end` (repeatable; default: every
    /// transport).
    #[arg(long = "transport", value_name = "TRANSPORT", value_parser = transport_names())]
    pub transports: Vec<String>,
    /// A command: with `--end-to-end`, the workload; otherwise the handlers
    /// run on the registers and memory of its first hit of each probe.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// `wprobe run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Probe programs: .rpn (compiled on the fly), .wasm or .wat, or .bt
    /// (bpftrace's language); with -l, the pattern to list.
    pub programs: Vec<PathBuf>,
    /// A program in bpftrace's language (`-e 'uprobe:./prog:f { @[comm] = count(); }'`).
    #[arg(short = 'e', value_name = "PROGRAM")]
    pub program_text: Option<String>,
    /// A probe event in uprobe_events syntax (repeatable):
    /// `p[:NAME] MODULE:SYM[+OFF] [FIELD=FETCHARG[:TYPE] ...]`, `r[:NAME] ...`.
    #[arg(long = "event", value_name = "EVENT")]
    pub events: Vec<String>,
    /// The command to trace, as one string split on spaces (bpftrace's -c;
    /// the same as giving it after `--`).
    #[arg(short = 'c', value_name = "CMD", conflicts_with_all = ["command", "pid"])]
    pub cmd: Option<String>,
    /// List the probe-able functions matching the pattern (`uprobe:BIN:GLOB`).
    #[arg(short = 'l')]
    pub list: bool,
    /// With -l: each function's arguments from DWARF (`-lv`).
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Attach to this running process instead of launching a command.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<i32>,
    /// Follow fork/vfork/exec children (without it children are detached, their inherited breakpoints removed).
    #[arg(short = 'f', long = "follow")]
    pub follow: bool,
    /// Only probes of these groups (repeatable).
    #[arg(long = "group", value_name = "G")]
    pub groups: Vec<String>,
    /// Only probes of these types (repeatable).
    #[arg(long = "type", value_name = "T")]
    pub types: Vec<String>,
    /// How the programs are built and run.
    #[command(flatten)]
    pub opts: ProgramOpts,
    /// Output format.
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub format: String,
    /// Write records to FILE instead of standard output.
    #[arg(short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Arm breakpoints even where the byte differs from `opcode =`.
    #[arg(long)]
    pub no_verify_opcodes: bool,
    /// How probes reach the target and hits reach the handlers (see
    /// `--help` for what each can do).
    #[arg(long, value_name = "TRANSPORT", default_value = crate::transport::TRANSPORTS[0].name, value_parser = transport_names())]
    pub transport: String,
    /// Bind a handler export to a breakpoint, for modules without a manifest
    /// (repeatable): `[MODULE:]SYMBOL[±N]=EXPORT` or `[MODULE:]NUMBER=EXPORT`
    /// (a link-time address, as `objdump -d` shows it; like `offset =`), or
    /// `@NUMBER=EXPORT` / `@SYMBOL[±N]=EXPORT` (a run-time address; like
    /// `address =`). MODULE is a path or a base name; without it, the traced
    /// executable.
    #[arg(long = "probe", value_name = "LOCATION=EXPORT")]
    pub probes: Vec<String>,
    /// The command to launch (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// `wprobe list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// `BINARY [GLOB]`, or `[GLOB]` with `-p PID`.
    #[arg(value_name = "BINARY|GLOB", num_args = 0..=2)]
    pub args: Vec<String>,
    /// A process: its executable and every mapped library.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<i32>,
    /// Include data objects, not only functions.
    #[arg(long)]
    pub all: bool,
    /// Show symbol names as they are in the file (C++ and Rust names are
    /// demangled by default; globs match either form).
    #[arg(long)]
    pub no_demangle: bool,
    /// Demangle C++ and Rust names (the default; kept for tracef and
    /// uftrace habits).
    #[arg(short = 'C', long = "demangle", overrides_with = "no_demangle")]
    pub demangle: bool,
}

/// `wprobe compile`.
#[derive(clap::Args, Debug)]
pub struct CompileArgs {
    /// The .rpn or .bt program.
    #[arg(required_unless_present = "program_text")]
    pub program: Option<PathBuf>,
    /// A program in bpftrace's language (needs -o).
    #[arg(short = 'e', value_name = "PROGRAM", conflicts_with = "program")]
    pub program_text: Option<String>,
    /// Define a macro: -D NAME, -D NAME=VALUE (also -D NAME = VALUE).
    #[arg(short = 'D', value_name = "NAME[=VALUE]")]
    pub define: Vec<String>,
    /// Add an include directory (searched after the including file's directory).
    #[arg(short = 'I', value_name = "DIR")]
    pub include: Vec<PathBuf>,
    /// Output file (default: the program's name with .wasm, or .wat with --emit wat; `-` for stdout).
    #[arg(short = 'o', value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// What to write: the module (wasm) or annotated text (wat).
    #[arg(long, value_name = "FORMAT", default_value = "wasm", value_parser = ["wasm", "wat"])]
    pub emit: String,
    /// Look symbols up in this ELF file instead of the one `name =` designates.
    #[arg(long, value_name = "ELF")]
    pub symbols_from: Option<PathBuf>,
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
        Command::Compile(a) => compile(a),
        Command::Run(a) => crate::runcmd::run(a),
        Command::List(a) => crate::listcmd::list(a),
        Command::Bench(a) => crate::benchcmd::bench(a),
        Command::Repair(a) => repair(a),
    }
}

fn repair(a: RepairArgs) -> ExitCode {
    use crate::transport::ptrace::journal;
    let path = journal::path(a.pid);
    if !path.exists() {
        crate::elog!(
            "error: no patch journal for process {} ({}): nothing to repair (wprobe detached cleanly, or never attached)",
            a.pid,
            path.display()
        );
        return ExitCode::from(1);
    }
    // A live wprobe restores the process itself when it stops; writing
    // under it would silently disarm its probes.
    if let crate::procinfo::Untraceable::Traced { tracer, comm } =
        crate::procinfo::untraceable(a.pid)
    {
        crate::elog!(
            "error: process {} is traced by process {tracer} ({comm}), which restores it when it \
             stops: stop that with SIGINT (`kill -INT {tracer}`); `wprobe repair` is for a wprobe \
             that was killed",
            a.pid
        );
        return ExitCode::from(1);
    }
    match journal::repair(a.pid) {
        Ok(n) => {
            let _ = crate::output::print_stdout(&format!(
                "wprobe: restored {n} byte{} in process {}\n",
                if n == 1 { "" } else { "s" },
                a.pid
            ));
            ExitCode::SUCCESS
        }
        Err(e) => {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (writing /proc/PID/mem needs the permission attaching needs: same user and kernel.yama.ptrace_scope, or CAP_SYS_PTRACE)"
            } else {
                ""
            };
            crate::elog!("error: repairing process {}: {e}{hint}", a.pid);
            ExitCode::from(1)
        }
    }
}

fn compile(a: CompileArgs) -> ExitCode {
    if a.program_text.is_some() || a.program.as_deref().is_some_and(crate::btrun::is_bt) {
        return crate::btrun::compile_cmd(&a);
    }
    let Some(program) = a.program.clone() else {
        eprintln!("error: give a program file or -e PROGRAM");
        return ExitCode::from(1);
    };
    let a = CompileArgs {
        program: Some(program.clone()),
        ..a
    };
    let program_path = program;
    let mut opts = rpn2wasm::Options {
        defines: a.define.iter().map(|d| parse_define(d)).collect(),
        include_dirs: a.include.clone(),
        symbols: None,
        module_dirs: Vec::new(),
    };
    if let Some(elf) = &a.symbols_from {
        let path = if elf.components().count() > 1 {
            elf.clone()
        } else {
            std::path::Path::new(".").join(elf)
        };
        opts.symbols = Some(Box::new(rpn2wasm::symbols::ElfSymbols::new(
            &path.to_string_lossy(),
        )));
    }
    let (program, map) = match rpn2wasm::frontend(&program_path, &opts) {
        Ok(x) => x,
        Err((diags, map)) => {
            crate::elog!("{}", diags.render(&map).trim_end_matches('\n'));
            let n = diags.0.len();
            crate::elog!(
                "error: could not compile `{}` ({n} error{})",
                program_path.display(),
                if n == 1 { "" } else { "s" }
            );
            return ExitCode::from(1);
        }
    };
    let manifest = rpn2wasm::manifest::build(&program);
    let generated = rpn2wasm::codegen::generate_with_marks(&program, &manifest);
    let (bytes, ext) = if a.emit == "wat" {
        match crate::watdump::annotated_wat(&program, &map, &generated) {
            Ok(t) => (t.into_bytes(), "wat"),
            Err(e) => {
                crate::elog!("error: printing the module: {e:#}");
                return ExitCode::from(2);
            }
        }
    } else {
        (generated.wasm, "wasm")
    };
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| program_path.with_extension(ext));
    let res = if out.as_os_str() == "-" {
        use std::io::Write;
        std::io::stdout().write_all(&bytes)
    } else {
        std::fs::write(&out, &bytes)
    };
    if let Err(e) = res {
        crate::elog!("error: writing {}: {e}", out.display());
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// The `--transport` values: the transport registry, each with its
/// one-line description.
fn transport_names() -> PossibleValuesParser {
    PossibleValuesParser::new(
        crate::transport::TRANSPORTS
            .iter()
            .map(|t| PossibleValue::new(t.name).help(t.about)),
    )
}
