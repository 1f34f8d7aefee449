//! Output of records: one line per record, as readable text (default) or
//! JSON lines (`--format json`, schema in `docs/json-schema.md`). Control
//! characters never reach the terminal raw: text output escapes them, JSON
//! encodes them. Formatting appends to a reused `String`; it allocates only
//! while that buffer grows.

use hostabi::record::{self, Item, StackTrace, decode_log, decode_stacktrace, words};
use std::fmt::Write as _;

/// Output format (`--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// How numbers are written in text records (`--radix`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Radix {
    /// Magnitudes below 100,000 in decimal (signed when negative), others
    /// in hex (addresses read as addresses, counts as counts).
    #[default]
    Auto,
    /// Every number in hex.
    Hex,
    /// Every number in decimal, unsigned.
    Dec,
}

/// How text records are written (`wprobe run -t`, `--radix`); JSON
/// records always carry `time_ns` and decimal numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TextStyle {
    /// Start each record with the seconds since this time (ns since the
    /// epoch), with microseconds: `1.234567 `.
    pub since_ns: Option<u64>,
    /// How numbers are written.
    pub radix: Radix,
}

/// What the formatter needs to know about one record.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    /// Sequence number in the run (0-based).
    pub seq: u64,
    /// Log or stack trace.
    pub stacktrace: bool,
    /// Probe label (e.g. `probe_target:target_fn`).
    pub probe: &'a str,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU.
    pub cpu: u32,
    /// Major code.
    pub major: u16,
    /// Minor code.
    pub minor: u16,
    /// Time of the hit, ns since the epoch.
    pub time_ns: u64,
    /// The data area.
    pub data: &'a [u8],
    /// Item descriptors (log records).
    pub items: &'a [u32],
}

/// Renders a word: small magnitudes in decimal, everything else in hex.
pub fn word(out: &mut String, v: u64) {
    word_in(out, v, Radix::Auto);
}

fn word_in(out: &mut String, v: u64, radix: Radix) {
    let s = v as i64;
    if radix == Radix::Hex {
        let _ = write!(out, "{v:#x}");
    } else if radix == Radix::Dec {
        decimal(out, v);
    } else if v < 100_000 {
        let _ = write!(out, "{v}");
    } else if (-100_000..0).contains(&s) {
        let _ = write!(out, "{s}");
    } else {
        let _ = write!(out, "{v:#x}");
    }
}

fn hex(out: &mut String, bytes: &[u8]) {
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{b:02x}");
    }
}

/// Escapes bytes as a double-quoted string safe for terminals.
pub fn text_string(out: &mut String, bytes: &[u8]) {
    out.push('"');
    escape_chars(
        out,
        bytes,
        char::is_control,
        |out, c| {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        },
        |out, b| {
            let _ = write!(out, "\\x{b:02x}");
        },
    );
    out.push('"');
}

/// Appends `bytes` escaped: `"`, `\`, `\n`, `\r` and `\t` as in C, every
/// other character `control` picks by `char_escape`, and each byte that
/// is not valid UTF-8 by `byte_escape`; the rest copied. The escaping of
/// text records ([`text_string`]) and of bpftrace's JSON strings
/// (`btout::json_escape`), which differ only in those three.
pub(crate) fn escape_chars(
    out: &mut String,
    bytes: &[u8],
    control: impl Fn(char) -> bool,
    char_escape: impl Fn(&mut String, char),
    byte_escape: impl Fn(&mut String, u8),
) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if control(c) => char_escape(out, c),
                c => out.push(c),
            }
        }
        for &b in chunk.invalid() {
            byte_escape(out, b);
        }
    }
}

/// Appends a JSON string literal (bytes decoded as UTF-8, invalid bytes as U+FFFD).
///
/// Escapes `"`, `\\`, the C0 controls, DEL, U+2028 and U+2029; copies
/// everything else in runs (the hot path of `--format json`).
pub fn json_string(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        let s = chunk.valid();
        let b = s.as_bytes();
        let mut start = 0;
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            // U+2028 / U+2029 are E2 80 A8 / E2 80 A9 in UTF-8.
            let line_sep = c == 0xE2
                && b.get(i + 1) == Some(&0x80)
                && matches!(b.get(i + 2), Some(0xA8 | 0xA9));
            if !(c == b'"' || c == b'\\' || c < 0x20 || c == 0x7f || line_sep) {
                i += 1;
                continue;
            }
            // `i` is at an ASCII byte or at the start of a 3-byte character,
            // so both slices end on character boundaries.
            out.push_str(&s[start..i]);
            match c {
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                b'\n' => out.push_str("\\n"),
                b'\r' => out.push_str("\\r"),
                b'\t' => out.push_str("\\t"),
                0xE2 => out.push_str(if b.get(i + 2) == Some(&0xA8) {
                    "\\u2028"
                } else {
                    "\\u2029"
                }),
                c => {
                    const DIGITS: &[u8; 16] = b"0123456789abcdef";
                    out.push_str("\\u00");
                    out.push(DIGITS[(c >> 4) as usize] as char);
                    out.push(DIGITS[(c & 15) as usize] as char);
                }
            }
            i += if line_sep { 3 } else { 1 };
            start = i;
        }
        out.push_str(&s[start..]);
        if !chunk.invalid().is_empty() {
            out.push('\u{FFFD}');
        }
    }
    out.push('"');
}

/// Appends `v` in decimal (what `write!(out, "{v}")` writes, without the
/// formatting machinery: the JSON writer's integers).
fn decimal(out: &mut String, v: u64) {
    push_decimal(out, v, 0, b' ');
}

/// Appends `v` in decimal, right-aligned in `width` characters padded
/// with `pad` (`{v:width$}` or `{v:0width$}`); wider numbers take the
/// room they need.
pub fn push_decimal(out: &mut String, v: u64, width: usize, pad: u8) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = v;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let len = digits.len() - at;
    for _ in len..width {
        out.push(char::from(pad));
    }
    // A few digits one by one; more (a time in ns) in one copy, whose
    // UTF-8 check costs less than their pushes.
    if len <= 4 {
        for &d in &digits[at..] {
            out.push(char::from(d));
        }
    } else {
        out.push_str(std::str::from_utf8(&digits[at..]).expect("decimal digits are ASCII"));
    }
}

fn text_words(out: &mut String, name: &str, payload: &[u8], radix: Radix) {
    out.push_str(name);
    out.push('(');
    for (i, w) in words(payload).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        word_in(out, w, radix);
    }
    out.push(')');
}

fn text_item(out: &mut String, item: &Item<'_>, radix: Radix) {
    match item {
        Item::Words(p) => text_words(out, "", p, radix),
        Item::CountedWords(p) => text_words(out, "n", p, radix),
        Item::LocalVars(p) => text_words(out, "lv", p, radix),
        Item::GlobalVars(p) => text_words(out, "gv", p, radix),
        Item::Bytes(b) => {
            out.push_str("b(");
            hex(out, b);
            out.push(')');
        }
        Item::Str(s) => text_string(out, s),
        Item::Memory(m) => {
            let _ = write!(out, "mem[{}](", m.len());
            hex(out, m);
            out.push(')');
        }
        Item::Fault(a) => {
            let _ = write!(out, "fault({a:#x})");
        }
        Item::Raw(r) => {
            out.push_str("raw(");
            hex(out, r);
            out.push(')');
        }
    }
}

fn json_words(out: &mut String, kind: &str, payload: &[u8]) {
    out.push_str("{\"type\":\"");
    out.push_str(kind);
    out.push_str("\",\"values\":[");
    for (i, w) in words(payload).enumerate() {
        if i > 0 {
            out.push(',');
        }
        decimal(out, w);
    }
    out.push_str("]}");
}

fn json_item(out: &mut String, item: &Item<'_>) {
    match item {
        Item::Words(p) => json_words(out, "words", p),
        Item::CountedWords(p) => json_words(out, "counted_words", p),
        Item::LocalVars(p) => json_words(out, "lv", p),
        Item::GlobalVars(p) => json_words(out, "gv", p),
        Item::Bytes(b) => {
            out.push_str("{\"type\":\"bytes\",\"hex\":\"");
            hex_compact(out, b);
            out.push_str("\"}");
        }
        Item::Str(s) => {
            out.push_str("{\"type\":\"str\",\"value\":");
            json_string(out, s);
            out.push_str(",\"hex\":\"");
            hex_compact(out, s);
            out.push_str("\"}");
        }
        Item::Memory(m) => {
            out.push_str("{\"type\":\"mem\",\"hex\":\"");
            hex_compact(out, m);
            out.push_str("\"}");
        }
        Item::Fault(a) => {
            let _ = write!(out, "{{\"type\":\"fault\",\"address\":{a}}}");
        }
        Item::Raw(r) => {
            out.push_str("{\"type\":\"raw\",\"hex\":\"");
            hex_compact(out, r);
            out.push_str("\"}");
        }
    }
}

fn hex_compact(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    // Through a stack buffer: one `push_str` per 64 bytes, not two `push`es per byte.
    let mut buf = [0u8; 128];
    for chunk in bytes.chunks(64) {
        for (i, b) in chunk.iter().enumerate() {
            buf[2 * i] = DIGITS[(b >> 4) as usize];
            buf[2 * i + 1] = DIGITS[(b & 15) as usize];
        }
        let hex = &buf[..2 * chunk.len()];
        out.push_str(std::str::from_utf8(hex).expect("hex digits are ASCII"));
    }
}

fn text_trace(out: &mut String, st: &StackTrace<'_>, radix: Radix) {
    let _ = write!(out, " {{exc {:#x}", st.code);
    for n in hostabi::Exception::names_in(st.code) {
        let _ = write!(out, " {n}");
    }
    if st.handler == record::HANDLER_NONE {
        out.push_str(" handler none");
    } else {
        let _ = write!(out, " handler {}", st.handler);
    }
    out.push_str(" p1 ");
    word_in(out, st.p1, radix);
    out.push_str(" p2 ");
    word_in(out, st.p2, radix);
    for f in st.frames() {
        match f {
            Ok(f) => {
                let _ = write!(out, " | call {} ret {}", f.called, f.ret);
                for (n, p) in [(" pv", f.slots), (" lv", f.lvars), (" gv", f.gvars)] {
                    if !p.is_empty() {
                        text_words(out, n, p, radix);
                    }
                }
            }
            Err(e) => {
                let _ = write!(out, " | bad frame: {e}");
            }
        }
    }
    out.push('}');
}

/// Appends one record as a line (with the trailing newline).
pub fn record(out: &mut String, fmt: Format, r: &RecordView<'_>) {
    record_styled(out, fmt, TextStyle::default(), r);
}

/// [`record()`], text records written in `style`.
pub fn record_styled(out: &mut String, fmt: Format, style: TextStyle, r: &RecordView<'_>) {
    match fmt {
        Format::Text => text_record(out, style, r),
        Format::Json => json_record(out, r),
    }
    out.push('\n');
}

fn text_record(out: &mut String, style: TextStyle, r: &RecordView<'_>) {
    if let Some(t0) = style.since_ns {
        let d = r.time_ns.saturating_sub(t0);
        decimal(out, d / 1_000_000_000);
        let _ = write!(out, ".{:06} ", d % 1_000_000_000 / 1_000);
    }
    let _ = write!(
        out,
        "{} pid {} tid {} cpu {} ",
        r.probe, r.pid, r.tid, r.cpu
    );
    if r.stacktrace {
        out.push_str("stacktrace");
        let res = decode_stacktrace(r.data, |st| text_trace(out, st, style.radix));
        match res {
            Ok(h) => {
                out.push_str(" from ");
                text_string(out, h.name);
                let _ = write!(
                    out,
                    " at {:#x} id {} {}.{}",
                    h.location, h.id, h.major, h.minor
                );
            }
            Err(e) => {
                let _ = write!(out, " (malformed: {e})");
            }
        }
        return;
    }
    let _ = write!(out, "{}.{}:", r.major, r.minor);
    if r.data.is_empty() {
        out.push_str(" (empty)");
    }
    for item in decode_log(r.data, r.items) {
        out.push(' ');
        match item {
            Ok(i) => text_item(out, &i, style.radix),
            Err(e) => {
                let _ = write!(out, "(bad items: {e})");
            }
        }
    }
}

fn json_record(out: &mut String, r: &RecordView<'_>) {
    let kind = if r.stacktrace { "stacktrace" } else { "log" };
    out.push_str("{\"kind\":\"");
    out.push_str(kind);
    out.push_str("\",\"seq\":");
    decimal(out, r.seq);
    out.push_str(",\"probe\":");
    json_string(out, r.probe.as_bytes());
    for (name, v) in [
        (",\"pid\":", r.pid as u64),
        (",\"tid\":", r.tid as u64),
        (",\"cpu\":", r.cpu as u64),
        (",\"time_ns\":", r.time_ns),
        (",\"major\":", r.major as u64),
        (",\"minor\":", r.minor as u64),
    ] {
        out.push_str(name);
        decimal(out, v);
    }
    out.push_str(",\"items\":[");
    if r.stacktrace {
        let mut first = true;
        let res = decode_stacktrace(r.data, |st| {
            if !first {
                out.push(',');
            }
            first = false;
            let _ = write!(
                out,
                "{{\"type\":\"trace\",\"code\":{},\"handler\":{},\"p1\":{},\"p2\":{},\"frames\":[",
                st.code, st.handler, st.p1, st.p2
            );
            for (i, f) in st.frames().flatten().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{{\"called\":{},\"ret\":{},", f.called, f.ret);
                for (j, (n, p)) in [("pv", f.slots), ("lv", f.lvars), ("gv", f.gvars)]
                    .iter()
                    .enumerate()
                {
                    if j > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "\"{n}\":[");
                    for (k, w) in words(p).enumerate() {
                        if k > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{w}");
                    }
                    out.push(']');
                }
                out.push('}');
            }
            out.push_str("]}");
        });
        out.push(']');
        if let Ok(h) = res {
            out.push_str(",\"trace_name\":");
            json_string(out, h.name);
            let _ = write!(
                out,
                ",\"trace_location\":{},\"trace_id\":{}",
                h.location, h.id
            );
        }
    } else {
        for (i, item) in decode_log(r.data, r.items).enumerate() {
            if i > 0 {
                out.push(',');
            }
            match item {
                Ok(it) => json_item(out, &it),
                Err(_) => out.push_str("{\"type\":\"malformed\"}"),
            }
        }
        out.push(']');
    }
    out.push_str(",\"data_hex\":\"");
    hex_compact(out, r.data);
    out.push_str("\"}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostabi::record::{ItemKind, LogItem};

    fn view<'a>(data: &'a [u8], items: &'a [u32]) -> RecordView<'a> {
        RecordView {
            seq: 7,
            stacktrace: false,
            probe: "probe_target:target_fn",
            pid: 10,
            tid: 11,
            cpu: 2,
            major: 1,
            minor: 1,
            time_ns: 5,
            data,
            items,
        }
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let mut d = vec![1u8, 10, 0];
        d.extend(b"\x1b]0;pwn\x07\r\n");
        let items = [LogItem {
            offset: 0,
            kind: ItemKind::Tokenized,
        }
        .encode()];
        let mut out = String::new();
        record(&mut out, Format::Text, &view(&d, &items));
        assert!(!out.trim_end().chars().any(|c| c.is_control()), "{out:?}");
        assert!(out.contains(r#""\u{1b}]0;pwn\u{7}\r\n""#), "{out}");
        let mut js = String::new();
        record(&mut js, Format::Json, &view(&d, &items));
        let v: serde_json::Value = serde_json::from_str(js.trim_end()).unwrap();
        assert_eq!(v["items"][0]["value"], "\x1b]0;pwn\x07\r\n");
        assert_eq!(v["kind"], "log");
        assert_eq!(v["data_hex"], "010a001b5d303b70776e070d0a");
    }

    /// The char-by-char `json_string` that the run-copying one replaced.
    fn json_string_reference(out: &mut String, bytes: &[u8]) {
        out.push('"');
        for chunk in bytes.utf8_chunks() {
            for c in chunk.valid().chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if (c as u32) < 0x20
                        || c == '\u{7f}'
                        || c == '\u{2028}'
                        || c == '\u{2029}' =>
                    {
                        let _ = write!(out, "\\u{:04x}", c as u32);
                    }
                    c => out.push(c),
                }
            }
            if !chunk.invalid().is_empty() {
                out.push('\u{FFFD}');
            }
        }
        out.push('"');
    }

    #[test]
    fn json_string_matches_the_reference_and_numbers_match_fmt() {
        let mut cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"plain ascii".to_vec(),
            "\u{2028}x\u{2029}\u{2027}\u{202a}\u{e280}é€😀"
                .as_bytes()
                .to_vec(),
            b"\xe2\x80".to_vec(),
            b"\xe2\x80\xa8\xe2".to_vec(),
            b"a\xffb\xc3".to_vec(),
        ];
        cases.push((0u8..=255).collect());
        cases.push((0u8..0x80).rev().collect());
        // Pseudo-random byte strings biased towards the interesting bytes.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let pool = [
            0u8, 0x1f, 0x20, b'"', b'\\', 0x7f, 0xe2, 0x80, 0xa8, 0xa9, b'a', 0xc3, 0xa9, 0xff,
        ];
        for _ in 0..5000 {
            let len = (x % 12) as usize;
            let mut v = Vec::new();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.push(pool[(x % pool.len() as u64) as usize]);
            }
            cases.push(v);
        }
        for c in &cases {
            let (mut got, mut want) = (String::new(), String::new());
            json_string(&mut got, c);
            json_string_reference(&mut want, c);
            assert_eq!(got, want, "{c:x?}");
        }
        for v in [
            0,
            1,
            9,
            10,
            99,
            100,
            12345,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut s = String::new();
            decimal(&mut s, v);
            assert_eq!(s, v.to_string());
        }
    }

    #[test]
    fn json_line_shape() {
        let mut d = Vec::new();
        d.extend(0u64.to_le_bytes());
        d.extend(u64::MAX.to_le_bytes());
        let items = [LogItem {
            offset: 0,
            kind: ItemKind::RawWords,
        }
        .encode()];
        let mut out = String::new();
        record(&mut out, Format::Json, &view(&d, &items));
        assert_eq!(
            out,
            concat!(
                r#"{"kind":"log","seq":7,"probe":"probe_target:target_fn","pid":10,"tid":11,"cpu":2,"#,
                r#""time_ns":5,"major":1,"minor":1,"items":[{"type":"words","values":[0,18446744073709551615]}],"#,
                r#""data_hex":"0000000000000000ffffffffffffffff"}"#,
                "\n"
            )
        );
    }

    #[test]
    fn text_line_shape() {
        let mut d = Vec::new();
        d.extend(0u64.to_le_bytes());
        d.extend(7u64.to_le_bytes());
        d.extend([7, 2, 0]);
        d.extend(0x401146u64.to_le_bytes());
        d.extend((-2i64).to_le_bytes());
        let items = [
            LogItem {
                offset: 0,
                kind: ItemKind::RawWords,
            }
            .encode(),
            LogItem {
                offset: 16,
                kind: ItemKind::Tokenized,
            }
            .encode(),
        ];
        let mut out = String::new();
        record(&mut out, Format::Text, &view(&d, &items));
        assert_eq!(
            out,
            "probe_target:target_fn pid 10 tid 11 cpu 2 1.1: (0, 7) n(0x401146, -2)\n"
        );
    }
}
