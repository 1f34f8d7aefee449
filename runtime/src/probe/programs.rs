//! Loading the probe programs given to `wprobe run` and `wprobe bench`:
//! `.rpn` compiled on the fly, `.wasm` and `.wat` checked against the ABI,
//! with `--probe LOCATION=EXPORT` for modules without a manifest (or to
//! re-target one that has a manifest: its settings stay, its probes are
//! replaced by those given on the command line). wasmtime's compilation
//! comes from the compiled-module cache when it has it (`cache.rs`).

use crate::wasm::cache::{Cache, CacheOutcome};
use crate::wasm::load::LoadedModule;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A program given on the command line, loaded.
pub struct LoadedProgram {
    /// Label for output (file stem).
    pub label: String,
    /// The loaded module.
    pub module: LoadedModule,
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

/// Splits `NAME[=VALUE]` (`-D NAME` means 1).
pub fn parse_define(d: &str) -> (String, String) {
    match d.split_once('=') {
        Some((n, v)) => (n.trim().to_string(), v.trim().to_string()),
        None => (d.trim().to_string(), "1".to_string()),
    }
}

/// What loading a run's programs reads of its command line (`wprobe run`'s
/// arguments, borrowed).
#[derive(Debug, Clone, Copy)]
pub struct ProgramArgs<'a> {
    /// Every program file of the run.
    pub programs: &'a [PathBuf],
    /// The `--probe LOCATION=EXPORT` specs.
    pub probes: &'a [String],
    /// How the programs are built and run.
    pub opts: &'a ProgramOpts,
    /// The command to launch (empty when attaching).
    pub command: &'a [OsString],
    /// The process to attach to.
    pub pid: Option<i32>,
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

/// The diagnostics and the summary of a message made by
/// [`diagnostics_failure`] (`None` for any other message).
pub fn split_diagnostics(message: &str) -> Option<(&str, &str)> {
    message.split_once(DIAGNOSTICS_END)
}

/// Directory of the traced command's executable (found through `PATH` like exec does).
pub fn command_dir(command: &[OsString]) -> Option<PathBuf> {
    let cmd = Path::new(command.first()?);
    let exe = if cmd.components().count() > 1 {
        cmd.to_path_buf()
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join(cmd))
            .find(|p| p.is_file())?
    };
    exe.parent().map(|p| {
        if p.as_os_str().is_empty() {
            Path::new(".").to_path_buf()
        } else {
            p.to_path_buf()
        }
    })
}

/// Compiles an `.rpn` program with the `-D`/`-I` options; a bare `name =`
/// is also looked for next to the traced command.
pub fn compile_rpn_for(
    path: &Path,
    opts: &ProgramOpts,
    command: &[std::ffi::OsString],
) -> Result<(Vec<u8>, rpn2wasm::ast::Program), String> {
    let dirs = command_dir(command).into_iter().collect();
    compile_rpn(path, &opts.define, &opts.include, dirs)
}

/// Loads one program file, taking wasmtime's compilation from `cache`
/// when it has it. With `WPROBE_DEBUG` set, says on stderr what the cache
/// did (`wprobe: debug: module cache hit: PATH`, or `… miss: PATH (why;
/// stored[; evicted N entries (B bytes)])`).
pub fn load_program_with_cache(
    engine: &wasmtime::Engine,
    path: &Path,
    a: &ProgramArgs,
    cache: &Cache,
) -> Result<LoadedProgram, String> {
    let is_rpn = |p: &Path| p.extension().is_some_and(|e| e == "rpn");
    if !a.probes.is_empty() && a.programs.iter().all(|p| is_rpn(p)) {
        return Err(
            "--probe binds exports of .wasm or .wat programs, and this run has none (.rpn programs carry their own probes)"
                .into(),
        );
    }
    let label = program_label(path);
    let loaded = if is_rpn(path) {
        let (wasm, _) = compile_rpn_for(path, a.opts, a.command)?;
        crate::wasm::load::load_cached(engine, &wasm, None, None, cache)
    } else {
        let bytes = read_module_file(path)?;
        let cli = cli_manifest(&bytes, path, a)?;
        crate::wasm::load::load_cached(engine, &bytes, Some(path), cli, cache)
    };
    let (module, outcome) = loaded.map_err(|e| format!("loading {}: {e}", path.display()))?;
    debug_cache_outcome(path, &outcome);
    Ok(LoadedProgram { label, module })
}

/// With `WPROBE_DEBUG` set, one stderr line on what the cache did for `path`.
pub fn debug_cache_outcome(path: &Path, outcome: &CacheOutcome) {
    if std::env::var_os("WPROBE_DEBUG").is_none() {
        return;
    }
    match outcome {
        CacheOutcome::Hit => crate::elog!("wprobe: debug: module cache hit: {}", path.display()),
        CacheOutcome::Miss {
            why,
            stored,
            evicted,
        } => {
            let mut stored = match stored {
                Ok(()) => "stored".to_string(),
                Err(e) => format!("not stored: {e}"),
            };
            if !evicted.is_empty() {
                stored = format!("{stored}; {evicted}");
            }
            crate::elog!(
                "wprobe: debug: module cache miss: {} ({why}; {stored})",
                path.display()
            );
        }
    }
}

/// The label of a program in output: its file stem.
pub fn program_label(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "program".into())
}

/// Compiles an `.rpn` program with `-D` / `-I` options, a bare `name =`
/// also looked for in `module_dirs`; returns the module and the checked
/// program (the reference interpreter runs it in `wprobe bench --interp`),
/// or the rendered diagnostics.
pub fn compile_rpn(
    path: &Path,
    defines: &[String],
    include: &[std::path::PathBuf],
    module_dirs: Vec<std::path::PathBuf>,
) -> Result<(Vec<u8>, rpn2wasm::ast::Program), String> {
    let opts = rpn2wasm::Options {
        defines: defines.iter().map(|d| parse_define(d)).collect(),
        include_dirs: include.to_vec(),
        symbols: None,
        module_dirs,
    };
    match rpn2wasm::compile(path, &opts) {
        Ok((c, _)) => Ok((c.wasm, c.program)),
        Err((d, map)) => {
            let n = d.0.len();
            Err(diagnostics_failure(
                &d.render(&map),
                &format!(
                    "could not compile `{}` ({n} error{})",
                    path.display(),
                    if n == 1 { "" } else { "s" }
                ),
            ))
        }
    }
}

/// The traced executable: the command (found through `PATH`), or `/proc/PID/exe`.
fn default_module(a: &ProgramArgs) -> Option<String> {
    if let Some(pid) = a.pid {
        return std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
    }
    let cmd = Path::new(a.command.first()?);
    let name = cmd.file_name()?;
    Some(
        command_dir(a.command)?
            .join(name)
            .to_string_lossy()
            .into_owned(),
    )
}

/// Function exports of a `.wasm` / `.wat` file (`None` when it does not load).
fn exports_of(path: &Path) -> Option<Vec<String>> {
    let bytes = read_module_file(path).ok()?;
    let wasm = crate::wasm::load::to_wasm(&bytes).ok()?;
    let facts = crate::wasm::load::inspect(&wasm).ok()?;
    Some(facts.func_exports.into_keys().collect())
}

/// The manifest made of the `--probe` specs this module exports a handler
/// for (`None`: no spec is for it, its own manifest applies). Every spec must
/// name an export of some `.wasm` / `.wat` program of the run; that is
/// checked when the last of them is loaded.
fn cli_manifest(
    bytes: &[u8],
    path: &Path,
    a: &ProgramArgs,
) -> Result<Option<hostabi::manifest::Manifest>, String> {
    if a.probes.is_empty() {
        return Ok(None);
    }
    let specs = a
        .probes
        .iter()
        .map(|s| crate::probe::probespec::parse(s).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    // Errors of the module itself are reported by the load proper.
    let Ok(wasm) = crate::wasm::load::to_wasm_named(bytes, Some(path)) else {
        return Ok(None);
    };
    let Ok(facts) = crate::wasm::load::inspect(&wasm) else {
        return Ok(None);
    };
    let is_module = |p: &&std::path::PathBuf| p.extension().is_none_or(|e| e != "rpn");
    let others: Vec<&std::path::PathBuf> = a.programs.iter().filter(is_module).collect();
    if others.last().is_some_and(|l| *l == path) {
        let exports: Vec<Vec<String>> = others
            .iter()
            .filter(|p| **p != path)
            .filter_map(|p| exports_of(p))
            .collect();
        for (spec, parsed) in a.probes.iter().zip(&specs) {
            let known = facts.func_exports.contains_key(&parsed.export)
                || exports.iter().any(|e| e.contains(&parsed.export));
            if !known {
                let whose = if others.len() == 1 {
                    format!("{} does not export", path.display())
                } else {
                    "no .wasm/.wat program exports".to_string()
                };
                return Err(format!(
                    "--probe `{spec}`: {whose} a function `{}`",
                    parsed.export
                ));
            }
        }
    }
    let mine: Vec<_> = specs
        .into_iter()
        .filter(|p| facts.func_exports.contains_key(&p.export))
        .collect();
    if mine.is_empty() {
        return Ok(None);
    }
    crate::probe::probespec::manifest(&mine, facts.manifest.as_ref(), default_module(a).as_deref())
        .map(Some)
}

/// Largest `.wasm` or `.wat` file read (bytes): far above any handler
/// module (the 1,000-instruction benchmark program is 40 KB), low enough
/// that a wrong path cannot make wprobe read gigabytes.
pub const MAX_MODULE_FILE_BYTES: u64 = 64 << 20;

/// Reads a handler module file: a regular file of at most
/// [`MAX_MODULE_FILE_BYTES`] (`wprobe run /dev/zero` is an error, not an
/// endless read).
pub fn read_module_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let err = |e: std::io::Error| format!("reading {}: {e}", path.display());
    let f = std::fs::File::open(path).map_err(err)?;
    let meta = f.metadata().map_err(err)?;
    if !meta.is_file() {
        return Err(format!("reading {}: not a regular file", path.display()));
    }
    let mut bytes = Vec::new();
    f.take(MAX_MODULE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(err)?;
    if bytes.len() as u64 > MAX_MODULE_FILE_BYTES {
        return Err(format!(
            "reading {}: larger than {MAX_MODULE_FILE_BYTES} bytes, not a handler module",
            path.display()
        ));
    }
    Ok(bytes)
}
