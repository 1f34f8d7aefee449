//! Near jumps: where no 5-byte jump fits, a 2-byte `jmp rel8` to a cave,
//! a `jmp rel32` to the stub written in padding within rel8 reach
//! (`agent_loader::nearjump`); whether they are on, and the caves taken.

use agent_loader::nearjump::CAVE_LEN;

/// Whether sites where no 5-byte jump fits may take a near jump to a cave
/// (`WPROBE_NO_NEAR_JUMPS=1`: a trap instead, as before near jumps; for
/// comparisons and for the tests of trap sites).
pub(super) fn near_jumps() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("WPROBE_NO_NEAR_JUMPS").is_none_or(|v| v.is_empty()))
}

/// Longest run of padding a window takes after its function's end.
pub(super) const MAX_TAIL: u64 = 64;

/// A cave of `caves` (5 bytes each, by address) meeting `lo..hi`.
pub(super) fn cave_in(caves: &std::collections::BTreeSet<u64>, lo: u64, hi: u64) -> Option<u64> {
    caves
        .range(lo.saturating_sub(CAVE_LEN as u64 - 1)..hi)
        .next()
        .copied()
}
