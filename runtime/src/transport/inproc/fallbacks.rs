//! What arming fell back to, said to the user: the sites where no jump
//! could go (a trap each instead) and the near jumps, as they are armed;
//! at the end of the run, the ptrace stops the trap sites cost.

use super::InProc;

/// From this many ptrace stops at trap sites in a run, their cost is said
/// at its end (`InProc::say_trap_stops`).
const TRAP_STOPS_SAID: u64 = 1000;

/// Trap-site fallbacks said a line each up to this many; beyond, one line.
const FALLBACKS_LISTED: usize = 8;

/// Functions that line names at most (a Rust program had 6,000).
const FALLBACKS_NAMED: usize = 30;

impl InProc {
    /// Prints where planning fell back to a trap, and why: a line per
    /// site, or beyond [`FALLBACKS_LISTED`] sites one line naming their
    /// functions (`WPROBE_DEBUG` lists every site).
    pub(super) fn say_fallbacks(&mut self) {
        let near = std::mem::take(&mut self.patcher.near_notes);
        if crate::transport::VERBOSE.load(std::sync::atomic::Ordering::Relaxed)
            || std::env::var_os("WPROBE_DEBUG").is_some()
        {
            for n in near {
                if self.said.insert(n.clone()) {
                    crate::elog!("wprobe: process {}: {n}", self.pid);
                }
            }
        }
        let mut notes = std::mem::take(&mut self.patcher.notes);
        // A library opened again gets its sites again: said once.
        notes.retain(|(_, n)| self.said.insert(n.clone()));
        if notes.len() <= FALLBACKS_LISTED || std::env::var_os("WPROBE_DEBUG").is_some() {
            for (_, n) in notes {
                crate::elog!("wprobe: process {}: {n}", self.pid);
            }
            return;
        }
        let mut funcs: Vec<&str> = Vec::new();
        for (f, _) in &notes {
            if !funcs.contains(&f.as_str()) {
                funcs.push(f);
            }
        }
        let named = funcs.len().min(FALLBACKS_NAMED);
        let more = match funcs.len() - named {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        crate::elog!(
            "wprobe: process {}: no jump can go at {} sites (a function too short for one, or \
             code branching into the bytes it would replace): a trap (`hlt`) at each instead, \
             a ptrace stop per hit; in {} functions: {}{more} (WPROBE_DEBUG=1 lists each site and \
             why)",
            self.pid,
            notes.len(),
            funcs.len(),
            funcs[..named].join(", ")
        );
    }

    /// Adds the stops the current [`traps::Traps`](super::traps::Traps)
    /// counted to the run's.
    pub(super) fn keep_trap_stops(&mut self) {
        if let Some(t) = self.traps.as_mut() {
            for (at, n) in t.take_stops() {
                *self.trap_stops.entry(at).or_default() += n;
            }
        }
    }

    /// Says what the trap sites cost: with [`TRAP_STOPS_SAID`] stops or
    /// more, a warning naming the busiest sites' functions (a stop is tens
    /// of microseconds, against tens of nanoseconds for a jump);
    /// `WPROBE_DEBUG` lists the ten busiest whatever their count.
    pub(super) fn say_trap_stops(&self) {
        let total: u64 = self.trap_stops.values().sum();
        let debug = std::env::var_os("WPROBE_DEBUG").is_some();
        if total == 0 || (total < TRAP_STOPS_SAID && !debug) {
            return;
        }
        let mut v: Vec<(u64, u64)> = self.trap_stops.iter().map(|(&a, &c)| (a, c)).collect();
        v.sort_by_key(|&(a, c)| (std::cmp::Reverse(c), a));
        let named = |&(a, c): &(u64, u64)| match self.patcher.trap_funcs.get(&a) {
            Some(f) if !f.is_empty() => format!("{f} at {a:#x} ({c})"),
            _ => format!("{a:#x} ({c})"),
        };
        if debug {
            let top: Vec<String> = v.iter().take(10).map(named).collect();
            crate::elog!(
                "wprobe: debug: process {}: {total} ptrace stops at trap sites; the busiest: {}",
                self.pid,
                top.join(", ")
            );
        }
        if total >= TRAP_STOPS_SAID {
            let top: Vec<String> = v.iter().take(3).map(named).collect();
            crate::elog!(
                "wprobe: warning: process {}: {total} ptrace stops at {} trap sites (no jump fits \
                 there: a stop per hit, tens of microseconds each); the busiest: {}",
                self.pid,
                v.len(),
                top.join(", ")
            );
        }
    }
}
