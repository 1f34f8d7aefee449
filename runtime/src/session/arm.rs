//! Arming: checking the programs against the transport's capabilities
//! before anything is launched, resolving each probe in a process (its
//! module located once per call, its address checked to start an
//! instruction), inserting it through the transport, and disabling it.

use rustc_hash::FxHashMap as HashMap;

use hostabi::manifest::{LocationKind, ProbeKind, ProbeSpec};

use super::Session;
use crate::arch::{DEBUG_REGISTERS, WatchKind};
use crate::probe::addr::RunAddr;
use crate::probe::resolve::{Located, ResolveError};
use crate::proc::procmaps::{self, Mapping};
use crate::transport::{
    Armed, Capabilities, Error, Insert, Rule, SemaphoreHold, TRANSPORTS, Transport, TransportInfo,
};
use crate::wasm::regscan::RegsRead;

/// How one probe is inserted: `(probe index, spec, run-time address,
/// whether the program's `opcode =` applies there)`.
type InsertFn<'a> = dyn FnMut(usize, &ProbeSpec, RunAddr, bool) -> Result<Armed, Error> + 'a;

fn watch_kind(k: ProbeKind) -> WatchKind {
    match k {
        ProbeKind::WatchExec => WatchKind::Exec,
        ProbeKind::WatchWrite => WatchKind::Write,
        _ => WatchKind::ReadWrite,
    }
}

/// `endbr64`: a function compiled for CET indirect-branch tracking starts
/// with it.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Checks that link-time address `link` is a function's entry, as a return
/// probe needs (spec §6.2): where the symbol table has a function with a
/// size containing it, its first byte or the instruction after the
/// `endbr64` that starts it. A location in no sized function is taken on
/// trust.
pub(crate) fn check_function_entry(
    elf: &wprobe_elf::ElfInfo,
    link: crate::probe::addr::LinkAddr,
) -> Result<(), Error> {
    let link = link.0;
    let Some(f) = elf.function_containing(link) else {
        return Ok(());
    };
    let endbr = elf.bytes_at(f.value, 4) == Some(&ENDBR64[..]);
    if link == f.value || (endbr && link == f.value + 4) {
        return Ok(());
    }
    Err(Error::refused(
        Rule::Returns,
        None,
        format!(
            "not a function entry: {link:#x} is {}+{:#x}; a return probe must be at the first \
             byte of its function ({:#x}){}",
            wprobe_elf::demangle::demangle(&f.name),
            link - f.value,
            f.value,
            if endbr {
                format!(" or after the endbr64 that starts it ({:#x})", f.value + 4)
            } else {
                String::new()
            }
        ),
    ))
}

/// The first transport of the registry that can do what `can` asks.
fn one_that(can: fn(&Capabilities) -> bool) -> &'static str {
    TRANSPORTS
        .iter()
        .find(|t| can(&t.caps))
        .map_or("ptrace", |t| t.name)
}

impl Session {
    /// Checks, before anything is launched, what `transport` could not
    /// arm or honour: more watchpoint probes than debug registers, and what
    /// the transport lacks (watchpoints, handlers that write, `-f`); then
    /// the transport's own preflight (tracefs for uprobes). One message
    /// format for every transport: what needs what, and which transport
    /// has it.
    pub fn check(&self, transport: &TransportInfo) -> Result<(), String> {
        let watch: Vec<&str> = self
            .probes
            .iter()
            .filter(|p| self.manifests[p.prog].probes[p.index].kind != ProbeKind::Breakpoint)
            .map(|p| p.label.as_str())
            .collect();
        if watch.len() > DEBUG_REGISTERS {
            return Err(format!(
                "debug register unavailable: {} watchpoint probes selected ({}), but x86-64 has \
                 {DEBUG_REGISTERS} debug registers (DR0-DR3), so at most {DEBUG_REGISTERS} \
                 watchpoints per run; select fewer with --group/--type",
                watch.len(),
                watch.join(", ")
            ));
        }
        let (name, caps) = (transport.name, transport.caps);
        if !caps.return_probes
            && let Some(p) = self
                .probes
                .iter()
                .find(|p| self.manifests[p.prog].probes[p.index].r#return)
        {
            let alt = TRANSPORTS.iter().find(|t| t.caps.return_probes);
            return Err(format!(
                "probe {} is a return probe (`return yes`: uretprobe, r: event), and --transport \
                 {name} cannot arm return probes; {}",
                p.label,
                match alt {
                    Some(t) => format!("use --transport {}", t.name),
                    None => "no transport of this wprobe can yet: probe the function's entry \
                             instead"
                        .to_string(),
                }
            ));
        }
        if !caps.watchpoints
            && let Some(label) = watch.first()
        {
            return Err(format!(
                "probe {label} is a watchpoint, and --transport {name} has no watchpoints; use \
                 --transport {}",
                one_that(|c| c.watchpoints)
            ));
        }
        if !caps.writes
            && let Some((label, import)) = self.writers.first()
        {
            return Err(format!(
                "program `{label}` imports `{import}`: handlers that write registers or memory \
                 cannot run under --transport {name}{}; use --transport {}",
                if caps.synchronous {
                    ""
                } else {
                    " (the target does not stop for the handler)"
                },
                one_that(|c| c.writes)
            ));
        }
        if let Some(has) = transport.registers {
            // What the transport's hits carry, in words (perf: a sample of
            // the general registers; inproc: the stub's frame and the live
            // FPU state, all but the debug registers).
            let (verb, provides, rest) = if has(hostabi::regs::by_name("xmm0").map_or(0, |r| r.id))
            {
                (
                    "provides",
                    "every register but the debug registers",
                    "which read 0",
                )
            } else {
                ("samples", "the general registers only", "others read 0")
            };
            for (label, wasm, thread_pointer) in &self.program_code {
                let why = match crate::wasm::regscan::registers_read(wasm) {
                    RegsRead::Only(set) => (0..128u16)
                        .filter(|id| set & (1 << id) != 0 && !has(*id))
                        .filter_map(hostabi::regs::by_id)
                        .map(|r| format!("reads register `{}`", r.name))
                        .next(),
                    RegsRead::All => {
                        let w = format!(
                            "program `{label}` reads registers chosen at run time: --transport \
                             {name} provides {provides}, {rest}"
                        );
                        crate::elog!("wprobe: warning: {w}");
                        None
                    }
                };
                let why = why.or_else(|| {
                    (*thread_pointer && !has(hostabi::regs::by_name("fs_base").map_or(0, |r| r.id)))
                        .then(|| {
                            "reads the thread pointer (`thread_pointer`, RPN `push task`)"
                                .to_string()
                        })
                });
                if let Some(why) = why {
                    return Err(format!(
                        "program `{label}` {why}, which --transport {name} does not provide (it \
                         {verb} {provides}); use --transport {}",
                        TRANSPORTS
                            .iter()
                            .find(|t| t.registers.is_none())
                            .map_or("ptrace", |t| t.name)
                    ));
                }
            }
        }
        if !caps.write_checks {
            for (label, wasm, _) in &self.program_code {
                if crate::wasm::regscan::checks_writable(wasm) {
                    return Err(format!(
                        "program `{label}` asks whether memory is writable (`check_access` for \
                         writing, RPN `vfyrw`), which --transport {name} cannot answer; use \
                         --transport {}",
                        one_that(|c| c.write_checks)
                    ));
                }
            }
        }
        for (label, stops) in &self.program_stops {
            for &n in stops {
                let (can, what) = match n {
                    1 => (caps.debugger_handoff, "a debugger hand-off"),
                    _ => (caps.core_dump, "a core dump"),
                };
                if !can {
                    return Err(format!(
                        "program `{label}` uses `exit {n}` ({what}), which needs the target \
                         stopped at the hit: --transport {name} cannot honour it; use \
                         --transport {}",
                        if n == 1 {
                            one_that(|c| c.debugger_handoff)
                        } else {
                            one_that(|c| c.core_dump)
                        }
                    ));
                }
            }
        }
        if self.opts.follow_forks && !caps.follows_forks {
            return Err(format!(
                "-f: --transport {name} does not follow forks; use --transport {}",
                one_that(|c| c.follows_forks)
            ));
        }
        (transport.preflight)(self.has_breakpoints()).map_err(|e| e.to_string())
    }

    /// Arms every enabled probe not yet armed in `pid`; returns how many
    /// are armed there. Warnings (probes that cannot be armed) are printed
    /// when `report`, and kept in [`Session::warnings`] in any case.
    pub fn arm(&mut self, t: &mut dyn Transport, pid: i32, report: bool) -> usize {
        let t0 = std::time::Instant::now();
        if self.bt.active {
            // The mappings for symbolizing addresses, read while the
            // process surely lives: a transport that hands hits over after
            // the fact (perf) may see its last ones after it exited.
            self.bt.sym.note(pid as u64);
        }
        let n = match t.maps(pid, false) {
            Ok(maps) => {
                let verify = self.opts.verify_opcodes;
                let notices: Vec<bool> = self
                    .probes
                    .iter()
                    .map(|p| self.entry_notices.contains(&p.prog))
                    .collect();
                let every: Vec<bool> = self
                    .probes
                    .iter()
                    .map(|p| self.every_call.contains(&p.prog))
                    .collect();
                let maxactive_of = |pi: usize, spec: &hostabi::manifest::ProbeSpec| {
                    if every.get(pi).copied().unwrap_or(false) {
                        super::EVERY_CALL
                    } else {
                        spec.maxactive_or_default()
                    }
                };
                let switches = self.stack_switch.clone();
                let mut raised: Vec<(usize, u64)> = Vec::new();
                let mut failed: Vec<(usize, String)> = Vec::new();
                // Inherited from a parent (fork): raised already.
                let held: Vec<(usize, u64)> = self
                    .semaphores
                    .iter()
                    .filter(|s| s.1 == pid)
                    .map(|s| (s.0, s.2))
                    .collect();
                // A probe that cannot be armed in a followed child stays
                // enabled for the other processes.
                let child = pid != t.main_pid();
                t.expect_inserts(
                    self.probes
                        .iter()
                        .filter(|p| p.enabled && !p.armed.iter().any(|(q, _)| *q == pid))
                        .count(),
                );
                let n = self.arm_with(
                    pid,
                    child,
                    &maps,
                    report,
                    &mut |pi, spec, addr, opcode_applies| {
                        let opcode = spec.opcode.filter(|_| verify && opcode_applies);
                        if let Some(sem) = spec.semaphore
                            && spec.kind == ProbeKind::Breakpoint
                            && !spec.r#return
                        {
                            // The site's bias applies to its semaphore (one module).
                            let bias = addr.0.wrapping_sub(spec.location.addend);
                            let sem = sem.wrapping_add(bias);
                            if !held.contains(&(pi, sem)) {
                                let (armed, hold) =
                                    t.insert_usdt(pi, pid, addr, opcode, RunAddr(sem))?;
                                match hold {
                                    SemaphoreHold::Raised => raised.push((pi, sem)),
                                    SemaphoreHold::Kernel => {}
                                    SemaphoreHold::Failed(e) => failed.push((pi, e)),
                                }
                                return Ok(armed);
                            }
                        }
                        let what = match spec.kind {
                            ProbeKind::Breakpoint if spec.r#return => Insert::Return {
                                opcode,
                                maxactive: maxactive_of(pi, spec),
                                entry_notice: notices.get(pi).copied().unwrap_or(false),
                            },
                            ProbeKind::Breakpoint => Insert::Breakpoint { opcode },
                            k => Insert::Watchpoint {
                                len: spec.length,
                                kind: watch_kind(k),
                            },
                        };
                        if spec.r#return && switches.contains(&pi) {
                            t.mark_stack_switch(pi);
                        }
                        t.insert(pi, pid, addr, what)
                    },
                );
                self.held_semaphores(pid, raised, failed, report);
                n
            }
            Err(e) => {
                self.warn(report, e.to_string());
                0
            }
        };
        self.arm_time += t0.elapsed();
        n
    }

    /// Arms every probe in the process `pid` at the start of a run (what
    /// [`Session::arm`] does), and for a launched command stopped at its
    /// exec ([`Transport::at_exec`]) first the breakpoints of what is
    /// mapped and of the startup libraries on their files (their
    /// constructors run before the entry point), then runs it to its
    /// entry point ([`Transport::run_to_entry`]) and arms the rest there
    /// (watchpoints, IFUNC probes). Returns how many are armed in `pid`;
    /// an error when the command could not be run to its entry point.
    pub fn arm_at_start(
        &mut self,
        t: &mut dyn Transport,
        pid: i32,
        report: bool,
    ) -> Result<usize, String> {
        if t.at_exec() {
            self.breakpoints_only = true;
            self.arm(t, pid, report);
            self.breakpoints_only = false;
            if self.pending() > 0 {
                let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
                let env = wprobe_elf::startup::LoaderEnv::from_env();
                let libs = wprobe_elf::startup::startup_libraries(&exe, &env);
                self.arm_on_startup_libraries(t, pid, &libs, report);
            }
            t.run_to_entry().map_err(|e| e.to_string())?;
        }
        // What of the handlers' loading needs no probe planned, before
        // the planning (the in-process transport's agent and programs).
        if pid == t.main_pid() {
            let set = self.handler_set(pid);
            if let Some(it) = t.in_target() {
                it.preload_handlers(pid, &set).map_err(|e| e.to_string())?;
            }
        }
        Ok(self.arm(t, pid, report))
    }

    /// Arms the breakpoint probes still pending (their module was not
    /// mapped at start) on the module's file, found by path or by base name
    /// in `dirs`, for transports that arm files
    /// ([`Capabilities::arms_files`]): processes that inherit the probes
    /// hit them once they map the file, even through an exec. Returns how
    /// many were armed.
    pub fn arm_on_files(
        &mut self,
        t: &mut dyn Transport,
        pid: i32,
        dirs: &[std::path::PathBuf],
        report: bool,
    ) -> usize {
        let mut find = |module: &str| {
            if module.contains('/') {
                Some(std::path::PathBuf::from(module))
            } else {
                dirs.iter().map(|d| d.join(module)).find(|f| f.is_file())
            }
        };
        self.arm_on_files_found(t, pid, &mut find, false, report, report)
    }

    /// A system-wide run ([`crate::transport::Target::System`]): arms every
    /// breakpoint probe on its module's file (a path; a `lib…` name where
    /// the dynamic linker finds it; else a bare name found in `dirs`), for every process that runs it; a probe whose file is
    /// not found, or cannot be probed, is warned about. Returns how many
    /// were armed.
    pub fn arm_system_wide(&mut self, t: &mut dyn Transport, dirs: &[std::path::PathBuf]) -> usize {
        let mut find = |module: &str| {
            if module.contains('/') {
                Some(std::path::PathBuf::from(module))
            } else if module.starts_with("lib")
                && let Some(lib) = wprobe_elf::locate::library(module)
            {
                // `libc`, `libc.so.6`: where the dynamic linker finds it,
                // as the one-liner compiler resolved it.
                Some(lib)
            } else {
                dirs.iter().map(|d| d.join(module)).find(|f| f.is_file())
            }
        };
        let pid = t.main_pid();
        let armed = self.arm_on_files_found(t, pid, &mut find, false, true, false);
        let missing: Vec<String> = self
            .probes
            .iter()
            .filter(|p| p.enabled && p.armed.is_empty())
            .filter(|p| self.manifests[p.prog].probes[p.index].kind == ProbeKind::Breakpoint)
            .map(|p| p.label.clone())
            .collect();
        for label in missing {
            self.warn(
                true,
                format!("probe {label} not applied: its module's file was not found"),
            );
        }
        armed
    }

    /// Arms the breakpoint probes still pending in the libraries `libs`
    /// that the launched command `pid`, stopped at its exec, will load at
    /// startup ([`Transport::at_exec`]; found with
    /// `wprobe_elf::startup::startup_libraries`), on their files: their
    /// constructors run before the entry point. A module is matched by
    /// path or bare name as in a running process. Probes on IFUNCs stay
    /// pending, for the entry point; no note per probe (the expected
    /// case). Returns how many were armed.
    fn arm_on_startup_libraries(
        &mut self,
        t: &mut dyn Transport,
        pid: i32,
        libs: &[std::path::PathBuf],
        report: bool,
    ) -> usize {
        let mut find = |module: &str| procmaps::module_file(module, libs).cloned();
        self.arm_on_files_found(t, pid, &mut find, true, report, false)
    }

    /// [`Session::arm_on_files`] with the module files `find` gives; at
    /// `startup`, IFUNC probes stay pending; `note`: a note per probe armed
    /// on its file (`report`: warnings for those that fail).
    fn arm_on_files_found(
        &mut self,
        t: &mut dyn Transport,
        pid: i32,
        find: &mut dyn FnMut(&str) -> Option<std::path::PathBuf>,
        startup: bool,
        report: bool,
        note: bool,
    ) -> usize {
        let t0 = std::time::Instant::now();
        let mut armed = 0;
        for pi in 0..self.probes.len() {
            let p = &self.probes[pi];
            let (prog, index) = (p.prog, p.index);
            let spec = &self.manifests[prog].probes[index];
            if !p.enabled || !p.armed.is_empty() || spec.kind != ProbeKind::Breakpoint {
                continue;
            }
            let module = spec.module.as_ref().unwrap_or(&self.manifests[prog].module);
            let Some(file) = find(module) else { continue };
            let file = procmaps::canonical(&file);
            if startup
                && let Ok(elf) = self.resolver.elf(&file)
                && crate::probe::resolve::ifunc_symbol(spec, &elf).is_some()
            {
                // Armed at the entry point, where its implementation is known.
                continue;
            }
            let verify = self.opts.verify_opcodes;
            let res = self
                .resolver
                .elf(&file)
                .map_err(|e| Error::other(e.to_string()))
                .and_then(|elf| {
                    if let Some(sym) = crate::probe::resolve::ifunc_symbol(spec, &elf) {
                        return Err(Error::other(format!(
                            "`{}` is an IFUNC: its implementation is chosen when a process \
                             loads {}, which no process has mapped yet",
                            sym.name,
                            file.display()
                        )));
                    }
                    let link = crate::probe::resolve::link_value(spec, &elf)
                        .map_err(|e| Error::other(e.to_string()))?;
                    let off = elf
                        .file_offset(link.0)
                        .filter(|_| elf.is_exec_vaddr(link.0))
                        .ok_or_else(|| {
                            Error::refused(
                                Rule::NotExecutable,
                                None,
                                format!(
                                    "invalid offset: 0x{link:x} is not in an executable segment \
                                     of {}",
                                    file.display()
                                ),
                            )
                        })?;
                    if verify
                        && let Some(op) = spec.opcode
                        && let Some(found) = elf.first_byte(link.0)
                        && found != op
                    {
                        return Err(Error::refused(
                            Rule::OpcodeMismatch,
                            None,
                            format!(
                                "opcode mismatch at {link:#x}: expected {op:#04x}, found \
                                 {found:#04x}"
                            ),
                        ));
                    }
                    if verify && spec.opcode.is_none() {
                        wprobe_elf::disasm::check_boundary(&elf, link.0).map_err(|e| {
                            Error::refused(Rule::InstructionBoundary, None, e.to_string())
                        })?;
                    }
                    if spec.r#return {
                        check_function_entry(&elf, link)?;
                    }
                    let sem_off = spec.semaphore.and_then(|s| elf.file_offset(s));
                    let (id, hold) = if spec.r#return {
                        if self.stack_switch.contains(&pi) {
                            t.mark_stack_switch(pi);
                        }
                        let notice = self.entry_notices.contains(&self.probes[pi].prog);
                        let max = self.maxactive(pi, spec);
                        (t.insert_return_on_file(pi, &file, off, max, notice)?, None)
                    } else if let Some(sem_off) = sem_off {
                        let (id, hold) = t.insert_usdt_on_file(pi, &file, off, sem_off)?;
                        (id, Some(hold))
                    } else {
                        (t.insert_on_file(pi, &file, off)?, None)
                    };
                    if let Some(SemaphoreHold::Failed(e)) = hold {
                        crate::elog!(
                            "wprobe: warning: probe {}: {e}; the program skips the site while its \
                             semaphore is 0",
                            self.probes[pi].label
                        );
                    }
                    Ok((link, id))
                });
            match res {
                Ok((link, id)) => {
                    let p = &mut self.probes[pi];
                    p.link = Some(link);
                    p.armed.push((pid, id));
                    p.ever_armed = true;
                    armed += 1;
                    if note && !startup {
                        crate::elog!(
                            "wprobe: probe {}: module not mapped at start; armed on the file {}",
                            p.label,
                            file.display()
                        );
                    }
                }
                Err(e) => {
                    self.arm_failed(prog, index, e.clone());
                    let msg = format!("probe {} not applied: {e}", self.probes[pi].label);
                    self.warn(report, msg);
                    self.probes[pi].enabled = false;
                }
            }
        }
        self.arm_time += t0.elapsed();
        armed
    }

    /// Resolution and bookkeeping of every transport; `insert` arms one
    /// probe `(index, spec, address)`.
    fn arm_with(
        &mut self,
        pid: i32,
        child: bool,
        maps: &[Mapping],
        report: bool,
        insert: &mut InsertFn<'_>,
    ) -> usize {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        let mut armed = 0;
        // The module of a program is located once per call, not once per
        // probe (10,000 probes of one program: one maps scan, one bias).
        // Keyed by (program, module): a probe may name its own `module`.
        let mut located: HashMap<(usize, String), Result<Located, ResolveError>> =
            HashMap::default();
        // At the exec, the entry point takes the breakpoint that runs the
        // command to it (`Transport::run_to_entry`): a probe there is armed
        // once it is reached (a uprobe under it made the command run past
        // it, and wprobe gave up on a process it thought dead).
        let entry = if self.breakpoints_only {
            crate::proc::procmaps::entry_point(pid)
        } else {
            None
        };
        for pi in self.arming_order() {
            if !self.probes[pi].enabled {
                continue;
            }
            if self.probes[pi].armed.iter().any(|(p, _)| *p == pid) {
                armed += 1;
                continue;
            }
            let (prog, index) = (self.probes[pi].prog, self.probes[pi].index);
            let m = &self.manifests[prog];
            let spec = &m.probes[index];
            if self.breakpoints_only && spec.kind != ProbeKind::Breakpoint {
                continue;
            }
            let module = spec.module.as_ref().unwrap_or(&m.module).clone();
            let loc = located
                .entry((prog, module.clone()))
                .or_insert_with(|| self.resolver.locate(maps, &module, exe.as_deref()))
                .clone();
            let loc = match loc {
                Ok(l) => l,
                Err(ResolveError::NotMapped(_)) => {
                    if std::env::var_os("WPROBE_DEBUG").is_some() {
                        crate::elog!(
                            "wprobe: debug: {} not mapped in {pid} ({} mappings)",
                            module,
                            maps.len()
                        );
                    }
                    continue; // maybe later (dlopen)
                }

                Err(e) => {
                    self.not_applied(pi, pid, child, report, Error::other(e.to_string()));
                    continue;
                }
            };
            if spec.module.is_none() {
                self.bias.insert((prog, pid), loc.bias);
                self.bias_default.entry(prog).or_insert(loc.bias);
            }
            self.bt.probe_bias.insert((pi, pid), loc.bias);
            let is_bp = spec.kind == ProbeKind::Breakpoint;
            if is_bp {
                note_go(&mut self.go_noted, &mut self.warnings, &loc);
            }
            let ifunc = is_bp && crate::probe::resolve::ifunc_symbol(spec, &loc.elf).is_some();
            let res = match crate::probe::resolve::probe_address(spec, &loc, maps, &module, pid) {
                // Resolved when the dynamic linker has run (the next
                // library event, or the program's entry point).
                Err(ResolveError::IfuncPending { .. }) => continue,
                Ok(a) if is_bp && entry == Some(a.0) => continue,
                r => r,
            };
            let res = res
                .map_err(|e| Error::other(e.to_string()))
                .and_then(|addr| {
                    if is_bp {
                        self.check_address(pi, spec, &loc, &module, addr, ifunc, report, pid)?;
                    }
                    // `opcode =` was taken from the symbol: the resolver's
                    // first byte, not the implementation's.
                    Ok((addr, insert(pi, spec, addr, !ifunc)?))
                });
            match res {
                Ok((addr, a)) => {
                    let p = &mut self.probes[pi];
                    if is_bp {
                        // The hit's address minus this is the module's load
                        // bias in whichever process hit it.
                        p.link = Some(addr.unrelocate(loc.bias));
                    }
                    p.armed.push((pid, a));
                    p.ever_armed = true;
                    armed += 1;
                }
                Err(e) => self.not_applied(pi, pid, child, report, e),
            }
        }
        armed
    }

    /// The probe indexes in the order they are armed: return probes first
    /// (a transport that patches code plans the windows of a function's
    /// entry and of its `ret`s at once (a short function takes one window
    /// for both ends), which an entry probe armed before on the same
    /// function would prevent).
    fn arming_order(&self) -> Vec<usize> {
        let is_return = |pi: usize| {
            let p = &self.probes[pi];
            self.manifests[p.prog].probes[p.index].r#return
        };
        (0..self.probes.len())
            .filter(|&pi| is_return(pi))
            .chain((0..self.probes.len()).filter(|&pi| !is_return(pi)))
            .collect()
    }

    /// Probe `pi` could not be armed in process `pid` (`why`): recorded,
    /// said where `report`, and disabled, unless `pid` is a followed
    /// `child` (the probe goes on in the processes where it is armed, and
    /// is armed in those that come: a fork child made while its parent
    /// mapped the probe's library, before the parent armed it, has it
    /// unarmed under inproc, and that once disabled the probe in the
    /// parent at its next `dlopen` too).
    fn not_applied(&mut self, pi: usize, pid: i32, child: bool, report: bool, why: Error) {
        let (prog, index) = (self.probes[pi].prog, self.probes[pi].index);
        self.arm_failed(prog, index, why.clone());
        let msg = format!(
            "probe {} not applied in pid {pid}: {why}",
            self.probes[pi].label
        );
        self.warn(report, msg);
        if !child {
            self.probes[pi].enabled = false;
        }
    }

    /// The checks of a breakpoint's address `addr` in module `module`
    /// (`loc`) before it is armed: an instruction boundary where the spec
    /// gives no opcode, a function's entry for a return probe; an IFUNC's
    /// implementation said where `report`.
    #[expect(
        clippy::too_many_arguments,
        reason = "the arming loop's state, moved out of it"
    )]
    fn check_address(
        &self,
        pi: usize,
        spec: &ProbeSpec,
        loc: &Located,
        module: &str,
        addr: RunAddr,
        ifunc: bool,
        report: bool,
        pid: i32,
    ) -> Result<(), Error> {
        let verify = self.opts.verify_opcodes;
        // An IFUNC's implementation starts at the address the
        // dynamic linker jumps to: a boundary by construction,
        // often in no symbol of a stripped library.
        if verify && spec.opcode.is_none() && !ifunc {
            // No `opcode =` to check: the address must start an
            // instruction of its function, decoded from the file.
            let link = addr.0.checked_sub(loc.bias);
            if link.is_none_or(|l| loc.elf.file_offset(l).is_none()) {
                // An absolute address outside the module's file
                // (code the process made, another mapping).
                let why = format!(
                    "is not in the file of module `{module}`, so its instruction boundaries \
                     cannot be verified; give the first byte with `opcode =`"
                );
                return Err(Error::refused(
                    Rule::InstructionBoundary,
                    Some(addr.0),
                    format!("{addr:#x} {why}"),
                )
                .alike(format!("its entry {why}")));
            }
            wprobe_elf::disasm::check_boundary(&loc.elf, addr.unrelocate(loc.bias).0).map_err(
                |e| Error::refused(Rule::InstructionBoundary, Some(addr.0), e.to_string()),
            )?;
        }
        // An IFUNC's implementation is where the dynamic linker
        // jumps: a function's entry by construction.
        if spec.r#return && !ifunc {
            check_function_entry(&loc.elf, addr.unrelocate(loc.bias))?;
        }
        if ifunc && report {
            crate::elog!(
                "wprobe: probe {}: `{}` is an IFUNC; probing the implementation \
                     process {pid} selected, at {addr:#x}",
                self.probes[pi].label,
                spec.location.symbol.as_deref().unwrap_or("")
            );
        }
        Ok(())
    }

    pub(super) fn warn(&mut self, report: bool, msg: String) {
        if report {
            crate::elog!("wprobe: warning: {msg}");
        }
        self.warnings.push(msg);
    }

    /// Two breakpoint probes of one module closer than a 5-byte jump (back-
    /// to-back USDT sites, say), among the modules `files` (a probe's
    /// module found by path or name there): the in-process transport can
    /// give only the first a jump. Said in words, for the planner.
    pub fn probes_closer_than_a_jump(&mut self, files: &[std::path::PathBuf]) -> Option<String> {
        let mut by_file: HashMap<std::path::PathBuf, Vec<(u64, String)>> = HashMap::default();
        for (p, spec, module) in module_breakpoints(&self.probes, &self.manifests) {
            let file = match procmaps::module_file(module, files) {
                Some(f) => f.clone(),
                None if module.contains('/') => {
                    procmaps::canonical(std::path::Path::new(module.as_str()))
                }
                None => continue,
            };
            let Ok(elf) = self.resolver.elf(&file) else {
                continue;
            };
            if let Ok(at) = crate::probe::resolve::link_value(spec, &elf) {
                by_file
                    .entry(file)
                    .or_default()
                    .push((at.0, p.label.clone()));
            }
        }
        for (file, mut v) in by_file {
            v.sort();
            v.dedup_by_key(|e| e.0);
            if let Some(w) = v.windows(2).find(|w| w[1].0 - w[0].0 < 5) {
                return Some(format!(
                    "probes {} and {} are {} byte(s) apart in {}, closer than a jump",
                    w[0].1,
                    w[1].1,
                    w[1].0 - w[0].0,
                    file.display()
                ));
            }
        }
        None
    }

    /// Whether a program reads registers chosen at run time (`read_reg`
    /// with a computed id: a transport without every register would warn
    /// and give zeros).
    pub fn reads_registers_chosen_at_run_time(&self) -> bool {
        self.program_code
            .iter()
            .any(|(_, wasm, _)| crate::wasm::regscan::registers_read(wasm) == RegsRead::All)
    }

    /// The modules of the enabled breakpoint probes, as the programs name
    /// them (a path or a bare name), each once.
    pub fn probe_modules(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for (_, _, m) in module_breakpoints(&self.probes, &self.manifests) {
            if !m.is_empty() && !v.contains(m) {
                v.push(m.clone());
            }
        }
        v
    }

    /// Probes that could not be armed anywhere yet (module not mapped).
    pub fn pending(&self) -> usize {
        self.probes
            .iter()
            .filter(|p| p.enabled && p.armed.is_empty())
            .count()
    }

    /// Disables probe `pi` and removes it from the transport.
    pub(super) fn disable(&mut self, t: &mut dyn Transport, pi: usize) {
        self.probes[pi].enabled = false;
        for (_, a) in std::mem::take(&mut self.probes[pi].armed) {
            t.remove(a);
        }
        self.lower_semaphores_of(t, pi);
    }

    /// Forgets the probes armed in `pid` (it exec'd or ended).
    pub(super) fn forget(&mut self, pid: i32) {
        for p in &mut self.probes {
            p.armed.retain(|(q, _)| *q != pid);
        }
        self.forget_semaphores(pid);
    }
}

/// Notes that a breakpoint's module is a Go program (said, and kept in
/// `warnings`), checked once per module (`go_noted`; not per probe:
/// `wprobe trace` of python3.11 spent a third of its arming parsing the
/// file again for each of 20,000 probes).
fn note_go(
    go_noted: &mut rustc_hash::FxHashSet<std::ffi::OsString>,
    warnings: &mut Vec<String>,
    loc: &Located,
) {
    // By the path's bytes (a `Path` hashes component by component), a
    // copy made only for a module not seen yet: this runs for every probe.
    if go_noted.contains(loc.elf.path.as_os_str()) {
        return;
    }
    go_noted.insert(loc.elf.path.as_os_str().to_os_string());
    if loc.elf.is_go() {
        let msg = format!(
            "{} is a Go program: a call that grows its goroutine's stack \
             (runtime.morestack) runs its function's entry again, so a probe at a Go \
             function's entry fires twice for such a call",
            loc.elf.path.display()
        );
        // Said whatever `report` (`wprobe trace` too): it is how the
        // counts read.
        crate::elog!("wprobe: note: {msg}");
        warnings.push(msg);
    }
}

/// The enabled breakpoint probes placed in a module (not those at a bare
/// address), each with its spec and its module as its program names it
/// (a path or a bare name).
fn module_breakpoints<'a>(
    probes: &'a [super::ProbeState],
    manifests: &'a [std::sync::Arc<hostabi::manifest::Manifest>],
) -> impl Iterator<Item = (&'a super::ProbeState, &'a ProbeSpec, &'a String)> {
    probes.iter().filter(|p| p.enabled).filter_map(|p| {
        let spec = &manifests[p.prog].probes[p.index];
        let bare = spec.location.kind == LocationKind::Address && spec.location.symbol.is_none();
        if spec.kind != ProbeKind::Breakpoint || bare {
            return None;
        }
        let module = spec.module.as_ref().unwrap_or(&manifests[p.prog].module);
        Some((p, spec, module))
    })
}
