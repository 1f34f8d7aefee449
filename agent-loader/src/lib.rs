//! The tracer's side of wprobe's in-process agent: parse and check the agent
//! object ([`elf`]), map it into a target and initialise it ([`loader`]),
//! through a minimal [`Target`] trait (implemented for the calling process,
//! [`SelfTarget`], and for a ptrace-stopped thread, [`ptrace::PtraceTarget`]),
//! share a control region with it ([`region`]), and precompile handler
//! modules for its engine ([`compile`]).

pub mod compile;
pub mod elf;
pub mod loader;
pub mod ptrace;
pub mod region;
pub mod stub;
pub mod target;

pub use elf::AgentImage;
pub use loader::{LoadedAgent, ModuleSpec, load_agent};
pub use region::{Region, RegionLayout};
pub use target::{SelfTarget, Target};

use anyhow::{Context, Result, ensure};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The repository root (parent of this crate).
fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crate in a workspace")
        .to_path_buf()
}

/// Path of the agent object, built by `agent/build.sh` (once per process;
/// cargo makes it a no-op when nothing changed). `WPROBE_AGENT` overrides.
pub fn agent_path() -> Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("WPROBE_AGENT") {
                return Ok(PathBuf::from(p));
            }
            let root = repo_root();
            let out = root.join("target/agent/wprobe-agent.so");
            let st = std::process::Command::new("sh")
                .arg(root.join("agent/build.sh"))
                .arg(&out)
                .env_remove("CARGO_TARGET_DIR")
                .env_remove("RUSTFLAGS")
                .status()
                .map_err(|e| format!("running agent/build.sh: {e}"))?;
            if !st.success() {
                return Err(format!("agent/build.sh failed: {st}"));
            }
            Ok(out)
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// Reads and checks the agent object.
pub fn agent_image() -> Result<AgentImage> {
    let p = agent_path()?;
    let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
    let img = AgentImage::parse(&bytes)?;
    ensure!(img.span > 0, "empty agent");
    Ok(img)
}
