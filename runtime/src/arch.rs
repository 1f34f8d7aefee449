//! Architecture specifics of the traced process, cranelift-isa style: one
//! module per architecture, re-exported here. Knows register layouts, the PC
//! after a breakpoint trap, debug registers and instruction decoding for
//! step-over; never performs a system call itself.

#[cfg(target_arch = "x86_64")]
pub mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use x86_64::*;
