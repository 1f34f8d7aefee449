//! Lowering of expressions and map assignments: builtins, operators with
//! bpftrace's typing (64-bit results, signed only when both operands are),
//! string comparisons, casts, tuples, map reads, `args` from DWARF.

use super::{Ctx, Fx, MapInfo, VarLoc, coerce_int, unify};
use crate::ast::{self, BinOp, ExprKind, UnOp};
use crate::diag::codes;
use crate::dwarf::ParamValue;
use crate::ir::{E, Fact, Part, S, Ty};
use hostabi::maps::{MapKind, Op};
use hostabi::regs;
use rpn2wasm::Span;

/// `hostabi::regs` ids used by the lowering (checked by a test).
pub(crate) mod reg {
    pub const RAX: u16 = 0x06;
    pub const RCX: u16 = 0x08;
    pub const RDX: u16 = 0x09;
    pub const RDI: u16 = 0x0a;
    pub const RSI: u16 = 0x0b;
    pub const RBP: u16 = 0x0f;
    pub const R8: u16 = 0x10;
    pub const R9: u16 = 0x11;
}

/// Registers of arguments 0-5 (System V x86-64).
pub(crate) const ARG_REGS: [u16; 6] = [reg::RDI, reg::RSI, reg::RDX, reg::RCX, reg::R8, reg::R9];

/// `e * n` (pointer arithmetic's scaling; nothing for 1).
fn scaled(e: E, n: u64) -> E {
    if n == 1 {
        e
    } else {
        E::Bin(BinOp::Mul, false, Box::new(e), Box::new(E::Int(n as i64)))
    }
}

/// Integer binary operation with bpftrace's result type. A pointer plus or
/// minus an integer moves by whole pointees (C's arithmetic, as bpftrace
/// does it): `(int32 *)0x32 + 1` is `0x36`; the difference of two
/// pointers is in pointees too.
pub(crate) fn int_binop(op: BinOp, (a, ta): (E, Ty), (b, tb): (E, Ty)) -> (E, Ty) {
    if matches!(op, BinOp::Add | BinOp::Sub) {
        match (ta.is_ptr(), tb.is_ptr()) {
            (true, false) => {
                let n = ta.pointee_size();
                return (E::Bin(op, false, Box::new(a), Box::new(scaled(b, n))), ta);
            }
            (false, true) if op == BinOp::Add => {
                let n = tb.pointee_size();
                return (E::Bin(op, false, Box::new(scaled(a, n)), Box::new(b)), tb);
            }
            (true, true) if op == BinOp::Sub => {
                let n = ta.pointee_size() as i64;
                let d = E::Bin(BinOp::Sub, true, Box::new(a), Box::new(b));
                let e = if n == 1 {
                    d
                } else {
                    E::Bin(BinOp::Div, true, Box::new(d), Box::new(E::Int(n)))
                };
                return (e, Ty::I64);
            }
            _ => {}
        }
    }
    let (sa, sb) = (ta.signed(), tb.signed());
    let signed = match op {
        BinOp::Shl | BinOp::Shr => sa,
        _ => sa && sb,
    };
    let t = if op.is_comparison() {
        Ty::I64
    } else {
        Ty::Int { signed, bytes: 8 }
    };
    (E::Bin(op, signed, Box::new(a), Box::new(b)), t)
}

fn is_literal_nonneg(e: &ast::Expr) -> bool {
    matches!(e.kind, ExprKind::Int(_))
}

impl Fx<'_, '_> {
    /// Lowers an expression; errors give `(Int(0), None)`.
    pub fn expr(&mut self, e: &ast::Expr) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        match &e.kind {
            // Literals beyond int64 are uint64, as in bpftrace.
            ExprKind::Int(v) if *v > i64::MAX as u64 => (E::Int(*v as i64), Ty::U64),
            ExprKind::Int(v) => (E::Int(*v as i64), Ty::I64),
            ExprKind::Str(s) => {
                let a = self.cx.string(s);
                (E::Static(a), Ty::Str(s.len() as u32 + 1))
            }
            ExprKind::Ident(name) => {
                if let Some((en, v)) = self.cx.types.enumerators.get(name).cloned() {
                    return (E::Int(v), Ty::Enum(en));
                }
                if let Some(v) = errno(name) {
                    return (E::Int(v), Ty::I64);
                }
                self.builtin(name, e.span)
            }
            ExprKind::SizeofType { ty, ptr } => self.sizeof_type(ty, *ptr, e.span),
            ExprKind::Offsetof { ty, path } => self.offsetof(ty, path, e.span),
            ExprKind::Var(name) => match self.vars.get(name) {
                Some((t, VarLoc::Local(l))) => (E::Local(*l), t.clone()),
                Some((t, VarLoc::Slot(s))) => (E::Slot(*s), t.clone()),
                None => {
                    self.cx.err(
                        codes::UNDEFINED,
                        e.span,
                        format!("Undefined or undeclared variable used: {name}"),
                    );
                    bad
                }
            },
            ExprKind::Param(_) | ExprKind::ParamCount => {
                self.cx.err_note(
                    codes::UNSUPPORTED,
                    e.span,
                    "positional parameters are not supported",
                    "wprobe takes the command after `--`, not program arguments",
                );
                bad
            }
            ExprKind::Map(m) => self.map_get(m),
            ExprKind::Call {
                name,
                name_span,
                args,
            } => self.call(name, *name_span, args, e.span),
            ExprKind::Unop(op, x) => self.unop(*op, x, e.span),
            ExprKind::Binop(op, a, b) => self.binop(*op, a, b, e.span),
            ExprKind::Ternary(c, a, b) => {
                let (ce, ct) = self.expr(c);
                self.want_int(&ct, c.span, "ternary condition");
                let (ae, at) = self.expr(a);
                let (be, bt) = self.expr(b);
                if at == Ty::None || bt == Ty::None {
                    return bad;
                }
                match (at.is_int(), bt.is_int()) {
                    (true, true) => {
                        let signed = at.signed() && bt.signed();
                        (
                            E::Ternary(Box::new(ce), Box::new(ae), Box::new(be)),
                            Ty::Int { signed, bytes: 8 },
                        )
                    }
                    _ => match unify(&at, &bt) {
                        Some(t) if t.is_agg() => {
                            let size = t.size();
                            let slot = self.slot(size);
                            let ae = self.convert(ae, &at, &t);
                            let be = self.convert(be, &bt, &t);
                            let set = |e, from: &Ty| S::SetSlot {
                                slot,
                                e,
                                size,
                                src_size: if matches!(from, Ty::Tuple(_)) {
                                    size
                                } else {
                                    from.size().min(size)
                                },
                            };
                            let s = S::If(ce, vec![set(ae, &at)], vec![set(be, &bt)]);
                            (E::Seq(vec![s], Box::new(E::Slot(slot))), t)
                        }
                        _ => {
                            self.cx.err(
                                codes::TYPE,
                                e.span,
                                format!(
                                    "Ternary operator must return the same type: have '{}' and '{}'",
                                    at.name(),
                                    bt.name()
                                ),
                            );
                            bad
                        }
                    },
                }
            }
            ExprKind::Field { base, field, arrow } => {
                if let Some((a, c, bits)) = self.place(e) {
                    return self.read_c(a, &c, bits, e.span);
                }
                self.field(base, field, *arrow, e.span)
            }
            ExprKind::TupleIndex(base, n) => {
                let (be, bt) = self.expr(base);
                let Ty::Tuple(fields) = &bt else {
                    if bt != Ty::None {
                        self.cx.err(
                            codes::TYPE,
                            e.span,
                            format!(
                                "Can not access index '{n}' on expression of type '{}'",
                                bt.name()
                            ),
                        );
                    }
                    return bad;
                };
                let Some(t) = fields.get(*n as usize).cloned() else {
                    self.cx.err(
                        codes::TYPE,
                        e.span,
                        format!(
                            "Invalid tuple index: {n}. Found {} elements in tuple.",
                            fields.len()
                        ),
                    );
                    return bad;
                };
                let off: u32 = fields[..*n as usize].iter().map(Ty::size).sum();
                (
                    E::Field {
                        base: Box::new(be),
                        off,
                        ty: t.clone(),
                    },
                    t,
                )
            }
            ExprKind::Index(base, idx) => {
                if let Some((a, c, bits)) = self.place(e) {
                    return self.read_c(a, &c, bits, e.span);
                }
                self.index_value(base, idx, e.span)
            }
            ExprKind::Cast {
                ty,
                ptr,
                array,
                expr,
            } => {
                if let Some(n) = array {
                    if *ptr > 0 {
                        self.cx.err(
                            codes::UNSUPPORTED,
                            e.span,
                            format!("casts to arrays of pointers (`{ty}*[N]`) are not supported"),
                        );
                        return bad;
                    }
                    return self.cast_to_array(ty, *n, expr, e.span);
                }
                self.cast(ty, *ptr, expr, e.span)
            }
            ExprKind::Tuple(items) => {
                let mut parts = Vec::new();
                let mut tys = Vec::new();
                let mut off = 0;
                for it in items {
                    let (ie, it_t) = self.expr(it);
                    if it_t == Ty::None {
                        return bad;
                    }
                    tys.push(it_t.clone());
                    let sz = it_t.size();
                    parts.push(Part {
                        e: ie,
                        ty: it_t,
                        off,
                    });
                    off += sz;
                }
                let slot = self.slot(off);
                (E::Tuple { slot, parts }, Ty::Tuple(tys))
            }
            ExprKind::IncDec { target, inc, post } => self.incdec(target, *inc, *post, e.span),
        }
    }

    fn builtin(&mut self, name: &str, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let fact = |f| (E::Fact(f), Ty::U64);
        match name {
            "true" => (E::Int(1), Ty::I64),
            "false" => (E::Int(0), Ty::I64),
            "pid" => fact(Fact::Pid),
            "tid" => fact(Fact::Tid),
            "cpu" => fact(Fact::Cpu),
            "uid" => fact(Fact::Uid),
            "gid" => fact(Fact::Gid),
            "numaid" => fact(Fact::Numaid),
            "nsecs" => fact(Fact::Nsecs),
            "elapsed" => fact(Fact::Elapsed),
            "cpid" => {
                if !self.cx.opts.has_child {
                    self.cx.err(
                        codes::BUILTIN_CONTEXT,
                        span,
                        "cpid cannot be used without child command",
                    );
                    return bad;
                }
                fact(Fact::Cpid)
            }
            "comm" => {
                let slot = self.slot(16);
                (E::Comm(slot), Ty::Str(16))
            }
            "retval" => {
                if self.ctx != Ctx::Uretprobe {
                    self.cx.err(
                        codes::BUILTIN_CONTEXT,
                        span,
                        "The retval builtin can only be used with 'kretprobe' and 'uretprobe' and 'kfunc' probes",
                    );
                    return bad;
                }
                (E::Reg(reg::RAX), Ty::U64)
            }
            "func" | "probe" => {
                let (base, stride) = self.name_table(name == "func");
                (E::Table { base, stride }, Ty::Str(stride))
            }
            "ustack" => {
                let frames = self.cx.opts.ustack_frames;
                let mode = self.default_stack_mode();
                self.ustack(frames, mode, span)
            }
            "kstack" | "ctx" | "curtask" | "cgroup" => {
                self.cx.err_note(
                    codes::UNSUPPORTED,
                    span,
                    format!("the {name} builtin is not supported"),
                    "it describes the kernel; wprobe traces user space",
                );
                bad
            }
            "rand" => {
                // A 32-bit pseudo-random number: the monotonic clock mixed
                // (splitmix64's finalizer).
                let l = self.local();
                let mix = |e: E, sh: i64, mul: Option<i64>| {
                    let xored = E::Bin(
                        BinOp::BitXor,
                        false,
                        Box::new(e.clone()),
                        Box::new(E::Bin(BinOp::Shr, false, Box::new(e), Box::new(E::Int(sh)))),
                    );
                    match mul {
                        Some(m) => E::Bin(BinOp::Mul, false, Box::new(xored), Box::new(E::Int(m))),
                        None => xored,
                    }
                };
                let a = mix(E::Local(l), 33, Some(0xff51afd7ed558ccdu64 as i64));
                let set1 = S::SetLocal(l, a);
                let b = mix(E::Local(l), 33, Some(0xc4ceb9fe1a85ec53u64 as i64));
                let set2 = S::SetLocal(l, b);
                let c = mix(E::Local(l), 33, None);
                (
                    E::Seq(
                        vec![S::SetLocal(l, E::Fact(Fact::Nsecs)), set1, set2],
                        Box::new(E::Bin(
                            BinOp::BitAnd,
                            false,
                            Box::new(c),
                            Box::new(E::Int(0xffff_ffff)),
                        )),
                    ),
                    Ty::Int {
                        signed: false,
                        bytes: 4,
                    },
                )
            }
            // The hit's user id, named when it is printed (as bpftrace
            // resolves it in user space).
            "username" => (E::Fact(Fact::Uid), Ty::Username),
            "args" => self.args_record(span),
            _ => {
                if let Some(n) = name.strip_prefix("arg").and_then(|n| n.parse::<u32>().ok())
                    && n <= 9
                {
                    return self.arg(n, span);
                }
                if let Some(n) = name
                    .strip_prefix("sarg")
                    .and_then(|n| n.parse::<u32>().ok())
                    && n <= 9
                {
                    if self.ctx != Ctx::Uprobe {
                        self.cx.err(
                            codes::BUILTIN_CONTEXT,
                            span,
                            format!("The {name} builtin can only be used with 'kprobes' and 'uprobes' probes"),
                        );
                        return bad;
                    }
                    return self.stack_word(8 * (n + 1));
                }
                self.cx.err(
                    codes::UNDEFINED,
                    span,
                    format!("Unknown identifier: '{name}'"),
                );
                bad
            }
        }
    }

    fn arg(&mut self, n: u32, span: Span) -> (E, Ty) {
        if self.ctx == Ctx::Usdt {
            return self.usdt_arg(n, span);
        }
        if self.ctx != Ctx::Uprobe {
            self.cx.err(
                codes::BUILTIN_CONTEXT,
                span,
                format!("The arg{n} builtin can only be used with 'kprobes', 'uprobes' and 'usdt' probes"),
            );
            return (E::Int(0), Ty::None);
        }
        if n < 6 {
            (E::Reg(ARG_REGS[n as usize]), Ty::U64)
        } else {
            // Stack arguments: above the return address at the entry.
            self.stack_word(8 * (n - 5))
        }
    }

    /// `argN` of a USDT probe: read by the `usdt_arg` import with the
    /// site's spec, typed by the first site's note (bpftrace's rule).
    fn usdt_arg(&mut self, n: u32, span: Span) -> (E, Ty) {
        let mut ty = None;
        for c in self.concrete {
            if let crate::probes::Kind::Usdt { args, .. } = &c.kind {
                match args {
                    Err(e) => {
                        self.cx.err(
                            codes::UNSUPPORTED,
                            span,
                            format!("{}: cannot read its arguments: {e}", c.name),
                        );
                        return (E::Int(0), Ty::None);
                    }
                    Ok(a) if (n as usize) >= a.len() => {
                        self.cx.err(
                            codes::BUILTIN_CONTEXT,
                            span,
                            format!(
                                "{}: arg{n} does not exist: the probe has {} argument(s)",
                                c.name,
                                a.len()
                            ),
                        );
                        return (E::Int(0), Ty::None);
                    }
                    Ok(a) => {
                        ty.get_or_insert((a[n as usize].signed, a[n as usize].size));
                    }
                }
            }
        }
        let (signed, bytes) = ty.unwrap_or((false, 8));
        (E::UsdtArg(n), Ty::Int { signed, bytes })
    }

    /// The u64 at `rsp + off` of the hit thread.
    fn stack_word(&mut self, off: u32) -> (E, Ty) {
        let slot = self.slot(8);
        (
            E::Load {
                addr: Box::new(E::Bin(
                    BinOp::Add,
                    false,
                    Box::new(E::Reg(regs::RSP)),
                    Box::new(E::Int(off as i64)),
                )),
                bytes: 8,
                signed: false,
                slot,
            },
            Ty::U64,
        )
    }

    pub(crate) fn ustack(
        &mut self,
        frames: u32,
        mode: Option<hostabi::layout::StackMode>,
        span: Span,
    ) -> (E, Ty) {
        let t = Ty::Ustack(frames, mode);
        if self.ctx == Ctx::Special {
            // BEGIN, END and intervals run in no traced thread: an empty
            // stack (bpftrace shows its own process's frames there).
            let _ = span;
            let slot = self.slot(t.size());
            let set = S::SetSlot {
                slot,
                e: E::Slot(slot),
                size: t.size(),
                src_size: 0,
            };
            return (E::Seq(vec![set], Box::new(E::Slot(slot))), t);
        }
        let slot = self.slot(t.size());
        let entry_fixup = self.ctx == Ctx::Uprobe;
        (
            E::Ustack {
                slot,
                frames,
                entry_fixup,
            },
            t,
        )
    }

    /// `args` alone: every parameter of the probed function (from DWARF),
    /// as a structure value (`{ .n = 0x7ffd…, .c = 120 }`).
    fn args_record(&mut self, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if self.ctx != Ctx::Uprobe {
            self.cx.err(
                codes::BUILTIN_CONTEXT,
                span,
                "The args builtin can only be used with tracepoint/kfunc/uprobe probes (uprobes only, here: not uretprobes)",
            );
            return bad;
        }
        let Some(params) = self.concrete.first().and_then(|c| c.params.clone()) else {
            self.cx.err_note(
                codes::DWARF,
                span,
                "No debuginfo found for the probed function",
                "args needs DWARF for the function (build the binary with -g)",
            );
            return bad;
        };
        let mut parts = Vec::new();
        let mut fields = Vec::new();
        let mut off = 0;
        for (i, p) in params.iter().enumerate().take(6) {
            if p.by_ref {
                self.cx.err(
                    codes::UNSUPPORTED,
                    span,
                    format!(
                        "parameter {} is a C++ reference, which args as a whole does not hold \
                         (args.{} reads what it refers to)",
                        p.name, p.name
                    ),
                );
                return bad;
            }
            let (e, t) = match (&p.ctype, p.value) {
                (Some(crate::ctypes::CType::Ptr(c)), _) => {
                    (E::Reg(ARG_REGS[i]), Ty::Ptr(c.clone()))
                }
                (_, ParamValue::Int { signed, bytes }) => {
                    let t = Ty::Int { signed, bytes };
                    (coerce_int(E::Reg(ARG_REGS[i]), &Ty::U64, &t), t)
                }
                _ => {
                    self.cx.err(
                        codes::UNSUPPORTED,
                        span,
                        format!(
                            "parameter {} is not an integer or pointer, which args does not hold",
                            p.name
                        ),
                    );
                    return bad;
                }
            };
            let sz = t.size();
            fields.push((p.name.clone(), t.clone()));
            parts.push(Part { e, ty: t, off });
            off += sz;
        }
        let slot = self.slot(off.max(8));
        let c_size = fields
            .iter()
            .map(|(_, t)| super::types::c_size(t).max(8) as u32)
            .sum();
        (
            E::Tuple { slot, parts },
            Ty::Record(std::rc::Rc::new(crate::ir::RecordTy {
                name: "struct uprobe_args".into(),
                fields,
                c_size,
            })),
        )
    }

    /// The stack mode of the run (`BPFTRACE_STACK_MODE`, `config`).
    pub(crate) fn default_stack_mode(&self) -> Option<hostabi::layout::StackMode> {
        match self.cx.opts.stack_mode.as_str() {
            "perf" => Some(hostabi::layout::StackMode::Perf),
            "raw" => Some(hostabi::layout::StackMode::Raw),
            _ => None,
        }
    }

    /// The `probe` or `func` table of this handler: strings of one stride.
    fn name_table(&mut self, func: bool) -> (u32, u32) {
        if self.tables.is_none() {
            let mk = |cx: &mut super::Cx<'_>, names: Vec<&str>| {
                let stride = names.iter().map(|n| n.len() as u32 + 1).max().unwrap_or(1);
                let stride8 = stride.div_ceil(8) * 8;
                let mut bytes = Vec::new();
                for n in &names {
                    let mut b = n.as_bytes().to_vec();
                    b.resize(stride8 as usize, 0);
                    bytes.extend(b);
                }
                // Stored as one string whose bytes are the table.
                let base = cx.string(&bytes);
                (base, stride8)
            };
            let probes: Vec<&str> = self.concrete.iter().map(|c| c.name.as_str()).collect();
            let funcs: Vec<&str> = self.concrete.iter().map(|c| c.func.as_str()).collect();
            let p = mk(self.cx, probes);
            let f = mk(self.cx, funcs);
            self.tables = Some((p, f));
        }
        let (p, f) = self.tables.unwrap_or_default();
        if func { f } else { p }
    }

    fn unop(&mut self, op: UnOp, x: &ast::Expr, span: Span) -> (E, Ty) {
        if op == UnOp::Deref {
            let (addr, at) = self.expr(x);
            return match at {
                Ty::Ptr(p) => self.read_c(addr, &p, None, span),
                Ty::None => (E::Int(0), Ty::None),
                t => {
                    self.cx.err_note(
                        codes::TYPE,
                        span,
                        format!("Can not dereference type '{}'", t.name()),
                        "cast to a pointer first: *(uint64*)addr",
                    );
                    (E::Int(0), Ty::None)
                }
            };
        }
        let (e, t) = self.expr(x);
        if !t.is_int() {
            if t != Ty::None {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "The {} operator can not be used on expressions of type '{}'",
                        match op {
                            UnOp::Neg => "-",
                            UnOp::Not => "!",
                            _ => "~",
                        },
                        t.name()
                    ),
                );
            }
            return (E::Int(0), Ty::None);
        }
        let rt = match op {
            UnOp::Neg => Ty::I64,
            UnOp::Not => Ty::U64,
            _ => Ty::Int {
                signed: t.signed(),
                bytes: 8,
            },
        };
        (E::Un(op, Box::new(e)), rt)
    }

    fn binop(&mut self, op: BinOp, a: &ast::Expr, b: &ast::Expr, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let (ae, mut at) = self.expr(a);
        let (be, mut bt) = self.expr(b);
        if at == Ty::None || bt == Ty::None {
            return bad;
        }
        match (&at, &bt) {
            (Ty::Str(x), Ty::Str(y)) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                return (
                    E::StrEq {
                        ne: op == BinOp::Ne,
                        a: Box::new(ae),
                        b: Box::new(be),
                        n: (*x).min(*y),
                    },
                    Ty::U64,
                );
            }
            (x, y) if x.is_int() && y.is_int() => {}
            (Ty::Buf(x), Ty::Buf(y)) if matches!(op, BinOp::Eq | BinOp::Ne) => {
                // The length word first: buffers of different lengths differ.
                return (
                    E::MemEq {
                        ne: op == BinOp::Ne,
                        a: Box::new(ae),
                        b: Box::new(be),
                        n: Ty::Buf(*x.min(y)).size(),
                    },
                    Ty::U64,
                );
            }
            (x, y)
                if matches!(op, BinOp::Eq | BinOp::Ne)
                    && x == y
                    && matches!(x, Ty::Array(..) | Ty::Record(_) | Ty::Tuple(_)) =>
            {
                // Equal values of one type are equal bytes (a buffer's
                // unused bytes are zero-filled when it is read).
                return (
                    E::MemEq {
                        ne: op == BinOp::Ne,
                        a: Box::new(ae),
                        b: Box::new(be),
                        n: x.size(),
                    },
                    Ty::U64,
                );
            }
            _ => {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "Type mismatch for '{}': comparing '{}' with '{}'",
                        op.text(),
                        at.name(),
                        bt.name()
                    ),
                );
                return bad;
            }
        }
        // A non-negative literal takes the other operand's signedness.
        if is_literal_nonneg(a) && !bt.signed() {
            at = Ty::U64;
        }
        if is_literal_nonneg(b) && !at.signed() {
            bt = Ty::U64;
        }
        int_binop(op, (ae, at), (be, bt))
    }

    /// `(intN[M])x`: the bytes of the integer `x` as an array of `M`
    /// integers (bpftrace's casts to arrays, on a little-endian machine);
    /// `M` 0 (`(intN[])x`): as many as its bytes hold. The sizes must
    /// match.
    fn cast_to_array(&mut self, ty: &str, n: u32, x: &ast::Expr, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let Some(crate::ctypes::CType::Int { signed, bytes }) = self.resolve_type(ty, span) else {
            self.cx.err(
                codes::UNSUPPORTED,
                span,
                format!("casts to arrays of `{ty}` are not supported: only arrays of integers"),
            );
            return bad;
        };
        let (e, t) = self.expr(x);
        if t == Ty::None {
            return bad;
        }
        // `(int8[])x`: as many as the operand's bytes hold.
        let n = if n == 0 && t.is_int() {
            t.size().min(8) / bytes as u32
        } else {
            n
        };
        if !t.is_int() || n == 0 || n * bytes as u32 != t.size().min(8) {
            let dims = if n == 0 { String::new() } else { n.to_string() };
            self.cx.err(
                codes::TYPE,
                span,
                format!("Cannot cast from \"{}\" to \"{ty}[{dims}]\"", t.name()),
            );
            return bad;
        }
        let l = self.local();
        let elem = Ty::Int { signed, bytes };
        let parts = (0..n)
            .map(|i| Part {
                e: E::Cast {
                    e: Box::new(E::Bin(
                        crate::ast::BinOp::Shr,
                        false,
                        Box::new(E::Local(l)),
                        Box::new(E::Int(8 * (bytes as u32 * i) as i64)),
                    )),
                    signed,
                    bytes,
                },
                ty: elem.clone(),
                off: elem.size() * i,
            })
            .collect();
        let arr = Ty::Array(Box::new(elem), n);
        let slot = self.slot(arr.size());
        (
            E::Seq(vec![S::SetLocal(l, e)], Box::new(E::Tuple { slot, parts })),
            arr,
        )
    }

    fn cast(&mut self, ty: &str, ptr: u8, x: &ast::Expr, span: Span) -> (E, Ty) {
        // An array in the traced process cast to an integer of its size:
        // its bytes read as that integer.
        let before = self.cx.diags.list.len();
        if ptr == 0
            && let Some(crate::ctypes::CType::Int { signed, bytes }) = self.resolve_type_quiet(ty)
            && let Some((addr, c, _)) = self.place(x)
            && matches!(c, crate::ctypes::CType::Array(..))
        {
            if c.size() != bytes as u32 {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "Cannot cast from \"{}\" to \"{ty}\": the sizes differ ({} and {bytes} bytes)",
                        c.name(),
                        c.size()
                    ),
                );
                return (E::Int(0), Ty::None);
            }
            let slot = self.slot(8);
            return (
                E::Load {
                    addr: Box::new(addr),
                    bytes,
                    signed,
                    slot,
                },
                Ty::Int { signed, bytes },
            );
        }
        if self.cx.diags.list.len() > before {
            // The operand's errors are reported (by `place`).
            return (E::Int(0), Ty::None);
        }
        let (e, t) = self.expr(x);
        if t == Ty::None {
            return (E::Int(0), Ty::None);
        }
        // An integer array value (`pton(...)`, a map's) cast to an integer
        // of its size: its elements' bytes, in order, read as that integer.
        if ptr == 0
            && let Ty::Array(elem, n) = &t
            && let Ty::Int { bytes: eb, .. } = **elem
            && let Some(crate::ctypes::CType::Int { signed, bytes }) = self.resolve_type_quiet(ty)
        {
            if u32::from(eb) * n != u32::from(bytes) {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "Cannot cast from \"{}\" to \"{ty}\": the sizes differ ({} and {bytes} bytes)",
                        t.name(),
                        u32::from(eb) * n
                    ),
                );
                return (E::Int(0), Ty::None);
            }
            let size = t.size();
            let slot = self.slot(size);
            let packed = pack_elements(slot, elem, 0..*n);
            return (
                E::Seq(
                    vec![S::SetSlot {
                        slot,
                        e,
                        size,
                        src_size: size,
                    }],
                    Box::new(E::Cast {
                        e: Box::new(packed),
                        signed,
                        bytes,
                    }),
                ),
                Ty::Int { signed, bytes },
            );
        }
        if !t.is_int() {
            self.cx.err(
                codes::TYPE,
                span,
                format!("Cannot cast from \"{}\" to \"{ty}\"", t.name()),
            );
            return (E::Int(0), Ty::None);
        }
        let c = if ptr > 0 && (ty.starts_with("struct ") || ty.starts_with("union ")) {
            // A pointer to a record: its type is needed only where it is
            // used (it may never be, as in `(struct x *)0`).
            self.resolve_type_quiet(ty)
                .unwrap_or(crate::ctypes::CType::Named(ty.to_string()))
        } else {
            match self.resolve_type(ty, span) {
                Some(c) => c,
                None => return (E::Int(0), Ty::None),
            }
        };
        let mut c = c;
        if ptr > 0 {
            for _ in 1..ptr {
                c = crate::ctypes::CType::Ptr(Box::new(c));
            }
            return (e, Ty::Ptr(Box::new(c)));
        }
        match c {
            crate::ctypes::CType::Int { signed, bytes } => (
                E::Cast {
                    e: Box::new(e),
                    signed,
                    bytes,
                },
                Ty::Int { signed, bytes },
            ),
            crate::ctypes::CType::Enum(en) => (e, Ty::Enum(en)),
            other => {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "Cannot cast from \"{}\" to \"{}\": only integer, enum and pointer casts are valid",
                        t.name(),
                        other.name()
                    ),
                );
                (E::Int(0), Ty::None)
            }
        }
    }

    /// `v[i]` of a record or array value (not in the traced process): a
    /// constant index.
    fn index_value(&mut self, base: &ast::Expr, idx: &ast::Expr, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let (be, bt) = self.expr(base);
        let Ty::Array(elem, n) = &bt else {
            if bt != Ty::None {
                self.cx.err(
                    codes::TYPE,
                    span,
                    format!(
                        "The array index operator [] can not be used on expressions of type '{}'",
                        bt.name()
                    ),
                );
            }
            return bad;
        };
        let Some(i) = super::call::int_literal(idx) else {
            self.cx.err(
                codes::LITERAL,
                idx.span,
                "an array value (read from the process already) takes a constant index",
            );
            return bad;
        };
        if i < 0 || i >= *n as i64 {
            self.cx.err(
                codes::LITERAL,
                idx.span,
                format!("the index {i} is out of bounds for array of size {n}"),
            );
            return bad;
        }
        let t = (**elem).clone();
        (
            E::Field {
                base: Box::new(be),
                off: t.size() * i as u32,
                ty: t.clone(),
            },
            t,
        )
    }

    /// Parameter `field` when it is a C++ reference (`int &x`) in every
    /// probe of the handler and in a register: its register and the type
    /// it refers to.
    pub(crate) fn reference_param(&self, field: &str) -> Option<(usize, crate::ctypes::CType)> {
        if self.ctx != Ctx::Uprobe || self.concrete.is_empty() {
            return None;
        }
        let mut found = None;
        for c in self.concrete {
            let params = c.params.as_ref()?;
            let i = params.iter().position(|p| p.name == field)?;
            let p = &params[i];
            let Some(crate::ctypes::CType::Ptr(to)) = &p.ctype else {
                return None;
            };
            if !p.by_ref || i >= 6 {
                return None;
            }
            if found.as_ref().is_some_and(|(j, t)| (*j, t) != (i, &**to)) {
                return None;
            }
            found = Some((i, (**to).clone()));
        }
        found
    }

    fn field(&mut self, base: &ast::Expr, field: &str, _arrow: bool, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !matches!(&base.kind, ExprKind::Ident(n) if n == "args") {
            // A field of a record value.
            let (be, bt) = self.expr(base);
            let Ty::Record(r) = &bt else {
                if bt != Ty::None {
                    self.cx.err(
                        codes::TYPE,
                        span,
                        format!(
                            "Can not access field '{field}' on expression of type '{}'",
                            bt.name()
                        ),
                    );
                }
                return bad;
            };
            let mut off = 0;
            for (n, t) in &r.fields {
                if n == field {
                    return (
                        E::Field {
                            base: Box::new(be),
                            off,
                            ty: t.clone(),
                        },
                        t.clone(),
                    );
                }
                off += t.size();
            }
            self.cx.err(
                codes::TYPE,
                span,
                format!(
                    "Struct/union of type '{}' does not contain a field named '{field}'",
                    r.name
                ),
            );
            return bad;
        }
        if self.ctx != Ctx::Uprobe {
            self.cx.err(
                codes::BUILTIN_CONTEXT,
                span,
                "The args builtin can only be used with tracepoint/kfunc/uprobe probes (uprobes only, here: not uretprobes)",
            );
            return bad;
        }
        // A C++ reference: the object it refers to.
        if let Some((i, to)) = self.reference_param(field) {
            return self.read_c(E::Reg(ARG_REGS[i]), &to, None, span);
        }
        let mut found: Option<(usize, ParamValue)> = None;
        let mut ctype = None;
        for c in self.concrete {
            let Some(params) = &c.params else {
                self.cx.err_note(
                    codes::DWARF,
                    span,
                    format!("No debuginfo found for {}", c.name),
                    "args.NAME needs DWARF for the function (build the binary with -g)",
                );
                return bad;
            };
            let Some(i) = params.iter().position(|p| p.name == field) else {
                self.cx.err(
                    codes::DWARF,
                    span,
                    format!("Can't find function parameter {field}"),
                );
                return bad;
            };
            let v = params[i].value;
            if found.is_some_and(|f| f != (i, v)) {
                self.cx.err(
                    codes::DWARF,
                    span,
                    format!("Probe has attach points with mixed arguments: {field}"),
                );
                return bad;
            }
            found = Some((i, v));
            ctype = params[i].ctype.clone();
        }
        match found {
            Some((i, ParamValue::Int { .. }))
                if i < 6 && matches!(ctype, Some(crate::ctypes::CType::Ptr(_))) =>
            {
                let Some(crate::ctypes::CType::Ptr(p)) = ctype else {
                    return bad;
                };
                (E::Reg(ARG_REGS[i]), Ty::Ptr(p))
            }
            Some((i, ParamValue::Int { .. }))
                if i < 6 && matches!(ctype, Some(crate::ctypes::CType::Enum(_))) =>
            {
                let Some(crate::ctypes::CType::Enum(en)) = ctype else {
                    return bad;
                };
                let t = Ty::Int {
                    signed: true,
                    bytes: en.bytes,
                };
                (coerce_int(E::Reg(ARG_REGS[i]), &Ty::U64, &t), Ty::Enum(en))
            }
            Some((i, ParamValue::Int { signed, bytes })) if i < 6 => {
                let t = Ty::Int { signed, bytes };
                (coerce_int(E::Reg(ARG_REGS[i]), &Ty::U64, &t), t)
            }
            Some((_, ParamValue::Int { .. })) => {
                self.cx.err(
                    codes::UNSUPPORTED,
                    span,
                    format!("parameter {field} is passed on the stack (7th or later), which is not supported"),
                );
                bad
            }
            Some(_) => {
                self.cx.err(
                    codes::UNSUPPORTED,
                    span,
                    format!("parameter {field} is not an integer or pointer (floating point or structure by value), which is not supported"),
                );
                bad
            }
            None => bad,
        }
    }

    fn incdec(&mut self, target: &ast::Expr, inc: bool, post: bool, span: Span) -> (E, Ty) {
        let delta: i64 = if inc { 1 } else { -1 };
        match &target.kind {
            ExprKind::Var(name) => {
                let Some((t, VarLoc::Local(l))) = self.vars.get(name).cloned() else {
                    self.cx.err(
                        codes::UNDEFINED,
                        span,
                        format!("Undefined or undeclared variable used: {name}"),
                    );
                    return (E::Int(0), Ty::None);
                };
                let set = S::SetLocal(
                    l,
                    E::Bin(
                        BinOp::Add,
                        t.signed(),
                        Box::new(E::Local(l)),
                        Box::new(E::Int(delta * t.pointee_size() as i64)),
                    ),
                );
                if post {
                    let tmp = self.local();
                    (
                        E::Seq(
                            vec![S::SetLocal(tmp, E::Local(l)), set],
                            Box::new(E::Local(tmp)),
                        ),
                        t,
                    )
                } else {
                    (E::Seq(vec![set], Box::new(E::Local(l))), t)
                }
            }
            ExprKind::Map(m) => {
                // `@x++`: an integer map (bpftrace types it int64), or a
                // pointer map (moved by one pointee).
                let Some((map, key)) = self.map_target(m, Ty::I64, true) else {
                    return (E::Int(0), Ty::None);
                };
                let cur = self
                    .cx
                    .maps
                    .get(&m.name)
                    .map(|i| i.value.clone())
                    .unwrap_or(Ty::None);
                let vt = if cur.is_ptr() { cur.clone() } else { Ty::I64 };
                let delta = delta * cur.pointee_size() as i64;
                if self
                    .set_map_kind(m, MapKind::Assign, vt.clone(), None, span)
                    .is_none()
                {
                    return (E::Int(0), Ty::None);
                }
                let upd = S::MapUpdate {
                    map,
                    key: key.clone(),
                    op: Op::Add,
                    value: E::Int(delta),
                };
                let slot = self.slot(8);
                let vt2 = vt.clone();
                let get = move |k| E::MapGet {
                    map,
                    key: k,
                    slot,
                    ty: vt2.clone(),
                };
                if post {
                    let tmp = self.local();
                    (
                        E::Seq(
                            vec![S::SetLocal(tmp, get(key)), upd],
                            Box::new(E::Local(tmp)),
                        ),
                        vt,
                    )
                } else {
                    (E::Seq(vec![upd], Box::new(get(key))), vt)
                }
            }
            _ => (E::Int(0), Ty::None),
        }
    }

    /// Lowers the keys of `m` and records them as the map's key types.
    /// Returns the map index and the key, or `None` after an error.
    pub(crate) fn map_target(
        &mut self,
        m: &ast::MapRef,
        value: Ty,
        assigning: bool,
    ) -> Option<(u32, crate::ir::Key)> {
        let _ = value;
        let mut keys = Vec::new();
        for k in &m.keys {
            let (e, t) = self.expr(k);
            if t == Ty::None {
                return None;
            }
            keys.push((e, t));
        }
        self.map_key(m, keys, assigning)
    }

    /// The key of map `m` from lowered key expressions, recorded as (or
    /// checked against) the map's key types. As in bpftrace, `@m[a, b]` is
    /// the tuple `(a, b)`: one tuple-typed key (`@m[(a, b)]`, `@m[$t]`) is
    /// the same key; integers in keys are 8 bytes.
    pub(crate) fn map_key(
        &mut self,
        m: &ast::MapRef,
        keys: Vec<(E, Ty)>,
        assigning: bool,
    ) -> Option<(u32, crate::ir::Key)> {
        let flat = keys.len() == 1 && matches!(keys[0].1, Ty::Tuple(_));
        let key_tys: Vec<Ty> = match (&keys[..], flat) {
            ([(_, Ty::Tuple(fields))], true) => fields.iter().map(widen).collect(),
            _ => keys.iter().map(|(_, t)| widen(t)).collect(),
        };
        let info: &mut MapInfo = self.cx.map(&m.name);
        if assigning && info.first.is_none() {
            info.first = Some(m.span);
        }
        if info.used.is_none() {
            info.used = Some(m.span);
        }
        let merged = match &info.key {
            None => Some(key_tys.clone()),
            Some(old) if old.len() == key_tys.len() => old
                .iter()
                .zip(&key_tys)
                .map(|(a, b)| unify(a, b))
                .collect::<Option<Vec<_>>>(),
            Some(_) => None,
        };
        let index = info.index;
        let Some(merged) = merged else {
            let expects = info
                .key
                .as_ref()
                .map(|k| k.iter().map(Ty::name).collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            let got = key_tys.iter().map(Ty::name).collect::<Vec<_>>().join(", ");
            let name = m.name.clone();
            self.cx.err(
                codes::TYPE,
                m.span,
                format!("Argument mismatch for {name}: trying to access with arguments: [{got}] when map expects arguments: [{expects}]"),
            );
            return None;
        };
        if info.key.as_ref() != Some(&merged) {
            info.key = Some(merged.clone());
            self.cx.changed = true;
        }
        if flat {
            let (e, t) = keys.into_iter().next().expect("one key");
            let whole = Ty::Tuple(merged.clone());
            let size = whole.size();
            let e = self.convert(e, &t, &whole);
            let slot = self.slot(size.max(8));
            let parts = vec![Part {
                e,
                ty: whole,
                off: 0,
            }];
            return Some((index, crate::ir::Key { slot, parts, size }));
        }
        let mut parts_src = Vec::new();
        for ((e, t), kt) in keys.into_iter().zip(&merged) {
            parts_src.push((self.convert(e, &t, kt), t));
        }
        let key = self.key(&merged, parts_src);
        Some((index, key))
    }

    /// A read of `@m[keys]`.
    fn map_get(&mut self, m: &ast::MapRef) -> (E, Ty) {
        let Some((map, key)) = self.map_target(m, Ty::None, false) else {
            return (E::Int(0), Ty::None);
        };
        let info = self.cx.maps.get(&m.name).cloned();
        let Some(info) = info.filter(|i| i.kind.is_some()) else {
            // Reported once, at the end of the pass, if never assigned.
            return (E::Int(0), Ty::None);
        };
        let ty = match info.kind {
            Some(MapKind::Assign) => info.value.clone(),
            Some(MapKind::Count) => Ty::U64,
            Some(MapKind::Sum | MapKind::Min | MapKind::Max) => Ty::Int {
                signed: info.value.signed(),
                bytes: 8,
            },
            Some(MapKind::Avg) => {
                // (count, total): the average, rounded toward zero.
                let pair = Ty::Tuple(vec![Ty::U64, Ty::I64]);
                let slot = self.slot(pair.size());
                let get = E::MapGet {
                    map,
                    key,
                    slot,
                    ty: pair,
                };
                let count = E::Field {
                    base: Box::new(E::Slot(slot)),
                    off: 0,
                    ty: Ty::U64,
                };
                let total = || E::Field {
                    base: Box::new(E::Slot(slot)),
                    off: 8,
                    ty: Ty::I64,
                };
                let neg = E::Bin(BinOp::Lt, true, Box::new(total()), Box::new(E::Int(0)));
                let pos_avg =
                    |t: E| E::Bin(BinOp::Div, false, Box::new(t), Box::new(count.clone()));
                let e = E::Ternary(
                    Box::new(neg),
                    Box::new(E::Un(
                        UnOp::Neg,
                        Box::new(pos_avg(E::Un(UnOp::Neg, Box::new(total())))),
                    )),
                    Box::new(pos_avg(total())),
                );
                return (E::Seq(vec![S::Eval(get)], Box::new(e)), Ty::I64);
            }
            Some(k) => {
                self.cx.err(
                    codes::MAP_USE,
                    m.span,
                    format!(
                        "reading the value of a {}() map is not supported: print it",
                        k.name()
                    ),
                );
                return (E::Int(0), Ty::None);
            }
            None => return (E::Int(0), Ty::None),
        };
        if ty == Ty::None {
            return (E::Int(0), Ty::None);
        }
        let slot = self.slot(ty.size());
        (
            E::MapGet {
                map,
                key,
                slot,
                ty: ty.clone(),
            },
            ty,
        )
    }

    /// `@m[k] = v` and `@m[k] OP= v`.
    pub(crate) fn assign_map(
        &mut self,
        m: &ast::MapRef,
        op: Option<BinOp>,
        value: &ast::Expr,
        out: &mut Vec<S>,
    ) {
        if op.is_none()
            && let ExprKind::Call { name, args, .. } = &value.kind
            && super::call::is_aggregation(name)
        {
            self.aggregate(m, name, args, value.span, out);
            return;
        }
        let (mut e, mut t) = self.expr(value);
        if t == Ty::None {
            return;
        }
        let Some((map, key)) = self.map_target(m, t.clone(), true) else {
            return;
        };
        let info = self.cx.maps.get(&m.name).cloned();
        if let Some(k) = info.as_ref().and_then(|i| i.kind)
            && k != MapKind::Assign
        {
            self.cx.err(
                codes::TYPE,
                value.span,
                format!(
                    "Type mismatch for {}: trying to assign value of type '{}' when map already contains a value of type '{}'",
                    m.name,
                    t.name(),
                    k.name()
                ),
            );
            return;
        }
        if let Some(op) = op {
            if !t.is_int() {
                self.cx.err(
                    codes::TYPE,
                    value.span,
                    "compound assignment needs an integer",
                );
                return;
            }
            match op {
                BinOp::Add | BinOp::Sub => {
                    // A pointer map moves by whole pointees.
                    let cur = info.as_ref().map(|i| i.value.clone()).unwrap_or(Ty::None);
                    let vt = if cur.is_ptr() { cur.clone() } else { Ty::I64 };
                    self.set_map_kind(m, MapKind::Assign, vt, None, value.span);
                    let e = scaled(e, cur.pointee_size());
                    let v = if op == BinOp::Sub {
                        E::Un(UnOp::Neg, Box::new(e))
                    } else {
                        e
                    };
                    out.push(S::MapUpdate {
                        map,
                        key,
                        op: Op::Add,
                        value: v,
                    });
                    return;
                }
                _ => {
                    let slot = self.slot(8);
                    let cur = E::MapGet {
                        map,
                        key: key.clone(),
                        slot,
                        ty: Ty::I64,
                    };
                    let (ne, nt) = int_binop(op, (cur, Ty::I64), (e, t));
                    e = ne;
                    t = nt;
                }
            }
        }
        let Some(vt) = self.set_map_kind(m, MapKind::Assign, t.clone(), None, value.span) else {
            return;
        };
        if vt.is_int() {
            out.push(S::MapUpdate {
                map,
                key,
                op: Op::Set,
                value: coerce_int(e, &t, &vt),
            });
        } else {
            let size = vt.size();
            let src_size = if matches!(t, Ty::Tuple(_)) {
                size
            } else {
                t.size().min(size)
            };
            let e = self.convert(e, &t, &vt);
            let slot = self.slot(size);
            out.push(S::MapStore {
                map,
                key,
                slot,
                value: e,
                size,
                src_size,
            });
        }
    }

    /// Records (or checks) a map's kind and value type; returns the value type.
    pub(crate) fn set_map_kind(
        &mut self,
        m: &ast::MapRef,
        kind: MapKind,
        value: Ty,
        lhist: Option<(i64, i64, i64)>,
        span: Span,
    ) -> Option<Ty> {
        let info = self.cx.map(&m.name);
        match info.kind {
            Some(k) if k != kind => {
                let msg = format!(
                    "Type mismatch for {}: trying to assign value of type '{}' when map already contains a value of type '{}'",
                    m.name,
                    if kind == MapKind::Assign {
                        value.name()
                    } else {
                        format!("{}()", kind.name())
                    },
                    if k == MapKind::Assign {
                        info.value.name()
                    } else {
                        format!("{}()", k.name())
                    },
                );
                self.cx.err(codes::TYPE, span, msg);
                return None;
            }
            _ => {}
        }
        let merged = match unify(&info.value, &value) {
            Some(v) => v,
            None => {
                let msg = format!(
                    "Type mismatch for {}: trying to assign value of type '{}' when map already contains a value of type '{}'",
                    m.name,
                    value.name(),
                    info.value.name()
                );
                self.cx.err(codes::TYPE, span, msg);
                return None;
            }
        };
        if let (Some(old), Some(new)) = (info.lhist, lhist)
            && old != new
        {
            self.cx.err(
                codes::MAP_USE,
                span,
                format!("lhist() arguments of {} differ from an earlier use", m.name),
            );
            return None;
        }
        let info = self.cx.map(&m.name);
        let changed = info.kind != Some(kind)
            || info.value != merged
            || (lhist.is_some() && info.lhist != lhist);
        info.kind = Some(kind);
        info.value = merged.clone();
        if lhist.is_some() {
            info.lhist = lhist;
        }
        if changed {
            self.cx.changed = true;
        }
        Some(merged)
    }
}

/// Linux's errno names (bpftrace knows them as constants, for `strerror`).
fn errno(name: &str) -> Option<i64> {
    const NAMES: &[&str] = &[
        "EPERM",
        "ENOENT",
        "ESRCH",
        "EINTR",
        "EIO",
        "ENXIO",
        "E2BIG",
        "ENOEXEC",
        "EBADF",
        "ECHILD",
        "EAGAIN",
        "ENOMEM",
        "EACCES",
        "EFAULT",
        "ENOTBLK",
        "EBUSY",
        "EEXIST",
        "EXDEV",
        "ENODEV",
        "ENOTDIR",
        "EISDIR",
        "EINVAL",
        "ENFILE",
        "EMFILE",
        "ENOTTY",
        "ETXTBSY",
        "EFBIG",
        "ENOSPC",
        "ESPIPE",
        "EROFS",
        "EMLINK",
        "EPIPE",
        "EDOM",
        "ERANGE",
        "EDEADLK",
        "ENAMETOOLONG",
        "ENOLCK",
        "ENOSYS",
        "ENOTEMPTY",
        "ELOOP",
    ];
    NAMES.iter().position(|n| *n == name).map(|i| i as i64 + 1)
}

/// A key field's type: integers are 8 bytes, in tuples too.
fn widen(t: &Ty) -> Ty {
    match t {
        Ty::Int { signed, .. } => Ty::Int {
            signed: *signed,
            bytes: 8,
        },
        Ty::Tuple(f) => Ty::Tuple(f.iter().map(widen).collect()),
        other => other.clone(),
    }
}

/// Elements `range` of the integer array value in frame slot `slot`
/// (elements of `elem`, each in an 8-byte word) packed into one integer as
/// their C bytes would be: element `range.start` in the lowest bytes.
pub(crate) fn pack_elements(slot: u32, elem: &Ty, range: core::ops::Range<u32>) -> E {
    use crate::ast::BinOp;
    let eb = match elem {
        Ty::Int { bytes, .. } => u32::from(*bytes),
        _ => 8,
    };
    let mask = if eb >= 8 {
        -1i64
    } else {
        (1i64 << (8 * eb)) - 1
    };
    let mut acc = E::Int(0);
    for (k, i) in range.enumerate() {
        let el = E::Bin(
            BinOp::BitAnd,
            false,
            Box::new(E::Field {
                base: Box::new(E::Slot(slot)),
                off: elem.size() * i,
                ty: elem.clone(),
            }),
            Box::new(E::Int(mask)),
        );
        let shifted = E::Bin(
            BinOp::Shl,
            false,
            Box::new(el),
            Box::new(E::Int(8 * eb as i64 * k as i64)),
        );
        acc = E::Bin(BinOp::BitOr, false, Box::new(acc), Box::new(shifted));
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::reg;

    #[test]
    fn register_ids_match_hostabi() {
        for (name, id) in [
            ("rax", reg::RAX),
            ("rcx", reg::RCX),
            ("rdx", reg::RDX),
            ("rdi", reg::RDI),
            ("rsi", reg::RSI),
            ("rbp", reg::RBP),
            ("r8", reg::R8),
            ("r9", reg::R9),
        ] {
            assert_eq!(
                hostabi::regs::by_name(name).map(|r| r.id),
                Some(id),
                "{name}"
            );
        }
    }
}
