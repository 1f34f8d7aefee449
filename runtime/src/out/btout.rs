//! Output of one-liner programs, formatted exactly as bpftrace 0.17 formats
//! it (its `output.cpp`, `format_string.cpp` and `print_map*`): events
//! (`printf`, `print`, `time`) as they arrive, maps at exit in name order,
//! sorted as bpftrace sorts them, `hist`/`lhist` as its ASCII histograms,
//! and `-f json` as its JSON lines. Differences, all deliberate: ties in a
//! sort are broken by key (bpftrace leaves them in hash-table order), and
//! invalid UTF-8 in JSON strings is escaped (bpftrace emits broken escapes).
//! Never panics on any event bytes.

pub mod cfmt;
mod maps;

pub use maps::{MapOutput, hist_low, print_entries, print_map, snapshot_entries};

use crate::out::symbolize::Symbolizer;
use cfmt::Arg;
use hostabi::event::{EventKind, Events};
use hostabi::layout::{Layout, word};

/// Text or JSON lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// bpftrace's text output.
    Text,
    /// bpftrace's `-f json` output.
    Json,
}

/// bpftrace's `json_escape`: `"`, `\`, `\n`, `\r`, `\t`, other controls as
/// `\u00XX`; valid UTF-8 is copied, invalid bytes become `\u00XX`.
pub fn json_escape(out: &mut String, bytes: &[u8]) {
    crate::out::format::escape_chars(
        out,
        bytes,
        |c| (c as u32) < 0x20,
        |out, c| out.push_str(&format!("\\u{:04x}", c as u32)),
        |out, b| out.push_str(&format!("\\u{b:04x}")),
    );
}

/// A C string: the bytes before the first NUL.
pub fn cstr(b: &[u8]) -> &[u8] {
    let n = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    &b[..n]
}

/// bpftrace's `hex_format_buffer`.
pub fn hex_buffer(b: &[u8], keep_ascii: bool, escape_hex: bool) -> String {
    let mut s = String::new();
    for (i, c) in b.iter().enumerate() {
        if keep_ascii && (32..=126).contains(c) {
            s.push(*c as char);
        } else if escape_hex {
            s.push_str(&format!("\\x{c:02x}"));
        } else if i + 1 == b.len() {
            s.push_str(&format!("{c:02x}"));
        } else {
            s.push_str(&format!("{c:02x} "));
        }
    }
    s
}

/// The integer of layout `Int` at the start of `b`, extended to 64 bits.
pub fn int_value(b: &[u8], signed: bool, bytes: u8) -> u64 {
    let w = word(b, 0);
    let bits = bytes as u32 * 8;
    if bits >= 64 {
        return w;
    }
    let shift = 64 - bits;
    if signed {
        (((w << shift) as i64) >> shift) as u64
    } else {
        w & ((1u64 << bits) - 1)
    }
}

/// A user stack as bpftrace prints it: a newline, then one frame per line
/// indented by `indent` spaces; frames stop at the first zero address.
pub fn stack_text(b: &[u8], frames: u32, indent: usize, sym: &mut Symbolizer) -> String {
    stack_text_as(b, frames, indent, None, sym)
}

/// A user stack in a stack mode (`None`: bpftrace's): perf's is
/// `\tADDR SYM+OFF (MODULE)` per frame, raw is the hex address alone.
pub fn stack_text_as(
    b: &[u8],
    frames: u32,
    indent: usize,
    mode: Option<hostabi::layout::StackMode>,
    sym: &mut Symbolizer,
) -> String {
    use hostabi::layout::StackMode;
    let pid = word(b, 0);
    let n = (word(b, 8) as u32).min(frames);
    let mut s = String::from("\n");
    for i in 0..n {
        let addr = word(b, 16 + 8 * i as usize);
        if addr == 0 {
            break;
        }
        match mode {
            None => {
                s.push_str(&" ".repeat(indent));
                s.push_str(&sym.resolve(pid, addr, true));
            }
            Some(StackMode::Perf) => {
                s.push_str(&format!(
                    "\t{addr:x} {}",
                    sym.resolve_with_module(pid, addr)
                ));
            }
            Some(StackMode::Raw) => s.push_str(&format!("{addr:x}")),
        }
        s.push('\n');
    }
    s
}

/// The text of a value (bpftrace's `value_to_str`); `key` selects the map
/// key spelling (integers always signed, stacks indented by 4).
pub fn value_text(l: &Layout, b: &[u8], key: bool, sym: &mut Symbolizer) -> String {
    match l {
        Layout::Int { signed, bytes } => {
            let v = int_value(b, *signed || key, *bytes);
            if *signed || key {
                (v as i64).to_string()
            } else {
                v.to_string()
            }
        }
        Layout::Str(n) => {
            String::from_utf8_lossy(cstr(&b[..(*n as usize).min(b.len())])).into_owned()
        }
        Layout::Buf(n) => {
            let len = (word(b, 0) as usize).min(*n as usize);
            let data = b.get(8..8 + len).unwrap_or(&[]);
            if key {
                let all = b.get(8..8 + *n as usize).unwrap_or(&[]);
                hex_buffer(all, true, true)
            } else {
                hex_buffer(data, true, true)
            }
        }
        Layout::Ustack(n) => stack_text(b, *n, if key { 4 } else { 8 }, sym),
        Layout::UstackAs(n, m) => stack_text_as(b, *n, 0, Some(*m), sym),
        Layout::Usym => sym.resolve(word(b, 8), word(b, 0), false),
        Layout::Ptr => format!("0x{:x}", word(b, 0)),
        // bpftrace 0.23's `struct_to_str` and `array_to_str`.
        Layout::Record(fields) => record_text(fields, b, |n, f, b| {
            format!(".{n} = {}", value_text(f, b, false, sym))
        }),
        Layout::Array(f, n) => array_text(f, *n, b, |b| value_text(f, b, false, sym)),
        Layout::Strftime(fmt) => {
            String::from_utf8_lossy(&strftime_text(fmt, word(b, 0))).into_owned()
        }
        Layout::Username => username(word(b, 0)),
        Layout::Inet => inet_text(word(b, 0), b.get(8..24).unwrap_or(&[])),
        Layout::Enum(values) => {
            let v = word(b, 0) as i64;
            match values.iter().find(|(_, x)| *x == v) {
                Some((n, _)) => n.clone(),
                None => v.to_string(),
            }
        }
        Layout::Tuple(fields) => {
            let mut parts = Vec::new();
            let mut off = 0;
            for f in fields.iter() {
                let sz = f.size();
                parts.push(value_text(f, b.get(off..).unwrap_or(&[]), false, sym));
                off += sz;
            }
            format!("({})", parts.join(", "))
        }
    }
}

/// A record's fields as bpftrace 0.23's `struct_to_str` joins them,
/// `{ F, F }`: each `F` what `field` makes of a field's name, layout and
/// bytes (as a value, a JSON member, a label).
pub(crate) fn record_text(
    fields: &[(String, Layout)],
    b: &[u8],
    mut field: impl FnMut(&str, &Layout, &[u8]) -> String,
) -> String {
    let mut parts = Vec::new();
    let mut off = 0;
    for (n, f) in fields {
        parts.push(field(n, f, b.get(off..).unwrap_or(&[])));
        off += f.size();
    }
    format!("{{ {} }}", parts.join(", "))
}

/// The `n` elements of layout `f` in `b` as bpftrace 0.23's
/// `array_to_str` joins them, `[E,E]`: each `E` what `elem` makes of an
/// element's bytes.
pub(crate) fn array_text(
    f: &Layout,
    n: u32,
    b: &[u8],
    mut elem: impl FnMut(&[u8]) -> String,
) -> String {
    let sz = f.size();
    let parts: Vec<String> = (0..n as usize)
        .map(|i| elem(b.get(i * sz..).unwrap_or(&[])))
        .collect();
    format!("[{}]", parts.join(","))
}

/// Whether bpftrace quotes this type's values in JSON.
fn quoted(l: &Layout) -> bool {
    !matches!(
        l,
        Layout::Int { .. }
            | Layout::Ptr
            | Layout::Tuple(_)
            | Layout::Record(_)
            | Layout::Array(..)
            | Layout::Enum(_)
    )
}

/// The JSON of a value.
pub fn value_json(l: &Layout, b: &[u8], sym: &mut Symbolizer) -> String {
    match l {
        Layout::Tuple(fields) => {
            let mut parts = Vec::new();
            let mut off = 0;
            for f in fields.iter() {
                let sz = f.size();
                parts.push(value_json(f, b.get(off..).unwrap_or(&[]), sym));
                off += sz;
            }
            format!("[{}]", parts.join(","))
        }
        Layout::Ptr => word(b, 0).to_string(),
        Layout::Enum(_) => (word(b, 0) as i64).to_string(),
        Layout::Record(fields) => record_text(fields, b, |n, f, b| {
            let mut k = String::from("\"");
            json_escape(&mut k, n.as_bytes());
            format!("{k}\": {}", value_json(f, b, sym))
        }),
        Layout::Array(f, n) => array_text(f, *n, b, |b| value_json(f, b, sym)),
        l if quoted(l) => {
            let t = value_text(l, b, false, sym);
            let mut s = String::from("\"");
            json_escape(&mut s, t.as_bytes());
            s.push('"');
            s
        }
        l => value_text(l, b, false, sym),
    }
}

/// Formats a printf event (bpftrace's `FormatString::format`): each part up
/// to and including a specifier goes through C `printf` with its argument;
/// what follows the last specifier, and a format without arguments, is
/// copied as is.
pub fn printf_text(fmt: &[u8], args: &[Layout], data: &[u8], sym: &mut Symbolizer) -> Vec<u8> {
    let specs = bt2wasm::check::format::specs(fmt);
    if args.is_empty() {
        return fmt.to_vec();
    }
    let mut out = Vec::new();
    let mut prev = 0;
    let mut off = 0;
    for (i, a) in args.iter().enumerate() {
        let Some(s) = specs.get(i) else { break };
        // The literal text before the specifier, as snprintf sees it.
        let lit = &fmt[prev..s.start];
        let mut j = 0;
        while j < lit.len() {
            if lit[j] == b'%' && lit.get(j + 1) == Some(&b'%') {
                out.push(b'%');
                j += 2;
            } else {
                out.push(lit[j]);
                j += 1;
            }
        }
        let bytes = data.get(off..).unwrap_or(&[]);
        let spec = &fmt[s.start + 1..s.end];
        let arg_text;
        let arg = match a {
            Layout::Int { signed, bytes: n } => Arg::Int(int_value(bytes, *signed, *n)),
            Layout::Ptr => Arg::Int(word(bytes, 0)),
            Layout::Enum(_) if s.conv == "s" => {
                arg_text = value_text(a, bytes, false, sym);
                Arg::Str(arg_text.as_bytes())
            }
            Layout::Enum(_) => Arg::Int(word(bytes, 0)),
            Layout::Str(n) => Arg::Str(cstr(&bytes[..(*n as usize).min(bytes.len())])),
            Layout::Buf(n) => {
                let len = (word(bytes, 0) as usize).min(*n as usize);
                let content = bytes.get(8..8 + len).unwrap_or(&[]);
                arg_text = match s.conv.as_str() {
                    "rx" => hex_buffer(content, false, true),
                    "rh" => hex_buffer(content, false, false),
                    _ => hex_buffer(content, true, true),
                };
                Arg::Str(arg_text.as_bytes())
            }
            l => {
                arg_text = value_text(l, bytes, false, sym);
                Arg::Str(arg_text.as_bytes())
            }
        };
        // %r* print as %s.
        let spec: Vec<u8> = if s.kind == bt2wasm::check::format::Kind::Buf {
            let mut v = spec[..spec.len() - s.conv.len()].to_vec();
            v.push(b's');
            v
        } else {
            spec.to_vec()
        };
        cfmt::convert(&mut out, &spec, arg);
        off += a.size();
        prev = s.end;
    }
    out.extend_from_slice(&fmt[prev.min(fmt.len())..]);
    out
}

/// `cat(path)`: the file's first `BPFTRACE_MAX_CAT_BYTES` bytes (10240 by
/// default), as bpftrace prints them; a file that cannot be read is an
/// error on standard error, as bpftrace reports it.
fn cat_text(path: &[u8]) -> Vec<u8> {
    let max = std::env::var("BPFTRACE_MAX_CAT_BYTES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(10240);
    let p = String::from_utf8_lossy(path).into_owned();
    match std::fs::File::open(&p) {
        Ok(f) => {
            use std::io::Read;
            let mut b = Vec::new();
            let _ = f.take(max).read_to_end(&mut b);
            b
        }
        Err(e) => {
            let why = e.to_string();
            let why = why.split(" (os error").next().unwrap_or(&why);
            crate::elog!("ERROR: failed to open file '{p}': {why}");
            Vec::new()
        }
    }
}

/// `system(command)` (allowed by `--unsafe` only): what the shell command
/// writes on its standard output.
fn system_text(cmd: &[u8]) -> Vec<u8> {
    let cmd = String::from_utf8_lossy(cmd).into_owned();
    match std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&cmd)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
    {
        Ok(o) => o.stdout,
        Err(e) => {
            crate::elog!("ERROR: system(\"{cmd}\"): {e}");
            Vec::new()
        }
    }
}

/// bpftrace's `strftime(fmt, ns)`: the monotonic time `ns` as local time,
/// with bpftrace's `%f` (microseconds, 6 digits) added to C's formats.
pub fn strftime_text(fmt: &[u8], ns: u64) -> Vec<u8> {
    // One offset per run: two timestamps of one event convert alike.
    static OFFSET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let off = *OFFSET.get_or_init(crate::sys::time::realtime_minus_monotonic);
    let wall = ns.wrapping_add(off);
    let (secs, nanos) = ((wall / 1_000_000_000) as i64, wall % 1_000_000_000);
    let mut f = Vec::new();
    let mut i = 0;
    while i < fmt.len() {
        match (fmt[i], fmt.get(i + 1)) {
            (b'%', Some(b'%')) => {
                f.extend_from_slice(b"%%");
                i += 2;
            }
            (b'%', Some(b'f')) => {
                f.extend_from_slice(format!("{:06}", nanos / 1000).as_bytes());
                i += 2;
            }
            (c, _) => {
                f.push(c);
                i += 1;
            }
        }
    }
    let Ok(cfmt) = std::ffi::CString::new(cstr(&f)) else {
        return Vec::new();
    };
    crate::sys::time::strftime_at(&cfmt, secs)
}

/// bpftrace's `username`: the name `/etc/passwd` gives the user id (as
/// bpftrace reads it, in user space when it prints), empty when it has none.
/// Names are looked up once per run and user id.
pub fn username(uid: u64) -> String {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static NAMES: Mutex<Option<HashMap<u64, String>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = names.get_or_insert_with(HashMap::new);
    if let Some(n) = names.get(&uid) {
        return n.clone();
    }
    let want = uid.to_string();
    let name = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() >= 3 && f[2] == want).then(|| f[0].to_string())
            })
        })
        .unwrap_or_default();
    names.insert(uid, name.clone());
    name
}

/// bpftrace's `ntop`: the address as `inet_ntop` spells it for its family
/// (2 `AF_INET`: the first 4 bytes; 10 `AF_INET6`: all 16), empty for
/// another family.
pub fn inet_text(af: u64, addr: &[u8]) -> String {
    match (af, addr.len()) {
        (2, 16) => std::net::Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]).to_string(),
        (10, 16) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(addr);
            std::net::Ipv6Addr::from(a).to_string()
        }
        _ => String::new(),
    }
}

/// `strftime` of the local time now.
pub fn time_text(fmt: &[u8]) -> Vec<u8> {
    let Ok(cfmt) = std::ffi::CString::new(cstr(fmt)) else {
        return Vec::new();
    };
    crate::sys::time::strftime_now(&cfmt)
}

/// One event record as the sink holds it.
#[derive(Clone, Copy, Debug)]
pub struct EventRecord<'a> {
    /// `EventKind` code.
    pub kind: u16,
    /// Entry id (format, value, map).
    pub id: u16,
    /// The argument bytes.
    pub data: &'a [u8],
}

/// The exit status an `exit(code)` asked for (its EXIT event), -1 for none.
static EXIT_STATUS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The exit status the program asked for with `exit(code)`, if it did.
pub fn requested_exit_status() -> Option<u8> {
    let s = EXIT_STATUS.load(std::sync::atomic::Ordering::SeqCst);
    (s >= 0).then_some(s as u8)
}

/// Appends the output of one event to `out`; `maps` prints `PRINT_MAP`.
pub fn event(
    out: &mut Vec<u8>,
    mode: Mode,
    rec: EventRecord<'_>,
    events: &Events,
    maps: Option<&MapOutput<'_>>,
    sym: &mut Symbolizer,
) {
    let EventRecord { kind, id, data } = rec;
    let kind = EventKind::from_code(kind as i32);
    let json_msg = |out: &mut Vec<u8>, ty: &str, text: &[u8]| {
        let mut s = format!("{{\"type\": \"{ty}\", \"data\": \"");
        json_escape(&mut s, text);
        s.push_str("\"}\n");
        out.extend_from_slice(s.as_bytes());
    };
    match kind {
        Some(EventKind::Exit) => {
            // The first `exit(code)` of the run decides (later hits of a
            // stopping run do not change it); nothing is printed.
            let mut w = [0u8; 8];
            let n = data.len().min(8);
            w[..n].copy_from_slice(&data[..n]);
            let code = (i64::from_le_bytes(w) & 0xff) as i32;
            let _ = EXIT_STATUS.compare_exchange(
                -1,
                code,
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
            );
        }
        Some(EventKind::Printf) => {
            let Some(e) = events.printf.get(id as usize) else {
                out.extend_from_slice(format!("<printf event {id}: no such format>\n").as_bytes());
                return;
            };
            let text = printf_text(&e.format, &e.args, data, sym);
            match mode {
                Mode::Text => out.extend_from_slice(&text),
                Mode::Json => json_msg(out, "printf", &text),
            }
        }
        Some(kind @ (EventKind::Cat | EventKind::System)) => {
            let Some(e) = events.printf.get(id as usize) else {
                return;
            };
            let what = printf_text(&e.format, &e.args, data, sym);
            let (text, ty) = if kind == EventKind::Cat {
                (cat_text(&what), "cat")
            } else {
                (system_text(&what), "syscall")
            };
            match mode {
                Mode::Text => out.extend_from_slice(&text),
                Mode::Json => json_msg(out, ty, &text),
            }
        }
        Some(EventKind::Time) => {
            let fmt = events
                .times
                .get(id as usize)
                .map_or(&b"%H:%M:%S\n"[..], |f| f);
            let text = time_text(fmt);
            match mode {
                Mode::Text => out.extend_from_slice(&text),
                Mode::Json => json_msg(out, "time", &text),
            }
        }
        Some(EventKind::PrintValue) => {
            let Some(l) = events.values.get(id as usize) else {
                return;
            };
            match mode {
                Mode::Text => {
                    out.extend_from_slice(value_text(l, data, false, sym).as_bytes());
                    out.push(b'\n');
                }
                Mode::Json => out.extend_from_slice(
                    format!(
                        "{{\"type\": \"value\", \"data\": {}}}\n",
                        value_json(l, data, sym)
                    )
                    .as_bytes(),
                ),
            }
        }
        Some(EventKind::PrintMap) => {
            let Some(m) = maps else { return };
            match (snapshot_entries(data), m.decls.get(id as usize)) {
                (Some(entries), Some(d)) => {
                    print_entries(out, mode, d, entries, word(data, 0), word(data, 8), sym)
                }
                _ => print_map(out, mode, m, id as u32, word(data, 0), word(data, 8), sym),
            }
        }
        None => {}
    }
}
