//! Three handlers that misbehave, to show what the sandbox does with them;
//! the traced program runs on unharmed. No manifest: bind them on the
//! command line.
//!
//! ```text
//! wprobe run faults.wasm --probe target_fn=spin -- ./probe_target   # fuel_exhausted 3
//! wprobe run faults.wasm --probe target_fn=trap -- ./probe_target   # traps 3
//! wprobe run faults.wasm --probe target_fn=wild -- ./probe_target
//! faults:target_fn pid P tid T cpu C 1.0: (0, -1, -1)
//! ```

#![no_std]

use core::sync::atomic::{AtomicU64, Ordering};
use wprobe_guest::{Log, Outcome, check_access, handler, raw, read_mem};

static SINK: AtomicU64 = AtomicU64::new(0);

handler!(
    /// Loops forever: fuel ends each run.
    fn spin() -> Outcome {
        let mut i = 0u64;
        loop {
            i = i.wrapping_add(1);
            SINK.store(i, Ordering::Relaxed);
        }
    }
);

handler!(
    /// Traps: a panic is a Wasm `unreachable` (`panic = "abort"`).
    fn trap() -> Outcome {
        let i = SINK.load(Ordering::Relaxed) as usize + 5;
        let table = [1u64, 2];
        if table[core::hint::black_box(i)] == 0 {
            Outcome::Abort
        } else {
            Outcome::Exit
        }
    }
);

handler!(
    /// Reads address 8, which no process maps: read_mem copies 0 bytes,
    /// read_str returns -1 (byte 0 unreadable), check_access says FAULT (-1);
    /// the three are logged.
    fn wild() -> Outcome {
        let mut buf = [0u8; 8];
        let n = read_mem(8, &mut buf) as u64;
        // SAFETY: `buf` is 8 bytes of this module's memory.
        let s = unsafe { raw::read_str(8, buf.as_mut_ptr() as i32, 8) };
        let a = if check_access(8, false) { 0 } else { -1i64 };
        let _ = Log::<24, 1>::new().words(&[n, s as i64 as u64, a as u64]).emit(1, 0);
        Outcome::Exit
    }
);
