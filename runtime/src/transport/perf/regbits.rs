//! The user registers a perf sample carries: the kernel's x86-64
//! register mask (`perf_event_x86_regs`), the bit of each register of the
//! host ABI, and the mask a session asks for (only the registers its
//! handlers can read).

use crate::wasm::regscan::RegsRead;

/// `sample_regs_user` for x86-64: ax bx cx dx si di bp sp ip flags cs ss and
/// r8–r15 (ds, es, fs, gs are refused by the kernel on 64-bit).
pub const REGS_MASK: u64 = 0xFF_0FFF;

/// Bit of the kernel's x86-64 register mask (`perf_event_x86_regs`) for a
/// 64-bit register id of the host ABI; `None` for what a sample cannot carry
/// (`ds`, `es`, `fs`, `gs`, `orig_rax`, `fs_base`, `gs_base`).
pub fn perf_bit(base_id: u16) -> Option<u32> {
    Some(match base_id {
        0x06 => 0,  // rax
        0x07 => 1,  // rbx
        0x08 => 2,  // rcx
        0x09 => 3,  // rdx
        0x0B => 4,  // rsi
        0x0A => 5,  // rdi
        0x0F => 6,  // rbp
        0x0E => 7,  // rsp
        0x0D => 8,  // rip
        0x0C => 9,  // eflags
        0x00 => 10, // cs
        0x05 => 11, // ss
        0x10..=0x17 => 16 + u32::from(base_id - 0x10),
        _ => return None,
    })
}

/// Bit of the stack pointer: sampled whenever the stack is (the snapshot
/// starts there).
const SP_BIT: u64 = 1 << 7;
/// Bit of the instruction pointer: never sampled as a register, the
/// sample's IP is the same value.
const IP_BIT: u64 = 1 << 8;

/// The registers to sample when handlers can read `read` (and the stack
/// when `stack`). Each register sampled costs the traced thread kernel
/// time at every hit (about 30 ns here), so only those are asked for.
pub fn regs_mask(read: RegsRead, stack: bool) -> u64 {
    let mut m = match read {
        RegsRead::All => REGS_MASK,
        RegsRead::Only(set) => (0..128u16)
            .filter(|id| set & (1 << id) != 0)
            .filter_map(perf_bit)
            .fold(0, |m, b| m | 1 << b),
    };
    if stack {
        m |= SP_BIT;
    }
    m & !IP_BIT & REGS_MASK
}
