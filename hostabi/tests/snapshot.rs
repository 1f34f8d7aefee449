//! The ABI snapshot test: `abi.txt` must equal the rendered ABI.
//! Run with `BLESS=1` to rewrite it after a deliberate change (and bump
//! `ABI_VERSION`).

#[test]
fn abi_snapshot_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/abi.txt");
    let now = hostabi::snapshot::render();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, &now).unwrap();
        return;
    }
    let old = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        old == now,
        "the host ABI changed: review the diff, bump ABI_VERSION, and run with BLESS=1\n--- abi.txt\n{old}\n--- now\n{now}"
    );
    let version_line = format!("abi_version {}\n", hostabi::ABI_VERSION);
    assert!(old.starts_with(&version_line));
}

#[test]
fn hostabi_reference_doc_is_current() {
    const BEGIN: &str = "<!-- BEGIN GENERATED: hostabi::snapshot::render_markdown -->\n";
    const END: &str = "<!-- END GENERATED -->";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/hostabi.md");
    let doc = std::fs::read_to_string(path).expect("docs/hostabi.md");
    let (head, rest) = doc.split_once(BEGIN).expect("begin marker");
    let (_, tail) = rest.split_once(END).expect("end marker");
    let now = format!(
        "{head}{BEGIN}{}{END}{tail}",
        hostabi::snapshot::render_markdown()
    );
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(path, &now).unwrap();
        return;
    }
    assert!(
        doc == now,
        "docs/hostabi.md is stale: run `BLESS=1 cargo test -p hostabi`"
    );
}
