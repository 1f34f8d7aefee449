//! The data of the agent's store: the hit environment inside the target
//! (registers from the frame the stub saved, writes going back into it;
//! memory of the very process through `process_vm_readv/writev`, so a bad
//! address is a status, never a fault; identity from the thread slot), the
//! records of the current run (written to the shared ring after it), and
//! the service state (the program's map region in the shared region, the
//! tracer's clocks). The imports themselves are `hostfns`'s, the very code
//! the runtime runs under ptrace and perf.

use crate::{ctrl, sys, vdso};
use agent_abi::{
    RECORD_HEADER_SIZE, RUN_HEADER_SIZE, RecordHeader, RunHeader, SavedRegs, rec, record_size,
};
use alloc::vec::Vec;
use core::cell::Cell;
use core::sync::atomic::{AtomicBool, Ordering};
use hostabi::Status;
use hostabi::env::HitEnv;
use hostfns::{HostData, RecordSink, Services};
use wasmtime::{Memory, StoreLimits};

/// The CPU the calling thread runs on (`rdpid`, else `rdtscp`, else
/// `getcpu`).
#[inline]
/// The NUMA node of the CPU the calling thread runs on.
pub fn current_numa_node() -> u64 {
    if HAS_RDPID.load(Ordering::Relaxed) {
        (sys::rdpid() >> 12) & 0xFFF
    } else if HAS_RDTSCP.load(Ordering::Relaxed) {
        u64::from((sys::rdtscp().1 >> 12) & 0xFFF)
    } else {
        let mut cpu = 0u32;
        let mut node = 0u32;
        // SAFETY: getcpu writes one u32 at each of the two pointers.
        unsafe {
            sys::syscall3(
                sys::SYS_GETCPU,
                &mut cpu as *mut u32 as usize,
                &mut node as *mut u32 as usize,
                0,
            )
        };
        u64::from(node)
    }
}

pub fn current_cpu() -> u64 {
    if HAS_RDPID.load(Ordering::Relaxed) {
        sys::rdpid() & 0xFFF
    } else if HAS_RDTSCP.load(Ordering::Relaxed) {
        u64::from(sys::rdtscp().1 & 0xFFF)
    } else {
        let mut cpu = 0u32;
        // SAFETY: getcpu writes one u32; the other pointers may be null.
        unsafe { sys::syscall3(sys::SYS_GETCPU, &mut cpu as *mut u32 as usize, 0, 0) };
        u64::from(cpu)
    }
}

/// Whether RDTSCP exists (for `current_cpu`).
pub static HAS_RDTSCP: AtomicBool = AtomicBool::new(false);
/// Whether RDPID exists (for `current_cpu`; preferred to RDTSCP).
pub static HAS_RDPID: AtomicBool = AtomicBool::new(false);

/// The environment of one hit.
pub struct FrameEnv {
    /// The stub's frame (valid for the duration of the hit).
    pub frame: *mut SavedRegs,
    pub tid: u32,
    pub pid: u32,
    pub fs_base: u64,
    pub load_bias: u64,
    /// Wall-clock time of the hit, computed at the first `now_ns` from
    /// `tsc` (0 = not yet).
    pub now: Cell<u64>,
    /// The TSC of the hit when it was read before the run (0: `now_ns`
    /// reads it).
    pub tsc: u64,
    /// The hit of a return probe: the state of the returning call's entry.
    pub entry: Option<hostabi::env::EntryState>,
    /// The bytes of the thread's stack below its red zone that the stub
    /// and the dispatcher use during the hit (`[lo, hi)`): the saved
    /// registers and the frames that return to the stub. To the program it
    /// is dead stack, which a handler may write (as under ptrace); such
    /// writes go to [`FrameEnv::dead`] instead, and reads see them there.
    pub agent_stack: (u64, u64),
    /// The stand-in for `agent_stack` once a handler of the hit wrote into
    /// it: its bytes as they were, with the handler's writes (valid while
    /// `dead_valid`).
    pub dead: [u8; DEAD_STACK_BYTES],
    /// `dead` holds this hit's stand-in (reset at each hit's first run).
    pub dead_valid: bool,
}

/// Largest span of the thread's stack the agent uses during a hit
/// (`agent_loader::stub::STACK_FOOTPRINT` and the red zone, with room to
/// spare): a hit that used more refuses writes there instead.
pub const DEAD_STACK_BYTES: usize = 4096;

// SAFETY: the frame pointer is only dereferenced by the thread that holds
// the store lock, during the hit it belongs to.
unsafe impl Send for FrameEnv {}

impl FrameEnv {
    pub const fn empty() -> Self {
        FrameEnv {
            frame: core::ptr::null_mut(),
            tid: 0,
            pid: 0,
            fs_base: 0,
            load_bias: 0,
            now: Cell::new(0),
            tsc: 0,
            entry: None,
            agent_stack: (0, 0),
            dead: [0; DEAD_STACK_BYTES],
            dead_valid: false,
        }
    }

    /// The part of `[addr, addr + len)` inside the agent's own span of the
    /// thread's stack, as offsets into that span and into the access.
    fn in_agent_stack(&self, addr: u64, len: usize) -> Option<(usize, usize, usize)> {
        let (lo, hi) = self.agent_stack;
        let end = addr.saturating_add(len as u64);
        let (a, b) = (addr.max(lo), end.min(hi));
        (a < b).then(|| ((a - lo) as usize, (a - addr) as usize, (b - a) as usize))
    }

    /// Makes `dead` this hit's stand-in for the agent's span of the stack
    /// (its bytes as they are now), once; false when the span does not fit.
    fn take_dead(&mut self) -> bool {
        if self.dead_valid {
            return true;
        }
        let (lo, hi) = self.agent_stack;
        let n = (hi - lo) as usize;
        if n > DEAD_STACK_BYTES {
            return false;
        }
        // SAFETY: the thread's own stack between the dispatcher's lowest
        // frame and the probed code's red zone: mapped, and not written
        // while the handler runs (it runs on the agent's stack).
        unsafe { core::ptr::copy_nonoverlapping(lo as *const u8, self.dead.as_mut_ptr(), n) };
        self.dead_valid = true;
        true
    }

    fn f(&mut self) -> Option<&mut SavedRegs> {
        // SAFETY: see `Send`; null outside a hit.
        unsafe { self.frame.as_mut() }
    }
}

/// The writable GPR of a frame by register id.
fn gpr_mut(f: &mut SavedRegs, id: u16) -> Option<&mut u64> {
    Some(match id {
        0x06 => &mut f.rax,
        0x07 => &mut f.rbx,
        0x08 => &mut f.rcx,
        0x09 => &mut f.rdx,
        0x0A => &mut f.rdi,
        0x0B => &mut f.rsi,
        0x0F => &mut f.rbp,
        0x10 => &mut f.r8,
        0x11 => &mut f.r9,
        0x12 => &mut f.r10,
        0x13 => &mut f.r11,
        0x14 => &mut f.r12,
        0x15 => &mut f.r13,
        0x16 => &mut f.r14,
        0x17 => &mut f.r15,
        _ => return None,
    })
}

fn le64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
    u64::from_le_bytes(a)
}

impl HitEnv for FrameEnv {
    fn read_reg(&mut self, reg: u16, part: u8) -> Option<u64> {
        let fs = self.fs_base;
        let f = self.f()?;
        let one = |v: u64| (part == 0).then_some(v);
        match reg {
            0x00..=0x05 => one(sys::segment(reg)),
            0x0C => one(f.rflags),
            0x0D => one(f.rip),
            0x0E => one(f.rsp),
            // A probe hit is not a system call (ptrace shows -1 at a breakpoint).
            0x18 => one(u64::MAX),
            0x19 => one(fs),
            0x1A => one(crate::thread::gs_base()),
            // Debug registers are not readable from user space: read as 0.
            0x2C..=0x2F | 0x32 | 0x33 => None,
            0x4D..=0x54 | 0x58..=0x5F if part <= 1 => {
                let n = if reg >= 0x58 {
                    reg - 0x58 + 8
                } else {
                    reg - 0x4D
                };
                Some(f.xmm[n as usize][part as usize])
            }
            0x55 => one(u64::from(f.mxcsr)),
            // x87 state: neither the stub nor the agent executes x87 code,
            // so the live FXSAVE image is the probed code's (same layout as
            // ptrace's user_fpregs_struct).
            0x3E..=0x45 => {
                let a = sys::fxsave();
                let i = 32 + 16 * usize::from(reg - 0x3E);
                match part {
                    0 => Some(le64(&a.0[i..i + 8])),
                    1 => Some(le64(&a.0[i + 8..i + 10])),
                    _ => None,
                }
            }
            0x46..=0x49 | 0x4B | 0x56 => {
                let a = sys::fxsave();
                one(match reg {
                    0x46 => le64(&a.0[0..2]),
                    0x47 => le64(&a.0[2..4]),
                    0x48 => le64(&a.0[4..5]),
                    0x49 => le64(&a.0[8..16]),
                    0x4B => le64(&a.0[16..24]),
                    _ => le64(&a.0[6..8]),
                })
            }
            _ => gpr_mut(f, reg).map(|v| *v).and_then(one),
        }
    }

    fn write_reg(&mut self, reg: u16, value: u64) -> Status {
        match hostfns::reg_by_id(reg) {
            None => Status::BadArgument,
            Some(info) if !info.writable || info.is_alias() => Status::ReadOnly,
            Some(_) => match self.f().and_then(|f| gpr_mut(f, reg)) {
                Some(slot) => {
                    *slot = value;
                    Status::Ok
                }
                None => Status::ReadOnly,
            },
        }
    }

    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        count_memory_syscall();
        let n = sys::vm_read(addr, buf.as_mut_ptr(), buf.len());
        // The program's code as its file has it, where jumps replace it.
        crate::sites::original_code(addr, &mut buf[..n]);
        // The handler's own writes below the red zone.
        if self.dead_valid
            && let Some((at, from, len)) = self.in_agent_stack(addr, n)
        {
            buf[from..from + len].copy_from_slice(&self.dead[at..at + len]);
        }
        n
    }

    fn write_mem(&mut self, addr: u64, data: &[u8]) -> Status {
        // All or nothing: process_vm_writev stops at the first page it may
        // not write, so check the whole range first.
        if data.is_empty() {
            return Status::Ok;
        }
        let end = addr.saturating_add(data.len() as u64 - 1);
        if !maps_allow(addr, end, true) {
            return Status::Fault;
        }
        // Below the red zone, where the stub keeps the thread's registers
        // and the dispatcher its frames: dead stack to the program, so the
        // write goes to the hit's stand-in for it (the rest of the range
        // is written as usual).
        let inside = self.in_agent_stack(addr, data.len());
        if let Some((at, from, len)) = inside {
            if !self.take_dead() {
                return Status::Fault;
            }
            self.dead[at..at + len].copy_from_slice(&data[from..from + len]);
            let (before, after) = (&data[..from], &data[from + len..]);
            let after_at = addr + (from + len) as u64;
            for (a, part) in [(addr, before), (after_at, after)] {
                if part.is_empty() {
                    continue;
                }
                count_memory_syscall();
                if sys::vm_write(a, part.as_ptr(), part.len()) != part.len() {
                    return Status::Fault;
                }
            }
            return Status::Ok;
        }
        count_memory_syscall();
        if sys::vm_write(addr, data.as_ptr(), data.len()) == data.len() {
            Status::Ok
        } else {
            Status::Fault
        }
    }

    fn check_access(&mut self, addr: u64, write: bool) -> bool {
        maps_allow(addr, addr, write)
    }

    fn tid(&self) -> u64 {
        u64::from(self.tid)
    }

    fn pid(&self) -> u64 {
        u64::from(self.pid)
    }

    fn cpu(&self) -> u64 {
        current_cpu()
    }

    fn thread_pointer(&self) -> u64 {
        self.fs_base
    }

    fn load_bias(&self) -> u64 {
        self.load_bias
    }

    fn now_ns(&self) -> u64 {
        if self.now.get() == 0 {
            let tsc = if self.tsc != 0 {
                self.tsc
            } else {
                sys::rdtsc()
            };
            self.now.set(vdso::wall_ns_at(tsc));
        }
        self.now.get()
    }

    fn entry_reg(&mut self, reg: u16) -> Option<u64> {
        self.entry?.reg(reg)
    }

    fn elapsed_ns(&self) -> Option<u64> {
        self.entry.map(|e| e.elapsed_ns)
    }

    fn gvars(&mut self) -> &mut [u64] {
        match ctrl::get() {
            Some(c) => ctrl::gvars(c),
            None => &mut [],
        }
    }
}

/// Counts a system call made for a handler's memory access
/// (`Stats::memory_syscalls`).
#[inline(always)]
fn count_memory_syscall() {
    ctrl::stats(|s| s.memory_syscalls.fetch_add(1, Ordering::Relaxed));
}

/// Whether every byte of `[start, last]` lies in mappings of this process
/// that are readable (and writable, when `write`), per `/proc/self/maps`.
fn maps_allow(start: u64, last: u64, write: bool) -> bool {
    count_memory_syscall();
    let mut need = start;
    let mut ok = false;
    for_each_mapping(|lo, hi, r, w| {
        if hi <= need {
            return true; // before the range: keep going
        }
        if lo > need || !r || (write && !w) {
            return false; // a hole or a forbidden page at `need`
        }
        if hi > last {
            ok = true;
            return false;
        }
        need = hi;
        true
    });
    ok
}

/// Streams `/proc/self/maps` lines as (start, end, readable, writable);
/// `f` returns `false` to stop.
pub(crate) fn for_each_mapping(mut f: impl FnMut(u64, u64, bool, bool) -> bool) {
    let mut buf = [0u8; 4096];
    let Some(fd) = sys::open_read(c"/proc/self/maps") else {
        return;
    };
    let mut have = 0usize;
    'read: loop {
        let r = sys::read(fd, &mut buf[have..]);
        if r <= 0 {
            break;
        }
        have += r as usize;
        let mut start = 0;
        while let Some(nl) = buf[start..have].iter().position(|&b| b == b'\n') {
            let line = &buf[start..start + nl];
            start += nl + 1;
            if let Some((lo, hi, rd, wr)) = parse_maps_line(line)
                && !f(lo, hi, rd, wr)
            {
                break 'read;
            }
        }
        buf.copy_within(start..have, 0);
        have -= start;
        if have == buf.len() {
            break; // a line longer than the buffer: give up (never in practice)
        }
    }
    sys::close(fd);
}

fn parse_maps_line(l: &[u8]) -> Option<(u64, u64, bool, bool)> {
    let hex = |s: &[u8]| -> Option<u64> {
        let mut v = 0u64;
        for &c in s {
            let d = (c as char).to_digit(16)?;
            v = v.checked_mul(16)?.checked_add(u64::from(d))?;
        }
        Some(v)
    };
    let dash = l.iter().position(|&b| b == b'-')?;
    let sp = l.iter().position(|&b| b == b' ')?;
    let lo = hex(&l[..dash])?;
    let hi = hex(&l[dash + 1..sp])?;
    let perms = l.get(sp + 1..sp + 3)?;
    Some((lo, hi, perms[0] == b'r', perms[1] == b'w'))
}

/// The records of one handler run, laid out as their ring entry will be
/// (room for the [`RunHeader`], then each record's header, data, item
/// descriptors and padding to 8 bytes), in a buffer that keeps its
/// capacity (no allocation once it has grown to a run's size): the ring
/// gets the whole entry in one copy ([`crate::ring::push_entry`]).
pub struct RunSink {
    image: Vec<u8>,
    records: usize,
    data_bytes: usize,
    /// Offset in `image` of the last record's header.
    last: usize,
}

impl RunSink {
    pub const fn new() -> Self {
        RunSink {
            image: Vec::new(),
            records: 0,
            data_bytes: 0,
            last: 0,
        }
    }

    pub fn clear(&mut self) {
        self.image.clear();
        self.records = 0;
        self.data_bytes = 0;
    }

    /// Whether the run emitted no record.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    pub fn push(&mut self, kind: u16, major: u16, minor: u16, data: &[u8], items: &[u8]) {
        if self.image.is_empty() {
            self.image.resize(RUN_HEADER_SIZE, 0);
        }
        let at = self.image.len();
        let size = record_size(data.len(), items.len() / 4);
        self.image.reserve(size);
        let rh = RecordHeader {
            kind,
            major,
            minor,
            _pad: 0,
            data_len: data.len() as u32,
            n_items: (items.len() / 4) as u32,
        };
        // SAFETY: `size` bytes are reserved after `at`; every one of them
        // is written (zeros in the last word, where the padding is, then
        // header, data, items) before `set_len`; `size` is a multiple of 8
        // and at least the header's 16.
        unsafe {
            let p = self.image.as_mut_ptr().add(at);
            (p.add(size - 8) as *mut u64).write_unaligned(0);
            core::ptr::copy_nonoverlapping(
                &rh as *const RecordHeader as *const u8,
                p,
                RECORD_HEADER_SIZE,
            );
            core::ptr::copy_nonoverlapping(data.as_ptr(), p.add(RECORD_HEADER_SIZE), data.len());
            core::ptr::copy_nonoverlapping(
                items.as_ptr(),
                p.add(RECORD_HEADER_SIZE + data.len()),
                items.len(),
            );
            self.image.set_len(at + size);
        }
        self.records += 1;
        self.data_bytes += data.len();
        self.last = at;
    }

    /// The run's entry, its header (`head` with the entry's size, kind and
    /// record count) written in front of the records.
    pub fn entry(&mut self, head: RunHeader) -> &[u8] {
        if self.image.is_empty() {
            self.image.resize(RUN_HEADER_SIZE, 0);
        }
        let h = RunHeader {
            size: self.image.len() as u32,
            kind: agent_abi::entry::RUN,
            n_records: self.records.min(u16::MAX as usize) as u16,
            ..head
        };
        // SAFETY: the image starts with RUN_HEADER_SIZE bytes of room.
        unsafe {
            core::ptr::copy_nonoverlapping(
                &h as *const RunHeader as *const u8,
                self.image.as_mut_ptr(),
                RUN_HEADER_SIZE,
            );
        }
        &self.image
    }
}

impl RecordSink for RunSink {
    fn records(&self) -> usize {
        self.records
    }
    fn bytes(&self) -> usize {
        self.data_bytes
    }
    fn push_log(&mut self, major: u16, minor: u16, data: &[u8], items: &[u8]) {
        self.push(rec::LOG, major, minor, data, items);
    }
    fn push_stacktrace(&mut self, data: &[u8]) {
        self.push(rec::STACKTRACE, 0, 0, data, &[]);
    }
    fn push_event(&mut self, kind: u16, id: u16, data: &[u8]) {
        self.push(rec::EVENT, kind, id, data, &[]);
    }
    fn extend_last(&mut self, bytes: &[u8]) {
        if self.records == 0 {
            return;
        }
        let at = self.last;
        let word = |i: &[u8], o: usize| u32::from_le_bytes([i[o], i[o + 1], i[o + 2], i[o + 3]]);
        let dlen = word(&self.image, at + 8) as usize;
        let n_items = word(&self.image, at + 12) as usize;
        let items_at = at + RECORD_HEADER_SIZE + dlen;
        let new_dlen = dlen + bytes.len();
        let new_size = record_size(new_dlen, n_items);
        let used = RECORD_HEADER_SIZE + new_dlen + 4 * n_items;
        // The record is the last one: it grows in place, its items moved
        // after the new data, its padding zeroed again.
        self.image.resize(at + new_size, 0);
        self.image
            .copy_within(items_at..items_at + 4 * n_items, items_at + bytes.len());
        self.image[items_at..items_at + bytes.len()].copy_from_slice(bytes);
        self.image[at + used..at + new_size].fill(0);
        self.image[at + 8..at + 12].copy_from_slice(&(new_dlen as u32).to_le_bytes());
        self.data_bytes += bytes.len();
    }
}

/// The service state inside the target: the running program's map region
/// (in the shared region, where the tracer reads it), the tracer's clocks
/// and the launched command's pid (from the control header), and identity
/// from the kernel (the hit thread is the calling thread).
pub struct AgentServices {
    /// The running program's map region: (offset, length) in the shared
    /// region; length 0 for none.
    pub map: (u64, u64),
}

impl Services for AgentServices {
    fn map_region(&mut self) -> Option<&mut [u8]> {
        let c = ctrl::get()?;
        (self.map.1 != 0)
            .then(|| ctrl::bytes(c, self.map.0, self.map.1))
            .flatten()
    }
    fn map_view(&self) -> Option<&[u8]> {
        let c = ctrl::get()?;
        (self.map.1 != 0)
            .then(|| ctrl::bytes(c, self.map.0, self.map.1).map(|b| &*b))
            .flatten()
    }
    fn special(&self) -> bool {
        false
    }
    fn own_pid(&self) -> u64 {
        u64::from(sys::getpid())
    }
    fn realtime_now(&self) -> u64 {
        vdso::clock_ns(sys::CLOCK_REALTIME)
    }
    fn start_mono_ns(&self) -> u64 {
        ctrl::get().map_or(0, |c| c.start_mono_ns)
    }
    fn mono_offset_ns(&self) -> u64 {
        ctrl::get().map_or(0, |c| c.mono_offset_ns)
    }
    fn boot_offset_ns(&self) -> u64 {
        let m1 = vdso::clock_ns(sys::CLOCK_MONOTONIC);
        let b = vdso::clock_ns(sys::CLOCK_BOOTTIME);
        hostfns::clock_offset(m1, b, vdso::clock_ns(sys::CLOCK_MONOTONIC), false)
    }
    fn tai_offset_ns(&self) -> u64 {
        let r1 = vdso::clock_ns(sys::CLOCK_REALTIME);
        let t = vdso::clock_ns(sys::CLOCK_TAI);
        hostfns::clock_offset(r1, t, vdso::clock_ns(sys::CLOCK_REALTIME), true)
    }
    fn uid(&mut self, _pid: u64) -> i64 {
        i64::from(sys::getuid())
    }
    fn gid(&mut self, _pid: u64, _tid: u64) -> i64 {
        i64::from(sys::getgid())
    }
    fn numa_node(&self, _cpu: u64) -> i64 {
        // The hit thread is the calling thread: the kernel's node of the
        // CPU it runs on (the TSC_AUX value is node << 12 | cpu).
        current_numa_node() as i64
    }
    fn comm(&mut self, _pid: u64, _tid: u64) -> ([u8; 16], usize) {
        sys::thread_name()
    }
    fn child_pid(&self) -> u64 {
        ctrl::get().map_or(0, |c| c.child_pid)
    }
}

/// The data of the agent's store.
pub struct AgentHost {
    pub env: FrameEnv,
    pub sink: RunSink,
    pub services: AgentServices,
    pub memory: Option<Memory>,
    pub writes_allowed: bool,
    pub limits: StoreLimits,
    /// The USDT arguments of the probe whose handler runs (`usdt_len`).
    pub usdt: [hostabi::usdt::UsdtArg; hostabi::usdt::MAX_USDT_ARGS],
    pub usdt_len: usize,
}

/// An unused slot of [`AgentHost::usdt`].
pub const NO_USDT_ARG: hostabi::usdt::UsdtArg = hostabi::usdt::UsdtArg {
    size: 8,
    signed: false,
    loc: hostabi::usdt::UsdtLoc::Imm(0),
};

impl HostData for AgentHost {
    type Env = FrameEnv;
    type Sink = RunSink;
    type Services = AgentServices;
    fn env(&self) -> &FrameEnv {
        &self.env
    }
    fn env_mut(&mut self) -> &mut FrameEnv {
        &mut self.env
    }
    fn sink(&self) -> &RunSink {
        &self.sink
    }
    fn services(&self) -> &AgentServices {
        &self.services
    }
    fn services_mut(&mut self) -> &mut AgentServices {
        &mut self.services
    }
    fn sink_and_services(&mut self) -> (&mut RunSink, &mut AgentServices) {
        (&mut self.sink, &mut self.services)
    }
    fn memory(&self) -> Option<Memory> {
        self.memory
    }
    fn writes_allowed(&self) -> bool {
        self.writes_allowed
    }
    fn usdt_args(&self) -> &[hostabi::usdt::UsdtArg] {
        &self.usdt[..self.usdt_len.min(hostabi::usdt::MAX_USDT_ARGS)]
    }
}
