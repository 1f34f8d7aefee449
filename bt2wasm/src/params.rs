//! Positional parameters (`$1`, `$2`, ..., `$#`), put into the parsed
//! program as bpftrace does before its analysis: in attach points as text
//! (`i:ms:$1`, `BEG$1`, `$1`), in expressions as an integer literal when
//! the word is a number (decimal, `0x` hex, `0` octal), else as a string
//! literal; `str($N)` is always the word itself (`str($1)` of `1` is
//! `"1"`), `str($N + k)` the word from its `k`th byte; a missing parameter
//! is `0` (`""` in `str()`), and `$#` the number of parameters.

use crate::ast::{BinOp, Expr, ExprKind, Program, Stmt, StmtKind};

/// The integer a parameter word denotes, if it is a number.
pub fn number(w: &str) -> Option<u64> {
    let w = w.trim();
    if let Some(h) = w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).ok();
    }
    if w.len() > 1
        && let Some(o) = w.strip_prefix('0')
    {
        return u64::from_str_radix(o, 8).ok();
    }
    if let Some(d) = w.strip_prefix('-') {
        return d
            .parse::<u64>()
            .ok()
            .map(|v| (v as i64).wrapping_neg() as u64);
    }
    w.parse::<u64>().ok()
}

/// Replaces every positional parameter of `prog` by its value.
pub fn substitute(prog: &mut Program, params: &[String]) {
    for p in &mut prog.probes {
        for (text, _) in &mut p.attach {
            *text = in_text(text, params);
        }
        if let Some(e) = &mut p.pred {
            expr(e, params);
        }
        stmts(&mut p.body, params);
    }
}

/// `$N` and `$#` replaced in attach point text.
fn in_text(t: &str, params: &[String]) -> String {
    if !t.contains('$') {
        return t.to_string();
    }
    let b = t.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && b.get(i + 1) == Some(&b'#') {
            out.push_str(&params.len().to_string());
            i += 2;
        } else if b[i] == b'$' && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            let n: String = t[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            i += 1 + n.len();
            let k: usize = n.parse().unwrap_or(0);
            if let Some(w) = k.checked_sub(1).and_then(|k| params.get(k)) {
                out.push_str(w);
            }
        } else {
            let ch = t[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn word(n: u32, params: &[String]) -> Option<&str> {
    (n as usize)
        .checked_sub(1)
        .and_then(|k| params.get(k))
        .map(String::as_str)
}

fn stmts(list: &mut [Stmt], params: &[String]) {
    for s in list {
        match &mut s.kind {
            StmtKind::Expr(e) => expr(e, params),
            StmtKind::AssignMap { map, value, .. } => {
                map.keys.iter_mut().for_each(|k| expr(k, params));
                expr(value, params);
            }
            StmtKind::AssignVar { value, .. } => expr(value, params),
            StmtKind::If { cond, then, els } => {
                expr(cond, params);
                stmts(then, params);
                stmts(els, params);
            }
            StmtKind::Unroll { count, body } => {
                expr(count, params);
                stmts(body, params);
            }
            StmtKind::While { cond, body } => {
                expr(cond, params);
                stmts(body, params);
            }
            StmtKind::Block(b) => stmts(b, params),
            StmtKind::Let { .. } => {}
            StmtKind::For { body, .. } => stmts(body, params),
            StmtKind::Break | StmtKind::Continue | StmtKind::Return => {}
        }
    }
}

fn expr(e: &mut Expr, params: &[String]) {
    // str($N) and str($N + k): the word's text.
    if let ExprKind::Call { name, args, .. } = &mut e.kind
        && name == "str"
        && let Some(first) = args.first_mut()
    {
        let text = match &first.kind {
            ExprKind::Param(n) => Some(word(*n, params).unwrap_or("").as_bytes().to_vec()),
            ExprKind::Binop(BinOp::Add, a, b) => match (&a.kind, &b.kind) {
                (ExprKind::Param(n), ExprKind::Int(k))
                    if word(*n, params).is_some_and(|w| number(w).is_none()) =>
                {
                    let w = word(*n, params).unwrap_or("").as_bytes();
                    Some(w.get(*k as usize..).unwrap_or(&[]).to_vec())
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(t) = text {
            first.kind = ExprKind::Str(t);
        }
    }
    match &mut e.kind {
        ExprKind::Param(n) => {
            e.kind = match word(*n, params) {
                None => ExprKind::Int(0),
                Some(w) => match number(w) {
                    Some(v) if !w.trim_start().starts_with('-') => ExprKind::Int(v),
                    Some(v) => ExprKind::Unop(
                        crate::ast::UnOp::Neg,
                        Box::new(Expr {
                            kind: ExprKind::Int((v as i64).wrapping_neg() as u64),
                            span: e.span,
                        }),
                    ),
                    None => ExprKind::Str(w.as_bytes().to_vec()),
                },
            };
        }
        ExprKind::ParamCount => e.kind = ExprKind::Int(params.len() as u64),
        ExprKind::Map(m) => m.keys.iter_mut().for_each(|k| expr(k, params)),
        ExprKind::Call { args, .. } => args.iter_mut().for_each(|a| expr(a, params)),
        ExprKind::Unop(_, x) => expr(x, params),
        ExprKind::Binop(_, a, b) => {
            expr(a, params);
            expr(b, params);
        }
        ExprKind::Ternary(c, a, b) => {
            expr(c, params);
            expr(a, params);
            expr(b, params);
        }
        ExprKind::Field { base, .. } => expr(base, params),
        ExprKind::TupleIndex(b, _) => expr(b, params),
        ExprKind::Index(a, b) => {
            expr(a, params);
            expr(b, params);
        }
        ExprKind::Cast { expr: x, .. } => expr(x, params),
        ExprKind::Tuple(items) => items.iter_mut().for_each(|i| expr(i, params)),
        ExprKind::IncDec { target, .. } => expr(target, params),
        ExprKind::Int(_)
        | ExprKind::Str(_)
        | ExprKind::Ident(_)
        | ExprKind::Var(_)
        | ExprKind::SizeofType { .. }
        | ExprKind::Offsetof { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_words() {
        assert_eq!(number("123"), Some(123));
        assert_eq!(number("0775"), Some(0o775));
        assert_eq!(number("0x123"), Some(0x123));
        assert_eq!(number("0xffffffffffffffff"), Some(u64::MAX));
        assert_eq!(number("hello"), None);
        assert_eq!(in_text("i:ms:$1", &["5".into()]), "i:ms:5");
        assert_eq!(in_text("BEG$1", &["IN".into()]), "BEGIN");
        assert_eq!(in_text("$2x", &["a".into()]), "x");
    }
}
