//! The control calls (`load`, `sites`): serialised, run on the control
//! stack with the store lock held; their requests read from the control
//! region.

use agent_abi::{AgentError, ControlHeader, LOCK_WAIT_MAX_NS, state};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::{AGENT, ctrl, err, lock, thread};

/// Header (initial RSP) of the stack `init`, `load` and `sites` run on.
pub(crate) static CONTROL_STACK: AtomicU64 = AtomicU64::new(0);
/// 1 while a control call runs (they are serialised by the tracer; this
/// makes a violation an error instead of a race).
pub(crate) static CONTROL_BUSY: AtomicU32 = AtomicU32::new(0);

fn dead() -> bool {
    ctrl::get().is_some_and(|c| c.state.load(Ordering::Relaxed) == state::DEAD)
}

fn on_control_stack(f: extern "C" fn(*mut u8) -> i64, arg: *mut u8) -> i64 {
    let top = CONTROL_STACK.load(Ordering::Relaxed) as usize;
    if top == 0 {
        return AgentError::NotInitialized as i64;
    }
    // SAFETY: the control stack, used by one control call at a time.
    unsafe { thread::wprobe_call_on_stack(arg, f, top) }
}

/// Runs a control call (`load`, `sites`) on the control stack with the
/// store lock held.
pub(crate) fn control_call(f: extern "C" fn(*mut u8) -> i64, req_off: usize) -> i32 {
    if dead() {
        return AgentError::Dead as i32;
    }
    let Some(c) = ctrl::get() else {
        return AgentError::NotInitialized as i32;
    };
    if AGENT.load(Ordering::Acquire).is_null() {
        return AgentError::NotInitialized as i32;
    }
    if CONTROL_BUSY.swap(1, Ordering::Acquire) != 0 {
        return AgentError::BadRequest as i32;
    }
    // Hits wait while the store changes.
    let held = loop {
        match lock::store(c, 0, LOCK_WAIT_MAX_NS) {
            lock::Held::No => {}
            h => break h,
        }
    };
    let mut off = req_off;
    let r = on_control_stack(f, &mut off as *mut usize as *mut u8);
    lock::release(c, held);
    CONTROL_BUSY.store(0, Ordering::Release);
    r as i32
}

/// Reads a `T` at offset `off` of the region (8-aligned, inside it).
pub(crate) fn read_req<T: Copy>(c: &ControlHeader, off: u64, what: &str) -> Result<T, i64> {
    if !off.is_multiple_of(8) {
        return Err(err(
            AgentError::BadRequest,
            format_args!("misaligned {what}"),
        ));
    }
    let Some(b) = ctrl::bytes(c, off, core::mem::size_of::<T>() as u64) else {
        return Err(err(
            AgentError::BadRequest,
            format_args!("{what} outside the region"),
        ));
    };
    // SAFETY: inside the region, aligned, plain data.
    Ok(unsafe { (b.as_ptr() as *const T).read() })
}
