//! Empty stand-in for `memfd` 0.6. wasmtime 48 lists `memfd` as a Linux
//! dependency of its `runtime` feature, but only its `std` platform layer
//! (`sys/unix`) uses it; the agent builds wasmtime without `std` (custom
//! platform), where nothing refers to it. The real crate pulls `rustix` with
//! `std`, i.e. the standard library, into a `no_std` object.
#![no_std]
