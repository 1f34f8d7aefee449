//! The wprobe runtime: loads handler modules (compiled RPN, WAT, any
//! wasm32 language), runs them under wasmtime with fuel and memory limits
//! when probes fire in traced processes, and decodes and prints what they
//! log. Its `unsafe` code is confined to the system-call layer ([`sys`])
//! and the deserialization of trusted compiled modules ([`cache`]); both
//! are exceptions to the crate's `deny(unsafe_code)`, and every `unsafe`
//! block carries a `SAFETY:` comment (`clippy::undocumented_unsafe_blocks`).
//! The other crates with `unsafe` code (the in-process agent, `agent/`,
//! and its loader, `agent-loader`) are linted the same way.

#![warn(missing_docs)]
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod addr;
pub mod arch;
pub mod btout;
pub mod cache;
pub mod cli;
pub mod cmd;
pub mod cmdline;
pub mod engine;
pub mod format;
pub mod host;
pub mod load;
pub mod metrics;
pub mod output;
pub mod plan;
pub mod postlink;
pub mod privdir;
pub mod probespec;
pub mod procinfo;
pub mod procmaps;
pub mod programs;
pub mod regscan;
pub mod resolve;
pub mod runner;
pub mod services;
pub mod session;
pub mod sink;
pub mod stopsig;
pub mod symbolize;
#[expect(
    unsafe_code,
    reason = "the system-call layer: every unsafe block of the crate but one is here"
)]
pub mod sys;
pub mod transport;
pub mod watdump;
