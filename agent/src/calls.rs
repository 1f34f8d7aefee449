//! Return probes in the target. No return address is rewritten: a return
//! probe's function entry is a probe site that tracks the call, and each
//! `ret` through which its calls return is a return site whose stub calls
//! `dispatch` just before the `ret` (the return address at `[rsp]`). Calls
//! are paired per thread by the stack pointer, as the tracer's transports
//! pair them (`agent_abi::pairing`): each thread has a fixed stack of
//! tracked calls (entry registers, `rsp`, return address, entry time),
//! mapped at its first tracked call, touched only by its own thread, so
//! tracking takes no lock. A thread running on several stacks
//! (`swapcontext`) has its calls cut into segments, one per stack, an open
//! call of a probe marked [`agent_abi::probe_flag::SWITCHES_STACK`] ending
//! one (`agent_abi::pairing`): a segment a return is found in is moved to
//! the end in place (no allocation). A call found abandoned (`longjmp`, an exception
//! unwinding through it; or its thread gone, when a new thread takes over
//! the thread slot) is reported to the tracer as an unwound record
//! ([`agent_abi::rec::UNWOUND`]), innermost first, before the thread's
//! next handler run. Calls beyond a probe's `maxactive` are counted as
//! missed; a thread's stack of tracked calls starts with room for
//! [`FIRST_DEPTH`] and doubles when full, up to
//! [`agent_abi::MAX_TRACKED_CALLS`], beyond which calls are counted as
//! missed (`missed_depth`).

use crate::dispatch::{HitArgs, StoreLock};
use crate::run::run_probe;
use crate::thread::Slot;
use crate::{agent, ring, sys, vdso};
use agent_abi::pairing::{self, CallFrame};
use agent_abi::{
    ControlHeader, ProbeSlot, RunHeader, left, probe_flag, rec, run_outcome, site_kind,
};
use core::sync::atomic::Ordering;
use hostabi::env::EntryState;

/// Tracked calls a thread has room for at first (96 KiB); the room doubles
/// whenever it is full (`mremap`, at most 10 times: a system call at one
/// entry in a thousand deep, never in a steady state).
pub const FIRST_DEPTH: usize = 1024;

/// A tracked call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Tracked {
    pub(crate) probe: u32,
    /// [`CallFrame::base`], with [`SWITCHES`] set for a call of a function
    /// that switches stacks.
    pub(crate) seg: u32,
    pub(crate) func: u64,
    pub(crate) entry_rsp: u64,
    pub(crate) ret_addr: u64,
    /// rdi, rsi, rdx, rcx, r8, r9, rsp at the entry.
    pub(crate) regs: [u64; 7],
    /// Wall-clock time of the entry (ns).
    pub(crate) entry_ns: u64,
}

impl CallFrame for Tracked {
    fn entry_rsp(&self) -> u64 {
        self.entry_rsp
    }
    fn ret_addr(&self) -> u64 {
        self.ret_addr
    }
    fn func(&self) -> u64 {
        self.func
    }
    fn switches(&self) -> bool {
        self.seg & SWITCHES != 0
    }
    fn base(&self) -> u32 {
        self.seg & !SWITCHES
    }
    fn set_base(&mut self, base: u32) {
        self.seg = (self.seg & SWITCHES) | (base & !SWITCHES);
    }
}

/// The bit of [`Tracked::seg`] marking a call that switches stacks (bases
/// stay below [`agent_abi::MAX_TRACKED_CALLS`]).
pub(crate) const SWITCHES: u32 = 1 << 31;

/// A thread's tracked calls, innermost last.
#[repr(C)]
pub struct Shadow {
    /// The thread they belong to.
    pub(crate) tid: u32,
    /// Its process (the shadow is copied into a fork child).
    pub(crate) pid: u32,
    pub(crate) len: u32,
    /// Room in `calls` (tracked calls).
    pub(crate) cap: u32,
    /// `calls` could not grow: calls beyond `cap` are missed.
    full: u32,
    /// The tracked calls (`cap` of them mapped, `len` in use).
    pub(crate) calls: *mut Tracked,
    /// The thread's stack (`[lo, hi)`, the mapping `rsp` was in when first
    /// needed; `(0, 0)`: not looked up yet), where return-address slots of
    /// tracked calls may be read (`returned_unseen`), and how many more
    /// times it may be looked up again (the main stack grows down).
    pub(crate) stack: (u64, u64),
    lookups: u32,
    /// A vfork child's only: the call stack of a vfork child of its
    /// process (nested: made while it runs, on the same thread pointer),
    /// mapped at its first use and kept for the next (0: none yet).
    inner: usize,
    /// The slot's first vfork child's only: how many call stacks of the
    /// chain it starts (itself, then each one's `inner`) are of vfork
    /// children alive, each made by the one before.
    depth: u32,
}

impl Shadow {
    /// The tracked calls, innermost last.
    #[inline(always)]
    fn calls(&self) -> &[Tracked] {
        // SAFETY: `calls` holds `cap >= len` calls, written up to `len`
        // (zero-filled beyond: a valid `Tracked`).
        unsafe { core::slice::from_raw_parts(self.calls, self.len as usize) }
    }

    /// The tracked calls, innermost last, to reorder (pairing moves a
    /// stack's calls to the end when the thread switches back to it).
    #[inline(always)]
    fn calls_mut(&mut self) -> &mut [Tracked] {
        // SAFETY: as in `calls`; the thread's own, borrowed mutably.
        unsafe { core::slice::from_raw_parts_mut(self.calls, self.len as usize) }
    }

    /// Call `i` (below `cap`: a call just popped is still there).
    #[inline(always)]
    fn call(&self, i: usize) -> Tracked {
        assert!(i < self.cap as usize, "invariant: a tracked call's index");
        // SAFETY: below `cap`: inside the mapping (zero-filled or written).
        unsafe { self.calls.add(i).read() }
    }

    /// Room for one more call: grows `calls` when full (doubling, up to
    /// [`agent_abi::MAX_TRACKED_CALLS`]); false when it cannot.
    fn room(&mut self) -> bool {
        if self.len < self.cap {
            return true;
        }
        let cap = self.cap as usize;
        if self.full != 0 || cap >= agent_abi::MAX_TRACKED_CALLS {
            return false;
        }
        let size = core::mem::size_of::<Tracked>();
        let new_cap = (cap * 2).min(agent_abi::MAX_TRACKED_CALLS);
        // SAFETY: `calls` is this thread's own mapping of `cap` calls,
        // touched by no other thread; on success the old range is gone and
        // only the new pointer is used.
        match unsafe { sys::mremap_maymove(self.calls as *mut u8, cap * size, new_cap * size) } {
            Ok(p) => {
                self.calls = p as *mut Tracked;
                self.cap = new_cap as u32;
                true
            }
            Err(_) => {
                self.full = 1;
                false
            }
        }
    }

    /// Appends a call (room was made by [`Shadow::room`]).
    #[inline(always)]
    fn push(&mut self, t: Tracked) {
        debug_assert!(self.len < self.cap);
        // SAFETY: `len < cap`: inside the mapping.
        unsafe { self.calls.add(self.len as usize).write(t) };
        self.len += 1;
    }
}

/// Times a thread's stack mapping is read from `/proc/self/maps` at most
/// (once, and again when a growing main stack leaves the range seen).
const STACK_LOOKUPS: u32 = 4;

/// The entry state of a hit at a return-probed function's entry, taken
/// before its handlers run (they may write registers).
pub struct Entry {
    shadow: &'static mut Shadow,
    regs: [u64; 7],
    ret_addr: u64,
}

/// The call stack of the thread of `slot` (`vforked`: of its vfork
/// child), mapped at its first use (zero-filled: empty; room for
/// [`FIRST_DEPTH`] calls). `None` when it cannot be mapped.
fn shadow(slot: &Slot, vforked: bool) -> Option<&'static mut Shadow> {
    let at = if vforked {
        &slot.vfork_shadow
    } else {
        &slot.shadow
    };
    let mut p = at.load(Ordering::Relaxed);
    if p == 0 {
        p = map_shadow()?;
        at.store(p, Ordering::Relaxed);
    }
    // SAFETY: mapped for the life of the process, used only by the thread
    // owning the slot, or its vfork child while the thread is suspended
    // (inside the agent, `busy` set).
    Some(unsafe { &mut *(p as *mut Shadow) })
}

/// A new empty call stack (zero-filled, room for [`FIRST_DEPTH`] calls),
/// mapped for the life of the process; `None` when it cannot be.
fn map_shadow() -> Option<usize> {
    let map = |size: usize| {
        sys::mmap(
            0,
            size.next_multiple_of(4096),
            sys::PROT_READ | sys::PROT_WRITE,
            sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_NORESERVE,
        )
        .ok()
    };
    let calls = map(FIRST_DEPTH * core::mem::size_of::<Tracked>())?;
    let Some(head) = map(core::mem::size_of::<Shadow>()) else {
        // SAFETY: just mapped, not shared.
        unsafe { sys::munmap(calls, FIRST_DEPTH * core::mem::size_of::<Tracked>()) };
        return None;
    };
    // SAFETY: a fresh zero-filled page, ours.
    unsafe {
        let sh = &mut *(head as *mut Shadow);
        sh.calls = calls as *mut Tracked;
        sh.cap = FIRST_DEPTH as u32;
    }
    Some(head as usize)
}

/// Whether the thread of `slot` (`vforked`: its vfork child) has tracked
/// calls (a `ret` site then has work: otherwise it returns at once).
#[inline(always)]
pub fn tracking(slot: &Slot, vforked: bool) -> bool {
    if vforked {
        // Its calls may be on any stack of the chain, or yet to be copied
        // from its maker's (see `own_vforked`): looked at there.
        return true;
    }
    let p = slot.shadow.load(Ordering::Relaxed);
    // SAFETY: see `shadow`.
    p != 0 && unsafe { (*(p as *const Shadow)).len } != 0
}

/// Calls of the return probe of `slot` tracked now, process-wide. The
/// caller holds the store lock.
#[inline(always)]
fn live(slot: &ProbeSlot) -> u64 {
    slot.live
        .load(Ordering::Relaxed)
        .wrapping_sub(slot.live_lost.load(Ordering::Relaxed))
}

/// A tracked call of the return probe of `slot` ended: one less live,
/// under the store lock (`locked`) with a plain store, else counted apart
/// with an atomic add.
#[inline(always)]
fn end_live(slot: &ProbeSlot, locked: bool) {
    if locked {
        slot.live.store(
            slot.live.load(Ordering::Relaxed).wrapping_sub(1),
            Ordering::Relaxed,
        );
    } else {
        slot.live_lost.fetch_add(1, Ordering::Relaxed);
    }
}

/// One unwound record of `call` of thread `tid` of process `pid` into the
/// ring.
fn report(
    c: &ControlHeader,
    call: &Tracked,
    (pid, tid): (u32, u32),
    cause: u64,
    lock: &mut StoreLock<'_>,
) {
    let Some(slot) = crate::ctrl::probe(c, call.probe) else {
        return;
    };
    let locked = lock.take();
    end_live(slot, locked);
    if slot.enabled.load(Ordering::Relaxed) == 0 {
        // Calls of a disabled probe end without a word.
        return;
    }
    if !locked {
        slot.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut data = [0u8; 24];
    data[..8].copy_from_slice(&call.entry_rsp.to_le_bytes());
    data[8..16].copy_from_slice(&call.entry_ns.to_le_bytes());
    data[16..].copy_from_slice(&cause.to_le_bytes());
    let head = RunHeader {
        probe: call.probe,
        tid,
        pid,
        outcome: run_outcome::UNWOUND,
        time_ns: call.entry_ns,
        ..Default::default()
    };
    // The store's run sink is free between handler runs (each run's entry
    // is in the ring when the run ends); the store lock is held.
    let Some(a) = agent() else {
        return;
    };
    let sink = &mut a.store.data_mut().sink;
    sink.clear();
    sink.push(rec::UNWOUND, 0, 0, &data, &[]);
    if !ring::push_entry(c, sink.entry(head)) {
        slot.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// Reports the calls of `sh` from index `from` up, innermost first, and
/// forgets them.
fn cut(c: &ControlHeader, sh: &mut Shadow, from: usize, cause: u64, lock: &mut StoreLock<'_>) {
    let who = (sh.pid, sh.tid);
    while sh.len as usize > from {
        sh.len -= 1;
        let call = sh.call(sh.len as usize);
        report(c, &call, who, cause, lock);
    }
}

/// The shadow stack of the hit's thread, its calls of an earlier thread of
/// the same slot reported as ended with it.
fn own(c: &ControlHeader, h: &HitArgs, lock: &mut StoreLock<'_>) -> Option<&'static mut Shadow> {
    if h.vforked {
        return own_vforked(c, h);
    }
    let sh = shadow(h.slot, false)?;
    if sh.tid != h.tid {
        let pid = h.pid;
        if sh.pid == pid {
            cut(c, sh, 0, left::THREAD_EXIT, lock);
        } else if h.tid == pid {
            // The first thread of a fork child the tracer follows, with
            // the calls of the thread that forked: they are its own too
            // (it returns from them), live once more.
            adopt(c, sh);
        } else {
            // Another thread of the parent, copied at the fork: its calls
            // go on there, not here.
            sh.len = 0;
        }
        sh.pid = pid;
        sh.tid = h.tid;
        sh.stack = (0, 0);
        sh.lookups = 0;
    }
    Some(sh)
}

/// vfork children nested in one another (each made by the one before,
/// all on the thread pointer of the thread that made the first) whose
/// calls are tracked; the hits of one nested deeper track nothing.
const MAX_VFORK_NESTING: usize = 8;

/// The shadow stack of a vfork child's hit (see
/// `crate::init::vfork_child`): one of a chain starting at the slot's
/// second one, the thread that made the first child keeping its own for
/// when it resumes. A vfork child made by a vfork child (suspended
/// meanwhile, as the thread is) has the next stack of the chain, so that
/// its maker finds its own calls intact when it resumes. A child's hit
/// finds its own stack in the chain, the stacks after it ended (their
/// children executed a program or exited: the tracer ended their calls
/// with them) without a word; a new child, whose maker the kernel names,
/// takes the stack after its maker's (after none: the thread made it),
/// the stacks there ended likewise, and starts with copies of its maker's
/// calls, as a fork child does (it returns through them: see [`adopt`]).
#[cold]
fn own_vforked(c: &ControlHeader, h: &HitArgs) -> Option<&'static mut Shadow> {
    let base: *mut Shadow = shadow(h.slot, true)?;
    // Each stack of the chain is mapped for the life of the process (see
    // `shadow`), used only by this slot's thread and its vfork children,
    // one at a time: the others are suspended in `vfork` (outside the
    // agent) or gone. "See above" below says this.
    // SAFETY: see above.
    let depth = (unsafe { (*base).depth } as usize).min(MAX_VFORK_NESTING);
    // The stacks of the children alive, outermost first.
    let mut chain = [core::ptr::null_mut::<Shadow>(); MAX_VFORK_NESTING];
    let mut at = base;
    let mut n = 0;
    while n < depth && !at.is_null() {
        chain[n] = at;
        n += 1;
        // SAFETY: see above.
        at = unsafe { (*at).inner } as *mut Shadow;
    }
    let live = &chain[..n];
    // SAFETY: see above.
    let owner = |s: *mut Shadow| unsafe { ((*s).pid, (*s).tid) };
    if let Some(i) = live.iter().rposition(|&s| owner(s) == (h.pid, h.tid)) {
        // Resumed: the children it made since ended.
        end_all(c, &live[i + 1..]);
        // SAFETY: see above.
        unsafe { (*base).depth = i as u32 + 1 };
        // SAFETY: see above.
        return Some(unsafe { &mut *live[i] });
    }
    let maker = sys::getppid();
    let from = live.iter().rposition(|&s| owner(s).0 == maker);
    let keep = from.map_or(0, |i| i + 1);
    end_all(c, &live[keep..]);
    // SAFETY: see above.
    unsafe { (*base).depth = keep as u32 };
    if keep >= MAX_VFORK_NESTING {
        return None;
    }
    let p = if keep == 0 {
        base
    } else {
        let outer = live[keep - 1];
        // SAFETY: see above.
        let inner = unsafe { &mut (*outer).inner };
        if *inner == 0 {
            *inner = map_shadow()?;
        }
        *inner as *mut Shadow
    };
    // SAFETY: see above; not the maker's (below it in the chain).
    let sh = unsafe { &mut *p };
    sh.len = 0;
    let copied: Option<&Shadow> = match from {
        // SAFETY: see above.
        Some(i) => Some(unsafe { &*live[i] }),
        None if maker == crate::init::pid() => {
            let me = h.slot.tid.load(Ordering::Relaxed);
            let t = h.slot.shadow.load(Ordering::Relaxed);
            // SAFETY: see `shadow`; the thread owning it is suspended in
            // `vfork` (read only).
            let thread = (t != 0).then(|| unsafe { &*(t as *const Shadow) });
            thread.filter(|t| t.tid == me && t.pid == maker)
        }
        None => None,
    };
    if let Some(m) = copied {
        for i in 0..m.len as usize {
            if !sh.room() {
                break;
            }
            sh.push(m.call(i));
        }
        adopt(c, sh);
    }
    sh.pid = h.pid;
    sh.tid = h.tid;
    sh.stack = (0, 0);
    sh.lookups = 0;
    // SAFETY: see above.
    unsafe { (*base).depth = keep as u32 + 1 };
    Some(sh)
}

/// Ends the calls on the vfork children's stacks `ended` without a word
/// (the tracer ended them with their processes) and empties them.
fn end_all(c: &ControlHeader, ended: &[*mut Shadow]) {
    for &s in ended {
        // SAFETY: a stack of the chain (see `own_vforked`), its process gone.
        let sh = unsafe { &mut *s };
        for call in sh.calls() {
            if let Some(slot) = crate::ctrl::probe(c, call.probe) {
                end_live(slot, false);
            }
        }
        sh.len = 0;
        sh.pid = 0;
        sh.tid = 0;
    }
}

/// Counts the calls of `sh`, copied into a fork child, as live calls of
/// their probes (each copy returns, or is reported, on its own).
#[cold]
fn adopt(c: &ControlHeader, sh: &Shadow) {
    for call in sh.calls() {
        if let Some(slot) = crate::ctrl::probe(c, call.probe) {
            slot.live_lost.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The thread's stack mapping containing `rsp` (`[lo, hi)`), looked up in
/// `/proc/self/maps` the first time (and again, a few times at most, when
/// `rsp` left it: a main stack that grew); `None` when `rsp` is elsewhere
/// (another stack: a coroutine's, an alternate signal stack).
fn stack_of(sh: &mut Shadow, rsp: u64) -> Option<(u64, u64)> {
    let (lo, hi) = sh.stack;
    if lo <= rsp && rsp < hi {
        return Some((lo, hi));
    }
    if sh.lookups >= STACK_LOOKUPS {
        return None;
    }
    sh.lookups += 1;
    let mut found = (0, 0);
    crate::host::for_each_mapping(|a, b, r, w| {
        if a <= rsp && rsp < b {
            if r && w {
                found = (a, b);
            }
            return false;
        }
        true
    });
    if found.1 != 0 {
        sh.stack = found;
        return Some(found);
    }
    None
}

/// Calls, among the `kept` innermost tracked ones, that returned unseen (a
/// tail call out of traced code, `jmp free@plt`: no traced `ret` ran):
/// a call above the new entry's `rsp` whose return-address slot holds
/// another address now has returned, its slot reused by a later call of
/// its caller. Slots are read only on the thread's own stack, between
/// `rsp` and the stack's top (mapped while the thread runs on it),
/// innermost first, up to the first call whose slot is intact, never below
/// `base`, the start of the thread's current stack segment (calls of other
/// stacks are not judged by this one's `rsp`). Returns how many stay.
fn returned_unseen(sh: &mut Shadow, kept: usize, base: usize, rsp: u64) -> usize {
    if kept <= base || sh.call(kept - 1).entry_rsp <= rsp {
        return kept;
    }
    let Some((_, hi)) = stack_of(sh, rsp) else {
        return kept;
    };
    let mut k = kept;
    while k > base {
        let c = &sh.calls()[k - 1];
        if c.entry_rsp <= rsp || c.entry_rsp.saturating_add(8) > hi {
            break;
        }
        // SAFETY: `rsp <= entry_rsp < hi - 8`: inside the mapping of this
        // thread's stack that holds `rsp`, which stays mapped while the
        // thread runs on it; an aligned word (a return-address slot).
        let now = unsafe { (c.entry_rsp as *const u64).read_volatile() };
        if now == c.ret_addr {
            break;
        }
        k -= 1;
    }
    k
}

/// The hit's time, taken once (records of the hit carry the same).
pub fn now(h: &HitArgs) -> u64 {
    if h.now.get() == 0 {
        h.now.set(vdso::wall_ns_at(h.tsc()));
    }
    h.now.get()
}

/// At the entry of a return-probed function, before its probes run: the
/// calls this entry proves abandoned are reported, and the entry state is
/// kept for [`track`]. `None` when the thread's call stack cannot be mapped
/// (its calls are counted as missed).
pub fn at_entry(c: &ControlHeader, h: &HitArgs, lock: &mut StoreLock<'_>) -> Option<Entry> {
    // SAFETY: the stub's frame, live for this hit.
    let f = unsafe { &*h.frame };
    let Some(sh) = own(c, h, lock) else {
        crate::dispatch::missed(c, h.site);
        return None;
    };
    // SAFETY: at a function's entry `rsp` points at the return address, in
    // the thread's own stack.
    let ret_addr = unsafe { (f.rsp as *const u64).read() };
    let kept = pairing::kept_at_entry(sh.calls(), f.rsp, ret_addr, h.site.addr);
    let base = pairing::base(sh.calls());
    let kept = returned_unseen(sh, kept, base, f.rsp);
    cut(c, sh, kept, left::UNWOUND, lock);
    Some(Entry {
        shadow: sh,
        regs: [f.rdi, f.rsi, f.rdx, f.rcx, f.r8, f.r9, f.rsp],
        ret_addr,
    })
}

/// After the entry's probes ran: a call is tracked for each enabled return
/// probe of the function (or counted as missed: beyond `maxactive`, when
/// its thread's stack of tracked calls is full (`missed_depth` too), or
/// when the store lock, which guards the live counts, could not be had). A
/// probe with `entry_notice` has each call entering told to the tracer at
/// once ([`agent_abi::entry::ENTERED`]), tracked or not, as the tracer's
/// transports tell every entry: a call not tracked is shown entered, and
/// closed when an outer call returns (its return is not seen). A notice
/// that cannot be written (the ring full, the lock not had) is counted as
/// dropped.
pub fn track(c: &ControlHeader, h: &HitArgs, e: Entry, lock: &mut StoreLock<'_>) {
    let t = now(h);
    let sh = e.shadow;
    // The entry's calls share one segment (the one it enters in).
    let base = pairing::base(sh.calls()) as u32;
    for &p in h.site.ret_probes {
        let Some(slot) = crate::ctrl::probe(c, p) else {
            continue;
        };
        if slot.enabled.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let locked = if !sh.room() {
            slot.missed.fetch_add(1, Ordering::Relaxed);
            slot.missed_depth.fetch_add(1, Ordering::Relaxed);
            slot.entry_notice != 0 && lock.take()
        } else if !lock.take() {
            slot.missed.fetch_add(1, Ordering::Relaxed);
            false
        } else if live(slot) >= slot.maxactive {
            slot.missed.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            slot.live
                .store(slot.live.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            let switches = slot.flags.load(Ordering::Relaxed) & probe_flag::SWITCHES_STACK != 0;
            sh.push(Tracked {
                probe: p,
                seg: base | if switches { SWITCHES } else { 0 },
                func: h.site.addr,
                entry_rsp: e.regs[6],
                ret_addr: e.ret_addr,
                regs: e.regs,
                entry_ns: t,
            });
            true
        };
        if slot.entry_notice != 0 {
            let head = RunHeader {
                probe: p,
                tid: h.tid,
                pid: h.pid,
                cpu: crate::host::current_cpu() as u32,
                time_ns: t,
                ip: h.site.addr,
                ..Default::default()
            };
            // The ring is written under the store lock.
            if !locked || !ring::push_notice(c, head, agent_abi::entry::ENTERED, [e.regs[6]]) {
                slot.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A `ret` of a return site: the tracked calls returning through it run
/// their handlers, innermost first, with the registers after the `ret`
/// (`rip` the return address, `rsp` 8 higher) and their entry state.
/// Returns the number of handlers run.
pub fn at_ret(c: &ControlHeader, h: &HitArgs, lock: &mut StoreLock<'_>) -> i64 {
    let Some(sh) = own(c, h, lock) else {
        return 0;
    };
    // SAFETY: the stub's frame, live for this hit.
    let rsp = unsafe { (*h.frame).rsp };
    // After the return: `rsp` and where it went.
    let (after, at) = if h.site.kind == site_kind::CONT {
        // At the instruction a `call` returns to: the return is done.
        (rsp, h.site.addr)
    } else {
        // SAFETY: just before a `ret`, `rsp` points at the return address.
        (rsp + 8, unsafe { (rsp as *const u64).read() })
    };
    let Some((i, n)) = pairing::returning(sh.calls_mut(), after, Some(at)) else {
        return 0;
    };
    cut(c, sh, i + 1, left::UNWOUND, lock);
    let t = now(h);
    let mut ran = 0;
    for _ in 0..n {
        sh.len -= 1;
        let call = sh.call(sh.len as usize);
        let Some(slot) = crate::ctrl::probe(c, call.probe) else {
            continue;
        };
        let locked = lock.take();
        end_live(slot, locked);
        if slot.enabled.load(Ordering::Relaxed) == 0 || c.enabled.load(Ordering::Relaxed) == 0 {
            continue;
        }
        if !locked {
            slot.missed.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if slot.entry_notice != 0 {
            // Told, with no handler run: what the built-in exit handler
            // would have logged. The tracer counts it as the probe's hit
            // when it reads it (as it counts the returns other transports
            // tell), so a notice the ring cannot take is dropped, not hit.
            let head = RunHeader {
                probe: call.probe,
                tid: h.tid,
                pid: h.pid,
                cpu: crate::host::current_cpu() as u32,
                time_ns: t,
                ip: call.func,
                ..Default::default()
            };
            // SAFETY: the stub's frame, live for this hit.
            let rax = unsafe { (*h.frame).rax };
            let words = [rax, call.entry_rsp, t.saturating_sub(call.entry_ns)];
            // The store lock is held (taken above).
            if ring::push_notice(c, head, agent_abi::entry::RETURNED, words) {
                ran += 1;
            } else {
                slot.dropped.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        }
        // SAFETY: the stub's frame; the store lock is held.
        unsafe {
            (*h.frame).rip = call.ret_addr;
            (*h.frame).rsp = after;
        }
        if let Some(a) = agent() {
            a.store.data_mut().env.entry = Some(EntryState {
                regs: call.regs,
                elapsed_ns: t.saturating_sub(call.entry_ns),
            });
        }
        h.ip.set(call.func);
        if run_probe(c, slot, call.probe, h) {
            ran += 1;
        }
        if let Some(a) = agent() {
            a.store.data_mut().env.entry = None;
        }
    }
    // SAFETY: as above (the trampoline does not restore `rsp` from the
    // frame; this keeps the frame true).
    unsafe { (*h.frame).rsp = rsp };
    ran
}
