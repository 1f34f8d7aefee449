//! `wprobe_agent_fast`, the fast path of calls that are only told (the
//! notices of `wprobe trace`, [`agent_abi::ProbeSlot::entry_notice`]): the
//! trampoline of a site the table of [`FastSite`]s marks saves only the
//! flags and the registers a C call may change ([`FastRegs`]) and calls
//! here, on the probed thread's stack; the common hit — a function entered
//! on its thread's stack of tracked calls, or the `ret` of the innermost
//! tracked call — is told here. Anything else returns [`fast::FULL`]
//! before it changed anything, and the trampoline takes the full frame and
//! calls `wprobe_agent_dispatch`, which does it all (a thread's first
//! call, calls abandoned, stacks switched, the ring full, the lock or the
//! bias busy, a vfork child, a fork child, a dormant agent, a handler).
//!
//! The trampoline keeps no vector register: nothing reachable from here
//! may use one (no float, no struct copy the compiler would vectorise: the
//! notice and the tracked call are written a word at a time), nor call
//! through a pointer. `agent_loader`'s test `fast_path_uses_no_vector_register`
//! disassembles this code in the built agent and checks it.

use agent_abi::fast::{self, FastRegs, FastSite};
use agent_abi::{ControlHeader, RUN_HEADER_SIZE, entry, probe_flag, site_kind, state};
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::calls::{SWITCHES, Shadow, Tracked};
use crate::dispatch::{BEAT_SAMPLE, in_forked_child};
use crate::lock::{self, Held};
use crate::thread::Slot;
use crate::{ctrl, ring, sys, thread, vdso};

/// The table of [`FastSite`]s, indexed by site id (null until the first
/// sites are added): published with the site table, never changed once
/// published nor freed. Its address is in every stub area's slots: the
/// trampoline reads a site's [`FastSite::fast`] there.
#[unsafe(no_mangle)]
#[allow(
    non_upper_case_globals,
    reason = "a C symbol (agent_abi::sym::FAST_TABLE)"
)]
pub static wprobe_agent_fast_table: AtomicPtr<FastSite> = AtomicPtr::new(core::ptr::null_mut());

/// The length of [`wprobe_agent_fast_table`], stored after it (tables
/// only grow: a length read first never exceeds the table read next).
static FAST_LEN: AtomicU64 = AtomicU64::new(0);

/// Publishes `table` (a site id's entry at its index); with every other
/// thread stopped or before any stub reaches the sites, as the site table.
pub(crate) fn publish(table: alloc::vec::Vec<FastSite>) {
    let len = table.len() as u64;
    let p = alloc::boxed::Box::leak(table.into_boxed_slice()).as_mut_ptr();
    wprobe_agent_fast_table.store(p, Ordering::Release);
    FAST_LEN.store(len, Ordering::Release);
}

/// The fast-path entry of a site: `fast` set for a `ret` or continuation
/// site and for a function entry whose only probe is a return probe; not
/// for a site that counts calls making vfork children.
pub(crate) fn entry_of(s: &crate::sites::Site) -> FastSite {
    let fast = s.vfork == 0
        && match s.kind {
            site_kind::RET | site_kind::CONT => true,
            site_kind::PROBE => s.probes.is_empty() && s.ret_probes.len() == 1,
            _ => false,
        };
    FastSite {
        addr: s.addr,
        probe: s.ret_probes.first().copied().unwrap_or(0),
        kind: s.kind as u16,
        fast: u16::from(fast),
    }
}

#[inline(always)]
fn fast_site(id: u32) -> Option<FastSite> {
    let len = FAST_LEN.load(Ordering::Acquire);
    let t = wprobe_agent_fast_table.load(Ordering::Acquire);
    if u64::from(id) >= len || t.is_null() {
        return None;
    }
    // SAFETY: published tables have `len` entries or more and are never
    // changed nor freed.
    Some(unsafe { t.add(id as usize).read() })
}

/// Tells the hit of site `site` whose registers the trampoline saved at
/// `frame`, or returns [`fast::FULL`] having changed nothing.
///
/// # Safety
/// Called by the trampoline only: `frame` is its [`FastRegs`], with the
/// probed thread's stack [`fast::ABOVE`] bytes above it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_fast(site: u32, frame: *mut FastRegs) -> u64 {
    let Some(c) = ctrl::get() else {
        return fast::FULL;
    };
    let Some(s) = fast_site(site) else {
        return fast::FULL;
    };
    if s.fast == 0
        || in_forked_child()
        || c.state.load(Ordering::Relaxed) != state::READY
        || c.enabled.load(Ordering::Relaxed) == 0
        || crate::init::vfork_maybe()
    {
        return fast::FULL;
    }
    let Some(slot) = thread::existing() else {
        return fast::FULL;
    };
    if slot.busy.load(Ordering::Relaxed) != 0 {
        return fast::FULL;
    }
    let p = slot.shadow.load(Ordering::Relaxed);
    if p == 0 {
        return fast::FULL;
    }
    // SAFETY: the thread's stack of tracked calls (see `calls::shadow`),
    // touched by this thread alone (not busy: nothing of the agent runs on
    // it now).
    let sh = unsafe { &mut *(p as *mut Shadow) };
    let tid = slot.tid.load(Ordering::Relaxed);
    if sh.tid != tid {
        return fast::FULL;
    }
    let rsp = frame as u64 + fast::ABOVE;
    slot.busy.store(1, Ordering::Relaxed);
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    let r = match u32::from(s.kind) {
        site_kind::PROBE => enter(c, &s, slot, sh, rsp, frame),
        _ => leave(c, &s, slot, sh, rsp, frame),
    };
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    slot.busy.store(0, Ordering::Relaxed);
    r
}

/// What the fast path reads of a tracked call.
#[derive(Clone, Copy)]
struct Top {
    probe: u32,
    seg: u32,
    func: u64,
    entry_rsp: u64,
    ret_addr: u64,
    entry_ns: u64,
}

/// The tracked call `i` of `sh` (below its length), read a field at a time.
#[inline(always)]
fn call(sh: &Shadow, i: u32) -> Top {
    // SAFETY: `i < len <= cap`: inside the mapping, written.
    unsafe {
        let c: *const Tracked = sh.calls.add(i as usize);
        Top {
            probe: (&raw const (*c).probe).read_volatile(),
            seg: (&raw const (*c).seg).read_volatile(),
            func: (&raw const (*c).func).read_volatile(),
            entry_rsp: (&raw const (*c).entry_rsp).read_volatile(),
            ret_addr: (&raw const (*c).ret_addr).read_volatile(),
            entry_ns: (&raw const (*c).entry_ns).read_volatile(),
        }
    }
}

/// The heartbeat checked at one hit in [`BEAT_SAMPLE`] as `dispatch`
/// does (counted down at the others): whether it is stale (nothing
/// changed then).
#[inline(always)]
fn beat_stale(c: &ControlHeader, slot: &Slot) -> bool {
    if slot.beat_skip.load(Ordering::Relaxed) == 0 {
        beat_stale_at(c, slot, sys::rdtsc())
    } else {
        beat_stale_at(c, slot, 0)
    }
}

/// [`beat_stale`] with the TSC read (`t`; not looked at unless the
/// heartbeat is checked at this hit).
#[inline(always)]
fn beat_stale_at(c: &ControlHeader, slot: &Slot, t: u64) -> bool {
    let skip = slot.beat_skip.load(Ordering::Relaxed);
    if skip == 0 {
        if ring::heartbeat_stale(c, t) {
            return true;
        }
        slot.beat_skip.store(BEAT_SAMPLE - 1, Ordering::Relaxed);
    } else {
        slot.beat_skip.store(skip - 1, Ordering::Relaxed);
    }
    false
}

/// What a notice of `size` bytes needs, all had without waiting: its
/// time (from the TSC rate the tracer publishes), the store (as the
/// slot's thread), `admit` true with the store held (what the store lock
/// guards, as a probe's live count, is read there), its room in the ring
/// and a heartbeat not stale (checked at one hit in [`BEAT_SAMPLE`], see
/// [`beat_stale`]: last, the countdown being the one thing changed);
/// `None` (nothing held, nothing changed) when one is not there.
#[inline(always)]
fn begin(
    c: &ControlHeader,
    slot: &Slot,
    size: u64,
    admit: impl FnOnce() -> bool,
) -> Option<(u64, Held, *mut u8, u64)> {
    let tsc = sys::rdtsc();
    let t = vdso::tsc_wall_ns(c, tsc)?;
    let held = lock::try_store(c, slot.tid.load(Ordering::Relaxed));
    if held == Held::No {
        return None;
    }
    // A reserved entry not published is no change: the ring's head moves
    // only when the caller stores it.
    match admit().then(|| ring::reserve_now(c, size)).flatten() {
        Some((at, head)) if !beat_stale_at(c, slot, tsc) => Some((t, held, at, head)),
        _ => {
            lock::release(c, held);
            None
        }
    }
}

/// Writes a notice's header and words at `at` (reserved), a word at a
/// time; the caller publishes the head.
#[inline(always)]
fn write_notice<const N: usize>(at: *mut u8, head: [u64; 6], words: [u64; N]) {
    let w = at as *mut u64;
    // SAFETY: `at` is a reserved, 8-aligned entry of RUN_HEADER_SIZE + 8 N
    // bytes.
    unsafe {
        for (i, v) in head.into_iter().enumerate() {
            w.add(i).write_volatile(v);
        }
        for (i, v) in words.into_iter().enumerate() {
            w.add(RUN_HEADER_SIZE / 8 + i).write_volatile(v);
        }
    }
}

/// A notice's [`agent_abi::RunHeader`] as six words (`size`, `kind`,
/// `n_records`; `probe`, `tid`; `cpu`, `outcome`; `pid`; `time_ns`; `ip`).
#[inline(always)]
fn header(size: u64, kind: u16, probe: u32, tid: u32, t: u64, ip: u64) -> [u64; 6] {
    [
        size | u64::from(kind) << 32,
        u64::from(probe) | u64::from(tid) << 32,
        crate::host::current_cpu() & 0xFFFF_FFFF,
        u64::from(crate::init::pid()),
        t,
        ip,
    ]
}

/// A function entry whose only probe is a return probe with notices: the
/// call tracked and told, when it is the common case.
#[inline(always)]
fn enter(
    c: &ControlHeader,
    s: &FastSite,
    slot: &Slot,
    sh: &mut Shadow,
    rsp: u64,
    frame: *const FastRegs,
) -> u64 {
    let Some(ps) = ctrl::probe(c, s.probe) else {
        return fast::FULL;
    };
    if ps.enabled.load(Ordering::Relaxed) == 0
        || ps.entry_notice == 0
        || ps.flags.load(Ordering::Relaxed) & probe_flag::SWITCHES_STACK != 0
        || sh.len >= sh.cap
    {
        return fast::FULL;
    }
    // SAFETY: at a function's entry `rsp` points at the return address.
    let ret_addr = unsafe { (rsp as *const u64).read() };
    // The calls this entry keeps: all of them, in the one case handled
    // here (`pairing::kept_at_entry` and `calls::returned_unseen`): the
    // innermost one's frame is above this entry's and its return-address
    // slot, on the stack the thread's calls were seen on, is intact.
    let base = if sh.len == 0 {
        0
    } else {
        let top = call(sh, sh.len - 1);
        let (lo, hi) = sh.stack;
        if top.seg & SWITCHES != 0 || top.entry_rsp <= rsp || rsp < lo || rsp >= hi {
            return fast::FULL;
        }
        // SAFETY: `rsp < entry_rsp < hi - 8`: inside this thread's stack,
        // mapped while it runs on it; an aligned word.
        if top.entry_rsp.saturating_add(8) <= hi
            && unsafe { (top.entry_rsp as *const u64).read_volatile() } != top.ret_addr
        {
            return fast::FULL;
        }
        (top.seg & !SWITCHES).min(sh.len - 1)
    };
    let size = (RUN_HEADER_SIZE + 8) as u64;
    let tid = sh.tid;
    // The live count read with the store held, as `calls::track` reads
    // it: read before, another thread's call could be tracked between
    // the look and the lock, and this one too, past `maxactive`.
    let room = || {
        let live = ps
            .live
            .load(Ordering::Relaxed)
            .wrapping_sub(ps.live_lost.load(Ordering::Relaxed));
        live < ps.maxactive
    };
    let Some((t, held, at, head)) = begin(c, slot, size, room) else {
        return fast::FULL;
    };
    ps.live
        .store(ps.live.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    // SAFETY: the trampoline's frame, live for this hit.
    let f = unsafe { &*frame };
    // SAFETY: `len < cap`: inside the mapping; written a word at a time.
    unsafe {
        let at_call = sh.calls.add(sh.len as usize);
        (&raw mut (*at_call).probe).write_volatile(s.probe);
        (&raw mut (*at_call).seg).write_volatile(base);
        (&raw mut (*at_call).func).write_volatile(s.addr);
        (&raw mut (*at_call).entry_rsp).write_volatile(rsp);
        (&raw mut (*at_call).ret_addr).write_volatile(ret_addr);
        let regs = [f.rdi, f.rsi, f.rdx, f.rcx, f.r8, f.r9, rsp];
        for (i, v) in regs.into_iter().enumerate() {
            (&raw mut (*at_call).regs[i]).write_volatile(v);
        }
        (&raw mut (*at_call).entry_ns).write_volatile(t);
    }
    sh.len += 1;
    write_notice(
        at,
        header(size, entry::ENTERED, s.probe, tid, t, s.addr),
        [rsp],
    );
    c.ring.head.store(head, Ordering::Release);
    lock::release(c, held);
    fast::DONE
}

/// A `ret` (or a continuation site): the innermost tracked call, when it
/// is the one returning here alone and is only told, ended and told.
#[inline(always)]
fn leave(
    c: &ControlHeader,
    s: &FastSite,
    slot: &Slot,
    sh: &mut Shadow,
    rsp: u64,
    frame: *const FastRegs,
) -> u64 {
    if sh.len == 0 {
        // No tracked call: nothing returns (`dispatch` does the same).
        return fast::DONE;
    }
    let (after, to) = if u32::from(s.kind) == site_kind::CONT {
        (rsp, s.addr)
    } else {
        // SAFETY: just before a `ret`, `rsp` points at the return address.
        (rsp + 8, unsafe { (rsp as *const u64).read() })
    };
    let ret_slot = after.wrapping_sub(8);
    let top = call(sh, sh.len - 1);
    if top.seg & SWITCHES != 0 {
        return fast::FULL;
    }
    let base = (top.seg & !SWITCHES).min(sh.len - 1);
    if top.entry_rsp > ret_slot {
        // Not a return of a tracked call (`pairing::returning` finds none
        // when the thread's calls are all of one stack). `dispatch` looks
        // at the heartbeat first, at one hit in BEAT_SAMPLE, and counts a
        // hit that finds it stale `dormant`: so here too (the TSC read
        // only at those hits).
        if base != 0 || beat_stale(c, slot) {
            return fast::FULL;
        }
        return fast::DONE;
    }
    if top.entry_rsp != ret_slot
        || top.ret_addr != to
        || (sh.len >= 2 && sh.len - 2 >= base && call(sh, sh.len - 2).entry_rsp == ret_slot)
    {
        return fast::FULL;
    }
    let Some(ps) = ctrl::probe(c, top.probe) else {
        return fast::FULL;
    };
    if ps.entry_notice == 0 || ps.enabled.load(Ordering::Relaxed) == 0 {
        return fast::FULL;
    }
    let size = (RUN_HEADER_SIZE + 24) as u64;
    let tid = sh.tid;
    let Some((t, held, at, head)) = begin(c, slot, size, || true) else {
        return fast::FULL;
    };
    sh.len -= 1;
    ps.live.store(
        ps.live.load(Ordering::Relaxed).wrapping_sub(1),
        Ordering::Relaxed,
    );
    // SAFETY: the trampoline's frame, live for this hit.
    let rax = unsafe { (*frame).rax };
    write_notice(
        at,
        header(size, entry::RETURNED, top.probe, tid, t, top.func),
        [rax, top.entry_rsp, t.saturating_sub(top.entry_ns)],
    );
    c.ring.head.store(head, Ordering::Release);
    lock::release(c, held);
    fast::DONE
}
