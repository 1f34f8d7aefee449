//! Handlers a transport runs itself, inside the target (the in-process
//! transport; its [`InTarget`] hooks, reached by `Transport::in_target`):
//! the programs and probes handed to it, the handler runs and counts it
//! reports back, and the map regions, which live in the target meanwhile
//! and are read back for interval probes, `end` probes and the maps
//! printed at exit. The records of those runs are formatted by the
//! same code as the records of the session's own runs (`records`), and the
//! outcomes act the same (`remove`, `exit()`, `exit 1/2/3`).

use hostabi::Outcome;

use super::Session;
use super::hook::HookEvent;
use super::records::Origin;
use crate::transport::{
    HandlerProbe, HandlerProgram, HandlerSet, InTarget, RunCounts, TargetOutcome, TargetRun,
    Transport,
};

impl Session {
    /// What a transport that runs the handlers needs: every program, and
    /// every probe with its `ignore`, `maxhits` and its module's load bias
    /// in `pid` (known once the probes are armed).
    pub(super) fn handler_set(&self, pid: i32) -> HandlerSet<'_> {
        let data = self.runner.store.data();
        let programs = self
            .runner
            .programs
            .iter()
            .enumerate()
            .map(|(i, p)| HandlerProgram {
                label: &self.program_wasm[i].0,
                wasm: &self.program_wasm[i].1,
                gvars: u32::from(p.manifest.gvars),
                fuel: p.fuel,
                writes: p.writes,
                maps: data
                    .services
                    .maps
                    .get(i)
                    .and_then(|m| m.as_ref())
                    .map(|m| m.bytes.as_slice()),
            })
            .collect();
        let probes = self
            .probes
            .iter()
            .enumerate()
            .map(|(pi, p)| {
                let spec = &self.manifests[p.prog].probes[p.index];
                HandlerProbe {
                    tag: pi,
                    program: p.prog,
                    export: &spec.export,
                    ignore: u64::from(spec.ignore),
                    maxhits: u64::from(spec.maxhits),
                    load_bias: self
                        .bt
                        .probe_bias
                        .get(&(pi, pid))
                        .or_else(|| self.bias.get(&(p.prog, pid)))
                        .or_else(|| self.bias_default.get(&p.prog))
                        .copied()
                        .unwrap_or(0),
                    args: &spec.args,
                    usdt_args: &spec.usdt_args,
                }
            })
            .collect();
        HandlerSet {
            programs,
            probes,
            start_mono_ns: data.services.start_mono_ns,
            mono_offset_ns: data.services.mono_offset_ns,
            child_pid: data.services.child_pid,
            use_cache: self.use_cache,
        }
    }

    /// One handler run of probe `pi` in the target: its trap message, its
    /// outcome, its records.
    pub(super) fn target_ran(&mut self, t: &mut dyn Transport, pi: usize, run: &TargetRun<'_>) {
        if let Some(msg) = run.trap {
            crate::elog!(
                "wprobe: handler of {} trapped: {msg} (counted; later traps are not printed)",
                self.probes[pi].label
            );
        }
        if self.bt.active {
            self.bt.sym.note(run.pid as u64);
        }
        if self.hook_target_run(pi, run) {
            // Consumed by the hook.
        } else {
            // After `exit()`: no one-liner output (see `request_stop`).
            self.bt.drop_events = self.bt.exited;
            self.write_sink(
                pi,
                run.records,
                Origin {
                    pid: run.pid as u32,
                    tid: run.tid as u32,
                    cpu: run.cpu,
                    time_ns: run.time_ns,
                },
            );
            self.bt.drop_events = false;
        }
        match run.outcome {
            TargetOutcome::Returned(Outcome::Remove) => self.disable(t, pi),
            TargetOutcome::Returned(Outcome::Stop) => {
                self.request_stop();
                // This run's records were written above.
                self.bt.exit_run_unwritten = false;
            }
            TargetOutcome::Returned(o @ (Outcome::DebuggerHandoff | Outcome::CoreDump)) => {
                self.unhonoured(t.info(), pi, o)
            }
            TargetOutcome::Returned(Outcome::CrashDump) => self.crash_dump_unavailable(pi),
            _ => {}
        }
    }

    /// Adds what the target counted for probe `pi`.
    pub(super) fn target_counted(&mut self, pi: usize, c: RunCounts) {
        let st = &mut self.probes[pi].stats;
        st.hits += c.hits;
        st.ignored += c.ignored;
        st.runs += c.runs;
        st.fuel_exhausted += c.fuel_exhausted;
        st.traps += c.traps;
        st.uncaught += c.uncaught;
        st.dropped += c.dropped;
        st.missed += c.missed;
        st.missed_depth += c.missed_depth;
        // A call tree (`wprobe trace`) hears of calls the target did not
        // track, as it does from the transports that track them here.
        if c.missed > 0
            && let Some((prog, index)) = self.origin(pi)
        {
            self.hook_event(HookEvent::Missed {
                prog,
                index,
                count: c.missed,
            });
        }
    }

    /// Copies the map regions between the target and the session's store
    /// (`push`: to the target); the caller holds the handlers.
    fn sync_maps(&mut self, t: &mut dyn InTarget, push: bool) {
        let maps = &mut self.runner.store.data_mut().services.maps;
        for (i, m) in maps.iter_mut().enumerate() {
            if let Some(m) = m {
                t.handler_maps(i, &mut m.bytes, push);
            }
        }
    }

    /// Whether any program declares maps.
    pub(super) fn has_maps(&self) -> bool {
        self.runner
            .store
            .data()
            .services
            .maps
            .iter()
            .any(Option::is_some)
    }

    /// Runs the interval probes that are due, with the maps of the target
    /// (its handlers held meanwhile).
    pub(super) fn run_intervals_in_target(&mut self, t: &mut dyn InTarget) {
        if !self.has_maps() {
            self.run_intervals();
            return;
        }
        if !t.pause_handlers() {
            crate::elog!(
                "wprobe: warning: the target's handlers could not be held to read the maps; \
                 interval probes skipped this time"
            );
            return;
        }
        self.sync_maps(t, false);
        self.run_intervals();
        self.sync_maps(t, true);
        t.resume_handlers();
    }

    /// Reads the maps from the target while it runs (for a metrics
    /// snapshot), its handlers held for the copy, as for interval probes;
    /// `false` (said once) when they could not be held.
    pub(super) fn pull_maps_now(&mut self, t: &mut dyn InTarget) -> bool {
        if !t.pause_handlers() {
            if !std::mem::replace(&mut self.metrics_pull_failed, true) {
                crate::elog!(
                    "wprobe: warning: the target's handlers could not be held to read the maps; \
                     scrapes are served older values meanwhile"
                );
            }
            return false;
        }
        self.sync_maps(t, false);
        t.resume_handlers();
        true
    }

    /// Reads the maps back from the target at the end of the run (its
    /// handlers no longer run), for `end` probes and the exit output.
    pub(super) fn pull_target_maps(&mut self, t: &mut dyn InTarget) {
        if self.has_maps() {
            self.sync_maps(t, false);
        }
    }
}
