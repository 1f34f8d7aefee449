//! The tracer's side of wprobe's in-process agent: the agent object itself
//! (built by this crate's build script and embedded: [`AGENT_OBJECT`]),
//! parsed and checked ([`elf`]); mapping it into a target and talking to it
//! ([`loader`]) through a minimal [`Target`] trait (implemented for the
//! calling process, [`SelfTarget`], and by the runtime for a
//! ptrace-stopped thread); the shared control region ([`region`]);
//! precompiling handler modules for its engine ([`compile`]); choosing the
//! instructions a probe's jump replaces ([`window`]), the padding a near
//! jump's cave goes in ([`nearjump`]) and generating the stubs ([`stub`];
//! a whole function's relocated copy, [`whole`]), whose displaced
//! instructions are relocated by [`reloc`] (the relocator the runtime's
//! ptrace step-over uses too).
//!
//! This crate holds the `unsafe` of the tracer's side (the shared mapping,
//! futexes on it): wprobe's runtime crate denies `unsafe` outside its
//! system-call layer.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod callemu;
pub mod compile;
pub mod elf;
mod insn;
pub mod jumptable;
pub mod loader;
pub mod nearjump;
pub mod region;
pub mod reloc;
pub mod stub;
pub mod tailcall;
pub mod target;
pub mod whole;
pub mod window;

pub use elf::AgentImage;
pub use loader::{LoadedAgent, ModuleSpec, ProbeSpec, SiteSpec, load_agent};
pub use region::{Region, RegionLayout, RunFacts};
pub use target::{SelfTarget, Target};

use anyhow::Result;

/// The agent object (`agent/`, built by this crate's build script),
/// stripped of its symbols and DWARF: the bytes it loads are those of
/// `OUT_DIR/wprobe-agent.so`, which keeps them for profiles
/// (`agent/build.sh`).
pub static AGENT_OBJECT: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/wprobe-agent.stripped.so"));

/// Parses and checks the embedded agent object.
pub fn agent_image() -> Result<AgentImage> {
    let img = AgentImage::parse(AGENT_OBJECT)?;
    anyhow::ensure!(img.span > 0, "empty agent");
    Ok(img)
}
