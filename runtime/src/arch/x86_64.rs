//! x86-64: register layout of `struct user_regs_struct` / `user_fpregs_struct`
//! against the hostabi register ids (spec §13.1), the PC after `int3`, debug
//! register offsets and DR7 encoding, and instruction decoding (iced-x86) to
//! decide how a displaced instruction is stepped over: emulated, executed
//! out of line (relocated into a scratch slot with a jump back), or, as a
//! last resort, single-stepped in place. Pure computation: never performs a
//! system call; memory effects of emulation go through [`EmuMem`].

use agent_loader::reloc;
use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic,
    OpAccess, OpKind, Register,
};

pub use crate::sys::regs::{FpRegs, Regs};

/// The breakpoint instruction (`int3`).
pub const BREAKPOINT_INSN: u8 = 0xCC;

/// Longest x86 instruction, in bytes.
pub const MAX_INSN_BYTES: usize = 15;

/// Bytes of one out-of-line slot: a relocated instruction (which can grow,
/// e.g. a short `jcc` becomes a near one plus a far form) and the jump back
/// (at most 14 bytes as `jmp [rip+0]; dq target`).
pub const OOL_SLOT_BYTES: usize = 64;

/// Distance between the PC reported after a breakpoint trap and the
/// breakpoint address: on x86-64 `int3` is a trap, so RIP = address + 1.
pub const fn pc_after_trap() -> u64 {
    1
}

/// `si_code` of a SIGTRAP raised by `int3` (`SI_KERNEL`).
pub const SI_KERNEL: i32 = 0x80;
/// `si_code` of a single-step trap.
pub const TRAP_TRACE: i32 = 2;
/// `si_code` of a hardware breakpoint/watchpoint trap.
pub const TRAP_HWBKPT: i32 = 4;

/// DR6 bit of a single-step trap.
pub const DR6_BS: u64 = 1 << 14;
/// EFLAGS trap flag.
pub const EFLAGS_TF: u64 = 1 << 8;
/// EFLAGS resume flag.
pub const EFLAGS_RF: u64 = 1 << 16;

/// Offset of debug register `n` (0..=7) in `struct user`, for PTRACE_PEEKUSER/POKEUSER.
pub const fn debugreg_offset(n: usize) -> usize {
    core::mem::offset_of!(libc::user, u_debugreg) + 8 * n
}

/// The debug registers that hold watchpoint addresses (DR0–DR3): at most
/// this many watchpoints per process, whatever the transport.
pub const DEBUG_REGISTERS: usize = 4;

/// The x86-64 rules for a debug-register range, the same for every
/// transport: length 1, 2, 4 or 8, the address aligned to the length,
/// execute watchpoints of length 1. `Err` is the rule broken.
pub fn check_watchpoint(addr: u64, len: u8, kind: WatchKind) -> Result<(), &'static str> {
    if !matches!(len, 1 | 2 | 4 | 8) {
        Err("length must be 1, 2, 4 or 8")
    } else if !addr.is_multiple_of(u64::from(len)) {
        Err("address must be a multiple of the length")
    } else if kind == WatchKind::Exec && len != 1 {
        Err("execute watchpoints have length 1")
    } else {
        Ok(())
    }
}

/// What a hardware watchpoint fires on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchKind {
    /// Instruction fetch at the address (length must be 1).
    Exec,
    /// Data write to any byte of the range.
    Write,
    /// Data read or write of any byte of the range.
    ReadWrite,
}

/// The DR7 bits that enable debug register `slot` for `(len, kind)`: local
/// enable, R/W and LEN fields. `len` must be 1, 2, 4 or 8 (1 for `Exec`).
pub fn dr7_bits(slot: usize, len: u8, kind: WatchKind) -> u64 {
    let rw: u64 = match kind {
        WatchKind::Exec => 0b00,
        WatchKind::Write => 0b01,
        WatchKind::ReadWrite => 0b11,
    };
    let ln: u64 = match (kind, len) {
        (WatchKind::Exec, _) | (_, 1) => 0b00,
        (_, 2) => 0b01,
        (_, 8) => 0b10,
        _ => 0b11,
    };
    (1u64 << (slot * 2)) | (rw << (16 + slot * 4)) | (ln << (18 + slot * 4))
}

/// Reads a register of `user_regs_struct` by hostabi id (GPRs, segment
/// selectors, rflags, rip, orig_rax, fs_base, gs_base). `None` for other ids.
pub fn gpr(r: &Regs, id: u16) -> Option<u64> {
    Some(match id {
        0x00 => r.cs,
        0x01 => r.ds,
        0x02 => r.es,
        0x03 => r.fs,
        0x04 => r.gs,
        0x05 => r.ss,
        0x06 => r.rax,
        0x07 => r.rbx,
        0x08 => r.rcx,
        0x09 => r.rdx,
        0x0A => r.rdi,
        0x0B => r.rsi,
        0x0C => r.eflags,
        0x0D => r.rip,
        0x0E => r.rsp,
        0x0F => r.rbp,
        0x10 => r.r8,
        0x11 => r.r9,
        0x12 => r.r10,
        0x13 => r.r11,
        0x14 => r.r12,
        0x15 => r.r13,
        0x16 => r.r14,
        0x17 => r.r15,
        0x18 => r.orig_rax,
        0x19 => r.fs_base,
        0x1A => r.gs_base,
        _ => return None,
    })
}

/// The field of a handler-writable register (spec §13.1 "pop" column) by id.
pub fn writable_gpr_mut(r: &mut Regs, id: u16) -> Option<&mut u64> {
    Some(match id {
        0x06 => &mut r.rax,
        0x07 => &mut r.rbx,
        0x08 => &mut r.rcx,
        0x09 => &mut r.rdx,
        0x0A => &mut r.rdi,
        0x0B => &mut r.rsi,
        0x0F => &mut r.rbp,
        0x10 => &mut r.r8,
        0x11 => &mut r.r9,
        0x12 => &mut r.r10,
        0x13 => &mut r.r11,
        0x14 => &mut r.r12,
        0x15 => &mut r.r13,
        0x16 => &mut r.r14,
        0x17 => &mut r.r15,
        _ => return None,
    })
}

/// Whether `id` is one of the FXSAVE-area registers (fr0-7, fcw … xmm15).
pub fn is_fp_id(id: u16) -> bool {
    matches!(id, 0x3E..=0x49 | 0x4B | 0x4D..=0x56 | 0x58..=0x5F)
}

/// Debug register index (0-3, 6, 7) of a hostabi id.
pub fn dr_index(id: u16) -> Option<usize> {
    match id {
        0x2C..=0x2F => Some(usize::from(id - 0x2C)),
        0x32 => Some(6),
        0x33 => Some(7),
        _ => None,
    }
}

fn le_u64(words: &[u32]) -> u64 {
    u64::from(words[0]) | (u64::from(words[1]) << 32)
}

/// Reads part `part` (0 low, 1 high) of an FXSAVE-area register by id.
pub fn fp(f: &FpRegs, id: u16, part: u8) -> Option<u64> {
    let two = matches!(id, 0x3E..=0x45 | 0x4D..=0x54 | 0x58..=0x5F);
    if part > u8::from(two) {
        return None;
    }
    Some(match id {
        0x3E..=0x45 => {
            let i = usize::from(id - 0x3E) * 4;
            if part == 0 {
                le_u64(&f.st_space[i..i + 2])
            } else {
                u64::from(f.st_space[i + 2] & 0xFFFF)
            }
        }
        0x46 => u64::from(f.cwd),
        0x47 => u64::from(f.swd),
        0x48 => u64::from(f.ftw & 0xFF),
        0x49 => f.rip,
        0x4B => f.rdp,
        0x4D..=0x54 | 0x58..=0x5F => {
            let n = if id >= 0x58 { id - 0x58 + 8 } else { id - 0x4D };
            let i = usize::from(n) * 4 + usize::from(part) * 2;
            le_u64(&f.xmm_space[i..i + 2])
        }
        0x55 => u64::from(f.mxcsr),
        0x56 => u64::from(f.fop),
        _ => return None,
    })
}

// ---------------------------------------------------------------------------
// Step-over: decoding, classification, emulation, relocation.

/// A decoded instruction at a breakpoint address (decoded from the original bytes).
#[derive(Clone, Copy, Debug)]
pub struct Insn {
    /// The instruction, decoded with its run-time address as IP.
    pub instr: Instruction,
    /// Length in bytes.
    pub len: u8,
}

/// How the displaced instruction of a breakpoint is executed after a hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// Computed by the tracer on the register snapshot (and stack memory).
    Emulate(Emul),
    /// Relocated into a scratch slot of the tracee, followed by a jump back.
    OutOfLine,
    /// Original byte restored, single-stepped while the other threads are stopped.
    SingleStep,
}

/// An emulated instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emul {
    /// `nop` (any length), `endbr64`, `endbr32`: only RIP moves.
    Skip,
    /// `push r64`.
    PushReg(Register),
    /// `push imm` (sign-extended to 64 bits).
    PushImm(u64),
    /// `pop r64`.
    PopReg(Register),
    /// `mov r, r` (64 or 32 bits).
    MovRR(Register, Register),
    /// `mov r, imm` (64 or 32 bits).
    MovRI(Register, u64),
    /// `add`/`sub r, imm` (64 or 32 bits), with flags.
    AddSubImm {
        /// Destination register.
        dst: Register,
        /// Immediate, sign-extended.
        imm: u64,
        /// `sub` rather than `add`.
        sub: bool,
    },
    /// `lea r, [mem]` (64 or 32 bits).
    Lea(Register),
    /// `xor r, r` with the same register (zeroing idiom), with flags.
    XorSelf(Register),
    /// `jmp rel`.
    Jmp(u64),
    /// `call rel`.
    Call(u64),
    /// `jmp r/m64`.
    JmpInd,
    /// `call r/m64`.
    CallInd,
    /// `ret` / `ret imm16`.
    Ret(u16),
}

/// Memory access used by emulation (the tracee's stack and data).
pub trait EmuMem {
    /// Reads 8 bytes; `None` when the process could not read them.
    fn read_u64(&mut self, addr: u64) -> Option<u64>;
    /// Writes 8 bytes; `false` when the process could not write them.
    fn write_u64(&mut self, addr: u64, value: u64) -> bool;
}

/// What [`predict_fault`] needs of the tracee's memory.
pub trait FaultMem {
    /// Whether the process may access `[addr, addr + len)` (for writing
    /// when `write`).
    fn accessible(&mut self, addr: u64, len: u64, write: bool) -> bool;
    /// Reads `buf.len()` bytes at `addr`; `false` when it cannot.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool;
}

/// The signal the CPU will raise when the thread executes `insn` with the
/// registers `regs`: SIGSEGV for an unconditional memory access the
/// process may not make (unmapped, protected, non-canonical), SIGFPE for a
/// `div`/`idiv` by zero or whose quotient does not fit. `None` when the
/// instruction will not fault for those reasons (conditional accesses —
/// `cmov`, masked vector moves — are assumed not to). Used to honour
/// `logonfault` for instructions executed out of line, whose fault the
/// tracer would otherwise only see later. `info` is reused across calls
/// (no allocation once warm).
pub fn predict_fault(
    insn: &Insn,
    regs: &Regs,
    info: &mut InstructionInfoFactory,
    mem: &mut dyn FaultMem,
) -> Option<i32> {
    let i = &insn.instr;
    let next_ip = i.next_ip();
    for m in info.info(i).used_memory() {
        let (read, write) = match m.access() {
            OpAccess::Read => (true, false),
            OpAccess::Write => (false, true),
            OpAccess::ReadWrite => (true, true),
            _ => continue,
        };
        let size = m.memory_size().size() as u64;
        if size == 0 || !(read || write) {
            continue;
        }
        let Some(addr) = m.virtual_address(0, |reg, _, _| reg_value(regs, reg, next_ip)) else {
            continue;
        };
        if !mem.accessible(addr, size, write) {
            return Some(libc::SIGSEGV);
        }
    }
    if matches!(i.mnemonic(), Mnemonic::Div | Mnemonic::Idiv) {
        return division_fault(i, regs, next_ip, mem);
    }
    None
}

/// `div`/`idiv`: SIGFPE for a zero divisor or a quotient too large.
fn division_fault(
    i: &Instruction,
    regs: &Regs,
    next_ip: u64,
    mem: &mut dyn FaultMem,
) -> Option<i32> {
    let (divisor, size) = match i.op0_kind() {
        OpKind::Register => {
            let r = i.op0_register();
            (reg_value(regs, r, next_ip)?, r.size())
        }
        OpKind::Memory => {
            let size = i.memory_size().size();
            let addr = i.virtual_address(0, 0, |reg, _, _| reg_value(regs, reg, next_ip))?;
            let mut b = [0u8; 8];
            if !mem.read(addr, &mut b[..size.min(8)]) {
                return Some(libc::SIGSEGV);
            }
            (u64::from_le_bytes(b), size)
        }
        _ => return None,
    };
    let bits = (size * 8) as u32;
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let divisor = divisor & mask;
    if divisor == 0 {
        return Some(libc::SIGFPE);
    }
    // The dividend: AX for a byte divisor, else DX:AX, EDX:EAX, RDX:RAX.
    let (high, low) = if size == 1 {
        ((regs.rax >> 8) & 0xFF, regs.rax & 0xFF)
    } else {
        (regs.rdx & mask, regs.rax & mask)
    };
    let fits = if i.mnemonic() == Mnemonic::Div {
        high < divisor
    } else {
        let sext = |v: u64| -> i128 { i128::from((v << (64 - bits)) as i64 >> (64 - bits)) };
        let dividend = (sext(high) << bits) | i128::from(low);
        let q = dividend.checked_div(sext(divisor));
        let (min, max) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
        q.is_some_and(|q| (min..=max).contains(&q))
    };
    (!fits).then_some(libc::SIGFPE)
}

/// Decodes the instruction at run-time address `addr` from its original
/// bytes. `None` when the bytes are not a valid instruction.
pub fn decode(addr: u64, bytes: &[u8]) -> Option<Insn> {
    let mut d = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
    let instr = d.decode();
    if instr.is_invalid() {
        return None;
    }
    Some(Insn {
        instr,
        len: u8::try_from(instr.len()).ok()?,
    })
}

fn is_gpr(r: Register) -> bool {
    r.is_gpr64() || r.is_gpr32()
}

/// Chooses how the instruction is stepped over.
pub fn classify(insn: &Insn) -> StepKind {
    let i = &insn.instr;
    let branch = matches!(i.mnemonic(), Mnemonic::Jmp | Mnemonic::Call | Mnemonic::Ret);
    // Locked and string (rep) instructions run natively; a `bnd` (f2) prefix
    // on a branch changes nothing in user space.
    if i.has_lock_prefix() || (!branch && (i.has_rep_prefix() || i.has_repne_prefix())) {
        return StepKind::OutOfLine;
    }
    let reg = |n: u32| (i.op_kind(n) == OpKind::Register).then(|| i.op_register(n));
    let imm = |n: u32| {
        matches!(
            i.op_kind(n),
            OpKind::Immediate8
                | OpKind::Immediate16
                | OpKind::Immediate32
                | OpKind::Immediate64
                | OpKind::Immediate8to32
                | OpKind::Immediate8to64
                | OpKind::Immediate32to64
        )
        .then(|| i.immediate(n))
    };
    let emul = match i.mnemonic() {
        Mnemonic::Nop | Mnemonic::Endbr64 | Mnemonic::Endbr32 => Some(Emul::Skip),
        Mnemonic::Push => match (reg(0), imm(0)) {
            (Some(r), _) if r.is_gpr64() => Some(Emul::PushReg(r)),
            (None, Some(v)) if i.code() != Code::Pushw_imm8 && i.code() != Code::Push_imm16 => {
                Some(Emul::PushImm(v))
            }
            _ => None,
        },
        Mnemonic::Pop => match reg(0) {
            Some(r) if r.is_gpr64() => Some(Emul::PopReg(r)),
            _ => None,
        },
        Mnemonic::Mov => match (reg(0), reg(1), imm(1)) {
            (Some(d), Some(s), _) if is_gpr(d) && d.size() == s.size() && is_gpr(s) => {
                Some(Emul::MovRR(d, s))
            }
            (Some(d), None, Some(v)) if is_gpr(d) => Some(Emul::MovRI(d, v)),
            _ => None,
        },
        Mnemonic::Add | Mnemonic::Sub => match (reg(0), imm(1)) {
            (Some(d), Some(v)) if is_gpr(d) => Some(Emul::AddSubImm {
                dst: d,
                imm: v,
                sub: i.mnemonic() == Mnemonic::Sub,
            }),
            _ => None,
        },
        Mnemonic::Lea => match reg(0) {
            Some(d) if is_gpr(d) && i.op_kind(1) == OpKind::Memory => Some(Emul::Lea(d)),
            _ => None,
        },
        Mnemonic::Xor => match (reg(0), reg(1)) {
            (Some(a), Some(b)) if a == b && is_gpr(a) => Some(Emul::XorSelf(a)),
            _ => None,
        },
        Mnemonic::Jmp if i.op_kind(0) == OpKind::NearBranch64 => {
            Some(Emul::Jmp(i.near_branch_target()))
        }
        Mnemonic::Call if i.op_kind(0) == OpKind::NearBranch64 => {
            Some(Emul::Call(i.near_branch_target()))
        }
        Mnemonic::Jmp | Mnemonic::Call if indirect64(i) => Some(if i.mnemonic() == Mnemonic::Jmp {
            Emul::JmpInd
        } else {
            Emul::CallInd
        }),
        Mnemonic::Jmp | Mnemonic::Call => return StepKind::SingleStep,
        Mnemonic::Ret if i.code() == Code::Retnq => Some(Emul::Ret(0)),
        Mnemonic::Ret if i.code() == Code::Retnq_imm16 => Some(Emul::Ret(i.immediate16())),
        _ => None,
    };
    if let Some(e) = emul {
        return StepKind::Emulate(e);
    }
    match i.flow_control() {
        // Anything else that transfers control with a return address or
        // leaves user mode oddly is stepped in place.
        FlowControl::Call | FlowControl::IndirectCall | FlowControl::Return => StepKind::SingleStep,
        FlowControl::Exception => StepKind::SingleStep,
        _ if i.code() == Code::Syscall => StepKind::OutOfLine,
        FlowControl::Interrupt | FlowControl::XbeginXabortXend => StepKind::SingleStep,
        _ => StepKind::OutOfLine,
    }
}

fn indirect64(i: &Instruction) -> bool {
    match i.op_kind(0) {
        OpKind::Register => i.op_register(0).is_gpr64(),
        OpKind::Memory => {
            matches!(i.code(), Code::Jmp_rm64 | Code::Call_rm64)
        }
        _ => false,
    }
}

fn reg_ref(r: &mut Regs, reg: Register) -> Option<&mut u64> {
    Some(match reg.full_register() {
        Register::RAX => &mut r.rax,
        Register::RBX => &mut r.rbx,
        Register::RCX => &mut r.rcx,
        Register::RDX => &mut r.rdx,
        Register::RSI => &mut r.rsi,
        Register::RDI => &mut r.rdi,
        Register::RBP => &mut r.rbp,
        Register::RSP => &mut r.rsp,
        Register::R8 => &mut r.r8,
        Register::R9 => &mut r.r9,
        Register::R10 => &mut r.r10,
        Register::R11 => &mut r.r11,
        Register::R12 => &mut r.r12,
        Register::R13 => &mut r.r13,
        Register::R14 => &mut r.r14,
        Register::R15 => &mut r.r15,
        _ => return None,
    })
}

/// Value of a register as iced names it (GPRs 64/32/16/8-bit low, segment bases, RIP).
fn reg_value(r: &Regs, reg: Register, next_ip: u64) -> Option<u64> {
    let mut copy = *r;
    match reg {
        Register::ES | Register::CS | Register::SS | Register::DS => Some(0),
        Register::FS => Some(r.fs_base),
        Register::GS => Some(r.gs_base),
        Register::RIP => Some(next_ip),
        Register::EIP => Some(next_ip & 0xFFFF_FFFF),
        _ => {
            let full = *reg_ref(&mut copy, reg)?;
            Some(match reg.size() {
                8 => full,
                4 => full & 0xFFFF_FFFF,
                2 => full & 0xFFFF,
                1 if reg.is_gpr8()
                    && matches!(
                        reg,
                        Register::AH | Register::BH | Register::CH | Register::DH
                    ) =>
                {
                    (full >> 8) & 0xFF
                }
                1 => full & 0xFF,
                _ => return None,
            })
        }
    }
}

fn set_reg(r: &mut Regs, reg: Register, v: u64) -> bool {
    let wide = reg.is_gpr64();
    match reg_ref(r, reg) {
        Some(slot) if wide => {
            *slot = v;
            true
        }
        Some(slot) if reg.is_gpr32() => {
            *slot = v & 0xFFFF_FFFF;
            true
        }
        _ => false,
    }
}

const CF: u64 = 1 << 0;
const PF: u64 = 1 << 2;
const AF: u64 = 1 << 4;
const ZF: u64 = 1 << 6;
const SF: u64 = 1 << 7;
const OF: u64 = 1 << 11;

fn arith_flags(a: u64, b: u64, res: u64, bits: u32, sub: bool) -> u64 {
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let sign = 1u64 << (bits - 1);
    let (a, b, res) = (a & mask, b & mask, res & mask);
    let mut f = 0;
    let carry = if sub { a < b } else { res < a };
    if carry {
        f |= CF;
    }
    if (res as u8).count_ones().is_multiple_of(2) {
        f |= PF;
    }
    if (a ^ b ^ res) & 0x10 != 0 {
        f |= AF;
    }
    if res == 0 {
        f |= ZF;
    }
    if res & sign != 0 {
        f |= SF;
    }
    let overflow = if sub {
        (a ^ b) & (a ^ res) & sign != 0
    } else {
        (a ^ res) & (b ^ res) & sign != 0
    };
    if overflow {
        f |= OF;
    }
    f
}

const ARITH_FLAGS: u64 = CF | PF | AF | ZF | SF | OF;

/// Executes `emul` (the classification of `insn`) on `regs`, whose RIP must
/// be the instruction's address. Returns `false`, with `regs` unchanged,
/// when a memory access fails: the caller then lets the CPU execute the
/// instruction so that the fault is the real one.
pub fn emulate(insn: &Insn, emul: Emul, regs: &mut Regs, mem: &mut dyn EmuMem) -> bool {
    let i = &insn.instr;
    let next = regs.rip.wrapping_add(u64::from(insn.len));
    let mut r = *regs;
    r.rip = next;
    let ok = match emul {
        Emul::Skip => true,
        Emul::PushReg(reg) => match reg_value(regs, reg, next) {
            Some(v) => push(&mut r, v, mem),
            None => false,
        },
        Emul::PushImm(v) => push(&mut r, v, mem),
        Emul::PopReg(reg) => match mem.read_u64(regs.rsp) {
            Some(v) => {
                r.rsp = regs.rsp.wrapping_add(8);
                set_reg(&mut r, reg, v)
            }
            None => false,
        },
        Emul::MovRR(d, s) => match reg_value(regs, s, next) {
            Some(v) => set_reg(&mut r, d, v),
            None => false,
        },
        Emul::MovRI(d, v) => set_reg(&mut r, d, v),
        Emul::AddSubImm { dst, imm, sub } => match reg_value(regs, dst, next) {
            Some(a) => {
                let bits = dst.size() as u32 * 8;
                let res = if sub {
                    a.wrapping_sub(imm)
                } else {
                    a.wrapping_add(imm)
                };
                r.eflags = (r.eflags & !ARITH_FLAGS) | arith_flags(a, imm, res, bits, sub);
                set_reg(&mut r, dst, res)
            }
            None => false,
        },
        Emul::Lea(d) => match i.virtual_address(1, 0, |reg, _, _| match reg {
            // lea ignores segments.
            Register::FS | Register::GS => Some(0),
            _ => reg_value(regs, reg, next),
        }) {
            Some(ea) => set_reg(&mut r, d, ea),
            None => false,
        },
        Emul::XorSelf(d) => {
            r.eflags = (r.eflags & !ARITH_FLAGS) | ZF | PF;
            set_reg(&mut r, d, 0)
        }
        Emul::Jmp(t) => {
            r.rip = t;
            true
        }
        Emul::Call(t) => {
            r.rip = t;
            push(&mut r, next, mem)
        }
        Emul::JmpInd | Emul::CallInd => match indirect_target(i, regs, next, mem) {
            Some(t) => {
                r.rip = t;
                emul == Emul::JmpInd || push(&mut r, next, mem)
            }
            None => false,
        },
        Emul::Ret(extra) => match mem.read_u64(regs.rsp) {
            Some(t) => {
                r.rip = t;
                r.rsp = regs.rsp.wrapping_add(8).wrapping_add(u64::from(extra));
                true
            }
            None => false,
        },
    };
    if ok {
        *regs = r;
    }
    ok
}

fn push(r: &mut Regs, v: u64, mem: &mut dyn EmuMem) -> bool {
    let sp = r.rsp.wrapping_sub(8);
    if mem.write_u64(sp, v) {
        r.rsp = sp;
        true
    } else {
        false
    }
}

fn indirect_target(i: &Instruction, regs: &Regs, next: u64, mem: &mut dyn EmuMem) -> Option<u64> {
    match i.op_kind(0) {
        OpKind::Register => reg_value(regs, i.op_register(0), next),
        OpKind::Memory => {
            let ea = i.virtual_address(0, 0, |reg, _, _| reg_value(regs, reg, next))?;
            mem.read_u64(ea)
        }
        _ => None,
    }
}

/// An instruction relocated into an out-of-line slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relocated {
    /// Code for the slot: the instruction, then a jump back to the next instruction.
    pub code: Vec<u8>,
    /// Offset of the jump back in `code` (the relocated instruction's length).
    pub jump_offset: u8,
}

/// Relocates `insn` (decoded at its run-time address) to `slot` and appends
/// a jump to the instruction that follows it (`agent_loader::reloc`, the
/// relocator the in-process stubs use too). `None` when it cannot be
/// encoded there (RIP-relative operand out of ±2 GiB), when the jump back
/// is out of rel32 reach, or when it does not fit a slot.
pub fn relocate(insn: &Insn, slot: u64) -> Option<Relocated> {
    let res = reloc::relocate(&[insn.instr], slot, Some(insn.instr.next_ip())).ok()?;
    let jump_offset = u8::try_from(res.jump_back?).ok()?;
    if res.code.len() > OOL_SLOT_BYTES {
        return None;
    }
    Some(Relocated {
        code: res.code,
        jump_offset,
    })
}

/// Whether `rax` holds one of the kernel's syscall-restart codes (the
/// interrupted system call will be restarted by rewinding RIP by 2).
pub fn is_restart_code(rax: u64) -> bool {
    matches!(rax as i64, -512 | -513 | -514 | -516)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory where only `[ok, ok + 4096)` is accessible, reading 0x11s.
    struct OnePage {
        ok: u64,
    }

    impl FaultMem for OnePage {
        fn accessible(&mut self, addr: u64, len: u64, _write: bool) -> bool {
            addr >= self.ok && addr.saturating_add(len) <= self.ok + 4096
        }
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            let ok = self.accessible(addr, buf.len() as u64, false);
            buf.fill(0x11);
            ok
        }
    }

    fn predict(bytes: &[u8], set: impl FnOnce(&mut Regs)) -> Option<i32> {
        let insn = decode(0x401000, bytes).unwrap();
        let mut r = crate::sys::regs::zero_regs();
        r.rsp = 0x7000_0800;
        set(&mut r);
        let mut info = InstructionInfoFactory::new();
        predict_fault(&insn, &r, &mut info, &mut OnePage { ok: 0x7000_0000 })
    }

    #[test]
    fn faults_are_predicted_from_operands_and_registers() {
        // mov (%rax),%rdx
        assert_eq!(
            predict(&[0x48, 0x8b, 0x10], |r| r.rax = 0),
            Some(libc::SIGSEGV)
        );
        assert_eq!(predict(&[0x48, 0x8b, 0x10], |r| r.rax = 0x7000_0010), None);
        // The last 4 bytes of the page are readable, not 8.
        assert_eq!(
            predict(&[0x48, 0x8b, 0x10], |r| r.rax = 0x7000_0ffc),
            Some(libc::SIGSEGV)
        );
        // lea (%rax),%rdx reads nothing.
        assert_eq!(predict(&[0x48, 0x8d, 0x10], |r| r.rax = 0), None);
        // push %rbp writes below rsp.
        assert_eq!(predict(&[0x55], |_| {}), None);
        assert_eq!(
            predict(&[0x55], |r| r.rsp = 0x7000_0000),
            Some(libc::SIGSEGV)
        );
        // div %rcx: by zero, quotient too large, fine.
        assert_eq!(
            predict(&[0x48, 0xf7, 0xf1], |r| r.rcx = 0),
            Some(libc::SIGFPE)
        );
        assert_eq!(
            predict(&[0x48, 0xf7, 0xf1], |r| (r.rcx, r.rdx) = (1, 1)),
            Some(libc::SIGFPE)
        );
        assert_eq!(
            predict(&[0x48, 0xf7, 0xf1], |r| (r.rcx, r.rdx, r.rax) = (2, 1, 0)),
            None
        );
        // idiv %cl: -128 / -1 does not fit a byte; -128 / 2 does.
        assert_eq!(
            predict(&[0xf6, 0xf9], |r| (r.rax, r.rcx) = (0xff80, 0xff)),
            Some(libc::SIGFPE)
        );
        assert_eq!(
            predict(&[0xf6, 0xf9], |r| (r.rax, r.rcx) = (0xff80, 2)),
            None
        );
        // idiv %rcx: i64::MIN / -1 overflows.
        assert_eq!(
            predict(&[0x48, 0xf7, 0xf9], |r| {
                r.rax = 1 << 63;
                r.rdx = u64::MAX;
                r.rcx = u64::MAX;
            }),
            Some(libc::SIGFPE)
        );
        // div (%rax) with a divisor in memory (0x1111…): fine; unreadable: SIGSEGV.
        assert_eq!(predict(&[0x48, 0xf7, 0x30], |r| r.rax = 0x7000_0100), None);
        assert_eq!(
            predict(&[0x48, 0xf7, 0x30], |r| r.rax = 8),
            Some(libc::SIGSEGV)
        );
    }

    struct Mem(Vec<(u64, u64)>);
    impl EmuMem for Mem {
        fn read_u64(&mut self, addr: u64) -> Option<u64> {
            self.0
                .iter()
                .rev()
                .find(|(a, _)| *a == addr)
                .map(|(_, v)| *v)
        }
        fn write_u64(&mut self, addr: u64, value: u64) -> bool {
            self.0.push((addr, value));
            true
        }
    }

    fn regs() -> Regs {
        let mut r = crate::sys::regs::zero_regs();
        r.rsp = 0x7000_0000;
        r.rbp = 0x1234;
        r.rip = 0x40_1000;
        r
    }

    fn run(bytes: &[u8], r: &mut Regs, m: &mut Mem) -> StepKind {
        let insn = decode(r.rip, bytes).unwrap();
        let k = classify(&insn);
        if let StepKind::Emulate(e) = k {
            assert!(emulate(&insn, e, r, m));
        }
        k
    }

    #[test]
    fn prologue_is_emulated() {
        let mut r = regs();
        let mut m = Mem(vec![]);
        assert!(matches!(
            run(&[0xf3, 0x0f, 0x1e, 0xfa], &mut r, &mut m),
            StepKind::Emulate(Emul::Skip)
        ));
        assert_eq!(r.rip, 0x40_1004);
        run(&[0x55], &mut r, &mut m);
        assert_eq!((r.rsp, r.rip), (0x7000_0000 - 8, 0x40_1005));
        assert_eq!(m.read_u64(r.rsp), Some(0x1234));
        run(&[0x48, 0x89, 0xe5], &mut r, &mut m);
        assert_eq!(r.rbp, r.rsp);
        run(&[0x48, 0x83, 0xec, 0x10], &mut r, &mut m);
        assert_eq!(r.rsp, 0x7000_0000 - 0x18);
        run(&[0x41, 0x57], &mut r, &mut m); // push r15
        assert_eq!(r.rsp, 0x7000_0000 - 0x20);
        run(&[0x31, 0xc0], &mut r, &mut m);
        assert_eq!(r.eflags & (ZF | CF), ZF);
        let before = r.rip;
        run(&[0xe8, 0x10, 0, 0, 0], &mut r, &mut m);
        assert_eq!(r.rip, before + 5 + 0x10);
        assert_eq!(m.read_u64(r.rsp), Some(before + 5));
        run(&[0xc3], &mut r, &mut m);
        assert_eq!(r.rip, before + 5);
        // lea rax, [rip+0x100]
        let at = r.rip;
        run(&[0x48, 0x8d, 0x05, 0x00, 0x01, 0, 0], &mut r, &mut m);
        assert_eq!(r.rax, at + 7 + 0x100);
        // sub flags: 0 - 1 sets CF and SF.
        r.rbx = 0;
        run(&[0x48, 0x83, 0xeb, 0x01], &mut r, &mut m);
        assert_eq!(r.rbx, u64::MAX);
        assert_eq!(r.eflags & (CF | SF | ZF), CF | SF);
        // mov eax, ecx zero-extends.
        r.rcx = 0xffff_ffff_1234_5678;
        r.rax = u64::MAX;
        run(&[0x89, 0xc8], &mut r, &mut m);
        assert_eq!(r.rax, 0x1234_5678);
    }

    #[test]
    fn others_go_out_of_line_and_relocate() {
        // mov rax, [rip+0x1000]
        let insn = decode(0x40_1000, &[0x48, 0x8b, 0x05, 0x00, 0x10, 0, 0]).unwrap();
        assert_eq!(classify(&insn), StepKind::OutOfLine);
        let rel = relocate(&insn, 0x40_9000).unwrap();
        let back = decode(0x40_9000, &rel.code).unwrap();
        assert_eq!(back.instr.ip_rel_memory_address(), 0x40_1007 + 0x1000);
        assert_eq!(usize::from(rel.jump_offset), back.len as usize);
        let j = decode(
            0x40_9000 + u64::from(rel.jump_offset),
            &rel.code[rel.jump_offset as usize..],
        )
        .unwrap();
        assert_eq!(j.instr.near_branch_target(), 0x40_1007);
        // jne short
        let insn = decode(0x40_1000, &[0x75, 0x10]).unwrap();
        assert_eq!(classify(&insn), StepKind::OutOfLine);
        assert!(relocate(&insn, 0x40_9000).is_some());
        // far away RIP-relative cannot be relocated.
        let insn = decode(0x40_1000, &[0x48, 0x8b, 0x05, 0x00, 0x10, 0, 0]).unwrap();
        assert!(relocate(&insn, 0x7f00_0000_0000).is_none());
    }

    #[test]
    fn dr7_encoding() {
        assert_eq!(
            dr7_bits(0, 8, WatchKind::Write),
            1 | (0b01 << 16) | (0b10 << 18)
        );
        assert_eq!(dr7_bits(3, 1, WatchKind::Exec), 1 << 6);
        assert_eq!(debugreg_offset(0), 848);
    }
}
