//! Per-thread call trees: the entries and returns of traced functions, in
//! the order the transport delivered them, become well-nested [`Step`]s per
//! thread (every entry shown is followed, in its thread, by one exit at the
//! same depth) for the views.
//!
//! * **Pairing.** A call is identified in its thread by its function and
//!   its `rsp` at the entry (the address of its return address); a return
//!   carries the entry's `rsp` (`entry_reg`), so it closes exactly its own
//!   call even when frames above it never returned. Those frames (left by
//!   `longjmp` or an exception unwinding past them, where the transport did
//!   not say so first) are closed at that moment as unwound: a frame nested
//!   in a returning call cannot outlive it.
//! * **Stacks.** A call of a function that switches stacks
//!   (`swapcontext`) leaves its thread's calls open while the thread runs
//!   another context: calls the thread makes meanwhile nest inside it (a
//!   new context's function is shown inside `swapcontext`, as uftrace
//!   shows it). When a return closes a call below such calls and the
//!   innermost call between them is an open switch call, those calls are
//!   of another stack, waiting for their thread to switch back: they are
//!   set aside (*parked*, one group per stack, each ending with its switch
//!   call), not closed, and taken back, at the depths they were shown at,
//!   when a return or an unwind closes one of them (the thread switched
//!   back: that context's `swapcontext` returns). So each stack's lines are
//!   at the depths of its own open calls, and every call is closed by its
//!   own return. (With `--min-duration`, the steps held back are handed on
//!   when calls are parked or taken back: calls open across a switch are
//!   shown whatever their length.)
//! * **Threads** are keyed by (pid, tid) and created at their first event;
//!   a thread's tree is empty again when its last call returns, and a tid
//!   reused by a later thread starts a fresh tree.
//! * **Processes.** A fork child's first thread starts with a copy of the
//!   forking thread's open calls (the child returns from them: its own
//!   tree from the fork on, the parent's open calls its context); those
//!   its first entries or returns prove left (the forking call, `fork()`
//!   itself when traced) are closed as returned there; an exec or
//!   the end of a process closes every call still open in it (`exit()`
//!   leaves `main` without returning), as unwound.
//! * **Filters.** `-F`: a call is shown when its function matches or it is
//!   inside a call that matches (uftrace's meaning); `--depth` then counts
//!   from the nearest call that matches (a matching call deep inside
//!   another's subtree is shown with its own subtree); `-N`: a call of a matching function is
//!   hidden, and every call made inside it (uftrace's meaning; its time
//!   stays its caller's own); `--depth N` hides calls N or more levels
//!   deep; `--min-duration D` hides calls shorter than D (and so their
//!   callees), which needs the steps of a call held back until its length
//!   is known.
//!
//! Per event: a map lookup and a push or a pop; no allocation once a
//! thread's stack has grown (the held-back steps of `--min-duration` aside).

use rustc_hash::FxHashMap as HashMap;

/// Index of a traced function in the run's function table.
pub type FuncId = u32;

/// A traced thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Thread {
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// It returned.
    Returned,
    /// It was left without returning.
    Unwound(Cause),
    /// It was still running when the trace ended (detach).
    Running,
}

/// Why a call was left without returning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The transport reported it (`longjmp`, an exception unwinding past
    /// it, the thread's end).
    Reported,
    /// A call it was nested in returned first (`longjmp` or an exception
    /// took the thread past it, unreported).
    OuterReturned,
    /// Its thread ended (`pthread_exit` inside it).
    ThreadExit,
    /// Its process exec'd.
    Exec,
    /// Its process ended (`exit()` from inside it, a fatal signal).
    ProcessEnded,
    /// A call a fork child inherited from its parent's thread, still open
    /// when the child ended: its return (if any) was not reported.
    Inherited,
    /// A C++ exception unwound through it: closed at the catch (the event
    /// that proved it left: the landing pad's first traced call, the catch's
    /// `__cxa_begin_catch`, an outer call's return), and shown as uftrace
    /// shows it, an ordinary exit, in the duration view. Told apart when
    /// the function that threw is traced (`--plt`: `__cxa_throw@plt`,
    /// `_Unwind_Resume@plt`; see `funcs::throws`).
    Exception,
    /// Its process ended while a fork child continued it: the process
    /// forked from its only thread in calls and ended with no traced call
    /// or return since (a daemon's parent leaving `daemon()` by `_exit`).
    /// The child's tree closes the call; the duration view shows no exit
    /// line for it here, as uftrace does.
    InChild,
}

impl Cause {
    /// For output.
    pub fn describe(self) -> &'static str {
        match self {
            Cause::Reported => "unwound",
            Cause::OuterReturned => "unwound: an outer call returned",
            Cause::Exec => "unwound: exec",
            Cause::ThreadExit => "unwound: thread exit",
            Cause::ProcessEnded => "unwound: process ended",
            Cause::Inherited => "return not seen: a call inherited at fork",
            Cause::Exception => "unwound: exception",
            Cause::InChild => "continued in a fork child",
        }
    }
}

/// What a view is given, per thread in order. `depth` and `func` are kept
/// apart (`repr(C)`, in this order): side by side, a view's copy of both
/// was one 8-byte load of two 4-byte stores, which the CPU cannot forward
/// (a stall at every step of `--report`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Step {
    /// The thread.
    pub th: Thread,
    /// Depth in the shown tree (0: outermost).
    pub depth: u32,
    /// When (ns since the epoch): the entry, the exit, the note.
    pub time_ns: u64,
    /// The function.
    pub func: FuncId,
    /// What.
    pub kind: StepKind,
}

/// The kinds of [`Step`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// A call entered.
    Enter {
        /// Its run-time address.
        ip: u64,
        /// Words the entry handler logged after the standard ones.
        args: Vec<u64>,
    },
    /// A call ended.
    Exit {
        /// When it entered.
        entry_ns: u64,
        /// How long it took.
        dur_ns: u64,
        /// Minus its shown callees.
        self_ns: u64,
        /// `rax` at the return (returned calls).
        rax: Option<u64>,
        /// Words the exit handler logged after the standard ones.
        extras: Vec<u64>,
        /// How it ended.
        how: How,
    },
    /// A record a custom handler logged, shown under the call (`func` is
    /// the call's function, `depth` one deeper).
    Note {
        /// The record as text.
        text: String,
    },
}

/// Where steps go.
pub trait Sink {
    /// One step.
    fn step(&mut self, s: &Step);
}

/// Filter settings.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// Per function: named by `-F` (empty: no `-F`, everything shown).
    pub filter_hit: Vec<bool>,
    /// Per function: named by `-N` (hidden with its callees; empty: none).
    pub notrace_hit: Vec<bool>,
    /// `--depth`.
    pub max_depth: Option<u32>,
    /// `--min-duration` in ns (0: none).
    pub min_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct Frame {
    func: FuncId,
    rsp: u64,
    entry_ns: u64,
    child_ns: u64,
    in_filter: bool,
    /// With `-F`: calls between it and the nearest call `-F` names (0: it
    /// is one), the depth `--depth` limits.
    level: u32,
    /// Inside a call `-N` names (or one itself).
    notraced: bool,
    visible: bool,
    depth: u32,
    /// Copied from the parent at a fork.
    inherited: bool,
}

#[derive(Debug, Default)]
struct ThreadState {
    stack: Vec<Frame>,
    /// Calls of stacks the thread switched away from, each group ending
    /// with its open switch call, the latest parked last.
    parked: Vec<Vec<Frame>>,
    /// Depth of the next call shown.
    shown: u32,
    /// A C++ exception is unwinding the thread's calls (a call was closed
    /// by it, and no call entered or returned since).
    throwing: bool,
    /// A fork child (this pid) continues the thread's open calls: the
    /// process forked from this thread (its only one in calls), no call
    /// entered or returned in it since, and the child did not exec.
    continued: Option<i32>,
    last_ns: u64,
    /// Held-back steps (`--min-duration`), and where the entry of each
    /// open call is among them (`None`: already handed on).
    held: Vec<Step>,
    open: Vec<Option<usize>>,
}

/// The threads' states: a map to their places in a list, and the thread
/// looked up last with its place (a thread's events come in runs: most
/// lookups, three per traced call, then hash nothing).
#[derive(Debug, Default)]
struct Threads {
    index: HashMap<Thread, usize>,
    states: Vec<ThreadState>,
    /// Places left by removed threads.
    free: Vec<usize>,
    last: Option<(Thread, usize)>,
}

impl Threads {
    fn find(&mut self, th: Thread) -> Option<usize> {
        if let Some((t, i)) = self.last
            && t == th
        {
            return Some(i);
        }
        let i = *self.index.get(&th)?;
        self.last = Some((th, i));
        Some(i)
    }

    fn get(&self, th: Thread) -> Option<&ThreadState> {
        if let Some((t, i)) = self.last
            && t == th
        {
            return Some(&self.states[i]);
        }
        self.index.get(&th).map(|&i| &self.states[i])
    }

    fn get_mut(&mut self, th: Thread) -> Option<&mut ThreadState> {
        let i = self.find(th)?;
        Some(&mut self.states[i])
    }

    fn get_or_insert_with(
        &mut self,
        th: Thread,
        make: impl FnOnce() -> ThreadState,
    ) -> &mut ThreadState {
        let i = match self.find(th) {
            Some(i) => i,
            None => {
                let st = make();
                let i = match self.free.pop() {
                    Some(i) => {
                        self.states[i] = st;
                        i
                    }
                    None => {
                        self.states.push(st);
                        self.states.len() - 1
                    }
                };
                self.index.insert(th, i);
                self.last = Some((th, i));
                i
            }
        };
        &mut self.states[i]
    }

    fn remove(&mut self, th: Thread) -> Option<ThreadState> {
        let i = self.index.remove(&th)?;
        if self.last.is_some_and(|(t, _)| t == th) {
            self.last = None;
        }
        self.free.push(i);
        Some(std::mem::take(&mut self.states[i]))
    }

    fn iter(&self) -> impl Iterator<Item = (Thread, &ThreadState)> {
        self.index.iter().map(|(&t, &i)| (t, &self.states[i]))
    }
}

/// Anomalies the summary reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Calls entered.
    pub calls: u64,
    /// Calls that returned.
    pub returned: u64,
    /// Calls left without returning (all causes).
    pub unwound: u64,
    /// Calls still running at the end.
    pub running: u64,
    /// Returns whose call was not seen (not paired): not shown.
    pub orphan_returns: u64,
}

/// The call trees of every traced thread.
pub struct Tree<S: Sink> {
    threads: Threads,
    /// Open calls of each process's threads when a child forked from it,
    /// for the child's first thread (pid → stacks).
    forked: HashMap<i32, Vec<Vec<Frame>>>,
    filters: Filters,
    has_filter: bool,
    /// Functions no longer traced (a probe of theirs could not be armed):
    /// their entries and returns are ignored.
    dropped: Vec<bool>,
    /// Functions that switch stacks (`swapcontext`).
    switches: Vec<bool>,
    /// Functions that raise or resume a C++ exception (`__cxa_throw`).
    throwers: Vec<bool>,
    /// The counters.
    pub counters: Counters,
    /// Where steps go.
    pub sink: S,
}

impl<S: Sink> Tree<S> {
    /// An empty tree.
    pub fn new(filters: Filters, sink: S) -> Tree<S> {
        Tree {
            threads: Threads::default(),
            forked: HashMap::default(),
            has_filter: filters.filter_hit.iter().any(|b| *b),
            filters,
            dropped: Vec::new(),
            switches: Vec::new(),
            throwers: Vec::new(),
            counters: Counters::default(),
            sink,
        }
    }

    /// `func` is no longer traced: one of its two probes could not be
    /// armed, so its entries cannot be paired with returns.
    pub fn drop_function(&mut self, func: FuncId) {
        let i = func as usize;
        if self.dropped.len() <= i {
            self.dropped.resize(i + 1, false);
        }
        self.dropped[i] = true;
    }

    /// Per function: whether its calls switch stacks (`swapcontext`).
    pub fn set_switches(&mut self, switches: Vec<bool>) {
        self.switches = switches;
    }

    fn switches(&self, func: FuncId) -> bool {
        self.switches.get(func as usize).copied().unwrap_or(false)
    }

    /// Per function: whether its calls raise or resume a C++ exception
    /// (`__cxa_throw`, `_Unwind_Resume`).
    pub fn set_throwers(&mut self, throwers: Vec<bool>) {
        self.throwers = throwers;
    }

    /// Whether the calls of `th` from index `from` up end by a C++
    /// exception: the thread is unwinding one, or one of them is a call of
    /// a function that throws.
    fn by_exception(&self, th: Thread, from: usize) -> bool {
        self.threads.get(th).is_some_and(|st| {
            st.throwing
                || st.stack.get(from..).is_some_and(|s| {
                    s.iter()
                        .any(|f| self.throwers.get(f.func as usize).copied() == Some(true))
                })
        })
    }

    /// The call of `func` entered with `rsp` among the open calls of `th`:
    /// its index in the thread's stack, after taking its group back from
    /// the parked ones when it is there (the thread switched back to its
    /// stack).
    fn find_call(&mut self, th: Thread, func: FuncId, rsp: u64) -> Option<usize> {
        let st = self.threads.get_mut(th)?;
        if let Some(k) = st
            .stack
            .iter()
            .rposition(|f| f.func == func && f.rsp == rsp)
        {
            return Some(k);
        }
        let g = st
            .parked
            .iter()
            .rposition(|g| g.iter().any(|f| f.func == func && f.rsp == rsp))?;
        let group = st.parked.remove(g);
        st.stack.extend(group);
        st.shown = next_depth(&st.stack);
        self.settle(th);
        let st = self.threads.get_mut(th)?;
        st.stack
            .iter()
            .rposition(|f| f.func == func && f.rsp == rsp)
    }

    /// The calls of `th` above index `k` end because call `k` ends: those
    /// up to the innermost open switch call among them are of stacks the
    /// thread switched away from, parked (a group per switch call); those
    /// above it (or all, with no switch call among them) were left
    /// unreported, closed as unwound (by `cause`) at `end`.
    fn end_above(&mut self, th: Thread, k: usize, end: u64, cause: Cause) {
        let Some(st) = self.threads.get(th) else {
            return;
        };
        let last_switch = st.stack[k + 1..]
            .iter()
            .rposition(|f| self.switches(f.func))
            .map(|j| k + 1 + j);
        let keep = last_switch.map_or(k + 1, |j| j + 1);
        let above = st.stack.len() - keep;
        for _ in 0..above {
            let inherited = self
                .threads
                .get(th)
                .and_then(|s| s.stack.last())
                .is_some_and(|f| f.inherited);
            let how = if inherited {
                // A call a fork child inherited: it returned in the child
                // (unseen), as the forking call did.
                How::Returned
            } else {
                How::Unwound(cause)
            };
            self.close(th, end, how, None, &[]);
        }
        if last_switch.is_some() {
            let switches = std::mem::take(&mut self.switches);
            let st = self
                .threads
                .get_mut(th)
                .expect("invariant: the caller found the thread");
            let moved: Vec<Frame> = st.stack.drain(k + 1..).collect();
            let mut group = Vec::new();
            for f in moved {
                let sw = switches.get(f.func as usize).copied().unwrap_or(false);
                group.push(f);
                if sw {
                    st.parked.push(std::mem::take(&mut group));
                }
            }
            st.shown = next_depth(&st.stack);
            self.switches = switches;
            self.settle(th);
        }
    }

    /// Hands on the steps held back for `--min-duration` (calls were
    /// parked or taken back: the held steps no longer nest as the open
    /// calls do).
    fn settle(&mut self, th: Thread) {
        let Some(st) = self.threads.get_mut(th) else {
            return;
        };
        for i in &mut st.open {
            *i = None;
        }
        let held = std::mem::take(&mut st.held);
        for s in &held {
            self.sink.step(s);
        }
    }

    fn is_dropped(&self, func: FuncId) -> bool {
        self.dropped.get(func as usize).copied().unwrap_or(false)
    }

    fn thread(&mut self, th: Thread, rsp: u64, func: Option<FuncId>) -> &mut ThreadState {
        let forked = &mut self.forked;
        self.threads.get_or_insert_with(th, || {
            let mut st = ThreadState::default();
            if let Some(stacks) = forked.remove(&th.pid) {
                st.stack = adopt(stacks, rsp, func);
                st.shown = st.stack.iter().filter(|f| f.visible).count() as u32;
            }
            st
        })
    }

    /// A call of `func` entered in `th` at `time_ns` with `rsp`.
    pub fn enter(
        &mut self,
        th: Thread,
        func: FuncId,
        time_ns: u64,
        rsp: u64,
        ip: u64,
        args: &[u64],
    ) {
        let has_filter = self.has_filter;
        let hit = self
            .filters
            .filter_hit
            .get(func as usize)
            .copied()
            .unwrap_or(false);
        let notrace = self
            .filters
            .notrace_hit
            .get(func as usize)
            .copied()
            .unwrap_or(false);
        let max_depth = self.filters.max_depth;
        self.counters.calls += 1;
        let st = self.thread(th, rsp, None);
        if st.stack.last().is_some_and(|f| f.inherited && f.rsp <= rsp) {
            self.left_inherited(th, rsp, time_ns);
        }
        let st = self.thread(th, rsp, None);
        st.last_ns = st.last_ns.max(time_ns);
        st.throwing = false;
        st.continued = None;
        let in_filter = !has_filter || hit || st.stack.last().is_some_and(|f| f.in_filter);
        let notraced = notrace || st.stack.last().is_some_and(|f| f.notraced);
        let depth = st.shown;
        // `--depth` counts from the nearest call `-F` names: a call it names
        // inside another's subtree starts its own (uftrace's meaning).
        let level = match st.stack.last() {
            Some(f) if has_filter && !hit => f.level + 1,
            _ if has_filter => 0,
            _ => depth,
        };
        let visible = in_filter && !notraced && max_depth.is_none_or(|m| level < m);
        st.stack.push(Frame {
            func,
            rsp,
            entry_ns: time_ns,
            child_ns: 0,
            in_filter,
            level,
            notraced,
            visible,
            depth,
            inherited: false,
        });
        if visible {
            st.shown += 1;
            let step = Step {
                th,
                depth,
                func,
                time_ns,
                kind: StepKind::Enter {
                    ip,
                    args: args.to_vec(),
                },
            };
            self.emit(th, step);
        }
    }

    /// A call of `func` entered with `entry_rsp` returned in `th` after
    /// `elapsed_ns`, with `rax`; the hit's time is `time_ns`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one return's facts, from one record"
    )]
    // Inlined into its two callers: passed on the stack, two of its words
    // were copied in one 16-byte load of the event's two 8-byte stores,
    // which the CPU cannot forward (a stall at every return).
    #[inline(always)]
    pub fn exit(
        &mut self,
        th: Thread,
        func: FuncId,
        time_ns: u64,
        rax: u64,
        entry_rsp: u64,
        elapsed_ns: u64,
        extras: &[u64],
    ) {
        if self.is_dropped(func) {
            return;
        }
        let st = self.thread(th, entry_rsp, Some(func));
        st.last_ns = st.last_ns.max(time_ns);
        st.continued = None;
        let Some(k) = self.find_call(th, func, entry_rsp) else {
            self.counters.orphan_returns += 1;
            return;
        };
        let st = self
            .threads
            .get(th)
            .expect("invariant: find_call found the thread");
        let end = st.stack[k]
            .entry_ns
            .saturating_add(elapsed_ns)
            .max(st.stack[k].entry_ns);
        let cause = if self.by_exception(th, k + 1) {
            Cause::Exception
        } else {
            Cause::OuterReturned
        };
        self.end_above(th, k, end, cause);
        self.close(th, end, How::Returned, Some(rax), extras);
        if let Some(st) = self.threads.get_mut(th) {
            st.throwing = false;
        }
    }

    /// A fork child's thread enters a call at `rsp`: the inherited calls
    /// whose return-address slot is at or below it have returned in the
    /// child, unseen (the transport tracks no return of an inherited call):
    /// the forking call first (`fork()`, the child's first return). They
    /// are closed as returned, without a value, at `time_ns`.
    fn left_inherited(&mut self, th: Thread, rsp: u64, time_ns: u64) {
        while self
            .threads
            .get(th)
            .and_then(|s| s.stack.last())
            .is_some_and(|f| f.inherited && f.rsp <= rsp)
        {
            self.close(th, time_ns, How::Returned, None, &[]);
        }
    }

    /// The transport reports that the call of `func` entered with
    /// `entry_rsp` in `th` was left without returning (`how`). It is
    /// closed at the last event seen in its thread: the transport notices
    /// such calls later (at the thread's next traced entry or return, or
    /// its end), and the frame was left after that event.
    pub fn unwound(&mut self, th: Thread, func: FuncId, entry_rsp: u64, how: How) {
        let Some(st) = self.threads.get_mut(th) else {
            return;
        };
        let time_ns = st.last_ns;
        let Some(k) = self.find_call(th, func, entry_rsp) else {
            return;
        };
        let st = self
            .threads
            .get(th)
            .expect("invariant: find_call found the thread");
        let end = time_ns.max(st.stack[k].entry_ns);
        // A C++ exception leaving it: the calls it leaves until the thread
        // enters or returns from a call are left by it too.
        let how = match how {
            How::Unwound(Cause::Reported) if self.by_exception(th, k) => {
                if let Some(st) = self.threads.get_mut(th) {
                    st.throwing = true;
                }
                How::Unwound(Cause::Exception)
            }
            h => h,
        };
        let above = match how {
            How::Unwound(Cause::Exception) => Cause::Exception,
            _ => Cause::OuterReturned,
        };
        self.end_above(th, k, end, above);
        self.close(th, end, how, None, &[]);
    }

    /// A record a custom handler logged in a call of `func` in `th`.
    pub fn note(&mut self, th: Thread, func: FuncId, time_ns: u64, text: String) {
        let Some(st) = self.threads.get_mut(th) else {
            return;
        };
        if st.stack.last().is_some_and(|f| !f.visible) {
            return;
        }
        let depth = st.shown;
        self.emit(
            th,
            Step {
                th,
                depth,
                func,
                time_ns,
                kind: StepKind::Note { text },
            },
        );
    }

    /// Process `child` forked from `parent`: its first thread continues
    /// the forking thread's open calls.
    pub fn forked(&mut self, child: i32, parent: i32) {
        let parents: Vec<Thread> = self
            .threads
            .iter()
            .filter(|(t, s)| t.pid == parent && !s.stack.is_empty())
            .map(|(t, _)| t)
            .collect();
        let stacks: Vec<Vec<Frame>> = parents
            .iter()
            .filter_map(|&t| self.threads.get(t))
            .map(|s| s.stack.clone())
            .collect();
        if let [th] = parents[..]
            && let Some(st) = self.threads.get_mut(th)
        {
            st.continued = Some(child);
        }
        if !stacks.is_empty() {
            self.forked.insert(child, stacks);
        }
    }

    /// Every call still open in process `pid` ended, by `how` (its
    /// process exec'd or ended, or the trace ends).
    pub fn end_process(&mut self, pid: i32, how: How) {
        let mut threads: Vec<Thread> = self
            .threads
            .iter()
            .map(|(t, _)| t)
            .filter(|t| t.pid == pid)
            .collect();
        threads.sort();
        for th in threads {
            self.end_thread(th, how);
            if let Some(st) = self.threads.remove(th) {
                self.flush_held(th, st);
            }
        }
        self.forked.remove(&pid);
        if how == How::Unwound(Cause::Exec) {
            // A child that executed a program continues no call of its
            // parent's.
            for st in &mut self.threads.states {
                if st.continued == Some(pid) {
                    st.continued = None;
                }
            }
        }
    }

    /// Closes every open call of every thread (the trace ends).
    pub fn finish(&mut self) {
        let mut pids: Vec<i32> = self.threads.iter().map(|(t, _)| t.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        for pid in pids {
            self.end_process(pid, How::Running);
        }
    }

    fn end_thread(&mut self, th: Thread, how: How) {
        let Some(st) = self.threads.get(th) else {
            return;
        };
        let end = st.last_ns;
        loop {
            while self.threads.get(th).is_some_and(|s| !s.stack.is_empty()) {
                self.close(th, end, how, None, &[]);
            }
            // The calls of stacks it had switched away from, the latest
            // first.
            let Some(st) = self.threads.get_mut(th) else {
                return;
            };
            let Some(group) = st.parked.pop() else {
                return;
            };
            st.stack = group;
            st.shown = next_depth(&st.stack);
            self.settle(th);
        }
    }

    /// Pops the top frame of `th`, ended at `end_ns`.
    fn close(&mut self, th: Thread, end_ns: u64, how: How, rax: Option<u64>, extras: &[u64]) {
        let min_ns = self.filters.min_ns;
        let st = self
            .threads
            .get_mut(th)
            .expect("invariant: the caller found the thread");
        let Some(f) = st.stack.pop() else { return };
        let how = match how {
            How::Unwound(Cause::ProcessEnded | Cause::Exec) | How::Running if f.inherited => {
                How::Unwound(Cause::Inherited)
            }
            How::Unwound(Cause::ProcessEnded) if st.continued.is_some() => {
                How::Unwound(Cause::InChild)
            }
            h => h,
        };
        match how {
            _ if f.inherited => {}
            // It returns (or not) in the child, which counts it.
            How::Returned | How::Unwound(Cause::InChild) => self.counters.returned += 1,
            How::Unwound(_) => self.counters.unwound += 1,
            How::Running => self.counters.running += 1,
        }
        let dur = end_ns.saturating_sub(f.entry_ns);
        if !f.visible {
            return;
        }
        st.shown = f.depth;
        // Its time is not the own time of the nearest shown call it is in
        // (with `-F` and `--depth`, calls hidden may lie between them).
        if dur >= min_ns
            && let Some(parent) = st.stack.iter_mut().rev().find(|p| p.visible)
        {
            parent.child_ns = parent.child_ns.saturating_add(dur);
        }
        let step = Step {
            th,
            depth: f.depth,
            func: f.func,
            time_ns: end_ns,
            kind: StepKind::Exit {
                entry_ns: f.entry_ns,
                dur_ns: dur,
                self_ns: dur.saturating_sub(f.child_ns),
                rax,
                extras: extras.to_vec(),
                how,
            },
        };
        self.emit(th, step);
    }

    /// Hands a step to the sink, or holds it back until the length of every
    /// open call it is inside is known (`--min-duration`).
    fn emit(&mut self, th: Thread, step: Step) {
        let min_ns = self.filters.min_ns;
        if min_ns == 0 {
            self.sink.step(&step);
            return;
        }
        let st = self
            .threads
            .get_mut(th)
            .expect("invariant: the thread exists");
        let now = step.time_ns;
        match &step.kind {
            StepKind::Enter { .. } => {
                st.open.push(Some(st.held.len()));
                st.held.push(step);
            }
            StepKind::Exit { dur_ns, .. } => match st.open.pop().flatten() {
                Some(at) if *dur_ns < min_ns => st.held.truncate(at),
                _ => st.held.push(step),
            },
            StepKind::Note { .. } => st.held.push(step),
        }
        // Everything before the first open call that may still turn out
        // shorter than the minimum can go.
        let undecided = st
            .open
            .iter()
            .find_map(|&i| i.filter(|&i| now.saturating_sub(st.held[i].time_ns) < min_ns));
        let n = undecided.unwrap_or(st.held.len());
        if n > 0 {
            for s in st.held.drain(..n) {
                self.sink.step(&s);
            }
            for i in &mut st.open {
                *i = i.and_then(|i| i.checked_sub(n));
            }
        }
    }

    fn flush_held(&mut self, _th: Thread, st: ThreadState) {
        for s in st.held {
            self.sink.step(&s);
        }
    }

    /// Depth of `th`'s tree now (open calls), for tests.
    pub fn depth(&self, th: Thread) -> usize {
        self.threads.get(th).map_or(0, |s| {
            s.stack.len() + s.parked.iter().map(Vec::len).sum::<usize>()
        })
    }
}

/// The open calls of one thread as a view follows them through the steps,
/// with what the view keeps for each (`T`): an exit closes the innermost
/// open call at its depth of its function; calls above it up to an open
/// call of a function that switches stacks are parked, as the tree parks
/// them, and taken back when one of them exits.
#[derive(Debug)]
pub struct OpenSteps<T> {
    stack: Vec<(u32, FuncId, T)>,
    parked: Vec<Vec<(u32, FuncId, T)>>,
}

impl<T> Default for OpenSteps<T> {
    fn default() -> OpenSteps<T> {
        OpenSteps {
            stack: Vec::new(),
            parked: Vec::new(),
        }
    }
}

impl<T> OpenSteps<T> {
    /// What the innermost open call (of the stack the thread runs on)
    /// keeps.
    pub fn top(&self) -> Option<&T> {
        self.stack.last().map(|(_, _, t)| t)
    }

    /// What the open calls of the stack the thread runs on keep, outermost
    /// first.
    pub fn open(&self) -> impl Iterator<Item = &T> {
        self.stack.iter().map(|(_, _, t)| t)
    }

    /// A call entered (step `s`).
    pub fn enter(&mut self, s: &Step, t: T) {
        self.stack.push((s.depth, s.func, t));
    }

    /// A call ended (step `s`): what it kept. `switches` tells the
    /// functions that switch stacks.
    pub fn exit(&mut self, s: &Step, switches: impl Fn(FuncId) -> bool) -> Option<T> {
        let is = |e: &(u32, FuncId, T)| e.0 == s.depth && e.1 == s.func;
        let k = match self.stack.iter().rposition(is) {
            Some(k) => k,
            None => {
                let g = self.parked.iter().rposition(|g| g.iter().any(is))?;
                let group = self.parked.remove(g);
                self.stack.extend(group);
                self.stack.iter().rposition(is)?
            }
        };
        let mut group = Vec::new();
        for e in self.stack.drain(k + 1..) {
            let sw = switches(e.1);
            group.push(e);
            if sw {
                self.parked.push(std::mem::take(&mut group));
            }
        }
        self.stack.pop().map(|(_, _, t)| t)
    }
}

/// Depth of the next call shown on top of `stack`: one deeper than its
/// innermost shown call.
fn next_depth(stack: &[Frame]) -> u32 {
    stack
        .iter()
        .rev()
        .find(|f| f.visible)
        .map_or(0, |f| f.depth + 1)
}

/// The open calls a fork child's first thread inherits: the stack of the
/// forking thread, which is the one holding the call a first return pairs
/// with, or else the one whose innermost call is just above `rsp` (the
/// child's first entry happens below it).
fn adopt(stacks: Vec<Vec<Frame>>, rsp: u64, func: Option<FuncId>) -> Vec<Frame> {
    let mut chosen = if stacks.len() == 1 {
        stacks.into_iter().next().unwrap_or_default()
    } else if let Some(func) = func
        && let Some(s) = stacks
            .iter()
            .find(|s| s.iter().any(|f| f.func == func && f.rsp == rsp))
    {
        s.clone()
    } else {
        stacks
            .into_iter()
            .filter(|s| s.last().is_some_and(|f| f.rsp > rsp))
            .min_by_key(|s| s.last().map_or(u64::MAX, |f| f.rsp - rsp))
            .unwrap_or_default()
    };
    for f in &mut chosen {
        f.inherited = true;
    }
    chosen
}

#[cfg(test)]
mod fake_tests;

#[cfg(test)]
mod tests;
