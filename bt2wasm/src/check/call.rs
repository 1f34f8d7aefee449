//! Calls: output (`printf`, `print`, `time`), control (`exit`), map
//! maintenance (`clear`, `zero`, `delete`), readers (`str`, `buf`, `reg`,
//! `usym`, `ustack`), comparisons (`strncmp`) and the aggregations, which
//! are only valid as the value of a map assignment.

use super::Fx;
use super::format::{self, Kind};
use crate::ast::{self, ExprKind};
use crate::diag::codes;
use crate::ir::{E, Emit, Part, S, Ty};
use hostabi::event::{EventKind, PrintfEntry};
use hostabi::maps::{MapKind, Op};
use rpn2wasm::Span;

const AGGREGATIONS: &[&str] = &[
    "count", "sum", "avg", "min", "max", "stats", "hist", "lhist",
];

/// Functions bpftrace has that wprobe refuses, with the reason.
const REFUSED: &[(&str, &str)] = &[
    ("signal", "handlers do not send signals"),
    ("override", "it changes kernel function returns"),
    ("kstack", "it describes the kernel"),
    ("ksym", "it describes the kernel"),
    ("kaddr", "it describes the kernel"),
    ("kptr", "it describes the kernel"),
    ("cgroupid", "it describes the kernel"),
    ("cgroup_path", "it describes the kernel"),
    ("join", "not supported yet"),
    ("path", "it describes the kernel"),
    ("skboutput", "it describes the kernel"),
    ("debugf", "use printf"),
    ("unwatch", "not supported yet"),
];

/// Whether `name` is an aggregation function.
pub(crate) fn is_aggregation(name: &str) -> bool {
    AGGREGATIONS.contains(&name)
}

pub(crate) fn int_literal(e: &ast::Expr) -> Option<i64> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v as i64),
        ExprKind::Unop(ast::UnOp::Neg, x) => match x.kind {
            ExprKind::Int(v) => Some((v as i64).wrapping_neg()),
            _ => None,
        },
        _ => None,
    }
}

impl Fx<'_, '_> {
    /// `uaddr("NAME")`: the address of variable NAME of the probed binary
    /// in the process (its link-time value plus the module's load bias),
    /// a pointer to a signed integer of its size (8 bytes when the size is
    /// not 1, 2, 4 or 8), as bpftrace types it.
    fn uaddr(&mut self, name: &str, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let mut found: Option<(u64, u64)> = None;
        for c in self.concrete {
            let crate::probes::Kind::Uprobe { module, .. } = &c.kind else {
                self.cx.err(
                    codes::BUILTIN_CONTEXT,
                    span,
                    "uaddr can only be used with uprobes and usdt probes",
                );
                return bad;
            };
            let bin = self.cx.dwarf_files.iter().find(|b| {
                let canon = std::fs::canonicalize(&b.path).unwrap_or_else(|_| b.path.clone());
                canon.to_string_lossy() == module.as_str()
                    || b.path.to_string_lossy() == module.as_str()
                    || b.path
                        .file_name()
                        .is_some_and(|f| f.to_string_lossy() == module.as_str())
            });
            let Some(sym) = bin.and_then(|b| b.object(name)) else {
                self.cx.err(
                    codes::NO_MATCH,
                    span,
                    format!("Could not resolve symbol: {module}:{name}"),
                );
                return bad;
            };
            if found.is_some_and(|f| f != sym) {
                self.cx.err(
                    codes::NO_MATCH,
                    span,
                    format!(
                        "uaddr(\"{name}\") names different variables in the probes of this handler"
                    ),
                );
                return bad;
            }
            found = Some(sym);
        }
        let Some((value, size)) = found else {
            self.cx.err(
                codes::BUILTIN_CONTEXT,
                span,
                "uaddr can only be used with uprobes and usdt probes",
            );
            return bad;
        };
        let bytes = if matches!(size, 1 | 2 | 4 | 8) {
            size as u8
        } else {
            8
        };
        (
            E::Bin(
                crate::ast::BinOp::Add,
                false,
                Box::new(E::Int(value as i64)),
                Box::new(E::Fact(crate::ir::Fact::Bias)),
            ),
            Ty::Ptr(Box::new(crate::ctypes::CType::Int {
                signed: true,
                bytes,
            })),
        )
    }

    /// `macaddr(ADDR)`: the six bytes at `addr` spelled `05:04:03:02:01:02`
    /// (17 characters and a NUL), built in a slot as a string: each
    /// character an 8-byte store at its own offset, the last one's upper
    /// bytes the terminating zeros.
    fn macaddr(&mut self, addr: E) -> (E, Ty) {
        use crate::ast::BinOp;
        let bin = |op, a: E, b: E| E::Bin(op, false, Box::new(a), Box::new(b));
        let lo = self.local();
        let hi = self.local();
        let (s1, s2) = (self.slot(8), self.slot(8));
        let load = |a: E, bytes: u8, slot: u32| E::Load {
            addr: Box::new(a),
            bytes,
            signed: false,
            slot,
        };
        let setup = vec![
            S::SetLocal(lo, load(addr.clone(), 4, s1)),
            S::SetLocal(hi, load(bin(BinOp::Add, addr, E::Int(4)), 2, s2)),
        ];
        // Hex digit `d` (0..15), uppercase as bpftrace prints it.
        let digit = |d: E| {
            let over = bin(BinOp::Gt, d.clone(), E::Int(9));
            bin(
                BinOp::Add,
                bin(BinOp::Add, d, E::Int(b'0' as i64)),
                bin(BinOp::Mul, over, E::Int((b'A' - b'0' - 10) as i64)),
            )
        };
        let mut parts = Vec::new();
        for i in 0..6u32 {
            let (src, shift) = if i < 4 {
                (lo, 8 * i)
            } else {
                (hi, 8 * (i - 4))
            };
            let byte = bin(
                BinOp::BitAnd,
                bin(BinOp::Shr, E::Local(src), E::Int(shift as i64)),
                E::Int(0xff),
            );
            let off = 3 * i;
            parts.push(Part {
                e: digit(bin(BinOp::Shr, byte.clone(), E::Int(4))),
                ty: Ty::U64,
                off,
            });
            parts.push(Part {
                e: digit(bin(BinOp::BitAnd, byte, E::Int(0xf))),
                ty: Ty::U64,
                off: off + 1,
            });
            if i < 5 {
                parts.push(Part {
                    e: E::Int(b':' as i64),
                    ty: Ty::U64,
                    off: off + 2,
                });
            }
        }
        let slot = self.slot(24);
        (
            E::Seq(setup, Box::new(E::Tuple { slot, parts })),
            Ty::Str(24),
        )
    }

    fn nargs(&mut self, name: &str, args: &[ast::Expr], lo: usize, hi: usize, span: Span) -> bool {
        if args.len() < lo || args.len() > hi {
            let want = if lo == hi {
                format!("{lo} argument{}", if lo == 1 { "" } else { "s" })
            } else {
                format!("{lo} to {hi} arguments")
            };
            self.cx.err(
                codes::ARGUMENTS,
                span,
                format!("{name}() requires {want} ({} provided)", args.len()),
            );
            return false;
        }
        true
    }

    /// A call used as a statement.
    pub(crate) fn expr_stmt(&mut self, e: &ast::Expr) -> Option<S> {
        // `c ? f() : g()` as a statement: one of the two calls.
        if let ExprKind::Ternary(c, a, b) = &e.kind
            && (matches!(a.kind, ExprKind::Call { .. }) || matches!(b.kind, ExprKind::Call { .. }))
        {
            let (ce, ct) = self.expr(c);
            self.want_int(&ct, c.span, "ternary condition");
            let then: Vec<S> = self.expr_stmt(a).into_iter().collect();
            let els: Vec<S> = self.expr_stmt(b).into_iter().collect();
            return Some(S::If(ce, then, els));
        }
        if let ExprKind::Call { name, args, .. } = &e.kind {
            match name.as_str() {
                "printf" => return self.printf(args, e.span, EventKind::Printf),
                "cat" => return self.printf(args, e.span, EventKind::Cat),
                "system" => {
                    if !self.cx.opts.unsafe_calls {
                        self.cx.err_note(
                            codes::UNSUPPORTED,
                            e.span,
                            "system() is an unsafe function being used in safe mode",
                            "run with --unsafe to allow it",
                        );
                        return None;
                    }
                    return self.printf(args, e.span, EventKind::System);
                }
                "print" => return self.print(args, e.span),
                "time" => return self.time(args, e.span),
                "exit" => {
                    if !self.nargs("exit", args, 0, 1, e.span) {
                        return None;
                    }
                    let stop = S::Return(hostabi::Outcome::Stop as i32);
                    let Some(a) = args.first() else {
                        return Some(stop);
                    };
                    // `exit(code)`: an EXIT event carries the status
                    // wprobe ends with, then the run stops as for `exit()`.
                    let (v, t) = self.expr(a);
                    if !t.is_int() {
                        self.cx.err(
                            codes::ARGUMENTS,
                            a.span,
                            "exit() expects an integer exit code",
                        );
                        return None;
                    }
                    let slot = self.slot(8);
                    let emit = S::Emit(Emit {
                        kind: EventKind::Exit as i32,
                        id: 0,
                        slot,
                        parts: vec![Part {
                            e: v,
                            ty: Ty::I64,
                            off: 0,
                        }],
                        size: 8,
                    });
                    return Some(S::If(E::Int(1), vec![emit, stop], Vec::new()));
                }
                "clear" | "zero" => {
                    if !self.nargs(name, args, 1, 1, e.span) {
                        return None;
                    }
                    let ExprKind::Map(m) = &args[0].kind else {
                        self.cx.err(
                            codes::ARGUMENTS,
                            args[0].span,
                            format!("{name}() expects a map to be provided"),
                        );
                        return None;
                    };
                    if !m.keys.is_empty() {
                        self.cx.err(
                            codes::ARGUMENTS,
                            args[0].span,
                            format!("The map passed to {name}() should not be indexed by a key"),
                        );
                        return None;
                    }
                    let info = self.cx.map(&m.name);
                    info.used.get_or_insert(m.span);
                    let index = info.index;
                    // A count() map without keys keeps its one entry,
                    // zeroed (bpftrace prints `@: 0` after clear(@)).
                    let scalar_count = info.kind == Some(MapKind::Count)
                        && info.key.as_ref().is_some_and(|k| k.is_empty());
                    return Some(S::MapReset {
                        map: index,
                        zero: name == "zero" || scalar_count,
                    });
                }
                "delete" => {
                    // delete(@m[k]), or delete(@m, k) (bpftrace 0.21 on).
                    if !self.nargs("delete", args, 1, 2, e.span) {
                        return None;
                    }
                    let ExprKind::Map(m) = &args[0].kind else {
                        self.cx.err(
                            codes::ARGUMENTS,
                            args[0].span,
                            "delete() expects a map to be provided",
                        );
                        return None;
                    };
                    let (map, key) = match args.get(1) {
                        Some(k) if m.keys.is_empty() => {
                            let (ke, kt) = self.expr(k);
                            if kt == Ty::None {
                                return None;
                            }
                            self.map_key(m, vec![(ke, kt)], false)?
                        }
                        Some(k) => {
                            self.cx.err(
                                codes::ARGUMENTS,
                                k.span,
                                "delete(@map[key], key): give the key once, as delete(@map, key) or delete(@map[key])",
                            );
                            return None;
                        }
                        None => self.map_target(m, Ty::None, false)?,
                    };
                    let info = self.cx.map(&m.name);
                    if info.kind == Some(MapKind::Count)
                        && info.key.as_ref().is_some_and(|k| k.is_empty())
                    {
                        return Some(S::MapReset { map, zero: true });
                    }
                    return Some(S::MapDelete { map, key });
                }
                n if is_aggregation(n) => {
                    self.cx.err(
                        codes::MAP_USE,
                        e.span,
                        format!("{n}() should be directly assigned to a map"),
                    );
                    return None;
                }
                _ => {}
            }
        }
        let (x, _) = self.expr(e);
        Some(S::Eval(x))
    }

    /// A call used as a value.
    pub(crate) fn call(
        &mut self,
        name: &str,
        name_span: Span,
        args: &[ast::Expr],
        span: Span,
    ) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        match name {
            "str" => {
                if !self.nargs("str", args, 1, 2, span) {
                    return bad;
                }
                let (addr, at) = self.expr(&args[0]);
                let strlen = self.cx.opts.strlen;
                if let Ty::Str(have) = at {
                    // str() of a string (a literal, a positional
                    // parameter): the string, cut to n bytes.
                    let size = match args.get(1).map(int_literal) {
                        None => have,
                        Some(Some(v)) if v > 0 => (v as u64).min(have as u64) as u32,
                        Some(_) => {
                            self.cx.err(
                                codes::LITERAL,
                                args[1].span,
                                "str() of a string takes a positive integer literal length",
                            );
                            return bad;
                        }
                    };
                    let slot = self.slot(size);
                    let set = S::SetSlot {
                        slot,
                        e: addr,
                        size,
                        src_size: size.saturating_sub(1).min(have),
                    };
                    return (E::Seq(vec![set], Box::new(E::Slot(slot))), Ty::Str(size));
                }
                if at != Ty::None && !at.is_int() {
                    self.cx.err(
                        codes::ARGUMENTS,
                        args[0].span,
                        format!("str() expects an integer or a pointer type as first argument ({} provided)", at.name()),
                    );
                    return bad;
                }
                // str(p, n) reads n bytes, its NUL included (bpftrace 0.23;
                // 0.17 kept n characters), at most BPFTRACE_STRLEN.
                let (max, size) = match args.get(1) {
                    None => (E::Int(strlen as i64), strlen),
                    Some(n) => match int_literal(n) {
                        Some(v) if v > 0 => {
                            let size = (v as u64).min(strlen as u64) as u32;
                            (E::Int(size as i64), size)
                        }
                        Some(_) => {
                            self.cx
                                .err(codes::LITERAL, n.span, "str(): length must be positive");
                            return bad;
                        }
                        None => {
                            let (ne, nt) = self.expr(n);
                            self.want_int(&nt, n.span, "str() length");
                            (ne, strlen)
                        }
                    },
                };
                let slot = self.slot(size);
                (
                    E::ReadStr {
                        addr: Box::new(addr),
                        max: Box::new(max),
                        slot,
                        size,
                    },
                    Ty::Str(size),
                )
            }
            "uaddr" => {
                if !self.nargs("uaddr", args, 1, 1, span) {
                    return bad;
                }
                let ExprKind::Str(name) = &args[0].kind else {
                    self.cx.err(
                        codes::LITERAL,
                        args[0].span,
                        "uaddr() expects a string literal",
                    );
                    return bad;
                };
                let name = String::from_utf8_lossy(name).into_owned();
                self.uaddr(&name, span)
            }
            "macaddr" => {
                if !self.nargs("macaddr", args, 1, 1, span) {
                    return bad;
                }
                // The six bytes: an array in the traced process (by its
                // place), or at a pointer's or an integer's address.
                let addr = match self.place(&args[0]) {
                    Some((addr, c, _)) if matches!(c, crate::ctypes::CType::Array(..)) => {
                        if c.size() < 6 {
                            self.cx.err(
                                codes::TYPE,
                                args[0].span,
                                format!(
                                    "macaddr() needs 6 bytes, and {} has {}",
                                    c.name(),
                                    c.size()
                                ),
                            );
                            return bad;
                        }
                        addr
                    }
                    _ => {
                        let (e, t) = self.expr(&args[0]);
                        if !t.is_int() {
                            if t != Ty::None {
                                self.cx.err(
                                    codes::TYPE,
                                    args[0].span,
                                    format!(
                                        "macaddr() takes an array of 6 bytes or their address, not {}",
                                        t.name()
                                    ),
                                );
                            }
                            return bad;
                        }
                        e
                    }
                };
                self.macaddr(addr)
            }
            "buf" => {
                if !self.nargs("buf", args, 1, 2, span) {
                    return bad;
                }
                let strlen = self.cx.opts.strlen;
                let lit_len = match args.get(1).map(int_literal) {
                    Some(Some(v)) if v > 0 => Some(v as u32),
                    Some(Some(_)) => {
                        self.cx.err(
                            codes::LITERAL,
                            args[1].span,
                            "buf(): length must be positive",
                        );
                        return bad;
                    }
                    _ => None,
                };
                // An array in the traced process: its bytes.
                if let Some((addr, c, _)) = self.place(&args[0])
                    && matches!(c, crate::ctypes::CType::Array(..))
                {
                    let cap = lit_len.unwrap_or(c.size()).min(strlen.max(c.size()));
                    let slot = self.slot(8 + cap);
                    return (
                        E::ReadBuf {
                            addr: Box::new(addr),
                            len: Box::new(E::Int(cap as i64)),
                            slot,
                            cap,
                        },
                        Ty::Buf(cap),
                    );
                }
                let (addr, at) = self.expr(&args[0]);
                if let Ty::Str(have) = at {
                    // A string's bytes (its NUL too, when the length
                    // reaches it): a length and the bytes, as a buffer is
                    // laid out.
                    let n = lit_len.unwrap_or(have.saturating_sub(1)).min(have);
                    let slot = self.slot(8 + n);
                    let e = E::Tuple {
                        slot,
                        parts: vec![
                            Part {
                                e: E::Int(n as i64),
                                ty: Ty::U64,
                                off: 0,
                            },
                            Part {
                                e: addr,
                                ty: Ty::Str(n.max(1)),
                                off: 8,
                            },
                        ],
                    };
                    return (e, Ty::Buf(n.max(1)));
                }
                self.want_int(&at, args[0].span, "buf() address");
                let (len, cap) = match (args.get(1), lit_len) {
                    (None, _) => (E::Int(strlen as i64), strlen),
                    (Some(_), Some(v)) => (E::Int(v as i64), v.min(strlen)),
                    (Some(n), None) => {
                        let (ne, nt) = self.expr(n);
                        self.want_int(&nt, n.span, "buf() length");
                        (ne, strlen)
                    }
                };
                let slot = self.slot(8 + cap);
                (
                    E::ReadBuf {
                        addr: Box::new(addr),
                        len: Box::new(len),
                        slot,
                        cap,
                    },
                    Ty::Buf(cap),
                )
            }
            "len" => {
                if !self.nargs("len", args, 1, 1, span) {
                    return bad;
                }
                if let ExprKind::Map(m) = &args[0].kind {
                    return self.map_len(m, span);
                }
                let (e, t) = self.expr(&args[0]);
                match t {
                    // A stack's frame count.
                    Ty::Ustack(..) => (
                        E::Field {
                            base: Box::new(e),
                            off: 8,
                            ty: Ty::U64,
                        },
                        Ty::I64,
                    ),
                    Ty::None => bad,
                    t => {
                        self.cx.err(
                            codes::ARGUMENTS,
                            args[0].span,
                            format!("len() expects a map or a stack ({} provided)", t.name()),
                        );
                        bad
                    }
                }
            }
            "strftime" => {
                if !self.nargs("strftime", args, 2, 2, span) {
                    return bad;
                }
                let ExprKind::Str(fmt) = &args[0].kind else {
                    self.cx.err(
                        codes::LITERAL,
                        args[0].span,
                        "strftime() expects a string literal as first argument",
                    );
                    return bad;
                };
                let (e, t) = self.expr(&args[1]);
                if t == Ty::None {
                    return bad;
                }
                self.want_int(&t, args[1].span, "strftime() time");
                (e, Ty::Strftime(fmt.clone()))
            }
            "strerror" => {
                if !self.nargs("strerror", args, 1, 1, span) {
                    return bad;
                }
                let (e, t) = self.expr(&args[0]);
                if t == Ty::None {
                    return bad;
                }
                self.want_int(&t, args[0].span, "strerror() argument");
                // The C library's messages, one per errno, in static data.
                const ERRNOS: i32 = 134;
                let msgs: Vec<String> = (0..=ERRNOS)
                    .map(|n| {
                        if n == ERRNOS {
                            return "Unknown error".to_string();
                        }
                        let m = std::io::Error::from_raw_os_error(n).to_string();
                        m.split(" (os error").next().unwrap_or(&m).to_string()
                    })
                    .collect();
                let stride = msgs.iter().map(|m| m.len() as u32 + 1).max().unwrap_or(1);
                let stride = stride.div_ceil(8) * 8;
                let mut bytes = Vec::new();
                for m in &msgs {
                    let mut b = m.as_bytes().to_vec();
                    b.resize(stride as usize, 0);
                    bytes.extend(b);
                }
                let base = self.cx.string(&bytes);
                (
                    E::TableAt {
                        base,
                        stride,
                        count: msgs.len() as u32,
                        index: Box::new(e),
                    },
                    Ty::Str(stride),
                )
            }
            "has_key" => {
                if !self.nargs("has_key", args, 2, 2, span) {
                    return bad;
                }
                let ExprKind::Map(m) = &args[0].kind else {
                    self.cx.err(
                        codes::ARGUMENTS,
                        args[0].span,
                        "has_key() expects a map to be provided",
                    );
                    return bad;
                };
                let (ke, kt) = self.expr(&args[1]);
                if kt == Ty::None {
                    return bad;
                }
                let Some((map, key)) = self.map_key(m, vec![(ke, kt)], false) else {
                    return bad;
                };
                (E::MapHas { map, key }, Ty::U64)
            }
            "pton" => {
                if !self.nargs("pton", args, 1, 1, span) {
                    return bad;
                }
                let ExprKind::Str(text) = &args[0].kind else {
                    self.cx.err(
                        codes::LITERAL,
                        args[0].span,
                        "pton() expects a string literal",
                    );
                    return bad;
                };
                let text = String::from_utf8_lossy(text);
                let text = text.trim_end_matches('\0');
                let octets: Vec<u8> = if text.contains(':') {
                    text.parse::<std::net::Ipv6Addr>()
                        .map(|a| a.octets().to_vec())
                        .unwrap_or_default()
                } else {
                    text.parse::<std::net::Ipv4Addr>()
                        .map(|a| a.octets().to_vec())
                        .unwrap_or_default()
                };
                if octets.is_empty() {
                    self.cx.err(
                        codes::ARGUMENTS,
                        args[0].span,
                        "pton() expects valid IPv4 or IPv6 address",
                    );
                    return bad;
                }
                let elem = Ty::Int {
                    signed: false,
                    bytes: 1,
                };
                let arr = Ty::Array(Box::new(elem.clone()), octets.len() as u32);
                let parts = octets
                    .iter()
                    .enumerate()
                    .map(|(i, b)| Part {
                        e: E::Int(i64::from(*b)),
                        ty: elem.clone(),
                        off: elem.size() * i as u32,
                    })
                    .collect();
                let slot = self.slot(arr.size());
                (E::Tuple { slot, parts }, arr)
            }
            "ntop" => {
                if !self.nargs("ntop", args, 1, 2, span) {
                    return bad;
                }
                let addr = &args[args.len() - 1];
                let (ae, at) = self.expr(addr);
                let mut pre = Vec::new();
                let (lo, hi, family) = match &at {
                    Ty::None => return bad,
                    t if t.is_int() => (
                        E::Bin(
                            crate::ast::BinOp::BitAnd,
                            false,
                            Box::new(ae),
                            Box::new(E::Int(0xffff_ffff)),
                        ),
                        E::Int(0),
                        2,
                    ),
                    Ty::Array(elem, n @ (4 | 16)) if matches!(**elem, Ty::Int { bytes: 1, .. }) => {
                        let size = at.size();
                        let slot = self.slot(size);
                        pre.push(S::SetSlot {
                            slot,
                            e: ae,
                            size,
                            src_size: size,
                        });
                        let lo = super::expr::pack_elements(slot, elem, 0..(*n).min(8));
                        let hi = if *n == 16 {
                            super::expr::pack_elements(slot, elem, 8..16)
                        } else {
                            E::Int(0)
                        };
                        (lo, hi, if *n == 4 { 2 } else { 10 })
                    }
                    t => {
                        self.cx.err(
                            codes::ARGUMENTS,
                            addr.span,
                            format!(
                                "ntop() expects an integer or array argument of size 4 or 16, got {}",
                                t.name()
                            ),
                        );
                        return bad;
                    }
                };
                let af = if args.len() == 2 {
                    let (e, t) = self.expr(&args[0]);
                    if !t.is_int() {
                        if t != Ty::None {
                            self.cx.err(
                                codes::ARGUMENTS,
                                args[0].span,
                                format!(
                                    "ntop() expects an integer address family ({} provided)",
                                    t.name()
                                ),
                            );
                        }
                        return bad;
                    }
                    e
                } else {
                    E::Int(family)
                };
                let slot = self.slot(Ty::Inet.size());
                let value = E::Tuple {
                    slot,
                    parts: vec![
                        Part {
                            e: af,
                            ty: Ty::U64,
                            off: 0,
                        },
                        Part {
                            e: lo,
                            ty: Ty::U64,
                            off: 8,
                        },
                        Part {
                            e: hi,
                            ty: Ty::U64,
                            off: 16,
                        },
                    ],
                };
                if pre.is_empty() {
                    (value, Ty::Inet)
                } else {
                    (E::Seq(pre, Box::new(value)), Ty::Inet)
                }
            }
            "bswap" => {
                if !self.nargs("bswap", args, 1, 1, span) {
                    return bad;
                }
                let (e, t) = self.expr(&args[0]);
                let Ty::Int { signed, bytes } = t else {
                    if t != Ty::None {
                        self.cx.err(
                            codes::ARGUMENTS,
                            args[0].span,
                            format!("bswap() expects an integer ({} provided)", t.name()),
                        );
                    }
                    return bad;
                };
                // Byte i moves to byte (bytes - 1 - i).
                let l = self.local();
                let mut acc = E::Int(0);
                for i in 0..bytes as i64 {
                    let byte = E::Bin(
                        crate::ast::BinOp::BitAnd,
                        false,
                        Box::new(E::Bin(
                            crate::ast::BinOp::Shr,
                            false,
                            Box::new(E::Local(l)),
                            Box::new(E::Int(8 * i)),
                        )),
                        Box::new(E::Int(0xff)),
                    );
                    let moved = E::Bin(
                        crate::ast::BinOp::Shl,
                        false,
                        Box::new(byte),
                        Box::new(E::Int(8 * (bytes as i64 - 1 - i))),
                    );
                    acc = E::Bin(
                        crate::ast::BinOp::BitOr,
                        false,
                        Box::new(acc),
                        Box::new(moved),
                    );
                }
                let t = Ty::Int {
                    signed: false,
                    bytes,
                };
                let _ = signed;
                (E::Seq(vec![S::SetLocal(l, e)], Box::new(acc)), t)
            }
            "nsecs" => {
                if !self.nargs("nsecs", args, 0, 1, span) {
                    return bad;
                }
                match args.first().map(|a| &a.kind) {
                    None => (E::Fact(crate::ir::Fact::Nsecs), Ty::U64),
                    Some(ExprKind::Ident(c)) if c == "monotonic" => {
                        (E::Fact(crate::ir::Fact::Nsecs), Ty::U64)
                    }
                    Some(ExprKind::Ident(c)) if c == "boot" => {
                        (E::Fact(crate::ir::Fact::NsecsBoot), Ty::U64)
                    }
                    Some(ExprKind::Ident(c)) if matches!(c.as_str(), "tai" | "sw_tai") => {
                        (E::Fact(crate::ir::Fact::NsecsTai), Ty::U64)
                    }
                    _ => {
                        self.cx.err(
                            codes::ARGUMENTS,
                            args[0].span,
                            "nsecs() takes monotonic, boot, tai or sw_tai",
                        );
                        bad
                    }
                }
            }
            "reg" => {
                if !self.nargs("reg", args, 1, 1, span) {
                    return bad;
                }
                let ExprKind::Str(r) = &args[0].kind else {
                    self.cx.err(
                        codes::LITERAL,
                        args[0].span,
                        "reg() expects a string literal",
                    );
                    return bad;
                };
                let r = String::from_utf8_lossy(r).to_string();
                if self.ctx == super::Ctx::Special {
                    self.cx.err(
                        codes::BUILTIN_CONTEXT,
                        span,
                        "reg can not be used with \"BEGIN\"/\"END\"/\"interval\" probes",
                    );
                    return bad;
                }
                // bpftrace's names are pt_regs fields: ip, sp, bp, ax...
                let alias = match r.as_str() {
                    "ip" => "rip",
                    "sp" => "rsp",
                    "bp" => "rbp",
                    "ax" => "rax",
                    "bx" => "rbx",
                    "cx" => "rcx",
                    "dx" => "rdx",
                    "si" => "rsi",
                    "di" => "rdi",
                    "flags" => "rflags",
                    other => other,
                };
                match hostabi::regs::by_name(alias)
                    .filter(|i| i.width == 64 && !i.name.starts_with("dr"))
                {
                    Some(i) => (E::Reg(i.id), Ty::U64),
                    None => {
                        self.cx.err(
                            codes::ARGUMENTS,
                            args[0].span,
                            format!("'{r}' is not a valid register"),
                        );
                        bad
                    }
                }
            }
            "usym" => {
                if !self.nargs("usym", args, 1, 1, span) {
                    return bad;
                }
                let (a, at) = self.expr(&args[0]);
                self.want_int(&at, args[0].span, "usym() address");
                let slot = self.slot(16);
                (
                    E::Usym {
                        addr: Box::new(a),
                        slot,
                    },
                    Ty::Usym,
                )
            }
            "ustack" => {
                // ustack([mode,] [limit])
                let mut frames = self.cx.opts.ustack_frames;
                let mut mode = self.default_stack_mode();
                for a in args {
                    match &a.kind {
                        ExprKind::Ident(m) if m == "bpftrace" => mode = None,
                        ExprKind::Ident(m) if m == "perf" => {
                            mode = Some(hostabi::layout::StackMode::Perf)
                        }
                        ExprKind::Ident(m) if m == "raw" => {
                            mode = Some(hostabi::layout::StackMode::Raw)
                        }
                        _ => match int_literal(a) {
                            Some(n) if (1..=1024).contains(&n) => frames = n as u32,
                            _ => {
                                self.cx.err(
                                    codes::ARGUMENTS,
                                    a.span,
                                    "ustack() expects a stack mode (bpftrace, perf, raw) and/or a frame limit of 1 to 1024",
                                );
                                return bad;
                            }
                        },
                    }
                }
                self.ustack(frames, mode, span)
            }
            "strncmp" => {
                if !self.nargs("strncmp", args, 3, 3, span) {
                    return bad;
                }
                let (a, at) = self.expr(&args[0]);
                let (b, bt) = self.expr(&args[1]);
                let Some(n) = int_literal(&args[2]).filter(|n| *n >= 0) else {
                    self.cx.err(
                        codes::LITERAL,
                        args[2].span,
                        "strncmp() expects an integer literal as third argument",
                    );
                    return bad;
                };
                match (at, bt) {
                    (Ty::Str(x), Ty::Str(y)) => (
                        E::StrEq {
                            ne: true,
                            a: Box::new(a),
                            b: Box::new(b),
                            n: (n as u32).min(x).min(y),
                        },
                        Ty::U64,
                    ),
                    (x, y) => {
                        if x != Ty::None && y != Ty::None {
                            self.cx
                                .err(codes::ARGUMENTS, span, "strncmp() expects two strings");
                        }
                        bad
                    }
                }
            }
            "sizeof" => {
                if !self.nargs("sizeof", args, 1, 1, span) {
                    return bad;
                }
                let (_, t) = self.expr(&args[0]);
                if t == Ty::None {
                    return bad;
                }
                (E::Int(super::types::c_size(&t) as i64), Ty::U64)
            }
            "strcontains" => {
                if !self.nargs("strcontains", args, 2, 2, span) {
                    return bad;
                }
                let (a, at) = self.expr(&args[0]);
                let (b, bt) = self.expr(&args[1]);
                match (at, bt) {
                    (Ty::Str(x), Ty::Str(y)) => (
                        E::StrContains {
                            hay: Box::new(a),
                            hn: x,
                            needle: Box::new(b),
                            nn: y,
                        },
                        Ty::U64,
                    ),
                    (x, y) => {
                        if x != Ty::None && y != Ty::None {
                            self.cx.err(
                                codes::ARGUMENTS,
                                span,
                                "strcontains() expects two strings",
                            );
                        }
                        bad
                    }
                }
            }
            "uptr" => {
                if !self.nargs("uptr", args, 1, 1, span) {
                    return bad;
                }
                self.expr(&args[0])
            }
            "printf" | "print" | "time" | "exit" | "clear" | "zero" | "delete" | "cat"
            | "system" => {
                self.cx.err(
                    codes::ARGUMENTS,
                    span,
                    format!("{name}() should not be used in an assignment or as a map key"),
                );
                bad
            }
            n if is_aggregation(n) => {
                self.cx.err(
                    codes::MAP_USE,
                    span,
                    format!("{n}() should be directly assigned to a map"),
                );
                bad
            }
            _ => {
                if let Some((_, why)) = REFUSED.iter().find(|(f, _)| *f == name) {
                    self.cx.err_note(
                        codes::UNSUPPORTED,
                        name_span,
                        format!("{name}() is not supported"),
                        *why,
                    );
                } else {
                    self.cx.err(
                        codes::UNKNOWN_FUNCTION,
                        name_span,
                        format!("Unknown function: {name}"),
                    );
                }
                bad
            }
        }
    }

    /// `@m[k] = count()` and the other aggregations.
    pub(crate) fn aggregate(
        &mut self,
        m: &ast::MapRef,
        name: &str,
        args: &[ast::Expr],
        span: Span,
        out: &mut Vec<S>,
    ) {
        let (kind, op, nargs) = match name {
            "count" => (MapKind::Count, Op::Count, 0),
            "sum" => (MapKind::Sum, Op::Add, 1),
            "avg" => (MapKind::Avg, Op::Avg, 1),
            "min" => (MapKind::Min, Op::Min, 1),
            "max" => (MapKind::Max, Op::Max, 1),
            "stats" => (MapKind::Stats, Op::Avg, 1),
            "hist" => (MapKind::Hist, Op::Hist, 1),
            _ => (MapKind::Lhist, Op::Lhist, 4),
        };
        let most = if kind == MapKind::Hist { 2 } else { nargs };
        if !self.nargs(name, args, nargs, most, span) {
            return;
        }
        // `hist(x, k)`: 2^k buckets per power of two, k a literal 0 to 5.
        let mut hist_bits = 0u8;
        if kind == MapKind::Hist
            && let Some(a) = args.get(1)
        {
            match int_literal(a) {
                Some(k) if (0..=i64::from(hostabi::maps::MAX_HIST_BITS)).contains(&k) => {
                    hist_bits = k as u8;
                }
                Some(_) => {
                    self.cx.err(
                        codes::ARGUMENTS,
                        a.span,
                        format!(
                            "hist: bits argument must be in range 0-{}",
                            hostabi::maps::MAX_HIST_BITS
                        ),
                    );
                    return;
                }
                None => {
                    self.cx.err(
                        codes::LITERAL,
                        a.span,
                        "hist() expects an integer literal as its second argument",
                    );
                    return;
                }
            }
        }
        let (value, vt) = match args.first() {
            Some(a) => {
                let (e, t) = self.expr(a);
                if t == Ty::None {
                    return;
                }
                if !t.is_int() {
                    self.cx.err(
                        codes::ARGUMENTS,
                        a.span,
                        format!("{name}() expects a integer type ({} provided)", t.name()),
                    );
                    return;
                }
                (e, t)
            }
            None => (E::Int(0), Ty::U64),
        };
        let mut lhist = None;
        if kind == MapKind::Lhist {
            let lit: Vec<Option<i64>> = args[1..].iter().map(int_literal).collect();
            let names = ["min", "max", "step"];
            for (i, l) in lit.iter().enumerate() {
                if l.is_none() {
                    self.cx.err(
                        codes::LITERAL,
                        args[i + 1].span,
                        format!("lhist: invalid {} value", names[i]),
                    );
                    return;
                }
            }
            let (min, max, step) = (
                lit[0].unwrap_or(0),
                lit[1].unwrap_or(0),
                lit[2].unwrap_or(0),
            );
            let mut ok = true;
            if step <= 0 {
                self.cx.err(
                    codes::LITERAL,
                    span,
                    format!("lhist() step must be >= 1 ({step} provided)"),
                );
                ok = false;
            } else {
                let buckets = (max - min) / step;
                if buckets > 1000 {
                    self.cx.err(
                        codes::LITERAL,
                        span,
                        format!("lhist() too many buckets, must be <= 1000 (would need {buckets})"),
                    );
                    ok = false;
                }
            }
            if min < 0 {
                self.cx.err(
                    codes::LITERAL,
                    span,
                    format!("lhist() min must be non-negative (provided min {min})"),
                );
                ok = false;
            }
            if min > max {
                self.cx.err(
                    codes::LITERAL,
                    span,
                    format!("lhist() min must be less than max (provided min {min} and max {max})"),
                );
                ok = false;
            }
            if step > 0 && (max - min) < step {
                self.cx.err(
                    codes::LITERAL,
                    span,
                    format!("lhist() step is too large for the given range (provided step {step} for range {})", max - min),
                );
                ok = false;
            }
            if !ok {
                return;
            }
            lhist = Some((min, max, step));
        }
        let sample = Ty::Int {
            signed: vt.signed(),
            bytes: 8,
        };
        let Some((map, key)) = self.map_target(m, sample.clone(), true) else {
            return;
        };
        if self
            .set_map_kind(m, kind, sample.clone(), lhist, span)
            .is_none()
        {
            return;
        }
        if kind == MapKind::Hist {
            let info = self.cx.map(&m.name);
            match info.hist_bits {
                Some(old) if old != hist_bits => {
                    self.cx.err(
                        codes::MAP_USE,
                        span,
                        format!(
                            "hist() bits argument of {} differs from an earlier use",
                            m.name
                        ),
                    );
                    return;
                }
                _ => info.hist_bits = Some(hist_bits),
            }
        }
        out.push(S::MapUpdate {
            map,
            key,
            op,
            value: super::coerce_int(value, &vt, &sample),
        });
    }

    /// `printf`, and `cat`/`system`, which take a format the same way.
    fn printf(&mut self, args: &[ast::Expr], span: Span, kind: EventKind) -> Option<S> {
        let Some(first) = args.first() else {
            self.cx.err(
                codes::ARGUMENTS,
                span,
                "printf() requires at least 1 argument (0 provided)",
            );
            return None;
        };
        let ExprKind::Str(fmt) = &first.kind else {
            self.cx.err(
                codes::LITERAL,
                first.span,
                "printf() expects a string literal as first argument",
            );
            return None;
        };
        let specs = format::specs(fmt);
        let rest = &args[1..];
        if rest.len() < specs.len() {
            self.cx.err(
                codes::FORMAT,
                span,
                format!(
                    "printf: Not enough arguments for format string ({} supplied, {} expected)",
                    rest.len(),
                    specs.len()
                ),
            );
            return None;
        }
        if rest.len() > specs.len() {
            self.cx.err(
                codes::FORMAT,
                span,
                format!(
                    "printf: Too many arguments for format string ({} supplied, {} expected)",
                    rest.len(),
                    specs.len()
                ),
            );
            return None;
        }
        let mut parts = Vec::new();
        let mut layouts = Vec::new();
        let mut off = 0;
        for (a, s) in rest.iter().zip(&specs) {
            let (e, t) = self.expr(a);
            if t == Ty::None {
                return None;
            }
            let given = match t {
                Ty::Int { .. } | Ty::Ptr(_) => Kind::Int,
                // An enum prints as its number (%d) or its name (%s).
                Ty::Enum(_) if s.kind != Kind::Buf => s.kind,
                Ty::Buf(_) => Kind::Buf,
                _ => Kind::Str,
            };
            if given != s.kind {
                self.cx.err(
                    codes::FORMAT,
                    a.span,
                    format!(
                        "printf: %{} specifier expects a value of type {} ({} supplied)",
                        s.conv,
                        s.kind.name(),
                        given.name()
                    ),
                );
                return None;
            }
            let sz = t.size();
            layouts.push(t.layout());
            parts.push(Part { e, ty: t, off });
            off += sz;
        }
        let id = self.cx.events.printf.len() as u32;
        self.cx.events.printf.push(PrintfEntry {
            format: fmt.clone(),
            args: layouts,
        });
        let slot = self.slot(off.max(8));
        Some(S::Emit(Emit {
            kind: kind as i32,
            id,
            slot,
            parts,
            size: off,
        }))
    }

    fn print(&mut self, args: &[ast::Expr], span: Span) -> Option<S> {
        if !self.nargs("print", args, 1, 3, span) {
            return None;
        }
        if let ExprKind::Map(m) = &args[0].kind
            && m.keys.is_empty()
        {
            let info = self.cx.map(&m.name);
            info.used.get_or_insert(m.span);
            let index = info.index;
            let mut lits = [0i64; 2];
            for (i, a) in args[1..].iter().enumerate() {
                match int_literal(a) {
                    Some(v) if v >= 0 => lits[i] = v,
                    _ => {
                        self.cx.err(
                            codes::LITERAL,
                            a.span,
                            "print(): top and div must be non-negative integer literals",
                        );
                        return None;
                    }
                }
            }
            let slot = self.slot(16);
            let parts = vec![
                Part {
                    e: E::Int(lits[0]),
                    ty: Ty::U64,
                    off: 0,
                },
                Part {
                    e: E::Int(lits[1]),
                    ty: Ty::U64,
                    off: 8,
                },
            ];
            return Some(S::Emit(Emit {
                kind: EventKind::PrintMap as i32,
                id: index,
                slot,
                parts,
                size: 16,
            }));
        }
        if args.len() > 1 {
            self.cx.err(
                codes::ARGUMENTS,
                span,
                "Non-map print() only takes 1 argument, 2 found",
            );
            return None;
        }
        let (e, t) = self.expr(&args[0]);
        if t == Ty::None {
            return None;
        }
        let id = self.cx.events.values.len() as u32;
        self.cx.events.values.push(t.layout());
        let size = t.size();
        let slot = self.slot(size);
        Some(S::Emit(Emit {
            kind: EventKind::PrintValue as i32,
            id,
            slot,
            parts: vec![Part { e, ty: t, off: 0 }],
            size,
        }))
    }

    fn time(&mut self, args: &[ast::Expr], span: Span) -> Option<S> {
        if !self.nargs("time", args, 0, 1, span) {
            return None;
        }
        let fmt = match args.first() {
            None => b"%H:%M:%S\n".to_vec(),
            Some(a) => match &a.kind {
                ExprKind::Str(s) => s.clone(),
                _ => {
                    self.cx
                        .err(codes::LITERAL, a.span, "time() expects a string literal");
                    return None;
                }
            },
        };
        let id = self.cx.events.times.len() as u32;
        self.cx.events.times.push(fmt);
        let slot = self.slot(8);
        Some(S::Emit(Emit {
            kind: EventKind::Time as i32,
            id,
            slot,
            parts: Vec::new(),
            size: 0,
        }))
    }
}
