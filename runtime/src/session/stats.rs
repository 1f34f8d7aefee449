//! Per-probe counters, the exit summary on standard error, and the JSON
//! `stats` object.

use super::Session;
use crate::out::format::{self, Format};

/// Per-probe counters, reported at exit.
#[derive(Clone, Debug, Default)]
pub struct ProbeStats {
    /// Hits seen (including ignored ones).
    pub hits: u64,
    /// Hits skipped by `ignore`.
    pub ignored: u64,
    /// Handler runs.
    pub runs: u64,
    /// Records emitted.
    pub records: u64,
    /// Record data bytes emitted.
    pub bytes: u64,
    /// Runs that exhausted their fuel.
    pub fuel_exhausted: u64,
    /// Runs that trapped.
    pub traps: u64,
    /// Runs ended by an uncaught exception.
    pub uncaught: u64,
    /// Hits whose sample the kernel dropped (perf ring buffer full;
    /// `PERF_RECORD_LOST`). Always 0 under ptrace, where the thread waits
    /// for the handler.
    pub dropped: u64,
    /// Return probes: calls that ran no handler (beyond `maxactive`, or
    /// left without returning: longjmp, unwinding, thread exit).
    pub missed: u64,
    /// Return probes: calls among `missed` not tracked because their thread
    /// tracked as many live calls as a thread can
    /// (`agent_abi::MAX_TRACKED_CALLS`, under every transport).
    pub missed_depth: u64,
    /// Return probes: calls among `missed` that a later entry or return of
    /// their thread proved gone without a return the transport saw (a tail
    /// call through a pointer into code it does not cover, `longjmp`, an
    /// exception).
    pub unwound: u64,
    /// Breakpoint hits whose displaced instruction faulted (the thread got
    /// the signal as without the probe).
    pub faulted: u64,
    /// Records of those hits discarded (`logonfault = no`, spec §14).
    pub discarded: u64,
    /// Handler runs that read memory of a process that had exited before
    /// its sample was read (perf: the reads gave nothing, not a value).
    pub gone: u64,
}

impl Session {
    /// Lost perf samples not attributed to one probe.
    pub fn dropped_unattributed(&self) -> u64 {
        self.dropped_unattributed
    }

    /// Per-probe statistics.
    pub fn stats(&self) -> Vec<(String, ProbeStats)> {
        self.probes
            .iter()
            .map(|p| (p.label.clone(), p.stats.clone()))
            .collect()
    }

    /// Writes the exit summary (stderr) and, in JSON mode, a last `stats` object.
    pub fn summary(&mut self) {
        self.warn_gone_and_unwound();
        if self.bt.active && !self.abnormal() {
            return;
        }
        let (mut err, total) = self.summary_table();
        self.summary_notes(&mut err);
        {
            use std::io::Write as _;
            let _ = std::io::stderr().lock().write_all(err.as_bytes());
        }
        if self.opts.format == Format::Json {
            let line = self.json_stats(&total);
            self.out.write(line.as_bytes(), 0);
            self.out.flush();
        }
    }

    /// Warnings said in every mode (a one-liner prints no table): hits that
    /// read memory of a process already gone, and calls whose return
    /// handlers did not run.
    fn warn_gone_and_unwound(&self) {
        for p in self.probes.iter().filter(|p| p.stats.gone > 0) {
            crate::elog!(
                "wprobe: warning: probe {}: {} hit(s) read memory of a process that had exited \
                 before wprobe read the hit: those reads failed (empty strings, zeros) and are \
                 counted in `gone`",
                p.label,
                p.stats.gone
            );
        }
        for p in self.probes.iter().filter(|p| p.stats.unwound > 0) {
            crate::elog!(
                "wprobe: warning: probe {}: {} call(s) ended without a return {} saw (a tail \
                 call through a pointer, longjmp, an exception): their return handlers did not \
                 run (counted in `missed`)",
                p.label,
                p.stats.unwound,
                self.transport
                    .map_or("the transport".to_string(), |t| format!(
                        "--transport {}",
                        t.name
                    ))
            );
        }
    }

    /// The summary's table, a row a probe, and the probes' totals.
    fn summary_table(&self) -> (String, ProbeStats) {
        use std::fmt::Write as _;
        // One write for the whole summary (65,535 probes once took 127 s
        // to print row by row).
        let mut err = String::with_capacity(128 * (self.probes.len() + 4));
        let mut total = ProbeStats::default();
        let _ = writeln!(err, "wprobe: summary ({} probes)", self.probes.len());
        let _ = writeln!(
            err,
            "  {:<40} {:>9} {:>8} {:>9} {:>9} {:>9} {:>7} {:>7} {:>6} {:>6} {:>8}",
            "probe",
            "hits",
            "ignored",
            "runs",
            "records",
            "bytes",
            "dropped",
            "missed",
            "fuel",
            "traps",
            "uncaught"
        );
        for p in &self.probes {
            let s = &p.stats;
            let _ = writeln!(
                err,
                "  {:<40} {:>9} {:>8} {:>9} {:>9} {:>9} {:>7} {:>7} {:>6} {:>6} {:>8}",
                p.label,
                s.hits,
                s.ignored,
                s.runs,
                s.records,
                s.bytes,
                s.dropped,
                s.missed,
                s.fuel_exhausted,
                s.traps,
                s.uncaught
            );
            total.hits += s.hits;
            total.ignored += s.ignored;
            total.runs += s.runs;
            total.records += s.records;
            total.bytes += s.bytes;
            total.dropped += s.dropped;
            total.missed += s.missed;
            total.missed_depth += s.missed_depth;
            total.faulted += s.faulted;
            total.discarded += s.discarded;
            total.fuel_exhausted += s.fuel_exhausted;
            total.traps += s.traps;
            total.uncaught += s.uncaught;
        }
        total.dropped += self.dropped_unattributed;
        (err, total)
    }

    /// What follows the table: debug timings, warnings, what was not
    /// honoured.
    fn summary_notes(&self, err: &mut String) {
        use std::fmt::Write as _;
        if std::env::var_os("WPROBE_DEBUG").is_some() {
            // Not in the JSON stats object, which stays deterministic
            // (tests compare it across runs and transports).
            let _ = writeln!(
                err,
                "wprobe: debug: {} probes: armed in {:.3} ms, disarmed in {:.3} ms",
                self.probes.len(),
                self.arm_time.as_secs_f64() * 1e3,
                self.disarm_time.as_secs_f64() * 1e3
            );
        }
        // A probe whose module no traced process ever mapped had no chance
        // to fire: 0 hits would otherwise look like "never called".
        for p in self.probes.iter().filter(|p| p.enabled && !p.ever_armed) {
            let _ = writeln!(
                err,
                "wprobe: warning: probe {} was never armed: no traced process mapped module `{}`",
                p.label, self.manifests[p.prog].module
            );
        }
        for p in self.probes.iter().filter(|p| p.stats.missed_depth > 0) {
            let _ = writeln!(
                err,
                "wprobe: warning: probe {}: {} call(s) not tracked to their return: their thread \
                 already tracked {} live calls (counted in `missed`)",
                p.label,
                p.stats.missed_depth,
                agent_abi::MAX_TRACKED_CALLS
            );
        }
        for p in self.probes.iter().filter(|p| p.stats.faulted > 0) {
            let s = &p.stats;
            let _ = writeln!(
                err,
                "wprobe: warning: probe {}: {} hit(s) whose displaced instruction faulted (the \
                 program got the signal as it would have untraced); {}",
                p.label,
                s.faulted,
                if s.discarded > 0 {
                    format!(
                        "{} record(s) discarded (logonfault = no, spec §14)",
                        s.discarded
                    )
                } else {
                    "their records were kept".to_string()
                }
            );
        }
        if self.dropped_unattributed > 0 {
            let _ = writeln!(
                err,
                "  {} samples lost by the kernel (ring buffer full) could not be attributed to a probe",
                self.dropped_unattributed
            );
        }
        for (n, what) in self
            .unhonoured
            .iter()
            .zip(["exit 1 (debugger hand-off)", "exit 3 (core dump)"])
        {
            if *n > 0 {
                let _ = writeln!(
                    err,
                    "  {what} not honoured under --transport {}: {n} run(s)",
                    self.transport.map_or("?", |t| t.name)
                );
            }
        }
    }

    /// JSON mode's last object (`kind` `stats`): each probe's statistics,
    /// the `total`s, the transport and why it was chosen.
    fn json_stats(&self, total: &ProbeStats) -> String {
        let mut line = String::from("{\"kind\":\"stats\",\"probes\":[");
        for (i, p) in self.probes.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            line.push_str("{\"probe\":");
            format::json_string(&mut line, p.label.as_bytes());
            let s = &p.stats;
            line.push_str(&format!(
                ",\"hits\":{},\"ignored\":{},\"runs\":{},\"records\":{},\"bytes\":{},\"dropped\":{},\"missed\":{},\"missed_depth\":{},\"faulted\":{},\"discarded\":{},\"fuel_exhausted\":{},\"traps\":{},\"uncaught\":{}",
                s.hits, s.ignored, s.runs, s.records, s.bytes, s.dropped, s.missed, s.missed_depth, s.faulted, s.discarded, s.fuel_exhausted, s.traps, s.uncaught
            ));
            let mut sites = self
                .site_counts
                .iter()
                .filter(|(t, _, _)| *t == i)
                .peekable();
            if sites.peek().is_some() {
                line.push_str(",\"sites\":{");
                for (k, (_, how, n)) in sites.enumerate() {
                    if k > 0 {
                        line.push(',');
                    }
                    line.push_str(&format!("\"{how}\":{n}"));
                }
                line.push('}');
            }
            line.push('}');
        }
        line.push_str(&format!(
            "],\"hits\":{},\"runs\":{},\"records\":{},\"bytes\":{},\"dropped\":{},\"missed\":{},\"missed_depth\":{},\"faulted\":{},\"discarded\":{},\"fuel_exhausted\":{},\"traps\":{},\"uncaught\":{}",
            total.hits, total.runs, total.records, total.bytes, total.dropped, total.missed, total.missed_depth, total.faulted, total.discarded, total.fuel_exhausted, total.traps, total.uncaught
        ));
        if let Some(t) = self.transport {
            line.push_str(",\"transport\":");
            format::json_string(&mut line, t.name.as_bytes());
        }
        if let Some((auto, why)) = &self.plan {
            line.push_str(&format!(",\"transport_auto\":{auto},\"transport_reason\":"));
            format::json_string(&mut line, why.as_bytes());
        }
        line.push_str("}\n");
        line
    }
}
