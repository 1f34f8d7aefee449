use super::*;
use crate::out::metrics::snapshot::ProbeCounts;
use hostabi::manifest::MapDecl;

fn decl(name: &str, kind: MapKind, key: Vec<Layout>, value: Option<Layout>) -> MapDecl {
    MapDecl {
        name: name.into(),
        kind,
        key,
        value,
        max_keys: 16,
        lhist: None,
        hist_bits: 0,
    }
}

/// A snapshot of map `d` with these (key, value, sum) entries.
fn map(d: MapDecl, entries: &[(Vec<u8>, Vec<u8>, Option<i64>)]) -> MapSnapshot {
    let key_size = d.key_size();
    let value_size = entries.first().map_or(8, |e| e.1.len());
    let mut m = MapSnapshot {
        program: "-e".into(),
        decl: d,
        key_size,
        value_size,
        data: Vec::new(),
        sums: Vec::new(),
        keys: None,
        dropped: 0,
    };
    for (k, v, s) in entries {
        assert_eq!((k.len(), v.len()), (key_size, value_size));
        m.data.extend_from_slice(k);
        m.data.extend_from_slice(v);
        if let Some(s) = s {
            m.sums.push(*s);
        }
    }
    m
}

fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn opts(max: usize) -> Options {
    Options {
        prefix: "wprobe".into(),
        max_series: max,
    }
}

fn family<'a>(b: &'a Built, name: &str) -> &'a Family {
    b.families
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no family {name} in {:#?}", b.families))
}

fn lbl(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn every_map_kind_has_its_type_and_values() {
    let mut hist = vec![0u64; HIST_BUCKETS];
    // 0 once, 5 twice ([4, 8)), 1000 once ([512, 1024)).
    hist[1] = 1;
    hist[4] = 2;
    hist[11] = 1;
    let lh = MapDecl {
        lhist: Some((10, 50, 10)),
        ..decl("@lin", MapKind::Lhist, vec![], None)
    };
    // lhist(10, 50, 10): below, [10,20), [20,30), [30,40), [40,50), at or above.
    let lin = [0u64, 0, 3, 0, 1, 2];
    let s = Snapshot {
        maps: vec![
            map(
                decl("@calls", MapKind::Count, vec![Layout::Str(8)], None),
                &[
                    (b"ls\0\0\0\0\0\0".to_vec(), words(&[7]), None),
                    (b"a\"b\\\0\0\0\0".to_vec(), words(&[2]), None),
                ],
            ),
            map(
                decl("@bytes", MapKind::Hist, vec![], None),
                &[(vec![], words(&hist), Some(1010))],
            ),
            map(lh, &[(vec![], words(&lin), Some(200))]),
            map(
                decl("@lat", MapKind::Stats, vec![Layout::I64, Layout::I64], None),
                &[(words(&[1, (-2i64) as u64]), words(&[4, 10]), None)],
            ),
            map(
                decl("@low", MapKind::Min, vec![], Some(Layout::I64)),
                &[(vec![], words(&[(-9i64) as u64]), None)],
            ),
            map(
                decl("@name", MapKind::Assign, vec![], Some(Layout::Str(8))),
                &[(vec![], b"x\0\0\0\0\0\0\0".to_vec(), None)],
            ),
            map(
                decl("@", MapKind::Sum, vec![Layout::I64], Some(Layout::I64)),
                &[
                    (words(&[1]), words(&[40]), None),
                    (words(&[2]), words(&[(-1i64) as u64]), None),
                ],
            ),
            map(
                decl("@gauge", MapKind::Assign, vec![], Some(Layout::U64)),
                &[(vec![], words(&[u64::MAX]), None)],
            ),
            map(
                decl("@mean", MapKind::Avg, vec![], None),
                &[(vec![], words(&[3, 10]), None)],
            ),
        ],
        probes: vec![ProbeCounts {
            probe: "-e:f".into(),
            hits: 9,
            runs: 8,
            ..ProbeCounts::default()
        }],
        dropped_unattributed: 0,
    };
    let b = build(&s, &opts(1000));
    assert_eq!(b.dropped_series, 0);
    let calls = family(&b, "wprobe_calls");
    assert_eq!(calls.kind, MetricKind::Counter);
    assert_eq!(
        calls.series,
        vec![
            Series {
                labels: lbl(&[("key", "ls")]),
                value: Value::Counter(7)
            },
            Series {
                labels: lbl(&[("key", "a\"b\\\\")]),
                value: Value::Counter(2)
            },
        ]
    );
    let bytes = family(&b, "wprobe_bytes");
    assert_eq!(bytes.kind, MetricKind::Histogram);
    assert_eq!(
        bytes.series[0].value,
        Value::Histogram {
            buckets: (1..=11)
                .map(|i| (hist_le(i), hist[i]))
                .chain([(f64::INFINITY, 0)])
                .collect(),
            count: 4,
            sum: 1010.0,
        }
    );
    assert_eq!(
        (hist_le(0), hist_le(1), hist_le(2), hist_le(4), hist_le(11)),
        (-1.0, 0.0, 1.0, 7.0, 1023.0)
    );
    assert_eq!(hist_le(64), i64::MAX as f64);
    assert_eq!(
        family(&b, "wprobe_lin").series[0].value,
        Value::Histogram {
            // From the lowest bucket used ([20, 30): le 29) to the last in
            // range; the 2 at or above 50 are in +Inf only.
            buckets: vec![(29.0, 3), (39.0, 0), (49.0, 1), (f64::INFINITY, 2)],
            count: 6,
            sum: 200.0,
        }
    );
    assert_eq!(
        family(&b, "wprobe_lat").series,
        ["count", "average", "total"]
            .iter()
            .zip([4, 2, 10])
            .map(|(st, v)| Series {
                labels: lbl(&[("key0", "1"), ("key1", "-2"), ("stat", st)]),
                value: Value::Gauge(v),
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(family(&b, "wprobe_low").series[0].value, Value::Gauge(-9));
    assert_eq!(
        family(&b, "wprobe_gauge").series[0].value,
        Value::GaugeUnsigned(u64::MAX)
    );
    assert_eq!(family(&b, "wprobe_mean").series[0].value, Value::Gauge(3));
    // A string value and a negative sum are left out, and counted.
    assert!(family(&b, "wprobe_name").series.is_empty());
    let map = family(&b, "wprobe_map");
    assert_eq!(map.kind, MetricKind::Counter);
    assert_eq!(map.series.len(), 1);
    let skipped = family(&b, "wprobe_map_entries_skipped");
    assert_eq!(
        skipped
            .series
            .iter()
            .map(|s| (s.labels[0].1.as_str(), s.labels[2].1.as_str(), &s.value))
            .collect::<Vec<_>>(),
        [
            ("@name", "not a number", &Value::Gauge(1)),
            ("@", "negative counter", &Value::Gauge(1)),
        ]
    );
    let hits = family(&b, "wprobe_probe_hits");
    assert_eq!(hits.series[0].labels, lbl(&[("probe", "-e:f")]));
    assert_eq!(hits.series[0].value, Value::Counter(9));
    assert_eq!(
        family(&b, "wprobe_probe_runs").series[0].value,
        Value::Counter(8)
    );
}

#[test]
fn the_series_limit_keeps_the_first_series_and_counts_the_rest() {
    let entries: Vec<_> = (0..10u64)
        .map(|k| (words(&[k]), words(&[k * 10]), None))
        .collect();
    let mut hist = vec![0u64; HIST_BUCKETS];
    hist[3] = 1;
    let s = Snapshot {
        maps: vec![
            map(
                decl("@a", MapKind::Count, vec![Layout::I64], None),
                &entries,
            ),
            // Sorted after @a: 1 bucket + Inf + sum + count = 4 samples.
            map(
                decl("@b", MapKind::Hist, vec![], None),
                &[(vec![], words(&hist), Some(2))],
            ),
        ],
        probes: vec![ProbeCounts::default(); 2],
        dropped_unattributed: 0,
    };
    let b = build(&s, &opts(12));
    let a = family(&b, "wprobe_a");
    assert_eq!(a.series.len(), 10);
    assert!(family(&b, "wprobe_b").series.is_empty());
    // 4 of @b and 7 for each probe: 18.
    assert_eq!(b.dropped_series, 18);
    assert!(family(&b, "wprobe_probe_hits").series.is_empty());
    let b2 = build(&s, &opts(14));
    assert_eq!(family(&b2, "wprobe_b").series.len(), 1);
    assert_eq!(b2.dropped_series, 14);
    // wprobe's health families are never limited.
    assert_eq!(family(&b, "wprobe_map_updates_dropped").series.len(), 2);
}

#[test]
fn names_that_clash_are_left_out_and_programs_share_a_family() {
    let one = |name: &str, kind, program: &str| MapSnapshot {
        program: program.into(),
        ..map(
            decl(name, kind, vec![], None),
            &[(vec![], words(&[1]), None)],
        )
    };
    let s = Snapshot {
        maps: vec![
            one("@probe_hits", MapKind::Count, "-e"),
            one("@n", MapKind::Count, "a"),
            one("@n", MapKind::Count, "b"),
            one("@n_total", MapKind::Max, "a"),
            one("@m", MapKind::Max, "a"),
            one("@m", MapKind::Count, "b"),
        ],
        ..Snapshot::default()
    };
    let b = build(&s, &opts(100));
    // A counter's own `_total` is not doubled; a map named `@total` keeps it.
    let named = |name: &str| Snapshot {
        maps: vec![one(name, MapKind::Count, "-e")],
        ..Snapshot::default()
    };
    assert_eq!(
        build(&named("@bytes_total"), &opts(9)).families[0].name,
        "wprobe_bytes"
    );
    assert_eq!(
        build(&named("@total"), &opts(9)).families[0].name,
        "wprobe_total"
    );
    assert_eq!(
        build(&named("@_total"), &opts(9)).families[0].name,
        "wprobe__total"
    );
    // wprobe's own family keeps its name.
    assert_eq!(
        b.families
            .iter()
            .filter(|f| f.name == "wprobe_probe_hits")
            .count(),
        1
    );
    let n = family(&b, "wprobe_n");
    assert_eq!(
        n.series
            .iter()
            .map(|s| s.labels.clone())
            .collect::<Vec<_>>(),
        [lbl(&[("program", "a")]), lbl(&[("program", "b")])]
    );
    assert!(!b.families.iter().any(|f| f.name == "wprobe_n_total"));
    assert_eq!(family(&b, "wprobe_m").kind, MetricKind::Gauge);
    let skipped: Vec<(&str, &str)> = family(&b, "wprobe_map_entries_skipped")
        .series
        .iter()
        .map(|s| (s.labels[0].1.as_str(), s.labels[1].1.as_str()))
        .collect();
    assert_eq!(
        skipped,
        [("@probe_hits", "-e"), ("@n_total", "a"), ("@m", "b")]
    );
}
