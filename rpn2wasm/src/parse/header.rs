//! Header statements `keyword = value` (spec §5, §6): the keyword table and
//! the syntax of each kind of value. Ranges and cross-statement rules are
//! checked by `check`.

use super::cursor::{Cur, Expr, PErr};
use crate::diag::codes;
use crate::lex::{Tok, TokKind, lex_line};
use crate::preprocess::PpLine;
use crate::source::Span;

/// A header keyword (synonyms folded: `passcount` is [`Key::Ignore`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Name,
    Modtype,
    Major,
    Id,
    Vars,
    Gvars,
    Logmax,
    Jmpmax,
    ExcptLog,
    Autostacktrace,
    ExcptMask,
    Logonfault,
    Groupdef,
    Typedef,
    Heap,
    Offset,
    Address,
    Opcode,
    Watchpoint,
    Group,
    Type,
    Minor,
    Ignore,
    Maxhits,
    Return,
    Maxactive,
    Usdt,
}

/// The syntax of a keyword's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Text,
    Number,
    YesNo,
    Word,
    Names,
    Name,
    Location,
    Usdt,
}

impl Key {
    /// The keyword for a lower-case word.
    pub(crate) fn from_word(w: &str) -> Option<Key> {
        Some(match w {
            "name" => Key::Name,
            "modtype" => Key::Modtype,
            "major" => Key::Major,
            "id" => Key::Id,
            "vars" => Key::Vars,
            "gvars" => Key::Gvars,
            "logmax" => Key::Logmax,
            "jmpmax" => Key::Jmpmax,
            "excpt_log" => Key::ExcptLog,
            "autostacktrace" => Key::Autostacktrace,
            "excpt_mask" => Key::ExcptMask,
            "logonfault" => Key::Logonfault,
            "groupdef" => Key::Groupdef,
            "typedef" => Key::Typedef,
            "heap" => Key::Heap,
            "offset" => Key::Offset,
            "address" => Key::Address,
            "opcode" => Key::Opcode,
            "watchpoint" => Key::Watchpoint,
            "group" => Key::Group,
            "type" => Key::Type,
            "minor" => Key::Minor,
            "ignore" | "passcount" => Key::Ignore,
            "maxhits" => Key::Maxhits,
            "return" => Key::Return,
            "maxactive" => Key::Maxactive,
            "usdt" => Key::Usdt,
            _ => return None,
        })
    }

    /// The keyword as written in sources.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Key::Name => "name",
            Key::Modtype => "modtype",
            Key::Major => "major",
            Key::Id => "id",
            Key::Vars => "vars",
            Key::Gvars => "gvars",
            Key::Logmax => "logmax",
            Key::Jmpmax => "jmpmax",
            Key::ExcptLog => "excpt_log",
            Key::Autostacktrace => "autostacktrace",
            Key::ExcptMask => "excpt_mask",
            Key::Logonfault => "logonfault",
            Key::Groupdef => "groupdef",
            Key::Typedef => "typedef",
            Key::Heap => "heap",
            Key::Offset => "offset",
            Key::Address => "address",
            Key::Opcode => "opcode",
            Key::Watchpoint => "watchpoint",
            Key::Group => "group",
            Key::Type => "type",
            Key::Minor => "minor",
            Key::Ignore => "ignore",
            Key::Maxhits => "maxhits",
            Key::Return => "return",
            Key::Maxactive => "maxactive",
            Key::Usdt => "usdt",
        }
    }

    /// Allowed in the file header (§5).
    pub(crate) fn in_file(self) -> bool {
        !matches!(
            self,
            Key::Offset
                | Key::Address
                | Key::Opcode
                | Key::Watchpoint
                | Key::Group
                | Key::Type
                | Key::Minor
                | Key::Ignore
                | Key::Maxhits
                | Key::Return
                | Key::Maxactive
                | Key::Usdt
        )
    }

    /// Allowed in a probe header (§6.1).
    pub(crate) fn in_probe(self) -> bool {
        !self.in_file() || matches!(self, Key::ExcptMask | Key::Logonfault | Key::Heap)
    }

    /// `offset =`, `address =` or `usdt =`.
    pub(crate) fn is_location(self) -> bool {
        matches!(self, Key::Offset | Key::Address | Key::Usdt)
    }

    fn kind(self) -> Kind {
        match self {
            Key::Name => Kind::Text,
            Key::Modtype | Key::Watchpoint => Kind::Word,
            Key::Autostacktrace | Key::Logonfault | Key::Return => Kind::YesNo,
            Key::Groupdef | Key::Typedef => Kind::Names,
            Key::Group | Key::Type => Kind::Name,
            Key::Offset | Key::Address => Kind::Location,
            Key::Usdt => Kind::Usdt,
            _ => Kind::Number,
        }
    }
}

/// A header value after syntax checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// A number (saturated; range checked later).
    Num(u128),
    /// `yes` / `no`.
    Bool(bool),
    /// A keyword value, lower-cased (`modtype`, `watchpoint`).
    Word(String),
    /// Free text (`name =`, quotes removed), or one name (`group =`).
    Text(String),
    /// A list of names with their spans (`groupdef =`, `typedef =`).
    Names(Vec<(String, Span)>),
    /// A location: expression, optional range end.
    Loc(Expr, Option<Expr>),
    /// `usdt = PROVIDER:NAME`.
    Usdt(String, String),
    /// The value had a syntax error (reported).
    Invalid,
}

/// One header statement.
#[derive(Clone, Debug)]
pub(crate) struct Stmt {
    pub key: Key,
    pub key_span: Span,
    pub value: Value,
    /// The value's span (a point after `=` if empty).
    pub span: Span,
}

/// Parses the value of `key`: `line.text[eq_end..cend]`.
pub(crate) fn value(
    key: Key,
    line: &PpLine,
    eq_end: usize,
    cend: usize,
) -> Result<(Value, Span), PErr> {
    if key.kind() == Kind::Text {
        return text_value(key, line, eq_end, cend);
    }
    let toks = lex_line(&line.text[..cend], eq_end)
        .map_err(|e| PErr::new(e.code, e.lo, e.hi, e.message))?;
    let mut c = Cur::new(line, &toks);
    let Some(first) = c.peek() else {
        return Err(PErr::new(
            codes::INVALID_VALUE,
            eq_end,
            eq_end,
            format!("missing value for `{}`", key.name()),
        ));
    };
    let v = match key.kind() {
        Kind::Number => number(&mut c, key)?,
        Kind::YesNo => match word(&mut c, key)?.as_str() {
            "yes" => Value::Bool(true),
            "no" => Value::Bool(false),
            _ => {
                return Err(invalid(
                    &c,
                    first,
                    &format!("`{}` must be `yes` or `no`", key.name()),
                ));
            }
        },
        Kind::Word => Value::Word(word(&mut c, key)?),
        Kind::Name => {
            let (n, _) = c.name(&format!("{} name", key.name()))?;
            Value::Text(n)
        }
        Kind::Names => names(&mut c, key)?,
        Kind::Location => {
            let a = c.expr()?;
            let b = match c.peek() {
                Some(Tok {
                    kind: TokKind::Colon,
                    ..
                }) => {
                    c.i += 1;
                    Some(c.expr()?)
                }
                _ => None,
            };
            Value::Loc(a, b)
        }
        Kind::Usdt => {
            let (provider, _) = c.name("USDT provider")?;
            match c.peek() {
                Some(Tok {
                    kind: TokKind::Colon,
                    ..
                }) => c.i += 1,
                _ => {
                    return Err(invalid(
                        &c,
                        first,
                        "`usdt` must be `PROVIDER:NAME` (as `readelf -n` shows a probe)",
                    ));
                }
            }
            let (name, _) = c.name("USDT probe name")?;
            Value::Usdt(provider, name)
        }
        Kind::Text => Value::Invalid,
    };
    if let Some(t) = c.peek() {
        return Err(PErr::new(
            codes::INVALID_VALUE,
            t.lo,
            t.hi,
            format!(
                "unexpected {} after the value of `{}`",
                c.describe(t),
                key.name()
            ),
        ));
    }
    Ok((v, line.span(first.lo, c.consumed_end())))
}

fn invalid(c: &Cur<'_>, t: Tok, msg: &str) -> PErr {
    PErr::new(
        codes::INVALID_VALUE,
        t.lo,
        t.hi,
        format!("{msg}, found {}", c.describe(t)),
    )
}

fn number(c: &mut Cur<'_>, key: Key) -> Result<Value, PErr> {
    let Some(t) = c.bump() else {
        return Err(c.missing("number"));
    };
    match t.kind {
        TokKind::Number(v) => Ok(Value::Num(v)),
        TokKind::Minus => Err(PErr::new(
            codes::SIGN_NOT_ALLOWED,
            t.lo,
            t.hi,
            format!("`{}` must not be negative", key.name()),
        )),
        _ => Err(invalid(c, t, &format!("`{}` must be a number", key.name()))),
    }
}

fn word(c: &mut Cur<'_>, key: Key) -> Result<String, PErr> {
    let Some(t) = c.bump() else {
        return Err(c.missing("value"));
    };
    if t.kind != TokKind::Word {
        return Err(invalid(
            c,
            t,
            &format!("invalid value for `{}`", key.name()),
        ));
    }
    Ok(c.lower(t))
}

fn names(c: &mut Cur<'_>, key: Key) -> Result<Value, PErr> {
    let what = if key == Key::Groupdef {
        "group name"
    } else {
        "type name"
    };
    let mut out = Vec::new();
    let mut need_name = true;
    while let Some(t) = c.peek() {
        if t.kind == TokKind::Comma {
            if need_name {
                return Err(PErr::new(
                    codes::UNEXPECTED_TOKEN,
                    t.lo,
                    t.hi,
                    format!("expected a {what} before `,`"),
                ));
            }
            c.i += 1;
            need_name = true;
            continue;
        }
        let (n, t) = c.name(what)?;
        out.push((n, c.tspan(t)));
        need_name = false;
    }
    if need_name {
        return Err(c.missing(what));
    }
    Ok(Value::Names(out))
}

/// `name =`: the rest of the line, trimmed; quotes removed.
fn text_value(key: Key, line: &PpLine, eq_end: usize, cend: usize) -> Result<(Value, Span), PErr> {
    let t = &line.text;
    let mut lo = eq_end;
    let mut hi = cend;
    while lo < hi && matches!(t[lo], b' ' | b'\t' | b'\r') {
        lo += 1;
    }
    while hi > lo && matches!(t[hi - 1], b' ' | b'\t' | b'\r') {
        hi -= 1;
    }
    if lo == hi {
        return Err(PErr::new(
            codes::INVALID_VALUE,
            eq_end,
            eq_end,
            format!("missing value for `{}`", key.name()),
        ));
    }
    let span = line.span(lo, hi);
    if t[lo] == b'"' {
        let Some(p) = t[lo + 1..hi].iter().position(|b| *b == b'"') else {
            return Err(PErr::new(
                codes::UNTERMINATED_STRING,
                lo,
                lo + 1,
                "quoted string has no closing `\"`",
            ));
        };
        let close = lo + 1 + p;
        if close + 1 < hi {
            return Err(PErr::new(
                codes::INVALID_VALUE,
                close + 1,
                hi,
                "unexpected text after the quoted name",
            ));
        }
        if let Some(i) = (lo + 1..close).find(|i| t[*i] < 0x20 || t[*i] == 0x7f) {
            return Err(bad_char(t, i));
        }
        let s = String::from_utf8_lossy(&t[lo + 1..close]).into_owned();
        if s.is_empty() {
            return Err(PErr::new(codes::INVALID_VALUE, lo, hi, "empty module name"));
        }
        return Ok((Value::Text(s), span));
    }
    if let Some(i) = (lo..hi).find(|i| !(0x20..0x7f).contains(&t[*i]) && t[*i] != b'\t') {
        return Err(bad_char(t, i));
    }
    Ok((
        Value::Text(String::from_utf8_lossy(&t[lo..hi]).into_owned()),
        span,
    ))
}

fn bad_char(t: &[u8], i: usize) -> PErr {
    let msg = if t[i] == 0 {
        "NUL byte in source text".to_string()
    } else if t[i] >= 0x80 {
        "non-ASCII character in an unquoted name (quote it)".to_string()
    } else {
        format!("control character 0x{:02x} in source text", t[i])
    };
    PErr::new(codes::INVALID_CHAR, i, i + 1, msg)
}

/// A header statement line: label ranges, keyword range, offset after `=`.
pub(crate) struct HeaderPrefix {
    pub labels: Vec<(usize, usize)>,
    pub keyword: (usize, usize),
    pub eq_end: usize,
}

/// If the line is `{label:} keyword = …` (within `t[..end]`), its parts.
pub(crate) fn header_prefix(t: &[u8], end: usize) -> Option<HeaderPrefix> {
    let skip = |mut i: usize| {
        while i < end && matches!(t[i], b' ' | b'\t' | b'\r') {
            i += 1;
        }
        i
    };
    let mut labels = Vec::new();
    let mut i = skip(0);
    loop {
        if i >= end || !crate::lex::is_word_start(t[i]) {
            return None;
        }
        let mut j = i;
        while j < end && crate::lex::is_word_char(t[j]) {
            j += 1;
        }
        let k = skip(j);
        match t.get(k) {
            Some(b':') if k < end => {
                labels.push((i, j));
                i = skip(k + 1);
            }
            Some(b'=') if k < end => {
                return Some(HeaderPrefix {
                    labels,
                    keyword: (i, j),
                    eq_end: k + 1,
                });
            }
            _ => return None,
        }
    }
}
