//! The handler modules (Wasm): loaded (validated, the ABI gate, the
//! manifest), compiled or taken from the compiled-module cache, run under
//! the engine's sandbox policy with their host imports and service state,
//! and the module-level tools of `wprobe compile` (the post-link step,
//! `--emit wat`) and the scan of which registers a module reads.

pub mod cache;
pub mod engine;
pub mod host;
pub mod load;
pub mod postlink;
pub mod regscan;
pub mod runner;
pub mod services;
pub mod watdump;
