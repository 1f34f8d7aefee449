extern crate std;
use super::*;
use hostabi::{Status, regs};
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
