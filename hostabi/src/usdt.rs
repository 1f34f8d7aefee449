//! USDT (`sys/sdt.h`) argument specifications: where each argument of a
//! static probe lives at its site, as the note's `Arguments` string says
//! (`-4@%eax 8@-16(%rbp) 8@$42 -4@NBuffers(%rip)`), and how to read it.
//!
//! One parser and one evaluator for everybody: `wprobe-elf` parses the
//! notes with [`parse_arg`] (resolving symbols), the manifest carries the
//! resolved specs in their canonical spelling ([`UsdtArg::render`], which
//! [`parse_arg`] reads back without a symbol table), and `hostfns`
//! evaluates them at a hit with [`UsdtArg::value`] — the same code in the
//! runtime and in the in-process agent.
//!
//! Forms (GNU as AT&T operands, as gcc writes them for the `nor`
//! constraint of `sdt.h`): `N@%reg` (any width: `%rax`, `%eax`, `%ax`,
//! `%al`, `%ah`, `%r8d`, `%r8w`, `%r8b`), `N@$imm`, `N@disp(%reg)`,
//! `N@disp(%base,%index,scale)` (base or index may be absent), `N@sym` /
//! `N@sym+off` / `N@off+sym` / `N@sym(%rip)` / `N@off+sym(%rip)`
//! (a static variable: read at its link-time address plus the module's
//! load bias), and `N@ADDR` (the canonical form of the latter). `N` is
//! the size in bytes (1, 2, 4 or 8), negative when signed; a spec without
//! `N@` is an 8-byte unsigned value.

use alloc::string::{String, ToString};
use core::fmt::Write as _;

use crate::env::HitEnv;
use crate::regs;

/// Where an argument's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsdtLoc {
    /// A register: the 64-bit register `reg` (a [`regs`] id) shifted right
    /// by `shift` bits (8 for `%ah`…, else 0).
    Reg {
        /// Id of the 64-bit register.
        reg: u16,
        /// Right shift (`%ah`, `%bh`, `%ch`, `%dh`: 8).
        shift: u8,
    },
    /// A constant (`$imm`).
    Imm(i64),
    /// Memory at `base + index * scale + disp` (registers of the hit;
    /// `%rip` reads as the site's address).
    Mem {
        /// Base register id, if any.
        base: Option<u16>,
        /// Index register id, if any.
        index: Option<u16>,
        /// Scale of the index (1, 2, 4, 8).
        scale: u8,
        /// Displacement.
        disp: i64,
    },
    /// Memory at a link-time address of the probe's module (a static
    /// variable, `sym(%rip)`): read at this address plus the load bias.
    Static(u64),
}

/// One argument of a USDT probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsdtArg {
    /// Size in bytes: 1, 2, 4 or 8.
    pub size: u8,
    /// Sign-extended from `size` bytes (a negative `N`).
    pub signed: bool,
    /// Where it is.
    pub loc: UsdtLoc,
}

/// Most arguments a USDT probe has (`STAP_PROBE12`).
pub const MAX_USDT_ARGS: usize = 12;

/// Whether `name` is a register `sdt.h` operands use, as (64-bit register
/// id, shift).
pub fn reg_by_name(name: &str) -> Option<(u16, u8)> {
    let n = name.to_ascii_lowercase();
    let n = n.as_str();
    let legacy = |full: &str| regs::by_name(full).map(|r| (r.id, 0u8));
    let by = |s: &str| -> Option<(u16, u8)> {
        match s {
            "rax" | "eax" | "ax" | "al" => legacy("rax"),
            "rbx" | "ebx" | "bx" | "bl" => legacy("rbx"),
            "rcx" | "ecx" | "cx" | "cl" => legacy("rcx"),
            "rdx" | "edx" | "dx" | "dl" => legacy("rdx"),
            "rsi" | "esi" | "si" | "sil" => legacy("rsi"),
            "rdi" | "edi" | "di" | "dil" => legacy("rdi"),
            "rbp" | "ebp" | "bp" | "bpl" => legacy("rbp"),
            "rsp" | "esp" | "sp" | "spl" => legacy("rsp"),
            "rip" | "eip" => legacy("rip"),
            "ah" => legacy("rax").map(|(r, _)| (r, 8)),
            "bh" => legacy("rbx").map(|(r, _)| (r, 8)),
            "ch" => legacy("rcx").map(|(r, _)| (r, 8)),
            "dh" => legacy("rdx").map(|(r, _)| (r, 8)),
            _ => None,
        }
    };
    if let Some(r) = by(n) {
        return Some(r);
    }
    // r8..r15 with an optional d/w/b suffix.
    let rest = n.strip_prefix('r')?;
    let digits = rest.trim_end_matches(['d', 'w', 'b']);
    let suffix = &rest[digits.len()..];
    if suffix.len() > 1 {
        return None;
    }
    let k: u8 = digits.parse().ok()?;
    if !(8..=15).contains(&k) {
        return None;
    }
    let mut full = String::from("r");
    let _ = write!(full, "{k}");
    legacy(&full)
}

fn reg_name(id: u16) -> &'static str {
    regs::by_id(id).map_or("?", |r| r.name)
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, t) = match s.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()?
    } else {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        t.parse::<u64>().ok()?
    };
    Some(if neg {
        (v as i64).wrapping_neg()
    } else {
        v as i64
    })
}

fn parse_reg(s: &str) -> Result<(u16, u8), String> {
    let name = s
        .strip_prefix('%')
        .ok_or_else(|| alloc::format!("`{s}`: expected a register (`%name`)"))?;
    reg_by_name(name).ok_or_else(|| alloc::format!("`{s}`: not a general-purpose register"))
}

/// A displacement of a memory operand: numbers and at most one symbol
/// (`sym`, `sym+8`, `8+sym`, `sym-8`), the symbol resolved by `resolve`.
fn parse_disp(
    s: &str,
    resolve: &mut dyn FnMut(&str) -> Option<u64>,
) -> Result<(i64, bool), String> {
    if s.is_empty() {
        return Ok((0, false));
    }
    let mut total: i64 = 0;
    let mut has_sym = false;
    // Split into signed terms.
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 1;
    let mut terms: alloc::vec::Vec<&str> = alloc::vec::Vec::new();
    while i <= bytes.len() {
        if i == bytes.len() || bytes[i] == b'+' || bytes[i] == b'-' {
            terms.push(&s[start..i]);
            start = i;
        }
        i += 1;
    }
    for t in terms {
        let (neg, body) = match t.strip_prefix('-') {
            Some(b) => (true, b),
            None => (false, t.strip_prefix('+').unwrap_or(t)),
        };
        if body.is_empty() {
            return Err(alloc::format!("`{s}`: empty term"));
        }
        let v = if let Some(v) = parse_int(body) {
            v
        } else if body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'$')
            && !body.as_bytes()[0].is_ascii_digit()
        {
            if has_sym || neg {
                return Err(alloc::format!(
                    "`{s}`: more than one symbol, or a negated one"
                ));
            }
            has_sym = true;
            resolve(body).ok_or_else(|| alloc::format!("symbol `{body}` not found"))? as i64
        } else {
            return Err(alloc::format!("`{s}`: not a number or a symbol"));
        };
        total = if neg {
            total.wrapping_sub(v)
        } else {
            total.wrapping_add(v)
        };
    }
    Ok((total, has_sym))
}

/// Parses one argument spec (`-4@%eax`…); symbols are looked up through
/// `resolve` (their link-time addresses). The error says what is wrong.
pub fn parse_arg(
    spec: &str,
    resolve: &mut dyn FnMut(&str) -> Option<u64>,
) -> Result<UsdtArg, String> {
    let (size, signed, op) = match spec.split_once('@') {
        Some((n, op)) => {
            let v: i32 = n
                .parse()
                .map_err(|_| alloc::format!("`{spec}`: bad size `{n}`"))?;
            let size = v.unsigned_abs();
            if !matches!(size, 1 | 2 | 4 | 8) {
                return Err(alloc::format!(
                    "`{spec}`: size {v} is not 1, 2, 4 or 8 bytes"
                ));
            }
            (size as u8, v < 0, op)
        }
        None => (8, false, spec),
    };
    let err = |m: &str| alloc::format!("`{spec}`: {m}");
    let loc = if op.starts_with('%') {
        let (reg, shift) = parse_reg(op).map_err(|e| err(&e))?;
        UsdtLoc::Reg { reg, shift }
    } else if let Some(imm) = op.strip_prefix('$') {
        UsdtLoc::Imm(parse_int(imm).ok_or_else(|| err("bad immediate"))?)
    } else if let Some(open) = op.find('(') {
        let inner = op[open + 1..]
            .strip_suffix(')')
            .ok_or_else(|| err("missing `)`"))?;
        let (disp, has_sym) = parse_disp(&op[..open], resolve).map_err(|e| err(&e))?;
        let parts: alloc::vec::Vec<&str> = inner.split(',').map(str::trim).collect();
        let reg = |s: &str| -> Result<Option<u16>, String> {
            if s.is_empty() {
                return Ok(None);
            }
            let (r, shift) = parse_reg(s).map_err(|e| err(&e))?;
            if shift != 0 {
                return Err(err("a high-byte register cannot address memory"));
            }
            Ok(Some(r))
        };
        let (base, index, scale) = match parts.as_slice() {
            [b] => (reg(b)?, None, 1),
            [b, i] => (reg(b)?, reg(i)?, 1),
            [b, i, s] => {
                let sc: u8 = s.parse().map_err(|_| err("bad scale"))?;
                if !matches!(sc, 1 | 2 | 4 | 8) {
                    return Err(err("scale is not 1, 2, 4 or 8"));
                }
                (reg(b)?, reg(i)?, sc)
            }
            _ => return Err(err("bad memory operand")),
        };
        if base == Some(regs::RIP) && index.is_none() && has_sym {
            // `sym(%rip)`, `off+sym(%rip)`: the variable itself.
            UsdtLoc::Static(disp as u64)
        } else if has_sym && base.is_some() {
            return Err(err("a symbol with a register other than %rip"));
        } else {
            UsdtLoc::Mem {
                base,
                index,
                scale,
                disp,
            }
        }
    } else {
        // `sym`, `sym+off` or a bare address: memory at a link-time address.
        let (disp, _) = parse_disp(op, resolve).map_err(|e| err(&e))?;
        UsdtLoc::Static(disp as u64)
    };
    Ok(UsdtArg { size, signed, loc })
}

impl UsdtArg {
    /// The canonical spelling, which [`parse_arg`] reads back to the same
    /// value without a symbol table: symbols are replaced by their
    /// link-time addresses (`8@0x4a5b20`).
    pub fn render(&self) -> String {
        let mut s = String::new();
        let n = if self.signed { "-" } else { "" };
        let _ = write!(s, "{n}{}@", self.size);
        match self.loc {
            UsdtLoc::Reg { reg, shift: 8 } => {
                let h = match reg_name(reg) {
                    "rax" => "ah",
                    "rbx" => "bh",
                    "rcx" => "ch",
                    _ => "dh",
                };
                let _ = write!(s, "%{h}");
            }
            UsdtLoc::Reg { reg, .. } => {
                let _ = write!(s, "%{}", reg_name(reg));
            }
            UsdtLoc::Imm(v) => {
                let _ = write!(s, "${v}");
            }
            UsdtLoc::Mem {
                base,
                index,
                scale,
                disp,
            } => {
                if disp != 0 || (base.is_none() && index.is_none()) {
                    let _ = write!(s, "{disp}");
                }
                s.push('(');
                if let Some(b) = base {
                    let _ = write!(s, "%{}", reg_name(b));
                }
                if let Some(i) = index {
                    let _ = write!(s, ",%{},{scale}", reg_name(i));
                }
                s.push(')');
            }
            UsdtLoc::Static(a) => {
                let _ = write!(s, "0x{a:x}");
            }
        }
        s
    }

    /// The C type bpftrace gives the argument (`int32`, `uint64`…).
    pub fn type_name(&self) -> &'static str {
        match (self.signed, self.size) {
            (true, 1) => "int8",
            (true, 2) => "int16",
            (true, 4) => "int32",
            (true, _) => "int64",
            (false, 1) => "uint8",
            (false, 2) => "uint16",
            (false, 4) => "uint32",
            (false, _) => "uint64",
        }
    }

    /// Truncates or extends a raw 64-bit value to the argument's size and
    /// signedness.
    pub fn extend(&self, raw: u64) -> u64 {
        let bits = u32::from(self.size) * 8;
        if bits >= 64 {
            return raw;
        }
        let shift = 64 - bits;
        if self.signed {
            (((raw << shift) as i64) >> shift) as u64
        } else {
            (raw << shift) >> shift
        }
    }

    /// The argument's value at a hit: registers and memory of `env`, the
    /// load bias of the probe's module for a static variable. `None` when
    /// a register cannot be read or the memory is unreadable.
    pub fn value<E: HitEnv + ?Sized>(&self, env: &mut E) -> Option<u64> {
        let raw = match self.loc {
            UsdtLoc::Reg { reg, shift } => env.read_reg(reg, 0)? >> shift,
            UsdtLoc::Imm(v) => v as u64,
            UsdtLoc::Mem {
                base,
                index,
                scale,
                disp,
            } => {
                let mut a = disp as u64;
                if let Some(b) = base {
                    a = a.wrapping_add(env.read_reg(b, 0)?);
                }
                if let Some(i) = index {
                    a = a.wrapping_add(env.read_reg(i, 0)?.wrapping_mul(u64::from(scale)));
                }
                return self.read(env, a);
            }
            UsdtLoc::Static(link) => return self.read(env, link.wrapping_add(env.load_bias())),
        };
        Some(self.extend(raw))
    }

    fn read<E: HitEnv + ?Sized>(&self, env: &mut E, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        let n = usize::from(self.size).min(8);
        if env.read_mem(addr, &mut b[..n]) != n {
            return None;
        }
        Some(self.extend(u64::from_le_bytes(b)))
    }
}

/// Parses a whole `Arguments` string (space-separated specs).
pub fn parse_args(
    text: &str,
    resolve: &mut dyn FnMut(&str) -> Option<u64>,
) -> Result<alloc::vec::Vec<UsdtArg>, String> {
    let v: Result<alloc::vec::Vec<_>, _> = text
        .split_ascii_whitespace()
        .map(|a| parse_arg(a, resolve))
        .collect();
    let v = v?;
    if v.len() > MAX_USDT_ARGS {
        return Err(alloc::format!(
            "{} arguments (at most {MAX_USDT_ARGS})",
            v.len()
        ));
    }
    Ok(v)
}

/// Renders specs as a manifest's `usdt_args` value (space-separated).
pub fn render_args(args: &[UsdtArg]) -> String {
    let mut s = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&a.render());
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> UsdtArg {
        parse_arg(s, &mut |n| match n {
            "NBuffers" => Some(0x1000),
            "CheckpointStats" => Some(0x2000),
            _ => None,
        })
        .unwrap()
    }

    #[test]
    fn every_form_parses_and_round_trips() {
        let rax = regs::RAX;
        assert_eq!(
            p("-4@%eax"),
            UsdtArg {
                size: 4,
                signed: true,
                loc: UsdtLoc::Reg { reg: rax, shift: 0 }
            }
        );
        assert_eq!(p("1@%ah").loc, UsdtLoc::Reg { reg: rax, shift: 8 });
        assert_eq!(
            p("2@%r9w").loc,
            UsdtLoc::Reg {
                reg: regs::R9,
                shift: 0
            }
        );
        assert_eq!(p("8@$-5").loc, UsdtLoc::Imm(-5));
        assert_eq!(
            p("8@-16(%rbp)").loc,
            UsdtLoc::Mem {
                base: Some(0x0F),
                index: None,
                scale: 1,
                disp: -16
            }
        );
        assert_eq!(
            p("-4@8(%rax,%rdx,4)").loc,
            UsdtLoc::Mem {
                base: Some(rax),
                index: Some(regs::RDX),
                scale: 4,
                disp: 8
            }
        );
        assert_eq!(p("-4@NBuffers(%rip)").loc, UsdtLoc::Static(0x1000));
        assert_eq!(
            p("-4@40+CheckpointStats(%rip)").loc,
            UsdtLoc::Static(0x2028)
        );
        assert_eq!(p("8@CheckpointStats+8").loc, UsdtLoc::Static(0x2008));
        assert_eq!(p("%rdi").size, 8);
        for s in [
            "-4@%rax",
            "1@%ah",
            "8@$-5",
            "8@-16(%rbp)",
            "-4@8(%rax,%rdx,4)",
            "4@0x1000",
            "8@(%rsp)",
            "8@(,%rcx,8)",
        ] {
            let a = p(s);
            assert_eq!(a.render(), s);
            assert_eq!(parse_arg(&a.render(), &mut |_| None), Ok(a));
        }
    }

    #[test]
    fn bad_specs_say_why() {
        let e = |s: &str| parse_arg(s, &mut |_| None).unwrap_err();
        assert_eq!(e("3@%eax"), "`3@%eax`: size 3 is not 1, 2, 4 or 8 bytes");
        assert_eq!(
            e("4@%xmm0"),
            "`4@%xmm0`: `%xmm0`: not a general-purpose register"
        );
        assert_eq!(e("4@foo(%rip)"), "`4@foo(%rip)`: symbol `foo` not found");
        assert_eq!(e("4@8(%rax"), "`4@8(%rax`: missing `)`");
    }

    #[test]
    fn extension() {
        let a = p("-1@%al");
        assert_eq!(a.extend(0x1ff), u64::MAX);
        assert_eq!(p("2@%ax").extend(0x12345), 0x2345);
        assert_eq!(a.type_name(), "int8");
    }
}
