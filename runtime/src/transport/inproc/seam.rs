//! The seam: [`Transport`] and [`InTarget`] for the in-process transport,
//! what the session calls. Probes are planned with the target stopped
//! (`insert`), the handlers loaded with them (`load_handlers`: `load`), the event loop run
//! (`events`), the bytes restored (`detach`); the agent's maps and store
//! are reached through the shared region.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::{INFO, InProc, Phase, Run, traps};
use crate::probe::addr::RunAddr;
use crate::proc::procmaps::Mapping;
use crate::transport::{
    Action, Armed, BadWatchpoint, Error, Event, ExitStatus, HandlerSet, InTarget, Insert, NoHit,
    Report, Transport, TransportHit, TransportInfo,
};

impl InProc {
    /// After a probe of the process is planned: with a trap site planned,
    /// the watchdog started once half the sites expected are (`start_watchdog`:
    /// its start, two executions of wprobe's binary, then runs on the CPU
    /// the reads ahead of planning have left, rather than beside them or
    /// beside the agent's load); with the agent loaded (a library mapped
    /// later), the fallbacks said at once.
    fn after_insert(&mut self) {
        if !self.patcher.trap_funcs.is_empty() && self.patcher.half_planned() {
            self.start_watchdog();
        }
        if self.agent.is_some() {
            self.say_fallbacks();
        }
    }
}

impl Transport for InProc {
    fn info(&self) -> &'static TransportInfo {
        &INFO
    }

    fn main_pid(&self) -> i32 {
        self.pid
    }

    fn expect_inserts(&mut self, probes: usize) {
        // A return probe's entry and its `ret`s: about two sites each.
        self.patcher.expect_sites(probes.saturating_mul(2));
    }

    fn mark_stack_switch(&mut self, tag: usize) {
        if !self.marks.switch_tags.contains(&tag) {
            self.marks.switch_tags.push(tag);
        }
    }

    fn maps(&mut self, pid: i32, fresh: bool) -> Result<Vec<Mapping>, Error> {
        if let Some(c) = self.execs.get_mut(&pid) {
            return c.maps(pid, fresh);
        }
        let read =
            |pid| crate::proc::procmaps::read(pid).map_err(|e| Error::maps(pid, &e, e.to_string()));
        if pid != self.pid {
            if !self.follows(pid) {
                return Err(Error::gone(pid, format!("process {pid} is not traced")));
            }
            return read(pid);
        }
        if fresh || self.maps.is_empty() {
            self.maps = read(pid)?;
        }
        Ok(self.maps.clone())
    }

    fn insert(
        &mut self,
        tag: usize,
        pid: i32,
        addr: RunAddr,
        what: Insert,
    ) -> Result<Armed, Error> {
        if let Some(c) = self.execs.get_mut(&pid) {
            return c.insert(tag, pid, addr, what);
        }
        if let Some(c) = self.arming_child(pid) {
            return c.insert(tag, pid, addr, what);
        }
        let addr = addr.0;
        if pid != self.pid {
            return self.insert_in_child(tag, pid, addr, what);
        }
        let Some(world) = self.world.as_mut() else {
            return Err(Error::unsupported(
                INFO.name,
                "--transport inproc arms probes only with the target stopped: at start, or when \
                 the dynamic linker maps a library",
            ));
        };
        match what {
            Insert::Breakpoint { opcode } => {
                let site = self
                    .patcher
                    .plan(world, &self.maps, tag, addr, opcode)
                    .map_err(|e| e.site_context(format_args!("cannot patch {addr:#x}")))?;
                self.armed.insert(tag, site);
                self.after_insert();
                Ok(Armed(tag as u64))
            }
            Insert::Watchpoint { len, kind } => {
                if kind == crate::arch::WatchKind::Exec {
                    return Err(Error::refused(
                        crate::transport::Rule::Watchpoint,
                        Some(addr),
                        format!(
                            "an execute watchpoint at {addr:#x}: --transport inproc moves the \
                             thread out and back to the instruction, which would trigger it \
                             again; put a probe at that address instead (the same hit, without \
                             a trap)"
                        ),
                    ));
                }
                BadWatchpoint::check(addr, len, kind)?;
                let Some(slot) = self.watches.slots.iter().position(Option::is_none) else {
                    return Err(Error::arm(format!(
                        "all {} debug registers are in use",
                        crate::arch::DEBUG_REGISTERS
                    )));
                };
                let site = self.patcher.plan_watch(world, addr)?;
                self.patcher.sites[site].tags.push(tag);
                self.watches.slots[slot] = Some(traps::Watch {
                    addr,
                    len,
                    kind,
                    stub: self.patcher.sites[site].stub,
                });
                self.armed.insert(tag, site);
                Ok(Armed(tag as u64))
            }
            Insert::Return {
                opcode,
                maxactive,
                entry_notice,
            } => {
                let site = self
                    .patcher
                    .plan_return(world, &self.maps, tag, addr, opcode)
                    .map_err(|e| {
                        e.site_context(format_args!("cannot patch the function at {addr:#x}"))
                    })?;
                self.armed.insert(tag, site);
                self.marks.maxactive.insert(tag, maxactive);
                if entry_notice {
                    self.marks.entry_notices.push(tag);
                }
                self.after_insert();
                Ok(Armed(tag as u64))
            }
        }
    }

    fn take_unmapped(&mut self) -> Vec<Armed> {
        if let Some(pid) = self.child_event
            && let Some(c) = self.arming_child(pid)
        {
            return std::mem::take(&mut c.unmapped);
        }
        std::mem::take(&mut self.unmapped)
    }

    fn site_counts(&self) -> Vec<(usize, &'static str, u32)> {
        // By tag (tags are indexes, dense), then how: "jump" < "near" <
        // "trap", the order of the sorted list.
        const HOW: [&str; 3] = ["jump", "near", "trap"];
        let mut by: Vec<[u32; 3]> = Vec::new();
        for s in &self.patcher.sites {
            let how = if s.trap.is_some() {
                2
            } else if s.cave.is_some() {
                1
            } else {
                0
            };
            // A return site with a window of its own (not one that shares
            // its function's entry window, nor one taken back), under
            // the return probe that added it.
            let ret_of = s.ret_of.filter(|_| s.site.len > 0);
            for &tag in s.tags.iter().chain(&s.ret_tags).chain(&ret_of) {
                if by.len() <= tag {
                    by.resize(tag + 1, [0; 3]);
                }
                by[tag][how] += 1;
            }
        }
        by.iter()
            .enumerate()
            .flat_map(|(tag, n)| {
                (0..3)
                    .filter(|&h| n[h] > 0)
                    .map(move |h| (tag, HOW[h], n[h]))
            })
            .collect()
    }

    fn remove(&mut self, armed: Armed) {
        let tag = armed.0 as usize;
        match &self.agent {
            Some(a) => a.region.set_probe_enabled(tag as u32, false),
            // Taken out while its runs are handed on (`drain_runs`): done
            // once it is back.
            None if self.run == Run::Draining => self.removed.push(tag),
            // Not loaded yet: the probe is not enabled when it is (`wprobe
            // trace` removes the entry probe of a function whose return
            // probe could not be armed: both or neither).
            None => {
                self.armed.remove(&tag);
            }
        }
    }

    fn suspend(&mut self) -> Result<(), Error> {
        self.suspend_probes()
    }

    fn resume(&mut self) -> Result<(), Error> {
        self.resume_probes()
    }

    fn set_tick(&mut self, period: Duration) {
        self.tick = Some((period, Instant::now() + period));
    }

    fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> anyhow::Result<Option<ExitStatus>> {
        self.event_loop(stop, on_event)
    }

    fn detach(&mut self) -> anyhow::Result<()> {
        self.detach_now()
    }

    fn kill_launched(&mut self) {
        if self.launched && self.world.is_some() {
            // Killed while still stopped: letting its threads go first would
            // let it run its own code a moment.
            crate::sys::process::kill_and_reap(self.pid);
            self.world = None;
        }
    }

    fn report(&self) -> Report {
        Report {
            exit_status: self.life.status(),
            detach_signals: Vec::new(),
            handed_off: Vec::new(),
            code_left_alone: self.code_left_alone.clone(),
            detach_time: Duration::ZERO,
        }
    }

    fn new_hit(&self) -> Box<dyn TransportHit> {
        Box::new(NoHit)
    }

    fn in_target(&mut self) -> Option<&mut dyn InTarget> {
        Some(self)
    }
}

impl InTarget for InProc {
    fn watch_libraries(&mut self, pid: i32) -> Result<(), Error> {
        if self.execs.contains_key(&pid) {
            // A followed child that executed a program: its transport
            // watches them when this one does (`joined`).
            return Ok(());
        }
        if pid != self.pid {
            return Err(Error::gone(pid, format!("process {pid} is not traced")));
        }
        if self.rdebug.is_some() {
            return Ok(());
        }
        let Some(world) = self.world.as_mut() else {
            return Err(Error::unsupported(INFO.name, "the target is not stopped"));
        };
        // A program the process executes may be where they are.
        self.follow_exec = true;
        let Some(rd) = crate::transport::common::rdebug::find(&self.maps) else {
            return Err(Error::unsupported(
                INFO.name,
                format!(
                    "process {pid} has no dynamic linker whose library events can be watched (a \
                     static program?)"
                ),
            ));
        };
        self.patcher
            .plan_library_event(world, &self.maps, rd.brk)
            .map_err(|e| {
                e.context(format_args!(
                    "the dynamic linker's `_dl_debug_state` at {:#x}",
                    rd.brk
                ))
            })?;
        self.rdebug = Some(rd);
        Ok(())
    }

    fn preload_handlers(&mut self, pid: i32, set: &HandlerSet<'_>) -> Result<(), Error> {
        if pid != self.pid {
            return Ok(());
        }
        self.preload(set);
        Ok(())
    }

    fn load_handlers(&mut self, set: &HandlerSet<'_>) -> Result<(), Error> {
        self.commit(set)
    }

    fn update_handlers(&mut self, set: &HandlerSet<'_>) -> Result<(), Error> {
        if let Some(pid) = self.child_event
            && let Some(c) = self.arming_child(pid)
        {
            // A followed child's libraries (`forklibs`).
            return c.update_handlers(set);
        }
        if !self.execs.is_empty() {
            // A followed child that executed a program (`joined`).
            self.commit_execs(set);
            return Ok(());
        }
        if self.reload {
            // The process executed a new program (`on_exec`): a new agent
            // in its image, every probe armed there; the old agent's
            // region (its maps read by the session) goes.
            self.reload = false;
            let old = self.agent.take();
            let r = self.commit(set);
            drop(old);
            if let Err(e) = r {
                // Let the new program go untraced, as it was.
                if let Some(mut w) = self.world.take() {
                    let _ = self.patcher.restore(&w);
                    w.release();
                }
                self.phase = Phase::Execed;
                return Err(e.context(format_args!(
                    "process {} executed a new program, which is not traced",
                    self.pid
                )));
            }
            return Ok(());
        }
        // The biases of the probes armed since the last commit (those not
        // enabled in the agent yet): told with their sites.
        self.later_biases = set
            .probes
            .iter()
            .filter(|p| self.armed.contains_key(&p.tag) && !self.enabled.contains(&p.tag))
            .map(|p| (p.tag as u32, p.load_bias))
            .collect();
        Ok(())
    }

    fn pause_handlers(&mut self) -> bool {
        match &self.agent {
            Some(a) if !self.handlers_paused => {
                self.handlers_paused = a.region.lock_store(Duration::from_secs(1));
                self.handlers_paused
            }
            _ => false,
        }
    }

    fn resume_handlers(&mut self) {
        if self.handlers_paused
            && let Some(a) = &self.agent
        {
            a.region.unlock_store();
            self.handlers_paused = false;
        }
    }

    fn handler_maps(&mut self, program: usize, bytes: &mut [u8], write: bool) -> bool {
        let (Some(a), Some(&(off, len))) = (&self.agent, self.program_maps.get(program)) else {
            return false;
        };
        if len != bytes.len() as u64 || len == 0 {
            return false;
        }
        if write {
            a.region.write_maps(off, bytes)
        } else {
            a.region.read_maps(off, bytes)
        }
    }
}
