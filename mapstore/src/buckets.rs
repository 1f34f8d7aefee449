//! Histogram bucket functions, bpftrace's: the store uses them to count a
//! sample, the printers to label buckets. Pure arithmetic, no panics.

use crate::{HIST_BUCKETS, MAX_LHIST_BUCKETS};

/// The `hist` bucket of `v`: 0 for negative values, 1 for 0, 2 + floor(log2 v)
/// otherwise (bucket 2 is `[1]`, bucket 3 is `[2, 4)`, ...).
///
/// bpftrace 0.17 computes the logarithm with five shift steps (16, 8, 4, 2, 1)
/// and so puts every value of 2^32 or more in buckets up to 33; this uses six
/// (32 first), which agrees below 2^32 and is right above it.
pub fn hist_bucket(v: i64) -> usize {
    if v < 0 {
        return 0;
    }
    if v == 0 {
        return 1;
    }
    let idx = 2 + (63 - (v as u64).leading_zeros() as usize);
    idx.min(HIST_BUCKETS - 1)
}

/// Parameters of a linear histogram, validated: `step > 0`, `min < max`,
/// at most [`MAX_LHIST_BUCKETS`] in-range buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Linear {
    /// Lower bound of the first in-range bucket.
    pub min: i64,
    /// Upper bound of the range (values >= max go to the last bucket).
    pub max: i64,
    /// Bucket width.
    pub step: i64,
}

impl Linear {
    /// Checks the parameters as bpftrace does; `None` when they are invalid.
    pub fn new(min: i64, max: i64, step: i64) -> Option<Linear> {
        if step <= 0 || min < 0 || max <= min {
            return None;
        }
        let buckets = (max - min) / step;
        if buckets > MAX_LHIST_BUCKETS {
            return None;
        }
        Some(Linear { min, max, step })
    }

    /// In-range buckets, (max - min) / step.
    pub fn buckets(&self) -> usize {
        ((self.max - self.min) / self.step) as usize
    }

    /// Value slots: the in-range buckets, one below and one at or above.
    pub fn slots(&self) -> usize {
        self.buckets() + 2
    }

    /// The slot of `v` (bpftrace's `linear` function: 0 below `min`,
    /// `1 + (v - min) / step` up to `max`, the last slot above).
    pub fn slot(&self, v: i64) -> usize {
        if v < self.min {
            return 0;
        }
        if v > self.max {
            return 1 + self.buckets();
        }
        let i = 1 + ((v as i128 - self.min as i128) / self.step as i128) as usize;
        i.min(1 + self.buckets())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hist_buckets_match_bpftrace() {
        assert_eq!(hist_bucket(-5), 0);
        assert_eq!(hist_bucket(0), 1);
        assert_eq!(hist_bucket(1), 2);
        assert_eq!(hist_bucket(2), 3);
        assert_eq!(hist_bucket(3), 3);
        assert_eq!(hist_bucket(4), 4);
        assert_eq!(hist_bucket(1023), 11);
        assert_eq!(hist_bucket(1024), 12);
        assert_eq!(hist_bucket(i64::MAX), 64);
    }

    #[test]
    fn linear_slots() {
        let l = Linear::new(0, 100, 10).unwrap();
        assert_eq!(l.buckets(), 10);
        assert_eq!(l.slot(-1), 0);
        assert_eq!(l.slot(0), 1);
        assert_eq!(l.slot(9), 1);
        assert_eq!(l.slot(10), 2);
        assert_eq!(l.slot(99), 10);
        assert_eq!(l.slot(100), 11);
        assert_eq!(l.slot(1000), 11);
        assert_eq!(Linear::new(0, 10, 0), None);
        assert_eq!(Linear::new(10, 10, 1), None);
        assert_eq!(Linear::new(0, 100_000, 1), None);
    }
}
