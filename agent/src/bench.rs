//! `wprobe_agent_bench`: one layer of a dispatch measured `n` times inside
//! the agent (the clock, the store lock, the slot lookup, the stack switch,
//! `set_fuel`, the handler call, the whole dispatch), and a panic for tests.

use agent_abi::{LOCK_WAIT_MAX_NS, SavedRegs};
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use hostabi::manifest::MAX_HANDLER_ARGS;

use crate::dispatch::wprobe_agent_dispatch;
use crate::sites::site;
use crate::{agent, ctrl, lock, sys, thread, vdso};

#[repr(C)]
struct BenchArgs {
    what: u32,
    site: u32,
    n: u64,
    frame: *mut SavedRegs,
}

extern "C" fn noop(_: *mut u8) -> i64 {
    0
}

/// Measures one layer of a dispatch `n` times inside the agent; returns the
/// CPU time of the calling thread it took, in ns (CLOCK_THREAD_CPUTIME_ID,
/// like wprobe's benches; 0 if `what` is unknown or the agent is not ready).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_bench(
    what: u32,
    site: u32,
    n: u64,
    frame: *mut SavedRegs,
) -> u64 {
    use agent_abi::bench::*;
    let t0 = sys::clock_ns(sys::CLOCK_THREAD_CPUTIME_ID);
    match what {
        EMPTY => {
            for _ in 0..n {
                core::hint::black_box(sys::rdtsc());
            }
        }
        CLOCK => {
            for _ in 0..n {
                core::hint::black_box(vdso::clock_ns(sys::CLOCK_REALTIME));
            }
        }
        LOCK => {
            let Some(c) = ctrl::get() else { return 0 };
            // As a hit of this thread takes it (the bias included).
            let me = thread::current().map_or(0, |(s, _)| s.tid.load(Ordering::Relaxed));
            for _ in 0..n {
                let held = lock::store(c, me, LOCK_WAIT_MAX_NS);
                lock::release(c, held);
            }
        }
        DISPATCH => {
            for _ in 0..n {
                // SAFETY: the caller's frame.
                core::hint::black_box(unsafe { wprobe_agent_dispatch(site, frame) });
            }
        }
        SLOT => {
            for _ in 0..n {
                core::hint::black_box(thread::current());
            }
        }
        STACK_SWITCH => {
            for _ in 0..n {
                let Some((s, _)) = thread::current() else {
                    return 0;
                };
                let top = s.stack.load(Ordering::Relaxed);
                // SAFETY: the thread's own stack, not in use.
                core::hint::black_box(unsafe {
                    thread::wprobe_call_on_stack(core::ptr::null_mut(), noop, top)
                });
            }
        }
        PANIC => {
            let Some((s, _)) = thread::current() else {
                return 0;
            };
            let top = s.stack.load(Ordering::Relaxed);
            // SAFETY: the thread's own stack, not in use.
            let r = unsafe { thread::wprobe_call_on_stack(core::ptr::null_mut(), panics, top) };
            return r as u64;
        }
        SET_FUEL | CALL => {
            let Some((s, _)) = thread::current() else {
                return 0;
            };
            let mut args = BenchArgs {
                what,
                site,
                n,
                frame,
            };
            let top = s.stack.load(Ordering::Relaxed);
            // SAFETY: the thread's own stack, not in use.
            let r = unsafe {
                thread::wprobe_call_on_stack(
                    &mut args as *mut BenchArgs as *mut u8,
                    bench_inner,
                    top,
                )
            };
            if r != 0 {
                return 0;
            }
        }
        _ => return 0,
    }
    sys::clock_ns(sys::CLOCK_THREAD_CPUTIME_ID) - t0
}

extern "C" fn panics(_: *mut u8) -> i64 {
    // Hold the store like a handler run would, then fail.
    if let Some(c) = ctrl::get() {
        while lock::store(c, 0, LOCK_WAIT_MAX_NS) == lock::Held::No {}
    }
    let v: Vec<u8> = Vec::new();
    // An index out of bounds: a bug, as far as the agent knows.
    i64::from(v[core::hint::black_box(3)])
}

extern "C" fn bench_inner(arg: *mut u8) -> i64 {
    // SAFETY: `wprobe_agent_bench` passes its `BenchArgs`.
    let b = unsafe { &*(arg as *const BenchArgs) };
    let Some(c) = ctrl::get() else { return 1 };
    let held = lock::store(c, 0, LOCK_WAIT_MAX_NS);
    if held == lock::Held::No {
        return 1;
    }
    let r = (|| {
        let a = agent()?;
        let p = *site(b.site)?.probes.first()?;
        let pf = a.probes.get(p as usize)?.as_ref()?;
        let prog = &a.programs[pf.program as usize];
        let d = a.store.data_mut();
        d.env.frame = b.frame;
        d.memory = prog.memory;
        d.services.map = prog.map;
        for _ in 0..b.n {
            let _ = a.store.set_fuel(prog.fuel);
            if b.what == agent_abi::bench::CALL {
                let args = [0; MAX_HANDLER_ARGS];
                let _ = core::hint::black_box(pf.handler.call(&mut a.store, &args));
                a.store.data_mut().sink.clear();
            }
        }
        a.store.data_mut().env.frame = core::ptr::null_mut();
        Some(())
    })();
    lock::release(c, held);
    if r.is_some() { 0 } else { 1 }
}
