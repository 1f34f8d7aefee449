//! The Zig and AssemblyScript SDKs (`guests/zig/wprobe.zig`,
//! `guests/assemblyscript/wprobe.ts`) must equal the files rendered from
//! this crate, as the C header and the Rust SDK's bindings must; run with
//! `BLESS=1` to rewrite them after a change of the ABI.

use std::path::Path;

fn check(rel: &str, now: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, now).unwrap();
        return;
    }
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        old == now,
        "{rel} is stale: run `BLESS=1 cargo test -p hostabi --test langsdk`"
    );
}

#[test]
fn zig_sdk_is_current() {
    check(hostabi::zigsdk::PATH, &hostabi::zigsdk::render());
}

#[test]
fn assemblyscript_sdk_is_current() {
    check(hostabi::ascsdk::PATH, &hostabi::ascsdk::render());
}
