//! The hash of the plans' tables, whose keys are addresses (a window's, a
//! function's) and whose lookups come in address order (planning goes
//! through a module's functions in order): the table's slot is picked by
//! the address itself, so that one lookup's slot is near the last one's —
//! a few cache lines and pages touched in turn rather than one at random a
//! lookup (the table of windows alone is over a megabyte for a large
//! program) — and the rest of the key, hashed, picks the tag bits the
//! table tells its keys apart by.

use std::hash::{BuildHasherDefault, Hasher};

use rustc_hash::FxHasher;

/// Bytes of address space one slot of a table stands for (about a
/// window's length: windows a few bytes apart go to neighbouring slots).
const SLOT_SHIFT: u32 = 4;

/// The top bits of a hash that hashbrown keeps as each key's tag (7).
const TAG_BITS: u64 = !(u64::MAX >> 7);

/// A hasher for keys made of an address and small fields: the largest
/// `u64` written is the address (shifted, it picks the slot); everything
/// written is hashed too, for the tag bits. A key with no `u64` (a
/// string; the small fields, a `bool` or an enum's discriminant, are
/// written as other types) gets that hash whole.
#[derive(Default)]
pub(in crate::transport::inproc) struct ByAddress {
    addr: u64,
    all: FxHasher,
}

impl Hasher for ByAddress {
    fn write(&mut self, bytes: &[u8]) {
        self.all.write(bytes);
    }

    fn write_u64(&mut self, n: u64) {
        self.addr = self.addr.max(n);
        self.all.write_u64(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        let all = self.all.finish();
        if self.addr == 0 {
            return all;
        }
        ((self.addr >> SLOT_SHIFT) & !TAG_BITS) | (all & TAG_BITS)
    }
}

/// A map keyed by addresses, looked up in address order.
pub(in crate::transport::inproc) type HashMap<K, V> =
    std::collections::HashMap<K, V, BuildHasherDefault<ByAddress>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash<T: std::hash::Hash>(t: T) -> u64 {
        BuildHasherDefault::<ByAddress>::default().hash_one(t)
    }

    /// Keys a few bytes apart get slots next to each other; the other
    /// fields of a key change its tag bits.
    #[test]
    fn neighbouring_addresses_neighbouring_slots() {
        let slot = |h: u64| h & !TAG_BITS;
        assert_eq!(slot(hash((1u8, 0x40_1000u64))), 0x40_1000 >> SLOT_SHIFT);
        assert_eq!(
            slot(hash((0x40_1010u64, 0x40_1012u64, true))),
            0x40_1012 >> SLOT_SHIFT
        );
        assert_ne!(hash((0u8, 0x40_1000u64)), hash((1u8, 0x40_1000u64)));
        assert_ne!(
            hash((0u8, 0x40_1000u64)) & TAG_BITS,
            hash((1u8, 0x40_1000u64)) & TAG_BITS
        );
        // Strings: hashed whole.
        assert_ne!(hash("abc") & !TAG_BITS, hash("abd") & !TAG_BITS);
    }
}
