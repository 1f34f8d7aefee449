//! A module's `jmp rel32` and `jcc rel32` instructions by the address they
//! land on: what the copies of whole functions and the fragments of
//! trapped epilogues ask (`ModuleCode::far_jumps_to`), made once per
//! module at the first need from a scan of the executable sections' bytes
//! (not a decoding: the caller checks that each is an instruction of its
//! function).

/// The jumps found, each `(target - base) << 32 | (jump - base)`, sorted
/// by target:
/// one allocation for the module and a search per question, where a map
/// of a list per target cost 64,000 allocations and two sorts of 100,000
/// pairs on python3.11 (a tenth of a cold run's main thread).
#[derive(Debug, Default)]
pub(super) struct FarJumps {
    /// The lowest address of the sections scanned.
    base: u64,
    /// The packed pairs, sorted (by target, then by jump).
    packed: Vec<u64>,
}

impl FarJumps {
    /// Scans `sections` (each one's link-time address and bytes) for
    /// `e9 rel32` and `0f 8x rel32` at every byte, keeping those that land
    /// in the span of the sections (the only targets asked about: places
    /// in the module's functions).
    pub(super) fn scan(sections: &[(u64, &[u8])]) -> FarJumps {
        let base = sections.iter().map(|s| s.0).min().unwrap_or(0);
        let end = sections
            .iter()
            .map(|&(a, c)| a + c.len() as u64)
            .max()
            .unwrap_or(0);
        // Offsets from `base` in 32 bits (an executable's code spans far
        // less than 4 GiB; a file that says otherwise gets no far jumps).
        if end.saturating_sub(base) > u64::from(u32::MAX) {
            return FarJumps::default();
        }
        let mut packed = Vec::new();
        for &(addr, code) in sections {
            for p in 0..code.len() {
                // `e9 rel32`, `0f 8x rel32`.
                let op = match code[p] {
                    0xe9 => 1,
                    0x0f if code.get(p + 1).is_some_and(|b| b & 0xf0 == 0x80) => 2,
                    _ => continue,
                };
                let Some(rel) = code.get(p + op..p + op + 4) else {
                    continue;
                };
                let rel = i32::from_le_bytes([rel[0], rel[1], rel[2], rel[3]]);
                let at = addr + p as u64;
                let to = (at + op as u64 + 4).wrapping_add(rel as i64 as u64);
                if (base..end).contains(&to) {
                    packed.push((to - base) << 32 | (at - base));
                }
            }
        }
        // By target; the jumps to each in the order found (the sections'
        // order, as `to` leaves them).
        super::radix::sort_by_address(&mut packed, |&p| p >> 32);
        FarJumps { base, packed }
    }

    /// The jumps (link-time addresses) that land on `target`, in the
    /// order of the sections scanned (sorted where they are).
    pub(super) fn to(&self, target: u64) -> Vec<u64> {
        let Some(key) = target
            .checked_sub(self.base)
            .filter(|&k| k <= u64::from(u32::MAX))
        else {
            return Vec::new();
        };
        let from = self.packed.partition_point(|&p| p >> 32 < key);
        self.packed[from..]
            .iter()
            .take_while(|&&p| p >> 32 == key)
            .map(|&p| self.base + (p & u64::from(u32::MAX)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::FarJumps;

    /// Each jump found where a decoding finds it, by its target; a target
    /// outside the sections, and bytes too short for a displacement, none.
    #[test]
    fn finds_the_jumps_by_target() {
        // 0x1000: jmp 0x1010 (e9 0b 00 00 00); 0x1005: jne 0x1010 (0f 85
        // 05 00 00 00); 0x100b: jmp 0x9000 (outside); 0x1010: nops; a
        // truncated `e9` at the end.
        let mut code = vec![0xe9, 0x0b, 0, 0, 0, 0x0f, 0x85, 0x05, 0, 0, 0];
        code.extend([0xe9, 0xf0, 0x7f, 0, 0]);
        code.extend([0x90; 4]);
        code.push(0xe9);
        let sections = [(0x1000u64, &code[..])];
        let j = FarJumps::scan(&sections);
        assert_eq!(j.to(0x1010), vec![0x1000, 0x1005]);
        assert_eq!(j.to(0x9000), Vec::<u64>::new());
        assert_eq!(j.to(0x1011), Vec::<u64>::new());
        assert_eq!(j.to(0x10), Vec::<u64>::new());
    }
}
