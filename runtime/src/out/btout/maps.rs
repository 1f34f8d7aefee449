//! Printing a map as bpftrace's `print_map`, `print_map_hist` and
//! `print_map_stats` do: entries read out of the region, sorted, limited
//! to the last `top`, values divided by `div`, rendered as text lines or
//! one JSON line.

use super::{Mode, json_escape, value_json, value_text};
use crate::out::symbolize::Symbolizer;
use hostabi::layout::{Layout, word};
use hostabi::manifest::MapDecl;
use hostabi::maps::MapKind;
use mapstore::StoreView;
use std::cmp::Ordering;

/// What printing needs: the declarations and the region.
pub struct MapOutput<'a> {
    /// The manifest's maps.
    pub decls: &'a [MapDecl],
    /// The region.
    pub view: StoreView<'a>,
}

/// bpftrace's `sort_by_key`: stable sorts from the last key field to the
/// first; 8-byte integers compare as u64, strings as `strncmp`; other
/// fields do not take part.
fn key_cmp(fields: &[Layout], a: &[u8], b: &[u8]) -> Ordering {
    let mut off = 0;
    for f in fields {
        let sz = f.size();
        let (x, y) = (
            a.get(off..off + sz).unwrap_or(&[]),
            b.get(off..off + sz).unwrap_or(&[]),
        );
        let o = match f {
            Layout::Int { .. } | Layout::Ptr | Layout::Enum(_) => word(x, 0).cmp(&word(y, 0)),
            Layout::Str(_) => super::cstr(x).cmp(super::cstr(y)),
            _ => Ordering::Equal,
        };
        if o != Ordering::Equal {
            return o;
        }
        off += sz;
    }
    Ordering::Equal
}

/// The scalar a count/sum/min/max/int-assign entry sorts and prints by.
fn scalar(d: &MapDecl, v: &[u8]) -> i128 {
    let w = word(v, 0);
    match (&d.kind, &d.value) {
        (MapKind::Count, _) => w as i128,
        (_, Some(Layout::Int { signed, bytes })) => {
            let x = super::int_value(v, *signed, *bytes);
            if *signed { x as i64 as i128 } else { x as i128 }
        }
        _ => w as i128,
    }
}

fn div_text(x: i128, div: u64) -> String {
    (x / div.max(1) as i128).to_string()
}

fn avg(v: &[u8]) -> i64 {
    let (c, t) = (word(v, 0) as i64, word(v, 8) as i64);
    if c == 0 { 0 } else { t.wrapping_div(c) }
}

fn lhist_label(n: i64) -> String {
    const K: i64 = 1024;
    const M: i64 = 1048576;
    if n == 0 {
        "0".into()
    } else if n % M == 0 {
        format!("{}M", n / M)
    } else if n % K == 0 {
        format!("{}K", n / K)
    } else {
        n.to_string()
    }
}

fn bar_line(out: &mut String, header: &str, count_shown: u64, count: u64, max: u64) {
    let width = if max == 0 {
        0
    } else {
        (count as f32 / max as f32 * 52.0) as usize
    };
    out.push_str(&format!(
        "{header:<16}{count_shown:>8} |{:<52}|\n",
        "@".repeat(width.min(52))
    ));
}

fn counts(v: &[u8]) -> Vec<u64> {
    (0..v.len() / 8).map(|i| word(v, i * 8)).collect()
}

/// The first and the last bucket of `c` with a count; `None` when all are
/// empty.
fn used(c: &[u64]) -> Option<(usize, usize)> {
    Some((
        c.iter().position(|x| *x > 0)?,
        c.iter().rposition(|x| *x > 0)?,
    ))
}

/// bpftrace's `hist_index_label`: the first value of bucket `index - 1`'s
/// successor in a `hist(x, k)` histogram (index ≥ 2^k), with a K, M, G, T,
/// P or E suffix for the largest power of 1024 in it.
fn hist_index_label(index: usize, k: u8) -> String {
    let n = 1u64 << k;
    let interval = index as u64 & (n - 1);
    let mut power = ((index >> k) as u32).saturating_sub(1);
    let decade = (power / 10).min(6);
    power -= 10 * decade;
    let suffix = ["", "K", "M", "G", "T", "P", "E"][decade as usize];
    format!(
        "{}{suffix}",
        (1u64 << power.min(63)).wrapping_mul(n + interval)
    )
}

/// The lowest value of bucket `i` (≥ 1) of a `hist(x, k)` histogram.
pub fn hist_low(i: usize, k: u8) -> u64 {
    let i = i as u64;
    if i <= 2 << k {
        return i - 1;
    }
    let n = 1u64 << k;
    let power = ((i - 1) >> k) - 1;
    let bucket = (i - 1) & (n - 1);
    (1u64 << power.min(63)).wrapping_mul(n + bucket)
}

/// The used buckets of a histogram value `v` as bpftrace prints them: in
/// text, a bar line each, with the header `header` gives of its index
/// and its count divided by `div`.
fn buckets_text(v: &[u8], div: u64, header: impl Fn(usize) -> String) -> String {
    let c = counts(v);
    let Some((lo, hi)) = used(&c) else {
        return String::new();
    };
    let max = c.iter().copied().max().unwrap_or(0);
    let mut s = String::new();
    for (i, &n) in c.iter().enumerate().take(hi + 1).skip(lo) {
        bar_line(&mut s, &header(i), n / div.max(1), n, max);
    }
    s
}

/// The used buckets of a histogram value `v` in JSON: an object each,
/// the bounds `range` gives of its index (`"min": …, "max": …, `), then
/// its count divided by `div`.
fn buckets_json(v: &[u8], div: u64, range: impl Fn(usize) -> String) -> String {
    let c = counts(v);
    let Some((lo, hi)) = used(&c) else {
        return "[]".into();
    };
    let mut parts = Vec::new();
    for (i, &n) in c.iter().enumerate().take(hi + 1).skip(lo) {
        parts.push(format!("{{{}\"count\": {}}}", range(i), n / div.max(1)));
    }
    format!("[{}]", parts.join(", "))
}

/// Text of a `hist` value (`k` of `hist(x, k)`; bpftrace's `hist_to_str`).
fn hist_text(v: &[u8], div: u64, k: u8) -> String {
    buckets_text(v, div, |i| {
        if i == 0 {
            "(..., 0)".to_string()
        } else if i <= 2 << k {
            format!("[{}]", i - 1)
        } else {
            format!(
                "[{}, {})",
                hist_index_label(i - 1, k),
                hist_index_label(i, k)
            )
        }
    })
}

/// JSON of a `hist` value (bpftrace's: `min`/`max` of each bucket).
fn hist_json(v: &[u8], div: u64, k: u8) -> String {
    buckets_json(v, div, |i| {
        if i == 0 {
            "\"max\": -1, ".to_string()
        } else {
            let low = hist_low(i, k);
            let high = if i <= 2 << k {
                low
            } else {
                hist_low(i + 1, k).wrapping_sub(1)
            };
            format!("\"min\": {low}, \"max\": {high}, ")
        }
    })
}

fn lhist_text(v: &[u8], (min, max, step): (i64, i64, i64)) -> String {
    let buckets = ((max - min) / step.max(1)) as usize;
    buckets_text(v, 1, |i| {
        if i == 0 {
            format!("(..., {})", lhist_label(min))
        } else if i == buckets + 1 {
            format!("[{}, ...)", lhist_label(max))
        } else {
            format!(
                "[{}, {})",
                lhist_label((i as i64 - 1) * step + min),
                lhist_label(i as i64 * step + min)
            )
        }
    })
}

fn lhist_json(v: &[u8], (min, max, step): (i64, i64, i64)) -> String {
    let buckets = ((max - min) / step.max(1)) as usize;
    buckets_json(v, 1, |i| {
        if i == 0 {
            format!("\"max\": {}, ", min - 1)
        } else if i == buckets + 1 {
            format!("\"min\": {max}, ")
        } else {
            let low = (i as i64 - 1) * step + min;
            format!("\"min\": {low}, \"max\": {}, ", i as i64 * step + min - 1)
        }
    })
}

/// Appends map `index` to `out` (nothing for an unknown index).
pub fn print_map(
    out: &mut Vec<u8>,
    mode: Mode,
    m: &MapOutput<'_>,
    index: u32,
    top: u64,
    div: u64,
    sym: &mut Symbolizer,
) {
    let Some(d) = m.decls.get(index as usize) else {
        return;
    };
    let Ok(entries) = m.view.entries(index) else {
        return;
    };
    print_entries(out, mode, d, entries.collect(), top, div, sym);
}

/// Entries of a PRINT_MAP event's snapshot (see `hostfns`'s `emit_event`),
/// or `None` when the event carries none.
pub fn snapshot_entries(data: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    let head = data.get(16..24)?;
    let k = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let v = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    let body = &data[24..];
    if k + v == 0 {
        return Some(Vec::new());
    }
    Some(
        body.chunks_exact(k + v)
            .map(|e| (&e[..k], &e[k..]))
            .collect(),
    )
}

/// Appends the map `d` with these entries.
pub fn print_entries(
    out: &mut Vec<u8>,
    mode: Mode,
    d: &MapDecl,
    mut v: Vec<(&[u8], &[u8])>,
    top: u64,
    div: u64,
    sym: &mut Symbolizer,
) {
    let keyed = !d.key.is_empty();
    // Raw key bytes first (bpftrace's std::map for hist and stats maps; a
    // deterministic start for the stable sorts of the others).
    v.sort_by(|a, b| a.0.cmp(b.0));
    match d.kind {
        MapKind::Count | MapKind::Sum | MapKind::Min | MapKind::Max => {
            v.sort_by(|a, b| key_cmp(&d.key, a.0, b.0));
            v.sort_by_key(|e| scalar(d, e.1));
        }
        MapKind::Assign if matches!(d.value, Some(Layout::Int { .. } | Layout::Ptr)) => {
            v.sort_by(|a, b| key_cmp(&d.key, a.0, b.0));
            v.sort_by_key(|e| scalar(d, e.1));
        }
        MapKind::Assign => v.sort_by(|a, b| key_cmp(&d.key, a.0, b.0)),
        MapKind::Hist | MapKind::Lhist => v.sort_by_key(|e| counts(e.1).iter().sum::<u64>()),
        MapKind::Avg | MapKind::Stats => v.sort_by_key(|e| avg(e.1)),
    }
    if top > 0 && v.len() as u64 > top {
        v.drain(..v.len() - top as usize);
    }
    let vlayout = d.value.clone().unwrap_or(Layout::U64);
    let key_text = |k: &[u8], sym: &mut Symbolizer| -> String {
        let mut parts = Vec::new();
        let mut off = 0;
        for f in &d.key {
            let sz = f.size();
            parts.push(value_text(f, k.get(off..).unwrap_or(&[]), true, sym));
            off += sz;
        }
        parts.join(", ")
    };
    let lh = d.lhist.unwrap_or((0, 1, 1));
    let value_of = |e: &(&[u8], &[u8]), json: bool, sym: &mut Symbolizer| -> String {
        let val = e.1;
        match d.kind {
            MapKind::Count | MapKind::Sum | MapKind::Min | MapKind::Max => {
                div_text(scalar(d, val), div)
            }
            MapKind::Assign => match &vlayout {
                Layout::Int { .. } => div_text(scalar(d, val), div),
                l if json => value_json(l, val, sym),
                l => value_text(l, val, false, sym),
            },
            MapKind::Avg => (avg(val) / div.max(1) as i64).to_string(),
            MapKind::Stats => {
                let (c, t) = (word(val, 0) as i64, word(val, 8) as i64);
                if json {
                    format!(
                        "{{\"count\": {c}, \"average\": {}, \"total\": {t}}}",
                        avg(val)
                    )
                } else {
                    format!("count {c}, average {}, total {t}", avg(val))
                }
            }
            MapKind::Hist if json => hist_json(val, div, d.hist_bits),
            MapKind::Hist => hist_text(val, div, d.hist_bits),
            MapKind::Lhist if json => lhist_json(val, lh),
            MapKind::Lhist => lhist_text(val, lh),
        }
    };
    match mode {
        Mode::Text => {
            let hist = matches!(d.kind, MapKind::Hist | MapKind::Lhist);
            let stack_value = matches!(
                vlayout,
                Layout::Ustack(_) | Layout::UstackAs(..) | Layout::Usym
            ) && d.kind == MapKind::Assign;
            let mut elems = Vec::new();
            for e in &v {
                let mut s = d.name.clone();
                if keyed {
                    s.push('[');
                    s.push_str(&key_text(e.0, sym));
                    s.push(']');
                }
                // bpftrace 0.23's `map_key_val` (0.17 wrote `: ` before the newline).
                s.push_str(if hist { ":\n" } else { ": " });
                s.push_str(&value_of(e, false, sym));
                elems.push(s);
            }
            let delim = if stack_value { "" } else { "\n" };
            let mut text = elems.join(delim);
            text.push('\n');
            if matches!(d.kind, MapKind::Avg | MapKind::Stats) {
                text.push('\n');
            }
            out.extend_from_slice(text.as_bytes());
        }
        Mode::Json => {
            if v.is_empty() {
                return;
            }
            let ty = match d.kind {
                MapKind::Hist | MapKind::Lhist => "hist",
                MapKind::Avg | MapKind::Stats => "stats",
                _ => "map",
            };
            let mut s = format!("{{\"type\": \"{ty}\", \"data\": {{\"");
            json_escape(&mut s, d.name.as_bytes());
            s.push_str("\": ");
            if keyed {
                s.push('{');
            }
            let mut elems = Vec::new();
            for e in &v {
                let val = value_of(e, true, sym);
                if keyed {
                    let mut parts = Vec::new();
                    let mut off = 0;
                    for f in &d.key {
                        let sz = f.size();
                        parts.push(value_text(f, e.0.get(off..).unwrap_or(&[]), true, sym));
                        off += sz;
                    }
                    let mut k = String::from("\"");
                    json_escape(&mut k, parts.join(",").as_bytes());
                    k.push('"');
                    elems.push(format!("{k}: {val}"));
                } else {
                    elems.push(val);
                }
            }
            s.push_str(&elems.join(", "));
            if keyed {
                s.push('}');
            }
            s.push_str("}}\n");
            out.extend_from_slice(s.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hist_lines_match_bpftrace() {
        // values 0, 1, 2, 3, 4..7 (x4), 8..15 (x2): the output of bpftrace 0.17.
        let mut v = vec![0u8; 65 * 8];
        for (b, n) in [(1, 1u64), (2, 1), (3, 2), (4, 4), (5, 2)] {
            v[b * 8..b * 8 + 8].copy_from_slice(&n.to_le_bytes());
        }
        assert_eq!(
            hist_text(&v, 1, 0),
            "[0]                    1 |@@@@@@@@@@@@@                                       |\n\
             [1]                    1 |@@@@@@@@@@@@@                                       |\n\
             [2, 4)                 2 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n\
             [4, 8)                 4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
             [8, 16)                2 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n"
        );
        assert_eq!(hist_index_label(11, 0), "1K");
        assert_eq!(hist_index_label(22, 0), "2M");
        // hist(x, 2): bucket 0b11011 starts at 224 (bpftrace's example).
        assert_eq!(hist_index_label(27, 2), "224");
        assert_eq!(lhist_label(2048), "2K");
        assert_eq!(lhist_label(3 * 1048576), "3M");
        assert_eq!(lhist_label(1000), "1000");
    }
}
