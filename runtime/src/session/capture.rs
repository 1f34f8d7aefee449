//! `wprobe bench -- CMD`: the first hit of each probe, copied into a
//! synthetic environment (registers, identity, and a bounded image of the
//! memory a handler is likely to read) that the benchmark replays.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::proc::procmaps::Mapping;
use crate::transport::TransportHit;

/// The first hit of each probe, recorded as a synthetic environment.
pub(super) struct Capture {
    /// By probe.
    pub(super) hits: Vec<Option<rpn2wasm::model::ModelEnv>>,
    /// Set once every probe has its hit (stops the run).
    pub(super) done: Arc<AtomicBool>,
}

impl Capture {
    /// Whether probe `pi` has no captured hit yet.
    pub(super) fn wants(&self, pi: usize) -> bool {
        self.hits.get(pi).is_some_and(Option::is_none)
    }

    /// Keeps `env` as the hit of probe `pi`.
    pub(super) fn keep(&mut self, pi: usize, env: rpn2wasm::model::ModelEnv) {
        self.hits[pi] = Some(env);
        if self.hits.iter().all(Option::is_some) {
            self.done.store(true, Ordering::SeqCst);
        }
    }
}

/// Largest mapping copied whole into a captured hit.
const CAPTURE_MAPPING_MAX: u64 = 256 << 10;
/// Bytes of stack copied above the stack pointer (and the red zone below it).
const CAPTURE_STACK_BYTES: u64 = 64 << 10;
/// Bytes copied around each register value that points into readable memory.
const CAPTURE_AROUND_POINTER: u64 = 8 << 10;
/// Total budget of a captured memory image.
const CAPTURE_TOTAL_MAX: u64 = 64 << 20;

/// Copies what a handler can see at `hit` into a synthetic environment:
/// every register, the thread's identity, and a memory image of the stack
/// around the stack pointer, of memory around every register that points
/// into a readable mapping, and of every readable mapping of at most
/// 256 KiB (data segments, small heaps), within a 64 MiB budget that is
/// spent in that order (a piece that no longer fits is left out whole; a
/// small mapping partly copied as a pointer's surroundings may thus be
/// partly present).
pub(super) fn capture_hit(
    hit: &mut dyn TransportHit,
    maps: &[Mapping],
    bias: u64,
) -> rpn2wasm::model::ModelEnv {
    use hostabi::regs;
    let mut env = rpn2wasm::model::ModelEnv::new();
    let mut pointers = Vec::new();
    for r in regs::REGS {
        if r.is_alias() || r.id == regs::CPUID {
            continue;
        }
        for part in 0..r.parts() {
            if let Some(v) = hit.read_reg(r.id, part) {
                env.set_reg_part(r.id, part, v);
                pointers.push(v);
            }
        }
    }
    env.tid = hit.tid();
    env.pid = hit.pid();
    env.cpu = hit.cpu();
    env.thread_pointer = hit.thread_pointer();
    env.load_bias = bias;
    env.now_ns = hit.now_ns();
    let sp = hit.read_reg(regs::RSP, 0).unwrap_or(0);
    // In order of importance, so that a process with more readable memory
    // than the budget still gives the handler its stack and what its
    // registers point to: the stack, then around each pointer, then whole
    // small mappings.
    let stack = vec![(
        sp.saturating_sub(256),
        sp.saturating_add(CAPTURE_STACK_BYTES),
    )];
    let around = pointers
        .iter()
        .map(|p| {
            let page = p & !0xfff;
            (
                page.saturating_sub(CAPTURE_AROUND_POINTER / 2),
                page.saturating_add(CAPTURE_AROUND_POINTER),
            )
        })
        .collect();
    let small = maps
        .iter()
        .filter(|m| m.read && m.end - m.start <= CAPTURE_MAPPING_MAX)
        .map(|m| (m.start, m.end))
        .collect();
    let mut taken: Vec<(u64, u64)> = Vec::new();
    let mut total = 0;
    for class in [stack, around, small] {
        for (a, b) in readable_parts(class, maps) {
            for (a, b) in uncovered(a, b, &taken) {
                if total + (b - a) > CAPTURE_TOTAL_MAX {
                    continue;
                }
                let mut bytes = vec![0u8; (b - a) as usize];
                let n = hit.read_mem(a, &mut bytes);
                bytes.truncate(n);
                if !bytes.is_empty() {
                    total += bytes.len() as u64;
                    taken.push((a, a + bytes.len() as u64));
                    let writable = maps.iter().any(|m| m.write && m.start <= a && a < m.end);
                    env.map(a, bytes, true, writable);
                }
            }
        }
        taken = merge(taken);
    }
    env
}

/// `ranges` clipped to the readable mappings, sorted and merged.
fn readable_parts(ranges: Vec<(u64, u64)>, maps: &[Mapping]) -> Vec<(u64, u64)> {
    let mut clipped = Vec::new();
    for (a, b) in ranges {
        for m in maps.iter().filter(|m| m.read && m.start < b && a < m.end) {
            clipped.push((a.max(m.start), b.min(m.end)));
        }
    }
    merge(clipped)
}

/// Sorts ranges and merges those that overlap. Ranges that only touch stay
/// apart, so that adjacent mappings are budgeted one by one.
fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in ranges {
        match merged.last_mut() {
            Some(last) if a < last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// The parts of `[a, b)` outside the sorted, disjoint ranges of `taken`.
fn uncovered(a: u64, b: u64, taken: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut from = a;
    for &(x, y) in taken {
        if y <= from || x >= b {
            continue;
        }
        if x > from {
            out.push((from, x));
        }
        from = from.max(y);
    }
    if from < b {
        out.push((from, b));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{merge, uncovered};

    #[test]
    fn merge_joins_overlapping_ranges_only() {
        assert_eq!(
            merge(vec![
                (30, 40),
                (0, 10),
                (10, 20),
                (35, 50),
                (60, 61),
                (5, 8)
            ]),
            [(0, 10), (10, 20), (30, 50), (60, 61)]
        );
        assert_eq!(merge(vec![]), []);
    }

    #[test]
    fn uncovered_leaves_out_what_is_taken() {
        let taken = [(10, 20), (30, 40)];
        assert_eq!(uncovered(0, 50, &taken), [(0, 10), (20, 30), (40, 50)]);
        assert_eq!(uncovered(12, 18, &taken), []);
        assert_eq!(uncovered(15, 35, &taken), [(20, 30)]);
        assert_eq!(uncovered(40, 45, &taken), [(40, 45)]);
        assert_eq!(uncovered(0, 5, &[]), [(0, 5)]);
    }
}
