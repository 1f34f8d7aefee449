//! Relocating x86-64 instructions to a new address: the one place wprobe
//! calls iced-x86's `BlockEncoder`. Used by the in-process stubs
//! ([`crate::stub`]: the displaced instructions of a probe's window, with
//! the stub's own instructions around them) and by the ptrace transport's
//! step-over (one displaced instruction in an out-of-line slot, the
//! runtime's `arch::relocate`).
//!
//! Displaced instructions keep their run-time addresses as IPs: the block
//! encoder re-encodes a RIP-relative operand for the new address (a
//! `[rip+disp]` that no longer reaches becomes `[eip+disp]` for a target in
//! the low 4 GiB, else the block fails), turns a branch that no longer
//! reaches into a longer form, and links a branch whose target is one of
//! the block's instructions to that instruction's new copy. Each caller
//! keeps what is its own: which instructions are rewritten before (the
//! stub's `lea` of a window address, its call emulation), the size a slot
//! may take, what a jump back out of reach means to it.

use anyhow::{Result, anyhow};
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Encoder, Instruction, InstructionBlock, OpKind,
    Register,
};

/// The IP [`relocate`] gives the k-th instruction of a block whose IP is 0
/// (an instruction of the caller's own, not a displaced one): `OWN_IP + k`.
/// No displaced branch targets these, and a caller's own branches between
/// its instructions can (`stub`'s flag restore jumps over its `std`).
pub const OWN_IP: u64 = u64::MAX - 0x1_0000;

/// The IP of the jump back [`relocate`] appends: one no branch can target
/// (its own target would make it `jmp $`).
const BACK_IP: u64 = u64::MAX - 0x100;

/// A block of instructions encoded at its new address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relocation {
    /// The code, to be written at the address the block was encoded for.
    pub code: Vec<u8>,
    /// Offset in `code` of the jump back, when one was asked for and it
    /// stayed a `jmp rel32`; `None` when its target is out of rel32 reach
    /// (the block encoder then made it `jmp [rip+0]` and a quadword).
    pub jump_back: Option<usize>,
    /// Offset in `code` of each instruction of the block, in its order
    /// (`u32::MAX` for one the block encoder replaced by another
    /// sequence).
    pub offsets: Vec<u32>,
}

/// Encodes `block` at address `at`, followed, when `back` is given, by a
/// `jmp back` (the instruction after the displaced ones, usually). An
/// instruction whose IP is 0 is one of the caller's own and gets the IP
/// `OWN_IP + k` (k its index in `block`); any other keeps its IP, which
/// must be its run-time address. Fails when an instruction cannot be
/// encoded at `at`: above all a RIP-relative operand out of rel32 reach
/// (iced-x86's message, e.g. "IP relative memory operand is too far away").
pub fn relocate(block: &[Instruction], at: u64, back: Option<u64>) -> Result<Relocation> {
    let mut v = Vec::with_capacity(block.len() + 1);
    v.extend(block.iter().enumerate().map(|(k, i)| {
        let mut i = *i;
        if i.ip() == 0 {
            i.set_ip(OWN_IP + k as u64);
        }
        i
    }));
    if let Some(back) = back {
        let mut jmp =
            Instruction::with_branch(Code::Jmp_rel32_64, back).map_err(|e| anyhow!("{e}"))?;
        jmp.set_ip(BACK_IP);
        v.push(jmp);
    }
    if let Some(r) = in_place(&v, at, back.is_some()) {
        return Ok(r);
    }
    by_block_encoder(v, at, back.is_some(), block.len())
}

/// Distance under which the block encoder may make a `jmp rel32` or a
/// `jcc rel32` short (rel8): [`in_place`] leaves such blocks to it.
const SHORT_REACH: u64 = 256;

/// The block `v` (IPs set, the jump back last when `back`) encoded
/// instruction after instruction at `at`, when that is what the block
/// encoder would make of it: no branch between the block's instructions
/// (which it links to their copies), no rel8 branch (which it makes
/// longer), no `jmp`/`jcc` within [`SHORT_REACH`] of its target (which it
/// may make shorter), every RIP-relative operand and branch in rel32 reach
/// of its new place (which it rewrites). Most stubs are such blocks, and
/// the block encoder's passes over them cost more than all of planning
/// their windows; `None` for any other block.
fn in_place(v: &[Instruction], at: u64, back: bool) -> Option<Relocation> {
    let mut enc = Encoder::try_with_capacity(64, 16 * v.len()).ok()?;
    let mut offsets = Vec::with_capacity(v.len());
    let mut pc = at;
    for i in v {
        if i.is_jmp_short_or_near() || i.is_jcc_short_or_near() || i.is_call_near() {
            let t = i.near_branch_target();
            if i.is_jmp_short()
                || i.is_jcc_short()
                || v.iter().any(|j| j.ip() == t)
                || (!i.is_call_near() && t.abs_diff(pc) < SHORT_REACH)
            {
                return None;
            }
        } else if i.op_kinds().any(|k| k == OpKind::NearBranch64) {
            // `loop`, `jrcxz`, `xbegin` and their like: the block
            // encoder's.
            return None;
        }
        offsets.push((pc - at) as u32);
        // The stub's own instructions (no prefix but what `stub` gives
        // them); a displaced one is encoded as it decoded.
        let own = i.ip() >= OWN_IP;
        pc += match own.then(|| stub_form(i, pc)).flatten() {
            Some((bytes, n)) => {
                let mut code = enc.take_buffer();
                code.extend_from_slice(&bytes[..n]);
                enc.set_buffer(code);
                n
            }
            None => enc.encode(i, pc).ok()?,
        } as u64;
    }
    let jump_back = back.then(|| offsets.pop().map(|o| o as usize)).flatten();
    Some(Relocation {
        code: enc.take_buffer(),
        jump_back,
        offsets,
    })
}

/// The bytes of `i` at `pc` when it is one of the instructions every stub
/// has (its dispatch call's `lea` of `rsp`, `push imm32` and `call rel32`,
/// its `jmp rel32` back; made by `stub`, without prefixes), as the
/// encoder would make them: written
/// directly, as these are most of the instructions of 19,000 stubs and
/// the encoder's generic path costs several hundred instructions each.
fn stub_form(i: &Instruction, pc: u64) -> Option<([u8; 8], usize)> {
    let mut b = [0u8; 8];
    match i.code() {
        Code::Call_rel32_64 | Code::Jmp_rel32_64 => {
            let rel = i.near_branch_target().wrapping_sub(pc.wrapping_add(5)) as i64;
            b[0] = if i.code() == Code::Call_rel32_64 {
                0xe8
            } else {
                0xe9
            };
            b[1..5].copy_from_slice(&i32::try_from(rel).ok()?.to_le_bytes());
            Some((b, 5))
        }
        Code::Pushq_imm32 => {
            b[0] = 0x68;
            b[1..5].copy_from_slice(&(i.immediate32to64() as i32).to_le_bytes());
            Some((b, 5))
        }
        // `lea rsp, [rsp + disp]`, disp not 0.
        Code::Lea_r64_m
            if i.op0_register() == Register::RSP
                && i.memory_base() == Register::RSP
                && i.memory_index() == Register::None
                && i.memory_displacement64() != 0 =>
        {
            let d = i.memory_displacement64() as i64;
            b[..2].copy_from_slice(&[0x48, 0x8d]);
            match (i8::try_from(d), i32::try_from(d)) {
                (Ok(d8), _) => {
                    b[2..5].copy_from_slice(&[0x64, 0x24, d8 as u8]);
                    Some((b, 5))
                }
                (_, Ok(d32)) => {
                    b[2..4].copy_from_slice(&[0xa4, 0x24]);
                    b[4..8].copy_from_slice(&d32.to_le_bytes());
                    Some((b, 8))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// [`relocate`] by iced-x86's block encoder: `v` with the jump back last
/// when `back`, `n` the caller's instructions.
fn by_block_encoder(v: Vec<Instruction>, at: u64, back: bool, n: usize) -> Result<Relocation> {
    let options = BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS;
    let mut r = BlockEncoder::encode(64, InstructionBlock::new(&v, at), options)
        .map_err(|e| anyhow!("{e}"))?;
    // The offset of an instruction the encoder replaced is u32::MAX.
    let jump_back = back
        .then(|| r.new_instruction_offsets.last())
        .flatten()
        .filter(|&&o| o != u32::MAX)
        .map(|&o| o as usize);
    r.new_instruction_offsets.truncate(n);
    Ok(Relocation {
        code: r.code_buffer,
        jump_back,
        offsets: r.new_instruction_offsets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn at_401000(bytes: &[u8]) -> Instruction {
        Decoder::with_ip(64, bytes, 0x40_1000, DecoderOptions::NONE).decode()
    }

    /// An instruction's bytes, the relocated code at the two slots, the
    /// offset of the jump back.
    type Case = (&'static [u8], [&'static [u8]; 2], usize);

    /// The bytes both former relocators (the runtime's `arch::relocate`
    /// and the stub generator's `encode`) produced for one instruction at
    /// 0x401000 and its jump back, at 0x409000 and 0x50000000.
    #[test]
    fn bytes_are_those_of_the_former_relocators() {
        #[rustfmt::skip]
        let cases: [Case; 6] = [
            // mov rax, [rip+0x1000]
            (&[0x48, 0x8b, 0x05, 0x00, 0x10, 0, 0], [
                &[0x48, 0x8b, 0x05, 0x00, 0x90, 0xff, 0xff, 0xe9, 0xfb, 0x7f, 0xff, 0xff],
                &[0x48, 0x8b, 0x05, 0x00, 0x20, 0x40, 0xb0, 0xe9, 0xfb, 0x0f, 0x40, 0xb0],
            ], 7),
            // lea rdi, [rip-0x20]
            (&[0x48, 0x8d, 0x3d, 0xe0, 0xff, 0xff, 0xff], [
                &[0x48, 0x8d, 0x3d, 0xe0, 0x7f, 0xff, 0xff, 0xe9, 0xfb, 0x7f, 0xff, 0xff],
                &[0x48, 0x8d, 0x3d, 0xe0, 0x0f, 0x40, 0xb0, 0xe9, 0xfb, 0x0f, 0x40, 0xb0],
            ], 7),
            // jne short +0x10: a near jne
            (&[0x75, 0x10], [
                &[0x0f, 0x85, 0x0c, 0x80, 0xff, 0xff, 0xe9, 0xf7, 0x7f, 0xff, 0xff],
                &[0x0f, 0x85, 0x0c, 0x10, 0x40, 0xb0, 0xe9, 0xf7, 0x0f, 0x40, 0xb0],
            ], 6),
            // je near +0x200
            (&[0x0f, 0x84, 0x00, 0x02, 0, 0], [
                &[0x0f, 0x84, 0x00, 0x82, 0xff, 0xff, 0xe9, 0xfb, 0x7f, 0xff, 0xff],
                &[0x0f, 0x84, 0x00, 0x12, 0x40, 0xb0, 0xe9, 0xfb, 0x0f, 0x40, 0xb0],
            ], 6),
            // call rel32 +0x1234
            (&[0xe8, 0x34, 0x12, 0, 0], [
                &[0xe8, 0x34, 0x92, 0xff, 0xff, 0xe9, 0xfb, 0x7f, 0xff, 0xff],
                &[0xe8, 0x34, 0x22, 0x40, 0xb0, 0xe9, 0xfb, 0x0f, 0x40, 0xb0],
            ], 5),
            // add rax, rbx
            (&[0x48, 0x01, 0xd8], [
                &[0x48, 0x01, 0xd8, 0xe9, 0xfb, 0x7f, 0xff, 0xff],
                &[0x48, 0x01, 0xd8, 0xe9, 0xfb, 0x0f, 0x40, 0xb0],
            ], 3),
        ];
        for (bytes, expected, jump_back) in cases {
            let i = at_401000(bytes);
            for (slot, want) in [0x40_9000, 0x5000_0000].into_iter().zip(expected) {
                let r = relocate(&[i], slot, Some(i.next_ip())).unwrap();
                assert_eq!(r.code, want, "{bytes:02x?} at 0x{slot:x}");
                assert_eq!(r.jump_back, Some(jump_back), "{bytes:02x?} at 0x{slot:x}");
            }
        }
    }

    /// What is encoded in place is what the block encoder makes of the same
    /// block, byte for byte, offsets and jump back included: blocks of one
    /// to three instructions of the C library's code, alone and after a
    /// stub's call of its dispatcher, at a slot in reach and one out of it.
    #[test]
    fn in_place_is_the_block_encoders() {
        let bytes = std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6").expect("libc");
        let elf = goblin::elf::Elf::parse(&bytes).expect("parse");
        let text = elf
            .section_headers
            .iter()
            .find(|h| elf.shdr_strtab.get_at(h.sh_name) == Some(".text"))
            .expect(".text");
        let off = text.sh_offset as usize;
        let code = &bytes[off..off + text.sh_size as usize];
        let insns: Vec<Instruction> =
            Decoder::with_ip(64, code, text.sh_addr, DecoderOptions::NONE)
                .into_iter()
                .collect();
        let own = crate::stub::dispatch_call(70_007, 0x40_8000).expect("dispatch");
        let (mut same, mut left) = (0, 0);
        for k in (0..insns.len().saturating_sub(3)).step_by(5).take(40_000) {
            let n = 1 + k % 3;
            let displaced = &insns[k..k + n];
            let mut with_call = own.to_vec();
            with_call.extend_from_slice(displaced);
            for block in [displaced, &with_call[..]] {
                for at in [0x40_9000, 0x7f00_0000_0000] {
                    let back = displaced[n - 1].next_ip();
                    let mut v: Vec<Instruction> = block.to_vec();
                    for (j, i) in v.iter_mut().enumerate() {
                        if i.ip() == 0 {
                            i.set_ip(OWN_IP + j as u64);
                        }
                    }
                    let mut jmp = Instruction::with_branch(Code::Jmp_rel32_64, back).unwrap();
                    jmp.set_ip(BACK_IP);
                    v.push(jmp);
                    let Some(fast) = in_place(&v, at, true) else {
                        left += 1;
                        continue;
                    };
                    let slow = by_block_encoder(v, at, true, block.len())
                        .unwrap_or_else(|e| panic!("{:x?} at {at:#x}: {e}", &displaced));
                    assert_eq!(fast, slow, "{displaced:x?} at {at:#x}");
                    same += 1;
                }
            }
        }
        // Most blocks in reach are encoded in place; none out of reach (the
        // jump back is not a `jmp rel32` there).
        assert!(same > 60_000, "{same} in place, {left} left");
        assert!(left > 80_000, "{same} in place, {left} left");
    }

    #[test]
    fn out_of_reach() {
        // A RIP-relative operand out of rel32 reach, above 4 GiB: an error.
        let mov = [0x48, 0x8b, 0x05, 0x00, 0x10, 0, 0];
        let i = Decoder::with_ip(64, &mov, 0x5555_5555_1000, DecoderOptions::NONE).decode();
        let e = relocate(&[i], 0x7f00_0000_0000, None).unwrap_err();
        assert!(e.to_string().contains("too far away"), "{e}");
        // In the low 4 GiB: `[eip+disp]` (0x402007 - 8).
        let i = at_401000(&mov);
        let r = relocate(&[i], 0x7f00_0000_0000, None).unwrap();
        assert_eq!(r.code, [0x67, 0x48, 0x8b, 0x05, 0xff, 0x1f, 0x40, 0x00]);
        // A jump back out of reach: encoded, but not as a `jmp rel32`.
        let i = at_401000(&[0x48, 0x01, 0xd8]);
        let r = relocate(&[i], 0x7f00_0000_0000, Some(i.next_ip())).unwrap();
        assert_eq!(r.jump_back, None);
        assert_eq!(&r.code[..5], &[0x48, 0x01, 0xd8, 0xff, 0x25]);
    }

    #[test]
    fn own_instructions_get_ips_of_their_own() {
        // `jmp OWN_IP + 2` over the `nop` (instruction 1) to the `int3`.
        let mut j = Instruction::with_branch(Code::Jmp_rel8_64, OWN_IP + 2).unwrap();
        j.set_ip(0);
        let block = [
            j,
            Instruction::with(Code::Nopd),
            Instruction::with(Code::Int3),
        ];
        let r = relocate(&block, 0x40_9000, None).unwrap();
        assert_eq!(r.code, [0xeb, 0x01, 0x90, 0xcc]);
        assert_eq!(r.jump_back, None);
    }
}
