//! The context of one perf sample, as a handler sees it: the registers the
//! kernel sampled at the hit, a snapshot of the user stack taken at the same
//! moment, and live memory of the process for everything outside that
//! snapshot. The target did not stop: live reads may observe memory that is
//! newer than the hit (documented). Handlers are
//! observe-only here: every write is refused with `Status::ReadOnly` (and
//! writing programs are refused at load time anyway). Never panics on any
//! argument value; nothing here allocates per hit.

use hostabi::Status;
use hostabi::env::{EntryState, HitEnv};

use crate::arch::{self, Regs};

/// One sample of a perf event: registers, stack snapshot, identity.
pub struct PerfHit {
    /// The raw sample body (reused across samples; swapped with the ring's buffer).
    pub(super) rec: Vec<u8>,
    /// Where the stack snapshot starts in `rec`.
    pub(super) stack_off: usize,
    /// How many snapshot bytes are valid (`dyn_size`).
    pub(super) stack_len: usize,
    pub(super) regs: Regs,
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) cpu: u32,
    pub(super) time_ns: u64,
    /// Sample IP (the probe address for uprobes, the instruction after the
    /// access for data watchpoints).
    pub(super) ip: u64,
    /// Load bias of the handler's module (set by the session before the run).
    pub(super) module_bias: u64,
    /// Whether the sample carried user registers.
    pub(super) has_regs: bool,
    /// The registers the sample carries (`regbits::regs_mask`).
    pub(super) regs_mask: u64,
    /// The return of a tracked call of a return probe: the function's
    /// entry address and what the entry knew.
    pub(super) ret: Option<(u64, EntryState)>,
    /// The thread's name from the kernel's records (system-wide runs), if known.
    pub(super) comm: Option<[u8; 16]>,
    /// A live read found the process gone (`ESRCH`) since the sample was set.
    pub(super) gone: bool,
}

impl Default for PerfHit {
    fn default() -> PerfHit {
        PerfHit {
            rec: Vec::new(),
            stack_off: 0,
            stack_len: 0,
            regs: crate::sys::regs::zero_regs(),
            pid: 0,
            tid: 0,
            cpu: 0,
            time_ns: 0,
            ip: 0,
            module_bias: 0,
            has_regs: false,
            regs_mask: super::regbits::REGS_MASK,
            ret: None,
            comm: None,
            gone: false,
        }
    }
}

impl std::fmt::Debug for PerfHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfHit")
            .field("pid", &self.pid)
            .field("tid", &self.tid)
            .field("ip", &self.ip)
            .finish()
    }
}

impl PerfHit {
    /// The sampled instruction pointer.
    pub fn ip(&self) -> u64 {
        self.ip
    }

    /// The sampled registers.
    pub fn regs(&self) -> &Regs {
        &self.regs
    }

    /// Sets the load bias returned by [`HitEnv::load_bias`].
    pub fn set_module_bias(&mut self, bias: u64) {
        self.module_bias = bias;
    }

    /// Makes this hit the return of a tracked call of the function at
    /// `func` with entry state `entry` (or a plain hit again: `None`).
    pub fn set_return(&mut self, ret: Option<(u64, EntryState)>) {
        self.ret = ret;
    }

    /// The entry address of the function whose call returns here, for the
    /// return of a tracked call.
    pub fn return_of(&self) -> Option<u64> {
        self.ret.map(|(f, _)| f)
    }

    /// Turns a sample taken at a `ret` instruction into the state after
    /// it: RIP the return address `to`, RSP 8 higher, the stack snapshot
    /// starting there.
    pub(super) fn step_past_ret(&mut self, to: u64) {
        self.regs.rip = to;
        self.regs.rsp = self.regs.rsp.wrapping_add(8);
        let skip = self.stack_len.min(8);
        self.stack_off += skip;
        self.stack_len -= skip;
    }

    /// The stack snapshot (starting at the sampled `rsp`).
    pub fn stack(&self) -> &[u8] {
        self.rec
            .get(self.stack_off..self.stack_off + self.stack_len)
            .unwrap_or(&[])
    }

    /// Copies from the snapshot the part of `[addr, addr+buf.len())` it
    /// covers at the front; returns the number of bytes copied.
    fn copy_from_snapshot(&self, addr: u64, buf: &mut [u8]) -> usize {
        let base = self.regs.rsp;
        let stack = self.stack();
        let Some(off) = addr.checked_sub(base) else {
            return 0;
        };
        let Ok(off) = usize::try_from(off) else {
            return 0;
        };
        if off >= stack.len() {
            return 0;
        }
        let n = buf.len().min(stack.len() - off);
        buf[..n].copy_from_slice(&stack[off..off + n]);
        n
    }
}

/// Reads live memory of `pid` with `process_vm_readv`; returns the number of
/// leading bytes read (a partial read stops at the first unreadable page).
pub(super) fn live_read(pid: u32, addr: u64, buf: &mut [u8]) -> usize {
    live_read_checked(pid, addr, buf).0
}

/// [`live_read`], and whether the process was gone (`ESRCH`: it exited
/// before its sample was read).
fn live_read_checked(pid: u32, addr: u64, buf: &mut [u8]) -> (usize, bool) {
    let mut done = 0;
    while done < buf.len() {
        match crate::sys::mem::vm_read(pid as i32, addr.wrapping_add(done as u64), &mut buf[done..])
        {
            Ok(n) if n > 0 => done += n,
            Err(nix::errno::Errno::ESRCH) => return (done, true),
            _ => break,
        }
    }
    (done, false)
}

impl HitEnv for PerfHit {
    fn read_reg(&mut self, reg: u16, part: u8) -> Option<u64> {
        // The instruction pointer is the sample's IP; other registers only
        // when sampled (the session samples those its handlers can read).
        let bit = super::regbits::perf_bit(reg)?;
        if part != 0 || (bit != 8 && !(self.has_regs && self.regs_mask & (1 << bit) != 0)) {
            return None;
        }
        arch::gpr(&self.regs, reg)
    }

    fn write_reg(&mut self, _reg: u16, _value: u64) -> Status {
        Status::ReadOnly
    }

    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            let a = addr.wrapping_add(done as u64);
            let n = self.copy_from_snapshot(a, &mut buf[done..]);
            if n > 0 {
                done += n;
                continue;
            }
            // Outside the snapshot: live memory up to the snapshot's start
            // (if it lies ahead) or to the end.
            let base = self.regs.rsp;
            let end = if a < base && self.stack_len > 0 {
                (base - a).min((buf.len() - done) as u64) as usize
            } else {
                buf.len() - done
            };
            let (n, gone) = live_read_checked(self.pid, a, &mut buf[done..done + end]);
            self.gone |= gone;
            done += n;
            if n < end {
                break;
            }
        }
        done
    }

    fn write_mem(&mut self, _addr: u64, _data: &[u8]) -> Status {
        Status::ReadOnly
    }

    fn check_access(&mut self, addr: u64, write: bool) -> bool {
        if write {
            // Observe-only transport: nothing is writable for a handler.
            return false;
        }
        let mut b = [0u8];
        self.read_mem(addr, &mut b) == 1
    }

    fn tid(&self) -> u64 {
        u64::from(self.tid)
    }

    fn pid(&self) -> u64 {
        u64::from(self.pid)
    }

    fn cpu(&self) -> u64 {
        u64::from(self.cpu)
    }

    fn thread_pointer(&self) -> u64 {
        // fs_base is not part of a perf register sample.
        0
    }

    fn load_bias(&self) -> u64 {
        self.module_bias
    }

    fn now_ns(&self) -> u64 {
        self.time_ns
    }

    fn gvars(&mut self) -> &mut [u64] {
        &mut []
    }

    fn entry_reg(&mut self, reg: u16) -> Option<u64> {
        self.ret.and_then(|(_, e)| e.reg(reg))
    }

    fn elapsed_ns(&self) -> Option<u64> {
        self.ret.map(|(_, e)| e.elapsed_ns)
    }

    fn comm(&self) -> Option<[u8; 16]> {
        self.comm
    }

    /// Chunked (the default reads byte by byte: one system call per byte
    /// outside the snapshot).
    fn read_str(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, usize> {
        let mut chunk = [0u8; 256];
        let mut i = 0;
        while i < buf.len() {
            let want = chunk.len().min(buf.len() - i);
            let got = self.read_mem(addr.wrapping_add(i as u64), &mut chunk[..want]);
            if let Some(z) = chunk[..got].iter().position(|&b| b == 0) {
                buf[i..i + z].copy_from_slice(&chunk[..z]);
                return Ok(i + z);
            }
            buf[i..i + got].copy_from_slice(&chunk[..got]);
            i += got;
            if got < want {
                return Err(i);
            }
        }
        Ok(buf.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_inside_the_snapshot_come_from_it() {
        let mut h = PerfHit {
            rec: (0u8..64).collect(),
            stack_off: 16,
            stack_len: 32,
            has_regs: true,
            ..PerfHit::default()
        };
        h.regs.rsp = 0x1000;
        let mut b = [0u8; 4];
        assert_eq!(h.read_mem(0x1004, &mut b), 4);
        assert_eq!(b, [20, 21, 22, 23]);
        // Past the snapshot's end in a process that does not exist: nothing more.
        h.pid = u32::MAX >> 1;
        let mut b = [0u8; 8];
        assert_eq!(h.read_mem(0x101c, &mut b), 4);
        assert_eq!(&b[..4], &[44, 45, 46, 47]);
        assert_eq!(h.read_reg(0x0E, 0), Some(0x1000));
        assert_eq!(h.read_reg(0x19, 0), None, "fs_base is not sampled");
        assert_eq!(h.write_reg(0x06, 1), Status::ReadOnly);
        assert_eq!(h.write_mem(0x1000, &[1]), Status::ReadOnly);
        // Strings: NUL inside the snapshot; unreadable past its end.
        h.rec[20] = 0;
        let mut s = [0u8; 16];
        assert_eq!(h.read_str(0x1000, &mut s), Ok(4));
        assert_eq!(&s[..4], &[16, 17, 18, 19]);
        assert_eq!(h.read_str(0x1018, &mut s), Err(8));
        let mut s = [0u8; 3];
        assert_eq!(h.read_str(0x1000, &mut s), Ok(3));
    }
}
