//! Map expressions: lookups, `has_key`, and the entries `for` loops walk.

use super::{Gen, mem};
use crate::ir::{E, Key, Ty};
use hostabi::ImportId as I;

impl Gen<'_> {
    /// A map lookup into slot `slot` (zeros when the key is absent): the
    /// value's address, or the integer.
    pub(super) fn map_get(&mut self, map: u32, key: &Key, slot: u32, ty: &Ty) {
        self.key(key);
        let v = self.addr(slot);
        self.zero(v, ty.size());
        let k = self.addr(key.slot);
        self.i()
            .i32_const(map as i32)
            .i32_const(k)
            .i32_const(key.size as i32)
            .i32_const(v)
            .i32_const(ty.size() as i32);
        self.call(I::map_lookup);
        self.i().drop();
        if ty.is_agg() {
            self.i().i32_const(v);
        } else {
            self.i().i32_const(v).i64_load(mem(0, 3));
        }
    }

    /// Whether a map has the key.
    pub(super) fn map_has(&mut self, map: u32, key: &Key) {
        self.key(key);
        let k = self.addr(key.slot);
        self.i()
            .i32_const(map as i32)
            .i32_const(k)
            .i32_const(key.size as i32)
            .i32_const(k)
            .i32_const(0);
        self.call(I::map_lookup);
        // The value's length when found, a negative status when not.
        self.i().i32_const(0).i32_ge_s().i64_extend_i32_u();
    }

    /// The entry at `cursor` of a map (`for` loops): its key and value
    /// copied to their slots; the next cursor.
    pub(super) fn map_entry(&mut self, map: u32, cursor: &E, key: (u32, u32), val: (u32, u32)) {
        let (k, v) = (self.addr(key.0), self.addr(val.0));
        self.i().i32_const(map as i32);
        self.expr(cursor);
        self.i()
            .i32_const(k)
            .i32_const(key.1 as i32)
            .i32_const(v)
            .i32_const(val.1 as i32);
        self.call(I::map_entry);
        self.i().i64_extend_i32_s();
    }
}
