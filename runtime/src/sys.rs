//! The system-call layer: every call into the kernel that Rust cannot make
//! safe by itself (`ptrace`, `fork`/`exec`, `process_vm_*`, `waitpid`,
//! `mount`, `poll`, `ioctl`, `pidfd_open`, signals) sits behind a safe
//! wrapper here, each `unsafe` block with a `SAFETY:` comment checkable by
//! local reasoning (the crate denies `unsafe` everywhere else but for the
//! module cache's `Module::deserialize`). The wrappers keep no state and
//! retry nothing but `EINTR`; each returns `Err(Errno)` as the kernel
//! reported it, and the callers decide what it means (`ESRCH` is "thread
//! gone", never fatal, in the transports).

pub mod alloc;
pub mod mem;
pub mod process;
pub mod ptrace;
pub mod regs;
pub mod time;
