//! wprobe's in-process agent: a `no_std`, libc-free object that the tracer
//! maps into a traced process and calls through a few C entry points (see
//! `agent_abi::sym`). It runs precompiled Wasm handler modules with wasmtime
//! 48 built for a custom platform: no signal handlers, no `sigaltstack`, no
//! TLS of its own (per-thread state is keyed by the thread pointer and found
//! from the agent stack), no libc, no output; its memory comes from its own
//! anonymous mappings.
//!
//! One store holds every program (global variables shared, local variables
//! persisting: the ptrace transport's semantics); hits of all threads take
//! turns on it through the store lock in the shared region. Per probe, the
//! agent applies `ignore`, `maxhits` and `remove` and keeps the counters the
//! tracer reports; handler runs with records (or with an outcome the tracer
//! must act on) go to the shared ring.
//!
//! Every entry point switches to an agent stack before running Rust code
//! that may allocate or enter wasmtime; a panic (a bug) records its message
//! in the control region, marks the agent dead and returns from the entry
//! point, leaving the target running with every later hit skipped.

#![no_std]
#![allow(
    clippy::missing_safety_doc,
    reason = "C entry points, documented in agent_abi"
)]

extern crate alloc;

mod calls;
mod ctrl;
mod heap;
mod host;
mod lock;
mod mem;
mod platform;
mod ring;
mod sync;
mod sys;
mod thread;
mod trapnet;
mod vdso;

use agent_abi::{
    AGENT_ABI_VERSION, AgentError, BiasEntry, CONTROL_HEADER_SIZE, CTRL_MAGIC, ControlHeader,
    LOCK_WAIT_MAX_NS, LoadRequest, MAX_SITES, PROBE_SLOT_SIZE, ProbeEntry, ProbeSlot, RunHeader,
    SavedRegs, SiteEntry, SitesRequest, Skip, probe_flag, rec, run_outcome, site_kind, state,
};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use host::{AgentHost, AgentServices, FrameEnv, RunSink};
use hostabi::Outcome;
use hostabi::manifest::{ArgSource, MAX_HANDLER_ARGS};
use hostfns::Handler;
use wasmtime::{
    Config, Engine, Linker, Memory, Module, Store, StoreLimitsBuilder, Trap, TypedFunc,
};

/// Fuel given to `wprobe_flush` after a fuel exhaustion, and to start functions.
const FLUSH_FUEL: u64 = 1_000_000;
/// Written into the fork-guard page at init; a forked child sees a wiped
/// page (`MADV_WIPEONFORK`) and stays dormant.
const FORK_MAGIC: u64 = u64::from_le_bytes(*b"WPRBFORK");
/// The MXCSR Wasm code needs: round to nearest, no FTZ/DAZ, all masked.
const MXCSR_DEFAULT: u32 = 0x1F80;

/// A loaded program.
struct Program {
    memory: Option<Memory>,
    flush: Option<TypedFunc<(), i32>>,
    fuel: u64,
    /// Its map region in the shared region (offset, length; length 0: none).
    map: (u64, u64),
    writes_allowed: bool,
}

/// The handler of a probe: `(i64 × args) -> i32` returns an outcome code;
/// `(i64 × args) -> ()` returns nothing, which means EXIT
/// (docs/hostabi.md).
struct ProbeFn {
    program: u16,
    handler: Handler,
    /// What it takes as parameters (the manifest's `args`).
    args: Box<[Param]>,
    load_bias: u64,
    /// Its USDT arguments (parsed at load), `usdt_len` of them.
    usdt: [hostabi::usdt::UsdtArg; hostabi::usdt::MAX_USDT_ARGS],
    usdt_len: usize,
}

/// A handler parameter, resolved at load to where the hit keeps it (the
/// same values `read_reg`, `entry_reg` and `elapsed_ns` return).
#[derive(Clone, Copy)]
enum Param {
    /// The frame's word at this index (a GPR, `rip`, `rsp` or the flags),
    /// and'ed with the mask (a 32-bit alias reads the low half).
    Frame(usize, u64),
    /// The returning call's entry register at this index of
    /// `EntryState::regs`.
    Entry(usize),
    /// The returning call's duration.
    Elapsed,
    /// Any other register (x87, SSE, segments…): read as `read_reg` does.
    Other(ArgSource),
}

impl Param {
    fn new(a: ArgSource) -> Param {
        use core::mem::offset_of;
        let word = |off: usize| off / 8;
        match a {
            ArgSource::Reg(id) => {
                let Some(r) = hostfns::reg_by_id(id) else {
                    return Param::Other(a);
                };
                let mask = if r.is_alias() { 0xFFFF_FFFF } else { u64::MAX };
                let off = match r.base_id() {
                    0x06 => offset_of!(SavedRegs, rax),
                    0x07 => offset_of!(SavedRegs, rbx),
                    0x08 => offset_of!(SavedRegs, rcx),
                    0x09 => offset_of!(SavedRegs, rdx),
                    0x0A => offset_of!(SavedRegs, rdi),
                    0x0B => offset_of!(SavedRegs, rsi),
                    0x0C => offset_of!(SavedRegs, rflags),
                    0x0D => offset_of!(SavedRegs, rip),
                    0x0E => offset_of!(SavedRegs, rsp),
                    0x0F => offset_of!(SavedRegs, rbp),
                    0x10 => offset_of!(SavedRegs, r8),
                    0x11 => offset_of!(SavedRegs, r9),
                    0x12 => offset_of!(SavedRegs, r10),
                    0x13 => offset_of!(SavedRegs, r11),
                    0x14 => offset_of!(SavedRegs, r12),
                    0x15 => offset_of!(SavedRegs, r13),
                    0x16 => offset_of!(SavedRegs, r14),
                    0x17 => offset_of!(SavedRegs, r15),
                    _ => return Param::Other(a),
                };
                Param::Frame(word(off), mask)
            }
            ArgSource::Entry(id) => match hostabi::regs::entry_index(id) {
                Some(i) => Param::Entry(i),
                None => Param::Other(a),
            },
            ArgSource::Elapsed => Param::Elapsed,
        }
    }
}

/// The parameters of a handler run on the frame and entry state of `env`,
/// written into `v` in place (built apart and copied, the array was read
/// back with 16-byte loads from its 8-byte stores, which the CPU cannot
/// forward: a stall per run).
#[inline(always)]
fn param_values(v: &mut [u64; MAX_HANDLER_ARGS], env: &mut FrameEnv, params: &[Param]) {
    let frame = env.frame as *const u64;
    for (slot, p) in v.iter_mut().zip(params) {
        *slot = match *p {
            // SAFETY: the hit's frame (live while the handler runs), a word
            // index inside `SavedRegs`.
            Param::Frame(i, mask) => (unsafe { frame.add(i).read() }) & mask,
            Param::Entry(i) => env.entry.as_ref().map_or(0, |e| e.regs[i]),
            Param::Elapsed => env.entry.as_ref().map_or(0, |e| e.elapsed_ns),
            Param::Other(a) => hostfns::arg_values(env, &[a])[0],
        };
    }
}

/// The parameter an [`agent_abi::arg`] code names.
fn arg_source(code: u32) -> Option<ArgSource> {
    let id = (code & 0xFFFF) as u16;
    match code & !0xFFFF {
        agent_abi::arg::REG => hostfns::reg_by_id(id)
            .filter(|r| r.id != hostabi::regs::CPUID)
            .map(|_| ArgSource::Reg(id)),
        agent_abi::arg::ENTRY => hostabi::regs::entry_index(id).map(|_| ArgSource::Entry(id)),
        agent_abi::arg::ELAPSED if id == 0 => Some(ArgSource::Elapsed),
        _ => None,
    }
}

/// Everything wasmtime: one engine, one store for every program (global
/// variables shared, local variables persisting: the ptrace semantics),
/// guarded by the store lock of the control region.
struct Agent {
    engine: Engine,
    linker: Linker<AgentHost>,
    store: Store<AgentHost>,
    programs: Vec<Program>,
    probes: Vec<Option<ProbeFn>>,
}

/// A patched site: the address handlers see as `rip`, and its probes.
#[derive(Clone)]
struct Site {
    addr: u64,
    probes: Box<[u32]>,
    /// [`agent_abi::site_kind`].
    kind: u32,
    /// Return probes whose function enters here.
    ret_probes: Box<[u32]>,
    /// The bytes its jump (or trap) replaces, and where.
    window: Option<(u64, Box<[u8]>)>,
    /// A near site's cave (the padding its `jmp rel8` leads to): where,
    /// and the bytes the file has there.
    cave: Option<(u64, Box<[u8]>)>,
    /// A trap site's stub.
    trap_stub: Option<u64>,
}

static AGENT: AtomicPtr<Agent> = AtomicPtr::new(core::ptr::null_mut());
/// The site table, set by `wprobe_agent_sites` (before any stub can reach
/// a new site's `dispatch`; with every thread of the process stopped when
/// sites are added later). A table is never changed once published, nor
/// freed: `dispatch` reads it without a lock, and a thread stopped in a
/// hit may still hold a site of the table an addition replaced.
static SITES: AtomicPtr<Vec<Option<Site>>> = AtomicPtr::new(core::ptr::null_mut());
/// The patched windows with the bytes the jumps replaced, sorted by
/// address (published with the site table, never changed afterwards nor
/// freed): a handler's read of the program's code sees the file's bytes
/// there, as under ptrace.
static WINDOWS: AtomicPtr<Vec<Window>> = AtomicPtr::new(core::ptr::null_mut());

/// The longest of [`WINDOWS`] (bytes).
static LONGEST_WINDOW: AtomicU64 = AtomicU64::new(0);

/// A patched window and its original bytes.
struct Window {
    addr: u64,
    orig: Box<[u8]>,
}

/// Puts the original bytes of the patched windows that `buf` (read at
/// `addr`) overlaps back into it.
pub(crate) fn original_code(addr: u64, buf: &mut [u8]) {
    // SAFETY: published with the site table, never freed.
    let Some(ws) = (unsafe { WINDOWS.load(Ordering::Acquire).as_ref() }) else {
        return;
    };
    let end = addr.saturating_add(buf.len() as u64);
    // The first window that may end after `addr` (windows do not
    // overlap: none that starts a longest window's length before `addr`).
    let longest = LONGEST_WINDOW.load(Ordering::Relaxed);
    let mut i = ws.partition_point(|w| w.addr.saturating_add(longest) <= addr);
    while let Some(w) = ws.get(i) {
        if w.addr >= end {
            break;
        }
        let w_end = w.addr + w.orig.len() as u64;
        let (a, b) = (w.addr.max(addr), w_end.min(end));
        if a < b {
            buf[(a - addr) as usize..(b - addr) as usize]
                .copy_from_slice(&w.orig[(a - w.addr) as usize..(b - w.addr) as usize]);
        }
        i += 1;
    }
}
static FORK_GUARD: AtomicPtr<u64> = AtomicPtr::new(core::ptr::null_mut());
static PID: AtomicU32 = AtomicU32::new(0);
/// Header (initial RSP) of the stack `init`, `load` and `sites` run on.
static CONTROL_STACK: AtomicU64 = AtomicU64::new(0);
/// 1 while a control call runs (they are serialised by the tracer; this
/// makes a violation an error instead of a race).
static CONTROL_BUSY: AtomicU32 = AtomicU32::new(0);

/// A single `int3`: where a function called by the tracer returns to.
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub extern "C" fn wprobe_agent_trap() {
    core::arch::naked_asm!("int3", "ud2");
}

fn err(e: AgentError, msg: core::fmt::Arguments<'_>) -> i64 {
    let mut b = ctrl::FixedBuf::<{ agent_abi::ERR_MSG_BYTES }>::new();
    let _ = b.write_fmt(msg);
    ctrl::set_error(e as i32, b.bytes());
    e as i64
}

// ---------------------------------------------------------------------------
// init

#[repr(C)]
struct InitArgs {
    ctrl: *mut ControlHeader,
    len: usize,
}

/// Sets up the agent around the control region `ctrl..ctrl+len` (filled in
/// by the tracer) and the fork-guard page (may be null). Returns 0 or an
/// [`AgentError`] code; the message is in the region.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_init(ctrl: *mut u8, len: usize, fork_guard: *mut u8) -> i32 {
    if CONTROL_BUSY.swap(1, Ordering::Acquire) != 0 {
        return AgentError::AlreadyInitialized as i32;
    }
    let r = init_outer(ctrl as *mut ControlHeader, len, fork_guard as *mut u64);
    CONTROL_BUSY.store(0, Ordering::Release);
    r
}

fn init_outer(c: *mut ControlHeader, len: usize, guard: *mut u64) -> i32 {
    if !AGENT.load(Ordering::Acquire).is_null() {
        return AgentError::AlreadyInitialized as i32;
    }
    if let Err(e) = check_region(c, len) {
        return e as i32;
    }
    ctrl::CTRL.store(c, Ordering::Release);
    // SAFETY: the region was validated.
    let cref = unsafe { &*c };
    cref.agent_base.store(
        wprobe_agent_init as *const () as usize as u64,
        Ordering::Relaxed,
    );
    let Some(top) = thread::map_stack(core::ptr::null_mut()) else {
        return err(AgentError::NoMemory, format_args!("no control stack")) as i32;
    };
    CONTROL_STACK.store(top as u64, Ordering::Relaxed);
    let mut a = InitArgs { ctrl: c, len };
    // SAFETY: a fresh agent stack; `init_inner` takes `InitArgs`.
    let r = unsafe {
        thread::wprobe_call_on_stack(&mut a as *mut InitArgs as *mut u8, init_inner, top)
    };
    if r == 0 {
        if !guard.is_null() {
            // SAFETY: the tracer's fork-guard page, writable.
            unsafe { guard.write_volatile(FORK_MAGIC) };
            FORK_GUARD.store(guard, Ordering::Release);
        }
        cref.state.store(state::READY, Ordering::Release);
    }
    r as i32
}

fn check_region(c: *mut ControlHeader, len: usize) -> Result<(), AgentError> {
    if c.is_null() || !(c as usize).is_multiple_of(4096) || len < CONTROL_HEADER_SIZE {
        return Err(AgentError::BadControl);
    }
    // SAFETY: non-null, aligned, at least a header long (the caller's word).
    let h = unsafe { &*c };
    let in_region = |off: u64, n: u64| off.checked_add(n).is_some_and(|e| e <= len as u64);
    let ok = h.magic == CTRL_MAGIC
        && h.abi_version == AGENT_ABI_VERSION
        && h.header_size as usize == CONTROL_HEADER_SIZE
        && h.region_size == len as u64
        && h.probes_off.is_multiple_of(64)
        && h.probes_off >= CONTROL_HEADER_SIZE as u64
        && h.probes_cap
            .checked_mul(PROBE_SLOT_SIZE as u64)
            .is_some_and(|n| in_region(h.probes_off, n))
        && h.gvars_off.is_multiple_of(8)
        && h.gvars_off >= CONTROL_HEADER_SIZE as u64
        && h.gvars_cap
            .checked_mul(8)
            .is_some_and(|n| in_region(h.gvars_off, n))
        && h.maps_off.is_multiple_of(8)
        && in_region(h.maps_off, h.maps_size)
        && h.ring_size.is_power_of_two()
        && h.ring_size >= 4096
        && h.ring_off.is_multiple_of(8)
        && h.ring_off >= CONTROL_HEADER_SIZE as u64
        && in_region(h.ring_off, h.ring_size)
        && in_region(h.scratch_off, h.scratch_size);
    if ok {
        Ok(())
    } else {
        Err(AgentError::BadControl)
    }
}

extern "C" fn init_inner(_a: *mut u8) -> i64 {
    PID.store(sys::getpid(), Ordering::Relaxed);
    let mut auxv = [0u8; 1024];
    let n = sys::read_file(c"/proc/self/auxv", &mut auxv).unwrap_or(0);
    vdso::init(&auxv[..n]);
    let (mode, off) = thread::init_keys(&auxv[..n]);
    if let Some(c) = ctrl::get() {
        c.thread_key.store(mode, Ordering::Relaxed);
        c.tcb_tid_off.store(off, Ordering::Relaxed);
        c.gvars_len.store(0, Ordering::Relaxed);
    }
    let ext = core::arch::x86_64::__cpuid(0x8000_0001);
    let rdtscp = ext.edx & (1 << 27) != 0;
    host::HAS_RDTSCP.store(rdtscp, Ordering::Relaxed);
    // CPUID leaf 7 exists on every CPU with RDTSCP worth asking; RDPID is
    // its ECX bit 22.
    let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
    host::HAS_RDPID.store(leaf7.ecx & (1 << 22) != 0, Ordering::Relaxed);
    if let Some(c) = ctrl::get() {
        c.has_rdtscp.store(u32::from(rdtscp), Ordering::Relaxed);
        lock::enable_bias(c);
    }
    let mut cfg = Config::new();
    agent_abi::engine::configure(&mut cfg);
    // SAFETY: `detect` answers from CPUID, which is exact on this CPU.
    unsafe { cfg.detect_host_feature(detect) };
    let engine = match Engine::new(&cfg) {
        Ok(e) => e,
        Err(e) => return err(AgentError::Engine, format_args!("engine: {e}")),
    };
    let mut linker = Linker::new(&engine);
    if let Err(e) = hostfns::add_to_linker(&mut linker) {
        return err(AgentError::Engine, format_args!("linker: {e}"));
    }
    let limits = StoreLimitsBuilder::new()
        .memory_size(agent_abi::engine::MEMORY_RESERVATION as usize)
        .trap_on_grow_failure(false)
        .build();
    let mut store = Store::new(
        &engine,
        AgentHost {
            env: FrameEnv::empty(),
            sink: RunSink::new(),
            services: AgentServices { map: (0, 0) },
            memory: None,
            writes_allowed: false,
            limits,
            usdt: [host::NO_USDT_ARG; hostabi::usdt::MAX_USDT_ARGS],
            usdt_len: 0,
        },
    );
    store.limiter(|s| &mut s.limits);
    let agent = Box::new(Agent {
        engine,
        linker,
        store,
        programs: Vec::new(),
        probes: Vec::new(),
    });
    AGENT.store(Box::into_raw(agent), Ordering::Release);
    0
}

/// CPU features wasmtime asks about when it checks a precompiled module's
/// ISA flags against this host (there is no `std` detection here).
///
/// VEX/EVEX-encoded extensions are reported absent whatever the CPU has:
/// wasmtime then refuses any module compiled to use them, which is how the
/// agent enforces the stubs' contract (they save XMM0–15 and MXCSR only; a
/// VEX.128 instruction would zero the upper halves of the probed code's YMM
/// registers).
fn detect(feature: &str) -> Option<bool> {
    if matches!(
        feature,
        "avx"
            | "avx2"
            | "fma"
            | "avxvnni"
            | "avx512f"
            | "avx512dq"
            | "avx512vl"
            | "avx512bitalg"
            | "avx512vbmi"
            | "avx512vnni"
    ) {
        return Some(false);
    }
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    let l1 = __cpuid(1);
    let l7 = __cpuid_count(7, 0);
    let ext = __cpuid(0x8000_0001);
    let bit = |r: u32, b: u32| r & (1 << b) != 0;
    Some(match feature {
        "sse3" => bit(l1.ecx, 0),
        "ssse3" => bit(l1.ecx, 9),
        "sse4.1" => bit(l1.ecx, 19),
        "sse4.2" => bit(l1.ecx, 20),
        "popcnt" => bit(l1.ecx, 23),
        "cmpxchg16b" => bit(l1.ecx, 13),
        "bmi1" => bit(l7.ebx, 3),
        "bmi2" => bit(l7.ebx, 8),
        "lzcnt" => bit(ext.ecx, 5),
        _ => return None,
    })
}

/// The agent, for code running under the store lock or `CONTROL_BUSY`.
fn agent<'a>() -> Option<&'a mut Agent> {
    // SAFETY: set once by init; callers hold the store lock (or run the
    // tracer-serialised control path with the store lock held).
    unsafe { AGENT.load(Ordering::Acquire).as_mut() }
}

fn on_control_stack(f: extern "C" fn(*mut u8) -> i64, arg: *mut u8) -> i64 {
    let top = CONTROL_STACK.load(Ordering::Relaxed) as usize;
    if top == 0 {
        return AgentError::NotInitialized as i64;
    }
    // SAFETY: the control stack, used by one control call at a time.
    unsafe { thread::wprobe_call_on_stack(arg, f, top) }
}

/// Runs a control call (`load`, `sites`) on the control stack with the
/// store lock held.
fn control_call(f: extern "C" fn(*mut u8) -> i64, req_off: usize) -> i32 {
    if dead() {
        return AgentError::Dead as i32;
    }
    let Some(c) = ctrl::get() else {
        return AgentError::NotInitialized as i32;
    };
    if AGENT.load(Ordering::Acquire).is_null() {
        return AgentError::NotInitialized as i32;
    }
    if CONTROL_BUSY.swap(1, Ordering::Acquire) != 0 {
        return AgentError::BadRequest as i32;
    }
    // Hits wait while the store changes.
    let held = loop {
        match lock::store(c, 0, LOCK_WAIT_MAX_NS) {
            lock::Held::No => {}
            h => break h,
        }
    };
    let mut off = req_off;
    let r = on_control_stack(f, &mut off as *mut usize as *mut u8);
    lock::release(c, held);
    CONTROL_BUSY.store(0, Ordering::Release);
    r as i32
}

/// Reads a `T` at offset `off` of the region (8-aligned, inside it).
fn read_req<T: Copy>(c: &ControlHeader, off: u64, what: &str) -> Result<T, i64> {
    if !off.is_multiple_of(8) {
        return Err(err(
            AgentError::BadRequest,
            format_args!("misaligned {what}"),
        ));
    }
    let Some(b) = ctrl::bytes(c, off, core::mem::size_of::<T>() as u64) else {
        return Err(err(
            AgentError::BadRequest,
            format_args!("{what} outside the region"),
        ));
    };
    // SAFETY: inside the region, aligned, plain data.
    Ok(unsafe { (b.as_ptr() as *const T).read() })
}

// ---------------------------------------------------------------------------
// load

/// Loads the program described by the [`LoadRequest`] at offset `req_off`
/// of the control region. Returns the program index or an [`AgentError`] code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_load(req_off: usize) -> i32 {
    control_call(load_inner, req_off)
}

extern "C" fn load_inner(arg: *mut u8) -> i64 {
    // SAFETY: `control_call` passes a pointer to the offset.
    let req_off = unsafe { *(arg as *const usize) } as u64;
    let (Some(c), Some(a)) = (ctrl::get(), agent()) else {
        return AgentError::NotInitialized as i64;
    };
    let req: LoadRequest = match read_req(c, req_off, "request") {
        Ok(r) => r,
        Err(e) => return e,
    };
    let Some(bytes) = ctrl::bytes(c, req.module_off, req.module_len) else {
        return err(
            AgentError::BadRequest,
            format_args!("module outside the region"),
        );
    };
    if u64::from(req.gvars) > c.gvars_cap {
        return err(
            AgentError::BadRequest,
            format_args!(
                "{} gvars, the region has room for {}",
                req.gvars, c.gvars_cap
            ),
        );
    }
    if req.map_len != 0
        && (req.map_off < c.maps_off
            || req
                .map_off
                .checked_add(req.map_len)
                .is_none_or(|e| e > c.maps_off + c.maps_size))
    {
        return err(
            AgentError::BadRequest,
            format_args!("map region outside the region's map area"),
        );
    }
    if Engine::detect_precompiled(bytes) != Some(wasmtime::Precompiled::Module) {
        return err(
            AgentError::NotPrecompiled,
            format_args!("not a precompiled wasmtime module"),
        );
    }
    // SAFETY: the bytes come from the tracer's `Engine::precompile_module`
    // (trusted input); wasmtime copies them into its own code memory.
    let module = match unsafe { Module::deserialize(&a.engine, &*bytes) } {
        Ok(m) => m,
        Err(e) => return err(AgentError::Incompatible, format_args!("{e:#}")),
    };
    // Start functions run under fuel too.
    let _ = a.store.set_fuel(FLUSH_FUEL);
    let instance = match a.linker.instantiate(&mut a.store, &module) {
        Ok(i) => i,
        Err(e) => return err(AgentError::Instantiate, format_args!("{e:#}")),
    };
    let memory = instance.get_memory(&mut a.store, hostabi::MEMORY_EXPORT);
    let program = a.programs.len();
    if program > u16::MAX as usize {
        return err(AgentError::BadRequest, format_args!("too many programs"));
    }
    let mut new_probes = Vec::new();
    for i in 0..u64::from(req.n_probes) {
        let e: ProbeEntry = match read_req(
            c,
            req.probes_off + i * core::mem::size_of::<ProbeEntry>() as u64,
            "probe entry",
        ) {
            Ok(e) => e,
            Err(e) => return e,
        };
        if u64::from(e.probe) >= c.probes_cap {
            return err(
                AgentError::TooManySites,
                format_args!("probe {} >= {}", e.probe, c.probes_cap),
            );
        }
        let Some(name) = ctrl::bytes(c, e.name_off, u64::from(e.name_len))
            .and_then(|b| core::str::from_utf8(b).ok())
        else {
            return err(
                AgentError::BadRequest,
                format_args!("probe {} export name", e.probe),
            );
        };
        let n = e.n_args as usize;
        let mut args = Vec::new();
        for &code in e.args.get(..n).unwrap_or(&[]) {
            match arg_source(code) {
                Some(s) => args.push(Param::new(s)),
                None => {
                    return err(
                        AgentError::BadRequest,
                        format_args!("probe {} parameter code 0x{code:x}", e.probe),
                    );
                }
            }
        }
        if args.len() != n {
            return err(
                AgentError::BadRequest,
                format_args!("probe {}: {n} parameters", e.probe),
            );
        }
        let Some(handler) = Handler::new(&instance, &mut a.store, name, n) else {
            return err(
                AgentError::MissingExport,
                format_args!("export {name:?}: not a handler taking {n} i64 parameters"),
            );
        };
        let mut usdt = [host::NO_USDT_ARG; hostabi::usdt::MAX_USDT_ARGS];
        let mut usdt_len = 0;
        if e.usdt_len != 0 {
            let parsed = ctrl::bytes(c, e.usdt_off, u64::from(e.usdt_len))
                .and_then(|b| core::str::from_utf8(b).ok())
                .and_then(|t| hostabi::usdt::parse_args(t, &mut |_| None).ok());
            let Some(parsed) = parsed else {
                return err(
                    AgentError::BadRequest,
                    format_args!("probe {}: USDT argument specs", e.probe),
                );
            };
            usdt[..parsed.len()].copy_from_slice(&parsed);
            usdt_len = parsed.len();
        }
        new_probes.push((
            e.probe,
            e.load_bias,
            handler,
            args.into_boxed_slice(),
            (usdt, usdt_len),
        ));
    }
    let flush = instance
        .get_typed_func::<(), i32>(&mut a.store, hostabi::FLUSH_EXPORT)
        .ok();
    a.programs.push(Program {
        memory,
        flush,
        fuel: req.fuel,
        map: (req.map_off, req.map_len),
        writes_allowed: req.writes_allowed != 0,
    });
    for (probe, load_bias, handler, args, (usdt, usdt_len)) in new_probes {
        let i = probe as usize;
        if a.probes.len() <= i {
            a.probes.resize_with(i + 1, || None);
        }
        a.probes[i] = Some(ProbeFn {
            program: program as u16,
            handler,
            args,
            load_bias,
            usdt,
            usdt_len,
        });
    }
    let g = c
        .gvars_len
        .load(Ordering::Relaxed)
        .max(u64::from(req.gvars));
    c.gvars_len.store(g, Ordering::Release);
    program as i64
}

// ---------------------------------------------------------------------------
// sites

/// Adds the sites of the [`SitesRequest`] at `req_off` to the site table
/// (an entry with the id of an earlier site replaces it) and sets the load
/// biases it lists: at the start, before any stub that calls `dispatch` is
/// reachable; later (a library mapped), with every other thread stopped.
/// Returns 0 or an [`AgentError`] code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_sites(req_off: usize) -> i32 {
    control_call(sites_inner, req_off)
}

extern "C" fn sites_inner(arg: *mut u8) -> i64 {
    // SAFETY: `control_call` passes a pointer to the offset.
    let req_off = unsafe { *(arg as *const usize) } as u64;
    let Some(c) = ctrl::get() else {
        return AgentError::NotInitialized as i64;
    };
    let req: SitesRequest = match read_req(c, req_off, "sites request") {
        Ok(r) => r,
        Err(e) => return e,
    };
    // SAFETY: published tables are never changed nor freed.
    let mut table: Vec<Option<Site>> = match unsafe { SITES.load(Ordering::Acquire).as_ref() } {
        Some(t) => t.clone(),
        None => Vec::new(),
    };
    for i in 0..u64::from(req.n_sites) {
        let e: SiteEntry = match read_req(
            c,
            req.sites_off + i * core::mem::size_of::<SiteEntry>() as u64,
            "site entry",
        ) {
            Ok(e) => e,
            Err(e) => return e,
        };
        if e.site >= MAX_SITES {
            return err(AgentError::TooManySites, format_args!("site {}", e.site));
        }
        let probes = match probe_list(c, e.probes_off, e.n_probes, e.site) {
            Ok(p) => p,
            Err(e) => return e,
        };
        let ret_probes = match probe_list(c, e.ret_off, e.n_ret, e.site) {
            Ok(p) => p,
            Err(e) => return e,
        };
        let window = if e.orig_len != 0 {
            let Some(orig) = ctrl::bytes(c, e.orig_off, u64::from(e.orig_len)) else {
                return err(
                    AgentError::BadRequest,
                    format_args!("site {} original bytes", e.site),
                );
            };
            Some((e.window, Box::from(&*orig)))
        } else {
            None
        };
        // A near site's cave: its padding reads as the file has it too.
        let cave = if e.cave != 0 && e.cave_len != 0 {
            let Some(orig) = ctrl::bytes(c, e.cave_off, u64::from(e.cave_len)) else {
                return err(
                    AgentError::BadRequest,
                    format_args!("site {} cave bytes", e.site),
                );
            };
            Some((e.cave, Box::from(&*orig)))
        } else {
            None
        };
        let i = e.site as usize;
        if table.len() <= i {
            table.resize_with(i + 1, || None);
        }
        table[i] = Some(Site {
            addr: e.addr,
            probes,
            kind: e.kind,
            ret_probes,
            window,
            cave,
            trap_stub: (e.trap != 0).then_some(e.stub),
        });
    }
    if req.n_biases != 0 {
        let Some(a) = agent() else {
            return AgentError::NotInitialized as i64;
        };
        for i in 0..u64::from(req.n_biases) {
            let b: BiasEntry = match read_req(
                c,
                req.biases_off + i * core::mem::size_of::<BiasEntry>() as u64,
                "bias entry",
            ) {
                Ok(b) => b,
                Err(e) => return e,
            };
            if let Some(Some(p)) = a.probes.get_mut(b.probe as usize) {
                p.load_bias = b.load_bias;
            }
        }
    }
    let mut windows: Vec<Window> = Vec::new();
    let mut traps: Vec<(u64, u64)> = Vec::new();
    for s in table.iter().flatten() {
        if let Some((addr, orig)) = &s.window {
            windows.push(Window {
                addr: *addr,
                orig: orig.clone(),
            });
            if let Some(stub) = s.trap_stub {
                traps.push((*addr, stub));
            }
        }
        if let Some((addr, orig)) = &s.cave {
            windows.push(Window {
                addr: *addr,
                orig: orig.clone(),
            });
        }
    }
    windows.sort_unstable_by_key(|w| w.addr);
    let longest = windows
        .iter()
        .map(|w| w.orig.len() as u64)
        .max()
        .unwrap_or(0);
    // The longest first: a reader that sees the new windows sees a bound
    // at least as large as theirs.
    LONGEST_WINDOW.fetch_max(longest, Ordering::Relaxed);
    // The old tables stay (see `SITES`).
    WINDOWS.store(Box::into_raw(Box::new(windows)), Ordering::Release);
    if trapnet::arm(traps) {
        c.stats.trap_net.store(1, Ordering::Relaxed);
    }
    SITES.store(Box::into_raw(Box::new(table)), Ordering::Release);
    0
}

/// The `n` probe ids at `off` of the control region (site `site`'s).
fn probe_list(c: &ControlHeader, off: u64, n: u32, site: u32) -> Result<Box<[u32]>, i64> {
    let mut probes = Vec::with_capacity(n as usize);
    for k in 0..u64::from(n) {
        let p: u32 = match ctrl::bytes(c, off + 4 * k, 4) {
            Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            None => {
                return Err(err(
                    AgentError::BadRequest,
                    format_args!("site {site} probes"),
                ));
            }
        };
        if u64::from(p) >= c.probes_cap {
            return Err(err(AgentError::TooManySites, format_args!("probe {p}")));
        }
        probes.push(p);
    }
    Ok(probes.into_boxed_slice())
}

// ---------------------------------------------------------------------------
// dispatch

fn dead() -> bool {
    ctrl::get().is_some_and(|c| c.state.load(Ordering::Relaxed) == state::DEAD)
}

fn in_forked_child() -> bool {
    let g = FORK_GUARD.load(Ordering::Relaxed);
    // SAFETY: the fork-guard page is mapped for the life of the process.
    !g.is_null() && unsafe { g.read_volatile() } != FORK_MAGIC
}

#[inline(always)]
fn site(id: u32) -> Option<&'static Site> {
    // SAFETY: published tables are never changed nor freed.
    let t = unsafe { SITES.load(Ordering::Acquire).as_ref()? };
    t.get(id as usize)?.as_ref()
}

/// A thread checks the tracer's heartbeat at one hit in this many (and at
/// every hit once it found it stale): a handler may run this many hits of
/// a thread after the heartbeat went stale, against a staleness bound of
/// seconds.
const BEAT_SAMPLE: u32 = 16;

/// Counts a hit of every enabled probe of `s` (its return probes' calls
/// included) as missed.
#[cold]
fn missed(c: &ControlHeader, s: &Site) {
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
struct HitArgs {
    site: &'static Site,
    slot: &'static thread::Slot,
    tid: u32,
    fs_base: u64,
    frame: *mut SavedRegs,
    /// Wall-clock time of the hit, when taken before the handlers (0: the
    /// first `now_ns` of a handler takes it).
    now: core::cell::Cell<u64>,
    /// The TSC of the hit, read once (0: not yet; see [`HitArgs::tsc`]).
    tsc: core::cell::Cell<u64>,
    /// The probe's address for the run header (a return probe's: its
    /// function's entry).
    ip: core::cell::Cell<u64>,
    /// The thread's stack below the probed code's red zone: its top (the
    /// agent's span ends there; see `FrameEnv::agent_stack`).
    below_red_zone: u64,
    /// No handler of this hit has run yet.
    fresh: core::cell::Cell<bool>,
}

impl HitArgs {
    /// The TSC of the hit: read at its heartbeat check, or now, once.
    fn tsc(&self) -> u64 {
        if self.tsc.get() == 0 {
            self.tsc.set(sys::rdtsc());
        }
        self.tsc.get()
    }
}

/// The store lock, taken when first needed and released on drop.
struct StoreLock<'a> {
    c: &'a ControlHeader,
    /// The hit's thread (the bias owner takes the store without the lock).
    me: u32,
    held: lock::Held,
}

impl StoreLock<'_> {
    /// Takes the lock unless held; false when it could not be had in time
    /// (counted as contended).
    fn take(&mut self) -> bool {
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
    // In a forked child the region is the parent's: count nothing there.
    if in_forked_child() {
        return Skip::Dormant as i64;
    }
    if c.state.load(Ordering::Relaxed) != state::READY || c.enabled.load(Ordering::Relaxed) == 0 {
        c.stats.dormant.fetch_add(1, Ordering::Relaxed);
        return Skip::Dormant as i64;
    }
    let Some(s) = site(site_id) else {
        return Skip::NoHandler as i64;
    };
    let at_ret = s.kind == site_kind::RET || s.kind == site_kind::CONT;
    if !at_ret && !any_enabled(c, &s.probes) && !any_enabled(c, &s.ret_probes) {
        return Skip::NoHandler as i64;
    }
    let Some((slot, fs)) = thread::current() else {
        c.stats.no_slot.fetch_add(1, Ordering::Relaxed);
        missed(c, s);
        return Skip::NoThreadSlot as i64;
    };
    // A `ret` where this thread has no tracked call: nothing to do.
    if at_ret && !calls::tracking(slot) {
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
    if slot.busy.load(Ordering::Relaxed) != 0 {
        c.stats.reentered.fetch_add(1, Ordering::Relaxed);
        missed(c, s);
        return Skip::Reentered as i64;
    }
    slot.busy.store(1, Ordering::Relaxed);
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    let mut args = HitArgs {
        site: s,
        slot,
        tid: slot.tid.load(Ordering::Relaxed),
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
    // SAFETY: the thread's own agent stack, not in use (busy was 0).
    let r = unsafe {
        thread::wprobe_call_on_stack(&mut args as *mut HitArgs as *mut u8, dispatch_inner, top)
    };
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    slot.busy.store(0, Ordering::Relaxed);
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
        me: h.tid,
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
        for &p in &h.site.probes {
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

/// Adds one to a counter only the holder of the store lock writes (no
/// locked read-modify-write).
#[inline(always)]
fn bump(n: &AtomicU64) {
    n.store(n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// One hit of probe `p`: `ignore`, the handler run, its counters, outcome
/// and records. Returns whether the handler ran. The caller holds the
/// store lock.
#[inline(always)]
fn run_probe(c: &ControlHeader, slot: &ProbeSlot, p: u32, h: &HitArgs) -> bool {
    let Some(a) = agent() else {
        return false;
    };
    bump(&slot.hits);
    let ignored = slot.ignored.load(Ordering::Relaxed);
    if ignored < slot.ignore {
        slot.ignored.store(ignored + 1, Ordering::Relaxed);
        return false;
    }
    let Some(Some(pf)) = a.probes.get(p as usize) else {
        return false;
    };
    let prog = &a.programs[pf.program as usize];
    {
        let d = a.store.data_mut();
        d.env.frame = h.frame;
        d.env.tid = h.tid;
        d.env.pid = PID.load(Ordering::Relaxed);
        d.env.fs_base = h.fs_base;
        d.env.load_bias = pf.load_bias;
        d.usdt_len = pf.usdt_len;
        if pf.usdt_len != 0 {
            d.usdt[..pf.usdt_len].copy_from_slice(&pf.usdt[..pf.usdt_len]);
        }
        d.env.now.set(h.now.get());
        d.env.tsc = h.tsc.get();
        if h.fresh.replace(false) {
            // The span of the thread's stack the stub and the dispatcher
            // use: from the dispatcher's lowest frame (saved where it
            // switched to the agent stack) up to the red zone.
            let top = h.slot.stack.load(Ordering::Relaxed);
            // SAFETY: the header of this thread's agent stack, which the
            // stack switch of this hit wrote.
            let low = unsafe { (*(top as *const thread::StackHeader)).saved_sp };
            d.env.agent_stack = (low.min(h.below_red_zone), h.below_red_zone);
            d.env.dead_valid = false;
        }
        d.sink.clear();
        d.services.map = prog.map;
        d.memory = prog.memory;
        d.writes_allowed = prog.writes_allowed;
    }
    let _ = a.store.set_fuel(prog.fuel);
    let mut args = [0; MAX_HANDLER_ARGS];
    param_values(&mut args, &mut a.store.data_mut().env, &pf.args);
    let res = pf.handler.call(&mut a.store, &args);
    // What a trap message is made of; formatted only for the probe's first
    // trap (not per run: the 512-byte buffer is not even zeroed otherwise).
    let mut bad_code = None;
    let mut error = None;
    let outcome = match res {
        Ok(code) => match Outcome::from_code(code) {
            Some(o) => {
                if o == Outcome::Uncaught {
                    bump(&slot.uncaught);
                }
                code
            }
            None => {
                bump(&slot.traps);
                bad_code = Some(code);
                run_outcome::TRAPPED
            }
        },
        Err(e) => {
            if e.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
                bump(&slot.fuel_exhausted);
                if let Some(f) = &prog.flush {
                    let _ = a.store.set_fuel(FLUSH_FUEL);
                    let _ = f.call(&mut a.store, ());
                }
                run_outcome::FUEL
            } else {
                bump(&slot.traps);
                error = Some(e);
                run_outcome::TRAPPED
            }
        }
    };
    let runs = slot.runs.load(Ordering::Relaxed) + 1;
    slot.runs.store(runs, Ordering::Relaxed);
    let first_trap = outcome == run_outcome::TRAPPED
        && slot.flags.load(Ordering::Relaxed) & probe_flag::TRAP_REPORTED == 0;
    if first_trap {
        slot.flags
            .fetch_or(probe_flag::TRAP_REPORTED, Ordering::Relaxed);
        let mut trap = ctrl::FixedBuf::<512>::new();
        if let Some(code) = bad_code {
            let _ = write!(trap, "handler returned {code}, not an outcome code");
        } else if let Some(e) = &error {
            // As the runtime's `trap_message`: the trap, or the root cause
            // of a host-raised error (without its context).
            match e.downcast_ref::<Trap>() {
                Some(t) => {
                    let _ = write!(trap, "{t}");
                }
                None => {
                    let _ = write!(trap, "{}", e.root_cause());
                }
            }
        }
        a.store
            .data_mut()
            .sink
            .push(rec::TRAP, 0, 0, trap.bytes(), &[]);
    }
    let tells = matches!(
        Outcome::from_code(outcome),
        Some(
            Outcome::Remove
                | Outcome::Stop
                | Outcome::DebuggerHandoff
                | Outcome::CoreDump
                | Outcome::CrashDump
        )
    );
    let d = a.store.data_mut();
    if !d.sink.is_empty() || tells {
        let head = RunHeader {
            probe: p,
            tid: h.tid,
            cpu: hostabi::env::HitEnv::cpu(&d.env) as u32,
            outcome,
            time_ns: hostabi::env::HitEnv::now_ns(&d.env),
            ip: h.ip.get(),
            ..Default::default()
        };
        if !ring::push_entry(c, d.sink.entry(head)) {
            bump(&slot.dropped);
        }
    }
    d.env.frame = core::ptr::null_mut();
    match Outcome::from_code(outcome) {
        Some(Outcome::Remove) => slot.enabled.store(0, Ordering::Relaxed),
        // `exit()` is bpftrace's: asynchronous. The handlers keep running
        // (their map updates count) until the tracer, told by this run's
        // entry, has detached; the tracer prints none of their output.
        _ => {}
    }
    if slot.maxhits != 0 && runs >= slot.maxhits {
        slot.enabled.store(0, Ordering::Relaxed);
    }
    true
}

// ---------------------------------------------------------------------------
// bench

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

// ---------------------------------------------------------------------------
// panics

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let mut b = ctrl::FixedBuf::<{ agent_abi::ERR_MSG_BYTES }>::new();
    let _ = write!(b, "agent panic: {info}");
    ctrl::set_error(AgentError::Dead as i32, b.bytes());
    if let Some(c) = ctrl::get() {
        c.state.store(state::DEAD, Ordering::Release);
    }
    // Return from the entry point that switched to this stack: the target
    // goes on, every later hit is skipped (the store may be inconsistent).
    if let Some(h) = thread::header_checked() {
        if let Some(c) = ctrl::get() {
            if c.bias.owner.load(Ordering::Relaxed) == sys::gettid() {
                // The bias owner: its `bias.inside` may be 1, and no other
                // thread can be inside.
                c.bias.inside.store(0, Ordering::Release);
            }
            lock::unlock(&c.store_lock);
        }
        // SAFETY: `h` is the header of the agent stack we run on; its
        // `saved_sp` is the frame of the `wprobe_call_on_stack` that
        // entered it, still live below us on the thread's own stack.
        unsafe { thread::wprobe_abandon_stack(h, AgentError::Dead as i64) }
    }
    // Not on an agent stack: nowhere safe to return to.
    // SAFETY: raises SIGILL, the only way out left.
    unsafe { core::arch::asm!("ud2", options(noreturn)) }
}
