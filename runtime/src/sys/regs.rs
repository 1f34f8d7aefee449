//! Register files as the kernel lays them out (`user_regs_struct`,
//! `user_fpregs_struct`): the types ptrace reads and writes (which
//! [`crate::arch`] re-exports and reads by register id), zero values to
//! fill, and the FP area as bytes (core files).

/// The general-purpose register set as ptrace returns it.
pub type Regs = libc::user_regs_struct;
/// The FXSAVE-format floating-point register set as ptrace returns it.
pub type FpRegs = libc::user_fpregs_struct;

/// An all-zero general register file.
pub fn zero_regs() -> Regs {
    // SAFETY: user_regs_struct is plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// An all-zero FP/SSE register file.
pub fn zero_fpregs() -> FpRegs {
    // SAFETY: user_fpregs_struct is plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The FXSAVE image of `f` (512 bytes), as the kernel writes NT_FPREGSET.
pub fn fpregs_bytes(f: &FpRegs) -> &[u8] {
    // SAFETY: user_fpregs_struct is plain integers with no padding, live
    // for the borrow, so reading its bytes is sound.
    unsafe {
        std::slice::from_raw_parts(
            (f as *const FpRegs).cast::<u8>(),
            std::mem::size_of::<FpRegs>(),
        )
    }
}
