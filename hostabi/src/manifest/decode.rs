//! Parsing a manifest's text into a [`Manifest`]: the file keys, the
//! probe keys, `map` lines.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::syntax::*;
use super::*;
use crate::maps::MapKind;
use crate::record::{DecodeError, DecodeErrorKind};

impl Manifest {
    /// Parses manifest bytes (the custom section's payload).
    pub fn decode(bytes: &[u8]) -> Result<Manifest, DecodeError> {
        let text = core::str::from_utf8(bytes)
            .map_err(|e| DecodeError::new(e.valid_up_to(), DecodeErrorKind::BadValue))?;
        let mut lines = Lines { text, pos: 0 };
        let (off, first) = lines
            .next()
            .ok_or(DecodeError::new(0, DecodeErrorKind::Truncated))?;
        let (magic, ver) = split_kv(first);
        if magic != MAGIC {
            return Err(DecodeError::new(off, DecodeErrorKind::BadValue));
        }
        let ver: u32 = parse_num(ver, off)?;
        if ver != FORMAT_VERSION {
            return Err(DecodeError::new(
                off,
                DecodeErrorKind::UnsupportedVersion(ver),
            ));
        }
        let mut m = Manifest {
            abi: 0,
            ..Manifest::default()
        };
        let (mut have_abi, mut have_module) = (false, false);
        // Per probe: offsets of its `return` and `maxactive` lines, for the
        // rules checked once the whole probe is read.
        let mut return_lines: Vec<ReturnLines> = Vec::new();
        for (off, line) in lines {
            let (key, val) = split_kv(line);
            let bad = DecodeError::new(off, DecodeErrorKind::BadValue);
            if let Some(p) = m.probes.last_mut().filter(|_| is_probe_key(key)) {
                decode_probe_key(p, key, val, off)?;
                if let Some(r) = return_lines.last_mut() {
                    match key {
                        "return" => r.ret = off,
                        "maxactive" => r.maxactive = off,
                        "args" => r.args = off,
                        _ => {}
                    }
                }
                continue;
            }
            match key {
                "abi" => {
                    m.abi = parse_num(val, off)?;
                    have_abi = true;
                }
                "module" if !val.is_empty() => {
                    m.module = val.to_string();
                    have_module = true;
                }
                "major" => m.major = parse_num(val, off).and_then(|v| nonzero(v, off))?,
                "id" => m.id = parse_num(val, off)?,
                "vars" => m.vars = parse_num(val, off).and_then(|v| at_most(v, 256, off))?,
                "gvars" => m.gvars = parse_num(val, off).and_then(|v| at_most(v, 256, off))?,
                "logmax" => m.logmax = parse_num(val, off)?,
                "jmpmax" => m.jmpmax = parse_num(val, off)?,
                "excpt_log" => m.excpt_log = parse_num(val, off)?,
                "autostacktrace" => m.autostacktrace = parse_bool(val, off)?,
                "stops" => {
                    for w in val.split_whitespace() {
                        match w {
                            "1" => m.stops.push(1),
                            "3" => m.stops.push(3),
                            _ => return Err(bad),
                        }
                    }
                }
                "fuel" => m.fuel = parse_num(val, off)?,
                "groups" => m.groups = names(val, off)?,
                "types" => m.types = names(val, off)?,
                "probe" if is_name(val) => {
                    m.probes.push(ProbeSpec::breakpoint(val, placeholder()));
                    return_lines.push(ReturnLines::default());
                }
                "map" if m.probes.is_empty() => {
                    let d = parse_map(val).ok_or(bad)?;
                    if m.maps.len() >= crate::maps::MAX_MAPS {
                        return Err(bad);
                    }
                    m.maps.push(d);
                }
                _ => return Err(bad),
            }
        }
        if !have_abi || !have_module {
            return Err(DecodeError::new(text.len(), DecodeErrorKind::Truncated));
        }
        for p in &mut m.probes {
            // A probe whose `location` line is missing still holds the placeholder.
            if p.location.symbol.as_deref() == Some("") {
                if p.trigger == Trigger::Hit && p.usdt_probe.is_none() {
                    return Err(DecodeError::new(text.len(), DecodeErrorKind::Truncated));
                }
                p.location = no_location();
            }
        }
        for (p, at) in m.probes.iter().zip(&return_lines) {
            // A return probe catches calls at a breakpoint; `maxactive`
            // means nothing without `return yes`.
            if p.r#return && p.kind != ProbeKind::Breakpoint {
                return Err(DecodeError::new(at.ret, DecodeErrorKind::BadValue));
            }
            if p.maxactive != 0 && !p.r#return {
                return Err(DecodeError::new(at.maxactive, DecodeErrorKind::BadValue));
            }
            // The entry state and the duration exist only where a call
            // returns.
            if !p.r#return && p.args.iter().any(|a| a.needs_return()) {
                return Err(DecodeError::new(at.args, DecodeErrorKind::BadValue));
            }
        }
        Ok(m)
    }
}

/// Parses the value of a `map` line.
fn parse_map(val: &str) -> Option<MapDecl> {
    let mut words = val.split_ascii_whitespace();
    let name = words.next()?;
    let ident = name.strip_prefix('@').unwrap_or(name);
    if !(ident.is_empty() || is_name(ident)) || name.is_empty() {
        return None;
    }
    let kind = MapKind::from_name(words.next()?)?;
    let mut d = MapDecl {
        name: name.to_string(),
        kind,
        key: Vec::new(),
        value: None,
        max_keys: crate::maps::DEFAULT_MAX_KEYS,
        lhist: None,
        hist_bits: 0,
    };
    for w in words {
        let (k, v) = w.split_once('=')?;
        match k {
            "key" => d.key = crate::layout::parse_list(v)?,
            "value" => d.value = Some(Layout::parse(v)?),
            "maxkeys" => {
                d.max_keys = parse_u64(v)?.try_into().ok()?;
                if d.max_keys == 0 || d.max_keys > crate::maps::MAX_KEYS_PER_MAP {
                    return None;
                }
            }
            "lhist" => {
                let mut it = v.split(',').map(|x| x.parse::<i64>().ok());
                let (a, b, c) = (it.next()??, it.next()??, it.next()??);
                if it.next().is_some() {
                    return None;
                }
                d.lhist = Some((a, b, c));
            }
            "bits" => {
                d.hist_bits = v.parse().ok()?;
                if d.kind != MapKind::Hist || d.hist_bits > crate::maps::MAX_HIST_BITS {
                    return None;
                }
            }
            _ => return None,
        }
    }
    if (d.kind == MapKind::Lhist) != d.lhist.is_some()
        || (d.kind == MapKind::Assign && d.value.is_none())
    {
        return None;
    }
    Some(d)
}

/// Byte offsets of a probe's `return`, `maxactive` and `args` lines (0 if
/// absent).
#[derive(Default)]
struct ReturnLines {
    ret: usize,
    maxactive: usize,
    args: usize,
}

fn placeholder() -> Location {
    Location {
        kind: LocationKind::Offset,
        symbol: Some(String::new()),
        addend: 0,
    }
}

fn is_probe_key(key: &str) -> bool {
    matches!(
        key,
        "location"
            | "value"
            | "opcode"
            | "watch"
            | "length"
            | "group"
            | "type"
            | "minor"
            | "ignore"
            | "maxhits"
            | "logonfault"
            | "excpt_mask"
            | "heap"
            | "trigger"
            | "module"
            | "return"
            | "maxactive"
            | "args"
            | "usdt_args"
            | "semaphore"
            | "usdt"
    )
}

fn decode_probe_key(
    p: &mut ProbeSpec,
    key: &str,
    val: &str,
    off: usize,
) -> Result<(), DecodeError> {
    let bad = DecodeError::new(off, DecodeErrorKind::BadValue);
    match key {
        "location" => p.location = parse_location(val).ok_or(bad)?,
        "value" => p.value = Some(parse_num(val, off)?),
        "opcode" => p.opcode = Some(parse_num(val, off)?),
        "watch" => {
            p.kind = match val {
                "none" => ProbeKind::Breakpoint,
                "x" => ProbeKind::WatchExec,
                "w" => ProbeKind::WatchWrite,
                "rw" => ProbeKind::WatchReadWrite,
                _ => return Err(bad),
            }
        }
        "length" => {
            p.length = parse_num(val, off)?;
            if !matches!(p.length, 1 | 2 | 4 | 8) {
                return Err(bad);
            }
        }
        "group" if is_name(val) => p.group = Some(val.to_string()),
        "type" if is_name(val) => p.r#type = Some(val.to_string()),
        "minor" => p.minor = parse_num(val, off)?,
        "ignore" => p.ignore = parse_num(val, off).and_then(|v| at_most(v, 0x7FFF_FFFF, off))?,
        "maxhits" => p.maxhits = parse_num(val, off).and_then(|v| at_most(v, 0x7FFF_FFFF, off))?,
        "logonfault" => p.logonfault = parse_bool(val, off)?,
        "excpt_mask" => p.excpt_mask = parse_num(val, off)?,
        "heap" => p.heap = parse_num(val, off).and_then(|v| at_most(v, 16384, off))?,
        "trigger" => {
            let (t, arg) = split_kv(val);
            p.trigger = match (t, arg) {
                ("begin", "") => Trigger::Begin,
                ("end", "") => Trigger::End,
                ("hit", "") => Trigger::Hit,
                ("interval", n) => Trigger::Interval {
                    period_ns: parse_num(n, off)
                        .and_then(|v: u64| if v == 0 { Err(bad) } else { Ok(v) })?,
                },
                _ => return Err(bad),
            }
        }
        "module" if !val.is_empty() => p.module = Some(val.to_string()),
        "return" => p.r#return = parse_bool(val, off)?,
        "maxactive" => {
            p.maxactive = parse_num(val, off).and_then(|v| at_most(v, MAX_MAXACTIVE, off))?
        }
        "args" => {
            let mut args = Vec::new();
            for w in val.split_ascii_whitespace() {
                args.push(ArgSource::parse(w).ok_or(bad)?);
            }
            if args.len() > MAX_HANDLER_ARGS {
                return Err(bad);
            }
            p.args = args;
        }
        "usdt_args" => {
            p.usdt_args = crate::usdt::parse_args(val, &mut |_| None).map_err(|_| bad)?;
        }
        "semaphore" => p.semaphore = Some(parse_num(val, off)?),
        "usdt" => match val.split_once(':') {
            Some((prov, name)) if is_name(prov) && is_name(name) => {
                p.usdt_probe = Some(val.to_string())
            }
            _ => return Err(bad),
        },
        _ => return Err(bad),
    }
    Ok(())
}
