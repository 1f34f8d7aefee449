//! The agent's counters in the shared region, reported to the session:
//! each probe's increments since the last report, and at the end the calls
//! of return probes still running.

use super::InProc;
use crate::transport::{Action, Event, RunCounts, Transport};

impl InProc {
    /// The counters' increments since the last report, by tag.
    fn count_deltas(&mut self, out: &mut Vec<(usize, RunCounts)>) {
        out.clear();
        let Some(a) = &self.agent else { return };
        for (&tag, _) in self.armed.iter() {
            let now = a.region.probe_counts(tag as u32);
            let Some(last) = self.reported.get_mut(tag) else {
                continue;
            };
            if now != *last {
                out.push((tag, now.since(last)));
                *last = now;
            }
        }
        out.sort_by_key(|(t, _)| *t);
    }

    /// At the end of the run: the calls of return probes still tracked
    /// (their process ended, exec'd, or is let go before they returned)
    /// ran no handler ([`Event::LeftRunning`]).
    pub(super) fn report_live_calls(
        &mut self,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) {
        let Some(a) = &self.agent else { return };
        let mut live: Vec<(usize, u64)> = self
            .marks
            .maxactive
            .keys()
            .filter(|&&tag| a.region.probe_enabled(tag as u32))
            .map(|&tag| (tag, a.region.probe_live(tag as u32)))
            .filter(|&(_, n)| n > 0)
            .collect();
        live.sort_unstable();
        for (tag, count) in live {
            on_event(self, Event::LeftRunning { tag, count });
        }
    }

    /// Reports the counters that changed since the last report.
    pub(super) fn report_counts(
        &mut self,
        deltas: &mut Vec<(usize, RunCounts)>,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) {
        self.count_deltas(deltas);
        for &(tag, counts) in deltas.iter() {
            on_event(self, Event::Counted { tag, counts });
        }
    }
}
