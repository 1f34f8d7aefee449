//! The operations: a hash table per map (open addressing with linear
//! probing over u32 index slots, entries in an arena with a free list).
//! Every operation first validates the map's descriptor, then indexes only
//! inside the extents it checked; probing stops after `slots` steps, so a
//! corrupted index cannot loop forever.

use crate::buckets::hist_bucket_bits;
use crate::layout::{
    D_DROPPED, D_FREE, D_LEN, D_TOMBS, D_USED, Desc, ENTRY_HEAD_BYTES, desc, get_u32, get_u64,
    nmaps, pad8, put_u32, put_u64,
};
use crate::{MapError, MapKind, MapStats, Op};

const EMPTY: u32 = 0;
const TOMB: u32 = u32::MAX;
const LIVE: u32 = 1;
const FREE: u32 = 2;

/// A region opened for reading and writing.
pub struct Store<'a> {
    region: &'a mut [u8],
}

/// A region opened for reading (the read-out at exit, printing).
#[derive(Clone, Copy)]
pub struct StoreView<'a> {
    region: &'a [u8],
}

/// 64-bit multiply-xorshift hash of a key, folded to 32 bits (never 0, so
/// that an entry's hash field is never mistaken for a cleared one).
fn hash(key: &[u8]) -> u32 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h: u64 = 0x243F_6A88_85A3_08D3 ^ key.len() as u64;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(a)).wrapping_mul(K).rotate_left(29);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut a = [0u8; 8];
        a[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(a)).wrapping_mul(K).rotate_left(29);
    }
    h ^= h >> 32;
    (h as u32) | 1
}

fn entry_at(d: &Desc, e: u32) -> usize {
    d.entries_off + e as usize * d.entry as usize
}

fn key_range(d: &Desc, e: u32) -> core::ops::Range<usize> {
    let k = entry_at(d, e) + ENTRY_HEAD_BYTES + d.extra as usize;
    k..k + d.key as usize
}

fn value_range(d: &Desc, e: u32) -> core::ops::Range<usize> {
    let v = entry_at(d, e) + ENTRY_HEAD_BYTES + d.extra as usize + pad8(d.key) as usize;
    v..v + d.value as usize
}

/// Where a `hist`/`lhist` entry keeps the sum of its samples (an empty
/// range for the other kinds).
fn sum_range(d: &Desc, e: u32) -> core::ops::Range<usize> {
    let s = entry_at(d, e) + ENTRY_HEAD_BYTES;
    s..s + d.extra as usize
}

fn read_i64(b: &[u8]) -> Option<i64> {
    let a: [u8; 8] = b.try_into().ok()?;
    Some(i64::from_le_bytes(a))
}

fn slot_at(d: &Desc, i: u32) -> usize {
    d.index_off + i as usize * 4
}

/// Whether two keys are the same bytes: a map without keys (`@x`)
/// compares nothing, a short key (a tid, a pointer, a small tuple) word by
/// word inline; a call of `memcmp` was a third of a `count()` update's
/// time.
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a.len() > 32 {
        return a == b;
    }
    let mut x = a.chunks_exact(8);
    let mut y = b.chunks_exact(8);
    for (p, q) in (&mut x).zip(&mut y) {
        if p != q {
            return false;
        }
    }
    x.remainder().iter().zip(y.remainder()).all(|(p, q)| p == q)
}

/// Where `key` is: `Ok((slot, entry))`, or `Err(first free slot)` (`None`
/// when the probe sequence found no free slot, which a valid table never has).
fn find(r: &[u8], d: &Desc, key: &[u8], h: u32) -> Result<(u32, u32), Option<u32>> {
    let mask = d.slots - 1;
    let mut i = h & mask;
    let mut first_free = None;
    for _ in 0..d.slots {
        let s = get_u32(r, slot_at(d, i)).unwrap_or(EMPTY);
        if s == EMPTY {
            return Err(first_free.or(Some(i)));
        }
        if s == TOMB {
            first_free.get_or_insert(i);
        } else {
            let e = s - 1;
            if e < d.cap {
                let at = entry_at(d, e);
                if get_u32(r, at + 4) == Some(LIVE)
                    && get_u32(r, at) == Some(h)
                    && r.get(key_range(d, e)).is_some_and(|k| same_key(k, key))
                {
                    return Ok((i, e));
                }
            }
        }
        i = (i + 1) & mask;
    }
    Err(first_free)
}

fn check_key(d: &Desc, key: &[u8]) -> Result<(), MapError> {
    if key.len() != d.key as usize {
        return Err(MapError::KeySize {
            given: key.len(),
            expected: d.key,
        });
    }
    Ok(())
}

fn rd(r: &[u8], d: &Desc, f: usize) -> u32 {
    get_u32(r, d.at + f).unwrap_or(0)
}

impl<'a> Store<'a> {
    /// Opens a region laid out by [`crate::layout::init`] (nothing is
    /// checked until an operation runs).
    pub fn new(region: &'a mut [u8]) -> Store<'a> {
        Store { region }
    }

    /// A read-only view of the same region.
    pub fn view(&self) -> StoreView<'_> {
        StoreView {
            region: self.region,
        }
    }

    /// Finds `key` in map `d`, inserting it (value zeroed) when absent.
    /// Returns the entry and whether it is new. A full map counts the
    /// refusal in its `dropped` counter.
    fn entry(&mut self, d: &Desc, key: &[u8]) -> Result<(u32, bool), MapError> {
        check_key(d, key)?;
        let h = hash(key);
        let slot = match find(self.region, d, key, h) {
            Ok((_, e)) => return Ok((e, false)),
            Err(Some(slot)) => slot,
            Err(None) => return Err(self.full(d)),
        };
        let r = &mut *self.region;
        let len = rd(r, d, D_LEN);
        if len >= d.cap {
            return Err(self.full(d));
        }
        let free = rd(r, d, D_FREE);
        let used = rd(r, d, D_USED);
        let e = if free != 0 && free - 1 < d.cap {
            let e = free - 1;
            // The free list's next link lives in the hash field.
            let next = get_u32(r, entry_at(d, e)).unwrap_or(0);
            put_u32(r, d.at + D_FREE, next);
            e
        } else if used < d.cap {
            put_u32(r, d.at + D_USED, used + 1);
            used
        } else {
            return Err(self.full(d));
        };
        let at = entry_at(d, e);
        put_u32(r, at, h);
        put_u32(r, at + 4, LIVE);
        if let Some(k) = r.get_mut(key_range(d, e)) {
            k.copy_from_slice(key);
        }
        if let Some(v) = r.get_mut(value_range(d, e)) {
            v.fill(0);
        }
        if let Some(v) = r.get_mut(sum_range(d, e)) {
            v.fill(0);
        }
        if get_u32(r, slot_at(d, slot)) == Some(TOMB) {
            put_u32(r, d.at + D_TOMBS, rd(r, d, D_TOMBS).saturating_sub(1));
        }
        put_u32(r, slot_at(d, slot), e + 1);
        put_u32(r, d.at + D_LEN, len + 1);
        Ok((e, true))
    }

    fn full(&mut self, d: &Desc) -> MapError {
        let n = get_u64(self.region, d.at + D_DROPPED).unwrap_or(0);
        put_u64(self.region, d.at + D_DROPPED, n.saturating_add(1));
        MapError::Full
    }

    /// Aggregates one sample `v` into `map[key]` with `op`.
    pub fn update(&mut self, map: u32, key: &[u8], op: Op, v: i64) -> Result<(), MapError> {
        let d = desc(self.region, map)?;
        if !op.applies_to(d.kind) || (d.kind == MapKind::Assign && d.value != 8) {
            return Err(MapError::WrongOp);
        }
        let (e, new) = self.entry(&d, key)?;
        let Some(val) = self.region.get_mut(value_range(&d, e)) else {
            return Err(MapError::Corrupt);
        };
        let word = |val: &[u8], i: usize| -> i64 {
            let mut a = [0u8; 8];
            a.copy_from_slice(&val[i * 8..i * 8 + 8]);
            i64::from_le_bytes(a)
        };
        let set = |val: &mut [u8], i: usize, x: i64| {
            val[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
        };
        match op {
            Op::Count => set(val, 0, word(val, 0).wrapping_add(1)),
            Op::Add => set(val, 0, word(val, 0).wrapping_add(v)),
            Op::Set => set(val, 0, v),
            Op::Min => {
                if new || v < word(val, 0) {
                    set(val, 0, v)
                }
            }
            Op::Max => {
                if new || v > word(val, 0) {
                    set(val, 0, v)
                }
            }
            Op::Avg => {
                set(val, 0, word(val, 0).wrapping_add(1));
                set(val, 1, word(val, 1).wrapping_add(v));
            }
            Op::Hist => {
                let b = hist_bucket_bits(v, d.hist_bits);
                set(val, b, word(val, b).wrapping_add(1));
            }
            Op::Lhist => {
                let Some(l) = d.linear else {
                    return Err(MapError::Corrupt);
                };
                let b = l.slot(v);
                set(val, b, word(val, b).wrapping_add(1));
            }
        }
        if matches!(op, Op::Hist | Op::Lhist)
            && let Some(sum) = self.region.get_mut(sum_range(&d, e))
            && let Some(old) = read_i64(sum)
        {
            sum.copy_from_slice(&old.wrapping_add(v).to_le_bytes());
        }
        Ok(())
    }

    /// Sets `map[key] = value` (an `assign` map; `value` has the map's value size).
    pub fn store(&mut self, map: u32, key: &[u8], value: &[u8]) -> Result<(), MapError> {
        let d = desc(self.region, map)?;
        if d.kind != MapKind::Assign {
            return Err(MapError::WrongOp);
        }
        if value.len() != d.value as usize {
            return Err(MapError::ValueSize {
                given: value.len(),
                expected: d.value,
            });
        }
        let (e, _) = self.entry(&d, key)?;
        match self.region.get_mut(value_range(&d, e)) {
            Some(v) => {
                v.copy_from_slice(value);
                Ok(())
            }
            None => Err(MapError::Corrupt),
        }
    }

    /// Removes `map[key]`; `Ok(false)` when it was absent.
    pub fn delete(&mut self, map: u32, key: &[u8]) -> Result<bool, MapError> {
        let d = desc(self.region, map)?;
        check_key(&d, key)?;
        let h = hash(key);
        let Ok((slot, e)) = find(self.region, &d, key, h) else {
            return Ok(false);
        };
        let r = &mut *self.region;
        put_u32(r, slot_at(&d, slot), TOMB);
        let at = entry_at(&d, e);
        put_u32(r, at, rd(r, &d, D_FREE));
        put_u32(r, at + 4, FREE);
        put_u32(r, d.at + D_FREE, e + 1);
        put_u32(r, d.at + D_LEN, rd(r, &d, D_LEN).saturating_sub(1));
        let tombs = rd(r, &d, D_TOMBS) + 1;
        put_u32(r, d.at + D_TOMBS, tombs);
        if tombs > d.slots / 4 {
            self.rebuild_index(&d);
        }
        Ok(true)
    }

    /// Re-inserts every live entry into an empty index (drops tombstones).
    fn rebuild_index(&mut self, d: &Desc) {
        let r = &mut *self.region;
        if let Some(ix) = r.get_mut(d.index_off..d.index_off + d.slots as usize * 4) {
            ix.fill(0);
        }
        let used = rd(r, d, D_USED).min(d.cap);
        let mask = d.slots - 1;
        for e in 0..used {
            let at = entry_at(d, e);
            if get_u32(r, at + 4) != Some(LIVE) {
                continue;
            }
            let mut i = get_u32(r, at).unwrap_or(0) & mask;
            for _ in 0..d.slots {
                if get_u32(r, slot_at(d, i)) == Some(EMPTY) {
                    put_u32(r, slot_at(d, i), e + 1);
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        put_u32(r, d.at + D_TOMBS, 0);
    }

    /// Removes every key of `map` (bpftrace `clear`).
    pub fn clear(&mut self, map: u32) -> Result<(), MapError> {
        let d = desc(self.region, map)?;
        let r = &mut *self.region;
        if let Some(ix) = r.get_mut(d.index_off..d.index_off + d.slots as usize * 4) {
            ix.fill(0);
        }
        for f in [D_LEN, D_USED, D_FREE, D_TOMBS] {
            put_u32(r, d.at + f, 0);
        }
        Ok(())
    }

    /// Sets every value of `map` to zero, keeping the keys (bpftrace `zero`).
    pub fn zero(&mut self, map: u32) -> Result<(), MapError> {
        let d = desc(self.region, map)?;
        let used = rd(self.region, &d, D_USED).min(d.cap);
        for e in 0..used {
            if get_u32(self.region, entry_at(&d, e) + 4) == Some(LIVE) {
                if let Some(v) = self.region.get_mut(value_range(&d, e)) {
                    v.fill(0);
                }
                if let Some(v) = self.region.get_mut(sum_range(&d, e)) {
                    v.fill(0);
                }
            }
        }
        Ok(())
    }
}

impl<'a> StoreView<'a> {
    /// Opens a region for reading.
    pub fn new(region: &'a [u8]) -> StoreView<'a> {
        StoreView { region }
    }

    /// Number of maps (0 for a region without a valid header).
    pub fn maps(&self) -> u32 {
        nmaps(self.region).unwrap_or(0)
    }

    /// The first live entry of `map` at or after arena slot `from`: its
    /// slot, key and value (a cursor: the next call starts at slot + 1;
    /// deleting the entry found does not move the others).
    pub fn entry_from(&self, map: u32, from: u32) -> Result<Option<Entry<'a>>, MapError> {
        let d = desc(self.region, map)?;
        let used = rd(self.region, &d, D_USED).min(d.cap);
        let mut e = from;
        while e < used {
            if get_u32(self.region, entry_at(&d, e) + 4) == Some(LIVE)
                && let (Some(k), Some(v)) = (
                    self.region.get(key_range(&d, e)),
                    self.region.get(value_range(&d, e)),
                )
            {
                return Ok(Some((e, k, v)));
            }
            e += 1;
        }
        Ok(None)
    }

    /// The value of `map[key]`, if present.
    pub fn lookup(&self, map: u32, key: &[u8]) -> Result<Option<&'a [u8]>, MapError> {
        let d = desc(self.region, map)?;
        check_key(&d, key)?;
        match find(self.region, &d, key, hash(key)) {
            Ok((_, e)) => Ok(self.region.get(value_range(&d, e))),
            Err(_) => Ok(None),
        }
    }

    /// The map's kind.
    pub fn kind(&self, map: u32) -> Result<MapKind, MapError> {
        Ok(desc(self.region, map)?.kind)
    }

    /// Key and value sizes of the map.
    pub fn sizes(&self, map: u32) -> Result<(u32, u32), MapError> {
        let d = desc(self.region, map)?;
        Ok((d.key, d.value))
    }

    /// The map's counters.
    pub fn stats(&self, map: u32) -> Result<MapStats, MapError> {
        let d = desc(self.region, map)?;
        Ok(MapStats {
            len: rd(self.region, &d, D_LEN),
            capacity: d.cap,
            dropped: get_u64(self.region, d.at + D_DROPPED).unwrap_or(0),
        })
    }

    /// Every live `(key, value)` of `map`, in arena order (with
    /// [`Entries::with_sums`], the sum of each `hist`/`lhist` entry too).
    pub fn entries(&self, map: u32) -> Result<Entries<'a>, MapError> {
        let d = desc(self.region, map)?;
        let used = rd(self.region, &d, D_USED).min(d.cap);
        Ok(Entries {
            region: self.region,
            d,
            next: 0,
            used,
        })
    }
}

/// An entry found by [`StoreView::entry_from`]: its arena slot, key, value.
pub type Entry<'a> = (u32, &'a [u8], &'a [u8]);

/// Iterator over a map's live entries.
pub struct Entries<'a> {
    region: &'a [u8],
    d: Desc,
    next: u32,
    used: u32,
}

impl<'a> Entries<'a> {
    /// The next live entry: its key, value and `sum` bytes.
    fn next_entry(&mut self) -> Option<(&'a [u8], &'a [u8], &'a [u8])> {
        while self.next < self.used {
            let e = self.next;
            self.next += 1;
            if get_u32(self.region, entry_at(&self.d, e) + 4) != Some(LIVE) {
                continue;
            }
            if let (Some(k), Some(v), Some(s)) = (
                self.region.get(key_range(&self.d, e)),
                self.region.get(value_range(&self.d, e)),
                self.region.get(sum_range(&self.d, e)),
            ) {
                return Some((k, v, s));
            }
        }
        None
    }

    /// The same entries with the sum of each one's samples: `Some` for
    /// `hist` and `lhist` entries (exact, wrapping like the store's
    /// arithmetic), `None` for the other kinds.
    pub fn with_sums(self) -> SumEntries<'a> {
        SumEntries(self)
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        self.next_entry().map(|(k, v, _)| (k, v))
    }
}

/// Iterator over a map's live entries with their sums ([`Entries::with_sums`]).
pub struct SumEntries<'a>(Entries<'a>);

impl<'a> Iterator for SumEntries<'a> {
    type Item = (&'a [u8], &'a [u8], Option<i64>);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_entry().map(|(k, v, s)| (k, v, read_i64(s)))
    }
}

/// Folds the aggregations of `src` into `dst` (two regions of the same
/// layout, e.g. per-thread shards): counts, sums, averages, stats and
/// histograms add, minima and maxima combine, assigned values of `src`
/// replace those of `dst`. Keys `dst` has no room for are counted there as
/// dropped.
pub fn merge(dst: &mut Store<'_>, src: StoreView<'_>) -> Result<(), MapError> {
    let n = src.maps();
    for m in 0..n {
        let sd = desc(src.region, m)?;
        let dd = desc(dst.region, m)?;
        if (sd.kind, sd.key, sd.value) != (dd.kind, dd.key, dd.value) {
            return Err(MapError::Corrupt);
        }
        for (k, v) in src.entries(m)? {
            let (e, new) = match dst.entry(&dd, k) {
                Ok(x) => x,
                Err(MapError::Full) => continue,
                Err(e) => return Err(e),
            };
            let Some(dv) = dst.region.get_mut(value_range(&dd, e)) else {
                return Err(MapError::Corrupt);
            };
            let words = dv.len() / 8;
            for i in 0..words {
                let r = i * 8..i * 8 + 8;
                let mut a = [0u8; 8];
                a.copy_from_slice(&dv[r.clone()]);
                let x = i64::from_le_bytes(a);
                a.copy_from_slice(&v[r.clone()]);
                let y = i64::from_le_bytes(a);
                let z = match dd.kind {
                    MapKind::Min if !new => x.min(y),
                    MapKind::Max if !new => x.max(y),
                    MapKind::Min | MapKind::Max | MapKind::Assign => y,
                    _ => x.wrapping_add(y),
                };
                dv[r].copy_from_slice(&z.to_le_bytes());
            }
            if dd.kind == MapKind::Assign {
                dv.copy_from_slice(v);
            }
        }
        for (k, _, sum) in src.entries(m)?.with_sums() {
            let Some(sum) = sum else { break };
            // Present: the loop above inserted every key it had room for.
            if let Ok((_, e)) = find(dst.region, &dd, k, hash(k))
                && let Some(ds) = dst.region.get_mut(sum_range(&dd, e))
                && let Some(old) = read_i64(ds)
            {
                ds.copy_from_slice(&old.wrapping_add(sum).to_le_bytes());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
