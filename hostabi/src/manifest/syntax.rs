//! The value syntax of manifest lines: numbers, yes/no, names, symbols,
//! location expressions, and the lines themselves with their offsets.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::*;
use crate::record::{DecodeError, DecodeErrorKind};

/// Parses `offset|address SYMBOL[(+|-)N]` or `offset|address N`.
pub(super) fn parse_location(val: &str) -> Option<Location> {
    let (kind, rest) = split_kv(val);
    let kind = match kind {
        "offset" => LocationKind::Offset,
        "address" => LocationKind::Address,
        _ => return None,
    };
    Location::parse_expr(kind, rest)
}

impl Location {
    /// Parses `SYMBOL[(+|-)N]` or `N` (decimal or `0x` hexadecimal; blanks
    /// around the sign allowed): the one location-expression syntax of
    /// manifests and of the command line's `--probe`. A negative addend
    /// wraps (it is added modulo 2^64).
    pub fn parse_expr(kind: LocationKind, s: &str) -> Option<Location> {
        let s = s.trim();
        if let Some(n) = parse_u64(s) {
            return Some(Location {
                kind,
                symbol: None,
                addend: n,
            });
        }
        let split = s
            .char_indices()
            .skip(1)
            .find(|(_, c)| *c == '+' || *c == '-')
            .map(|(i, _)| i)
            .unwrap_or(s.len());
        let (sym, tail) = s.split_at(split);
        let sym = sym.trim();
        if !is_symbol(sym) {
            return None;
        }
        let addend = match tail.as_bytes().first() {
            None => 0,
            Some(b'+') => parse_u64(tail[1..].trim())?,
            Some(_) => parse_u64(tail[1..].trim())?.wrapping_neg(),
        };
        Some(Location {
            kind,
            symbol: Some(sym.to_string()),
            addend,
        })
    }
}

/// ELF symbol characters accepted by the RPN language (spec §2.4).
pub fn is_symbol(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || "_.$".contains(c))
        && cs.all(|c| c.is_ascii_alphanumeric() || "_.$@".contains(c))
}

pub(super) fn is_name(s: &str) -> bool {
    let mut cs = s.chars();
    matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

pub(super) fn names(val: &str, off: usize) -> Result<Vec<String>, DecodeError> {
    val.split_ascii_whitespace()
        .map(|n| {
            if is_name(n) {
                Ok(n.to_string())
            } else {
                Err(DecodeError::new(off, DecodeErrorKind::BadValue))
            }
        })
        .collect()
}

pub(super) fn parse_u64(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

pub(super) fn parse_num<T: TryFrom<u64>>(s: &str, off: usize) -> Result<T, DecodeError> {
    parse_u64(s)
        .and_then(|v| T::try_from(v).ok())
        .ok_or(DecodeError::new(off, DecodeErrorKind::BadValue))
}

pub(super) fn at_most<T: PartialOrd>(v: T, max: T, off: usize) -> Result<T, DecodeError> {
    if v <= max {
        Ok(v)
    } else {
        Err(DecodeError::new(off, DecodeErrorKind::BadValue))
    }
}

pub(super) fn nonzero(v: u16, off: usize) -> Result<u16, DecodeError> {
    if v != 0 {
        Ok(v)
    } else {
        Err(DecodeError::new(off, DecodeErrorKind::BadValue))
    }
}

pub(super) fn parse_bool(s: &str, off: usize) -> Result<bool, DecodeError> {
    match s {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(DecodeError::new(off, DecodeErrorKind::BadValue)),
    }
}

pub(super) fn split_kv(line: &str) -> (&str, &str) {
    let line = line.trim();
    match line.find([' ', '\t']) {
        Some(i) => (&line[..i], line[i..].trim()),
        None => (line, ""),
    }
}

/// Non-blank, non-comment lines with their byte offsets.
pub(super) struct Lines<'a> {
    pub(super) text: &'a str,
    pub(super) pos: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = (usize, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        while self.pos < self.text.len() {
            let start = self.pos;
            let rest = &self.text[start..];
            let len = rest.find('\n').map(|i| i + 1).unwrap_or(rest.len());
            self.pos += len;
            let line = rest[..len].trim_end_matches(['\n', '\r']);
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            return Some((start, line));
        }
        None
    }
}
