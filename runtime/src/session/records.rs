//! The records of a handler run, formatted (text, JSON, or bpftrace's
//! output for one-liner events) and handed to the output in one write.

use hostabi::env::HitEnv;

use super::Session;
use crate::format::{self, RecordView};
use crate::sink::{RecordKind, Sink};

/// Who emitted a batch of records: the hit's process, thread, CPU and time.
#[derive(Clone, Copy, Debug)]
pub(super) struct Origin {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) cpu: u32,
    pub(super) time_ns: u64,
}

impl Session {
    /// Formats the records of probe `pi`'s handler run and hands them to
    /// the output, one write per run.
    pub(super) fn write_records(&mut self, pi: usize) {
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
        self.write_sink(pi, &sink, origin);
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
        let mut in_line = 0u64;
        for r in &sink.records {
            if r.kind == RecordKind::Event {
                // One-liner output, formatted as bpftrace does.
                let prog = self.probes[pi].prog;
                let data = self.runner.store.data();
                let maps = data.services.maps.get(prog).and_then(|m| m.as_ref());
                let mo = maps.map(|m| crate::btout::MapOutput {
                    decls: &m.decls,
                    view: m.view(),
                });
                let ev = self.bt.events.get(prog).cloned().unwrap_or_default();
                let mut bytes = std::mem::take(&mut self.bt.buf);
                crate::btout::event(
                    &mut bytes,
                    self.bt.mode,
                    crate::btout::EventRecord {
                        kind: r.major,
                        id: r.minor,
                        data: sink.data(r),
                    },
                    &ev,
                    mo.as_ref(),
                    &mut self.bt.sym,
                );
                // Bytes, not text: printf output may be any bytes.
                self.out.write(self.line.as_bytes(), in_line);
                self.line.clear();
                in_line = 0;
                self.out.write(&bytes, 1);
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
            format::record(&mut self.line, self.opts.format, &view);
            in_line += 1;
            self.seq += 1;
            self.probes[pi].stats.records += 1;
            self.probes[pi].stats.bytes += r.data.len() as u64;
        }
        self.out.write(self.line.as_bytes(), in_line);
    }
}
