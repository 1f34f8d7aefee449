//! Statements: calls used as statements, variable assignments (`$x = v`,
//! `$x OP= v`, `let`), map assignments, `if`, loops and blocks, lowered in
//! order into IR statements.

use super::{Fx, MAX_UNROLL, VarLoc, coerce_int, expr, unify};
use crate::ast::{self, Stmt, StmtKind};
use crate::diag::codes;
use crate::ir::{E, S, Ty};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    pub(super) fn stmts(&mut self, list: &[Stmt]) -> Vec<S> {
        let mut out = Vec::new();
        for s in list {
            self.stmt(s, &mut out);
        }
        out
    }

    pub(super) fn stmt(&mut self, s: &Stmt, out: &mut Vec<S>) {
        match &s.kind {
            StmtKind::Expr(e) => {
                if let Some(st) = self.expr_stmt(e) {
                    out.push(st);
                }
            }
            StmtKind::AssignVar {
                name,
                var_span,
                op,
                value,
            } => self.assign_var(name, *var_span, *op, value, out),
            StmtKind::AssignMap { map, op, value } => self.assign_map(map, *op, value, out),
            StmtKind::If { cond, then, els } => {
                let (c, t) = self.expr(cond);
                self.want_int(&t, cond.span, "if condition");
                let a = self.stmts(then);
                let b = self.stmts(els);
                out.push(S::If(c, a, b));
            }
            StmtKind::Unroll { count, body } => {
                let n = match &count.kind {
                    ast::ExprKind::Int(n) => *n,
                    _ => {
                        self.cx.err(
                            codes::LITERAL,
                            count.span,
                            "unroll count must be an integer literal",
                        );
                        return;
                    }
                };
                if n > MAX_UNROLL {
                    self.cx
                        .err(codes::LIMIT, count.span, "unroll maximum value is 100");
                    return;
                }
                if n < 1 {
                    self.cx
                        .err(codes::LIMIT, count.span, "unroll minimum value is 1");
                    return;
                }
                for _ in 0..n {
                    let b = self.stmts(body);
                    out.extend(b);
                }
            }
            StmtKind::While { cond, body } => {
                let (c, t) = self.expr(cond);
                self.want_int(&t, cond.span, "while condition");
                self.loop_depth += 1;
                let b = self.stmts(body);
                self.loop_depth -= 1;
                out.push(S::While(c, b));
            }
            StmtKind::For { var, map, body } => self.for_map(var, map, body, out),
            StmtKind::Break | StmtKind::Continue => {
                if self.loop_depth == 0 {
                    let w = if matches!(s.kind, StmtKind::Break) {
                        "break"
                    } else {
                        "continue"
                    };
                    self.cx.err(
                        codes::SYNTAX,
                        s.span,
                        format!("{w} statement is not allowed outside of a loop"),
                    );
                    return;
                }
                out.push(if matches!(s.kind, StmtKind::Break) {
                    S::Break
                } else {
                    S::Continue
                });
            }
            StmtKind::Return => out.push(S::Return(hostabi::Outcome::Exit as i32)),
            StmtKind::Let { name } => {
                // A declared variable starts from zero (of the type it is
                // given anywhere in the probe).
                let key = (self.probe, name.clone());
                let Some(t) = self.cx.vars.get(&key).cloned() else {
                    return;
                };
                match self.vars.get(name).map(|v| v.1) {
                    Some(VarLoc::Local(l)) => out.push(S::SetLocal(l, E::Int(0))),
                    Some(VarLoc::Slot(slot)) => out.push(S::SetSlot {
                        slot,
                        e: E::Slot(slot),
                        size: t.size(),
                        src_size: 0,
                    }),
                    None => {
                        let loc = if t.is_agg() {
                            VarLoc::Slot(self.slot(t.size()))
                        } else {
                            VarLoc::Local(self.local())
                        };
                        self.vars.insert(name.clone(), (t.clone(), loc));
                        match loc {
                            VarLoc::Local(l) => out.push(S::SetLocal(l, E::Int(0))),
                            VarLoc::Slot(slot) => out.push(S::SetSlot {
                                slot,
                                e: E::Slot(slot),
                                size: t.size(),
                                src_size: 0,
                            }),
                        }
                    }
                }
            }
            StmtKind::Block(list) => {
                for st in list {
                    self.stmt(st, out);
                }
            }
        }
    }

    pub(super) fn assign_var(
        &mut self,
        name: &str,
        span: Span,
        op: Option<ast::BinOp>,
        value: &ast::Expr,
        out: &mut Vec<S>,
    ) {
        let (mut e, mut t) = self.expr(value);
        if let Some(op) = op {
            let cur = self.vars.get(name).cloned();
            let Some((ct, VarLoc::Local(l))) = cur else {
                if cur.is_none() {
                    self.cx.err(
                        codes::UNDEFINED,
                        span,
                        format!("Undefined or undeclared variable used: {name}"),
                    );
                } else {
                    self.cx.err(
                        codes::TYPE,
                        span,
                        format!("{name}: compound assignment needs an integer"),
                    );
                }
                return;
            };
            self.want_int(&t, value.span, "the right operand");
            let (ee, tt) = expr::int_binop(op, (E::Local(l), ct), (e, t));
            e = ee;
            t = tt;
        }
        if t == Ty::None {
            // Errors in the value were reported already.
            return;
        }
        let key = (self.probe, name.to_string());
        let learnt = self.cx.vars.get(&key).cloned().unwrap_or(Ty::None);
        let Some(u) = unify(&learnt, &t) else {
            self.cx.err(
                codes::TYPE,
                span,
                format!(
                    "Type mismatch for {name}: trying to assign value of type '{}' when variable already contains a value of type '{}'",
                    t.name(),
                    learnt.name()
                ),
            );
            return;
        };
        if u != learnt {
            self.cx.vars.insert(key, u.clone());
            self.cx.changed = true;
        }
        let loc = match self.vars.get(name) {
            Some((_, loc)) => *loc,
            None => {
                let loc = if u.is_agg() {
                    VarLoc::Slot(self.slot(u.size()))
                } else {
                    VarLoc::Local(self.local())
                };
                self.vars.insert(name.to_string(), (u.clone(), loc));
                loc
            }
        };
        match loc {
            VarLoc::Local(l) => out.push(S::SetLocal(l, coerce_int(e, &t, &u))),
            VarLoc::Slot(s) => {
                let vt = self.vars.get(name).map(|v| v.0.clone()).unwrap_or(Ty::None);
                let size = vt.size();
                let src_size = t.stored_size(size);
                let e = self.convert(e, &t, &vt);
                out.push(S::SetSlot {
                    slot: s,
                    e,
                    size,
                    src_size,
                })
            }
        }
    }
}
