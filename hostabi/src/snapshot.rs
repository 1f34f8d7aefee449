//! Renders every fact of the ABI as stable text. `hostabi/abi.txt` holds the
//! checked-in rendering; a test compares them, so any ABI change is
//! deliberate and comes with an [`crate::ABI_VERSION`] bump.

use alloc::string::String;
use core::fmt::Write as _;

use crate::record::{self, field, token};
use crate::{HOST_IMPORTS, Outcome, Status, regs, status::Exception};

/// The ABI snapshot text.
pub fn render() -> String {
    let mut s = String::new();
    let _ = writeln!(s, "abi_version {}", crate::ABI_VERSION);
    let _ = writeln!(s, "import_module {}", crate::IMPORT_MODULE);
    let _ = writeln!(s, "manifest_section {}", crate::MANIFEST_SECTION);
    let _ = writeln!(s, "manifest_format {}", crate::manifest::FORMAT_VERSION);
    let _ = writeln!(s, "memory_export {}", crate::MEMORY_EXPORT);
    let _ = writeln!(s, "flush_export {}", crate::FLUSH_EXPORT);
    let _ = writeln!(s, "events_section {}", crate::event::EVENTS_SECTION);
    let _ = writeln!(s, "events_format {}", crate::event::FORMAT_VERSION);
    for i in HOST_IMPORTS {
        let _ = write!(s, "import {}(", i.name);
        for (n, (name, ty)) in i.params.iter().enumerate() {
            let sep = if n > 0 { ", " } else { "" };
            let _ = write!(s, "{sep}{name}: {}", ty.wat());
        }
        let _ = write!(s, ") ->");
        for r in i.results {
            let _ = write!(s, " {}", r.wat());
        }
        let _ = writeln!(s);
    }
    for st in Status::ALL {
        let _ = writeln!(s, "status {} {}", st.name(), *st as i32);
    }
    for o in Outcome::ALL {
        let _ = writeln!(s, "outcome {} {}", o.name(), *o as i32);
    }
    for e in Exception::ALL {
        let _ = writeln!(s, "exception {} 0x{:04x}", e.name(), e.bit());
    }
    for r in regs::REGS {
        let _ = writeln!(
            s,
            "reg {} 0x{:03x} width {} {}",
            r.name,
            r.id,
            r.width,
            if r.writable { "rw" } else { "r" }
        );
    }
    let entry: alloc::vec::Vec<&str> = regs::ENTRY_REGS
        .iter()
        .filter_map(|id| regs::by_id(*id).map(|r| r.name))
        .collect();
    let _ = writeln!(s, "entry_regs {}", entry.join(" "));
    let _ = writeln!(
        s,
        "maxactive default {} max {}",
        crate::manifest::DEFAULT_MAXACTIVE,
        crate::manifest::MAX_MAXACTIVE
    );
    for (bit, size) in field::SIZES {
        let _ = writeln!(s, "header_field 0x{bit:04x} {size}");
    }
    let _ = writeln!(s, "log_default_mask 0x{:04x}", field::LOG_DEFAULT);
    let _ = writeln!(s, "stacktrace_mask 0x{:04x}", field::STACKTRACE);
    for (name, t) in [
        ("MEMORY", token::MEMORY),
        ("STRING", token::STRING),
        ("TRACE_COUNT", token::TRACE_COUNT),
        ("FRAME_COUNT", token::FRAME_COUNT),
        ("STACK_SLOTS", token::STACK_SLOTS),
        ("LOCAL_VARS", token::LOCAL_VARS),
        ("GLOBAL_VARS", token::GLOBAL_VARS),
        ("WORDS", token::WORDS),
        ("FAULT", token::FAULT),
    ] {
        let _ = writeln!(s, "token {name} 0x{t:02x}");
    }
    for (name, k) in [
        ("RAW_WORDS", record::ItemKind::RawWords),
        ("RAW_BYTES", record::ItemKind::RawBytes),
        ("TOKENIZED", record::ItemKind::Tokenized),
    ] {
        let _ = writeln!(s, "item_kind {name} 0x{:02x}", k as u8);
    }
    for k in crate::maps::MapKind::ALL {
        let _ = writeln!(s, "map_kind {} {}", k.name(), *k as u8);
    }
    for o in crate::maps::Op::ALL {
        let _ = writeln!(s, "map_op {} {}", o.name(), *o as u8);
    }
    for k in crate::event::EventKind::ALL {
        let _ = writeln!(s, "event_kind {} {}", k.name(), *k as i32);
    }
    for (name, c) in crate::imports::clock::ALL {
        let _ = writeln!(s, "clock {name} {c}");
    }
    for (name, v) in map_limits() {
        let _ = writeln!(s, "{name} {v}");
    }
    let _ = writeln!(s, "max_event_bytes {}", crate::event::MAX_EVENT_BYTES);
    let _ = writeln!(s, "max_log_data_bytes {}", record::MAX_LOG_DATA_BYTES);
    let _ = writeln!(s, "max_log_items {}", record::MAX_LOG_ITEMS);
    let _ = writeln!(s, "max_stacktrace_bytes {}", record::MAX_STACKTRACE_BYTES);
    let _ = writeln!(
        s,
        "max_mem_access_bytes {}",
        crate::imports::MAX_MEM_ACCESS_BYTES
    );
    s
}

/// The documented bounds of the map service, by snapshot name.
fn map_limits() -> [(&'static str, u64); 10] {
    use crate::maps::*;
    [
        ("max_maps", MAX_MAPS as u64),
        ("default_max_keys", DEFAULT_MAX_KEYS as u64),
        ("max_keys_per_map", MAX_KEYS_PER_MAP as u64),
        ("max_key_bytes", MAX_KEY_BYTES as u64),
        ("max_value_bytes", MAX_VALUE_BYTES as u64),
        ("max_map_bytes", MAX_MAP_BYTES),
        ("max_region_bytes", MAX_REGION_BYTES),
        ("hist_buckets", HIST_BUCKETS as u64),
        ("max_hist_bits", MAX_HIST_BITS as u64),
        ("max_lhist_buckets", MAX_LHIST_BUCKETS as u64),
    ]
}

/// The generated part of `docs/hostabi.md`: every import, status, outcome,
/// register and limit, as Markdown tables.
pub fn render_markdown() -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "ABI version **{}**; import module `{}`; manifest section `{}` (format {}).\n",
        crate::ABI_VERSION,
        crate::IMPORT_MODULE,
        crate::MANIFEST_SECTION,
        crate::manifest::FORMAT_VERSION
    );
    let _ = writeln!(
        s,
        "### Imports\n\n| import | signature | semantics |\n|---|---|---|"
    );
    for i in HOST_IMPORTS {
        let params: alloc::vec::Vec<String> = i
            .params
            .iter()
            .map(|(n, t)| alloc::format!("{n}: {}", t.wat()))
            .collect();
        let res: alloc::vec::Vec<&str> = i.results.iter().map(|t| t.wat()).collect();
        let _ = writeln!(
            s,
            "| `{}` | `({}) -> ({})` | {} |",
            i.name,
            params.join(", "),
            res.join(", "),
            i.doc.replace('|', "\\|")
        );
    }
    let _ = writeln!(
        s,
        "\n### Status codes (returned by imports)\n\n| name | value |\n|---|---|"
    );
    for st in Status::ALL {
        let _ = writeln!(s, "| `{}` | {} |", st.name(), *st as i32);
    }
    let _ = writeln!(
        s,
        "\n### Outcomes (returned by handler exports)\n\n| name | value |\n|---|---|"
    );
    for o in Outcome::ALL {
        let _ = writeln!(s, "| `{}` | {} |", o.name(), *o as i32);
    }
    let _ = writeln!(
        s,
        "\n### Registers (`reg` ids of `read_reg` / `write_reg`)\n\n| name | id | width | writable |\n|---|---|---|---|"
    );
    for r in regs::REGS {
        let _ = writeln!(
            s,
            "| `{}` | 0x{:03x} | {} | {} |",
            r.name,
            r.id,
            r.width,
            if r.writable { "yes" } else { "no" }
        );
    }
    let _ = writeln!(
        s,
        "\n### Map kinds and update ops (`map_update`)\n\n| kind | value | op | value |\n|---|---|---|---|"
    );
    let kinds = crate::maps::MapKind::ALL;
    let ops = crate::maps::Op::ALL;
    for i in 0..kinds.len().max(ops.len()) {
        let k = kinds
            .get(i)
            .map(|k| alloc::format!("`{}` | {}", k.name(), *k as u8))
            .unwrap_or_else(|| " | ".into());
        let o = ops
            .get(i)
            .map(|o| alloc::format!("`{}` | {}", o.name(), *o as u8))
            .unwrap_or_else(|| " | ".into());
        let _ = writeln!(s, "| {k} | {o} |");
    }
    let _ = writeln!(
        s,
        "\n### Event kinds (`emit_event`) and clocks (`clock_ns`)\n\n| event kind | value |\n|---|---|"
    );
    for k in crate::event::EventKind::ALL {
        let _ = writeln!(s, "| `{}` | {} |", k.name(), *k as i32);
    }
    let _ = writeln!(s, "\n| clock | value |\n|---|---|");
    for (name, c) in crate::imports::clock::ALL {
        let _ = writeln!(s, "| `{name}` | {c} |");
    }
    let entry: alloc::vec::Vec<alloc::string::String> = regs::ENTRY_REGS
        .iter()
        .filter_map(|id| regs::by_id(*id).map(|r| alloc::format!("`{}`", r.name)))
        .collect();
    let _ = writeln!(
        s,
        "\nEntry registers (`entry_reg`, return probes only): {}.",
        entry.join(", ")
    );
    let _ = writeln!(s, "\n### Limits\n\n| limit | value |\n|---|---|");
    for (name, v) in map_limits() {
        let _ = writeln!(s, "| {} | {v} |", name.replace('_', " "));
    }
    let _ = writeln!(
        s,
        "| bytes per event (`emit_event`) | {} |",
        crate::event::MAX_EVENT_BYTES
    );
    let _ = writeln!(
        s,
        "| bytes per `read_mem` / `read_str` / `write_mem` | {} |",
        crate::imports::MAX_MEM_ACCESS_BYTES
    );
    let _ = writeln!(
        s,
        "| log data bytes per record | {} |",
        record::MAX_LOG_DATA_BYTES
    );
    let _ = writeln!(
        s,
        "| item descriptors per record | {} |",
        record::MAX_LOG_ITEMS
    );
    let _ = writeln!(
        s,
        "| stack-trace area bytes | {} |",
        record::MAX_STACKTRACE_BYTES
    );
    let _ = writeln!(
        s,
        "| live calls per return probe and process (`maxactive`) | default {}, at most {} |",
        crate::manifest::DEFAULT_MAXACTIVE,
        crate::manifest::MAX_MAXACTIVE
    );
    s
}
