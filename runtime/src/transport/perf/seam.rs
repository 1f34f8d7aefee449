//! The perf transport behind the [`Transport`] seam: a breakpoint at a
//! run-time address becomes a uprobe at its file offset (the instruction
//! checked in the file, where the kernel's own `int3` cannot hide it), a
//! watchpoint a hardware breakpoint event; samples are delivered as hits
//! whose tag is the probe's.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use std::rc::Rc;

use hostabi::env::HitEnv;

use super::{EvKey, PerfEvent, PerfId, PerfOptions, PerfProbe, PerfTracer, SampleCfg};
use crate::probe::addr::RunAddr;
use crate::proc::procmaps::{self, Mapping};
use crate::transport::ExitStatus;
use crate::transport::calls::{self, CallStacks, EntryAt, Gone, Left};
use crate::transport::{
    Action, Armed, BadWatchpoint, Capabilities, Error, Event, Insert, OpenOptions, Report, Rule,
    Target, Transport, TransportHit, TransportInfo,
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
        follows_exec: false,
        follows_exec_in_children: false,
        arms_files: true,
        uses_ptrace: false,
        return_probes: true,
        step_faults: false,
        write_checks: false,
        entry_notices: true,
        system_wide: true,
    },
    // The general registers, rflags, cs, ss and the instruction pointer
    // (the sample's IP).
    registers: Some(|id| super::regbits::perf_bit(id).is_some()),
    preflight,
    open,
};

fn preflight(breakpoints: bool) -> Result<(), Error> {
    if breakpoints {
        super::check_uprobes()?;
    }
    Ok(())
}

fn open(target: Target<'_>, o: &OpenOptions) -> Result<Box<dyn Transport>, Error> {
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
        Target::System => PerfTracer::system(opts),
    }?;
    Ok(Box::new(t))
}

/// What the seam keeps in the transport.
#[derive(Debug, Default)]
pub(super) struct SeamState {
    /// The mappings read per process (arming reads them once per call).
    maps: HashMap<i32, Vec<Mapping>>,
    /// Module files read for return probes, by path.
    elves: HashMap<String, Rc<wprobe_elf::ElfInfo>>,
    /// Functions with return probes (index: [`EvKey::Entry`]).
    funcs: Vec<RetFunc>,
    /// Return sites (index: [`EvKey::Ret`]).
    sites: Vec<RetSite>,
    /// Armed return probes: the [`Armed`] value → (function, tag).
    armed_ret: HashMap<u64, (usize, usize)>,
    next_ret: u64,
    /// The tracked calls of every thread.
    calls: CallStacks,
    /// Calls that ended without a return, to report (reused).
    gone: Vec<Gone>,
    /// The return probes at the current entry: (tag, maxactive) (reused).
    entering: Vec<(usize, u32)>,
}

impl SeamState {
    /// Forgets the mappings read of `pid` (the dynamic linker changed them).
    pub(super) fn forget_maps(&mut self, pid: i32) {
        self.maps.remove(&pid);
    }
}

/// A function with return probes: one entry event for all of them.
#[derive(Debug)]
struct RetFunc {
    /// Module file and file offset of the entry.
    key: (String, u64),
    /// The entry's uprobe (none once every probe is removed).
    entry: Option<PerfId>,
    /// The return probes: (tag, maxactive).
    probes: Vec<(usize, u32)>,
    /// Its return sites (indexes of `SeamState::sites`).
    sites: Vec<usize>,
}

/// A `ret` where calls of return-probed functions return.
#[derive(Debug)]
struct RetSite {
    key: (String, u64),
    id: Option<PerfId>,
    /// Functions using it.
    users: u32,
}

/// [`Armed`] values of return probes have this bit set.
const RET_BIT: u64 = 1 << 40;

/// The registers an entry keeps (perf's bits of rdi, rsi, rdx, rcx, r8,
/// r9, rsp), and the stack word holding the return address.
const ENTRY_SAMPLE: SampleCfg = SampleCfg {
    stack_bytes: 8,
    regs_mask: 1 << 5 | 1 << 4 | 1 << 3 | 1 << 2 | 1 << 16 | 1 << 17 | 1 << 7,
};

/// How the seam reports to the session.
type OnEvent<'a> = calls::OnEvent<'a>;

impl PerfTracer {
    /// The uprobe of a breakpoint at `addr` in `pid`: its file and offset,
    /// the first byte checked against `opcode`.
    fn uprobe_at(&mut self, pid: i32, addr: u64, opcode: Option<u8>) -> Result<PerfProbe, Error> {
        let maps = match self.seam.maps.get(&pid) {
            Some(m) => m,
            None => {
                let m = procmaps::read(pid)
                    .map_err(|e| Error::maps(pid, &e, format!("process {pid}: {e}")))?;
                self.seam.maps.entry(pid).or_insert(m)
            }
        };
        let m = procmaps::find(maps, addr)
            .filter(|m| m.exec && m.is_file())
            .ok_or_else(|| {
                Error::refused(
                    Rule::NotExecutable,
                    Some(addr),
                    format!(
                        "address {addr:#x} is not in an executable file mapping of process {pid}"
                    ),
                )
            })?;
        let offset = addr - m.start + m.offset;
        // The file's byte: a uprobe is a place in a file, and live memory
        // may already hold the kernel's int3 of another probe there.
        let mut file = [0u8];
        let from_file = std::fs::File::open(&m.path)
            .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut file, offset))
            .is_ok();
        let mut live = [0u8];
        let live_read = super::read_live(pid, addr, &mut live) == 1;
        if let Some(op) = opcode {
            let found = if from_file {
                Some(file[0])
            } else {
                live_read.then_some(live[0])
            };
            if let Some(b) = found
                && b != op
            {
                return Err(Error::refused(
                    Rule::OpcodeMismatch,
                    Some(addr),
                    format!("opcode mismatch at {addr:#x}: expected {op:#04x}, found {b:#04x}"),
                ));
            }
        }
        // An int3 in the process that the file does not have, in a
        // process another tracer holds: that tracer's breakpoint (another
        // uprobe would leave the process untraced). A uprobe on it would
        // take the breakpoint's hits, and vanish when that tracer restores
        // its byte: both tracers blind, without a word.
        if from_file
            && live_read
            && live[0] == crate::arch::BREAKPOINT_INSN
            && file[0] != crate::arch::BREAKPOINT_INSN
            && let crate::proc::procinfo::Untraceable::Traced { tracer, comm } =
                crate::proc::procinfo::untraceable(pid)
            && tracer != std::process::id() as i32
        {
            return Err(Error::refused(
                Rule::Occupied,
                Some(addr),
                format!(
                    "process {pid} is traced by process {tracer} ({comm}), whose breakpoint is \
                     at {addr:#x}: a uprobe there would take that breakpoint's hits and vanish \
                     when it is removed. Stop that tracer first (a wprobe stops with SIGINT: \
                     `kill -INT {tracer}`), or add this probe to its run"
                ),
            ));
        }
        Ok(PerfProbe::Uprobe {
            path: m.path.clone(),
            offset,
            ref_ctr: None,
        })
    }
}

impl PerfTracer {
    /// Arms the plain probe `tag` at `probe`.
    fn arm(&mut self, probe: &PerfProbe, tag: usize) -> Result<Armed, Error> {
        let id = PerfTracer::insert(self, probe, tag)?;
        Ok(Armed(u64::from(id.0)))
    }

    /// Arms return probe `tag` on the function entered at `offset` in
    /// `path`: one entry uprobe per function, one uprobe per `ret` its
    /// calls return through (shared between functions).
    fn arm_return(
        &mut self,
        tag: usize,
        path: &str,
        offset: u64,
        maxactive: u32,
        entry_notice: bool,
    ) -> Result<Armed, Error> {
        let key = (path.to_string(), offset);
        let f = match self
            .seam
            .funcs
            .iter()
            .position(|f| f.key == key && f.entry.is_some())
        {
            Some(f) => f,
            None => self.arm_function(key)?,
        };
        self.seam.funcs[f].probes.push((tag, maxactive));
        if entry_notice {
            self.seam.calls.set_entry_notice(tag);
        }
        self.seam.next_ret += 1;
        let armed = RET_BIT | self.seam.next_ret;
        self.seam.armed_ret.insert(armed, (f, tag));
        Ok(Armed(armed))
    }

    /// The entry event and return sites of a newly return-probed function.
    fn arm_function(&mut self, key: (String, u64)) -> Result<usize, Error> {
        let (path, offset) = (&key.0, key.1);
        let elf = match self.seam.elves.get(path) {
            Some(e) => e.clone(),
            None => {
                let e = Rc::new(
                    wprobe_elf::ElfInfo::open(std::path::Path::new(path))
                        .map_err(|e| Error::file(std::path::Path::new(path), e.to_string()))?,
                );
                self.seam.elves.insert(path.clone(), e.clone());
                e
            }
        };
        let found = crate::transport::retsites::return_sites(&elf, offset, "perf")?;
        // Only the module's own `ret`s: a uprobe on the `ret`s of a
        // function of another module (`malloc`'s) would cost every call of
        // it in the process a trap.
        if found.rets.is_empty() && !found.never_returns {
            return Err(crate::transport::retsites::no_ret(
                &found.function,
                &elf.path,
                "perf",
                None,
            ));
        }
        let f = self.seam.funcs.len();
        let entry = PerfTracer::insert_keyed(
            self,
            &PerfProbe::Uprobe {
                path: path.clone(),
                offset,
                ref_ctr: None,
            },
            EvKey::Entry(f),
            ENTRY_SAMPLE,
        )?;
        let ret_cfg = SampleCfg {
            stack_bytes: self.opts.stack_bytes,
            // The stack pointer (bit 7) pairs a return with its entry;
            // `rax` (bit 0) is the return value an entry notice's return
            // reports.
            regs_mask: self.opts.regs_mask | 1 << 7 | 1,
        };
        let mut sites = Vec::new();
        for off in found.rets {
            let skey = (path.clone(), off);
            let si = match self
                .seam
                .sites
                .iter()
                .position(|s| s.key == skey && s.id.is_some())
            {
                Some(si) => si,
                None => {
                    let si = self.seam.sites.len();
                    let probe = PerfProbe::Uprobe {
                        path: path.clone(),
                        offset: off,
                        ref_ctr: None,
                    };
                    match PerfTracer::insert_keyed(self, &probe, EvKey::Ret(si), ret_cfg) {
                        Ok(id) => self.seam.sites.push(RetSite {
                            key: skey,
                            id: Some(id),
                            users: 0,
                        }),
                        Err(e) => {
                            PerfTracer::remove(self, entry);
                            for &s in &sites {
                                self.release_site(s);
                            }
                            return Err(e.into());
                        }
                    }
                    si
                }
            };
            self.seam.sites[si].users += 1;
            sites.push(si);
        }
        self.seam.funcs.push(RetFunc {
            key,
            entry: Some(entry),
            probes: Vec::new(),
            sites,
        });
        Ok(f)
    }

    fn release_site(&mut self, si: usize) {
        let s = &mut self.seam.sites[si];
        s.users = s.users.saturating_sub(1);
        if s.users == 0
            && let Some(id) = s.id.take()
        {
            PerfTracer::remove(self, id);
        }
    }

    /// Disarms return probe `armed`: its live calls are dropped (no
    /// handler, not missed); the function's events go with its last probe.
    fn disarm_return(&mut self, armed: u64) {
        let Some((f, tag)) = self.seam.armed_ret.remove(&armed) else {
            return;
        };
        self.seam.funcs[f].probes.retain(|(t, _)| *t != tag);
        self.seam.calls.drop_probe(tag, &mut self.seam.gone);
        self.seam.gone.clear();
        if self.seam.funcs[f].probes.is_empty() {
            if let Some(id) = self.seam.funcs[f].entry.take() {
                PerfTracer::remove(self, id);
            }
            for si in std::mem::take(&mut self.seam.funcs[f].sites) {
                self.release_site(si);
            }
        }
    }

    /// Reports the calls collected in `seam.gone` as [`Event::Unwound`].
    fn flush_gone(&mut self, on_event: OnEvent<'_>) {
        calls::each_gone(
            self,
            |t| &mut t.seam.gone,
            |t, g| {
                if g.cause != Left::Disabled {
                    on_event(t, g.unwound());
                }
            },
        );
    }

    /// The entry of return-probed function `f`: calls found abandoned are
    /// reported, then a call is tracked for each of its probes (reported
    /// entered where the probe asked for entry notices).
    fn on_entry(&mut self, f: usize, hit: &mut super::PerfHit, on_event: OnEvent<'_>) {
        let (tid, pid) = (hit.tid() as i32, hit.pid() as i32);
        let r = *hit.regs();
        let ret = hit
            .stack()
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("invariant: 8 bytes")));
        if let Some(ra) = ret {
            self.seam
                .calls
                .prune_at_entry(tid, r.rsp, ra, hit.ip(), &mut self.seam.gone);
            self.flush_gone(on_event);
        }
        let mut entering = std::mem::take(&mut self.seam.entering);
        entering.clear();
        entering.extend_from_slice(&self.seam.funcs[f].probes);
        let at = EntryAt {
            pid,
            tid,
            func: hit.ip(),
            regs: &r,
            ret_addr: ret,
            time_ns: hit.now_ns(),
            clock_ns: hit.now_ns(),
        };
        calls::enter(
            self,
            |t| &mut t.seam.calls,
            &at,
            &entering,
            |_, _| true,
            on_event,
        );
        self.seam.entering = entering;
    }

    /// A `ret` of a return site: the tracked calls that return through it
    /// run their handlers, innermost first, with the registers after the
    /// `ret` (RIP the return address, RSP 8 higher), or are reported
    /// returned where their probes asked for entry notices.
    fn on_ret(&mut self, hit: &mut super::PerfHit, on_event: OnEvent<'_>) {
        let tid = hit.tid() as i32;
        let rsp_after = hit.regs().rsp.wrapping_add(8);
        let n = self
            .seam
            .calls
            .returning(tid, rsp_after, None, &mut self.seam.gone);
        self.flush_gone(on_event);
        if n == 0 {
            return;
        }
        let mut stepped = false;
        while let Some(c) = self.seam.calls.pop(tid, rsp_after) {
            if !stepped {
                hit.step_past_ret(c.ret_addr);
                stepped = true;
            }
            let now = hit.now_ns();
            if let Some(ev) = c.returned(tid, now, now, hit.regs().rax) {
                on_event(self, ev);
                continue;
            }
            hit.set_return(Some((c.func, c.entry_state(now))));
            let _ = on_event(self, Event::hit_of(&c.tag, hit));
        }
        hit.set_return(None);
    }
}

impl Transport for PerfTracer {
    fn info(&self) -> &'static TransportInfo {
        &INFO
    }

    fn main_pid(&self) -> i32 {
        PerfTracer::main_pid(self)
    }

    fn mark_stack_switch(&mut self, tag: usize) {
        self.seam.calls.mark_switch(tag);
    }

    fn maps(&mut self, pid: i32, fresh: bool) -> Result<Vec<Mapping>, Error> {
        if fresh || !self.seam.maps.contains_key(&pid) {
            let m = procmaps::read(pid)
                .map_err(|e| Error::maps(pid, &e, format!("process {pid}: {e}")))?;
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
    ) -> Result<Armed, Error> {
        let addr = addr.0;
        let probe = match what {
            Insert::Breakpoint { opcode } => self.uprobe_at(pid, addr, opcode)?,
            Insert::Watchpoint { len, kind } => {
                BadWatchpoint::check(addr, len, kind)?;
                PerfProbe::Watch { addr, len, kind }
            }
            Insert::Return {
                opcode,
                maxactive,
                entry_notice,
            } => {
                let PerfProbe::Uprobe { path, offset, .. } = self.uprobe_at(pid, addr, opcode)?
                else {
                    unreachable!("uprobe_at gives a uprobe")
                };
                return self.arm_return(tag, &path, offset, maxactive, entry_notice);
            }
        };
        self.arm(&probe, tag)
    }

    fn insert_usdt(
        &mut self,
        tag: usize,
        pid: i32,
        addr: RunAddr,
        opcode: Option<u8>,
        sem: RunAddr,
    ) -> Result<(Armed, crate::transport::SemaphoreHold), Error> {
        let PerfProbe::Uprobe { path, offset, .. } = self.uprobe_at(pid, addr.0, opcode)? else {
            unreachable!("uprobe_at gives a uprobe")
        };
        // The semaphore by its offset in the same file: the kernel raises
        // it in every process mapping the file while the uprobe is
        // registered, and lowers it when the uprobe goes.
        let ref_ctr = self.seam.maps.get(&pid).and_then(|maps| {
            procmaps::find(maps, sem.0)
                .filter(|m| m.path == path)
                .map(|m| sem.0 - m.start + m.offset)
        });
        let hold = match ref_ctr {
            Some(_) => crate::transport::SemaphoreHold::Kernel,
            None => crate::transport::SemaphoreHold::Failed(format!(
                "USDT semaphore at {:#x} in process {pid} is not in a mapping of {path}",
                sem.0
            )),
        };
        let probe = PerfProbe::Uprobe {
            path,
            offset,
            ref_ctr,
        };
        Ok((self.arm(&probe, tag)?, hold))
    }

    fn insert_usdt_on_file(
        &mut self,
        tag: usize,
        file: &std::path::Path,
        offset: u64,
        sem_offset: u64,
    ) -> Result<(Armed, crate::transport::SemaphoreHold), Error> {
        let probe = PerfProbe::Uprobe {
            path: file.to_string_lossy().into_owned(),
            offset,
            ref_ctr: Some(sem_offset),
        };
        Ok((
            self.arm(&probe, tag)?,
            crate::transport::SemaphoreHold::Kernel,
        ))
    }

    fn insert_on_file(
        &mut self,
        tag: usize,
        file: &std::path::Path,
        offset: u64,
    ) -> Result<Armed, Error> {
        let probe = PerfProbe::Uprobe {
            path: file.to_string_lossy().into_owned(),
            offset,
            ref_ctr: None,
        };
        self.arm(&probe, tag)
    }

    fn insert_return_on_file(
        &mut self,
        tag: usize,
        file: &std::path::Path,
        offset: u64,
        maxactive: u32,
        entry_notice: bool,
    ) -> Result<Armed, Error> {
        self.arm_return(
            tag,
            &file.to_string_lossy(),
            offset,
            maxactive,
            entry_notice,
        )
    }

    fn at_exec(&self) -> bool {
        self.at_exec && self.held
    }

    fn run_to_entry(&mut self) -> Result<(), Error> {
        PerfTracer::run_to_entry(self).map_err(Error::from)
    }

    fn remove(&mut self, armed: Armed) {
        if armed.0 & RET_BIT != 0 {
            self.disarm_return(armed.0);
        } else {
            PerfTracer::remove(self, PerfId(armed.0 as u32));
        }
    }

    fn suspend(&mut self) -> Result<(), Error> {
        // Live calls of return probes end here (reported at the next
        // event): their returns are not sampled while dormant.
        self.seam.calls.drain(Left::Suspend, &mut self.seam.gone);
        for p in self.probes.values_mut() {
            for c in &mut p.counters {
                c.disable().map_err(|e| {
                    Error::io(None, None, &e, format!("disabling a perf event: {e}"))
                })?;
            }
        }
        Ok(())
    }

    fn resume(&mut self) -> Result<(), Error> {
        for p in self.probes.values_mut() {
            for c in &mut p.counters {
                c.enable().map_err(|e| {
                    Error::io(None, None, &e, format!("enabling a perf event: {e}"))
                })?;
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
            // Calls `suspend` ended, before anything later.
            t.flush_gone(on_event);
            // The target does not wait for the handler: what it asks of
            // the thread cannot be done (the session counts it).
            match ev {
                PerfEvent::Sample {
                    key: EvKey::Plain(tag),
                    hit,
                } => {
                    let _ = on_event(t, Event::hit_of(&tag, hit));
                }
                PerfEvent::Sample {
                    key: EvKey::Entry(f),
                    hit,
                } => t.on_entry(f, hit, on_event),
                PerfEvent::Sample {
                    key: EvKey::Ret(_),
                    hit,
                } => t.on_ret(hit, on_event),
                PerfEvent::Tick => {
                    on_event(t, Event::Tick);
                }
                PerfEvent::Lost {
                    key: EvKey::Plain(tag),
                    count,
                } => {
                    on_event(t, Event::Lost { tag, count });
                }
                PerfEvent::Lost {
                    key: EvKey::Entry(f),
                    count,
                } => {
                    // Entries not seen: calls not tracked.
                    let tags: Vec<usize> = t.seam.funcs[f].probes.iter().map(|p| p.0).collect();
                    for tag in tags {
                        on_event(t, Event::Lost { tag, count });
                    }
                }
                // A return not seen: its call is reported as gone later.
                PerfEvent::Lost {
                    key: EvKey::Ret(_), ..
                } => {}
            }
        };
        let res = PerfTracer::run(self, stop, &mut cb);
        // Calls still live when the run ends: ended with the launched
        // process, or left running (detach).
        let cause = if self.exit_status().is_some() {
            Left::ProcessExit
        } else {
            Left::Detach
        };
        self.seam.calls.drain(cause, &mut self.seam.gone);
        self.flush_gone(on_event);
        Ok(res?)
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
        // The return of a tracked call: the probe is at the function.
        self.return_of().unwrap_or_else(|| super::PerfHit::ip(self))
    }

    fn set_module_bias(&mut self, bias: u64) {
        super::PerfHit::set_module_bias(self, bias);
    }

    fn process_gone(&self) -> bool {
        self.gone
    }

    crate::swap_hit_impl!();
}
