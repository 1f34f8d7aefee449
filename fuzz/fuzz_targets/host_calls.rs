//! Random import, random arguments, random guest memory: every host import
//! of the runtime is called through a real wasmtime store around a model
//! hit. No input may panic the host or leave the store unusable. The
//! oracle lives in
//! `runtime/tests/all/support/host_calls.rs`, where `cargo test` also runs it
//! (sandbox.rs, a seeded run of 40,000 calls).

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;

#[path = "../../runtime/tests/all/support/host_calls.rs"]
mod host_calls;

thread_local! {
    /// The harness is reused (compiling its module costs milliseconds) and
    /// renewed now and then so the model's logs of writes stay small.
    static HARNESS: RefCell<(host_calls::Harness, u32)> = RefCell::new((host_calls::Harness::new(), 0));
}

fuzz_target!(|data: &[u8]| {
    HARNESS.with(|h| {
        let mut h = h.borrow_mut();
        h.1 += 1;
        if h.1 % 10_000 == 0 {
            h.0 = host_calls::Harness::new();
        }
        h.0.run_bytes(data);
    });
});
