//! The tasks of a run with `-f`: the ring's dummy events report every fork
//! and exit in the traced process tree (`PERF_RECORD_FORK`,
//! `PERF_RECORD_EXIT`, inherited like the probes), so that the run goes on
//! while processes forked by the command still run — a daemon the command
//! started — and ends when the last of them exits, as `perf record` and
//! `bpftrace -c` do.

use std::collections::HashSet;

/// `PERF_RECORD_COMM`.
pub(super) const RECORD_COMM: u32 = 3;
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
                crate::proc::procinfo::untraceable(tid),
                crate::proc::procinfo::Untraceable::Gone
                    | crate::proc::procinfo::Untraceable::Zombie
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

/// The thread names of a system-wide run, by tid, from the kernel's
/// records: `PERF_RECORD_COMM` at each exec (and `prctl(PR_SET_NAME)`),
/// `PERF_RECORD_FORK` for a new task (it starts with its parent's name).
/// A hit's name is known even when its process exited before the sample
/// was read; tasks started before the run are not in it (the host reads
/// `/proc` for those). Bounded: forgotten wholesale past [`Comms::MAX`].
#[derive(Debug, Default)]
pub(super) struct Comms {
    by_tid: std::collections::HashMap<u32, [u8; 16]>,
}

impl Comms {
    /// Names kept at most.
    const MAX: usize = 1 << 16;

    /// Takes a comm or fork record into account (other records are ignored).
    pub(super) fn record(&mut self, ty: u32, body: &[u8]) {
        let word = |i: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(body.get(i..i + 4)?.try_into().ok()?))
        };
        let name = match ty {
            // pid, tid, comm (NUL-terminated, padded to 8 bytes).
            RECORD_COMM => {
                let Some(tid) = word(4) else { return };
                let raw = body.get(8..).unwrap_or_default();
                let n = raw
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(raw.len())
                    .min(15);
                let mut b = [0u8; 16];
                b[..n].copy_from_slice(&raw[..n]);
                Some((tid, b))
            }
            // pid, ppid, tid, ptid, time.
            RECORD_FORK => {
                let (Some(tid), Some(ptid)) = (word(8), word(12)) else {
                    return;
                };
                self.by_tid.get(&ptid).map(|b| (tid, *b))
            }
            _ => None,
        };
        if let Some((tid, b)) = name {
            if self.by_tid.len() >= Self::MAX {
                self.by_tid.clear();
            }
            self.by_tid.insert(tid, b);
        }
    }

    /// The name of `tid`, when a record gave it.
    pub(super) fn get(&self, tid: u32) -> Option<[u8; 16]> {
        self.by_tid.get(&tid).copied()
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
    fn names_come_from_comm_records_and_pass_to_forked_tasks() {
        let mut c = Comms::default();
        let mut comm = Vec::new();
        for w in [20u32, 21] {
            comm.extend_from_slice(&w.to_ne_bytes());
        }
        comm.extend_from_slice(b"swprog\0\0");
        c.record(RECORD_COMM, &comm);
        assert_eq!(&c.get(21).unwrap()[..7], b"swprog\0");
        c.record(RECORD_FORK, &body(20, 22)[..8]); // truncated: ignored
        let mut fork = Vec::new();
        for w in [30u32, 20, 30, 21] {
            fork.extend_from_slice(&w.to_ne_bytes());
        }
        c.record(RECORD_FORK, &fork);
        assert_eq!(c.get(30), c.get(21));
        assert_eq!(c.get(99), None);
        c.record(RECORD_COMM, &comm[..6]); // truncated: ignored
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
