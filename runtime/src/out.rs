//! What a run produces: the records handlers log (the per-run sink),
//! formatted as text or JSON lines or as bpftrace prints them, with
//! symbols for printing, written where they go; and the run's maps and
//! counters served to Prometheus (`--metrics`). Also the quantities with
//! units that options take (`units`: `10us`, `2m`).

pub mod btout;
pub mod format;
pub mod metrics;
pub mod output;
pub mod sink;
pub mod symbolize;
pub mod units;
