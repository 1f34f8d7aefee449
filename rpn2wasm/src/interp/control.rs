//! Exceptions (§10.4, §10.5) and branches (§9.1): generation, dispatch to a
//! handler, and the jump counter.

use super::{Flow, Machine, exc};
use crate::ast::InsnIdx;
use hostabi::{Exception, Outcome, status::NON_MASKABLE_BITS};

impl<'a> Machine<'a> {
    // ----- exceptions (§10.4, §10.5) -----

    pub(super) fn raise(&mut self, e: Exception, p1: u64, p2: u64) -> Flow {
        self.generate(exc(e), p1, p2, false)
    }

    pub(super) fn generate(&mut self, code: u64, p1: u64, p2: u64, from_rx: bool) -> Flow {
        let x = code & 0xFFFF;
        if x & self.mask != 0 {
            self.last = (code, self.handler_offset(), p1, p2);
            if !from_rx {
                self.push(p2);
                self.push(p1);
                self.push(code);
            }
            if self.autostacktrace {
                self.log_stack_trace();
            }
            self.dispatch()
        } else if x & u64::from(NON_MASKABLE_BITS) != 0 {
            self.last = (code, self.handler_offset(), p1, p2);
            if self.autostacktrace {
                self.log_stack_trace();
            }
            Flow::Stop(Outcome::Uncaught)
        } else {
            Flow::Next
        }
    }

    fn dispatch(&mut self) -> Flow {
        loop {
            let f = self.top();
            if let Some(h) = f.handler.take() {
                self.body = f.body;
                self.pc = h;
                return Flow::Jumped;
            }
            match self.calls.pop() {
                None => return Flow::Stop(Outcome::Uncaught),
                Some(f) => self.sbp = f.saved_sbp,
            }
        }
    }

    // ----- branches (§9.1) -----

    /// The branch-limit check of a counting branch: `Some(flow)` when
    /// MAX_JMPS is raised instead of branching.
    pub(super) fn count_branch(&mut self) -> Option<Flow> {
        if self.jumps >= self.jmpmax {
            return Some(self.raise(Exception::MaxJmps, self.jmpmax, 0));
        }
        self.jumps += 1;
        None
    }

    pub(super) fn branch(&mut self, taken: bool, target: InsnIdx) -> Flow {
        if !taken {
            return Flow::Next;
        }
        if let Some(f) = self.count_branch() {
            return f;
        }
        self.pc = target;
        Flow::Jumped
    }
}
