//! The kernel's vDSO `clock_gettime`, found without libc: the vDSO's ELF
//! image (its address is `AT_SYSINFO_EHDR` in the auxiliary vector) is
//! walked through `PT_DYNAMIC` to its symbol table (`DT_SYMTAB`,
//! `DT_STRTAB`, and the symbol count from `DT_HASH`), as musl's
//! `__vdsosym` does. A wall-clock read then costs tens of nanoseconds
//! instead of a system call. Without a usable vDSO the system call is used.

use crate::sys;
use core::sync::atomic::{AtomicUsize, Ordering};

/// `AT_SYSINFO_EHDR`.
const AT_SYSINFO_EHDR: u64 = 33;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: i64 = 0;
const DT_HASH: i64 = 4;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;

type ClockGettime = unsafe extern "C" fn(clock: usize, ts: *mut [i64; 2]) -> i32;

/// The vDSO's `__vdso_clock_gettime`, or 0.
static CLOCK_GETTIME: AtomicUsize = AtomicUsize::new(0);

/// Finds `__vdso_clock_gettime` from the auxiliary vector `auxv` (raw
/// `/proc/self/auxv` bytes).
pub fn init(auxv: &[u8]) {
    let base = auxv.chunks_exact(16).find_map(|e| {
        let k = u64::from_le_bytes(e[..8].try_into().ok()?);
        let v = u64::from_le_bytes(e[8..].try_into().ok()?);
        (k == AT_SYSINFO_EHDR && v != 0).then_some(v as usize)
    });
    if let Some(base) = base {
        // SAFETY: the kernel maps the vDSO image at AT_SYSINFO_EHDR for the
        // life of the process (readable); `lookup` reads only inside the
        // structures the image's own headers describe.
        if let Some(f) = unsafe { lookup(base, b"__vdso_clock_gettime") } {
            CLOCK_GETTIME.store(f, Ordering::Release);
        }
    }
}

/// `clock_gettime(clock)` in ns: through the vDSO when there is one.
#[inline]
pub fn clock_ns(clock: usize) -> u64 {
    let f = CLOCK_GETTIME.load(Ordering::Relaxed);
    if f == 0 {
        return sys::clock_ns(clock);
    }
    let mut ts = [0i64; 2];
    // SAFETY: `f` is the vDSO's clock_gettime (C ABI), given a writable
    // timespec; it uses neither TLS nor much stack.
    let r = unsafe { core::mem::transmute::<usize, ClockGettime>(f)(clock, &mut ts) };
    if r != 0 {
        return sys::clock_ns(clock);
    }
    (ts[0] as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts[1] as u64)
}

/// Reads a `T` at `p`.
///
/// # Safety
/// `p` must be readable for `size_of::<T>()` bytes.
unsafe fn rd<T: Copy>(p: usize) -> T {
    // SAFETY: the caller's contract; the vDSO is not necessarily aligned
    // for every field, so read unaligned.
    unsafe { (p as *const T).read_unaligned() }
}

/// The address of the vDSO symbol `name` (a defined function), or `None`.
///
/// # Safety
/// `base` must be the address of the mapped vDSO image.
unsafe fn lookup(base: usize, name: &[u8]) -> Option<usize> {
    // SAFETY: `base` is the mapped vDSO image (the caller's contract), which
    // the kernel provides well formed; every read below is inside it, at
    // offsets its ELF header, program headers and dynamic section give.
    unsafe {
        if rd::<[u8; 4]>(base) != *b"\x7fELF" || rd::<u8>(base + 4) != 2 {
            return None;
        }
        let phoff = rd::<u64>(base + 0x20) as usize;
        let phentsize = rd::<u16>(base + 0x36) as usize;
        let phnum = rd::<u16>(base + 0x38) as usize;
        let mut bias = None;
        let mut dynamic = None;
        for i in 0..phnum {
            let ph = base + phoff + i * phentsize;
            let ty = rd::<u32>(ph);
            let offset = rd::<u64>(ph + 8) as usize;
            let vaddr = rd::<u64>(ph + 16) as usize;
            if ty == PT_LOAD && bias.is_none() {
                bias = Some(base.wrapping_add(offset).wrapping_sub(vaddr));
            } else if ty == PT_DYNAMIC {
                dynamic = Some(vaddr);
            }
        }
        let bias = bias?;
        let mut d = bias.wrapping_add(dynamic?);
        let (mut hash, mut strtab, mut symtab) = (0usize, 0usize, 0usize);
        loop {
            let tag = rd::<i64>(d);
            let val = rd::<u64>(d + 8) as usize;
            match tag {
                DT_NULL => break,
                DT_HASH => hash = bias.wrapping_add(val),
                DT_STRTAB => strtab = bias.wrapping_add(val),
                DT_SYMTAB => symtab = bias.wrapping_add(val),
                _ => {}
            }
            d += 16;
        }
        if hash == 0 || strtab == 0 || symtab == 0 {
            return None;
        }
        let nsyms = rd::<u32>(hash + 4) as usize;
        for i in 0..nsyms {
            let s = symtab + 24 * i;
            let st_name = rd::<u32>(s) as usize;
            let st_info = rd::<u8>(s + 4);
            let st_shndx = rd::<u16>(s + 6);
            let st_value = rd::<u64>(s + 8) as usize;
            // A defined function (STT_FUNC = 2).
            if st_info & 0xf != 2 || st_shndx == 0 {
                continue;
            }
            let n = strtab + st_name;
            let mut same = true;
            for (k, &c) in name.iter().enumerate() {
                if rd::<u8>(n + k) != c {
                    same = false;
                    break;
                }
            }
            if same && rd::<u8>(n + name.len()) == 0 {
                return Some(bias.wrapping_add(st_value));
            }
        }
        None
    }
}

/// CLOCK_REALTIME in ns at the TSC value `tsc`, read by the caller (a hit
/// reads the TSC once, for its heartbeat check and its time): from the TSC
/// when the tracer publishes its rate (an invariant TSC;
/// `ControlHeader::clock_*`, re-anchored with each heartbeat), else from
/// the vDSO (now). A few loads instead of the vDSO's clock read (in a VM,
/// a third of a stub's cost).
#[inline]
pub fn wall_ns_at(tsc: u64) -> u64 {
    if let Some(c) = crate::ctrl::get()
        && let Some(ns) = tsc_wall_ns(c, tsc)
    {
        return ns;
    }
    clock_ns(crate::sys::CLOCK_REALTIME)
}

/// CLOCK_REALTIME in ns at `tsc` from the rate the tracer publishes;
/// `None` when it publishes none, or was rewriting it at each of a few
/// looks. A few loads and a multiplication (no vector register: the fast
/// path's, see `crate::fast`).
#[inline(always)]
pub fn tsc_wall_ns(c: &agent_abi::ControlHeader, tsc: u64) -> Option<u64> {
    use core::sync::atomic::Ordering;
    for _ in 0..4 {
        let s1 = c.clock_seq.load(Ordering::Acquire);
        let mult = c.clock_mult.load(Ordering::Relaxed);
        if mult == 0 {
            return None;
        }
        let tsc0 = c.clock_tsc.load(Ordering::Relaxed);
        let ns0 = c.clock_ns.load(Ordering::Relaxed);
        core::sync::atomic::fence(Ordering::Acquire);
        if s1 & 1 == 0 && c.clock_seq.load(Ordering::Relaxed) == s1 {
            let dt = tsc.wrapping_sub(tsc0) as i64;
            let d = ((i128::from(dt) * i128::from(mult)) >> 32) as i64;
            return Some(ns0.wrapping_add(d as u64));
        }
    }
    None
}
