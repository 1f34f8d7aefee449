//! The agent's ring of handler runs, drained: each run handed to the
//! session as an event (a call entered or returned, a call unwound, or a
//! handler's run with its records and outcome).

use agent_abi::{rec, run_outcome};
use agent_loader::region::RunView;
use hostabi::Outcome;

use super::{InProc, Run};
use crate::out::sink::{RecordKind, Sink};
use crate::transport::{Action, Event, TargetOutcome, TargetRun, Transport};

/// Fills `sink` with the records of `run` (item descriptors through
/// `items`); returns the trap message, if the run carries one.
fn fill_sink<'a>(sink: &mut Sink, items: &mut Vec<u32>, run: &'a RunView<'a>) -> Option<&'a [u8]> {
    sink.clear();
    let mut trap = None;
    for r in run.records() {
        let kind = match r.kind {
            rec::LOG => RecordKind::Log,
            rec::STACKTRACE => RecordKind::StackTrace,
            rec::EVENT => RecordKind::Event,
            rec::TRAP => {
                trap = Some(r.data);
                continue;
            }
            _ => continue,
        };
        items.clear();
        items.extend(
            r.items
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        sink.push(kind, r.major, r.minor, r.data, items);
    }
    trap
}

/// The [`Event::Unwound`] of an unwound record of the agent.
fn unwound<'a>(pid: i32, run: &RunView<'_>) -> Option<Event<'a>> {
    let r = run.records().find(|r| r.kind == rec::UNWOUND)?;
    let word = |i: usize| {
        r.data
            .get(8 * i..8 * i + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("invariant: 8 bytes")))
    };
    Some(Event::Unwound {
        tag: run.header.probe as usize,
        pid,
        tid: run.header.tid as i32,
        entry_rsp: word(0)?,
        entry_ns: word(1)?,
        cause: match word(2)? {
            agent_abi::left::THREAD_EXIT => crate::transport::calls::Left::ThreadExit,
            _ => crate::transport::calls::Left::Unwound,
        },
    })
}

fn outcome(code: i32) -> TargetOutcome {
    match code {
        run_outcome::FUEL => TargetOutcome::FuelExhausted,
        run_outcome::TRAPPED => TargetOutcome::Trapped,
        c => Outcome::from_code(c).map_or(TargetOutcome::Trapped, TargetOutcome::Returned),
    }
}

impl InProc {
    /// Hands every handler run waiting in the ring to the session.
    pub(super) fn drain_runs(
        &mut self,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> u64 {
        let Some(mut agent) = self.agent.take() else {
            return 0;
        };
        let run = std::mem::replace(&mut self.run, Run::Draining);
        let mut sink = std::mem::take(&mut self.sink);
        let mut items = std::mem::take(&mut self.items);
        let main_pid = self.pid;
        let d = agent.region.drain(|run| {
            let h = run.header;
            // Followed children that ended before this run (`-f`).
            while let Some(i) = self.exits_due.iter().position(|e| e.2 < h.time_ns) {
                let (pid, status, _) = self.exits_due.remove(i);
                on_event(self, Event::ProcessExited { pid, status });
            }
            // A fork child's agent writes into its parent's ring (`-f`).
            let pid = if h.pid == 0 { main_pid } else { h.pid as i32 };
            if let Some(rsp) = run.entered_rsp() {
                on_event(
                    self,
                    Event::Entered {
                        tag: h.probe as usize,
                        pid,
                        tid: h.tid as i32,
                        rsp,
                        time_ns: h.time_ns,
                        ip: h.ip,
                    },
                );
                return;
            }
            if let Some([rax, entry_rsp, elapsed_ns]) = run.returned() {
                on_event(
                    self,
                    Event::Returned {
                        tag: h.probe as usize,
                        pid,
                        tid: h.tid as i32,
                        time_ns: h.time_ns,
                        ip: h.ip,
                        rax,
                        entry_rsp,
                        elapsed_ns,
                    },
                );
                return;
            }
            if h.outcome == run_outcome::UNWOUND {
                if let Some(ev) = unwound(pid, run) {
                    on_event(self, ev);
                }
                return;
            }
            let trap = fill_sink(&mut sink, &mut items, run);
            let trap = trap.map(String::from_utf8_lossy);
            let h = run.header;
            let r = TargetRun {
                pid,
                tid: h.tid as i32,
                cpu: h.cpu,
                time_ns: h.time_ns,
                ip: h.ip,
                outcome: outcome(h.outcome),
                trap: trap.as_deref(),
                records: &sink,
            };
            on_event(
                self,
                Event::Ran {
                    tag: h.probe as usize,
                    run: &r,
                },
            );
        });
        self.run = run;
        for tag in self.removed.drain(..) {
            agent.region.set_probe_enabled(tag as u32, false);
        }
        self.agent = Some(agent);
        self.sink = sink;
        self.items = items;
        d.runs
    }

    /// Bytes waiting in the ring (0 without an agent).
    pub(super) fn ring_pending(&self) -> u64 {
        self.agent.as_ref().map_or(0, |a| a.region.pending())
    }
}
