//! The C memory functions the compiler and `core` call (`memcpy`, …): there
//! is no libc to provide them, and the Rust toolchain's prebuilt
//! `compiler_builtins` for x86_64-unknown-linux-gnu leaves them to libc.
//! String instructions keep them short and immune to the compiler turning
//! a copy loop back into a call to themselves. No SSE/AVX: they never touch
//! the vector registers of the probed code.

use core::arch::asm;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller passes valid, non-overlapping ranges of `n` bytes;
    // each case below reads and writes inside them (overlapping moves of
    // the first and last words). DF is clear (SysV ABI at every call; the
    // stubs clear it before calling the agent).
    unsafe {
        // Records are a few words: `rep movsb` costs tens of cycles to
        // start, general-purpose moves a few.
        if n <= 32 {
            if n >= 16 {
                asm!("mov {a}, [{s}]", "mov {b}, [{s} + 8]",
                     "mov {c}, [{s} + {n} - 16]", "mov {d}, [{s} + {n} - 8]",
                     "mov [{t}], {a}", "mov [{t} + 8], {b}",
                     "mov [{t} + {n} - 16], {c}", "mov [{t} + {n} - 8], {d}",
                     s = in(reg) src, t = in(reg) dst, n = in(reg) n,
                     a = out(reg) _, b = out(reg) _, c = out(reg) _, d = out(reg) _,
                     options(nostack, preserves_flags));
            } else if n >= 8 {
                asm!("mov {a}, [{s}]", "mov {b}, [{s} + {n} - 8]",
                     "mov [{t}], {a}", "mov [{t} + {n} - 8], {b}",
                     s = in(reg) src, t = in(reg) dst, n = in(reg) n,
                     a = out(reg) _, b = out(reg) _,
                     options(nostack, preserves_flags));
            } else if n >= 4 {
                asm!("mov {a:e}, [{s}]", "mov {b:e}, [{s} + {n} - 4]",
                     "mov [{t}], {a:e}", "mov [{t} + {n} - 4], {b:e}",
                     s = in(reg) src, t = in(reg) dst, n = in(reg) n,
                     a = out(reg) _, b = out(reg) _,
                     options(nostack, preserves_flags));
            } else if n != 0 {
                asm!("mov {a:l}, [{s}]", "mov {b:l}, [{s} + {h}]", "mov {c:l}, [{s} + {n} - 1]",
                     "mov [{t}], {a:l}", "mov [{t} + {h}], {b:l}", "mov [{t} + {n} - 1], {c:l}",
                     s = in(reg) src, t = in(reg) dst, n = in(reg) n, h = in(reg) n / 2,
                     a = out(reg_abcd) _, b = out(reg_abcd) _, c = out(reg_abcd) _,
                     options(nostack, preserves_flags));
            }
            return dst;
        }
        if n <= 256 {
            // A run's ring entry: words, then the last word (overlapping).
            asm!("2:",
                 "mov {w}, [{s} + {i}]", "mov [{t} + {i}], {w}",
                 "add {i}, 8", "cmp {i}, {e}", "jb 2b",
                 "mov {w}, [{s} + {e}]", "mov [{t} + {e}], {w}",
                 s = in(reg) src, t = in(reg) dst, e = in(reg) n - 8,
                 i = inout(reg) 0usize => _, w = out(reg) _,
                 options(nostack));
            return dst;
        }
        asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _,
             options(nostack, preserves_flags));
    }
    dst
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize).wrapping_sub(src as usize) >= n {
        // No overlap, or the destination is below the source: forward.
        // SAFETY: as memcpy; forward copying is correct for dst < src.
        unsafe {
            asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _,
                 options(nostack, preserves_flags));
        }
    } else {
        // The destination overlaps the source from above: backward.
        // SAFETY: as above; DF is set for the copy only.
        unsafe {
            asm!("std", "rep movsb", "cld",
                 inout("rcx") n => _,
                 inout("rdi") dst.add(n).wrapping_sub(1) => _,
                 inout("rsi") src.add(n).wrapping_sub(1) => _,
                 options(nostack));
        }
    }
    dst
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller passes a valid range.
    unsafe {
        asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _, in("al") c as u8,
             options(nostack, preserves_flags));
    }
    dst
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: the caller passes valid ranges of `n` bytes; volatile
        // reads keep the loop from being recognised as a memcmp idiom.
        let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract.
    unsafe { memcmp(a, b, n) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: the caller passes a NUL-terminated string.
    while unsafe { s.add(n).read_volatile() } != 0 {
        n += 1;
    }
    n
}

// The Rust toolchain's prebuilt `core`/`alloc` are compiled with
// `panic=unwind`, so their landing pads name these two symbols. The agent
// never unwinds (its panic handler returns through `wprobe_abandon_stack`),
// so neither is ever called; they only have to exist.

#[unsafe(no_mangle)]
pub extern "C" fn _Unwind_Resume(_exception: *mut u8) -> ! {
    // SAFETY: unreachable; SIGILL if it ever is reached.
    unsafe { asm!("ud2", options(noreturn)) }
}

#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}
