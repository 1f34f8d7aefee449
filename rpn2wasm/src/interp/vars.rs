//! Variables (§9.4): limits, reads, writes and the variable instructions.

use super::{Flow, Machine};
use crate::ast::{VarOp, VarSpace};
use hostabi::Exception;

impl<'a> Machine<'a> {
    // ----- variables (§9.4) -----

    pub(super) fn var_limit(&mut self, space: VarSpace) -> u64 {
        match space {
            VarSpace::Local => self.vars,
            VarSpace::Global => self.env.gvars().len() as u64,
        }
    }

    pub(super) fn var_kind(space: VarSpace) -> u64 {
        match space {
            VarSpace::Local => 1,
            VarSpace::Global => 2,
        }
    }

    pub(super) fn var_get(&mut self, space: VarSpace, i: u64) -> Option<u64> {
        if i >= self.var_limit(space) {
            return None;
        }
        let i = usize::try_from(i).ok()?;
        match space {
            VarSpace::Local => self.locals.get(i).copied(),
            VarSpace::Global => self.env.gvars().get(i).copied(),
        }
    }

    fn var_set(&mut self, space: VarSpace, i: u64, v: u64) -> bool {
        if i >= self.var_limit(space) {
            return false;
        }
        let Ok(i) = usize::try_from(i) else {
            return false;
        };
        let slot = match space {
            VarSpace::Local => self.locals.get_mut(i),
            VarSpace::Global => self.env.gvars().get_mut(i),
        };
        match slot {
            Some(s) => {
                *s = v;
                true
            }
            None => false,
        }
    }

    pub(super) fn var_op(&mut self, op: VarOp, space: VarSpace, imm: Option<u16>) -> Flow {
        let bad = |m: &mut Machine<'a>, i: u64| {
            m.raise(Exception::InvalidOperand, Machine::var_kind(space), i)
        };
        match op {
            VarOp::Push => {
                let i = imm.map_or_else(|| self.pop(), u64::from);
                match self.var_get(space, i) {
                    Some(v) => {
                        self.push(v);
                        Flow::Next
                    }
                    None => bad(self, i),
                }
            }
            VarOp::Pop => {
                let (i, v) = match imm {
                    Some(i) => (u64::from(i), self.pop()),
                    None => {
                        let v = self.pop();
                        (self.pop(), v)
                    }
                };
                if self.var_set(space, i, v) {
                    Flow::Next
                } else {
                    bad(self, i)
                }
            }
            VarOp::Move => {
                let i = imm.map_or_else(|| self.pop(), u64::from);
                let v = self.tos();
                if self.var_set(space, i, v) {
                    Flow::Next
                } else {
                    bad(self, i)
                }
            }
            VarOp::Inc | VarOp::Dec => {
                let i = imm.map_or_else(|| self.pop(), u64::from);
                let Some(v) = self.var_get(space, i) else {
                    return bad(self, i);
                };
                let v = if op == VarOp::Inc {
                    v.wrapping_add(1)
                } else {
                    v.wrapping_sub(1)
                };
                self.var_set(space, i, v);
                Flow::Next
            }
        }
    }
}
