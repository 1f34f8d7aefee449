//! The contract between wprobe (the tracer) and its in-process agent (the
//! `no_std` object mapped into a traced process, `agent/`): entry points and
//! their error codes, the register frame a probe stub saves, the layout of
//! the shared control region (statistics, global variables, a record ring,
//! load requests), and the wasmtime engine settings both sides must share
//! for a precompiled handler module to be accepted by the agent.
//!
//! Everything shared across the process boundary is `#[repr(C)]` with fixed
//! offsets (checked by the tests below); atomics have the size and layout of
//! the integer they wrap, so the tracer and the agent can both operate on
//! the same mapped bytes.

#![no_std]
#![deny(missing_docs)]

use core::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

/// Version of this contract; the agent refuses a control region of another.
pub const AGENT_ABI_VERSION: u32 = 1;

/// First 8 bytes of the control region ("WPRBAGT1", little-endian).
pub const CTRL_MAGIC: u64 = u64::from_le_bytes(*b"WPRBAGT1");

/// Exported symbols of the agent object (C ABI), as the loader finds them.
pub mod sym {
    /// `fn(ctrl: *mut u8, len: usize, fork_guard: *mut u8) -> i32`: set up the
    /// allocator and the engine, remember the control region. Returns 0 or an
    /// [`crate::AgentError`] code.
    pub const INIT: &str = "wprobe_agent_init";
    /// `fn(req_off: usize) -> i32`: load the module described by the
    /// [`crate::LoadRequest`] at `req_off` in the control region. Returns the
    /// program index (>= 0) or an [`crate::AgentError`] code.
    pub const LOAD: &str = "wprobe_agent_load";
    /// `fn(site: u32, frame: *mut SavedRegs) -> i64`: run the handler of
    /// `site` on the thread's saved registers. Returns the handler's outcome
    /// code (>= 0) or a [`crate::Skip`] code (< 0).
    pub const DISPATCH: &str = "wprobe_agent_dispatch";
    /// A single `int3` instruction: the return address the tracer gives a
    /// function it makes a stopped thread call (`Target::call`).
    pub const TRAP: &str = "wprobe_agent_trap";
    /// `fn(what: u32, site: u32, n: u64, frame: *mut SavedRegs) -> u64`: a
    /// measurement loop run inside the agent (see [`crate::bench`]); returns
    /// the calling thread's CPU time it took, in ns.
    pub const BENCH: &str = "wprobe_agent_bench";
}

/// Error codes of `init` and `load` (negative `i32`).
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
    /// A site's export is missing or is not `() -> i32`.
    MissingExport = -8,
    /// The load request is malformed (offsets outside the region, ...).
    BadRequest = -9,
    /// The agent ran out of memory.
    NoMemory = -10,
    /// The agent is dead (a bug panicked inside it; message in the region).
    Dead = -11,
    /// A site id is at or above [`MAX_SITES`].
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

/// Why `dispatch` did not run a handler to completion (negative `i64`).
#[repr(i64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Agent not initialised, dead, disabled by the tracer, or in a forked child.
    Dormant = -1,
    /// No handler is loaded for this site.
    NoHandler = -2,
    /// The thread is already inside the agent (a signal handler hit a probe).
    Reentered = -3,
    /// Another thread held the store for longer than the bounded wait.
    Contended = -4,
    /// The handler ran out of fuel.
    FuelExhausted = -5,
    /// The handler trapped.
    Trapped = -6,
    /// The handler returned a value that is not an outcome code.
    BadOutcome = -7,
    /// No per-thread slot or agent stack could be had (table full, mmap failed).
    NoThreadSlot = -8,
}

/// Largest site id + 1.
pub const MAX_SITES: u32 = 1 << 16;

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
    /// Address of the probed instruction.
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

/// Counters kept by the agent, readable by the tracer at any time.
#[repr(C)]
#[derive(Debug, Default)]
pub struct Stats {
    /// Calls of `dispatch`.
    pub hits: AtomicU64,
    /// Handlers that returned an outcome.
    pub handled: AtomicU64,
    /// Hits skipped because the agent was dormant.
    pub dormant: AtomicU64,
    /// Hits on a site without a handler.
    pub no_handler: AtomicU64,
    /// Hits skipped because the thread was already inside the agent.
    pub reentered: AtomicU64,
    /// Hits skipped because another thread held the store.
    pub contended: AtomicU64,
    /// Handler runs that ran out of fuel.
    pub fuel_exhausted: AtomicU64,
    /// Handler runs that trapped.
    pub trapped: AtomicU64,
    /// Records dropped because the ring was full.
    pub records_dropped: AtomicU64,
    /// Threads that got a slot and an agent stack.
    pub threads: AtomicU64,
    /// Hits skipped for want of a thread slot or stack.
    pub no_slot: AtomicU64,
    /// Heap allocations made by the agent so far (none per hit on the
    /// success path; tests check it).
    pub allocations: AtomicU64,
    /// Reserved.
    pub _reserved: [AtomicU64; 4],
}

/// Header of the record ring (single producer: the thread holding the
/// store; single consumer: the tracer). `head` and `tail` count bytes since
/// the start and only grow; the data area is `ring_size` bytes (a power of
/// two) at `ring_off` in the region. Each on its own cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct RingHeader {
    /// Bytes written by the producer (release-stored after the record).
    pub head: AtomicU64,
    /// Padding to the next cache line.
    pub _pad0: [u64; 7],
    /// Bytes consumed by the consumer.
    pub tail: AtomicU64,
    /// Padding.
    pub _pad1: [u64; 7],
}

/// Record kinds in the ring.
pub mod rec {
    /// Skip to the start of the ring (the rest of the data area is unused).
    pub const PAD: u16 = 0;
    /// An `emit_log` record.
    pub const LOG: u16 = 1;
    /// An `emit_stacktrace` record.
    pub const STACKTRACE: u16 = 2;
}

/// Header of one ring record; `data_len` bytes of data follow, then
/// `n_items` little-endian u32 item descriptors, then padding to 8 bytes.
/// `size` is the total, header and padding included.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// Total size of the record in bytes (a multiple of 8).
    pub size: u32,
    /// [`rec`] kind.
    pub kind: u16,
    /// Log major code (0 for stack traces).
    pub major: u16,
    /// Log minor code.
    pub minor: u16,
    /// Program index (load order).
    pub program: u16,
    /// Site id.
    pub site: u32,
    /// Thread id of the hit thread.
    pub tid: u32,
    /// Bytes of data.
    pub data_len: u32,
    /// Item descriptors.
    pub n_items: u32,
    /// Reserved (zero).
    pub _pad: u32,
    /// TSC at the emission (`rdtsc`).
    pub tsc: u64,
}

/// Size of [`RecordHeader`].
pub const RECORD_HEADER_SIZE: usize = core::mem::size_of::<RecordHeader>();

/// Total size of a record with this payload.
pub const fn record_size(data_len: usize, n_items: usize) -> usize {
    (RECORD_HEADER_SIZE + data_len + 4 * n_items + 7) & !7
}

/// Bytes of the error message area of the control header.
pub const ERR_MSG_BYTES: usize = 1024;

/// The control header at offset 0 of the shared region. The tracer fills
/// `magic` … `ring_size` before `init`; the agent owns the rest.
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
    /// Offset of the global-variable array (u64 each).
    pub gvars_off: u64,
    /// Capacity of the global-variable array.
    pub gvars_cap: u64,
    /// Offset of the ring data area.
    pub ring_off: u64,
    /// Size of the ring data area (power of two).
    pub ring_size: u64,
    /// Tracer → agent: 1 = handlers run, 0 = every hit is skipped as dormant.
    pub enabled: AtomicU32,
    /// Agent: [`state`] word.
    pub state: AtomicU32,
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

/// A load request, written by the tracer into the control region; its
/// offset is the argument of `wprobe_agent_load`. Offsets are relative to
/// the region base.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadRequest {
    /// Offset of the precompiled module (`Engine::precompile_module` output).
    pub module_off: u64,
    /// Its length.
    pub module_len: u64,
    /// Offset of `n_sites` [`SiteEntry`] records.
    pub sites_off: u64,
    /// Number of sites.
    pub n_sites: u32,
    /// Global variables this program declares (`gvars`).
    pub gvars: u32,
    /// Fuel given to each handler run.
    pub fuel: u64,
    /// Load bias of the program's module in the target (`load_bias` import).
    pub load_bias: u64,
    /// 1 if handlers may write registers and memory.
    pub writes_allowed: u32,
    /// Reserved (zero).
    pub _pad: u32,
}

/// One probe site of a load request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteEntry {
    /// Site id (the stub's argument to dispatch), < [`MAX_SITES`].
    pub site: u32,
    /// Length of the export name.
    pub name_len: u32,
    /// Offset of the export name (UTF-8) in the region.
    pub name_off: u64,
}

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
    /// `set_fuel` + the typed call of the site's function, no dispatch around it.
    pub const CALL: u32 = 4;
    /// `rdtsc` only (the measurement's floor).
    pub const EMPTY: u32 = 5;
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
        assert_eq!(size_of::<RecordHeader>(), 40);
        assert_eq!(record_size(0, 0), 40);
        assert_eq!(record_size(1, 0), 48);
        assert_eq!(record_size(8, 2), 56);
        assert_eq!(size_of::<RingHeader>(), 128);
        assert_eq!(offset_of!(ControlHeader, ring) % 64, 0);
        assert_eq!(size_of::<LoadRequest>(), 56);
        assert_eq!(size_of::<SiteEntry>(), 16);
        const { assert!(CONTROL_HEADER_SIZE < 4096) };
    }

    #[test]
    fn error_codes_round_trip() {
        for c in -12..=-1 {
            assert_eq!(AgentError::from_code(c).unwrap() as i32, c);
        }
        assert_eq!(AgentError::from_code(0), None);
    }
}
