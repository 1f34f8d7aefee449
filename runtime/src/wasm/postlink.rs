//! The post-link step of `wprobe compile MODULE.wasm`: puts a manifest into
//! the `wprobe.manifest` custom section of a module whose toolchain cannot
//! emit custom sections (Zig), taking the text from a file or from a
//! NUL-terminated string the module exports (`wprobe_manifest`, a data
//! symbol: an exported `i32` global holding its address in memory).
//!
//! The module is validated first; its sections are then copied byte for
//! byte, except earlier `wprobe.manifest` sections (replaced) and, when the
//! text came from the export, the export section (rewritten without that
//! export). Nothing here panics on any input.

use hostabi::MANIFEST_SECTION;
use wasmparser::{DataKind, ExternalKind, Operator, Parser, Payload};

/// The export `wprobe compile --manifest-from-export` reads.
pub const MANIFEST_EXPORT: &str = "wprobe_manifest";

/// Longest manifest text read from memory (the bytes before the NUL).
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;

/// Reads an unsigned LEB128 at `*at`, advancing it.
fn leb(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn push_leb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// One section of a module: id, header start, contents range.
struct Section {
    id: u8,
    start: usize,
    body: std::ops::Range<usize>,
}

/// The sections of a module already validated by wasmparser.
fn sections(wasm: &[u8]) -> Result<Vec<Section>, String> {
    let mut out = Vec::new();
    let mut at = 8;
    while at < wasm.len() {
        let start = at;
        let id = wasm[at];
        at += 1;
        let len = leb(wasm, &mut at).ok_or("truncated section header")? as usize;
        let end = at.checked_add(len).filter(|e| *e <= wasm.len());
        let end = end.ok_or_else(|| format!("section at offset 0x{start:x} overruns the file"))?;
        out.push(Section {
            id,
            start,
            body: at..end,
        });
        at = end;
    }
    Ok(out)
}

/// The name of a custom section's contents.
fn custom_name(body: &[u8]) -> Option<&[u8]> {
    let mut at = 0;
    let n = leb(body, &mut at)? as usize;
    body.get(at..at.checked_add(n)?)
}

/// Validates `wasm` (`invalid WebAssembly: … (at offset 0x…)`).
fn validate(wasm: &[u8]) -> Result<(), String> {
    wasmparser::Validator::new()
        .validate_all(wasm)
        .map(|_| ())
        .map_err(|e| {
            crate::wasm::load::LoadError::Invalid {
                message: e.message().to_string(),
                offset: e.offset(),
            }
            .to_string()
        })
}

/// The NUL-terminated string exported as `name` (a global holding its
/// address), read from the module's active data segments.
pub fn exported_string(wasm: &[u8], name: &str) -> Result<Vec<u8>, String> {
    validate(wasm)?;
    let mut global_export = None;
    let mut other_kind = None;
    let mut imported_globals = 0u32;
    let mut global_inits: Vec<Option<i64>> = Vec::new();
    let mut segments: Vec<(u64, Vec<u8>)> = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| e.message().to_string())?;
        match payload {
            Payload::ImportSection(r) => {
                for imp in r.into_imports() {
                    let imp = imp.map_err(|e| e.message().to_string())?;
                    if matches!(imp.ty, wasmparser::TypeRef::Global(_)) {
                        imported_globals += 1;
                    }
                }
            }
            Payload::GlobalSection(r) => {
                for g in r {
                    let g = g.map_err(|e| e.message().to_string())?;
                    let mut ops = g.init_expr.get_operators_reader();
                    global_inits.push(match ops.read() {
                        Ok(Operator::I32Const { value }) => Some(i64::from(value as u32)),
                        Ok(Operator::I64Const { value }) => Some(value),
                        _ => None,
                    });
                }
            }
            Payload::ExportSection(r) => {
                for e in r {
                    let e = e.map_err(|e| e.message().to_string())?;
                    if e.name == name {
                        match e.kind {
                            ExternalKind::Global => global_export = Some(e.index),
                            ExternalKind::Func => other_kind = Some("a function"),
                            ExternalKind::Memory => other_kind = Some("a memory"),
                            _ => other_kind = Some("not a global"),
                        }
                    }
                }
            }
            Payload::DataSection(r) => {
                for d in r {
                    let d = d.map_err(|e| e.message().to_string())?;
                    if let DataKind::Active { offset_expr, .. } = d.kind {
                        let mut ops = offset_expr.get_operators_reader();
                        if let Ok(Operator::I32Const { value }) = ops.read() {
                            segments.push((u64::from(value as u32), d.data.to_vec()));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(kind) = other_kind {
        return Err(format!(
            "export `{name}` is {kind}; it must be the address of a NUL-terminated string (a data symbol, exported as a global)"
        ));
    }
    let Some(index) = global_export else {
        return Err(format!(
            "the module exports no `{name}`: call the SDK's manifest(...) (Zig: `comptime {{ wprobe.manifest(...); }}`), or give the text with --manifest FILE"
        ));
    };
    let init = index
        .checked_sub(imported_globals)
        .and_then(|i| global_inits.get(i as usize).copied().flatten());
    let Some(addr) = init.and_then(|a| u64::try_from(a).ok()) else {
        return Err(format!(
            "export `{name}` is not a constant address (an imported or computed global)"
        ));
    };
    // The segment that holds the address, and the string up to its NUL.
    for (start, data) in &segments {
        if addr < *start || addr >= start + data.len() as u64 {
            continue;
        }
        let from = (addr - start) as usize;
        let rest = &data[from..];
        let Some(len) = rest.iter().position(|b| *b == 0) else {
            return Err(format!(
                "the string at `{name}` (address 0x{addr:x}) has no NUL before its data segment ends"
            ));
        };
        if len > MAX_MANIFEST_BYTES {
            return Err(format!(
                "the string at `{name}` is longer than {MAX_MANIFEST_BYTES} bytes"
            ));
        }
        return Ok(rest[..len].to_vec());
    }
    Err(format!(
        "export `{name}` points to address 0x{addr:x}, which no data segment initializes (an empty or zero string?)"
    ))
}

/// `wasm` with `manifest` as its only `wprobe.manifest` section (appended
/// after the others) and without the export `drop_export` when given.
pub fn with_manifest(
    wasm: &[u8],
    manifest: &[u8],
    drop_export: Option<&str>,
) -> Result<Vec<u8>, String> {
    validate(wasm)?;
    let mut out = Vec::with_capacity(wasm.len() + manifest.len() + 32);
    out.extend_from_slice(&wasm[..8]);
    for s in sections(wasm)? {
        let body = &wasm[s.body.clone()];
        if s.id == 0 && custom_name(body) == Some(MANIFEST_SECTION.as_bytes()) {
            continue;
        }
        if s.id == 7
            && let Some(name) = drop_export
        {
            let rewritten = exports_without(body, name)?;
            out.push(7);
            push_leb(&mut out, rewritten.len() as u64);
            out.extend_from_slice(&rewritten);
            continue;
        }
        out.extend_from_slice(&wasm[s.start..s.body.end]);
    }
    let mut section = Vec::new();
    push_leb(&mut section, MANIFEST_SECTION.len() as u64);
    section.extend_from_slice(MANIFEST_SECTION.as_bytes());
    section.extend_from_slice(manifest);
    out.push(0);
    push_leb(&mut out, section.len() as u64);
    out.extend_from_slice(&section);
    validate(&out)?;
    Ok(out)
}

/// An export section's contents without the export called `name`.
fn exports_without(body: &[u8], name: &str) -> Result<Vec<u8>, String> {
    let bad = || "malformed export section".to_string();
    let mut at = 0;
    let count = leb(body, &mut at).ok_or_else(bad)?;
    let mut kept = Vec::new();
    let mut n = 0u64;
    for _ in 0..count {
        let start = at;
        let len = leb(body, &mut at).ok_or_else(bad)? as usize;
        let field = body.get(at..at + len).ok_or_else(bad)?;
        at += len + 1; // the name, then the kind byte
        leb(body, &mut at).ok_or_else(bad)?;
        if at > body.len() {
            return Err(bad());
        }
        if field != name.as_bytes() {
            kept.extend_from_slice(&body[start..at]);
            n += 1;
        }
    }
    let mut out = Vec::with_capacity(kept.len() + 5);
    push_leb(&mut out, n);
    out.extend_from_slice(&kept);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZIGLIKE: &str = r#"(module
      (memory (export "memory") 1)
      (global (export "wprobe_manifest") i32 (i32.const 1024))
      (func (export "h") (result i32) i32.const 0)
      (data (i32.const 1024) "wprobe-manifest 1\nabi 2\nmodule m\nprobe h\n location offset f\n\00"))"#;

    #[test]
    fn the_exported_string_becomes_the_section_and_the_export_goes() {
        let wasm = wat::parse_str(ZIGLIKE).unwrap();
        let text = exported_string(&wasm, MANIFEST_EXPORT).unwrap();
        assert!(text.starts_with(b"wprobe-manifest 1\nabi 2\n"));
        let out = with_manifest(&wasm, &text, Some(MANIFEST_EXPORT)).unwrap();
        let facts = crate::wasm::load::inspect(&out).unwrap();
        let m = facts.manifest.unwrap();
        assert_eq!((m.module.as_str(), m.probes[0].export.as_str()), ("m", "h"));
        assert!(!facts.other_exports.contains_key(MANIFEST_EXPORT));
        assert!(facts.memory_export && facts.func_exports.contains_key("h"));
        // Again: the section is replaced, not duplicated.
        let again = with_manifest(&out, b"wprobe-manifest 1\nabi 2\nmodule n\n", None).unwrap();
        let m = crate::wasm::load::inspect(&again)
            .unwrap()
            .manifest
            .unwrap();
        assert_eq!(m.module, "n");
    }

    #[test]
    fn a_missing_or_wrong_export_is_named() {
        let wasm = wat::parse_str("(module (memory (export \"memory\") 1))").unwrap();
        let e = exported_string(&wasm, MANIFEST_EXPORT).unwrap_err();
        assert!(
            e.starts_with("the module exports no `wprobe_manifest`"),
            "{e}"
        );
        let f = wat::parse_str("(module (func (export \"wprobe_manifest\")))").unwrap();
        let e = exported_string(&f, MANIFEST_EXPORT).unwrap_err();
        assert!(e.contains("is a function"), "{e}");
        let far = ZIGLIKE.replace("(i32.const 1024))\n", "(i32.const 9000))\n");
        let e = exported_string(&wat::parse_str(far).unwrap(), MANIFEST_EXPORT).unwrap_err();
        assert!(e.contains("0x2328, which no data segment"), "{e}");
        let e = exported_string(b"\0asm\x01\0\0\0\x01", MANIFEST_EXPORT).unwrap_err();
        assert!(e.starts_with("invalid WebAssembly"), "{e}");
    }

    #[test]
    fn no_prefix_of_a_module_panics() {
        let wasm = wat::parse_str(ZIGLIKE).unwrap();
        for cut in 0..wasm.len() {
            let _ = exported_string(&wasm[..cut], MANIFEST_EXPORT);
            let _ = with_manifest(&wasm[..cut], b"x", Some(MANIFEST_EXPORT));
        }
    }
}
