//! The heap instructions (§9.15): `pushh` and `poph`.

use super::{Flow, Machine};
use crate::ast::Width;
use hostabi::Exception;

impl<'a> Machine<'a> {
    // ----- heap (§9.15) -----

    pub(super) fn pushh(&mut self, w: Width, k: u16) -> Flow {
        let mut off = self.pop();
        let h = self.pop();
        let n = u64::from(w.bytes());
        let Some(block) = self.heap.block(h) else {
            return self.raise(Exception::HeapInvalidHandle, h, off);
        };
        let mut values = Vec::new();
        let mut fault = false;
        for _ in 0..k {
            let Some(bytes) = off
                .checked_add(n)
                .filter(|end| *end <= block.len() as u64)
                .and_then(|end| block.get(off as usize..end as usize))
            else {
                fault = true;
                break;
            };
            let mut a = [0u8; 8];
            a[..bytes.len()].copy_from_slice(bytes);
            values.push(u64::from_le_bytes(a));
            off += n;
        }
        for v in values {
            self.push(v);
        }
        if fault {
            return self.raise(Exception::HeapInvalidOffset, h, off);
        }
        Flow::Next
    }

    pub(super) fn poph(&mut self, w: Width, k: u16) -> Flow {
        let mut off = self.pop();
        let h = self.pop();
        let n = u64::from(w.bytes());
        if self.heap.block(h).is_none() {
            return self.raise(Exception::HeapInvalidHandle, h, off);
        }
        for _ in 0..k {
            let len = self.heap.block(h).map_or(0, |b| b.len() as u64);
            let end = match off.checked_add(n) {
                Some(end) if end <= len => end,
                _ => return self.raise(Exception::HeapInvalidOffset, h, off),
            };
            let v = self.pop();
            if let Some(dst) = self
                .heap
                .block(h)
                .and_then(|b| b.get_mut(off as usize..end as usize))
            {
                dst.copy_from_slice(&v.to_le_bytes()[..n as usize]);
            }
            off = end;
        }
        Flow::Next
    }
}
