//! `wprobe run --metrics ADDR`: the run's maps and per-probe counters
//! served over HTTP for Prometheus to scrape, while the run lasts (and
//! `--metrics-linger` longer once the traced processes are gone).
//!
//! * [`snapshot`]: what a scrape reads (a copy of the maps and counters
//!   taken by the session at its next tick after a scrape asked, as
//!   `print`/`interval` read maps) and the hand-over between threads;
//! * [`families`]: a snapshot as metric families (names, labels, types,
//!   histogram buckets, the series limit);
//! * [`labels`]: metric names from map names, label values from keys;
//! * [`expose`]: the Prometheus text format 0.0.4 or OpenMetrics, by
//!   `prometheus-client`;
//! * [`server`]: the HTTP server (`tiny_http`) on its own thread.
//!
//! The session side (taking the snapshots) is `session/metrics.rs`.

pub mod expose;
pub mod families;
pub mod labels;
pub mod server;
pub mod snapshot;

use std::sync::Arc;
use std::time::Duration;

pub use snapshot::{Feed, Snapshot};

/// How often the session looks for a scrape waiting for a snapshot (the
/// transport's tick while `--metrics` is on; ptrace wakes for it with a
/// sleeping child process, the others from their poll loop).
pub const TICK: Duration = Duration::from_millis(250);

/// The `--metrics*` options of `wprobe run`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MetricsArgs {
    /// Serve the maps and probe counters at http://ADDR/metrics for
    /// Prometheus while the run lasts (`127.0.0.1:9100`, `:9100` for every
    /// interface, port 0 for a free one; the address is printed).
    #[arg(long = "metrics", value_name = "ADDR")]
    pub addr: Option<String>,
    /// Metric name prefix of the maps (`@name` becomes `PREFIX_name`, `@`
    /// becomes `PREFIX_map`; may be empty).
    #[arg(
        long = "metrics-prefix",
        value_name = "PREFIX",
        default_value = "wprobe"
    )]
    pub prefix: String,
    /// Most series one scrape exposes (maps, then probe counters); those
    /// beyond are counted in `wprobe_series_dropped_total`.
    #[arg(long = "metrics-max-series", value_name = "N", default_value_t = families::DEFAULT_MAX_SERIES)]
    pub max_series: usize,
    /// After the traced processes are gone, keep serving the final values
    /// this long (`30s`, `500ms`, `2m`; a number is seconds). A signal ends
    /// it early.
    #[arg(long = "metrics-linger", value_name = "DUR", value_parser = parse_linger)]
    pub linger: Option<Duration>,
}

/// `--metrics-linger`: `N[ms|s|m]`, seconds without a unit.
pub fn parse_linger(s: &str) -> Result<Duration, String> {
    let (num, unit) = crate::out::units::number_and_unit(s);
    let scale = match unit {
        "ms" => 1e-3,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        _ => return Err(format!("{s}: a duration such as 30s, 500ms or 2m")),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s}: a duration such as 30s, 500ms or 2m"))?;
    let secs = v * scale;
    if !secs.is_finite() || !(0.0..=86_400.0 * 365.0).contains(&secs) {
        return Err(format!("{s}: out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The exporter of a run: its server and the feed the session fills.
pub struct Exporter {
    server: server::Server,
    feed: Arc<Feed>,
    linger: Option<Duration>,
}

impl Exporter {
    /// Starts serving as `args` say (`None` without `--metrics`); prints
    /// the bound address on standard error.
    pub fn start(args: &MetricsArgs) -> Result<Option<Exporter>, String> {
        let Some(addr) = &args.addr else {
            if args.linger.is_some() {
                return Err("--metrics-linger needs --metrics ADDR".into());
            }
            return Ok(None);
        };
        if !labels::valid_prefix(&args.prefix) {
            return Err(format!(
                "--metrics-prefix {:?}: a metric name prefix is letters, digits, `_` and `:`, \
                 not starting with a digit",
                args.prefix
            ));
        }
        if args.max_series == 0 {
            return Err("--metrics-max-series must be at least 1".into());
        }
        let feed = Feed::new();
        let server = server::Server::start(
            addr,
            feed.clone(),
            families::Options {
                prefix: args.prefix.clone(),
                max_series: args.max_series,
            },
        )?;
        crate::elog!("wprobe: metrics at http://{}/metrics", server.addr());
        Ok(Some(Exporter {
            server,
            feed,
            linger: args.linger,
        }))
    }

    /// The feed the session publishes its snapshots to.
    pub fn feed(&self) -> Arc<Feed> {
        self.feed.clone()
    }

    /// The address served.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
    }

    /// After the run (the final snapshot published): serves the final
    /// values for `--metrics-linger`, unless `signalled` (a stopping signal
    /// came, before or during the wait), then stops the server.
    pub fn finish(self, signalled: impl Fn() -> bool) {
        if let Some(d) = self.linger
            && !signalled()
        {
            crate::elog!(
                "wprobe: the run is over; serving the final values at http://{}/metrics for {} \
                 (a signal ends it)",
                self.server.addr(),
                humane(d)
            );
            let end = std::time::Instant::now() + d;
            while !signalled() {
                let now = std::time::Instant::now();
                if now >= end {
                    break;
                }
                std::thread::sleep((end - now).min(Duration::from_millis(50)));
            }
        }
        self.server.stop();
    }
}

/// `1.5 s`, `2 min`, `300 ms`.
fn humane(d: Duration) -> String {
    if d >= Duration::from_secs(60) && d.as_secs().is_multiple_of(60) && d.subsec_nanos() == 0 {
        format!("{} min", d.as_secs() / 60)
    } else if d >= Duration::from_secs(1) {
        format!("{} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linger_durations() {
        assert_eq!(parse_linger("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_linger("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_linger("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_linger("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_linger("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_linger("2h").is_err());
        assert!(parse_linger("s").is_err());
        assert!(parse_linger("1e400").is_err());
        assert!(parse_linger("99999999999").is_err());
    }
}
