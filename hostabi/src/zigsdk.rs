//! Renders `guests/zig/wprobe.zig`, the Zig SDK for handler modules, from
//! the same facts as the C header and the Rust SDK: the import list of
//! [`crate::foreach_host_import!`] (as [`crate::HOST_IMPORTS`]), the codes,
//! register ids, item kinds, tokens and limits of [`crate::sdkfacts`], and
//! the manifest header. The file is checked in; `hostabi/tests/langsdk.rs`
//! fails when it is stale (`BLESS=1` rewrites it).
//!
//! Zig cannot emit a custom section yet, so `manifest(...)` exports the
//! manifest text as a NUL-terminated string named `wprobe_manifest`, and
//! `wprobe compile --manifest-from-export` moves it into the
//! `wprobe.manifest` section after linking.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

use crate::sdkfacts::{self, camel, literal, wrap};
use crate::{HOST_IMPORTS, ValType};

/// Path of the rendered file, relative to the repository's root.
pub const PATH: &str = "guests/zig/wprobe.zig";

/// Name of the exported string `manifest` leaves for the post-link step.
pub const MANIFEST_EXPORT: &str = "wprobe_manifest";

fn zig_type(t: ValType) -> &'static str {
    match t {
        ValType::I32 => "i32",
        ValType::I64 => "i64",
    }
}

/// Hand-written helpers over the raw imports (no allocator, no std).
const HELPERS: &str = r#"
// ---------------------------------------------------------------------------
// Helpers over the raw imports (no allocator, no std).

/// The address of `p` in this module's memory, as host imports take pointers.
pub inline fn ptr(p: anytype) i32 {
    return @intCast(@intFromPtr(p));
}

/// A log item descriptor: the item starts at `offset` in the data, of `kind`
/// (an `ItemKind` constant).
pub inline fn item(offset: u32, kind: u32) u32 {
    return offset | (kind << 16);
}

/// The low 64 bits of register `id` (a `Reg` constant) of the hit thread.
pub inline fn readReg(id: i32) u64 {
    return @bitCast(raw.read_reg(id, 0));
}

/// Copies memory of the traced process at `address` into `buf`; returns the
/// number of leading bytes that could be read (`buf.len` when all were).
pub inline fn readMem(address: u64, buf: []u8) usize {
    const n = raw.read_mem(@bitCast(address), ptr(buf.ptr), @intCast(buf.len));
    return @intCast(@max(n, 0));
}

/// The NUL-terminated string at `address`, copied into `buf` (at most
/// `buf.len` bytes); null when a byte before its end could not be read.
pub inline fn readStr(address: u64, buf: []u8) ?[]u8 {
    const n = raw.read_str(@bitCast(address), ptr(buf.ptr), @intCast(buf.len));
    if (n < 0) return null;
    return buf[0..@intCast(n)];
}

/// Emits a log record of `data` described by `items`; returns a `Status`.
pub inline fn emitLog(major: i32, minor: i32, data: []const u8, items: []const u32) i32 {
    return raw.emit_log(major, minor, ptr(data.ptr), @intCast(data.len), ptr(items.ptr), @intCast(items.len));
}

/// Global variable `index` of the run, or null beyond `gvar_count()`.
pub inline fn gvarGet(index: u64) ?u64 {
    if (index >= @as(u64, @bitCast(raw.gvar_count()))) return null;
    return @bitCast(raw.gvar_get(@bitCast(index)));
}

/// Sets global variable `index`; false (and nothing set) beyond `gvar_count()`.
pub inline fn gvarSet(index: u64, value: u64) bool {
    if (index >= @as(u64, @bitCast(raw.gvar_count()))) return false;
    raw.gvar_set(@bitCast(index), @bitCast(value));
    return true;
}

/// In a return probe's handler: argument `n` (0 = rdi ... 5 = r9) of the
/// returning call as it was at its entry. Another `n` traps.
pub inline fn entryArg(n: u32) u64 {
    const id: i32 = switch (n) {
        0 => Reg.RDI,
        1 => Reg.RSI,
        2 => Reg.RDX,
        3 => Reg.RCX,
        4 => Reg.R8,
        5 => Reg.R9,
        else => unreachable,
    };
    return @bitCast(raw.entry_reg(id));
}

/// In a return probe's handler: rsp at the entry of the returning call.
pub inline fn entryRsp() u64 {
    return @bitCast(raw.entry_reg(Reg.RSP));
}

/// In a return probe's handler: nanoseconds between the call's entry and return.
pub inline fn elapsed() u64 {
    return @bitCast(raw.elapsed_ns());
}

/// Declares the module's probe points: the manifest lines after its `abi`
/// line (docs/hostabi.md, "Manifest"), best as a multi-line string:
///
///     comptime {
///         wprobe.manifest(
///             \\module probe_target
///             \\probe on_call
///             \\  location offset target_fn
///         );
///     }
///
/// Zig cannot emit a custom section: this exports the text as the string
/// `wprobe_manifest`, and `wprobe compile --manifest-from-export M.wasm -o M.wasm`
/// moves it into the `wprobe.manifest` section after linking.
pub fn manifest(comptime lines: []const u8) void {
    const S = struct {
        const text = MANIFEST_HEAD ++ lines ++ "\n";
        const bytes: [text.len:0]u8 = text.*;
    };
    @export(&S.bytes, .{ .name = MANIFEST_EXPORT });
}
"#;

/// The complete text of `guests/zig/wprobe.zig`.
pub fn render() -> String {
    let mut s = String::new();
    s.push_str(
        "//! wprobe.zig - write wprobe probe handlers in Zig (wasm32-freestanding, no libc, no std).\n//!\n//! GENERATED from the hostabi crate (hostabi::zigsdk::render). Do not edit:\n//! run `BLESS=1 cargo test -p hostabi --test langsdk` after changing hostabi.\n//!\n//! Build: zig build-exe -target wasm32-freestanding -O ReleaseSmall -fno-entry -rdynamic\n//! (see guests/zig/README.md), then `wprobe compile --manifest-from-export` when the\n//! module calls `manifest`.\n\n",
    );
    let _ = writeln!(
        s,
        "/// Host ABI version of this file.\npub const ABI_VERSION: u32 = {};",
        crate::ABI_VERSION
    );
    let _ = writeln!(
        s,
        "/// Wasm import module of every host import.\npub const IMPORT_MODULE = \"{}\";",
        crate::IMPORT_MODULE
    );
    let _ = writeln!(
        s,
        "/// Custom section carrying the manifest.\npub const MANIFEST_SECTION = \"{}\";",
        crate::MANIFEST_SECTION
    );
    let _ = writeln!(
        s,
        "/// Export `manifest` leaves for `wprobe compile --manifest-from-export`.\npub const MANIFEST_EXPORT = \"{MANIFEST_EXPORT}\";"
    );
    let _ = writeln!(
        s,
        "/// The manifest's first lines (format and ABI version), put before yours by `manifest`.\npub const MANIFEST_HEAD = \"{}\";",
        sdkfacts::manifest_head().replace('\n', "\\n")
    );
    for g in sdkfacts::groups() {
        if g.name == "limit" {
            let _ = writeln!(s, "\n// {}", g.doc);
            for k in &g.items {
                wrap(&mut s, "/// ", &k.doc, 100);
                let _ = writeln!(s, "pub const {}: u32 = {};", k.name, literal(k));
            }
            continue;
        }
        let _ = writeln!(s);
        wrap(&mut s, "/// ", g.doc, 100);
        let _ = writeln!(s, "pub const {} = struct {{", camel(g.name));
        let ty = match g.name {
            "item_kind" => "u32",
            "token" => "u8",
            _ => "i32",
        };
        for k in &g.items {
            if !k.doc.is_empty() {
                wrap(&mut s, "    /// ", &k.doc, 100);
            }
            let _ = writeln!(s, "    pub const {}: {ty} = {};", k.name, literal(k));
        }
        let _ = writeln!(s, "}};");
    }
    let _ = writeln!(
        s,
        "\n/// The host imports (module `{}`), exactly as `hostabi` declares them. Pointers\n/// are addresses in this module's memory (`ptr(&x)`); the host checks every range\n/// and traps the handler on a bad one.\npub const raw = struct {{",
        crate::IMPORT_MODULE
    );
    for (n, i) in HOST_IMPORTS.iter().enumerate() {
        if n > 0 {
            s.push('\n');
        }
        wrap(&mut s, "    /// ", i.doc, 100);
        let params: Vec<String> = i
            .params
            .iter()
            .map(|(p, t)| alloc::format!("{p}: {}", zig_type(*t)))
            .collect();
        let ret = i.results.first().map_or("void", |t| zig_type(*t));
        let _ = writeln!(
            s,
            "    pub extern \"{}\" fn {}({}) {ret};",
            crate::IMPORT_MODULE,
            i.name,
            params.join(", ")
        );
    }
    let _ = writeln!(s, "}};");
    s.push_str(HELPERS);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_import_code_and_register_is_declared() {
        let z = render();
        for i in HOST_IMPORTS {
            assert!(
                z.contains(&alloc::format!("    pub extern \"wprobe\" fn {}(", i.name)),
                "{}",
                i.name
            );
        }
        assert!(z.contains("    pub const FULL: i32 = -8;"));
        assert!(z.contains("    pub const RDI: i32 = 0x00a;"));
        assert!(z.contains("pub const MANIFEST_HEAD = \"wprobe-manifest 1\\nabi 5\\n\";"));
        assert!(z.contains("pub const MAX_LOG_ITEMS: u32 = 65535;"));
        assert!(z.contains("    pub extern \"wprobe\" fn read_reg(reg: i32, part: i32) i64;"));
    }
}
