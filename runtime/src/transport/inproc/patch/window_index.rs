//! The sites' windows by address: which windows a new one could overlap,
//! found without a scan of all (arming 30,000 sites scanned them for each:
//! seconds) and without a search tree's walk from its root for each of
//! the tens of thousands of windows a large program checks (python3.11's
//! 21,000: a `BTreeSet`'s range was a tenth of the planner's
//! instructions once its plans are kept).
//!
//! Windows are kept in buckets of [`BUCKET`] bytes by their first byte's
//! address; the windows that may meet `lo..hi` start in
//! `lo - longest..hi`, where `longest` is the longest window indexed: a
//! few buckets' lookups.

use rustc_hash::FxHashMap;

/// The bytes of address space one bucket holds the windows of.
const BUCKET: u64 = 64;

/// `(window address, site index)` of every site with a window, by bucket.
#[derive(Clone, Debug, Default)]
pub(super) struct WindowIndex {
    buckets: FxHashMap<u64, Vec<(u64, usize)>>,
    /// The longest window ever indexed.
    longest: u64,
}

impl WindowIndex {
    /// Indexes site `i`'s window of `len` bytes at `addr`.
    pub(super) fn insert(&mut self, addr: u64, len: usize, i: usize) {
        self.longest = self.longest.max(len as u64);
        let b = self.buckets.entry(addr / BUCKET).or_default();
        if !b.contains(&(addr, i)) {
            b.push((addr, i));
        }
    }

    /// Forgets site `i`'s window at `addr` (nothing when not indexed).
    pub(super) fn remove(&mut self, addr: u64, i: usize) {
        if let Some(b) = self.buckets.get_mut(&(addr / BUCKET)) {
            b.retain(|&e| e != (addr, i));
        }
    }

    /// The windows that start in `lo..hi`: `(address, site index)`, in no
    /// order.
    pub(super) fn starting_in(&self, lo: u64, hi: u64) -> impl Iterator<Item = (u64, usize)> + '_ {
        // The buckets of `lo..hi` (none when it is empty).
        let last = if lo < hi {
            (hi - 1) / BUCKET + 1
        } else {
            lo / BUCKET
        };
        (lo / BUCKET..last)
            .filter_map(|b| self.buckets.get(&b))
            .flatten()
            .copied()
            .filter(move |&(a, _)| a >= lo && a < hi)
    }

    /// The windows that may meet `lo..hi` (those starting in
    /// `lo - longest..hi`), in no order: the caller checks each's extent.
    pub(super) fn near(&self, lo: u64, hi: u64) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.starting_in(lo.saturating_sub(self.longest), hi)
    }

    /// [`WindowIndex::near`] in address order (then by site index), as a
    /// refusal names the first.
    pub(super) fn near_sorted(&self, lo: u64, hi: u64) -> Vec<(u64, usize)> {
        let mut v: Vec<(u64, usize)> = self.near(lo, hi).collect();
        v.sort_unstable();
        v
    }
}

/// The caves of near jumps taken (or reserved by a window checked), each
/// [`CAVE_LEN`](agent_loader::nearjump::CAVE_LEN) bytes, by address: a
/// [`WindowIndex`] of windows that belong to no site.
#[derive(Clone, Debug, Default)]
pub(super) struct CaveSet {
    index: WindowIndex,
    count: usize,
}

impl CaveSet {
    const LEN: usize = agent_loader::nearjump::CAVE_LEN;

    /// Adds the cave at `addr`.
    pub(super) fn insert(&mut self, addr: u64) {
        if !self.contains(&addr) {
            self.index.insert(addr, Self::LEN, 0);
            self.count += 1;
        }
    }

    /// Removes the cave at `addr` (nothing when there is none).
    pub(super) fn remove(&mut self, addr: &u64) {
        if self.contains(addr) {
            self.index.remove(*addr, 0);
            self.count -= 1;
        }
    }

    /// Whether a cave starts at `addr`.
    pub(super) fn contains(&self, addr: &u64) -> bool {
        self.index
            .starting_in(*addr, addr.saturating_add(1))
            .next()
            .is_some()
    }

    /// Whether no cave is taken.
    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The lowest cave meeting `lo..hi`.
    pub(super) fn meeting(&self, lo: u64, hi: u64) -> Option<u64> {
        self.index
            .near(lo, hi)
            .map(|(a, _)| a)
            .filter(|&a| a + Self::LEN as u64 > lo)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the index finds is what a scan of every window finds, for
    /// windows of every length across bucket bounds, before and after
    /// half of them are removed.
    #[test]
    fn finds_what_a_scan_finds() {
        let mut index = WindowIndex::default();
        // By site index: its window's address and length, and whether it
        // is indexed.
        let mut windows: Vec<(u64, usize, bool)> = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..2000 {
            let addr = 0x40_0000 + next() % 0x8000;
            let len = [1, 2, 5, 5, 5, 8, 14, 40, 130][(next() % 9) as usize];
            index.insert(addr, len, i);
            windows.push((addr, len, true));
        }
        for round in 0..2 {
            for _ in 0..3000 {
                let lo = 0x40_0000 + next() % 0x8100;
                let hi = lo + 1 + next() % 200;
                let scan = |keep: &dyn Fn(u64, usize) -> bool| {
                    let mut v: Vec<(u64, usize)> = windows
                        .iter()
                        .enumerate()
                        .filter(|&(_, &(a, l, live))| live && keep(a, l))
                        .map(|(i, &(a, _, _))| (a, i))
                        .collect();
                    v.sort_unstable();
                    v
                };
                let meeting: Vec<(u64, usize)> = index
                    .near_sorted(lo, hi)
                    .into_iter()
                    .filter(|&(a, i)| a < hi && lo < a + windows[i].1 as u64)
                    .collect();
                assert_eq!(
                    meeting,
                    scan(&|a, l| a < hi && lo < a + l as u64),
                    "round {round}, {lo:#x}..{hi:#x}"
                );
                let mut starting: Vec<(u64, usize)> = index.starting_in(lo, hi).collect();
                starting.sort_unstable();
                assert_eq!(starting, scan(&|a, _| (lo..hi).contains(&a)));
            }
            for (i, w) in windows.iter_mut().enumerate().step_by(2) {
                index.remove(w.0, i);
                w.2 = false;
            }
        }
    }

    /// The caves meeting a range are those a scan finds, the lowest first.
    #[test]
    fn caves_meeting_are_a_scans() {
        let mut caves = CaveSet::default();
        let addrs: Vec<u64> = (0..400u64).map(|k| 0x1000 + k * 37 % 3000).collect();
        for &a in &addrs {
            caves.insert(a);
        }
        for &a in addrs.iter().step_by(3) {
            caves.remove(&a);
        }
        let live: Vec<u64> = {
            let mut v: Vec<u64> = addrs
                .iter()
                .copied()
                .filter(|a| caves.contains(a))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        assert!(!caves.is_empty());
        for lo in 0xff0..0x1c00u64 {
            for len in [1u64, 2, 5, 9] {
                let hi = lo + len;
                let want = live.iter().copied().find(|&c| c < hi && lo < c + 5);
                assert_eq!(caves.meeting(lo, hi), want, "{lo:#x}..{hi:#x}");
            }
        }
        for a in live {
            caves.remove(&a);
        }
        assert!(caves.is_empty());
    }
}
