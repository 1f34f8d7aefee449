//! Injected code that a tracer's death at any instruction cannot harm.
//!
//! The agent's loader makes one stopped thread run system calls and calls
//! for it. Were the thread left mid-way with its registers set for an
//! injection, or made to return to an `int3`, a SIGKILL of wprobe would
//! let it go there: the kernel detaches a dead tracer's threads and they
//! run on from where they are (an `int3` then kills the process with
//! SIGTRAP; a `syscall` in the vDSO runs on into the vDSO's code with the
//! injection's registers).
//!
//! So every injection runs through a *cave*: a few hundred bytes at the end
//! of the process's vDSO mapping, beyond the vDSO's ELF image (zeros no
//! code reaches; the tracer's write makes a private copy of the page). The
//! cave's code ends each injection in a harmless system call (`getpid`),
//! at whose entry the tracer (resuming the thread with `PTRACE_SYSCALL`)
//! takes the thread back and puts its registers back. If the tracer is
//! gone, the thread goes on past that `getpid` into code that puts back,
//! by itself, every register as it was when the tracer took it (the FPU
//! and SSE state with `fxrstor`, the flags with `popfq` from the cave, the
//! general registers from immediates; an interrupted system call is
//! restarted as the kernel would have), then jumps to where it was:
//!
//! ```text
//! SYS:        syscall                   ; an injected system call
//!             mov eax, 39 ; syscall     ; the tracer stops it here
//!             jmp RESTORE
//! RET:        mov rdi, rax              ; an injected call returns here
//!             mov eax, 39 ; syscall     ; the tracer stops it here
//! RESTORE_FP: movabs rax, FX ; fxrstor64 [rax]
//! RESTORE:    movabs rsp, FLAGS ; popfq
//!             movabs r, imm64           ; × 16 (rsp last)
//!             jmp [rip + 0] ; .quad rip
//! FLAGS:      .quad rflags
//! ```

use crate::arch::Regs;

/// `getpid`: the system call at which the tracer takes the thread back.
const SYS_GETPID: u32 = 39;
/// `restart_syscall`, for a system call interrupted with
/// `-ERESTART_RESTARTBLOCK`.
const SYS_RESTART_SYSCALL: u64 = 219;

/// Bytes the cave takes at most.
pub(super) const CAVE_BYTES: u64 = 256;

/// Where the cave's entry points and stops are, as offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    /// An injected system call starts here.
    pub(super) sys: u64,
    /// `rip` at the stops of the injected system call (after it).
    pub(super) sys_after: u64,
    /// `rip` at the `getpid` ending a system call's injection.
    pub(super) sys_stop: u64,
    /// An injected call returns here.
    pub(super) ret: u64,
    /// `rip` at the `getpid` ending a call's injection.
    pub(super) ret_stop: u64,
}

/// The cave's code at `base` for a thread whose state when it was taken is
/// `saved`, its FXSAVE image (for the calls) at `fx` (0: none yet).
pub(super) fn code(base: u64, saved: &Regs, fx: u64) -> (Vec<u8>, Layout) {
    let mut c: Vec<u8> = Vec::with_capacity(CAVE_BYTES as usize);
    let getpid = |c: &mut Vec<u8>| {
        c.push(0xb8); // mov eax, imm32
        c.extend_from_slice(&SYS_GETPID.to_le_bytes());
        c.extend_from_slice(&[0x0f, 0x05]); // syscall
    };
    let sys = c.len() as u64;
    c.extend_from_slice(&[0x0f, 0x05]);
    let sys_after = c.len() as u64;
    getpid(&mut c);
    let sys_stop = c.len() as u64;
    // jmp RESTORE (rel32, patched below).
    c.push(0xe9);
    let jmp_at = c.len();
    c.extend_from_slice(&[0; 4]);
    let ret = c.len() as u64;
    c.extend_from_slice(&[0x48, 0x89, 0xc7]); // mov rdi, rax
    getpid(&mut c);
    let ret_stop = c.len() as u64;
    // RESTORE_FP
    c.extend_from_slice(&[0x48, 0xb8]); // movabs rax, imm64
    c.extend_from_slice(&fx.to_le_bytes());
    c.extend_from_slice(&[0x48, 0x0f, 0xae, 0x08]); // fxrstor64 [rax]
    let restore = c.len();
    let rel = (restore - (jmp_at + 4)) as u32;
    c[jmp_at..jmp_at + 4].copy_from_slice(&rel.to_le_bytes());
    // The state to go back to: an interrupted system call restarted, as
    // the kernel restarts it when no signal handler runs.
    let (rax, rip) = resumed(saved);
    // movabs rsp, FLAGS (patched below); popfq
    c.extend_from_slice(&[0x48, 0xbc]);
    let flags_at = c.len();
    c.extend_from_slice(&[0; 8]);
    c.push(0x9d);
    // movabs REG, imm64: (REX, opcode) and value; rsp last.
    let regs: [(u8, u8, u64); 16] = [
        (0x48, 0xb8, rax),
        (0x48, 0xb9, saved.rcx),
        (0x48, 0xba, saved.rdx),
        (0x48, 0xbb, saved.rbx),
        (0x48, 0xbd, saved.rbp),
        (0x48, 0xbe, saved.rsi),
        (0x48, 0xbf, saved.rdi),
        (0x49, 0xb8, saved.r8),
        (0x49, 0xb9, saved.r9),
        (0x49, 0xba, saved.r10),
        (0x49, 0xbb, saved.r11),
        (0x49, 0xbc, saved.r12),
        (0x49, 0xbd, saved.r13),
        (0x49, 0xbe, saved.r14),
        (0x49, 0xbf, saved.r15),
        (0x48, 0xbc, saved.rsp),
    ];
    for (rex, op, v) in regs {
        c.extend_from_slice(&[rex, op]);
        c.extend_from_slice(&v.to_le_bytes());
    }
    // jmp [rip + 0]; .quad rip
    c.extend_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    c.extend_from_slice(&rip.to_le_bytes());
    let flags = base + c.len() as u64;
    // The flags as they were, without the trap flag.
    c.extend_from_slice(&(saved.eflags & !0x100).to_le_bytes());
    c[flags_at..flags_at + 8].copy_from_slice(&flags.to_le_bytes());
    debug_assert!(c.len() as u64 <= CAVE_BYTES);
    (
        c,
        Layout {
            sys,
            sys_after,
            sys_stop,
            ret,
            ret_stop,
        },
    )
}

/// Whether `r` is a thread interrupted in a system call the kernel
/// restarts when no signal handler runs (`-ERESTARTSYS`,
/// `-ERESTARTNOINTR`, `-ERESTARTNOHAND`, `-ERESTART_RESTARTBLOCK`).
fn restarts(r: &Regs) -> bool {
    (r.orig_rax as i64) >= 0 && matches!(r.rax as i64, -512 | -513 | -514 | -516)
}

/// System calls that a stop of their thread (ours: `PTRACE_INTERRUPT`)
/// ends with `EINTR` even when no signal handler runs, where the kernel
/// restarts every other one (signal(7), "Interruption of system calls and
/// library functions by stop signals"): `epoll_wait`, `epoll_pwait`,
/// `epoll_pwait2`, `semop`, `semtimedop`, `rt_sigtimedwait`,
/// `io_getevents`, `io_pgetevents`.
const EINTR_ON_STOP: [u64; 8] = [232, 281, 441, 65, 220, 128, 208, 333];

/// Whether `r`, a thread just stopped by our interrupt, was in a system
/// call that the stop made fail with `EINTR` (the program would see an
/// `EINTR` that untraced it never gets: an event loop's wait ended early).
pub(super) fn failed_by_our_stop(r: &Regs) -> bool {
    (r.orig_rax as i64) >= 0
        && r.rax as i64 == -(libc::EINTR as i64)
        && EINTR_ON_STOP.contains(&r.orig_rax)
}

/// Makes the system call of thread `tid`, which our stop ended with
/// `EINTR` ([`failed_by_our_stop`]), run again when the thread goes on, as
/// the kernel restarts the others (`rip` back to the `syscall`, `rax` its
/// number). A signal held meanwhile is delivered at release and interrupts
/// the new call as it would have the first.
pub(super) fn restart_if_failed_by_our_stop(tid: i32) {
    let mut r = crate::sys::regs::zero_regs();
    if crate::sys::ptrace::getregs(tid, &mut r).is_ok() && failed_by_our_stop(&r) {
        r.rax = r.orig_rax;
        r.rip = r.rip.wrapping_sub(2);
        let _ = crate::sys::ptrace::setregs(tid, &r);
    }
}

/// `rax` and `rip` that resume the thread of `saved` from user space: an
/// interrupted system call runs again (its `syscall` instruction, with its
/// number; `restart_syscall` for `-ERESTART_RESTARTBLOCK`).
fn resumed(saved: &Regs) -> (u64, u64) {
    if restarts(saved) {
        let nr = if saved.rax as i64 == -516 {
            SYS_RESTART_SYSCALL
        } else {
            saved.orig_rax
        };
        (nr, saved.rip.wrapping_sub(2))
    } else {
        (saved.rax, saved.rip)
    }
}

/// The registers to give a thread stopped at a system call's entry so
/// that it goes on as `saved` would have: the interrupted system call is
/// made there (restarted), or none (`orig_rax` −1, `rax` kept).
pub(super) fn at_entry_stop(saved: &Regs) -> Regs {
    let mut r = *saved;
    if restarts(saved) {
        if saved.rax as i64 == -516 {
            r.orig_rax = SYS_RESTART_SYSCALL;
        }
    } else {
        r.orig_rax = u64::MAX;
    }
    r
}

/// Where the cave goes in a vDSO mapping `[start, end)` whose bytes are
/// `image`: the last [`CAVE_BYTES`] of the mapping, when they lie beyond
/// the vDSO's ELF image (its program and section headers and the data they
/// describe) and hold nothing but zeros.
pub(super) fn place(start: u64, image: &[u8]) -> Option<u64> {
    let len = image.len() as u64;
    if len < CAVE_BYTES || image.get(..4) != Some(b"\x7fELF") {
        return None;
    }
    let u16_at = |o: usize| {
        image
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as u64)
    };
    let u64_at = |o: usize| {
        image
            .get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("invariant: 8 bytes")))
    };
    let (phoff, shoff) = (u64_at(0x20)?, u64_at(0x28)?);
    let (phentsize, phnum) = (u16_at(0x36)?, u16_at(0x38)?);
    let (shentsize, shnum) = (u16_at(0x3a)?, u16_at(0x3c)?);
    let mut end = (shoff + shentsize * shnum).max(phoff + phentsize * phnum);
    for i in 0..phnum {
        let p = (phoff + i * phentsize) as usize;
        end = end.max(u64_at(p + 0x08)? + u64_at(p + 0x20)?);
    }
    for i in 0..shnum {
        let s = (shoff + i * shentsize) as usize;
        // SHT_NOBITS (8) occupies no bytes of the image.
        if image.get(s + 4..s + 8) != Some(&8u32.to_le_bytes()) {
            end = end.max(u64_at(s + 0x18)? + u64_at(s + 0x20)?);
        }
    }
    let at = len - CAVE_BYTES;
    let tail = &image[at as usize..];
    // Zeros, or the cave of a wprobe killed while it injected.
    let free = tail.iter().all(|&b| b == 0) || tail.starts_with(&SIGNATURE);
    (at >= end && free).then_some(start + at)
}

/// The cave's first bytes, whatever the thread it was made for: `syscall;
/// mov eax, 39; syscall; jmp`.
const SIGNATURE: [u8; 10] = [0x0f, 0x05, 0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0xe9];

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> Regs {
        let mut r = crate::sys::regs::zero_regs();
        r.rip = 0x401000;
        r.rax = 7;
        r.orig_rax = u64::MAX;
        r.eflags = 0x246 | 0x100;
        r
    }

    /// Only a system call our stop makes fail with `EINTR` is restarted:
    /// not one that restarts by itself, not user code, not another error.
    #[test]
    fn eintr_of_our_stop_is_told_apart() {
        let mut r = regs();
        r.orig_rax = 232; // epoll_wait
        r.rax = (-4i64) as u64;
        assert!(failed_by_our_stop(&r));
        r.rax = (-514i64) as u64; // -ERESTARTNOHAND: the kernel restarts it
        assert!(!failed_by_our_stop(&r));
        r.rax = (-4i64) as u64;
        r.orig_rax = 0; // read: EINTR only with a handler, which then runs
        assert!(!failed_by_our_stop(&r));
        r.orig_rax = u64::MAX; // stopped in user code
        assert!(!failed_by_our_stop(&r));
    }

    /// The cave fits, its stops are where its `syscall`s end, and it
    /// jumps back to the thread's `rip` with its flags minus TF.
    #[test]
    fn the_cave_fits_and_its_stops_follow_its_syscalls() {
        let (c, l) = code(0x7000_0000, &regs(), 0x1000);
        assert!(c.len() as u64 <= CAVE_BYTES, "{}", c.len());
        for stop in [l.sys_after, l.sys_stop, l.ret_stop] {
            assert_eq!(&c[stop as usize - 2..stop as usize], [0x0f, 0x05]);
        }
        assert_eq!(&c[c.len() - 16..c.len() - 8], 0x401000u64.to_le_bytes());
        assert_eq!(&c[c.len() - 8..], 0x246u64.to_le_bytes());
        // The jump to RESTORE lands on `movabs rsp`.
        let rel = u32::from_le_bytes(c[10..14].try_into().unwrap()) as usize;
        assert_eq!(&c[14 + rel..14 + rel + 2], [0x48, 0xbc]);
    }

    /// A thread interrupted in a blocking system call resumes by making it
    /// again; one that was not keeps its `rax` and skips the entry stop's
    /// system call.
    #[test]
    fn an_interrupted_system_call_is_made_again() {
        let mut r = regs();
        r.orig_rax = 0; // read
        r.rax = (-512i64) as u64;
        assert_eq!(resumed(&r), (0, 0x401000 - 2));
        assert_eq!(at_entry_stop(&r).orig_rax, 0);
        r.rax = (-516i64) as u64;
        assert_eq!(resumed(&r), (SYS_RESTART_SYSCALL, 0x401000 - 2));
        assert_eq!(at_entry_stop(&r).orig_rax, SYS_RESTART_SYSCALL);
        // Completed (a real result): not made again.
        r.rax = 5;
        assert_eq!(resumed(&r), (5, 0x401000));
        assert_eq!(at_entry_stop(&r).orig_rax, u64::MAX);
        assert_eq!(resumed(&regs()), (7, 0x401000));
    }

    /// The cave goes at the end of a vDSO image only past its headers and
    /// sections, over zeros.
    #[test]
    fn the_cave_goes_past_the_vdso_image_over_zeros() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps.lines().find(|l| l.ends_with("[vdso]")).unwrap();
        let (a, b) = line
            .split_whitespace()
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let mut image = vec![0u8; (b - a) as usize];
        let f = std::fs::File::open("/proc/self/mem").unwrap();
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut image, a).unwrap();
        assert_eq!(place(a, &image), Some(b - CAVE_BYTES));
        let mut dirty = image.clone();
        let n = dirty.len();
        dirty[n - 1] = 1;
        assert_eq!(place(a, &dirty), None);
        // A cave a killed wprobe left is taken again.
        let (code, _) = code(b - CAVE_BYTES, &regs(), 0);
        let mut left = image.clone();
        left[n - CAVE_BYTES as usize..][..code.len()].copy_from_slice(&code);
        assert_eq!(place(a, &left), Some(b - CAVE_BYTES));
        assert_eq!(place(a, &image[..64]), None);
    }
}
