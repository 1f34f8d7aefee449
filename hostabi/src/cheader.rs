//! Renders `guests/c/wprobe.h`, the C header for handler modules, from the
//! same facts as everything else in this crate (the import list, status and
//! outcome codes, register ids, item kinds, tokens, limits, the manifest
//! header). The header is checked in; `hostabi/tests/cheader.rs` fails when
//! it is stale (`BLESS=1` rewrites it). The header needs no libc: it uses
//! only compiler-builtin types and clang's wasm attributes.

use alloc::string::String;
use core::fmt::Write as _;

use crate::record::{self, ItemKind, token};
use crate::{HOST_IMPORTS, Outcome, Status, ValType, regs};

fn c_type(t: ValType) -> &'static str {
    match t {
        ValType::I32 => "wprobe_i32",
        ValType::I64 => "wprobe_i64",
    }
}

/// Wraps `text` as a `/** ... */` comment indented by `indent`, lines of at most ~78 columns.
fn comment(out: &mut String, indent: &str, text: &str) {
    let _ = writeln!(out, "{indent}/**");
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + 3 + line.len() + 1 + word.len() > 78 {
            let _ = writeln!(out, "{indent} * {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        // `*/` inside a doc would end the comment.
        line.push_str(&word.replace("*/", "* /"));
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent} * {line}");
    }
    let _ = writeln!(out, "{indent} */");
}

/// The complete text of `wprobe.h`.
pub fn render() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "/* wprobe.h - write wprobe probe handlers in C (clang --target=wasm32, no libc).\n *\n * GENERATED from the hostabi crate (hostabi::cheader::render). Do not edit:\n * run `BLESS=1 cargo test -p hostabi --test cheader` after changing hostabi.\n */"
    );
    let _ = writeln!(s, "#ifndef WPROBE_H\n#define WPROBE_H\n");
    let _ = writeln!(s, "typedef int wprobe_i32;");
    let _ = writeln!(s, "typedef long long wprobe_i64;");
    let _ = writeln!(s, "typedef unsigned int wprobe_u32;");
    let _ = writeln!(s, "typedef unsigned long long wprobe_u64;\n");
    let _ = writeln!(
        s,
        "_Static_assert(sizeof(wprobe_i32) == 4 && sizeof(wprobe_i64) == 8, \"build with --target=wasm32\");\n"
    );
    let _ = writeln!(s, "/** Host ABI version of this header. */");
    let _ = writeln!(s, "#define WPROBE_ABI_VERSION {}", crate::ABI_VERSION);
    let _ = writeln!(s, "/** Wasm import module of every host import. */");
    let _ = writeln!(
        s,
        "#define WPROBE_IMPORT_MODULE \"{}\"",
        crate::IMPORT_MODULE
    );
    let _ = writeln!(s, "/** Custom section carrying the manifest. */");
    let _ = writeln!(
        s,
        "#define WPROBE_MANIFEST_SECTION \"{}\"\n",
        crate::MANIFEST_SECTION
    );

    let _ = writeln!(s, "/* Status codes returned by host imports. */");
    for st in Status::ALL {
        let _ = writeln!(s, "#define WPROBE_{} ({})", st.name(), *st as i32);
    }
    let _ = writeln!(s, "\n/* Outcomes: the value a handler returns. */");
    for o in Outcome::ALL {
        let _ = writeln!(s, "#define WPROBE_{} {}", o.name(), *o as i32);
    }
    let _ = writeln!(
        s,
        "\n/* Register ids of wprobe_read_reg / wprobe_write_reg (x86-64). */"
    );
    for r in regs::REGS {
        let _ = writeln!(
            s,
            "#define WPROBE_REG_{} 0x{:03x} /* {} bits{} */",
            r.name.to_ascii_uppercase(),
            r.id,
            r.width,
            if r.writable { ", writable" } else { "" }
        );
    }
    let _ = writeln!(s, "\n/* Limits. */");
    let _ = writeln!(
        s,
        "#define WPROBE_MAX_MEM_ACCESS_BYTES {}",
        crate::imports::MAX_MEM_ACCESS_BYTES
    );
    let _ = writeln!(
        s,
        "#define WPROBE_MAX_LOG_DATA_BYTES {}",
        record::MAX_LOG_DATA_BYTES
    );
    let _ = writeln!(s, "#define WPROBE_MAX_LOG_ITEMS {}", record::MAX_LOG_ITEMS);
    let _ = writeln!(
        s,
        "#define WPROBE_MAX_STACKTRACE_BYTES {}",
        record::MAX_STACKTRACE_BYTES
    );
    let _ = writeln!(
        s,
        "#define WPROBE_DEFAULT_MAXACTIVE {}",
        crate::manifest::DEFAULT_MAXACTIVE
    );
    let _ = writeln!(
        s,
        "#define WPROBE_MAX_MAXACTIVE {}",
        crate::manifest::MAX_MAXACTIVE
    );
    let _ = writeln!(
        s,
        "\n/* Log items: a descriptor is WPROBE_ITEM(offset in the data, kind). */"
    );
    for (name, k) in [
        ("RAW_WORDS", ItemKind::RawWords),
        ("RAW_BYTES", ItemKind::RawBytes),
        ("TOKENIZED", ItemKind::Tokenized),
    ] {
        let _ = writeln!(s, "#define WPROBE_ITEM_{name} 0x{:02x}u", k as u8);
    }
    let _ = writeln!(
        s,
        "#define WPROBE_ITEM(offset, kind) ((wprobe_u32)(offset) | ((wprobe_u32)(kind) << 16))"
    );
    let _ = writeln!(
        s,
        "/* Tokens of WPROBE_ITEM_TOKENIZED items: token byte, u16 count, payload. */"
    );
    for (name, t) in [
        ("MEMORY", token::MEMORY),
        ("STRING", token::STRING),
        ("LOCAL_VARS", token::LOCAL_VARS),
        ("GLOBAL_VARS", token::GLOBAL_VARS),
        ("WORDS", token::WORDS),
        ("FAULT", token::FAULT),
    ] {
        let _ = writeln!(s, "#define WPROBE_TOKEN_{name} 0x{t:02x}");
    }

    let _ = writeln!(
        s,
        "\n/* Map service: kinds of `map` manifest lines, ops of wprobe_map_update. */"
    );
    for k in crate::maps::MapKind::ALL {
        let _ = writeln!(
            s,
            "#define WPROBE_MAP_KIND_{} {}",
            k.name().to_ascii_uppercase(),
            *k as u8
        );
    }
    for o in crate::maps::Op::ALL {
        let _ = writeln!(s, "#define WPROBE_MAP_OP_{} {}", o.name(), *o as u8);
    }
    let _ = writeln!(
        s,
        "#define WPROBE_MAP_DEFAULT_MAX_KEYS {}",
        crate::maps::DEFAULT_MAX_KEYS
    );
    let _ = writeln!(
        s,
        "/* Events of wprobe_emit_event (formats in the `{}` section). */",
        crate::event::EVENTS_SECTION
    );
    for k in crate::event::EventKind::ALL {
        let _ = writeln!(s, "#define WPROBE_EVENT_{} {}", k.name(), *k as i32);
    }
    let _ = writeln!(
        s,
        "#define WPROBE_MAX_EVENT_BYTES {}",
        crate::event::MAX_EVENT_BYTES
    );
    let _ = writeln!(s, "/* Clocks of wprobe_clock_ns. */");
    for (name, c) in crate::imports::clock::ALL {
        let _ = writeln!(s, "#define WPROBE_CLOCK_{name} {c}");
    }

    let _ = writeln!(
        s,
        "\n/* Host imports. Pointers are addresses in this module's memory; the host\n * checks every (pointer, length) and traps the handler on a bad one. */"
    );
    for i in HOST_IMPORTS {
        comment(&mut s, "", i.doc);
        let params: alloc::vec::Vec<String> = i
            .params
            .iter()
            .map(|(n, t)| alloc::format!("{} {n}", c_type(*t)))
            .collect();
        let params = if params.is_empty() {
            String::from("void")
        } else {
            params.join(", ")
        };
        let ret = i.results.first().map_or("void", |t| c_type(*t));
        let _ = writeln!(
            s,
            "__attribute__((import_module(\"{}\"), import_name(\"{}\")))\n{ret} wprobe_{}({params});\n",
            crate::IMPORT_MODULE,
            i.name,
            i.name
        );
    }

    entry_wrappers(&mut s);
    let _ = writeln!(
        s,
        "/**\n * Declares the module's probe points: the lines of the `{} {}` manifest\n * after its `abi` line, each wrapped in WPROBE_LINE (no quotes or\n * backslashes inside), e.g.\n *\n *   WPROBE_MANIFEST(\n *       WPROBE_LINE(\"module probe_target\")\n *       WPROBE_LINE(\"probe on_call\")\n *       WPROBE_LINE(\"  location offset target_fn\")\n *       WPROBE_LINE(\"  opcode 0x55\"));\n *\n * Emits the `{}` custom section through the assembler (a\n * `.custom_section.NAME` section), which clang and wasm-ld keep as is.\n */",
        crate::manifest::MAGIC,
        crate::manifest::FORMAT_VERSION,
        crate::MANIFEST_SECTION
    );
    let _ = writeln!(
        s,
        "#define WPROBE_LINE(text) \".ascii \\\"\" text \"\\\"\\n.byte 10\\n\""
    );
    let _ = writeln!(
        s,
        "#define WPROBE_MANIFEST(lines) \\\n    __asm__(\".section .custom_section.{0},\\\"\\\",@\\n\" \\\n            WPROBE_LINE(\"{1} {2}\") WPROBE_LINE(\"abi {3}\") lines \".text\\n\")\n",
        crate::MANIFEST_SECTION,
        crate::manifest::MAGIC,
        crate::manifest::FORMAT_VERSION,
        crate::ABI_VERSION
    );
    let _ = writeln!(
        s,
        "/** Defines handler export `name`: `WPROBE_HANDLER(on_call) {{ ... return WPROBE_EXIT; }}`. */"
    );
    let _ = writeln!(
        s,
        "#define WPROBE_HANDLER(name) \\\n    __attribute__((export_name(#name))) wprobe_i32 name(void)\n"
    );
    let _ = writeln!(s, "#endif /* WPROBE_H */");
    s
}

/// Safe wrappers of `entry_reg` and `elapsed_ns` for return probes: an
/// argument by number (only valid register ids reach the host), `rsp`, the
/// call's duration, all unsigned.
fn entry_wrappers(s: &mut String) {
    let _ = writeln!(
        s,
        "/* Return probes (manifest `return yes`): the entry state of the returning\n * call. These work only in a return probe's handler; elsewhere the host\n * traps the handler. */\n"
    );
    comment(
        s,
        "",
        "Argument n (0 = the first, in rdi, ... 5 = the sixth, in r9) of the returning call, as it was at the call's entry. Another n traps.",
    );
    let _ = writeln!(
        s,
        "static inline wprobe_u64 wprobe_entry_arg(unsigned n)\n{{\n    switch (n) {{"
    );
    for (n, id) in regs::ENTRY_REGS.iter().enumerate() {
        let Some(r) = regs::by_id(*id).filter(|_| *id != regs::RSP) else {
            continue;
        };
        let _ = writeln!(
            s,
            "    case {n}: return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_{});",
            r.name.to_ascii_uppercase()
        );
    }
    let _ = writeln!(s, "    default: __builtin_trap();\n    }}\n}}\n");
    comment(
        s,
        "",
        "rsp at the entry of the returning call: the address of its return address.",
    );
    let _ = writeln!(
        s,
        "static inline wprobe_u64 wprobe_entry_rsp(void)\n{{\n    return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_RSP);\n}}\n"
    );
    comment(
        s,
        "",
        "Nanoseconds between the entry of the returning call and its return.",
    );
    let _ = writeln!(
        s,
        "static inline wprobe_u64 wprobe_elapsed(void)\n{{\n    return (wprobe_u64)wprobe_elapsed_ns();\n}}\n"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_import_and_code_is_declared() {
        let h = render();
        for i in HOST_IMPORTS {
            assert!(
                h.contains(&alloc::format!("import_name(\"{}\")", i.name)),
                "{}",
                i.name
            );
        }
        for st in Status::ALL {
            assert!(h.contains(&alloc::format!("#define WPROBE_{} ", st.name())));
        }
        assert!(h.contains("#define WPROBE_REG_RDI 0x00a"));
        assert!(h.contains("    case 5: return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_R9);"));
        assert!(!h.contains("case 6:"));
        assert!(!h.contains("*/ ") || h.matches("/*").count() == h.matches("*/").count());
    }
}
