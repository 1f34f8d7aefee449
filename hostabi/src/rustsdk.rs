//! Renders `guests/rust/src/abi.rs`, the ABI bindings of the Rust guest SDK
//! (`wprobe-guest`), from the same facts as everything else in this crate:
//! the raw import block, the ABI version and manifest section name, the
//! limits, the manifest header, the status and outcome codes, register ids,
//! tokens and item kinds. The file is checked in, so the SDK builds with no
//! dependency on this crate (copied elsewhere, or used by path or git from
//! another project); `hostabi/tests/rustsdk.rs` fails when it is stale
//! (`BLESS=1` rewrites it), as `cheader` does for the C header. The output
//! is already in `rustfmt` style (default settings, edition 2024).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::record::{self, ItemKind, token};
use crate::{HOST_IMPORTS, Outcome, Status, regs};

/// Path of the rendered file, relative to the repository's root.
pub const PATH: &str = "guests/rust/src/abi.rs";

/// Longest line rustfmt leaves alone (its default `max_width`).
const MAX_WIDTH: usize = 100;

/// `UPPER_SNAKE` as `UpperCamel` (`NOT_PERMITTED` -> `NotPermitted`).
fn camel(upper_snake: &str) -> String {
    let mut s = String::new();
    for word in upper_snake.split('_') {
        let mut c = word.chars();
        if let Some(first) = c.next() {
            s.push(first.to_ascii_uppercase());
            s.extend(c.map(|ch| ch.to_ascii_lowercase()));
        }
    }
    s
}

/// Writes `text` as `///` lines indented by `indent`, at most [`MAX_WIDTH`]
/// columns where words allow (rustfmt does not rewrap comments).
fn doc(out: &mut String, indent: &str, text: &str) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + 4 + line.len() + 1 + word.len() > MAX_WIDTH {
            let _ = writeln!(out, "{indent}/// {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    let _ = writeln!(out, "{indent}/// {line}");
}

/// The raw import block: one `pub fn` per host import, in declaration order.
fn raw_imports(s: &mut String) {
    let _ = writeln!(
        s,
        "/// The raw host imports (module `{}`), exactly as `hostabi` declares them.\n///\n/// # Safety\n///\n/// Pointer arguments are offsets in this module's memory that the host writes\n/// or reads; prefer the safe wrappers of the crate root.\npub mod raw {{\n    #[link(wasm_import_module = \"{}\")]\n    unsafe extern \"C\" {{",
        crate::IMPORT_MODULE,
        crate::IMPORT_MODULE
    );
    for (n, i) in HOST_IMPORTS.iter().enumerate() {
        if n > 0 {
            s.push('\n');
        }
        doc(s, "        ", i.doc);
        let params: Vec<String> = i
            .params
            .iter()
            .map(|(name, t)| alloc::format!("{name}: {}", t.wat()))
            .collect();
        let ret = match i.results.first() {
            Some(t) => alloc::format!(" -> {}", t.wat()),
            None => String::new(),
        };
        let one_line = alloc::format!("        pub fn {}({}){ret};", i.name, params.join(", "));
        if one_line.len() <= MAX_WIDTH {
            let _ = writeln!(s, "{one_line}");
        } else {
            // rustfmt's layout of a long signature: one parameter per line.
            let _ = writeln!(s, "        pub fn {}(", i.name);
            for p in &params {
                let _ = writeln!(s, "            {p},");
            }
            let _ = writeln!(s, "        ){ret};");
        }
    }
    let _ = writeln!(s, "    }}\n}}\n");
}

/// ABI version, section name, limits, and the manifest header macro.
fn constants(s: &mut String) {
    let _ = writeln!(
        s,
        "/// Host ABI version these bindings were generated for.\npub const ABI_VERSION: u32 = {};\n",
        crate::ABI_VERSION
    );
    let _ = writeln!(
        s,
        "/// Name of the custom section carrying the manifest.\npub const MANIFEST_SECTION: &str = {:?};\n",
        crate::MANIFEST_SECTION
    );
    for (what, name, value) in [
        (
            "Largest length accepted by `read_mem`, `read_str` and `write_mem`.",
            "MAX_MEM_ACCESS_BYTES",
            crate::imports::MAX_MEM_ACCESS_BYTES as u64,
        ),
        (
            "Largest log data area of one record.",
            "MAX_LOG_DATA_BYTES",
            u64::from(record::MAX_LOG_DATA_BYTES),
        ),
        (
            "Largest number of item descriptors of one record.",
            "MAX_LOG_ITEMS",
            u64::from(record::MAX_LOG_ITEMS),
        ),
        (
            "Largest stack-trace area.",
            "MAX_STACKTRACE_BYTES",
            u64::from(record::MAX_STACKTRACE_BYTES),
        ),
    ] {
        let _ = writeln!(s, "/// {what}\npub const {name}: usize = {value};\n");
    }
    let _ = writeln!(
        s,
        "/// Live calls of a return probe tracked per process when its manifest has no\n/// `maxactive` (or `maxactive 0`).\npub const DEFAULT_MAXACTIVE: u32 = {};\n",
        crate::manifest::DEFAULT_MAXACTIVE
    );
    let _ = writeln!(
        s,
        "/// Largest `maxactive` of a return probe.\npub const MAX_MAXACTIVE: u32 = {};\n",
        crate::manifest::MAX_MAXACTIVE
    );
    let _ = writeln!(
        s,
        "/// The manifest header lines (`wprobe-manifest` format and ABI version), used by\n/// [`manifest!`](crate::manifest!).\n#[doc(hidden)]\n#[macro_export]\nmacro_rules! __manifest_head {{\n    () => {{\n        \"{} {}\\nabi {}\\n\"\n    }};\n}}\n",
        crate::manifest::MAGIC,
        crate::manifest::FORMAT_VERSION,
        crate::ABI_VERSION
    );
}

/// `Status` (without OK) with its `check`, and `Outcome`.
fn codes(s: &mut String) {
    let failures = || Status::ALL.iter().filter(|st| **st != Status::Ok);
    let _ = writeln!(
        s,
        "/// Recoverable failures reported by host imports.\n#[derive(Clone, Copy, Debug, PartialEq, Eq)]\n#[repr(i32)]\npub enum Status {{"
    );
    for st in failures() {
        let _ = writeln!(
            s,
            "    /// `{}`\n    {} = {},",
            st.name(),
            camel(st.name()),
            *st as i32
        );
    }
    let _ = writeln!(
        s,
        "}}\n\nimpl Status {{\n    /// `Ok(())` for OK (0), the status otherwise (unknown codes read as `BadArgument`).\n    pub fn check(code: i32) -> Result<(), Status> {{\n        match code {{\n            0 => Ok(()),"
    );
    for st in failures() {
        let _ = writeln!(
            s,
            "            {} => Err(Status::{}),",
            *st as i32,
            camel(st.name())
        );
    }
    let _ = writeln!(
        s,
        "            _ => Err(Status::BadArgument),\n        }}\n    }}\n}}\n"
    );
    let _ = writeln!(
        s,
        "/// How a handler run ends: the value a handler returns.\n#[derive(Clone, Copy, Debug, PartialEq, Eq)]\n#[repr(i32)]\npub enum Outcome {{"
    );
    for o in Outcome::ALL {
        let _ = writeln!(
            s,
            "    /// `{}`\n    {} = {},",
            o.name(),
            camel(o.name()),
            *o as i32
        );
    }
    let _ = writeln!(s, "}}\n");
}

/// Register ids, log tokens and item kinds.
fn ids(s: &mut String) {
    let _ = writeln!(
        s,
        "/// Register ids for [`read_reg`](crate::read_reg) and [`write_reg`](crate::write_reg) (x86-64).\npub mod reg {{\n    use crate::Reg;\n"
    );
    for (n, r) in regs::REGS.iter().enumerate() {
        if n > 0 {
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "    /// `{}`: {} bits{}.\n    pub const {}: Reg = Reg(0x{:03x});",
            r.name,
            r.width,
            if r.writable { ", writable" } else { "" },
            r.name.to_ascii_uppercase(),
            r.id
        );
    }
    let entry: Vec<String> = regs::ENTRY_REGS
        .iter()
        .filter_map(|id| regs::by_id(*id).map(|r| r.name.to_ascii_uppercase()))
        .collect();
    let _ = writeln!(
        s,
        "\n    /// The registers whose entry values a return probe's handler reads\n    /// ([`entry_arg`](crate::entry_arg), [`entry_rsp`](crate::entry_rsp)): the\n    /// six argument registers in order, then `rsp`.\n    pub const ENTRY: [Reg; {}] = [{}];",
        entry.len(),
        entry.join(", ")
    );
    let _ = writeln!(
        s,
        "}}\n\n/// Log data tokens of token-prefixed items.\npub mod token {{"
    );
    for (n, (name, t)) in [
        ("MEMORY", token::MEMORY),
        ("STRING", token::STRING),
        ("LOCAL_VARS", token::LOCAL_VARS),
        ("GLOBAL_VARS", token::GLOBAL_VARS),
        ("WORDS", token::WORDS),
        ("FAULT", token::FAULT),
    ]
    .into_iter()
    .enumerate()
    {
        if n > 0 {
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "    /// Token `{name}`.\n    pub const {name}: u8 = 0x{t:02x};"
        );
    }
    let _ = writeln!(
        s,
        "}}\n\n/// Item kinds of log item descriptors (bits 16-23 of a descriptor).\npub mod item_kind {{"
    );
    for (n, (name, k)) in [
        ("RAW_WORDS", ItemKind::RawWords),
        ("RAW_BYTES", ItemKind::RawBytes),
        ("TOKENIZED", ItemKind::Tokenized),
    ]
    .into_iter()
    .enumerate()
    {
        if n > 0 {
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "    /// `{name}`.\n    pub const {name}: u32 = 0x{:02x};",
            k as u8
        );
    }
    let _ = writeln!(s, "}}");
}

/// The codes of the map service: ops of `map_update`, kinds of
/// `emit_event`, clock ids of `clock_ns`.
fn service_codes(s: &mut String) {
    let _ = writeln!(
        s,
        "\n/// Ops of [`map_update`] (`map_op::COUNT`, ...).\npub mod map_op {{"
    );
    for (n, o) in crate::maps::Op::ALL.iter().enumerate() {
        if n > 0 {
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "    /// `{0}`.\n    pub const {0}: i32 = {1};",
            o.name(),
            *o as u8
        );
    }
    let _ = writeln!(s, "}}");
    let _ = writeln!(
        s,
        "\n/// Kinds of [`emit_event`] events.\npub mod event_kind {{"
    );
    for (n, k) in crate::event::EventKind::ALL.iter().enumerate() {
        if n > 0 {
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "    /// `{0}`.\n    pub const {0}: i32 = {1};",
            k.name(),
            *k as i32
        );
    }
    let _ = writeln!(s, "}}");
    let _ = writeln!(s, "\n/// Clock ids of [`clock_ns`].\npub mod clock {{");
    for (n, (name, c)) in crate::imports::clock::ALL.iter().enumerate() {
        if n > 0 {
            s.push('\n');
        }
        let _ = writeln!(s, "    /// `{name}`.\n    pub const {name}: i32 = {c};");
    }
    let _ = writeln!(s, "}}");
}

/// The complete text of `guests/rust/src/abi.rs`.
pub fn render() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "//! The host ABI as seen by the SDK: raw imports, codes, register ids, limits.\n//!\n//! GENERATED from the hostabi crate (`hostabi::rustsdk::render`). Do not edit:\n//! run `BLESS=1 cargo test -p hostabi --test rustsdk` after changing hostabi.\n"
    );
    raw_imports(&mut s);
    constants(&mut s);
    codes(&mut s);
    ids(&mut s);
    service_codes(&mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_import_code_and_register_is_declared() {
        let r = render();
        for i in HOST_IMPORTS {
            assert!(
                r.contains(&alloc::format!("        pub fn {}(", i.name)),
                "{}",
                i.name
            );
        }
        for st in Status::ALL.iter().filter(|st| **st != Status::Ok) {
            let line = alloc::format!("    {} = {},", camel(st.name()), *st as i32);
            assert!(r.contains(&line), "{line}");
        }
        assert!(r.contains("    pub const RDI: Reg = Reg(0x00a);"));
        let head = alloc::format!("\"wprobe-manifest 1\\nabi {}\\n\"", crate::ABI_VERSION);
        assert!(r.contains(&head), "{head}");
        assert!(r.contains("pub const ENTRY: [Reg; 7] = [RDI, RSI, RDX, RCX, R8, R9, RSP];"));
    }

    #[test]
    fn lines_fit_rustfmt_width_and_camel_case_is_exact() {
        for line in render().lines() {
            assert!(line.len() <= MAX_WIDTH, "{line}");
        }
        assert_eq!(camel("NOT_PERMITTED"), "NotPermitted");
        assert_eq!(camel("EXIT"), "Exit");
        assert_eq!(camel("DEBUGGER_HANDOFF"), "DebuggerHandoff");
    }
}
