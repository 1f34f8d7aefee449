extern crate alloc;
extern crate std;

use super::*;
use crate::buckets::Linear;
use crate::layout::{MapSpec, init, region_size};
use alloc::vec;
use alloc::vec::Vec;

fn spec(kind: MapKind, key: u32, max_keys: u32) -> MapSpec {
    MapSpec {
        kind,
        key_size: key,
        value_size: 8,
        max_keys,
        linear: None,
        hist_bits: 0,
    }
}

fn region(specs: &[MapSpec]) -> Vec<u8> {
    let mut r = vec![0u8; region_size(specs).unwrap() as usize];
    init(&mut r, specs).unwrap();
    r
}

fn k(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

fn word(v: &[u8], i: usize) -> i64 {
    i64::from_le_bytes(v[i * 8..i * 8 + 8].try_into().unwrap())
}

#[test]
fn count_sum_min_max_avg() {
    let specs = [
        spec(MapKind::Count, 8, 16),
        spec(MapKind::Sum, 8, 16),
        spec(MapKind::Min, 0, 16),
        spec(MapKind::Max, 0, 16),
        spec(MapKind::Stats, 0, 16),
    ];
    let mut r = region(&specs);
    let mut s = Store::new(&mut r);
    for i in 0..100u64 {
        s.update(0, &k(i % 3), Op::Count, 0).unwrap();
        s.update(1, &k(i % 3), Op::Add, i as i64).unwrap();
        s.update(2, &[], Op::Min, 50 - i as i64).unwrap();
        s.update(3, &[], Op::Max, i as i64 - 7).unwrap();
        s.update(4, &[], Op::Avg, i as i64).unwrap();
    }
    let v = s.view();
    assert_eq!(word(v.lookup(0, &k(0)).unwrap().unwrap(), 0), 34);
    assert_eq!(word(v.lookup(0, &k(2)).unwrap().unwrap(), 0), 33);
    assert_eq!(v.lookup(0, &k(3)).unwrap(), None);
    assert_eq!(
        word(v.lookup(1, &k(1)).unwrap().unwrap(), 0),
        (1..100).step_by(3).sum::<i64>()
    );
    assert_eq!(word(v.lookup(2, &[]).unwrap().unwrap(), 0), -49);
    assert_eq!(word(v.lookup(3, &[]).unwrap().unwrap(), 0), 92);
    let st = v.lookup(4, &[]).unwrap().unwrap();
    assert_eq!((word(st, 0), word(st, 1)), (100, 4950));
    assert_eq!(v.stats(0).unwrap().len, 3);
}

#[test]
fn hist_and_lhist_buckets() {
    let specs = [
        spec(MapKind::Hist, 0, 1),
        MapSpec {
            linear: Linear::new(0, 100, 10),
            hist_bits: 0,
            ..spec(MapKind::Lhist, 0, 1)
        },
    ];
    let mut r = region(&specs);
    let mut s = Store::new(&mut r);
    for v in [-1, 0, 1, 2, 3, 4, 1000] {
        s.update(0, &[], Op::Hist, v).unwrap();
        s.update(1, &[], Op::Lhist, v).unwrap();
    }
    let v = s.view();
    let h = v.lookup(0, &[]).unwrap().unwrap();
    assert_eq!(h.len(), 65 * 8);
    let counts: Vec<i64> = (0..13).map(|i| word(h, i)).collect();
    assert_eq!(counts, [1, 1, 1, 2, 1, 0, 0, 0, 0, 0, 0, 1, 0]);
    let l = v.lookup(1, &[]).unwrap().unwrap();
    assert_eq!(l.len(), 12 * 8);
    assert_eq!(word(l, 0), 1);
    assert_eq!(word(l, 1), 5);
    assert_eq!(word(l, 11), 1);
}

#[test]
fn bound_is_counted_not_exceeded() {
    let mut r = region(&[spec(MapKind::Count, 8, 10)]);
    let mut s = Store::new(&mut r);
    for i in 0..25u64 {
        let res = s.update(0, &k(i), Op::Count, 0);
        assert_eq!(res.is_err(), i >= 10, "{i}");
    }
    // Existing keys still update.
    s.update(0, &k(3), Op::Count, 0).unwrap();
    let st = s.view().stats(0).unwrap();
    assert_eq!((st.len, st.capacity, st.dropped), (10, 10, 15));
}

#[test]
fn delete_clear_zero_and_reuse() {
    let mut r = region(&[spec(MapKind::Count, 8, 64)]);
    let mut s = Store::new(&mut r);
    // Many delete/insert cycles: tombstones are rebuilt away, keys stay found.
    for round in 0..50u64 {
        for i in 0..60u64 {
            s.update(0, &k(round * 1000 + i), Op::Count, 0).unwrap();
        }
        for i in 0..60u64 {
            if i % 2 == 0 {
                assert!(s.delete(0, &k(round * 1000 + i)).unwrap());
            }
        }
        assert!(!s.delete(0, &k(round * 1000)).unwrap());
        for i in 0..60u64 {
            let present = s.view().lookup(0, &k(round * 1000 + i)).unwrap().is_some();
            assert_eq!(present, i % 2 == 1);
        }
        s.clear(0).unwrap();
        assert_eq!(s.view().stats(0).unwrap().len, 0);
    }
    s.update(0, &k(1), Op::Count, 0).unwrap();
    s.update(0, &k(2), Op::Count, 0).unwrap();
    s.zero(0).unwrap();
    let e: Vec<_> = s
        .view()
        .entries(0)
        .unwrap()
        .map(|(k, v)| (k.to_vec(), word(v, 0)))
        .collect();
    assert_eq!(e.len(), 2);
    assert!(e.iter().all(|(_, v)| *v == 0));
}

#[test]
fn assign_maps_hold_bytes() {
    let specs = [MapSpec {
        value_size: 16,
        ..spec(MapKind::Assign, 4, 8)
    }];
    let mut r = region(&specs);
    let mut s = Store::new(&mut r);
    s.store(0, b"abcd", b"0123456789abcdef").unwrap();
    assert_eq!(s.update(0, b"abcd", Op::Set, 1), Err(MapError::WrongOp));
    assert_eq!(
        s.store(0, b"abcd", b"short"),
        Err(MapError::ValueSize {
            given: 5,
            expected: 16
        })
    );
    assert_eq!(
        s.view().lookup(0, b"abcd").unwrap(),
        Some(&b"0123456789abcdef"[..])
    );
    assert_eq!(
        s.update(0, b"abc", Op::Set, 1),
        Err(MapError::WrongOp),
        "op checked before key"
    );
}

#[test]
fn merge_adds_shards() {
    let specs = [spec(MapKind::Count, 8, 16), spec(MapKind::Max, 0, 1)];
    let mut a = region(&specs);
    let mut b = region(&specs);
    {
        let mut s = Store::new(&mut a);
        s.update(0, &k(1), Op::Count, 0).unwrap();
        s.update(1, &[], Op::Max, 5).unwrap();
    }
    {
        let mut s = Store::new(&mut b);
        s.update(0, &k(1), Op::Count, 0).unwrap();
        s.update(0, &k(2), Op::Count, 0).unwrap();
        s.update(1, &[], Op::Max, 3).unwrap();
    }
    let mut s = Store::new(&mut a);
    merge(&mut s, StoreView::new(&b)).unwrap();
    let v = s.view();
    assert_eq!(word(v.lookup(0, &k(1)).unwrap().unwrap(), 0), 2);
    assert_eq!(word(v.lookup(0, &k(2)).unwrap().unwrap(), 0), 1);
    assert_eq!(word(v.lookup(1, &[]).unwrap().unwrap(), 0), 5);
}

/// Random bytes over a valid region: no operation panics or loops.
#[test]
fn corrupted_regions_never_panic() {
    let specs = [
        spec(MapKind::Count, 8, 8),
        MapSpec {
            linear: Linear::new(0, 10, 1),
            hist_bits: 0,
            ..spec(MapKind::Lhist, 8, 8)
        },
    ];
    let clean = region(&specs);
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..2000 {
        let mut r = clean.clone();
        for _ in 0..(rnd() % 8 + 1) {
            let i = (rnd() % r.len() as u64) as usize;
            r[i] = rnd() as u8;
        }
        let mut s = Store::new(&mut r);
        for m in 0..3 {
            let key = k(rnd() % 4);
            let _ = s.update(m, &key, Op::Count, 1);
            let _ = s.update(m, &key, Op::Lhist, rnd() as i64);
            let _ = s.delete(m, &key);
            let _ = s.view().lookup(m, &key);
            let _ = s.view().entries(m).map(|e| e.count());
            let _ = s.zero(m);
        }
        let _ = crate::layout::check(&r);
    }
}

#[test]
fn layout_bounds_are_enforced() {
    use crate::layout::LayoutError;
    // A map with more keys than fit in MAX_MAP_BYTES gets as many as fit.
    let big = MapSpec {
        max_keys: crate::MAX_KEYS_PER_MAP,
        ..spec(MapKind::Hist, 4096, 1)
    };
    let cap = big.capacity().unwrap();
    assert!(cap < crate::MAX_KEYS_PER_MAP);
    assert!(cap as u64 * (big.entry_bytes().unwrap() as u64 + 8) <= crate::MAX_MAP_BYTES);
    // Too many maps, zero keys, oversized keys and regions are refused.
    assert_eq!(
        region_size(&vec![spec(MapKind::Count, 8, 1); crate::MAX_MAPS + 1]),
        Err(LayoutError::TooManyMaps(crate::MAX_MAPS + 1))
    );
    assert_eq!(
        spec(MapKind::Count, 8, 0).capacity(),
        Err(LayoutError::MaxKeys(0))
    );
    assert_eq!(
        spec(MapKind::Count, crate::MAX_KEY_BYTES + 1, 1).entry_bytes(),
        Err(LayoutError::KeySize(crate::MAX_KEY_BYTES + 1))
    );
    let many = vec![big; 8];
    assert!(matches!(region_size(&many), Err(LayoutError::TooLarge(_))));
    let mut small = vec![0u8; 16];
    assert!(matches!(
        init(&mut small, &[spec(MapKind::Count, 8, 4)]),
        Err(LayoutError::RegionTooSmall { .. })
    ));
}

/// Sums of `hist`/`lhist` entries: exact per key, zeroed by `zero`, fresh
/// for a key inserted again after `delete` (its entry is reused), added by
/// `merge`; other kinds have none.
#[test]
fn histogram_entries_keep_their_sums() {
    let specs = [
        spec(MapKind::Hist, 8, 8),
        MapSpec {
            linear: Linear::new(0, 100, 10),
            hist_bits: 0,
            ..spec(MapKind::Lhist, 8, 8)
        },
        spec(MapKind::Count, 8, 8),
    ];
    let sums = |r: &[u8], m: u32| -> Vec<(u64, Option<i64>)> {
        let mut v: Vec<(u64, Option<i64>)> = StoreView::new(r)
            .entries(m)
            .unwrap()
            .with_sums()
            .map(|(key, _, s)| (u64::from_le_bytes(key.try_into().unwrap()), s))
            .collect();
        v.sort();
        v
    };
    let mut r = region(&specs);
    let mut s = Store::new(&mut r);
    for (key, v) in [(1, 5), (1, 1000), (2, -7), (1, 3), (2, 1 << 40)] {
        s.update(0, &k(key), Op::Hist, v).unwrap();
        s.update(1, &k(key), Op::Lhist, v).unwrap();
        s.update(2, &k(key), Op::Count, 0).unwrap();
    }
    assert_eq!(sums(&r, 0), [(1, Some(1008)), (2, Some((1 << 40) - 7))]);
    assert_eq!(sums(&r, 1), sums(&r, 0));
    assert_eq!(sums(&r, 2), [(1, None), (2, None)]);
    // The buckets are where they were: the sum is outside the value.
    let h = StoreView::new(&r).lookup(0, &k(1)).unwrap().unwrap();
    assert_eq!(h.len(), 65 * 8);
    assert_eq!((word(h, 4), word(h, 11), word(h, 3)), (1, 1, 1));

    let mut other = region(&specs);
    Store::new(&mut other)
        .update(0, &k(2), Op::Hist, 10)
        .unwrap();
    Store::new(&mut other)
        .update(0, &k(3), Op::Hist, 4)
        .unwrap();
    merge(&mut Store::new(&mut other), StoreView::new(&r)).unwrap();
    assert_eq!(
        sums(&other, 0),
        [(1, Some(1008)), (2, Some((1 << 40) + 3)), (3, Some(4))]
    );

    let mut s = Store::new(&mut r);
    s.zero(0).unwrap();
    assert_eq!(sums(&r, 0), [(1, Some(0)), (2, Some(0))]);
    let mut s = Store::new(&mut r);
    s.update(1, &k(2), Op::Lhist, 1).unwrap();
    assert!(s.delete(1, &k(2)).unwrap());
    s.update(1, &k(4), Op::Lhist, 9).unwrap();
    assert_eq!(sums(&r, 1), [(1, Some(1008)), (4, Some(9))]);
}
