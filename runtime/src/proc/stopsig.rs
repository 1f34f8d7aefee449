//! The signals that stop `wprobe run`: SIGINT, SIGTERM, SIGHUP (and
//! SIGPIPE, when the output is gone). Each sets the stop flag the
//! transports poll; wprobe then detaches cleanly. Which signal it was and
//! where it came from is kept, so that a launched command gets the signal
//! as it would have untraced (see [`StopSignals::forward_after_detach`]):
//! Ctrl-C in a terminal reaches the command directly (the kernel sends it
//! to the whole foreground process group), while a `kill` aimed at wprobe
//! alone is passed on, as strace and `bpftrace -c` do.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use signal_hook::consts::{SIGHUP, SIGINT, SIGPIPE, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::Cause;

/// The stop flag and the signal that set it.
#[derive(Clone, Debug)]
pub struct StopSignals {
    /// Set by the first stopping signal.
    pub stop: Arc<AtomicBool>,
    last: Arc<Mutex<Option<Received>>>,
}

/// A stopping signal wprobe received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// The signal number.
    pub signal: i32,
    /// Sent by a process with `kill` (not by the kernel, as a terminal's
    /// Ctrl-C is, which the command's process group received too).
    pub sent: bool,
}

/// The handlers installed at the start of `main` ([`StopSignals::early`]).
static EARLY: std::sync::OnceLock<StopSignals> = std::sync::OnceLock::new();

impl StopSignals {
    /// Installs the handlers first thing in `main`, for the commands that
    /// trace (a signal that arrives before them is lost when wprobe was
    /// started with it ignored, as `cmd &` in a script starts it):
    /// [`StopSignals::install`] then returns these.
    pub fn early() {
        if EARLY.get().is_none()
            && let Ok(s) = StopSignals::install_new()
        {
            let _ = EARLY.set(s);
        }
    }

    /// Installs the handlers (a thread waits for the signals), or returns
    /// those [`StopSignals::early`] installed.
    pub fn install() -> std::io::Result<StopSignals> {
        if let Some(s) = EARLY.get() {
            return Ok(s.clone());
        }
        StopSignals::install_new()
    }

    fn install_new() -> std::io::Result<StopSignals> {
        let stop = Arc::new(AtomicBool::new(false));
        let last = Arc::new(Mutex::new(None));
        let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP, SIGPIPE])?;
        let (s, l) = (stop.clone(), last.clone());
        std::thread::spawn(move || {
            for info in signals.forever() {
                let r = Received {
                    signal: info.signal,
                    sent: matches!(info.cause, Cause::Sent(_)),
                };
                if let Ok(mut g) = l.lock() {
                    g.get_or_insert(r);
                }
                s.store(true, Ordering::SeqCst);
            }
        });
        Ok(StopSignals { stop, last })
    }

    /// The first stopping signal, if any arrived.
    pub fn received(&self) -> Option<Received> {
        self.last.lock().ok().and_then(|g| *g)
    }

    /// After wprobe detached from the command it launched (`pid`), passes on
    /// the signal that stopped it, unless the command received it itself
    /// (a terminal's Ctrl-C; `delivered`: the signals it was detached with,
    /// or still pending). SIGPIPE (wprobe's output is gone) is wprobe's own.
    /// Returns the signal passed on.
    pub fn forward_after_detach(&self, pid: i32, delivered: &[i32]) -> Option<i32> {
        let r = self.received()?;
        if !r.sent || r.signal == SIGPIPE || delivered.contains(&r.signal) || pending(pid, r.signal)
        {
            return None;
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::try_from(r.signal).ok()?,
        )
        .ok()?;
        Some(r.signal)
    }
}

/// Whether `sig` is pending for process `pid` (shared or main thread's set).
fn pending(pid: i32, sig: i32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    s.lines()
        .filter_map(|l| {
            l.strip_prefix("ShdPnd:")
                .or_else(|| l.strip_prefix("SigPnd:"))
        })
        .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
        .any(|m| m & (1 << (sig - 1)) != 0)
}
