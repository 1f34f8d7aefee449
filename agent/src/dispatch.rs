//! `wprobe_agent_dispatch`, the per-hit path: the dormant checks, the
//! thread's slot, the heartbeat, the switch to the thread's agent stack,
//! the MXCSR Wasm needs, and a probe site's handlers run under the store
//! lock (a return site's tracked calls are `calls`').

use agent_abi::{ControlHeader, LOCK_WAIT_MAX_NS, SavedRegs, Skip, site_kind, state};
use core::sync::atomic::Ordering;

use crate::init::FORK_GUARD;
use crate::run::run_probe;
use crate::sites::{Site, site};
use crate::{calls, ctrl, lock, ring, sys, thread};
use agent_abi::fork_guard;

/// The MXCSR Wasm code needs: round to nearest, no FTZ/DAZ, all masked.
const MXCSR_DEFAULT: u32 = 0x1F80;

#[inline(always)]
pub(crate) fn in_forked_child() -> bool {
    let g = FORK_GUARD.load(Ordering::Relaxed);
    // SAFETY: the fork-guard page is mapped for the life of the process.
    !g.is_null() && unsafe { g.add(fork_guard::MAGIC_WORD).read_volatile() } != fork_guard::MAGIC
}

/// A thread checks the tracer's heartbeat at one hit in this many (and at
/// every hit once it found it stale): a handler may run this many hits of
/// a thread after the heartbeat went stale, against a staleness bound of
/// seconds.
pub(crate) const BEAT_SAMPLE: u32 = 16;

/// Counts a hit of every enabled probe of `s` (its return probes' calls
/// included) as missed.
#[cold]
pub(crate) fn missed(c: &ControlHeader, s: &Site) {
    for &p in s.probes.iter().chain(s.ret_probes.iter()) {
        if let Some(slot) = ctrl::probe(c, p)
            && slot.enabled.load(Ordering::Relaxed) != 0
        {
            slot.missed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn any_enabled(c: &ControlHeader, probes: &[u32]) -> bool {
    probes
        .iter()
        .any(|&p| ctrl::probe(c, p).is_some_and(|slot| slot.enabled.load(Ordering::Relaxed) != 0))
}

#[repr(C)]
pub(crate) struct HitArgs {
    pub(crate) site: &'static Site,
    pub(crate) slot: &'static thread::Slot,
    /// The hit's thread (a vfork child's own, not the slot's).
    pub(crate) tid: u32,
    /// The hit's process (likewise).
    pub(crate) pid: u32,
    /// The hit is a vfork child's (see `crate::init::vfork_child`).
    pub(crate) vforked: bool,
    pub(crate) fs_base: u64,
    pub(crate) frame: *mut SavedRegs,
    /// Wall-clock time of the hit, when taken before the handlers (0: the
    /// first `now_ns` of a handler takes it).
    pub(crate) now: core::cell::Cell<u64>,
    /// The TSC of the hit, read once (0: not yet; see [`HitArgs::tsc`]).
    pub(crate) tsc: core::cell::Cell<u64>,
    /// The probe's address for the run header (a return probe's: its
    /// function's entry).
    pub(crate) ip: core::cell::Cell<u64>,
    /// The thread's stack below the probed code's red zone: its top (the
    /// agent's span ends there; see `FrameEnv::agent_stack`).
    pub(crate) below_red_zone: u64,
    /// No handler of this hit has run yet.
    pub(crate) fresh: core::cell::Cell<bool>,
}

impl HitArgs {
    /// The TSC of the hit: read at its heartbeat check, or now, once.
    pub(crate) fn tsc(&self) -> u64 {
        if self.tsc.get() == 0 {
            self.tsc.set(sys::rdtsc());
        }
        self.tsc.get()
    }
}

/// The store lock, taken when first needed and released on drop.
pub(crate) struct StoreLock<'a> {
    pub(crate) c: &'a ControlHeader,
    /// The hit's thread (the bias owner takes the store without the lock).
    pub(crate) me: u32,
    pub(crate) held: lock::Held,
}

impl StoreLock<'_> {
    /// Takes the lock unless held; false when it could not be had in time
    /// (counted as contended).
    pub(crate) fn take(&mut self) -> bool {
        if self.held == lock::Held::No {
            self.held = lock::store(self.c, self.me, LOCK_WAIT_MAX_NS);
            if self.held == lock::Held::No {
                self.c.stats.contended.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.held != lock::Held::No
    }
}

impl Drop for StoreLock<'_> {
    fn drop(&mut self) {
        lock::release(self.c, self.held);
    }
}

/// Runs the handlers of `site` on the registers saved in `frame`; register
/// writes land in `frame`. Returns the number of handlers run (>= 0) or a
/// [`Skip`] code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_dispatch(site_id: u32, frame: *mut SavedRegs) -> i64 {
    let Some(c) = ctrl::get() else {
        return Skip::Dormant as i64;
    };
    // In a fork child the tracer does not follow, the region is the
    // parent's: count nothing there.
    if in_forked_child() {
        return Skip::Dormant as i64;
    }
    let Some(s) = site(site_id) else {
        return Skip::NoHandler as i64;
    };
    // A call that makes a vfork child, counted whatever runs here (the
    // child's hits are told from its parent's while one is under way).
    if s.vfork != 0 {
        // SAFETY: the stub's frame, live for this hit.
        crate::init::vfork_mark(s.vfork, unsafe { (*frame).rax });
    }
    if c.state.load(Ordering::Relaxed) != state::READY || c.enabled.load(Ordering::Relaxed) == 0 {
        c.stats.dormant.fetch_add(1, Ordering::Relaxed);
        return Skip::Dormant as i64;
    }
    let at_ret = s.kind == site_kind::RET || s.kind == site_kind::CONT;
    if !at_ret && !any_enabled(c, &s.probes) && !any_enabled(c, &s.ret_probes) {
        return Skip::NoHandler as i64;
    }
    // A vfork child runs on the thread pointer (hence the slot, found
    // below) of the thread that made it, suspended meanwhile: the hit is
    // the child's. Not followed, it counts nothing, as an unfollowed fork
    // child, the slot untouched (that thread's tracked calls included).
    let vforked = crate::init::vfork_child();
    if vforked.is_some() && !crate::init::vfork_followed() {
        return Skip::Dormant as i64;
    }
    let Some((slot, fs)) = thread::current() else {
        c.stats.no_slot.fetch_add(1, Ordering::Relaxed);
        missed(c, s);
        return Skip::NoThreadSlot as i64;
    };
    // A `ret` where this thread has no tracked call: nothing to do.
    if at_ret && !calls::tracking(slot, vforked.is_some()) {
        return Skip::NoHandler as i64;
    }
    // The tracer's heartbeat, at one hit in BEAT_SAMPLE of each thread (a
    // TSC read costs a tenth of a hit); once stale, at every hit. The TSC
    // read there is the hit's time too; other hits read it when a handler
    // or a tracked call asks for the time.
    let skip = slot.beat_skip.load(Ordering::Relaxed);
    let tsc = if skip == 0 {
        let t = sys::rdtsc();
        if ring::heartbeat_stale(c, t) {
            c.stats.dormant.fetch_add(1, Ordering::Relaxed);
            missed(c, s);
            return Skip::Dormant as i64;
        }
        slot.beat_skip.store(BEAT_SAMPLE - 1, Ordering::Relaxed);
        t
    } else {
        slot.beat_skip.store(skip - 1, Ordering::Relaxed);
        0
    };
    let tid = match vforked {
        Some(_) => sys::gettid(),
        None => slot.tid.load(Ordering::Relaxed),
    };
    // A vfork child enters only while the thread that made it is outside
    // the agent (off its agent stack), and marks the slot busy in a word
    // of its own, with its tid: a child killed inside a hit leaves that
    // thread's word, and the next child's, free.
    let (busy, mark) = match vforked {
        Some(_) => (&slot.vfork_busy, tid),
        None => (&slot.busy, 1),
    };
    if slot.busy.load(Ordering::Relaxed) != 0
        || (vforked.is_some() && slot.vfork_busy.load(Ordering::Relaxed) == tid)
    {
        c.stats.reentered.fetch_add(1, Ordering::Relaxed);
        missed(c, s);
        return Skip::Reentered as i64;
    }
    busy.store(mark, Ordering::Relaxed);
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    let mut args = HitArgs {
        site: s,
        slot,
        tid,
        pid: vforked.unwrap_or_else(crate::init::pid),
        vforked: vforked.is_some(),
        fs_base: fs,
        frame,
        now: core::cell::Cell::new(0),
        tsc: core::cell::Cell::new(tsc),
        ip: core::cell::Cell::new(s.addr),
        // SAFETY: the stub's frame, live for this hit.
        below_red_zone: unsafe { (*frame).rsp }.wrapping_sub(agent_abi::RED_ZONE),
        fresh: core::cell::Cell::new(true),
    };
    let top = slot.stack.load(Ordering::Relaxed);
    // SAFETY: the thread's own agent stack, not in use (busy was 0; a
    // vfork child's thread is suspended outside the agent).
    let r = unsafe {
        thread::wprobe_call_on_stack(&mut args as *mut HitArgs as *mut u8, dispatch_inner, top)
    };
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    busy.store(0, Ordering::Relaxed);
    r
}

extern "C" fn dispatch_inner(arg: *mut u8) -> i64 {
    // SAFETY: `wprobe_agent_dispatch` passes its `HitArgs`.
    let h = unsafe { &*(arg as *const HitArgs) };
    let Some(c) = ctrl::get() else {
        return Skip::Dormant as i64;
    };
    let mxcsr = sys::stmxcsr();
    if mxcsr != MXCSR_DEFAULT {
        sys::ldmxcsr(MXCSR_DEFAULT);
    }
    let mut lock = StoreLock {
        c,
        // The slot's thread: a vfork child takes the store as the thread
        // that made it (suspended outside the agent: its slot was not
        // busy), keeping that thread's bias.
        me: h.slot.tid.load(Ordering::Relaxed),
        held: lock::Held::No,
    };
    let r = if h.site.kind == site_kind::RET || h.site.kind == site_kind::CONT {
        calls::at_ret(c, h, &mut lock)
    } else {
        at_probe(c, h, &mut lock)
    };
    drop(lock);
    if mxcsr != MXCSR_DEFAULT {
        sys::ldmxcsr(mxcsr);
    }
    r
}

/// A hit of a probe site: its probes' handlers run; at a function entry,
/// the calls of its return probes are tracked (after the calls this entry
/// proves abandoned are reported).
fn at_probe(c: &ControlHeader, h: &HitArgs, lock: &mut StoreLock<'_>) -> i64 {
    let entry = if h.site.ret_probes.is_empty() {
        None
    } else {
        // One clock read for the call's entry and the records of the hit.
        calls::now(h);
        calls::at_entry(c, h, lock)
    };
    let mut ran = 0;
    if any_enabled(c, &h.site.probes) {
        if !lock.take() {
            missed(c, h.site);
            return Skip::Contended as i64;
        }
        // SAFETY: the stub's frame, live for this hit; at a watchpoint's
        // stub the tracer saved the thread's `rip` below its red zone.
        unsafe {
            (*h.frame).rip = if h.site.kind == site_kind::WATCH {
                (((*h.frame).rsp - agent_abi::WATCH_RIP_BELOW) as *const u64).read()
            } else {
                h.site.addr
            };
        }
        // SAFETY: as above.
        h.ip.set(unsafe { (*h.frame).rip });
        for &p in h.site.probes {
            // The tracer may have disabled the agent meanwhile (`exit()` of a
            // handler of another probe of this site included).
            if c.enabled.load(Ordering::Relaxed) == 0 {
                break;
            }
            if let Some(slot) = ctrl::probe(c, p)
                && slot.enabled.load(Ordering::Relaxed) != 0
                && run_probe(c, slot, p, h)
            {
                ran += 1;
            }
        }
    }
    if let Some(e) = entry {
        calls::track(c, h, e, lock);
    }
    ran
}
