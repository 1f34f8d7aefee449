//! The session's side of `--metrics` (see `crate::out::metrics`): at a tick,
//! when a scrape is waiting, a snapshot of the maps and of the per-probe
//! counters is published; nothing happens per hit. Maps that live in the
//! target (the in-process transport) are read the way interval probes read
//! them: the target's handlers held for the copy.

use std::collections::HashMap;
use std::sync::Arc;

use hostabi::layout::Layout;

use super::Session;
use crate::out::metrics::labels;
use crate::out::metrics::snapshot::{Feed, MapSnapshot, ProbeCounts, Snapshot};
use crate::transport::Transport;

/// Keys rendered with the symbolizer, by (program, map, key bytes): a
/// stack is symbolized once, not at every scrape. Emptied when it holds
/// more than [`KEY_CACHE_MAX`] keys.
pub(super) type KeyCache = HashMap<(usize, u32, Vec<u8>), Vec<String>>;

/// The most keys [`KeyCache`] holds.
const KEY_CACHE_MAX: usize = 1 << 16;

impl Session {
    /// Publishes snapshots to `feed` when scrapes ask (at ticks: see
    /// [`Session::transport_tick`]).
    pub fn set_metrics(&mut self, feed: Arc<Feed>) {
        self.metrics = Some(feed);
    }

    /// The tick the transport should deliver: the interval probes' and,
    /// with `--metrics`, at most [`crate::out::metrics::TICK`].
    pub fn transport_tick(&self) -> Option<std::time::Duration> {
        let m = self.metrics.as_ref().map(|_| crate::out::metrics::TICK);
        match (self.tick_period(), m) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// At a tick of transport `t`: a snapshot for the scrape waiting, if any.
    pub(super) fn metrics_tick(&mut self, t: &mut dyn Transport) {
        let Some(feed) = self.metrics.clone() else {
            return;
        };
        if !feed.take_request() {
            return;
        }
        if let Some(t) = t.in_target()
            && self.has_maps()
            && !self.pull_maps_now(t)
        {
            // The scrape is served the previous snapshot when its wait ends.
            return;
        }
        feed.publish(self.metrics_snapshot(), false);
    }

    /// For runs without a transport (`BEGIN`/`interval` programs): the
    /// same, between their ticks.
    pub fn metrics_tick_idle(&mut self) {
        if let Some(feed) = self.metrics.clone()
            && feed.take_request()
        {
            feed.publish(self.metrics_snapshot(), false);
        }
    }

    /// The run is over (maps read back from the target, `END` probes run):
    /// the final values, served from now on without waiting.
    pub fn publish_final_metrics(&mut self) {
        if let Some(feed) = self.metrics.clone() {
            feed.publish(self.metrics_snapshot(), true);
        }
    }

    /// The maps and counters now.
    fn metrics_snapshot(&mut self) -> Snapshot {
        let mut maps = Vec::new();
        let data = self.runner.store.data();
        for (prog, region) in data.services.maps.iter().enumerate() {
            let Some(region) = region else { continue };
            let view = region.view();
            let program = self
                .program_wasm
                .get(prog)
                .map_or_else(|| prog.to_string(), |p| p.0.clone());
            for (i, decl) in region.decls.iter().enumerate() {
                let i = i as u32;
                let (Ok((k, v)), Ok(entries)) = (view.sizes(i), view.entries(i)) else {
                    continue;
                };
                let (k, v) = (k as usize, v as usize);
                let hist = matches!(
                    decl.kind,
                    hostabi::maps::MapKind::Hist | hostabi::maps::MapKind::Lhist
                );
                let len = view.stats(i).map_or(0, |s| s.len as usize);
                let mut m = MapSnapshot {
                    program: program.clone(),
                    decl: decl.clone(),
                    key_size: k,
                    value_size: v,
                    data: Vec::with_capacity(len * (k + v)),
                    sums: Vec::with_capacity(if hist { len } else { 0 }),
                    keys: None,
                    dropped: view.stats(i).map_or(0, |s| s.dropped),
                };
                // Keys with stacks or code addresses are rendered here, with
                // the mappings the session noted while the processes lived.
                let symbols = decl.key.iter().any(labels::needs_symbols);
                let mut rendered = Vec::new();
                for (key, value, sum) in entries.with_sums() {
                    m.data.extend_from_slice(key);
                    m.data.extend_from_slice(value);
                    if hist {
                        m.sums.push(sum.unwrap_or(0));
                    }
                    if symbols {
                        let cache = &mut self.metrics_keys;
                        if cache.len() >= KEY_CACHE_MAX {
                            cache.clear();
                        }
                        let fields = cache
                            .entry((prog, i, key.to_vec()))
                            .or_insert_with(|| symbolized_key(&decl.key, key, &mut self.bt.sym));
                        rendered.push(fields.clone());
                    }
                }
                if symbols {
                    m.keys = Some(rendered);
                }
                maps.push(m);
            }
        }
        let probes = self
            .probes
            .iter()
            .map(|p| ProbeCounts {
                probe: p.label.clone(),
                hits: p.stats.hits,
                runs: p.stats.runs,
                records: p.stats.records,
                dropped: p.stats.dropped,
                missed: p.stats.missed,
                fuel_exhausted: p.stats.fuel_exhausted,
                traps: p.stats.traps,
            })
            .collect();
        Snapshot {
            maps,
            probes,
            dropped_unattributed: self.dropped_unattributed,
        }
    }
}

/// Each field of `key` as [`symbolized`] renders it.
fn symbolized_key(
    fields: &[Layout],
    key: &[u8],
    sym: &mut crate::out::symbolize::Symbolizer,
) -> Vec<String> {
    let mut out = Vec::with_capacity(fields.len());
    let mut off = 0;
    for f in fields {
        out.push(symbolized(f, key.get(off..).unwrap_or(&[]), sym));
        off += f.size();
    }
    out
}

/// A key field as the exit output prints it, a stack's frames joined by
/// `;` (innermost first, as bpftrace lists them).
fn symbolized(f: &Layout, b: &[u8], sym: &mut crate::out::symbolize::Symbolizer) -> String {
    let text = crate::out::btout::value_text(f, b, true, sym);
    match f {
        Layout::Ustack(_) => text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(";"),
        _ => text,
    }
}
