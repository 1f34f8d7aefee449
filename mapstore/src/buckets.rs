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

/// The `hist(x, k)` bucket of `v` (bpftrace's `log2(n, k)`): 0 for negative
/// values; `v + 1` below 2^k; otherwise, with `l` = floor(log2 v) - k and
/// `x` the k bits of `v` after its highest, `((l + 1) << k) + x + 1`. Each
/// power of two is split into 2^k buckets; `k` = 0 is [`hist_bucket`].
/// `bits` above [`crate::MAX_HIST_BITS`] counts as the maximum.
pub fn hist_bucket_bits(v: i64, bits: u8) -> usize {
    if v < 0 {
        return 0;
    }
    let k = u32::from(bits.min(crate::MAX_HIST_BITS));
    let mask = (1u64 << k) - 1;
    let n = v as u64;
    if n <= mask {
        return n as usize + 1;
    }
    let l = (63 - n.leading_zeros()) - k;
    let x = (n >> l) & mask;
    let idx = ((u64::from(l) + 1) << k) + x + 1;
    (idx as usize).min(crate::hist_buckets(k as u8) - 1)
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

    #[test]
    fn fine_grained_hist_buckets_are_bpftraces() {
        for v in [-5i64, 0, 1, 2, 3, 7, 8, 1023, 1 << 40, i64::MAX] {
            assert_eq!(hist_bucket_bits(v, 0), hist_bucket(v), "{v}");
        }
        // k = 3: 0..=15 one value each, then 8 buckets per power of two.
        assert_eq!(hist_bucket_bits(15, 3), 16);
        assert_eq!(hist_bucket_bits(16, 3), 17);
        assert_eq!(hist_bucket_bits(17, 3), 17);
        assert_eq!(hist_bucket_bits(18, 3), 18);
        assert_eq!(hist_bucket_bits(1023, 3), 64);
        assert_eq!(hist_bucket_bits(-1, 3), 0);
        for k in 0..=crate::MAX_HIST_BITS {
            assert_eq!(hist_bucket_bits(i64::MAX, k), crate::hist_buckets(k) - 1);
        }
    }

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
