//! printf format strings as bpftrace 0.17 validates them: specifiers are
//! what its regex `%-?[0-9]*(\.[0-9]+)?(TYPE)` finds (searching from every
//! byte, so `%%d` holds one specifier), each argument must match its
//! specifier's kind, and the counts must agree.

/// What a specifier takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `%s`: a string (symbols and stacks print as strings).
    Str,
    /// `%r`, `%rx`, `%rh`: a buffer.
    Buf,
    /// Integer conversions (`%d`, `%lu`, `%x`, `%c`, `%p`, ...).
    Int,
}

impl Kind {
    /// bpftrace's name of the type a specifier expects.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Str => "string",
            Kind::Buf => "buffer",
            Kind::Int => "integer",
        }
    }
}

/// One specifier: its byte range in the format and what it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Start (the `%`).
    pub start: usize,
    /// End (exclusive).
    pub end: usize,
    /// The conversion with its length modifier (`d`, `lld`, `rx`).
    pub conv: String,
    /// Kind.
    pub kind: Kind,
}

const LENGTHS: &[&str] = &["hh", "h", "ll", "l", "j", "z", "t", ""];
const INT_CONVS: &[char] = &['d', 'u', 'o', 'x', 'X', 'p'];

/// The specifier starting at `i` (a `%`), if the regex matches there.
fn spec_at(f: &[u8], i: usize) -> Option<Spec> {
    let mut j = i + 1;
    if f.get(j) == Some(&b'-') {
        j += 1;
    }
    while f.get(j).is_some_and(|c| c.is_ascii_digit()) {
        j += 1;
    }
    if f.get(j) == Some(&b'.') && f.get(j + 1).is_some_and(|c| c.is_ascii_digit()) {
        j += 1;
        while f.get(j).is_some_and(|c| c.is_ascii_digit()) {
            j += 1;
        }
    }
    let rest = &f[j.min(f.len())..];
    // The regex's alternatives in bpftrace's map order do not matter for
    // these: the longest valid one is what `std::regex` (leftmost, first
    // alternative that matches) would also find for every valid token.
    let take = |n: usize, conv: &str, kind: Kind| Spec {
        start: i,
        end: j + n,
        conv: conv.to_string(),
        kind,
    };
    if rest.starts_with(b"rx") || rest.starts_with(b"rh") {
        let c = std::str::from_utf8(&rest[..2]).unwrap_or("r");
        return Some(take(2, c, Kind::Buf));
    }
    match rest.first() {
        Some(b's') => return Some(take(1, "s", Kind::Str)),
        Some(b'r') => return Some(take(1, "r", Kind::Buf)),
        Some(b'c') => return Some(take(1, "c", Kind::Int)),
        _ => {}
    }
    for l in LENGTHS {
        if let Some(r) = rest.strip_prefix(l.as_bytes())
            && let Some(&c) = r.first()
            && INT_CONVS.contains(&(c as char))
        {
            return Some(take(l.len() + 1, &format!("{l}{}", c as char), Kind::Int));
        }
    }
    None
}

/// Every specifier of `f`, in order.
pub fn specs(f: &[u8]) -> Vec<Spec> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < f.len() {
        if f[i] == b'%'
            && let Some(s) = spec_at(f, i)
        {
            i = s.end;
            out.push(s);
            continue;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specifiers() {
        let v = specs(b"a %d b %-10s %5.2lu %rx %% %%d %c %p %hhx %z");
        let convs: Vec<&str> = v.iter().map(|s| s.conv.as_str()).collect();
        assert_eq!(convs, ["d", "s", "lu", "rx", "d", "c", "p", "hhx"]);
        assert_eq!(v[1].kind, Kind::Str);
        assert_eq!(v[3].kind, Kind::Buf);
    }
}
