//! `ModelEnv`: a deterministic, synthetic [`HitEnv`] for tests, benches and
//! the differential fuzzer (interpreter versus compiled Wasm).
//!
//! Everything a handler can observe is plain data in public fields, so two
//! environments can be compared with `==` after two runs of the same hit:
//!
//! * registers: every non-alias id of [`hostabi::regs::REGS`] (two parts for
//!   80- and 128-bit registers), 0 unless set; `cpuid` is not a register
//!   here (see [`ModelEnv::cpuid`]); writes go to the same map (so later
//!   reads see them) and are also appended to [`ModelEnv::reg_writes`];
//! * memory: a list of [`Region`]s with their own permissions; every address
//!   outside them is unmapped (in particular page 0); writes are all or
//!   nothing and are appended to [`ModelEnv::mem_writes`];
//! * identity: tid, pid, CPU, thread pointer, load bias and time fields;
//! * the run's global variables ([`ModelEnv::gvars`]);
//! * optional virtual I/O ports ([`ModelEnv::io_ports`]; writes are recorded
//!   in [`ModelEnv::io_writes`]) and a `callk` counter;
//! * for the hit of a return probe, the entry state of the returning call
//!   ([`ModelEnv::entry`]: the entry registers and the elapsed time; `None`
//!   for any other hit).
//!
//! `cpuid(leaf, subleaf)` is synthetic and deterministic: it returns
//! EAX = leaf, EBX = subleaf, ECX = leaf XOR 0x1234, EDX = 0x4321.
//!
//! [`ModelEnv::probe_target_hit`] and friends model the hits of the examples'
//! target program (`examples/target/probe_target.c`, reference build),
//! [`ModelEnv::probe_target_return`] the returns of its `target_fn` calls.

use std::collections::BTreeMap;

use hostabi::Status;
use hostabi::env::{EntryState, HitEnv};
use hostabi::regs;

/// A mapped range of the modelled address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// First address.
    pub base: u64,
    /// Contents; the region covers `base .. base + bytes.len()`.
    pub bytes: Vec<u8>,
    /// The process may read it.
    pub readable: bool,
    /// The process may write it.
    pub writable: bool,
}

impl Region {
    /// Index of `addr` within the region, if it lies inside.
    pub fn index_of(&self, addr: u64) -> Option<usize> {
        let off = addr.checked_sub(self.base)?;
        let off = usize::try_from(off).ok()?;
        (off < self.bytes.len()).then_some(off)
    }
}

/// A synthetic hit environment (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelEnv {
    /// Register values by (non-alias id, part); absent entries read as 0.
    pub regs: BTreeMap<(u16, u8), u64>,
    /// Every successful `write_reg`: (non-alias id, value), in order.
    pub reg_writes: Vec<(u16, u64)>,
    /// Mapped memory; regions must not overlap (the first match wins).
    pub regions: Vec<Region>,
    /// Every successful `write_mem`: (address, bytes), in order.
    pub mem_writes: Vec<(u64, Vec<u8>)>,
    /// Thread id of the hit thread (`push pid`).
    pub tid: u64,
    /// Process id.
    pub pid: u64,
    /// CPU number (`push procid`).
    pub cpu: u64,
    /// Thread pointer (`push task`).
    pub thread_pointer: u64,
    /// Load bias of the program's module (added to `push <symbol>`).
    pub load_bias: u64,
    /// Wall-clock time of the hit in ns.
    pub now_ns: u64,
    /// The run's shared global variables.
    pub gvars: Vec<u64>,
    /// Virtual I/O ports and their current values; other ports have no device.
    pub io_ports: BTreeMap<u64, u64>,
    /// Every served `io_out`: (port, width in bytes, value), in order.
    pub io_writes: Vec<(u64, u8, u64)>,
    /// Number of `callk` calls.
    pub callk_count: u64,
    /// The entry state of the returning call, when this is the hit of a
    /// return probe (`entry_reg`, `elapsed_ns`); `None` otherwise.
    pub entry: Option<EntryState>,
}

impl Default for ModelEnv {
    fn default() -> Self {
        ModelEnv::new()
    }
}

/// Mask of the low `width` bytes (width ≥ 8: all bits).
fn width_mask(width: u8) -> u64 {
    if width >= 8 {
        u64::MAX
    } else {
        (1u64 << (u32::from(width) * 8)) - 1
    }
}

/// Reference-build addresses of the examples' target program.
pub mod probe_target {
    /// `target_fn` (its first instruction: `55 48 89 e5`).
    pub const TARGET_FN: u64 = 0x401146;
    /// `bump`.
    pub const BUMP: u64 = 0x401191;
    /// `main`.
    pub const MAIN: u64 = 0x4011aa;
    /// `char greeting[32] = "hello, probes"`.
    pub const GREETING: u64 = 0x404040;
    /// `struct point origin = { 3, -4 }`.
    pub const ORIGIN: u64 = 0x404060;
    /// `volatile long counter`.
    pub const COUNTER: u64 = 0x404078;
    /// The instruction after the store to `counter` in `target_fn`
    /// (rip of a `w` watchpoint hit on `counter` there).
    pub const AFTER_COUNTER_STORE: u64 = 0x401170;
    /// Start of the modelled `.text` page (readable, not writable).
    pub const TEXT: u64 = 0x401000;
    /// Start of the modelled `.data` page (readable and writable).
    pub const DATA: u64 = 0x404000;
    /// Start of the modelled stack (readable and writable).
    pub const STACK: u64 = 0x7fff_fffe_0000;
    /// Size of the modelled stack.
    pub const STACK_SIZE: u64 = 0x1f000;
    /// rsp at the entry of `target_fn` and `bump` (return address on top).
    pub const RSP_IN_CALLEE: u64 = 0x7fff_ffff_e3c8;
    /// rsp at the entry of `main`.
    pub const RSP_IN_MAIN: u64 = 0x7fff_ffff_e418;
    /// The return address of the `target_fn` calls: the instruction in
    /// `main` after the call (rip of a return-probe hit on `target_fn`).
    pub const TARGET_FN_RETURN: u64 = 0x401205;
    /// Modelled duration of the call `target_fn(a, …)`: `ELAPSED_BASE_NS +
    /// a * ELAPSED_STEP_NS` nanoseconds.
    pub const ELAPSED_BASE_NS: u64 = 1500;
    /// See [`ELAPSED_BASE_NS`].
    pub const ELAPSED_STEP_NS: u64 = 250;
    /// Thread id and process id of the modelled process.
    pub const TID: u64 = 4242;
    /// CPU number of the modelled hits.
    pub const CPU: u64 = 3;
    /// Thread pointer (`fs_base`) of the modelled thread.
    pub const THREAD_POINTER: u64 = 0x7fff_f7d8_a740;
}

impl ModelEnv {
    /// An empty environment: no memory, all registers 0, tid = pid = 1000,
    /// cpu 0, thread pointer 0x7000_0000_1000, load bias 0, time 1.7e18 ns,
    /// no global variables, no I/O ports.
    pub fn new() -> ModelEnv {
        ModelEnv {
            regs: BTreeMap::new(),
            reg_writes: Vec::new(),
            regions: Vec::new(),
            mem_writes: Vec::new(),
            tid: 1000,
            pid: 1000,
            cpu: 0,
            thread_pointer: 0x7000_0000_1000,
            load_bias: 0,
            now_ns: 1_700_000_000_000_000_000,
            gvars: Vec::new(),
            io_ports: BTreeMap::new(),
            io_writes: Vec::new(),
            callk_count: 0,
            entry: None,
        }
    }

    /// Sets a register (part 0). An alias id sets its 64-bit register to the
    /// zero-extended low 32 bits of `value`; unknown ids and `cpuid` are ignored.
    pub fn set_reg(&mut self, id: u16, value: u64) -> &mut Self {
        if let Some(info) = regs::by_id(id) {
            if info.is_alias() {
                self.set_reg_part(info.base_id(), 0, value & 0xFFFF_FFFF);
            } else {
                self.set_reg_part(id, 0, value);
            }
        }
        self
    }

    /// Sets part `part` (0 low, 1 high) of a non-alias register; ignored for
    /// an unknown id, an alias, `cpuid` or a part the register does not have.
    pub fn set_reg_part(&mut self, id: u16, part: u8, value: u64) -> &mut Self {
        if let Some(info) = regs::by_id(id)
            && !info.is_alias()
            && info.id != regs::CPUID
            && part < info.parts()
        {
            self.regs.insert((id, part), value);
        }
        self
    }

    /// Current value of a register (part 0; aliases give the low 32 bits).
    pub fn reg(&self, id: u16) -> u64 {
        self.reg_part(id, 0)
    }

    /// Current value of part `part` of a register (0 if unknown or unset).
    pub fn reg_part(&self, id: u16, part: u8) -> u64 {
        match regs::by_id(id) {
            Some(info) if info.is_alias() => {
                self.regs.get(&(info.base_id(), part)).copied().unwrap_or(0) & 0xFFFF_FFFF
            }
            Some(_) => self.regs.get(&(id, part)).copied().unwrap_or(0),
            None => 0,
        }
    }

    /// Maps a region (it must not overlap an existing one).
    pub fn map(&mut self, base: u64, bytes: Vec<u8>, readable: bool, writable: bool) -> &mut Self {
        self.regions.push(Region {
            base,
            bytes,
            readable,
            writable,
        });
        self
    }

    /// Sets the number of global variables (new ones are 0).
    pub fn with_gvars(&mut self, n: usize) -> &mut Self {
        self.gvars.resize(n, 0);
        self
    }

    /// Serves I/O port `port` with initial value `value`.
    pub fn add_io_port(&mut self, port: u64, value: u64) -> &mut Self {
        self.io_ports.insert(port, value);
        self
    }

    fn region_of(&self, addr: u64) -> Option<(usize, usize)> {
        self.regions
            .iter()
            .enumerate()
            .find_map(|(r, reg)| reg.index_of(addr).map(|i| (r, i)))
    }

    /// Whether `len` bytes at `addr` are all mapped with the given access.
    fn accessible(&self, addr: u64, len: usize, write: bool) -> bool {
        (0..len).all(|i| {
            addr.checked_add(i as u64)
                .and_then(|a| self.region_of(a))
                .and_then(|(r, _)| self.regions.get(r))
                .is_some_and(|reg| reg.readable && (!write || reg.writable))
        })
    }

    /// Test helper: `len` bytes at `addr` regardless of permissions, if all mapped.
    pub fn peek(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        (0..len)
            .map(|i| {
                let a = addr.checked_add(i as u64)?;
                let (r, off) = self.region_of(a)?;
                self.regions.get(r)?.bytes.get(off).copied()
            })
            .collect()
    }

    /// Test helper: the little-endian u64 at `addr`, if mapped.
    pub fn peek_u64(&self, addr: u64) -> Option<u64> {
        let b = self.peek(addr, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b);
        Some(u64::from_le_bytes(a))
    }

    /// Test helper: stores bytes at `addr` regardless of permissions (no
    /// write is recorded); bytes outside every region are dropped.
    pub fn poke(&mut self, addr: u64, data: &[u8]) -> &mut Self {
        for (i, b) in data.iter().enumerate() {
            if let Some(a) = addr.checked_add(i as u64)
                && let Some((r, off)) = self.region_of(a)
                && let Some(slot) = self
                    .regions
                    .get_mut(r)
                    .and_then(|reg| reg.bytes.get_mut(off))
            {
                *slot = *b;
            }
        }
        self
    }

    /// A hit of `target_fn(a, 7, greeting)` in the reference build of the
    /// examples' target (breakpoint at its first instruction, 0x401146):
    /// rip = 0x401146, rdi = a, rsi = 7, rdx = &greeting, rsp in the stack
    /// region with a return address into `main` on top; memory as described
    /// in [`ModelEnv::probe_target_base`], with `counter` holding its value
    /// before this call's update (the sum 0 + 1 + … + (a − 1)).
    pub fn probe_target_hit(a: u64) -> ModelEnv {
        use probe_target as t;
        let before = (u128::from(a) * u128::from(a.wrapping_sub(1)) / 2) as u64;
        let mut env = ModelEnv::probe_target_base(before);
        env.set_reg(0x0D, t::TARGET_FN)
            .set_reg(0x0A, a)
            .set_reg(0x0B, 7)
            .set_reg(0x09, t::GREETING)
            .set_reg(0x0E, t::RSP_IN_CALLEE)
            .set_reg(0x0F, t::RSP_IN_CALLEE + 0x38)
            .set_reg(0x06, a);
        env.poke(t::RSP_IN_CALLEE, &t::TARGET_FN_RETURN.to_le_bytes());
        env
    }

    /// The return of `target_fn(a, 7, greeting)` as a return probe on
    /// `target_fn` sees it (spec §6.5): the registers after its `ret` — rip =
    /// the return address in `main` (0x401205), rsp = the entry's rsp + 8,
    /// rbp = `main`'s frame again, rax = the return value 7a + 13; rdi
    /// still points at the string (strlen's argument) and rsi, rdx, rcx
    /// hold what strlen left (modelled as 0); `counter` updated (0 + 1 + … +
    /// a); and the entry state: rdi = a, rsi = 7, rdx = &greeting, rcx = r8
    /// = r9 = 0, rsp = the entry's rsp, and an elapsed time of 1500 + 250a ns.
    pub fn probe_target_return(a: u64) -> ModelEnv {
        use probe_target as t;
        let mut env = ModelEnv::probe_target_store(a);
        env.set_reg(regs::RIP, t::TARGET_FN_RETURN)
            .set_reg(regs::RSP, t::RSP_IN_CALLEE + 8)
            .set_reg(0x0F, t::RSP_IN_CALLEE + 0x38)
            .set_reg(regs::RAX, a.wrapping_mul(7).wrapping_add(13))
            .set_reg(regs::RDI, t::GREETING)
            .set_reg(regs::RSI, 0)
            .set_reg(regs::RDX, 0);
        env.entry = Some(EntryState {
            regs: [a, 7, t::GREETING, 0, 0, 0, t::RSP_IN_CALLEE],
            elapsed_ns: t::ELAPSED_BASE_NS.wrapping_add(a.wrapping_mul(t::ELAPSED_STEP_NS)),
        });
        env
    }

    /// A hit of a `w` watchpoint on `counter` right after the store in
    /// `target_fn(a, …)`: like [`ModelEnv::probe_target_hit`] but rip =
    /// 0x401170 (the instruction after the store), rsp/rbp inside the
    /// callee's frame, and `counter` already updated (0 + 1 + … + a).
    pub fn probe_target_store(a: u64) -> ModelEnv {
        use probe_target as t;
        let after = (u128::from(a) * u128::from(a.wrapping_add(1)) / 2) as u64;
        let mut env = ModelEnv::probe_target_hit(a);
        env.poke(t::COUNTER, &after.to_le_bytes());
        env.set_reg(0x0D, t::AFTER_COUNTER_STORE)
            .set_reg(0x0E, t::RSP_IN_CALLEE - 0x28)
            .set_reg(0x0F, t::RSP_IN_CALLEE - 8)
            .set_reg(0x06, after);
        env
    }

    /// A hit of `bump()` (rip = 0x401191) after the three `target_fn`
    /// calls: `counter` = 3.
    pub fn probe_target_bump() -> ModelEnv {
        use probe_target as t;
        let mut env = ModelEnv::probe_target_base(3);
        env.set_reg(0x0D, t::BUMP)
            .set_reg(0x0E, t::RSP_IN_CALLEE)
            .set_reg(0x0F, t::RSP_IN_CALLEE + 0x38)
            .set_reg(0x06, 27);
        env.poke(t::RSP_IN_CALLEE, &0x401207u64.to_le_bytes());
        env
    }

    /// A hit of `main` (rip = 0x4011aa) at program start: `counter` = 0,
    /// rdi = argc = 1, rsi = argv (in the stack region).
    pub fn probe_target_main() -> ModelEnv {
        use probe_target as t;
        let mut env = ModelEnv::probe_target_base(0);
        let argv = t::RSP_IN_MAIN + 0x108;
        env.set_reg(0x0D, t::MAIN)
            .set_reg(0x0A, 1)
            .set_reg(0x0B, argv)
            .set_reg(0x09, argv + 0x10)
            .set_reg(0x0E, t::RSP_IN_MAIN)
            .set_reg(0x0F, 1)
            .set_reg(0x06, t::MAIN);
        env
    }

    /// The process image shared by the `probe_target_*` hits, with `counter`
    /// = `counter`: `.text` page 0x401000 (readable, not writable; `nop`
    /// bytes with the real prologues `55 48 89 e5` at `target_fn`, `bump`
    /// and `main`), `.data` page 0x404000 (readable and writable; greeting
    /// "hello, probes" padded to 32 bytes at 0x404040, origin {3, −4} at
    /// 0x404060, counter at 0x404078), and a writable stack region. Segment
    /// registers cs = 0x33, ss = 0x2b; rflags = 0x246; orig_rax = −1;
    /// fs_base = the thread pointer; mxcsr = 0x1f80, fcw = 0x37f; tid = pid =
    /// 4242, cpu 3.
    pub fn probe_target_base(counter: u64) -> ModelEnv {
        use probe_target as t;
        let mut env = ModelEnv::new();
        env.tid = t::TID;
        env.pid = t::TID;
        env.cpu = t::CPU;
        env.thread_pointer = t::THREAD_POINTER;
        let mut text = vec![0x90u8; 0x1000];
        for f in [t::TARGET_FN, t::BUMP, t::MAIN] {
            let o = (f - t::TEXT) as usize;
            text[o..o + 4].copy_from_slice(&[0x55, 0x48, 0x89, 0xe5]);
        }
        let mut data = vec![0u8; 0x1000];
        let g = (t::GREETING - t::DATA) as usize;
        data[g..g + 13].copy_from_slice(b"hello, probes");
        let o = (t::ORIGIN - t::DATA) as usize;
        data[o..o + 8].copy_from_slice(&3u64.to_le_bytes());
        data[o + 8..o + 16].copy_from_slice(&(-4i64 as u64).to_le_bytes());
        let c = (t::COUNTER - t::DATA) as usize;
        data[c..c + 8].copy_from_slice(&counter.to_le_bytes());
        env.map(t::TEXT, text, true, false)
            .map(t::DATA, data, true, true)
            .map(t::STACK, vec![0u8; t::STACK_SIZE as usize], true, true);
        env.set_reg(0x00, 0x33)
            .set_reg(0x05, 0x2b)
            .set_reg(0x0C, 0x246)
            .set_reg(0x18, u64::MAX)
            .set_reg(0x19, t::THREAD_POINTER)
            .set_reg(0x46, 0x37f)
            .set_reg(0x55, 0x1f80);
        env
    }
}

impl HitEnv for ModelEnv {
    fn read_reg(&mut self, reg: u16, part: u8) -> Option<u64> {
        let info = regs::by_id(reg)?;
        if info.is_alias() || info.id == regs::CPUID || part >= info.parts() {
            return None;
        }
        Some(self.regs.get(&(reg, part)).copied().unwrap_or(0))
    }

    fn write_reg(&mut self, reg: u16, value: u64) -> Status {
        match regs::by_id(reg) {
            None => Status::BadArgument,
            Some(info) if info.is_alias() => Status::BadArgument,
            Some(info) if !info.writable => Status::ReadOnly,
            Some(_) => {
                self.regs.insert((reg, 0), value);
                self.reg_writes.push((reg, value));
                Status::Ok
            }
        }
    }

    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        // A region at a time (regions do not overlap): one lookup per
        // region crossed, not per byte.
        let mut done = 0;
        while done < buf.len() {
            let Some((r, off)) = addr
                .checked_add(done as u64)
                .and_then(|a| self.region_of(a))
            else {
                break;
            };
            let reg = &self.regions[r];
            if !reg.readable {
                break;
            }
            let n = (buf.len() - done).min(reg.bytes.len() - off);
            buf[done..done + n].copy_from_slice(&reg.bytes[off..off + n]);
            done += n;
        }
        done
    }

    fn write_mem(&mut self, addr: u64, data: &[u8]) -> Status {
        if !self.accessible(addr, data.len(), true) {
            return Status::Fault;
        }
        self.poke(addr, data);
        self.mem_writes.push((addr, data.to_vec()));
        Status::Ok
    }

    fn check_access(&mut self, addr: u64, write: bool) -> bool {
        self.accessible(addr, 1, write)
    }

    fn tid(&self) -> u64 {
        self.tid
    }

    fn pid(&self) -> u64 {
        self.pid
    }

    fn cpu(&self) -> u64 {
        self.cpu
    }

    fn thread_pointer(&self) -> u64 {
        self.thread_pointer
    }

    fn load_bias(&self) -> u64 {
        self.load_bias
    }

    fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Synthetic: EAX = leaf, EBX = subleaf, ECX = leaf XOR 0x1234, EDX = 0x4321.
    fn cpuid(&mut self, leaf: u32, subleaf: u32) -> [u32; 4] {
        [leaf, subleaf, leaf ^ 0x1234, 0x4321]
    }

    fn gvars(&mut self) -> &mut [u64] {
        &mut self.gvars
    }

    /// Served ports return their current value, masked to `width` bytes.
    fn io_in(&mut self, port: u64, width: u8) -> Option<u64> {
        self.io_ports.get(&port).map(|v| v & width_mask(width))
    }

    /// Served ports take the low `width` bytes of `value` as their new value.
    fn io_out(&mut self, port: u64, width: u8, value: u64) -> bool {
        let v = value & width_mask(width);
        match self.io_ports.get_mut(&port) {
            Some(slot) => {
                *slot = v;
                self.io_writes.push((port, width, v));
                true
            }
            None => false,
        }
    }

    fn callk(&mut self) {
        self.callk_count += 1;
    }

    fn entry_reg(&mut self, reg: u16) -> Option<u64> {
        self.entry.as_ref()?.reg(reg)
    }

    fn elapsed_ns(&self) -> Option<u64> {
        self.entry.as_ref().map(|e| e.elapsed_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_parts_aliases_and_read_only() {
        let mut e = ModelEnv::new();
        e.set_reg(0x06, 0x1122_3344_5566_7788)
            .set_reg_part(0x4D, 1, 0xAA)
            .set_reg_part(0x4D, 0, 0xBB);
        assert_eq!(e.read_reg_any(0x106, 0), Some(0x5566_7788));
        assert_eq!(e.read_reg_any(0x4D, 1), Some(0xAA));
        assert_eq!(e.read_reg_any(0x4D, 0), Some(0xBB));
        assert_eq!(e.read_reg_any(0x06, 1), None);
        assert_eq!(e.read_reg_any(regs::CPUID, 0), None);
        assert_eq!(e.read_reg_any(0x999, 0), None);
        assert_eq!(e.write_reg_any(0x0D, 1), Status::ReadOnly);
        assert_eq!(e.write_reg_any(0x999, 1), Status::BadArgument);
        assert_eq!(e.write_reg_any(0x106, u64::MAX), Status::Ok);
        assert_eq!(e.reg(0x06), 0xFFFF_FFFF);
        assert_eq!(e.reg_writes, [(0x06, 0xFFFF_FFFF)]);
        assert_eq!(e.cpuid(1, 0), [1, 0, 0x1235, 0x4321]);
    }

    #[test]
    fn memory_permissions_and_faults() {
        let mut e = ModelEnv::probe_target_hit(2);
        let mut b = [0u8; 14];
        assert_eq!(e.read_str(probe_target::GREETING, &mut b), Ok(13));
        assert_eq!(&b[..13], b"hello, probes");
        assert_eq!(e.peek_u64(probe_target::COUNTER), Some(1));
        assert_eq!(e.peek_u64(probe_target::ORIGIN + 8), Some(-4i64 as u64));
        let mut b = [0u8; 8];
        assert_eq!(e.read_mem(0x10, &mut b), 0);
        assert_eq!(e.read_mem(0x404ffc, &mut b), 4);
        assert!(e.check_access(probe_target::TARGET_FN, false));
        assert!(!e.check_access(probe_target::TARGET_FN, true));
        assert!(e.check_access(probe_target::GREETING, true));
        assert!(!e.check_access(0, false));
        assert_eq!(e.write_mem(probe_target::TARGET_FN, &[1]), Status::Fault);
        assert_eq!(e.write_mem(0x404ffc, &[1; 8]), Status::Fault);
        assert_eq!(e.peek(0x404ffc, 4), Some(vec![0; 4]));
        assert_eq!(e.write_mem(probe_target::COUNTER, &[9]), Status::Ok);
        assert_eq!(e.peek_u64(probe_target::COUNTER), Some(9));
        let mut b = [0u8; 2];
        assert_eq!(e.read_mem(u64::MAX, &mut b), 0);
        assert_eq!(e.reg(0x0D), probe_target::TARGET_FN);
        assert_eq!(
            ModelEnv::probe_target_bump().peek_u64(probe_target::COUNTER),
            Some(3)
        );
        assert_eq!(
            ModelEnv::probe_target_store(2).peek_u64(probe_target::COUNTER),
            Some(3)
        );
    }

    #[test]
    fn return_hits_carry_their_entry_state() {
        let mut e = ModelEnv::probe_target_return(2);
        assert_eq!(e.reg(regs::RAX), 27);
        assert_eq!(e.reg(regs::RIP), probe_target::TARGET_FN_RETURN);
        assert_eq!(e.reg(regs::RSP), probe_target::RSP_IN_CALLEE + 8);
        assert_eq!(e.entry_reg(regs::RDI), Some(2));
        assert_eq!(e.entry_reg(regs::RSI), Some(7));
        assert_eq!(e.entry_reg(regs::RSP), Some(probe_target::RSP_IN_CALLEE));
        assert_eq!(e.entry_reg(regs::RAX), None);
        assert_eq!(e.elapsed_ns(), Some(2000));
        assert_eq!(e.peek_u64(probe_target::COUNTER), Some(3));
        let mut hit = ModelEnv::probe_target_hit(2);
        assert_eq!((hit.entry_reg(regs::RDI), hit.elapsed_ns()), (None, None));
    }

    #[test]
    fn io_ports_and_callk() {
        let mut e = ModelEnv::new();
        e.add_io_port(0x60, 0x1234);
        assert_eq!(e.io_in(0x60, 1), Some(0x34));
        assert_eq!(e.io_in(0x61, 1), None);
        assert!(e.io_out(0x60, 2, 0xABCDEF));
        assert!(!e.io_out(0x61, 2, 0));
        assert_eq!(e.io_writes, [(0x60, 2, 0xCDEF)]);
        e.callk();
        assert_eq!(e.callk_count, 1);
    }
}
