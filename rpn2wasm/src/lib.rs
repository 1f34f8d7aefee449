//! `rpn2wasm`: the compiler from the dprobes RPN probe language
//! (`spec/rpn-language.md` of the project) to WebAssembly modules that
//! follow the wprobe host ABI (`hostabi`), plus the reference interpreter
//! that defines the language's executable semantics.
//!
//! Pipeline: [`preprocess`] → [`lex`] → [`parse`] → [`check`] →
//! [`ast::Program`] → [`codegen`] (Wasm + manifest) or [`interp`].
//! Nothing in this crate touches a traced process.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod ast;
pub mod check;
pub mod codegen;
pub mod diag;
pub mod fuzzing;
pub mod interp;
pub mod lex;
pub mod manifest;
pub mod model;
pub mod parse;
pub mod preprocess;
pub mod source;
pub mod symbols;

use std::path::PathBuf;

pub use diag::{Diagnostic, Diagnostics};
pub use source::{SourceMap, Span};

/// Build options (the `wprobe compile` flags).
#[derive(Default)]
pub struct Options {
    /// `-D NAME[=VALUE]` definitions, in order (`-D NAME` means value `1`).
    pub defines: Vec<(String, String)>,
    /// `-I DIR` include directories, in order.
    pub include_dirs: Vec<PathBuf>,
    /// Where symbols come from. `None`: the ELF file named by `name =`,
    /// located as spec §5 says (path, else current directory, else `PATH`),
    /// with [`Options::module_dirs`] searched after the current directory.
    pub symbols: Option<Box<dyn symbols::Symbols>>,
    /// Extra directories where a bare `name =` module is looked for, after
    /// the current directory and before `PATH` (`wprobe run` adds the traced
    /// command's directory).
    pub module_dirs: Vec<PathBuf>,
}

/// A compiled program: the checked AST, the manifest and the Wasm module.
pub struct Compiled {
    /// The checked program.
    pub program: ast::Program,
    /// The manifest written into the module.
    pub manifest: hostabi::manifest::Manifest,
    /// The module bytes (custom section `wprobe.manifest` included).
    pub wasm: Vec<u8>,
}

/// Runs the front end on the file at `path`: preprocess, parse and check.
/// On failure, every error found is returned with the files needed to render it.
pub fn frontend(
    path: &std::path::Path,
    opts: &Options,
) -> Result<(ast::Program, SourceMap), (Diagnostics, SourceMap)> {
    parse::parse_file(path, opts)
}

/// Runs the front end on in-memory text (`path` is used for messages and
/// relative includes).
pub fn frontend_str(
    path: &std::path::Path,
    text: &str,
    opts: &Options,
) -> Result<(ast::Program, SourceMap), (Diagnostics, SourceMap)> {
    parse::parse_text(path, text.as_bytes().to_vec(), opts)
}

/// Compiles a checked program to a module.
pub fn compile_program(program: ast::Program) -> Compiled {
    let manifest = manifest::build(&program);
    let wasm = codegen::generate(&program, &manifest);
    Compiled {
        program,
        manifest,
        wasm,
    }
}

/// Front end plus code generation for the file at `path`.
pub fn compile(
    path: &std::path::Path,
    opts: &Options,
) -> Result<(Compiled, SourceMap), (Diagnostics, SourceMap)> {
    let (program, map) = frontend(path, opts)?;
    Ok((compile_program(program), map))
}
