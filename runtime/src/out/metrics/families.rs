//! A [`Snapshot`] as metric families, before any encoding: each map one
//! family named after it, its keys labels, its values by kind —
//! `count()`/`sum()` a counter, integer assignments a gauge,
//! `avg`/`min`/`max` a gauge, `stats` a gauge per statistic (`stat` label),
//! `hist`/`lhist` a histogram with bpftrace's integer buckets (`[lo, hi)`
//! has `le = hi − 1`; only the buckets from the lowest to the highest that
//! ever held a sample, then `+Inf`; `_sum` exact) — then wprobe's own
//! counters. Values that are not numbers are left out and counted; series
//! beyond the limit are left out and counted.

use std::collections::{HashMap, HashSet};

use hostabi::layout::{Layout, word};
use hostabi::maps::{HIST_BUCKETS, MapKind};

use super::labels;
use super::snapshot::{MapSnapshot, Snapshot};

/// The series limit when `--metrics-max-series` is not given.
pub const DEFAULT_MAX_SERIES: usize = 10_000;

/// The prefix of wprobe's own families (the maps' is configurable).
const OWN: &str = "wprobe";

/// How a family is typed in the exposition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up (`_total` samples).
    Counter,
    /// A value at the time of the scrape.
    Gauge,
    /// Cumulative buckets, `_sum`, `_count`.
    Histogram,
}

/// One sample's value (a histogram's: its several samples).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A counter.
    Counter(u64),
    /// A signed gauge.
    Gauge(i64),
    /// An unsigned gauge (a `u64` value above `i64::MAX` stays exact).
    GaugeUnsigned(u64),
    /// A histogram: each bucket's upper bound (`le`, the last one `+Inf`)
    /// and its own count (not cumulative: the encoder accumulates).
    Histogram {
        /// `(le, count in that bucket)`, ending with `(+Inf, …)`.
        buckets: Vec<(f64, u64)>,
        /// Samples.
        count: u64,
        /// Their sum.
        sum: f64,
    },
}

impl Value {
    /// Samples (series) this value writes.
    pub fn samples(&self) -> usize {
        match self {
            Value::Histogram { buckets, .. } => buckets.len() + 2,
            _ => 1,
        }
    }
}

/// One labelled value of a family.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Label names and values, in order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: Value,
}

/// A metric family: name (without `_total`: the encoders add it to
/// counters), help, type, series.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The family's name.
    pub name: String,
    /// Its `# HELP` text.
    pub help: String,
    /// Its type.
    pub kind: MetricKind,
    /// Its series.
    pub series: Vec<Series>,
}

/// What shapes the families.
#[derive(Clone, Debug)]
pub struct Options {
    /// Prefix of the maps' family names (`wprobe`).
    pub prefix: String,
    /// Most series (samples) of maps and probe statistics per scrape.
    pub max_series: usize,
}

/// The families of one scrape.
#[derive(Debug, Default)]
pub struct Built {
    /// The families, maps first (in name order), then wprobe's own.
    pub families: Vec<Family>,
    /// Series this scrape left out (beyond the limit); the caller adds
    /// them to `wprobe_series_dropped_total`.
    pub dropped_series: u64,
}

/// The family names wprobe's own families take (their samples too).
fn own_names() -> Vec<String> {
    let mut v = Vec::new();
    for (n, k) in own_families() {
        v.extend(sample_names(&format!("{OWN}_{n}"), k));
    }
    v
}

fn own_families() -> [(&'static str, MetricKind); 11] {
    use MetricKind::{Counter, Gauge};
    [
        ("probe_hits", Counter),
        ("probe_runs", Counter),
        ("probe_records", Counter),
        ("probe_dropped", Counter),
        ("probe_missed", Counter),
        ("probe_fuel_exhausted", Counter),
        ("probe_traps", Counter),
        ("unattributed_dropped", Counter),
        ("map_updates_dropped", Counter),
        ("map_entries_skipped", Gauge),
        ("series_dropped", Counter),
    ]
}

/// The names a family of `kind` called `name` occupies: its own and its
/// samples'.
fn sample_names(name: &str, kind: MetricKind) -> Vec<String> {
    let mut v = vec![name.to_string()];
    match kind {
        MetricKind::Counter => v.push(format!("{name}_total")),
        MetricKind::Gauge => {}
        MetricKind::Histogram => {
            for s in ["bucket", "sum", "count"] {
                v.push(format!("{name}_{s}"));
            }
        }
    }
    v
}

/// The type a map's family has.
fn map_kind(kind: MapKind) -> MetricKind {
    match kind {
        MapKind::Count | MapKind::Sum => MetricKind::Counter,
        MapKind::Hist | MapKind::Lhist => MetricKind::Histogram,
        MapKind::Min | MapKind::Max | MapKind::Avg | MapKind::Stats | MapKind::Assign => {
            MetricKind::Gauge
        }
    }
}

/// A map's family name: a counter's map name loses a `_total` of its own
/// (the encoders add one: `@bytes_total` is `wprobe_bytes_total`, not
/// `wprobe_bytes_total_total`).
fn map_family_name(prefix: &str, m: &MapSnapshot) -> String {
    let name = m.decl.name.as_str();
    let name = match map_kind(m.decl.kind) {
        MetricKind::Counter => match name.strip_suffix("_total") {
            Some(s) if !s.is_empty() && s != "@" => s,
            _ => name,
        },
        _ => name,
    };
    labels::metric_name(prefix, name)
}

/// Why an entry was not exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Skip {
    /// Its value is not a number (a string, a stack, a tuple…).
    NotANumber,
    /// A `sum()` below zero cannot be a counter.
    Negative,
    /// Another map's family has the name.
    NameTaken,
    /// Another key of the map gives the same labels.
    Duplicate,
}

impl Skip {
    fn reason(self) -> &'static str {
        match self {
            Skip::NotANumber => "not a number",
            Skip::Negative => "negative counter",
            Skip::NameTaken => "name taken",
            Skip::Duplicate => "duplicate labels",
        }
    }
}

/// The families of snapshot `s`.
pub fn build(s: &Snapshot, o: &Options) -> Built {
    let mut taken: HashSet<String> = own_names().into_iter().collect();
    let mut skipped: HashMap<(usize, Skip), u64> = HashMap::new();
    // Maps in name order (then program order), as bpftrace prints them.
    let mut order: Vec<usize> = (0..s.maps.len()).collect();
    order.sort_by(|a, b| s.maps[*a].decl.name.cmp(&s.maps[*b].decl.name));
    // Family name -> (index in `fams`, its maps).
    let mut fams: Vec<(Family, Vec<usize>)> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for &mi in &order {
        let m = &s.maps[mi];
        let name = map_family_name(&o.prefix, m);
        let kind = map_kind(m.decl.kind);
        match by_name.get(&name) {
            Some(&fi) if fams[fi].0.kind == kind => fams[fi].1.push(mi),
            Some(_) => {
                *skipped.entry((mi, Skip::NameTaken)).or_default() += m.len() as u64;
            }
            None => {
                let names = sample_names(&name, kind);
                if names.iter().any(|n| taken.contains(n)) {
                    *skipped.entry((mi, Skip::NameTaken)).or_default() += m.len() as u64;
                    continue;
                }
                taken.extend(names);
                by_name.insert(name.clone(), fams.len());
                fams.push((
                    Family {
                        name,
                        help: format!(
                            "wprobe map {} ({}), program {}",
                            m.decl.name,
                            m.decl.kind.name(),
                            m.program
                        ),
                        kind,
                        series: Vec::new(),
                    },
                    vec![mi],
                ));
            }
        }
    }
    let mut budget = Budget {
        left: o.max_series,
        full: false,
        dropped: 0,
    };
    let mut families = Vec::new();
    for (mut fam, maps) in fams {
        let several = maps.len() > 1;
        if several {
            fam.help = format!(
                "wprobe maps {} of several programs",
                s.maps[maps[0]].decl.name
            );
        }
        let mut seen: HashSet<Vec<(String, String)>> = HashSet::new();
        for mi in maps {
            let m = &s.maps[mi];
            let names = labels::key_names(m.decl.key.len());
            for i in 0..m.len() {
                let Some(e) = m.entry(i) else { break };
                let values = match e.rendered {
                    Some(r) => r.iter().cloned().map(labels::bound).collect(),
                    None => labels::key_values(&m.decl.key, e.key),
                };
                let mut lbls: Vec<(String, String)> = Vec::with_capacity(names.len() + 2);
                if several {
                    lbls.push(("program".into(), m.program.clone()));
                }
                lbls.extend(names.iter().cloned().zip(values));
                let values = match map_values(m, e.value, e.sum) {
                    Ok(v) => v,
                    Err(why) => {
                        *skipped.entry((mi, why)).or_default() += 1;
                        continue;
                    }
                };
                for (extra, value) in values {
                    let mut l = lbls.clone();
                    if let Some(stat) = extra {
                        l.push(("stat".into(), stat.into()));
                    }
                    if !seen.insert(l.clone()) {
                        *skipped.entry((mi, Skip::Duplicate)).or_default() += 1;
                        continue;
                    }
                    if budget.take(value.samples()) {
                        fam.series.push(Series { labels: l, value });
                    }
                }
            }
        }
        families.push(fam);
    }
    families.extend(probe_families(s, &mut budget));
    families.extend(map_health(s, &skipped));
    Built {
        families,
        dropped_series: budget.dropped,
    }
}

/// The series limit, spent in order: once a series does not fit, no
/// later one is exported either (the set exported stays the same from one
/// scrape to the next while the maps only grow).
struct Budget {
    left: usize,
    full: bool,
    dropped: u64,
}

impl Budget {
    fn take(&mut self, n: usize) -> bool {
        if self.full || n > self.left {
            self.full = true;
            self.dropped += n as u64;
            return false;
        }
        self.left -= n;
        true
    }
}

/// The value(s) of one entry, each with its `stat` label (stats maps).
fn map_values(
    m: &MapSnapshot,
    v: &[u8],
    sum: Option<i64>,
) -> Result<Vec<(Option<&'static str>, Value)>, Skip> {
    let d = &m.decl;
    let one = |x| Ok(vec![(None, x)]);
    match d.kind {
        MapKind::Count => one(Value::Counter(word(v, 0))),
        MapKind::Sum => match int_of(d.value.as_ref(), v) {
            Int::Signed(x) if x < 0 => Err(Skip::Negative),
            Int::Signed(x) => one(Value::Counter(x as u64)),
            Int::Unsigned(x) => one(Value::Counter(x)),
        },
        MapKind::Min | MapKind::Max => one(gauge(int_of(d.value.as_ref(), v))),
        MapKind::Assign => match &d.value {
            Some(l @ Layout::Int { .. }) => one(gauge(int_of(Some(l), v))),
            _ => Err(Skip::NotANumber),
        },
        MapKind::Avg => one(Value::Gauge(avg(v))),
        MapKind::Stats => Ok(vec![
            (Some("count"), Value::Gauge(word(v, 0) as i64)),
            (Some("average"), Value::Gauge(avg(v))),
            (Some("total"), Value::Gauge(word(v, 8) as i64)),
        ]),
        MapKind::Hist if d.hist_bits == 0 => one(histogram(v, HIST_BUCKETS, hist_le, sum)),
        MapKind::Hist => {
            // hist(x, k): bucket i (≥ 1) ends where bucket i + 1 starts.
            let k = d.hist_bits;
            let le = move |i: usize| -> f64 {
                if i == 0 {
                    -1.0
                } else {
                    crate::out::btout::hist_low(i + 1, k) as f64 - 1.0
                }
            };
            one(histogram(v, hostabi::maps::hist_buckets(k), le, sum))
        }
        MapKind::Lhist => {
            let (min, max, step) = d.lhist.unwrap_or((0, 1, 1));
            let n = ((max - min) / step.max(1)).max(0) as usize;
            // Slots: below min, the n in-range buckets, at or above max
            // (which has no finite bound: it is in `+Inf` only).
            let le = move |i: usize| -> f64 {
                if i == 0 {
                    min as f64 - 1.0
                } else {
                    (min as i128 + i as i128 * step as i128 - 1) as f64
                }
            };
            one(histogram(v, n + 1, le, sum))
        }
    }
}

enum Int {
    Signed(i64),
    Unsigned(u64),
}

/// An integer value as the map's value layout says (as the printers read
/// it: `u64` without a layout).
fn int_of(l: Option<&Layout>, v: &[u8]) -> Int {
    match l {
        Some(Layout::Int { signed, bytes }) => {
            let x = crate::out::btout::int_value(v, *signed, *bytes);
            if *signed {
                Int::Signed(x as i64)
            } else {
                Int::Unsigned(x)
            }
        }
        _ => Int::Unsigned(word(v, 0)),
    }
}

fn gauge(i: Int) -> Value {
    match i {
        Int::Signed(x) => Value::Gauge(x),
        Int::Unsigned(x) => Value::GaugeUnsigned(x),
    }
}

/// bpftrace's average: total / count, 0 without samples.
fn avg(v: &[u8]) -> i64 {
    let (c, t) = (word(v, 0) as i64, word(v, 8) as i64);
    if c == 0 { 0 } else { t.wrapping_div(c) }
}

/// `le` of `hist` bucket `i`: `(…, 0)` → −1, `[0]` → 0, `[1]` → 1,
/// `[2^(i−2), 2^(i−1))` → 2^(i−1) − 1.
fn hist_le(i: usize) -> f64 {
    match i {
        0 => -1.0,
        1 => 0.0,
        2 => 1.0,
        _ => ((1u128 << (i - 1).min(64)) - 1) as f64,
    }
}

/// A histogram from bucket counts `v`: the first `finite` slots have an
/// upper bound (`le(i)`), any later slot counts in `+Inf` only. Buckets
/// from the lowest to the highest holding a sample are written.
fn histogram(v: &[u8], finite: usize, le: impl Fn(usize) -> f64, sum: Option<i64>) -> Value {
    let counts: Vec<u64> = (0..v.len() / 8).map(|i| word(v, i * 8)).collect();
    let count = counts.iter().fold(0u64, |a, c| a.wrapping_add(*c));
    let used = |i: &usize| counts[*i] > 0;
    let lo = (0..counts.len()).find(used);
    let hi = (0..counts.len()).rev().find(used);
    let mut buckets = Vec::new();
    let mut below = 0u64;
    if let (Some(lo), Some(hi)) = (lo, hi) {
        for (i, c) in counts
            .iter()
            .enumerate()
            .take((hi + 1).min(finite))
            .skip(lo)
        {
            buckets.push((le(i), *c));
            below = below.wrapping_add(*c);
        }
    }
    buckets.push((f64::INFINITY, count.wrapping_sub(below)));
    Value::Histogram {
        buckets,
        count,
        sum: sum.unwrap_or(0) as f64,
    }
}

/// wprobe's own counters per probe.
fn probe_families(s: &Snapshot, budget: &mut Budget) -> Vec<Family> {
    type Field = fn(&super::snapshot::ProbeCounts) -> u64;
    let fields: [(&str, &str, Field); 7] = [
        ("probe_hits", "Hits of each probe", |p| p.hits),
        ("probe_runs", "Handler runs of each probe", |p| p.runs),
        (
            "probe_records",
            "Records the handlers of each probe emitted",
            |p| p.records,
        ),
        (
            "probe_dropped",
            "Hits of each probe whose sample the kernel dropped",
            |p| p.dropped,
        ),
        (
            "probe_missed",
            "Calls of each return probe that ran no handler",
            |p| p.missed,
        ),
        (
            "probe_fuel_exhausted",
            "Handler runs of each probe that ran out of fuel",
            |p| p.fuel_exhausted,
        ),
        (
            "probe_traps",
            "Handler runs of each probe that trapped",
            |p| p.traps,
        ),
    ];
    let mut out: Vec<Family> = fields
        .iter()
        .map(|(name, help, _)| Family {
            name: format!("{OWN}_{name}"),
            help: help.to_string(),
            kind: MetricKind::Counter,
            series: Vec::new(),
        })
        .collect();
    // Probe by probe, so that a probe has all its counters or none.
    for p in &s.probes {
        if !budget.take(fields.len()) {
            continue;
        }
        for (fam, (_, _, get)) in out.iter_mut().zip(fields.iter()) {
            fam.series.push(Series {
                labels: vec![("probe".into(), labels::bound(p.probe.clone()))],
                value: Value::Counter(get(p)),
            });
        }
    }
    out.push(Family {
        name: format!("{OWN}_unattributed_dropped"),
        help: "Samples the kernel dropped that no probe could be charged with".into(),
        kind: MetricKind::Counter,
        series: vec![Series {
            labels: Vec::new(),
            value: Value::Counter(s.dropped_unattributed),
        }],
    });
    out
}

/// Per map: updates refused because it was full, and entries left out of
/// the exposition (by reason).
fn map_health(s: &Snapshot, skipped: &HashMap<(usize, Skip), u64>) -> Vec<Family> {
    let map_labels = |m: &MapSnapshot| {
        vec![
            ("map".to_string(), m.decl.name.clone()),
            ("program".to_string(), m.program.clone()),
        ]
    };
    let dropped = Family {
        name: format!("{OWN}_map_updates_dropped"),
        help: "Updates of each map refused because it was full (BPFTRACE_MAP_KEYS_MAX)".into(),
        kind: MetricKind::Counter,
        series: s
            .maps
            .iter()
            .map(|m| Series {
                labels: map_labels(m),
                value: Value::Counter(m.dropped),
            })
            .collect(),
    };
    let mut sk: Vec<(&(usize, Skip), &u64)> = skipped.iter().collect();
    sk.sort();
    let skipped = Family {
        name: format!("{OWN}_map_entries_skipped"),
        help: "Entries of each map this scrape left out, by reason".into(),
        kind: MetricKind::Gauge,
        series: sk
            .into_iter()
            .filter_map(|((mi, why), n)| {
                let mut l = map_labels(s.maps.get(*mi)?);
                l.push(("reason".into(), why.reason().into()));
                Some(Series {
                    labels: l,
                    value: Value::Gauge(*n as i64),
                })
            })
            .collect(),
    };
    vec![dropped, skipped]
}

/// The family of `wprobe_series_dropped_total`.
pub fn series_dropped(total: u64) -> Family {
    Family {
        name: format!("{OWN}_series_dropped"),
        help: "Series left out of scrapes by --metrics-max-series (each scrape adds those it \
               left out)"
            .into(),
        kind: MetricKind::Counter,
        series: vec![Series {
            labels: Vec::new(),
            value: Value::Counter(total),
        }],
    }
}

#[cfg(test)]
mod tests;
