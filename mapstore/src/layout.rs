//! The region's layout: a header, one descriptor per map, then each map's
//! index (open addressing, u32 slots) and entry arena. Everything is a
//! little-endian integer at an offset from the region's start; [`init`]
//! writes a fresh layout, [`check`] validates one read from shared memory.
//!
//! ```text
//! 0      header   magic "WPMS", version, region length, map count
//! 64     descriptors, DESC_BYTES each
//! ...    map 0: index (slots × 4 bytes), entries (capacity × entry bytes)
//! ...    map 1: ...
//! ```
//!
//! An entry is `hash u32 | state u32 | [sum i64] | key (padded to 8) | value
//! (padded to 8)`; `state` is 0 (never used), 1 (live) or 2 + next free entry
//! (deleted). `hist` and `lhist` entries carry the exact sum of their samples
//! ([`extra_bytes`]) next to the head, outside the value (which stays the
//! bucket counts the ABI describes): metrics expose it as a histogram's
//! `_sum`, on the cache line the update touches anyway.

use crate::buckets::Linear;
use crate::{
    MAX_KEY_BYTES, MAX_KEYS_PER_MAP, MAX_MAP_BYTES, MAX_MAPS, MAX_REGION_BYTES, MAX_VALUE_BYTES,
    MapKind,
};

/// Region magic, "WPMS" little-endian.
pub const MAGIC: u32 = 0x534d_5057;
/// Layout version (2: `hist`/`lhist` entries carry their sum).
pub const VERSION: u32 = 2;
/// Header bytes.
pub const HEADER_BYTES: usize = 64;
/// Descriptor bytes per map.
pub const DESC_BYTES: usize = 128;
/// Bytes of an entry before its key (hash, state).
pub const ENTRY_HEAD_BYTES: usize = 8;

// Header fields.
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_VERSION: usize = 4;
pub(crate) const H_LEN: usize = 8;
pub(crate) const H_NMAPS: usize = 16;

// Descriptor fields (offsets within a descriptor).
pub(crate) const D_KIND: usize = 0;
pub(crate) const D_KEY: usize = 4;
pub(crate) const D_VALUE: usize = 8;
pub(crate) const D_ENTRY: usize = 12;
pub(crate) const D_CAP: usize = 16;
pub(crate) const D_SLOTS: usize = 20;
pub(crate) const D_INDEX_OFF: usize = 24;
pub(crate) const D_ENTRIES_OFF: usize = 32;
pub(crate) const D_LEN: usize = 40;
pub(crate) const D_USED: usize = 44;
pub(crate) const D_FREE: usize = 48;
pub(crate) const D_TOMBS: usize = 52;
pub(crate) const D_DROPPED: usize = 56;
pub(crate) const D_LMIN: usize = 64;
pub(crate) const D_LMAX: usize = 72;
pub(crate) const D_LSTEP: usize = 80;
/// `k` of a `hist(x, k)` map (0 in regions written before it existed).
pub(crate) const D_HBITS: usize = 88;

/// Bytes an entry of `kind` keeps between its head and its key: the sum of
/// the samples of a `hist` or `lhist` entry (8), nothing for other kinds.
pub const fn extra_bytes(kind: MapKind) -> u32 {
    match kind {
        MapKind::Hist | MapKind::Lhist => 8,
        _ => 0,
    }
}

/// What one map is declared as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapSpec {
    /// Its kind.
    pub kind: MapKind,
    /// Key bytes (0: a map without keys, `@x`).
    pub key_size: u32,
    /// Value bytes of an `assign` map (ignored for the other kinds, whose
    /// value layout the kind fixes).
    pub value_size: u32,
    /// Most keys it may hold.
    pub max_keys: u32,
    /// `lhist` parameters.
    pub linear: Option<Linear>,
    /// `k` of `hist(x, k)` (0 for another kind).
    pub hist_bits: u8,
}

impl MapSpec {
    /// The value size the kind implies.
    pub fn value_bytes(&self) -> Result<u32, LayoutError> {
        let n = match self.kind {
            MapKind::Count | MapKind::Sum | MapKind::Min | MapKind::Max => 8,
            MapKind::Avg | MapKind::Stats => 16,
            MapKind::Hist if self.hist_bits > crate::MAX_HIST_BITS => {
                return Err(LayoutError::HistBits(self.hist_bits));
            }
            MapKind::Hist => (crate::hist_buckets(self.hist_bits) * 8) as u32,
            MapKind::Lhist => match self.linear {
                Some(l) => (l.slots() * 8) as u32,
                None => return Err(LayoutError::LhistWithoutRange),
            },
            MapKind::Assign => self.value_size,
        };
        if n == 0 || n > MAX_VALUE_BYTES {
            return Err(LayoutError::ValueSize(n));
        }
        Ok(n)
    }

    /// Bytes of one entry.
    pub fn entry_bytes(&self) -> Result<u32, LayoutError> {
        if self.key_size > MAX_KEY_BYTES {
            return Err(LayoutError::KeySize(self.key_size));
        }
        Ok(ENTRY_HEAD_BYTES as u32
            + extra_bytes(self.kind)
            + pad8(self.key_size)
            + pad8(self.value_bytes()?))
    }

    /// Keys this map will hold: its `max_keys` (1 for a map without keys),
    /// reduced to what fits in [`MAX_MAP_BYTES`].
    pub fn capacity(&self) -> Result<u32, LayoutError> {
        if self.max_keys == 0 || self.max_keys > MAX_KEYS_PER_MAP {
            return Err(LayoutError::MaxKeys(self.max_keys));
        }
        let want = if self.key_size == 0 { 1 } else { self.max_keys };
        let per_key = self.entry_bytes()? as u64 + 8; // entry + two index slots
        let fit = (MAX_MAP_BYTES / per_key).max(1) as u32;
        Ok(want.min(fit))
    }
}

/// Why a set of maps cannot be laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// More than [`MAX_MAPS`] maps.
    TooManyMaps(usize),
    /// A key larger than [`MAX_KEY_BYTES`].
    KeySize(u32),
    /// A value of 0 bytes or more than [`MAX_VALUE_BYTES`].
    ValueSize(u32),
    /// `max_keys` of 0 or above [`MAX_KEYS_PER_MAP`].
    MaxKeys(u32),
    /// An `lhist` map without its parameters.
    LhistWithoutRange,
    /// A `hist(x, k)` map with `k` above [`crate::MAX_HIST_BITS`].
    HistBits(u8),
    /// The maps need more than [`MAX_REGION_BYTES`].
    TooLarge(u64),
    /// The region given to [`init`] is smaller than [`region_size`].
    RegionTooSmall {
        /// Bytes needed.
        need: u64,
        /// Bytes given.
        have: u64,
    },
}

impl core::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LayoutError::TooManyMaps(n) => write!(f, "{n} maps, at most {MAX_MAPS}"),
            LayoutError::KeySize(n) => write!(f, "keys of {n} bytes, at most {MAX_KEY_BYTES}"),
            LayoutError::ValueSize(n) => {
                write!(f, "values of {n} bytes, 1 to {MAX_VALUE_BYTES}")
            }
            LayoutError::MaxKeys(n) => {
                write!(f, "{n} keys per map, 1 to {MAX_KEYS_PER_MAP}")
            }
            LayoutError::LhistWithoutRange => f.write_str("lhist map without min, max, step"),
            LayoutError::HistBits(k) => {
                write!(f, "hist map with k = {k}, at most {}", crate::MAX_HIST_BITS)
            }
            LayoutError::TooLarge(n) => {
                write!(f, "maps need {n} bytes, at most {MAX_REGION_BYTES}")
            }
            LayoutError::RegionTooSmall { need, have } => {
                write!(f, "region of {have} bytes, {need} needed")
            }
        }
    }
}

pub(crate) fn pad8(n: u32) -> u32 {
    n.div_ceil(8) * 8
}

/// Index slots for `cap` keys: a power of two at least twice `cap`.
pub(crate) fn slots_for(cap: u32) -> u32 {
    (cap as u64 * 2).next_power_of_two().max(4) as u32
}

/// Bytes of the region holding `specs`.
pub fn region_size(specs: &[MapSpec]) -> Result<u64, LayoutError> {
    if specs.len() > MAX_MAPS {
        return Err(LayoutError::TooManyMaps(specs.len()));
    }
    let mut total = (HEADER_BYTES + DESC_BYTES * specs.len()) as u64;
    for s in specs {
        let cap = s.capacity()?;
        total += slots_for(cap) as u64 * 4;
        total = total.div_ceil(8) * 8;
        total += cap as u64 * s.entry_bytes()? as u64;
    }
    if total > MAX_REGION_BYTES {
        return Err(LayoutError::TooLarge(total));
    }
    Ok(total)
}

pub(crate) fn put_u32(r: &mut [u8], off: usize, v: u32) {
    if let Some(b) = r.get_mut(off..off + 4) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

pub(crate) fn put_u64(r: &mut [u8], off: usize, v: u64) {
    if let Some(b) = r.get_mut(off..off + 8) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

pub(crate) fn get_u32(r: &[u8], off: usize) -> Option<u32> {
    let b = r.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(crate) fn get_u64(r: &[u8], off: usize) -> Option<u64> {
    let b = r.get(off..off.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

/// Writes a fresh layout of `specs` into `region` (which must be zeroed
/// beyond the descriptors, as a fresh allocation or mapping is).
pub fn init(region: &mut [u8], specs: &[MapSpec]) -> Result<(), LayoutError> {
    let need = region_size(specs)?;
    if (region.len() as u64) < need {
        return Err(LayoutError::RegionTooSmall {
            need,
            have: region.len() as u64,
        });
    }
    put_u32(region, H_MAGIC, MAGIC);
    put_u32(region, H_VERSION, VERSION);
    put_u64(region, H_LEN, need);
    put_u32(region, H_NMAPS, specs.len() as u32);
    let mut off = (HEADER_BYTES + DESC_BYTES * specs.len()) as u64;
    for (i, s) in specs.iter().enumerate() {
        let d = HEADER_BYTES + DESC_BYTES * i;
        let cap = s.capacity()?;
        let slots = slots_for(cap);
        put_u32(region, d + D_KIND, s.kind as u32);
        put_u32(region, d + D_KEY, s.key_size);
        put_u32(region, d + D_VALUE, s.value_bytes()?);
        put_u32(region, d + D_ENTRY, s.entry_bytes()?);
        put_u32(region, d + D_CAP, cap);
        put_u32(region, d + D_SLOTS, slots);
        put_u64(region, d + D_INDEX_OFF, off);
        off += slots as u64 * 4;
        off = off.div_ceil(8) * 8;
        put_u64(region, d + D_ENTRIES_OFF, off);
        off += cap as u64 * s.entry_bytes()? as u64;
        if s.kind == MapKind::Hist {
            put_u32(region, d + D_HBITS, u32::from(s.hist_bits));
        }
        if let Some(l) = s.linear {
            put_u64(region, d + D_LMIN, l.min as u64);
            put_u64(region, d + D_LMAX, l.max as u64);
            put_u64(region, d + D_LSTEP, l.step as u64);
        }
    }
    Ok(())
}

/// A validated map descriptor (a copy: the region may change under us).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Desc {
    pub at: usize,
    pub kind: MapKind,
    pub key: u32,
    pub value: u32,
    pub entry: u32,
    /// Bytes between the head and the key ([`extra_bytes`]).
    pub extra: u32,
    pub cap: u32,
    pub slots: u32,
    pub index_off: usize,
    pub entries_off: usize,
    pub linear: Option<Linear>,
    /// `k` of a `hist(x, k)` map.
    pub hist_bits: u8,
}

/// The number of maps in a region with a valid header, or `None`.
pub(crate) fn nmaps(region: &[u8]) -> Option<u32> {
    if get_u32(region, H_MAGIC)? != MAGIC || get_u32(region, H_VERSION)? != VERSION {
        return None;
    }
    let len = get_u64(region, H_LEN)?;
    if len > region.len() as u64 {
        return None;
    }
    let n = get_u32(region, H_NMAPS)?;
    (n as usize <= MAX_MAPS).then_some(n)
}

/// Reads and validates descriptor `map`: every extent inside the region,
/// sizes consistent, so that the table code may index without surprises.
pub(crate) fn desc(region: &[u8], map: u32) -> Result<Desc, crate::MapError> {
    use crate::MapError::{Corrupt, NoSuchMap};
    let n = nmaps(region).ok_or(Corrupt)?;
    if map >= n {
        return Err(NoSuchMap(map));
    }
    let at = HEADER_BYTES + DESC_BYTES * map as usize;
    let g = |f| get_u32(region, at + f).ok_or(Corrupt);
    let kind = MapKind::from_u8(g(D_KIND)? as u8).ok_or(Corrupt)?;
    let (key, value, entry, cap, slots) =
        (g(D_KEY)?, g(D_VALUE)?, g(D_ENTRY)?, g(D_CAP)?, g(D_SLOTS)?);
    let index_off = get_u64(region, at + D_INDEX_OFF).ok_or(Corrupt)?;
    let entries_off = get_u64(region, at + D_ENTRIES_OFF).ok_or(Corrupt)?;
    let ok = key <= MAX_KEY_BYTES
        && value > 0
        && value <= MAX_VALUE_BYTES
        && entry == ENTRY_HEAD_BYTES as u32 + extra_bytes(kind) + pad8(key) + pad8(value)
        && cap > 0
        && cap <= MAX_KEYS_PER_MAP
        && slots.is_power_of_two()
        && slots >= cap.saturating_mul(2)
        && index_off
            .checked_add(slots as u64 * 4)
            .is_some_and(|e| e <= entries_off)
        && entries_off
            .checked_add(cap as u64 * entry as u64)
            .is_some_and(|e| e <= region.len() as u64)
        && entries_off.is_multiple_of(8);
    if !ok {
        return Err(Corrupt);
    }
    let linear = if kind == MapKind::Lhist {
        let l = Linear::new(
            get_u64(region, at + D_LMIN).ok_or(Corrupt)? as i64,
            get_u64(region, at + D_LMAX).ok_or(Corrupt)? as i64,
            get_u64(region, at + D_LSTEP).ok_or(Corrupt)? as i64,
        )
        .ok_or(Corrupt)?;
        if l.slots() as u32 * 8 != value {
            return Err(Corrupt);
        }
        Some(l)
    } else {
        None
    };
    let hist_bits = if kind == MapKind::Hist {
        let k = get_u32(region, at + D_HBITS).ok_or(Corrupt)?;
        if k > u32::from(crate::MAX_HIST_BITS) || crate::hist_buckets(k as u8) as u32 * 8 != value {
            return Err(Corrupt);
        }
        k as u8
    } else {
        0
    };
    Ok(Desc {
        at,
        kind,
        key,
        value,
        entry,
        extra: extra_bytes(kind),
        cap,
        slots,
        index_off: index_off as usize,
        entries_off: entries_off as usize,
        linear,
        hist_bits,
    })
}

/// Checks a region's header and every descriptor (a region read from
/// shared memory, before it is trusted for a read-out).
pub fn check(region: &[u8]) -> Result<u32, crate::MapError> {
    let n = nmaps(region).ok_or(crate::MapError::Corrupt)?;
    for m in 0..n {
        desc(region, m)?;
    }
    Ok(n)
}
