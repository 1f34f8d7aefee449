//! Stopping a whole process (every running thread but one) and letting it
//! go again, for patching and for reading every thread's registers.

use super::PtraceTracer;
use super::events::is_group_stop_sig;
use super::threads::TState;
use crate::sys::ptrace::{self as sys, Status};

impl PtraceTracer {
    /// Stops every running thread of `pid` except `except`; returns those
    /// stopped only by our interrupt (to resume later). Other stops that
    /// arrive are queued for normal handling.
    pub(super) fn stop_world(&mut self, pid: i32, except: i32) -> Vec<i32> {
        self.stop_world_except(pid, &[except])
    }

    /// [`PtraceTracer::stop_world`] leaving every thread of `except` alone.
    pub(super) fn stop_world_except(&mut self, pid: i32, except: &[i32]) -> Vec<i32> {
        let tids: Vec<i32> = match self.procs.get(&pid) {
            Some(p) => {
                p.threads
                    .iter()
                    .copied()
                    .filter(|t| {
                        !except.contains(t)
                            && self.threads.get(t).is_some_and(|th| {
                                matches!(th.state, TState::Running | TState::Free)
                            })
                    })
                    .collect()
            }
            None => return Vec::new(),
        };
        self.collect_stops(&tids, true)
    }

    /// Waits for the attach stops of every running thread of `pid` (already
    /// seized and interrupted).
    pub(super) fn settle(&mut self, pid: i32) {
        if let Some(tids) = self.threads_in(pid, TState::Running) {
            self.collect_stops(&tids, false);
        }
    }

    /// The threads of `pid` in state `state` (`None`: `pid` is not traced).
    pub(super) fn threads_in(&self, pid: i32, state: TState) -> Option<Vec<i32>> {
        let p = self.procs.get(&pid)?;
        let tids = p.threads.iter().copied();
        Some(
            tids.filter(|t| self.threads.get(t).is_some_and(|th| th.state == state))
                .collect(),
        )
    }

    pub(super) fn collect_stops(&mut self, tids: &[i32], interrupt: bool) -> Vec<i32> {
        let mut held = Vec::new();
        for &t in tids {
            if interrupt && sys::interrupt(t).is_err() {
                continue;
            }
            match sys::wait(t, 0) {
                Ok(Some((_, raw))) => {
                    let th = self.threads.get_mut(&t).expect("invariant: listed thread");
                    th.state = TState::Held;
                    match sys::decode_status(raw) {
                        Status::Stopped { sig, event }
                            if event == libc::PTRACE_EVENT_STOP
                                && !is_group_stop_sig(sig)
                                && !th.new =>
                        {
                            held.push(t)
                        }
                        _ => self.queue.push_back((t, raw)),
                    }
                }
                _ => {
                    // Gone without a status for us.
                    if let Some(th) = self.threads.get_mut(&t) {
                        th.state = TState::Held;
                    }
                }
            }
        }
        held
    }
}
