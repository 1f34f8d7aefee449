//! Output events (the `emit_event` import) and the `wprobe.events` custom
//! section that describes them: what a handler emits is a kind, an id and
//! raw argument bytes; the format strings and argument layouts live in the
//! module, and wprobe formats when it writes the output (bpftrace formats
//! in user space the same way).
//!
//! The section is UTF-8 text, one entry per line, entries of each kind
//! numbered from 0 in order:
//!
//! ```text
//! wprobe-events 1
//! printf "x=%d %s\n" i64 str:16
//! value (u64,str:64)
//! time "%H:%M:%S\n"
//! ```
//!
//! Strings are double-quoted with the escapes `\n \t \r \\ \" \xHH`, so any
//! byte can be carried. Parsing never panics and reports byte offsets.

use crate::layout::{self, Layout};
use crate::record::{DecodeError, DecodeErrorKind};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

/// Name of the custom section describing a module's events.
pub const EVENTS_SECTION: &str = "wprobe.events";
/// First word of the section.
pub const MAGIC: &str = "wprobe-events";
/// Format version of the section.
pub const FORMAT_VERSION: u32 = 1;
/// Largest data area of one event.
pub const MAX_EVENT_BYTES: u32 = 65535;

/// What an event asks wprobe to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum EventKind {
    /// `printf`: id = a `printf` entry; data = its arguments.
    Printf = 1,
    /// `print(@map[, top[, div]])`: id = the map's index; data = u64 top, u64 div.
    PrintMap = 2,
    /// `print(value)`: id = a `value` entry; data = the value.
    PrintValue = 3,
    /// `time(fmt)`: id = a `time` entry; no data.
    Time = 4,
    /// `cat(fmt, args)`: id = a `printf` entry giving the file's path;
    /// wprobe prints the file's contents.
    Cat = 5,
    /// `system(fmt, args)`: id = a `printf` entry giving a shell command
    /// (allowed by `--unsafe` only); wprobe prints what it writes.
    System = 6,
    /// `exit(code)`: id 0; data = i64 code. wprobe ends the run (the
    /// handler returns STOP next) with exit status `code & 0xff`.
    Exit = 7,
}

impl EventKind {
    /// Every kind, in discriminant order.
    pub const ALL: &'static [EventKind] = &[
        EventKind::Printf,
        EventKind::PrintMap,
        EventKind::PrintValue,
        EventKind::Time,
        EventKind::Cat,
        EventKind::System,
        EventKind::Exit,
    ];

    /// The kind with code `c`.
    pub fn from_code(c: i32) -> Option<EventKind> {
        EventKind::ALL.iter().copied().find(|k| *k as i32 == c)
    }

    /// The constant name (ABI snapshot, C header).
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::Printf => "PRINTF",
            EventKind::PrintMap => "PRINT_MAP",
            EventKind::PrintValue => "PRINT_VALUE",
            EventKind::Time => "TIME",
            EventKind::Cat => "CAT",
            EventKind::System => "SYSTEM",
            EventKind::Exit => "EXIT",
        }
    }
}

/// One `printf` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrintfEntry {
    /// The format (bytes: escapes may produce any byte).
    pub format: Vec<u8>,
    /// The arguments' layouts, in order; the data is their concatenation.
    pub args: Vec<Layout>,
}

impl PrintfEntry {
    /// Byte offset of each argument in the data, and the data's size.
    pub fn offsets(&self) -> (Vec<usize>, usize) {
        let mut offs = Vec::with_capacity(self.args.len());
        let mut at = 0;
        for a in &self.args {
            offs.push(at);
            at += a.size();
        }
        (offs, at)
    }
}

/// The decoded section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Events {
    /// `printf` entries.
    pub printf: Vec<PrintfEntry>,
    /// `value` entries (layouts of `print(value)`).
    pub values: Vec<Layout>,
    /// `time` entries (strftime formats).
    pub times: Vec<Vec<u8>>,
}

/// Appends `bytes` as a quoted, escaped string.
pub fn quote_into(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push('"');
}

/// Parses a quoted string at the start of `s`; returns the bytes and the rest.
fn unquote(s: &str) -> Option<(Vec<u8>, &str)> {
    let b = s.as_bytes();
    if b.first() != Some(&b'"') {
        return None;
    }
    let mut out = Vec::new();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'"' => return Some((out, &s[i + 1..])),
            b'\\' => {
                let c = *b.get(i + 1)?;
                i += 2;
                match c {
                    b'n' => out.push(b'\n'),
                    b't' => out.push(b'\t'),
                    b'r' => out.push(b'\r'),
                    b'\\' => out.push(b'\\'),
                    b'"' => out.push(b'"'),
                    b'x' => {
                        let h = s.get(i..i + 2)?;
                        out.push(u8::from_str_radix(h, 16).ok()?);
                        i += 2;
                    }
                    _ => return None,
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    None
}

impl Events {
    /// Whether there is no entry at all.
    pub fn is_empty(&self) -> bool {
        self.printf.is_empty() && self.values.is_empty() && self.times.is_empty()
    }

    /// Renders the section text.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{MAGIC} {FORMAT_VERSION}");
        for p in &self.printf {
            s.push_str("printf ");
            quote_into(&mut s, &p.format);
            for a in &p.args {
                s.push(' ');
                a.render_into(&mut s);
            }
            s.push('\n');
        }
        for v in &self.values {
            s.push_str("value ");
            v.render_into(&mut s);
            s.push('\n');
        }
        for t in &self.times {
            s.push_str("time ");
            quote_into(&mut s, t);
            s.push('\n');
        }
        s
    }

    /// Parses the section's payload.
    pub fn decode(bytes: &[u8]) -> Result<Events, DecodeError> {
        let text = core::str::from_utf8(bytes)
            .map_err(|e| DecodeError::new(e.valid_up_to(), DecodeErrorKind::BadValue))?;
        let mut ev = Events::default();
        let mut first = true;
        let mut off = 0;
        for line in text.split_inclusive('\n') {
            let at = off;
            off += line.len();
            let line = line.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            let bad = DecodeError::new(at, DecodeErrorKind::BadValue);
            if first {
                first = false;
                let v = line.strip_prefix(MAGIC).ok_or(bad)?.trim();
                let v: u32 = v.parse().map_err(|_| bad)?;
                if v != FORMAT_VERSION {
                    return Err(DecodeError::new(at, DecodeErrorKind::UnsupportedVersion(v)));
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("printf ") {
                let (format, rest) = unquote(rest).ok_or(bad)?;
                let args = rest
                    .split_ascii_whitespace()
                    .map(Layout::parse)
                    .collect::<Option<Vec<_>>>()
                    .ok_or(bad)?;
                ev.printf.push(PrintfEntry { format, args });
            } else if let Some(rest) = line.strip_prefix("value ") {
                ev.values.push(Layout::parse(rest.trim()).ok_or(bad)?);
            } else if let Some(rest) = line.strip_prefix("time ") {
                let (f, rest) = unquote(rest).ok_or(bad)?;
                if !rest.trim().is_empty() {
                    return Err(bad);
                }
                ev.times.push(f);
            } else {
                return Err(bad);
            }
        }
        if first {
            return Err(DecodeError::new(0, DecodeErrorKind::Truncated));
        }
        Ok(ev)
    }
}

/// Re-exported for users of events: the layout list parser.
pub use layout::parse_list;

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn round_trip() {
        let ev = Events {
            printf: vec![
                PrintfEntry {
                    format: b"x=%d \"%s\"\n\x01\xff".to_vec(),
                    args: vec![Layout::I64, Layout::Str(16)],
                },
                PrintfEntry {
                    format: b"plain\n".to_vec(),
                    args: vec![],
                },
            ],
            values: vec![Layout::parse("(u64,str:4)").unwrap()],
            times: vec![b"%H:%M:%S\n".to_vec()],
        };
        let text = ev.encode();
        assert_eq!(Events::decode(text.as_bytes()), Ok(ev));
    }

    #[test]
    fn every_prefix_and_flip_is_handled() {
        let ev = Events {
            printf: vec![PrintfEntry {
                format: b"a\\b %d\n".to_vec(),
                args: vec![Layout::U64],
            }],
            values: vec![Layout::Usym],
            times: vec![b"%s".to_vec()],
        };
        let text = ev.encode();
        let b = text.as_bytes();
        for cut in 0..b.len() {
            let _ = Events::decode(&b[..cut]);
        }
        for i in 0..b.len() {
            let mut c = b.to_vec();
            c[i] ^= 0x5a;
            let _ = Events::decode(&c);
        }
    }
}
