//! Probe providers: the layers that arm probes in traced processes and
//! deliver hits. `ptrace` stops the thread for each hit (handlers may write);
//! `perf` delivers samples while the target runs (handlers observe only).
//! [`TransportHit`] is the hit of either, as the session's store holds it.

pub mod perf;
pub mod ptrace;

use hostabi::Status;
use hostabi::env::HitEnv;

/// The tids of `/proc/PID/task`, sorted (empty when the process is gone).
pub(crate) fn list_tasks(pid: i32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut v: Vec<i32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// The hit of the current handler run, from either transport. The session
/// swaps the provider's hit in and out around each run (two moves, no
/// allocation); the match per host call is one predictable branch.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value lives in the store for the whole run; only its payload is swapped per hit"
)]
pub enum TransportHit {
    /// A stopped thread (ptrace).
    Ptrace(ptrace::Hit),
    /// A perf sample (registers and stack snapshot; live memory otherwise).
    Perf(perf::PerfHit),
}

impl Default for TransportHit {
    fn default() -> TransportHit {
        TransportHit::Ptrace(ptrace::Hit::default())
    }
}

impl TransportHit {
    fn env(&self) -> &dyn HitEnv {
        match self {
            TransportHit::Ptrace(h) => h,
            TransportHit::Perf(h) => h,
        }
    }

    fn env_mut(&mut self) -> &mut dyn HitEnv {
        match self {
            TransportHit::Ptrace(h) => h,
            TransportHit::Perf(h) => h,
        }
    }

    /// Sets the load bias the handler sees.
    pub fn set_module_bias(&mut self, bias: u64) {
        match self {
            TransportHit::Ptrace(h) => h.set_module_bias(bias),
            TransportHit::Perf(h) => h.set_module_bias(bias),
        }
    }

    /// The ptrace hit slot (the variant is switched on first use).
    pub fn ptrace_slot(&mut self) -> &mut ptrace::Hit {
        if !matches!(self, TransportHit::Ptrace(_)) {
            *self = TransportHit::Ptrace(ptrace::Hit::default());
        }
        match self {
            TransportHit::Ptrace(h) => h,
            TransportHit::Perf(_) => unreachable!("invariant: variant set just above"),
        }
    }

    /// The perf hit slot (the variant is switched on first use).
    pub fn perf_slot(&mut self) -> &mut perf::PerfHit {
        if !matches!(self, TransportHit::Perf(_)) {
            *self = TransportHit::Perf(perf::PerfHit::default());
        }
        match self {
            TransportHit::Perf(h) => h,
            TransportHit::Ptrace(_) => unreachable!("invariant: variant set just above"),
        }
    }
}

/// The environment handlers see: the current hit and the run's global variables.
#[derive(Debug, Default)]
pub struct RunEnv {
    /// The hit (swapped in for each handler run).
    pub hit: TransportHit,
    /// The run's shared global variables.
    pub gvars: Vec<u64>,
}

impl HitEnv for RunEnv {
    fn read_reg(&mut self, reg: u16, part: u8) -> Option<u64> {
        self.hit.env_mut().read_reg(reg, part)
    }
    fn write_reg(&mut self, reg: u16, value: u64) -> Status {
        self.hit.env_mut().write_reg(reg, value)
    }
    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        self.hit.env_mut().read_mem(addr, buf)
    }
    fn write_mem(&mut self, addr: u64, data: &[u8]) -> Status {
        self.hit.env_mut().write_mem(addr, data)
    }
    fn check_access(&mut self, addr: u64, write: bool) -> bool {
        self.hit.env_mut().check_access(addr, write)
    }
    fn tid(&self) -> u64 {
        self.hit.env().tid()
    }
    fn pid(&self) -> u64 {
        self.hit.env().pid()
    }
    fn cpu(&self) -> u64 {
        self.hit.env().cpu()
    }
    fn thread_pointer(&self) -> u64 {
        self.hit.env().thread_pointer()
    }
    fn load_bias(&self) -> u64 {
        self.hit.env().load_bias()
    }
    fn now_ns(&self) -> u64 {
        self.hit.env().now_ns()
    }
    fn cpuid(&mut self, leaf: u32, subleaf: u32) -> [u32; 4] {
        self.hit.env_mut().cpuid(leaf, subleaf)
    }
    fn gvars(&mut self) -> &mut [u64] {
        &mut self.gvars
    }
    fn read_str(&mut self, addr: u64, buf: &mut [u8]) -> Result<usize, usize> {
        self.hit.env_mut().read_str(addr, buf)
    }
    fn entry_reg(&mut self, reg: u16) -> Option<u64> {
        self.hit.env_mut().entry_reg(reg)
    }
    fn elapsed_ns(&self) -> Option<u64> {
        self.hit.env().elapsed_ns()
    }
}
