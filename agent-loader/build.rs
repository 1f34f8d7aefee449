//! Builds the in-process agent (`agent/`, its own workspace: a `no_std`
//! static library linked by `ld.lld` into a self-contained object, see
//! `agent/build.sh`) and leaves it in `OUT_DIR` with a copy stripped of
//! its symbols and DWARF, which `lib.rs` embeds:
//! every `cargo build`/`test`/`clippy`/`doc` of the workspace builds the
//! agent the wprobe binary carries, nothing is built by hand. The nested
//! cargo has its own target directory (`agent/target`), so it never waits
//! for the outer build's lock, and is told nothing of the outer build's
//! wrappers or flags (clippy's driver, coverage flags) meant for this
//! workspace.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = here.parent().expect("crate in a workspace").to_path_buf();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    for p in [
        "agent/src",
        "agent/stubs",
        "agent/Cargo.toml",
        "agent/Cargo.lock",
        "agent/build.sh",
        "agent/check.sh",
        "agent/exports.map",
        "agent-abi/src",
        "agent-abi/Cargo.toml",
        "hostfns/src",
        "hostfns/Cargo.toml",
        "hostabi/src",
        "mapstore/src",
        "rust-toolchain.toml",
    ] {
        println!("cargo::rerun-if-changed={}", root.join(p).display());
    }
    let so = out.join("wprobe-agent.so");
    let mut cmd = Command::new("sh");
    cmd.arg(root.join("agent/build.sh")).arg(&so);
    for v in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_RUSTC_WRAPPER",
        "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PROFILE_RELEASE_DEBUG",
    ] {
        cmd.env_remove(v);
    }
    cmd.env("AGENT_CARGO_FLAGS", "--locked");
    let st = cmd.status().unwrap_or_else(|e| {
        panic!("running agent/build.sh: {e} (it needs sh, cargo, ld.lld and binutils)")
    });
    if !st.success() {
        panic!(
            "agent/build.sh failed ({st}): the in-process agent did not build (it needs ld.lld and \
             binutils' objcopy, readelf and objdump: scripts/setup.sh installs them)"
        );
    }
}
