//! A return probe on `target_fn(a, b, s)` in probe_target: when each call
//! returns, log how long it took, its return value (`rax` at the return)
//! and its first argument as it was at the entry (`rdi` has been reused by
//! then). The three come in as the handler's parameters (`args`), no host
//! call each: `read_reg`, `entry_arg` and `elapsed_ns` would read the same.
//!
//! ```text
//! wprobe run time_calls.wasm -- ./probe_target
//! time_calls:target_fn pid P tid T cpu C 1.2: (1523, 13, 0)
//! ```

#![no_std]

use wprobe_guest::{Log, Outcome, handler, manifest};

manifest! {
    module "probe_target";
    major 1;
    probe on_return;
        location "offset target_fn";
        return yes;
        maxactive 16;
        minor 2;
        args "elapsed rax entry.rdi";
}

handler!(
    fn on_return(took: u64, rax: u64, a: u64) -> Outcome {
        let mut log = Log::<24, 1>::new();
        log.words(&[took, rax, a]);
        let _ = log.emit(1, 2);
        Outcome::Exit
    }
);
