//! Probe events in the syntax of the kernel's `uprobe_events`
//! (Documentation/trace/uprobetracer): `p[:[GRP/]NAME] MODULE:SYM[+OFF]
//! [FIELD=]FETCHARG[:TYPE] ...` and `r[:...] MODULE:SYM ...` for returns,
//! compiled straight to the typed IR (one handler per event, emitting one
//! printf event), so events and one-liners share the code generator, the
//! output path and every transport. Each hit prints an ftrace-style line:
//! `NAME: (SYM+OFF) FIELD=VALUE ...` (returns: `NAME: (CALLER <- SYM)`).
//!
//! Fetch-args: `%REG`, `@ADDR`, `@+OFFSET` (from the module's load
//! address), `@SYM[+off]`, `$stackN`, `$stack`, `$retval`, `$argN`,
//! `$comm`, `+|-OFF(FETCHARG)`; types `u8..u64`, `s8..s64`, `x8..x64`
//! (the default is `x64`), `string`.

use crate::check::expr::{ARG_REGS, reg};
use crate::diag::{Sink, codes};
use crate::ir::{E, Emit, Fact, Handler, Part, S, Ty};
use crate::probes::{self, Concrete, Kind};
use hostabi::event::{EventKind, PrintfEntry};
use rpn2wasm::Span;

/// A fetch-arg's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FType {
    Unsigned(u8),
    Signed(u8),
    Hex(u8),
    Str,
}

/// A parsed fetch-arg.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fetch {
    Reg(u16),
    Arg(u32),
    Stack(u32),
    StackAddr,
    Retval,
    Comm,
    Abs(u64),
    FileOff(u64),
    Sym(String, i64),
    Deref(i64, Box<Fetch>),
}

fn parse_num(s: &str) -> Option<i64> {
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()?
    } else {
        return None;
    };
    Some(if neg { -v } else { v })
}

/// The id of a 64-bit general register named as a pt_regs field (`ax`,
/// `ip`, `flags`: uprobe_events' `%REG`, bpftrace's `reg("REG")`) or by
/// its own name (`rax`, `r8`); debug registers are not one.
pub(crate) fn register(name: &str) -> Option<u16> {
    let full = match name {
        "ax" => "rax",
        "bx" => "rbx",
        "cx" => "rcx",
        "dx" => "rdx",
        "si" => "rsi",
        "di" => "rdi",
        "bp" => "rbp",
        "sp" => "rsp",
        "ip" => "rip",
        "flags" => "rflags",
        n => n,
    };
    hostabi::regs::by_name(full)
        .filter(|r| r.width == 64 && !r.name.starts_with("dr"))
        .map(|r| r.id)
}

fn parse_fetch(s: &str, depth: u32) -> Result<Fetch, String> {
    if depth > 8 {
        return Err("dereferences nested too deeply".into());
    }
    if let Some(r) = s.strip_prefix('%') {
        return register(r)
            .map(Fetch::Reg)
            .ok_or_else(|| format!("unknown register `%{r}`"));
    }
    if let Some(rest) = s.strip_prefix('$') {
        return match rest {
            "stack" => Ok(Fetch::StackAddr),
            "retval" => Ok(Fetch::Retval),
            "comm" => Ok(Fetch::Comm),
            _ => {
                if let Some(n) = rest.strip_prefix("stack").and_then(|n| n.parse().ok()) {
                    Ok(Fetch::Stack(n))
                } else if let Some(n) = rest.strip_prefix("arg").and_then(|n| n.parse::<u32>().ok())
                {
                    if n == 0 {
                        Err("$arg numbers start at 1".into())
                    } else {
                        Ok(Fetch::Arg(n))
                    }
                } else {
                    Err(format!("unknown variable `${rest}`"))
                }
            }
        };
    }
    if let Some(rest) = s.strip_prefix('@') {
        if let Some(off) = rest.strip_prefix('+') {
            return parse_num(off)
                .map(|v| Fetch::FileOff(v as u64))
                .ok_or_else(|| format!("bad file offset `{off}`"));
        }
        if let Some(v) = parse_num(rest) {
            return Ok(Fetch::Abs(v as u64));
        }
        let (sym, off) = match rest.find(['+', '-']) {
            Some(i) => (
                &rest[..i],
                parse_num(&rest[i..]).ok_or_else(|| format!("bad offset in `@{rest}`"))?,
            ),
            None => (rest, 0),
        };
        if !hostabi::manifest::is_symbol(sym) {
            return Err(format!("bad symbol `{sym}`"));
        }
        return Ok(Fetch::Sym(sym.to_string(), off));
    }
    // +|-OFF(FETCHARG)
    if let Some(open) = s.find('(')
        && s.ends_with(')')
        && (s.starts_with('+')
            || s.starts_with('-')
            || s[..open].bytes().all(|b| b.is_ascii_digit()))
    {
        let off = parse_num(&s[..open]).ok_or_else(|| format!("bad offset `{}`", &s[..open]))?;
        let inner = parse_fetch(&s[open + 1..s.len() - 1], depth + 1)?;
        return Ok(Fetch::Deref(off, Box::new(inner)));
    }
    Err(format!("unknown fetch-arg `{s}`"))
}

fn parse_type(t: &str) -> Option<FType> {
    if t == "string" {
        return Some(FType::Str);
    }
    let (kind, bits) = t.split_at(1);
    let bytes = match bits {
        "8" => 1,
        "16" => 2,
        "32" => 4,
        "64" => 8,
        _ => return None,
    };
    match kind {
        "u" => Some(FType::Unsigned(bytes)),
        "s" => Some(FType::Signed(bytes)),
        "x" => Some(FType::Hex(bytes)),
        _ => None,
    }
}

/// Compiles the events into one module's IR; errors point into the
/// event text (file `file`).
pub(crate) struct EventCx<'a> {
    pub env: &'a mut probes::Env,
    pub diags: &'a mut Sink,
    pub strings: Vec<u8>,
    pub events: hostabi::event::Events,
}

/// One event: the concrete probe and its handler (None after an error).
pub(crate) fn compile_event(
    cx: &mut EventCx<'_>,
    text: &str,
    file: u32,
) -> Option<(Concrete, Handler)> {
    let span = |lo: usize, hi: usize| Span {
        file,
        lo: lo as u32,
        hi: hi as u32,
    };
    let words: Vec<(usize, &str)> = text
        .split_ascii_whitespace()
        .map(|w| (w.as_ptr() as usize - text.as_ptr() as usize, w))
        .collect();
    let Some(&(p0, head)) = words.first() else {
        cx.diags
            .error(codes::EVENT, span(0, 0), "empty probe event");
        return None;
    };
    let (ret, name) = match head.split_once(':') {
        Some(("p", n)) => (false, Some(n)),
        Some(("r", n)) => (true, Some(n)),
        None if head == "p" => (false, None),
        None if head == "r" => (true, None),
        _ => {
            cx.diags.error(
                codes::EVENT,
                span(p0, p0 + head.len()),
                format!("probe event must start with `p` or `r`, not `{head}`"),
            );
            return None;
        }
    };
    let Some(&(l0, loc)) = words.get(1) else {
        cx.diags.error(
            codes::EVENT,
            span(p0, p0 + head.len()),
            "probe event without a location (MODULE:SYM[+OFF])",
        );
        return None;
    };
    let Some((module, place)) = loc.rsplit_once(':') else {
        cx.diags.error(
            codes::EVENT,
            span(l0, l0 + loc.len()),
            format!("location `{loc}` is not MODULE:SYM[+OFF]"),
        );
        return None;
    };
    let mut conc = event_probe(cx, module, place, ret, span(l0, l0 + loc.len()))?;
    let (symbol, offset) = match &conc.kind {
        Kind::Uprobe { symbol, offset, .. } => (symbol.clone(), *offset),
        _ => return None,
    };
    let sym_text = match (&symbol, offset) {
        (Some(s), 0) => s.clone(),
        (Some(s), o) => format!("{s}+{o}"),
        (None, o) => format!("0x{o:x}"),
    };
    let event_name = event_name(name, module, &symbol, offset, ret);
    conc.name = event_name.clone();
    let mut fmt = format!("{event_name}: (").into_bytes();
    let mut parts = Vec::new();
    let mut layouts = Vec::new();
    let mut off = 0u32;
    let mut frame = 0u32;
    let mut slot = |size: u32| {
        let a = frame;
        frame += size.div_ceil(8) * 8;
        a
    };
    if ret {
        fmt.extend_from_slice(b"%s <- ");
        fmt.extend_from_slice(sym_text.as_bytes());
        let s = slot(16);
        parts.push(Part {
            e: E::Usym {
                addr: Box::new(E::Reg(hostabi::regs::RIP)),
                slot: s,
            },
            ty: Ty::Usym,
            off,
        });
        layouts.push(hostabi::layout::Layout::Usym);
        off += 16;
    } else {
        fmt.extend_from_slice(sym_text.as_bytes());
    }
    fmt.push(b')');
    for (n, &(w0, w)) in words[2..].iter().enumerate() {
        let wspan = span(w0, w0 + w.len());
        let (field, e, t, spec) = event_arg(cx, module, n, w, wspan, ret, &mut slot)?;
        fmt.extend_from_slice(format!(" {field}=").as_bytes());
        fmt.extend_from_slice(spec.as_bytes());
        layouts.push(t.layout());
        let sz = t.size();
        parts.push(Part { e, ty: t, off });
        off += sz;
    }
    fmt.push(b'\n');
    let id = cx.events.printf.len() as u32;
    cx.events.printf.push(PrintfEntry {
        format: fmt,
        args: layouts,
    });
    let s = slot(off.max(8));
    let handler = Handler {
        body: vec![S::Emit(Emit {
            kind: EventKind::Printf as i32,
            id,
            slot: s,
            parts,
            size: off,
        })],
        locals: 0,
        frame,
    };
    Some((conc, handler))
}

/// The one uprobe an event's location (`MODULE:SYM[+OFF]`,
/// `MODULE:FILE_OFFSET`) names; `None` after an error.
fn event_probe(
    cx: &mut EventCx<'_>,
    module: &str,
    place: &str,
    ret: bool,
    loc_span: Span,
) -> Option<Concrete> {
    // A number is a file offset (uprobe_events); convert it to an address.
    let place_ap = if let Some(off) = parse_num(place).filter(|v| *v >= 0) {
        let path = crate::elf::resolve_binary(module, &cx.env.mapped)?;
        let bin = cx.env.binary(&path).ok()?;
        match bin.vaddr_of_offset(off as u64) {
            Some(v) => format!("0x{v:x}"),
            None => {
                cx.diags.error(
                    codes::EVENT,
                    loc_span,
                    format!("file offset 0x{off:x} is not in a loaded segment of {module}"),
                );
                return None;
            }
        }
    } else {
        place.to_string()
    };
    let ap = format!(
        "{}:{module}:{place_ap}",
        if ret { "uretprobe" } else { "uprobe" }
    );
    let mut list = probes::expand(&ap, loc_span, cx.env, cx.diags);
    if list.len() != 1 {
        if list.len() > 1 {
            cx.diags.error(
                codes::EVENT,
                loc_span,
                "a probe event names one location (no wildcards)",
            );
        }
        return None;
    }
    Some(list.remove(0))
}

/// An event's name: the one it is given (`p:[GRP/]NAME`), or the kernel's
/// default, `p_MODULE_SYM[_OFF]` (`r_...` for returns).
fn event_name(
    name: Option<&str>,
    module: &str,
    symbol: &Option<String>,
    offset: u64,
    ret: bool,
) -> String {
    let base = std::path::Path::new(module)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = base.split('.').next().unwrap_or("").to_string();
    match name {
        Some(n) if !n.is_empty() => n.rsplit('/').next().unwrap_or(n).to_string(),
        _ => {
            let s = match (&symbol, offset) {
                (Some(s), 0) => s.clone(),
                (Some(s), o) => format!("{s}_{o}"),
                (None, o) => format!("0x{o:x}"),
            };
            format!("{}_{base}_{s}", if ret { 'r' } else { 'p' })
        }
    }
}

/// One fetch-arg of an event (`[FIELD=]FETCHARG[:TYPE]`, the `n`th): its
/// field name, value, type and printf conversion; `None` after an error.
fn event_arg(
    cx: &mut EventCx<'_>,
    module: &str,
    n: usize,
    w: &str,
    wspan: Span,
    ret: bool,
    slot: &mut dyn FnMut(u32) -> u32,
) -> Option<(String, E, Ty, &'static str)> {
    let (field, rest) = match w.split_once('=') {
        Some((f, r)) => (f.to_string(), r),
        None => (format!("arg{}", n + 1), w),
    };
    let (fetch_text, ty) = match rest.rsplit_once(':') {
        Some((f, t)) if !f.ends_with('@') => match parse_type(t) {
            Some(t) => (f, t),
            None => {
                cx.diags.error(
                    codes::EVENT,
                    wspan,
                    format!("unknown type `{t}` (u8..u64, s8..s64, x8..x64, string)"),
                );
                return None;
            }
        },
        _ => (rest, FType::Hex(8)),
    };
    let fetch = match parse_fetch(fetch_text, 0) {
        Ok(f) => f,
        Err(e) => {
            cx.diags.error(codes::EVENT, wspan, e);
            return None;
        }
    };
    if fetch == Fetch::Retval && !ret {
        cx.diags.error(
            codes::EVENT,
            wspan,
            "$retval is only available in return probes (r)",
        );
        return None;
    }
    if fetch == Fetch::Comm && ty != FType::Str && rest.contains(':') {
        cx.diags.error(codes::EVENT, wspan, "$comm is a string");
        return None;
    }
    // The address of a symbol, relocated at run time.
    let sym_addr = |cx: &mut EventCx<'_>, name: &str| -> Option<u64> {
        let path = crate::elf::resolve_binary(module, &cx.env.mapped)?;
        let bin = cx.env.binary(&path).ok()?;
        bin.data_symbol(name)
    };
    let mut sym_err = None;
    let value = lower(&fetch, ty, slot, &mut |name| {
        let v = sym_addr(cx, name);
        if v.is_none() {
            sym_err = Some(name.to_string());
        }
        v.unwrap_or(0)
    });
    if let Some(s) = sym_err {
        cx.diags.error(
            codes::EVENT,
            wspan,
            format!("symbol `{s}` not found in {module}"),
        );
        return None;
    }
    let (e, t, spec): (E, Ty, &str) = match (fetch == Fetch::Comm, ty) {
        (true, _) => (value, Ty::Str(16), "\"%s\""),
        (false, FType::Str) => {
            let s = slot(256);
            (
                E::ReadStr {
                    addr: Box::new(value),
                    max: Box::new(E::Int(256)),
                    slot: s,
                    size: 256,
                },
                Ty::Str(256),
                "\"%s\"",
            )
        }
        (false, FType::Unsigned(b)) => (trunc(value, false, b), Ty::U64, "%lu"),
        (false, FType::Signed(b)) => (trunc(value, true, b), Ty::I64, "%ld"),
        (false, FType::Hex(b)) => (trunc(value, false, b), Ty::U64, "0x%lx"),
    };
    Some((field, e, t, spec))
}

fn trunc(e: E, signed: bool, bytes: u8) -> E {
    if bytes == 8 {
        e
    } else {
        E::Cast {
            e: Box::new(e),
            signed,
            bytes,
        }
    }
}

/// The IR of a fetch-arg's value (addresses for strings; memory reads of
/// `ty`'s size at the outermost dereference).
fn lower(
    f: &Fetch,
    ty: FType,
    slot: &mut dyn FnMut(u32) -> u32,
    sym: &mut dyn FnMut(&str) -> u64,
) -> E {
    let rsp_plus = |off: i64| {
        E::Bin(
            crate::ast::BinOp::Add,
            false,
            Box::new(E::Reg(hostabi::regs::RSP)),
            Box::new(E::Int(off)),
        )
    };
    let load8 = |addr: E, slot: &mut dyn FnMut(u32) -> u32| E::Load {
        addr: Box::new(addr),
        bytes: 8,
        signed: false,
        slot: slot(8),
    };
    let bytes = match ty {
        FType::Unsigned(b) | FType::Signed(b) | FType::Hex(b) => b,
        FType::Str => 8,
    };
    let memory = |addr: E, slot: &mut dyn FnMut(u32) -> u32| -> E {
        if ty == FType::Str {
            // A string at a memory location: the location holds the string.
            addr
        } else {
            E::Load {
                addr: Box::new(addr),
                bytes,
                signed: matches!(ty, FType::Signed(_)),
                slot: slot(8),
            }
        }
    };
    match f {
        Fetch::Reg(r) => E::Reg(*r),
        Fetch::Arg(n) if *n <= 6 => E::Reg(ARG_REGS[*n as usize - 1]),
        Fetch::Arg(n) => load8(rsp_plus(8 * (*n as i64 - 6)), slot),
        Fetch::Stack(n) => load8(rsp_plus(8 * *n as i64), slot),
        Fetch::StackAddr => E::Reg(hostabi::regs::RSP),
        Fetch::Retval => E::Reg(reg::RAX),
        Fetch::Comm => E::Comm(slot(16)),
        Fetch::Abs(a) => memory(E::Int(*a as i64), slot),
        Fetch::FileOff(o) => memory(
            E::Bin(
                crate::ast::BinOp::Add,
                false,
                Box::new(E::Fact(Fact::Bias)),
                Box::new(E::Int(*o as i64)),
            ),
            slot,
        ),
        Fetch::Sym(s, off) => {
            let v = sym(s).wrapping_add(*off as u64);
            memory(
                E::Bin(
                    crate::ast::BinOp::Add,
                    false,
                    Box::new(E::Fact(Fact::Bias)),
                    Box::new(E::Int(v as i64)),
                ),
                slot,
            )
        }
        Fetch::Deref(off, inner) => {
            // The inner value is an address (8-byte reads for inner derefs).
            let base = lower(inner, FType::Hex(8), slot, sym);
            memory(
                E::Bin(
                    crate::ast::BinOp::Add,
                    false,
                    Box::new(base),
                    Box::new(E::Int(*off)),
                ),
                slot,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_args_parse() {
        assert_eq!(parse_fetch("%di", 0), Ok(Fetch::Reg(reg::RDI)));
        assert_eq!(parse_fetch("%rax", 0), Ok(Fetch::Reg(reg::RAX)));
        assert_eq!(parse_fetch("$stack3", 0), Ok(Fetch::Stack(3)));
        assert_eq!(parse_fetch("$arg2", 0), Ok(Fetch::Arg(2)));
        assert_eq!(parse_fetch("@0x1000", 0), Ok(Fetch::Abs(0x1000)));
        assert_eq!(parse_fetch("@+0x10", 0), Ok(Fetch::FileOff(0x10)));
        assert_eq!(
            parse_fetch("@counter+8", 0),
            Ok(Fetch::Sym("counter".into(), 8))
        );
        assert_eq!(
            parse_fetch("+8(-4(%si))", 0),
            Ok(Fetch::Deref(
                8,
                Box::new(Fetch::Deref(-4, Box::new(Fetch::Reg(reg::RSI))))
            ))
        );
        assert!(parse_fetch("%zz", 0).is_err());
        assert!(parse_fetch("$arg0", 0).is_err());
        assert!(parse_fetch("junk", 0).is_err());
        assert_eq!(parse_type("x32"), Some(FType::Hex(4)));
        assert_eq!(parse_type("u7"), None);
    }
}
