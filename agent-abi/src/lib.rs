//! The contract between wprobe (the tracer) and its in-process agent (the
//! `no_std` object mapped into a traced process, `agent/`): entry points and
//! their error codes, the register frame a probe stub saves, the layout of
//! the shared control region (probe table with counters, global variables,
//! map regions, a ring of handler-run records, the store lock, the
//! heartbeat), load requests, and the wasmtime engine settings both sides
//! must share for a precompiled handler module to be accepted by the agent.
//!
//! Everything shared across the process boundary is `#[repr(C)]` with fixed
//! offsets (checked by the tests below); atomics have the size and layout of
//! the integer they wrap, so the tracer and the agent can both operate on
//! the same mapped bytes. The agent validates every offset the tracer gives
//! before it uses it; the tracer bounds-checks everything it reads back
//! (the target may have scribbled over the shared pages).

#![no_std]
#![deny(missing_docs)]

use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

/// Version of this contract; the agent refuses a control region of another.
pub const AGENT_ABI_VERSION: u32 = 12;

/// First 8 bytes of the control region ("WPRBAGT3", little-endian).
pub const CTRL_MAGIC: u64 = u64::from_le_bytes(*b"WPRBAGT3");

/// The fork-guard page (`MADV_WIPEONFORK`: a fork child finds it zeroed),
/// as words of 8 bytes. The agent runs handlers only while word
/// [`fork_guard::MAGIC_WORD`] holds [`fork_guard::MAGIC`]: a fork child's
/// inherited agent stays dormant until the tracer, following the child
/// (`-f`), writes the child's pid and the magic into its copy of the page.
/// The child's agent then shares the parent's control region (its ring,
/// counters, maps, global variables and store lock) with a store of its own.
pub mod fork_guard {
    /// What word [`MAGIC_WORD`] holds while the agent may run.
    pub const MAGIC: u64 = u64::from_le_bytes(*b"WPRBFORK");
    /// The word holding [`MAGIC`].
    pub const MAGIC_WORD: usize = 0;
    /// The word holding the process's id (what runs and memory reads name).
    pub const PID_WORD: usize = 1;
    /// The word that is 1 when the process registered for `membarrier`'s
    /// global expedited barriers: only then may one of its threads own the
    /// store's bias ([`crate::bias`]), whose revocation relies on them.
    pub const REGISTERED_WORD: usize = 2;
    /// The word that is not 0 while a `vfork` child of the process may be
    /// running (`vfork`, or `posix_spawn`'s `clone(CLONE_VM |
    /// CLONE_VFORK)`): a process that shares this memory, this page and the
    /// thread pointer of the thread that made it. The tracer, when it sees
    /// the child made (following it, `-f`, or holding the threads for trap
    /// sites), writes the number of such children before the first runs and
    /// again when one executes a program or exits. While it or
    /// [`VFORK_CALLS_WORD`] is not 0 the agent asks the kernel which
    /// process a hit runs in: one whose pid is not [`PID_WORD`]'s is a
    /// vfork child. Followed ([`VFORK_FOLLOWED_WORD`]), its runs carry its
    /// own pid and tid and its calls are tracked apart from those of the
    /// thread that made it (suspended meanwhile); else its hits run nothing
    /// and touch no tracked call, as an unfollowed fork child's.
    pub const VFORK_WORD: usize = 3;
    /// The word that is 1 when the vfork children [`VFORK_WORD`] counts
    /// are followed (`-f`), 0 when not: written with it, in one write.
    pub const VFORK_FOLLOWED_WORD: usize = 4;
    /// The number of calls of the C library's functions that make a vfork
    /// child (`vfork`, `posix_spawn`, `posix_spawnp`, `clone`) under way in
    /// the process's threads, counted by the agent itself at the sites the
    /// tracer marks ([`crate::SiteEntry::vfork`], [`crate::vfork_mark`]):
    /// not 0 from the entry of such a call to its return in the thread that
    /// made it, which covers the child's whole life (that thread is
    /// suspended until the child executes a program or exits). The tracer
    /// need not see the child made.
    pub const VFORK_CALLS_WORD: usize = 5;
}

/// What a site does to [`fork_guard::VFORK_CALLS_WORD`] before anything
/// else ([`SiteEntry::vfork`]; 0: nothing).
pub mod vfork_mark {
    /// The entry of a function that makes a vfork child: one more call
    /// under way.
    pub const ENTER: u32 = 1;
    /// A `ret` of such a function that only the thread that made the child
    /// reaches (`posix_spawn`, `clone`: the child leaves by another path):
    /// one call fewer.
    pub const LEAVE: u32 = 2;
    /// A `ret` of `vfork`, which the child reaches too, with `rax` 0: one
    /// call fewer unless `rax` is 0 (the parent's return, or a failure).
    pub const LEAVE_UNLESS_CHILD: u32 = 3;
}

/// Exported symbols of the agent object (C ABI), as the loader finds them.
pub mod sym {
    /// `fn(ctrl: *mut u8, len: usize, fork_guard: *mut u8, join: usize) ->
    /// i32`: set up the allocator and the engine, remember the control
    /// region (with `join` != 0, one another process's agent set up and
    /// uses: its header is left as it is). Returns 0 or an
    /// [`crate::AgentError`] code.
    pub const INIT: &str = "wprobe_agent_init";
    /// `fn(req_off: usize) -> i32`: load the program described by the
    /// [`crate::LoadRequest`] at `req_off` in the control region. Returns the
    /// program index (>= 0) or an [`crate::AgentError`] code.
    pub const LOAD: &str = "wprobe_agent_load";
    /// `fn(req_off: usize) -> i32`: add the probe sites of the
    /// [`crate::SitesRequest`] at `req_off` to the site table (an entry
    /// with the id of an earlier one replaces it: a site of a library
    /// unmapped since is sent again with no probes and no window), and set
    /// the load biases it lists. Returns 0 or an [`crate::AgentError`] code.
    pub const SITES: &str = "wprobe_agent_sites";
    /// `fn(site: u32, frame: *mut SavedRegs) -> i64`: run the handlers of
    /// `site` on the thread's saved registers. Returns the number of
    /// handlers run (>= 0) or a [`crate::Skip`] code (< 0).
    pub const DISPATCH: &str = "wprobe_agent_dispatch";
    /// A single `int3` instruction: the return address the tracer gives a
    /// function it makes a stopped thread call (`Target::call`).
    pub const TRAP: &str = "wprobe_agent_trap";
    /// `fn(what: u32, site: u32, n: u64, frame: *mut SavedRegs) -> u64`: a
    /// measurement loop run inside the agent (see [`crate::bench`]); returns
    /// the calling thread's CPU time it took, in ns.
    pub const BENCH: &str = "wprobe_agent_bench";
    /// `fn(site: u32, frame: *mut fast::FastRegs) -> u64`: the notices of
    /// a site whose probes only tell calls (see [`crate::fast`]), told
    /// without a full frame; [`crate::fast::DONE`], or
    /// [`crate::fast::FULL`] when the hit needs `dispatch`.
    pub const FAST: &str = "wprobe_agent_fast";
    /// The agent's pointer to its table of [`crate::fast::FastSite`]s (a
    /// data symbol; null until the first sites are added), which the
    /// trampoline reads before it saves the full frame.
    pub const FAST_TABLE: &str = "wprobe_agent_fast_table";
}

/// The fast path of the notices of `wprobe trace` (and of any return
/// probe whose calls are only told): the stub areas' trampoline first
/// saves the flags and the caller-saved registers alone ([`fast::FastRegs`]) and
/// calls [`sym::FAST`] for a site the table of [`fast::FastSite`]s marks; the
/// agent tells the call's entry or return there, on the probed thread's
/// stack, with no vector register touched (the trampoline keeps none), and
/// returns [`fast::FULL`] for anything else, before it changed anything: the
/// trampoline then takes the full frame and calls [`sym::DISPATCH`].
pub mod fast {
    /// The hit was handled.
    pub const DONE: u64 = 0;
    /// The hit needs the full path (`dispatch`).
    pub const FULL: u64 = 1;

    /// The registers the trampoline's fast path saves, lowest address
    /// first: the flags and the registers a C call may change, and `rbx`
    /// (the trampoline keeps the frame's address there).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct FastRegs {
        /// The probed thread's registers.
        pub rbx: u64,
        /// See `rbx`.
        pub r11: u64,
        /// See `rbx`.
        pub r10: u64,
        /// See `rbx`.
        pub r9: u64,
        /// See `rbx`.
        pub r8: u64,
        /// See `rbx`.
        pub rdi: u64,
        /// See `rbx`.
        pub rsi: u64,
        /// See `rbx`.
        pub rdx: u64,
        /// `rflags`.
        pub flags: u64,
        /// See `rbx`.
        pub rcx: u64,
        /// See `rbx`.
        pub rax: u64,
    }

    /// Bytes between a [`FastRegs`] frame's start and the probed code's
    /// `rsp`: the frame, the return address into the stub, the site id
    /// the stub pushed and the red zone it stepped over.
    pub const ABOVE: u64 = core::mem::size_of::<FastRegs>() as u64 + 16 + 128;

    /// A site as the fast path sees it (the table is indexed by site id).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct FastSite {
        /// The site's address (a function entry's, or the instruction a
        /// continuation site is at).
        pub addr: u64,
        /// An entry's return probe (its only probe).
        pub probe: u32,
        /// [`crate::site_kind`].
        pub kind: u16,
        /// Nonzero: the trampoline tries the fast path.
        pub fast: u16,
    }

    /// Size of a [`FastSite`] (the trampoline indexes the table by it).
    pub const SITE_SIZE: u64 = 16;
    /// Offset of [`FastSite::fast`] in it.
    pub const FLAG_OFF: u64 = 14;
    const _: () = assert!(core::mem::size_of::<FastSite>() == SITE_SIZE as usize);
    const _: () = assert!(core::mem::offset_of!(FastSite, fast) == FLAG_OFF as usize);
}

/// Error codes of `init`, `load` and `sites` (negative `i32`).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentError {
    /// The control region is too small, misaligned, or has a bad magic/version.
    BadControl = -1,
    /// `init` was already called successfully.
    AlreadyInitialized = -2,
    /// `load`/`dispatch` before a successful `init`.
    NotInitialized = -3,
    /// wasmtime refused the engine configuration (message in the region).
    Engine = -4,
    /// The artifact is not a precompiled wasmtime module.
    NotPrecompiled = -5,
    /// The artifact was compiled for another engine configuration (other
    /// wasmtime version, target, tunables, Cranelift or CPU flags).
    Incompatible = -6,
    /// Instantiation failed (imports, memory limits, start function).
    Instantiate = -7,
    /// A probe's export is missing or is not `() -> i32` / `() -> ()`.
    MissingExport = -8,
    /// The request is malformed (offsets outside the region, ...).
    BadRequest = -9,
    /// The agent ran out of memory.
    NoMemory = -10,
    /// The agent is dead (a bug panicked inside it; message in the region).
    Dead = -11,
    /// A site id is at or above [`MAX_SITES`], or a probe id at or above the
    /// region's probe capacity.
    TooManySites = -12,
}

impl AgentError {
    /// The error of a code, if it is one.
    pub fn from_code(code: i32) -> Option<AgentError> {
        use AgentError::*;
        [
            BadControl,
            AlreadyInitialized,
            NotInitialized,
            Engine,
            NotPrecompiled,
            Incompatible,
            Instantiate,
            MissingExport,
            BadRequest,
            NoMemory,
            Dead,
            TooManySites,
        ]
        .into_iter()
        .find(|e| *e as i32 == code)
    }
}

/// Why `dispatch` ran no handler (negative `i64`).
#[repr(i64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Agent not initialised, dead, disabled by the tracer, the tracer's
    /// heartbeat is stale, or the process is a forked child.
    Dormant = -1,
    /// No probe is enabled at this site.
    NoHandler = -2,
    /// The thread is already inside the agent (a signal handler hit a
    /// probe): counted as `missed`.
    Reentered = -3,
    /// The store could not be had within [`LOCK_WAIT_MAX_NS`] (another
    /// thread holds it and does not run): counted as `missed`.
    Contended = -4,
    /// No per-thread slot or agent stack could be had (table full, mmap
    /// failed): counted as `missed`.
    NoThreadSlot = -8,
}

/// Largest site id + 1.
pub const MAX_SITES: u32 = 1 << 20;

/// How long a hit waits for the store (held by a handler of another thread,
/// or by the tracer reading the maps) before it gives up and counts the
/// hit as missed: a holder that does not run (stopped by a debugger) must
/// not stop every other thread for good.
pub const LOCK_WAIT_MAX_NS: u64 = 5_000_000_000;

/// How long a handler run waits for room in the ring (the tracer drains it
/// every few milliseconds) before its records are dropped and counted.
pub const RING_WAIT_MAX_NS: u64 = 1_000_000_000;

/// The registers a probe stub saves, lowest address first. The stub builds
/// it on the thread's stack below the red zone; the agent reads registers
/// from it and writes `write_reg` values into it; the stub restores from it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SavedRegs {
    /// XMM0–15, low quadword first.
    pub xmm: [[u64; 2]; 16],
    /// MXCSR at the probe site.
    pub mxcsr: u32,
    /// Padding (zero).
    pub _pad: u32,
    /// Address of the probe (filled in by the agent from the site table).
    pub rip: u64,
    /// RSP at the probed instruction.
    pub rsp: u64,
    /// General-purpose registers, in the reverse order of the stub's pushes.
    pub r15: u64,
    /// R14.
    pub r14: u64,
    /// R13.
    pub r13: u64,
    /// R12.
    pub r12: u64,
    /// R11.
    pub r11: u64,
    /// R10.
    pub r10: u64,
    /// R9.
    pub r9: u64,
    /// R8.
    pub r8: u64,
    /// RDI.
    pub rdi: u64,
    /// RSI.
    pub rsi: u64,
    /// RBP.
    pub rbp: u64,
    /// RBX.
    pub rbx: u64,
    /// RDX.
    pub rdx: u64,
    /// RCX.
    pub rcx: u64,
    /// RAX.
    pub rax: u64,
    /// RFLAGS (pushed first by the stub).
    pub rflags: u64,
}

/// Size of [`SavedRegs`] in bytes.
pub const SAVED_REGS_SIZE: usize = core::mem::size_of::<SavedRegs>();

/// Offsets of [`SavedRegs`] fields, for the stub generator.
pub mod frame_off {
    /// `xmm[0]`.
    pub const XMM: usize = 0;
    /// `mxcsr`.
    pub const MXCSR: usize = 256;
    /// `rip`.
    pub const RIP: usize = 264;
    /// `rsp`.
    pub const RSP: usize = 272;
    /// `r15`, the first of the 15 pushed GPRs (then r14 … rax).
    pub const GPRS: usize = 280;
    /// `rflags`.
    pub const RFLAGS: usize = 400;
}

/// Agent state word of the control header.
pub mod state {
    /// Not initialised yet.
    pub const NONE: u32 = 0;
    /// Initialised; handlers run.
    pub const READY: u32 = 1;
    /// A bug panicked inside the agent; every hit is skipped from now on.
    pub const DEAD: u32 = 2;
}

/// Process-wide counters kept by the agent, readable by the tracer at any time.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Stats {
    /// Calls of `dispatch`.
    pub dispatches: AtomicU64,
    /// Hits skipped because the agent was dormant (disabled, stale
    /// heartbeat); not counted in a forked child.
    pub dormant: AtomicU64,
    /// Hits skipped because the thread was already inside the agent.
    pub reentered: AtomicU64,
    /// Hits skipped because the store could not be had in time.
    pub contended: AtomicU64,
    /// Hits skipped for want of a thread slot or stack.
    pub no_slot: AtomicU64,
    /// Threads that got a slot and an agent stack.
    pub threads: AtomicU64,
    /// Times a hit had to wait (futex) for the store.
    pub lock_waits: AtomicU64,
    /// Times a handler run had to wait for room in the ring.
    pub ring_waits: AtomicU64,
    /// Heap allocations made by the agent so far (none per hit on the
    /// success path once warm; tests check it).
    pub allocations: AtomicU64,
    /// Times another thread of the target revoked a thread's bias on the
    /// store ([`bias`]; at most once per process; the tracer's revocations
    /// are not counted).
    pub bias_revoked: AtomicU64,
    /// Trips to the kernel for handlers' memory accesses: each
    /// `process_vm_readv` and `process_vm_writev`, and each reading of
    /// `/proc/self/maps` (before a write, or for `check_access`) counts one.
    /// Tests check that a string read costs one, not one per byte.
    pub memory_syscalls: AtomicU64,
    /// 1 when the agent installed its SIGSEGV handler for the trap sites
    /// (the program left SIGSEGV at its default action), which moves a
    /// thread that traps there to the site's stub if wprobe is gone.
    pub trap_net: AtomicU64,
    /// SIGSEGVs the agent's handler sent on to a trap site's stub (wprobe
    /// was gone), and those it passed on as not its own.
    pub trap_net_moved: AtomicU64,
    /// See `trap_net_moved`.
    pub trap_net_passed: AtomicU64,
    /// Reserved.
    pub _reserved: [AtomicU64; 2],
}

/// A probe's counters, as [`ProbeSlot`] keeps them in the region (a
/// snapshot, or the increments since an earlier one): the one set of
/// counters the agent, its loader and the tracer's session use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Hits (ignored ones included).
    pub hits: u64,
    /// Hits skipped by `ignore`.
    pub ignored: u64,
    /// Handler runs.
    pub runs: u64,
    /// Runs that exhausted their fuel.
    pub fuel_exhausted: u64,
    /// Runs that trapped.
    pub traps: u64,
    /// Runs ended by an uncaught exception.
    pub uncaught: u64,
    /// Runs whose records could not be delivered.
    pub dropped: u64,
    /// Hits that ran no handler (a hit inside a handler of the same
    /// thread, and the like).
    pub missed: u64,
    /// Return-probe calls among `missed` that were not tracked because
    /// their thread tracked as many calls as it can (`missed_depth`).
    pub missed_depth: u64,
}

impl RunCounts {
    /// The increments from `earlier` to `self` (counters only grow; a
    /// counter found lower counts 0).
    pub fn since(&self, earlier: &RunCounts) -> RunCounts {
        RunCounts {
            hits: self.hits.saturating_sub(earlier.hits),
            ignored: self.ignored.saturating_sub(earlier.ignored),
            runs: self.runs.saturating_sub(earlier.runs),
            fuel_exhausted: self.fuel_exhausted.saturating_sub(earlier.fuel_exhausted),
            traps: self.traps.saturating_sub(earlier.traps),
            uncaught: self.uncaught.saturating_sub(earlier.uncaught),
            dropped: self.dropped.saturating_sub(earlier.dropped),
            missed: self.missed.saturating_sub(earlier.missed),
            missed_depth: self.missed_depth.saturating_sub(earlier.missed_depth),
        }
    }
}

/// One probe of the run (index = the probe id the tracer chose). The
/// tracer sets `ignore` and `maxhits` before loading, and `enabled`; the
/// agent counts. `hits + missed` is every hit of the probe while it was
/// enabled; `ignored` and `runs` are parts of `hits`.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct ProbeSlot {
    /// 1: the probe's handler runs at its hits. Cleared by the agent on
    /// `remove`, at `maxhits`, and by the tracer.
    pub enabled: AtomicU32,
    /// [`probe_flag`] bits (agent).
    pub flags: AtomicU32,
    /// Hits skipped before the first handler run (`ignore`).
    pub ignore: u64,
    /// Handler runs after which the probe disables itself (0: no limit).
    pub maxhits: u64,
    /// Hits (ignored ones included). Not the returns of a return probe
    /// with [`ProbeSlot::entry_notice`]: the tracer counts those as it
    /// reads their [`entry::RETURNED`] entries, as it counts the returns
    /// its own transports tell.
    pub hits: AtomicU64,
    /// Hits skipped by `ignore`.
    pub ignored: AtomicU64,
    /// Handler runs.
    pub runs: AtomicU64,
    /// Runs that exhausted their fuel.
    pub fuel_exhausted: AtomicU64,
    /// Runs that trapped (or returned a code that is no outcome).
    pub traps: AtomicU64,
    /// Runs ended by an uncaught exception.
    pub uncaught: AtomicU64,
    /// Runs whose records could not be written (ring full).
    pub dropped: AtomicU64,
    /// Hits that ran no handler: the thread was inside the agent already
    /// (a signal handler hit the probe), the store could not be had in
    /// time, no thread slot, or the tracer's heartbeat was stale.
    pub missed: AtomicU64,
    /// A return probe: calls tracked at once per process (kretprobe's
    /// `maxactive`; 0 for other probes). Set by the tracer before `enabled`.
    pub maxactive: u64,
    /// A return probe: calls tracked (agent). Written only by the holder of
    /// the store lock (no locked read-modify-write per call); calls tracked
    /// now are `live - live_lost`.
    pub live: AtomicU64,
    /// A return probe: tracked calls that ended while their thread could
    /// not have the store lock (agent, atomic).
    pub live_lost: AtomicU64,
    /// A return probe: 1 when each call entering is told to the tracer at
    /// once, tracked or not, by an [`entry::ENTERED`] entry, and each
    /// tracked call's return by an [`entry::RETURNED`] entry (`wprobe trace` with its own handlers: no
    /// handler runs at either end). Set by the tracer before `enabled`.
    pub entry_notice: u64,
    /// A return probe: calls not tracked because their thread already
    /// tracked [`MAX_TRACKED_CALLS`] calls (also counted in `missed`).
    pub missed_depth: AtomicU64,
}

/// Calls one thread tracks at most for the return probes of the run (the
/// agent grows each thread's stack of tracked calls up to this many; the
/// calls beyond are counted in [`ProbeSlot::missed_depth`]).
pub const MAX_TRACKED_CALLS: usize = 1 << 20;

/// The biased store lock. A process whose handlers all run on one thread
/// (most traced programs) would pay the lock's two atomic operations at
/// every hit for nothing. The first thread to take the lock (the futex,
/// [`ControlHeader::store_lock`]) while `bias.owner` is [`bias::FREE`] becomes
/// its owner: from then on it takes the store with a plain store of
/// `bias.inside = 1` and a re-check of `bias.owner`, and leaves it with
/// `bias.inside = 0` — no locked instruction, no fence.
///
/// Anyone else who takes the futex (another thread of the target, the
/// agent's control calls, the tracer) while a thread owns the bias revokes
/// it for good: `bias.owner = OFF`, then `membarrier(GLOBAL_EXPEDITED)`,
/// which runs a full barrier on every CPU running the target, so the owner
/// either sees `OFF` at its re-check or its `bias.inside = 1` is visible; then
/// it waits for `bias.inside == 0`. Every later taker of the futex checks
/// `bias.inside == 0` too. The agent enables the bias (`OFF` → `FREE`) only
/// once it registered the process for global expedited membarriers.
pub mod bias {
    /// Nobody holds the bias and nobody may take it (the region's zero).
    pub const OFF: u32 = 0;
    /// The next thread to take the futex for a hit claims the bias.
    pub const FREE: u32 = u32::MAX;
    /// `membarrier(2)`'s command: a barrier on every CPU running a
    /// process registered with [`MEMBARRIER_REGISTER_GLOBAL_EXPEDITED`].
    pub const MEMBARRIER_GLOBAL_EXPEDITED: usize = 1 << 1;
    /// `membarrier(2)`'s registration for [`MEMBARRIER_GLOBAL_EXPEDITED`].
    pub const MEMBARRIER_REGISTER_GLOBAL_EXPEDITED: usize = 1 << 2;
    /// `membarrier(2)`'s system call number on x86-64.
    pub const SYS_MEMBARRIER: usize = 324;
}

/// The words of the store's bias ([`bias`]), alone on their cache line:
/// the owner writes `inside` twice per hit, and a line the tracer reads
/// would bounce between the CPUs.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct BiasLine {
    /// The thread id that may take the store without the lock's atomic
    /// operations, [`bias::FREE`] before a thread has claimed it,
    /// [`bias::OFF`] (the region's zero) when nobody may.
    pub owner: AtomicU32,
    /// 1 while the owner holds the store without the lock (written by
    /// that thread alone).
    pub inside: AtomicU32,
}

impl BiasLine {
    /// For a holder of the store's futex: revokes the bias a thread owns,
    /// for good (`owner` = OFF, then `membarrier`, the system call with
    /// [`bias::MEMBARRIER_GLOBAL_EXPEDITED`], true when it succeeded;
    /// `settle` lets the owner's store drain when it did not, which cannot
    /// happen once the target registered). Whether a thread owned it; the
    /// caller then waits with [`BiasLine::wait_out`].
    pub fn revoke(&self, membarrier: impl FnOnce() -> bool, settle: impl FnOnce()) -> bool {
        let owner = self.owner.load(Ordering::Acquire);
        if owner == bias::OFF || owner == bias::FREE {
            return false;
        }
        self.owner.store(bias::OFF, Ordering::SeqCst);
        if !membarrier() {
            settle();
        }
        true
    }

    /// For a holder of the store's futex: waits until a former owner of
    /// the bias has left the store, calling `pause` between looks; false
    /// once `expired` says so first.
    pub fn wait_out(&self, mut expired: impl FnMut() -> bool, mut pause: impl FnMut()) -> bool {
        while self.inside.load(Ordering::Acquire) != 0 {
            if expired() {
                return false;
            }
            pause();
        }
        true
    }
}

/// Bits of [`ProbeSlot::flags`].
pub mod probe_flag {
    /// The message of the probe's first trap was sent to the tracer.
    pub const TRAP_REPORTED: u32 = 1;
    /// A return probe on a function that switches stacks (`swapcontext`):
    /// its open calls are barriers between the stacks of their thread
    /// ([`crate::pairing`]). Set by the tracer before `enabled`.
    pub const SWITCHES_STACK: u32 = 2;
}

/// Size of [`ProbeSlot`].
pub const PROBE_SLOT_SIZE: usize = core::mem::size_of::<ProbeSlot>();

/// Header of the record ring (producers: the thread holding the store;
/// consumer: the tracer). `head` and `tail` count bytes since the start and
/// only grow; the data area is `ring_size` bytes (a power of two) at
/// `ring_off` in the region. Each on its own cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct RingHeader {
    /// Bytes written by the producer (release-stored after the batch).
    pub head: AtomicU64,
    /// Padding to the next cache line.
    pub _pad0: [u64; 7],
    /// Bytes consumed by the consumer (release-stored; a futex word in its
    /// low half for producers waiting for room).
    pub tail: AtomicU64,
    /// Padding.
    pub _pad1: [u64; 7],
    /// 1 while a producer waits for room (the consumer then wakes `tail`).
    pub producer_waiting: AtomicU32,
    /// Tracer: 1 when a run that finds the ring full drops its records at
    /// once (`--ring-full=drop`); 0 when it waits for room, at most
    /// [`RING_WAIT_MAX_NS`] (`--ring-full=block`, the default).
    pub drop_when_full: AtomicU32,
    /// Padding.
    pub _pad2: [u32; 14],
}

/// Kinds of ring entries ([`RunHeader::kind`]).
pub mod entry {
    /// Skip to the start of the ring (the rest of the data area is unused).
    pub const PAD: u16 = 0;
    /// One handler run: a [`crate::RunHeader`] and its records.
    pub const RUN: u16 = 1;
    /// A call of a return probe with [`crate::ProbeSlot::entry_notice`]
    /// entered, tracked or not (one not tracked has no [`RETURNED`]: it
    /// is counted in `missed`): a [`crate::RunHeader`] (`probe`, `tid`, `cpu`, `time_ns` of
    /// the entry, `ip` the function's entry, no record, `outcome` 0), then
    /// one word: `rsp` at the entry. Ordered with the runs of its thread.
    pub const ENTERED: u16 = 2;
    /// A call told by an [`ENTERED`] entry returned: a [`crate::RunHeader`]
    /// (`probe`, `tid`, `cpu`, `time_ns` of the return, `ip` the
    /// function's entry, no record, `outcome` 0), then three words: `rax`
    /// after the return, `rsp` at the entry, the call's duration in ns.
    pub const RETURNED: u16 = 3;
}

/// Kinds of records inside a run ([`RecordHeader::kind`]).
pub mod rec {
    /// An `emit_log` record.
    pub const LOG: u16 = 1;
    /// An `emit_stacktrace` record.
    pub const STACKTRACE: u16 = 2;
    /// An `emit_event` record (`major` = kind, `minor` = id).
    pub const EVENT: u16 = 3;
    /// The message of the probe's first trap (UTF-8 data).
    pub const TRAP: u16 = 4;
    /// A tracked call of a return probe that ended without returning (the
    /// only record of a run with outcome [`crate::run_outcome::UNWOUND`]):
    /// data = entry `rsp`, entry time (ns), [`crate::left`] code, as
    /// little-endian u64s.
    pub const UNWOUND: u16 = 5;
}

/// Why a tracked call ended without returning ([`rec::UNWOUND`]).
pub mod left {
    /// Its frame was abandoned (`longjmp`, an exception): a later entry or
    /// return of its thread proved it gone.
    pub const UNWOUND: u64 = 0;
    /// Its thread ended (a new thread took over its thread slot).
    pub const THREAD_EXIT: u64 = 1;
}

/// Outcome codes of [`RunHeader::outcome`] that are not handler outcomes
/// (handler outcomes are `hostabi::Outcome` codes, >= 0).
pub mod run_outcome {
    /// The handler ran out of fuel.
    pub const FUEL: i32 = -1;
    /// The handler trapped (or returned a code that is no outcome).
    pub const TRAPPED: i32 = -2;
    /// No handler ran: a tracked call ended without returning (one
    /// [`crate::rec::UNWOUND`] record).
    pub const UNWOUND: i32 = -3;
}

/// Header of one ring entry: a handler run. `n_records` [`RecordHeader`]s
/// with their payloads follow. The agent writes an entry for a run that
/// emitted records, ended with an outcome the tracer must act on
/// (`remove`, `exit()`, `exit 1/2/3`), or trapped for the first time;
/// every other run is only counted in the probe's [`ProbeSlot`]. `size`
/// is the total, a multiple of 8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunHeader {
    /// Total size of the entry in bytes (a multiple of 8).
    pub size: u32,
    /// [`entry`] kind.
    pub kind: u16,
    /// Records that follow.
    pub n_records: u16,
    /// The probe id.
    pub probe: u32,
    /// Thread id of the hit thread.
    pub tid: u32,
    /// CPU of the hit.
    pub cpu: u32,
    /// Handler outcome code, or a [`run_outcome`] code.
    pub outcome: i32,
    /// Process id of the hit thread (a fork child's agent writes into its
    /// parent's ring: see [`fork_guard`]).
    pub pid: u32,
    /// Zero.
    pub _pad: u32,
    /// Wall-clock time of the hit, ns since the epoch.
    pub time_ns: u64,
    /// The probe's address (a return probe's: its function's entry).
    pub ip: u64,
}

/// Size of [`RunHeader`].
pub const RUN_HEADER_SIZE: usize = core::mem::size_of::<RunHeader>();

/// Header of one record inside a run; `data_len` bytes of data follow, then
/// `n_items` little-endian u32 item descriptors, then padding to 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// [`rec`] kind.
    pub kind: u16,
    /// Log major code (event kind for events).
    pub major: u16,
    /// Log minor code (event id for events).
    pub minor: u16,
    /// Zero.
    pub _pad: u16,
    /// Bytes of data.
    pub data_len: u32,
    /// Item descriptors.
    pub n_items: u32,
}

/// Size of [`RecordHeader`].
pub const RECORD_HEADER_SIZE: usize = core::mem::size_of::<RecordHeader>();

/// Bytes a record with this payload takes inside a run.
pub const fn record_size(data_len: usize, n_items: usize) -> usize {
    (RECORD_HEADER_SIZE + data_len + 4 * n_items + 7) & !7
}

/// Bytes of the error message area of the control header.
pub const ERR_MSG_BYTES: usize = 1024;

/// The control header at offset 0 of the shared region. The tracer fills
/// `magic` … `child_pid` before `init`; the agent owns what it says it owns.
#[repr(C)]
pub struct ControlHeader {
    /// [`CTRL_MAGIC`].
    pub magic: u64,
    /// [`AGENT_ABI_VERSION`].
    pub abi_version: u32,
    /// `size_of::<ControlHeader>()` as the tracer saw it.
    pub header_size: u32,
    /// Size of the whole region.
    pub region_size: u64,
    /// Offset of the probe table ([`ProbeSlot`] each).
    pub probes_off: u64,
    /// Capacity of the probe table.
    pub probes_cap: u64,
    /// Offset of the global-variable array (u64 each).
    pub gvars_off: u64,
    /// Capacity of the global-variable array.
    pub gvars_cap: u64,
    /// Offset of the map regions (programs' `mapstore` regions).
    pub maps_off: u64,
    /// Bytes of the map regions.
    pub maps_size: u64,
    /// Offset of the ring data area.
    pub ring_off: u64,
    /// Size of the ring data area (power of two).
    pub ring_size: u64,
    /// Offset of the scratch area (requests, modules, names).
    pub scratch_off: u64,
    /// Bytes of the scratch area.
    pub scratch_size: u64,
    /// `CLOCK_MONOTONIC` when the run started (the `clock_ns` import).
    pub start_mono_ns: u64,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC` of the tracer (the `clock_ns` import).
    pub mono_offset_ns: u64,
    /// The launched command's pid (the `child_pid` import; 0 when attached).
    pub child_pid: u64,
    /// Tracer → agent: 1 = handlers run, 0 = every hit is skipped as dormant.
    pub enabled: AtomicU32,
    /// Agent: [`state`] word.
    pub state: AtomicU32,
    /// The store lock (a futex word shared by the agent's threads and the
    /// tracer: 0 free, 1 held, 2 held with waiters). Whoever holds it may
    /// run handlers or touch the map regions and global variables.
    pub store_lock: AtomicU32,
    /// Agent: the agent's own `rdtscp` support (1) for `current_cpu`.
    pub has_rdtscp: AtomicU32,
    /// The store's bias ([`bias`]), on a cache line of its own.
    pub bias: BiasLine,
    /// Tracer: its TSC (`rdtsc`) when it last showed it is alive.
    pub heartbeat_tsc: AtomicU64,
    /// Tracer: TSC ticks after which a heartbeat is stale (0: never; the
    /// agent then never goes dormant by itself).
    pub stale_ticks: AtomicU64,
    /// Tracer: the wall clock in TSC ticks, published with each heartbeat
    /// when the TSC is invariant: `clock_ns + (tsc - clock_tsc) *
    /// clock_mult >> 32` (`clock_mult` 0: read the vDSO clock). A seqlock:
    /// `clock_seq` is odd while the tracer writes.
    pub clock_seq: AtomicU64,
    /// Tracer: the TSC of the anchor.
    pub clock_tsc: AtomicU64,
    /// Tracer: CLOCK_REALTIME at the anchor, ns.
    pub clock_ns: AtomicU64,
    /// Tracer: ns per TSC tick, 32.32 fixed point (0: none).
    pub clock_mult: AtomicU64,
    /// Agent: number of global variables in use (largest `gvars` loaded).
    pub gvars_len: AtomicU64,
    /// Agent: code of the last error (0 none).
    pub err_code: AtomicI32,
    /// Agent: bytes of `err_msg` in use.
    pub err_len: AtomicU32,
    /// Agent: the last error or panic message (UTF-8, truncated).
    pub err_msg: [u8; ERR_MSG_BYTES],
    /// Agent: address of the agent's load base (for diagnostics).
    pub agent_base: AtomicU64,
    /// Agent: how the agent identifies threads (see [`thread_key`]).
    pub thread_key: AtomicU32,
    /// Agent: offset of the glibc/musl cached tid in the TCB, or u32::MAX.
    pub tcb_tid_off: AtomicU32,
    /// Counters.
    pub stats: Stats,
    /// The record ring's head and tail.
    pub ring: RingHeader,
}

/// How the agent finds the per-thread slot of the current thread.
pub mod thread_key {
    /// `rdfsbase` (the kernel enabled FSGSBASE: `AT_HWCAP2` bit 1).
    pub const RDFSBASE: u32 = 1;
    /// `arch_prctl(ARCH_GET_FS)` (one system call per hit).
    pub const ARCH_PRCTL: u32 = 2;
}

/// Size of [`ControlHeader`].
pub const CONTROL_HEADER_SIZE: usize = core::mem::size_of::<ControlHeader>();

/// A program load request, written by the tracer into the scratch area;
/// its offset is the argument of `wprobe_agent_load`. Offsets are relative
/// to the region base.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadRequest {
    /// Offset of the precompiled module (`Engine::precompile_module` output).
    pub module_off: u64,
    /// Its length.
    pub module_len: u64,
    /// Offset of `n_probes` [`ProbeEntry`] records.
    pub probes_off: u64,
    /// Number of probes.
    pub n_probes: u32,
    /// Global variables this program declares (`gvars`).
    pub gvars: u32,
    /// Fuel given to each handler run.
    pub fuel: u64,
    /// Offset of the program's map region in the region (0: no maps).
    pub map_off: u64,
    /// Its length.
    pub map_len: u64,
    /// 1 if handlers may write registers and memory.
    pub writes_allowed: u32,
    /// Reserved (zero).
    pub _pad: u32,
}

/// One probe of a load request: its id (its [`ProbeSlot`]), its handler.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeEntry {
    /// Probe id, below the region's `probes_cap`.
    pub probe: u32,
    /// Length of the handler's export name.
    pub name_len: u32,
    /// Offset of the export name (UTF-8) in the region.
    pub name_off: u64,
    /// Load bias of the probe's module (the `load_bias` import).
    pub load_bias: u64,
    /// Parameters the handler takes (at most [`arg::MAX`]).
    pub n_args: u32,
    /// Zero.
    pub _pad: u32,
    /// What each parameter is, an [`arg`] code each.
    pub args: [u32; arg::MAX],
    /// Offset of the probe's USDT argument specs in the region: the
    /// manifest's `usdt_args` text (`hostabi::usdt`), parsed once at load.
    pub usdt_off: u64,
    /// Length of that text (0: not a USDT site).
    pub usdt_len: u32,
    /// Zero.
    pub _pad2: u32,
}

/// The codes of [`ProbeEntry::args`]: what the agent passes a handler as
/// each parameter (the manifest's `args`, `hostabi::manifest::ArgSource`).
pub mod arg {
    /// Most parameters (`hostabi::manifest::MAX_HANDLER_ARGS`).
    pub const MAX: usize = 6;
    /// `REG | id`: register `id` of the hit, as `read_reg(id, 0)` reads it.
    pub const REG: u32 = 0x1_0000;
    /// `ENTRY | id`: entry register `id` of the returning call, as
    /// `entry_reg(id)` reads it.
    pub const ENTRY: u32 = 0x2_0000;
    /// The returning call's duration, as `elapsed_ns()` reads it.
    pub const ELAPSED: u32 = 0x3_0000;
    /// The kind bits of a code.
    pub const KIND: u32 = 0xF_0000;
}

/// A sites request: `n_sites` [`SiteEntry`] records at `sites_off`, and
/// `n_biases` [`BiasEntry`] records at `biases_off` (probes armed after
/// their program was loaded: a library mapped later).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SitesRequest {
    /// Offset of the site entries.
    pub sites_off: u64,
    /// Number of sites.
    pub n_sites: u32,
    /// Number of bias entries.
    pub n_biases: u32,
    /// Offset of the bias entries.
    pub biases_off: u64,
}

/// The load bias of a probe's module, known once the probe is armed (the
/// `load_bias` import).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BiasEntry {
    /// The probe.
    pub probe: u32,
    /// Zero.
    pub _pad: u32,
    /// Its module's load bias.
    pub load_bias: u64,
}

/// One patched site: the address handlers see as `rip`, and the probes
/// whose handlers run there, in order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteEntry {
    /// Site id (the stub's argument to dispatch), < [`MAX_SITES`].
    pub site: u32,
    /// Number of probes.
    pub n_probes: u32,
    /// Offset of `n_probes` u32 probe ids.
    pub probes_off: u64,
    /// The probe address (a [`site_kind::RET`] site: its `ret`).
    pub addr: u64,
    /// [`site_kind`].
    pub kind: u32,
    /// Number of return probes whose function enters here.
    pub n_ret: u32,
    /// Offset of `n_ret` u32 probe ids (return probes).
    pub ret_off: u64,
    /// Address of the first byte the site's jump (or trap) replaces.
    pub window: u64,
    /// Offset of the `orig_len` bytes the jump replaces, as the module's
    /// file has them (a handler reading the code sees these).
    pub orig_off: u64,
    /// Number of those bytes (0: none given).
    pub orig_len: u32,
    /// 1: an `hlt` replaces the site's first byte (no jump fits there);
    /// the tracer moves each thread that traps there to `stub`, and so
    /// does the agent's SIGSEGV handler if the tracer is gone.
    pub trap: u32,
    /// The site's stub.
    pub stub: u64,
    /// A near site's cave: the address of the `jmp rel32` to the stub its
    /// `jmp rel8` goes to, in padding (0: none).
    pub cave: u64,
    /// Offset of the `cave_len` bytes the cave replaces (the file's).
    pub cave_off: u64,
    /// Number of those bytes.
    pub cave_len: u32,
    /// What the site does, before anything else, to the count of calls
    /// that make a vfork child ([`vfork_mark`]; 0: nothing).
    pub vfork: u32,
}

/// Kinds of sites ([`SiteEntry::kind`]).
pub mod site_kind {
    /// A probe's address: its probes run there; at a function entry, calls
    /// of its return probes are tracked there too.
    pub const PROBE: u32 = 0;
    /// A `ret` through which calls of return-probed functions return: the
    /// stub calls `dispatch` just before the `ret`, with the return
    /// address at `[rsp]`.
    pub const RET: u32 = 1;
    /// A watchpoint's: the tracer moved the thread that triggered it to
    /// the site's stub, the instruction after the access saved at
    /// [`crate::WATCH_RIP_BELOW`] bytes below the thread's `rsp` (the red zone
    /// kept).
    pub const WATCH: u32 = 2;
    /// The instruction a `call` returns to, when the called function may
    /// leave by a tail call through a pointer (`jmp *%rax`) into code with
    /// no return site: the stub calls `dispatch` there, before the
    /// instruction, with the state after the return; a tracked call with
    /// that return address whose `ret` was not seen returns here.
    pub const CONT: u32 = 3;
}

/// Where the tracer saves the `rip` of a thread it moves to a watchpoint's
/// stub: this many bytes below its `rsp` (under the 128-byte red zone).
pub const WATCH_RIP_BELOW: u64 = 136;

/// Bytes below `rsp` the System V ABI lets a function use without moving
/// `rsp` (the red zone): the stubs leave them alone.
pub const RED_ZONE: u64 = 128;

pub mod pairing;

pub mod policy;

/// `what` argument of [`sym::BENCH`]: the layers of a dispatch measured alone.
pub mod bench {
    /// The full `dispatch(site, frame)`, called from inside the agent.
    pub const DISPATCH: u32 = 0;
    /// Per-thread slot lookup (thread key + table probe) only.
    pub const SLOT: u32 = 1;
    /// Slot lookup + switch to the agent stack and back.
    pub const STACK_SWITCH: u32 = 2;
    /// `Store::set_fuel` only.
    pub const SET_FUEL: u32 = 3;
    /// `set_fuel` + the typed call of the site's first handler, no dispatch around it.
    pub const CALL: u32 = 4;
    /// `rdtsc` only (the measurement's floor).
    pub const EMPTY: u32 = 5;
    /// The store lock taken and released (uncontended).
    pub const LOCK: u32 = 6;
    /// The wall-clock time read the way `now_ns` reads it.
    pub const CLOCK: u32 = 7;
    /// Not a measurement: panics inside the agent (on the thread's agent
    /// stack), to test that a bug kills the agent and not the process.
    pub const PANIC: u32 = 99;
}

/// Settings of the agent's engine that precompiled modules must match,
/// applied identically by the tracer (compiling) and the agent (loading).
pub mod engine {
    /// Linear memories are reserved at this size and never move: the agent
    /// runs without signal handlers, so bounds are checked explicitly and a
    /// 4 GiB reservation (wasmtime's 64-bit default) would buy nothing but
    /// address-space use in the target. Equal to wprobe's `MAX_MEMORY_BYTES`.
    pub const MEMORY_RESERVATION: u64 = 16 << 20;
    /// No guard pages (they only matter to signal-based bounds checks).
    pub const MEMORY_GUARD: u64 = 0;
    /// Native stack Wasm code may use on the agent stack.
    pub const MAX_WASM_STACK: usize = 256 << 10;
    /// Cranelift x86-64 flags forced off: no VEX/EVEX-encoded vector code in
    /// handlers, so a stub need only save XMM0–15 and MXCSR (legacy SSE
    /// leaves the upper YMM/ZMM halves of the probed code untouched).
    pub const CRANELIFT_FLAGS_OFF: &[&str] = &[
        "has_avx",
        "has_avx2",
        "has_fma",
        "has_avx_vnni",
        "has_avx512bitalg",
        "has_avx512dq",
        "has_avx512vl",
        "has_avx512vbmi",
        "has_avx512f",
        "has_avx512vnni",
    ];

    /// Applies the runtime-side settings (tunables checked by
    /// `Module::deserialize`, and the stack limit). The compiling side also
    /// sets [`CRANELIFT_FLAGS_OFF`] to `false` and its optimisation level.
    #[cfg(feature = "wasmtime")]
    pub fn configure(c: &mut wasmtime::Config) {
        c.consume_fuel(true);
        c.signals_based_traps(false);
        c.memory_reservation(MEMORY_RESERVATION);
        c.memory_guard_size(MEMORY_GUARD);
        c.memory_reservation_for_growth(0);
        c.memory_may_move(false);
        c.guard_before_linear_memory(false);
        c.memory_init_cow(false);
        c.max_wasm_stack(MAX_WASM_STACK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn frame_layout() {
        assert_eq!(offset_of!(SavedRegs, xmm), frame_off::XMM);
        assert_eq!(offset_of!(SavedRegs, mxcsr), frame_off::MXCSR);
        assert_eq!(offset_of!(SavedRegs, rip), frame_off::RIP);
        assert_eq!(offset_of!(SavedRegs, rsp), frame_off::RSP);
        assert_eq!(offset_of!(SavedRegs, r15), frame_off::GPRS);
        assert_eq!(offset_of!(SavedRegs, rax), frame_off::GPRS + 14 * 8);
        assert_eq!(offset_of!(SavedRegs, rflags), frame_off::RFLAGS);
        assert_eq!(SAVED_REGS_SIZE, 408);
    }

    #[test]
    fn shared_layouts() {
        assert_eq!(size_of::<RunHeader>(), 48);
        assert_eq!(size_of::<RecordHeader>(), 16);
        assert_eq!(record_size(0, 0), 16);
        assert_eq!(record_size(1, 0), 24);
        assert_eq!(record_size(8, 2), 32);
        assert_eq!(size_of::<RingHeader>(), 192);
        assert_eq!(size_of::<ProbeSlot>(), 128);
        assert_eq!(offset_of!(ControlHeader, ring) % 64, 0);
        assert_eq!(size_of::<LoadRequest>(), 64);
        assert_eq!(size_of::<ProbeEntry>(), 72);
        assert_eq!(size_of::<SiteEntry>(), 96);
        assert_eq!(size_of::<SitesRequest>(), 24);
        assert_eq!(size_of::<BiasEntry>(), 16);
        const { assert!(CONTROL_HEADER_SIZE <= 4096) };
    }

    #[test]
    fn error_codes_round_trip() {
        for c in -12..=-1 {
            assert_eq!(AgentError::from_code(c).unwrap() as i32, c);
        }
        assert_eq!(AgentError::from_code(0), None);
    }
}
