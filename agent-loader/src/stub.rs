//! x86-64 probe stubs. A site's first whole instructions (its *window*, at
//! least 5 bytes, chosen by [`crate::window`]) are replaced by `jmp stub`
//! (and `int3` padding to the window's end). Each site's stub is short and
//! shares one register-saving trampoline with the other sites of its stub
//! area:
//!
//! ```text
//! stub_k:   lea  rsp, [rsp-128]        ; step over the probed code's red zone
//!           push k                     ; the site id
//!           call trampoline            ; returns to the next instruction
//!           lea  rsp, [rsp+128]
//!           <displaced instructions, relocated by crate::reloc>
//!           jmp  window_end
//!
//! stub_k:   <displaced instructions, relocated>   ; a return site: the
//!           lea  rsp, [rsp-128]                   ; epilogue before a
//!           push k ; call trampoline              ; `ret`, dispatch with
//!           lea  rsp, [rsp+128]                   ; the return address
//!           ret                                   ; at [rsp], the `ret`
//!                                                 ; (a displaced branch to
//!                                                 ; the `ret` lands on the
//!                                                 ; first `lea`)
//!
//! trampoline:
//!           pushfq ; push rax … r15    ; flags + 15 GPRs (the SavedRegs GPR block)
//!           sub  rsp, 280              ; xmm0-15, mxcsr, rip, rsp
//!           movups [rsp+16*i], xmm_i   ; legacy SSE only (handlers have no AVX)
//!           stmxcsr [rsp+256]
//!           lea rax, [rsp+408+16+128] ; mov [rsp+272], rax   (the probed rsp)
//!           cld                        ; SysV: DF clear at calls
//!           mov edi, [rsp+416]         ; the site id
//!           mov rsi, rsp ; mov rbx, rsp ; and rsp, -16 ; rbx (callee-saved) keeps the frame
//!           call [dispatch_slot]
//!           mov rsp, rbx
//!           movups xmm_i ; add rsp, 280 ; pop r15 … rcx
//!           <flags from [rsp+8] with sahf, OF and DF apart> ; pop rax
//!           lea rsp, [rsp+8]           ; drop the flags' slot
//!           ret 8                      ; back to stub_k, dropping the site id
//! ```
//!
//! The frame is exactly `agent_abi::SavedRegs` (the agent fills in `rip`
//! from its site table); register writes of the handler land in it and are
//! restored. `call`/`ret` pair up, so a CET shadow stack stays balanced.
//! The stub's footprint on the probed thread's stack is the red zone, 16
//! bytes (site id, return address), the 408-byte frame, alignment (≤ 8
//! bytes) and the return address of the call into `dispatch`, which
//! switches to the thread's agent stack before anything else of its own:
//! see [`STACK_FOOTPRINT`].

use agent_abi::{SAVED_REGS_SIZE, frame_off};
use anyhow::{Context, Result, bail};
use iced_x86::{Code, Instruction, MemoryOperand, Register};

use crate::callemu::call_as_push_and_jump;
use crate::reloc::{OWN_IP, relocate};

/// Bytes a stub area keeps for its [`trampoline`] (its slots come next).
pub const TRAMPOLINE_ROOM: u64 = 640;

/// Bytes of the `jmp rel32` written at a site.
pub const JMP_LEN: usize = 5;

/// Bytes below the probed code's stack pointer a hit may write before the
/// agent switches to its own stack: red zone (128), site id and return
/// address (16), frame (408), alignment (8), the return address of the
/// call into the agent (8), and what `wprobe_agent_dispatch` pushes before
/// it switches stacks (at most 512: its frame and `thread::current`'s,
/// first hit of a thread included; measured on a real process by the test
/// `inproc::a_hit_writes_no_deeper_than_the_stack_footprint_below_rsp`).
/// The fast path (`agent_abi::fast`) stays within it: its 88-byte frame
/// and `wprobe_agent_fast`'s own (checked by the test
/// `fast_path_uses_no_vector_register`).
pub const STACK_FOOTPRINT: usize = 128 + 16 + SAVED_REGS_SIZE + 8 + 8 + 512;

/// A probe site: the window the jump replaces.
#[derive(Clone, Debug)]
pub struct Site {
    /// The probe's address (what handlers see as `rip`).
    pub probe: u64,
    /// Address of the first displaced instruction (after an `endbr64` the
    /// site keeps).
    pub addr: u64,
    /// The displaced instructions, decoded at their run-time addresses.
    pub displaced: Vec<iced_x86::Instruction>,
    /// Their total length (≥ 5; a return site's padding after its `ret`
    /// included).
    pub len: usize,
    /// A return site: its `ret` (after `displaced`), before which the stub
    /// calls `dispatch`.
    pub ret: Option<iced_x86::Instruction>,
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

fn e(r: std::result::Result<Instruction, iced_x86::IcedError>) -> Result<Instruction> {
    r.context("building a stub")
}

/// The shared trampoline at `addr`, with its three 8-byte slots from
/// `slots` (written once the agent is loaded, so that stubs can be placed
/// and checked before; all 0 until then): `dispatch`, the fast path's
/// function ([`agent_abi::sym::FAST`]) and the address of the agent's
/// pointer to its fast table ([`agent_abi::sym::FAST_TABLE`]).
///
/// It starts with the fast path (`agent_abi::fast`): the site's entry of
/// the fast table read with `rax` and `rcx` saved and the flags untouched
/// (`mov`, `lea`, `movzx` and `jrcxz` change none); a site it marks gets
/// the flags and the other caller-saved registers saved, the fast
/// function called, and, when it says DONE, everything put back and
/// `ret 8`; otherwise (or for a site not marked) the full trampoline
/// below runs on the stub's call as if called from it:
///
/// ```text
///   push rax ; push rcx
///   mov rcx, [fast_table_slot] ; jrcxz skip ; mov rcx, [rcx] ; jrcxz skip
///   mov eax, [rsp+24] ; lea rax, [rax+rax] ; movzx ecx, word [rcx+rax*8+14]
///   jrcxz skip
///   pushfq ; push rdx, rsi, rdi, r8, r9, r10, r11, rbx  ; fast::FastRegs
///   cld ; mov edi, [rsp+96] ; mov rsi, rsp ; mov rbx, rsp ; and rsp, -16
///   call [fast_slot] ; mov rsp, rbx ; test eax, eax
///   pop rbx, r11, r10, r9, r8, rdi, rsi, rdx ; jnz back
///   <the flags put back as the full path does> ; pop rcx ; pop rax ; ret 8
/// back: popfq ; pop rcx ; pop rax ; jmp full     ; all as they were
/// skip: pop rcx ; pop rax                        ; the flags unchanged
/// full: the full trampoline
/// ```
pub fn trampoline(slots: u64, addr: u64) -> Result<Vec<u8>> {
    let mut v = fast_path(slots)?;
    let full = v.len() as u64;
    let near = |i: &Instruction| i.op0_kind() == iced_x86::OpKind::NearBranch64;
    for mut i in full_trampoline(slots, RED_ZONE)? {
        // Its own branches name its instructions by index from its start.
        if near(&i) && i.near_branch64() >= OWN_IP {
            i.set_near_branch64(i.near_branch64() + full);
        }
        v.push(i);
    }
    // The fast path's branches to the full trampoline name it by a label.
    for i in &mut v[..full as usize] {
        if near(i) && i.near_branch64() == FULL_LABEL {
            i.set_near_branch64(OWN_IP + full);
        }
    }
    Ok(relocate(&v, addr, None)?.code)
}

/// Where the fast path's `jmp full` goes before [`trampoline`] names the
/// full trampoline's first instruction.
const FULL_LABEL: u64 = OWN_IP + 0xFFFF;

/// The fast path of [`trampoline`] (its instructions, with branches to
/// `OWN_IP + k` for the k-th and [`FULL_LABEL`] for the full path).
fn fast_path(slots: u64) -> Result<Vec<Instruction>> {
    use agent_abi::fast;
    let mut v: Vec<Instruction> = vec![
        e(Instruction::with1(Code::Push_r64, Register::RAX))?,
        e(Instruction::with1(Code::Push_r64, Register::RCX))?,
        e(Instruction::with2(
            Code::Mov_r64_rm64,
            Register::RCX,
            MemoryOperand::with_base_displ(Register::RIP, (slots + 16) as i64),
        ))?,
    ];
    // The `jrcxz skip`s, their target set below.
    let mut skips = vec![v.len()];
    v.push(e(Instruction::with_branch(Code::Jrcxz_rel8_64, 0))?);
    v.push(e(Instruction::with2(
        Code::Mov_r64_rm64,
        Register::RCX,
        MemoryOperand::with_base_displ(Register::RCX, 0),
    ))?);
    skips.push(v.len());
    v.push(e(Instruction::with_branch(Code::Jrcxz_rel8_64, 0))?);
    // The site id, above rcx, rax and the return address.
    v.push(e(Instruction::with2(
        Code::Mov_r32_rm32,
        Register::EAX,
        rsp(24),
    ))?);
    v.push(e(Instruction::with2(
        Code::Lea_r64_m,
        Register::RAX,
        MemoryOperand::with_base_index(Register::RAX, Register::RAX),
    ))?);
    v.push(e(Instruction::with2(
        Code::Movzx_r32_rm16,
        Register::ECX,
        MemoryOperand::new(
            Register::RCX,
            Register::RAX,
            (fast::SITE_SIZE / 2) as u32,
            fast::FLAG_OFF as i64,
            1,
            false,
            Register::None,
        ),
    ))?);
    skips.push(v.len());
    v.push(e(Instruction::with_branch(Code::Jrcxz_rel8_64, 0))?);
    v.push(Instruction::with(Code::Pushfq));
    const SAVED: [Register; 8] = [
        Register::RDX,
        Register::RSI,
        Register::RDI,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
        Register::RBX,
    ];
    for r in SAVED {
        v.push(e(Instruction::with1(Code::Push_r64, r))?);
    }
    const FRAME: i64 = core::mem::size_of::<fast::FastRegs>() as i64;
    const _: () = assert!(FRAME == 8 * 11);
    // The site id above the frame and the return address.
    call_agent(&mut v, FRAME + 8, slots + 8)?;
    v.push(e(Instruction::with2(
        Code::Test_rm32_r32,
        Register::EAX,
        Register::EAX,
    ))?);
    for r in SAVED.iter().rev() {
        v.push(e(Instruction::with1(Code::Pop_r64, *r))?);
    }
    let back = v.len();
    v.push(e(Instruction::with_branch(Code::Jne_rel32_64, 0))?);
    // Done: the flags at [rsp], then rcx and rax.
    restore_flags_on_top(&mut v)?;
    v.push(e(Instruction::with1(Code::Pop_r64, Register::RCX))?);
    v.push(e(Instruction::with1(Code::Pop_r64, Register::RAX))?);
    v.push(e(Instruction::with1(Code::Retnq_imm16, 8u32))?);
    let back_at = v.len();
    v[back].set_near_branch64(OWN_IP + back_at as u64);
    v.push(Instruction::with(Code::Popfq));
    v.push(e(Instruction::with1(Code::Pop_r64, Register::RCX))?);
    v.push(e(Instruction::with1(Code::Pop_r64, Register::RAX))?);
    v.push(e(Instruction::with_branch(Code::Jmp_rel32_64, FULL_LABEL))?);
    let skip_at = v.len();
    for k in skips {
        v[k].set_near_branch64(OWN_IP + skip_at as u64);
    }
    v.push(e(Instruction::with1(Code::Pop_r64, Register::RCX))?);
    v.push(e(Instruction::with1(Code::Pop_r64, Register::RAX))?);
    Ok(v)
}

/// The full trampoline, for stubs that left `above` bytes between the
/// probed `rsp` and the site id they push (its instructions; `dispatch`
/// called through the slot at `slot`).
fn full_trampoline(slot: u64, above: i64) -> Result<Vec<Instruction>> {
    const _: () = assert!(SAVED_REGS_SIZE as i64 == LOW_BLOCK + GPR_BLOCK);
    let mut v: Vec<Instruction> = vec![Instruction::with(Code::Pushfq)];
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
        Code::Mov_rm64_imm32,
        rsp(frame_off::RIP as i64),
        0i32,
    ))?);
    // The probed rsp: above the frame, the return address, the site id and
    // the red zone.
    v.push(e(Instruction::with2(
        Code::Lea_r64_m,
        Register::RAX,
        rsp(SAVED_REGS_SIZE as i64 + 16 + above),
    ))?);
    v.push(e(Instruction::with2(
        Code::Mov_rm64_r64,
        rsp(frame_off::RSP as i64),
        Register::RAX,
    ))?);
    // The site id above the frame and the return address.
    call_agent(&mut v, SAVED_REGS_SIZE as i64 + 8, slot)?;
    // No `ldmxcsr`: the agent puts back the MXCSR it found before it
    // returns (and handlers cannot write it).
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
    for r in PUSHES.iter().rev().take(PUSHES.len() - 1) {
        v.push(e(Instruction::with1(Code::Pop_r64, *r))?);
    }
    restore_flags(&mut v)?;
    v.push(e(Instruction::with1(Code::Retnq_imm16, 8u32))?);
    Ok(v)
}

/// The call of the agent function whose address is in the slot at `slot`
/// with the site id at `[rsp+id_at]` and the frame at `rsp`: DF cleared
/// (SysV), `rbx` (callee-saved) keeping the frame, the stack aligned for
/// the call and put back after it.
fn call_agent(v: &mut Vec<Instruction>, id_at: i64, slot: u64) -> Result<()> {
    v.push(Instruction::with(Code::Cld));
    v.push(e(Instruction::with2(
        Code::Mov_r32_rm32,
        Register::EDI,
        rsp(id_at),
    ))?);
    for r in [Register::RSI, Register::RBX] {
        v.push(e(Instruction::with2(Code::Mov_r64_rm64, r, Register::RSP))?);
    }
    v.push(e(Instruction::with2(
        Code::And_rm64_imm8,
        Register::RSP,
        -16i32,
    ))?);
    v.push(e(Instruction::with1(
        Code::Call_rm64,
        MemoryOperand::with_base_displ(Register::RIP, slot as i64),
    ))?);
    v.push(e(Instruction::with2(
        Code::Mov_r64_rm64,
        Register::RSP,
        Register::RBX,
    ))?);
    Ok(())
}

/// The end of the trampoline's restore, with `[rsp]` the saved `rax` and
/// `[rsp+8]` the saved flags: the flags the agent may have changed come
/// back, then `rax`, and the flags' slot is dropped. `popfq` would do it
/// in one instruction at several times the cost; what the agent can change
/// is the arithmetic flags and DF (its `cld`), so: DF set again with `std`
/// if it was set, OF from `add al, 0x7f` with `al` its old value (0x80
/// overflows, 0x7f does not), SF ZF AF PF CF from `sahf`. Other flags (TF,
/// AC, ID) are never changed by the agent.
/// On a CPU without LAHF/SAHF in 64-bit mode (the first x86-64 CPUs),
/// `pop rax ; popfq`.
fn restore_flags(v: &mut Vec<Instruction>) -> Result<()> {
    if !lahf_lm() {
        v.push(e(Instruction::with1(Code::Pop_r64, Register::RAX))?);
        v.push(Instruction::with(Code::Popfq));
        return Ok(());
    }
    v.push(e(Instruction::with2(
        Code::Mov_r64_rm64,
        Register::RAX,
        rsp(8),
    ))?);
    flags_from_rax(v)?;
    v.push(e(Instruction::with1(Code::Pop_r64, Register::RAX))?);
    v.push(e(Instruction::with2(
        Code::Lea_r64_m,
        Register::RSP,
        rsp(8),
    ))?);
    Ok(())
}

/// As [`restore_flags`], for the fast path: the saved flags at `[rsp]`
/// put back and dropped, `rax` changed (the caller pops it next).
fn restore_flags_on_top(v: &mut Vec<Instruction>) -> Result<()> {
    if !lahf_lm() {
        v.push(Instruction::with(Code::Popfq));
        return Ok(());
    }
    v.push(e(Instruction::with2(
        Code::Mov_r64_rm64,
        Register::RAX,
        rsp(0),
    ))?);
    flags_from_rax(v)?;
    v.push(e(Instruction::with2(
        Code::Lea_r64_m,
        Register::RSP,
        rsp(8),
    ))?);
    Ok(())
}

/// Whether the CPU has LAHF/SAHF in 64-bit mode.
fn lahf_lm() -> bool {
    core::arch::x86_64::__cpuid(0x8000_0001).ecx & 1 != 0
}

/// The flags the agent may have changed set from the saved flags in `rax`
/// (see [`restore_flags`]); `rax` changed.
fn flags_from_rax(v: &mut Vec<Instruction>) -> Result<()> {
    // ah = flags[7:0], OF (bit 11) at bit 19, DF (bit 10) at bit 18.
    v.push(e(Instruction::with2(
        Code::Shl_rm32_imm8,
        Register::EAX,
        8u32,
    ))?);
    v.push(e(Instruction::with2(
        Code::Bt_rm32_imm8,
        Register::EAX,
        18u32,
    ))?);
    // Over the `std` when DF was clear: `relocate` gives the k-th instruction
    // the IP `OWN_IP + k`, so the target is the one after the `std`.
    let after_std = OWN_IP + v.len() as u64 + 2;
    v.push(e(Instruction::with_branch(Code::Jae_rel8_64, after_std))?);
    v.push(Instruction::with(Code::Std));
    v.push(e(Instruction::with2(
        Code::Bt_rm32_imm8,
        Register::EAX,
        19u32,
    ))?);
    v.push(e(Instruction::with1(Code::Setb_rm8, Register::AL))?);
    v.push(e(Instruction::with2(
        Code::Add_rm8_imm8,
        Register::AL,
        0x7fu32,
    ))?);
    v.push(Instruction::with(Code::Sahf));
    Ok(())
}

/// `i` as it runs in the stub: the same instruction, but for a `lea` of an
/// address inside the window (a function taking its own address), which
/// becomes a `mov` of that address: the block encoder links an operand
/// that names a displaced instruction's address to the stub's copy, right
/// for a branch, wrong for an address the program compares or calls.
pub(crate) fn displaced(i: &Instruction, window: std::ops::Range<u64>) -> Result<Instruction> {
    if i.mnemonic() != iced_x86::Mnemonic::Lea
        || !i.is_ip_rel_memory_operand()
        || !window.contains(&i.ip_rel_memory_address())
    {
        return Ok(*i);
    }
    let to = i.ip_rel_memory_address();
    let r = i.op0_register();
    let mut m = match r.size() {
        8 => e(Instruction::with2(Code::Mov_r64_imm64, r, to))?,
        4 => e(Instruction::with2(Code::Mov_r32_imm32, r, to as u32))?,
        _ => e(Instruction::with2(Code::Mov_r16_imm16, r, to as u16 as u32))?,
    };
    m.set_ip(i.ip());
    Ok(m)
}

/// The stub's call of the dispatcher for site `id` through the trampoline
/// at `trampoline`: the red zone stepped over, the id pushed, the call,
/// the red zone back (the trampoline's `ret 8` drops the id).
pub(crate) fn dispatch_call(id: u32, trampoline: u64) -> Result<[Instruction; 4]> {
    Ok([
        e(Instruction::with2(
            Code::Lea_r64_m,
            Register::RSP,
            rsp(-RED_ZONE),
        ))?,
        e(Instruction::with1(Code::Pushq_imm32, id as i32))?,
        e(Instruction::with_branch(Code::Call_rel32_64, trampoline))?,
        e(Instruction::with2(
            Code::Lea_r64_m,
            Register::RSP,
            rsp(RED_ZONE),
        ))?,
    ])
}

/// The stub of `site` at `stub_addr`, with id `site_id`, calling the
/// trampoline at `trampoline`. Fails when a displaced instruction cannot
/// be relocated there (a RIP-relative operand out of rel32 reach).
pub fn generate(site: &Site, site_id: u32, trampoline: u64, stub_addr: u64) -> Result<Vec<u8>> {
    let call = |id: u32| dispatch_call(id, trampoline);
    let mut v: Vec<Instruction> = Vec::with_capacity(site.displaced.len() + 10);
    let window = site.addr..site.addr + site.len as u64;
    let moved = site
        .displaced
        .iter()
        .map(|i| displaced(i, window.clone()))
        .collect::<Result<Vec<_>>>()?;
    let end = site.addr + site.len as u64;
    let back = match site.ret {
        // A return site: the epilogue, then dispatch with the return
        // address at [rsp], then the `ret` itself. A whole function's
        // window (`window::plan_whole`): dispatch at the entry first, and
        // the return site's id is the next one.
        Some(ret) => {
            let whole = ret.ip() != site.probe;
            if whole {
                v.extend(call(site_id)?);
            }
            v.extend(moved.iter().copied());
            // A branch displaced with the `ret` (`window::plan_ret`) lands
            // on the dispatch before it: that sequence takes the `ret`'s
            // address, the `ret` one of our own.
            let mut at_ret = call(site_id + u32::from(whole))?;
            at_ret[0].set_ip(ret.ip());
            v.extend(at_ret);
            let mut ret = ret;
            ret.set_ip(0);
            v.push(ret);
            None
        }
        None => {
            v.extend(call(site_id)?);
            v.extend(moved.iter().copied());
            if let Some(last) =
                v.pop_if(|i| matches!(i.code(), Code::Call_rel32_64 | Code::Call_rm64))
            {
                // `call f` ending the window: run as a push of the
                // original return address (the window's end) and a jump
                // (its operand names no `rsp`, `window::plan` checked).
                v.extend(call_as_push_and_jump(&last)?);
            }
            // Then back to the window's end.
            Some(end)
        }
    };
    let stub = relocate(&v, stub_addr, back).map_err(|e| {
        anyhow::anyhow!(
            "relocating the displaced instructions of 0x{:x} to 0x{stub_addr:x}: {e}",
            site.addr
        )
    })?;
    Ok(stub.code)
}

/// The stub of a watchpoint at `stub_addr`, with id `site_id`: the tracer
/// moves a thread that triggered the watchpoint here, its `rsp` lowered
/// by `agent_abi::WATCH_RIP_BELOW` (136) bytes and the `rip` to go back to
/// stored there (the red zone above it untouched):
///
/// ```text
/// stub:  push id ; call T ; ret 128    ; back to the saved rip, rsp as it was
/// T:     the trampoline, for a probed rsp 136 bytes above the site id
/// ```
pub fn watch_stub(site_id: u32, slot: u64, stub_addr: u64) -> Result<Vec<u8>> {
    const HEAD: u64 = 16;
    let v = vec![
        e(Instruction::with1(Code::Pushq_imm32, site_id as i32))?,
        e(Instruction::with_branch(
            Code::Call_rel32_64,
            stub_addr + HEAD,
        ))?,
        e(Instruction::with1(Code::Retnq_imm16, 128u32))?,
    ];
    let mut head = relocate(&v, stub_addr, None)?.code;
    anyhow::ensure!(head.len() as u64 <= HEAD, "watch stub head too long");
    head.resize(HEAD as usize, 0xCC);
    let above = agent_abi::WATCH_RIP_BELOW as i64;
    head.extend(relocate(&full_trampoline(slot, above)?, stub_addr + HEAD, None)?.code);
    Ok(head)
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
    let mut b = Vec::with_capacity(site.len.max(JMP_LEN));
    b.push(0xE9);
    b.extend_from_slice(&rel.to_le_bytes());
    b.resize(site.len, 0xCC);
    Ok(b)
}

#[cfg(test)]
mod tests;
