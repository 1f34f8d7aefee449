//! The per-hit output areas: the log data area (§11.2) with its item
//! descriptors, the stack-trace area (§12.2), and the heap (§9.15).

use hostabi::record::{ItemKind, LogItem, token};

/// The log data area: bytes `[0, LP)`, PLP and the item descriptors.
#[derive(Clone, Debug)]
pub(crate) struct LogArea {
    /// `logmax`.
    cap: usize,
    /// The bytes; `data.len()` is LP.
    pub(crate) data: Vec<u8>,
    /// PLP.
    pub(crate) plp: usize,
    /// Item descriptors (`LogItem::encode`), increasing offsets.
    pub(crate) items: Vec<u32>,
}

impl LogArea {
    pub(crate) fn new(cap: u16) -> LogArea {
        LogArea {
            cap: usize::from(cap),
            data: Vec::new(),
            plp: 0,
            items: Vec::new(),
        }
    }

    /// LP.
    pub(crate) fn lp(&self) -> usize {
        self.data.len()
    }

    /// `logmax − LP`.
    pub(crate) fn room(&self) -> usize {
        self.cap.saturating_sub(self.data.len())
    }

    /// Start of a logging instruction: PLP := LP.
    pub(crate) fn begin(&mut self) {
        self.plp = self.data.len();
    }

    /// Successful end of a logging instruction: PLP := LP.
    pub(crate) fn commit(&mut self) {
        self.plp = self.data.len();
    }

    /// Records that an item of `kind` starts at the current LP.
    pub(crate) fn item(&mut self, kind: ItemKind) {
        self.items.push(
            LogItem {
                offset: self.data.len() as u16,
                kind,
            }
            .encode(),
        );
    }

    /// Appends bytes (the caller checked the room).
    pub(crate) fn put(&mut self, bytes: &[u8]) {
        self.data.extend_from_slice(bytes);
    }

    /// Writes a fault record for `addr` if 11 bytes of room remain (§11.5).
    pub(crate) fn fault_record(&mut self, addr: u64) {
        if self.room() >= 11 {
            self.item(ItemKind::Tokenized);
            self.put(&[token::FAULT, 8, 0]);
            self.put(&addr.to_le_bytes());
        }
    }

    /// `pop lp`: LP := min(v, LP); descriptors at or above the new LP go.
    pub(crate) fn truncate(&mut self, v: u64) {
        let lp = usize::try_from(v)
            .unwrap_or(usize::MAX)
            .min(self.data.len());
        self.data.truncate(lp);
        self.items
            .retain(|d| LogItem::decode(*d).is_some_and(|i| usize::from(i.offset) < lp));
    }
}

/// The stack-trace area: a header (§12.3) then whole records (§12.4).
#[derive(Clone, Debug)]
pub(crate) struct TraceArea {
    /// `excpt_log`.
    cap: usize,
    /// The bytes; `data.len()` is STP.
    pub(crate) data: Vec<u8>,
    /// End of the header (valid while STP > 0).
    header_end: usize,
    /// End offset of each record, in order.
    record_ends: Vec<usize>,
}

impl TraceArea {
    pub(crate) fn new(cap: u16) -> TraceArea {
        TraceArea {
            cap: usize::from(cap),
            data: Vec::new(),
            header_end: 0,
            record_ends: Vec::new(),
        }
    }

    /// STP.
    pub(crate) fn stp(&self) -> usize {
        self.data.len()
    }

    /// `purge st`.
    pub(crate) fn purge(&mut self) {
        self.data.clear();
        self.header_end = 0;
        self.record_ends.clear();
    }

    /// Step 1 of §12.2: writes the header if STP = 0. Returns false when the
    /// header is needed and does not fit (nothing written).
    pub(crate) fn ensure_header(&mut self, header: &[u8]) -> bool {
        if !self.data.is_empty() {
            return true;
        }
        if header.len() > self.cap {
            return false;
        }
        self.data.extend_from_slice(header);
        self.header_end = header.len();
        self.record_ends.clear();
        true
    }

    /// Room left for a record.
    pub(crate) fn room(&self) -> usize {
        self.cap.saturating_sub(self.data.len())
    }

    /// Appends a record that fits (checked by the caller) and bumps the count.
    pub(crate) fn push_record(&mut self, record: &[u8]) {
        self.data.extend_from_slice(record);
        self.record_ends.push(self.data.len());
        self.write_count();
    }

    fn write_count(&mut self) {
        let n = (self.record_ends.len() as u16).to_le_bytes();
        if let Some(c) = self
            .header_end
            .checked_sub(2)
            .and_then(|at| self.data.get_mut(at..self.header_end))
        {
            c.copy_from_slice(&n);
        }
    }

    /// `pop stp` (§9.12, [D 27]).
    pub(crate) fn truncate(&mut self, v: u64) {
        if self.data.is_empty() {
            return;
        }
        let want = usize::try_from(v)
            .unwrap_or(usize::MAX)
            .min(self.data.len());
        if want < self.header_end {
            self.purge();
            return;
        }
        self.record_ends.retain(|e| *e <= want);
        let end = self.record_ends.last().copied().unwrap_or(self.header_end);
        self.data.truncate(end);
        self.write_count();
    }
}

/// The per-hit heap (§9.15).
#[derive(Clone, Debug)]
pub(crate) struct Heap {
    cap: u64,
    used: u64,
    next: u64,
    /// Live blocks: (handle, bytes).
    blocks: Vec<(u64, Vec<u8>)>,
}

impl Heap {
    pub(crate) fn new(cap: u16) -> Heap {
        Heap {
            cap: u64::from(cap),
            used: 0,
            next: 0,
            blocks: Vec::new(),
        }
    }

    /// Allocates `size` zero bytes; `None` when the capacity would be exceeded.
    pub(crate) fn malloc(&mut self, size: u64) -> Option<u64> {
        let total = self.used.checked_add(size)?;
        if total > self.cap {
            return None;
        }
        self.used = total;
        self.next = self.next.wrapping_add(1);
        // size ≤ cap ≤ 65535 here.
        self.blocks.push((self.next, vec![0; size as usize]));
        Some(self.next)
    }

    /// Frees a live block; false if `h` is not live.
    pub(crate) fn free(&mut self, h: u64) -> bool {
        match self.blocks.iter().position(|(k, _)| *k == h) {
            Some(i) => {
                let (_, b) = self.blocks.remove(i);
                self.used -= b.len() as u64;
                true
            }
            None => false,
        }
    }

    /// The block of a live handle.
    pub(crate) fn block(&mut self, h: u64) -> Option<&mut Vec<u8>> {
        self.blocks
            .iter_mut()
            .find(|(k, _)| *k == h)
            .map(|(_, b)| b)
    }
}
