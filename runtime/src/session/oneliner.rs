//! One-liner support (programs of bt2wasm and any module using the
//! service imports): `begin`/`end`/`interval` probes, output events
//! formatted as bpftrace formats them, `exit()` (`Outcome::Stop`), and the
//! maps printed at exit.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use hostabi::Outcome;
use hostabi::manifest::Trigger;

use super::Session;
use crate::out::sink::RecordKind;
use crate::wasm::runner::RunOutcome;

/// A probe fired by the run's life rather than a location.
#[derive(Clone, Copy, Debug)]
pub(super) struct Special {
    pub(super) prog: usize,
    pub(super) index: usize,
    pub(super) trigger: Trigger,
    /// Interval probes: when they fire next.
    pub(super) next: Option<std::time::Instant>,
}

/// The one-liner state of a session.
pub(super) struct BtState {
    /// One-liner output and quiet summary (set by [`Session::set_oneliner`]).
    pub(super) active: bool,
    pub(super) mode: crate::out::btout::Mode,
    pub(super) specials: Vec<Special>,
    pub(super) events: Vec<std::sync::Arc<hostabi::event::Events>>,
    pub(super) sym: crate::out::symbolize::Symbolizer,
    pub(super) buf: Vec<u8>,
    pub(super) stop: Option<std::sync::Arc<AtomicBool>>,
    /// `exit()` was called.
    pub(super) exited: bool,
    /// The run that called `exit()` has records not yet written (the
    /// session's own runs stop before they write; runs in the target
    /// write first): its output is printed, that of later runs is not.
    pub(super) exit_run_unwritten: bool,
    /// The records being written are of a run after `exit()`: their
    /// output events are dropped.
    pub(super) drop_events: bool,
    /// `-q`: no `Attaching` line.
    pub(super) quiet: bool,
    /// `config = { print_maps_on_exit = 0 }` turns it off.
    pub(super) print_maps: bool,
    /// The output is a file (`-o`): the blank lines before the maps go to
    /// standard output, as bpftrace writes them.
    pub(super) gap_to_stdout: bool,
    /// Load bias of each probe's own module, by (probe, pid): a program's
    /// probes may be in several modules (`load_bias` is the probe's).
    pub(super) probe_bias: HashMap<(usize, i32), u64>,
}

impl BtState {
    /// Formats event record `r` of program `prog` (its data in `sink`)
    /// after what `bytes` holds, as bpftrace does (the program's maps in
    /// `services`).
    pub(super) fn event(
        &mut self,
        bytes: &mut Vec<u8>,
        services: &crate::wasm::services::Services,
        prog: usize,
        sink: &crate::out::sink::Sink,
        r: &crate::out::sink::SinkRecord,
    ) {
        let maps = services.maps.get(prog).and_then(|m| m.as_ref());
        let mo = maps.map(|m| crate::out::btout::MapOutput {
            decls: &m.decls,
            view: m.view(),
        });
        let ev = self.events.get(prog).cloned().unwrap_or_default();
        let rec = crate::out::btout::EventRecord {
            kind: r.major,
            id: r.minor,
            data: sink.data(r),
        };
        crate::out::btout::event(bytes, self.mode, rec, &ev, mo.as_ref(), &mut self.sym);
    }
}

impl Default for BtState {
    fn default() -> BtState {
        BtState {
            active: false,
            mode: crate::out::btout::Mode::Text,
            specials: Vec::new(),
            events: Vec::new(),
            sym: Default::default(),
            buf: Vec::new(),
            stop: None,
            exited: false,
            exit_run_unwritten: false,
            drop_events: false,
            quiet: false,
            print_maps: true,
            gap_to_stdout: false,
            probe_bias: HashMap::new(),
        }
    }
}

impl Session {
    /// Turns on one-liner behaviour: bpftrace's output (`json` for `-f
    /// json`), no summary unless something went wrong, `exit()` setting
    /// `stop`, `cpid` = `child_pid`.
    pub fn set_oneliner(&mut self, json: bool, stop: std::sync::Arc<AtomicBool>, child_pid: u64) {
        self.bt.active = true;
        self.bt.mode = if json {
            crate::out::btout::Mode::Json
        } else {
            crate::out::btout::Mode::Text
        };
        self.bt.stop = Some(stop);
        self.runner.store.data_mut().services.child_pid = child_pid;
    }

    /// `-q`: no `Attaching N probes...` line.
    pub fn set_oneliner_quiet(&mut self, quiet: bool) {
        self.bt.quiet = quiet;
    }

    /// Whether C++ and Rust names in `ustack`, `usym` and `func` output
    /// are demangled (the default; `--no-demangle`, `cpp_demangle = 0`).
    pub fn set_demangle_symbols(&mut self, yes: bool) {
        self.bt.sym.set_demangle(yes);
    }

    /// Whether the maps are printed at exit (`print_maps_on_exit`).
    pub fn set_print_maps_on_exit(&mut self, yes: bool) {
        self.bt.print_maps = yes;
    }

    /// The one-liner output goes to a file (`-o`): like bpftrace, the two
    /// blank lines that open the exit output still go to standard output.
    pub fn set_oneliner_output_file(&mut self, yes: bool) {
        self.bt.gap_to_stdout = yes;
    }

    /// The launched command's pid (`cpid`).
    pub fn set_child_pid(&mut self, pid: u64) {
        self.runner.store.data_mut().services.child_pid = pid;
    }

    /// Whether `exit()` ended the run.
    pub fn exited(&self) -> bool {
        self.bt.exited
    }

    /// `exit()`: bpftrace's, asynchronous. The run stops as soon as the
    /// transport can; handlers that still run meanwhile (other threads,
    /// or the target's own runs) update maps, but their output is not
    /// printed (bpftrace ignores the events that follow its exit event).
    pub(super) fn request_stop(&mut self) {
        if !self.bt.exited {
            self.bt.exit_run_unwritten = true;
        }
        self.bt.exited = true;
        if let Some(s) = &self.bt.stop {
            s.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Whether the output events of the run being written are dropped:
    /// those of every run after the one that called `exit()`.
    pub(super) fn events_after_exit(&mut self) -> bool {
        self.bt.exited && !std::mem::take(&mut self.bt.exit_run_unwritten)
    }

    /// Probes of the run, special ones included (bpftrace's "Attaching N probes").
    pub fn probe_total(&self) -> usize {
        self.probes.len() + self.bt.specials.len()
    }

    /// The shortest interval period, if any (the transport's tick).
    pub fn tick_period(&self) -> Option<std::time::Duration> {
        self.bt
            .specials
            .iter()
            .filter_map(|s| match s.trigger {
                Trigger::Interval { period_ns } => Some(period_ns),
                _ => None,
            })
            .reduce(gcd)
            .map(|ns| std::time::Duration::from_nanos(ns.max(1_000_000)))
    }

    /// Writes `text` to the output (not records: maps, the attach line).
    pub fn write_out(&mut self, text: &[u8]) {
        self.out.write(text, 0);
    }

    /// Prints bpftrace's "Attaching N probes..." line, then runs the
    /// `begin` probes and schedules the interval probes.
    pub fn begin(&mut self) {
        let n = self.probe_total();
        let line = match self.bt.mode {
            crate::out::btout::Mode::Text => {
                format!("Attaching {n} probe{}...\n", if n == 1 { "" } else { "s" })
            }
            crate::out::btout::Mode::Json => {
                format!("{{\"type\": \"attached_probes\", \"data\": {{\"probes\": {n}}}}}\n")
            }
        };
        if !self.bt.quiet {
            self.write_out(line.as_bytes());
        }
        // bpftrace's test hook: its runtime suite waits for this line.
        if std::env::var_os("__BPFTRACE_NOTIFY_PROBES_ATTACHED").is_some() {
            self.write_out(b"__BPFTRACE_NOTIFY_PROBES_ATTACHED\n");
        }
        self.run_specials(|t| t == Trigger::Begin);
        // Intervals count from after BEGIN (a first tick is a whole period
        // after anything BEGIN measured).
        let now = std::time::Instant::now();
        for s in &mut self.bt.specials {
            if let Trigger::Interval { period_ns } = s.trigger {
                s.next = Some(now + std::time::Duration::from_nanos(period_ns));
            }
        }
        self.out.flush();
    }

    /// Runs the `end` probes, then prints every map (bpftrace's exit output)
    /// and reports maps that dropped updates.
    pub fn end(&mut self) {
        self.run_specials(|t| t == Trigger::End);
        if self.bt.gap_to_stdout {
            self.out.flush();
            let _ = crate::out::output::print_stdout("\n\n");
        } else {
            self.write_out(b"\n\n");
        }
        let mode = self.bt.mode;
        let data = self.runner.store.data();
        let mut out = Vec::new();
        let mut warnings = Vec::new();
        for region in data.services.maps.iter().flatten() {
            let mo = crate::out::btout::MapOutput {
                decls: &region.decls,
                view: region.view(),
            };
            let mut order: Vec<usize> = (0..region.decls.len()).collect();
            order.sort_by(|a, b| region.decls[*a].name.cmp(&region.decls[*b].name));
            for i in order {
                if self.bt.print_maps {
                    crate::out::btout::print_map(
                        &mut out,
                        mode,
                        &mo,
                        i as u32,
                        0,
                        0,
                        &mut self.bt.sym,
                    );
                }
                if let Ok(st) = region.view().stats(i as u32)
                    && st.dropped > 0
                {
                    warnings.push(format!(
                        "wprobe: warning: map {}: {} update(s) dropped: the map is full ({} keys; \
                         set BPFTRACE_MAP_KEYS_MAX to allow more)",
                        region.decls[i].name, st.dropped, st.capacity
                    ));
                }
            }
        }
        self.out.write(&out, 0);
        self.out.flush();
        for w in warnings {
            crate::elog!("{w}");
        }
    }

    /// Runs every special probe whose trigger `pick` selects.
    fn run_specials(&mut self, pick: impl Fn(Trigger) -> bool) {
        let list: Vec<Special> = self.bt.specials.clone();
        for s in list {
            if pick(s.trigger) && !(self.bt.exited && s.trigger != Trigger::End) {
                self.run_special(s.prog, s.index);
            }
        }
    }

    /// Runs the interval probes that are due (for runs without a transport).
    pub fn tick(&mut self) {
        self.run_intervals();
    }

    /// Whether an interval probe is due (as [`Session::run_intervals`] decides).
    pub(super) fn intervals_due(&self) -> bool {
        let now = std::time::Instant::now();
        self.bt.specials.iter().any(|s| {
            matches!(
                (s.trigger, s.next),
                (Trigger::Interval { .. }, Some(next)) if next <= now + std::time::Duration::from_micros(500)
            )
        })
    }

    /// Runs the interval probes that are due.
    pub(super) fn run_intervals(&mut self) {
        let now = std::time::Instant::now();
        let mut due = Vec::new();
        let mut latest = now;
        for s in &mut self.bt.specials {
            if let (Trigger::Interval { period_ns }, Some(next)) = (s.trigger, s.next)
                && next <= now + std::time::Duration::from_micros(500)
            {
                let p = std::time::Duration::from_nanos(period_ns);
                let mut n = next;
                while n <= now {
                    n += p;
                }
                s.next = Some(n);
                latest = latest.max(next);
                due.push((s.prog, s.index));
            }
        }
        // Due within the wake-up's slack, but never run early: a probe's
        // `nsecs` is at least a whole period after BEGIN's.
        let early = latest.saturating_duration_since(std::time::Instant::now());
        if !due.is_empty() && !early.is_zero() {
            std::thread::sleep(early);
        }
        for (prog, index) in due {
            if !self.bt.exited {
                self.run_special(prog, index);
            }
        }
        self.out.flush();
    }

    /// Runs one special probe: no hit (identity builtins describe wprobe).
    fn run_special(&mut self, prog: usize, index: usize) {
        let data = self.runner.store.data_mut();
        data.services.special = true;
        // A zero-sized hit: boxing it allocates nothing.
        let mut empty: Box<dyn crate::transport::TransportHit> = Box::new(crate::transport::NoHit);
        std::mem::swap(&mut data.env.hit, &mut empty);
        let out = self.runner.run(prog, index);
        let data = self.runner.store.data_mut();
        std::mem::swap(&mut data.env.hit, &mut empty);
        data.services.special = false;
        match &out {
            RunOutcome::Returned(Outcome::Stop) => {
                self.request_stop();
                // Its records are written just below, by their own path.
                self.bt.exit_run_unwritten = false;
            }
            RunOutcome::Trapped(m) => crate::elog!("wprobe: special probe trapped: {m}"),
            RunOutcome::FuelExhausted => crate::elog!("wprobe: special probe ran out of fuel"),
            _ => {}
        }
        self.write_special_records(prog);
    }

    /// Writes the records of a special probe's run (events only).
    fn write_special_records(&mut self, prog: usize) {
        let data = self.runner.store.data();
        let mut bytes = std::mem::take(&mut self.bt.buf);
        let mut events = 0u64;
        for r in &data.sink.records {
            if r.kind == RecordKind::Event {
                events += 1;
                self.bt
                    .event(&mut bytes, &data.services, prog, &data.sink, r);
            }
        }
        self.out.write(&bytes, events);
        bytes.clear();
        self.bt.buf = bytes;
        self.runner.store.data_mut().sink.clear();
    }

    /// Whether any probe trapped, ran out of fuel or lost samples (the
    /// one-liner summary is printed only then).
    pub(super) fn abnormal(&self) -> bool {
        self.dropped_unattributed > 0
            || self.probes.iter().any(|p| {
                let s = &p.stats;
                s.traps + s.fuel_exhausted + s.uncaught + s.dropped > 0
            })
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}
