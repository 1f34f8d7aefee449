//! The data of the store in which handlers run in wprobe (the ptrace and
//! perf transports), and its binding to the host imports: `hostfns`
//! implements every `hostabi` import once, generic over the store data, for
//! this store and for the in-process agent's alike. Every guest pointer and
//! length is checked against the guest memory; a bad one traps the handler,
//! never the host. Nothing here knows which transport produced the hit;
//! before any hit the store holds [`NoHit`] (the transports' seam gives it
//! its `TransportHit` side).

use crate::out::sink::{RecordKind, Sink};
use hostabi::Status;
use hostabi::env::HitEnv;
use wasmtime::{Linker, Memory, StoreLimits};

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
    pub services: crate::wasm::services::Services,
    /// The USDT argument specs of the probe whose handler runs, copied
    /// from its manifest before each run (`usdt_len` of them).
    pub usdt: [hostabi::usdt::UsdtArg; hostabi::usdt::MAX_USDT_ARGS],
    /// How many of `usdt` are the running probe's.
    pub usdt_len: usize,
}

/// An unused slot of [`HostState::usdt`].
const NO_USDT_ARG: hostabi::usdt::UsdtArg = hostabi::usdt::UsdtArg {
    size: 8,
    signed: false,
    loc: hostabi::usdt::UsdtLoc::Imm(0),
};

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
            usdt: [NO_USDT_ARG; hostabi::usdt::MAX_USDT_ARGS],
            usdt_len: 0,
        }
    }
}

pub use hostfns::{
    BYTES_PER_FUEL, MAX_RECORD_BYTES_PER_RUN, MAX_RECORDS_PER_RUN, MEMORY_CALL_FUEL,
};

impl hostfns::RecordSink for Sink {
    fn records(&self) -> usize {
        self.records.len()
    }
    fn bytes(&self) -> usize {
        self.bytes.len()
    }
    fn push_log(&mut self, major: u16, minor: u16, data: &[u8], items: &[u8]) {
        let d0 = self.bytes.len();
        self.bytes.extend_from_slice(data);
        let i0 = self.items.len();
        self.items.extend(
            items
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        self.records.push(crate::out::sink::SinkRecord {
            kind: RecordKind::Log,
            major,
            minor,
            data: d0..self.bytes.len(),
            items: i0..self.items.len(),
        });
    }
    fn push_stacktrace(&mut self, data: &[u8]) {
        self.push(RecordKind::StackTrace, 0, 0, data, &[]);
    }
    fn push_event(&mut self, kind: u16, id: u16, data: &[u8]) {
        self.push(RecordKind::Event, kind, id, data, &[]);
    }
    fn extend_last(&mut self, bytes: &[u8]) {
        if let Some(r) = self.records.last_mut() {
            self.bytes.extend_from_slice(bytes);
            r.data.end = self.bytes.len();
        }
    }
}

impl<E: HitEnv + 'static> hostfns::HostData for HostState<E> {
    type Env = E;
    type Sink = Sink;
    type Services = crate::wasm::services::Services;
    fn env(&self) -> &E {
        &self.env
    }
    fn env_mut(&mut self) -> &mut E {
        &mut self.env
    }
    fn sink(&self) -> &Sink {
        &self.sink
    }
    fn services(&self) -> &crate::wasm::services::Services {
        &self.services
    }
    fn services_mut(&mut self) -> &mut crate::wasm::services::Services {
        &mut self.services
    }
    fn sink_and_services(&mut self) -> (&mut Sink, &mut crate::wasm::services::Services) {
        (&mut self.sink, &mut self.services)
    }
    fn memory(&self) -> Option<Memory> {
        self.memory
    }
    fn writes_allowed(&self) -> bool {
        self.writes_allowed
    }
    fn usdt_args(&self) -> &[hostabi::usdt::UsdtArg] {
        &self.usdt[..self.usdt_len]
    }
}

/// The hit slot before any hit (and during runs of `BEGIN`/`END` probes):
/// no thread, no registers, no memory.
#[derive(Debug, Default)]
pub struct NoHit;

impl HitEnv for NoHit {
    fn read_reg(&mut self, _reg: u16, _part: u8) -> Option<u64> {
        None
    }
    fn write_reg(&mut self, _reg: u16, _value: u64) -> Status {
        Status::NotPermitted
    }
    fn read_mem(&mut self, _addr: u64, _buf: &mut [u8]) -> usize {
        0
    }
    fn write_mem(&mut self, _addr: u64, _data: &[u8]) -> Status {
        Status::NotPermitted
    }
    fn check_access(&mut self, _addr: u64, _write: bool) -> bool {
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
        crate::sys::time::realtime_ns()
    }
    fn gvars(&mut self) -> &mut [u64] {
        &mut []
    }
}

/// Defines every host import in `linker`: `hostfns`, the one
/// implementation shared with the in-process agent.
pub fn add_to_linker<E: HitEnv + 'static>(linker: &mut Linker<HostState<E>>) -> anyhow::Result<()> {
    hostfns::add_to_linker(linker)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostabi::IMPORT_MODULE;

    #[test]
    fn every_import_is_defined_with_its_abi_signature() {
        // Any hit environment: only the imports' signatures are checked.
        let engine = crate::wasm::engine::new_engine().unwrap();
        let mut linker: Linker<HostState<NoHit>> = Linker::new(&engine);
        add_to_linker(&mut linker).unwrap();
        let mut store =
            wasmtime::Store::new(&engine, HostState::new(NoHit, StoreLimits::default()));
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
