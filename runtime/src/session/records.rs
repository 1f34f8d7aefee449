//! The records of a handler run, formatted (text, JSON, or bpftrace's
//! output for one-liner events) and handed to the output in one write.

use hostabi::env::HitEnv;

use super::Session;
use crate::out::format::{self, RecordView};
use crate::out::output::RecordOut;
use crate::out::sink::{RecordKind, Sink};

/// Who emitted a batch of records: the hit's process, thread, CPU and time.
#[derive(Clone, Copy, Debug)]
pub(super) struct Origin {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) cpu: u32,
    pub(super) time_ns: u64,
}

/// The records of a breakpoint hit, held until the transport says whether
/// the displaced instruction faulted (spec §14 step 8, `logonfault`):
/// buffers reused from hit to hit.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Records are being held (between a breakpoint hit and its step).
    pub(super) active: bool,
    /// The probes of the hit.
    pub(super) tags: Vec<usize>,
    buf: Vec<u8>,
    /// `(probe, end of its bytes in buf, records, data bytes)`.
    parts: Vec<(usize, usize, u64, u64)>,
}

/// Hands formatted records to the output, or holds them.
fn emit(out: &mut RecordOut, held: &mut Held, pi: usize, bytes: &[u8], n: u64, data: u64) {
    if held.active {
        held.buf.extend_from_slice(bytes);
        held.parts.push((pi, held.buf.len(), n, data));
    } else {
        out.write(bytes, n);
    }
}

impl Session {
    /// Formats the records of probe `pi`'s handler run and hands them to
    /// the output, one write per run.
    pub(super) fn write_records(&mut self, pi: usize) {
        let after_exit = self.events_after_exit();
        if self.hook_records(pi) {
            return;
        }
        if self.runner.store.data().sink.records.is_empty() {
            return;
        }

        let hit = &self.runner.store.data().env;
        let origin = Origin {
            pid: hit.pid() as u32,
            tid: hit.tid() as u32,
            cpu: hit.cpu() as u32,
            time_ns: hit.now_ns(),
        };
        // Out of the store for the time it is formatted (two moves).
        let sink = std::mem::take(&mut self.runner.store.data_mut().sink);
        self.bt.drop_events = after_exit;
        self.write_sink(pi, &sink, origin);
        self.bt.drop_events = false;
        let data = self.runner.store.data_mut();
        data.sink = sink;
        data.sink.clear();
    }

    /// Formats the records of `sink`, emitted by a handler run of probe
    /// `pi` at the hit `origin` describes, and hands them to the output in
    /// one write: the records of the session's own runs and those of runs
    /// in the target (`Event::Ran`) alike.
    pub(super) fn write_sink(&mut self, pi: usize, sink: &Sink, origin: Origin) {
        if sink.records.is_empty() {
            return;
        }
        self.line.clear();
        // Records formatted into `line` and not yet handed to the output.
        let (mut in_line, mut in_line_bytes) = (0u64, 0u64);
        for r in &sink.records {
            if r.kind == RecordKind::Event && self.bt.drop_events {
                continue;
            }
            if r.kind == RecordKind::Event {
                // One-liner output, formatted as bpftrace does.
                let prog = self.probes[pi].prog;
                let data = self.runner.store.data();
                let mut bytes = std::mem::take(&mut self.bt.buf);
                self.bt.event(&mut bytes, &data.services, prog, sink, r);
                // Bytes, not text: printf output may be any bytes.
                let (out, held) = (&mut self.out, &mut self.held);
                emit(out, held, pi, self.line.as_bytes(), in_line, in_line_bytes);
                self.line.clear();
                (in_line, in_line_bytes) = (0, 0);
                emit(out, held, pi, &bytes, 1, 0);
                bytes.clear();
                self.bt.buf = bytes;
                self.probes[pi].stats.records += 1;
                continue;
            }
            let view = RecordView {
                seq: self.seq,
                stacktrace: r.kind == RecordKind::StackTrace,
                probe: &self.probes[pi].label,
                pid: origin.pid,
                tid: origin.tid,
                cpu: origin.cpu,
                major: r.major,
                minor: r.minor,
                time_ns: origin.time_ns,
                data: sink.data(r),
                items: sink.item_words(r),
            };
            format::record_styled(&mut self.line, self.opts.format, self.opts.text, &view);
            in_line += 1;
            in_line_bytes += r.data.len() as u64;
            self.seq += 1;
            self.probes[pi].stats.records += 1;
            self.probes[pi].stats.bytes += r.data.len() as u64;
        }
        let (out, held) = (&mut self.out, &mut self.held);
        emit(out, held, pi, self.line.as_bytes(), in_line, in_line_bytes);
    }

    /// The displaced instruction of the held hit ran: writes its records,
    /// or, when it faulted, only those of probes with `logonfault = yes`
    /// (the others are counted as discarded).
    pub(super) fn settle_held(&mut self, fault: Option<i32>) {
        if !self.held.active {
            return;
        }
        self.held.active = false;
        if fault.is_some() {
            for &pi in &self.held.tags {
                if let Some(p) = self.probes.get_mut(pi) {
                    p.stats.faulted += 1;
                }
            }
        }
        let mut start = 0;
        for &(pi, end, n, data) in &self.held.parts {
            let p = &mut self.probes[pi];
            let keep = fault.is_none() || self.manifests[p.prog].probes[p.index].logonfault;
            if keep {
                self.out.write(&self.held.buf[start..end], n);
            } else {
                p.stats.records -= n;
                p.stats.bytes -= data;
                p.stats.discarded += n;
            }
            start = end;
        }
        self.held.buf.clear();
        self.held.parts.clear();
    }
}
