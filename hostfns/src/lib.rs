//! The host side of every `hostabi` import, generic over the data of the
//! store ([`HostData`]): the hit environment ([`HitEnv`]), where records go
//! ([`RecordSink`]), the service state behind maps, clocks and identity
//! ([`Services`]), the running program's memory and whether writes are
//! allowed. Every guest pointer and length is checked against the guest
//! memory; a bad one traps the handler, never the host.
//!
//! One implementation for every place handlers run: the runtime's store
//! (`runtime/src/host.rs` implements [`HostData`] for its `HostState`, for
//! the ptrace and perf transports) and the in-process agent (`agent/`,
//! `no_std`, inside the traced process). So the imports behave the same
//! under every transport by construction, not by keeping two copies alike.
//!
//! Nothing here allocates: records are appended to the sink, map snapshots
//! are streamed into it, map keys are read in place.

#![no_std]
#![deny(missing_docs)]

use core::ops::Range;
use hostabi::env::HitEnv;
use hostabi::event::{EventKind, MAX_EVENT_BYTES};
use hostabi::imports::MAX_MEM_ACCESS_BYTES;
use hostabi::maps::Op;
use hostabi::record::{MAX_LOG_DATA_BYTES, MAX_LOG_ITEMS, MAX_STACKTRACE_BYTES};
use hostabi::{IMPORT_MODULE, ImportId, Status, regs};
use mapstore::{MapError, Store, StoreView};
use wasmtime::{Caller, Linker, Memory};
use wasmtime::{bail, format_err};

mod handler;
pub use handler::{Handler, arg_values};

/// Bytes a host import may move per unit of fuel it charges. Wasmtime fuel
/// counts Wasm operators, not work done inside host calls: without a charge
/// a loop of 1 MiB `read_mem` calls would do a megabyte of copying per few
/// operators, and the fuel meant to bound a handler run would bound nothing.
/// At 16 bytes per unit, moving the 8 to 1,000 bytes a typical handler moves
/// costs at most tens of units; the default budget still allows gigabytes.
pub const BYTES_PER_FUEL: u64 = 16;

/// Fuel charged for each call that reaches the traced process's memory
/// (`read_mem`, `read_str`, `write_mem`, `check_access`), on top of the
/// bytes moved: such a call may cost a system call, about a microsecond,
/// the time of a thousand Wasm operators. A handler looping over
/// unreadable addresses then exhausts its fuel after thousands of calls,
/// not after millions (it once held a target 18 s per hit).
pub const MEMORY_CALL_FUEL: u64 = 1_000;

/// Records one handler run may emit; later `emit_log` / `emit_stacktrace`
/// / `emit_event` calls return `TOO_LARGE`. RPN handlers emit at most two
/// per hit; this bounds the memory a looping guest can make the host hold.
pub const MAX_RECORDS_PER_RUN: usize = 4096;

/// Record data bytes one handler run may emit (same reason, 4 MiB).
pub const MAX_RECORD_BYTES_PER_RUN: usize = 4 << 20;

/// Where the records of a handler run go. Implementations keep the
/// records of the current run (the host drains them after each run) and
/// account for them against the per-run budget.
pub trait RecordSink {
    /// Records held for the current run.
    fn records(&self) -> usize;
    /// Data bytes held for the current run.
    fn bytes(&self) -> usize;
    /// Appends a log record; `items` holds the item descriptors as
    /// little-endian u32 words (its length is a multiple of 4).
    fn push_log(&mut self, major: u16, minor: u16, data: &[u8], items: &[u8]);
    /// Appends a stack-trace record (the area was checked to parse).
    fn push_stacktrace(&mut self, data: &[u8]);
    /// Appends an output event (`emit_event`): `kind` is the event kind,
    /// `id` its id, `data` the start of its data.
    fn push_event(&mut self, kind: u16, id: u16, data: &[u8]);
    /// Appends bytes to the data of the record pushed last.
    fn extend_last(&mut self, bytes: &[u8]);
}

/// Whether a run that emitted what `sink` holds may emit a record with
/// `bytes` more data bytes.
fn has_room<S: RecordSink + ?Sized>(sink: &S, bytes: usize) -> bool {
    sink.records() < MAX_RECORDS_PER_RUN
        && sink.bytes().saturating_add(bytes) <= MAX_RECORD_BYTES_PER_RUN
}

/// The state behind the service imports (maps, clocks, identity) that
/// does not belong to the hit.
pub trait Services {
    /// The map region of the program whose handler runs (`mapstore`
    /// layout); `None` when it declares no map.
    fn map_region(&mut self) -> Option<&mut [u8]>;
    /// The same, read-only.
    fn map_view(&self) -> Option<&[u8]>;
    /// A `begin`/`end`/`interval` probe is running: there is no hit, and
    /// the identity builtins describe the tracer itself (as bpftrace's do).
    fn special(&self) -> bool;
    /// The tracer's own process id (identity in special probes).
    fn own_pid(&self) -> u64;
    /// `CLOCK_REALTIME` now (the time of a special probe, which has no hit).
    fn realtime_now(&self) -> u64;
    /// `CLOCK_MONOTONIC` when the run started (bpftrace `elapsed` counts from it).
    fn start_mono_ns(&self) -> u64;
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC`, to place a hit's wall-clock time
    /// on the monotonic clock.
    fn mono_offset_ns(&self) -> u64;
    /// `CLOCK_BOOTTIME - CLOCK_MONOTONIC` now (the time spent suspended),
    /// to place a hit's monotonic time on the boot clock.
    fn boot_offset_ns(&self) -> u64;
    /// `CLOCK_TAI - CLOCK_REALTIME` now (the TAI offset, leap seconds), to
    /// place a hit's wall-clock time on the TAI clock.
    fn tai_offset_ns(&self) -> u64;
    /// The real user id of process `pid`.
    fn uid(&mut self, pid: u64) -> i64;
    /// The real group id of thread `tid` of `pid` (-1 if unknown).
    fn gid(&mut self, pid: u64, tid: u64) -> i64;
    /// The NUMA node of `cpu` (0 on a machine with one node).
    fn numa_node(&self, cpu: u64) -> i64;
    /// The name of thread `tid` of process `pid` (at most 15 bytes, in the
    /// first `.1` bytes of `.0`).
    fn comm(&mut self, pid: u64, tid: u64) -> ([u8; 16], usize);
    /// Pid of the launched command (0 when attached).
    fn child_pid(&self) -> u64;
}

/// What the host imports need from the data of the store.
pub trait HostData: 'static {
    /// The hit environment.
    type Env: HitEnv;
    /// The record sink.
    type Sink: RecordSink;
    /// The service state.
    type Services: Services;
    /// The environment of the current hit.
    fn env(&self) -> &Self::Env;
    /// The environment of the current hit, mutably.
    fn env_mut(&mut self) -> &mut Self::Env;
    /// The records of the current run.
    fn sink(&self) -> &Self::Sink;
    /// The service state.
    fn services(&self) -> &Self::Services;
    /// The service state, mutably.
    fn services_mut(&mut self) -> &mut Self::Services;
    /// The records of the current run and the service state, both mutably.
    fn sink_and_services(&mut self) -> (&mut Self::Sink, &mut Self::Services);
    /// Linear memory of the program whose handler is running.
    fn memory(&self) -> Option<Memory>;
    /// Whether handlers may write registers and memory (not under perf).
    fn writes_allowed(&self) -> bool;
    /// The USDT argument specs of the probe whose handler runs (its
    /// manifest's `usdt_args`, set before the run: no parsing per hit);
    /// empty for a probe that is not a USDT site.
    fn usdt_args(&self) -> &[hostabi::usdt::UsdtArg];
}

/// Bounds-checks `ptr..ptr+len` in guest memory.
fn range(mem: &[u8], ptr: i32, len: i32, what: &str) -> wasmtime::Result<Range<usize>> {
    let (p, n) = (ptr as u32 as usize, len as u32 as usize);
    match p.checked_add(n) {
        Some(end) if end <= mem.len() => Ok(p..end),
        _ => bail!(
            "{what}: guest range 0x{p:x}+{n} is outside the handler's memory ({} bytes)",
            mem.len()
        ),
    }
}

fn memory<T: HostData>(caller: &Caller<'_, T>) -> wasmtime::Result<Memory> {
    caller
        .data()
        .memory()
        .ok_or_else(|| format_err!("handler module exports no memory"))
}

fn max_len(len: i32, what: &str) -> wasmtime::Result<()> {
    if len as u32 > MAX_MEM_ACCESS_BYTES {
        bail!(
            "{what}: length {} exceeds the limit of {MAX_MEM_ACCESS_BYTES} bytes",
            len as u32
        );
    }
    Ok(())
}

fn st(s: Status) -> i32 {
    s as i32
}

/// Charges fuel for `bytes` moved by a host import; a run whose fuel drops
/// to zero traps with `OutOfFuel` at its next operator.
fn charge<T: HostData>(c: &mut Caller<'_, T>, bytes: u64) {
    let cost = bytes / BYTES_PER_FUEL;
    if cost > 0
        && let Ok(fuel) = c.get_fuel()
    {
        let _ = c.set_fuel(fuel.saturating_sub(cost));
    }
}

/// Charges fuel for a call reaching the traced process's memory that moves
/// `bytes` ([`MEMORY_CALL_FUEL`] plus the bytes).
fn charge_access<T: HostData>(c: &mut Caller<'_, T>, bytes: u64) {
    charge(c, bytes + MEMORY_CALL_FUEL * BYTES_PER_FUEL);
}

/// Highest register id + 1 of [`regs::REGS`].
const REG_ID_LIMIT: usize = 0x118;

/// Index into [`regs::REGS`] of each register id (`u8::MAX`: no register):
/// `read_reg` is on the hot path of handlers that log registers, and
/// `regs::by_id` is a linear scan of the table.
static REG_INDEX: [u8; REG_ID_LIMIT] = {
    let mut t = [u8::MAX; REG_ID_LIMIT];
    let mut i = 0;
    while i < regs::REGS.len() {
        t[regs::REGS[i].id as usize] = i as u8;
        i += 1;
    }
    t
};

/// `regs::by_id`, by table.
#[inline]
pub fn reg_by_id(id: u16) -> Option<&'static regs::RegInfo> {
    match REG_INDEX.get(id as usize) {
        Some(&i) if i != u8::MAX => Some(&regs::REGS[i as usize]),
        _ => None,
    }
}

fn map_status(e: MapError) -> i32 {
    match e {
        MapError::Full => st(Status::Full),
        _ => st(Status::BadArgument),
    }
}

/// The offset of a clock from a base clock, from a read of the base (`b1`),
/// of the clock (`x`) and of the base again (`b2`): `x` less the middle of
/// the bracket, never negative (CLOCK_BOOTTIME is never behind
/// CLOCK_MONOTONIC, nor CLOCK_TAI behind CLOCK_REALTIME). `whole_seconds`
/// rounds to the nearest second (the TAI offset is a whole number of leap
/// seconds, so the reads' few hundred ns of skew vanish).
pub fn clock_offset(b1: u64, x: u64, b2: u64, whole_seconds: bool) -> u64 {
    let mid = b1.wrapping_add(b2.wrapping_sub(b1) / 2);
    let d = x.wrapping_sub(mid) as i64;
    if d <= 0 {
        return 0;
    }
    let d = d as u64;
    if whole_seconds {
        (d + 500_000_000) / 1_000_000_000 * 1_000_000_000
    } else {
        d
    }
}

/// The pid and tid the identity builtins report: the hit's, or the
/// tracer's own in a special probe.
fn identity<T: HostData>(d: &T) -> (u64, u64) {
    let s = d.services();
    if s.special() {
        let p = s.own_pid();
        (p, p)
    } else {
        (d.env().pid(), d.env().tid())
    }
}

/// Defines every host import in `linker`.
pub fn add_to_linker<T: HostData>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    add_hit_imports(linker)?;
    add_service_imports(linker)?;
    add_return_imports(linker)
}

/// The imports about the hit: registers, memory, identity, variables, logs.
fn add_hit_imports<T: HostData>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let m = IMPORT_MODULE;
    let name = |id: ImportId| id.import().name;
    linker.func_wrap(
        m,
        name(ImportId::read_reg),
        |mut c: Caller<'_, T>, reg: i32, part: i32| -> wasmtime::Result<i64> {
            let info = u16::try_from(reg).ok().and_then(reg_by_id);
            match info {
                Some(r) if r.id != regs::CPUID && (0..r.parts() as i32).contains(&part) => {
                    // `HitEnv::read_reg_any` without its second table scan:
                    // the same base register, the same alias masking.
                    let v = c.data_mut().env_mut().read_reg(r.base_id(), part as u8);
                    let v = if r.is_alias() {
                        v.map(|v| v & 0xFFFF_FFFF)
                    } else {
                        v
                    };
                    Ok(v.unwrap_or(0) as i64)
                }
                _ => bail!("read_reg: no register id 0x{reg:x} part {part}"),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::write_reg),
        |mut c: Caller<'_, T>, reg: i32, value: i64| -> i32 {
            if !c.data().writes_allowed() {
                return st(Status::NotPermitted);
            }
            match u16::try_from(reg) {
                Ok(r) => st(c.data_mut().env_mut().write_reg_any(r, value as u64)),
                Err(_) => st(Status::BadArgument),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::read_mem),
        |mut c: Caller<'_, T>, addr: i64, dst: i32, len: i32| -> wasmtime::Result<i32> {
            max_len(len, "read_mem")?;
            charge_access(&mut c, len as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, dst, len, "read_mem")?;
            Ok(state.env_mut().read_mem(addr as u64, &mut data[r]) as i32)
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::read_str),
        |mut c: Caller<'_, T>, addr: i64, dst: i32, max: i32| -> wasmtime::Result<i32> {
            max_len(max, "read_str")?;
            charge_access(&mut c, max as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, dst, max, "read_str")?;
            Ok(match state.env_mut().read_str(addr as u64, &mut data[r]) {
                Ok(n) => n as i32,
                Err(i) => -(i as i32) - 1,
            })
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::write_mem),
        |mut c: Caller<'_, T>, addr: i64, src: i32, len: i32| -> wasmtime::Result<i32> {
            max_len(len, "write_mem")?;
            charge_access(&mut c, len as u32 as u64);
            if !c.data().writes_allowed() {
                return Ok(st(Status::NotPermitted));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, src, len, "write_mem")?;
            Ok(st(state.env_mut().write_mem(addr as u64, &data[r])))
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::check_access),
        |mut c: Caller<'_, T>, addr: i64, access: i32| -> i32 {
            let write = match access {
                1 => false,
                3 => true,
                _ => return st(Status::BadArgument),
            };
            charge_access(&mut c, 0);
            if c.data_mut().env_mut().check_access(addr as u64, write) {
                st(Status::Ok)
            } else {
                st(Status::Fault)
            }
        },
    )?;
    linker.func_wrap(m, name(ImportId::current_tid), |c: Caller<'_, T>| {
        identity(c.data()).1 as i64
    })?;
    linker.func_wrap(m, name(ImportId::current_pid), |c: Caller<'_, T>| {
        identity(c.data()).0 as i64
    })?;
    linker.func_wrap(m, name(ImportId::current_cpu), |c: Caller<'_, T>| {
        c.data().env().cpu() as i64
    })?;
    linker.func_wrap(m, name(ImportId::thread_pointer), |c: Caller<'_, T>| {
        c.data().env().thread_pointer() as i64
    })?;
    linker.func_wrap(m, name(ImportId::load_bias), |c: Caller<'_, T>| {
        c.data().env().load_bias() as i64
    })?;
    linker.func_wrap(m, name(ImportId::now_ns), |c: Caller<'_, T>| {
        c.data().env().now_ns() as i64
    })?;
    linker.func_wrap(
        m,
        name(ImportId::cpuid),
        |mut c: Caller<'_, T>, leaf: i32, sub: i32, index: i32| -> wasmtime::Result<i64> {
            let v = c.data_mut().env_mut().cpuid(leaf as u32, sub as u32);
            match v.get(index as u32 as usize) {
                Some(x) => Ok(*x as i64),
                None => bail!("cpuid: index {index} is not 0..=3"),
            }
        },
    )?;
    linker.func_wrap(m, name(ImportId::gvar_count), |mut c: Caller<'_, T>| {
        c.data_mut().env_mut().gvars().len() as i64
    })?;
    linker.func_wrap(
        m,
        name(ImportId::gvar_get),
        |mut c: Caller<'_, T>, i: i64| -> wasmtime::Result<i64> {
            let g = c.data_mut().env_mut().gvars();
            match g.get(i as u64 as usize) {
                Some(v) if (i as u64) < g.len() as u64 => Ok(*v as i64),
                _ => bail!("gvar_get: index {} >= gvar_count {}", i as u64, g.len()),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::gvar_set),
        |mut c: Caller<'_, T>, i: i64, v: i64| -> wasmtime::Result<()> {
            let g = c.data_mut().env_mut().gvars();
            let n = g.len();
            match g.get_mut(i as u64 as usize) {
                Some(slot) if (i as u64) < n as u64 => {
                    *slot = v as u64;
                    Ok(())
                }
                _ => bail!("gvar_set: index {} >= gvar_count {n}", i as u64),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::io_in),
        |mut c: Caller<'_, T>, port: i64, width: i32, dst: i32| -> wasmtime::Result<i32> {
            let mask = match width {
                1 => 0xFF,
                2 => 0xFFFF,
                4 => 0xFFFF_FFFF,
                _ => return Ok(st(Status::BadArgument)),
            };
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, dst, 8, "io_in")?;
            match state.env_mut().io_in(port as u64, width as u8) {
                Some(v) => {
                    data[r].copy_from_slice(&(v & mask).to_le_bytes());
                    Ok(st(Status::Ok))
                }
                None => Ok(st(Status::NoDevice)),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::io_out),
        |mut c: Caller<'_, T>, port: i64, width: i32, v: i64| -> i32 {
            let mask: u64 = match width {
                1 => 0xFF,
                2 => 0xFFFF,
                4 => 0xFFFF_FFFF,
                _ => return st(Status::BadArgument),
            };
            if c.data_mut()
                .env_mut()
                .io_out(port as u64, width as u8, v as u64 & mask)
            {
                st(Status::Ok)
            } else {
                st(Status::NoDevice)
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::emit_log),
        |mut c: Caller<'_, T>,
         major: i32,
         minor: i32,
         data_ptr: i32,
         len: i32,
         items_ptr: i32,
         count: i32|
         -> wasmtime::Result<i32> {
            if len as u32 > MAX_LOG_DATA_BYTES || count as u32 > MAX_LOG_ITEMS {
                return Ok(st(Status::TooLarge));
            }
            charge(&mut c, len as u32 as u64 + 4 * count as u32 as u64);
            if !has_room(c.data().sink(), len as u32 as usize) {
                return Ok(st(Status::TooLarge));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let d = range(data, data_ptr, len, "emit_log data")?;
            let n_items = (count as u32 as usize) * 4;
            let i = range(data, items_ptr, n_items as i32, "emit_log items")?;
            state
                .sink_and_services()
                .0
                .push_log(major as u16, minor as u16, &data[d], &data[i]);
            Ok(st(Status::Ok))
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::emit_stacktrace),
        |mut c: Caller<'_, T>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            if len as u32 > MAX_STACKTRACE_BYTES {
                return Ok(st(Status::TooLarge));
            }
            charge(&mut c, len as u32 as u64);
            if !has_room(c.data().sink(), len as u32 as usize) {
                return Ok(st(Status::TooLarge));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, ptr, len, "emit_stacktrace")?;
            if hostabi::record::decode_stacktrace(&data[r.clone()], |_| {}).is_err() {
                return Ok(st(Status::BadArgument));
            }
            state.sink_and_services().0.push_stacktrace(&data[r]);
            Ok(st(Status::Ok))
        },
    )?;
    linker.func_wrap(m, name(ImportId::callk), |mut c: Caller<'_, T>| {
        c.data_mut().env_mut().callk();
    })?;
    Ok(())
}

/// The service imports: maps, output events, clocks, identity.
fn add_service_imports<T: HostData>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let m = IMPORT_MODULE;
    let name = |id: ImportId| id.import().name;
    linker.func_wrap(
        m,
        name(ImportId::map_update),
        |mut c: Caller<'_, T>,
         map: i32,
         kp: i32,
         kl: i32,
         op: i32,
         v: i64|
         -> wasmtime::Result<i32> {
            charge(&mut c, kl as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let k = range(data, kp, kl, "map_update key")?;
            let Some(op) = u8::try_from(op).ok().and_then(Op::from_u8) else {
                return Ok(st(Status::BadArgument));
            };
            let Some(r) = state.services_mut().map_region() else {
                return Ok(st(Status::BadArgument));
            };
            Ok(match Store::new(r).update(map as u32, &data[k], op, v) {
                Ok(()) => st(Status::Ok),
                Err(e) => map_status(e),
            })
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_store),
        |mut c: Caller<'_, T>,
         map: i32,
         kp: i32,
         kl: i32,
         vp: i32,
         vl: i32|
         -> wasmtime::Result<i32> {
            charge(&mut c, kl as u32 as u64 + vl as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let k = range(data, kp, kl, "map_store key")?;
            let v = range(data, vp, vl, "map_store value")?;
            let Some(r) = state.services_mut().map_region() else {
                return Ok(st(Status::BadArgument));
            };
            Ok(match Store::new(r).store(map as u32, &data[k], &data[v]) {
                Ok(()) => st(Status::Ok),
                Err(e) => map_status(e),
            })
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_lookup),
        |mut c: Caller<'_, T>,
         map: i32,
         kp: i32,
         kl: i32,
         dp: i32,
         dl: i32|
         -> wasmtime::Result<i32> {
            charge(&mut c, kl as u32 as u64 + dl as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let k = range(data, kp, kl, "map_lookup key")?;
            let d = range(data, dp, dl, "map_lookup destination")?;
            let Some(r) = state.services().map_view() else {
                return Ok(st(Status::BadArgument));
            };
            // The value is in the region, the key and destination in guest
            // memory: look up first (the key borrowed), then copy.
            match StoreView::new(r).lookup(map as u32, &data[k]) {
                Ok(Some(v)) => {
                    let n = v.len().min(d.len());
                    data[d.start..d.start + n].copy_from_slice(&v[..n]);
                    Ok(v.len() as i32)
                }
                Ok(None) => Ok(st(Status::NotFound)),
                Err(e) => Ok(map_status(e)),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_entry),
        |mut c: Caller<'_, T>,
         map: i32,
         cursor: i64,
         kp: i32,
         kl: i32,
         vp: i32,
         vl: i32|
         -> wasmtime::Result<i32> {
            charge(&mut c, kl as u32 as u64 + vl as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let k = range(data, kp, kl, "map_entry key")?;
            let v = range(data, vp, vl, "map_entry value")?;
            let Some(r) = state.services().map_view() else {
                return Ok(st(Status::BadArgument));
            };
            let Ok(from) = u32::try_from(cursor) else {
                return Ok(st(Status::NotFound));
            };
            match StoreView::new(r).entry_from(map as u32, from) {
                Ok(Some((slot, key, val))) => {
                    let n = key.len().min(k.len());
                    data[k.start..k.start + n].copy_from_slice(&key[..n]);
                    let n = val.len().min(v.len());
                    data[v.start..v.start + n].copy_from_slice(&val[..n]);
                    Ok(slot.min(i32::MAX as u32) as i32)
                }
                Ok(None) => Ok(st(Status::NotFound)),
                Err(e) => Ok(map_status(e)),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_delete),
        |mut c: Caller<'_, T>, map: i32, kp: i32, kl: i32| -> wasmtime::Result<i32> {
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let k = range(data, kp, kl, "map_delete key")?;
            let Some(r) = state.services_mut().map_region() else {
                return Ok(st(Status::BadArgument));
            };
            Ok(match Store::new(r).delete(map as u32, &data[k]) {
                Ok(true) => st(Status::Ok),
                Ok(false) => st(Status::NotFound),
                Err(e) => map_status(e),
            })
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_clear),
        |mut c: Caller<'_, T>, map: i32| -> i32 {
            let Some(r) = c.data_mut().services_mut().map_region() else {
                return st(Status::BadArgument);
            };
            match Store::new(r).clear(map as u32) {
                Ok(()) => st(Status::Ok),
                Err(e) => map_status(e),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_zero),
        |mut c: Caller<'_, T>, map: i32| -> i32 {
            let Some(r) = c.data_mut().services_mut().map_region() else {
                return st(Status::BadArgument);
            };
            match Store::new(r).zero(map as u32) {
                Ok(()) => st(Status::Ok),
                Err(e) => map_status(e),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::emit_event),
        |mut c: Caller<'_, T>, kind: i32, id: i32, dp: i32, dl: i32| -> wasmtime::Result<i32> {
            let Some(kind) = EventKind::from_code(kind) else {
                return Ok(st(Status::BadArgument));
            };
            if dl as u32 > MAX_EVENT_BYTES || !(0..=0xFFFF).contains(&id) {
                return Ok(st(Status::TooLarge));
            }
            charge(&mut c, dl as u32 as u64);
            if !has_room(c.data().sink(), dl as u32 as usize) {
                return Ok(st(Status::TooLarge));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let d = range(data, dp, dl, "emit_event data")?;
            let (sink, services) = state.sink_and_services();
            let room = MAX_RECORD_BYTES_PER_RUN.saturating_sub(sink.bytes());
            let bytes = &data[d];
            match services.map_view().and_then(|r| {
                (kind == EventKind::PrintMap)
                    .then(|| snapshot_len(r, id as u32, room))
                    .flatten()
                    .map(|n| (r, n))
            }) {
                // The map as it is now: later operations of the same run
                // (`clear`, `zero`) must not change what this print shows.
                Some((r, _)) => {
                    let mut head = [0u8; 16];
                    let n = bytes.len().min(16);
                    head[..n].copy_from_slice(&bytes[..n]);
                    sink.push_event(kind as u16, id as u16, &head);
                    snapshot_map(r, id as u32, |b| sink.extend_last(b));
                }
                None => sink.push_event(kind as u16, id as u16, bytes),
            }
            Ok(st(Status::Ok))
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::clock_ns),
        |c: Caller<'_, T>, id: i32| -> wasmtime::Result<i64> {
            let s = c.data().services();
            let real = if s.special() {
                s.realtime_now()
            } else {
                c.data().env().now_ns()
            };
            let mono = real.wrapping_sub(s.mono_offset_ns());
            Ok(match id {
                hostabi::imports::clock::MONOTONIC => mono as i64,
                hostabi::imports::clock::SINCE_START => {
                    mono.saturating_sub(s.start_mono_ns()) as i64
                }
                hostabi::imports::clock::REALTIME => real as i64,
                hostabi::imports::clock::BOOTTIME => mono.wrapping_add(s.boot_offset_ns()) as i64,
                hostabi::imports::clock::TAI => real.wrapping_add(s.tai_offset_ns()) as i64,
                _ => bail!("clock_ns: no clock {id}"),
            })
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::current_uid),
        |mut c: Caller<'_, T>| -> i64 {
            let pid = identity(c.data()).0;
            c.data_mut().services_mut().uid(pid)
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::current_comm),
        |mut c: Caller<'_, T>, dp: i32, dl: i32| -> wasmtime::Result<i32> {
            let (pid, tid) = identity(c.data());
            let recorded = if c.data().services().special() {
                None
            } else {
                c.data().env().comm()
            };
            let (b, n) = match recorded {
                Some(b) => (b, b.iter().position(|&x| x == 0).unwrap_or(b.len()).min(15)),
                None => c.data_mut().services_mut().comm(pid, tid),
            };
            let mem = memory(&c)?;
            let data = mem.data_mut(&mut c);
            let d = range(data, dp, dl, "current_comm")?;
            let n = n.min(d.len()).min(b.len());
            data[d.start..d.start + n].copy_from_slice(&b[..n]);
            Ok(n as i32)
        },
    )?;
    linker.func_wrap(m, name(ImportId::child_pid), |c: Caller<'_, T>| {
        c.data().services().child_pid() as i64
    })?;
    linker.func_wrap(
        m,
        name(ImportId::current_gid),
        |mut c: Caller<'_, T>| -> i64 {
            let (pid, tid) = identity(c.data());
            c.data_mut().services_mut().gid(pid, tid)
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::current_numa_node),
        |c: Caller<'_, T>| -> i64 {
            let cpu = c.data().env().cpu();
            c.data().services().numa_node(cpu)
        },
    )?;
    Ok(())
}

/// The return-probe imports: every i64 is a possible value, so a call the
/// host cannot answer traps (spec §6.5; `docs/hostabi.md`).
fn add_return_imports<T: HostData>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    let m = IMPORT_MODULE;
    let name = |id: ImportId| id.import().name;
    linker.func_wrap(
        m,
        name(ImportId::entry_reg),
        |mut c: Caller<'_, T>, reg: i32| -> wasmtime::Result<i64> {
            let Some(id) = u16::try_from(reg)
                .ok()
                .filter(|id| regs::entry_index(*id).is_some())
            else {
                bail!("entry_reg: register id 0x{reg:x} is not rdi, rsi, rdx, rcx, r8, r9 or rsp");
            };
            match c.data_mut().env_mut().entry_reg(id) {
                Some(v) => Ok(v as i64),
                None => bail!("entry_reg: this hit is not the return of a return probe"),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::elapsed_ns),
        |c: Caller<'_, T>| -> wasmtime::Result<i64> {
            match c.data().env().elapsed_ns() {
                Some(v) => Ok(v as i64),
                None => bail!("elapsed_ns: this hit is not the return of a return probe"),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::usdt_arg),
        |mut c: Caller<'_, T>, index: i32| -> wasmtime::Result<i64> {
            let args = c.data().usdt_args();
            if args.is_empty() {
                bail!("usdt_arg: this probe is not a USDT site with arguments");
            }
            let Some(a) = args.get(index as u32 as usize).copied() else {
                bail!(
                    "usdt_arg: index {} but the USDT site has {} argument(s)",
                    index as u32,
                    args.len()
                );
            };
            Ok(a.value(c.data_mut().env_mut()).unwrap_or(0) as i64)
        },
    )?;
    Ok(())
}

/// Bytes a snapshot of map `map` adds to a PRINT_MAP event (its 16 bytes
/// of top and div included), when it fits in `room`; `None` otherwise (the
/// printer then reads the map as it is when printing).
fn snapshot_len(region: &[u8], map: u32, room: usize) -> Option<usize> {
    let view = StoreView::new(region);
    let (k, v) = view.sizes(map).ok()?;
    view.entries(map).ok()?;
    let len = view.stats(map).map(|st| st.len as usize).unwrap_or(0);
    let n = 24 + len * (k + v) as usize;
    (n <= room).then_some(n)
}

/// Streams the snapshot of map `map` that follows a PRINT_MAP event's 16
/// bytes of top and div: u32 key length, u32 value length, then `(key,
/// value)` pairs.
fn snapshot_map(region: &[u8], map: u32, mut out: impl FnMut(&[u8])) {
    let view = StoreView::new(region);
    let (Ok((k, v)), Ok(entries)) = (view.sizes(map), view.entries(map)) else {
        return;
    };
    out(&k.to_le_bytes());
    out(&v.to_le_bytes());
    for (key, val) in entries {
        out(key);
        out(val);
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;
    use std::vec::Vec;

    #[test]
    fn clock_offsets_take_the_middle_of_the_bracket_and_never_go_negative() {
        assert_eq!(clock_offset(1000, 3000, 2000, false), 1500);
        // The clock read between two base reads further apart than the
        // offset: 0, not a wrapped huge offset.
        assert_eq!(clock_offset(1000, 1001, 5000, false), 0);
        assert_eq!(clock_offset(0, 37_000_000_400, 800, true), 37_000_000_000);
        assert_eq!(clock_offset(10, 9, 20, true), 0);
    }

    #[test]
    fn reg_table_matches_by_id() {
        for id in 0..0x200u16 {
            assert_eq!(reg_by_id(id), regs::by_id(id), "id 0x{id:x}");
        }
    }

    struct Nothing;
    impl HitEnv for Nothing {
        fn read_reg(&mut self, _: u16, _: u8) -> Option<u64> {
            None
        }
        fn write_reg(&mut self, _: u16, _: u64) -> Status {
            Status::Ok
        }
        fn read_mem(&mut self, _: u64, _: &mut [u8]) -> usize {
            0
        }
        fn write_mem(&mut self, _: u64, _: &[u8]) -> Status {
            Status::Fault
        }
        fn check_access(&mut self, _: u64, _: bool) -> bool {
            false
        }
        fn tid(&self) -> u64 {
            0
        }
        fn pid(&self) -> u64 {
            0
        }
        fn cpu(&self) -> u64 {
            0
        }
        fn thread_pointer(&self) -> u64 {
            0
        }
        fn load_bias(&self) -> u64 {
            0
        }
        fn now_ns(&self) -> u64 {
            0
        }
        fn cpuid(&mut self, _: u32, _: u32) -> [u32; 4] {
            [0; 4]
        }
        fn gvars(&mut self) -> &mut [u64] {
            &mut []
        }
    }
    struct NoSink;
    impl RecordSink for NoSink {
        fn records(&self) -> usize {
            MAX_RECORDS_PER_RUN
        }
        fn bytes(&self) -> usize {
            0
        }
        fn push_log(&mut self, _: u16, _: u16, _: &[u8], _: &[u8]) {}
        fn push_stacktrace(&mut self, _: &[u8]) {}
        fn push_event(&mut self, _: u16, _: u16, _: &[u8]) {}
        fn extend_last(&mut self, _: &[u8]) {}
    }
    struct NoServices;
    impl Services for NoServices {
        fn map_region(&mut self) -> Option<&mut [u8]> {
            None
        }
        fn map_view(&self) -> Option<&[u8]> {
            None
        }
        fn special(&self) -> bool {
            false
        }
        fn own_pid(&self) -> u64 {
            0
        }
        fn realtime_now(&self) -> u64 {
            0
        }
        fn start_mono_ns(&self) -> u64 {
            0
        }
        fn mono_offset_ns(&self) -> u64 {
            0
        }
        fn boot_offset_ns(&self) -> u64 {
            0
        }
        fn tai_offset_ns(&self) -> u64 {
            0
        }
        fn gid(&mut self, _: u64, _: u64) -> i64 {
            -1
        }
        fn numa_node(&self, _: u64) -> i64 {
            0
        }
        fn uid(&mut self, _: u64) -> i64 {
            0
        }
        fn comm(&mut self, _: u64, _: u64) -> ([u8; 16], usize) {
            ([0; 16], 0)
        }
        fn child_pid(&self) -> u64 {
            0
        }
    }
    struct Data(Nothing, NoSink, NoServices);
    impl HostData for Data {
        type Env = Nothing;
        type Sink = NoSink;
        type Services = NoServices;
        fn env(&self) -> &Nothing {
            &self.0
        }
        fn env_mut(&mut self) -> &mut Nothing {
            &mut self.0
        }
        fn sink(&self) -> &NoSink {
            &self.1
        }
        fn services(&self) -> &NoServices {
            &self.2
        }
        fn services_mut(&mut self) -> &mut NoServices {
            &mut self.2
        }
        fn sink_and_services(&mut self) -> (&mut NoSink, &mut NoServices) {
            (&mut self.1, &mut self.2)
        }
        fn memory(&self) -> Option<Memory> {
            None
        }
        fn writes_allowed(&self) -> bool {
            true
        }
        fn usdt_args(&self) -> &[hostabi::usdt::UsdtArg] {
            &[]
        }
    }

    #[test]
    fn every_import_is_defined_with_its_abi_signature() {
        let engine = wasmtime::Engine::default();
        let mut linker: Linker<Data> = Linker::new(&engine);
        add_to_linker(&mut linker).unwrap();
        let mut store = wasmtime::Store::new(&engine, Data(Nothing, NoSink, NoServices));
        for imp in hostabi::HOST_IMPORTS {
            let ext = linker
                .get(&mut store, IMPORT_MODULE, imp.name)
                .unwrap_or_else(|e| panic!("{} not defined: {e}", imp.name));
            let ty = ext.into_func().unwrap().ty(&store);
            let conv = |t: hostabi::ValType| match t {
                hostabi::ValType::I32 => wasmtime::ValType::I32,
                hostabi::ValType::I64 => wasmtime::ValType::I64,
            };
            let params: Vec<_> = ty.params().map(|p| p.to_string()).collect();
            let want: Vec<_> = imp
                .params
                .iter()
                .map(|(_, t)| conv(*t).to_string())
                .collect();
            assert_eq!(params, want, "{}", imp.name);
            let results: Vec<_> = ty.results().map(|p| p.to_string()).collect();
            let want: Vec<_> = imp.results.iter().map(|t| conv(*t).to_string()).collect();
            assert_eq!(results, want, "{}", imp.name);
        }
        // And no extra ones.
        assert_eq!(linker.iter(&mut store).count(), hostabi::HOST_IMPORTS.len());
    }
}
