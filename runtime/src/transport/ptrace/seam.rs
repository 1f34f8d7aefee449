//! The ptrace tracer behind the [`Transport`] seam: probe tags kept per
//! breakpoint and watchpoint id, the tracer's events translated one to one,
//! `exit 1` (hand-off) and `exit 3` (core file) carried out here, where the
//! thread is stopped and its registers are at hand.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use hostabi::env::HitEnv;

use super::{
    BpId, ExitStatus, HitKind, PtraceAction as PAction, PtraceEvent as PEvent, PtraceHit,
    PtraceTracer, WpId,
};
use crate::addr::RunAddr;
use crate::procmaps::Mapping;
use crate::transport::{
    Action, Armed, Capabilities, Event, Insert, OpenOptions, Report, Target, Transport,
    TransportHit, TransportInfo,
};

/// The ptrace transport in the registry.
pub static INFO: TransportInfo = TransportInfo {
    name: "ptrace",
    about: "stops the thread at each hit (int3, debug registers): handlers may write registers \
            and memory, exit 1 hands the process to gdb, exit 3 writes a core file (default)",
    caps: Capabilities {
        writes: true,
        synchronous: true,
        watchpoints: true,
        follows_forks: true,
        debugger_handoff: true,
        core_dump: true,
        later_libraries: true,
        arms_files: false,
        uses_ptrace: true,
        return_probes: false,
        step_faults: true,
        write_checks: true,
    },
    registers: None,
    preflight: |_| Ok(()),
    open,
};

/// A watchpoint's [`Armed`] has this bit set; a breakpoint's has not.
const WATCH_BIT: u64 = 1 << 32;

/// What the seam keeps in the tracer: the session's tag of every id.
#[derive(Debug, Default)]
pub(super) struct SeamState {
    bp_tags: HashMap<BpId, usize>,
    wp_tags: HashMap<WpId, usize>,
    /// The tags of the current hit (reused: no allocation per hit).
    tags: Vec<usize>,
    main_status: Option<ExitStatus>,
    handed_off: Vec<i32>,
    /// Probes made dormant by `suspend`, to arm again on `resume`.
    dormant: Vec<Dormant>,
    /// The session's handle of a probe re-armed by `resume` → its current
    /// handle (absent: the same).
    alias: HashMap<u64, u64>,
}

/// A probe `suspend` removed: what `resume` needs to arm it again.
#[derive(Debug)]
struct Dormant {
    /// The session's handle.
    handle: u64,
    tag: usize,
    pid: i32,
    addr: u64,
    /// `None` for a breakpoint.
    watch: Option<(u8, crate::arch::WatchKind)>,
}

fn open(target: Target<'_>, o: &OpenOptions) -> Result<Box<dyn Transport>, String> {
    let opts = super::TraceOptions {
        follow_forks: o.follow_forks,
        verify_opcodes: o.verify_opcodes,
    };
    let mut t = match target {
        Target::Attach(pid) => {
            crate::elog!(
                "wprobe: attaching to {pid}. Note: if wprobe is killed with SIGKILL, its \
                 breakpoints stay in the process and the next hit kills it; run `wprobe repair \
                 --pid {pid}` at once to restore the bytes (or use --transport perf, which \
                 patches nothing)."
            );
            PtraceTracer::attach(pid, opts)
        }
        Target::Launch(argv) => PtraceTracer::launch(argv, opts),
    }
    .map_err(|e| e.to_string())?;
    // A diagnostic knob for measurements: which step-over path to use.
    if let Ok(p) = std::env::var("WPROBE_STEP_POLICY") {
        use super::StepPolicy;
        match p.as_str() {
            "auto" => t.set_step_policy(StepPolicy::Auto),
            "no-emulation" => t.set_step_policy(StepPolicy::NoEmulation),
            "single-step" => t.set_step_policy(StepPolicy::SingleStepOnly),
            other => crate::elog!(
                "wprobe: warning: WPROBE_STEP_POLICY={other} is not auto, no-emulation or \
                 single-step"
            ),
        }
    }
    Ok(Box::new(t))
}

impl PtraceTracer {
    /// Carries out what the session asked after a hit.
    fn finish_hit(&mut self, action: Action, hit: &mut PtraceHit) -> PAction {
        match action {
            Action::Continue => PAction::Continue,
            Action::HandoffToDebugger => {
                let pid = hit.pid();
                crate::elog!(
                    "wprobe: process {pid} handed off to a debugger, stopped at {:#x}: run `gdb -p {pid}`",
                    hit.address()
                );
                self.seam.handed_off.push(pid as i32);
                PAction::HandoffToDebugger
            }
            Action::CoreDump => {
                let pid = hit.pid() as i32;
                let others = self.other_threads_registers(pid, hit.tid() as i32);
                match super::coredump::write_core(pid, hit, &others) {
                    Ok(path) => crate::elog!(
                        "wprobe: core file of process {pid} written to {}",
                        path.display()
                    ),
                    Err(e) => crate::elog!("wprobe: core file of process {pid} not written: {e:#}"),
                }
                PAction::Continue
            }
        }
    }
}

impl Transport for PtraceTracer {
    fn info(&self) -> &'static TransportInfo {
        &INFO
    }

    fn main_pid(&self) -> i32 {
        PtraceTracer::main_pid(self)
    }

    fn maps(&mut self, pid: i32, fresh: bool) -> Result<Vec<Mapping>, String> {
        if !self.procs.contains_key(&pid) {
            return Err(format!("process {pid} is not traced"));
        }
        if fresh {
            self.refresh_maps(pid);
        }
        Ok(PtraceTracer::maps(self, pid).to_vec())
    }

    fn insert(
        &mut self,
        tag: usize,
        pid: i32,
        addr: RunAddr,
        what: Insert,
    ) -> Result<Armed, String> {
        let addr = addr.0;
        match what {
            Insert::Breakpoint { opcode } => {
                let id = self
                    .insert_breakpoint(pid, addr, opcode)
                    .map_err(|e| e.to_string())?;
                self.seam.bp_tags.insert(id, tag);
                Ok(Armed(u64::from(id.0)))
            }
            Insert::Watchpoint { len, kind } => {
                let id = self
                    .insert_watchpoint(pid, addr, len, kind)
                    .map_err(|e| e.to_string())?;
                self.seam.wp_tags.insert(id, tag);
                Ok(Armed(WATCH_BIT | u64::from(id.0)))
            }
            Insert::Return { .. } => {
                Err("return probes are not implemented by --transport ptrace".into())
            }
        }
    }

    fn remove(&mut self, armed: Armed) {
        if let Some(i) = self.seam.dormant.iter().position(|d| d.handle == armed.0) {
            self.seam.dormant.swap_remove(i);
            return;
        }
        let current = self.seam.alias.remove(&armed.0).unwrap_or(armed.0);
        let id = current as u32;
        if current & WATCH_BIT != 0 {
            let _ = self.remove_watchpoint(WpId(id));
            self.seam.wp_tags.remove(&WpId(id));
        } else {
            let _ = self.remove_breakpoint(BpId(id));
            self.seam.bp_tags.remove(&BpId(id));
        }
    }

    fn suspend(&mut self) -> Result<(), String> {
        // The session's handle of each current id.
        let handle_of: HashMap<u64, u64> = self.seam.alias.iter().map(|(h, c)| (*c, *h)).collect();
        let handle = |current: u64| handle_of.get(&current).copied().unwrap_or(current);
        let bps: Vec<(BpId, i32, u64)> =
            self.bps.iter().map(|(id, (p, a))| (*id, *p, *a)).collect();
        for (id, pid, addr) in bps {
            let Some(tag) = self.seam.bp_tags.remove(&id) else {
                continue;
            };
            self.remove_breakpoint(id).map_err(|e| e.to_string())?;
            self.seam.dormant.push(Dormant {
                handle: handle(u64::from(id.0)),
                tag,
                pid,
                addr,
                watch: None,
            });
        }
        let wps: Vec<(WpId, i32, usize)> =
            self.wps.iter().map(|(id, (p, s))| (*id, *p, *s)).collect();
        for (id, pid, slot) in wps {
            let Some(w) = self.procs.get(&pid).and_then(|p| p.wps[slot]) else {
                continue;
            };
            let Some(tag) = self.seam.wp_tags.remove(&id) else {
                continue;
            };
            self.remove_watchpoint(id).map_err(|e| e.to_string())?;
            self.seam.dormant.push(Dormant {
                handle: handle(WATCH_BIT | u64::from(id.0)),
                tag,
                pid,
                addr: w.addr,
                watch: Some((w.len, w.kind)),
            });
        }
        self.seam.alias.clear();
        Ok(())
    }

    fn resume(&mut self) -> Result<(), String> {
        let mut first_err = None;
        for d in std::mem::take(&mut self.seam.dormant) {
            if !self.procs.contains_key(&d.pid) {
                continue; // gone meanwhile
            }
            let what = match d.watch {
                None => Insert::Breakpoint { opcode: None },
                Some((len, kind)) => Insert::Watchpoint { len, kind },
            };
            match Transport::insert(self, d.tag, d.pid, RunAddr(d.addr), what) {
                Ok(a) => {
                    if a.0 != d.handle {
                        self.seam.alias.insert(d.handle, a.0);
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(format!("process {}: {e}", d.pid));
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn set_tick(&mut self, period: Duration) {
        PtraceTracer::set_tick(self, period);
    }

    fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> anyhow::Result<Option<ExitStatus>> {
        let main = PtraceTracer::main_pid(self);
        let mut cb = |t: &mut PtraceTracer, ev: PEvent<'_>| -> PAction {
            match ev {
                PEvent::Breakpoint { bp, hit } => {
                    let mut tags = std::mem::take(&mut t.seam.tags);
                    tags.clear();
                    // A forked child carries its parent's breakpoint ids
                    // and the ones armed for it: one run per probe.
                    for id in bp {
                        if let Some(&tag) = t.seam.bp_tags.get(id)
                            && !tags.contains(&tag)
                        {
                            tags.push(tag);
                        }
                    }
                    let action = if tags.is_empty() {
                        Action::Continue
                    } else {
                        on_event(t, Event::Hit { tags: &tags, hit })
                    };
                    t.seam.tags = tags;
                    t.finish_hit(action, hit)
                }
                PEvent::Watchpoint { wp, hit } => match t.seam.wp_tags.get(&wp).copied() {
                    Some(tag) => {
                        let action = on_event(
                            t,
                            Event::Hit {
                                tags: std::slice::from_ref(&tag),
                                hit,
                            },
                        );
                        t.finish_hit(action, hit)
                    }
                    None => PAction::Continue,
                },
                PEvent::ProcessStarted { pid, parent } => {
                    on_event(t, Event::ProcessStarted { pid, parent });
                    PAction::Continue
                }
                PEvent::Exec { pid } => {
                    on_event(t, Event::Exec { pid });
                    PAction::Continue
                }
                PEvent::LibrariesChanged { pid } => {
                    on_event(t, Event::LibrariesChanged { pid });
                    PAction::Continue
                }
                PEvent::Stepped { tid, fault } => {
                    on_event(t, Event::Stepped { tid, fault });
                    PAction::Continue
                }
                PEvent::Tick => {
                    on_event(t, Event::Tick);
                    PAction::Continue
                }
                PEvent::ProcessExited { pid, status } => {
                    if pid == main {
                        t.seam.main_status = Some(status);
                    }
                    on_event(t, Event::ProcessExited { pid, status });
                    PAction::Continue
                }
            }
        };
        PtraceTracer::run(self, stop, &mut cb)?;
        Ok(self.seam.main_status)
    }

    fn detach(&mut self) -> anyhow::Result<()> {
        Ok(self.detach_all()?)
    }

    fn kill_launched(&mut self) {
        PtraceTracer::kill_launched(self);
    }

    fn report(&self) -> Report {
        let main = PtraceTracer::main_pid(self);
        Report {
            exit_status: self.exit_status(main),
            detach_signals: self.detach_signals(main),
            handed_off: self.seam.handed_off.clone(),
            code_left_alone: self.code_left_alone().to_vec(),
            detach_time: self.summary().detach_time,
        }
    }

    fn new_hit(&self) -> Box<dyn TransportHit> {
        Box::new(PtraceHit::default())
    }
}

impl TransportHit for PtraceHit {
    fn ip(&self) -> u64 {
        match self.kind() {
            HitKind::Breakpoint(a) => a,
            HitKind::Watchpoint(..) => self.regs().rip,
        }
    }

    fn set_module_bias(&mut self, bias: u64) {
        PtraceHit::set_module_bias(self, bias);
    }

    crate::swap_hit_impl!();
}
