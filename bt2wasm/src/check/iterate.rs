//! Iterating maps from a handler: `for ($kv : @m) { ... }` and `len(@m)`,
//! through the host's `map_entry` cursor (a position in the map's entry
//! arena: deleting the entry at hand moves no other, so a loop may delete
//! as it goes).

use super::{Fx, VarLoc};
use crate::ast::{self, BinOp};
use crate::diag::codes;
use crate::ir::{E, Part, S, Ty};
use hostabi::maps::MapKind;
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// The key and value types of `m` as a loop sees them, with the bytes
    /// each takes in the store; `None` (reported in the last pass) when the
    /// map cannot be iterated.
    fn entry_types(&mut self, m: &ast::MapRef) -> Option<(Vec<Ty>, Ty, u32)> {
        let info = self.cx.map(&m.name);
        info.used.get_or_insert(m.span);
        let (kind, key, value) = (info.kind, info.key.clone(), info.value.clone());
        let kind = kind?;
        let key = key?;
        let (vt, vsize) = match kind {
            MapKind::Assign => (value.clone(), value.size()),
            MapKind::Count => (Ty::U64, 8),
            MapKind::Sum | MapKind::Min | MapKind::Max => (
                Ty::Int {
                    signed: value.signed(),
                    bytes: 8,
                },
                8,
            ),
            k => {
                self.cx.err(
                    codes::UNSUPPORTED,
                    m.span,
                    format!("iterating a {}() map is not supported", k.name()),
                );
                return None;
            }
        };
        if key.is_empty() {
            self.cx.err(
                codes::MAP_USE,
                m.span,
                format!(
                    "{} has no keys: a for loop goes over a map with keys",
                    m.name
                ),
            );
            return None;
        }
        Some((key, vt, vsize))
    }

    /// `for ($var : @m) { body }`.
    pub(crate) fn for_map(
        &mut self,
        var: &str,
        m: &ast::MapRef,
        body: &[ast::Stmt],
        out: &mut Vec<S>,
    ) {
        let Some((key_tys, vt, vsize)) = self.entry_types(m) else {
            return;
        };
        let map = self.cx.map(&m.name).index;
        let ksize: u32 = key_tys.iter().map(Ty::size).sum();
        let kt = if key_tys.len() == 1 {
            key_tys[0].clone()
        } else {
            Ty::Tuple(key_tys)
        };
        let (kslot, vslot) = (self.slot(ksize.max(8)), self.slot(vsize.max(8)));
        let (cur, r) = (self.local(), self.local());
        let kv = Ty::Tuple(vec![kt.clone(), vt.clone()]);
        let kv_slot = self.slot(kv.size());
        let read = |slot: u32, t: &Ty| {
            if t.is_agg() {
                E::Slot(slot)
            } else {
                E::Field {
                    base: Box::new(E::Slot(slot)),
                    off: 0,
                    ty: t.clone(),
                }
            }
        };
        let fill = S::Eval(E::Tuple {
            slot: kv_slot,
            parts: vec![
                Part {
                    e: read(kslot, &kt),
                    ty: kt.clone(),
                    off: 0,
                },
                Part {
                    e: read(vslot, &vt),
                    ty: vt.clone(),
                    off: kt.size(),
                },
            ],
        });
        let saved = self
            .vars
            .insert(var.to_string(), (kv, VarLoc::Slot(kv_slot)));
        self.loop_depth += 1;
        let mut inner = vec![fill];
        inner.extend(self.stmts(body));
        self.loop_depth -= 1;
        match saved {
            Some(v) => {
                self.vars.insert(var.to_string(), v);
            }
            None => {
                self.vars.remove(var);
            }
        }
        out.extend(walk(map, (cur, r), (kslot, ksize), (vslot, vsize), inner));
    }

    /// `len(@m)`: its number of entries.
    pub(crate) fn map_len(&mut self, m: &ast::MapRef, span: Span) -> (E, Ty) {
        let info = self.cx.map(&m.name);
        info.used.get_or_insert(m.span);
        if !m.keys.is_empty() {
            self.cx.err(
                codes::ARGUMENTS,
                span,
                "len() takes a map without a key: len(@m)",
            );
            return (E::Int(0), Ty::None);
        }
        let map = info.index;
        let slot = self.slot(8);
        let (cnt, cur, r) = (self.local(), self.local(), self.local());
        let count = S::SetLocal(cnt, plus_one(cnt));
        let mut seq = vec![S::SetLocal(cnt, E::Int(0))];
        seq.extend(walk(map, (cur, r), (slot, 0), (slot, 0), vec![count]));
        (E::Seq(seq, Box::new(E::Local(cnt))), Ty::I64)
    }
}

/// The walk over the entries of map `map` (`for`, `len`): the cursor
/// local `cur` from 0, each entry's key and value read into the slots
/// `key` and `val` (slot, size), its index in the local `r`, then `body`
/// with the cursor past it.
fn walk(map: u32, (cur, r): (u32, u32), key: (u32, u32), val: (u32, u32), body: Vec<S>) -> [S; 2] {
    let next = E::MapEntry {
        map,
        cursor: Box::new(E::Local(cur)),
        key,
        val,
    };
    let cond = E::Seq(
        vec![S::SetLocal(r, next)],
        Box::new(E::Bin(
            BinOp::Ge,
            true,
            Box::new(E::Local(r)),
            Box::new(E::Int(0)),
        )),
    );
    let mut inner = vec![S::SetLocal(cur, plus_one(r))];
    inner.extend(body);
    [S::SetLocal(cur, E::Int(0)), S::While(cond, inner)]
}

/// `local + 1`.
fn plus_one(local: u32) -> E {
    E::Bin(
        BinOp::Add,
        false,
        Box::new(E::Local(local)),
        Box::new(E::Int(1)),
    )
}
