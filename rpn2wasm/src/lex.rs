//! Lexer (spec §2): splits one preprocessed line into tokens. Works on bytes,
//! so that no input can make it panic; positions are byte offsets into the
//! line, turned into source spans by the caller. Comments (`//` outside a
//! quoted string) end the line. Never looks at more than one line.

use crate::diag::codes;

/// Kind of a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokKind {
    /// A word: mnemonic, keyword, label, register, symbol name
    /// (`[A-Za-z_.$][A-Za-z0-9_.$@]*`).
    Word,
    /// A number (decimal or `0x` hex); the value saturates at `u128::MAX`,
    /// which is outside every operand class.
    Number(u128),
    /// A quoted string (the token includes both quotes).
    Str,
    /// `,`
    Comma,
    /// `:`
    Colon,
    /// `=`
    Eq,
    /// `+`
    Plus,
    /// `-`
    Minus,
}

/// A token: kind and byte range in the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tok {
    /// What it is.
    pub kind: TokKind,
    /// First byte.
    pub lo: usize,
    /// One past the last byte.
    pub hi: usize,
}

/// A lexical error: code, message and byte range in the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LexError {
    /// Diagnostic code.
    pub code: &'static str,
    /// Message.
    pub message: String,
    /// First byte.
    pub lo: usize,
    /// One past the last byte.
    pub hi: usize,
}

/// Whether `b` may start a word.
pub(crate) fn is_word_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || matches!(b, b'_' | b'.' | b'$')
}

/// Whether `b` may continue a word or a number.
pub(crate) fn is_word_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'$' | b'@')
}

/// Whether `s` is an identifier `[A-Za-z_][A-Za-z0-9_]*` (labels, procedure,
/// group, type and macro names).
pub(crate) fn is_ident(s: &[u8]) -> bool {
    match s.split_first() {
        Some((first, rest)) => {
            (first.is_ascii_alphabetic() || *first == b'_')
                && rest.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        }
        None => false,
    }
}

/// Offset of the `//` that starts the comment of `line`, if any. A `//`
/// inside a quoted string does not start a comment; an unterminated string
/// runs to the end of the line.
pub(crate) fn comment_start(line: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b'"' => match line[i + 1..].iter().position(|b| *b == b'"') {
                Some(p) => i += p + 2,
                None => return None,
            },
            b'/' if line.get(i + 1) == Some(&b'/') => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// Parses the text of a number token: decimal (a leading zero is still
/// decimal) or `0x`/`0X` hex. The value saturates at `u128::MAX`.
pub(crate) fn parse_number(text: &[u8]) -> Option<u128> {
    let (digits, radix) = match text {
        [b'0', b'x' | b'X', rest @ ..] => (rest, 16),
        _ => (text, 10),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: u128 = 0;
    for &d in digits {
        let digit = char::from(d).to_digit(radix)?;
        v = v
            .saturating_mul(radix as u128)
            .saturating_add(digit as u128);
    }
    Some(v)
}

/// Describes a character that is not allowed outside comments and strings.
fn describe_char(line: &[u8], i: usize) -> (String, usize) {
    let b = line[i];
    if b >= 0x80 {
        let len = utf8_len(b).min(line.len() - i).max(1);
        let ch = String::from_utf8_lossy(&line[i..i + len]).into_owned();
        (
            format!("non-ASCII character `{ch}` is allowed only in comments and quoted strings"),
            len,
        )
    } else if b == 0 {
        ("NUL byte in source text".to_string(), 1)
    } else if b.is_ascii_control() {
        (format!("control character 0x{b:02x} in source text"), 1)
    } else {
        (format!("unexpected character `{}`", char::from(b)), 1)
    }
}

/// Length of the UTF-8 sequence that starts with byte `b`.
fn utf8_len(b: u8) -> usize {
    match b {
        0xF0..=0xF7 => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

/// Splits `line[start..]` into tokens, stopping at a comment.
pub(crate) fn lex_line(line: &[u8], start: usize) -> Result<Vec<Tok>, LexError> {
    let mut toks = Vec::new();
    let mut i = start;
    while i < line.len() {
        let b = line[i];
        let lo = i;
        let kind = match b {
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'/' if line.get(i + 1) == Some(&b'/') => break,
            b',' => TokKind::Comma,
            b':' => TokKind::Colon,
            b'=' => TokKind::Eq,
            b'+' => TokKind::Plus,
            b'-' => TokKind::Minus,
            b'"' => match line[i + 1..].iter().position(|c| *c == b'"') {
                Some(p) => {
                    i += p + 2;
                    toks.push(Tok {
                        kind: TokKind::Str,
                        lo,
                        hi: i,
                    });
                    continue;
                }
                None => {
                    return Err(LexError {
                        code: codes::UNTERMINATED_STRING,
                        message: "quoted string has no closing `\"`".into(),
                        lo,
                        hi: lo + 1,
                    });
                }
            },
            b'0'..=b'9' => {
                while i < line.len() && is_word_char(line[i]) {
                    i += 1;
                }
                let Some(v) = parse_number(&line[lo..i]) else {
                    return Err(LexError {
                        code: codes::MALFORMED_NUMBER,
                        message: format!(
                            "malformed number `{}`",
                            String::from_utf8_lossy(&line[lo..i])
                        ),
                        lo,
                        hi: i,
                    });
                };
                toks.push(Tok {
                    kind: TokKind::Number(v),
                    lo,
                    hi: i,
                });
                continue;
            }
            _ if is_word_start(b) => {
                while i < line.len() && is_word_char(line[i]) {
                    i += 1;
                }
                toks.push(Tok {
                    kind: TokKind::Word,
                    lo,
                    hi: i,
                });
                continue;
            }
            _ => {
                let (message, len) = describe_char(line, i);
                return Err(LexError {
                    code: codes::INVALID_CHAR,
                    message,
                    lo,
                    hi: lo + len,
                });
            }
        };
        i += 1;
        toks.push(Tok { kind, lo, hi: i });
    }
    Ok(toks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<TokKind> {
        lex_line(s.as_bytes(), 0)
            .unwrap()
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn tokens() {
        use TokKind::*;
        assert_eq!(
            kinds("top: push lv,0x1F // c"),
            vec![Word, Colon, Word, Word, Comma, Number(31)]
        );
        assert_eq!(kinds("push -010"), vec![Word, Minus, Number(10)]);
        assert_eq!(
            kinds("offset = a:b+7"),
            vec![Word, Eq, Word, Colon, Word, Plus, Number(7)]
        );
        assert_eq!(kinds("name = \"a//b\""), vec![Word, Eq, Str]);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_number(b"0X1f"), Some(31));
        assert_eq!(parse_number(b"0x"), None);
        assert_eq!(parse_number(b"12ab"), None);
        assert_eq!(
            parse_number(b"18446744073709551616"),
            Some(u64::MAX as u128 + 1)
        );
        assert_eq!(parse_number(&[b'9'; 100]), Some(u128::MAX));
    }

    #[test]
    fn errors() {
        let e = lex_line(b"push 1.5", 0).unwrap_err();
        assert_eq!((e.code, e.lo, e.hi), (codes::MALFORMED_NUMBER, 5, 8));
        let e = lex_line(b"push \x001", 0).unwrap_err();
        assert_eq!((e.code, e.lo), (codes::INVALID_CHAR, 5));
        let e = lex_line("push é".as_bytes(), 0).unwrap_err();
        assert_eq!((e.code, e.lo, e.hi), (codes::INVALID_CHAR, 5, 7));
        let e = lex_line(b"x \"abc", 0).unwrap_err();
        assert_eq!((e.code, e.lo), (codes::UNTERMINATED_STRING, 2));
        assert!(lex_line("push 1 // é \u{1}".as_bytes(), 0).is_ok());
    }

    #[test]
    fn comments() {
        assert_eq!(comment_start(b"a // b"), Some(2));
        assert_eq!(comment_start(b"\"//\" // x"), Some(5));
        assert_eq!(comment_start(b"\"// x"), None);
    }
}
