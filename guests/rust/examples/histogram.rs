//! A histogram of target_fn's first argument in power-of-two buckets, kept
//! in the run's global variables (shared with every other program of the
//! run), printed once when `bump` is called at the end of the program.
//!
//! ```text
//! wprobe run histogram.wasm -- ./probe_target 9
//! histogram:bump pid P tid T cpu C 5.0: (1, 1, 2, 4, 1, 0, 0, 0)
//! ```
//! Bucket 0 counts a = 0, bucket k > 0 counts 2^(k-1) <= a < 2^k; the last
//! bucket also counts everything larger.

#![no_std]

use wprobe_guest::{Log, Outcome, gvar_get, gvar_set, handler, manifest, read_reg, reg};

const BUCKETS: u64 = 8;

manifest! {
    module "probe_target";
    major 5;
    gvars 8;
    probe on_call;
        location "offset target_fn";
        opcode 0x55;
    probe on_bump;
        location "offset bump";
        opcode 0x55;
}

fn bucket(a: u64) -> u64 {
    (64 - a.leading_zeros() as u64).min(BUCKETS - 1)
}

handler!(
    fn on_call() -> Outcome {
        let b = bucket(read_reg(reg::RDI));
        let n = gvar_get(b).unwrap_or(0);
        gvar_set(b, n + 1);
        Outcome::Abort // no record for this hit
    }
);

handler!(
    fn on_bump() -> Outcome {
        let mut counts = [0u64; BUCKETS as usize];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = gvar_get(i as u64).unwrap_or(0);
        }
        let _ = Log::<64, 1>::new().words(&counts).emit(5, 0);
        Outcome::Exit
    }
);
