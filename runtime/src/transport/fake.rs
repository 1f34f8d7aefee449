//! A scripted transport for unit tests (events in, actions out): no
//! process, no root, no `/proc`. [`Fake::run`] delivers the events of its
//! script in order, and every call the session makes of the transport
//! (insert, remove, semaphore, suspend, detach…) is recorded in
//! [`Fake::calls`], every non-default [`Action`] the session answers a hit
//! with in [`Fake::actions`]. The processes' mappings are given
//! ([`Fake::map`]), so that the session resolves and arms its probes as it
//! does for a real process: the end of this file is the harness the tests
//! share (two small module files, a process that does not exist, programs
//! compiled in memory). Return probes can also be driven as ptrace and
//! perf drive theirs ([`Step::Enter`], [`Step::Return`]): the calls are
//! paired, and reported, by the code those transports share
//! ([`super::calls`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use hostabi::Status;
use hostabi::env::HitEnv;

use super::{
    Action, Armed, Capabilities, Event, ExitStatus, InTarget, Insert, Report, RunCounts,
    TargetOutcome, TargetRun, Transport, TransportHit, TransportInfo,
};
use crate::out::sink::Sink;
use crate::probe::addr::RunAddr;
use crate::probe::programs::LoadedProgram;
use crate::proc::procmaps::Mapping;

/// Every capability but the ones that change the flow of a hit
/// (`step_faults`: records held until an [`Event::Stepped`]) or need a
/// system (`system_wide`, `arms_files`).
pub const CAPS: Capabilities = Capabilities {
    writes: true,
    synchronous: true,
    watchpoints: true,
    follows_forks: true,
    debugger_handoff: true,
    core_dump: true,
    later_libraries: true,
    follows_exec: true,
    follows_exec_in_children: false,
    arms_files: false,
    uses_ptrace: false,
    return_probes: true,
    step_faults: false,
    write_checks: true,
    entry_notices: true,
    system_wide: false,
};

/// A hit: identity, registers, and memory as a byte map.
#[derive(Clone, Debug, Default)]
pub struct FakeHit {
    /// Process.
    pub pid: i32,
    /// Thread.
    pub tid: i32,
    /// The probe's address (or the instruction pointer).
    pub ip: u64,
    /// Wall-clock time of the hit, ns.
    pub time_ns: u64,
    /// Registers by id ([`hostabi::regs`]); others read 0.
    pub regs: HashMap<u16, u64>,
    /// Registers at the call's entry (return probes).
    pub entry_regs: HashMap<u16, u64>,
    /// The call's duration (return probes).
    pub elapsed_ns: Option<u64>,
    /// Readable (and writable) memory, byte by byte.
    pub mem: BTreeMap<u64, u8>,
    /// The load bias the session set.
    pub bias: u64,
}

impl FakeHit {
    /// A hit of thread `tid` of `pid` at `ip`.
    pub fn at(pid: i32, tid: i32, ip: u64) -> FakeHit {
        FakeHit {
            pid,
            tid,
            ip,
            ..FakeHit::default()
        }
    }

    /// With register `name` (`rdi`, `rax`…) set to `value`.
    pub fn reg(mut self, name: &str, value: u64) -> FakeHit {
        let id = hostabi::regs::by_name(name).expect("register name").id;
        self.regs.insert(id, value);
        self
    }

    /// With register `name` at the call's entry set to `value`.
    pub fn entry_reg(mut self, name: &str, value: u64) -> FakeHit {
        let id = hostabi::regs::by_name(name).expect("register name").id;
        self.entry_regs.insert(id, value);
        self
    }

    /// With `bytes` readable at `addr`.
    pub fn mem(mut self, addr: u64, bytes: &[u8]) -> FakeHit {
        for (i, b) in bytes.iter().enumerate() {
            self.mem.insert(addr + i as u64, *b);
        }
        self
    }
}

impl HitEnv for FakeHit {
    fn read_reg(&mut self, reg: u16, part: u8) -> Option<u64> {
        match part {
            0 => Some(self.regs.get(&reg).copied().unwrap_or(0)),
            1 => Some(0),
            _ => None,
        }
    }
    fn write_reg(&mut self, reg: u16, value: u64) -> Status {
        self.regs.insert(reg, value);
        Status::Ok
    }
    fn read_mem(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        for (i, b) in buf.iter_mut().enumerate() {
            match self.mem.get(&(addr + i as u64)) {
                Some(v) => *b = *v,
                None => return i,
            }
        }
        buf.len()
    }
    fn write_mem(&mut self, addr: u64, data: &[u8]) -> Status {
        if (0..data.len() as u64).any(|i| !self.mem.contains_key(&(addr + i))) {
            return Status::Fault;
        }
        for (i, b) in data.iter().enumerate() {
            self.mem.insert(addr + i as u64, *b);
        }
        Status::Ok
    }
    fn check_access(&mut self, addr: u64, _write: bool) -> bool {
        self.mem.contains_key(&addr)
    }
    fn tid(&self) -> u64 {
        self.tid as u64
    }
    fn pid(&self) -> u64 {
        self.pid as u64
    }
    fn cpu(&self) -> u64 {
        0
    }
    fn thread_pointer(&self) -> u64 {
        0
    }
    fn load_bias(&self) -> u64 {
        self.bias
    }
    fn now_ns(&self) -> u64 {
        self.time_ns
    }
    fn cpuid(&mut self, _leaf: u32, _subleaf: u32) -> [u32; 4] {
        [0; 4]
    }
    fn gvars(&mut self) -> &mut [u64] {
        &mut []
    }
    fn entry_reg(&mut self, reg: u16) -> Option<u64> {
        self.entry_regs.get(&reg).copied()
    }
    fn elapsed_ns(&self) -> Option<u64> {
        self.elapsed_ns
    }
}

impl TransportHit for FakeHit {
    fn ip(&self) -> u64 {
        self.ip
    }
    fn set_module_bias(&mut self, bias: u64) {
        self.bias = bias;
    }
    crate::swap_hit_impl!();
}

/// A handler run in the target, owned ([`Event::Ran`] borrows it).
#[derive(Debug)]
pub struct FakeRun {
    /// Process, thread, time and address of the hit.
    pub pid: i32,
    /// Thread.
    pub tid: i32,
    /// Time, ns.
    pub time_ns: u64,
    /// Address.
    pub ip: u64,
    /// How it ended.
    pub outcome: TargetOutcome,
    /// Its records.
    pub records: Sink,
}

/// One step of the script.
#[derive(Debug)]
pub enum Step {
    /// A hit of the probes `tags`.
    Hit(Vec<usize>, FakeHit),
    /// Any event without borrowed data (all but `Hit` and `Ran`).
    Event(Event<'static>),
    /// The mappings of a process change (before an
    /// [`Event::LibrariesChanged`]).
    Map(i32, Vec<Mapping>),
    /// Probes whose library was unmapped ([`Transport::take_unmapped`]).
    Unmap(Vec<Armed>),
    /// A handler run in the target ([`Transport::in_target`]).
    Ran(usize, FakeRun),
    /// A thread at the entry of a function (`ip`) with return probes
    /// armed, `rsp` (register) pointing at the return address (memory),
    /// at `time_ns`, as ptrace sees it: the calls the entry proves
    /// abandoned reported, the hit of the plain probes `tags` there (if
    /// any), then the calls tracked and reported as ptrace's and perf's
    /// are ([`super::calls::enter`]).
    Enter(Vec<usize>, FakeHit),
    /// A thread just returned to `ip` with `rsp` (after the `ret`) and
    /// `rax`, at `time_ns`: the tracked calls returning there are reported
    /// returned ([`super::calls::Call::returned`]) or delivered as hits.
    Return(FakeHit),
}

/// What the session asked of the transport, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// [`Transport::insert`], answered with `armed`.
    Insert {
        /// The probe's tag.
        tag: usize,
        /// The process.
        pid: i32,
        /// The run-time address.
        addr: u64,
        /// What.
        what: Insert,
        /// The handle given back.
        armed: Armed,
    },
    /// [`Transport::remove`].
    Remove(Armed),
    /// [`Transport::semaphore`].
    Semaphore {
        /// The process.
        pid: i32,
        /// The semaphore's address.
        addr: u64,
        /// +1 or -1.
        delta: i16,
    },
    /// [`InTarget::watch_libraries`].
    WatchLibraries(i32),
    /// [`InTarget::load_handlers`] with this many programs and probes.
    LoadHandlers(usize, usize),
    /// [`InTarget::update_handlers`].
    UpdateHandlers,
    /// [`Transport::suspend`].
    Suspend,
    /// [`Transport::resume`].
    Resume,
    /// [`Transport::set_tick`].
    SetTick(std::time::Duration),
    /// [`Transport::detach`].
    Detach,
    /// [`Transport::kill_launched`].
    KillLaunched,
}

/// The scripted transport. Its [`Armed`] handles are numbered from 101,
/// in the order of the inserts.
#[derive(Debug)]
pub struct Fake {
    info: &'static TransportInfo,
    main: i32,
    /// Each process's mappings; a process not listed has `main`'s (a fork
    /// child shares its parent's layout).
    maps: HashMap<i32, Vec<Mapping>>,
    script: std::collections::VecDeque<Step>,
    unmapped: Vec<Armed>,
    /// Tags whose insertion fails (with this error).
    pub refuse: HashMap<usize, super::Error>,
    /// Whether the handlers run "in the target" ([`Event::Ran`]): the
    /// [`InTarget`] hooks are then given by [`Transport::in_target`].
    pub in_target: bool,
    next_armed: u64,
    /// How `run` ends: the main process's [`Event::ProcessExited`] status.
    exit: Option<ExitStatus>,
    /// Every call, in order.
    pub calls: Vec<Call>,
    /// Every action other than [`Action::Continue`] the session answered a
    /// hit with.
    pub actions: Vec<Action>,
    /// Events delivered (the script's steps that were events or hits).
    pub delivered: usize,
    /// Return probes armed: (handle, tag, process, address, maxactive).
    ret_probes: Vec<(Armed, usize, i32, u64, u32)>,
    /// Their tracked calls ([`Step::Enter`], [`Step::Return`]).
    stacks: super::calls::CallStacks,
    /// Calls that ended without a return, to report (reused).
    gone: Vec<super::calls::Gone>,
}

impl Fake {
    /// A transport with capabilities `caps` tracing process `main`.
    pub fn new(caps: Capabilities, main: i32) -> Fake {
        let info = Box::leak(Box::new(TransportInfo {
            name: "fake",
            about: "scripted, for tests",
            caps,
            registers: None,
            preflight: |_| Ok(()),
            open: |_, _| {
                Err(super::Error::unsupported(
                    "fake",
                    "the fake transport is built by tests",
                ))
            },
        }));
        Fake {
            info,
            main,
            maps: HashMap::new(),
            script: Default::default(),
            unmapped: Vec::new(),
            refuse: HashMap::new(),
            in_target: false,
            next_armed: 100,
            exit: None,
            calls: Vec::new(),
            actions: Vec::new(),
            delivered: 0,
            ret_probes: Vec::new(),
            stacks: Default::default(),
            gone: Vec::new(),
        }
    }

    /// Sets the mappings of `pid` (as at the start).
    pub fn map(&mut self, pid: i32, maps: Vec<Mapping>) {
        self.maps.insert(pid, maps);
    }

    /// Each thread tracks at most `calls` calls ([`Step::Enter`]): the
    /// transports' `agent_abi::MAX_TRACKED_CALLS`, lowered for a test.
    /// Before arming (the probes' entry notices are kept with the calls).
    pub fn track_at_most(&mut self, calls: usize) {
        self.stacks = super::calls::CallStacks::with_max_depth(calls);
    }

    /// Appends steps to the script.
    pub fn script(&mut self, steps: impl IntoIterator<Item = Step>) {
        self.script.extend(steps);
    }

    /// The inserts made, as `(tag, pid, addr)`.
    pub fn inserts(&self) -> Vec<(usize, i32, u64)> {
        self.calls
            .iter()
            .filter_map(|c| match c {
                Call::Insert { tag, pid, addr, .. } => Some((*tag, *pid, *addr)),
                _ => None,
            })
            .collect()
    }

    /// The handles removed.
    pub fn removes(&self) -> Vec<Armed> {
        self.calls
            .iter()
            .filter_map(|c| match c {
                Call::Remove(a) => Some(*a),
                _ => None,
            })
            .collect()
    }

    /// The handle the insert of `tag` in `pid` was answered with (the last).
    pub fn armed(&self, tag: usize, pid: i32) -> Option<Armed> {
        self.calls.iter().rev().find_map(|c| match c {
            Call::Insert {
                tag: t,
                pid: p,
                armed,
                ..
            } if *t == tag && *p == pid => Some(*armed),
            _ => None,
        })
    }
}

impl Fake {
    /// Reports the calls collected in `gone` as [`Event::Unwound`] (but
    /// those of disabled probes).
    fn flush_gone(&mut self, on_event: super::calls::OnEvent<'_>) {
        super::calls::each_gone(
            self,
            |f| &mut f.gone,
            |f, g| {
                if g.cause != super::calls::Left::Disabled {
                    on_event(f, g.unwound());
                }
            },
        );
    }

    /// [`Step::Enter`]: as ptrace enters; the action of the plain probes'
    /// hit.
    fn enter(
        &mut self,
        tags: &[usize],
        mut hit: FakeHit,
        on_event: super::calls::OnEvent<'_>,
    ) -> Action {
        let reg = |name: &str| {
            let id = hostabi::regs::by_name(name).expect("register name").id;
            hit.regs.get(&id).copied().unwrap_or(0)
        };
        let mut regs = crate::sys::regs::zero_regs();
        (regs.rdi, regs.rsi, regs.rdx, regs.rcx) = (reg("rdi"), reg("rsi"), reg("rdx"), reg("rcx"));
        (regs.r8, regs.r9, regs.rsp, regs.rip) = (reg("r8"), reg("r9"), reg("rsp"), hit.ip);
        let mut b = [0u8; 8];
        let ret_addr = (hit.read_mem(regs.rsp, &mut b) == 8).then(|| u64::from_le_bytes(b));
        if let Some(ra) = ret_addr {
            self.stacks
                .prune_at_entry(hit.tid, regs.rsp, ra, hit.ip, &mut self.gone);
            self.flush_gone(on_event);
        }
        let mut action = Action::Continue;
        if !tags.is_empty() {
            action = on_event(
                self,
                Event::Hit {
                    tags,
                    hit: &mut hit,
                },
            );
        }
        let probes: Vec<(usize, u32)> = self
            .ret_probes
            .iter()
            .filter(|r| r.2 == hit.pid && r.3 == hit.ip)
            .map(|r| (r.1, r.4))
            .collect();
        let at = super::calls::EntryAt {
            pid: hit.pid,
            tid: hit.tid,
            func: hit.ip,
            regs: &regs,
            ret_addr,
            time_ns: hit.time_ns,
            clock_ns: hit.time_ns,
        };
        super::calls::enter(self, |f| &mut f.stacks, &at, &probes, |_, _| true, on_event);
        action
    }

    /// [`Step::Return`]: as ptrace and perf return; the action of the last
    /// hit delivered.
    fn ret(&mut self, hit: FakeHit, on_event: super::calls::OnEvent<'_>) -> Action {
        let rsp_id = hostabi::regs::by_name("rsp").expect("rsp").id;
        let rax_id = hostabi::regs::by_name("rax").expect("rax").id;
        let rsp = hit.regs.get(&rsp_id).copied().unwrap_or(0);
        let rax = hit.regs.get(&rax_id).copied().unwrap_or(0);
        self.stacks
            .returning(hit.tid, rsp, Some(hit.ip), &mut self.gone);
        self.flush_gone(on_event);
        let mut action = Action::Continue;
        while let Some(c) = self.stacks.pop(hit.tid, rsp) {
            if let Some(ev) = c.returned(hit.tid, hit.time_ns, hit.time_ns, rax) {
                on_event(self, ev);
                continue;
            }
            let entry = c.entry_state(hit.time_ns);
            let mut h = hit.clone();
            h.ip = c.func;
            h.elapsed_ns = Some(entry.elapsed_ns);
            for (id, v) in hostabi::regs::ENTRY_REGS.iter().zip(entry.regs) {
                h.entry_regs.insert(*id, v);
            }
            action = on_event(
                self,
                Event::Hit {
                    tags: std::slice::from_ref(&c.tag),
                    hit: &mut h,
                },
            );
        }
        action
    }
}

impl Transport for Fake {
    fn info(&self) -> &'static TransportInfo {
        self.info
    }

    fn main_pid(&self) -> i32 {
        self.main
    }

    fn maps(&mut self, pid: i32, _fresh: bool) -> Result<Vec<Mapping>, super::Error> {
        self.maps
            .get(&pid)
            .or_else(|| self.maps.get(&self.main))
            .cloned()
            .ok_or_else(|| super::Error::gone(pid, format!("no mappings for process {pid}")))
    }

    fn insert(
        &mut self,
        tag: usize,
        pid: i32,
        addr: RunAddr,
        what: Insert,
    ) -> Result<Armed, super::Error> {
        if let Some(e) = self.refuse.get(&tag) {
            return Err(e.clone());
        }
        self.next_armed += 1;
        let armed = Armed(self.next_armed);
        if let Insert::Return {
            maxactive,
            entry_notice,
            ..
        } = what
        {
            self.ret_probes.push((armed, tag, pid, addr.0, maxactive));
            if entry_notice {
                self.stacks.set_entry_notice(tag);
            }
        }
        self.calls.push(Call::Insert {
            tag,
            pid,
            addr: addr.0,
            what,
            armed,
        });
        Ok(armed)
    }

    fn remove(&mut self, armed: Armed) {
        self.calls.push(Call::Remove(armed));
        if let Some(i) = self.ret_probes.iter().position(|r| r.0 == armed) {
            let (_, tag, ..) = self.ret_probes.remove(i);
            if !self.ret_probes.iter().any(|r| r.1 == tag) {
                self.stacks.drop_probe(tag, &mut self.gone);
                self.gone.clear();
            }
        }
    }

    fn take_unmapped(&mut self) -> Vec<Armed> {
        std::mem::take(&mut self.unmapped)
    }

    fn semaphore(&mut self, pid: i32, addr: RunAddr, delta: i16) -> Result<(), super::Error> {
        self.calls.push(Call::Semaphore {
            pid,
            addr: addr.0,
            delta,
        });
        Ok(())
    }

    fn suspend(&mut self) -> Result<(), super::Error> {
        self.calls.push(Call::Suspend);
        Ok(())
    }

    fn resume(&mut self) -> Result<(), super::Error> {
        self.calls.push(Call::Resume);
        Ok(())
    }

    fn set_tick(&mut self, period: std::time::Duration) {
        self.calls.push(Call::SetTick(period));
    }

    /// Delivers the script's steps in order, until it ends or `stop` is set.
    fn run(
        &mut self,
        stop: &AtomicBool,
        on_event: &mut dyn FnMut(&mut dyn Transport, Event<'_>) -> Action,
    ) -> anyhow::Result<Option<ExitStatus>> {
        while let Some(step) = self.script.pop_front() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let action = match step {
                Step::Map(pid, maps) => {
                    self.maps.insert(pid, maps);
                    continue;
                }
                Step::Unmap(armed) => {
                    self.unmapped.extend(armed);
                    continue;
                }
                Step::Hit(tags, mut hit) => on_event(
                    self,
                    Event::Hit {
                        tags: &tags,
                        hit: &mut hit,
                    },
                ),
                Step::Ran(tag, r) => {
                    let run = TargetRun {
                        pid: r.pid,
                        tid: r.tid,
                        cpu: 0,
                        time_ns: r.time_ns,
                        ip: r.ip,
                        outcome: r.outcome,
                        trap: None,
                        records: &r.records,
                    };
                    on_event(self, Event::Ran { tag, run: &run })
                }
                Step::Event(ev) => {
                    if let Event::ProcessExited { pid, status } = ev
                        && pid == self.main
                    {
                        self.exit = Some(status);
                    }
                    on_event(self, ev)
                }
                Step::Enter(tags, hit) => self.enter(&tags, hit, on_event),
                Step::Return(hit) => self.ret(hit, on_event),
            };
            self.delivered += 1;
            if action != Action::Continue {
                self.actions.push(action);
            }
        }
        Ok(self.exit)
    }

    fn detach(&mut self) -> anyhow::Result<()> {
        self.calls.push(Call::Detach);
        Ok(())
    }

    fn kill_launched(&mut self) {
        self.calls.push(Call::KillLaunched);
    }

    fn report(&self) -> Report {
        Report::default()
    }

    fn new_hit(&self) -> Box<dyn TransportHit> {
        Box::new(FakeHit::default())
    }

    fn in_target(&mut self) -> Option<&mut dyn InTarget> {
        if self.in_target { Some(self) } else { None }
    }
}

/// The in-target hooks, reached only when the field `in_target` is set. The
/// handlers are never held (there are none) and there are no map regions.
impl InTarget for Fake {
    fn watch_libraries(&mut self, pid: i32) -> Result<(), super::Error> {
        self.calls.push(Call::WatchLibraries(pid));
        Ok(())
    }

    fn load_handlers(&mut self, set: &super::HandlerSet<'_>) -> Result<(), super::Error> {
        self.calls
            .push(Call::LoadHandlers(set.programs.len(), set.probes.len()));
        Ok(())
    }

    fn update_handlers(&mut self, _set: &super::HandlerSet<'_>) -> Result<(), super::Error> {
        self.calls.push(Call::UpdateHandlers);
        Ok(())
    }

    fn pause_handlers(&mut self) -> bool {
        true
    }

    fn resume_handlers(&mut self) {}

    fn handler_maps(&mut self, _program: usize, _bytes: &mut [u8], _write: bool) -> bool {
        false
    }
}

/// Counts for an [`Event::Counted`].
pub fn counts(hits: u64, runs: u64, missed: u64) -> RunCounts {
    RunCounts {
        hits,
        runs,
        missed,
        ..RunCounts::default()
    }
}

// The test harness: a process that does not exist, its modules (small
// files written once per test process), and programs compiled in memory.

/// The traced process (no such process exists: nothing reads `/proc` for it).
pub const PID: i32 = 1_000_001;
/// Where the executable's code is (link-time = run-time: not PIE).
pub const EXE_BASE: u64 = 0x40_0000;
/// The probed instruction in the executable.
pub const SITE: u64 = EXE_BASE + 0x1000;
/// Where the library is mapped (PIE: link-time 0).
pub const LIB_BASE: u64 = 0x7f00_0000_0000;

/// A module file of `0x2000` bytes, one read-execute `PT_LOAD` at `vaddr`
/// (`ET_EXEC`, or `ET_DYN` when `dyn_`).
fn elf_bytes(vaddr: u64, dyn_: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(0x2000);
    b.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&(if dyn_ { 3u16 } else { 2u16 }).to_le_bytes()); // e_type
    b.extend_from_slice(&0x3eu16.to_le_bytes()); // e_machine: x86-64
    b.extend_from_slice(&1u32.to_le_bytes()); // e_version
    b.extend_from_slice(&(vaddr + 0x1000).to_le_bytes()); // e_entry
    b.extend_from_slice(&64u64.to_le_bytes()); // e_phoff
    b.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    b.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    for h in [64u16, 56, 1, 64, 0, 0] {
        // ehsize, phentsize, phnum, shentsize, shnum, shstrndx
        b.extend_from_slice(&h.to_le_bytes());
    }
    b.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    b.extend_from_slice(&5u32.to_le_bytes()); // R X
    for v in [0u64, vaddr, vaddr, 0x2000, 0x2000, 0x1000] {
        // offset, vaddr, paddr, filesz, memsz, align
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.resize(0x2000, 0x90);
    b
}

/// The executable and the library, written once per test process.
fn modules() -> &'static (String, String) {
    static FILES: OnceLock<(String, String)> = OnceLock::new();
    FILES.get_or_init(|| {
        // One directory for every run (the files are always the same),
        // each file written whole then renamed over: concurrent test
        // processes never see a partial one.
        let dir = std::env::temp_dir().join("wprobe-fake-transport");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let write = |name: &str, bytes: Vec<u8>| {
            let tmp = dir.join(format!("{name}.{}", std::process::id()));
            std::fs::write(&tmp, bytes).expect("writing a module");
            std::fs::rename(&tmp, dir.join(name)).expect("renaming a module");
            dir.join(name)
        };
        let exe = write("exe", elf_bytes(EXE_BASE, false));
        let lib = write("libfake.so", elf_bytes(0, true));
        (
            exe.to_string_lossy().into_owned(),
            lib.to_string_lossy().into_owned(),
        )
    })
}

/// The executable's path (mapped at [`EXE_BASE`]).
pub fn exe() -> &'static str {
    &modules().0
}

/// The library's path (position-independent).
pub fn lib() -> &'static str {
    &modules().1
}

/// A read-execute mapping of `path` at `start`.
pub fn mapping(path: &str, start: u64) -> Mapping {
    Mapping {
        start,
        end: start + 0x2000,
        read: true,
        write: false,
        exec: true,
        shared: false,
        offset: 0,
        dev_major: 0,
        dev_minor: 0,
        inode: 1,
        path: path.to_string(),
    }
}

/// The transport with capabilities `caps` tracing [`PID`], whose
/// executable is mapped at [`EXE_BASE`].
pub fn traced(caps: Capabilities) -> Fake {
    let mut t = Fake::new(caps, PID);
    t.map(PID, vec![mapping(exe(), EXE_BASE)]);
    t
}

/// One engine for every test.
pub fn engine() -> &'static wasmtime::Engine {
    static ENGINE: OnceLock<wasmtime::Engine> = OnceLock::new();
    ENGINE.get_or_init(|| crate::wasm::engine::new_engine().expect("engine"))
}

/// Compiles RPN `text` (`{exe}` and `{lib}` stand for the module paths).
pub fn program(label: &str, text: &str) -> LoadedProgram {
    let text = text.replace("{exe}", exe()).replace("{lib}", lib());
    let path = std::path::Path::new("test.rpn");
    let (prog, _) = match rpn2wasm::frontend_str(path, &text, &rpn2wasm::Options::default()) {
        Ok(p) => p,
        Err((d, map)) => panic!("{}", d.render(&map)),
    };
    let c = rpn2wasm::compile_program(prog);
    let module = crate::wasm::load::load(engine(), &c.wasm, None).expect("loading");
    LoadedProgram {
        label: label.to_string(),
        module,
    }
}

/// Text output shared with its writer (the session's, a view's).
#[derive(Clone, Debug, Default)]
pub struct Output(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Output {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("output").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Output {
    /// What was written.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().expect("output").clone()).expect("UTF-8 output")
    }
}
