//! Records for a command that consumes them itself (`wprobe trace` builds
//! call trees from them) instead of having the session format and print
//! them: a [`RecordHook`] receives each handler run's records as they are
//! in the sink (bytes and item descriptors, no formatting, no allocation),
//! with the identity of the probe that produced them (its program and its
//! index in that program's manifest: the session knows which probe ran, so
//! the consumer needs no symbol lookup per hit), and the process events and
//! per-probe losses that the consumer must see in order with them.

use hostabi::env::HitEnv;

use super::Session;
use crate::out::sink::Sink;
use crate::transport::{Event, ExitStatus};

/// Who produced a handler run's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookHit {
    /// The program (in the order given to [`Session::new`]).
    pub prog: usize,
    /// The probe's index in that program's manifest.
    pub index: usize,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU.
    pub cpu: u32,
    /// Time of the hit, ns since the epoch (the transport's).
    pub time_ns: u64,
    /// The probe's run-time address for a breakpoint (or return probe's
    /// entry) hit; the instruction pointer for other hits.
    pub ip: u64,
}

/// What happened to the traced processes, in order with the records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookEvent {
    /// A new traced process (a fork child under `-f`).
    ProcessStarted {
        /// The child.
        pid: i32,
        /// Its parent.
        parent: i32,
    },
    /// A traced process exec'd.
    Exec {
        /// The process.
        pid: i32,
    },
    /// A traced process ended.
    ProcessExited {
        /// The process.
        pid: i32,
        /// How.
        status: ExitStatus,
    },
    /// A probe could not be armed (it is disabled; the reason is in
    /// [`Session::arm_failures`]).
    NotArmed {
        /// The probe's program.
        prog: usize,
        /// Its index in the program's manifest.
        index: usize,
    },
    /// Hits of a probe its transport could not deliver.
    Lost {
        /// The probe's program, when the transport named the probe.
        prog: Option<usize>,
        /// Its index in the program's manifest.
        index: usize,
        /// How many.
        count: u64,
    },
    /// Calls of a return probe that ran no handler.
    Missed {
        /// The probe's program.
        prog: usize,
        /// Its index in the program's manifest.
        index: usize,
        /// How many.
        count: u64,
    },
}

/// How often a record hook is given [`RecordHook::tick`] while the run
/// goes on (with interval probes: as often as they need).
pub const HOOK_TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// A consumer of records and process events.
pub trait RecordHook {
    /// One handler run ended: its records are those held by `sink` (none
    /// when it logged nothing). Called for every handler run, in the order
    /// of the hits.
    fn run(&mut self, hit: &HookHit, sink: &Sink);

    /// A process event or a loss.
    fn event(&mut self, ev: &HookEvent);

    /// A call of a return probe entered or returned, where its program
    /// asked for entry notices (`Session::request_entry_notices`: no
    /// handler runs, on any transport), or ended without returning: the
    /// transport's [`Event::Entered`], [`Event::Returned`] (what the
    /// built-in `trace_entry` and `trace_exit` handlers would have logged)
    /// or [`Event::Unwound`] as it told it, with the probe's
    /// program and its index in that program's manifest, in order with the
    /// thread's records (an unwound call before any later record of its
    /// thread).
    fn call(&mut self, prog: usize, index: usize, ev: &Event<'_>);

    /// About every [`HOOK_TICK`] while the run goes on, whether anything
    /// happened or not: what the hook holds back to write it in batches
    /// goes on now.
    fn tick(&mut self) {}
}

impl Session {
    /// Hands every handler run's records, and the process events, to
    /// `hook` instead of formatting them (they are still counted in the
    /// statistics).
    pub fn set_record_hook(&mut self, hook: Box<dyn RecordHook>) {
        self.hook = Some(hook);
    }

    /// The program and manifest index of every selected probe, in the
    /// order of [`Session::stats`].
    pub fn probe_origins(&self) -> Vec<(usize, usize)> {
        self.probes.iter().map(|p| (p.prog, p.index)).collect()
    }

    /// Probes that could not be armed, with why (their program, manifest
    /// index, and the reason: the transport's error, or the session's own
    /// refusal in the same terms), in the order the failures happened.
    pub fn arm_failures(&self) -> &[(usize, usize, crate::transport::Error)] {
        &self.failures
    }

    /// Disables the probe at `index` of program `prog` and removes it
    /// from the transport (a command whose probes work in pairs drops the
    /// other probe of a pair that could not be armed).
    pub fn disable_probe(
        &mut self,
        t: &mut dyn crate::transport::Transport,
        prog: usize,
        index: usize,
    ) {
        // `probes` is built in (program, index) order (`Session::new`).
        if let Ok(pi) = self
            .probes
            .binary_search_by_key(&(prog, index), |p| (p.prog, p.index))
        {
            self.disable(t, pi);
        }
    }

    /// Records that probe `index` of program `prog` could not be armed.
    pub(super) fn arm_failed(&mut self, prog: usize, index: usize, why: crate::transport::Error) {
        self.failures.push((prog, index, why));
        self.hook_event(HookEvent::NotArmed { prog, index });
    }

    /// Gives probe `pi`'s records to the hook; false when there is none.
    pub(super) fn hook_records(&mut self, pi: usize) -> bool {
        let Some(hook) = self.hook.as_mut() else {
            return false;
        };
        let data = self.runner.store.data();
        let env = &data.env;
        let p = &self.probes[pi];
        let hit = HookHit {
            prog: p.prog,
            index: p.index,
            pid: env.pid() as u32,
            tid: env.tid() as u32,
            cpu: env.cpu() as u32,
            time_ns: env.now_ns(),
            ip: env.hit.ip(),
        };
        hook.run(&hit, &data.sink);
        let st = &mut self.probes[pi].stats;
        for r in &data.sink.records {
            st.records += 1;
            st.bytes += r.data.len() as u64;
        }
        self.runner.store.data_mut().sink.clear();
        true
    }

    /// Gives the records of a handler run in the target to the hook;
    /// false when there is none.
    pub(super) fn hook_target_run(
        &mut self,
        pi: usize,
        run: &crate::transport::TargetRun<'_>,
    ) -> bool {
        let Some(hook) = self.hook.as_mut() else {
            return false;
        };
        let p = &self.probes[pi];
        let hit = HookHit {
            prog: p.prog,
            index: p.index,
            pid: run.pid as u32,
            tid: run.tid as u32,
            cpu: run.cpu,
            time_ns: run.time_ns,
            ip: run.ip,
        };
        hook.run(&hit, run.records);
        let st = &mut self.probes[pi].stats;
        for r in &run.records.records {
            st.records += 1;
            st.bytes += r.data.len() as u64;
        }
        true
    }

    /// The transport's tick: the hook's, and the interval probes' when
    /// there are any (the tick is set for one or the other, or both).
    pub(super) fn on_tick(&mut self, t: &mut dyn crate::transport::Transport) {
        if let Some(hook) = self.hook.as_mut() {
            hook.tick();
        }
        self.metrics_tick(t);
        // With --metrics the tick may be shorter than the intervals': the
        // target's handlers are held only when one is due.
        if self.tick_period().is_none() || (self.metrics.is_some() && !self.intervals_due()) {
            return;
        }
        if let Some(t) = t.in_target() {
            self.run_intervals_in_target(t);
        } else {
            self.run_intervals();
        }
    }

    /// Gives a process event or a loss to the hook, if there is one.
    pub(super) fn hook_event(&mut self, ev: HookEvent) {
        if let Some(hook) = self.hook.as_mut() {
            hook.event(&ev);
        }
    }

    /// Gives a call's entry, return or end without returning, as the
    /// transport told it, to the hook, if there is one and `tag` is a probe's.
    pub(super) fn hook_call(&mut self, tag: usize, ev: &Event<'_>) {
        if let (Some((prog, index)), Some(hook)) = (self.origin(tag), self.hook.as_mut()) {
            hook.call(prog, index, ev);
        }
    }

    /// `(program, manifest index)` of probe tag `pi`, if it is one.
    pub(super) fn origin(&self, pi: usize) -> Option<(usize, usize)> {
        self.probes.get(pi).map(|p| (p.prog, p.index))
    }
}
