//! Log the arguments of `target_fn(a, b, s)` in probe_target: `a` and `b`
//! as words, the string `s` read from the traced process.
//!
//! ```text
//! wprobe run log_args.wasm -- ./probe_target
//! log_args:target_fn pid P tid T cpu C 1.1: (0, 7) "hello, probes"
//! ```

#![no_std]

use wprobe_guest::{Log, Outcome, handler, manifest, read_reg, read_str, reg};

manifest! {
    module "probe_target";
    major 1;
    probe on_target_fn;
        location "offset target_fn";
        opcode 0x55;
        minor 1;
}

handler!(
    fn on_target_fn() -> Outcome {
        let mut log = Log::<320, 2>::new();
        log.words(&[read_reg(reg::RDI), read_reg(reg::RSI)]);
        let mut buf = [0u8; 256];
        // An unreadable string is logged empty.
        log.str(read_str(read_reg(reg::RDX), &mut buf).unwrap_or(&[]));
        let _ = log.emit(1, 1);
        Outcome::Exit
    }
);
