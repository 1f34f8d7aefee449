//! The perf transport behind the [`Transport`] seam: a breakpoint at a
//! run-time address becomes a uprobe at its file offset (the instruction
//! checked in the file, where the kernel's own `int3` cannot hide it), a
//! watchpoint a hardware breakpoint event; samples are delivered as hits
//! whose tag is the probe's.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::{PerfEvent, PerfId, PerfOptions, PerfProbe, PerfTracer};
use crate::addr::RunAddr;
use crate::procmaps::{self, Mapping};
use crate::transport::ptrace::ExitStatus;
use crate::transport::{
    Action, Armed, Capabilities, Event, Insert, OpenOptions, Report, Target, Transport,
    TransportHit, TransportInfo,
};

/// The perf transport in the registry.
pub static INFO: TransportInfo = TransportInfo {
    name: "perf",
    about: "kernel uprobes and perf hardware breakpoints: the target never stops and is never \
            patched (a SIGKILL of wprobe leaves nothing behind); handlers read a sample \
            (registers, a stack snapshot) and cannot write",
    caps: Capabilities {
        writes: false,
        synchronous: false,
        watchpoints: true,
        follows_forks: true,
        debugger_handoff: false,
        core_dump: false,
        later_libraries: false,
        arms_files: true,
        uses_ptrace: false,
        return_probes: false,
        step_faults: false,
        write_checks: false,
    },
    // The general registers, rflags, cs, ss and the instruction pointer
    // (the sample's IP).
    registers: Some(|id| super::sample::perf_bit(id).is_some()),
    preflight,
    open,
};

fn preflight(breakpoints: bool) -> Result<(), String> {
    if breakpoints {
        super::check_uprobes().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn open(target: Target<'_>, o: &OpenOptions) -> Result<Box<dyn Transport>, String> {
    let opts = PerfOptions {
        follow_forks: o.follow_forks,
        stack_bytes: if o.reads_memory {
            super::STACK_SNAPSHOT_BYTES
        } else {
            0
        },
        regs_mask: super::regs_mask(o.registers, o.reads_memory),
    };
    let t = match target {
        Target::Attach(pid) => PerfTracer::attach(pid, opts),
        Target::Launch(argv) => PerfTracer::launch(argv, opts),
    }
    .map_err(|e| e.to_string())?;
    Ok(Box::new(t))
}

/// What the seam keeps in the transport.
#[derive(Debug, Default)]
pub(super) struct SeamState {
    /// The mappings read per process (arming reads them once per call).
    maps: HashMap<i32, Vec<Mapping>>,
}

impl PerfTracer {
    /// The uprobe of a breakpoint at `addr` in `pid`: its file and offset,
    /// the first byte checked against `opcode`.
    fn uprobe_at(&mut self, pid: i32, addr: u64, opcode: Option<u8>) -> Result<PerfProbe, String> {
        let maps = match self.seam.maps.get(&pid) {
            Some(m) => m,
            None => {
                let m = procmaps::read(pid).map_err(|e| format!("process {pid}: {e}"))?;
                self.seam.maps.entry(pid).or_insert(m)
            }
        };
        let m = procmaps::find(maps, addr)
            .filter(|m| m.exec && m.is_file())
            .ok_or_else(|| {
                format!("address {addr:#x} is not in an executable file mapping of process {pid}")
            })?;
        let offset = addr - m.start + m.offset;
        if let Some(op) = opcode {
            // The file's byte: a uprobe is a place in a file, and live memory
            // may already hold the kernel's int3 of another probe there.
            let mut b = [0u8];
            let read = std::fs::File::open(&m.path)
                .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, offset))
                .is_ok()
                || super::read_live(pid, addr, &mut b) == 1;
            if read && b[0] != op {
                return Err(format!(
                    "opcode mismatch at {addr:#x}: expected {op:#04x}, found {:#04x}",
                    b[0]
                ));
            }
        }
        Ok(PerfProbe::Uprobe {
            path: m.path.clone(),
            offset,
        })
    }
}

impl Transport for PerfTracer {
    fn info(&self) -> &'static TransportInfo {
        &INFO
    }

    fn main_pid(&self) -> i32 {
        PerfTracer::main_pid(self)
    }

    fn maps(&mut self, pid: i32, fresh: bool) -> Result<Vec<Mapping>, String> {
        if fresh || !self.seam.maps.contains_key(&pid) {
            let m = procmaps::read(pid).map_err(|e| format!("process {pid}: {e}"))?;
            self.seam.maps.insert(pid, m);
        }
        Ok(self.seam.maps[&pid].clone())
    }

    fn insert(
        &mut self,
        tag: usize,
        pid: i32,
        addr: RunAddr,
        what: Insert,
    ) -> Result<Armed, String> {
        let addr = addr.0;
        let probe = match what {
            Insert::Breakpoint { opcode } => self.uprobe_at(pid, addr, opcode)?,
            Insert::Watchpoint { len, kind } => {
                crate::arch::check_watchpoint(addr, len, kind).map_err(|reason| {
                    crate::transport::ptrace::ArmError::BadWatchpoint { addr, len, reason }
                        .to_string()
                })?;
                PerfProbe::Watch { addr, len, kind }
            }
            Insert::Return { .. } => {
                return Err("return probes are not implemented by --transport perf".into());
            }
        };
        let id = PerfTracer::insert(self, &probe, tag).map_err(|e| e.to_string())?;
        Ok(Armed(u64::from(id.0)))
    }

    fn insert_on_file(
        &mut self,
        tag: usize,
        file: &std::path::Path,
        offset: u64,
    ) -> Result<Armed, String> {
        let probe = PerfProbe::Uprobe {
            path: file.to_string_lossy().into_owned(),
            offset,
        };
        let id = PerfTracer::insert(self, &probe, tag).map_err(|e| e.to_string())?;
        Ok(Armed(u64::from(id.0)))
    }

    fn remove(&mut self, armed: Armed) {
        PerfTracer::remove(self, PerfId(armed.0 as u32));
    }

    fn suspend(&mut self) -> Result<(), String> {
        for p in self.probes.values_mut() {
            for c in &mut p.counters {
                c.disable()
                    .map_err(|e| format!("disabling a perf event: {e}"))?;
            }
        }
        Ok(())
    }

    fn resume(&mut self) -> Result<(), String> {
        for p in self.probes.values_mut() {
            for c in &mut p.counters {
                c.enable()
                    .map_err(|e| format!("enabling a perf event: {e}"))?;
            }
        }
        Ok(())
    }

    fn set_tick(&mut self, period: Duration) {
        PerfTracer::set_tick(self, period);
    }

    fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> anyhow::Result<Option<ExitStatus>> {
        let mut cb = |t: &mut PerfTracer, ev: PerfEvent<'_>| {
            // The target does not wait for the handler: what it asks of
            // the thread cannot be done (the session counts it).
            let _ = match ev {
                PerfEvent::Sample { tag, hit } => on_event(
                    t,
                    Event::Hit {
                        tags: std::slice::from_ref(&tag),
                        hit,
                    },
                ),
                PerfEvent::Tick => on_event(t, Event::Tick),
                PerfEvent::Lost { tag, count } => on_event(t, Event::Lost { tag, count }),
            };
        };
        Ok(PerfTracer::run(self, stop, &mut cb)?)
    }

    fn detach(&mut self) -> anyhow::Result<()> {
        self.close();
        Ok(())
    }

    fn kill_launched(&mut self) {
        PerfTracer::kill_launched(self);
    }

    fn report(&self) -> Report {
        Report {
            exit_status: self.exit_status(),
            ..Report::default()
        }
    }

    fn new_hit(&self) -> Box<dyn TransportHit> {
        Box::new(super::PerfHit::default())
    }
}

impl TransportHit for super::PerfHit {
    fn ip(&self) -> u64 {
        super::PerfHit::ip(self)
    }

    fn set_module_bias(&mut self, bias: u64) {
        super::PerfHit::set_module_bias(self, bias);
    }

    crate::swap_hit_impl!();
}
