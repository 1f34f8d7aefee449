//! Body checks (spec §2.8, §4.3, §7 items 4–5): procedure table, label
//! tables, resolution of branch/`sx`/`call` targets, variable indices
//! against `vars`/`gvars`, and symbols of `push EXPR`.

use std::collections::HashMap;

use super::{Ctx, terminator};
use crate::ast::{Body, BodyOwner, FileHeader, Insn, Op, Proc, ProcId, VarSpace};
use crate::diag::{Diagnostic, codes};
use crate::parse::{Item, RawBody, RawOp};
use crate::source::Span;

/// The procedures of the file.
pub(super) struct Procs {
    /// Every `proc`, in source order (its index is its [`ProcId`]).
    pub list: Vec<Proc>,
    /// For each item of the file: its procedure id if it is a procedure.
    pub ids: Vec<Option<ProcId>>,
    /// Lower-cased name → id of its first definition.
    by_name: HashMap<String, ProcId>,
}

/// Labels of one body: lower-cased name → (instruction index, span).
pub(super) type Labels = HashMap<String, (usize, Span)>;

impl Ctx<'_> {
    /// `path:line:col` of the start of `span`, for notes.
    pub(super) fn at(&self, span: Span) -> String {
        let (line, col) = self.map.line_col(span.file, span.lo);
        let path = self
            .map
            .files
            .get(span.file as usize)
            .map(|f| f.path.display().to_string())
            .unwrap_or_default();
        format!("{path}:{line}:{col}")
    }

    /// Collects the procedures; reports duplicates (case-insensitive).
    pub(super) fn procs(&mut self, items: &[Item]) -> Procs {
        let mut procs = Procs {
            list: Vec::new(),
            ids: Vec::with_capacity(items.len()),
            by_name: HashMap::new(),
        };
        for (i, item) in items.iter().enumerate() {
            let Item::Proc(p) = item else {
                procs.ids.push(None);
                continue;
            };
            let id = procs.list.len();
            procs.ids.push(Some(id));
            procs.list.push(Proc {
                name: p.name.clone(),
                body: i,
                span: p.span,
            });
            if p.name.is_empty() {
                continue;
            }
            let key = p.name.to_ascii_lowercase();
            if let Some(first) = procs.by_name.get(&key) {
                let first = procs.list[*first].span;
                let d = Diagnostic::new(
                    codes::DUPLICATE_PROC,
                    p.name_span,
                    format!("procedure `{}` is defined twice", p.name),
                )
                .with_note(format!(
                    "first defined at {} (procedure names are case-insensitive)",
                    self.at(first)
                ));
                self.sink.push(d);
            } else {
                procs.by_name.insert(key, id);
            }
        }
        procs
    }

    /// The label table of every body; reports duplicates within a body.
    pub(super) fn label_tables(&mut self, items: &[Item]) -> Vec<Labels> {
        items
            .iter()
            .map(|item| {
                let body = match item {
                    Item::Probe(_, b) => b,
                    Item::Proc(p) => &p.body,
                };
                let mut t = Labels::new();
                for l in &body.labels {
                    let key = l.name.to_ascii_lowercase();
                    if let Some((_, first)) = t.get(&key) {
                        let d = Diagnostic::new(
                            codes::DUPLICATE_LABEL,
                            l.span,
                            format!("label `{}` is defined twice in this body", l.name),
                        )
                        .with_note(format!("first defined at {}", self.at(*first)));
                        self.sink.push(d);
                    } else {
                        t.insert(key, (l.insn, l.span));
                    }
                }
                t
            })
            .collect()
    }

    /// Resolves the body of item `me`.
    pub(super) fn body(
        &mut self,
        raw: &RawBody,
        owner: BodyOwner,
        me: usize,
        labels: &[Labels],
        procs: &Procs,
        h: &FileHeader,
    ) -> Body {
        let mut insns = Vec::with_capacity(raw.insns.len() + 1);
        for r in &raw.insns {
            let op = match &r.op {
                RawOp::Op(op) => Some(op.clone()),
                RawOp::Error => None,
                RawOp::Branch(b, name) => {
                    self.target(name, r.arg, me, labels, procs).map(|t| b.op(t))
                }
                RawOp::Call(name) => self.call(name, r.arg, me, labels, procs),
                RawOp::Push(e) => self.resolve(e).map(|(value, _)| Op::PushSym { value }),
                RawOp::VarImm(op, space, i) => {
                    let (limit, code, what, key) = match space {
                        VarSpace::Local => (h.vars, codes::LV_INDEX, "local", "vars"),
                        VarSpace::Global => (h.gvars, codes::GV_INDEX, "global", "gvars"),
                    };
                    if *i >= limit as u64 {
                        let d = Diagnostic::new(
                            code,
                            r.arg,
                            format!("{what} variable index {i} is out of range: `{key} = {limit}`"),
                        )
                        .with_note(format!("valid indices are 0 … {key} − 1; declare more with `{key} =` in the file header"));
                        self.sink.push(d);
                        None
                    } else {
                        Some(Op::VarImm(*op, *space, *i as u16))
                    }
                }
            };
            // A placeholder keeps label indices right; the program is not
            // produced when any error was reported.
            insns.push(Insn {
                op: op.unwrap_or(Op::Nop),
                span: r.span,
                offset: 0,
            });
        }
        insns.push(terminator(owner, raw.end));
        Body { owner, insns }
    }

    /// The target of a branch or `sx` in body `me`.
    fn target(
        &mut self,
        name: &str,
        span: Span,
        me: usize,
        labels: &[Labels],
        procs: &Procs,
    ) -> Option<usize> {
        let key = name.to_ascii_lowercase();
        if let Some((i, _)) = labels.get(me).and_then(|t| t.get(&key)) {
            return Some(*i);
        }
        if let Some((_, at)) = labels.iter().find_map(|t| t.get(&key)) {
            let d = Diagnostic::new(
                codes::TARGET_IN_OTHER_BODY,
                span,
                format!("label `{name}` is defined in another body"),
            )
            .with_note(format!(
                "defined at {}; jump and `sx` targets must be in the same probe or procedure",
                self.at(*at)
            ));
            self.sink.push(d);
        } else if procs.by_name.contains_key(&key) {
            let d = Diagnostic::new(
                codes::JUMP_TO_PROC,
                span,
                format!("`{name}` is a procedure, not a label"),
            )
            .with_note("use `call` to enter a procedure");
            self.sink.push(d);
        } else {
            self.sink.error(
                codes::UNDEFINED_LABEL,
                span,
                format!("undefined label `{name}`"),
            );
        }
        None
    }

    fn call(
        &mut self,
        name: &str,
        span: Span,
        me: usize,
        labels: &[Labels],
        procs: &Procs,
    ) -> Option<Op> {
        let key = name.to_ascii_lowercase();
        if let Some(id) = procs.by_name.get(&key) {
            return Some(Op::Call(*id));
        }
        let here = labels.get(me).is_some_and(|t| t.contains_key(&key));
        if here || labels.iter().any(|t| t.contains_key(&key)) {
            let d = Diagnostic::new(
                codes::CALL_OF_LABEL,
                span,
                format!("`{name}` is a label, not a procedure"),
            )
            .with_note("`call` takes a procedure name (`proc NAME`); use `jmp` for labels");
            self.sink.push(d);
        } else {
            self.sink.error(
                codes::UNDEFINED_PROC,
                span,
                format!("undefined procedure `{name}`"),
            );
        }
        None
    }
}
