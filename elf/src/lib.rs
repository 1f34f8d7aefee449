//! Module files as wprobe sees them, for the compilers (`rpn2wasm`, the
//! one-liner front end) and the runtime alike, so that a name means the
//! same thing everywhere:
//!
//! * [`info`]: ELF symbols and the one symbol-matching rule
//!   ([`ElfInfo::lookup`]), segments, sonames; only regular files of
//!   bounded size are read;
//! * [`functions`]: the one function-enumeration rule: a module's
//!   functions by address, each with its aliases in one order of
//!   preference, fragments and unnamed functions told, and a pattern
//!   matcher over every alias (for `list`, `trace` and the one-liners);
//! * [`locate`]: which file a module name means (path, base name, soname,
//!   short library name; `ld.so.cache` through [`ldcache`]);
//! * [`startup`]: the libraries a program loads at startup, found as the
//!   dynamic linker will find them;
//! * [`disasm`]: instruction boundaries, decoded from a function's start;
//! * [`mod@demangle`]: C++ and Rust names as people read them;
//! * [`mod@glob`]: shell-style name patterns;
//! * [`usdt`]: USDT probes (`.note.stapsdt`) and their argument specs.
//!
//! Nothing here touches a running process. The one `unsafe` is the
//! mapping of a module file (`filebytes`), an exception to the crate's
//! `deny(unsafe_code)`.
#![deny(unsafe_code)]

pub mod demangle;
pub mod disasm;
mod filebytes;
pub mod functions;
pub mod glob;
pub mod info;
pub mod ldcache;
pub mod locate;
pub mod script;
pub mod startup;
pub mod unwind;
pub mod usdt;

pub use demangle::{demangle, demangle_short};
pub use functions::{Function, Matcher, NameForm};
pub use glob::glob;
pub use info::{ElfError, ElfInfo, Lookup, MAX_MODULE_BYTES, SymKind, Symbol};
