//! The RPN stack (§8.1) and the call frames of the machine.

use super::{Frame, Machine, SLOT_MASK};
use crate::ast::{BodyId, InsnIdx, StackRel};
use hostabi::record::HANDLER_NONE;

impl<'a> Machine<'a> {
    // ----- RPN stack (§8.1) -----

    pub(super) fn push(&mut self, v: u64) {
        self.tsp = self.tsp.wrapping_sub(1) & SLOT_MASK;
        self.stack[self.tsp] = v;
    }

    pub(super) fn pop(&mut self) -> u64 {
        let v = self.stack[self.tsp & SLOT_MASK];
        self.tsp = (self.tsp + 1) & SLOT_MASK;
        v
    }

    /// S[k].
    pub(super) fn s(&self, k: usize) -> u64 {
        self.stack[(self.tsp + k) & SLOT_MASK]
    }

    pub(super) fn tos(&self) -> u64 {
        self.s(0)
    }

    pub(super) fn set_tos(&mut self, v: u64) {
        self.stack[self.tsp & SLOT_MASK] = v;
    }

    /// Slot index of S[k] or B[k] for a (signed) word k.
    pub(super) fn slot_index(&self, rel: StackRel, k: u64) -> usize {
        let base = match rel {
            StackRel::Tsp => self.tsp,
            StackRel::Sbp => self.sbp,
        };
        (base as u64).wrapping_add(k) as usize & SLOT_MASK
    }

    // ----- frames -----

    pub(super) fn top(&mut self) -> &mut Frame {
        match self.calls.last_mut() {
            Some(f) => f,
            None => &mut self.base,
        }
    }

    fn top_ref(&self) -> &Frame {
        self.calls.last().unwrap_or(&self.base)
    }

    /// Code offset of instruction `idx` of `body` (code size if out of range).
    pub(super) fn offset_of(&self, body: BodyId, idx: InsnIdx) -> u64 {
        self.prog
            .bodies
            .get(body)
            .and_then(|b| b.insns.get(idx))
            .map_or(u64::from(self.prog.code_size), |i| u64::from(i.offset))
    }

    /// The current frame's handler as a code offset, or NONE.
    pub(super) fn handler_offset(&self) -> u64 {
        let f = self.top_ref();
        match f.handler {
            Some(h) => self.offset_of(f.body, h),
            None => HANDLER_NONE,
        }
    }
}
