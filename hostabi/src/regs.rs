//! x86-64 register ids (spec §13.1): the operand encoding of `push r` /
//! `pop r` and the `reg` argument of the `read_reg` / `write_reg` imports.

/// A register of the table: id, name, width and access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegInfo {
    /// The register id (operand encoding).
    pub id: u16,
    /// Lower-case name as written in RPN sources.
    pub name: &'static str,
    /// Width in bits (0 for the special `cpuid`).
    pub width: u16,
    /// `pop r` may write it.
    pub writable: bool,
}

impl RegInfo {
    /// Number of stack elements a `push r` of this register produces (2 for
    /// 80- and 128-bit registers, high part pushed first).
    pub const fn parts(&self) -> u8 {
        if self.width > 64 { 2 } else { 1 }
    }

    /// Whether this is a 32-bit alias (`eax` …) of a 64-bit register.
    pub const fn is_alias(&self) -> bool {
        self.id >= ALIAS_BASE
    }

    /// For an alias, the id of the 64-bit register it names.
    pub const fn base_id(&self) -> u16 {
        if self.is_alias() {
            self.id - ALIAS_BASE
        } else {
            self.id
        }
    }
}

/// Alias ids are `ALIAS_BASE + id of the 64-bit register`.
pub const ALIAS_BASE: u16 = 0x100;

/// Id of `cpuid`, the special register whose `push` executes CPUID (§13.3).
pub const CPUID: u16 = 0x3C;
/// Id of `rax` (the return value of a call).
pub const RAX: u16 = 0x06;
/// Id of `rcx` (fourth argument).
pub const RCX: u16 = 0x08;
/// Id of `rdx` (third argument; high half of a 128-bit return value).
pub const RDX: u16 = 0x09;
/// Id of `rdi` (first argument).
pub const RDI: u16 = 0x0A;
/// Id of `rsi` (second argument).
pub const RSI: u16 = 0x0B;
/// Id of `rip`.
pub const RIP: u16 = 0x0D;
/// Id of `rsp`.
pub const RSP: u16 = 0x0E;
/// Id of `r8` (fifth argument).
pub const R8: u16 = 0x10;
/// Id of `r9` (sixth argument).
pub const R9: u16 = 0x11;

/// The registers whose values at the entry of a call the handler of a
/// return probe can read (`entry_reg`, RPN `push entry, R`): the six
/// integer argument registers of the System V x86-64 calling convention,
/// in argument order, then `rsp` (which at the entry points at the return
/// address). Only these are kept per tracked call: the other registers
/// hold nothing the callee is given, and keeping few bounds what the
/// runtime stores per live call.
pub const ENTRY_REGS: [u16; 7] = [RDI, RSI, RDX, RCX, R8, R9, RSP];

/// Position of `id` in [`ENTRY_REGS`], if it is an entry register.
pub fn entry_index(id: u16) -> Option<usize> {
    ENTRY_REGS.iter().position(|r| *r == id)
}

macro_rules! regs {
    ($( $id:literal $name:literal $width:literal $w:ident ;)*) => {
        /// The register table, in id order.
        pub const REGS: &[RegInfo] = &[
            $( RegInfo { id: $id, name: $name, width: $width, writable: regs!(@w $w) }, )*
        ];
    };
    (@w y) => { true };
    (@w n) => { false };
}

regs! {
    0x00 "cs" 16 n; 0x01 "ds" 16 n; 0x02 "es" 16 n; 0x03 "fs" 16 n; 0x04 "gs" 16 n; 0x05 "ss" 16 n;
    0x06 "rax" 64 y; 0x07 "rbx" 64 y; 0x08 "rcx" 64 y; 0x09 "rdx" 64 y; 0x0A "rdi" 64 y; 0x0B "rsi" 64 y;
    0x0C "rflags" 64 n; 0x0D "rip" 64 n; 0x0E "rsp" 64 n; 0x0F "rbp" 64 y;
    0x10 "r8" 64 y; 0x11 "r9" 64 y; 0x12 "r10" 64 y; 0x13 "r11" 64 y;
    0x14 "r12" 64 y; 0x15 "r13" 64 y; 0x16 "r14" 64 y; 0x17 "r15" 64 y;
    0x18 "orig_rax" 64 n; 0x19 "fs_base" 64 n; 0x1A "gs_base" 64 n;
    0x2C "dr0" 64 n; 0x2D "dr1" 64 n; 0x2E "dr2" 64 n; 0x2F "dr3" 64 n; 0x32 "dr6" 64 n; 0x33 "dr7" 64 n;
    0x3C "cpuid" 0 n;
    0x3E "fr0" 80 n; 0x3F "fr1" 80 n; 0x40 "fr2" 80 n; 0x41 "fr3" 80 n;
    0x42 "fr4" 80 n; 0x43 "fr5" 80 n; 0x44 "fr6" 80 n; 0x45 "fr7" 80 n;
    0x46 "fcw" 16 n; 0x47 "fsw" 16 n; 0x48 "ftw" 8 n; 0x49 "fip" 64 n; 0x4B "fdp" 64 n;
    0x4D "xmm0" 128 n; 0x4E "xmm1" 128 n; 0x4F "xmm2" 128 n; 0x50 "xmm3" 128 n;
    0x51 "xmm4" 128 n; 0x52 "xmm5" 128 n; 0x53 "xmm6" 128 n; 0x54 "xmm7" 128 n;
    0x55 "mxcsr" 32 n; 0x56 "fop" 16 n;
    0x58 "xmm8" 128 n; 0x59 "xmm9" 128 n; 0x5A "xmm10" 128 n; 0x5B "xmm11" 128 n;
    0x5C "xmm12" 128 n; 0x5D "xmm13" 128 n; 0x5E "xmm14" 128 n; 0x5F "xmm15" 128 n;
    0x106 "eax" 32 y; 0x107 "ebx" 32 y; 0x108 "ecx" 32 y; 0x109 "edx" 32 y;
    0x10A "edi" 32 y; 0x10B "esi" 32 y; 0x10C "eflags" 32 n; 0x10D "eip" 32 n;
    0x10E "esp" 32 n; 0x10F "ebp" 32 y;
    0x110 "r8d" 32 y; 0x111 "r9d" 32 y; 0x112 "r10d" 32 y; 0x113 "r11d" 32 y;
    0x114 "r12d" 32 y; 0x115 "r13d" 32 y; 0x116 "r14d" 32 y; 0x117 "r15d" 32 y;
}

/// Register names that existed in the original language but are refused in
/// user space (spec §7 item 7, §13.1): using one is a build error that says so.
pub const FORBIDDEN_REGS: &[&str] = &[
    "msr", "cr0", "cr1", "cr2", "cr3", "cr4", "tr", "ldtr", "gdtr", "idtr", "dr4", "dr5", "fcs",
    "fds",
];

/// Looks a register up by name, case-insensitively.
pub fn by_name(name: &str) -> Option<&'static RegInfo> {
    REGS.iter().find(|r| r.name.eq_ignore_ascii_case(name))
}

/// Looks a register up by id.
pub fn by_id(id: u16) -> Option<&'static RegInfo> {
    REGS.iter().find(|r| r.id == id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        assert_eq!(by_name("RAX").unwrap().id, 0x06);
        assert_eq!(by_name("esi").unwrap().base_id(), 0x0B);
        assert!(by_name("esi").unwrap().is_alias());
        assert_eq!(by_name("xmm15").unwrap().parts(), 2);
        assert!(by_name("cr0").is_none());
        assert!(by_name("eip").is_some_and(|r| !r.writable));
        assert_eq!(by_id(0x3C).unwrap().name, "cpuid");
    }

    #[test]
    fn ids_are_unique_and_sorted() {
        for w in REGS.windows(2) {
            assert!(w[0].id < w[1].id, "{} / {}", w[0].name, w[1].name);
        }
    }

    #[test]
    fn entry_registers_are_the_argument_registers_and_rsp() {
        let names: [&str; 7] = ENTRY_REGS.map(|id| by_id(id).unwrap().name);
        assert_eq!(names, ["rdi", "rsi", "rdx", "rcx", "r8", "r9", "rsp"]);
        assert_eq!(entry_index(RSP), Some(6));
        assert_eq!(entry_index(RAX), None);
        assert_eq!(by_id(RAX).unwrap().name, "rax");
    }

    #[test]
    fn every_alias_names_a_64_bit_register() {
        for r in REGS.iter().filter(|r| r.is_alias()) {
            let base = by_id(r.base_id()).unwrap();
            assert_eq!(base.width, 64, "{}", r.name);
            assert!(!r.writable || base.writable, "{}", r.name);
        }
    }
}
