//! Casts: to integers, pointers and structures, and of integers to arrays
//! (`(int8[4])x`).

use super::pack_elements;
use crate::ast;
use crate::check::Fx;
use crate::diag::codes;
use crate::ir::{E, Part, S, Ty};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `(intN[M])x`: the bytes of the integer `x` as an array of `M`
    /// integers (bpftrace's casts to arrays, on a little-endian machine);
    /// `M` 0 (`(intN[])x`): as many as its bytes hold. The sizes must
    /// match.
    pub(super) fn cast_to_array(&mut self, ty: &str, n: u32, x: &ast::Expr, span: Span) -> (E, Ty) {
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

    pub(super) fn cast(&mut self, ty: &str, ptr: u8, x: &ast::Expr, span: Span) -> (E, Ty) {
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
}
