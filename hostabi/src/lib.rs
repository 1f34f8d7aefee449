//! The wprobe host ABI: the one source of truth shared by the RPN compiler,
//! the runtime, the guest SDKs and the generated C header.
//!
//! A handler module is a core WebAssembly module that
//!
//! * imports only functions of module [`IMPORT_MODULE`], each listed by
//!   [`foreach_host_import!`] with exactly the signature given there;
//! * exports its linear memory as `memory`;
//! * exports one handler function `() -> i32` per probe point, returning an
//!   [`Outcome`] code;
//! * carries a custom section [`MANIFEST_SECTION`] whose payload is a
//!   [`manifest::Manifest`] (text, versioned) naming the probe points and
//!   their handler exports, and the [`ABI_VERSION`] it was built for.
//!
//! Log records follow the wire format of [`record`]; register ids are those
//! of [`regs`]; recoverable failures of imports are [`Status`] codes.
//!
//! This crate has no dependencies, no `unsafe` and never panics on input.

#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

extern crate alloc;

pub mod ascsdk;
pub mod cheader;
pub mod env;
pub mod event;
pub mod imports;
pub mod layout;
pub mod manifest;
pub mod maps;
pub mod record;
pub mod regs;
pub mod rustsdk;
pub mod sdkfacts;
pub mod snapshot;
pub mod status;
pub mod usdt;
pub mod zigsdk;

pub use imports::{HOST_IMPORTS, HostImport, ImportId, ValType};
pub use status::{Exception, Outcome, Status};

/// Version of the host ABI. Any change to the rendered snapshot
/// (`hostabi/abi.txt`) must bump it.
pub const ABI_VERSION: u32 = 5;

/// The oldest version a host of this version still runs: versions 2 to 5
/// only added imports (2: maps, events, clocks, return probes; 3:
/// `map_entry`; 4: `usdt_arg`; 5: `current_gid`, `current_numa_node`, the
/// `BOOTTIME` and `TAI` clocks, the `EXIT` event) and manifest keys, so a module built for
/// version 1 loads unchanged.
pub const MIN_ABI_VERSION: u32 = 1;

/// Wasm import module name of every host import.
pub const IMPORT_MODULE: &str = "wprobe";

/// Name of the custom section carrying the manifest.
pub const MANIFEST_SECTION: &str = "wprobe.manifest";

/// Name of the exported linear memory through which pointers are passed.
pub const MEMORY_EXPORT: &str = "memory";

/// Optional export `() -> i32` of RPN modules: called by the runtime (with a
/// small fresh fuel budget) after a handler ran out of fuel, it emits the
/// records of the interrupted run, as spec §16 [A 13] asks.
pub const FLUSH_EXPORT: &str = "wprobe_flush";
