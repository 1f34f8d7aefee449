//! The ptrace tracer behind the [`Transport`] seam: probe tags kept per
//! breakpoint and watchpoint id, the tracer's events translated one to one,
//! `exit 1` (hand-off) and `exit 3` (core file) carried out here, where the
//! thread is stopped and its registers are at hand.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use hostabi::env::{EntryState, HitEnv};

use super::{Action as PAction, BpId, Event as PEvent, ExitStatus, Hit, HitKind, Tracer, WpId};
use crate::procmaps::Mapping;
use crate::transport::calls::{Call, CallStacks, Gone, Left};
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
        return_probes: true,
    },
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
    /// Return probes: the entry breakpoint's id → (tag, maxactive).
    ret_probes: HashMap<BpId, (usize, u32)>,
    /// The return probes at the current entry (reused).
    ret_tags: Vec<(usize, u32)>,
    /// The tracked calls of every thread.
    calls: CallStacks,
    /// Calls that ended without a return, to report (reused).
    gone: Vec<Gone>,
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
            Tracer::attach(pid, opts)
        }
        Target::Launch(argv) => Tracer::launch(argv, opts),
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

/// How the seam reports to the session.
type OnEvent<'a> = &'a mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action;

impl Tracer {
    /// Reports the calls collected in `seam.gone` as [`Event::Unwound`]
    /// (but those of disabled probes) and lets go of their return sites.
    fn flush_gone(&mut self, on_event: OnEvent<'_>) {
        if self.seam.gone.is_empty() {
            return;
        }
        let mut gone = std::mem::take(&mut self.seam.gone);
        for g in &gone {
            let c = &g.call;
            self.release_return_site(c.pid, c.ret_addr);
            if g.cause != Left::Disabled {
                on_event(
                    self,
                    Event::Unwound {
                        tag: c.tag,
                        pid: c.pid,
                        tid: g.tid,
                        entry_rsp: c.entry_rsp,
                        entry_ns: c.entry_ns,
                        cause: g.cause,
                    },
                );
            }
        }
        gone.clear();
        self.seam.gone = gone;
    }

    /// A breakpoint hit: the entry of return probes' functions (their calls
    /// tracked, abandoned ones reported first) and the hit of plain probes.
    fn on_breakpoint(&mut self, bp: &[BpId], hit: &mut Hit, on_event: OnEvent<'_>) -> PAction {
        let mut tags = std::mem::take(&mut self.seam.tags);
        let mut rets = std::mem::take(&mut self.seam.ret_tags);
        tags.clear();
        rets.clear();
        // A forked child carries its parent's breakpoint ids and the ones
        // armed for it: one run per probe.
        for id in bp {
            if let Some(&(tag, max)) = self.seam.ret_probes.get(id) {
                if !rets.iter().any(|(t, _)| *t == tag) {
                    rets.push((tag, max));
                }
            } else if let Some(&tag) = self.seam.bp_tags.get(id)
                && !tags.contains(&tag)
            {
                tags.push(tag);
            }
        }
        let (tid, pid) = (hit.tid() as i32, hit.pid() as i32);
        let func = hit.address();
        let mut ret_addr = None;
        if !rets.is_empty() {
            let rsp = hit.regs().rsp;
            let mut b = [0u8; 8];
            if hit.read_mem(rsp, &mut b) == 8 {
                let ra = u64::from_le_bytes(b);
                ret_addr = Some(ra);
                self.seam
                    .calls
                    .prune_at_entry(tid, rsp, ra, func, &mut self.seam.gone);
                self.flush_gone(on_event);
            }
        }
        let mut action = Action::Continue;
        if !tags.is_empty() {
            action = on_event(self, Event::Hit { tags: &tags, hit });
        }
        let paction = self.finish_hit(action, hit);
        if paction == PAction::HandoffToDebugger {
            self.let_go_calls(pid, on_event);
        } else if !rets.is_empty() {
            // After the plain probes' handlers: the entry state is what the
            // function receives.
            let now = crate::sys::time::monotonic_ns();
            let r = *hit.regs();
            for &(tag, max) in &rets {
                let tracked = ret_addr.is_some_and(|ra| {
                    let call = Call {
                        tag,
                        pid,
                        func,
                        entry_rsp: r.rsp,
                        ret_addr: ra,
                        regs: [r.rdi, r.rsi, r.rdx, r.rcx, r.r8, r.r9, r.rsp],
                        entry_ns: now,
                    };
                    self.seam.calls.live(pid, tag) < max
                        && self.retain_return_site(pid, ra).is_ok()
                        && self.seam.calls.push(tid, call, max)
                });
                if !tracked {
                    on_event(self, Event::Missed { tag, count: 1 });
                }
            }
        }
        self.seam.tags = tags;
        self.seam.ret_tags = rets;
        paction
    }

    /// A thread at a return site: the tracked calls that return there run
    /// their handlers (innermost first, after the calls found abandoned are
    /// reported); a site nothing returns to any more is removed.
    fn on_return_site(&mut self, hit: &mut Hit, on_event: OnEvent<'_>) -> PAction {
        let (tid, pid) = (hit.tid() as i32, hit.pid() as i32);
        let at = hit.address();
        let n = self
            .seam
            .calls
            .returning(tid, hit.regs().rsp, Some(at), &mut self.seam.gone);
        self.flush_gone(on_event);
        if n == 0 {
            self.drop_idle_return_site(pid, at);
            return PAction::Continue;
        }
        let now = crate::sys::time::monotonic_ns();
        for _ in 0..n {
            let Some(c) = self.seam.calls.pop(tid) else {
                break;
            };
            self.release_return_site(pid, at);
            let entry = EntryState {
                regs: c.regs,
                elapsed_ns: now.saturating_sub(c.entry_ns),
            };
            hit.set_return(Some((c.func, entry)));
            let action = on_event(
                self,
                Event::Hit {
                    tags: std::slice::from_ref(&c.tag),
                    hit,
                },
            );
            hit.set_return(None);
            if self.finish_hit(action, hit) == PAction::HandoffToDebugger {
                self.let_go_calls(pid, on_event);
                return PAction::HandoffToDebugger;
            }
        }
        PAction::Continue
    }

    /// The calls of `pid`, let go (the process is handed off): reported.
    fn let_go_calls(&mut self, pid: i32, on_event: OnEvent<'_>) {
        self.seam
            .calls
            .end_process(pid, Left::Detach, &mut self.seam.gone);
        self.flush_gone(on_event);
    }

    /// Carries out what the session asked after a hit.
    fn finish_hit(&mut self, action: Action, hit: &mut Hit) -> PAction {
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

impl Transport for Tracer {
    fn info(&self) -> &'static TransportInfo {
        &INFO
    }

    fn main_pid(&self) -> i32 {
        Tracer::main_pid(self)
    }

    fn maps(&mut self, pid: i32, fresh: bool) -> Result<Vec<Mapping>, String> {
        if !self.procs.contains_key(&pid) {
            return Err(format!("process {pid} is not traced"));
        }
        if fresh {
            self.refresh_maps(pid);
        }
        Ok(Tracer::maps(self, pid).to_vec())
    }

    fn insert(&mut self, tag: usize, pid: i32, addr: u64, what: Insert) -> Result<Armed, String> {
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
            Insert::Return { opcode, maxactive } => {
                let id = self
                    .insert_breakpoint(pid, addr, opcode)
                    .map_err(|e| e.to_string())?;
                self.seam.ret_probes.insert(id, (tag, maxactive));
                Ok(Armed(u64::from(id.0)))
            }
        }
    }

    fn remove(&mut self, armed: Armed) {
        let id = armed.0 as u32;
        if armed.0 & WATCH_BIT != 0 {
            let _ = self.remove_watchpoint(WpId(id));
            self.seam.wp_tags.remove(&WpId(id));
        } else {
            let _ = self.remove_breakpoint(BpId(id));
            self.seam.bp_tags.remove(&BpId(id));
            if let Some((tag, _)) = self.seam.ret_probes.remove(&BpId(id)) {
                // Calls still live return without a handler run, and are
                // not missed: the probe is gone (spec §6.5).
                self.seam.calls.drop_probe(tag, &mut self.seam.gone);
                let gone = std::mem::take(&mut self.seam.gone);
                for g in &gone {
                    self.release_return_site(g.call.pid, g.call.ret_addr);
                }
                self.seam.gone = gone;
                self.seam.gone.clear();
            }
        }
    }

    fn set_tick(&mut self, period: Duration) {
        Tracer::set_tick(self, period);
    }

    fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> anyhow::Result<Option<ExitStatus>> {
        let main = Tracer::main_pid(self);
        let mut cb = |t: &mut Tracer, ev: PEvent<'_>| -> PAction {
            match ev {
                PEvent::Breakpoint { bp, hit } => t.on_breakpoint(bp, hit, on_event),
                PEvent::ReturnSite { hit } => t.on_return_site(hit, on_event),
                PEvent::ThreadExited { pid: _, tid } => {
                    t.seam
                        .calls
                        .end_thread(tid, Left::ThreadExit, &mut t.seam.gone);
                    t.flush_gone(on_event);
                    PAction::Continue
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
                    t.seam.calls.end_process(pid, Left::Exec, &mut t.seam.gone);
                    t.flush_gone(on_event);
                    on_event(t, Event::Exec { pid });
                    PAction::Continue
                }
                PEvent::LibrariesChanged { pid } => {
                    on_event(t, Event::LibrariesChanged { pid });
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
                    t.seam
                        .calls
                        .end_process(pid, Left::ProcessExit, &mut t.seam.gone);
                    t.flush_gone(on_event);
                    on_event(t, Event::ProcessExited { pid, status });
                    PAction::Continue
                }
            }
        };
        let res = Tracer::run(self, stop, &mut cb);
        // Calls still live when the run ends (wprobe stops, or detached).
        self.seam.calls.drain(Left::Detach, &mut self.seam.gone);
        self.flush_gone(on_event);
        res?;
        Ok(self.seam.main_status)
    }

    fn detach(&mut self) -> anyhow::Result<()> {
        Ok(self.detach_all()?)
    }

    fn kill_launched(&mut self) {
        Tracer::kill_launched(self);
    }

    fn report(&self) -> Report {
        let main = Tracer::main_pid(self);
        Report {
            exit_status: self.exit_status(main),
            detach_signals: self.detach_signals(main),
            handed_off: self.seam.handed_off.clone(),
            code_left_alone: self.code_left_alone().to_vec(),
            detach_time: self.summary().detach_time,
        }
    }

    fn new_hit(&self) -> Box<dyn TransportHit> {
        Box::new(Hit::default())
    }
}

impl TransportHit for Hit {
    fn ip(&self) -> u64 {
        if let Some(func) = self.return_of() {
            // The return of a tracked call: the probe is at the function.
            return func;
        }
        match self.kind() {
            HitKind::Breakpoint(a) => a,
            HitKind::Watchpoint(..) => self.regs().rip,
        }
    }

    fn set_module_bias(&mut self, bias: u64) {
        Hit::set_module_bias(self, bias);
    }

    crate::swap_hit_impl!();
}
