//! The host side of every `hostabi` import, generic over the store data
//! ([`HostData`]): the hit environment ([`HitEnv`]), where records go
//! ([`RecordSink`]), the running program's memory and whether writes are
//! allowed. Every guest pointer and length is checked against the guest
//! memory; a bad one traps the handler, never the host.
//!
//! This is `runtime/src/host.rs` made `no_std` and independent of the
//! runtime's `Sink`, so that the in-process agent (`agent/`) runs handlers
//! with exactly the semantics of the ptrace and perf transports. The
//! runtime's `host.rs` becomes `impl HostData for HostState<E>` (its `Sink`
//! implementing [`RecordSink`]) plus `pub use hostfns::add_to_linker`.

#![no_std]
#![deny(missing_docs)]

use core::ops::Range;
use hostabi::env::HitEnv;
use hostabi::imports::MAX_MEM_ACCESS_BYTES;
use hostabi::record::{MAX_LOG_DATA_BYTES, MAX_LOG_ITEMS, MAX_STACKTRACE_BYTES};
use hostabi::{IMPORT_MODULE, ImportId, Status, regs};
use wasmtime::{Caller, Linker, Memory};
use wasmtime::{bail, format_err};

/// Bytes a host import may move per unit of fuel it charges. Wasmtime fuel
/// counts Wasm operators, not work done inside host calls: without a charge
/// a loop of 1 MiB `read_mem` calls would do a megabyte of copying per few
/// operators, and the fuel meant to bound a handler run would bound nothing.
/// At 16 bytes per unit, moving the 8 to 1,000 bytes a typical handler moves
/// costs at most tens of units; the default budget still allows gigabytes.
pub const BYTES_PER_FUEL: u64 = 16;

/// Records one handler run may emit; later `emit_log` / `emit_stacktrace`
/// calls return `TOO_LARGE`. RPN handlers emit at most two per hit; this
/// bounds the host memory a looping guest can make the runtime hold.
pub const MAX_RECORDS_PER_RUN: usize = 4096;

/// Record data bytes one handler run may emit (same reason, 4 MiB).
pub const MAX_RECORD_BYTES_PER_RUN: usize = 4 << 20;

/// Where the records of a handler run go.
pub trait RecordSink {
    /// Whether this run may still emit a record with `data_bytes` of data
    /// (the per-run budget of [`MAX_RECORDS_PER_RUN`] and
    /// [`MAX_RECORD_BYTES_PER_RUN`]; a sink may be stricter). `false` makes
    /// the import return `TOO_LARGE`.
    fn has_room(&self, data_bytes: usize) -> bool;
    /// Appends a log record; `items` holds the item descriptors as
    /// little-endian u32 words (its length is a multiple of 4).
    fn push_log(&mut self, major: u16, minor: u16, data: &[u8], items: &[u8]);
    /// Appends a stack-trace record (the area was checked to parse).
    fn push_stacktrace(&mut self, data: &[u8]);
}

/// What the host imports need from the data of the store.
pub trait HostData: 'static {
    /// The hit environment.
    type Env: HitEnv;
    /// The record sink.
    type Sink: RecordSink;
    /// The environment of the current hit.
    fn env(&self) -> &Self::Env;
    /// The environment of the current hit, mutably.
    fn env_mut(&mut self) -> &mut Self::Env;
    /// The records of the current run.
    fn sink(&self) -> &Self::Sink;
    /// The records of the current run, mutably.
    fn sink_mut(&mut self) -> &mut Self::Sink;
    /// Linear memory of the program whose handler is running.
    fn memory(&self) -> Option<Memory>;
    /// Whether handlers may write registers and memory (not under perf).
    fn writes_allowed(&self) -> bool;
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

/// Defines every host import in `linker`.
pub fn add_to_linker<T: HostData>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
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
            charge(&mut c, len as u32 as u64);
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
            charge(&mut c, max as u32 as u64);
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
            charge(&mut c, len as u32 as u64);
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
            if c.data_mut().env_mut().check_access(addr as u64, write) {
                st(Status::Ok)
            } else {
                st(Status::Fault)
            }
        },
    )?;
    linker.func_wrap(m, name(ImportId::current_tid), |c: Caller<'_, T>| {
        c.data().env().tid() as i64
    })?;
    linker.func_wrap(m, name(ImportId::current_pid), |c: Caller<'_, T>| {
        c.data().env().pid() as i64
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
            if !c.data().sink().has_room(len as u32 as usize) {
                return Ok(st(Status::TooLarge));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let d = range(data, data_ptr, len, "emit_log data")?;
            let n_items = (count as u32 as usize) * 4;
            let i = range(data, items_ptr, n_items as i32, "emit_log items")?;
            state
                .sink_mut()
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
            if !c.data().sink().has_room(len as u32 as usize) {
                return Ok(st(Status::TooLarge));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let r = range(data, ptr, len, "emit_stacktrace")?;
            if hostabi::record::decode_stacktrace(&data[r.clone()], |_| {}).is_err() {
                return Ok(st(Status::BadArgument));
            }
            state.sink_mut().push_stacktrace(&data[r]);
            Ok(st(Status::Ok))
        },
    )?;
    linker.func_wrap(m, name(ImportId::callk), |mut c: Caller<'_, T>| {
        c.data_mut().env_mut().callk();
    })?;
    Ok(())
}

#[cfg(test)]
mod runtime_glue;

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;
    use std::vec::Vec;

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
        fn has_room(&self, _: usize) -> bool {
            false
        }
        fn push_log(&mut self, _: u16, _: u16, _: &[u8], _: &[u8]) {}
        fn push_stacktrace(&mut self, _: &[u8]) {}
    }
    struct Data(Nothing, NoSink);
    impl HostData for Data {
        type Env = Nothing;
        type Sink = NoSink;
        fn env(&self) -> &Nothing {
            &self.0
        }
        fn env_mut(&mut self) -> &mut Nothing {
            &mut self.0
        }
        fn sink(&self) -> &NoSink {
            &self.1
        }
        fn sink_mut(&mut self) -> &mut NoSink {
            &mut self.1
        }
        fn memory(&self) -> Option<Memory> {
            None
        }
        fn writes_allowed(&self) -> bool {
            true
        }
    }

    #[test]
    fn every_import_is_defined_with_its_abi_signature() {
        let engine = wasmtime::Engine::default();
        let mut linker: Linker<Data> = Linker::new(&engine);
        add_to_linker(&mut linker).unwrap();
        let mut store = wasmtime::Store::new(&engine, Data(Nothing, NoSink));
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
