//! Tail calls through a function pointer: an indirect `jmp` that leaves
//! its function (`jmp *%rax` after the epilogue, `jmp *0x90(%rax)`), which
//! unlike a jump table's cannot land inside it, so that windows past the
//! function's entry may go there (window rule 3). CPython's `tp_traverse`
//! functions end in `return visit(op, arg)`, SQLite's mutex and memory
//! wrappers in calls of the configured methods, OpenSSL's free functions
//! in the type's own.
//!
//! A `jmp` is taken for one when all of these hold:
//!
//! * at the `jmp` the stack pointer is back where it was at the function's
//!   entry: the return address is on top, the frame is gone (found by
//!   following `push`/`pop`/`sub`/`add`/`lea` of `rsp`, `mov %rsp, %rbp`
//!   and `leave` along every path from the entry; any other change of
//!   `rsp`, or two paths that disagree, and it is not);
//! * a memory operand of the `jmp` has no index register (a table's has)
//!   and is not on the stack; a register operand holds, on every path from
//!   the entry, a value the function was given (an argument, a callee-saved
//!   register, a call's result) or loaded from memory without an index and
//!   not from the stack (a pointer in a structure or the module's data), or
//!   a copy of one: never one computed (a table's entry plus its base, a
//!   `lea`, an immediate);
//! * the function never puts the address of one of its own instructions
//!   but its entry in a register (`lea label(%rip)`, `mov $label`): no
//!   computed `goto` can come from it;
//! * a target loaded from the module's data (`jmp *ptr(%rip)`) does not
//!   point inside the function.
//!
//! A computed `goto` of a function that keeps no frame, through a label
//! address it loads from a static pointer, would pass; compilers emit
//! labels-as-values for interpreters, whose dispatch runs inside their
//! frame.

use crate::insn::{direct_branch, written};
use iced_x86::{Code, FlowControl, Instruction, Mnemonic, OpKind, Register};
use rustc_hash::FxHashMap as HashMap;

/// The stack pointer at an instruction, relative to the function's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    /// `rsp` is the entry's plus `.0`; `rbp` the entry's `rsp` plus `.1`
    /// when it was set from `rsp` (`mov %rsp, %rbp`).
    At(i64, Option<i64>),
    /// Not known (paths disagree, or an instruction this does not follow).
    Unknown,
}

/// The stack level at each instruction of a function (`None`: not
/// reached from its entry by the paths followed).
struct StackLevels(Vec<Option<Level>>);

impl StackLevels {
    /// The levels of `insns`, a function's instructions in order from its
    /// entry.
    fn of(insns: &[Instruction]) -> StackLevels {
        let mut f = iced_x86::InstructionInfoFactory::new();
        StackLevels(forward(
            insns,
            Level::At(0, None),
            |i, s| step(i, s, &mut f),
            |a, b| if a == b { a } else { Level::Unknown },
        ))
    }

    /// Whether at instruction `k` the stack pointer is the entry's.
    fn at_entry_level(&self, k: usize) -> bool {
        matches!(self.0.get(k), Some(Some(Level::At(0, _))))
    }
}

/// Registers (bit `n` for the `n`-th of [`GPRS`]) that hold, at each
/// instruction, a value the function was given or loaded as a pointer
/// (see the module's rules); `None`: not reached.
struct Clean(Vec<Option<u16>>);

/// The 16 general-purpose registers, in the order of [`Clean`]'s bits.
const GPRS: [Register; 16] = [
    Register::RAX,
    Register::RCX,
    Register::RDX,
    Register::RBX,
    Register::RSP,
    Register::RBP,
    Register::RSI,
    Register::RDI,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
    Register::R12,
    Register::R13,
    Register::R14,
    Register::R15,
];

fn bit(r: Register) -> Option<u16> {
    let f = r.full_register();
    GPRS.iter().position(|&g| g == f).map(|n| 1 << n)
}

impl Clean {
    /// The clean registers at each of `insns` (a function's, from its
    /// entry); `start..end` its code, `read` the module's bytes.
    fn of(
        insns: &[Instruction],
        start: u64,
        end: u64,
        read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    ) -> Clean {
        let mut f = iced_x86::InstructionInfoFactory::new();
        let frame = keeps_a_frame_pointer(insns);
        Clean(forward(
            insns,
            u16::MAX,
            |i, c| clean_after(i, c, start, end, frame, read, &mut f),
            |a, b| a & b,
        ))
    }

    /// Whether register `r` is clean at instruction `k`.
    fn is_clean(&self, k: usize, r: Register) -> bool {
        match (self.0.get(k), bit(r)) {
            (Some(Some(c)), Some(b)) => c & b != 0,
            _ => false,
        }
    }
}

/// A forward dataflow over the function's instructions `insns` (in order
/// from its entry): the state at each (`None`: not reached), from `entry`
/// at the first, `step` across each instruction and `merge` where paths
/// join, until nothing changes.
fn forward<S: Copy + PartialEq>(
    insns: &[Instruction],
    entry: S,
    mut step: impl FnMut(&Instruction, S) -> S,
    merge: impl Fn(S, S) -> S,
) -> Vec<Option<S>> {
    let at: HashMap<u64, usize> = insns.iter().enumerate().map(|(k, i)| (i.ip(), k)).collect();
    let mut st: Vec<Option<S>> = vec![None; insns.len()];
    if insns.is_empty() {
        return st;
    }
    st[0] = Some(entry);
    let mut work = vec![0usize];
    while let Some(k) = work.pop() {
        let Some(s) = st[k] else { continue };
        let i = &insns[k];
        let out = step(i, s);
        let fall = matches!(
            i.flow_control(),
            FlowControl::Next
                | FlowControl::Call
                | FlowControl::IndirectCall
                | FlowControl::ConditionalBranch
        );
        let jump = direct_branch(i)
            .then(|| at.get(&i.near_branch_target()).copied())
            .flatten();
        for n in fall.then_some(k + 1).into_iter().chain(jump) {
            if n >= insns.len() {
                continue;
            }
            let merged = st[n].map_or(out, |old| merge(old, out));
            if st[n] != Some(merged) {
                st[n] = Some(merged);
                work.push(n);
            }
        }
    }
    st
}

/// The clean registers after `i`, `c` before it.
/// Whether the function points `rbp` at its stack (`mov rbp, rsp`, `lea
/// rbp, [rsp+d]`, `enter`): then a load through `rbp` is one from the
/// stack; otherwise `rbp` is a register like the others (SQLite's
/// `sqlite3Malloc` keeps its configuration's address there).
fn keeps_a_frame_pointer(insns: &[Instruction]) -> bool {
    insns.iter().any(|i| {
        i.mnemonic() == Mnemonic::Enter
            || (i.op_count() == 2
                && i.op0_kind() == OpKind::Register
                && i.op0_register().full_register() == Register::RBP
                && match (i.mnemonic(), i.op1_kind()) {
                    (Mnemonic::Mov, OpKind::Register) => {
                        i.op1_register().full_register() == Register::RSP
                    }
                    (Mnemonic::Lea, OpKind::Memory) => i.memory_base() == Register::RSP,
                    _ => false,
                })
    })
}

fn clean_after(
    i: &Instruction,
    c: u16,
    start: u64,
    end: u64,
    frame: bool,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    f: &mut iced_x86::InstructionInfoFactory,
) -> u16 {
    // A call leaves its result in rax and garbage in the other
    // caller-saved registers.
    if matches!(
        i.flow_control(),
        FlowControl::Call | FlowControl::IndirectCall
    ) {
        let clobbered = [
            Register::RCX,
            Register::RDX,
            Register::RSI,
            Register::RDI,
            Register::R8,
            Register::R9,
            Register::R10,
            Register::R11,
        ];
        let mut out = c | bit(Register::RAX).unwrap_or(0);
        for r in clobbered {
            out &= !bit(r).unwrap_or(0);
        }
        return out;
    }
    let mut out = c;
    for w in written(f, i) {
        let Some(b) = bit(w) else { continue };
        let dest = i.op_count() > 0
            && i.op0_kind() == OpKind::Register
            && i.op0_register().full_register() == w.full_register();
        let size = if dest { i.op0_register().size() } else { 0 };
        let keeps = dest
            && i.mnemonic() == Mnemonic::Mov
            && match i.op1_kind() {
                // A copy (whole, or zero-extending 32 bits): clean if its
                // source is.
                OpKind::Register => size >= 4 && bit(i.op1_register()).is_some_and(|s| c & s != 0),
                // A pointer loaded from memory, not through an index, not
                // from the stack; from the module's data, not one into the
                // function.
                OpKind::Memory => {
                    size == 8
                        && i.memory_index() == Register::None
                        && i.memory_base() != Register::RSP
                        && !(frame && i.memory_base() == Register::RBP)
                        && (!i.is_ip_rel_memory_operand()
                            || read(i.ip_rel_memory_address(), 8).is_some_and(|v| {
                                let v = u64::from_le_bytes(v[..8].try_into().unwrap_or([0; 8]));
                                !(v > start && v < end)
                            }))
                }
                _ => false,
            };
        if keeps {
            out |= b;
        } else {
            out &= !b;
        }
    }
    out
}

/// The level after `i`, `s` before it.
fn step(i: &Instruction, s: Level, f: &mut iced_x86::InstructionInfoFactory) -> Level {
    let Level::At(d, bp) = s else {
        return Level::Unknown;
    };
    // Writes of rsp or rbp other than as the destination operand (`xchg`
    // with either second) are not followed.
    let hidden = |f: &mut iced_x86::InstructionInfoFactory, r: Register| written(f, i).contains(&r);
    let imm = |i: &Instruction| match i.op1_kind() {
        OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate8to32 => {
            Some(i.immediate(1) as i64)
        }
        OpKind::Immediate32 | OpKind::Immediate8 => Some(i.immediate(1) as i64),
        _ => None,
    };
    let to_rsp =
        i.op_count() > 0 && i.op0_kind() == OpKind::Register && i.op0_register() == Register::RSP;
    let to_rbp = i.op_count() > 0
        && i.op0_kind() == OpKind::Register
        && i.op0_register().full_register() == Register::RBP;
    match i.mnemonic() {
        Mnemonic::Push => match i.code() {
            Code::Push_r64 | Code::Pushq_imm32 | Code::Pushq_imm8 | Code::Push_rm64 => {
                Level::At(d - 8, bp)
            }
            _ => Level::Unknown,
        },
        Mnemonic::Pop => match i.code() {
            Code::Pop_r64 if to_rsp => Level::Unknown,
            Code::Pop_r64 if to_rbp => Level::At(d + 8, None),
            Code::Pop_r64 | Code::Pop_rm64 => Level::At(d + 8, bp),
            _ => Level::Unknown,
        },
        Mnemonic::Sub if to_rsp => imm(i).map_or(Level::Unknown, |v| Level::At(d - v, bp)),
        Mnemonic::Add if to_rsp => imm(i).map_or(Level::Unknown, |v| Level::At(d + v, bp)),
        Mnemonic::Lea if to_rsp => {
            if i.memory_index() != Register::None {
                return Level::Unknown;
            }
            let disp = i.memory_displacement64() as i64;
            match (i.memory_base(), bp) {
                (Register::RSP, _) => Level::At(d + disp, bp),
                (Register::RBP, Some(b)) => Level::At(b + disp, bp),
                _ => Level::Unknown,
            }
        }
        Mnemonic::Mov
            if to_rbp
                && i.op0_register() == Register::RBP
                && i.op1_kind() == OpKind::Register
                && i.op1_register() == Register::RSP =>
        {
            Level::At(d, Some(d))
        }
        Mnemonic::Mov
            if to_rsp && i.op1_kind() == OpKind::Register && i.op1_register() == Register::RBP =>
        {
            bp.map_or(Level::Unknown, |b| Level::At(b, bp))
        }
        Mnemonic::Leave => bp.map_or(Level::Unknown, |b| Level::At(b + 8, None)),
        // A call's callee pops what it pushes; its return leaves `rsp` as
        // it was (and may change `rbp` only to restore it).
        Mnemonic::Call => Level::At(d, bp),
        _ if to_rsp || hidden(f, Register::RSP) => Level::Unknown,
        _ if to_rbp || hidden(f, Register::RBP) => Level::At(d, None),
        _ => Level::At(d, bp),
    }
}

/// Whether some instruction of `insns` puts the address of an instruction
/// of the function (`start..end`, its entry excepted) in a register or
/// memory: a `lea label(%rip)`, or an immediate such as `mov $label, %eax`.
fn takes_own_addresses(insns: &[Instruction], start: u64, end: u64) -> bool {
    let inside = |a: u64| a > start && a < end;
    insns.iter().any(|i| {
        (i.mnemonic() == Mnemonic::Lea
            && i.is_ip_rel_memory_operand()
            && inside(i.ip_rel_memory_address()))
            || (0..i.op_count()).any(|n| match i.op_kind(n) {
                OpKind::Immediate32 | OpKind::Immediate64 | OpKind::Immediate32to64 => {
                    inside(i.immediate(n))
                }
                _ => false,
            })
    })
}

/// What the rules of this module need of one function: its stack levels
/// and its clean registers (each worked out at the first `jmp` that needs
/// it: a function that takes its own addresses needs neither, a `jmp`
/// through memory no clean registers), whether it takes its own
/// addresses, its code's bounds (link-time).
pub struct Function {
    levels: std::cell::OnceCell<StackLevels>,
    clean: std::cell::OnceCell<Clean>,
    own_addresses: bool,
    start: u64,
    end: u64,
}

impl Function {
    /// The analysis of `insns`, a function's instructions from its entry
    /// at `start` to `end` (its costly parts made when first asked).
    pub fn of(insns: &[Instruction], start: u64, end: u64) -> Function {
        Function {
            levels: std::cell::OnceCell::new(),
            clean: std::cell::OnceCell::new(),
            own_addresses: takes_own_addresses(insns, start, end),
            start,
            end,
        }
    }

    /// Whether the indirect `jmp` at `insns[k]` is a tail call through a
    /// function pointer (the rules of this module). `insns` are those the
    /// function was made `of`; `read` gives the module's bytes at a
    /// link-time address.
    pub fn is_pointer_tail_call(
        &self,
        insns: &[Instruction],
        k: usize,
        read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
    ) -> bool {
        is_pointer_tail_call(self, insns, k, read)
    }
}

fn is_pointer_tail_call(
    f: &Function,
    insns: &[Instruction],
    k: usize,
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> bool {
    let (start, end) = (f.start, f.end);
    let j = &insns[k];
    // Every rule must hold: the operand's (a look at the `jmp` and at most
    // a read of 8 bytes) first, then the function's (an analysis of all
    // its instructions, made once).
    let at_entry_level = || {
        f.levels
            .get_or_init(|| StackLevels::of(insns))
            .at_entry_level(k)
    };
    if f.own_addresses {
        return false;
    }
    if j.op0_kind() != OpKind::Memory {
        return j.op0_kind() == OpKind::Register
            && at_entry_level()
            && f.clean
                .get_or_init(|| Clean::of(insns, start, end, read))
                .is_clean(k, j.op0_register());
    }
    if j.memory_index() != Register::None
        || matches!(
            j.memory_base(),
            Register::RSP | Register::RBP | Register::ESP
        )
    {
        return false;
    }
    let fixed = if j.is_ip_rel_memory_operand() {
        Some(j.ip_rel_memory_address())
    } else if j.memory_base() == Register::None {
        Some(j.memory_displacement64())
    } else {
        None
    };
    if let Some(at) = fixed {
        // `jmp *ptr(%rip)`, `jmp *ptr`: what the file holds there (a GOT
        // slot: 0 or the PLT; a pointer the dynamic linker relocates) must
        // not be inside the function.
        let Some(b) = read(at, 8) else {
            return false;
        };
        let v = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
        return !(v > start && v < end) && at_entry_level();
    }
    at_entry_level()
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn decode(code: &[u8]) -> Vec<Instruction> {
        Decoder::with_ip(64, code, 0x1000, DecoderOptions::NONE)
            .iter()
            .collect()
    }

    fn none(_: u64, _: usize) -> Option<Vec<u8>> {
        None
    }

    /// `k` of the first indirect `jmp` of `insns`.
    fn jmp_of(insns: &[Instruction]) -> usize {
        insns
            .iter()
            .position(|i| i.flow_control() == FlowControl::IndirectBranch)
            .unwrap()
    }

    fn tail(code: &[u8]) -> bool {
        let insns = decode(code);
        let k = jmp_of(&insns);
        let end = 0x1000 + code.len() as u64;
        Function::of(&insns, 0x1000, end).is_pointer_tail_call(&insns, k, &none)
    }

    #[test]
    fn calls_through_a_pointer_after_the_epilogue() {
        // CPython's type_traverse: push r12; push rbp; push rbx; mov rbx,rsi;
        // ...; mov rax,rbx; pop rbx; pop rbp; pop r12; jmp rax
        assert!(tail(&[
            0x41, 0x54, 0x55, 0x53, 0x48, 0x89, 0xf3, 0x48, 0x89, 0xd8, 0x5b, 0x5d, 0x41, 0x5c,
            0xff, 0xe0,
        ]));
        // OpenSSL's: push rbp; mov rbp,rsp; push r12; sub rsp,8; ...;
        // mov r12,[rbp-8]; leave; jmp rax
        assert!(tail(&[
            0x55, 0x48, 0x89, 0xe5, 0x41, 0x54, 0x48, 0x83, 0xec, 0x08, 0x4c, 0x8b, 0x65, 0xf8,
            0xc9, 0xff, 0xe0,
        ]));
        // SQLite's sqlite3Malloc, rbp no frame pointer: push r12; push rbp;
        // push rbx; mov rbp,[rip+X]; mov rax,[rbp+0x20]; pop rbx; pop rbp;
        // pop r12; jmp rax
        assert!(tail(&[
            0x41, 0x54, 0x55, 0x53, 0x48, 0x8b, 0x2d, 0x00, 0x10, 0x00, 0x00, 0x48, 0x8b, 0x45,
            0x20, 0x5b, 0x5d, 0x41, 0x5c, 0xff, 0xe0,
        ]));
        // SQLite's: test rdi,rdi; je L; mov rax,[rip+X]; jmp [rax+0x90]; L: ret
        assert!(tail(&[
            0x48, 0x85, 0xff, 0x74, 0x0d, 0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0xff, 0xa0,
            0x90, 0x00, 0x00, 0x00, 0xc3,
        ]));
        // A conditional path that pushed once more joins before the jmp:
        // the level is not known. test edi,edi; je L; push rbx; L: jmp rax
        assert!(!tail(&[0x85, 0xff, 0x74, 0x01, 0x53, 0xff, 0xe0]));
    }

    #[test]
    fn jumps_inside_a_frame_or_through_a_table_are_not() {
        // Inside its frame (a direct-threaded interpreter's dispatch):
        // push rbx; mov rax,[rbx]; jmp rax
        assert!(!tail(&[0x53, 0x48, 0x8b, 0x03, 0xff, 0xe0]));
        // Through a table: jmp [rax*8+0x2000]
        assert!(!tail(&[0xff, 0x24, 0xc5, 0x00, 0x20, 0x00, 0x00]));
        // Off the stack through the frame pointer: push rbp; mov rbp,rsp;
        // mov rax,[rbp+8]; pop rbp; jmp rax
        assert!(!tail(&[
            0x55, 0x48, 0x89, 0xe5, 0x48, 0x8b, 0x45, 0x08, 0x5d, 0xff, 0xe0,
        ]));
        // Off the stack: jmp [rsp+8]
        assert!(!tail(&[0xff, 0x64, 0x24, 0x08]));
        // The function takes a label's address: lea rax,[rip+1]; jmp rax; nop
        assert!(!tail(&[
            0x48, 0x8d, 0x05, 0x02, 0x00, 0x00, 0x00, 0xff, 0xe0, 0x90
        ]));
        // rsp changed in a way not followed: mov rsp,rdi; jmp rax
        assert!(!tail(&[0x48, 0x89, 0xfc, 0xff, 0xe0]));
        // A pointer in the module's data to inside the function.
        let code = [0xff, 0x25, 0xfa, 0x0f, 0x00, 0x00, 0x90, 0x90]; // jmp [rip+0xffa] (0x2000)
        let insns = decode(&code);
        let inside = |_: u64, _: usize| Some(0x1006u64.to_le_bytes().to_vec());
        let outside = |_: u64, _: usize| Some(0x5000u64.to_le_bytes().to_vec());
        let f = Function::of(&insns, 0x1000, 0x1008);
        assert!(!f.is_pointer_tail_call(&insns, 0, &inside));
        assert!(f.is_pointer_tail_call(&insns, 0, &outside));
        // A table's entry plus its base, in a function with no frame:
        // lea rdx,[rip+X]; movsxd rax,[rdx+rdi*4]; add rax,rdx; jmp rax
        assert!(!tail(&[
            0x48, 0x8d, 0x15, 0x00, 0x10, 0x00, 0x00, 0x48, 0x63, 0x04, 0xba, 0x48, 0x01, 0xd0,
            0xff, 0xe0,
        ]));
        // A value computed: mov eax,0x5000; jmp rax
        assert!(!tail(&[0xb8, 0x00, 0x50, 0x00, 0x00, 0xff, 0xe0]));
        // A byte loaded into a pointer: mov al,[rdi]; jmp rax
        assert!(!tail(&[0x8a, 0x07, 0xff, 0xe0]));
        // rsp exchanged (not followed): xchg rax,rsp; jmp rax
        assert!(!tail(&[0x48, 0x94, 0xff, 0xe0]));
    }
}
