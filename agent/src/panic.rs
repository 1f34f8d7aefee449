//! The panic handler: a panic is a bug in the agent. Its message goes to
//! the control region, the agent is marked dead, and the entry point that
//! switched to the agent stack returns: the target runs on, every later
//! hit is skipped.

use agent_abi::{AgentError, state};
use core::fmt::Write as _;
use core::sync::atomic::Ordering;

use crate::{ctrl, lock, sys, thread};

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let mut b = ctrl::FixedBuf::<{ agent_abi::ERR_MSG_BYTES }>::new();
    let _ = write!(b, "agent panic: {info}");
    ctrl::set_error(AgentError::Dead as i32, b.bytes());
    if let Some(c) = ctrl::get() {
        c.state.store(state::DEAD, Ordering::Release);
    }
    // Return from the entry point that switched to this stack: the target
    // goes on, every later hit is skipped (the store may be inconsistent).
    if let Some(h) = thread::header_checked() {
        if let Some(c) = ctrl::get() {
            if c.bias.owner.load(Ordering::Relaxed) == sys::gettid() {
                // The bias owner: its `bias.inside` may be 1, and no other
                // thread can be inside.
                c.bias.inside.store(0, Ordering::Release);
            }
            lock::unlock(&c.store_lock);
        }
        // SAFETY: `h` is the header of the agent stack we run on; its
        // `saved_sp` is the frame of the `wprobe_call_on_stack` that
        // entered it, still live below us on the thread's own stack.
        unsafe { thread::wprobe_abandon_stack(h, AgentError::Dead as i64) }
    }
    // Not on an agent stack: nowhere safe to return to.
    // SAFETY: raises SIGILL, the only way out left.
    unsafe { core::arch::asm!("ud2", options(noreturn)) }
}
