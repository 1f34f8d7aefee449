//! The tracer's half of the engine contract: a std + Cranelift engine whose
//! precompiled modules the agent's `no_std` engine accepts. The tunables
//! come from `agent_abi::engine::configure` (the agent applies the same);
//! the Cranelift side adds the optimisation level and turns off every
//! VEX/EVEX-encoded ISA extension (`agent_abi::engine::CRANELIFT_FLAGS_OFF`).
//!
//! `Engine::precompile_compatibility_hash` of this engine differs from the
//! runtime's own engine, so a module cache keyed on it keeps agent artifacts
//! apart without further work.

use anyhow::Result;
use wasmtime::{Config, Engine, OptLevel};

/// The `Config` of modules compiled for the agent.
pub fn agent_config() -> Config {
    let mut c = Config::new();
    agent_abi::engine::configure(&mut c);
    c.cranelift_opt_level(OptLevel::Speed);
    for f in agent_abi::engine::CRANELIFT_FLAGS_OFF {
        // SAFETY: turning a CPU feature off only restricts the instructions
        // Cranelift may emit; every such flag exists in Cranelift 0.135
        // (cranelift-codegen-meta/src/isa/x86.rs), checked by a test.
        unsafe {
            c.cranelift_flag_set(f, "false");
        }
    }
    c
}

/// An engine with [`agent_config`].
pub fn agent_engine() -> Result<Engine> {
    Ok(Engine::new(&agent_config())?)
}

/// Compiles a Wasm module (binary or WAT) for the agent.
pub fn precompile(engine: &Engine, wasm: &[u8]) -> Result<Vec<u8>> {
    Ok(engine.precompile_module(wasm)?)
}
