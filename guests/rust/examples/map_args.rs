//! Aggregate in wprobe's map service instead of logging a record per hit:
//! calls of `target_fn` counted by the parity of its first argument, and a
//! power-of-two histogram of that argument. The maps live on the handler
//! side and are printed once, at exit, as bpftrace prints
//! `@calls[arg0 % 2] = count(); @sizes = hist(arg0);`.
//!
//! ```text
//! wprobe run map_args.wasm -- ./probe_target 9
//! Attaching 1 probe...
//! ...
//! @calls[0]: 5
//! @calls[1]: 4
//! ...
//! ```

#![no_std]

use wprobe_guest::{Outcome, handler, manifest, map_op, map_update, read_reg, reg};

manifest! {
    module "probe_target";
    major 6;
    map "@calls count key=u64";
    map "@sizes hist key=";
    probe on_call;
        location "offset target_fn";
}

handler!(
    fn on_call() -> Outcome {
        let a = read_reg(reg::RDI);
        let _ = map_update(0, &(a % 2).to_le_bytes(), map_op::COUNT, 1);
        let _ = map_update(1, &[], map_op::HIST, a as i64);
        Outcome::Abort // no record: the maps hold the result
    }
);
