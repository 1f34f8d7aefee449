//! Count the calls of a function in a variable that persists across hits
//! (module state lives as long as the run) and log the running count.
//! No probe is declared here: bind the handler on the command line.
//!
//! ```text
//! wprobe run count_calls.wasm --probe target_fn=count -- ./probe_target
//! count_calls:target_fn pid P tid T cpu C 1.0: (1)
//! ```

#![no_std]

use core::sync::atomic::{AtomicU64, Ordering};
use wprobe_guest::{Log, Outcome, handler};

/// Calls seen so far (handlers of one program never run concurrently).
static CALLS: AtomicU64 = AtomicU64::new(0);

handler!(
    fn count() -> Outcome {
        let n = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        let _ = Log::<8, 1>::new().words(&[n]).emit(1, 0);
        Outcome::Exit
    }
);
