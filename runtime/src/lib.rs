//! The wprobe runtime: loads handler modules (compiled RPN, WAT, any
//! wasm32 language), runs them under wasmtime with fuel and memory limits
//! when probes fire in traced processes, and decodes and prints what they
//! log. This is the only crate of the project with `unsafe` code, and it is
//! confined to the providers (`provider/**`), architecture code (`arch/**`)
//! and the deserialization of trusted compiled modules (`cache.rs`).

#![warn(missing_docs)]

pub mod arch;
pub mod benchcmd;
pub mod btout;
pub mod btrun;
pub mod cache;
pub mod cli;
pub mod coredump;
pub mod elfsym;
pub mod engine;
pub mod format;
pub mod handlers;
pub mod host;
pub mod listcmd;
pub mod load;
pub mod probespec;
pub mod procmaps;
pub mod programs;
pub mod provider;
pub mod regscan;
pub mod resolve;
pub mod runcmd;
pub mod services;
pub mod session;
pub mod sink;
pub mod symbolize;
pub mod watdump;
