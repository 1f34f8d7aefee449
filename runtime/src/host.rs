//! The host side of every `hostabi` import, generic over the hit
//! environment ([`HitEnv`]). Every guest pointer and length is checked
//! against the guest memory; a bad one traps the handler, never the host.
//! Nothing here knows which transport produced the hit.

use crate::sink::{RecordKind, Sink};
use hostabi::env::HitEnv;
use hostabi::imports::MAX_MEM_ACCESS_BYTES;
use hostabi::record::{MAX_LOG_DATA_BYTES, MAX_LOG_ITEMS, MAX_STACKTRACE_BYTES};
use hostabi::{IMPORT_MODULE, ImportId, Status, regs};
use wasmtime::{Caller, Linker, Memory, StoreLimits};
use wasmtime::{bail, format_err};

/// The data of the store in which handlers run.
pub struct HostState<E> {
    /// The environment of the current hit (and the run's global variables).
    pub env: E,
    /// Records emitted since the runtime last drained them.
    pub sink: Sink,
    /// Linear memory of the program whose handler is running.
    pub memory: Option<Memory>,
    /// Whether handlers may write registers and memory (not under perf).
    pub writes_allowed: bool,
    /// Memory limits of the store.
    pub limits: StoreLimits,
    /// State of the service imports (maps, events, clocks): `services.rs`.
    pub services: crate::services::Services,
}

impl<E> HostState<E> {
    /// A state around `env`, with the given store limits.
    pub fn new(env: E, limits: StoreLimits) -> Self {
        HostState {
            env,
            sink: Sink::default(),
            memory: None,
            writes_allowed: true,
            limits,
            services: Default::default(),
        }
    }
}

/// Bounds-checks `ptr..ptr+len` in guest memory.
fn range(mem: &[u8], ptr: i32, len: i32, what: &str) -> wasmtime::Result<std::ops::Range<usize>> {
    let (p, n) = (ptr as u32 as usize, len as u32 as usize);
    match p.checked_add(n) {
        Some(end) if end <= mem.len() => Ok(p..end),
        _ => bail!(
            "{what}: guest range 0x{p:x}+{n} is outside the handler's memory ({} bytes)",
            mem.len()
        ),
    }
}

fn memory<E>(caller: &Caller<'_, HostState<E>>) -> wasmtime::Result<Memory> {
    caller
        .data()
        .memory
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
/// calls return `TOO_LARGE`. RPN handlers emit at most two per hit; this
/// bounds the host memory a looping guest can make the runtime hold.
pub const MAX_RECORDS_PER_RUN: usize = 4096;

/// Record data bytes one handler run may emit (same reason, 4 MiB).
pub const MAX_RECORD_BYTES_PER_RUN: usize = 4 << 20;

/// Charges fuel for a call reaching the traced process's memory that moves
/// `bytes` ([`MEMORY_CALL_FUEL`] plus the bytes).
fn charge_access<E>(c: &mut Caller<'_, HostState<E>>, bytes: u64) {
    charge(c, bytes + MEMORY_CALL_FUEL * BYTES_PER_FUEL);
}

/// Charges fuel for `bytes` moved by a host import; a run whose fuel drops
/// to zero traps with `OutOfFuel` at its next operator.
fn charge<E>(c: &mut Caller<'_, HostState<E>>, bytes: u64) {
    let cost = bytes / BYTES_PER_FUEL;
    if cost > 0
        && let Ok(fuel) = c.get_fuel()
    {
        let _ = c.set_fuel(fuel.saturating_sub(cost));
    }
}

/// Whether the run's record budget leaves room for `bytes` more.
fn sink_has_room(sink: &Sink, bytes: usize) -> bool {
    sink.records.len() < MAX_RECORDS_PER_RUN
        && sink.bytes.len().saturating_add(bytes) <= MAX_RECORD_BYTES_PER_RUN
}

/// Defines every host import in `linker`.
pub fn add_to_linker<E: HitEnv + 'static>(linker: &mut Linker<HostState<E>>) -> anyhow::Result<()> {
    let m = IMPORT_MODULE;
    let name = |id: ImportId| id.import().name;
    linker.func_wrap(
        m,
        name(ImportId::read_reg),
        |mut c: Caller<'_, HostState<E>>, reg: i32, part: i32| -> wasmtime::Result<i64> {
            let info = u16::try_from(reg).ok().and_then(regs::by_id);
            match info {
                Some(r) if r.id != regs::CPUID && (0..r.parts() as i32).contains(&part) => {
                    Ok(c.data_mut().env.read_reg_any(r.id, part as u8).unwrap_or(0) as i64)
                }
                _ => bail!("read_reg: no register id 0x{reg:x} part {part}"),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::write_reg),
        |mut c: Caller<'_, HostState<E>>, reg: i32, value: i64| -> i32 {
            if !c.data().writes_allowed {
                return st(Status::NotPermitted);
            }
            match u16::try_from(reg) {
                Ok(r) => st(c.data_mut().env.write_reg_any(r, value as u64)),
                Err(_) => st(Status::BadArgument),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::read_mem),
        |mut c: Caller<'_, HostState<E>>, addr: i64, dst: i32, len: i32| -> wasmtime::Result<i32> {
            max_len(len, "read_mem")?;
            charge_access(&mut c, len as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, dst, len, "read_mem")?;
            Ok(state.env.read_mem(addr as u64, &mut data[r]) as i32)
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::read_str),
        |mut c: Caller<'_, HostState<E>>, addr: i64, dst: i32, max: i32| -> wasmtime::Result<i32> {
            max_len(max, "read_str")?;
            charge_access(&mut c, max as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, dst, max, "read_str")?;
            Ok(match state.env.read_str(addr as u64, &mut data[r]) {
                Ok(n) => n as i32,
                Err(i) => -(i as i32) - 1,
            })
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::write_mem),
        |mut c: Caller<'_, HostState<E>>, addr: i64, src: i32, len: i32| -> wasmtime::Result<i32> {
            max_len(len, "write_mem")?;
            charge_access(&mut c, len as u32 as u64);
            if !c.data().writes_allowed {
                return Ok(st(Status::NotPermitted));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, src, len, "write_mem")?;
            Ok(st(state.env.write_mem(addr as u64, &data[r])))
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::check_access),
        |mut c: Caller<'_, HostState<E>>, addr: i64, access: i32| -> i32 {
            let write = match access {
                1 => false,
                3 => true,
                _ => return st(Status::BadArgument),
            };
            charge_access(&mut c, 0);
            if c.data_mut().env.check_access(addr as u64, write) {
                st(Status::Ok)
            } else {
                st(Status::Fault)
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::current_tid),
        |c: Caller<'_, HostState<E>>| match c.data().services.special {
            true => std::process::id() as i64,
            false => c.data().env.tid() as i64,
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::current_pid),
        |c: Caller<'_, HostState<E>>| match c.data().services.special {
            true => std::process::id() as i64,
            false => c.data().env.pid() as i64,
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::current_cpu),
        |c: Caller<'_, HostState<E>>| c.data().env.cpu() as i64,
    )?;
    linker.func_wrap(
        m,
        name(ImportId::thread_pointer),
        |c: Caller<'_, HostState<E>>| c.data().env.thread_pointer() as i64,
    )?;
    linker.func_wrap(
        m,
        name(ImportId::load_bias),
        |c: Caller<'_, HostState<E>>| c.data().env.load_bias() as i64,
    )?;
    linker.func_wrap(m, name(ImportId::now_ns), |c: Caller<'_, HostState<E>>| {
        c.data().env.now_ns() as i64
    })?;
    linker.func_wrap(
        m,
        name(ImportId::cpuid),
        |mut c: Caller<'_, HostState<E>>,
         leaf: i32,
         sub: i32,
         index: i32|
         -> wasmtime::Result<i64> {
            let v = c.data_mut().env.cpuid(leaf as u32, sub as u32);
            match v.get(index as u32 as usize) {
                Some(x) => Ok(*x as i64),
                None => bail!("cpuid: index {index} is not 0..=3"),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::gvar_count),
        |mut c: Caller<'_, HostState<E>>| c.data_mut().env.gvars().len() as i64,
    )?;
    linker.func_wrap(
        m,
        name(ImportId::gvar_get),
        |mut c: Caller<'_, HostState<E>>, i: i64| -> wasmtime::Result<i64> {
            let g = c.data_mut().env.gvars();
            match g.get(i as u64 as usize) {
                Some(v) if (i as u64) < g.len() as u64 => Ok(*v as i64),
                _ => bail!("gvar_get: index {} >= gvar_count {}", i as u64, g.len()),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::gvar_set),
        |mut c: Caller<'_, HostState<E>>, i: i64, v: i64| -> wasmtime::Result<()> {
            let g = c.data_mut().env.gvars();
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
        |mut c: Caller<'_, HostState<E>>,
         port: i64,
         width: i32,
         dst: i32|
         -> wasmtime::Result<i32> {
            let mask = match width {
                1 => 0xFF,
                2 => 0xFFFF,
                4 => 0xFFFF_FFFF,
                _ => return Ok(st(Status::BadArgument)),
            };
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, dst, 8, "io_in")?;
            match state.env.io_in(port as u64, width as u8) {
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
        |mut c: Caller<'_, HostState<E>>, port: i64, width: i32, v: i64| -> i32 {
            let mask: u64 = match width {
                1 => 0xFF,
                2 => 0xFFFF,
                4 => 0xFFFF_FFFF,
                _ => return st(Status::BadArgument),
            };
            if c.data_mut()
                .env
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
        |mut c: Caller<'_, HostState<E>>,
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
            if !sink_has_room(&c.data().sink, len as u32 as usize) {
                return Ok(st(Status::TooLarge));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let d = range(data, data_ptr, len, "emit_log data")?;
            let n_items = (count as u32 as usize) * 4;
            let i = range(data, items_ptr, n_items as i32, "emit_log items")?;
            let sink = &mut state.sink;
            let d0 = sink.bytes.len();
            sink.bytes.extend_from_slice(&data[d]);
            let i0 = sink.items.len();
            sink.items.extend(
                data[i]
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
            sink.records.push(crate::sink::SinkRecord {
                kind: RecordKind::Log,
                major: major as u16,
                minor: minor as u16,
                data: d0..sink.bytes.len(),
                items: i0..sink.items.len(),
            });
            Ok(st(Status::Ok))
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::emit_stacktrace),
        |mut c: Caller<'_, HostState<E>>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            if len as u32 > MAX_STACKTRACE_BYTES {
                return Ok(st(Status::TooLarge));
            }
            charge(&mut c, len as u32 as u64);
            if !sink_has_room(&c.data().sink, len as u32 as usize) {
                return Ok(st(Status::TooLarge));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, ptr, len, "emit_stacktrace")?;
            if hostabi::record::decode_stacktrace(&data[r.clone()], |_| {}).is_err() {
                return Ok(st(Status::BadArgument));
            }
            state.sink.push(RecordKind::StackTrace, 0, 0, &data[r], &[]);
            Ok(st(Status::Ok))
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::callk),
        |mut c: Caller<'_, HostState<E>>| {
            c.data_mut().env.callk();
        },
    )?;
    crate::services::add_to_linker(linker)?;
    // Return probes: every i64 is a possible value, so a call the host
    // cannot answer traps (spec §6.5; `docs/hostabi.md`).
    linker.func_wrap(
        m,
        name(ImportId::entry_reg),
        |mut c: Caller<'_, HostState<E>>, reg: i32| -> wasmtime::Result<i64> {
            let Some(id) = u16::try_from(reg)
                .ok()
                .filter(|id| regs::entry_index(*id).is_some())
            else {
                bail!("entry_reg: register id 0x{reg:x} is not rdi, rsi, rdx, rcx, r8, r9 or rsp");
            };
            match c.data_mut().env.entry_reg(id) {
                Some(v) => Ok(v as i64),
                None => bail!("entry_reg: this hit is not the return of a return probe"),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::elapsed_ns),
        |c: Caller<'_, HostState<E>>| -> wasmtime::Result<i64> {
            match c.data().env.elapsed_ns() {
                Some(v) => Ok(v as i64),
                None => bail!("elapsed_ns: this hit is not the return of a return probe"),
            }
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_import_is_defined_with_its_abi_signature() {
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
        let engine = crate::engine::new_engine().unwrap();
        let mut linker: Linker<HostState<Nothing>> = Linker::new(&engine);
        add_to_linker(&mut linker).unwrap();
        let mut store =
            wasmtime::Store::new(&engine, HostState::new(Nothing, StoreLimits::default()));
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
    }
}
