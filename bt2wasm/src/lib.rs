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
pub mod diag;
pub mod dwarf;
pub mod elf;
pub mod ir;
pub mod lex;
pub mod parse;
pub mod probes;
