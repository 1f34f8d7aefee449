//! Map maintenance calls: `len(@m)`, `has_key`, `clear`, `zero`, `delete`.

use crate::ast::{self, ExprKind};
use crate::check::Fx;
use crate::diag::codes;
use crate::ir::{E, S, Ty};
use hostabi::maps::MapKind;
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `len(@m)` (the map's entry count) or `len(ustack)` (the frame count).
    pub(super) fn call_len(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
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

    /// `has_key(@m, k)`: whether the map has the key.
    pub(super) fn call_has_key(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
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

    /// `clear(@m)` and `zero(@m)` as statements (`name` says which).
    pub(super) fn stmt_reset(&mut self, name: &str, args: &[ast::Expr], span: Span) -> Option<S> {
        if !self.nargs(name, args, 1, 1, span) {
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
        let scalar_count =
            info.kind == Some(MapKind::Count) && info.key.as_ref().is_some_and(|k| k.is_empty());
        Some(S::MapReset {
            map: index,
            zero: name == "zero" || scalar_count,
        })
    }

    /// `delete(@m[k])` and `delete(@m, k)` as statements.
    pub(super) fn stmt_delete(&mut self, args: &[ast::Expr], span: Span) -> Option<S> {
        // delete(@m[k]), or delete(@m, k) (bpftrace 0.21 on).
        if !self.nargs("delete", args, 1, 2, span) {
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
        if info.kind == Some(MapKind::Count) && info.key.as_ref().is_some_and(|k| k.is_empty()) {
            return Some(S::MapReset { map, zero: true });
        }
        Some(S::MapDelete { map, key })
    }
}
