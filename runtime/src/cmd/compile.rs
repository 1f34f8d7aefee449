//! `wprobe compile`: an RPN program (or a one-liner) to a Wasm module with
//! its manifest, or its WAT, or its interpreted records (`--check`).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cmd::{CliError, CmdResult, parse_define};

/// Examples shown under `--help`.
const EXAMPLES: &str = "\
Examples:
  wprobe compile prog.rpn -o prog.wasm
  wprobe compile prog.rpn -D LIMIT=10 -I include/ --emit wat
  wprobe compile -e 'uprobe:libc:malloc { @n = count(); }' -o count.wasm";

/// `wprobe compile`.
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
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

/// Runs `wprobe compile`.
pub fn compile(a: CompileArgs) -> CmdResult {
    if a.program_text.is_some()
        || a.program
            .as_deref()
            .is_some_and(crate::cmd::run::oneliner::is_bt)
    {
        return crate::cmd::run::oneliner::compile_cmd(&a);
    }
    let Some(program) = a.program.clone() else {
        return Err(CliError::user("give a program file or -e PROGRAM"));
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
            return Err(CliError::user(format!(
                "could not compile `{}` ({n} error{})",
                program_path.display(),
                if n == 1 { "" } else { "s" }
            )));
        }
    };
    let manifest = rpn2wasm::manifest::build(&program);
    let generated = rpn2wasm::codegen::generate_with_marks(&program, &manifest);
    let (bytes, ext) = if a.emit == "wat" {
        match crate::watdump::annotated_wat(&program, &map, &generated) {
            Ok(t) => (t.into_bytes(), "wat"),
            Err(e) => {
                return Err(CliError::internal(format!("printing the module: {e:#}")));
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
        return Err(CliError::user(format!("writing {}: {e}", out.display())));
    }
    Ok(ExitCode::SUCCESS)
}
