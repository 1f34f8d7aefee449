//! A hardware watchpoint on writes to probe_target's 8-byte `counter`:
//! log the value just written and the address of the instruction after the
//! write. The watched address comes from the debug registers: DR6 says
//! which of DR0-DR3 fired.
//!
//! ```text
//! wprobe run watch_counter.wasm -- ./probe_target
//! watch_counter:counter pid P tid T cpu C 11.0: (0, 0x401170)
//! ```

#![no_std]

use wprobe_guest::{Log, Outcome, Reg, handler, manifest, read_reg, read_u64, reg};

manifest! {
    module "probe_target";
    major 11;
    probe on_write;
        location "offset counter";
        watch w;
        length 8;
        maxhits 2;
}

/// The address watched by the debug register that fired.
fn watched() -> u64 {
    let dr6 = read_reg(reg::DR6);
    let slot = (0..4).find(|i| dr6 & (1 << i) != 0).unwrap_or(0);
    read_reg(Reg(reg::DR0.0 + slot))
}

handler!(
    fn on_write() -> Outcome {
        let value = read_u64(watched()).unwrap_or(u64::MAX);
        let _ = Log::<16, 1>::new()
            .words(&[value, read_reg(reg::RIP)])
            .emit(11, 0);
        Outcome::Exit
    }
);
