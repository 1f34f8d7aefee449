//! What a handler may ask of the traced thread at a hit, as a trait: the
//! runtime implements it per transport (ptrace, perf, synthetic), and the
//! RPN reference interpreter runs against it, so both see one environment.
//! Implementations must never panic on any argument value.

use crate::Status;
use crate::regs;

/// The environment of one hit: registers, memory and identity of the hit
/// thread, the run's global variables, and the host's optional hooks.
pub trait HitEnv {
    /// Reads part `part` (0 low, 1 high) of register `reg`, a non-alias id of
    /// [`regs::REGS`] other than `cpuid`. `None` for an unknown id or part.
    fn read_reg(&mut self, reg: u16, part: u8) -> Option<u64>;

    /// Writes a writable, non-alias register (width 64).
    fn write_reg(&mut self, reg: u16, value: u64) -> Status;

    /// Reads memory at `addr` into `buf`; returns how many leading bytes could be read.
    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> usize;

    /// Writes `data` at `addr`, all or nothing.
    fn write_mem(&mut self, addr: u64, data: &[u8]) -> Status;

    /// Whether one byte at `addr` is readable (and writable, when `write`) per the mappings.
    fn check_access(&mut self, addr: u64, write: bool) -> bool;

    /// Thread id of the hit thread.
    fn tid(&self) -> u64;

    /// Process id of the hit thread.
    fn pid(&self) -> u64;

    /// CPU the thread last ran on.
    fn cpu(&self) -> u64;

    /// The thread pointer (`fs_base`).
    fn thread_pointer(&self) -> u64;

    /// Load bias of the program's module in the hit process.
    fn load_bias(&self) -> u64;

    /// Wall-clock time of the hit, ns since the epoch.
    fn now_ns(&self) -> u64;

    /// Executes CPUID; returns EAX, EBX, ECX, EDX. By default the
    /// machine's own (every x86-64 CPU has it, and it has no side effects;
    /// zeros on another architecture); a model or a test may answer
    /// otherwise.
    fn cpuid(&mut self, leaf: u32, subleaf: u32) -> [u32; 4] {
        #[cfg(target_arch = "x86_64")]
        {
            let r = core::arch::x86_64::__cpuid_count(leaf, subleaf);
            [r.eax, r.ebx, r.ecx, r.edx]
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (leaf, subleaf);
            [0; 4]
        }
    }

    /// The run's shared global variables (current size = largest `gvars` loaded).
    fn gvars(&mut self) -> &mut [u64];

    /// Reads a virtual I/O port; `None` when no handler serves it.
    fn io_in(&mut self, _port: u64, _width: u8) -> Option<u64> {
        None
    }

    /// Writes a virtual I/O port; `false` when no handler serves it.
    fn io_out(&mut self, _port: u64, _width: u8, _value: u64) -> bool {
        false
    }

    /// The `callk` hook.
    fn callk(&mut self) {}

    /// The hit thread's name as the transport recorded it (NUL-padded),
    /// when it did: a system-wide perf run takes it from the kernel's
    /// `PERF_RECORD_COMM`, so a process that exited before its hit is read
    /// still has its name. `None` (the default): the host looks it up.
    fn comm(&self) -> Option<[u8; 16]> {
        None
    }

    /// In the hit of a return probe: the value register `reg` (one of
    /// [`regs::ENTRY_REGS`]) had at the entry of the call that is returning.
    /// `None` for any other hit, and for an id that is not an entry
    /// register. The default (a transport without return probes) is `None`.
    fn entry_reg(&mut self, _reg: u16) -> Option<u64> {
        None
    }

    /// In the hit of a return probe: nanoseconds between the entry of the
    /// returning call and the return (monotonic clock). `None` for any other
    /// hit; the default is `None`.
    fn elapsed_ns(&self) -> Option<u64> {
        None
    }

    /// Reads any register id of the table, aliases included (low 32 bits,
    /// zero-extended). `None` for an unknown id or part, and for `cpuid`.
    fn read_reg_any(&mut self, reg: u16, part: u8) -> Option<u64> {
        let info = regs::by_id(reg)?;
        if info.id == regs::CPUID || part >= info.parts() {
            return None;
        }
        let v = self.read_reg(info.base_id(), part)?;
        Some(if info.is_alias() { v & 0xFFFF_FFFF } else { v })
    }

    /// Writes any register id, aliases included (zero-extending the low 32 bits).
    fn write_reg_any(&mut self, reg: u16, value: u64) -> Status {
        match regs::by_id(reg) {
            None => Status::BadArgument,
            Some(info) if !info.writable => Status::ReadOnly,
            Some(info) if info.is_alias() => self.write_reg(info.base_id(), value & 0xFFFF_FFFF),
            Some(info) => self.write_reg(info.id, value),
        }
    }

    /// Reads a NUL-terminated string, examining at most `buf.len()` bytes.
    /// `Ok(n)`: n bytes before a NUL (or `buf.len()`); `Err(i)`: byte i unreadable.
    ///
    /// Reads in chunks of up to [`STR_CHUNK`] bytes through `read_mem` (one
    /// system call per chunk where a read costs one, not one per byte); the
    /// bytes after the NUL are read but not copied into `buf`.
    fn read_str(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, usize> {
        let n = buf.len();
        let mut chunk = [0u8; STR_CHUNK];
        let mut done = 0;
        while done < n {
            let want = (n - done).min(STR_CHUNK);
            let got = self
                .read_mem(addr.wrapping_add(done as u64), &mut chunk[..want])
                .min(want);
            if let Some(i) = chunk[..got].iter().position(|&b| b == 0) {
                buf[done..done + i].copy_from_slice(&chunk[..i]);
                return Ok(done + i);
            }
            buf[done..done + got].copy_from_slice(&chunk[..got]);
            done += got;
            if got < want {
                return Err(done);
            }
        }
        Ok(n)
    }
}

/// Bytes [`HitEnv::read_str`] asks `read_mem` for at a time.
pub const STR_CHUNK: usize = 256;

/// What the hit of a return probe knows of the entry of its call: the
/// values of [`regs::ENTRY_REGS`] at the entry (in that order) and the time
/// the call took. A transport keeps the registers and the entry time per
/// tracked call and builds this at the return; a model environment holds
/// one directly. [`EntryState::reg`] answers [`HitEnv::entry_reg`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EntryState {
    /// Values at the entry of rdi, rsi, rdx, rcx, r8, r9, rsp.
    pub regs: [u64; 7],
    /// Nanoseconds between the entry and the return.
    pub elapsed_ns: u64,
}

impl EntryState {
    /// The entry value of register `reg`; `None` when `reg` is not one of
    /// [`regs::ENTRY_REGS`].
    pub fn reg(&self, reg: u16) -> Option<u64> {
        regs::entry_index(reg).map(|i| self.regs[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_state_answers_entry_registers_only() {
        let e = EntryState {
            regs: [1, 2, 3, 4, 5, 6, 7],
            elapsed_ns: 9,
        };
        assert_eq!(e.reg(regs::RDI), Some(1));
        assert_eq!(e.reg(regs::R9), Some(6));
        assert_eq!(e.reg(regs::RSP), Some(7));
        assert_eq!(e.reg(regs::RAX), None);
        assert_eq!(e.reg(regs::RDI + regs::ALIAS_BASE), None);
    }
}
