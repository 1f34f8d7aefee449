//! C types in the checker: the program's definitions built into a type
//! table, names resolved (base names, the table, then the probed binaries'
//! DWARF), and the traced process's memory read as values: a *place* is an
//! address with a C type (`*p`, `p->f`, `place.f`, `place[i]`, `p[i]`), and
//! reading it gives an integer, a pointer, a string (`char` arrays), or a
//! record or array value laid out as a tuple.

use super::{Fx, VarLoc};
use crate::ast::{self, BinOp, CMember, ExprKind, TypeSpec, UnOp};
use crate::ctypes::{self, Bits, CType, EnumDef, Types};

/// A place in the traced process: its address, its C type, its bits.
pub(crate) type Place = (E, CType, Bits);

/// The bits of a place whose error was reported already (reading it
/// gives no value and no second message).
const REPORTED: Bits = Some((u32::MAX, 0));
use crate::diag::{Sink, codes};
use crate::ir::{E, Part, RecordTy, S, Ty};
use rpn2wasm::Span;
use std::rc::Rc;

/// Largest C value read into a handler's frame at once (bytes of C data).
pub const MAX_VALUE_BYTES: u32 = 64 * 1024;

/// The type table of a program's C definitions.
pub fn build(prog: &ast::Program, diags: &mut Sink) -> Types {
    let mut t = Types::default();
    for d in &prog.cdefs {
        let _ = define(&mut t, &d.spec, d.span, diags);
    }
    t
}

/// The C type of a spec, defining what it defines.
fn define(t: &mut Types, spec: &TypeSpec, span: Span, diags: &mut Sink) -> Option<CType> {
    match spec {
        TypeSpec::Named(n) => match resolve_in(t, n) {
            Some(c) => Some(c),
            None => {
                diags.error(codes::UNDEFINED, span, format!("Unknown type: {n}"));
                None
            }
        },
        TypeSpec::Record {
            union,
            name,
            members,
        } => {
            let mut list = Vec::new();
            for m in members {
                let ty = member_type(t, m, diags)?;
                list.push((m.name.clone(), ty, m.bits));
            }
            let kw = if *union { "union" } else { "struct" };
            let full = match name {
                Some(n) => format!("{kw} {n}"),
                None => kw.to_string(),
            };
            let r = ctypes::layout(full.clone(), *union, list);
            let c = CType::Record(Rc::new(r));
            if name.is_some() {
                t.named.insert(full, c.clone());
            }
            Some(c)
        }
        TypeSpec::Enum { name, values } => {
            let mut next = 0i64;
            let mut vals = Vec::new();
            for (n, v) in values {
                let v = v.unwrap_or(next);
                vals.push((n.clone(), v));
                next = v.wrapping_add(1);
            }
            let wide = vals.iter().any(|(_, v)| i32::try_from(*v).is_err());
            let e = Rc::new(EnumDef {
                name: match name {
                    Some(n) => format!("enum {n}"),
                    None => "enum".into(),
                },
                values: vals,
                bytes: if wide { 8 } else { 4 },
            });
            t.add_enum(e.clone());
            Some(CType::Enum(e))
        }
    }
}

fn member_type(t: &mut Types, m: &CMember, diags: &mut Sink) -> Option<CType> {
    // A pointer to a record not defined yet (the one being defined, or
    // one defined later): resolved where it is used.
    let mut c = match &m.ty {
        TypeSpec::Named(n)
            if m.ptr > 0
                && resolve_in(t, n).is_none()
                && (n.starts_with("struct ") || n.starts_with("union ")) =>
        {
            CType::Named(n.clone())
        }
        spec => define(t, spec, m.span, diags)?,
    };
    for _ in 0..m.ptr {
        c = CType::Ptr(Box::new(c));
    }
    for d in m.dims.iter().rev() {
        c = CType::Array(Box::new(c), *d);
    }
    Some(c)
}

/// A name in the table or a base type.
fn resolve_in(t: &Types, name: &str) -> Option<CType> {
    ctypes::base_type(name).or_else(|| t.named.get(name).cloned())
}

/// Whether `c` is a C `char` array element (read as a string).
fn is_char(c: &CType) -> bool {
    matches!(
        c,
        CType::Int {
            signed: true,
            bytes: 1
        }
    )
}

/// The value type reading a `c` gives.
pub fn value_ty(c: &CType) -> Option<Ty> {
    Some(match c {
        CType::Int { signed, bytes } => Ty::Int {
            signed: *signed,
            bytes: (*bytes).min(8),
        },
        CType::Enum(e) => Ty::Enum(e.clone()),
        CType::Ptr(t) => Ty::Ptr(t.clone()),
        CType::Array(t, n) if is_char(t) => Ty::Str(n.saturating_add(1)),
        CType::Array(t, n) => Ty::Array(Box::new(value_ty(t)?), *n),
        CType::Record(r) => {
            let mut fields = Vec::new();
            flatten(r, &mut fields)?;
            Ty::Record(Rc::new(RecordTy {
                name: r.name.clone(),
                fields,
                c_size: r.size,
            }))
        }
        // Floating point is not read: it prints as an empty string (as
        // bpftrace's JSON shows it).
        CType::Float(_) => Ty::Str(1),
        CType::Void | CType::Named(_) => return None,
    })
}

fn flatten(r: &ctypes::Record, out: &mut Vec<(String, Ty)>) -> Option<()> {
    for f in &r.fields {
        if f.name.is_empty()
            && let CType::Record(inner) = &f.ty
        {
            flatten(inner, out)?;
            continue;
        }
        out.push((f.name.clone(), value_ty(&f.ty)?));
    }
    Some(())
}

/// `sizeof` of a value type, as C lays it out (tuples as structs).
pub fn c_size(t: &Ty) -> u64 {
    match t {
        Ty::Int { bytes, .. } => *bytes as u64,
        Ty::Ptr(_) | Ty::Usym => 8,
        Ty::Strftime(_) => 16,
        Ty::Username => 8,
        Ty::Inet => 24,
        Ty::Enum(e) => e.bytes as u64,
        Ty::Str(n) | Ty::Buf(n) => *n as u64,
        Ty::Record(r) => r.c_size as u64,
        Ty::Array(t, n) => c_size(t) * *n as u64,
        Ty::Ustack(n, _) => 8 * *n as u64,
        Ty::Tuple(f) => {
            let members = f
                .iter()
                .map(|t| {
                    let a = c_align(t);
                    let size = c_size(t);
                    (
                        String::new(),
                        CType::Array(
                            Box::new(CType::Int {
                                signed: false,
                                bytes: a as u8,
                            }),
                            (size / a) as u32,
                        ),
                        None,
                    )
                })
                .collect();
            ctypes::layout(String::new(), false, members).size as u64
        }
        Ty::None => 0,
    }
}

fn c_align(t: &Ty) -> u64 {
    match t {
        Ty::Int { bytes, .. } => *bytes as u64,
        Ty::Enum(e) => e.bytes as u64,
        Ty::Str(_) | Ty::Buf(_) => 1,
        Ty::Array(t, _) => c_align(t),
        Ty::Tuple(f) => f.iter().map(c_align).max().unwrap_or(1),
        Ty::Record(r) => r.fields.iter().map(|(_, t)| c_align(t)).max().unwrap_or(1),
        _ => 8,
    }
    .max(1)
}

impl Fx<'_, '_> {
    /// The C type a name denotes: a base type, the program's definitions,
    /// then the DWARF of the probed binaries.
    pub(crate) fn resolve_type(&mut self, name: &str, span: Span) -> Option<CType> {
        if let Some(c) = self.resolve_type_quiet(name) {
            return Some(c);
        }
        self.cx.err(
            codes::UNDEFINED,
            span,
            format!("Unknown type: {name} (not defined in the program, nor in the DWARF of the probed binaries)"),
        );
        None
    }

    /// [`Fx::resolve_type`] without an error when the name is unknown.
    pub(crate) fn resolve_type_quiet(&mut self, name: &str) -> Option<CType> {
        if let Some(c) = resolve_in(&self.cx.types, name) {
            return Some(c);
        }
        for b in self.cx.dwarf_files.clone() {
            if let Some(c) = crate::dwarf::Debug::load(b.bytes()).and_then(|d| d.find_type(name)) {
                if let CType::Enum(e) = &c {
                    self.cx.types.add_enum(e.clone());
                }
                self.cx.types.named.insert(name.to_string(), c.clone());
                return Some(c);
            }
        }
        None
    }

    /// Reads a value of C type `c` at `addr` in the traced process.
    pub(crate) fn read_c(&mut self, addr: E, c: &CType, bits: Bits, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if bits == REPORTED {
            return bad;
        }
        if let CType::Named(n) = c {
            return match self.resolve_type(n, span) {
                Some(r) if !matches!(r, CType::Named(_)) => self.read_c(addr, &r, bits, span),
                _ => bad,
            };
        }
        if let CType::Ptr(inner) = c
            && let CType::Named(n) = &**inner
        {
            let Some(r) = self.resolve_type(n, span) else {
                return bad;
            };
            return self.read_c(addr, &CType::Ptr(Box::new(r)), bits, span);
        }
        if c.size() > MAX_VALUE_BYTES {
            self.cx.err(
                codes::LIMIT,
                span,
                format!(
                    "{} is {} bytes, more than the {MAX_VALUE_BYTES} a value may have",
                    c.name(),
                    c.size()
                ),
            );
            return bad;
        }
        match c {
            CType::Int { signed, bytes } => {
                if let Some((shift, width)) = bits {
                    return self.read_bits(addr, *signed, shift, width);
                }
                // A 128-bit integer is read as its low 64 bits.
                let bytes = (*bytes).min(8);
                let t = Ty::Int {
                    signed: *signed,
                    bytes,
                };
                let slot = self.slot(8);
                (
                    E::Load {
                        addr: Box::new(addr),
                        bytes,
                        signed: *signed,
                        slot,
                    },
                    t,
                )
            }
            CType::Enum(e) => {
                let slot = self.slot(8);
                (
                    E::Load {
                        addr: Box::new(addr),
                        bytes: e.bytes,
                        signed: true,
                        slot,
                    },
                    Ty::Enum(e.clone()),
                )
            }
            CType::Ptr(t) => {
                let slot = self.slot(8);
                (
                    E::Load {
                        addr: Box::new(addr),
                        bytes: 8,
                        signed: false,
                        slot,
                    },
                    Ty::Ptr(t.clone()),
                )
            }
            CType::Array(t, n) if is_char(t) => {
                let size = n.saturating_add(1);
                let slot = self.slot(size);
                (
                    E::ReadStr {
                        addr: Box::new(addr),
                        max: Box::new(E::Int(size as i64)),
                        slot,
                        size,
                    },
                    Ty::Str(size),
                )
            }
            CType::Float(_) => {
                let slot = self.slot(8);
                (
                    E::Seq(
                        vec![S::SetSlot {
                            slot,
                            e: E::Static(self.cx.string(b"")),
                            size: 8,
                            src_size: 1,
                        }],
                        Box::new(E::Slot(slot)),
                    ),
                    Ty::Str(1),
                )
            }
            CType::Void | CType::Named(_) => {
                self.cx
                    .err(codes::TYPE, span, "Can not read a value of type void");
                bad
            }
            CType::Array(..) | CType::Record(_) => self.read_aggregate(addr, c, span),
        }
    }

    /// Reads an array or a record of the traced process as a value: each
    /// element or member read in turn into a tuple.
    fn read_aggregate(&mut self, addr: E, c: &CType, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let Some(vt) = value_ty(c) else {
            self.cx
                .err(codes::TYPE, span, format!("Can not read {}", c.name()));
            return bad;
        };
        let base = self.local();
        let mut parts = Vec::new();
        let mut off = 0;
        let mut members: Vec<(u32, CType, Bits)> = Vec::new();
        match c {
            CType::Array(t, n) => {
                for i in 0..*n {
                    members.push((i * t.size(), (**t).clone(), None));
                }
            }
            CType::Record(r) => collect_members(r, 0, &mut members),
            _ => {}
        }
        for (coff, ct, b) in members {
            let a = E::Bin(
                BinOp::Add,
                false,
                Box::new(E::Local(base)),
                Box::new(E::Int(coff as i64)),
            );
            let (e, t) = self.read_c(a, &ct, b, span);
            if t == Ty::None {
                return bad;
            }
            let sz = t.size();
            parts.push(Part { e, ty: t, off });
            off += sz;
        }
        let slot = self.slot(off.max(8));
        (
            E::Seq(
                vec![S::SetLocal(base, addr)],
                Box::new(E::Tuple { slot, parts }),
            ),
            vt,
        )
    }

    /// A bitfield: `width` bits from bit `shift` of the bytes at `addr`.
    fn read_bits(&mut self, addr: E, signed: bool, shift: u32, width: u32) -> (E, Ty) {
        let need = (shift + width).div_ceil(8);
        let bytes = match need {
            0 | 1 => 1,
            2 => 2,
            3 | 4 => 4,
            _ => 8,
        };
        let slot = self.slot(8);
        let raw = E::Load {
            addr: Box::new(addr),
            bytes,
            signed: false,
            slot,
        };
        let shifted = E::Bin(
            BinOp::Shr,
            false,
            Box::new(raw),
            Box::new(E::Int(shift as i64)),
        );
        let masked = if width >= 64 {
            shifted
        } else {
            E::Bin(
                BinOp::BitAnd,
                false,
                Box::new(shifted),
                Box::new(E::Int(((1u64 << width) - 1) as i64)),
            )
        };
        let e = if signed && width < 64 {
            // Sign-extend the field: shift it to the top and back.
            let up = E::Bin(
                BinOp::Shl,
                false,
                Box::new(masked),
                Box::new(E::Int((64 - width) as i64)),
            );
            E::Bin(
                BinOp::Shr,
                true,
                Box::new(up),
                Box::new(E::Int((64 - width) as i64)),
            )
        } else {
            masked
        };
        (e, Ty::Int { signed, bytes: 8 })
    }

    /// The address and C type an expression denotes in the traced
    /// process's memory, if it denotes one (`None`: it is a plain value).
    pub(crate) fn place(&mut self, e: &ast::Expr) -> Option<Place> {
        match &e.kind {
            ExprKind::Unop(UnOp::Deref, x) => {
                let (a, t) = self.expr(x);
                match t {
                    Ty::Ptr(c) => Some((a, *c, None)),
                    _ => None,
                }
            }
            ExprKind::Field {
                base,
                field,
                arrow: true,
            } => {
                if matches!(&base.kind, ExprKind::Ident(n) if n == "args") {
                    return None;
                }
                let (a, t) = self.expr(base);
                let Ty::Ptr(c) = t else {
                    if t != Ty::None {
                        self.cx.err(
                            codes::TYPE,
                            e.span,
                            format!("Can not access field '{field}' on type '{}': `->` needs a pointer to a struct", t.name()),
                        );
                    }
                    return Some((E::Int(0), CType::Void, REPORTED));
                };
                self.member(a, &c, field, e.span)
            }
            ExprKind::Field {
                base,
                field,
                arrow: false,
            } => {
                if matches!(&base.kind, ExprKind::Ident(n) if n == "args") {
                    // A C++ reference parameter is the object it refers to.
                    let (i, to) = self.reference_param(field)?;
                    return Some((E::Reg(super::expr::ARG_REGS[i]), to, None));
                }
                let (a, c, _) = self.place(base)?;
                self.member(a, &c, field, e.span)
            }
            ExprKind::Index(base, idx) => {
                let (a, elem) = match self.place(base) {
                    Some((a, CType::Array(t, n), _)) => {
                        if let Some(i) = super::call::int_literal(idx)
                            && n > 0
                            && (i < 0 || i >= n as i64)
                        {
                            self.cx.err(
                                codes::LITERAL,
                                e.span,
                                format!("the index {i} is out of bounds for array of size {n}"),
                            );
                        }
                        (a, *t)
                    }
                    Some((a, CType::Ptr(t), _)) => {
                        // A pointer field indexed: its value is the base.
                        let slot = self.slot(8);
                        (
                            E::Load {
                                addr: Box::new(a),
                                bytes: 8,
                                signed: false,
                                slot,
                            },
                            *t,
                        )
                    }
                    Some(_) => return None,
                    None => {
                        if !self.is_pointer_value(base) {
                            return None;
                        }
                        let (p, t) = self.expr(base);
                        let Ty::Ptr(c) = t else { return None };
                        (p, *c)
                    }
                };
                let (i, it) = self.expr(idx);
                self.want_int(&it, idx.span, "an array index");
                let off = E::Bin(
                    BinOp::Mul,
                    false,
                    Box::new(i),
                    Box::new(E::Int(elem.size().max(1) as i64)),
                );
                Some((
                    E::Bin(BinOp::Add, false, Box::new(a), Box::new(off)),
                    elem,
                    None,
                ))
            }
            _ => None,
        }
    }

    /// Whether `e` is an expression whose value is a pointer (checked
    /// without keeping its IR: variables and casts only).
    fn is_pointer_value(&mut self, e: &ast::Expr) -> bool {
        match &e.kind {
            ExprKind::Var(n) => matches!(self.vars.get(n), Some((Ty::Ptr(_), VarLoc::Local(_)))),
            ExprKind::Cast { ptr, .. } => *ptr > 0,
            ExprKind::Field { .. } | ExprKind::Binop(..) | ExprKind::Map(_) => true,
            _ => false,
        }
    }

    /// Field `name` of the record `c` at `a`.
    fn member(&mut self, a: E, c: &CType, name: &str, span: Span) -> Option<Place> {
        if c == &CType::Void {
            return Some((E::Int(0), CType::Void, REPORTED));
        }
        let c = &match c {
            CType::Named(n) => match self.resolve_type(n, span) {
                Some(r) => r,
                None => return Some((E::Int(0), CType::Void, REPORTED)),
            },
            c => c.clone(),
        };
        let by_ref =
            matches!(c, CType::Record(r) if r.fields.iter().any(|f| f.name == name && f.by_ref));
        match c.field(name) {
            // A C++ reference member: the object it refers to.
            Some((CType::Ptr(to), off, _)) if by_ref => {
                let slot = self.slot(8);
                Some((
                    E::Load {
                        addr: Box::new(E::Bin(
                            BinOp::Add,
                            false,
                            Box::new(a),
                            Box::new(E::Int(off as i64)),
                        )),
                        bytes: 8,
                        signed: false,
                        slot,
                    },
                    *to,
                    None,
                ))
            }
            Some((t, off, bits)) => Some((
                E::Bin(BinOp::Add, false, Box::new(a), Box::new(E::Int(off as i64))),
                t,
                bits,
            )),
            None => {
                self.cx.err(
                    codes::TYPE,
                    span,
                    if matches!(c, CType::Record(_)) {
                        format!(
                            "Struct/union of type '{}' does not contain a field named '{name}'",
                            c.name()
                        )
                    } else {
                        format!("Can not access field '{name}' on type '{}'", c.name())
                    },
                );
                Some((E::Int(0), CType::Void, REPORTED))
            }
        }
    }

    /// `sizeof(TYPE)`.
    pub(crate) fn sizeof_type(&mut self, ty: &str, ptr: u8, span: Span) -> (E, Ty) {
        if ptr > 0 {
            return (E::Int(8), Ty::U64);
        }
        match self.resolve_type(ty, span) {
            Some(c) => (E::Int(c.size() as i64), Ty::U64),
            None => (E::Int(0), Ty::None),
        }
    }

    /// `offsetof(TYPE, a.b)`.
    pub(crate) fn offsetof(&mut self, ty: &str, path: &[String], span: Span) -> (E, Ty) {
        let Some(mut c) = self.resolve_type(ty, span) else {
            return (E::Int(0), Ty::None);
        };
        let mut off = 0u64;
        for f in path {
            match c.field(f) {
                Some((t, o, _)) => {
                    off += o as u64;
                    c = t;
                }
                None => {
                    self.cx.err(
                        codes::TYPE,
                        span,
                        format!("'{}' has no field named '{f}'", c.name()),
                    );
                    return (E::Int(0), Ty::None);
                }
            }
        }
        (E::Int(off as i64), Ty::U64)
    }
}

/// The fields of a record with their offsets (anonymous members' fields
/// flattened in), as [`value_ty`] lays them out.
fn collect_members(r: &ctypes::Record, base: u32, out: &mut Vec<(u32, CType, Bits)>) {
    for f in &r.fields {
        if f.name.is_empty()
            && let CType::Record(inner) = &f.ty
        {
            collect_members(inner, base + f.offset, out);
            continue;
        }
        out.push((base + f.offset, f.ty.clone(), f.bits));
    }
}
