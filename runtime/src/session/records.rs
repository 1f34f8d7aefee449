//! The records of a handler run, formatted (text, JSON, or bpftrace's
//! output for one-liner events) and handed to the output in one write.

use hostabi::env::HitEnv;

use super::Session;
use crate::format::{self, RecordView};
use crate::sink::RecordKind;

impl Session {
    /// Formats the records of probe `pi`'s handler run and hands them to
    /// the output, one write per run.
    pub(super) fn write_records(&mut self, pi: usize) {
        if self.hook_records(pi) {
            return;
        }
        let data = self.runner.store.data();
        if data.sink.records.is_empty() {
            return;
        }
        let hit = &data.env;
        let cpu = hit.cpu() as u32;
        self.line.clear();
        // Records formatted into `line` and not yet handed to the output.
        let mut in_line = 0u64;
        for r in &data.sink.records {
            if r.kind == RecordKind::Event {
                // One-liner output, formatted as bpftrace does.
                let prog = self.probes[pi].prog;
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
                        data: data.sink.data(r),
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
                pid: hit.pid() as u32,
                tid: hit.tid() as u32,
                cpu,
                major: r.major,
                minor: r.minor,
                time_ns: hit.now_ns(),
                data: data.sink.data(r),
                items: data.sink.item_words(r),
            };
            format::record(&mut self.line, self.opts.format, &view);
            in_line += 1;
            self.seq += 1;
            self.probes[pi].stats.records += 1;
            self.probes[pi].stats.bytes += r.data.len() as u64;
        }
        self.out.write(self.line.as_bytes(), in_line);
        self.runner.store.data_mut().sink.clear();
    }
}
