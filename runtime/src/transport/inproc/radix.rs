//! Sorting a module's addresses: a least-significant-digit radix sort of
//! their offsets from the lowest, 11 bits a pass, for the lists of
//! hundreds of thousands of addresses a module's sweep makes (its branch
//! targets, by count), which a comparison sort took a tenth of a cold
//! run's instructions to put in order.

/// Bits of the key sorted by each pass (2,048 buckets).
const DIGIT: u32 = 11;

/// Sorts `v` by `key`, a link-time address: the same order as
/// `sort_unstable_by_key` where keys are distinct (equal keys keep their
/// order). Short lists, and keys spanning more than 33 bits, are left to
/// the comparison sort.
pub(super) fn sort_by_address<T: Copy>(v: &mut [T], key: impl Fn(&T) -> u64) {
    if v.len() < 1 << DIGIT {
        v.sort_by_key(&key);
        return;
    }
    let (lo, hi) = v.iter().fold((u64::MAX, 0), |(lo, hi), x| {
        let k = key(x);
        (lo.min(k), hi.max(k))
    });
    let passes = (u64::BITS - (hi - lo).leading_zeros()).div_ceil(DIGIT);
    if passes > 3 {
        v.sort_by_key(&key);
        return;
    }
    let mut other: Vec<T> = v.to_vec();
    let mut in_v = true;
    for pass in 0..passes {
        let shift = pass * DIGIT;
        let digit = |x: &T| ((key(x) - lo) >> shift) as usize & ((1 << DIGIT) - 1);
        let (from, to): (&[T], &mut [T]) = if in_v {
            (&*v, &mut other[..])
        } else {
            (&other[..], &mut *v)
        };
        let mut at = [0usize; 1 << DIGIT];
        for x in from {
            at[digit(x)] += 1;
        }
        let mut sum = 0;
        for n in at.iter_mut() {
            (*n, sum) = (sum, sum + *n);
        }
        for x in from {
            let d = digit(x);
            to[at[d]] = *x;
            at[d] += 1;
        }
        in_v = !in_v;
    }
    if !in_v {
        v.copy_from_slice(&other);
    }
}

#[cfg(test)]
mod tests {
    use super::sort_by_address;

    /// The comparison sort's order for lists of each size and span: one,
    /// two and three passes, and the spans left to the comparison sort.
    #[test]
    fn sorts_as_the_comparison_sort() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for (n, span) in [
            (10, 1 << 20),
            (5000, 1 << 10),
            (5000, 1 << 20),
            (70_000, 1 << 33),
            (5000, 1 << 40),
            (5000, u64::MAX),
        ] {
            let base = 0x40_0000u64;
            let mut v: Vec<(u64, u32)> = (0..n)
                .map(|k| (base.wrapping_add(next() % span), k as u32))
                .collect();
            let mut w = v.clone();
            sort_by_address(&mut v, |p| p.0);
            w.sort_by_key(|p| p.0);
            assert_eq!(v, w, "{n} keys spanning {span:#x}");
        }
    }
}
