//! Instruction syntax (spec §9 "Instruction syntax" and Appendix A): one
//! mnemonic, possibly two words, then its operands. Label and procedure
//! names, symbols and variable indices are kept by name/value; `check`
//! resolves them.

use super::cursor::{Class, Cur, Expr, PErr};
use crate::ast::{Op, PropOp, ShiftOp, SlotOp, StackRel, VarOp, VarSpace, Width};
use crate::diag::codes;
use crate::lex::{Tok, TokKind};
use hostabi::regs;

/// Branches and `sx`: the label operand is resolved by `check`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Branch {
    Jmp,
    Jlt,
    Jle,
    Jgt,
    Jge,
    Jz,
    Jnz,
    Loop,
    Sx,
}

impl Branch {
    /// The instruction with its target resolved.
    pub(crate) fn op(self, t: usize) -> Op {
        match self {
            Branch::Jmp => Op::Jmp(t),
            Branch::Jlt => Op::Jlt(t),
            Branch::Jle => Op::Jle(t),
            Branch::Jgt => Op::Jgt(t),
            Branch::Jge => Op::Jge(t),
            Branch::Jz => Op::Jz(t),
            Branch::Jnz => Op::Jnz(t),
            Branch::Loop => Op::Loop(t),
            Branch::Sx => Op::Sx(t),
        }
    }
}

/// An instruction as parsed, before name resolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RawOp {
    /// Complete.
    Op(Op),
    /// A branch or `sx` to a label.
    Branch(Branch, String),
    /// `call NAME`.
    Call(String),
    /// `push EXPR` (maybe with a symbol).
    Push(Expr),
    /// `push|pop|move|inc|dec lv|gv, i` (index checked against the header).
    VarImm(VarOp, VarSpace, u64),
    /// A line whose instruction could not be parsed (error reported); it
    /// keeps the labels of the line attached to something.
    Error,
}

/// A parsed instruction: the op and the byte range of the operand that
/// later checks blame (the label, the index …).
pub(crate) struct Parsed {
    pub op: RawOp,
    pub arg: (usize, usize),
}

fn ok(op: Op, c: &Cur<'_>) -> Result<Parsed, PErr> {
    c.expect_end()?;
    let e = c.consumed_end();
    Ok(Parsed {
        op: RawOp::Op(op),
        arg: (e, e),
    })
}

fn legacy(c: &Cur<'_>, lo: usize) -> PErr {
    let hi = c.end();
    let text = String::from_utf8_lossy(&c.line.text[lo..hi]).into_owned();
    PErr::new(
        codes::LEGACY_INSN,
        lo,
        hi,
        format!("`{text}` is not supported"),
    )
    .note("IA-32 segment instructions and privileged registers do not exist in x86-64 user space (spec §9.14)")
}

/// Parses the instruction at the cursor (the mnemonic is the next token).
pub(crate) fn parse(c: &mut Cur<'_>) -> Result<Parsed, PErr> {
    let Some(m) = c.bump() else {
        return Err(c.missing("instruction"));
    };
    if m.kind != TokKind::Word {
        return Err(PErr::new(
            codes::UNEXPECTED_TOKEN,
            m.lo,
            m.hi,
            format!("expected an instruction, found {}", c.describe(m)),
        ));
    }
    let mn = c.lower(m);
    let simple = match mn.as_str() {
        "nop" => Some(Op::Nop),
        "ret" => Some(Op::Ret),
        "abort" => Some(Op::Abort),
        "remove" => Some(Op::Remove),
        "suspend" => Some(Op::Suspend),
        "resume" => Some(Op::Resume),
        "add" => Some(Op::Add),
        "sub" => Some(Op::Sub),
        "mul" => Some(Op::Mul),
        "neg" => Some(Op::Neg),
        "and" => Some(Op::And),
        "or" => Some(Op::Or),
        "xor" => Some(Op::Xor),
        "div" => Some(Op::Div),
        "idiv" => Some(Op::Idiv),
        "xchg" => Some(Op::Xchg),
        "vfyr" | "vfa" => Some(Op::Vfyr),
        "vfyrw" => Some(Op::Vfyrw),
        "ux" => Some(Op::Ux),
        "rx" => Some(Op::Rx),
        "callk" => Some(Op::Callk),
        "malloc" => Some(Op::Malloc),
        "free" => Some(Op::Free),
        _ => None,
    };
    if let Some(op) = simple {
        return ok(op, c);
    }
    let branch = match mn.as_str() {
        "jmp" => Some(Branch::Jmp),
        "jlt" => Some(Branch::Jlt),
        "jle" => Some(Branch::Jle),
        "jgt" => Some(Branch::Jgt),
        "jge" => Some(Branch::Jge),
        "jz" => Some(Branch::Jz),
        "jnz" => Some(Branch::Jnz),
        "loop" => Some(Branch::Loop),
        "sx" => Some(Branch::Sx),
        _ => None,
    };
    if let Some(b) = branch {
        let (name, t) = c.name("label")?;
        c.expect_end()?;
        return Ok(Parsed {
            op: RawOp::Branch(b, name),
            arg: (t.lo, t.hi),
        });
    }
    match mn.as_str() {
        "call" => {
            let (name, t) = c.name("procedure name")?;
            c.expect_end()?;
            Ok(Parsed {
                op: RawOp::Call(name),
                arg: (t.lo, t.hi),
            })
        }
        "exit" => opt_count(c, Class::U8, "exit facility", Op::Exit, |n| {
            Op::ExitN(n as u8)
        }),
        "setmin" => opt_count(c, Class::U16, "minor code", Op::SetMin, |n| {
            Op::SetMinImm(n as u16)
        }),
        "setmaj" => opt_count(c, Class::Maj, "major code", Op::SetMaj, |n| {
            Op::SetMajImm(n as u16)
        }),
        "shl" | "shr" | "rol" | "ror" => {
            let s = match mn.as_str() {
                "shl" => ShiftOp::Shl,
                "shr" => ShiftOp::Shr,
                "rol" => ShiftOp::Rol,
                _ => ShiftOp::Ror,
            };
            opt_count(c, Class::U8, "shift count", Op::Shift(s), |n| {
                Op::ShiftImm(s, n as u8)
            })
        }
        "dup" => opt_count(c, Class::U8, "count", Op::Dup, |n| Op::DupImm(n as u8)),
        "ros" => {
            let (n, ..) = c.number(Class::U8, "count")?;
            ok(Op::Ros(n as u8), c)
        }
        "pbl" | "pbr" | "pzl" | "pzr" => {
            let p = match mn.as_str() {
                "pbl" => PropOp::Pbl,
                "pbr" => PropOp::Pbr,
                "pzl" => PropOp::Pzl,
                _ => PropOp::Pzr,
            };
            opt_count(c, Class::Bit, "bit number", Op::Prop(p), |n| {
                Op::PropImm(p, n as u8)
            })
        }
        "log" => log(c, m),
        "push" => push(c, m),
        "pop" => pop(c),
        "move" | "inc" | "dec" => {
            let op = match mn.as_str() {
                "move" => VarOp::Move,
                "inc" => VarOp::Inc,
                _ => VarOp::Dec,
            };
            let k = keyword(c, &mn, &["lv", "gv"])?;
            var_form(c, op, space(&k))
        }
        "copy" => {
            let k = keyword(c, &mn, &["sbp", "tsp"])?;
            slot_form(c, SlotOp::Copy, rel(&k))
        }
        "trace" => {
            let k = keyword(c, &mn, &["pv", "lv", "gv"])?;
            let op = match k.as_str() {
                "pv" => Op::TracePv,
                k => Op::TraceVars(space(k)),
            };
            ok(op, c)
        }
        "save" | "restore" => {
            let k = keyword(c, &mn, &["tsp", "sbp"])?;
            let op = match (mn.as_str(), k.as_str()) {
                ("save", "tsp") => Op::SaveTsp,
                ("save", _) => Op::SaveSbp,
                (_, "tsp") => Op::RestoreTsp,
                _ => Op::RestoreSbp,
            };
            ok(op, c)
        }
        "purge" => {
            keyword(c, &mn, &["st"])?;
            ok(Op::PurgeSt, c)
        }
        "pushh" | "poph" => {
            let w = width(c, &mn, false)?;
            c.comma(&mn)?;
            let (k, ..) = c.number(Class::U16, "element count")?;
            let op = if mn == "pushh" {
                Op::PushH(w, k as u16)
            } else {
                Op::PopH(w, k as u16)
            };
            ok(op, c)
        }
        "seg2lin" | "vsa" | "cnvrt" => Err(legacy(c, m.lo)),
        _ => Err(PErr::new(
            codes::UNKNOWN_MNEMONIC,
            m.lo,
            m.hi,
            format!("unknown instruction `{}`", c.show(m)),
        )),
    }
}

fn space(k: &str) -> VarSpace {
    if k == "lv" {
        VarSpace::Local
    } else {
        VarSpace::Global
    }
}

fn rel(k: &str) -> StackRel {
    if k == "tsp" {
        StackRel::Tsp
    } else {
        StackRel::Sbp
    }
}

/// A one-word mnemonic with an optional count (`exit` / `exit 3`).
fn opt_count(
    c: &mut Cur<'_>,
    class: Class,
    what: &str,
    stack: Op,
    imm: impl Fn(u64) -> Op,
) -> Result<Parsed, PErr> {
    if c.peek().is_none() {
        return ok(stack, c);
    }
    let (n, lo, hi) = c.number(class, what)?;
    c.expect_end()?;
    Ok(Parsed {
        op: RawOp::Op(imm(n)),
        arg: (lo, hi),
    })
}

/// One of `allowed` operand keywords (lower-cased).
fn keyword(c: &mut Cur<'_>, mn: &str, allowed: &[&str]) -> Result<String, PErr> {
    let list = allowed
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let Some(t) = c.bump() else {
        return Err(c.missing(&format!("operand of `{mn}` ({list})")));
    };
    let k = c.lower(t);
    if t.kind == TokKind::Word && allowed.contains(&k.as_str()) {
        Ok(k)
    } else {
        Err(PErr::new(
            codes::INVALID_OPERAND,
            t.lo,
            t.hi,
            format!(
                "invalid operand {} for `{mn}`; expected {list}",
                c.describe(t)
            ),
        ))
    }
}

/// `u8`/`u16`/`u32`/`u64` (`u64` not for I/O).
fn width(c: &mut Cur<'_>, after: &str, io: bool) -> Result<Width, PErr> {
    let list = if io {
        "`u8`, `u16` or `u32`"
    } else {
        "`u8`, `u16`, `u32` or `u64`"
    };
    let Some(t) = c.bump() else {
        return Err(c.missing(&format!("width after `{after}` ({list})")));
    };
    let w = match c.lower(t).as_str() {
        "u8" => Some(Width::U8),
        "u16" => Some(Width::U16),
        "u32" => Some(Width::U32),
        "u64" if !io => Some(Width::U64),
        _ => None,
    };
    w.ok_or_else(|| {
        PErr::new(
            codes::INVALID_OPERAND,
            t.lo,
            t.hi,
            format!("invalid width {}; expected {list}", c.describe(t)),
        )
    })
}

/// `X` or `X, i` after `lv`/`gv`.
fn var_form(c: &mut Cur<'_>, op: VarOp, space: VarSpace) -> Result<Parsed, PErr> {
    let name = if space == VarSpace::Local { "lv" } else { "gv" };
    if c.peek().is_none() {
        return ok(Op::Var(op, space), c);
    }
    c.comma(name)?;
    let (i, lo, hi) = c.number(Class::Index, "variable index")?;
    c.expect_end()?;
    Ok(Parsed {
        op: RawOp::VarImm(op, space, i),
        arg: (lo, hi),
    })
}

/// `tsp`/`sbp` or `tsp, k`.
fn slot_form(c: &mut Cur<'_>, op: SlotOp, rel: StackRel) -> Result<Parsed, PErr> {
    let name = if rel == StackRel::Tsp { "tsp" } else { "sbp" };
    if c.peek().is_none() {
        return ok(Op::Slot(op, rel), c);
    }
    c.comma(name)?;
    let (k, lo, hi) = c.number(Class::S16, "stack offset")?;
    c.expect_end()?;
    Ok(Parsed {
        op: RawOp::Op(Op::SlotImm(op, rel, k as i16)),
        arg: (lo, hi),
    })
}

/// A register operand; `pop` requires a writable one.
fn register(c: &mut Cur<'_>, pop: bool) -> Result<(u16, usize, usize), PErr> {
    let Some(t) = c.bump() else {
        return Err(c.missing("register name"));
    };
    if t.kind != TokKind::Word {
        return Err(PErr::new(
            codes::UNEXPECTED_TOKEN,
            t.lo,
            t.hi,
            format!("expected a register name, found {}", c.describe(t)),
        ));
    }
    let name = c.lower(t);
    if regs::FORBIDDEN_REGS.contains(&name.as_str()) {
        return Err(PErr::new(
            codes::FORBIDDEN_REGISTER,
            t.lo,
            t.hi,
            format!(
                "register `{}` is not available in x86-64 user space",
                c.show(t)
            ),
        ));
    }
    let Some(r) = regs::by_name(&name) else {
        return Err(PErr::new(
            codes::UNKNOWN_REGISTER,
            t.lo,
            t.hi,
            format!("unknown register `{}`", c.show(t)),
        ));
    };
    if pop && !r.writable {
        let writable: Vec<&str> = regs::REGS
            .iter()
            .filter(|r| r.writable)
            .map(|r| r.name)
            .collect();
        return Err(PErr::new(
            codes::REGISTER_NOT_WRITABLE,
            t.lo,
            t.hi,
            format!("register `{}` cannot be written by `pop r/u`", c.show(t)),
        )
        .note(format!("writable registers: {}", writable.join(", "))));
    }
    Ok((r.id, t.lo, t.hi))
}

/// The register operand of `push entry`: one of [`regs::ENTRY_REGS`].
fn entry_register(c: &mut Cur<'_>) -> Result<(u16, usize, usize), PErr> {
    let (reg, lo, hi) = register(c, false)?;
    if regs::entry_index(reg).is_some() {
        return Ok((reg, lo, hi));
    }
    let name = String::from_utf8_lossy(&c.line.text[lo..hi]).into_owned();
    Err(PErr::new(
        codes::NOT_AN_ENTRY_REGISTER,
        lo,
        hi,
        format!("register `{name}` is not kept at the entry of a call"),
    )
    .note("`push entry` reads the 64-bit argument registers rdi, rsi, rdx, rcx, r8, r9 and rsp as they were at the entry; at the return, read the return value with `push r, rax`"))
}

fn log(c: &mut Cur<'_>, m: Tok) -> Result<Parsed, PErr> {
    let Some(t) = c.peek() else {
        return ok(Op::Log, c);
    };
    match t.kind {
        TokKind::Number(_) | TokKind::Minus => {
            let (n, lo, hi) = c.number(Class::U16, "element count")?;
            c.expect_end()?;
            return Ok(Parsed {
                op: RawOp::Op(Op::LogN(n as u16)),
                arg: (lo, hi),
            });
        }
        TokKind::Word => {}
        _ => {
            return Err(PErr::new(
                codes::UNEXPECTED_TOKEN,
                t.lo,
                t.hi,
                format!("unexpected {} after `log`", c.describe(t)),
            ));
        }
    }
    c.i += 1;
    let op = match c.lower(t).as_str() {
        "str" | "arf" => Op::LogStr,
        "mrf" => Op::LogMrf,
        "st" => Op::LogSt,
        "lv" => Op::LogVars(VarSpace::Local),
        "gv" => Op::LogVars(VarSpace::Global),
        "b" => {
            c.comma("log b")?;
            let (n, lo, hi) = c.number(Class::U16, "element count")?;
            c.expect_end()?;
            return Ok(Parsed {
                op: RawOp::Op(Op::LogB(n as u16)),
                arg: (lo, hi),
            });
        }
        "ars" | "mrs" => return Err(legacy(c, m.lo)),
        _ => {
            return Err(PErr::new(
                codes::INVALID_OPERAND,
                t.lo,
                t.hi,
                format!(
                    "invalid operand {} for `log`; expected a count, `str`, `arf`, `mrf`, `st`, `lv`, `gv` or `b, n`",
                    c.describe(t)
                ),
            ));
        }
    };
    ok(op, c)
}

/// Whether the token after the current one continues an expression, which
/// makes a keyword at the cursor a symbol (`push x + 0`).
fn continues_expr(c: &Cur<'_>) -> bool {
    matches!(
        c.peek2().map(|t| t.kind),
        Some(TokKind::Plus | TokKind::Minus)
    )
}

fn push(c: &mut Cur<'_>, m: Tok) -> Result<Parsed, PErr> {
    let Some(t) = c.peek() else {
        return Err(c.missing("operand of `push`"));
    };
    if t.kind == TokKind::Word && !continues_expr(c) {
        let k = c.lower(t);
        let plain = match k.as_str() {
            "task" => Some(Op::PushTask),
            "pid" => Some(Op::PushPid),
            "procid" => Some(Op::PushProcid),
            "x" => Some(Op::PushX),
            "lp" => Some(Op::PushLp),
            "plp" => Some(Op::PushPlp),
            "stp" => Some(Op::PushStp),
            "wid" => Some(Op::PushWid),
            "elapsed" => Some(Op::PushElapsed),
            _ => None,
        };
        if let Some(op) = plain {
            c.i += 1;
            return ok(op, c);
        }
        match k.as_str() {
            "lv" | "gv" => {
                c.i += 1;
                return var_form(c, VarOp::Push, space(&k));
            }
            "sbp" | "tsp" => {
                c.i += 1;
                return slot_form(c, SlotOp::Push, rel(&k));
            }
            "usdt" => {
                c.i += 1;
                c.comma("usdt").map_err(|e| {
                    e.note("`push usdt, N` reads argument N of the USDT site that fired; to push a symbol named `usdt`, write `push usdt + 0`")
                })?;
                let (n, lo, hi) = c.number(Class::U8, "USDT argument number")?;
                if n as usize >= hostabi::usdt::MAX_USDT_ARGS {
                    return Err(PErr::new(
                        codes::INVALID_VALUE,
                        lo,
                        hi,
                        format!(
                            "USDT argument {n}: a probe has at most {} (0 … {})",
                            hostabi::usdt::MAX_USDT_ARGS,
                            hostabi::usdt::MAX_USDT_ARGS - 1
                        ),
                    ));
                }
                c.expect_end()?;
                return Ok(Parsed {
                    op: RawOp::Op(Op::PushUsdt(n as u8)),
                    arg: (lo, hi),
                });
            }
            "entry" => {
                c.i += 1;
                c.comma("entry").map_err(|e| {
                    e.note("`push entry, R` reads register R as it was at the entry of the returning call; to push a symbol named `entry`, write `push entry + 0`")
                })?;
                let (reg, lo, hi) = entry_register(c)?;
                c.expect_end()?;
                return Ok(Parsed {
                    op: RawOp::Op(Op::PushEntry(reg)),
                    arg: (lo, hi),
                });
            }
            "r" | "u" => {
                c.i += 1;
                c.comma(&k)?;
                let (reg, lo, hi) = register(c, false)?;
                c.expect_end()?;
                return Ok(Parsed {
                    op: RawOp::Op(Op::PushReg {
                        reg,
                        user: k == "u",
                    }),
                    arg: (lo, hi),
                });
            }
            "mem" | "io" => {
                c.i += 1;
                c.comma(&k)?;
                let w = width(c, &k, k == "io")?;
                let op = if k == "mem" {
                    Op::PushMem(w)
                } else {
                    Op::PushIo(w)
                };
                return ok(op, c);
            }
            "b" => {
                c.i += 1;
                c.comma("b")?;
                let (v, lo, hi) = c.number(Class::Byte, "byte value")?;
                c.expect_end()?;
                return Ok(Parsed {
                    op: RawOp::Op(Op::PushByte(v as u8)),
                    arg: (lo, hi),
                });
            }
            "bif" | "bis" => return Err(legacy(c, m.lo)),
            _ => {}
        }
    }
    let e = c.expr()?;
    if let Some(t) = c.peek() {
        let code = match t.kind {
            TokKind::Number(_) | TokKind::Word => codes::EXTRA_OPERAND,
            _ => codes::UNEXPECTED_TOKEN,
        };
        return Err(PErr::new(
            code,
            t.lo,
            t.hi,
            format!("unexpected {} after the value", c.describe(t)),
        ));
    }
    let arg = (t.lo, c.consumed_end());
    let op = match e.sym {
        None => RawOp::Op(Op::PushImm(e.num)),
        Some(_) => RawOp::Push(e),
    };
    Ok(Parsed { op, arg })
}

fn pop(c: &mut Cur<'_>) -> Result<Parsed, PErr> {
    let Some(t) = c.bump() else {
        return Err(c.missing("operand of `pop`"));
    };
    let k = c.lower(t);
    match k.as_str() {
        _ if t.kind != TokKind::Word => Err(PErr::new(
            codes::INVALID_OPERAND,
            t.lo,
            t.hi,
            format!("invalid operand {} for `pop`", c.describe(t)),
        )),
        "lv" | "gv" => var_form(c, VarOp::Pop, space(&k)),
        "sbp" | "tsp" => slot_form(c, SlotOp::Pop, rel(&k)),
        "lp" => ok(Op::PopLp, c),
        "stp" => ok(Op::PopStp, c),
        "r" | "u" => {
            c.comma(&k)?;
            let (reg, lo, hi) = register(c, true)?;
            c.expect_end()?;
            Ok(Parsed {
                op: RawOp::Op(Op::PopReg {
                    reg,
                    user: k == "u",
                }),
                arg: (lo, hi),
            })
        }
        "mem" | "io" => {
            c.comma(&k)?;
            let w = width(c, &k, k == "io")?;
            let op = if k == "mem" {
                Op::PopMem(w)
            } else {
                Op::PopIo(w)
            };
            ok(op, c)
        }
        _ => Err(PErr::new(
            codes::INVALID_OPERAND,
            t.lo,
            t.hi,
            format!(
                "invalid operand {} for `pop`; expected `lv`, `gv`, `r`, `u`, `mem`, `io`, `sbp`, `tsp`, `lp` or `stp`",
                c.describe(t)
            ),
        )),
    }
}
