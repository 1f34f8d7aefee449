//! The checked program: what the front end (preprocess → lex → parse →
//! check) produces and what the interpreter and the code generator consume.
//! Labels are resolved to instruction indices, procedures to indices,
//! symbols to link-time values, and every instruction has its canonical
//! code offset (spec §15). Nothing here touches a traced process.

use crate::source::Span;

/// Index of a body in [`Program::bodies`] (source order = canonical layout order).
pub type BodyId = usize;
/// Index of a procedure in [`Program::procs`].
pub type ProcId = usize;
/// Index of an instruction within its body's `insns`.
pub type InsnIdx = usize;

/// A whole checked probe program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// The file header (§5), with defaults applied.
    pub header: FileHeader,
    /// Probe points, in source order.
    pub probes: Vec<Probe>,
    /// Procedures, in source order.
    pub procs: Vec<Proc>,
    /// Every body (probes and procedures) in source order, each ending with
    /// its implicit terminator (`exit` for probes, `ret` for procedures).
    pub bodies: Vec<Body>,
    /// Size in bytes of the canonical code image.
    pub code_size: u32,
}

/// File header statements (§5), defaults applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// `name =`, quotes removed, case preserved.
    pub name: String,
    /// `major =` (1 … 65535).
    pub major: u16,
    /// `id =`.
    pub id: u16,
    /// `vars =` (0 … 256).
    pub vars: u16,
    /// `gvars =` (0 … 256).
    pub gvars: u16,
    /// `logmax =` (0 … 1024).
    pub logmax: u16,
    /// `jmpmax =` (0 … 65535).
    pub jmpmax: u16,
    /// `excpt_log =` (0 … 1024).
    pub excpt_log: u16,
    /// `autostacktrace =`.
    pub autostacktrace: bool,
    /// File-level `excpt_mask =` (default for probes).
    pub excpt_mask: u16,
    /// File-level `logonfault =` (default for probes).
    pub logonfault: bool,
    /// `groupdef =` names (as written; compared case-insensitively).
    pub groups: Vec<String>,
    /// `typedef =` names.
    pub types: Vec<String>,
    /// File-level `heap =` (default for probes).
    pub heap: u16,
}

impl Default for FileHeader {
    fn default() -> Self {
        FileHeader {
            name: String::new(),
            major: 1,
            id: 0,
            vars: 0,
            gvars: 0,
            logmax: 1024,
            jmpmax: 65535,
            excpt_log: 1024,
            autostacktrace: false,
            excpt_mask: 0x0FFF,
            logonfault: false,
            groups: Vec::new(),
            types: Vec::new(),
            heap: 0,
        }
    }
}

/// Kind of location statement (§6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocationKind {
    /// `offset =`: link-time address in the module, relocated by the load bias.
    Offset,
    /// `address =`: absolute; a symbol term is relocated.
    Address,
}

/// Watchpoint kind (§6.4); `io` is rejected at build time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchKind {
    /// Execution.
    X,
    /// Write.
    W,
    /// Read or write.
    Rw,
}

/// A probe point (§6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Offset or address.
    pub kind: LocationKind,
    /// The symbol term of the location's first expression, as written (case
    /// as in the ELF file after resolution), if any.
    pub symbol: Option<String>,
    /// Link-time value of the location's first expression (numbers plus the
    /// symbol's `st_value`), computed modulo 2^64. This is also the location
    /// value written in stack-trace headers (§6.3).
    pub value: u64,
    /// Sum of the numeric terms only (`value - st_value`), for manifests.
    pub addend: u64,
    /// Watched length in bytes (1 for breakpoints; `b - a + 1` for ranges).
    pub length: u8,
    /// `opcode =` (required for breakpoints, absent for watchpoints).
    pub opcode: Option<u8>,
    /// `watchpoint =`, absent for breakpoints.
    pub watch: Option<WatchKind>,
    /// `group =`.
    pub group: Option<String>,
    /// `type =`.
    pub r#type: Option<String>,
    /// `minor =`.
    pub minor: u16,
    /// `ignore =` / `passcount =`.
    pub ignore: u32,
    /// `maxhits =` (0 replaced by the default 0x7FFFFFFF).
    pub maxhits: u32,
    /// `logonfault =` (file value if absent).
    pub logonfault: bool,
    /// `excpt_mask =` (file value if absent).
    pub excpt_mask: u16,
    /// `heap =` (file value if absent).
    pub heap: u16,
    /// `return = yes`: a return probe (§6.5); the handler runs when each
    /// call entering at the location returns.
    pub r#return: bool,
    /// `maxactive =` (0 when absent: the runtime's default, §6.5).
    pub maxactive: u32,
    /// `usdt = PROVIDER:NAME` (§6.6): the probe's sites in the module, one
    /// manifest probe each; empty for other probes.
    pub usdt: Vec<UsdtSite>,
    /// The handler body.
    pub body: BodyId,
    /// Span of the location statement.
    pub span: Span,
}

/// One site of a USDT probe (§6.6), as the module's note gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtSite {
    /// Link-time address of the site.
    pub addr: u64,
    /// Link-time address of its semaphore, if any.
    pub semaphore: Option<u64>,
    /// Its arguments (what `push usdt, N` reads).
    pub args: Vec<hostabi::usdt::UsdtArg>,
}

/// A procedure (§4.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proc {
    /// Name as written at `proc NAME` (matched case-insensitively).
    pub name: String,
    /// The procedure body.
    pub body: BodyId,
    /// Span of the `proc` line.
    pub span: Span,
}

/// What a body belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyOwner {
    /// The handler of probe n.
    Probe(usize),
    /// Procedure n.
    Proc(ProcId),
}

/// A body: its instructions, the implicit terminator last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    /// Probe or procedure.
    pub owner: BodyOwner,
    /// Instructions in order; never empty (the implicit terminator is always there).
    pub insns: Vec<Insn>,
}

/// One instruction with its source span and canonical code offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insn {
    /// What it does.
    pub op: Op,
    /// Where it was written (the implicit terminator spans the body's last line end).
    pub span: Span,
    /// Canonical code offset (§15).
    pub offset: u32,
}

/// Local or global variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarSpace {
    /// `lv`: the program's local variables.
    Local,
    /// `gv`: the run's shared global variables.
    Global,
}

/// Shift or rotate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShiftOp {
    /// `shl`.
    Shl,
    /// `shr` (logical).
    Shr,
    /// `rol`.
    Rol,
    /// `ror`.
    Ror,
}

/// Bit propagation (§9.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropOp {
    /// `pbl`.
    Pbl,
    /// `pbr`.
    Pbr,
    /// `pzl`.
    Pzl,
    /// `pzr`.
    Pzr,
}

/// Memory / heap / I/O access width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// 1 byte.
    U8,
    /// 2 bytes.
    U16,
    /// 4 bytes.
    U32,
    /// 8 bytes.
    U64,
}

impl Width {
    /// Size in bytes.
    pub const fn bytes(self) -> u32 {
        match self {
            Width::U8 => 1,
            Width::U16 => 2,
            Width::U32 => 4,
            Width::U64 => 8,
        }
    }

    const fn index(self) -> u8 {
        match self {
            Width::U8 => 0,
            Width::U16 => 1,
            Width::U32 => 2,
            Width::U64 => 3,
        }
    }
}

/// Variable instruction forms (§9.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarOp {
    /// `push X`.
    Push,
    /// `pop X`.
    Pop,
    /// `move X`.
    Move,
    /// `inc X`.
    Inc,
    /// `dec X`.
    Dec,
}

/// Which internal stack pointer a `push/pop/copy tsp|sbp` form is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackRel {
    /// Relative to TSP (S\[k\]).
    Tsp,
    /// Relative to SBP (B\[k\]).
    Sbp,
}

/// Slot-access forms on `tsp` / `sbp` (§9.12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotOp {
    /// `push tsp|sbp`.
    Push,
    /// `pop tsp|sbp`.
    Pop,
    /// `copy tsp|sbp`.
    Copy,
}

/// An instruction (Appendix A). Branch targets are instruction indices in
/// the same body; `imm` forms carry their operand, stack forms take it from
/// the stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `nop`.
    Nop,
    /// `jmp L`.
    Jmp(InsnIdx),
    /// `jlt L`.
    Jlt(InsnIdx),
    /// `jle L`.
    Jle(InsnIdx),
    /// `jgt L`.
    Jgt(InsnIdx),
    /// `jge L`.
    Jge(InsnIdx),
    /// `jz L`.
    Jz(InsnIdx),
    /// `jnz L`.
    Jnz(InsnIdx),
    /// `loop L`.
    Loop(InsnIdx),
    /// `call P`.
    Call(ProcId),
    /// `ret` (also the implicit terminator of procedures).
    Ret,
    /// `abort`.
    Abort,
    /// `remove`.
    Remove,
    /// `exit` (also the implicit terminator of probes).
    Exit,
    /// `exit n`.
    ExitN(u8),
    /// `suspend` (reserved: raises INVALID_OPCODE).
    Suspend,
    /// `resume` (reserved: raises INVALID_OPCODE).
    Resume,
    /// `setmin n`.
    SetMinImm(u16),
    /// `setmin`.
    SetMin,
    /// `setmaj n` (n ≥ 1).
    SetMajImm(u16),
    /// `setmaj`.
    SetMaj,
    /// `log str` / `log arf`.
    LogStr,
    /// `log mrf`.
    LogMrf,
    /// `log b, n`.
    LogB(u16),
    /// `log n`.
    LogN(u16),
    /// `log` (stack count).
    Log,
    /// `log lv` / `log gv`.
    LogVars(VarSpace),
    /// `log st`.
    LogSt,
    /// `push|pop|move|inc|dec lv|gv, i` (index checked at build time).
    VarImm(VarOp, VarSpace, u16),
    /// `push|pop|move|inc|dec lv|gv` (index from the stack).
    Var(VarOp, VarSpace),
    /// `add`.
    Add,
    /// `sub` (TOS − NOS).
    Sub,
    /// `mul`.
    Mul,
    /// `neg` (bitwise NOT).
    Neg,
    /// `and`.
    And,
    /// `or`.
    Or,
    /// `xor`.
    Xor,
    /// `div`.
    Div,
    /// `idiv`.
    Idiv,
    /// `shl|shr|rol|ror n`.
    ShiftImm(ShiftOp, u8),
    /// `shl|shr|rol|ror` (count below the value).
    Shift(ShiftOp),
    /// `pbl|pbr|pzl|pzr n` (1 … 64).
    PropImm(PropOp, u8),
    /// `pbl|pbr|pzl|pzr` (n on top).
    Prop(PropOp),
    /// `xchg`.
    Xchg,
    /// `dup n`.
    DupImm(u8),
    /// `dup`.
    Dup,
    /// `ros n`.
    Ros(u8),
    /// `push r|u, R`; `user` is true for the `u` form. `cpuid` included.
    PushReg {
        /// Register id (hostabi::regs).
        reg: u16,
        /// `u` form.
        user: bool,
    },
    /// `pop r|u, R` (writable registers only).
    PopReg {
        /// Register id (hostabi::regs).
        reg: u16,
        /// `u` form.
        user: bool,
    },
    /// `push v`: a number (negatives in two's complement).
    PushImm(u64),
    /// `push expr` with a symbol term: `value` is numbers + `st_value`; the
    /// run-time value adds the module's load bias.
    PushSym {
        /// Link-time value of the expression.
        value: u64,
    },
    /// `push b, v`.
    PushByte(u8),
    /// `push mem, uN`.
    PushMem(Width),
    /// `pop mem, uN`.
    PopMem(Width),
    /// `push task`.
    PushTask,
    /// `push pid`.
    PushPid,
    /// `push procid`.
    PushProcid,
    /// `vfyr` / `vfa`.
    Vfyr,
    /// `vfyrw`.
    Vfyrw,
    /// `sx L`.
    Sx(InsnIdx),
    /// `ux`.
    Ux,
    /// `rx`.
    Rx,
    /// `push x`.
    PushX,
    /// `push lp`.
    PushLp,
    /// `push plp`.
    PushPlp,
    /// `pop lp`.
    PopLp,
    /// `push stp`.
    PushStp,
    /// `pop stp`.
    PopStp,
    /// `purge st`.
    PurgeSt,
    /// `trace pv`.
    TracePv,
    /// `trace lv` / `trace gv`.
    TraceVars(VarSpace),
    /// `push|pop|copy tsp|sbp, k`.
    SlotImm(SlotOp, StackRel, i16),
    /// `push|pop|copy tsp|sbp` (k from the stack).
    Slot(SlotOp, StackRel),
    /// `save tsp`.
    SaveTsp,
    /// `restore tsp`.
    RestoreTsp,
    /// `save sbp`.
    SaveSbp,
    /// `restore sbp`.
    RestoreSbp,
    /// `callk`.
    Callk,
    /// `malloc`.
    Malloc,
    /// `free`.
    Free,
    /// `push wid`.
    PushWid,
    /// `pushh uN, k`.
    PushH(Width, u16),
    /// `poph uN, k`.
    PopH(Width, u16),
    /// `push io, uN` (N ≤ 32).
    PushIo(Width),
    /// `pop io, uN` (N ≤ 32).
    PopIo(Width),
    /// `push entry, R` (§9.16): register R (one of `hostabi::regs::ENTRY_REGS`)
    /// as it was at the entry of the returning call; return probes only.
    PushEntry(u16),
    /// `push elapsed` (§9.16): nanoseconds between the entry of the returning
    /// call and its return; return probes only.
    PushElapsed,
    /// `push usdt, N` (§9.17): argument N (0 … 11) of the USDT site that
    /// fired, extended as its note says; USDT probes only.
    PushUsdt(u8),
}

impl Op {
    /// The opcode byte (Appendix A).
    pub fn opcode(&self) -> u8 {
        use Op::*;
        match self {
            Nop => 0x00,
            Jmp(_) => 0x01,
            Jlt(_) => 0x02,
            Jle(_) => 0x03,
            Jgt(_) => 0x04,
            Jge(_) => 0x05,
            Jz(_) => 0x06,
            Jnz(_) => 0x07,
            Loop(_) => 0x08,
            Call(_) => 0x09,
            Ret => 0x0A,
            Abort => 0x0B,
            Remove => 0x0C,
            Exit => 0x0D,
            ExitN(_) => 0x0E,
            Suspend => 0x0F,
            Resume => 0x10,
            SetMinImm(_) => 0x11,
            SetMin => 0x12,
            SetMajImm(_) => 0x13,
            SetMaj => 0x14,
            LogStr => 0x15,
            LogMrf => 0x17,
            LogB(_) => 0x1A,
            LogN(_) => 0x1B,
            VarImm(op, space, _) | Var(op, space) => {
                let base = match space {
                    VarSpace::Global => 0x1F,
                    VarSpace::Local => 0x29,
                };
                let form = match op {
                    VarOp::Push => 0,
                    VarOp::Pop => 2,
                    VarOp::Move => 4,
                    VarOp::Inc => 6,
                    VarOp::Dec => 8,
                };
                base + form + u8::from(matches!(self, Var(..)))
            }
            Add => 0x33,
            Sub => 0x34,
            Mul => 0x35,
            Neg => 0x36,
            And => 0x37,
            Or => 0x38,
            Xor => 0x39,
            ShiftImm(s, _) | Shift(s) => {
                let base = match s {
                    ShiftOp::Rol => 0x3A,
                    ShiftOp::Ror => 0x3C,
                    ShiftOp::Shl => 0x3E,
                    ShiftOp::Shr => 0x40,
                };
                base + u8::from(matches!(self, Shift(_)))
            }
            Xchg => 0x42,
            DupImm(_) => 0x43,
            Dup => 0x44,
            Ros(_) => 0x45,
            PushReg { user: false, .. } => 0x46,
            PopReg { user: false, .. } => 0x47,
            PushReg { user: true, .. } => 0x48,
            PopReg { user: true, .. } => 0x49,
            PushImm(_) | PushSym { .. } | PushByte(_) => 0x4C,
            PushMem(w) => 0x4D + w.index(),
            PopMem(w) => 0x51 + w.index(),
            PushTask => 0x5D,
            PushPid => 0x5E,
            PushProcid => 0x5F,
            Vfyr => 0x60,
            Vfyrw => 0x61,
            Div => 0x62,
            Idiv => 0x63,
            Prop(PropOp::Pbl) => 0x64,
            Prop(PropOp::Pbr) => 0x65,
            PropImm(PropOp::Pbl, _) => 0x66,
            PropImm(PropOp::Pbr, _) => 0x67,
            Prop(PropOp::Pzl) => 0x68,
            Prop(PropOp::Pzr) => 0x69,
            PropImm(PropOp::Pzl, _) => 0x6A,
            PropImm(PropOp::Pzr, _) => 0x6B,
            Sx(_) => 0x6C,
            Ux => 0x6D,
            Rx => 0x6E,
            PushX => 0x6F,
            PushLp => 0x70,
            PushPlp => 0x71,
            PopLp => 0x72,
            LogSt => 0x73,
            PurgeSt => 0x74,
            TraceVars(VarSpace::Local) => 0x75,
            TraceVars(VarSpace::Global) => 0x76,
            TracePv => 0x77,
            Slot(SlotOp::Push, StackRel::Sbp) => 0x78,
            Slot(SlotOp::Pop, StackRel::Sbp) => 0x79,
            Slot(SlotOp::Push, StackRel::Tsp) => 0x7A,
            Slot(SlotOp::Pop, StackRel::Tsp) => 0x7B,
            SlotImm(SlotOp::Push, StackRel::Sbp, _) => 0x7C,
            SlotImm(SlotOp::Pop, StackRel::Sbp, _) => 0x7D,
            SlotImm(SlotOp::Push, StackRel::Tsp, _) => 0x7E,
            SlotImm(SlotOp::Pop, StackRel::Tsp, _) => 0x7F,
            SlotImm(SlotOp::Copy, StackRel::Sbp, _) => 0x80,
            SlotImm(SlotOp::Copy, StackRel::Tsp, _) => 0x81,
            PushStp => 0x82,
            PopStp => 0x83,
            SaveSbp => 0x84,
            RestoreSbp => 0x85,
            SaveTsp => 0x86,
            RestoreTsp => 0x87,
            Slot(SlotOp::Copy, StackRel::Sbp) => 0x88,
            Slot(SlotOp::Copy, StackRel::Tsp) => 0x89,
            Log => 0x8A,
            LogVars(VarSpace::Local) => 0x8B,
            LogVars(VarSpace::Global) => 0x8C,
            Callk => 0x8D,
            Malloc => 0x8E,
            Free => 0x8F,
            PushWid => 0x90,
            PushH(w, _) => 0x91 + w.index(),
            PopH(w, _) => 0x95 + w.index(),
            PushIo(w) => 0xB1 + w.index(),
            PopIo(w) => 0xB4 + w.index(),
            PushEntry(_) => 0x4A,
            PushElapsed => 0x4B,
            PushUsdt(_) => 0x4C,
        }
    }

    /// Encoded size in bytes (§15): 1, 2 (u8/bit), 3 (u16/s16/register) or 9.
    pub fn size(&self) -> u32 {
        use Op::*;
        match self {
            Jmp(_)
            | Jlt(_)
            | Jle(_)
            | Jgt(_)
            | Jge(_)
            | Jz(_)
            | Jnz(_)
            | Loop(_)
            | Call(_)
            | Sx(_)
            | PushImm(_)
            | PushSym { .. }
            | PushByte(_) => 9,
            SetMinImm(_)
            | SetMajImm(_)
            | LogB(_)
            | LogN(_)
            | VarImm(..)
            | PushReg { .. }
            | PopReg { .. }
            | PushEntry(_)
            | SlotImm(..)
            | PushH(..)
            | PopH(..) => 3,
            ExitN(_) | ShiftImm(..) | PropImm(..) | DupImm(_) | Ros(_) | PushUsdt(_) => 2,
            _ => 1,
        }
    }

    /// Whether control never falls through to the next instruction: an
    /// unconditional jump or an end of the run or procedure (`suspend` and
    /// `resume` always raise).
    pub fn ends_flow(&self) -> bool {
        matches!(
            self,
            Op::Jmp(_)
                | Op::Exit
                | Op::Abort
                | Op::Remove
                | Op::ExitN(_)
                | Op::Ret
                | Op::Suspend
                | Op::Resume
        )
    }

    /// Whether the instruction reads the entry state of a return probe's
    /// call (`push entry`, `push elapsed`): allowed only where every hit
    /// that can run it is the return of a return probe (§6.5).
    pub fn needs_return_probe(&self) -> bool {
        matches!(self, Op::PushEntry(_) | Op::PushElapsed)
    }

    /// The branch or `sx` target, if any.
    pub fn target(&self) -> Option<InsnIdx> {
        match *self {
            Op::Jmp(t)
            | Op::Jlt(t)
            | Op::Jle(t)
            | Op::Jgt(t)
            | Op::Jge(t)
            | Op::Jz(t)
            | Op::Jnz(t)
            | Op::Loop(t)
            | Op::Sx(t) => Some(t),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_follow_appendix_a() {
        assert_eq!(Op::VarImm(VarOp::Push, VarSpace::Global, 0).opcode(), 0x1F);
        assert_eq!(Op::Var(VarOp::Dec, VarSpace::Global).opcode(), 0x28);
        assert_eq!(Op::VarImm(VarOp::Push, VarSpace::Local, 0).opcode(), 0x29);
        assert_eq!(Op::Var(VarOp::Dec, VarSpace::Local).opcode(), 0x32);
        assert_eq!(Op::Shift(ShiftOp::Shr).opcode(), 0x41);
        assert_eq!(Op::PopMem(Width::U64).opcode(), 0x54);
        assert_eq!(Op::PopH(Width::U64, 1).opcode(), 0x98);
        assert_eq!(Op::PopIo(Width::U32).opcode(), 0xB6);
        assert_eq!(Op::Suspend.opcode(), 0x0F);
        assert_eq!(Op::PushEntry(0x0A).opcode(), 0x4A);
        assert_eq!(Op::PushElapsed.opcode(), 0x4B);
    }

    #[test]
    fn sizes_follow_section_15() {
        assert_eq!(Op::Loop(0).size(), 9);
        assert_eq!(Op::LogN(1).size(), 3);
        assert_eq!(Op::ExitN(1).size(), 2);
        assert_eq!(Op::Exit.size(), 1);
        assert_eq!(
            Op::PushReg {
                reg: 6,
                user: false
            }
            .size(),
            3
        );
        assert_eq!(Op::PushEntry(0x0A).size(), 3);
        assert_eq!(Op::PushElapsed.size(), 1);
    }
}
