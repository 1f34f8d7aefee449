//! Where handlers' records land: a reusable buffer per run. Appending never
//! allocates once the buffers have grown to a hit's size; the runtime drains
//! the records after each handler run (decode, format, write) and clears it.

use std::ops::Range;

/// What kind of record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A log record (spec §11).
    Log,
    /// A stack-trace record (spec §12).
    StackTrace,
    /// An output event (`emit_event`): `major` holds the event kind,
    /// `minor` the id, the data the arguments.
    Event,
}

/// One record held by the sink (its bytes live in the sink's buffers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkRecord {
    /// Log or stack trace.
    pub kind: RecordKind,
    /// Major code (0 for stack traces).
    pub major: u16,
    /// Minor code (0 for stack traces).
    pub minor: u16,
    /// The data area, in [`Sink::bytes`].
    pub data: Range<usize>,
    /// The item descriptors, in [`Sink::items`].
    pub items: Range<usize>,
}

/// Records emitted by handlers since the last [`Sink::clear`].
#[derive(Debug, Default)]
pub struct Sink {
    /// Data bytes of all held records.
    pub bytes: Vec<u8>,
    /// Item descriptors of all held records.
    pub items: Vec<u32>,
    /// The held records, in emission order.
    pub records: Vec<SinkRecord>,
}

impl Sink {
    /// Appends a record.
    pub fn push(&mut self, kind: RecordKind, major: u16, minor: u16, data: &[u8], items: &[u32]) {
        let d0 = self.bytes.len();
        self.bytes.extend_from_slice(data);
        let i0 = self.items.len();
        self.items.extend_from_slice(items);
        self.records.push(SinkRecord {
            kind,
            major,
            minor,
            data: d0..self.bytes.len(),
            items: i0..self.items.len(),
        });
    }

    /// Data bytes of a held record.
    pub fn data(&self, r: &SinkRecord) -> &[u8] {
        &self.bytes[r.data.clone()]
    }

    /// Item descriptors of a held record.
    pub fn item_words(&self, r: &SinkRecord) -> &[u32] {
        &self.items[r.items.clone()]
    }

    /// Forgets every held record, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.items.clear();
        self.records.clear();
    }
}
