//! `guests/c/wprobe.h` must equal the header rendered from this crate.
//! Run with `BLESS=1` to rewrite it after a change of the ABI.

#[test]
fn c_header_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../guests/c/wprobe.h");
    let now = hostabi::cheader::render();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, &now).unwrap();
        return;
    }
    let old = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        old == now,
        "guests/c/wprobe.h is stale: run `BLESS=1 cargo test -p hostabi --test cheader`"
    );
}
