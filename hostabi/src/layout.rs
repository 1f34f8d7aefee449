//! Value layouts: how the bytes of a map key, a map value or an event
//! argument are to be read. Compilers write them (manifest `map` lines,
//! the `wprobe.events` section); the runtime reads them to print. Every
//! field starts 8-byte aligned and occupies a multiple of 8 bytes:
//!
//! | spelling | bytes | content |
//! |---|---|---|
//! | `i8` `i16` `i32` `i64` `u8` `u16` `u32` `u64` | 8 | little-endian integer (sign- or zero-extended to 64 bits) |
//! | `str:N` | N rounded up to 8 | NUL-terminated (or N bytes) string, NUL-padded |
//! | `buf:N` | 8 + N rounded up | u64 length (≤ N), then the bytes |
//! | `ustack:N` | 16 + 8N | u64 pid, u64 frame count (≤ N), N return addresses |
//! | `ustack:N:perf`, `ustack:N:raw` | 16 + 8N | the same, printed in perf's style or as bare addresses |
//! | `usym` | 16 | u64 address, u64 pid (printed as the symbol) |
//! | `ptr` | 8 | an address (printed in hex, as a C pointer) |
//! | `{name:L,...}` | sum of fields | a C structure's fields, each laid out as `L` (printed `{ .name = v, ... }`) |
//! | `[L;N]` | N × size of L | a C array (printed `[v,v,...]`) |
//! | `enum{A=1,B=2}` | 8 | a signed integer printed as its enumerator's name |
//! | `strftime:HEX` | 8 | a monotonic time in ns printed as local time by `strftime` of the format whose bytes are HEX |
//! | `username` | 8 | a user id printed as the user's name (`/etc/passwd`, resolved when printed) |
//! | `inet` | 24 | u64 address family (2 `AF_INET`, 10 `AF_INET6`), then 16 address bytes in network order (bpftrace `ntop`) |
//! | `(L,L,...)` | sum of fields | a tuple |
//!
//! Parsing never panics; nesting is limited to [`MAX_DEPTH`].

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;

/// Deepest tuple nesting accepted.
pub const MAX_DEPTH: usize = 8;
/// Largest `N` of `str:N` and `buf:N` (bytes).
pub const MAX_STR_BYTES: u32 = 4096;
/// Largest `N` of `ustack:N` (frames).
pub const MAX_STACK_FRAMES: u32 = 1024;

/// The layout of one value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// An integer of `bytes` (1, 2, 4, 8) significant bytes, stored in 8.
    Int {
        /// Signed (`iN`) or unsigned (`uN`).
        signed: bool,
        /// Significant bytes.
        bytes: u8,
    },
    /// A NUL-padded string of at most N bytes.
    Str(u32),
    /// A length-prefixed byte buffer of at most N bytes.
    Buf(u32),
    /// A user stack of at most N frames.
    Ustack(u32),
    /// A user stack printed in another style than bpftrace's.
    UstackAs(u32, StackMode),
    /// A code address printed as its symbol.
    Usym,
    /// A data address (a C pointer), printed in hex.
    Ptr,
    /// A C structure or union: named fields.
    Record(Box<[(String, Layout)]>),
    /// A C array of N elements.
    Array(Box<Layout>, u32),
    /// A C enumeration's value (i64) with its enumerators.
    Enum(Box<[(String, i64)]>),
    /// A monotonic time (ns) printed as local time by `strftime(format)`.
    Strftime(Box<[u8]>),
    /// A user id printed as the user's name (bpftrace `username`).
    Username,
    /// An address family and 16 address bytes, printed as an IP address
    /// (bpftrace `ntop`).
    Inet,
    /// A tuple.
    Tuple(Box<[Layout]>),
}

/// How a stack prints (bpftrace's stack modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackMode {
    /// perf's: `\tADDR SYM+OFF (MODULE)` per frame.
    Perf,
    /// Bare hex addresses.
    Raw,
}

fn pad8(n: u32) -> usize {
    (n as usize).div_ceil(8) * 8
}

impl Layout {
    /// A signed 64-bit integer.
    pub const I64: Layout = Layout::Int {
        signed: true,
        bytes: 8,
    };
    /// An unsigned 64-bit integer.
    pub const U64: Layout = Layout::Int {
        signed: false,
        bytes: 8,
    };

    /// Bytes the value occupies (a multiple of 8).
    pub fn size(&self) -> usize {
        match self {
            Layout::Int { .. } => 8,
            Layout::Str(n) => pad8(*n),
            Layout::Buf(n) => 8 + pad8(*n),
            Layout::Ustack(n) | Layout::UstackAs(n, _) => 16 + 8 * *n as usize,
            Layout::Usym => 16,
            Layout::Ptr => 8,
            Layout::Record(f) => f.iter().map(|(_, l)| l.size()).sum(),
            Layout::Array(l, n) => l.size().saturating_mul(*n as usize),
            Layout::Enum(_) | Layout::Strftime(_) | Layout::Username => 8,
            Layout::Inet => 24,
            Layout::Tuple(f) => f.iter().map(Layout::size).sum(),
        }
    }

    /// Appends the spelling of this layout.
    pub fn render_into(&self, out: &mut String) {
        match self {
            Layout::Int { signed, bytes } => {
                let _ = write!(
                    out,
                    "{}{}",
                    if *signed { 'i' } else { 'u' },
                    *bytes as u32 * 8
                );
            }
            Layout::Str(n) => {
                let _ = write!(out, "str:{n}");
            }
            Layout::Buf(n) => {
                let _ = write!(out, "buf:{n}");
            }
            Layout::Ustack(n) => {
                let _ = write!(out, "ustack:{n}");
            }
            Layout::UstackAs(n, m) => {
                let m = match m {
                    StackMode::Perf => "perf",
                    StackMode::Raw => "raw",
                };
                let _ = write!(out, "ustack:{n}:{m}");
            }
            Layout::Usym => out.push_str("usym"),
            Layout::Ptr => out.push_str("ptr"),
            Layout::Username => out.push_str("username"),
            Layout::Inet => out.push_str("inet"),
            Layout::Record(f) => {
                out.push('{');
                for (i, (n, l)) in f.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(n);
                    out.push(':');
                    l.render_into(out);
                }
                out.push('}');
            }
            Layout::Array(l, n) => {
                out.push('[');
                l.render_into(out);
                let _ = write!(out, ";{n}]");
            }
            Layout::Strftime(f) => {
                // Hex: the format may hold any byte, the layout's
                // delimiters included.
                out.push_str("strftime:");
                for b in f.iter() {
                    let _ = write!(out, "{b:02x}");
                }
            }
            Layout::Enum(v) => {
                out.push_str("enum{");
                for (i, (n, x)) in v.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{n}={x}");
                }
                out.push('}');
            }
            Layout::Tuple(f) => {
                out.push('(');
                render_list_into(f, out);
                out.push(')');
            }
        }
    }

    /// The spelling of this layout.
    pub fn render(&self) -> String {
        let mut s = String::new();
        self.render_into(&mut s);
        s
    }

    /// Parses one layout.
    pub fn parse(s: &str) -> Option<Layout> {
        let (l, rest) = parse_one(s.as_bytes(), 0)?;
        rest.is_empty().then_some(l)
    }
}

/// Appends `a,b,c`.
pub fn render_list_into(list: &[Layout], out: &mut String) {
    for (i, l) in list.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        l.render_into(out);
    }
}

/// Parses a comma-separated list (empty text: an empty list).
pub fn parse_list(s: &str) -> Option<Vec<Layout>> {
    let mut v = Vec::new();
    let mut b = s.as_bytes();
    if b.is_empty() {
        return Some(v);
    }
    loop {
        let (l, rest) = parse_one(b, 0)?;
        v.push(l);
        match rest.split_first() {
            None => return Some(v),
            Some((b',', r)) => b = r,
            Some(_) => return None,
        }
    }
}

fn number(b: &[u8]) -> Option<(u32, &[u8])> {
    let n = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 || n > 9 {
        return None;
    }
    let v = core::str::from_utf8(&b[..n]).ok()?.parse().ok()?;
    Some((v, &b[n..]))
}

fn parse_one(b: &[u8], depth: usize) -> Option<(Layout, &[u8])> {
    if depth > MAX_DEPTH {
        return None;
    }
    if let Some(mut rest) = b.strip_prefix(b"(") {
        let mut fields = Vec::new();
        loop {
            let (l, r) = parse_one(rest, depth + 1)?;
            fields.push(l);
            match r.split_first()? {
                (b',', r) => rest = r,
                (b')', r) => return Some((Layout::Tuple(fields.into_boxed_slice()), r)),
                _ => return None,
            }
        }
    }
    for (word, signed) in [(&b"i"[..], true), (b"u", false)] {
        if let Some(r) = b.strip_prefix(word)
            && let Some((bits, r)) = number(r)
            && matches!(bits, 8 | 16 | 32 | 64)
            && r.first().is_none_or(|c| *c != b':')
        {
            let bytes = (bits / 8) as u8;
            return Some((Layout::Int { signed, bytes }, r));
        }
    }
    if let Some(r) = b.strip_prefix(b"usym") {
        return Some((Layout::Usym, r));
    }
    if let Some(r) = b.strip_prefix(b"ptr") {
        return Some((Layout::Ptr, r));
    }
    if let Some(r) = b.strip_prefix(b"username") {
        return Some((Layout::Username, r));
    }
    if let Some(r) = b.strip_prefix(b"inet") {
        return Some((Layout::Inet, r));
    }
    if let Some(mut rest) = b.strip_prefix(b"{") {
        let mut fields = Vec::new();
        loop {
            let n = rest
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            let name = core::str::from_utf8(&rest[..n]).ok()?.into();
            let r = rest[n..].strip_prefix(b":")?;
            let (l, r) = parse_one(r, depth + 1)?;
            fields.push((name, l));
            match r.split_first()? {
                (b',', r) => rest = r,
                (b'}', r) => return Some((Layout::Record(fields.into_boxed_slice()), r)),
                _ => return None,
            }
        }
    }
    if let Some(r) = b.strip_prefix(b"[") {
        let (l, r) = parse_one(r, depth + 1)?;
        let r = r.strip_prefix(b";")?;
        let (n, r) = number(r)?;
        let r = r.strip_prefix(b"]")?;
        return Some((Layout::Array(Box::new(l), n), r));
    }
    if let Some(r) = b.strip_prefix(b"strftime:") {
        let n = r.iter().take_while(|c| c.is_ascii_hexdigit()).count();
        if n % 2 != 0 || n > 2 * MAX_STR_BYTES as usize {
            return None;
        }
        let hex = core::str::from_utf8(&r[..n]).ok()?;
        let fmt: Vec<u8> = (0..n / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
            .collect::<Option<_>>()?;
        return Some((Layout::Strftime(fmt.into_boxed_slice()), &r[n..]));
    }
    if let Some(mut rest) = b.strip_prefix(b"enum{") {
        let mut values = Vec::new();
        if let Some(r) = rest.strip_prefix(b"}") {
            return Some((Layout::Enum(values.into_boxed_slice()), r));
        }
        loop {
            let n = rest
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                .count();
            let name = core::str::from_utf8(&rest[..n]).ok()?.into();
            let r = rest[n..].strip_prefix(b"=")?;
            let neg = r.first() == Some(&b'-');
            let r = if neg { &r[1..] } else { r };
            let d = r.iter().take_while(|c| c.is_ascii_digit()).count();
            if d == 0 || d > 19 {
                return None;
            }
            let v: i64 = core::str::from_utf8(&r[..d]).ok()?.parse::<u64>().ok()? as i64;
            values.push((name, if neg { v.wrapping_neg() } else { v }));
            match r[d..].split_first()? {
                (b',', r) => rest = r,
                (b'}', r) => return Some((Layout::Enum(values.into_boxed_slice()), r)),
                _ => return None,
            }
        }
    }
    type Make = fn(u32) -> Layout;
    let sized: [(&[u8], Make, u32); 3] = [
        (b"str:", Layout::Str, MAX_STR_BYTES),
        (b"buf:", Layout::Buf, MAX_STR_BYTES),
        (b"ustack:", Layout::Ustack, MAX_STACK_FRAMES),
    ];
    for (word, make, max) in sized {
        if let Some(r) = b.strip_prefix(word) {
            let (n, r) = number(r)?;
            if n == 0 || n > max {
                return None;
            }
            if word == b"ustack:" {
                if let Some(r) = r.strip_prefix(b":perf") {
                    return Some((Layout::UstackAs(n, StackMode::Perf), r));
                }
                if let Some(r) = r.strip_prefix(b":raw") {
                    return Some((Layout::UstackAs(n, StackMode::Raw), r));
                }
            }
            return Some((make(n), r));
        }
    }
    None
}

/// Reads the 8-byte little-endian word at `off` (0 beyond the end).
pub fn word(bytes: &[u8], off: usize) -> u64 {
    match bytes.get(off..off.saturating_add(8)) {
        Some(b) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        }
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn round_trip_and_sizes() {
        for s in [
            "u64",
            "i32",
            "str:16",
            "buf:5",
            "ustack:127",
            "usym",
            "ptr",
            "(u64,str:3,(i8,usym),ptr)",
            "{m:i32,n:[u8;4],s:{a:ptr}}",
            "ustack:3:perf",
            "(u64,strftime:25483a254d)",
            "(ustack:2:raw,u8)",
            "enum{A=1,B=-2}",
            "(username,inet)",
        ] {
            let l = Layout::parse(s).unwrap();
            assert_eq!(l.render(), s);
        }
        assert_eq!(Layout::parse("str:13").unwrap().size(), 16);
        assert_eq!(Layout::parse("buf:5").unwrap().size(), 16);
        assert_eq!(Layout::parse("ustack:2").unwrap().size(), 32);
        assert_eq!(Layout::parse("(u64,str:3)").unwrap().size(), 16);
        assert_eq!(
            parse_list("u64,(i8,u8),str:4").unwrap(),
            vec![
                Layout::U64,
                Layout::Tuple(
                    vec![
                        Layout::Int {
                            signed: true,
                            bytes: 1
                        },
                        Layout::Int {
                            signed: false,
                            bytes: 1
                        }
                    ]
                    .into_boxed_slice()
                ),
                Layout::Str(4)
            ]
        );
        assert_eq!(parse_list("").unwrap(), vec![]);
    }

    #[test]
    fn garbage_is_refused() {
        for s in [
            "",
            "u7",
            "i64:",
            "str:",
            "str:0",
            "str:99999",
            "(u64",
            "(u64,)",
            "u64,",
            "x",
            "((((((((((u8))))))))))",
        ] {
            assert_eq!(Layout::parse(s), None, "{s}");
        }
        for s in ["u64,,u8", ",", "u64 u8"] {
            assert_eq!(parse_list(s), None, "{s}");
        }
    }
}
