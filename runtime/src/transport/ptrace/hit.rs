//! The context of one hit: the stopped thread's register snapshot (read
//! once per stop), lazily fetched FP/SSE and debug registers, memory access
//! through the address space's [`ProcMem`] (original bytes under our
//! `int3`s, writes only where the process could write), and identity. It
//! implements [`HitEnv`] for handlers. Register writes go to the snapshot and
//! are applied by the tracer when the hit is resumed. Never panics on any
//! argument value.

use std::cell::RefCell;
use std::fs::File;
use std::rc::Rc;

use hostabi::Status;
use hostabi::env::{EntryState, HitEnv};
use hostabi::regs;

use super::mem::ProcMem;
use crate::arch::{self, FpRegs, Regs};
use crate::sys::ptrace as sys;

/// What stopped the thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HitKind {
    /// A breakpoint at this address.
    Breakpoint(u64),
    /// A hardware watchpoint on this address (debug register slot).
    Watchpoint(u64, usize),
}

/// Where a thread's CPU number is read, found at the first hit that needs
/// it and kept with the thread: the `cpu_id` of its rseq area (glibc
/// registers one per thread; the kernel updates it when the thread returns
/// to user space, so it is the CPU the stopped thread last ran on), read
/// with `process_vm_readv`; else `/proc/PID/task/TID/stat`.
#[derive(Debug, Default)]
pub enum CpuSource {
    /// Not looked for yet.
    #[default]
    Unknown,
    /// The address of the thread's `struct rseq`.
    Rseq(u64),
    /// The thread's stat file.
    Stat(File),
    /// Neither (a thread gone).
    Unavailable,
}

/// One hit of a stopped thread. Obtained from [`super::PtraceEvent`]; valid until
/// `on_event` returns.
pub struct PtraceHit {
    tid: i32,
    pid: i32,
    kind: HitKind,
    regs: Regs,
    regs_dirty: bool,
    fp: Option<FpRegs>,
    dr: [u64; 8],
    dr_valid: u8,
    now: u64,
    pub(super) mem: Option<Rc<RefCell<ProcMem>>>,
    pub(super) cpu_src: RefCell<CpuSource>,
    /// Load bias of the handler's module in this process; set by the caller
    /// before running the handler (what `load_bias()` returns).
    pub module_bias: u64,
    /// Bytes read around the hit's last small memory read (see `read_mem`).
    win: [u8; READ_WINDOW],
    /// Address of `win[0]`.
    win_base: u64,
    /// Valid bytes in `win` (0: none).
    win_len: usize,
    /// The return of a tracked call of a return probe: the function's
    /// entry address and what the entry knew.
    ret: Option<(u64, EntryState)>,
}

/// A small memory read fetches this many bytes around it (within its page),
/// and later reads of those bytes in the same hit are served from them: a
/// handler reading the fields of a structure makes one system call, not
/// one per field. The thread is stopped, so only its own process's other
/// threads could change those bytes meanwhile, and a handler that races
/// with them sees one consistent instant of the window. Handler writes
/// drop the window.
const READ_WINDOW: usize = 256;

/// Reads of at most this many bytes go through the window.
const WINDOWED_READ_MAX: u64 = 64;

impl std::fmt::Debug for PtraceHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtraceHit")
            .field("tid", &self.tid)
            .field("pid", &self.pid)
            .field("kind", &self.kind)
            .field("rip", &self.regs.rip)
            .finish()
    }
}

use crate::sys::regs::zero_regs;

impl PtraceHit {
    pub(super) fn empty() -> PtraceHit {
        PtraceHit {
            tid: 0,
            pid: 0,
            kind: HitKind::Breakpoint(0),
            regs: zero_regs(),
            regs_dirty: false,
            fp: None,
            dr: [0; 8],
            dr_valid: 0,
            now: 0,
            mem: None,
            cpu_src: RefCell::new(CpuSource::Unknown),
            module_bias: 0,
            win: [0; READ_WINDOW],
            win_base: 0,
            win_len: 0,
            ret: None,
        }
    }

    pub(super) fn reset(
        &mut self,
        tid: i32,
        pid: i32,
        kind: HitKind,
        regs: Regs,
        mem: Rc<RefCell<ProcMem>>,
        cpu_src: CpuSource,
    ) {
        self.tid = tid;
        self.pid = pid;
        self.kind = kind;
        self.regs = regs;
        self.regs_dirty = false;
        self.fp = None;
        self.dr_valid = 0;
        self.now = crate::sys::time::realtime_ns();
        mem.borrow_mut().may_refresh = true;
        self.mem = Some(mem);
        *self.cpu_src.get_mut() = cpu_src;
        self.module_bias = 0;
        self.win_len = 0;
        self.ret = None;
    }

    /// Makes this hit the return of a tracked call of the function at
    /// `func` (run-time address) with entry state `entry`, or a plain hit
    /// again (`None`).
    pub fn set_return(&mut self, ret: Option<(u64, EntryState)>) {
        self.ret = ret;
    }

    /// The entry address of the function whose call returns here, for the
    /// return of a tracked call.
    pub fn return_of(&self) -> Option<u64> {
        self.ret.map(|(f, _)| f)
    }

    /// What stopped the thread.
    pub fn kind(&self) -> HitKind {
        self.kind
    }

    /// The probe address (breakpoint) or watched address (watchpoint).
    pub fn address(&self) -> u64 {
        match self.kind {
            HitKind::Breakpoint(a) | HitKind::Watchpoint(a, _) => a,
        }
    }

    /// The register snapshot (RIP is the probe address for breakpoints).
    pub fn regs(&self) -> &Regs {
        &self.regs
    }

    /// Mutable snapshot: changes are applied to the thread when it resumes.
    pub fn regs_mut(&mut self) -> &mut Regs {
        self.regs_dirty = true;
        &mut self.regs
    }

    pub(super) fn take_regs(&self) -> Regs {
        self.regs
    }

    /// Sets the load bias returned by [`HitEnv::load_bias`].
    pub fn set_module_bias(&mut self, bias: u64) {
        self.module_bias = bias;
    }

    /// Runs `f` with an environment whose `gvars()` is `gvars`: the caller
    /// lends the run's global variables for one handler run. Sound by
    /// construction (plain borrows), and free (no allocation).
    pub fn with_gvars<R>(
        &mut self,
        gvars: &mut [u64],
        f: impl FnOnce(&mut HitWithGvars<&mut PtraceHit, &mut [u64]>) -> R,
    ) -> R {
        let mut env = HitWithGvars { hit: self, gvars };
        f(&mut env)
    }

    /// The thread's x87/SSE registers (read once per hit).
    pub fn fpregs(&mut self) -> Option<&FpRegs> {
        if self.fp.is_none() {
            let mut f = crate::sys::regs::zero_fpregs();
            sys::getfpregs(self.tid, &mut f).ok()?;
            self.fp = Some(f);
        }
        self.fp.as_ref()
    }

    fn debugreg(&mut self, n: usize) -> Option<u64> {
        if self.dr_valid & (1 << n) == 0 {
            self.dr[n] = sys::peekuser(self.tid, arch::debugreg_offset(n)).ok()?;
            self.dr_valid |= 1 << n;
        }
        Some(self.dr[n])
    }

    fn cpu_of_thread(&self) -> u64 {
        let mut src = self.cpu_src.borrow_mut();
        if matches!(*src, CpuSource::Unknown) {
            *src = match sys::rseq_area(self.tid) {
                Ok(a) if a != 0 => CpuSource::Rseq(a),
                _ => self.stat_source(),
            };
        }
        if let CpuSource::Rseq(a) = *src {
            // `cpu_id` (offset 4); RSEQ_CPU_ID_UNINITIALIZED (-1) or an
            // unreadable area: the stat file from now on.
            let mut b = [0u8; 4];
            if crate::sys::mem::vm_read(self.pid, a + 4, &mut b) == Ok(4) {
                let cpu = u32::from_le_bytes(b);
                if (cpu as i32) >= 0 {
                    return u64::from(cpu);
                }
            }
            *src = self.stat_source();
        }
        let CpuSource::Stat(f) = &*src else { return 0 };
        let mut buf = [0u8; 1024];
        let n = crate::sys::mem::pread(f, &mut buf, 0).unwrap_or(0);
        parse_stat_cpu(&buf[..n]).unwrap_or(0)
    }

    fn stat_source(&self) -> CpuSource {
        File::open(format!("/proc/{}/task/{}/stat", self.pid, self.tid))
            .map_or(CpuSource::Unavailable, CpuSource::Stat)
    }
}

/// Field 39 (`processor`) of a `/proc/TID/stat` line.
pub fn parse_stat_cpu(line: &[u8]) -> Option<u64> {
    let close = line.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&line[close + 1..]).ok()?;
    // Fields after the command: the first is field 3 (state).
    rest.split_ascii_whitespace().nth(39 - 3)?.parse().ok()
}

impl HitEnv for PtraceHit {
    fn read_reg(&mut self, reg: u16, part: u8) -> Option<u64> {
        if let Some(v) = arch::gpr(&self.regs, reg) {
            return (part == 0).then_some(v);
        }
        if let Some(n) = arch::dr_index(reg) {
            return if part == 0 { self.debugreg(n) } else { None };
        }
        if arch::is_fp_id(reg) {
            return arch::fp(self.fpregs()?, reg, part);
        }
        None
    }

    fn write_reg(&mut self, reg: u16, value: u64) -> Status {
        match regs::by_id(reg) {
            None => Status::BadArgument,
            Some(info) if !info.writable || info.is_alias() => Status::ReadOnly,
            Some(_) => match arch::writable_gpr_mut(&mut self.regs, reg) {
                Some(slot) => {
                    *slot = value;
                    self.regs_dirty = true;
                    Status::Ok
                }
                None => Status::ReadOnly,
            },
        }
    }

    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        let Some(m) = &self.mem else {
            return 0;
        };
        let len = buf.len() as u64;
        if let Some(off) = addr.checked_sub(self.win_base)
            && off
                .checked_add(len)
                .is_some_and(|e| e <= self.win_len as u64)
        {
            let off = off as usize;
            buf.copy_from_slice(&self.win[off..off + buf.len()]);
            return buf.len();
        }
        // The window: from the read's 64-byte line, never past its page (a
        // page is readable as a whole, so the window reads nothing the read
        // itself could not).
        let base = addr & !63;
        let end = base
            .saturating_add(READ_WINDOW as u64)
            .min((addr | 0xfff).saturating_add(1));
        if len == 0 || len > WINDOWED_READ_MAX || addr.checked_add(len).is_none_or(|e| e > end) {
            return m.borrow_mut().read(addr, buf);
        }
        let n = m
            .borrow_mut()
            .read(base, &mut self.win[..(end - base) as usize]);
        self.win_base = base;
        self.win_len = n;
        let off = (addr - base) as usize;
        if off + buf.len() <= n {
            buf.copy_from_slice(&self.win[off..off + buf.len()]);
            buf.len()
        } else {
            // Partly unreadable: the read on its own says how much it gets.
            self.win_len = 0;
            m.borrow_mut().read(addr, buf)
        }
    }

    fn write_mem(&mut self, addr: u64, data: &[u8]) -> Status {
        self.win_len = 0;
        let tid = self.tid;
        match &self.mem {
            Some(m) if m.borrow_mut().write_checked(tid, addr, data) => Status::Ok,
            _ => Status::Fault,
        }
    }

    fn check_access(&mut self, addr: u64, write: bool) -> bool {
        match &self.mem {
            Some(m) => m.borrow_mut().range_ok(addr, 1, write) == 1,
            None => false,
        }
    }

    fn tid(&self) -> u64 {
        self.tid as u64
    }

    fn pid(&self) -> u64 {
        self.pid as u64
    }

    fn cpu(&self) -> u64 {
        self.cpu_of_thread()
    }

    fn thread_pointer(&self) -> u64 {
        self.regs.fs_base
    }

    fn load_bias(&self) -> u64 {
        self.module_bias
    }

    fn now_ns(&self) -> u64 {
        self.now
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
}

/// A [`PtraceHit`] together with the run's global variables: the environment a
/// handler sees. Borrowed for one handler run (see [`PtraceHit::with_gvars`]) or
/// owned by the session's store (`HitWithGvars<PtraceHit, Vec<u64>>`).
pub struct HitWithGvars<H, G> {
    /// The hit.
    pub hit: H,
    /// The run's global variables.
    pub gvars: G,
}

impl<H: std::borrow::BorrowMut<PtraceHit>, G> HitWithGvars<H, G> {
    fn h(&self) -> &PtraceHit {
        std::borrow::Borrow::borrow(&self.hit)
    }

    fn hm(&mut self) -> &mut PtraceHit {
        std::borrow::BorrowMut::borrow_mut(&mut self.hit)
    }
}

impl<H: std::borrow::BorrowMut<PtraceHit>, G: AsMut<[u64]>> HitEnv for HitWithGvars<H, G> {
    fn read_reg(&mut self, reg: u16, part: u8) -> Option<u64> {
        self.hm().read_reg(reg, part)
    }
    fn write_reg(&mut self, reg: u16, value: u64) -> Status {
        self.hm().write_reg(reg, value)
    }
    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        self.hm().read_mem(addr, buf)
    }
    fn write_mem(&mut self, addr: u64, data: &[u8]) -> Status {
        self.hm().write_mem(addr, data)
    }
    fn check_access(&mut self, addr: u64, write: bool) -> bool {
        self.hm().check_access(addr, write)
    }
    fn tid(&self) -> u64 {
        self.h().tid()
    }
    fn pid(&self) -> u64 {
        self.h().pid()
    }
    fn cpu(&self) -> u64 {
        self.h().cpu()
    }
    fn thread_pointer(&self) -> u64 {
        self.h().thread_pointer()
    }
    fn load_bias(&self) -> u64 {
        self.h().load_bias()
    }
    fn now_ns(&self) -> u64 {
        self.h().now_ns()
    }
    fn cpuid(&mut self, leaf: u32, subleaf: u32) -> [u32; 4] {
        self.hm().cpuid(leaf, subleaf)
    }
    fn gvars(&mut self) -> &mut [u64] {
        self.gvars.as_mut()
    }
    fn read_str(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, usize> {
        self.hm().read_str(addr, buf)
    }
    fn entry_reg(&mut self, reg: u16) -> Option<u64> {
        self.hm().entry_reg(reg)
    }
    fn elapsed_ns(&self) -> Option<u64> {
        self.h().elapsed_ns()
    }
}

impl Default for PtraceHit {
    /// An empty hit (no thread): the placeholder the session swaps with the
    /// tracer's hit around each handler run.
    fn default() -> PtraceHit {
        PtraceHit::empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read window on this very process: nearby reads are served, a
    /// write through the hit drops it, and no address panics.
    #[test]
    fn the_read_window_serves_nearby_reads_and_never_panics() {
        let pid = std::process::id() as i32;
        let mem = Rc::new(RefCell::new(ProcMem::open(pid)));
        let mut h = PtraceHit::empty();
        h.reset(
            pid,
            pid,
            HitKind::Breakpoint(0),
            zero_regs(),
            mem,
            CpuSource::Unknown,
        );
        let data: Box<[u64; 8]> = Box::new([1, 2, 3, 4, 5, 6, 7, 8]);
        let addr = data.as_ptr() as u64;
        let mut b = [0u8; 8];
        for (i, want) in (1..=8u64).enumerate() {
            assert_eq!(h.read_mem(addr + 8 * i as u64, &mut b), 8);
            assert_eq!(u64::from_le_bytes(b), want);
        }
        assert!(h.win_len > 0, "small reads go through the window");
        assert_eq!(h.write_mem(addr, &9u64.to_le_bytes()), Status::Ok);
        assert_eq!(h.win_len, 0, "a write drops the window");
        assert_eq!(h.read_mem(addr, &mut b), 8);
        assert_eq!(u64::from_le_bytes(b), 9);
        for top in [
            u64::MAX,
            u64::MAX - 7,
            0xFFFF_FFFF_FFFF_FF00,
            0xFFFF_FFFF_FFFF_FFF0,
        ] {
            assert_eq!(h.read_mem(top, &mut [0u8; 1]), 0);
            assert_eq!(h.read_mem(top, &mut b), 0);
        }
        assert_eq!(h.read_mem(0, &mut b), 0);
    }

    #[test]
    fn stat_cpu_field() {
        let mut line = String::from("123 (a) b) c) S");
        for i in 4..=52 {
            line.push_str(&format!(" {i}"));
        }
        assert_eq!(parse_stat_cpu(line.as_bytes()), Some(39));
        assert_eq!(parse_stat_cpu(b"garbage"), None);
    }
}
