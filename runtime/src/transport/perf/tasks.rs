//! The tasks of a run with `-f`: the ring's dummy events report every fork
//! and exit in the traced process tree (`PERF_RECORD_FORK`,
//! `PERF_RECORD_EXIT`, inherited like the probes), so that the run goes on
//! while processes forked by the command still run — a daemon the command
//! started — and ends when the last of them exits, as `perf record` and
//! `bpftrace -c` do.

use std::collections::HashSet;

/// `PERF_RECORD_EXIT`.
pub(super) const RECORD_EXIT: u32 = 4;
/// `PERF_RECORD_FORK`.
pub(super) const RECORD_FORK: u32 = 7;

/// The live tasks of the traced tree.
#[derive(Debug, Default)]
pub(super) struct Tasks {
    /// Thread ids alive (forked, not exited).
    live: HashSet<i32>,
    /// Exits read before their fork (the two records were written on
    /// different CPUs, whose rings are read in turn).
    early: HashSet<i32>,
}

/// `(pid, tid)` of a fork or exit record body (`pid, ppid, tid, ptid, time`).
fn ids(body: &[u8]) -> Option<(i32, i32)> {
    let word = |i: usize| -> Option<i32> {
        Some(u32::from_ne_bytes(body.get(i..i + 4)?.try_into().ok()?) as i32)
    };
    Some((word(0)?, word(8)?))
}

impl Tasks {
    /// Starts with the tasks traced from the start.
    pub(super) fn new(tids: &[i32]) -> Tasks {
        Tasks {
            live: tids.iter().copied().collect(),
            early: HashSet::new(),
        }
    }

    /// Takes a fork or exit record into account (other records are ignored).
    pub(super) fn record(&mut self, ty: u32, body: &[u8]) {
        let Some((_, tid)) = ids(body) else { return };
        match ty {
            RECORD_FORK if !self.early.remove(&tid) => {
                self.live.insert(tid);
            }
            RECORD_EXIT if !self.live.remove(&tid) => {
                self.early.insert(tid);
            }
            _ => {}
        }
    }

    /// Forgets tasks that are gone or zombies (a record lost with a full
    /// ring, whose exit was never reported); reads `/proc` per task: call
    /// once the command exited, not per hit.
    pub(super) fn prune(&mut self) {
        self.live.retain(|&tid| {
            !matches!(
                crate::procinfo::untraceable(tid),
                crate::procinfo::Untraceable::Gone | crate::procinfo::Untraceable::Zombie
            )
        });
    }

    /// Whether every task has exited.
    pub(super) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The processes still running (their tasks grouped by `/proc` lookup).
    pub(super) fn processes(&self) -> usize {
        let mut pids: HashSet<i32> = HashSet::new();
        for &tid in &self.live {
            let tgid = std::fs::read_to_string(format!("/proc/{tid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Tgid:"))
                        .and_then(|v| v.trim().parse::<i32>().ok())
                })
                .unwrap_or(tid);
            pids.insert(tgid);
        }
        pids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(pid: i32, tid: i32) -> Vec<u8> {
        let mut b = Vec::new();
        for w in [pid, 1, tid, 1] {
            b.extend_from_slice(&(w as u32).to_ne_bytes());
        }
        b.extend_from_slice(&0u64.to_ne_bytes());
        b
    }

    #[test]
    fn forks_and_exits_in_any_order_leave_the_live_tasks() {
        let mut t = Tasks::new(&[10]);
        t.record(RECORD_FORK, &body(11, 11));
        t.record(RECORD_EXIT, &body(12, 12)); // read before its fork
        t.record(RECORD_FORK, &body(12, 12));
        t.record(RECORD_EXIT, &body(10, 10));
        assert!(!t.is_empty());
        t.record(RECORD_EXIT, &body(11, 11));
        assert!(t.is_empty());
        t.record(RECORD_EXIT, &body(11, 11)[..6]); // truncated: ignored
        assert!(t.is_empty());
    }
}
