//! One C `printf` conversion, as glibc's `snprintf` renders the single
//! argument bpftrace passes it (a 64-bit integer or a C string): flags `-`
//! and `0`, width, precision, length modifiers `hh h l ll j z t` (an
//! unmodified `%d` reads the low 32 bits, as `va_arg(ap, int)` does on
//! x86-64), conversions `d i u o x X p c s`. Never panics.

/// The argument of one conversion.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// An integer (already sign- or zero-extended to 64 bits).
    Int(u64),
    /// A string's bytes (no NUL).
    Str(&'a [u8]),
}

/// A parsed conversion specification (the text after `%`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Conv {
    left: bool,
    zero: bool,
    width: usize,
    precision: Option<usize>,
    /// Bits the integer argument is read as: 8, 16, 32, 64.
    bits: u32,
    conv: u8,
}

fn parse(spec: &[u8]) -> Option<Conv> {
    let mut c = Conv {
        bits: 32,
        ..Conv::default()
    };
    let mut i = 0;
    if spec.get(i) == Some(&b'-') {
        c.left = true;
        i += 1;
    }
    if spec.get(i) == Some(&b'0') {
        c.zero = true;
    }
    while let Some(d) = spec.get(i).filter(|d| d.is_ascii_digit()) {
        c.width = c
            .width
            .saturating_mul(10)
            .saturating_add((d - b'0') as usize)
            .min(4096);
        i += 1;
    }
    if spec.get(i) == Some(&b'.') {
        i += 1;
        let mut p = 0usize;
        while let Some(d) = spec.get(i).filter(|d| d.is_ascii_digit()) {
            p = p
                .saturating_mul(10)
                .saturating_add((d - b'0') as usize)
                .min(4096);
            i += 1;
        }
        c.precision = Some(p);
    }
    let rest = &spec[i.min(spec.len())..];
    let (bits, n) = if rest.starts_with(b"hh") {
        (8, 2)
    } else if rest.starts_with(b"ll") {
        (64, 2)
    } else {
        match rest.first() {
            Some(b'h') => (16, 1),
            Some(b'l' | b'j' | b'z' | b't') => (64, 1),
            _ => (32, 0),
        }
    };
    c.bits = bits;
    c.conv = *rest.get(n)?;
    Some(c)
}

fn pad(out: &mut Vec<u8>, body: &[u8], c: &Conv, zero_after: usize) {
    let fill = c.width.saturating_sub(body.len());
    if c.left {
        out.extend_from_slice(body);
        out.extend(std::iter::repeat_n(b' ', fill));
    } else if c.zero
        && c.precision.is_none()
        && matches!(c.conv, b'd' | b'i' | b'u' | b'o' | b'x' | b'X')
    {
        // Zeros go after the sign or prefix.
        out.extend_from_slice(&body[..zero_after]);
        out.extend(std::iter::repeat_n(b'0', fill));
        out.extend_from_slice(&body[zero_after..]);
    } else {
        out.extend(std::iter::repeat_n(b' ', fill));
        out.extend_from_slice(body);
    }
}

/// Appends conversion `spec` (the text after `%`, e.g. `-5lu`) of `arg`.
pub fn convert(out: &mut Vec<u8>, spec: &[u8], arg: Arg<'_>) {
    let Some(c) = parse(spec) else {
        out.push(b'%');
        out.extend_from_slice(spec);
        return;
    };
    match (c.conv, arg) {
        (b's', Arg::Str(s)) => {
            let s = match c.precision {
                Some(p) => &s[..p.min(s.len())],
                None => s,
            };
            pad(out, s, &c, 0);
        }
        (b's', Arg::Int(v)) => pad(out, v.to_string().as_bytes(), &c, 0),
        (_, Arg::Str(s)) => pad(out, s, &c, 0),
        (b'c', Arg::Int(v)) => pad(out, &[v as u8], &c, 0),
        (b'p', Arg::Int(v)) => {
            let body = if v == 0 {
                "(nil)".to_string()
            } else {
                format!("{v:#x}")
            };
            pad(out, body.as_bytes(), &c, 0);
        }
        (conv, Arg::Int(v)) => {
            let mask = if c.bits == 64 {
                u64::MAX
            } else {
                (1u64 << c.bits) - 1
            };
            let u = v & mask;
            let (neg, mag) = if matches!(conv, b'd' | b'i') {
                let shift = 64 - c.bits;
                let s = ((u << shift) as i64) >> shift;
                (s < 0, s.unsigned_abs())
            } else {
                (false, u)
            };
            let mut digits = match conv {
                b'o' => format!("{mag:o}"),
                b'x' => format!("{mag:x}"),
                b'X' => format!("{mag:X}"),
                _ => mag.to_string(),
            };
            if let Some(p) = c.precision {
                if p == 0 && mag == 0 {
                    digits.clear();
                } else if digits.len() < p {
                    digits = "0".repeat(p - digits.len()) + &digits;
                }
            }
            let sign = if neg { "-" } else { "" };
            let body = format!("{sign}{digits}");
            pad(out, body.as_bytes(), &c, sign.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(spec: &str, a: Arg<'_>) -> String {
        let mut v = Vec::new();
        convert(&mut v, spec.as_bytes(), a);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn like_glibc() {
        assert_eq!(f("5d", Arg::Int(42)), "   42");
        assert_eq!(f("-5d", Arg::Int(42)), "42   ");
        assert_eq!(f("05d", Arg::Int(42)), "00042");
        assert_eq!(f("05d", Arg::Int(-42i64 as u64)), "-0042");
        assert_eq!(f("x", Arg::Int(255)), "ff");
        assert_eq!(f("X", Arg::Int(255)), "FF");
        assert_eq!(f("o", Arg::Int(8)), "10");
        assert_eq!(f("c", Arg::Int(65)), "A");
        assert_eq!(f("p", Arg::Int(4096)), "0x1000");
        assert_eq!(f("p", Arg::Int(0)), "(nil)");
        assert_eq!(f("lu", Arg::Int(u64::MAX)), "18446744073709551615");
        assert_eq!(f("hhd", Arg::Int(257)), "1");
        assert_eq!(f("d", Arg::Int(4294967297)), "1");
        assert_eq!(f("d", Arg::Int(u64::MAX)), "-1");
        assert_eq!(f("u", Arg::Int(u64::MAX)), "4294967295");
        assert_eq!(f("ld", Arg::Int(u64::MAX)), "-1");
        assert_eq!(f(".3d", Arg::Int(7)), "007");
        assert_eq!(f("-8s", Arg::Str(b"ab")), "ab      ");
        assert_eq!(f("8s", Arg::Str(b"ab")), "      ab");
        assert_eq!(f(".1s", Arg::Str(b"ab")), "a");
    }
}
