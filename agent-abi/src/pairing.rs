//! Call/return pairing of return probes, shared by the tracer's transports
//! and the agent: no return address is rewritten; calls are paired per
//! thread by the stack pointer (see `runtime/src/transport/calls.rs`).
//!
//! **Stacks.** A thread may run on several stacks (`swapcontext`
//! coroutines): stack pointers compare only within one. A thread's tracked
//! calls (innermost last) are cut into *segments*, contiguous runs of
//! calls made on one stack, each call knowing where its segment starts
//! ([`crate::pairing::CallFrame::base`]). The last segment is the *current* one, where an
//! entry is judged, unless the thread's innermost call is an open call of
//! a function that switches stacks ([`crate::pairing::CallFrame::switches`]): a thread
//! inside `swapcontext` runs on another stack when anything else of it is
//! seen, so the next entry starts a new segment, and the open switch call
//! closes its segment as a barrier no entry on the other stack can prove
//! left. A return is looked for in the current segment, then in the
//! others, innermost segment first; found in another one, that segment is
//! moved to the end (it is current again: the thread switched back), the
//! segments above it moving down, in place. A thread that never has an
//! open switch call has one segment, and every rule is the one-stack rule.

/// A tracked call, as pairing sees it.
pub trait CallFrame {
    /// `rsp` at the entry (it points at the return address).
    fn entry_rsp(&self) -> u64;
    /// The return address (`[rsp]` at the entry).
    fn ret_addr(&self) -> u64;
    /// Run-time address of the probed function's entry.
    fn func(&self) -> u64;
    /// A call of a function that switches stacks (`swapcontext`): while
    /// it is open, the thread runs elsewhere, and its segment waits for
    /// its return.
    fn switches(&self) -> bool;
    /// Index of the first call of its segment among the thread's calls.
    fn base(&self) -> u32;
    /// Sets [`CallFrame::base`].
    fn set_base(&mut self, base: u32);
}

/// The [`CallFrame::base`] of a call pushed now on `calls`: where the
/// current segment starts (`calls.len()`, a new segment, when the
/// innermost call switches stacks).
pub fn base<C: CallFrame>(calls: &[C]) -> usize {
    match calls.last() {
        None => 0,
        Some(c) if c.switches() => calls.len(),
        Some(c) => (c.base() as usize).min(calls.len() - 1),
    }
}

/// Sets every call's [`CallFrame::base`] from the switch calls alone (a
/// segment ends after each): after calls were taken out of the middle.
pub fn rebase<C: CallFrame>(calls: &mut [C]) {
    let mut b = 0;
    for (i, c) in calls.iter_mut().enumerate() {
        c.set_base(b as u32);
        if c.switches() {
            b = i + 1;
        }
    }
}

/// A thread enters `func` with `rsp` (pointing at return address
/// `ret`): how many of its tracked calls (innermost last) stay; the
/// others are proven abandoned. Only calls of the current segment can
/// be (calls on other stacks wait for their thread to switch back). A
/// call whose entry `rsp` is below `rsp` is gone (its return-address
/// slot is below the live stack). One with the same entry `rsp` is
/// gone when the slot now holds another return address or when it is a
/// call of the same function (the same call site called it again after
/// its frame was abandoned); otherwise its function ended with a tail
/// call into this one, and both stay.
pub fn kept_at_entry<C: CallFrame>(calls: &[C], rsp: u64, ret: u64, func: u64) -> usize {
    let b = base(calls);
    b + kept_in(&calls[b..], rsp, ret, func)
}

fn kept_in<C: CallFrame>(calls: &[C], rsp: u64, ret: u64, func: u64) -> usize {
    let chain_has_func = calls
        .iter()
        .rev()
        .skip_while(|c| c.entry_rsp() < rsp)
        .take_while(|c| c.entry_rsp() == rsp)
        .any(|c| c.func() == func || c.ret_addr() != ret);
    let mut cut = calls.len();
    while cut > 0 {
        let c = &calls[cut - 1];
        let dead = c.entry_rsp() < rsp || (c.entry_rsp() == rsp && chain_has_func);
        if !dead {
            break;
        }
        cut -= 1;
    }
    cut
}

/// A thread may have just returned: its `rsp` after the `ret` is
/// `rsp_after`, and it landed at `at` when that is known. `Some((i,
/// n))`: call `i` returns here (the calls above it were abandoned),
/// with the `n` calls ending at `i` that share its frame (a tail-call
/// chain), innermost first. `None`: no tracked call returns here. The
/// call is looked for in the current segment, then in the others,
/// innermost first; a segment it is found in is moved to the end of
/// `calls` first (`i` is its index there), so the calls above `i` are
/// all of its own segment.
pub fn returning<C: CallFrame>(
    calls: &mut [C],
    rsp_after: u64,
    at: Option<u64>,
) -> Option<(usize, usize)> {
    let b = base(calls);
    if let Some((i, n)) = returning_in(&calls[b..], rsp_after, at) {
        return Some((b + i, n));
    }
    let mut end = b;
    while end > 0 {
        let s = (calls[end - 1].base() as usize).min(end - 1);
        if let Some((i, n)) = returning_in(&calls[s..end], rsp_after, at) {
            let len = end - s;
            let total = calls.len();
            calls[s..].rotate_left(len);
            for c in &mut calls[s..total - len] {
                c.set_base(c.base().saturating_sub(len as u32));
            }
            for c in &mut calls[total - len..] {
                c.set_base((total - len) as u32);
            }
            return Some((total - len + i, n));
        }
        end = s;
    }
    None
}

fn returning_in<C: CallFrame>(
    calls: &[C],
    rsp_after: u64,
    at: Option<u64>,
) -> Option<(usize, usize)> {
    let slot = rsp_after.wrapping_sub(8);
    // Entry `rsp`s only grow from the innermost call outwards within a
    // segment (an entry cuts the calls below it): past one above
    // `slot`, none matches. A `ret` of a call not tracked (beyond
    // `maxactive`, or deeper than a thread tracks) stops at the
    // innermost call, not after a scan of a stack a million deep.
    let i = calls
        .iter()
        .rev()
        .take_while(|c| c.entry_rsp() <= slot)
        .position(|c| c.entry_rsp() == slot && at.is_none_or(|a| a == c.ret_addr()))
        .map(|k| calls.len() - 1 - k)?;
    let n = calls[..=i]
        .iter()
        .rev()
        .take_while(|c| c.entry_rsp() == slot)
        .count();
    Some((i, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq)]
    struct C {
        name: char,
        rsp: u64,
        ret: u64,
        sw: bool,
        base: u32,
    }
    impl CallFrame for C {
        fn entry_rsp(&self) -> u64 {
            self.rsp
        }
        fn ret_addr(&self) -> u64 {
            self.ret
        }
        fn func(&self) -> u64 {
            self.name as u64
        }
        fn switches(&self) -> bool {
            self.sw
        }
        fn base(&self) -> u32 {
            self.base
        }
        fn set_base(&mut self, base: u32) {
            self.base = base;
        }
    }

    /// A thread's calls, driven as a transport drives them.
    #[derive(Default)]
    struct Th {
        calls: [Option<C>; 32],
        len: usize,
        /// Names of the calls found abandoned, in order.
        gone: [char; 32],
        n_gone: usize,
        /// Names of the calls that returned, in order.
        returned: [char; 32],
        n_ret: usize,
    }
    impl Th {
        fn slice(&self) -> [C; 32] {
            let mut a = [C {
                name: ' ',
                rsp: 0,
                ret: 0,
                sw: false,
                base: 0,
            }; 32];
            for (d, c) in a.iter_mut().zip(&self.calls[..self.len]) {
                *d = c.unwrap();
            }
            a
        }
        fn cut(&mut self, keep: usize) {
            while self.len > keep {
                self.len -= 1;
                self.gone[self.n_gone] = self.calls[self.len].unwrap().name;
                self.n_gone += 1;
            }
        }
        fn enter(&mut self, name: char, rsp: u64, ret: u64) {
            let a = self.slice();
            let kept = kept_at_entry(&a[..self.len], rsp, ret, name as u64);
            self.cut(kept);
            let a = self.slice();
            let base = base(&a[..self.len]) as u32;
            self.calls[self.len] = Some(C {
                name,
                rsp,
                ret,
                sw: name == 'S',
                base,
            });
            self.len += 1;
        }
        fn ret(&mut self, rsp_after: u64, at: u64) -> bool {
            let mut a = self.slice();
            let Some((i, n)) = returning(&mut a[..self.len], rsp_after, Some(at)) else {
                return false;
            };
            for (k, c) in a[..self.len].iter().enumerate() {
                self.calls[k] = Some(*c);
            }
            self.cut(i + 1);
            for _ in 0..n {
                self.len -= 1;
                self.returned[self.n_ret] = self.calls[self.len].unwrap().name;
                self.n_ret += 1;
            }
            true
        }
        fn open(&self) -> [char; 32] {
            let mut o = [' '; 32];
            for (d, c) in o.iter_mut().zip(&self.calls[..self.len]) {
                *d = c.unwrap().name;
            }
            o
        }
    }

    fn chars(s: &str) -> [char; 32] {
        let mut o = [' '; 32];
        for (i, ch) in s.chars().enumerate() {
            o[i] = ch;
        }
        o
    }

    /// uftrace's `s-ucontext`: main (m) calls foo (f), which calls
    /// swapcontext (S) into bar (b), on a stack that is an array in
    /// main's frame: above foo's and swapcontext's frames. bar calls
    /// getpid (g), returns to the context's end, which resumes foo
    /// inside swapcontext; then main calls baz (z).
    #[test]
    fn a_coroutine_stack_above_the_switching_call_leaves_it_open() {
        let mut t = Th::default();
        t.enter('m', 0x8000, 0x10);
        t.enter('f', 0x7000, 0x20);
        t.enter('S', 0x6f00, 0x30);
        // bar's stack lies between foo's frame and main's.
        t.enter('b', 0x7800, 0x40);
        t.enter('g', 0x7700, 0x50);
        assert_eq!(t.open(), chars("mfSbg"));
        assert!(t.ret(0x7708, 0x50));
        assert!(t.ret(0x7808, 0x40));
        assert!(t.ret(0x6f08, 0x30));
        assert!(t.ret(0x7008, 0x20));
        t.enter('z', 0x7000, 0x60);
        assert!(t.ret(0x7008, 0x60));
        assert!(t.ret(0x8008, 0x10));
        assert_eq!(t.n_gone, 0, "nothing abandoned: {:?}", &t.gone[..t.n_gone]);
        assert_eq!(&t.returned[..t.n_ret], &chars("gbSfzm")[..6]);
    }

    /// A coroutine (c, with steps p calling leaf l) on a stack below
    /// main's, resumed from r three times: each side's calls stay open
    /// across the switches and return in their own segment.
    #[test]
    fn a_coroutine_resumed_three_times_keeps_both_stacks_open() {
        let mut t = Th::default();
        t.enter('m', 0x8000, 0x10);
        // resume #1: r calls S (main -> co).
        t.enter('r', 0x7f00, 0x11);
        t.enter('S', 0x7e00, 0x12);
        t.enter('c', 0x3000, 0x90);
        t.enter('p', 0x2f00, 0x91);
        t.enter('l', 0x2e00, 0x92);
        assert!(t.ret(0x2e08, 0x92));
        // co -> main: S of the coroutine.
        t.enter('S', 0x2e00, 0x93);
        assert_eq!(t.open(), chars("mrScpS"));
        assert!(t.ret(0x7e08, 0x12), "main's S returns in main's segment");
        assert_eq!(t.open(), chars("cpSmr"));
        t.enter('l', 0x7e00, 0x13);
        assert!(t.ret(0x7e08, 0x13));
        assert!(t.ret(0x7f08, 0x11));
        for k in 0..2 {
            // resume #2, #3.
            t.enter('r', 0x7f00, 0x11);
            t.enter('S', 0x7e00, 0x12);
            assert!(t.ret(0x2e08, 0x93), "the coroutine's S returns");
            assert_eq!(t.open(), chars("mrScp"));
            t.enter('l', 0x2e00, 0x94);
            assert!(t.ret(0x2e08, 0x94));
            assert!(t.ret(0x2f08, 0x91));
            if k == 0 {
                t.enter('p', 0x2f00, 0x91);
                t.enter('l', 0x2e00, 0x92);
                assert!(t.ret(0x2e08, 0x92));
                t.enter('S', 0x2e00, 0x93);
                assert!(t.ret(0x7e08, 0x12));
            } else {
                // The coroutine ends: its context's link resumes main.
                assert!(t.ret(0x3008, 0x90));
                assert!(t.ret(0x7e08, 0x12));
            }
            t.enter('l', 0x7e00, 0x13);
            assert!(t.ret(0x7e08, 0x13));
            assert!(t.ret(0x7f08, 0x11));
        }
        assert!(t.ret(0x8008, 0x10));
        assert_eq!(t.len, 0);
        assert_eq!(t.n_gone, 0, "nothing abandoned: {:?}", &t.gone[..t.n_gone]);
    }

    /// Within a segment, `longjmp` still abandons calls: the entry above
    /// them proves it, as on one stack; a return in another segment
    /// leaves the current one's calls alone.
    #[test]
    fn abandonment_stays_within_a_segment() {
        let mut t = Th::default();
        t.enter('m', 0x8000, 0x10);
        t.enter('S', 0x7f00, 0x11);
        t.enter('c', 0x3000, 0x90);
        t.enter('p', 0x2f00, 0x91);
        t.enter('q', 0x2e00, 0x92);
        // The coroutine longjmps back into c, which calls l.
        t.enter('l', 0x2f00, 0x93);
        assert_eq!(&t.gone[..t.n_gone], &['q', 'p']);
        assert_eq!(t.open(), chars("mScl"));
        // An entry above main's frames on the coroutine's stack does
        // not end main's calls.
        t.enter('x', 0x3100, 0x95);
        assert_eq!(&t.gone[..t.n_gone], &['q', 'p', 'l', 'c']);
        assert_eq!(t.open(), chars("mSx"));
    }

    #[test]
    fn rebase_derives_segments_from_switch_calls() {
        let mk = |name, sw| C {
            name,
            rsp: 0,
            ret: 0,
            sw,
            base: 9,
        };
        let mut a = [
            mk('a', false),
            mk('S', true),
            mk('b', false),
            mk('c', false),
            mk('S', true),
        ];
        rebase(&mut a);
        assert_eq!(a.map(|c| c.base), [0, 0, 2, 2, 2]);
        assert_eq!(base(&a), 5);
        assert_eq!(base(&a[..4]), 2);
    }
}
