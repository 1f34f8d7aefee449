use super::*;
use iced_x86::{Decoder, DecoderOptions, FlowControl, InstructionInfoFactory, Mnemonic};

#[test]
fn the_trampoline_fits_before_its_slots() {
    let code = trampoline(0x10000 + TRAMPOLINE_ROOM, 0x10000).unwrap();
    assert!(code.len() as u64 <= TRAMPOLINE_ROOM, "{} bytes", code.len());
}

/// The trampoline's fast path (`agent_abi::fast`) keeps no vector
/// register, so the agent's `wprobe_agent_fast` and everything it can
/// reach must use none: every instruction reachable from it in the agent
/// this crate embeds is decoded (branches and direct calls followed), and
/// none may name an XMM, YMM, ZMM, MMX, x87 or mask register, touch the
/// MXCSR or the x87 state, or branch through a register or memory (whose
/// target this walk could not follow). Its stack frame stays within the
/// footprint the stubs promise (`STACK_FOOTPRINT`).
#[test]
fn fast_path_uses_no_vector_register() {
    let img = crate::agent_image().unwrap();
    let start = img.symbol(agent_abi::sym::FAST).unwrap();
    let text = img
        .segments
        .iter()
        .find(|s| s.prot & libc::PROT_EXEC != 0 && s.vaddr <= start && start < s.vaddr + s.memsz)
        .expect("the fast path's code");
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![start];
    let mut info = InstructionInfoFactory::new();
    let mut frame = 0u64;
    while let Some(at) = todo.pop() {
        let mut ip = at;
        loop {
            if !seen.insert(ip) {
                break;
            }
            assert!(
                text.vaddr <= ip && ip < text.vaddr + text.data.len() as u64,
                "{ip:#x} (from {at:#x}) is outside the agent's code"
            );
            let off = (ip - text.vaddr) as usize;
            let mut d = Decoder::with_ip(64, &text.data[off..], ip, DecoderOptions::NONE);
            let i = d.decode();
            assert!(!i.is_invalid(), "an invalid instruction at {ip:#x}");
            let used = info.info(&i);
            for r in used.used_registers() {
                let r = r.register();
                assert!(
                    !(r.is_xmm() || r.is_ymm() || r.is_zmm() || r.is_mm() || r.is_st() || r.is_k()),
                    "{:?} at {ip:#x} uses {r:?}",
                    i.code()
                );
            }
            assert!(
                !matches!(
                    i.mnemonic(),
                    Mnemonic::Ldmxcsr
                        | Mnemonic::Stmxcsr
                        | Mnemonic::Fxsave
                        | Mnemonic::Fxrstor
                        | Mnemonic::Xsave
                        | Mnemonic::Xrstor
                        | Mnemonic::Vzeroupper
                        | Mnemonic::Emms
                ),
                "{:?} at {ip:#x}",
                i.code()
            );
            if i.mnemonic() == Mnemonic::Sub && i.op0_register() == Register::RSP {
                frame = frame.max(i.immediate(1));
            }
            match i.flow_control() {
                FlowControl::Next => {}
                FlowControl::UnconditionalBranch => {
                    todo.push(i.near_branch_target());
                    break;
                }
                FlowControl::ConditionalBranch => todo.push(i.near_branch_target()),
                // `syscall` too, which names no target.
                FlowControl::Call if i.mnemonic() == Mnemonic::Syscall => {}
                FlowControl::Call => todo.push(i.near_branch_target()),
                FlowControl::Return | FlowControl::Interrupt | FlowControl::Exception => break,
                f => panic!(
                    "{:?} at {ip:#x}: {f:?}, which this check cannot follow",
                    i.code()
                ),
            }
            ip = i.next_ip();
        }
    }
    // The fast path's frame, the trampoline's (FastRegs, alignment, the
    // call) and the stub's (red zone, site id, return address) within the
    // footprint below the probed `rsp` (with room for the pushes of the
    // callee-saved registers).
    let below = agent_abi::fast::ABOVE + 16 + 6 * 8 + frame;
    assert!(below <= STACK_FOOTPRINT as u64, "{below} bytes below rsp");
    assert!(seen.len() > 100, "{} instructions walked", seen.len());
}
