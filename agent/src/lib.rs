//! wprobe's in-process agent: a `no_std`, libc-free object that the tracer
//! maps into a traced process and calls through a few C entry points (see
//! `agent_abi::sym`). It runs precompiled Wasm handler modules with wasmtime
//! 48 built for a custom platform: no signal handlers, no `sigaltstack`, no
//! TLS of its own (per-thread state is keyed by the thread pointer and found
//! from the agent stack), no libc, no output; its memory comes from its own
//! anonymous mappings.
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

mod ctrl;
mod heap;
mod host;
mod mem;
mod platform;
mod sync;
mod sys;
mod thread;

use agent_abi::{
    AGENT_ABI_VERSION, AgentError, CONTROL_HEADER_SIZE, CTRL_MAGIC, ControlHeader, LoadRequest,
    MAX_SITES, SavedRegs, SiteEntry, Skip, state,
};
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use host::{AgentHost, FrameEnv, RingSink};
use wasmtime::{
    Config, Engine, Linker, Memory, Module, Store, StoreLimitsBuilder, Trap, TypedFunc,
};

/// Fuel given to `wprobe_flush` after a fuel exhaustion, and to start functions.
const FLUSH_FUEL: u64 = 1_000_000;
/// Spins a hit waits for the store before giving up as `Contended`.
const STORE_SPINS: u32 = 2_000;
/// Written into the fork-guard page at init; a forked child sees a wiped
/// page (`MADV_WIPEONFORK`) and stays dormant.
const FORK_MAGIC: u64 = u64::from_le_bytes(*b"WPRBFORK");
/// The MXCSR Wasm code needs: round to nearest, no FTZ/DAZ, all masked.
const MXCSR_DEFAULT: u32 = 0x1F80;

/// A loaded program.
struct Program {
    memory: Memory,
    flush: Option<TypedFunc<(), i32>>,
    fuel: u64,
    load_bias: u64,
    writes_allowed: bool,
}

/// The handler of a site.
struct SiteFn {
    program: u16,
    func: TypedFunc<(), i32>,
}

/// Everything wasmtime: one engine, one store for every program (global
/// variables shared, local variables persisting: the ptrace semantics),
/// guarded by `STORE_LOCK`.
struct Agent {
    engine: Engine,
    linker: Linker<AgentHost>,
    store: Store<AgentHost>,
    programs: Vec<Program>,
    sites: Vec<Option<SiteFn>>,
}

static AGENT: AtomicPtr<Agent> = AtomicPtr::new(core::ptr::null_mut());
static STORE_LOCK: AtomicU32 = AtomicU32::new(0);
static FORK_GUARD: AtomicPtr<u64> = AtomicPtr::new(core::ptr::null_mut());
static PID: AtomicU32 = AtomicU32::new(0);
/// Header (initial RSP) of the stack `init` and `load` run on.
static CONTROL_STACK: AtomicU64 = AtomicU64::new(0);
/// 1 while `init` or `load` runs (they are serialised by the tracer; this
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
        cref.enabled.store(1, Ordering::Relaxed);
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
        && h.gvars_off.is_multiple_of(8)
        && h.gvars_off >= CONTROL_HEADER_SIZE as u64
        && h.gvars_cap
            .checked_mul(8)
            .is_some_and(|n| in_region(h.gvars_off, n))
        && h.ring_size.is_power_of_two()
        && h.ring_size >= 64
        && h.ring_off.is_multiple_of(8)
        && h.ring_off >= CONTROL_HEADER_SIZE as u64
        && in_region(h.ring_off, h.ring_size);
    if ok {
        Ok(())
    } else {
        Err(AgentError::BadControl)
    }
}

extern "C" fn init_inner(_a: *mut u8) -> i64 {
    PID.store(sys::getpid(), Ordering::Relaxed);
    let (mode, off) = thread::init_keys();
    if let Some(c) = ctrl::get() {
        c.thread_key.store(mode, Ordering::Relaxed);
        c.tcb_tid_off.store(off, Ordering::Relaxed);
        c.gvars_len.store(0, Ordering::Relaxed);
    }
    let ext = core::arch::x86_64::__cpuid(0x8000_0001);
    host::HAS_RDTSCP.store(ext.edx & (1 << 27) != 0, Ordering::Relaxed);
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
            sink: RingSink::empty(),
            memory: None,
            writes_allowed: false,
            limits,
        },
    );
    store.limiter(|s| &mut s.limits);
    let agent = alloc::boxed::Box::new(Agent {
        engine,
        linker,
        store,
        programs: Vec::new(),
        sites: Vec::new(),
    });
    AGENT.store(alloc::boxed::Box::into_raw(agent), Ordering::Release);
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

/// The agent, for code running under `STORE_LOCK` or `CONTROL_BUSY`.
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

// ---------------------------------------------------------------------------
// load

/// Loads the module described by the [`LoadRequest`] at offset `req_off` of
/// the control region. Returns the program index or an [`AgentError`] code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_load(req_off: usize) -> i32 {
    if dead() {
        return AgentError::Dead as i32;
    }
    if AGENT.load(Ordering::Acquire).is_null() {
        return AgentError::NotInitialized as i32;
    }
    if CONTROL_BUSY.swap(1, Ordering::Acquire) != 0 {
        return AgentError::BadRequest as i32;
    }
    // Hits wait (and are counted as contended) while the store changes.
    while !sync::try_lock_bounded(&STORE_LOCK, u32::MAX) {}
    let mut off = req_off;
    let r = on_control_stack(load_inner, &mut off as *mut usize as *mut u8);
    STORE_LOCK.store(0, Ordering::Release);
    CONTROL_BUSY.store(0, Ordering::Release);
    r as i32
}

fn region_bytes(c: &ControlHeader, off: u64, len: u64) -> Option<&'static [u8]> {
    let end = off.checked_add(len)?;
    if end > c.region_size {
        return None;
    }
    // SAFETY: inside the validated region.
    Some(unsafe {
        core::slice::from_raw_parts(
            (c as *const ControlHeader as *const u8).add(off as usize),
            len as usize,
        )
    })
}

extern "C" fn load_inner(arg: *mut u8) -> i64 {
    // SAFETY: `wprobe_agent_load` passes a pointer to the offset.
    let req_off = unsafe { *(arg as *const usize) } as u64;
    let (Some(c), Some(a)) = (ctrl::get(), agent()) else {
        return AgentError::NotInitialized as i64;
    };
    let Some(req) = region_bytes(c, req_off, core::mem::size_of::<LoadRequest>() as u64) else {
        return err(
            AgentError::BadRequest,
            format_args!("request outside the region"),
        );
    };
    if !req_off.is_multiple_of(8) {
        return err(AgentError::BadRequest, format_args!("misaligned request"));
    }
    // SAFETY: in the region, aligned, plain data.
    let req: LoadRequest = unsafe { (req.as_ptr() as *const LoadRequest).read() };
    let Some(bytes) = region_bytes(c, req.module_off, req.module_len) else {
        return err(
            AgentError::BadRequest,
            format_args!("module outside the region"),
        );
    };
    let n_sites = req.n_sites as u64;
    let Some(site_bytes) = n_sites
        .checked_mul(core::mem::size_of::<SiteEntry>() as u64)
        .and_then(|n| region_bytes(c, req.sites_off, n))
    else {
        return err(
            AgentError::BadRequest,
            format_args!("sites outside the region"),
        );
    };
    if !req.sites_off.is_multiple_of(8) {
        return err(AgentError::BadRequest, format_args!("misaligned sites"));
    }
    if u64::from(req.gvars) > c.gvars_cap {
        return err(
            AgentError::BadRequest,
            format_args!(
                "{} gvars, the region has room for {}",
                req.gvars, c.gvars_cap
            ),
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
    let module = match unsafe { Module::deserialize(&a.engine, bytes) } {
        Ok(m) => m,
        Err(e) => return err(AgentError::Incompatible, format_args!("{e:#}")),
    };
    // Start functions run under fuel too.
    let _ = a.store.set_fuel(FLUSH_FUEL);
    let instance = match a.linker.instantiate(&mut a.store, &module) {
        Ok(i) => i,
        Err(e) => return err(AgentError::Instantiate, format_args!("{e:#}")),
    };
    let Some(memory) = instance.get_memory(&mut a.store, hostabi::MEMORY_EXPORT) else {
        return err(
            AgentError::Instantiate,
            format_args!("module does not export its memory"),
        );
    };
    let program = a.programs.len();
    if program > u16::MAX as usize {
        return err(AgentError::BadRequest, format_args!("too many programs"));
    }
    let mut new_sites = Vec::new();
    for i in 0..req.n_sites as usize {
        // SAFETY: `site_bytes` holds n_sites entries, 8-aligned.
        let s: SiteEntry = unsafe { (site_bytes.as_ptr() as *const SiteEntry).add(i).read() };
        if s.site >= MAX_SITES {
            return err(AgentError::TooManySites, format_args!("site {}", s.site));
        }
        let Some(name) = region_bytes(c, s.name_off, u64::from(s.name_len))
            .and_then(|b| core::str::from_utf8(b).ok())
        else {
            return err(AgentError::BadRequest, format_args!("site {} name", s.site));
        };
        match instance.get_typed_func::<(), i32>(&mut a.store, name) {
            Ok(f) => new_sites.push((s.site, f)),
            Err(e) => {
                return err(
                    AgentError::MissingExport,
                    format_args!("export {name:?}: {e:#}"),
                );
            }
        }
    }
    let flush = instance
        .get_typed_func::<(), i32>(&mut a.store, hostabi::FLUSH_EXPORT)
        .ok();
    a.programs.push(Program {
        memory,
        flush,
        fuel: req.fuel,
        load_bias: req.load_bias,
        writes_allowed: req.writes_allowed != 0,
    });
    for (site, func) in new_sites {
        let i = site as usize;
        if a.sites.len() <= i {
            a.sites.resize_with(i + 1, || None);
        }
        a.sites[i] = Some(SiteFn {
            program: program as u16,
            func,
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
// dispatch

fn dead() -> bool {
    ctrl::get().is_some_and(|c| c.state.load(Ordering::Relaxed) == state::DEAD)
}

#[inline(always)]
fn dormant() -> bool {
    let g = FORK_GUARD.load(Ordering::Relaxed);
    // SAFETY: the fork-guard page is mapped for the life of the process.
    if !g.is_null() && unsafe { g.read_volatile() } != FORK_MAGIC {
        return true;
    }
    match ctrl::get() {
        Some(c) => {
            c.state.load(Ordering::Relaxed) != state::READY
                || c.enabled.load(Ordering::Relaxed) == 0
        }
        None => true,
    }
}

#[repr(C)]
struct HitArgs {
    site: u32,
    tid: u32,
    fs_base: u64,
    frame: *mut SavedRegs,
}

/// Runs the handler of `site` on the registers saved in `frame`; register
/// writes land in `frame`. Returns the handler's outcome code (>= 0) or a
/// [`Skip`] code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_dispatch(site: u32, frame: *mut SavedRegs) -> i64 {
    if dormant() {
        // In a forked child the region is the parent's: count nothing there.
        if !in_forked_child() {
            ctrl::stats(|s| s.dormant.fetch_add(1, Ordering::Relaxed));
        }
        return Skip::Dormant as i64;
    }
    let Some(slot) = thread::current() else {
        ctrl::stats(|s| s.no_slot.fetch_add(1, Ordering::Relaxed));
        return Skip::NoThreadSlot as i64;
    };
    if slot.busy.load(Ordering::Relaxed) != 0 {
        ctrl::stats(|s| s.reentered.fetch_add(1, Ordering::Relaxed));
        return Skip::Reentered as i64;
    }
    slot.busy.store(1, Ordering::Relaxed);
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    let mut args = HitArgs {
        site,
        tid: slot.tid.load(Ordering::Relaxed),
        fs_base: slot.key.load(Ordering::Relaxed),
        frame,
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

fn in_forked_child() -> bool {
    let g = FORK_GUARD.load(Ordering::Relaxed);
    // SAFETY: as in `dormant`.
    !g.is_null() && unsafe { g.read_volatile() } != FORK_MAGIC
}

extern "C" fn dispatch_inner(arg: *mut u8) -> i64 {
    // SAFETY: `wprobe_agent_dispatch` passes its `HitArgs`.
    let h = unsafe { &*(arg as *const HitArgs) };
    let Some(c) = ctrl::get() else {
        return Skip::Dormant as i64;
    };
    if !sync::try_lock_bounded(&STORE_LOCK, STORE_SPINS) {
        c.stats.contended.fetch_add(1, Ordering::Relaxed);
        return Skip::Contended as i64;
    }
    let mxcsr = sys::stmxcsr();
    if mxcsr != MXCSR_DEFAULT {
        sys::ldmxcsr(MXCSR_DEFAULT);
    }
    let r = run_site(c, h);
    if mxcsr != MXCSR_DEFAULT {
        sys::ldmxcsr(mxcsr);
    }
    STORE_LOCK.store(0, Ordering::Release);
    r
}

/// Runs a site's handler; the caller holds the store lock.
#[inline(always)]
fn run_site(c: &ControlHeader, h: &HitArgs) -> i64 {
    let Some(a) = agent() else {
        return Skip::Dormant as i64;
    };
    let Some(Some(sf)) = a.sites.get(h.site as usize) else {
        c.stats.no_handler.fetch_add(1, Ordering::Relaxed);
        return Skip::NoHandler as i64;
    };
    let p = &a.programs[sf.program as usize];
    {
        let d = a.store.data_mut();
        d.env.frame = h.frame;
        d.env.tid = h.tid;
        d.env.pid = PID.load(Ordering::Relaxed);
        d.env.fs_base = h.fs_base;
        d.env.load_bias = p.load_bias;
        d.env.now.set(0);
        d.sink.site = h.site;
        d.sink.program = sf.program;
        d.sink.tid = h.tid;
        d.sink.records = 0;
        d.sink.bytes = 0;
        d.memory = Some(p.memory);
        d.writes_allowed = p.writes_allowed;
    }
    let _ = a.store.set_fuel(p.fuel);
    let r = match sf.func.call(&mut a.store, ()) {
        Ok(code) => {
            if hostabi::Outcome::from_code(code).is_some() {
                // Single writer (under the store lock): no locked RMW.
                let n = &c.stats.handled;
                n.store(n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                i64::from(code)
            } else {
                c.stats.trapped.fetch_add(1, Ordering::Relaxed);
                err_silent(format_args!("site {}: handler returned {code}", h.site));
                Skip::BadOutcome as i64
            }
        }
        Err(e) => {
            if e.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
                c.stats.fuel_exhausted.fetch_add(1, Ordering::Relaxed);
                if let Some(f) = &p.flush {
                    let _ = a.store.set_fuel(FLUSH_FUEL);
                    let _ = f.call(&mut a.store, ());
                }
                Skip::FuelExhausted as i64
            } else {
                c.stats.trapped.fetch_add(1, Ordering::Relaxed);
                // As the runtime's `trap_message`: the trap, or the root cause
                // of a host-raised error (without the backtrace context).
                match e.downcast_ref::<Trap>() {
                    Some(t) => err_silent(format_args!("site {}: {t}", h.site)),
                    None => err_silent(format_args!("site {}: {}", h.site, e.root_cause())),
                }
                Skip::Trapped as i64
            }
        }
    };
    a.store.data_mut().env.frame = core::ptr::null_mut();
    r
}

/// Records the last trap message (code 0: not an error of the agent).
fn err_silent(msg: core::fmt::Arguments<'_>) {
    let mut b = ctrl::FixedBuf::<{ agent_abi::ERR_MSG_BYTES }>::new();
    let _ = b.write_fmt(msg);
    ctrl::set_error(0, b.bytes());
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
                let Some(s) = thread::current() else { return 0 };
                let top = s.stack.load(Ordering::Relaxed);
                // SAFETY: the thread's own stack, not in use.
                core::hint::black_box(unsafe {
                    thread::wprobe_call_on_stack(core::ptr::null_mut(), noop, top)
                });
            }
        }
        PANIC => {
            let Some(s) = thread::current() else { return 0 };
            let top = s.stack.load(Ordering::Relaxed);
            // SAFETY: the thread's own stack, not in use.
            let r = unsafe { thread::wprobe_call_on_stack(core::ptr::null_mut(), panics, top) };
            return r as u64;
        }
        SET_FUEL | CALL => {
            let Some(s) = thread::current() else { return 0 };
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
    while !sync::try_lock_bounded(&STORE_LOCK, u32::MAX) {}
    let v: alloc::vec::Vec<u8> = alloc::vec::Vec::new();
    // An index out of bounds: a bug, as far as the agent knows.
    i64::from(v[core::hint::black_box(3)])
}

extern "C" fn bench_inner(arg: *mut u8) -> i64 {
    // SAFETY: `wprobe_agent_bench` passes its `BenchArgs`.
    let b = unsafe { &*(arg as *const BenchArgs) };
    if !sync::try_lock_bounded(&STORE_LOCK, u32::MAX) {
        return 1;
    }
    let r = (|| {
        let a = agent()?;
        let sf = a.sites.get(b.site as usize)?.as_ref()?;
        let fuel = a.programs[sf.program as usize].fuel;
        let d = a.store.data_mut();
        d.env.frame = b.frame;
        d.memory = Some(a.programs[sf.program as usize].memory);
        for _ in 0..b.n {
            let _ = a.store.set_fuel(fuel);
            if b.what == agent_abi::bench::CALL {
                let _ = core::hint::black_box(sf.func.call(&mut a.store, ()));
            }
        }
        a.store.data_mut().env.frame = core::ptr::null_mut();
        Some(())
    })();
    STORE_LOCK.store(0, Ordering::Release);
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
        STORE_LOCK.store(0, Ordering::Release);
        // SAFETY: `h` is the header of the agent stack we run on; its
        // `saved_sp` is the frame of the `wprobe_call_on_stack` that
        // entered it, still live below us on the thread's own stack.
        unsafe { thread::wprobe_abandon_stack(h, AgentError::Dead as i64) }
    }
    // Not on an agent stack: nowhere safe to return to.
    // SAFETY: raises SIGILL, the only way out left.
    unsafe { core::arch::asm!("ud2", options(noreturn)) }
}
