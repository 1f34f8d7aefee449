//! Which instructions a probe's jump may replace, and why a site cannot be
//! patched. The rules (each refusal names its rule; the site is then not
//! armed, and wprobe says which and why):
//!
//! 1. The window is whole instructions from the probe address (after an
//!    `endbr64` there, which stays in place: indirect branches land on it)
//!    until at least 5 bytes, and ends inside the function (its symbol's
//!    size) — else *too short*.
//! 2. No instruction but the last may transfer control (a branch inside
//!    the window would leave the relocated copy half-run), and none may be
//!    a `call` (its return address would point into the stub: unwinders,
//!    stack walkers and a thread returning after the patch is removed
//!    would see it), a `syscall`/`int`/`sysenter` (a signal or a restarted
//!    system call would resume inside the window), `xbegin`, or `loop`/
//!    `jrcxz` (rel8 only).
//! 3. No instruction after the first is a branch target: direct branches
//!    anywhere in the module (the caller's set, from a sweep of its
//!    executable sections), and, for a window that does not start at its
//!    function's entry, no indirect `jmp` in the function (a jump table
//!    could land anywhere in it).
//! 4. RIP-relative operands are re-displaced by the block encoder; one out
//!    of rel32 reach of the stub fails when the stub is generated.
//! 5. At attach, no thread may stand inside the window (checked by the
//!    caller with every thread stopped).

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic};
use std::collections::HashSet;

use crate::stub::{JMP_LEN, Site};

/// Why a site cannot be patched with a jump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The function ends before 5 bytes of whole instructions from the site.
    TooShort {
        /// Bytes from the site to the function's end.
        room: u64,
    },
    /// The bytes do not decode.
    Undecodable {
        /// The first byte that does not.
        at: u64,
    },
    /// An instruction in the window that cannot be displaced.
    Instruction {
        /// Its address.
        at: u64,
        /// What it is.
        what: String,
        /// Why not.
        why: &'static str,
    },
    /// A branch targets an instruction inside the window.
    BranchTarget {
        /// The target.
        at: u64,
    },
    /// Mid-function window in a function with an indirect jump.
    IndirectJump {
        /// The indirect jump.
        at: u64,
    },
    /// No function symbol with a size covers the site.
    NoFunction,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::TooShort { room } => write!(
                f,
                "function too short: {room} bytes from the probe to its end, a jump needs 5"
            ),
            Refusal::Undecodable { at } => write!(f, "invalid instruction at {at:#x}"),
            Refusal::Instruction { at, what, why } => {
                write!(
                    f,
                    "`{what}` at {at:#x} in the 5 bytes the jump replaces: {why}"
                )
            }
            Refusal::BranchTarget { at } => write!(
                f,
                "{at:#x}, inside the 5 bytes the jump replaces, is a branch target"
            ),
            Refusal::IndirectJump { at } => write!(
                f,
                "the function has an indirect jump at {at:#x} (a jump table may land inside the \
                 5 bytes the jump replaces)"
            ),
            Refusal::NoFunction => write!(
                f,
                "no function symbol covers it (branch targets in the window cannot be ruled out)"
            ),
        }
    }
}

/// The function around a site, as the caller found it in the module.
#[derive(Clone, Copy, Debug)]
pub struct Function<'a> {
    /// Run-time address of its first byte.
    pub start: u64,
    /// Its code (from the file), `start..start + code.len()`.
    pub code: &'a [u8],
    /// The module's load bias (run-time minus link-time addresses; the
    /// branch targets are link-time addresses).
    pub bias: u64,
}

/// Direct branch targets of a module's code (link-time addresses): every
/// `jmp`/`jcc`/`call`/`loop` with an immediate target, from a linear sweep
/// of each executable section.
#[derive(Clone, Debug, Default)]
pub struct BranchTargets(pub HashSet<u64>);

impl BranchTargets {
    /// Adds the direct branch targets of `code`, loaded at `addr`.
    pub fn sweep(&mut self, code: &[u8], addr: u64) {
        let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
        let mut i = Instruction::default();
        while d.can_decode() {
            d.decode_out(&mut i);
            if i.is_invalid() {
                continue;
            }
            if matches!(
                i.flow_control(),
                FlowControl::UnconditionalBranch
                    | FlowControl::ConditionalBranch
                    | FlowControl::Call
                    | FlowControl::XbeginXabortXend
            ) && i.op_count() > 0
                && matches!(
                    i.op0_kind(),
                    iced_x86::OpKind::NearBranch16
                        | iced_x86::OpKind::NearBranch32
                        | iced_x86::OpKind::NearBranch64
                )
            {
                self.0.insert(i.near_branch_target());
            }
        }
    }
}

/// Chooses the window of the probe at `probe` in `func` (run-time
/// addresses). `probe` must start an instruction of the function.
pub fn plan(probe: u64, func: Function<'_>, targets: &BranchTargets) -> Result<Site, Refusal> {
    let end = func.start + func.code.len() as u64;
    if probe < func.start || probe >= end {
        return Err(Refusal::NoFunction);
    }
    let code = &func.code[(probe - func.start) as usize..];
    let mut d = Decoder::with_ip(64, code, probe, DecoderOptions::NONE);
    let mut start = probe;
    let mut displaced: Vec<Instruction> = Vec::new();
    let mut len = 0usize;
    while len < JMP_LEN {
        if !d.can_decode() {
            return Err(Refusal::TooShort { room: end - start });
        }
        let i = d.decode();
        if i.is_invalid() {
            return Err(Refusal::Undecodable { at: i.ip() });
        }
        if i.next_ip() > end {
            return Err(Refusal::TooShort { room: end - start });
        }
        if displaced.is_empty() && i.ip() == start && i.code() == Code::Endbr64 {
            start = i.next_ip();
            continue;
        }
        if let Some(prev) = displaced.last()
            && prev.flow_control() != FlowControl::Next
        {
            return Err(Refusal::Instruction {
                at: prev.ip(),
                what: mnemonic(prev),
                why: "control leaves the window before its end",
            });
        }
        refuse_instruction(&i)?;
        len += i.len();
        displaced.push(i);
    }
    for i in &displaced[1..] {
        if targets.0.contains(&i.ip().wrapping_sub(func.bias)) {
            return Err(Refusal::BranchTarget { at: i.ip() });
        }
    }
    if probe != func.start {
        let mut d = Decoder::with_ip(64, func.code, func.start, DecoderOptions::NONE);
        let mut i = Instruction::default();
        while d.can_decode() {
            d.decode_out(&mut i);
            if i.flow_control() == FlowControl::IndirectBranch {
                return Err(Refusal::IndirectJump { at: i.ip() });
            }
        }
    }
    Ok(Site {
        probe,
        addr: start,
        displaced,
        len,
    })
}

/// The instruction's mnemonic, lower case (`call`, `syscall`).
fn mnemonic(i: &Instruction) -> String {
    format!("{:?}", i.mnemonic()).to_ascii_lowercase()
}

fn refuse_instruction(i: &Instruction) -> Result<(), Refusal> {
    let why = match i.flow_control() {
        FlowControl::Call | FlowControl::IndirectCall => {
            Some("a call's return address would point into the stub")
        }
        FlowControl::Interrupt => Some("a system call or interrupt would resume inside the window"),
        FlowControl::XbeginXabortXend => Some("transactional memory is not relocated"),
        _ => None,
    }
    .or(match i.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => {
            Some("a system call would resume inside the window")
        }
        Mnemonic::Loop | Mnemonic::Loope | Mnemonic::Loopne | Mnemonic::Jrcxz | Mnemonic::Jecxz => {
            Some("rel8-only branches are not relocated")
        }
        _ => None,
    });
    match why {
        Some(why) => Err(Refusal::Instruction {
            at: i.ip(),
            what: mnemonic(i),
            why,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(code: &[u8]) -> Function<'_> {
        Function {
            start: 0x1000,
            code,
            bias: 0,
        }
    }

    #[test]
    fn prologue_windows_and_refusals() {
        let t = BranchTargets::default();
        // push rbp; mov rbp,rsp; mov [rbp-8],rdi; ret
        let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0x7d, 0xf8, 0xc3];
        let s = plan(0x1000, f(&code), &t).unwrap();
        assert_eq!((s.addr, s.len, s.displaced.len()), (0x1000, 8, 3));
        // endbr64 is kept in place
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0x7d, 0xf8, 0xc3,
        ];
        let s = plan(0x1000, f(&code), &t).unwrap();
        assert_eq!((s.probe, s.addr, s.len), (0x1000, 0x1004, 8));
        // too short: xor eax,eax; ret
        assert_eq!(
            plan(0x1000, f(&[0x31, 0xc0, 0xc3]), &t).unwrap_err(),
            Refusal::TooShort { room: 3 }
        );
        // a call in the window
        let code = [0x55, 0xe8, 0, 0, 0, 0, 0x5d, 0xc3];
        assert!(matches!(
            plan(0x1000, f(&code), &t),
            Err(Refusal::Instruction { at: 0x1001, .. })
        ));
        // a branch target inside the window
        let mut t2 = BranchTargets::default();
        t2.0.insert(0x1001);
        let code = [0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
        assert_eq!(
            plan(0x1000, f(&code), &t2).unwrap_err(),
            Refusal::BranchTarget { at: 0x1001 }
        );
        // the sweep finds a backward jump to entry+1
        let mut t3 = BranchTargets::default();
        let code = [0x55, 0x48, 0x89, 0xe5, 0xeb, 0xfb]; // jmp 0x1001
        t3.sweep(&code, 0x1000);
        assert!(t3.0.contains(&0x1001));
        // control flow before the window's end: jmp at the start
        let code = [0xeb, 0x03, 0x90, 0x90, 0x90, 0x90, 0x90, 0xc3];
        assert!(matches!(
            plan(0x1000, f(&code), &t),
            Err(Refusal::Instruction { at: 0x1000, .. })
        ));
        // mid-function in a function with an indirect jump
        let code = [0x90, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xff, 0xe0];
        assert_eq!(
            plan(0x1001, f(&code), &t).unwrap_err(),
            Refusal::IndirectJump { at: 0x1006 }
        );
    }
}
