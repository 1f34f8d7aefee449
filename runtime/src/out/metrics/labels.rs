//! Metric names from map names, and label values from map keys: `key` for
//! a map with one key field, `key0`, `key1`… for several; integers in
//! decimal (as bpftrace prints keys), strings as UTF-8 with any other byte
//! written `\xNN` (so two different keys never read the same), buffers as
//! bpftrace prints them, stacks and symbols as the session rendered them.
//! A value longer than [`MAX_LABEL_BYTES`] is cut and ends with a hash of
//! the whole value, so cut values stay distinct. Escaping for the
//! exposition (`\\`, `\"`, `\n`) is the encoder's.

use hostabi::layout::{Layout, word};

/// The longest label value, in bytes (a cut value keeps its first bytes
/// and a 17-byte hash suffix within this).
pub const MAX_LABEL_BYTES: usize = 512;

/// Whether `name` is a valid metric name prefix (`[a-zA-Z_:][a-zA-Z0-9_:]*`,
/// or empty).
pub fn valid_prefix(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        None => true,
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
            chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        }
        Some(_) => false,
    }
}

/// The metric family name of map `map` (`@name`, `@`, or a module's own
/// name) under `prefix`: `prefix_name`, `prefix_map` for the bare `@`;
/// characters a metric name cannot hold become `_`.
pub fn metric_name(prefix: &str, map: &str) -> String {
    let base = map.strip_prefix('@').unwrap_or(map);
    let base = if base.is_empty() { "map" } else { base };
    let mut out = String::with_capacity(prefix.len() + 1 + base.len());
    out.push_str(prefix);
    if !prefix.is_empty() {
        out.push('_');
    }
    for (i, c) in base.chars().enumerate() {
        let ok = c.is_ascii_alphabetic()
            || c == '_'
            || c == ':'
            || (c.is_ascii_digit() && (i > 0 || !prefix.is_empty()));
        out.push(if ok { c } else { '_' });
    }
    out
}

/// The label names of a key of `fields` fields.
pub fn key_names(fields: usize) -> Vec<String> {
    match fields {
        0 => Vec::new(),
        1 => vec!["key".to_string()],
        n => (0..n).map(|i| format!("key{i}")).collect(),
    }
}

/// Whether a field needs the session's symbolizer (a stack or a code
/// address, possibly inside a tuple).
pub fn needs_symbols(l: &Layout) -> bool {
    match l {
        Layout::Ustack(_) | Layout::Usym => true,
        Layout::Tuple(f) => f.iter().any(needs_symbols),
        _ => false,
    }
}

/// The label values of `key`, one per field of `fields` (fields that need
/// symbols print as their raw words here: the session renders those maps).
pub fn key_values(fields: &[Layout], key: &[u8]) -> Vec<String> {
    let mut out = Vec::with_capacity(fields.len());
    let mut off = 0;
    for f in fields {
        let b = key.get(off..).unwrap_or(&[]);
        out.push(bound(field_text(f, b, true)));
        off += f.size();
    }
    out
}

/// A field as the exit output prints it (`top`: a key field itself, whose
/// integers print signed; inside a tuple they print as their type says).
fn field_text(l: &Layout, b: &[u8], top: bool) -> String {
    match l {
        Layout::Int { signed, bytes } => {
            let v = crate::out::btout::int_value(b, *signed || top, *bytes);
            if *signed || top {
                (v as i64).to_string()
            } else {
                v.to_string()
            }
        }
        Layout::Str(n) => {
            let s = b.get(..(*n as usize).min(b.len())).unwrap_or(&[]);
            escape_bytes(crate::out::btout::cstr(s))
        }
        Layout::Buf(n) => {
            crate::out::btout::hex_buffer(b.get(8..8 + *n as usize).unwrap_or(&[]), true, true)
        }
        Layout::Ustack(n) => {
            let frames = (word(b, 8) as usize).min(*n as usize);
            let addrs: Vec<String> = (0..frames)
                .map(|i| word(b, 16 + 8 * i))
                .take_while(|a| *a != 0)
                .map(|a| format!("{a:#x}"))
                .collect();
            addrs.join(",")
        }
        Layout::UstackAs(n, _) => field_text(&Layout::Ustack(*n), b, top),
        Layout::Usym | Layout::Ptr => format!("{:#x}", word(b, 0)),
        Layout::Record(fields) => crate::out::btout::record_text(fields, b, |n, f, b| {
            format!(".{n} = {}", field_text(f, b, false))
        }),
        Layout::Array(f, n) => crate::out::btout::array_text(f, *n, b, |b| field_text(f, b, false)),
        Layout::Enum(values) => {
            let v = word(b, 0) as i64;
            match values.iter().find(|(_, x)| *x == v) {
                Some((n, _)) => n.clone(),
                None => v.to_string(),
            }
        }
        // A time: its nanoseconds (a label is no place for a local date).
        Layout::Strftime(_) => word(b, 0).to_string(),
        Layout::Username => crate::out::btout::username(word(b, 0)),
        Layout::Inet => crate::out::btout::inet_text(word(b, 0), b.get(8..24).unwrap_or(&[])),
        Layout::Tuple(fields) => {
            let mut parts = Vec::new();
            let mut off = 0;
            for f in fields.iter() {
                parts.push(field_text(f, b.get(off..).unwrap_or(&[]), false));
                off += f.size();
            }
            format!("({})", parts.join(", "))
        }
    }
}

/// UTF-8 as it is, every byte of an invalid sequence as `\xNN` (and a
/// backslash as `\\`, so that the two cannot be confused).
pub fn escape_bytes(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                s.push_str("\\\\");
            } else {
                s.push(c);
            }
        }
        for x in chunk.invalid() {
            s.push_str(&format!("\\x{x:02x}"));
        }
    }
    s
}

/// `s` cut to [`MAX_LABEL_BYTES`] (at a character boundary) with `~` and
/// 16 hex digits of a hash of the whole of it, when it is longer.
pub fn bound(s: String) -> String {
    if s.len() <= MAX_LABEL_BYTES {
        return s;
    }
    let hash = blake3::hash(s.as_bytes()).to_hex();
    let mut cut = MAX_LABEL_BYTES - 17;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}~{}", &s[..cut], &hash[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_map_names() {
        assert_eq!(metric_name("wprobe", "@bytes"), "wprobe_bytes");
        assert_eq!(metric_name("wprobe", "@"), "wprobe_map");
        assert_eq!(metric_name("", "@"), "map");
        assert_eq!(metric_name("app", "@x1"), "app_x1");
        assert_eq!(metric_name("", "@1x"), "_x");
        assert_eq!(metric_name("w", "my-map.v2"), "w_my_map_v2");
        assert!(valid_prefix("wprobe") && valid_prefix("") && valid_prefix("a:b_1"));
        assert!(!valid_prefix("1a") && !valid_prefix("a-b") && !valid_prefix("é"));
    }

    #[test]
    fn keys_become_distinct_bounded_values() {
        let fields = [
            Layout::I64,
            Layout::Str(8),
            Layout::Int {
                signed: false,
                bytes: 4,
            },
        ];
        let mut key = Vec::new();
        key.extend_from_slice(&(-3i64).to_le_bytes());
        key.extend_from_slice(b"a\"\\\xff\n\0zz");
        key.extend_from_slice(&0xffff_ffffu64.to_le_bytes());
        assert_eq!(
            key_values(&fields, &key),
            ["-3", "a\"\\\\\\xff\n", "-1"].map(String::from)
        );
        // Inside a tuple, integers print as their type says (as at exit).
        let tuple = [Layout::Tuple(Box::new([
            Layout::U64,
            Layout::I64,
            Layout::Str(8),
        ]))];
        let mut key = Vec::new();
        key.extend_from_slice(&(-3i64).to_le_bytes());
        key.extend_from_slice(&(-3i64).to_le_bytes());
        key.extend_from_slice(b"ab\0\0\0\0\0\0");
        assert_eq!(key_values(&tuple, &key), ["(18446744073709551613, -3, ab)"]);
        assert_eq!(key_names(0), Vec::<String>::new());
        assert_eq!(key_names(1), ["key"]);
        assert_eq!(key_names(3), ["key0", "key1", "key2"]);
        // Cut values keep a hash of the whole: two long values that share
        // their first bytes stay apart, and each is within the bound.
        let a = bound(format!("{}a", "é".repeat(400)));
        let b = bound(format!("{}b", "é".repeat(400)));
        assert!(a.len() <= MAX_LABEL_BYTES && b.len() <= MAX_LABEL_BYTES);
        assert_ne!(a, b);
        assert_eq!(bound("short".into()), "short");
    }
}
