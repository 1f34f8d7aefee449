//! A handler's parameters: the manifest's `args`, resolved at load to where
//! a hit keeps each value (a word of the frame, an entry register of the
//! returning call, its duration), and read from there at each run.

use agent_abi::SavedRegs;
use hostabi::manifest::{ArgSource, MAX_HANDLER_ARGS};

use crate::host::FrameEnv;

/// A handler parameter, resolved at load to where the hit keeps it (the
/// same values `read_reg`, `entry_reg` and `elapsed_ns` return).
#[derive(Clone, Copy)]
pub(crate) enum Param {
    /// The frame's word at this index (a GPR, `rip`, `rsp` or the flags),
    /// and'ed with the mask (a 32-bit alias reads the low half).
    Frame(usize, u64),
    /// The returning call's entry register at this index of
    /// `EntryState::regs`.
    Entry(usize),
    /// The returning call's duration.
    Elapsed,
    /// Any other register (x87, SSE, segments…): read as `read_reg` does.
    Other(ArgSource),
}

impl Param {
    pub(crate) fn new(a: ArgSource) -> Param {
        use core::mem::offset_of;
        let word = |off: usize| off / 8;
        match a {
            ArgSource::Reg(id) => {
                let Some(r) = hostfns::reg_by_id(id) else {
                    return Param::Other(a);
                };
                let mask = if r.is_alias() { 0xFFFF_FFFF } else { u64::MAX };
                let off = match r.base_id() {
                    0x06 => offset_of!(SavedRegs, rax),
                    0x07 => offset_of!(SavedRegs, rbx),
                    0x08 => offset_of!(SavedRegs, rcx),
                    0x09 => offset_of!(SavedRegs, rdx),
                    0x0A => offset_of!(SavedRegs, rdi),
                    0x0B => offset_of!(SavedRegs, rsi),
                    0x0C => offset_of!(SavedRegs, rflags),
                    0x0D => offset_of!(SavedRegs, rip),
                    0x0E => offset_of!(SavedRegs, rsp),
                    0x0F => offset_of!(SavedRegs, rbp),
                    0x10 => offset_of!(SavedRegs, r8),
                    0x11 => offset_of!(SavedRegs, r9),
                    0x12 => offset_of!(SavedRegs, r10),
                    0x13 => offset_of!(SavedRegs, r11),
                    0x14 => offset_of!(SavedRegs, r12),
                    0x15 => offset_of!(SavedRegs, r13),
                    0x16 => offset_of!(SavedRegs, r14),
                    0x17 => offset_of!(SavedRegs, r15),
                    _ => return Param::Other(a),
                };
                Param::Frame(word(off), mask)
            }
            ArgSource::Entry(id) => match hostabi::regs::entry_index(id) {
                Some(i) => Param::Entry(i),
                None => Param::Other(a),
            },
            ArgSource::Elapsed => Param::Elapsed,
        }
    }
}

/// The parameters of a handler run on the frame and entry state of `env`,
/// written into `v` in place (built apart and copied, the array was read
/// back with 16-byte loads from its 8-byte stores, which the CPU cannot
/// forward: a stall per run).
#[inline(always)]
pub(crate) fn param_values(v: &mut [u64; MAX_HANDLER_ARGS], env: &mut FrameEnv, params: &[Param]) {
    let frame = env.frame as *const u64;
    for (slot, p) in v.iter_mut().zip(params) {
        *slot = match *p {
            // SAFETY: the hit's frame (live while the handler runs), a word
            // index inside `SavedRegs`.
            Param::Frame(i, mask) => (unsafe { frame.add(i).read() }) & mask,
            Param::Entry(i) => env.entry.as_ref().map_or(0, |e| e.regs[i]),
            Param::Elapsed => env.entry.as_ref().map_or(0, |e| e.elapsed_ns),
            Param::Other(a) => hostfns::arg_values(env, &[a])[0],
        };
    }
}

/// The parameter an [`agent_abi::arg`] code names.
pub(crate) fn arg_source(code: u32) -> Option<ArgSource> {
    let id = (code & 0xFFFF) as u16;
    match code & !0xFFFF {
        agent_abi::arg::REG => hostfns::reg_by_id(id)
            .filter(|r| r.id != hostabi::regs::CPUID)
            .map(|_| ArgSource::Reg(id)),
        agent_abi::arg::ENTRY => hostabi::regs::entry_index(id).map(|_| ArgSource::Entry(id)),
        agent_abi::arg::ELAPSED if id == 0 => Some(ArgSource::Elapsed),
        _ => None,
    }
}
