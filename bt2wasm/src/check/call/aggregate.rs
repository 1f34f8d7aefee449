//! The aggregations (`count`, `sum`, `avg`, `min`, `max`, `stats`, `hist`,
//! `lhist`), only valid as the value of a map assignment.

use super::int_literal;
use crate::ast;
use crate::check::Fx;
use crate::diag::codes;
use crate::ir::{E, S, Ty};
use hostabi::maps::{MapKind, Op};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `@m[k] = count()` and the other aggregations.
    pub(crate) fn aggregate(
        &mut self,
        m: &ast::MapRef,
        name: &str,
        args: &[ast::Expr],
        span: Span,
        out: &mut Vec<S>,
    ) {
        let (kind, op, nargs) = match name {
            "count" => (MapKind::Count, Op::Count, 0),
            "sum" => (MapKind::Sum, Op::Add, 1),
            "avg" => (MapKind::Avg, Op::Avg, 1),
            "min" => (MapKind::Min, Op::Min, 1),
            "max" => (MapKind::Max, Op::Max, 1),
            "stats" => (MapKind::Stats, Op::Avg, 1),
            "hist" => (MapKind::Hist, Op::Hist, 1),
            _ => (MapKind::Lhist, Op::Lhist, 4),
        };
        let most = if kind == MapKind::Hist { 2 } else { nargs };
        if !self.nargs(name, args, nargs, most, span) {
            return;
        }
        // `hist(x, k)`: 2^k buckets per power of two, k a literal 0 to 5.
        let mut hist_bits = 0u8;
        if kind == MapKind::Hist
            && let Some(a) = args.get(1)
        {
            let Some(k) = self.hist_bits(a) else {
                return;
            };
            hist_bits = k;
        }
        let (value, vt) = match args.first() {
            Some(a) => {
                let (e, t) = self.expr(a);
                if t == Ty::None {
                    return;
                }
                if !t.is_int() {
                    self.cx.err(
                        codes::ARGUMENTS,
                        a.span,
                        format!("{name}() expects a integer type ({} provided)", t.name()),
                    );
                    return;
                }
                (e, t)
            }
            None => (E::Int(0), Ty::U64),
        };
        let mut lhist = None;
        if kind == MapKind::Lhist {
            let Some(bounds) = self.lhist_bounds(args, span) else {
                return;
            };
            lhist = Some(bounds);
        }
        let sample = Ty::Int {
            signed: vt.signed(),
            bytes: 8,
        };
        let Some((map, key)) = self.map_target(m, sample.clone(), true) else {
            return;
        };
        if self
            .set_map_kind(m, kind, sample.clone(), lhist, span)
            .is_none()
        {
            return;
        }
        if kind == MapKind::Hist {
            let info = self.cx.map(&m.name);
            match info.hist_bits {
                Some(old) if old != hist_bits => {
                    self.cx.err(
                        codes::MAP_USE,
                        span,
                        format!(
                            "hist() bits argument of {} differs from an earlier use",
                            m.name
                        ),
                    );
                    return;
                }
                _ => info.hist_bits = Some(hist_bits),
            }
        }
        out.push(S::MapUpdate {
            map,
            key,
            op,
            value: crate::check::coerce_int(value, &vt, &sample),
        });
    }

    /// The `k` of `hist(x, k)`: 2^k buckets per power of two, k a literal
    /// 0 to 5; `None` after an error.
    fn hist_bits(&mut self, a: &ast::Expr) -> Option<u8> {
        match int_literal(a) {
            Some(k) if (0..=i64::from(hostabi::maps::MAX_HIST_BITS)).contains(&k) => Some(k as u8),
            Some(_) => {
                self.cx.err(
                    codes::ARGUMENTS,
                    a.span,
                    format!(
                        "hist: bits argument must be in range 0-{}",
                        hostabi::maps::MAX_HIST_BITS
                    ),
                );
                None
            }
            None => {
                self.cx.err(
                    codes::LITERAL,
                    a.span,
                    "hist() expects an integer literal as its second argument",
                );
                None
            }
        }
    }

    /// The `min, max, step` literals of `lhist(x, min, max, step)`,
    /// checked as bpftrace checks them; `None` after an error.
    fn lhist_bounds(&mut self, args: &[ast::Expr], span: Span) -> Option<(i64, i64, i64)> {
        let lit: Vec<Option<i64>> = args[1..].iter().map(int_literal).collect();
        let names = ["min", "max", "step"];
        for (i, l) in lit.iter().enumerate() {
            if l.is_none() {
                self.cx.err(
                    codes::LITERAL,
                    args[i + 1].span,
                    format!("lhist: invalid {} value", names[i]),
                );
                return None;
            }
        }
        let (min, max, step) = (
            lit[0].unwrap_or(0),
            lit[1].unwrap_or(0),
            lit[2].unwrap_or(0),
        );
        let mut ok = true;
        if step <= 0 {
            self.cx.err(
                codes::LITERAL,
                span,
                format!("lhist() step must be >= 1 ({step} provided)"),
            );
            ok = false;
        } else {
            let buckets = (max - min) / step;
            if buckets > 1000 {
                self.cx.err(
                    codes::LITERAL,
                    span,
                    format!("lhist() too many buckets, must be <= 1000 (would need {buckets})"),
                );
                ok = false;
            }
        }
        if min < 0 {
            self.cx.err(
                codes::LITERAL,
                span,
                format!("lhist() min must be non-negative (provided min {min})"),
            );
            ok = false;
        }
        if min > max {
            self.cx.err(
                codes::LITERAL,
                span,
                format!("lhist() min must be less than max (provided min {min} and max {max})"),
            );
            ok = false;
        }
        if step > 0 && (max - min) < step {
            self.cx.err(
                codes::LITERAL,
                span,
                format!("lhist() step is too large for the given range (provided step {step} for range {})", max - min),
            );
            ok = false;
        }
        if !ok {
            return None;
        }
        Some((min, max, step))
    }
}
