//! Map kinds, update operations and bounds of the map service (the
//! `map_*` imports): ABI facts shared by compilers, guests, the runtime and
//! the `mapstore` crate that implements the store.

/// Largest number of maps in one region.
pub const MAX_MAPS: usize = 256;
/// Keys per map when the program does not say (bpftrace's default
/// `BPFTRACE_MAP_KEYS_MAX`).
pub const DEFAULT_MAX_KEYS: u32 = 4096;
/// Largest number of keys one map may be declared with.
pub const MAX_KEYS_PER_MAP: u32 = 1 << 20;
/// Largest key (bytes). A key is the concatenation of the map's key
/// fields; a user stack of 127 frames is about 1 KiB.
pub const MAX_KEY_BYTES: u32 = 4096;
/// Largest value (bytes): an `lhist` of 1,000 buckets plus its two
/// out-of-range buckets is 8,016 bytes.
pub const MAX_VALUE_BYTES: u32 = 16384;
/// Largest region one map may occupy (index and entries), 64 MiB. A map
/// declared with more keys than fit is given as many keys as fit.
pub const MAX_MAP_BYTES: u64 = 64 << 20;
/// Largest region of one program (every map), 256 MiB. The region is
/// allocated zeroed (lazily backed by the kernel), so the bound limits the
/// worst case, not what a run with few keys costs.
pub const MAX_REGION_BYTES: u64 = 256 << 20;

/// Number of `hist` buckets: one for negative values, one for 0, one per
/// power of two up to 2^63 (bpftrace's layout).
pub const HIST_BUCKETS: usize = 65;
/// Largest `k` of `hist(x, k)` (bpftrace's: 2^k buckets per power of two).
pub const MAX_HIST_BITS: u8 = 5;

/// Number of buckets of `hist(x, k)`: one for negative values, then 2^k
/// per power of two (the first 2^(k+1) hold one value each), up to 2^63;
/// [`HIST_BUCKETS`] for `k` = 0.
pub const fn hist_buckets(bits: u8) -> usize {
    ((64 - bits as usize) << bits) + 1
}
/// Largest number of in-range `lhist` buckets ((max - min) / step).
pub const MAX_LHIST_BUCKETS: i64 = 1000;

/// What a map holds, which fixes its value layout and the operations it
/// accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MapKind {
    /// `count()`: one u64, incremented.
    Count = 1,
    /// `sum(x)`: one i64.
    Sum = 2,
    /// `min(x)`: one i64, the smallest sample.
    Min = 3,
    /// `max(x)`: one i64, the largest sample.
    Max = 4,
    /// `avg(x)`: i64 count, i64 total.
    Avg = 5,
    /// `stats(x)`: i64 count, i64 total (printed with count, average, total).
    Stats = 6,
    /// `hist(x)`: [`HIST_BUCKETS`] u64 counts; `hist(x, k)`:
    /// [`hist_buckets`]`(k)`.
    Hist = 7,
    /// `lhist(x, min, max, step)`: (buckets + 2) u64 counts.
    Lhist = 8,
    /// Plain assignment: the value bytes as given.
    Assign = 9,
}

impl MapKind {
    /// Every kind, in discriminant order.
    pub const ALL: &'static [MapKind] = &[
        MapKind::Count,
        MapKind::Sum,
        MapKind::Min,
        MapKind::Max,
        MapKind::Avg,
        MapKind::Stats,
        MapKind::Hist,
        MapKind::Lhist,
        MapKind::Assign,
    ];

    /// The kind with discriminant `v`.
    pub fn from_u8(v: u8) -> Option<MapKind> {
        MapKind::ALL.iter().copied().find(|k| *k as u8 == v)
    }

    /// The spelling in manifests and messages (`count`, `hist`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            MapKind::Count => "count",
            MapKind::Sum => "sum",
            MapKind::Min => "min",
            MapKind::Max => "max",
            MapKind::Avg => "avg",
            MapKind::Stats => "stats",
            MapKind::Hist => "hist",
            MapKind::Lhist => "lhist",
            MapKind::Assign => "assign",
        }
    }

    /// The kind spelled `s`.
    pub fn from_name(s: &str) -> Option<MapKind> {
        MapKind::ALL.iter().copied().find(|k| k.name() == s)
    }
}

/// An update operation (the `op` argument of the `map_update` import).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Count one event (`count` maps).
    Count = 1,
    /// Add the sample (`sum` maps; `assign` maps holding an integer: `+=`, `++`).
    Add = 2,
    /// Keep the smaller (`min` maps).
    Min = 3,
    /// Keep the larger (`max` maps).
    Max = 4,
    /// Count the sample and add it to the total (`avg`, `stats`).
    Avg = 5,
    /// Count the sample in its power-of-two bucket (`hist`).
    Hist = 6,
    /// Count the sample in its linear bucket (`lhist`).
    Lhist = 7,
    /// Set the integer value (`assign` maps of 8-byte values).
    Set = 8,
}

impl Op {
    /// Every op, in discriminant order.
    pub const ALL: &'static [Op] = &[
        Op::Count,
        Op::Add,
        Op::Min,
        Op::Max,
        Op::Avg,
        Op::Hist,
        Op::Lhist,
        Op::Set,
    ];

    /// The op with discriminant `v`.
    pub fn from_u8(v: u8) -> Option<Op> {
        Op::ALL.iter().copied().find(|k| *k as u8 == v)
    }

    /// The spelling in the ABI snapshot.
    pub const fn name(self) -> &'static str {
        match self {
            Op::Count => "COUNT",
            Op::Add => "ADD",
            Op::Min => "MIN",
            Op::Max => "MAX",
            Op::Avg => "AVG",
            Op::Hist => "HIST",
            Op::Lhist => "LHIST",
            Op::Set => "SET",
        }
    }

    /// Whether a map of kind `k` accepts this op.
    pub fn applies_to(self, k: MapKind) -> bool {
        matches!(
            (self, k),
            (Op::Count, MapKind::Count)
                | (Op::Add, MapKind::Sum)
                | (Op::Min, MapKind::Min)
                | (Op::Max, MapKind::Max)
                | (Op::Avg, MapKind::Avg | MapKind::Stats)
                | (Op::Hist, MapKind::Hist)
                | (Op::Lhist, MapKind::Lhist)
        ) || (matches!(self, Op::Set | Op::Add) && k == MapKind::Assign)
    }
}
