//! A safety net for the trap sites (an `hlt` where no jump fits): while
//! wprobe lives, it takes each thread that faults there (a ptrace stop,
//! the SIGSEGV never delivered) and moves it to the site's stub. If wprobe
//! dies — SIGKILL included — the kernel lets a thread stopped at such a
//! trap go and drops its signal: the thread executes the site again (an
//! `hlt` faults, leaving `rip` at the site), and so does a thread that
//! reaches a trap before wprobe's watchdog has put the byte back. Then the
//! SIGSEGV is delivered. So, when the program leaves SIGSEGV at its
//! default action, the agent installs a handler for it: a SIGSEGV raised
//! at one of our sites moves the thread to the site's stub (which runs the
//! displaced instruction; the handlers are dormant by then), exactly as
//! wprobe would have; any other SIGSEGV gets the default action back and
//! happens again (a fault: the instruction faults again; a signal sent by
//! `kill`: raised again), so the program dies of it as it would have.
//!
//! The handler never runs while wprobe lives (it takes every SIGSEGV of
//! its sites first), except for a SIGSEGV that is not ours, which ends the
//! program as before. A program that installs its own SIGSEGV handler
//! replaces the net, and is as before: its threads depend on wprobe's
//! watchdog alone. The handler touches only its own stack frame and the
//! read-only table of trap sites.

use crate::sys;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicPtr, Ordering};

/// Trap sites: (address of the `hlt`, the site's stub), sorted.
static TRAPS: AtomicPtr<Vec<(u64, u64)>> = AtomicPtr::new(core::ptr::null_mut());

const SIGSEGV: usize = 11;
const SA_SIGINFO: u64 = 4;
const SA_RESTORER: u64 = 0x0400_0000;
/// `si_code` of the SIGSEGV an `hlt` raises (a #GP).
const SI_KERNEL: i32 = 0x80;
/// Offset of the saved `rip` in a `ucontext_t` (`uc_mcontext.gregs[REG_RIP]`).
const UC_RIP: usize = 40 + 16 * 8;

/// The kernel's `struct sigaction` (x86_64).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct KernelSigaction {
    handler: u64,
    flags: u64,
    restorer: u64,
    mask: u64,
}

fn sigaction(act: Option<&KernelSigaction>, old: Option<&mut KernelSigaction>) -> bool {
    const SYS_RT_SIGACTION: usize = 13;
    let act = act.map_or(0, |a| a as *const KernelSigaction as usize);
    let old = old.map_or(0, |o| o as *mut KernelSigaction as usize);
    // SAFETY: both pointers are null or point at a live KernelSigaction of
    // the kernel's layout; the mask is 8 bytes (the size passed).
    unsafe { sys::syscall4(SYS_RT_SIGACTION, SIGSEGV, act, old, 8) == 0 }
}

/// Returns from the handler.
#[unsafe(naked)]
extern "C" fn restorer() {
    core::arch::naked_asm!("mov eax, 15", "syscall", "ud2");
}

extern "C" fn on_fault(_sig: i32, info: *const u8, uc: *mut u8) {
    // SAFETY: the kernel's siginfo (si_code at offset 8) and ucontext for
    // this delivery, live while the handler runs.
    let (code, rip) = unsafe {
        (
            (info.add(8) as *const i32).read(),
            (uc.add(UC_RIP) as *const u64).read(),
        )
    };
    // The `hlt` of one of our sites (wprobe's watchdog may have put the
    // byte back since: the thread faulted on ours all the same).
    if code == SI_KERNEL
        && let Some(stub) = stub_of(rip)
    {
        // SAFETY: the ucontext's rip slot (see above).
        unsafe { (uc.add(UC_RIP) as *mut u64).write(stub) };
        crate::ctrl::stats(|s| s.trap_net_moved.fetch_add(1, Ordering::Relaxed));
        return;
    }
    crate::ctrl::stats(|s| s.trap_net_passed.fetch_add(1, Ordering::Relaxed));
    // Not ours: what the program would have had without the net. A fault
    // happens again when the instruction runs again; a signal sent (a
    // `si_code` of zero or below: kill, tgkill, sigqueue) is sent again.
    let dfl = KernelSigaction::default();
    sigaction(Some(&dfl), None);
    if code <= 0 {
        const SYS_TGKILL: usize = 234;
        // SAFETY: signals this thread; no memory is passed.
        unsafe {
            sys::syscall3(
                SYS_TGKILL,
                sys::self_pid() as usize,
                sys::gettid() as usize,
                SIGSEGV,
            )
        };
    }
}

/// The stub of the trap site at `at`.
fn stub_of(at: u64) -> Option<u64> {
    // SAFETY: published tables are never changed nor freed.
    let t = unsafe { TRAPS.load(Ordering::Acquire).as_ref()? };
    let i = t.binary_search_by_key(&at, |&(a, _)| a).ok()?;
    Some(t[i].1)
}

/// Sets the trap sites (every one of the run's: a later call, for a
/// library mapped since, replaces the table; the old one is never freed, a
/// handler may be reading it) and, when there are some and SIGSEGV is at
/// its default action, installs the handler. Returns whether it is
/// installed.
pub fn arm(mut traps: Vec<(u64, u64)>) -> bool {
    if traps.is_empty() {
        return false;
    }
    traps.sort_unstable();
    TRAPS.store(
        alloc::boxed::Box::into_raw(alloc::boxed::Box::new(traps)),
        Ordering::Release,
    );
    let mut old = KernelSigaction::default();
    if !sigaction(None, Some(&mut old)) {
        return false;
    }
    let ours = on_fault as *const () as usize as u64;
    if old.handler == ours {
        return true;
    }
    if old.handler != 0 {
        return false;
    }
    let act = KernelSigaction {
        handler: ours,
        flags: SA_SIGINFO | SA_RESTORER,
        restorer: restorer as *const () as usize as u64,
        mask: 0,
    };
    sigaction(Some(&act), None)
}
