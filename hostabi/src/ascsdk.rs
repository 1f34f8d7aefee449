//! Renders `guests/assemblyscript/wprobe.ts`, the AssemblyScript SDK for
//! handler modules, from the same facts as the C header and the Rust SDK:
//! the import list of [`crate::foreach_host_import!`] (as
//! [`crate::HOST_IMPORTS`]), the codes, register ids, item kinds, tokens and
//! limits of [`crate::sdkfacts`], and the manifest header. The file is
//! checked in; `hostabi/tests/langsdk.rs` fails when it is stale (`BLESS=1`
//! rewrites it).
//!
//! The manifest goes into its custom section through the compiler transform
//! `guests/assemblyscript/wprobe-transform.mjs`, which reads the
//! `WPROBE_MANIFEST` constant of the entry file and [`MANIFEST_HEAD`] of
//! this one.
//!
//! [`MANIFEST_HEAD`]: crate::sdkfacts::manifest_head

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::sdkfacts::{self, literal, wrap};
use crate::{HOST_IMPORTS, ValType};

/// Path of the rendered file, relative to the repository's root.
pub const PATH: &str = "guests/assemblyscript/wprobe.ts";

fn as_type(t: ValType) -> &'static str {
    match t {
        ValType::I32 => "i32",
        ValType::I64 => "i64",
    }
}

/// Hand-written helpers over the raw imports: no allocation, so a handler
/// that uses only these costs nothing of AssemblyScript's runtime.
const HELPERS: &str = r#"
// ---------------------------------------------------------------------------
// Helpers over the raw imports. None allocates: a handler that keeps its
// buffers in `memory.data` (or module-level StaticArrays, allocated once)
// runs no allocator and no GC at its hits.

/** A log item descriptor: the item starts at `offset` in the data, of `kind` (`item_kind`). */
// @ts-ignore: decorator
@inline export function item(offset: u32, kind: u32): u32 {
  return offset | (kind << 16);
}

/** The low 64 bits of register `id` (`reg.RDI`, ...) of the hit thread. */
// @ts-ignore: decorator
@inline export function readReg(id: i32): u64 {
  return <u64>raw.read_reg(id, 0);
}

/** Global variable `index` of the run, or `fallback` beyond `gvar_count()`. */
export function gvarGet(index: u64, fallback: u64 = 0): u64 {
  return index < <u64>raw.gvar_count() ? <u64>raw.gvar_get(<i64>index) : fallback;
}

/** Sets global variable `index`; false (and nothing set) beyond `gvar_count()`. */
export function gvarSet(index: u64, value: u64): bool {
  if (index >= <u64>raw.gvar_count()) return false;
  raw.gvar_set(<i64>index, <i64>value);
  return true;
}

/** In a return probe's handler: argument `n` (0 = rdi ... 5 = r9) of the returning call at its entry. Another `n` traps. */
export function entryArg(n: i32): u64 {
  switch (n) {
    case 0: return <u64>raw.entry_reg(reg.RDI);
    case 1: return <u64>raw.entry_reg(reg.RSI);
    case 2: return <u64>raw.entry_reg(reg.RDX);
    case 3: return <u64>raw.entry_reg(reg.RCX);
    case 4: return <u64>raw.entry_reg(reg.R8);
    case 5: return <u64>raw.entry_reg(reg.R9);
  }
  unreachable();
  return 0;
}

/** In a return probe's handler: rsp at the entry of the returning call. */
// @ts-ignore: decorator
@inline export function entryRsp(): u64 {
  return <u64>raw.entry_reg(reg.RSP);
}

/** In a return probe's handler: nanoseconds between the call's entry and its return. */
// @ts-ignore: decorator
@inline export function elapsed(): u64 {
  return <u64>raw.elapsed_ns();
}

/**
 * The `abort` of this SDK (build with `--use abort=wprobe/wprobeAbort`): an
 * assertion or a runtime error (an index out of range, out of memory) traps
 * the handler run, which wprobe counts; nothing is imported from `env`.
 */
export function wprobeAbort(message: usize, fileName: usize, line: u32, column: u32): void {
  unreachable();
}
"#;

/// The complete text of `guests/assemblyscript/wprobe.ts`.
pub fn render() -> String {
    let mut s = String::new();
    s.push_str(
        "// wprobe.ts - write wprobe probe handlers in AssemblyScript (no env imports).\n//\n// GENERATED from the hostabi crate (hostabi::ascsdk::render). Do not edit:\n// run `BLESS=1 cargo test -p hostabi --test langsdk` after changing hostabi.\n//\n// Build with guests/assemblyscript/asconfig.json: the stub runtime, `abort` mapped to\n// `wprobeAbort` below, and the transform wprobe-transform.mjs, which writes the entry\n// file's `WPROBE_MANIFEST` constant into the `wprobe.manifest` section (after\n// MANIFEST_HEAD) and runs AssemblyScript's start function at the first hit instead\n// of at instantiation (wprobe refuses start functions).\n\n",
    );
    let _ = writeln!(
        s,
        "/** Host ABI version of this file. */\nexport const ABI_VERSION: i32 = {};",
        crate::ABI_VERSION
    );
    let _ = writeln!(
        s,
        "/** Custom section carrying the manifest. */\nexport const MANIFEST_SECTION = \"{}\";",
        crate::MANIFEST_SECTION
    );
    let _ = writeln!(
        s,
        "/** The manifest's first lines (format and ABI version), put before WPROBE_MANIFEST by the transform. */\nexport const MANIFEST_HEAD = \"{}\";",
        sdkfacts::manifest_head().replace('\n', "\\n")
    );
    for g in sdkfacts::groups() {
        let _ = writeln!(s);
        let _ = writeln!(s, "/** {} */", g.doc);
        let _ = writeln!(s, "export namespace {} {{", g.name);
        let ty = match g.name {
            "item_kind" | "limit" => "u32",
            _ => "i32",
        };
        for k in &g.items {
            if !k.doc.is_empty() {
                let _ = writeln!(s, "  /** {} */", k.doc);
            }
            let _ = writeln!(s, "  export const {}: {ty} = {};", k.name, literal(k));
        }
        let _ = writeln!(s, "}}");
    }
    let _ = writeln!(
        s,
        "\n/**\n * The host imports (module `{}`), exactly as `hostabi` declares them. Pointers\n * are addresses in this module's memory (`changetype<usize>(x)`, `memory.data(n)`);\n * the host checks every range and traps the handler on a bad one.\n */\nexport namespace raw {{",
        crate::IMPORT_MODULE
    );
    for (n, i) in HOST_IMPORTS.iter().enumerate() {
        if n > 0 {
            s.push('\n');
        }
        wrap(&mut s, "  // ", i.doc, 100);
        let params: Vec<String> = i
            .params
            .iter()
            .map(|(p, t)| alloc::format!("{p}: {}", as_type(*t)))
            .collect();
        let ret = i.results.first().map_or("void", |t| as_type(*t));
        let _ = writeln!(
            s,
            "  // @ts-ignore: decorator\n  @external(\"{}\", \"{}\")\n  export declare function {}({}): {ret};",
            crate::IMPORT_MODULE,
            i.name,
            i.name,
            params.join(", ")
        );
    }
    let _ = writeln!(s, "}}");
    s.push_str(HELPERS);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_import_code_and_register_is_declared() {
        let t = render();
        for i in HOST_IMPORTS {
            assert!(
                t.contains(&alloc::format!(
                    "  @external(\"wprobe\", \"{}\")\n  export declare function {}(",
                    i.name,
                    i.name
                )),
                "{}",
                i.name
            );
        }
        assert!(t.contains("  export const FULL: i32 = -8;"));
        assert!(t.contains("  export const RDI: i32 = 0x00a;"));
        assert!(t.contains("export const MANIFEST_HEAD = \"wprobe-manifest 1\\nabi 5\\n\";"));
    }
}
