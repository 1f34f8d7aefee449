//! The benches' clock (bench stage): a criterion [`Measurement`] that reads
//! the CPU time of the benchmarking thread (`CLOCK_THREAD_CPUTIME_ID`) by
//! default, or the wall clock when `WPROBE_BENCH_CLOCK=wall`.
//!
//! Why CPU time: the benches run on small shared machines (2 cores, other
//! builds running), where the wall clock also counts the time the thread
//! spends preempted, so a 200 ns call can read as 2 µs. The thread's CPU
//! time excludes that; it still includes the cost of cache misses caused by
//! other processes. The measured code makes no system calls, so on an idle
//! machine the two clocks agree.

use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter};
use nix::time::{ClockId, clock_gettime};

/// Which clock a [`BenchClock`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockKind {
    /// CPU time of the calling thread.
    ThreadCpu,
    /// `CLOCK_MONOTONIC`.
    Wall,
}

/// A criterion measurement in nanoseconds of the selected clock.
#[derive(Clone, Copy, Debug)]
pub struct BenchClock {
    /// The clock read.
    pub kind: ClockKind,
}

impl BenchClock {
    /// The clock named by `WPROBE_BENCH_CLOCK` (`wall`), else thread CPU time.
    pub fn from_env() -> BenchClock {
        let kind = match std::env::var("WPROBE_BENCH_CLOCK").as_deref() {
            Ok("wall") => ClockKind::Wall,
            _ => ClockKind::ThreadCpu,
        };
        BenchClock { kind }
    }

    fn now_ns(&self) -> u64 {
        let id = match self.kind {
            ClockKind::ThreadCpu => ClockId::CLOCK_THREAD_CPUTIME_ID,
            ClockKind::Wall => ClockId::CLOCK_MONOTONIC,
        };
        let t = clock_gettime(id).expect("clock_gettime of a clock Linux always has");
        (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64
    }
}

impl Measurement for BenchClock {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        self.now_ns()
    }

    fn end(&self, start: u64) -> u64 {
        self.now_ns().saturating_sub(start)
    }

    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }

    fn zero(&self) -> u64 {
        0
    }

    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &NsFormatter
    }
}

/// Formats nanoseconds with an SI prefix (as criterion's wall-time formatter does).
struct NsFormatter;

impl ValueFormatter for NsFormatter {
    fn scale_values(&self, ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if ns < 1.0 {
            (1e3, "ps")
        } else if ns < 1e3 {
            (1.0, "ns")
        } else if ns < 1e6 {
            (1e-3, "µs")
        } else if ns < 1e9 {
            (1e-6, "ms")
        } else {
            (1e-9, "s")
        };
        for v in values {
            *v *= factor;
        }
        unit
    }

    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per_iter = match *throughput {
            Throughput::Bits(n)
            | Throughput::Bytes(n)
            | Throughput::BytesDecimal(n)
            | Throughput::Elements(n) => n,
            Throughput::ElementsAndBytes { elements, .. } => elements,
        } as f64;
        for v in values {
            *v = per_iter * 1e9 / *v;
        }
        "/s"
    }

    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}
