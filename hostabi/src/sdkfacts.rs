//! The named numbers of the ABI as groups, for the SDK generators of
//! languages that have no macros of their own over this crate (Zig,
//! AssemblyScript): each group becomes a namespace of constants in the
//! rendered file, in the same order as the C header lists them.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::record::{self, ItemKind, token};
use crate::{Outcome, Status, regs};

/// One named constant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Const {
    /// Upper-case name (`RDI`, `NOT_PERMITTED`).
    pub name: String,
    /// Its value.
    pub value: i64,
    /// One line saying what it is.
    pub doc: String,
    /// Whether the value reads best in hexadecimal (register ids, kinds).
    pub hex: bool,
}

/// A namespace of constants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The namespace's name in `snake_case` (`status`, `map_op`); renderers
    /// case it as their language wants.
    pub name: &'static str,
    /// What the group is.
    pub doc: &'static str,
    /// The constants, in ABI order.
    pub items: Vec<Const>,
}

fn c(name: &str, value: i64, doc: &str, hex: bool) -> Const {
    Const {
        name: name.to_string(),
        value,
        doc: doc.to_string(),
        hex,
    }
}

/// Every group, in the order the SDKs list them.
pub fn groups() -> Vec<Group> {
    let mut g = Vec::new();
    g.push(Group {
        name: "status",
        doc: "Status codes returned by host imports.",
        items: Status::ALL
            .iter()
            .map(|s| c(s.name(), *s as i64, "", false))
            .collect(),
    });
    g.push(Group {
        name: "outcome",
        doc: "Outcomes: the value a handler returns.",
        items: Outcome::ALL
            .iter()
            .map(|o| c(o.name(), *o as i64, "", false))
            .collect(),
    });
    g.push(Group {
        name: "reg",
        doc: "Register ids of `read_reg` / `write_reg` (x86-64).",
        items: regs::REGS
            .iter()
            .map(|r| {
                let doc = alloc::format!(
                    "`{}`: {} bits{}",
                    r.name,
                    r.width,
                    if r.writable { ", writable" } else { "" }
                );
                c(&r.name.to_ascii_uppercase(), i64::from(r.id), &doc, true)
            })
            .collect(),
    });
    g.push(Group {
        name: "limit",
        doc: "Limits of the host ABI.",
        items: alloc::vec![
            c(
                "MAX_MEM_ACCESS_BYTES",
                i64::from(crate::imports::MAX_MEM_ACCESS_BYTES),
                "Largest length of one `read_mem`, `read_str` or `write_mem`.",
                false
            ),
            c(
                "MAX_LOG_DATA_BYTES",
                i64::from(record::MAX_LOG_DATA_BYTES),
                "Largest data area of one log record.",
                false
            ),
            c(
                "MAX_LOG_ITEMS",
                i64::from(record::MAX_LOG_ITEMS),
                "Most item descriptors of one log record.",
                false
            ),
            c(
                "MAX_STACKTRACE_BYTES",
                i64::from(record::MAX_STACKTRACE_BYTES),
                "Largest stack-trace area.",
                false
            ),
            c(
                "DEFAULT_MAXACTIVE",
                i64::from(crate::manifest::DEFAULT_MAXACTIVE),
                "Live calls of a return probe tracked per process without `maxactive`.",
                false
            ),
            c(
                "MAX_MAXACTIVE",
                i64::from(crate::manifest::MAX_MAXACTIVE),
                "Largest `maxactive` of a return probe.",
                false
            ),
            c(
                "MAP_DEFAULT_MAX_KEYS",
                i64::from(crate::maps::DEFAULT_MAX_KEYS),
                "Keys of a map without `maxkeys=`.",
                false
            ),
            c(
                "MAX_EVENT_BYTES",
                i64::from(crate::event::MAX_EVENT_BYTES),
                "Largest data of one `emit_event`.",
                false
            ),
        ],
    });
    g.push(Group {
        name: "item_kind",
        doc: "Kinds of log item descriptors (bits 16-23 of a descriptor; see `item`).",
        items: [
            ("RAW_WORDS", ItemKind::RawWords),
            ("RAW_BYTES", ItemKind::RawBytes),
            ("TOKENIZED", ItemKind::Tokenized),
        ]
        .iter()
        .map(|(n, k)| c(n, i64::from(*k as u8), "", true))
        .collect(),
    });
    g.push(Group {
        name: "token",
        doc: "Tokens of TOKENIZED items: token byte, u16 count, payload.",
        items: [
            ("MEMORY", token::MEMORY),
            ("STRING", token::STRING),
            ("LOCAL_VARS", token::LOCAL_VARS),
            ("GLOBAL_VARS", token::GLOBAL_VARS),
            ("WORDS", token::WORDS),
            ("FAULT", token::FAULT),
        ]
        .iter()
        .map(|(n, t)| c(n, i64::from(*t), "", true))
        .collect(),
    });
    g.push(Group {
        name: "map_kind",
        doc: "Kinds of the manifest's `map` lines.",
        items: crate::maps::MapKind::ALL
            .iter()
            .map(|k| {
                c(
                    &k.name().to_ascii_uppercase(),
                    i64::from(*k as u8),
                    "",
                    false,
                )
            })
            .collect(),
    });
    g.push(Group {
        name: "map_op",
        doc: "Ops of `map_update`.",
        items: crate::maps::Op::ALL
            .iter()
            .map(|o| c(o.name(), i64::from(*o as u8), "", false))
            .collect(),
    });
    g.push(Group {
        name: "event_kind",
        doc: "Kinds of `emit_event` events (formats in the `wprobe.events` section).",
        items: crate::event::EventKind::ALL
            .iter()
            .map(|k| c(k.name(), *k as i64, "", false))
            .collect(),
    });
    g.push(Group {
        name: "clock",
        doc: "Clock ids of `clock_ns`.",
        items: crate::imports::clock::ALL
            .iter()
            .map(|(n, v)| c(n, i64::from(*v), "", false))
            .collect(),
    });
    g
}

/// The manifest's first two lines (format and ABI version), which every
/// SDK puts before the lines a handler author writes.
pub fn manifest_head() -> String {
    alloc::format!(
        "{} {}\nabi {}\n",
        crate::manifest::MAGIC,
        crate::manifest::FORMAT_VERSION,
        crate::ABI_VERSION
    )
}

/// `value` as the SDKs write it: hexadecimal (`0x00a`) or decimal.
pub fn literal(k: &Const) -> String {
    if k.hex && k.value >= 0 {
        alloc::format!("0x{:03x}", k.value)
    } else {
        k.value.to_string()
    }
}

/// `snake_case` as `UpperCamel` (`map_op` -> `MapOp`).
pub fn camel(snake: &str) -> String {
    let mut s = String::new();
    for word in snake.split('_') {
        let mut ch = word.chars();
        if let Some(first) = ch.next() {
            s.push(first.to_ascii_uppercase());
            s.extend(ch.map(|x| x.to_ascii_lowercase()));
        }
    }
    s
}

/// Words of `text` as comment lines of at most `width` columns, each
/// starting with `prefix` (`/// `, `// `).
pub fn wrap(out: &mut String, prefix: &str, text: &str, width: usize) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && prefix.len() + line.len() + 1 + word.len() > width {
            out.push_str(prefix);
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(prefix);
        out.push_str(&line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_register_and_limit_is_in_a_group() {
        let g = groups();
        let find = |group: &str, name: &str| {
            g.iter()
                .find(|x| x.name == group)
                .and_then(|x| x.items.iter().find(|k| k.name == name))
                .map(|k| k.value)
        };
        assert_eq!(find("status", "FULL"), Some(-8));
        assert_eq!(find("outcome", "STOP"), Some(8));
        assert_eq!(find("reg", "RDI"), Some(0xa));
        assert_eq!(find("reg", "R15D"), Some(0x117));
        assert_eq!(find("limit", "MAX_MEM_ACCESS_BYTES"), Some(1 << 20));
        assert_eq!(find("item_kind", "TOKENIZED"), Some(0x82));
        assert_eq!(find("clock", "REALTIME"), Some(2));
        let regs = g.iter().find(|x| x.name == "reg").unwrap();
        assert_eq!(regs.items.len(), regs::REGS.len());
        assert_eq!(camel("map_op"), "MapOp");
        assert_eq!(manifest_head(), "wprobe-manifest 1\nabi 5\n");
    }
}
