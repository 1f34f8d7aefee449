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
use crate::probe::addr::RunAddr;
use crate::proc::procmaps::Mapping;
use crate::transport::calls::{self, CallStacks, EntryAt, Gone, Left};
use crate::transport::{
    Action, Armed, Capabilities, Error, Event, Insert, OpenOptions, Report, Target, Transport,
    TransportHit, TransportInfo,
};

/// The ptrace transport in the registry.
pub static INFO: TransportInfo = TransportInfo {
    name: "ptrace",
    about: "stops the thread at each hit (int3, debug registers): handlers may write registers \
            and memory, exit 1 hands the process to gdb, exit 3 writes a core file",
    caps: Capabilities {
        writes: true,
        synchronous: true,
        watchpoints: true,
        follows_forks: true,
        debugger_handoff: true,
        core_dump: true,
        later_libraries: true,
        follows_exec: true,
        follows_exec_in_children: true,
        arms_files: false,
        uses_ptrace: true,
        return_probes: true,
        step_faults: true,
        write_checks: true,
        entry_notices: true,
        system_wide: false,
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
    /// Return probes: the entry breakpoint's id → (tag, maxactive).
    ret_probes: HashMap<BpId, (usize, u32)>,
    /// The return probes at the current entry: (entry id, tag, maxactive)
    /// (reused).
    ret_tags: Vec<(BpId, usize, u32)>,
    /// Those still enabled after the plain probes' handlers ran: (tag,
    /// maxactive) (reused).
    entering: Vec<(usize, u32)>,
    /// The tracked calls of every thread.
    calls: CallStacks,
    /// Calls that ended without a return, to report (reused).
    gone: Vec<Gone>,
    /// Calls ended by `suspend` (their return sites already let go), to
    /// report at the next event.
    suspended: Vec<Gone>,
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
    /// `Some(maxactive)` for a return probe's entry.
    ret: Option<u32>,
}

fn open(target: Target<'_>, o: &OpenOptions) -> Result<Box<dyn Transport>, Error> {
    let opts = super::TraceOptions {
        follow_forks: o.follow_forks,
        verify_opcodes: o.verify_opcodes,
    };
    if let Target::Attach(pid) = target {
        crate::transport::common::journal::held_by_another_run(pid, INFO.name)?;
    }

    let mut t = match target {
        // wprobe exits once detached: threads asleep in a system call are
        // neither stopped to attach nor to detach (no EINTR for them).
        Target::Attach(pid) => PtraceTracer::attach_quietly(pid, opts).inspect(|t| {
            crate::elog!("wprobe: attached to {pid}. {}", t.kill_note(pid));
        }),
        Target::Launch(argv) => PtraceTracer::launch(argv, opts),
        Target::System => {
            return Err(Error::unsupported(
                INFO.name,
                format!("--transport ptrace: {}", crate::transport::NOT_SYSTEM_WIDE),
            ));
        }
    }?;
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
type OnEvent<'a> = calls::OnEvent<'a>;

impl PtraceTracer {
    /// Reports the calls collected in `seam.gone` as [`Event::Unwound`]
    /// (but those of disabled probes) and lets go of their return sites.
    fn flush_gone(&mut self, on_event: OnEvent<'_>) {
        calls::each_gone(
            self,
            |t| &mut t.seam.gone,
            |t, g| {
                t.release_return_site(g.call.pid, g.call.ret_addr);
                if g.cause != Left::Disabled {
                    on_event(t, g.unwound());
                }
            },
        );
    }

    /// A breakpoint hit: the entry of return probes' functions (their calls
    /// tracked, abandoned ones reported first) and the hit of plain probes.
    fn on_breakpoint(
        &mut self,
        bp: &[BpId],
        hit: &mut PtraceHit,
        on_event: OnEvent<'_>,
    ) -> PAction {
        let mut tags = std::mem::take(&mut self.seam.tags);
        let mut rets = std::mem::take(&mut self.seam.ret_tags);
        tags.clear();
        rets.clear();
        // A forked child carries its parent's breakpoint ids and the ones
        // armed for it: one run per probe.
        for id in bp {
            if let Some(&(tag, max)) = self.seam.ret_probes.get(id) {
                if !rets.iter().any(|(_, t, _)| *t == tag) {
                    rets.push((*id, tag, max));
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
            // function receives. A handler of a plain probe here may have
            // disabled a return probe (`remove`, `maxhits`) or made every
            // probe dormant: its call is not tracked, as a disabled probe's
            // calls are not.
            let mut entering = std::mem::take(&mut self.seam.entering);
            entering.clear();
            entering.extend(
                rets.iter()
                    .filter(|(id, _, _)| self.seam.ret_probes.contains_key(id))
                    .map(|&(_, tag, max)| (tag, max)),
            );
            let r = *hit.regs();
            let at = EntryAt {
                pid,
                tid,
                func,
                regs: &r,
                ret_addr,
                time_ns: hit.now_ns(),
                clock_ns: crate::sys::time::monotonic_ns(),
            };
            calls::enter(
                self,
                |t| &mut t.seam.calls,
                &at,
                &entering,
                |t, ra| t.retain_return_site(pid, ra).is_ok(),
                on_event,
            );
            self.seam.entering = entering;
        }
        self.seam.tags = tags;
        self.seam.ret_tags = rets;
        paction
    }

    /// A thread at a return site: the tracked calls that return there run
    /// their handlers, or are reported returned where their probes asked
    /// for entry notices (innermost first, after the calls found abandoned
    /// are reported); a site nothing returns to any more is removed.
    fn on_return_site(&mut self, hit: &mut PtraceHit, on_event: OnEvent<'_>) -> PAction {
        let (tid, pid) = (hit.tid() as i32, hit.pid() as i32);
        let at = hit.address();
        let rsp = hit.regs().rsp;
        let n = self
            .seam
            .calls
            .returning(tid, rsp, Some(at), &mut self.seam.gone);
        self.flush_gone(on_event);
        if n == 0 {
            self.drop_idle_return_site(pid, at);
            return PAction::Continue;
        }
        let now = crate::sys::time::monotonic_ns();
        while let Some(c) = self.seam.calls.pop(tid, rsp) {
            self.release_return_site(pid, at);
            if let Some(ev) = c.returned(tid, hit.now_ns(), now, hit.regs().rax) {
                on_event(self, ev);
                continue;
            }
            hit.set_return(Some((c.func, c.entry_state(now))));
            let action = on_event(self, Event::hit_of(&c.tag, hit));
            hit.set_return(None);
            if self.finish_hit(action, hit) == PAction::HandoffToDebugger {
                self.let_go_calls(pid, on_event);
                return PAction::HandoffToDebugger;
            }
        }
        PAction::Continue
    }

    /// Reports the calls `suspend` ended (their return sites already let
    /// go).
    fn flush_suspended(&mut self, on_event: OnEvent<'_>) {
        calls::each_gone(
            self,
            |t| &mut t.seam.suspended,
            |t, g| {
                on_event(t, g.unwound());
            },
        );
    }

    /// The calls of `pid`, let go (the process is handed off): reported.
    fn let_go_calls(&mut self, pid: i32, on_event: OnEvent<'_>) {
        self.seam
            .calls
            .end_process(pid, Left::Detach, &mut self.seam.gone);
        self.flush_gone(on_event);
    }

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

    fn mark_stack_switch(&mut self, tag: usize) {
        self.seam.calls.mark_switch(tag);
    }

    fn maps(&mut self, pid: i32, fresh: bool) -> Result<Vec<Mapping>, Error> {
        if !self.procs.contains_key(&pid) {
            return Err(Error::gone(pid, format!("process {pid} is not traced")));
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
    ) -> Result<Armed, Error> {
        let addr = addr.0;
        match what {
            Insert::Breakpoint { opcode } => {
                let id = self.insert_breakpoint(pid, addr, opcode)?;
                self.seam.bp_tags.insert(id, tag);
                Ok(Armed(u64::from(id.0)))
            }
            Insert::Watchpoint { len, kind } => {
                let id = self.insert_watchpoint(pid, addr, len, kind)?;
                self.seam.wp_tags.insert(id, tag);
                Ok(Armed(WATCH_BIT | u64::from(id.0)))
            }
            Insert::Return {
                opcode,
                maxactive,
                entry_notice,
            } => {
                let id = self.insert_breakpoint(pid, addr, opcode)?;
                self.seam.ret_probes.insert(id, (tag, maxactive));
                if entry_notice {
                    self.seam.calls.set_entry_notice(tag);
                }
                Ok(Armed(u64::from(id.0)))
            }
        }
    }

    fn take_unmapped(&mut self) -> Vec<Armed> {
        let ids = std::mem::take(&mut self.unmapped);
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let current = u64::from(id.0);
            // The session's handle (an alias after a suspend and resume).
            let handle = self
                .seam
                .alias
                .iter()
                .find(|&(_, v)| *v == current)
                .map_or(current, |(k, _)| *k);
            // The breakpoint is gone from the tables already: what is
            // left is the seam's (tags, return probes' live calls).
            self.remove(Armed(handle));
            out.push(Armed(handle));
        }
        out
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
            if let Some((tag, _)) = self.seam.ret_probes.remove(&BpId(id)) {
                // Calls still live return without a handler run, and are
                // not missed: the probe is gone (spec §6.5).
                self.seam.calls.drop_probe(tag, &mut self.seam.gone);
                calls::each_gone(
                    self,
                    |t| &mut t.seam.gone,
                    |t, g| {
                        t.release_return_site(g.call.pid, g.call.ret_addr);
                    },
                );
            }
        }
    }

    fn suspend(&mut self) -> Result<(), Error> {
        // The session's handle of each current id.
        let handle_of: HashMap<u64, u64> = self.seam.alias.iter().map(|(h, c)| (*c, *h)).collect();
        let handle = |current: u64| handle_of.get(&current).copied().unwrap_or(current);
        // Live calls of return probes end here (reported at the next
        // event): their return sites go with the probes.
        let mut gone = std::mem::take(&mut self.seam.suspended);
        self.seam.calls.drain(Left::Suspend, &mut gone);
        for g in &gone {
            self.release_return_site(g.call.pid, g.call.ret_addr);
        }
        self.seam.suspended = gone;
        let bps: Vec<(BpId, i32, u64)> =
            self.bps.iter().map(|(id, (p, a))| (*id, *p, *a)).collect();
        for (id, pid, addr) in bps {
            let (tag, ret) = match self.seam.bp_tags.remove(&id) {
                Some(tag) => (tag, None),
                None => match self.seam.ret_probes.remove(&id) {
                    Some((tag, max)) => (tag, Some(max)),
                    None => continue,
                },
            };
            self.remove_breakpoint(id)?;
            self.seam.dormant.push(Dormant {
                handle: handle(u64::from(id.0)),
                tag,
                pid,
                addr,
                watch: None,
                ret,
            });
        }
        // Return sites nothing returns to any more (kept while idle).
        let idle: Vec<(i32, u64)> = self
            .procs
            .iter()
            .flat_map(|(pid, p)| {
                let m = p.mem.borrow();
                m.sites
                    .iter()
                    .filter(|(_, s)| s.ret && s.unused())
                    .map(|(a, _)| (*pid, *a))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (pid, addr) in idle {
            self.drop_idle_return_site(pid, addr);
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
            self.remove_watchpoint(id)?;
            self.seam.dormant.push(Dormant {
                handle: handle(WATCH_BIT | u64::from(id.0)),
                tag,
                pid,
                addr: w.addr,
                watch: Some((w.len, w.kind)),
                ret: None,
            });
        }
        self.seam.alias.clear();
        Ok(())
    }

    fn resume(&mut self) -> Result<(), Error> {
        let mut first_err = None;
        for d in std::mem::take(&mut self.seam.dormant) {
            if !self.procs.contains_key(&d.pid) {
                continue; // gone meanwhile
            }
            let what = match (d.watch, d.ret) {
                (Some((len, kind)), _) => Insert::Watchpoint { len, kind },
                (None, Some(maxactive)) => Insert::Return {
                    opcode: None,
                    maxactive,
                    entry_notice: self.seam.calls.entry_notice(d.tag),
                },
                (None, None) => Insert::Breakpoint { opcode: None },
            };
            match Transport::insert(self, d.tag, d.pid, RunAddr(d.addr), what) {
                Ok(a) => {
                    if a.0 != d.handle {
                        self.seam.alias.insert(d.handle, a.0);
                    }
                }
                Err(e) => {
                    first_err.get_or_insert(e.context(format_args!("process {}", d.pid)));
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
            if !t.seam.suspended.is_empty() {
                t.flush_suspended(on_event);
            }
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
                        let action = on_event(t, Event::hit_of(&tag, hit));
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
                    t.seam
                        .calls
                        .end_process(pid, Left::ProcessExit, &mut t.seam.gone);
                    t.flush_gone(on_event);
                    on_event(t, Event::ProcessExited { pid, status });
                    PAction::Continue
                }
            }
        };
        let res = PtraceTracer::run(self, stop, &mut cb);
        // Calls still live when the run ends (wprobe stops, or detached).
        self.flush_suspended(on_event);
        self.seam.calls.drain(Left::Detach, &mut self.seam.gone);
        self.flush_gone(on_event);
        res?;
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
        PtraceHit::set_module_bias(self, bias);
    }

    crate::swap_hit_impl!();
}
