//! Maps: keys (`@m[a, b]` is the tuple `(a, b)`), reads, assignments
//! (`@m[k] = v`, `@m[k] OP= v`) and the kind and value type each map takes
//! from its uses.

use super::{int_binop, scaled};
use crate::ast::{self, BinOp, ExprKind, UnOp};
use crate::check::{Fx, MapInfo, coerce_int, unify};
use crate::diag::codes;
use crate::ir::{E, Part, S, Ty};
use hostabi::maps::{MapKind, Op};
use rpn2wasm::Span;

impl Fx<'_, '_> {
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
    pub(super) fn map_get(&mut self, m: &ast::MapRef) -> (E, Ty) {
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
            && crate::check::call::is_aggregation(name)
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
            let src_size = t.stored_size(size);
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
