//! Prototype x86-64 probe stubs: a site's first whole instructions (≥ 5
//! bytes) are replaced by `jmp stub` (+ `int3` padding); the per-site stub
//!
//! ```text
//! lea  rsp, [rsp-128]            ; step over the red zone
//! pushfq ; push rax … r15        ; flags + 15 GPRs (the SavedRegs GPR block)
//! sub  rsp, 280                  ; xmm0-15, mxcsr, rip, rsp
//! movups [rsp+16*i], xmm_i       ; legacy SSE only (handlers have no AVX)
//! stmxcsr [rsp+256]
//! mov  [rsp+264], site_address ; lea rax,[rsp+536] ; mov [rsp+272], rax
//! cld                            ; SysV: DF clear at calls
//! mov  rbx, rsp ; and rsp, -16   ; rbx (callee-saved) keeps the frame
//! mov  edi, site_id ; mov rsi, rbx ; mov rax, callee ; call rax
//! mov  rsp, rbx
//! ldmxcsr ; movups xmm_i ; add rsp, 280 ; pop r15 … rax ; popfq
//! lea  rsp, [rsp+128]
//! <displaced instructions, relocated by iced's BlockEncoder>
//! jmp  site + len
//! ```
//!
//! The frame is exactly `agent_abi::SavedRegs`; register writes of the
//! handler land in it and are restored. The callee is
//! `wprobe_agent_dispatch`, which switches to the thread's agent stack
//! itself, so the stub's footprint on the probed thread's stack is the red
//! zone, the 408-byte frame and dispatch's few words before its switch.
//!
//! Eligibility here is the minimum (whole instructions, no control flow
//! before the last displaced instruction, relocatable RIP-relative
//! operands, a leading `endbr64` skipped); branch targets inside the window
//! and threads stopped inside it are the patcher's business.

use agent_abi::{SAVED_REGS_SIZE, frame_off};
use anyhow::{Context, Result, bail, ensure};
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Instruction,
    InstructionBlock, MemoryOperand, Register,
};

/// Bytes of the `jmp rel32` written at a site.
pub const JMP_LEN: usize = 5;

/// A probe site: the instructions the jump displaces.
#[derive(Clone, Debug)]
pub struct Site {
    /// Address of the first displaced instruction (after an `endbr64`).
    pub addr: u64,
    /// The displaced instructions, decoded at their run-time addresses.
    pub displaced: Vec<Instruction>,
    /// Their total length (≥ 5).
    pub len: usize,
}

/// Decodes the site at `addr` from `code` (the bytes at `addr`, at least
/// 20 of them).
pub fn decode_site(code: &[u8], addr: u64) -> Result<Site> {
    let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let mut displaced = Vec::new();
    let mut len = 0usize;
    let mut start = addr;
    while len < JMP_LEN {
        ensure!(d.can_decode(), "site 0x{addr:x}: too few bytes to decode");
        let i = d.decode();
        ensure!(!i.is_invalid(), "site 0x{:x}: invalid instruction", i.ip());
        if displaced.is_empty() && len == 0 && i.code() == Code::Endbr64 {
            start = i.next_ip();
            continue;
        }
        if let Some(prev) = displaced.last() {
            let prev: &Instruction = prev;
            ensure!(
                prev.flow_control() == FlowControl::Next,
                "site 0x{start:x}: control flow at 0x{:x} before the window's end",
                prev.ip()
            );
        }
        len += i.len();
        displaced.push(i);
    }
    Ok(Site {
        addr: start,
        displaced,
        len,
    })
}

/// Offset of the frame's end above the frame start (GPRs + flags).
const GPR_BLOCK: i64 = 16 * 8;
/// Bytes `sub rsp` reserves below the GPR block (xmm, mxcsr, pad, rip, rsp).
const LOW_BLOCK: i64 = frame_off::GPRS as i64;
const RED_ZONE: i64 = 128;

/// Push order (reverse of the frame's GPR order).
const PUSHES: [Register; 15] = [
    Register::RAX,
    Register::RCX,
    Register::RDX,
    Register::RBX,
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

const XMMS: [Register; 16] = [
    Register::XMM0,
    Register::XMM1,
    Register::XMM2,
    Register::XMM3,
    Register::XMM4,
    Register::XMM5,
    Register::XMM6,
    Register::XMM7,
    Register::XMM8,
    Register::XMM9,
    Register::XMM10,
    Register::XMM11,
    Register::XMM12,
    Register::XMM13,
    Register::XMM14,
    Register::XMM15,
];

fn rsp(d: i64) -> MemoryOperand {
    MemoryOperand::with_base_displ(Register::RSP, d)
}

/// The stub's code for `site` at `stub_addr`, calling `callee(site_id, frame)`.
pub fn generate(site: &Site, site_id: u32, callee: u64, stub_addr: u64) -> Result<Vec<u8>> {
    const _: () = assert!(SAVED_REGS_SIZE as i64 == LOW_BLOCK + GPR_BLOCK);
    let e = |r: Result<Instruction, iced_x86::IcedError>| r.context("building the stub");
    let mut v: Vec<Instruction> = Vec::new();
    v.push(e(Instruction::with2(
        Code::Lea_r64_m,
        Register::RSP,
        rsp(-RED_ZONE),
    ))?);
    v.push(Instruction::with(Code::Pushfq));
    for r in PUSHES {
        v.push(e(Instruction::with1(Code::Push_r64, r))?);
    }
    v.push(e(Instruction::with2(
        Code::Sub_rm64_imm32,
        Register::RSP,
        LOW_BLOCK as i32,
    ))?);
    for (i, x) in XMMS.iter().enumerate() {
        v.push(e(Instruction::with2(
            Code::Movups_xmmm128_xmm,
            rsp(16 * i as i64),
            *x,
        ))?);
    }
    v.push(e(Instruction::with1(
        Code::Stmxcsr_m32,
        rsp(frame_off::MXCSR as i64),
    ))?);
    v.push(e(Instruction::with2(
        Code::Mov_rm32_imm32,
        rsp(frame_off::MXCSR as i64 + 4),
        0u32,
    ))?);
    v.push(e(Instruction::with2(
        Code::Mov_r64_imm64,
        Register::RAX,
        site.addr,
    ))?);
    v.push(e(Instruction::with2(
        Code::Mov_rm64_r64,
        rsp(frame_off::RIP as i64),
        Register::RAX,
    ))?);
    v.push(e(Instruction::with2(
        Code::Lea_r64_m,
        Register::RAX,
        rsp(LOW_BLOCK + GPR_BLOCK + RED_ZONE),
    ))?);
    v.push(e(Instruction::with2(
        Code::Mov_rm64_r64,
        rsp(frame_off::RSP as i64),
        Register::RAX,
    ))?);
    v.push(Instruction::with(Code::Cld));
    v.push(e(Instruction::with2(
        Code::Mov_r64_rm64,
        Register::RBX,
        Register::RSP,
    ))?);
    v.push(e(Instruction::with2(
        Code::And_rm64_imm8,
        Register::RSP,
        -16i32,
    ))?);
    v.push(e(Instruction::with2(
        Code::Mov_r32_imm32,
        Register::EDI,
        site_id,
    ))?);
    v.push(e(Instruction::with2(
        Code::Mov_r64_rm64,
        Register::RSI,
        Register::RBX,
    ))?);
    v.push(e(Instruction::with2(
        Code::Mov_r64_imm64,
        Register::RAX,
        callee,
    ))?);
    v.push(e(Instruction::with1(Code::Call_rm64, Register::RAX))?);
    v.push(e(Instruction::with2(
        Code::Mov_r64_rm64,
        Register::RSP,
        Register::RBX,
    ))?);
    v.push(e(Instruction::with1(
        Code::Ldmxcsr_m32,
        rsp(frame_off::MXCSR as i64),
    ))?);
    for (i, x) in XMMS.iter().enumerate() {
        v.push(e(Instruction::with2(
            Code::Movups_xmm_xmmm128,
            *x,
            rsp(16 * i as i64),
        ))?);
    }
    v.push(e(Instruction::with2(
        Code::Add_rm64_imm32,
        Register::RSP,
        LOW_BLOCK as i32,
    ))?);
    for r in PUSHES.iter().rev() {
        v.push(e(Instruction::with1(Code::Pop_r64, *r))?);
    }
    v.push(Instruction::with(Code::Popfq));
    v.push(e(Instruction::with2(
        Code::Lea_r64_m,
        Register::RSP,
        rsp(RED_ZONE),
    ))?);
    // Synthetic instructions get IPs no branch targets, so the block
    // encoder links nothing to them.
    for (k, i) in v.iter_mut().enumerate() {
        i.set_ip(u64::MAX - 0x1_0000 + k as u64);
    }
    v.extend(site.displaced.iter().copied());
    let mut back = e(Instruction::with_branch(
        Code::Jmp_rel32_64,
        site.addr + site.len as u64,
    ))?;
    back.set_ip(u64::MAX - 0x100);
    v.push(back);
    let block = InstructionBlock::new(&v, stub_addr);
    let r = BlockEncoder::encode(64, block, BlockEncoderOptions::NONE)
        .map_err(|e| anyhow::anyhow!("relocating site 0x{:x}: {e}", site.addr))?;
    Ok(r.code_buffer)
}

/// The bytes to write at the site: `jmp stub`, then `int3` to the window's end.
pub fn site_patch(site: &Site, stub_addr: u64) -> Result<Vec<u8>> {
    let rel = stub_addr as i64 - (site.addr as i64 + JMP_LEN as i64);
    let Ok(rel) = i32::try_from(rel) else {
        bail!(
            "stub 0x{stub_addr:x} is out of rel32 reach of site 0x{:x}",
            site.addr
        );
    };
    let mut b = vec![0xE9];
    b.extend_from_slice(&rel.to_le_bytes());
    b.resize(site.len, 0xCC);
    Ok(b)
}
