//! A return probe on `target_fn(a, b, s)` in probe_target: when each call
//! returns, log how long it took, its return value (`rax` at the return)
//! and its first argument as it was at the entry (`rdi` has been reused by
//! then).
//!
//! ```text
//! wprobe run time_calls.wasm -- ./probe_target
//! time_calls:target_fn pid P tid T cpu C 1.2: (1523, 13, 0)
//! ```

#![no_std]

use wprobe_guest::{Log, Outcome, elapsed_ns, entry_arg, handler, manifest, read_reg, reg};

manifest! {
    module "probe_target";
    major 1;
    probe on_return;
        location "offset target_fn";
        return yes;
        maxactive 16;
        minor 2;
}

handler!(
    fn on_return() -> Outcome {
        let mut log = Log::<24, 1>::new();
        let a = entry_arg(0).unwrap_or(0);
        log.words(&[elapsed_ns(), read_reg(reg::RAX), a]);
        let _ = log.emit(1, 2);
        Outcome::Exit
    }
);
