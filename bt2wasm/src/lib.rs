//! `bt2wasm`: the compiler of bpftrace's language (its user-space subset,
//! bpftrace 0.17's behaviour) and of uprobe-event fetch-args to wprobe
//! handler modules: a Wasm module per program, with the `wprobe.manifest`
//! and `wprobe.events` sections, importing only `hostabi` functions.
//!
//! Pipeline: [`lex`] → [`parse`] → [`ast::Program`] → [`check`] (probes
//! expanded, names resolved, types inferred) → [`ir::Module`] →
//! [`codegen`] (Wasm). Errors are [`diag::Diagnostics`] with spans
//! rendered as `file:line:col` with a caret. Nothing here touches a
//! traced process; compilation reads the probed binaries (symbols,
//! instructions, DWARF) from disk.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod ast;
pub mod check;
pub mod codegen;
pub mod ctypes;
pub mod diag;
pub mod dwarf;
pub mod elf;
pub mod events;
pub mod ir;
pub mod lex;
pub mod params;
pub mod parse;
pub mod probes;

pub use diag::{Diagnostic, Diagnostics};
pub use rpn2wasm::SourceMap;

use std::path::PathBuf;

/// Build options (the `wprobe run` / `wprobe compile` flags that matter).
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Meaning-changing options (string size, map size, ...).
    pub check: check::Options,
    /// `-p PID`: uprobes may leave the binary out; library names resolve
    /// to what the process maps.
    pub pid: Option<i32>,
    /// The traced command's executable (`-c` / `--`): watchpoints' module.
    pub command: Option<PathBuf>,
    /// Positional parameters (`$1`, `$2`, ...; `$#` is their count).
    pub params: Vec<String>,
    /// The run traces no process (no `-c`, command or `-p`): uprobes and
    /// watchpoints are refused at their attach point (wprobe traces
    /// processes, not the whole system).
    pub no_process: bool,
    /// The run's transport can probe a function whose symbol has size 0
    /// (`_init`: ptrace and perf need no function bounds, the in-process
    /// transport does); with `--unsafe` such a probe is then accepted.
    pub unsized_symbols: bool,
}

/// The probe-expansion environment of a build (`listing`: for `-l`,
/// which attaches nothing and so needs no process).
fn env_of(opts: &Options, listing: bool) -> probes::Env {
    probes::Env {
        pid: opts.pid,
        command: opts.command.clone(),
        mapped: opts.pid.map(mapped_files).unwrap_or_default(),
        no_process: opts.no_process && !listing,
        unsafe_calls: opts.check.unsafe_calls || listing,
        unsized_symbols: opts.unsized_symbols || listing,
        ..Default::default()
    }
}

/// A compiled program.
pub struct Compiled {
    /// The module bytes (with the manifest and events sections).
    pub wasm: Vec<u8>,
    /// The IR it was generated from (manifest and events included).
    pub module: ir::Module,
    /// What the program's `config` block decides for the run.
    pub config: check::config::RunConfig,
    /// Warnings to print before the run (attach points skipped).
    pub warnings: Vec<String>,
}

impl Compiled {
    /// The manifest written into the module.
    pub fn manifest(&self) -> &hostabi::manifest::Manifest {
        &self.module.manifest
    }
}

/// Compiles program text; `name` is the file name used in messages
/// (`-e` for a command-line program). On failure, every error found and the
/// source map to render them with (`Diagnostics::render`).
pub fn compile(
    name: &str,
    text: &str,
    opts: &Options,
) -> Result<Compiled, (Diagnostics, SourceMap)> {
    let (ast, map) = parsed(name, text, opts)?;
    let mut env = env_of(opts, false);
    let checked = check::check(&ast, &mut env, &opts.check).map_err(|d| (d, map))?;
    let wasm = codegen::generate(&checked.module);
    Ok(Compiled {
        wasm,
        module: checked.module,
        config: checked.config,
        warnings: checked.warnings,
    })
}

/// Program text parsed (`name` its file name in messages), its positional
/// parameters substituted; the source map it was read into.
fn parsed(
    name: &str,
    text: &str,
    opts: &Options,
) -> Result<(ast::Program, SourceMap), (Diagnostics, SourceMap)> {
    let mut map = SourceMap::default();
    let file = map.add(PathBuf::from(name), text.as_bytes().to_vec());
    let (mut ast, sink) = parse::parse(text.as_bytes(), file);
    if !sink.is_empty() {
        return Err((sink.finish(), map));
    }
    params::substitute(&mut ast, &opts.params);
    Ok((ast, map))
}

/// The probes a program attaches (`wprobe run -l -e PROGRAM`): each
/// attach point expanded as `compile` expands it (wildcards against the
/// binaries' symbols, positional parameters substituted), by name.
pub fn probe_names(
    name: &str,
    text: &str,
    opts: &Options,
) -> Result<Vec<String>, (Diagnostics, SourceMap)> {
    let (ast, map) = parsed(name, text, opts)?;
    let mut env = env_of(opts, true);
    let mut diags = diag::Sink::default();
    let mut names = Vec::new();
    for p in &ast.probes {
        for (t, span) in &p.attach {
            names.extend(
                probes::expand(t, *span, &mut env, &mut diags)
                    .into_iter()
                    .map(|c| c.name),
            );
        }
    }
    if !diags.is_empty() {
        return Err((diags.finish(), map));
    }
    Ok(names)
}

/// Files mapped by process `pid` (for library names with `-p`).
fn mapped_files(pid: i32) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut v: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.starts_with('/'))
        .map(str::to_string)
        .collect();
    v.dedup();
    v
}

/// Compiles probe events (`--event` specs, uprobe_events syntax) into one
/// module: one probe and one printf event per spec. Each spec is its own
/// source "file" (`--event #N`) in messages.
pub fn compile_events(
    specs: &[String],
    opts: &Options,
) -> Result<Compiled, (Diagnostics, SourceMap)> {
    let mut map = SourceMap::default();
    let mut sink = diag::Sink::default();
    let mut env = env_of(opts, false);
    let mut cx = events::EventCx {
        env: &mut env,
        diags: &mut sink,
        strings: Vec::new(),
        events: hostabi::event::Events::default(),
    };
    let mut concrete = Vec::new();
    let mut handlers = Vec::new();
    for (i, s) in specs.iter().enumerate() {
        let file = map.add(
            PathBuf::from(format!("--event #{}", i + 1)),
            s.as_bytes().to_vec(),
        );
        if let Some((c, h)) = events::compile_event(&mut cx, s, file) {
            concrete.push(vec![c]);
            handlers.push(h);
        }
    }
    let events = std::mem::take(&mut cx.events);
    let data = std::mem::take(&mut cx.strings);
    if !sink.is_empty() {
        return Err((sink.finish(), map));
    }
    let module = check::module_of(handlers, &concrete, data, events, &opts.check);
    let wasm = codegen::generate(&module);
    Ok(Compiled {
        wasm,
        module,
        config: check::config::RunConfig::default(),
        warnings: Vec::new(),
    })
}
