//! The Rust guest SDK's bindings (`guests/rust/src/abi.rs`) must equal the
//! file rendered from this crate; run with `BLESS=1` to rewrite them after
//! a change of the ABI. And every host import must have a safe wrapper in
//! the SDK (a call `raw::NAME(` in one of its other source files).

use std::path::Path;

fn repo_file(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

#[test]
fn rust_sdk_bindings_are_current() {
    let path = repo_file(hostabi::rustsdk::PATH);
    let now = hostabi::rustsdk::render();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &now).unwrap();
        return;
    }
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        old == now,
        "guests/rust/src/abi.rs is stale: run `BLESS=1 cargo test -p hostabi --test rustsdk`"
    );
}

#[test]
fn every_import_has_a_safe_wrapper_in_the_rust_sdk() {
    let src_dir = repo_file("guests/rust/src");
    let mut src = String::new();
    let mut files = 0;
    for f in std::fs::read_dir(&src_dir).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "rs") && !p.ends_with("abi.rs") {
            src += &std::fs::read_to_string(&p).unwrap();
            files += 1;
        }
    }
    assert!(files > 0, "no sources in {}", src_dir.display());
    let missing: Vec<&str> = hostabi::HOST_IMPORTS
        .iter()
        .map(|i| i.name)
        .filter(|n| !src.contains(&format!("raw::{n}(")))
        .collect();
    assert_eq!(
        missing,
        Vec::<&str>::new(),
        "host imports without a safe wrapper in guests/rust/src"
    );
}
