//! Network address calls: `pton`, `ntop`, `macaddr`.

use crate::ast::{self, ExprKind};
use crate::check::Fx;
use crate::diag::codes;
use crate::ir::{E, Part, S, Ty};
use rpn2wasm::Span;

impl Fx<'_, '_> {
    /// `pton("ADDR")`: an IPv4 or IPv6 address literal as its bytes.
    pub(super) fn call_pton(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("pton", args, 1, 1, span) {
            return bad;
        }
        let ExprKind::Str(text) = &args[0].kind else {
            self.cx.err(
                codes::LITERAL,
                args[0].span,
                "pton() expects a string literal",
            );
            return bad;
        };
        let text = String::from_utf8_lossy(text);
        let text = text.trim_end_matches('\0');
        let octets: Vec<u8> = if text.contains(':') {
            text.parse::<std::net::Ipv6Addr>()
                .map(|a| a.octets().to_vec())
                .unwrap_or_default()
        } else {
            text.parse::<std::net::Ipv4Addr>()
                .map(|a| a.octets().to_vec())
                .unwrap_or_default()
        };
        if octets.is_empty() {
            self.cx.err(
                codes::ARGUMENTS,
                args[0].span,
                "pton() expects valid IPv4 or IPv6 address",
            );
            return bad;
        }
        let elem = Ty::Int {
            signed: false,
            bytes: 1,
        };
        let arr = Ty::Array(Box::new(elem.clone()), octets.len() as u32);
        let parts = octets
            .iter()
            .enumerate()
            .map(|(i, b)| Part {
                e: E::Int(i64::from(*b)),
                ty: elem.clone(),
                off: elem.size() * i as u32,
            })
            .collect();
        let slot = self.slot(arr.size());
        (E::Tuple { slot, parts }, arr)
    }

    /// `ntop([af,] addr)`: an address (an integer or an array of 4 or 16 bytes), printed as text.
    pub(super) fn call_ntop(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("ntop", args, 1, 2, span) {
            return bad;
        }
        let addr = &args[args.len() - 1];
        let (ae, at) = self.expr(addr);
        let mut pre = Vec::new();
        let (lo, hi, family) = match &at {
            Ty::None => return bad,
            t if t.is_int() => (
                E::Bin(
                    crate::ast::BinOp::BitAnd,
                    false,
                    Box::new(ae),
                    Box::new(E::Int(0xffff_ffff)),
                ),
                E::Int(0),
                2,
            ),
            Ty::Array(elem, n @ (4 | 16)) if matches!(**elem, Ty::Int { bytes: 1, .. }) => {
                let size = at.size();
                let slot = self.slot(size);
                pre.push(S::SetSlot {
                    slot,
                    e: ae,
                    size,
                    src_size: size,
                });
                let lo = crate::check::expr::pack_elements(slot, elem, 0..(*n).min(8));
                let hi = if *n == 16 {
                    crate::check::expr::pack_elements(slot, elem, 8..16)
                } else {
                    E::Int(0)
                };
                (lo, hi, if *n == 4 { 2 } else { 10 })
            }
            t => {
                self.cx.err(
                    codes::ARGUMENTS,
                    addr.span,
                    format!(
                        "ntop() expects an integer or array argument of size 4 or 16, got {}",
                        t.name()
                    ),
                );
                return bad;
            }
        };
        let af = if args.len() == 2 {
            let (e, t) = self.expr(&args[0]);
            if !t.is_int() {
                if t != Ty::None {
                    self.cx.err(
                        codes::ARGUMENTS,
                        args[0].span,
                        format!(
                            "ntop() expects an integer address family ({} provided)",
                            t.name()
                        ),
                    );
                }
                return bad;
            }
            e
        } else {
            E::Int(family)
        };
        let slot = self.slot(Ty::Inet.size());
        let value = E::Tuple {
            slot,
            parts: vec![
                Part {
                    e: af,
                    ty: Ty::U64,
                    off: 0,
                },
                Part {
                    e: lo,
                    ty: Ty::U64,
                    off: 8,
                },
                Part {
                    e: hi,
                    ty: Ty::U64,
                    off: 16,
                },
            ],
        };
        if pre.is_empty() {
            (value, Ty::Inet)
        } else {
            (E::Seq(pre, Box::new(value)), Ty::Inet)
        }
    }

    /// `macaddr(x)`: an array of six bytes or their address, spelled as a MAC address.
    pub(super) fn call_macaddr(&mut self, args: &[ast::Expr], span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if !self.nargs("macaddr", args, 1, 1, span) {
            return bad;
        }
        // The six bytes: an array in the traced process (by its
        // place), or at a pointer's or an integer's address.
        let addr = match self.place(&args[0]) {
            Some((addr, c, _)) if matches!(c, crate::ctypes::CType::Array(..)) => {
                if c.size() < 6 {
                    self.cx.err(
                        codes::TYPE,
                        args[0].span,
                        format!("macaddr() needs 6 bytes, and {} has {}", c.name(), c.size()),
                    );
                    return bad;
                }
                addr
            }
            _ => {
                let (e, t) = self.expr(&args[0]);
                if !t.is_int() {
                    if t != Ty::None {
                        self.cx.err(
                            codes::TYPE,
                            args[0].span,
                            format!(
                                "macaddr() takes an array of 6 bytes or their address, not {}",
                                t.name()
                            ),
                        );
                    }
                    return bad;
                }
                e
            }
        };
        self.macaddr(addr)
    }

    /// `macaddr(ADDR)`: the six bytes at `addr` spelled `05:04:03:02:01:02`
    /// (17 characters and a NUL), built in a slot as a string: each
    /// character an 8-byte store at its own offset, the last one's upper
    /// bytes the terminating zeros.
    fn macaddr(&mut self, addr: E) -> (E, Ty) {
        use crate::ast::BinOp;
        let bin = |op, a: E, b: E| E::Bin(op, false, Box::new(a), Box::new(b));
        let lo = self.local();
        let hi = self.local();
        let (s1, s2) = (self.slot(8), self.slot(8));
        let load = |a: E, bytes: u8, slot: u32| E::Load {
            addr: Box::new(a),
            bytes,
            signed: false,
            slot,
        };
        let setup = vec![
            S::SetLocal(lo, load(addr.clone(), 4, s1)),
            S::SetLocal(hi, load(bin(BinOp::Add, addr, E::Int(4)), 2, s2)),
        ];
        // Hex digit `d` (0..15), uppercase as bpftrace prints it.
        let digit = |d: E| {
            let over = bin(BinOp::Gt, d.clone(), E::Int(9));
            bin(
                BinOp::Add,
                bin(BinOp::Add, d, E::Int(b'0' as i64)),
                bin(BinOp::Mul, over, E::Int((b'A' - b'0' - 10) as i64)),
            )
        };
        let mut parts = Vec::new();
        for i in 0..6u32 {
            let (src, shift) = if i < 4 {
                (lo, 8 * i)
            } else {
                (hi, 8 * (i - 4))
            };
            let byte = bin(
                BinOp::BitAnd,
                bin(BinOp::Shr, E::Local(src), E::Int(shift as i64)),
                E::Int(0xff),
            );
            let off = 3 * i;
            parts.push(Part {
                e: digit(bin(BinOp::Shr, byte.clone(), E::Int(4))),
                ty: Ty::U64,
                off,
            });
            parts.push(Part {
                e: digit(bin(BinOp::BitAnd, byte, E::Int(0xf))),
                ty: Ty::U64,
                off: off + 1,
            });
            if i < 5 {
                parts.push(Part {
                    e: E::Int(b':' as i64),
                    ty: Ty::U64,
                    off: off + 2,
                });
            }
        }
        let slot = self.slot(24);
        (
            E::Seq(setup, Box::new(E::Tuple { slot, parts })),
            Ty::Str(24),
        )
    }
}
