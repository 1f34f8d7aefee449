//! Logging (§9.3, §11) and stack traces (§12): the `log` instructions, fault
//! records, `log st` and the variable traces.

use super::{Flow, Frame, Machine, SLOT_MASK};
use crate::ast::VarSpace;
use hostabi::Exception;
use hostabi::record::{ItemKind, token};

impl<'a> Machine<'a> {
    // ----- logging (§9.3, §11) -----

    fn overflow(&mut self) -> Flow {
        let logmax = u64::from(self.prog.header.logmax);
        self.raise(Exception::LogOverflow, logmax, 0)
    }

    /// `log n` (8 bytes per element) and `log b, n` (1 byte per element).
    pub(super) fn log_raw(&mut self, n: u16, bytes: bool) -> Flow {
        self.log.begin();
        let room = self.log.room();
        let n = usize::from(n);
        let k = n.min(if bytes { room } else { room / 8 });
        if k > 0 {
            self.log.item(if bytes {
                ItemKind::RawBytes
            } else {
                ItemKind::RawWords
            });
            for _ in 0..k {
                let v = self.pop();
                if bytes {
                    self.log.put(&[v as u8]);
                } else {
                    self.log.put(&v.to_le_bytes());
                }
            }
        }
        if k < n {
            return self.overflow();
        }
        self.log.commit();
        Flow::Next
    }

    /// `log` (stack count, token 0x07).
    pub(super) fn log_counted(&mut self) -> Flow {
        let n = usize::from(self.pop() as u16);
        self.log.begin();
        let room = self.log.room();
        if room < 3 {
            return self.overflow();
        }
        let k = n.min((room - 3) / 8);
        self.log.item(ItemKind::Tokenized);
        self.log.put(&[token::WORDS]);
        self.log.put(&(k as u16).to_le_bytes());
        for _ in 0..k {
            let v = self.pop();
            self.log.put(&v.to_le_bytes());
        }
        if k < n {
            return self.overflow();
        }
        self.log.commit();
        Flow::Next
    }

    /// A fault met by `log str` / `log mrf` at `addr` (§11.5).
    fn log_fault(&mut self, addr: u64) -> Flow {
        self.log.fault_record(addr);
        self.raise(Exception::InvalidAddr, addr, 0)
    }

    /// `log str` / `log arf`.
    pub(super) fn log_str(&mut self) -> Flow {
        let addr = self.pop();
        let len = self.pop();
        self.log.begin();
        let room = self.log.room();
        if room < 3 {
            return self.overflow();
        }
        let avail = room - 3;
        // One byte beyond the room is examined to decide whether the string fits.
        let examine = usize::try_from(len).unwrap_or(usize::MAX).min(avail + 1);
        let mut buf = vec![0u8; examine];
        let n = match self.env.read_str(addr, &mut buf) {
            Ok(n) => n.min(examine),
            Err(i) => return self.log_fault(addr.wrapping_add(i as u64)),
        };
        let fits = n <= avail;
        let m = n.min(avail);
        self.log.item(ItemKind::Tokenized);
        self.log.put(&[token::STRING]);
        self.log.put(&(m as u16).to_le_bytes());
        self.log.put(&buf[..m]);
        if !fits {
            return self.overflow();
        }
        self.log.commit();
        Flow::Next
    }

    /// `log mrf`.
    pub(super) fn log_mrf(&mut self) -> Flow {
        let addr = self.pop();
        let len = self.pop();
        self.log.begin();
        let room = self.log.room();
        if room < 3 {
            return self.overflow();
        }
        let m = usize::try_from(len).unwrap_or(usize::MAX).min(room - 3);
        let mut buf = vec![0u8; m];
        let got = self.env.read_mem(addr, &mut buf);
        if got < m {
            return self.log_fault(addr.wrapping_add(got as u64));
        }
        self.log.item(ItemKind::Tokenized);
        self.log.put(&[token::MEMORY]);
        self.log.put(&(m as u16).to_le_bytes());
        self.log.put(&buf);
        if (m as u64) < len {
            return self.overflow();
        }
        self.log.commit();
        Flow::Next
    }

    /// `log lv` / `log gv`.
    pub(super) fn log_vars(&mut self, space: VarSpace) -> Flow {
        let n = self.pop();
        let i = self.pop();
        self.log.begin();
        if self.log.room() < 3 {
            return self.overflow();
        }
        let (tok, kind) = match space {
            VarSpace::Local => (token::LOCAL_VARS, 1),
            VarSpace::Global => (token::GLOBAL_VARS, 2),
        };
        self.log.item(ItemKind::Tokenized);
        let count_at = self.log.lp() + 1;
        self.log.put(&[tok, 0, 0]);
        let mut j = 0u64;
        while j < n {
            let idx = i.wrapping_add(j);
            let Some(v) = self.var_get(space, idx) else {
                return self.raise(Exception::InvalidOperand, kind, idx);
            };
            if self.log.room() < 8 {
                return self.overflow();
            }
            self.log.put(&v.to_le_bytes());
            j += 1;
            if let Some(c) = self.log.data.get_mut(count_at..count_at + 2) {
                c.copy_from_slice(&(j as u16).to_le_bytes());
            }
        }
        self.log.commit();
        Flow::Next
    }

    // ----- stack traces (§12) -----

    /// Appends a stack trace to the stack-trace area (never raises).
    pub(super) fn log_stack_trace(&mut self) {
        let name = self.prog.header.name.as_bytes();
        let mut header = Vec::with_capacity(20 + name.len());
        header.push(token::STRING);
        header.extend_from_slice(&(name.len() as u16).to_le_bytes());
        header.extend_from_slice(name);
        header.extend_from_slice(&self.location.to_le_bytes());
        header.extend_from_slice(&self.prog.header.id.to_le_bytes());
        header.extend_from_slice(&self.major.to_le_bytes());
        header.extend_from_slice(&self.minor.to_le_bytes());
        header.extend_from_slice(&[token::TRACE_COUNT, 0, 0]);
        if !self.trace.ensure_header(&header) {
            return;
        }
        // Size first: ranges may be huge, and then the record cannot fit.
        let mut size: u64 = 35;
        for f in &self.calls {
            let words = f.pv.1.saturating_add(f.lv.1).saturating_add(f.gv.1);
            size = size
                .saturating_add(25)
                .saturating_add(words.saturating_mul(8));
        }
        if size > self.trace.room() as u64 {
            return;
        }
        let mut rec = Vec::with_capacity(size as usize);
        let (code, handler, p1, p2) = self.last;
        for v in [code, handler, p1, p2] {
            rec.extend_from_slice(&v.to_le_bytes());
        }
        rec.push(token::FRAME_COUNT);
        rec.extend_from_slice(&(self.calls.len() as u16).to_le_bytes());
        let frames: Vec<Frame> = self.calls.iter().rev().cloned().collect();
        for f in &frames {
            rec.extend_from_slice(&f.called.to_le_bytes());
            rec.extend_from_slice(&f.ret_offset.to_le_bytes());
            rec.push(token::STACK_SLOTS);
            rec.extend_from_slice(&(f.pv.1 as u16).to_le_bytes());
            for j in 0..f.pv.1 {
                let slot = (f.pv.0.wrapping_add(j) as usize) & SLOT_MASK;
                rec.extend_from_slice(&self.stack[slot].to_le_bytes());
            }
            for (space, (start, count), tok) in [
                (VarSpace::Local, f.lv, token::LOCAL_VARS),
                (VarSpace::Global, f.gv, token::GLOBAL_VARS),
            ] {
                rec.push(tok);
                rec.extend_from_slice(&(count as u16).to_le_bytes());
                for j in 0..count {
                    let v = self.var_get(space, start.wrapping_add(j)).unwrap_or(0);
                    rec.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        self.trace.push_record(&rec);
    }

    pub(super) fn trace_vars(&mut self, space: VarSpace) -> Flow {
        let n = self.pop();
        let i = self.pop();
        let limit = self.var_limit(space);
        if n > 0 && u128::from(i) + u128::from(n) > u128::from(limit) {
            return self.raise(
                Exception::InvalidOperand,
                Self::var_kind(space),
                i.max(limit),
            );
        }
        let f = self.top();
        match space {
            VarSpace::Local => f.lv = (i, n),
            VarSpace::Global => f.gv = (i, n),
        }
        Flow::Next
    }
}
