//! Log-record wire format (spec §11–12): the record header, the item
//! descriptors that make log data decodable, and bounds-checked decoders for
//! log data and stack-trace areas. Decoders never panic and report the byte
//! offset of the first thing they cannot read.

use core::fmt;

/// Facility id written at offset 0 of every record header.
pub const FACILITY_ID: u16 = 1;
/// Size of the fixed part of a record header (facility, length, mask, major, minor).
pub const FIXED_HEADER_BYTES: usize = 12;
/// Largest log data area a guest may emit (RPN programs are limited to 1024).
pub const MAX_LOG_DATA_BYTES: u32 = 65535;
/// Largest number of item descriptors per log record.
pub const MAX_LOG_ITEMS: u32 = 65535;
/// Largest stack-trace area a guest may emit (RPN: `excpt_log` ≤ 1024).
pub const MAX_STACKTRACE_BYTES: u32 = 65535;

/// Header field bits (spec §11.3), with the size of their optional payload.
pub mod field {
    /// MAJOR, always present (fixed part).
    pub const MAJOR: u32 = 0x0001;
    /// MINOR, always present (fixed part).
    pub const MINOR: u32 = 0x0002;
    /// CPU number, 4 bytes.
    pub const CPU: u32 = 0x0004;
    /// Thread id, 4 bytes.
    pub const PID: u32 = 0x0008;
    /// Real uid of the process, 4 bytes.
    pub const UID: u32 = 0x0010;
    /// Code segment selector, 2 bytes.
    pub const CS: u32 = 0x0020;
    /// Probe address (breakpoints) or rip at the hit (watchpoints), 8 bytes.
    pub const RIP: u32 = 0x0040;
    /// Stack segment selector, 2 bytes.
    pub const SS: u32 = 0x0080;
    /// rsp at the hit, 8 bytes.
    pub const RSP: u32 = 0x0100;
    /// Wall-clock time: u64 seconds, u64 microseconds.
    pub const TIME: u32 = 0x0200;
    /// Thread name, 16 bytes NUL-padded.
    pub const COMM: u32 = 0x0400;
    /// All defined bits.
    pub const ALL: u32 = 0x07FF;
    /// Default mask of log records.
    pub const LOG_DEFAULT: u32 = MAJOR | MINOR | CPU | PID;
    /// Mask of stack-trace records.
    pub const STACKTRACE: u32 = MAJOR | MINOR | CPU;

    /// Payload size of each optional field bit, in increasing bit order.
    pub const SIZES: [(u32, usize); 9] = [
        (CPU, 4),
        (PID, 4),
        (UID, 4),
        (CS, 2),
        (RIP, 8),
        (SS, 2),
        (RSP, 8),
        (TIME, 16),
        (COMM, 16),
    ];
}

/// A decoded record header. Fields absent from `mask` are zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// Present-field mask (bits of [`field`]).
    pub mask: u32,
    /// Major code (0 for stack-trace records).
    pub major: u16,
    /// Minor code.
    pub minor: u16,
    /// CPU number.
    pub cpu: u32,
    /// Thread id.
    pub pid: u32,
    /// Real uid.
    pub uid: u32,
    /// Code segment selector.
    pub cs: u16,
    /// Probe address or rip.
    pub rip: u64,
    /// Stack segment selector.
    pub ss: u16,
    /// rsp at the hit.
    pub rsp: u64,
    /// Seconds since the epoch.
    pub time_sec: u64,
    /// Microseconds within the second.
    pub time_usec: u64,
    /// Thread name, NUL-padded.
    pub comm: [u8; 16],
}

impl RecordHeader {
    /// Header length in bytes for `mask` (bits outside [`field::ALL`] ignored).
    pub fn len_for(mask: u32) -> usize {
        FIXED_HEADER_BYTES
            + field::SIZES
                .iter()
                .filter(|(bit, _)| mask & bit != 0)
                .map(|(_, n)| n)
                .sum::<usize>()
    }

    /// Encodes the header into `out`; returns the number of bytes written, or
    /// `None` when `out` is too small.
    pub fn encode(&self, out: &mut [u8]) -> Option<usize> {
        let mask = (self.mask & field::ALL) | field::MAJOR | field::MINOR;
        let len = Self::len_for(mask);
        let out = out.get_mut(..len)?;
        let mut w = Writer { buf: out, pos: 0 };
        w.put(&FACILITY_ID.to_le_bytes());
        w.put(&(len as u16).to_le_bytes());
        w.put(&mask.to_le_bytes());
        w.put(&self.major.to_le_bytes());
        w.put(&self.minor.to_le_bytes());
        for (bit, _) in field::SIZES {
            if mask & bit == 0 {
                continue;
            }
            match bit {
                field::CPU => w.put(&self.cpu.to_le_bytes()),
                field::PID => w.put(&self.pid.to_le_bytes()),
                field::UID => w.put(&self.uid.to_le_bytes()),
                field::CS => w.put(&self.cs.to_le_bytes()),
                field::RIP => w.put(&self.rip.to_le_bytes()),
                field::SS => w.put(&self.ss.to_le_bytes()),
                field::RSP => w.put(&self.rsp.to_le_bytes()),
                field::TIME => {
                    w.put(&self.time_sec.to_le_bytes());
                    w.put(&self.time_usec.to_le_bytes());
                }
                _ => w.put(&self.comm),
            }
        }
        Some(len)
    }

    /// Decodes a header at the start of `bytes`; returns it and its length.
    pub fn decode(bytes: &[u8]) -> Result<(RecordHeader, usize), DecodeError> {
        let mut r = Reader::new(bytes, 0);
        let facility = r.u16()?;
        if facility != FACILITY_ID {
            return Err(DecodeError::new(0, DecodeErrorKind::BadFacility));
        }
        let len = r.u16()? as usize;
        let mask = r.u32()?;
        if mask & !field::ALL != 0 || mask & 3 != 3 {
            return Err(DecodeError::new(4, DecodeErrorKind::BadMask));
        }
        if Self::len_for(mask) != len {
            return Err(DecodeError::new(2, DecodeErrorKind::BadLength));
        }
        let mut h = RecordHeader {
            mask,
            major: r.u16()?,
            minor: r.u16()?,
            ..RecordHeader::default()
        };
        for (bit, _) in field::SIZES {
            if mask & bit == 0 {
                continue;
            }
            match bit {
                field::CPU => h.cpu = r.u32()?,
                field::PID => h.pid = r.u32()?,
                field::UID => h.uid = r.u32()?,
                field::CS => h.cs = r.u16()?,
                field::RIP => h.rip = r.u64()?,
                field::SS => h.ss = r.u16()?,
                field::RSP => h.rsp = r.u64()?,
                field::TIME => {
                    h.time_sec = r.u64()?;
                    h.time_usec = r.u64()?;
                }
                _ => h.comm.copy_from_slice(r.take(16)?),
            }
        }
        Ok((h, len))
    }
}

struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        // Lengths were checked against `len_for` before writing.
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
}

/// Log data tokens (spec §11.4, §12).
pub mod token {
    /// `log mrf`: u16 m, m memory bytes.
    pub const MEMORY: u8 = 0x00;
    /// `log str`: u16 m, m string bytes; also the program name in stack-trace headers.
    pub const STRING: u8 = 0x01;
    /// Stack-trace header: u16 record count.
    pub const TRACE_COUNT: u8 = 0x02;
    /// Stack-trace record: u16 frame count.
    pub const FRAME_COUNT: u8 = 0x03;
    /// Frame record: u16 a, a RPN stack slots.
    pub const STACK_SLOTS: u8 = 0x04;
    /// `log lv` / frame local variables: u16 k, k words.
    pub const LOCAL_VARS: u8 = 0x05;
    /// `log gv` / frame global variables: u16 k, k words.
    pub const GLOBAL_VARS: u8 = 0x06;
    /// `log` (stack count): u16 k, k words.
    pub const WORDS: u8 = 0x07;
    /// Fault record: u16 8, the 8-byte address.
    pub const FAULT: u8 = 0xFF;
}

/// What an item descriptor says about the bytes starting at its offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ItemKind {
    /// Raw 8-byte little-endian words without prefix (`log n`).
    RawWords = 0x80,
    /// Raw bytes without prefix (`log b, n`).
    RawBytes = 0x81,
    /// A token-prefixed item (`log`, `log str`, `log mrf`, `log lv/gv`, fault record).
    Tokenized = 0x82,
}

/// An item descriptor as passed to `emit_log`: a little-endian u32 holding the
/// item's byte offset in the log data (low 16 bits) and its [`ItemKind`] (bits 16–23).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogItem {
    /// Offset of the item's first byte in the log data area.
    pub offset: u16,
    /// How to read it.
    pub kind: ItemKind,
}

impl LogItem {
    /// The u32 encoding.
    pub const fn encode(self) -> u32 {
        self.offset as u32 | (self.kind as u32) << 16
    }

    /// Decodes a descriptor; `None` for an unknown kind or non-zero top byte.
    pub fn decode(v: u32) -> Option<LogItem> {
        let kind = match (v >> 16) as u16 {
            0x80 => ItemKind::RawWords,
            0x81 => ItemKind::RawBytes,
            0x82 => ItemKind::Tokenized,
            _ => return None,
        };
        Some(LogItem {
            offset: v as u16,
            kind,
        })
    }
}

/// One decoded item of a log data area. Slices borrow the record's bytes;
/// word payloads are little-endian 8-byte groups (see [`words`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item<'a> {
    /// `log n`: raw words.
    Words(&'a [u8]),
    /// `log b, n`: raw bytes.
    Bytes(&'a [u8]),
    /// `log`: counted words (token 0x07).
    CountedWords(&'a [u8]),
    /// `log str`: string bytes (token 0x01).
    Str(&'a [u8]),
    /// `log mrf`: memory bytes (token 0x00).
    Memory(&'a [u8]),
    /// `log lv`: local variables (token 0x05).
    LocalVars(&'a [u8]),
    /// `log gv`: global variables (token 0x06).
    GlobalVars(&'a [u8]),
    /// A fault record (token 0xFF): the unreadable address.
    Fault(u64),
    /// Bytes that do not form a complete item (e.g. cut by `pop lp`, or no descriptors).
    Raw(&'a [u8]),
}

/// Iterates the 8-byte little-endian words of a payload (a trailing partial word is ignored).
pub fn words(payload: &[u8]) -> impl Iterator<Item = u64> + '_ {
    payload
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
}

/// Decodes log data using the item descriptors emitted with it.
///
/// `items` holds the raw u32 descriptors. Descriptors must have increasing
/// offsets below `data.len()`; descriptors at or beyond the end (left over
/// after `pop lp`) are ignored. Bytes not covered by any descriptor, or not
/// forming a complete item, are returned as [`Item::Raw`].
pub fn decode_log<'a>(
    data: &'a [u8],
    items: &'a [u32],
) -> impl Iterator<Item = Result<Item<'a>, DecodeError>> + 'a {
    LogItems {
        data,
        items,
        next: 0,
        pos: 0,
    }
}

struct LogItems<'a> {
    data: &'a [u8],
    items: &'a [u32],
    next: usize,
    pos: usize,
}

impl<'a> Iterator for LogItems<'a> {
    type Item = Result<Item<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.data.len() {
            return None;
        }
        let Some(&raw) = self.items.get(self.next) else {
            let rest = &self.data[self.pos..];
            self.pos = self.data.len();
            return Some(Ok(Item::Raw(rest)));
        };
        let Some(desc) = LogItem::decode(raw) else {
            self.pos = self.data.len();
            return Some(Err(DecodeError::new(
                self.next * 4,
                DecodeErrorKind::BadItemDescriptor,
            )));
        };
        let start = desc.offset as usize;
        if start < self.pos {
            self.pos = self.data.len();
            return Some(Err(DecodeError::new(
                self.next * 4,
                DecodeErrorKind::BadItemDescriptor,
            )));
        }
        if start > self.pos {
            // Bytes before this descriptor that no descriptor covers.
            let gap = &self.data[self.pos..start.min(self.data.len())];
            self.pos = start.min(self.data.len());
            return Some(Ok(Item::Raw(gap)));
        }
        self.next += 1;
        let end = match self.items.get(self.next).and_then(|v| LogItem::decode(*v)) {
            Some(n) if (n.offset as usize) > start => (n.offset as usize).min(self.data.len()),
            _ => self.data.len(),
        };
        let extent = &self.data[start..end];
        self.pos = end;
        Some(Ok(decode_item(desc.kind, extent)))
    }
}

fn decode_item<'a>(kind: ItemKind, extent: &'a [u8]) -> Item<'a> {
    match kind {
        ItemKind::RawWords if extent.len().is_multiple_of(8) => Item::Words(extent),
        ItemKind::RawBytes => Item::Bytes(extent),
        ItemKind::Tokenized if extent.len() >= 3 => {
            let n = u16::from_le_bytes([extent[1], extent[2]]) as usize;
            let body = &extent[3..];
            let (unit, make): (usize, fn(&'a [u8]) -> Item<'a>) = match extent[0] {
                token::MEMORY => (1, Item::Memory),
                token::STRING => (1, Item::Str),
                token::LOCAL_VARS => (8, Item::LocalVars),
                token::GLOBAL_VARS => (8, Item::GlobalVars),
                token::WORDS => (8, Item::CountedWords),
                token::FAULT if n == 8 && body.len() == 8 => {
                    return Item::Fault(words(body).next().unwrap_or(0));
                }
                _ => return Item::Raw(extent),
            };
            if body.len() == n * unit {
                make(body)
            } else {
                Item::Raw(extent)
            }
        }
        _ => Item::Raw(extent),
    }
}

/// The fixed part of a stack-trace area (spec §12.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackTraceHeader<'a> {
    /// The program's `name =` value.
    pub name: &'a [u8],
    /// Unrelocated location value of the probe.
    pub location: u64,
    /// The program's `id`.
    pub id: u16,
    /// Major in force when the header was written.
    pub major: u16,
    /// Minor in force when the header was written.
    pub minor: u16,
    /// Number of stack-trace records that follow.
    pub count: u16,
}

/// One stack-trace record (spec §12.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackTrace<'a> {
    /// Last exception code.
    pub code: u64,
    /// Last exception handler (code offset, or [`HANDLER_NONE`]).
    pub handler: u64,
    /// Last exception parameter 1.
    pub p1: u64,
    /// Last exception parameter 2.
    pub p2: u64,
    /// The frame records, innermost first, still encoded; iterate with [`StackTrace::frames`].
    pub frames_bytes: &'a [u8],
    /// Number of frame records.
    pub frame_count: u16,
    offset: usize,
}

/// Handler value written for "no handler" (spec §12.4).
pub const HANDLER_NONE: u64 = 0xFFFF_FFFF;

/// One call-frame record of a stack trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Code offset of the called procedure.
    pub called: u64,
    /// Code offset of the instruction after the `call`.
    pub ret: u64,
    /// Traced RPN stack slots (words).
    pub slots: &'a [u8],
    /// Traced local variables (words).
    pub lvars: &'a [u8],
    /// Traced global variables (words).
    pub gvars: &'a [u8],
}

impl<'a> StackTrace<'a> {
    /// Iterates the frame records.
    pub fn frames(&self) -> impl Iterator<Item = Result<Frame<'a>, DecodeError>> + 'a {
        let mut r = Reader::new(self.frames_bytes, self.offset);
        let mut left = self.frame_count;
        core::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let f = (|| {
                let called = r.u64()?;
                let ret = r.u64()?;
                let slots = r.counted(token::STACK_SLOTS, 8)?;
                let lvars = r.counted(token::LOCAL_VARS, 8)?;
                let gvars = r.counted(token::GLOBAL_VARS, 8)?;
                Ok(Frame {
                    called,
                    ret,
                    slots,
                    lvars,
                    gvars,
                })
            })();
            if f.is_err() {
                left = 0;
            }
            Some(f)
        })
    }
}

/// Decodes a stack-trace area: its header and its records (frames checked too).
///
/// Calls `each` for every record; fails with the offset of the first byte that
/// does not parse, or when bytes remain after the last record.
pub fn decode_stacktrace<'a>(
    area: &'a [u8],
    mut each: impl FnMut(&StackTrace<'a>),
) -> Result<StackTraceHeader<'a>, DecodeError> {
    let mut r = Reader::new(area, 0);
    let name = r.counted(token::STRING, 1)?;
    let location = r.u64()?;
    let id = r.u16()?;
    let major = r.u16()?;
    let minor = r.u16()?;
    let count_bytes = r.counted_raw(token::TRACE_COUNT)?;
    let header = StackTraceHeader {
        name,
        location,
        id,
        major,
        minor,
        count: count_bytes,
    };
    for _ in 0..count_bytes {
        let code = r.u64()?;
        let handler = r.u64()?;
        let p1 = r.u64()?;
        let p2 = r.u64()?;
        let frame_count = r.counted_raw(token::FRAME_COUNT)?;
        let start = r.pos;
        let rec_offset = r.base + start;
        // Walk the frames once to find where this record ends.
        for _ in 0..frame_count {
            r.u64()?;
            r.u64()?;
            r.counted(token::STACK_SLOTS, 8)?;
            r.counted(token::LOCAL_VARS, 8)?;
            r.counted(token::GLOBAL_VARS, 8)?;
        }
        let st = StackTrace {
            code,
            handler,
            p1,
            p2,
            frames_bytes: &area[start..r.pos],
            frame_count,
            offset: rec_offset,
        };
        each(&st);
    }
    if r.pos != area.len() {
        return Err(DecodeError::new(r.pos, DecodeErrorKind::TrailingBytes));
    }
    Ok(header)
}

/// Why decoding failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// The input ended before the structure did.
    Truncated,
    /// A record header's facility id is not 1.
    BadFacility,
    /// A record header's mask has unknown bits or lacks MAJOR/MINOR.
    BadMask,
    /// A header length disagrees with its mask.
    BadLength,
    /// A token other than the one the structure requires.
    UnexpectedToken {
        /// Token required here.
        expected: u8,
        /// Token found.
        found: u8,
    },
    /// Bytes after the last record of a stack-trace area.
    TrailingBytes,
    /// An item descriptor with an unknown kind or a decreasing offset.
    BadItemDescriptor,
    /// A manifest field is out of its domain.
    BadValue,
    /// The manifest's format version is not one this build reads.
    UnsupportedVersion(u32),
}

/// A decoding failure at a byte offset of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset of the problem within the decoded buffer.
    pub offset: usize,
    /// What is wrong there.
    pub kind: DecodeErrorKind,
}

impl DecodeError {
    /// Builds an error.
    pub const fn new(offset: usize, kind: DecodeErrorKind) -> DecodeError {
        DecodeError { offset, kind }
    }
}

impl core::error::Error for DecodeError {}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            DecodeErrorKind::Truncated => write!(f, "unexpected end of data")?,
            DecodeErrorKind::BadFacility => write!(f, "facility id is not 1")?,
            DecodeErrorKind::BadMask => write!(f, "bad header field mask")?,
            DecodeErrorKind::BadLength => write!(f, "header length disagrees with its mask")?,
            DecodeErrorKind::UnexpectedToken { expected, found } => {
                write!(f, "expected token 0x{expected:02x}, found 0x{found:02x}")?
            }
            DecodeErrorKind::TrailingBytes => write!(f, "trailing bytes")?,
            DecodeErrorKind::BadItemDescriptor => write!(f, "bad item descriptor")?,
            DecodeErrorKind::BadValue => write!(f, "value out of range")?,
            DecodeErrorKind::UnsupportedVersion(v) => write!(f, "unsupported format version {v}")?,
        }
        write!(f, " (at offset 0x{:x})", self.offset)
    }
}

/// A bounds-checked little-endian reader; `base` is added to reported offsets.
pub(crate) struct Reader<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) base: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], base: usize) -> Self {
        Reader { buf, pos: 0, base }
    }

    pub(crate) fn err(&self, kind: DecodeErrorKind) -> DecodeError {
        DecodeError::new(self.base + self.pos, kind)
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| self.err(DecodeErrorKind::Truncated))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn expect_token(&mut self, t: u8) -> Result<(), DecodeError> {
        let at = self.pos;
        let found = self.u8()?;
        if found != t {
            return Err(DecodeError::new(
                self.base + at,
                DecodeErrorKind::UnexpectedToken { expected: t, found },
            ));
        }
        Ok(())
    }

    /// `token, u16 n` and returns n.
    fn counted_raw(&mut self, t: u8) -> Result<u16, DecodeError> {
        self.expect_token(t)?;
        self.u16()
    }

    /// `token, u16 n, n * unit bytes` and returns the payload.
    fn counted(&mut self, t: u8, unit: usize) -> Result<&'a [u8], DecodeError> {
        let n = self.counted_raw(t)? as usize;
        self.take(n * unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::{vec, vec::Vec};

    #[test]
    fn header_round_trip_default_and_full() {
        let h = RecordHeader {
            mask: field::LOG_DEFAULT,
            major: 7,
            minor: 1,
            cpu: 3,
            pid: 4242,
            ..Default::default()
        };
        let mut buf = [0u8; 128];
        let n = h.encode(&mut buf).unwrap();
        assert_eq!(n, 20);
        assert_eq!(&buf[..12], &[1, 0, 20, 0, 0x0F, 0, 0, 0, 7, 0, 1, 0]);
        assert_eq!(RecordHeader::decode(&buf[..n]).unwrap(), (h, 20));
        let full = RecordHeader {
            mask: field::ALL,
            comm: *b"probe_target\0\0\0\0",
            rip: 0x401146,
            ..h
        };
        let n = full.encode(&mut buf).unwrap();
        assert_eq!(n, 12 + 4 + 4 + 4 + 2 + 8 + 2 + 8 + 16 + 16);
        assert_eq!(RecordHeader::decode(&buf[..n]).unwrap(), (full, n));
        assert!(full.encode(&mut buf[..n - 1]).is_none());
        for cut in 0..n {
            assert!(RecordHeader::decode(&buf[..cut]).is_err());
        }
    }

    #[test]
    fn spec_11_6_example_decodes_with_items() {
        let data = [
            9, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 7, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0,
            0, 0, 0, 0, 0, 0,
        ];
        let items = [
            LogItem {
                offset: 0,
                kind: ItemKind::RawWords,
            }
            .encode(),
            LogItem {
                offset: 16,
                kind: ItemKind::Tokenized,
            }
            .encode(),
        ];
        let got: Vec<_> = decode_log(&data, &items).map(Result::unwrap).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(
            words(match got[0] {
                Item::Words(w) => w,
                _ => panic!("{:?}", got[0]),
            })
            .collect::<Vec<_>>(),
            [9, 7]
        );
        assert!(matches!(got[1], Item::CountedWords(w) if w.len() == 16));
    }

    #[test]
    fn items_cut_by_pop_lp_become_raw() {
        let data = [0x01, 5, 0, b'h', b'e'];
        let items = [LogItem {
            offset: 0,
            kind: ItemKind::Tokenized,
        }
        .encode()];
        let got: Vec<_> = decode_log(&data, &items).collect();
        assert_eq!(got, [Ok(Item::Raw(&data[..]))]);
    }

    #[test]
    fn stacktrace_area_decodes_and_rejects_every_truncation() {
        let mut a = vec![token::STRING, 2, 0, b'p', b't'];
        a.extend(0x401146u64.to_le_bytes());
        a.extend([0, 0, 10, 0, 0, 0, token::TRACE_COUNT, 1, 0]);
        for v in [0x20u64, HANDLER_NONE, 0, 0] {
            a.extend(v.to_le_bytes());
        }
        a.extend([token::FRAME_COUNT, 1, 0]);
        a.extend(52u64.to_le_bytes());
        a.extend(50u64.to_le_bytes());
        a.extend([token::STACK_SLOTS, 1, 0]);
        a.extend(0xabcu64.to_le_bytes());
        a.extend([token::LOCAL_VARS, 0, 0, token::GLOBAL_VARS, 0, 0]);
        let mut seen = 0;
        let h = decode_stacktrace(&a, |st| {
            seen += 1;
            assert_eq!(st.code, 0x20);
            let frames: Vec<_> = st.frames().map(Result::unwrap).collect();
            assert_eq!(frames.len(), 1);
            assert_eq!(frames[0].called, 52);
            assert_eq!(words(frames[0].slots).collect::<Vec<_>>(), [0xabc]);
        })
        .unwrap();
        assert_eq!(
            (h.name, h.location, h.major, h.count),
            (&b"pt"[..], 0x401146, 10, 1)
        );
        assert_eq!(seen, 1);
        for cut in 0..a.len() {
            assert!(decode_stacktrace(&a[..cut], |_| {}).is_err(), "cut {cut}");
        }
        let mut extra = a.clone();
        extra.push(0);
        assert_eq!(
            decode_stacktrace(&extra, |_| {}).unwrap_err(),
            DecodeError::new(a.len(), DecodeErrorKind::TrailingBytes)
        );
    }
}
