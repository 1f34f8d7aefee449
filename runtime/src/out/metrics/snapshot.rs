//! What a scrape reads, and how it gets it. A [`Snapshot`] is a copy of
//! every map's entries and of the per-probe statistics, taken by the
//! session between two events, as `print` and `interval` read the maps
//! (under the in-process transport, with the target's handlers held for
//! the copy): nothing is read or counted per hit. The server thread asks
//! for one through the [`Feed`] and waits for the session's next tick; the
//! session publishes one only when asked, and a last one when the run is
//! over (served without waiting from then on).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use hostabi::manifest::MapDecl;

/// The maps and statistics of a run at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every map of every program, in program then map order.
    pub maps: Vec<MapSnapshot>,
    /// Per-probe statistics, in the session's probe order.
    pub probes: Vec<ProbeCounts>,
    /// Samples the kernel dropped that no probe could be charged with.
    pub dropped_unattributed: u64,
}

/// One map's entries.
#[derive(Clone, Debug)]
pub struct MapSnapshot {
    /// The label of the program that declares it (`-e`, a file stem).
    pub program: String,
    /// Its declaration (name, kind, key and value layouts).
    pub decl: MapDecl,
    /// Key bytes of each entry.
    pub key_size: usize,
    /// Value bytes of each entry.
    pub value_size: usize,
    /// The entries, key then value, in the map's arena order (the order
    /// keys were first inserted, deleted ones' places reused).
    pub data: Vec<u8>,
    /// The exact sum of each entry's samples (`hist` and `lhist` maps;
    /// empty for the other kinds).
    pub sums: Vec<i64>,
    /// Each entry's key fields as label values, for keys that need the
    /// session's symbolizer (stacks, `usym`); `None`: rendered from the bytes.
    pub keys: Option<Vec<Vec<String>>>,
    /// Updates refused because the map was full, since the run began.
    pub dropped: u64,
}

impl MapSnapshot {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.data
            .len()
            .checked_div(self.key_size + self.value_size)
            .unwrap_or(0)
    }

    /// Whether the map holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i`: its key bytes, value bytes, sum (histograms) and
    /// pre-rendered key fields.
    pub fn entry(&self, i: usize) -> Option<Entry<'_>> {
        let n = self.key_size + self.value_size;
        let at = i.checked_mul(n)?;
        let e = self.data.get(at..at + n)?;
        Some(Entry {
            key: &e[..self.key_size],
            value: &e[self.key_size..],
            sum: self.sums.get(i).copied(),
            rendered: self.keys.as_ref().and_then(|k| k.get(i)).map(Vec::as_slice),
        })
    }
}

/// One entry of a [`MapSnapshot`].
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    /// Key bytes.
    pub key: &'a [u8],
    /// Value bytes.
    pub value: &'a [u8],
    /// Sum of the samples (histograms).
    pub sum: Option<i64>,
    /// Key fields rendered by the session.
    pub rendered: Option<&'a [String]>,
}

/// One probe's counters (see `session::ProbeStats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeCounts {
    /// The probe's label, as the summary prints it.
    pub probe: String,
    /// Hits seen.
    pub hits: u64,
    /// Handler runs.
    pub runs: u64,
    /// Records emitted.
    pub records: u64,
    /// Hits the kernel dropped (perf ring full).
    pub dropped: u64,
    /// Return probes: calls that ran no handler.
    pub missed: u64,
    /// Runs that ran out of fuel.
    pub fuel_exhausted: u64,
    /// Runs that trapped.
    pub traps: u64,
}

/// The hand-over between the session (which takes snapshots) and the
/// server thread (which asks for them).
#[derive(Debug, Default)]
pub struct Feed {
    /// A scrape waits for a snapshot taken after it began.
    wanted: AtomicBool,
    state: Mutex<FeedState>,
    published: Condvar,
}

#[derive(Debug, Default)]
struct FeedState {
    latest: Option<Arc<Snapshot>>,
    /// Snapshots published so far.
    generation: u64,
    /// The run is over: `latest` is final.
    finished: bool,
}

impl Feed {
    /// A new feed, shared by the session and the server.
    pub fn new() -> Arc<Feed> {
        Arc::new(Feed::default())
    }

    /// For the session: whether a scrape waits for a snapshot (and clears
    /// the request: the caller takes one now).
    pub fn take_request(&self) -> bool {
        self.wanted.swap(false, Ordering::AcqRel)
    }

    /// For the session: hands over a snapshot; `last`: the run is over and
    /// this one is served from now on without waiting.
    pub fn publish(&self, s: Snapshot, last: bool) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.finished {
            return;
        }
        st.latest = Some(Arc::new(s));
        st.generation += 1;
        st.finished = last;
        drop(st);
        self.published.notify_all();
    }

    /// For the server: a snapshot taken after this call, waiting for it at
    /// most `max` (the session takes it at its next tick); the latest one
    /// when the wait ran out, or when the run is over. `None` before the
    /// first snapshot.
    pub fn fresh(&self, max: Duration) -> Option<Arc<Snapshot>> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.finished {
            return st.latest.clone();
        }
        let since = st.generation;
        self.wanted.store(true, Ordering::Release);
        let (st, _) = self
            .published
            .wait_timeout_while(st, max, |s| s.generation == since && !s.finished)
            .unwrap_or_else(|e| e.into_inner());
        st.latest.clone()
    }

    /// Whether the final snapshot was published.
    pub fn finished(&self) -> bool {
        self.state.lock().map(|s| s.finished).unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(hits: u64) -> Snapshot {
        Snapshot {
            probes: vec![ProbeCounts {
                probe: "p".into(),
                hits,
                ..ProbeCounts::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_scrape_waits_for_the_next_snapshot_then_the_final_one_is_served_at_once() {
        let feed = Feed::new();
        assert!(!feed.take_request());
        // Nobody publishes: the wait runs out, there is nothing yet.
        assert!(feed.fresh(Duration::from_millis(10)).is_none());
        assert!(feed.take_request());
        feed.publish(snap(1), false);
        let f = feed.clone();
        let session = std::thread::spawn(move || {
            while !f.take_request() {
                std::thread::sleep(Duration::from_millis(1));
            }
            f.publish(snap(2), false);
        });
        let s = feed.fresh(Duration::from_secs(10)).unwrap();
        assert_eq!(s.probes[0].hits, 2);
        session.join().unwrap();
        feed.publish(snap(3), true);
        assert!(feed.finished());
        // Final: no wait, no request, later publications ignored.
        let t0 = std::time::Instant::now();
        assert_eq!(
            feed.fresh(Duration::from_secs(10)).unwrap().probes[0].hits,
            3
        );
        assert!(t0.elapsed() < Duration::from_secs(1));
        assert!(!feed.take_request());
        feed.publish(snap(4), false);
        assert_eq!(feed.fresh(Duration::ZERO).unwrap().probes[0].hits, 3);
    }
}
