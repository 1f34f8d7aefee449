//! Per-thread state without TLS of our own: a slot table keyed by the
//! thread pointer (`fs_base`, read with `rdfsbase`), and a per-thread agent
//! stack on which all agent code runs. Agent stacks are `STACK_SIZE`-aligned
//! with a header in their top 64 bytes, so any agent code finds its thread's
//! header (and wasmtime's TLS words) from `rsp` alone.
//!
//! Thread reuse: glibc reuses a dead thread's TCB for a new thread, so a
//! slot found by `fs_base` may be stale. At `init` the agent finds the
//! offset of the cached tid in the TCB (glibc's `struct pthread::tid`, 0x2d0
//! on glibc 2.36 x86-64; musl likewise) by matching `gettid()`. Each new
//! slot checks, through the kernel (no fault possible), that its TCB holds
//! its tid there; hits of such a slot then compare one load against the
//! slot's tid. For other threads (no libc TCB), each hit asks the kernel.

use crate::sys;
use agent_abi::thread_key;
use core::arch::global_asm;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Size and alignment of an agent stack (guard page included). wasmtime's
/// `max_wasm_stack` (256 KiB) plus the host side's own frames fit well.
pub const STACK_SIZE: usize = 1 << 20;
const PAGE: usize = 4096;
/// Size of the header at the top of an agent stack.
pub const HEADER_SIZE: usize = 64;
const STACK_MAGIC: u64 = u64::from_le_bytes(*b"WPRBSTK1");

/// The header in the top 64 bytes of an agent stack.
#[repr(C)]
pub struct StackHeader {
    /// [`STACK_MAGIC`].
    pub magic: u64,
    /// The slot owning the stack (null for the control stack).
    pub slot: *mut Slot,
    /// RSP of the caller of `wprobe_call_on_stack`, after its pushes.
    pub saved_sp: u64,
    /// wasmtime's TLS words (`wasmtime_tls_get/set`).
    pub tls: [*mut u8; 2],
    /// Spare.
    pub _spare: [u64; 3],
}

const _: () = assert!(core::mem::size_of::<StackHeader>() == HEADER_SIZE);

/// Number of thread slots (power of two).
pub const SLOTS: usize = 4096;

/// A thread's slot. Claimed once by CAS on `key`; afterwards only its own
/// thread touches it (a reused TCB re-initialises it), or its vfork child
/// while the thread is suspended in `vfork` (same thread pointer).
#[repr(C, align(64))]
pub struct Slot {
    /// Thread key (`fs_base`, or `tid << 1 | 1` for a thread without one); 0 = free.
    pub key: AtomicU64,
    /// The thread's tid.
    pub tid: AtomicU32,
    /// 1 while the thread runs agent code (reentrancy guard).
    pub busy: AtomicU32,
    /// 1 when the TCB at `key` was seen (fault-free) to cache the thread's
    /// tid at `TCB_TID_OFF`: hits then check thread reuse with one load;
    /// otherwise each hit asks the kernel.
    pub tcb_ok: AtomicU32,
    /// Header address (= initial RSP) of its agent stack; 0 until allocated.
    pub stack: AtomicUsize,
    /// Its stack of tracked calls (`crate::calls::Shadow`); 0 until the
    /// thread first enters a return-probed function.
    pub shadow: AtomicUsize,
    /// The stack of tracked calls of the thread's vfork child, while one
    /// runs on its memory and thread pointer (the thread itself is
    /// suspended in `vfork` meanwhile, its own calls kept in `shadow`); 0
    /// until its first vfork child enters a return-probed function.
    pub vfork_shadow: AtomicUsize,
    /// Hits of this thread before its next heartbeat check (the
    /// dispatcher's; touched by this thread alone).
    pub beat_skip: AtomicU32,
    /// The tid of the thread's vfork child while it runs agent code (its
    /// reentrancy guard; `busy` stays the thread's own).
    pub vfork_busy: AtomicU32,
}

// One cache line per slot, vfork child's words included.
const _: () = assert!(core::mem::size_of::<Slot>() == 64);

#[allow(clippy::declare_interior_mutable_const, reason = "array initialiser")]
const FREE: Slot = Slot {
    key: AtomicU64::new(0),
    tid: AtomicU32::new(0),
    busy: AtomicU32::new(0),
    tcb_ok: AtomicU32::new(0),
    stack: AtomicUsize::new(0),
    shadow: AtomicUsize::new(0),
    vfork_shadow: AtomicUsize::new(0),
    beat_skip: AtomicU32::new(0),
    vfork_busy: AtomicU32::new(0),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];

/// How threads are keyed ([`thread_key`]); set at init.
pub static KEY_MODE: AtomicU32 = AtomicU32::new(thread_key::ARCH_PRCTL);
/// Offset of the cached tid in the TCB, or `u32::MAX` when not trusted.
pub static TCB_TID_OFF: AtomicU32 = AtomicU32::new(u32::MAX);

/// The current thread's pointer (`fs_base`).
#[inline(always)]
pub fn fs_base() -> u64 {
    if KEY_MODE.load(Ordering::Relaxed) == thread_key::RDFSBASE {
        sys::rdfsbase()
    } else {
        sys::arch_get(sys::ARCH_GET_FS)
    }
}

/// The current thread's `gs_base`.
pub fn gs_base() -> u64 {
    if KEY_MODE.load(Ordering::Relaxed) == thread_key::RDFSBASE {
        sys::rdgsbase()
    } else {
        sys::arch_get(sys::ARCH_GET_GS)
    }
}

/// Chooses the thread key mode from `AT_HWCAP2` (in `auxv`, the raw
/// auxiliary vector) and finds the TCB's tid offset on the calling thread.
pub fn init_keys(auxv: &[u8]) -> (u32, u32) {
    let mut hwcap2 = 0u64;
    for e in auxv.chunks_exact(16) {
        let k = u64::from_le_bytes(e[..8].try_into().unwrap_or_default());
        let v = u64::from_le_bytes(e[8..].try_into().unwrap_or_default());
        if k == 26 {
            hwcap2 = v; // AT_HWCAP2
        }
    }
    // HWCAP2_FSGSBASE: the kernel lets user space use RD/WR{FS,GS}BASE.
    let mode = if hwcap2 & 2 != 0 {
        thread_key::RDFSBASE
    } else {
        thread_key::ARCH_PRCTL
    };
    KEY_MODE.store(mode, Ordering::Relaxed);
    discover_tcb_tid(fs_base());
    (mode, TCB_TID_OFF.load(Ordering::Relaxed))
}

/// Set once the TCB's tid offset was looked for on a thread with a thread
/// pointer (at `init`, or at the first hit of a static executable, whose
/// libc sets its thread pointer up after the entry point where the agent
/// was loaded).
static TCB_PROBED: AtomicU32 = AtomicU32::new(0);

/// Finds the offset of the cached tid in the TCB at `fs` (the calling
/// thread's), read through the kernel (no fault possible), once.
fn discover_tcb_tid(fs: u64) {
    if fs == 0 || TCB_PROBED.swap(1, Ordering::AcqRel) != 0 {
        return;
    }
    let tid = sys::gettid();
    // The first 4 KiB of the TCB, a chunk at a time: this runs on the
    // probed thread's stack (see `current`).
    let mut chunk = [0u8; 128];
    for base in (0..4096).step_by(chunk.len()) {
        let got = sys::vm_read(fs + base as u64, chunk.as_mut_ptr(), chunk.len());
        // Skip the first words (self pointers, dtv): the tid is a later field.
        let from = if base == 0 { 16 } else { 0 };
        for o in (from..got.saturating_sub(3)).step_by(4) {
            if u32::from_le_bytes(chunk[o..o + 4].try_into().unwrap_or_default()) == tid {
                TCB_TID_OFF.store((base + o) as u32, Ordering::Release);
                return;
            }
        }
        if got < chunk.len() {
            return;
        }
    }
}

/// Whether the TCB at `fs` holds `tid` at the offset found at init, read
/// through the kernel (a thread pointer that is not a libc TCB, or a short
/// one, cannot fault us).
fn tcb_holds(fs: u64, tid: u32) -> bool {
    let off = TCB_TID_OFF.load(Ordering::Relaxed);
    if off == u32::MAX || fs == 0 {
        return false;
    }
    let mut b = [0u8; 4];
    sys::vm_read(fs + u64::from(off), b.as_mut_ptr(), 4) == 4 && u32::from_le_bytes(b) == tid
}

#[inline(always)]
fn hash(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}

/// The current thread's slot, with an agent stack, creating both if needed,
/// and its thread pointer. `None` when the table is full or no stack can be
/// mapped.
///
/// Runs on the probed thread's own stack (before the switch to the agent
/// stack), like the rest of `wprobe_agent_dispatch`'s prologue: its frame
/// counts in `agent_loader::stub::STACK_FOOTPRINT`, so nothing here (or in
/// the slow path) keeps a large buffer on the stack.
#[inline(always)]
pub fn current() -> Option<(&'static Slot, u64)> {
    let fs = fs_base();
    if fs != 0 {
        // The common case: a libc thread found at its hash, its TCB known.
        let s = &TABLE[hash(fs)];
        if s.key.load(Ordering::Acquire) == fs
            && s.tcb_ok.load(Ordering::Relaxed) != 0
            && s.stack.load(Ordering::Relaxed) != 0
        {
            let off = TCB_TID_OFF.load(Ordering::Relaxed);
            // SAFETY: this thread's TCB (its thread pointer is `fs`),
            // checked readable at this offset when the slot was made; a TCB
            // at a given address has the same layout.
            let tid = unsafe { ((fs + u64::from(off)) as *const u32).read_volatile() };
            if s.tid.load(Ordering::Relaxed) != tid {
                // A new thread on a reused TCB: same slot, same stack.
                s.tid.store(tid, Ordering::Relaxed);
            }
            return Some((s, fs));
        }
    }
    current_slow(fs)
}

/// The current thread's slot when [`current`] would find it at once (a
/// libc thread at its hash, its TCB known, its tid unchanged), else
/// `None` (the fast path then leaves the hit to `dispatch`). Uses no
/// vector register (see `crate::fast`).
#[inline(always)]
pub fn existing() -> Option<&'static Slot> {
    let fs = fs_base();
    if fs == 0 {
        return None;
    }
    let s = &TABLE[hash(fs)];
    if s.key.load(Ordering::Acquire) != fs
        || s.tcb_ok.load(Ordering::Relaxed) == 0
        || s.stack.load(Ordering::Relaxed) == 0
    {
        return None;
    }
    let off = TCB_TID_OFF.load(Ordering::Relaxed);
    // SAFETY: as in `current`.
    let tid = unsafe { ((fs + u64::from(off)) as *const u32).read_volatile() };
    (s.tid.load(Ordering::Relaxed) == tid).then_some(s)
}

/// [`current`] for a thread without a libc TCB, a slot found after a
/// collision, or a thread's first hit (its slot and stack are made).
#[cold]
#[inline(never)]
fn current_slow(fs: u64) -> Option<(&'static Slot, u64)> {
    let key = if fs != 0 {
        fs
    } else {
        (u64::from(sys::gettid()) << 1) | 1
    };
    let mut i = hash(key);
    for _ in 0..SLOTS {
        let s = &TABLE[i];
        let k = s.key.load(Ordering::Acquire);
        if k == key {
            let tid = if s.tcb_ok.load(Ordering::Relaxed) != 0 {
                let off = TCB_TID_OFF.load(Ordering::Relaxed);
                // SAFETY: as in `current`.
                unsafe { ((fs + u64::from(off)) as *const u32).read_volatile() }
            } else {
                sys::gettid()
            };
            if s.tid.load(Ordering::Relaxed) != tid {
                // A new thread on a reused TCB: same slot, same stack.
                s.tid.store(tid, Ordering::Relaxed);
            }
            if s.stack.load(Ordering::Relaxed) == 0 {
                return new_stack(s).map(|s| (s, fs));
            }
            return Some((s, fs));
        }
        if k == 0
            && s.key
                .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let tid = sys::gettid();
            s.tid.store(tid, Ordering::Relaxed);
            discover_tcb_tid(fs);
            s.tcb_ok
                .store(u32::from(tcb_holds(fs, tid)), Ordering::Relaxed);
            crate::ctrl::stats(|st| st.threads.fetch_add(1, Ordering::Relaxed));
            return new_stack(s).map(|s| (s, fs));
        }
        i = (i + 1) & (SLOTS - 1);
    }
    None
}

fn new_stack(s: &'static Slot) -> Option<&'static Slot> {
    let top = map_stack(s as *const Slot as *mut Slot)?;
    s.stack.store(top, Ordering::Release);
    Some(s)
}

/// Maps a `STACK_SIZE`-aligned stack with a guard page at the bottom and a
/// header at the top; returns the header address (the initial RSP).
pub fn map_stack(slot: *mut Slot) -> Option<usize> {
    let raw = sys::mmap(
        0,
        2 * STACK_SIZE,
        0,
        sys::MAP_PRIVATE | sys::MAP_ANONYMOUS | sys::MAP_NORESERVE,
    )
    .ok()? as usize;
    let base = (raw + STACK_SIZE - 1) & !(STACK_SIZE - 1);
    // SAFETY: trimming our own reservation to the aligned window, then
    // opening all but its lowest page.
    unsafe {
        if base > raw {
            sys::munmap(raw as *mut u8, base - raw);
        }
        let end = raw + 2 * STACK_SIZE;
        if end > base + STACK_SIZE {
            sys::munmap((base + STACK_SIZE) as *mut u8, end - base - STACK_SIZE);
        }
        if sys::mprotect(
            (base + PAGE) as *mut u8,
            STACK_SIZE - PAGE,
            sys::PROT_READ | sys::PROT_WRITE,
        ) != 0
        {
            sys::munmap(base as *mut u8, STACK_SIZE);
            return None;
        }
        let h = (base + STACK_SIZE - HEADER_SIZE) as *mut StackHeader;
        h.write(StackHeader {
            magic: STACK_MAGIC,
            slot,
            saved_sp: 0,
            tls: [core::ptr::null_mut(); 2],
            _spare: [0; 3],
        });
        Some(h as usize)
    }
}

#[inline(always)]
fn computed_header() -> *mut StackHeader {
    let sp: usize;
    // SAFETY: reads RSP.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    ((sp & !(STACK_SIZE - 1)) + STACK_SIZE - HEADER_SIZE) as *mut StackHeader
}

/// The header of the agent stack the caller runs on. Only for code that
/// runs on an agent stack (wasmtime and everything below the entry points,
/// which switch stacks first): there the header is mapped.
#[inline(always)]
pub fn header() -> Option<*mut StackHeader> {
    let h = computed_header();
    // SAFETY: see above.
    if unsafe { (*h).magic } == STACK_MAGIC {
        Some(h)
    } else {
        None
    }
}

/// [`header`] for code that may run anywhere (the panic handler): the
/// magic is read through the kernel, so a foreign stack cannot fault us.
pub fn header_checked() -> Option<*mut StackHeader> {
    let h = computed_header();
    let mut m = [0u8; 8];
    (sys::vm_read(h as u64, m.as_mut_ptr(), 8) == 8 && u64::from_le_bytes(m) == STACK_MAGIC)
        .then_some(h)
}

unsafe extern "C" {
    /// Runs `f(arg)` on the stack whose header (initial RSP, 16-aligned) is
    /// `top`; returns its result. Saves the callee-saved registers on the
    /// caller's stack so that [`wprobe_abandon_stack`] can return from here.
    pub fn wprobe_call_on_stack(arg: *mut u8, f: extern "C" fn(*mut u8) -> i64, top: usize) -> i64;
    /// Returns `value` from the `wprobe_call_on_stack` that entered the stack
    /// whose header is `header`, abandoning everything above it.
    pub fn wprobe_abandon_stack(header: *mut StackHeader, value: i64) -> !;
}

global_asm!(
    ".globl wprobe_call_on_stack",
    ".hidden wprobe_call_on_stack",
    ".type wprobe_call_on_stack,@function",
    "wprobe_call_on_stack:",
    "push rbp",
    "push rbx",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "mov [rdx + 16], rsp",
    "mov rsp, rdx",
    "call rsi",
    "mov rsp, [rsp + 16]",
    // The return, also of `wprobe_abandon_stack`: the caller's stack and
    // callee-saved registers as the pushes above saved them.
    ".Lwprobe_call_on_stack_return:",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbx",
    "pop rbp",
    "ret",
    ".size wprobe_call_on_stack, . - wprobe_call_on_stack",
    "",
    ".globl wprobe_abandon_stack",
    ".hidden wprobe_abandon_stack",
    ".type wprobe_abandon_stack,@function",
    "wprobe_abandon_stack:",
    "mov rax, rsi",
    "mov rsp, [rdi + 16]",
    "jmp .Lwprobe_call_on_stack_return",
    ".size wprobe_abandon_stack, . - wprobe_abandon_stack",
);

/// wasmtime's TLS, one pair of words per agent stack. Code that is not on
/// an agent stack (never expected) gets a process-wide fallback pair.
static FALLBACK_TLS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_tls_get(slot: usize) -> *mut u8 {
    let i = slot & 1;
    match header() {
        // SAFETY: our own stack's header.
        Some(h) => unsafe { (*h).tls[i] },
        None => FALLBACK_TLS[i].load(Ordering::Relaxed) as *mut u8,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_tls_set(slot: usize, v: *mut u8) {
    let i = slot & 1;
    match header() {
        // SAFETY: our own stack's header.
        Some(h) => unsafe { (*h).tls[i] = v },
        None => FALLBACK_TLS[i].store(v as usize, Ordering::Relaxed),
    }
}
