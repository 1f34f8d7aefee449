//! Ticks (interval probes) and the waker that ends a blocking `waitpid`
//! when the stop flag is set.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{PtraceEvent, PtraceTracer};
use crate::sys::ptrace::{self as sys};

use super::Cb;

/// How often the waker thread looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(20);

// Ticks (interval probes): a child that sleeps until the next due time
// and exits wakes the blocking `waitpid` of the event loop.
impl PtraceTracer {
    /// Delivers [`PtraceEvent::Tick`] every `period` during [`PtraceTracer::run`].
    pub fn set_tick(&mut self, period: Duration) {
        self.tick = Some((period, std::time::Instant::now() + period, 0));
    }

    /// Starts the sleeping child for the next tick, if none is running.
    pub(super) fn arm_tick(&mut self) {
        let Some((_, due, child)) = self.tick else {
            return;
        };
        if child != 0 {
            return;
        }
        let wait = due.saturating_duration_since(std::time::Instant::now());
        let pid = crate::sys::process::sleeper_child(wait).unwrap_or(0);
        if pid > 0
            && let Some(t) = self.tick.as_mut()
        {
            t.2 = pid;
        }
    }

    /// The tick child exited: deliver the tick, schedule the next one.
    pub(super) fn tick_fired(&mut self, cb: Cb<'_>) {
        if let Some(t) = self.tick.as_mut() {
            t.2 = 0;
            let now = std::time::Instant::now();
            while t.1 <= now {
                t.1 += t.0;
            }
        }
        let _ = cb(self, PtraceEvent::Tick);
    }

    /// Kills and reaps a tick child still sleeping.
    pub(super) fn end_tick(&mut self) {
        if let Some(t) = self.tick.as_mut()
            && t.2 > 0
        {
            let _ = crate::sys::process::kill(t.2, libc::SIGKILL);
            let _ = sys::wait(t.2, 0);
            t.2 = 0;
        }
    }
}

/// The waker thread: when `stop` becomes true, writes the waker pipe.
pub(super) fn waker(stop: &AtomicBool, done: &AtomicBool, wfd: i32) {
    while !done.load(Ordering::SeqCst) {
        if stop.load(Ordering::SeqCst) {
            // The descriptor stays open until this scoped thread is joined.
            crate::sys::process::poke_pipe(wfd);
            return;
        }
        std::thread::sleep(STOP_POLL);
    }
}
