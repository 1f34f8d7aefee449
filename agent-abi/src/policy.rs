//! A probe's policy: `ignore` (its first hits skipped), `maxhits` (the
//! probe disabled after that many handler runs; 0: no limit, as in RPN,
//! spec §6.1) and the handler's `remove` outcome (the probe disabled).
//! Written once, here, and applied by both sides that run handlers: the
//! tracer's session (`runtime/src/session.rs`: ptrace and perf) and the
//! agent (`agent/src/run.rs`: the in-process transport). Each side keeps
//! its own counters (plain integers in the session, the [`ProbeSlot`]'s
//! atomics in the agent) and asks these pure functions what they mean.
//!
//! [`ProbeSlot`]: crate::ProbeSlot
//!
//! At a hit of an enabled probe (a disabled probe's hits are neither
//! counted nor run), the caller:
//! 1. counts the hit (`hits`, ignored ones included);
//! 2. if [`ignores`] says so, counts it in `ignored` as
//!    well and stops there: no handler run, and `maxhits` is not looked at
//!    (an ignored hit is no run);
//! 3. otherwise runs the handler and counts the run (`runs`, whatever its
//!    outcome: returned, out of fuel, trapped);
//! 4. disables the probe if [`after_run`], given
//!    whether the handler returned `remove` and the runs so far (this one
//!    included), says [`Next::Disable`].

/// What becomes of a probe after one of its handler runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The probe stays enabled.
    GoOn,
    /// The probe is disabled: its later hits are not counted and run
    /// no handler.
    Disable,
}

/// Whether a hit of a probe with `ignore` is skipped, given `ignored`,
/// the hits of it skipped so far: its first `ignore` hits are (none
/// with `ignore` 0). A skipped hit still counts as a hit, and counts as
/// ignored; it runs no handler and is no run for `maxhits`.
#[inline]
#[must_use]
pub const fn ignores(ignore: u64, ignored: u64) -> bool {
    ignored < ignore
}

/// Whether a probe with `maxhits` has used it up after `runs` handler
/// runs (0: no limit).
#[inline]
#[must_use]
pub const fn used_up(maxhits: u64, runs: u64) -> bool {
    maxhits != 0 && runs >= maxhits
}

/// What a handler run means for its probe: `removed` when the handler
/// returned `remove`, `runs` the probe's runs so far, this one
/// included. Disabled on `remove` (whatever `maxhits`) or once
/// `maxhits` is used up (whatever the outcome, even a trap or a fuel
/// exhaustion: every run counts); a `remove` on the last run `maxhits`
/// allows disables it once.
#[inline]
#[must_use]
pub const fn after_run(removed: bool, maxhits: u64, runs: u64) -> Next {
    if removed || used_up(maxhits, runs) {
        Next::Disable
    } else {
        Next::GoOn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hits `0..hits` of a probe, as a caller applies the policy: how
    /// many were ignored, how many ran, and whether it ended disabled
    /// (and at which hit). `remove_at`: the run that returns `remove`.
    fn drive(
        ignore: u64,
        maxhits: u64,
        remove_at: Option<u64>,
        hits: u64,
    ) -> (u64, u64, Option<u64>) {
        let (mut ignored, mut runs) = (0, 0);
        for hit in 1..=hits {
            if ignores(ignore, ignored) {
                ignored += 1;
                continue;
            }
            runs += 1;
            if after_run(remove_at == Some(runs), maxhits, runs) == Next::Disable {
                return (ignored, runs, Some(hit));
            }
        }
        (ignored, runs, None)
    }

    #[test]
    fn ignore_skips_the_first_hits() {
        assert!(!ignores(0, 0));
        assert!(ignores(2, 0));
        assert!(ignores(2, 1));
        assert!(!ignores(2, 2));
        assert!(!ignores(2, 3));
        assert_eq!(drive(3, 0, None, 10), (3, 7, None));
        assert_eq!(drive(0, 0, None, 10), (0, 10, None));
        assert_eq!(drive(u64::MAX, 0, None, 10), (10, 0, None));
    }

    #[test]
    fn maxhits_counts_runs_and_0_is_no_limit() {
        assert!(!used_up(0, 0));
        assert!(!used_up(0, u64::MAX));
        assert!(!used_up(3, 2));
        assert!(used_up(3, 3));
        assert!(used_up(3, 4));
        assert!(used_up(1, 1));
        // Ignored hits are no runs: disabled at the 2 + 3rd hit.
        assert_eq!(drive(2, 3, None, 10), (2, 3, Some(5)));
        assert_eq!(drive(0, 1, None, 10), (0, 1, Some(1)));
        assert_eq!(drive(0, 0, None, 1000), (0, 1000, None));
    }

    #[test]
    fn remove_disables_whatever_maxhits() {
        assert_eq!(after_run(true, 0, 1), Next::Disable);
        assert_eq!(after_run(true, 5, 1), Next::Disable);
        assert_eq!(after_run(false, 5, 1), Next::GoOn);
        assert_eq!(after_run(false, 0, 1), Next::GoOn);
        assert_eq!(drive(1, 0, Some(2), 10), (1, 2, Some(3)));
        // `remove` on the last run `maxhits` allows: disabled there,
        // once.
        assert_eq!(after_run(true, 2, 2), Next::Disable);
        assert_eq!(drive(0, 2, Some(2), 10), (0, 2, Some(2)));
        // After it: never reached.
        assert_eq!(drive(0, 2, Some(3), 10), (0, 2, Some(2)));
    }
}
