//! `mapstore`: the bounded map service behind the `map_*` host imports, an
//! eBPF-maps-like store of aggregations (`count`, `sum`, `min`, `max`,
//! `avg`, `stats`, `hist`, `lhist`) and plain values, kept in **one flat,
//! fixed-size memory region** described by offsets only.
//!
//! The same code runs over a heap buffer (the ptrace and perf transports:
//! wprobe owns the region) and over shared memory (the coming in-process
//! transport: handlers update the region inside the target, wprobe reads it
//! at exit). Hence the rules this crate keeps:
//!
//! * `no_std`, no allocation in any operation, no pointers in the region:
//!   everything is a little-endian offset from the region's start;
//! * every read of the region is bounds-checked, every descriptor is
//!   validated before use: a corrupted region (a buggy or hostile target
//!   writing over shared memory) gives errors or garbage values, never a
//!   panic or an out-of-bounds access;
//! * bounded: each map has a maximum number of keys and of bytes, fixed when
//!   the region is laid out ([`layout`]); an update that would need a new
//!   key in a full map is refused and **counted** in the map's descriptor
//!   ([`MapStats::dropped`]), so the owner can report it;
//! * single writer per region: handlers of the ptrace and perf transports
//!   never run concurrently. Concurrent writers need one region each
//!   ([`merge`] folds one region's aggregations into another).
//!
//! Operations: [`Store::update`] (aggregate one sample), [`Store::store`]
//! (assign a value), [`StoreView::lookup`], [`Store::delete`], [`Store::clear`],
//! [`Store::zero`], [`StoreView::entries`] (read-out at exit; with
//! [`Entries::with_sums`], the exact sum of each histogram entry's samples,
//! which the metrics exporter shows as `_sum`).

#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod buckets;
pub mod layout;
mod table;

pub use layout::{LayoutError, MapSpec, check, init, region_size};
pub use table::{Entries, Store, StoreView, SumEntries, merge};

pub use hostabi::maps::{
    DEFAULT_MAX_KEYS, HIST_BUCKETS, MAX_HIST_BITS, MAX_KEY_BYTES, MAX_KEYS_PER_MAP,
    MAX_LHIST_BUCKETS, MAX_MAP_BYTES, MAX_MAPS, MAX_REGION_BYTES, MAX_VALUE_BYTES, MapKind, Op,
    hist_buckets,
};

/// Why an operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// No map with this index in the region.
    NoSuchMap(u32),
    /// The key's length is not the map's key size.
    KeySize {
        /// Bytes given.
        given: usize,
        /// The map's key size.
        expected: u32,
    },
    /// The value's length is not the map's value size (`store`).
    ValueSize {
        /// Bytes given.
        given: usize,
        /// The map's value size.
        expected: u32,
    },
    /// The op does not apply to the map's kind (e.g. `Hist` on a `count` map),
    /// or an 8-byte op on an assign map of another value size.
    WrongOp,
    /// The map is full: the update needed a new key. Counted in the map.
    Full,
    /// The region's header or a descriptor is inconsistent (corrupted region).
    Corrupt,
}

impl core::fmt::Display for MapError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MapError::NoSuchMap(m) => write!(f, "no map {m}"),
            MapError::KeySize { given, expected } => {
                write!(f, "key of {given} bytes, the map's keys have {expected}")
            }
            MapError::ValueSize { given, expected } => {
                write!(
                    f,
                    "value of {given} bytes, the map's values have {expected}"
                )
            }
            MapError::WrongOp => f.write_str("operation does not apply to this kind of map"),
            MapError::Full => f.write_str("map full"),
            MapError::Corrupt => f.write_str("map region corrupted"),
        }
    }
}

/// A map's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapStats {
    /// Keys held.
    pub len: u32,
    /// Keys the map can hold.
    pub capacity: u32,
    /// Updates refused because the map was full.
    pub dropped: u64,
}
