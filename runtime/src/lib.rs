//! The wprobe runtime: loads handler modules (compiled RPN, WAT, any
//! wasm32 language), runs them under wasmtime with fuel and memory limits
//! when probes fire in traced processes, and decodes and prints what they
//! log. Its `unsafe` code is confined to the system-call layer ([`sys`])
//! and the deserialization of trusted compiled modules ([`wasm::cache`]); both
//! are exceptions to the crate's `deny(unsafe_code)`, and every `unsafe`
//! block carries a `SAFETY:` comment (`clippy::undocumented_unsafe_blocks`).
//! The other crates with `unsafe` code (the in-process agent, `agent/`,
//! and its loader, `agent-loader`) are linted the same way.
//!
//! The modules are stages, lowest first, each importing only those before
//! it (docs/architecture.md, "Stages and their order"): [`sys`] (the
//! system calls, the kernel's register files), [`arch`] (registers by id,
//! instruction decoding), [`proc`] (`/proc`, signals, private files),
//! [`out`] (records and what prints them), [`wasm`] (handler modules
//! loaded, cached and run), [`probe`] (the programs and their probes,
//! resolution), [`transport`] (how probes reach a process), [`plan`] (the
//! transport chosen for a run), [`session`] (a run) and [`cmd`] (the
//! command line and the subcommands).

#![warn(missing_docs)]
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod arch;
pub mod cmd;
pub mod out;
pub mod plan;
pub mod probe;
pub mod proc;
pub mod session;
#[expect(
    unsafe_code,
    reason = "the system-call layer: every unsafe block of the crate but one is here"
)]
pub mod sys;
pub mod transport;
pub mod wasm;
