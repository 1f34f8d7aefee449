//! Call/return pairing for return probes, independent of how a transport
//! catches entries and returns: per thread, a stack of the tracked calls
//! (probe, entry registers, entry `rsp`, return address, entry time),
//! keyed by the stack pointer, and per process and probe the number of
//! live calls (`maxactive`).
//!
//! No return address is rewritten anywhere: a transport reports an
//! *entry* (the thread is at a probed function's first instruction, `rsp`
//! points at the return address) and a *possible return* (the thread's
//! `rsp` just after a `ret`, and where it landed when that is known). A
//! return pairs with the topmost call of its thread whose entry `rsp` is
//! the return's `rsp` − 8 (and whose return address is where it landed):
//! nested and recursive calls have distinct entry `rsp`s, so each return
//! finds its own call. Calls that share one entry `rsp` form a tail-call
//! chain (`f` ends with `jmp g`: `g` enters with `f`'s `rsp` and return
//! address) and return together, innermost first.
//!
//! A call whose frame was left without a return (`longjmp`, a C++
//! exception unwinding through it, `pthread_exit`) is
//! noticed as soon as the stack pointer proves it gone, as the kernel's
//! uretprobes do (`cleanup_return_instances`): at an entry with a higher
//! `rsp` than the call's (its return-address slot is free stack now), at
//! the return of a call below it in the thread's stack, and at the end of
//! its thread, process or image. Such calls are handed back as [`Gone`],
//! innermost first, so that a consumer can close them ("unwound") in order
//! with the thread's other events. Stack pointers compare within one stack
//! only: a call of a function that switches stacks (`swapcontext`, marked
//! with [`CallStacks::mark_switch`]) keeps the calls of the stack it left
//! from being judged by the other stack's (`agent_abi::pairing`: a
//! thread's calls are cut into segments, one per stack). Known limit
//! (shared with uretprobes): a
//! signal handler running on an alternate stack (`sigaltstack`) placed
//! *above* the interrupted stack makes traced calls inside it look like
//! they abandoned the interrupted calls.
//!
//! A return probe armed with an entry notice ([`CallStacks::set_entry_notice`])
//! runs no handler: [`enter`] reports each of its calls as it enters
//! ([`Event::Entered`]) and [`Call::returned`] gives the event of its
//! return ([`Event::Returned`]), the facts `wprobe trace` builds its trees
//! from, the same shapes the in-process agent writes into its ring.
//!
//! Per hit: no allocation once a thread's stack has grown to its depth,
//! no system call.

use std::collections::HashMap;

use crate::transport::{Action, Event, Transport};
use agent_abi::pairing::{self, CallFrame};
use hostabi::env::EntryState;

/// How a transport reports to the session (the callback of
/// [`Transport::run`]).
pub type OnEvent<'a> = &'a mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action;

/// One tracked call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    /// The probe (the session's tag).
    pub tag: usize,
    /// The process.
    pub pid: i32,
    /// Run-time address of the probed function's entry.
    pub func: u64,
    /// `rsp` at the entry (it points at the return address).
    pub entry_rsp: u64,
    /// The return address (`[rsp]` at the entry).
    pub ret_addr: u64,
    /// `rdi`, `rsi`, `rdx`, `rcx`, `r8`, `r9`, `rsp` at the entry
    /// (`hostabi::regs::ENTRY_REGS` order).
    pub regs: [u64; 7],
    /// Monotonic time of the entry, in ns.
    pub entry_ns: u64,
    /// A call of a function that switches stacks (`swapcontext`): see
    /// [`agent_abi::pairing`].
    pub switches: bool,
    /// Where its stack segment starts among its thread's calls (set by
    /// [`CallStacks::push`]).
    pub base: u32,
    /// Its probe asked for entry notices: its return is reported as an
    /// [`Event::Returned`], no handler run (set by [`CallStacks::push`]).
    pub notice: bool,
}

impl Call {
    /// The call of probe `tag` entering `func` in `pid`, with the thread's
    /// registers `r` at the entry (`rsp` at the return address
    /// `ret_addr`) at monotonic time `entry_ns`.
    pub fn entered(
        tag: usize,
        pid: i32,
        func: u64,
        r: &crate::arch::Regs,
        ret_addr: u64,
        entry_ns: u64,
    ) -> Call {
        Call {
            tag,
            pid,
            func,
            entry_rsp: r.rsp,
            ret_addr,
            regs: [r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9, r.rsp],
            entry_ns,
            switches: false,
            base: 0,
            notice: false,
        }
    }

    /// The [`Event::Returned`] of this call returning in thread `tid` with
    /// `rax`, at wall-clock `time_ns` and `clock_ns` on the clock of its
    /// entry (`entry_ns`): `Some` where its probe asked for entry notices
    /// (no handler runs), `None` where the transport delivers the return as
    /// a hit, for the probe's handler.
    pub fn returned(
        &self,
        tid: i32,
        time_ns: u64,
        clock_ns: u64,
        rax: u64,
    ) -> Option<Event<'static>> {
        self.notice.then(|| Event::Returned {
            tag: self.tag,
            pid: self.pid,
            tid,
            time_ns,
            ip: self.func,
            rax,
            entry_rsp: self.entry_rsp,
            elapsed_ns: clock_ns.saturating_sub(self.entry_ns),
        })
    }

    /// What a handler at the call's return sees of its entry, `now` being
    /// the monotonic time of the return.
    pub fn entry_state(&self, now: u64) -> EntryState {
        EntryState {
            regs: self.regs,
            elapsed_ns: now.saturating_sub(self.entry_ns),
        }
    }
}

impl CallFrame for Call {
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
        self.switches
    }
    fn base(&self) -> u32 {
        self.base
    }
    fn set_base(&mut self, base: u32) {
        self.base = base;
    }
}

/// Why a tracked call ended without a return.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Left {
    /// Its frame was abandoned (`longjmp`, exception unwinding, a context
    /// switch): a later entry or return of its thread proved it gone.
    Unwound,
    /// Its thread ended.
    ThreadExit,
    /// Its process ended.
    ProcessExit,
    /// Its process called exec.
    Exec,
    /// wprobe stopped tracing the process (end of the run, `exit 1`).
    Detach,
    /// wprobe made every probe dormant (`Transport::suspend`).
    Suspend,
    /// Its probe was disabled (`maxhits`, `remove`): dropped silently.
    Disabled,
}

impl Left {
    /// A short word for output (`unwound`, `thread exit`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Left::Unwound => "unwound",
            Left::ThreadExit => "thread exit",
            Left::ProcessExit => "process exit",
            Left::Exec => "exec",
            Left::Detach => "detach",
            Left::Suspend => "suspend",
            Left::Disabled => "disabled",
        }
    }
}

/// A tracked call that ended without a return, with its thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gone {
    /// The call.
    pub call: Call,
    /// Its thread.
    pub tid: i32,
    /// Why.
    pub cause: Left,
}

impl Gone {
    /// The event that reports this call as ended unseen.
    pub fn unwound(&self) -> Event<'static> {
        Event::Unwound {
            tag: self.call.tag,
            pid: self.call.pid,
            tid: self.tid,
            entry_rsp: self.call.entry_rsp,
            entry_ns: self.call.entry_ns,
            cause: self.cause,
        }
    }
}

/// Calls `each` with `owner` and every call in its list `list` picks
/// (taken out meanwhile, so that `each` may use `owner`: report the call
/// through it, let go of its return site), then leaves the list empty,
/// its allocation kept for the next calls.
pub fn each_gone<S: ?Sized>(
    owner: &mut S,
    list: fn(&mut S) -> &mut Vec<Gone>,
    mut each: impl FnMut(&mut S, &Gone),
) {
    let mut gone = std::mem::take(list(owner));
    for g in &gone {
        each(owner, g);
    }
    gone.clear();
    *list(owner) = gone;
}

#[derive(Debug, Default)]
struct ThreadCalls {
    pid: i32,
    calls: Vec<Call>,
}

/// The tracked calls of every traced thread.
#[derive(Debug)]
pub struct CallStacks {
    threads: HashMap<i32, ThreadCalls>,
    /// Calls one thread tracks at most ([`agent_abi::MAX_TRACKED_CALLS`],
    /// as the in-process agent): a call beyond is not tracked
    /// ([`Untracked::Depth`]), so the same program shows the same calls
    /// returning under every transport, and a runaway recursion does not
    /// grow the tracer without bound.
    max_depth: usize,
    /// Live calls per (process, probe).
    live: HashMap<(i32, usize), u32>,
    /// Probes whose calls switch stacks ([`Call::switches`]).
    switches: Vec<usize>,
    /// By tag: the probe asked for entry notices ([`Call::notice`]).
    notices: Vec<bool>,
}

impl Default for CallStacks {
    fn default() -> CallStacks {
        CallStacks::with_max_depth(agent_abi::MAX_TRACKED_CALLS)
    }
}

/// Why [`CallStacks::push`] did not track a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Untracked {
    /// `maxactive` calls of its probe are live in its process.
    Maxactive,
    /// Its thread tracks as many calls as it can (`missed_depth`).
    Depth,
}

impl CallStacks {
    /// No call tracked; a thread tracks up to
    /// [`agent_abi::MAX_TRACKED_CALLS`] calls.
    pub fn new() -> CallStacks {
        CallStacks::default()
    }

    /// No call tracked; a thread tracks up to `max_depth` calls (the
    /// transports use [`CallStacks::new`]; tests lower it).
    pub fn with_max_depth(max_depth: usize) -> CallStacks {
        CallStacks {
            threads: HashMap::new(),
            max_depth,
            live: HashMap::new(),
            switches: Vec::new(),
            notices: Vec::new(),
        }
    }

    /// The calls of probe `tag` switch stacks (`swapcontext`): each is
    /// tracked with [`Call::switches`] set.
    pub fn mark_switch(&mut self, tag: usize) {
        if !self.switches.contains(&tag) {
            self.switches.push(tag);
        }
    }

    /// Return probe `tag` reports its calls as typed events, no handler
    /// run ([`crate::transport::Insert::Return::entry_notice`]): each entry
    /// as an [`Event::Entered`] ([`enter`]), each return as an
    /// [`Event::Returned`] ([`Call::returned`]).
    pub fn set_entry_notice(&mut self, tag: usize) {
        if self.notices.len() <= tag {
            self.notices.resize(tag + 1, false);
        }
        self.notices[tag] = true;
    }

    /// Whether return probe `tag` asked for entry notices.
    pub fn entry_notice(&self, tag: usize) -> bool {
        self.notices.get(tag).copied().unwrap_or(false)
    }

    /// Whether no call is tracked.
    pub fn is_empty(&self) -> bool {
        self.threads.values().all(|t| t.calls.is_empty())
    }

    /// Live calls of probe `tag` in process `pid`.
    pub fn live(&self, pid: i32, tag: usize) -> u32 {
        self.live.get(&(pid, tag)).copied().unwrap_or(0)
    }

    /// Tracked calls of thread `tid`, innermost last.
    pub fn calls(&self, tid: i32) -> &[Call] {
        self.threads.get(&tid).map_or(&[], |t| t.calls.as_slice())
    }

    fn forget(&mut self, c: &Call) {
        if let Some(n) = self.live.get_mut(&(c.pid, c.tag)) {
            *n = n.saturating_sub(1);
        }
    }

    /// Thread `tid` is at the entry of function `func` with `rsp` (which
    /// points at return address `ret`): pops into `out` the calls this
    /// proves abandoned, innermost first. Call once per entry, before
    /// [`CallStacks::push`] (several probes may share the entry). The rules
    /// are [`agent_abi::pairing::kept_at_entry`]'s (the agent's too).
    pub fn prune_at_entry(&mut self, tid: i32, rsp: u64, ret: u64, func: u64, out: &mut Vec<Gone>) {
        let Some(t) = self.threads.get(&tid) else {
            return;
        };
        let cut = pairing::kept_at_entry(&t.calls, rsp, ret, func);
        self.cut(tid, cut, Left::Unwound, out);
    }

    /// Pops the calls of `tid` from index `cut` up into `out`.
    fn cut(&mut self, tid: i32, cut: usize, cause: Left, out: &mut Vec<Gone>) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        let first = out.len();
        while t.calls.len() > cut {
            let c = t.calls.pop().expect("invariant: len > cut");
            out.push(Gone {
                call: c,
                tid,
                cause,
            });
        }
        for g in &out[first..] {
            if let Some(n) = self.live.get_mut(&(g.call.pid, g.call.tag)) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Tracks `call` in thread `tid`, unless `maxactive` calls of its probe
    /// are live in its process or the thread tracks as many calls as it
    /// can; `Err`: not tracked (a missed call), and why.
    pub fn push(&mut self, tid: i32, mut call: Call, maxactive: u32) -> Result<(), Untracked> {
        if self
            .threads
            .get(&tid)
            .is_some_and(|t| t.calls.len() >= self.max_depth)
        {
            return Err(Untracked::Depth);
        }
        let n = self.live.entry((call.pid, call.tag)).or_insert(0);
        if *n >= maxactive {
            return Err(Untracked::Maxactive);
        }
        *n += 1;
        let t = self.threads.entry(tid).or_default();
        t.pid = call.pid;
        call.base = pairing::base(&t.calls) as u32;
        call.switches = self.switches.contains(&call.tag);
        call.notice = self.notices.get(call.tag).copied().unwrap_or(false);
        t.calls.push(call);
        Ok(())
    }

    /// Thread `tid` may have just returned from a call: its `rsp` after the
    /// `ret` is `rsp_after`, and it landed at `at` when that is known. When
    /// a tracked call returns here, the calls above it are popped into
    /// `out` (abandoned), and the number of calls that return is given
    /// (the call and the tail-calling ones sharing its frame): pop them
    /// with [`CallStacks::pop`], innermost first. 0: no tracked call
    /// returns here (another path reached the address).
    pub fn returning(
        &mut self,
        tid: i32,
        rsp_after: u64,
        at: Option<u64>,
        out: &mut Vec<Gone>,
    ) -> usize {
        let Some(t) = self.threads.get_mut(&tid) else {
            return 0;
        };
        let Some((i, n)) = pairing::returning(&mut t.calls, rsp_after, at) else {
            return 0;
        };
        self.cut(tid, i + 1, Left::Unwound, out);
        n
    }

    /// Pops the innermost call of `tid` if it returns with `rsp_after`
    /// (after [`CallStacks::returning`]: call until `None`). A handler run
    /// between two pops may have disabled a probe, whose calls are gone
    /// then: this never pops a call that does not return here.
    pub fn pop(&mut self, tid: i32, rsp_after: u64) -> Option<Call> {
        let t = self.threads.get_mut(&tid)?;
        if t.calls.last()?.entry_rsp != rsp_after.wrapping_sub(8) {
            return None;
        }
        let c = t.calls.pop()?;
        self.forget(&c);
        Some(c)
    }

    /// Thread `tid` ended (or its calls end for `cause`): all its calls into `out`.
    pub fn end_thread(&mut self, tid: i32, cause: Left, out: &mut Vec<Gone>) {
        self.cut(tid, 0, cause, out);
        self.threads.remove(&tid);
    }

    /// Every call of process `pid` into `out` (it ended, exec'd, or is let go).
    pub fn end_process(&mut self, pid: i32, cause: Left, out: &mut Vec<Gone>) {
        let mut tids: Vec<i32> = self
            .threads
            .iter()
            .filter(|(_, t)| t.pid == pid)
            .map(|(tid, _)| *tid)
            .collect();
        tids.sort_unstable();
        for tid in tids {
            self.end_thread(tid, cause, out);
        }
        self.live.retain(|(p, _), _| *p != pid);
    }

    /// Every call of probe `tag` into `out` (cause [`Left::Disabled`]).
    pub fn drop_probe(&mut self, tag: usize, out: &mut Vec<Gone>) {
        let mut tids: Vec<i32> = self.threads.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let t = self.threads.get_mut(&tid).expect("invariant: listed");
            let mut i = t.calls.len();
            while i > 0 {
                i -= 1;
                if t.calls[i].tag == tag {
                    let c = t.calls.remove(i);
                    out.push(Gone {
                        call: c,
                        tid,
                        cause: Left::Disabled,
                    });
                }
            }
            pairing::rebase(&mut t.calls);
        }
        self.live.retain(|(_, t), _| *t != tag);
    }

    /// Every call of every thread into `out`.
    pub fn drain(&mut self, cause: Left, out: &mut Vec<Gone>) {
        let mut tids: Vec<i32> = self.threads.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            self.end_thread(tid, cause, out);
        }
        self.live.clear();
    }
}

/// A thread at the entry of a function with return probes, as a transport
/// that pairs calls itself (ptrace, perf) saw it.
#[derive(Clone, Copy, Debug)]
pub struct EntryAt<'r> {
    /// The process.
    pub pid: i32,
    /// The thread.
    pub tid: i32,
    /// Run-time address of the function's entry.
    pub func: u64,
    /// The registers at the entry.
    pub regs: &'r crate::arch::Regs,
    /// The return address (`[rsp]`), when it could be read.
    pub ret_addr: Option<u64>,
    /// Wall-clock time of the entry, in ns.
    pub time_ns: u64,
    /// The time a call's duration is measured from, on the clock the
    /// transport gives [`Call::returned`] at its return.
    pub clock_ns: u64,
}

/// The calls of return probes `probes` (`(tag, maxactive)`, every one
/// enabled) entering at `at`, in order: for each, first an
/// [`Event::Entered`] where the probe asked for entry notices (at every
/// entry, tracked or not, as an entry handler would run, and as the
/// in-process agent tells it), then the call tracked in `owner`'s
/// `stacks`, unless `maxactive` of its calls are live, its thread tracks
/// as many calls as it can, the return address is unknown, or `retain`
/// refuses it (a transport that must arm the return address: ptrace),
/// when it is reported as [`Event::Missed`]. Call after the calls the
/// entry proves abandoned were reported ([`CallStacks::prune_at_entry`]).
pub fn enter<S: Transport>(
    owner: &mut S,
    stacks: fn(&mut S) -> &mut CallStacks,
    at: &EntryAt<'_>,
    probes: &[(usize, u32)],
    mut retain: impl FnMut(&mut S, u64) -> bool,
    on_event: OnEvent<'_>,
) {
    for &(tag, max) in probes {
        if stacks(owner).entry_notice(tag) {
            on_event(
                owner,
                Event::Entered {
                    tag,
                    pid: at.pid,
                    tid: at.tid,
                    rsp: at.regs.rsp,
                    time_ns: at.time_ns,
                    ip: at.func,
                },
            );
        }
        let deep = stacks(owner).calls(at.tid).len() >= stacks(owner).max_depth;
        let tracked = !deep
            && at.ret_addr.is_some_and(|ra| {
                stacks(owner).live(at.pid, tag) < max && retain(owner, ra) && {
                    let call = Call::entered(tag, at.pid, at.func, at.regs, ra, at.clock_ns);
                    stacks(owner).push(at.tid, call, max).is_ok()
                }
            });
        if !tracked {
            let depth = u64::from(deep);
            on_event(
                owner,
                Event::Missed {
                    tag,
                    count: 1,
                    depth,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: u64 = 0x1000;
    const G: u64 = 0x2000;
    const EVERY: u32 = u32::MAX;
    const H: u64 = 0x3000;

    fn call(tag: usize, func: u64, rsp: u64, ret: u64) -> Call {
        Call {
            tag,
            pid: 1,
            func,
            entry_rsp: rsp,
            ret_addr: ret,
            regs: [rsp; 7],
            entry_ns: rsp,
            switches: false,
            base: 0,
            notice: false,
        }
    }

    /// Enters as a transport does: prune, then push.
    fn enter(s: &mut CallStacks, tid: i32, c: Call, max: u32, out: &mut Vec<Gone>) -> bool {
        s.prune_at_entry(tid, c.entry_rsp, c.ret_addr, c.func, out);
        s.push(tid, c, max).is_ok()
    }

    /// Returns as a transport does: the calls that return, innermost first.
    fn ret(
        s: &mut CallStacks,
        tid: i32,
        rsp_after: u64,
        at: u64,
        out: &mut Vec<Gone>,
    ) -> Vec<Call> {
        let n = s.returning(tid, rsp_after, Some(at), out);
        let v: Vec<Call> = std::iter::from_fn(|| s.pop(tid, rsp_after)).collect();
        assert_eq!(v.len(), n);
        v
    }

    #[test]
    fn recursion_pairs_each_return_with_its_own_entry() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        // f(0x7f00) -> f(0x7e00) -> f(0x7d00), all returning into f but the first.
        assert!(enter(&mut s, 9, call(0, F, 0x7f00, 0x500), 64, &mut out));
        assert!(enter(&mut s, 9, call(0, F, 0x7e00, F + 9), 64, &mut out));
        assert!(enter(&mut s, 9, call(0, F, 0x7d00, F + 9), 64, &mut out));
        assert_eq!(s.live(1, 0), 3);
        for rsp in [0x7d00, 0x7e00] {
            let r = ret(&mut s, 9, rsp + 8, F + 9, &mut out);
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].entry_rsp, rsp);
        }
        // A return elsewhere (another path to the address) pairs with nothing.
        assert!(ret(&mut s, 9, 0x7f10, 0x500, &mut out).is_empty());
        let r = ret(&mut s, 9, 0x7f08, 0x500, &mut out);
        assert_eq!(r[0].entry_rsp, 0x7f00);
        assert!(out.is_empty(), "nothing was abandoned");
        assert!(s.is_empty());
        assert_eq!(s.live(1, 0), 0);
    }

    #[test]
    fn a_tail_call_chain_returns_together_innermost_first() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        assert!(enter(&mut s, 9, call(0, F, 0x7f00, 0x500), 64, &mut out));
        // f ends with `jmp g`, g with `jmp h`: same slot, same return address.
        assert!(enter(&mut s, 9, call(1, G, 0x7f00, 0x500), 64, &mut out));
        assert!(enter(&mut s, 9, call(2, H, 0x7f00, 0x500), 64, &mut out));
        assert!(out.is_empty());
        let r = ret(&mut s, 9, 0x7f08, 0x500, &mut out);
        assert_eq!(r.iter().map(|c| c.tag).collect::<Vec<_>>(), [2, 1, 0]);
        assert!(out.is_empty());
    }

    #[test]
    fn longjmp_out_of_calls_is_noticed_at_the_next_entry_or_return() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        // main-level f at 0x7f00 calls g (0x7e00) calls h (0x7d00); h longjmps
        // back into f, which calls g again from the same call site.
        enter(&mut s, 9, call(0, F, 0x7f00, 0x500), 64, &mut out);
        enter(&mut s, 9, call(1, G, 0x7e00, F + 5), 64, &mut out);
        enter(&mut s, 9, call(2, H, 0x7d00, G + 5), 64, &mut out);
        enter(&mut s, 9, call(1, G, 0x7e00, F + 5), 64, &mut out);
        assert_eq!(
            out.iter()
                .map(|g| (g.call.tag, g.cause))
                .collect::<Vec<_>>(),
            [(2, Left::Unwound), (1, Left::Unwound)],
            "h then the first g, innermost first"
        );
        assert_eq!(s.live(1, 1), 1);
        out.clear();
        // The second g longjmps too; f returns: g is gone, f returns.
        enter(&mut s, 9, call(2, H, 0x7d00, G + 5), 64, &mut out);
        let r = ret(&mut s, 9, 0x7f08, 0x500, &mut out);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].tag, 0);
        assert_eq!(out.iter().map(|g| g.call.tag).collect::<Vec<_>>(), [2, 1]);
        assert!(s.is_empty());
        assert_eq!((s.live(1, 0), s.live(1, 1), s.live(1, 2)), (0, 0, 0));
    }

    #[test]
    fn a_loop_of_longjmps_from_one_call_site_keeps_one_call() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        for _ in 0..100 {
            assert!(enter(&mut s, 9, call(0, F, 0x7f00, 0x500), 2, &mut out));
        }
        assert_eq!(s.calls(9).len(), 1);
        assert_eq!(out.len(), 99);
        assert_eq!(s.live(1, 0), 1);
    }

    #[test]
    fn a_new_call_in_the_slot_of_a_call_to_another_function_ends_it() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        enter(&mut s, 9, call(0, F, 0x7f00, 0x500), 64, &mut out);
        // Same slot, another return address: a new call from another site.
        enter(&mut s, 9, call(1, G, 0x7f00, 0x600), 64, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].call.tag, 0);
    }

    #[test]
    fn maxactive_counts_per_process_across_threads() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        // Recursion of depth 5 with maxactive 2: 3 calls not tracked.
        let mut tracked = 0;
        for d in 0..5u64 {
            tracked += enter(
                &mut s,
                9,
                call(0, F, 0x7f00 - 0x100 * d, if d == 0 { 0x500 } else { F + 9 }),
                2,
                &mut out,
            ) as u32;
        }
        assert_eq!(tracked, 2);
        // Another thread of the same process: the limit is shared.
        assert!(!enter(&mut s, 10, call(0, F, 0x5f00, 0x500), 2, &mut out));
        // Another process has its own.
        let mut c = call(0, F, 0x5f00, 0x500);
        c.pid = 2;
        assert!(enter(&mut s, 11, c, 2, &mut out));
        // The untracked inner returns pair with nothing; the outer two do.
        let mut returned = 0;
        for d in (1..5u64).rev() {
            returned += ret(&mut s, 9, 0x7f08 - 0x100 * d, F + 9, &mut out).len();
        }
        assert_eq!(
            returned, 1,
            "of the inner calls, only the second was tracked"
        );
        assert_eq!(ret(&mut s, 9, 0x7f08, 0x500, &mut out).len(), 1);
        assert!(out.is_empty());
        assert_eq!(s.live(1, 0), 0);
    }

    #[test]
    fn calls_beyond_a_threads_depth_are_not_tracked_and_pair_with_nothing() {
        // A recursion 5 deep where a thread tracks 3 calls: the 2 deepest
        // are not tracked (whatever `maxactive`), their returns pair with
        // nothing, the 3 tracked return in order; another thread has its
        // own room.
        let mut s = CallStacks::with_max_depth(3);
        let mut out = Vec::new();
        let rsp = |d: u64| 0x7f00 - 0x100 * d;
        for d in 0..5u64 {
            let c = call(0, F, rsp(d), if d == 0 { 0x500 } else { F + 9 });
            s.prune_at_entry(9, c.entry_rsp, c.ret_addr, c.func, &mut out);
            let want = if d < 3 { Ok(()) } else { Err(Untracked::Depth) };
            assert_eq!(s.push(9, c, EVERY), want, "depth {d}");
        }
        assert_eq!((s.calls(9).len(), s.live(1, 0)), (3, 3));
        assert_eq!(
            s.push(9, call(1, G, 0x1000, 0x500), EVERY),
            Err(Untracked::Depth),
            "the room is the thread's, not a probe's"
        );
        assert!(enter(
            &mut s,
            10,
            call(0, F, 0x5f00, 0x500),
            EVERY,
            &mut out
        ));
        let returned: Vec<u64> = (0..5u64)
            .rev()
            .flat_map(|d| {
                ret(
                    &mut s,
                    9,
                    rsp(d) + 8,
                    if d == 0 { 0x500 } else { F + 9 },
                    &mut out,
                )
            })
            .map(|c| c.entry_rsp)
            .collect();
        assert_eq!(returned, [rsp(2), rsp(1), rsp(0)]);
        assert!(out.is_empty(), "{out:?}");
        // `maxactive` is told apart.
        let mut s = CallStacks::with_max_depth(3);
        assert_eq!(s.push(9, call(0, F, 0x7f00, 0x500), 1), Ok(()));
        assert_eq!(
            s.push(9, call(0, F, 0x7e00, F + 9), 1),
            Err(Untracked::Maxactive)
        );
    }

    #[test]
    fn threads_processes_probes_and_the_end_hand_back_their_calls() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        enter(&mut s, 9, call(0, F, 0x7f00, 0x500), 64, &mut out);
        enter(&mut s, 9, call(1, G, 0x7e00, F + 5), 64, &mut out);
        enter(&mut s, 10, call(0, F, 0x5f00, 0x500), 64, &mut out);
        let mut c = call(0, F, 0x7f00, 0x500);
        c.pid = 2;
        enter(&mut s, 20, c, 64, &mut out);
        s.end_thread(10, Left::ThreadExit, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].tid, out[0].cause), (10, Left::ThreadExit));
        assert_eq!(s.live(1, 0), 1);
        out.clear();
        s.drop_probe(1, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].cause, Left::Disabled);
        out.clear();
        s.end_process(1, Left::Exec, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].tid, out[0].call.tag), (9, 0));
        assert_eq!(s.live(1, 0), 0);
        out.clear();
        s.drain(Left::Detach, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].tid, 20);
        assert!(s.is_empty());
    }

    #[test]
    fn an_open_swapcontext_keeps_the_calls_of_the_stack_it_left() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        s.mark_switch(2);
        // main (0x8000) calls foo, foo calls swapcontext (tag 2) into bar,
        // on a stack in main's frame: above foo's.
        enter(&mut s, 9, call(0, F, 0x8000, 0x500), 64, &mut out);
        enter(&mut s, 9, call(1, G, 0x7000, F + 5), 64, &mut out);
        enter(&mut s, 9, call(2, H, 0x6f00, G + 5), 64, &mut out);
        enter(&mut s, 9, call(3, 0x4000, 0x7800, 0x9000), 64, &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(s.calls(9).len(), 4);
        assert_eq!(ret(&mut s, 9, 0x7808, 0x9000, &mut out)[0].tag, 3);
        // The context's link resumes foo inside swapcontext.
        assert_eq!(ret(&mut s, 9, 0x6f08, G + 5, &mut out)[0].tag, 2);
        assert_eq!(ret(&mut s, 9, 0x7008, F + 5, &mut out)[0].tag, 1);
        assert!(out.is_empty(), "{out:?}");
        // Disabling a probe keeps the segments right.
        enter(&mut s, 9, call(2, H, 0x7000, F + 9), 64, &mut out);
        enter(&mut s, 9, call(1, G, 0x3000, 0x9100), 64, &mut out);
        s.drop_probe(1, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(
            s.calls(9).iter().map(|c| c.base).collect::<Vec<_>>(),
            [0, 0]
        );
        assert!(s.calls(9)[1].switches);
    }

    #[test]
    fn the_calls_of_a_probe_with_entry_notices_return_as_events() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        s.set_entry_notice(1);
        assert!(s.entry_notice(1) && !s.entry_notice(0) && !s.entry_notice(99));
        enter(&mut s, 9, call(0, F, 0x7f00, 0x500), 64, &mut out);
        enter(&mut s, 9, call(1, G, 0x7e00, F + 5), 64, &mut out);
        let r = ret(&mut s, 9, 0x7e08, F + 5, &mut out);
        let ev = r[0].returned(9, 5000, 0x7e00 + 30, 42);
        assert!(
            matches!(
                ev,
                Some(Event::Returned {
                    tag: 1,
                    pid: 1,
                    tid: 9,
                    time_ns: 5000,
                    ip: G,
                    rax: 42,
                    entry_rsp: 0x7e00,
                    elapsed_ns: 30,
                })
            ),
            "{ev:?}"
        );
        let r = ret(&mut s, 9, 0x7f08, 0x500, &mut out);
        assert!(
            r[0].returned(9, 5000, 0x8000, 0).is_none(),
            "its handler runs"
        );
    }

    #[test]
    fn a_signal_handler_on_the_same_stack_nests() {
        let mut s = CallStacks::new();
        let mut out = Vec::new();
        // f is interrupted; the handler h (traced) runs below f's frame and
        // returns to the kernel's restorer; then f returns.
        enter(&mut s, 9, call(0, F, 0x7f00, 0x500), 64, &mut out);
        enter(&mut s, 9, call(1, H, 0x7a00, 0x9999), 64, &mut out);
        assert_eq!(ret(&mut s, 9, 0x7a08, 0x9999, &mut out).len(), 1);
        assert_eq!(ret(&mut s, 9, 0x7f08, 0x500, &mut out).len(), 1);
        assert!(out.is_empty());
    }
}
