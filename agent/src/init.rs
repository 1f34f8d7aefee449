//! `wprobe_agent_init`: the control region checked, the control stack
//! mapped, the thread key and the CPU's features found, and the engine,
//! the linker and the one store built.

use agent_abi::{
    AGENT_ABI_VERSION, AgentError, CONTROL_HEADER_SIZE, CTRL_MAGIC, ControlHeader, PROBE_SLOT_SIZE,
    fork_guard, state,
};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use wasmtime::{Config, Engine, Linker, Store, StoreLimitsBuilder};

use crate::control::{CONTROL_BUSY, CONTROL_STACK};
use crate::host::{self, AgentHost, AgentServices, FrameEnv, RunSink};
use crate::{AGENT, Agent, ctrl, err, lock, sys, thread, vdso};

/// The fork-guard page (null: none), checked at every hit: see
/// [`agent_abi::fork_guard`]. A forked child sees it wiped
/// (`MADV_WIPEONFORK`) and stays dormant, unless the tracer follows it.
pub(crate) static FORK_GUARD: AtomicPtr<u64> = AtomicPtr::new(core::ptr::null_mut());
/// The process's id where there is no fork-guard page.
static PID: AtomicU32 = AtomicU32::new(0);

/// Word `i` of the fork-guard page, if there is one.
#[inline(always)]
fn guard_word(i: usize) -> Option<u64> {
    let g = FORK_GUARD.load(Ordering::Relaxed);
    // SAFETY: the fork-guard page is mapped for the life of the process
    // and `i` is one of `agent_abi::fork_guard`'s words, inside it.
    (!g.is_null()).then(|| unsafe { g.add(i).read_volatile() })
}

/// The id of the process the agent runs in: the fork guard's word (a fork
/// child the tracer follows has its own written there), else the one asked
/// of the kernel at init.
#[inline(always)]
pub(crate) fn pid() -> u32 {
    match guard_word(fork_guard::PID_WORD) {
        Some(p) => p as u32,
        None => PID.load(Ordering::Relaxed),
    }
}

/// Whether a hit may be a vfork child's (a vfork was seen, or a call that
/// makes one is under way): then [`vfork_child`] asks the kernel. One
/// load, no system call.
#[inline(always)]
pub(crate) fn vfork_maybe() -> bool {
    let g = FORK_GUARD.load(Ordering::Relaxed);
    if g.is_null() {
        return false;
    }
    // SAFETY: as in `vfork_child`.
    unsafe {
        g.add(fork_guard::VFORK_WORD).read_volatile()
            | g.add(fork_guard::VFORK_CALLS_WORD).read_volatile()
            != 0
    }
}

/// The process a hit runs in, when it is a vfork child of this one (see
/// [`agent_abi::fork_guard::VFORK_WORD`]): its pid, else `None`. One load
/// while no vfork child lives; else the kernel is asked.
#[inline(always)]
pub(crate) fn vfork_child() -> Option<u32> {
    let g = FORK_GUARD.load(Ordering::Relaxed);
    if g.is_null() {
        return None;
    }
    // SAFETY: as in `guard_word`; both are `agent_abi::fork_guard`'s words.
    let (seen, under_way) = unsafe {
        (
            g.add(fork_guard::VFORK_WORD).read_volatile(),
            g.add(fork_guard::VFORK_CALLS_WORD).read_volatile(),
        )
    };
    if seen | under_way == 0 {
        None
    } else {
        vfork_child_slow()
    }
}

/// Counts a call that makes a vfork child entering, or leaving, as site
/// mark `mark` says ([`agent_abi::vfork_mark`]; `rax`: the register at a
/// `ret`). Before anything else of a hit: the child's hits need the count
/// whatever they run. A count never goes below 0 (a call entered before
/// the marks were written leaves without having counted).
#[cold]
#[inline(never)]
pub(crate) fn vfork_mark(mark: u32, rax: u64) {
    use agent_abi::vfork_mark::{ENTER, LEAVE, LEAVE_UNLESS_CHILD};
    use core::sync::atomic::AtomicU64;
    let g = FORK_GUARD.load(Ordering::Relaxed);
    if g.is_null() {
        return;
    }
    // SAFETY: the fork-guard page is mapped for the life of the process,
    // 8-byte aligned, and shared by the threads (and vfork children) that
    // change this word only atomically.
    let count = unsafe { AtomicU64::from_ptr(g.add(fork_guard::VFORK_CALLS_WORD)) };
    match mark {
        ENTER => {
            count.fetch_add(1, Ordering::SeqCst);
        }
        LEAVE | LEAVE_UNLESS_CHILD if mark == LEAVE || rax != 0 => {
            let _ = count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
        _ => {}
    }
}

/// Whether the vfork children counted in the guard page are followed
/// (see [`agent_abi::fork_guard::VFORK_FOLLOWED_WORD`]): when not, their
/// hits run nothing.
#[cold]
pub(crate) fn vfork_followed() -> bool {
    guard_word(fork_guard::VFORK_FOLLOWED_WORD) == Some(1)
}

#[cold]
#[inline(never)]
fn vfork_child_slow() -> Option<u32> {
    // The vfork child shares this memory (the pid word included) but is a
    // process of its own.
    let me = sys::getpid();
    (me != pid()).then_some(me)
}

/// Whether this process registered for `membarrier`'s global expedited
/// barriers (a fork child has not: it never owns the store's bias).
pub(crate) fn registered() -> bool {
    guard_word(fork_guard::REGISTERED_WORD).is_none_or(|w| w == 1)
}

/// Notes that this process registered (see [`registered`]).
pub(crate) fn note_registered() {
    let g = FORK_GUARD.load(Ordering::Relaxed);
    if !g.is_null() {
        // SAFETY: as in `guard_word`; the page is writable.
        unsafe { g.add(fork_guard::REGISTERED_WORD).write_volatile(1) };
    }
}

#[repr(C)]
struct InitArgs {
    ctrl: *mut ControlHeader,
    len: usize,
}

/// The region is another process's agent's (`join`): its header is left
/// as that agent set it.
static JOINED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Sets up the agent around the control region `ctrl..ctrl+len` (filled in
/// by the tracer) and the fork-guard page (may be null). With `join`, the
/// region is in use by the agent of another process (a fork child that
/// executed a program joins its parent's): its header, global variables
/// and bias are left as they are. Returns 0 or an [`AgentError`] code; the
/// message is in the region.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_init(
    ctrl: *mut u8,
    len: usize,
    fork_guard: *mut u8,
    join: usize,
) -> i32 {
    if CONTROL_BUSY.swap(1, Ordering::Acquire) != 0 {
        return AgentError::AlreadyInitialized as i32;
    }
    JOINED.store(join != 0, Ordering::Relaxed);
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
    if !JOINED.load(Ordering::Relaxed) {
        cref.agent_base.store(
            wprobe_agent_init as *const () as usize as u64,
            Ordering::Relaxed,
        );
    }
    let Some(top) = thread::map_stack(core::ptr::null_mut()) else {
        return err(AgentError::NoMemory, format_args!("no control stack")) as i32;
    };
    CONTROL_STACK.store(top as u64, Ordering::Relaxed);
    PID.store(sys::getpid(), Ordering::Relaxed);
    if !guard.is_null() {
        // SAFETY: the tracer's fork-guard page, writable; its magic is
        // written only once the agent is ready.
        unsafe {
            guard
                .add(fork_guard::PID_WORD)
                .write_volatile(sys::getpid().into())
        };
        FORK_GUARD.store(guard, Ordering::Release);
    }
    let mut a = InitArgs { ctrl: c, len };
    // SAFETY: a fresh agent stack; `init_inner` takes `InitArgs`.
    let r = unsafe {
        thread::wprobe_call_on_stack(&mut a as *mut InitArgs as *mut u8, init_inner, top)
    };
    if r == 0 {
        if !guard.is_null() {
            // SAFETY: the tracer's fork-guard page, writable.
            unsafe {
                guard
                    .add(fork_guard::MAGIC_WORD)
                    .write_volatile(fork_guard::MAGIC)
            };
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
    let mut auxv = [0u8; 1024];
    let n = sys::read_file(c"/proc/self/auxv", &mut auxv).unwrap_or(0);
    vdso::init(&auxv[..n]);
    let (mode, off) = thread::init_keys(&auxv[..n]);
    let joined = JOINED.load(Ordering::Relaxed);
    if let Some(c) = ctrl::get().filter(|_| !joined) {
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
    if let Some(c) = ctrl::get().filter(|_| !joined) {
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
