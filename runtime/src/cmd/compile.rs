//! `wprobe compile`: an RPN program (or a one-liner) to a Wasm module with
//! its manifest, or its WAT; a handler module (`.wasm`, `.wat`) of any
//! language to a binary with its manifest put in (the post-link step of
//! toolchains that cannot emit custom sections: `--manifest FILE`,
//! `--manifest-from-export`); and `--check`, which runs the load-time
//! checks of `wprobe run` on any of them and says what is wrong, with a hint
//! for the usual toolchain causes.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cmd::{CliError, CmdResult};
use crate::probe::programs::parse_define;

/// Examples shown under `--help`.
const EXAMPLES: &str = "\
Examples:
  wprobe compile prog.rpn -o prog.wasm
  wprobe compile prog.rpn -D LIMIT=10 -I include/ --emit wat
  wprobe compile -e 'uprobe:libc:malloc { @n = count(); }' -o count.wasm
  wprobe compile --check handler.wasm            would `wprobe run` load it? what is wrong?
  wprobe compile handler.wasm --manifest-from-export -o handler.wasm   (Zig: the post-link step)
  wprobe compile handler.wasm --manifest probes.txt -o out.wasm
  wprobe compile handler.wat -o handler.wasm";

/// `wprobe compile`.
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct CompileArgs {
    /// The .rpn or .bt program, or a handler module (.wasm, .wat).
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
    /// Only check that `wprobe run` would load the program (imports, exports,
    /// memory, manifest, handler types), say what is wrong, write nothing.
    #[arg(long)]
    pub check: bool,
    /// For a .wasm/.wat module: write FILE's text (the manifest lines, from
    /// `wprobe-manifest 1`) as its `wprobe.manifest` section.
    #[arg(long, value_name = "FILE", conflicts_with = "manifest_from_export")]
    pub manifest: Option<PathBuf>,
    /// For a .wasm/.wat module: move the NUL-terminated string it exports as
    /// `wprobe_manifest` (the Zig SDK's `manifest(...)`) into its
    /// `wprobe.manifest` section.
    #[arg(long)]
    pub manifest_from_export: bool,
}

/// `wprobe compile -e PROGRAM -o OUT` / `wprobe compile script.bt`.
fn compile_oneliner(a: &CompileArgs) -> CmdResult {
    let (name, text, default_out) = match (&a.program_text, &a.program) {
        (Some(t), _) => ("-e".to_string(), t.clone(), None),
        (None, Some(p)) => match std::fs::read(p) {
            Ok(b) => (
                p.display().to_string(),
                String::from_utf8_lossy(&b).into_owned(),
                Some(p.with_extension(if a.emit == "wat" { "wat" } else { "wasm" })),
            ),
            Err(e) => {
                return Err(CliError::user(format!("reading {}: {e}", p.display())));
            }
        },
        (None, None) => {
            return Err(CliError::user("give a program file or -e PROGRAM"));
        }
    };
    let opts = bt2wasm::Options::default();
    let wasm = match crate::cmd::run::oneliner::compile_text(&name, &text, &opts) {
        Ok(w) => w,
        Err(e) => {
            return Err(CliError::user(e));
        }
    };
    let bytes = if a.emit == "wat" {
        match wasmprinter::print_bytes(&wasm) {
            Ok(t) => t.into_bytes(),
            Err(e) => {
                return Err(CliError::internal(format!("printing the module: {e}")));
            }
        }
    } else {
        wasm
    };
    let Some(out) = a.output.clone().or(default_out) else {
        return Err(CliError::user(
            "give -o OUT (or -o - for standard output) with -e",
        ));
    };
    write_module(&out, &bytes)
}

/// Runs `wprobe compile`.
pub fn compile(a: CompileArgs) -> CmdResult {
    if a.program_text.is_some() || a.program.as_deref().is_some_and(crate::cmd::is_bt) {
        return compile_oneliner(&a);
    }
    let Some(program) = a.program.clone() else {
        return Err(CliError::user("give a program file or -e PROGRAM"));
    };
    if is_module(&program) {
        return compile_module(&a, &program);
    }
    if a.manifest.is_some() || a.manifest_from_export {
        return Err(CliError::user(
            "--manifest and --manifest-from-export apply to .wasm and .wat modules",
        ));
    }
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
    if a.check {
        return check_loads(&program_path, &generated.wasm);
    }
    let (bytes, ext) = if a.emit == "wat" {
        match crate::wasm::watdump::annotated_wat(&program, &map, &generated) {
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
    write_module(&out, &bytes)
}

/// Writes a compiled module to `out` (`-`: standard output).
pub(crate) fn write_module(out: &std::path::Path, bytes: &[u8]) -> CmdResult {
    let res = if out.as_os_str() == "-" {
        use std::io::Write;
        std::io::stdout().write_all(bytes)
    } else {
        std::fs::write(out, bytes)
    };
    if let Err(e) = res {
        return Err(CliError::user(format!("writing {}: {e}", out.display())));
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `path` names a handler module rather than a program to compile.
fn is_module(path: &std::path::Path) -> bool {
    path.extension()
        .is_some_and(|e| e == "wasm" || e == "wat" || e == "wast")
}

/// `wprobe compile MODULE.wasm|.wat`: `--check`, or the module written as
/// a binary with its manifest put in.
fn compile_module(a: &CompileArgs, path: &std::path::Path) -> CmdResult {
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::user(format!("reading {}: {e}", path.display())))?;
    let wasm = crate::wasm::load::to_wasm_named(&bytes, Some(path))
        .map_err(|e| CliError::user(format!("{}: {e}", path.display())))?
        .into_owned();
    let manifest = if let Some(file) = &a.manifest {
        Some(
            std::fs::read(file)
                .map_err(|e| CliError::user(format!("reading {}: {e}", file.display())))?,
        )
    } else if a.manifest_from_export {
        let text =
            crate::wasm::postlink::exported_string(&wasm, crate::wasm::postlink::MANIFEST_EXPORT)
                .map_err(|e| CliError::user(format!("{}: {e}", path.display())))?;
        Some(text)
    } else {
        None
    };
    let wasm = match &manifest {
        Some(text) => {
            let drop = a
                .manifest_from_export
                .then_some(crate::wasm::postlink::MANIFEST_EXPORT);
            crate::wasm::postlink::with_manifest(&wasm, text, drop)
                .map_err(|e| CliError::user(format!("{}: {e}", path.display())))?
        }
        None => wasm,
    };
    if a.check {
        return check_loads(path, &wasm);
    }
    // What is written loads (or lacks only a manifest, for --probe).
    if let Err(msg) = check_module(&wasm) {
        return Err(CliError::user(format!("{}: {msg}", path.display())));
    }
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| path.with_extension("wasm"));
    let res = if out.as_os_str() == "-" {
        use std::io::Write;
        std::io::stdout().write_all(&wasm)
    } else {
        std::fs::write(&out, &wasm)
    };
    res.map_err(|e| CliError::user(format!("writing {}: {e}", out.display())))?;
    Ok(ExitCode::SUCCESS)
}

/// The load-time checks of `wprobe run` on `wasm`: `Ok` with what the module
/// declares, or the error with a hint for its usual cause.
fn check_module(wasm: &[u8]) -> Result<String, String> {
    use crate::wasm::load::LoadError;
    let engine = crate::wasm::engine::new_engine().map_err(|e| format!("{e:#}"))?;
    let facts = crate::wasm::load::inspect(wasm).map_err(|e| with_hint(&e))?;
    if facts.manifest.is_none() {
        let mut exports: Vec<&str> = facts.func_exports.keys().map(String::as_str).collect();
        exports.sort_unstable();
        if facts
            .other_exports
            .contains_key(crate::wasm::postlink::MANIFEST_EXPORT)
        {
            return Err(format!(
                "{}\nhint: it exports `{}`: run `wprobe compile --manifest-from-export` on it (the post-link step of the Zig SDK)",
                LoadError::NoManifest,
                crate::wasm::postlink::MANIFEST_EXPORT
            ));
        }
        return Ok(format!(
            "no manifest: bind its handlers with --probe LOCATION=EXPORT (function exports: {})",
            exports.join(", ")
        ));
    }
    let loaded = crate::wasm::load::load(&engine, wasm, None).map_err(|e| with_hint(&e))?;
    let m = &loaded.manifest;
    let probes: Vec<String> = m
        .probes
        .iter()
        .map(|p| {
            format!(
                "{} at {}",
                p.export,
                crate::cmd::location_text(&m.module, p)
            )
        })
        .collect();
    let mut imports = facts.imports.clone();
    imports.sort_unstable();
    Ok(format!(
        "host ABI {}, {} probe{} ({}); imports: {}",
        m.abi,
        probes.len(),
        if probes.len() == 1 { "" } else { "s" },
        probes.join(", "),
        if imports.is_empty() {
            "none".to_string()
        } else {
            imports.join(", ")
        }
    ))
}

/// `--check`: prints `PATH: ok: ...` or fails with `PATH: problem`.
fn check_loads(path: &std::path::Path, wasm: &[u8]) -> CmdResult {
    match check_module(wasm) {
        Ok(what) => {
            let _ = crate::out::output::print_stdout(&format!("{}: ok: {what}\n", path.display()));
            Ok(ExitCode::SUCCESS)
        }
        Err(msg) => Err(CliError::user(format!("{}: {msg}", path.display()))),
    }
}

/// The load error's message, and on a second line the usual cause of it
/// when a toolchain is known to produce it.
fn with_hint(e: &crate::wasm::load::LoadError) -> String {
    use crate::wasm::load::LoadError;
    let hint = match e {
        LoadError::UnknownImport { module, name, .. } if module == "env" && name == "abort" => {
            Some(
                "AssemblyScript's default abort: build with `--use abort=wprobe/wprobeAbort` (guests/assemblyscript/asconfig.json)",
            )
        }
        LoadError::UnknownImport { module, name, .. }
            if module == "env" && (name == "memset" || name == "memcpy" || name == "memmove") =>
        {
            Some(
                "a C compiler's call to its library: build with -mbulk-memory (and -nostdlib), or define the function",
            )
        }
        LoadError::UnknownImport { module, .. } if module.starts_with("wasi") => Some(
            "built for WASI: build for wasm32-unknown-unknown (Rust, C) or wasm32-freestanding (Zig); handlers have no WASI",
        ),
        LoadError::UnknownImport { module, .. } if module == "env" => Some(
            "the toolchain left a function undefined (a libc or runtime call): handlers may import only `wprobe` functions",
        ),
        LoadError::StartFunction { .. } => Some(
            "a runtime initializer (AssemblyScript's, C++ static constructors): AssemblyScript: build with guests/assemblyscript/wprobe-transform.mjs, which runs it at the first hit",
        ),
        LoadError::NoMemory => Some(
            "export it (Zig and Rust do by default; C: wasm-ld exports `memory` unless --no-export-memory; AssemblyScript unless --noExportMemory)",
        ),
        LoadError::MissingHandler { .. } => Some(
            "handlers must be exported functions: Zig `export fn`, C WPROBE_HANDLER, Rust handler!, AssemblyScript `export function` in the entry file",
        ),
        _ => None,
    };
    match hint {
        Some(h) => format!("{e}\nhint: {h}"),
        None => e.to_string(),
    }
}
