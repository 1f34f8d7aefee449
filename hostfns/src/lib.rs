//! The host side of every `hostabi` import, generic over the data of the
//! store ([`HostData`]): the hit environment ([`HitEnv`]), where records go
//! ([`RecordSink`]), the service state behind maps, clocks and identity
//! ([`Services`]), the running program's memory and whether writes are
//! allowed. Every guest pointer and length is checked against the guest
//! memory; a bad one traps the handler, never the host.
//!
//! One implementation for every place handlers run: the runtime's store
//! (`runtime/src/wasm/host.rs` implements [`HostData`] for its `HostState`, for
//! the ptrace and perf transports) and the in-process agent (`agent/`,
//! `no_std`, inside the traced process). So the imports behave the same
//! under every transport by construction, not by keeping two copies alike.
//!
//! Nothing here allocates: records are appended to the sink, map snapshots
//! are streamed into it, map keys are read in place.
//!
//! [`add_to_linker`] is generated from [`hostabi::foreach_host_import!`],
//! the one list of imports (as wasmtime's `foreach_builtin_function!`
//! generates its libcalls): each listed import is registered under its
//! listed name with its listed signature and calls the function of the
//! same name, one per import, in the module of what it does (`registers`,
//! `mem`, `identity`, `clock`, `vars`, `machine`, `emit`, `maps`,
//! `returns`). An import listed but not implemented, or implemented with
//! other types, does not compile.

#![no_std]
#![deny(missing_docs)]

use hostabi::IMPORT_MODULE;
use hostabi::env::HitEnv;
use wasmtime::{Caller, Linker, Memory};

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

mod clock;
mod emit;
mod guest;
mod identity;
mod machine;
mod maps;
mod mem;
mod registers;
mod returns;
mod vars;

pub use clock::clock_offset;
pub use registers::reg_by_id;

/// Every host import's implementation, found by the import's name: one
/// function per import, `NAME<T: HostData>(Caller<'_, T>, params...)`,
/// in the module of what it does. The globs gather them without naming
/// them again: [`hostabi::foreach_host_import!`] is the only list.
mod imports {
    pub(crate) use crate::clock::*;
    pub(crate) use crate::emit::*;
    pub(crate) use crate::identity::*;
    pub(crate) use crate::machine::*;
    pub(crate) use crate::maps::*;
    pub(crate) use crate::mem::*;
    pub(crate) use crate::registers::*;
    pub(crate) use crate::returns::*;
    pub(crate) use crate::vars::*;
}

/// What an import's implementation may return for a Wasm result `R`: the
/// value itself, or the value in a `wasmtime::Result` whose `Err` traps
/// the handler. Anything else (a wrong result type) does not compile.
trait ImportResult<R> {
    fn into_result(self) -> wasmtime::Result<R>;
}

macro_rules! import_results {
    ($($t:ty),*) => {$(
        impl ImportResult<$t> for $t {
            #[inline(always)]
            fn into_result(self) -> wasmtime::Result<$t> {
                Ok(self)
            }
        }
        impl ImportResult<$t> for wasmtime::Result<$t> {
            #[inline(always)]
            fn into_result(self) -> wasmtime::Result<$t> {
                self
            }
        }
    )*};
}
import_results!((), i32, i64);

/// The Wasm result type of an import: `()` for none, else its one type.
macro_rules! result_type {
    () => {
        ()
    };
    ($r:tt) => {
        $r
    };
}

/// Expanded by [`hostabi::foreach_host_import!`] into [`add_to_linker`]:
/// for each import of the list, a host function of exactly the listed
/// parameter and result types that calls `imports::NAME`. An import of the
/// list with no implementation, or one whose parameters or result differ
/// from the list, is a compile error here; an implementation the list does
/// not name is dead code (a warning, an error under `-D warnings`).
macro_rules! define_add_to_linker {
    ($( $name:ident ( $($p:ident : $pt:tt),* ) -> ( $($r:tt),* ) $doc:literal ; )*) => {
        /// Defines every host import of [`hostabi::foreach_host_import!`]
        /// in `linker`, in module [`IMPORT_MODULE`].
        pub fn add_to_linker<T: HostData>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
            $(
                linker.func_wrap(
                    IMPORT_MODULE,
                    stringify!($name),
                    |caller: Caller<'_, T>, $($p: $pt),*| -> wasmtime::Result<result_type!($($r),*)> {
                        ImportResult::into_result(imports::$name(caller, $($p),*))
                    },
                )?;
            )*
            Ok(())
        }
    };
}
hostabi::foreach_host_import!(define_add_to_linker);

#[cfg(test)]
mod tests;
