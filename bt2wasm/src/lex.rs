//! Lexer of the one-liner language: tokens with byte spans, driven by the
//! parser, which asks either for an ordinary token ([`Lexer::token`]) or for
//! a whole attach point ([`Lexer::attach_point`]: `uprobe:/bin/bash:f*` is
//! one word, as bpftrace's `PATH` tokens make it). Comments, `#!` lines and
//! whitespace are skipped. Never panics on any input; errors are tokens of
//! kind [`Tok::Error`] carrying their message.

use rpn2wasm::Span;

/// A token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// An identifier (keywords, builtins and function names included).
    Ident(String),
    /// An integer literal (decimal, `0x` hex, `1e6`, `_` separators, `u`/`l` suffixes).
    Int(u64),
    /// A string literal, escapes processed.
    Str(Vec<u8>),
    /// `@name` or `@`.
    Map(String),
    /// `$name`.
    Var(String),
    /// `$1`, `$2`, ...
    Param(u32),
    /// `$#`.
    ParamCount,
    /// Punctuation and operators (`{`, `==`, `+=`, `->`, ...).
    Punct(&'static str),
    /// End of input.
    Eof,
    /// A lexical error: the message.
    Error(String),
}

/// Operators and punctuation, longest first (maximal munch).
const PUNCT: &[&str] = &[
    "<<=", ">>=", "==", "!=", "<=", ">=", "<<", ">>", "&&", "||", "++", "--", "+=", "-=", "*=",
    "/=", "%=", "&=", "|=", "^=", "->", "{", "}", "(", ")", "[", "]", ";", ",", "=", "<", ">", "+",
    "-", "*", "/", "%", "&", "|", "^", "!", "~", "?", ":", ".",
];

/// The lexer: a position in the source.
pub struct Lexer<'a> {
    src: &'a [u8],
    /// Next byte to read.
    pub pos: usize,
    file: u32,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

impl<'a> Lexer<'a> {
    /// A lexer over `src` (file id `file` in the source map).
    pub fn new(src: &'a [u8], file: u32) -> Lexer<'a> {
        Lexer { src, pos: 0, file }
    }

    /// A span of this file.
    pub fn span(&self, lo: usize, hi: usize) -> Span {
        Span {
            file: self.file,
            lo: lo as u32,
            hi: hi as u32,
        }
    }

    fn peek(&self, k: usize) -> u8 {
        self.src.get(self.pos + k).copied().unwrap_or(0)
    }

    /// Skips whitespace and comments; an unterminated `/* */` is an error token.
    fn skip(&mut self) -> Option<(Tok, Span)> {
        loop {
            let c = self.peek(0);
            if c == b' ' || c == b'\t' || c == b'\n' || c == b'\r' {
                self.pos += 1;
            } else if c == b'/' && self.peek(1) == b'/' {
                while self.pos < self.src.len() && self.src[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else if c == b'/' && self.peek(1) == b'*' {
                let start = self.pos;
                self.pos += 2;
                loop {
                    if self.pos >= self.src.len() {
                        return Some((
                            Tok::Error("end of file during comment".into()),
                            self.span(start, start + 2),
                        ));
                    }
                    if self.peek(0) == b'*' && self.peek(1) == b'/' {
                        self.pos += 2;
                        break;
                    }
                    self.pos += 1;
                }
            } else if c == b'#' && self.peek(1) == b'!' && self.at_line_start() {
                while self.pos < self.src.len() && self.src[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else {
                return None;
            }
        }
    }

    fn at_line_start(&self) -> bool {
        self.pos == 0 || self.src.get(self.pos - 1) == Some(&b'\n')
    }

    /// The next attach point: a run of identifier, path and offset
    /// characters (`uprobe:./t:f*`, `interval:s:1`, `BEGIN`). A `/` belongs
    /// to it only after a `:` (a path), otherwise it starts a predicate.
    pub fn attach_point(&mut self) -> (Tok, Span) {
        if let Some(e) = self.skip() {
            return e;
        }
        let start = self.pos;
        let mut seen_colon = false;
        while self.pos < self.src.len() {
            let c = self.src[self.pos];
            // A quoted part (`uprobe:./bin:"ns::f"+4`): kept as written,
            // its colons and all.
            if c == b'"' && seen_colon {
                // `\"` and `\\` inside are the characters themselves
                // (`usdt:./p:test:"\"probe1\""`).
                let mut i = self.pos + 1;
                while i < self.src.len() && self.src[i] != b'"' {
                    i += if self.src[i] == b'\\' { 2 } else { 1 };
                }
                if i >= self.src.len() {
                    break;
                }
                self.pos = i + 1;
                continue;
            }
            let ok = is_ident(c)
                || matches!(
                    c,
                    b':' | b'.' | b'*' | b'+' | b'-' | b'#' | b'[' | b']' | b'@' | b'$' | b'?'
                )
                || (c == b'/' && seen_colon);
            if !ok {
                break;
            }
            seen_colon |= c == b':';
            self.pos += 1;
        }
        let text = String::from_utf8_lossy(&self.src[start..self.pos]).into_owned();
        if text.is_empty() {
            return self.token();
        }
        (Tok::Ident(text), self.span(start, self.pos))
    }

    /// The next ordinary token.
    pub fn token(&mut self) -> (Tok, Span) {
        if let Some(e) = self.skip() {
            return e;
        }
        let start = self.pos;
        let c = self.peek(0);
        if self.pos >= self.src.len() {
            return (Tok::Eof, self.span(start, start));
        }
        let tok = if is_ident_start(c) {
            while is_ident(self.peek(0)) {
                self.pos += 1;
            }
            Tok::Ident(String::from_utf8_lossy(&self.src[start..self.pos]).into_owned())
        } else if c.is_ascii_digit() {
            self.number()
        } else if c == b'"' {
            self.string()
        } else if c == b'@' {
            self.pos += 1;
            while is_ident(self.peek(0)) {
                self.pos += 1;
            }
            let name = String::from_utf8_lossy(&self.src[start..self.pos]).into_owned();
            if name.len() > 1 && !is_ident_start(name.as_bytes()[1]) {
                Tok::Error(format!("invalid map name `{name}`"))
            } else {
                Tok::Map(name)
            }
        } else if c == b'$' {
            self.pos += 1;
            if self.peek(0) == b'#' {
                self.pos += 1;
                Tok::ParamCount
            } else if self.peek(0).is_ascii_digit() {
                while self.peek(0).is_ascii_digit() {
                    self.pos += 1;
                }
                let t = String::from_utf8_lossy(&self.src[start + 1..self.pos]).into_owned();
                match t.parse::<u32>() {
                    Ok(n) if n > 0 => Tok::Param(n),
                    _ => Tok::Error(format!(
                        "param ${t} is out of integer range [1, 2147483647]"
                    )),
                }
            } else if is_ident_start(self.peek(0)) {
                while is_ident(self.peek(0)) {
                    self.pos += 1;
                }
                Tok::Var(String::from_utf8_lossy(&self.src[start..self.pos]).into_owned())
            } else {
                Tok::Error("invalid character '$'".into())
            }
        } else if let Some(p) = PUNCT
            .iter()
            .find(|p| self.src[self.pos..].starts_with(p.as_bytes()))
        {
            self.pos += p.len();
            Tok::Punct(p)
        } else {
            // One whole UTF-8 character, for the message.
            let len = match c {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            self.pos = (self.pos + len).min(self.src.len());
            let ch = String::from_utf8_lossy(&self.src[start..self.pos]).into_owned();
            Tok::Error(format!("invalid character '{ch}'"))
        };
        (tok, self.span(start, self.pos))
    }

    fn number(&mut self) -> Tok {
        let start = self.pos;
        let hex = self.peek(0) == b'0' && matches!(self.peek(1), b'x' | b'X');
        if hex {
            self.pos += 2;
            while self.peek(0).is_ascii_hexdigit() {
                self.pos += 1;
            }
        } else {
            while self.peek(0).is_ascii_digit() || self.peek(0) == b'_' {
                self.pos += 1;
            }
            if matches!(self.peek(0), b'e' | b'E') && self.peek(1).is_ascii_digit() {
                self.pos += 1;
                while self.peek(0).is_ascii_digit() || self.peek(0) == b'_' {
                    self.pos += 1;
                }
            }
        }
        let digits_end = self.pos;
        while matches!(self.peek(0), b'u' | b'U' | b'l' | b'L') {
            self.pos += 1;
        }
        if is_ident(self.peek(0)) {
            while is_ident(self.peek(0)) {
                self.pos += 1;
            }
            let t = String::from_utf8_lossy(&self.src[start..self.pos]);
            return Tok::Error(format!("invalid integer literal `{t}`"));
        }
        let text: String = String::from_utf8_lossy(&self.src[start..digits_end])
            .chars()
            .filter(|c| *c != '_')
            .collect();
        let v = if hex {
            u64::from_str_radix(&text[2..], 16).ok()
        } else if let Some((m, e)) = text.split_once(['e', 'E']) {
            match (m.parse::<u64>(), e.parse::<u32>()) {
                (Ok(m), Ok(e)) => 10u64.checked_pow(e).and_then(|p| m.checked_mul(p)),
                _ => None,
            }
        } else {
            text.parse::<u64>().ok()
        };
        match v {
            Some(v) if !(hex && text.len() == 2) => Tok::Int(v),
            _ => Tok::Error(format!(
                "invalid integer literal `{}`: out of range or malformed",
                String::from_utf8_lossy(&self.src[start..self.pos])
            )),
        }
    }

    fn string(&mut self) -> Tok {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let c = self.peek(0);
            if self.pos >= self.src.len() || c == b'\n' {
                return Tok::Error("unterminated string".into());
            }
            self.pos += 1;
            match c {
                b'"' => return Tok::Str(out),
                b'\\' => {
                    let e = self.peek(0);
                    self.pos += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'x' | b'X' if self.peek(0).is_ascii_hexdigit() => {
                            let mut v = 0u32;
                            for _ in 0..2 {
                                match (self.peek(0) as char).to_digit(16) {
                                    Some(d) => {
                                        v = v * 16 + d;
                                        self.pos += 1;
                                    }
                                    None => break,
                                }
                            }
                            out.push(v as u8);
                        }
                        b'0'..=b'7' => {
                            let mut v = (e - b'0') as u32;
                            for _ in 0..2 {
                                match self.peek(0) {
                                    d @ b'0'..=b'7' => {
                                        v = v * 8 + (d - b'0') as u32;
                                        self.pos += 1;
                                    }
                                    _ => break,
                                }
                            }
                            if v > 255 {
                                return Tok::Error(format!(
                                    "octal escape sequence out of range '\\{v:o}'"
                                ));
                            }
                            out.push(v as u8);
                        }
                        _ => {
                            let shown = if e.is_ascii_graphic() {
                                (e as char).to_string()
                            } else {
                                format!("\\x{e:02x}")
                            };
                            return Tok::Error(format!("invalid escape character '\\{shown}'"));
                        }
                    }
                }
                c => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        let mut l = Lexer::new(s.as_bytes(), 0);
        let mut v = Vec::new();
        loop {
            let (t, _) = l.token();
            if t == Tok::Eof {
                return v;
            }
            v.push(t);
        }
    }

    #[test]
    fn tokens() {
        assert_eq!(
            toks("@x[$a] += 1_000 >>= \"a\\n\\x41\\101\" 0x1F 2e3 // c\n/* d */ $# $2"),
            vec![
                Tok::Map("@x".into()),
                Tok::Punct("["),
                Tok::Var("$a".into()),
                Tok::Punct("]"),
                Tok::Punct("+="),
                Tok::Int(1000),
                Tok::Punct(">>="),
                Tok::Str(b"a\nAA".to_vec()),
                Tok::Int(31),
                Tok::Int(2000),
                Tok::ParamCount,
                Tok::Param(2),
            ]
        );
        assert!(matches!(toks("\"abc")[0], Tok::Error(_)));
        assert!(matches!(toks("12ab")[0], Tok::Error(_)));
        assert!(matches!(toks("/* x")[0], Tok::Error(_)));
        assert!(matches!(toks("`")[0], Tok::Error(_)));
    }

    #[test]
    fn attach_points_are_words() {
        let src = "uprobe:/bin/bash:read* /pid == 1/ BEGIN/1/";
        let mut l = Lexer::new(src.as_bytes(), 0);
        assert_eq!(
            l.attach_point().0,
            Tok::Ident("uprobe:/bin/bash:read*".into())
        );
        assert_eq!(l.token().0, Tok::Punct("/"));
        let mut l = Lexer::new(b"BEGIN/1/", 0);
        assert_eq!(l.attach_point().0, Tok::Ident("BEGIN".into()));
    }
}
