//! What `runtime/src/host.rs` becomes on top of this crate, and the proof
//! that it changes nothing: the runtime's `HostState` and `Sink` implement
//! [`HostData`] and [`RecordSink`] (the two impls below are the whole of the
//! new `host.rs`, besides `pub use hostfns::add_to_linker` and the budget
//! constants), and every example program of the repository runs with the
//! same outcomes, records and environment effects under the runtime's own
//! `add_to_linker` and under this crate's.

extern crate std;

use crate::{HostData, RecordSink, add_to_linker};
use hostabi::env::HitEnv;
use runtime::host::HostState;
use runtime::sink::{RecordKind, Sink};
use std::format;
use std::string::{String, ToString};
use std::vec::Vec;
use wasmtime::{Memory, Store, StoreLimitsBuilder, Trap};

impl RecordSink for Sink {
    fn has_room(&self, bytes: usize) -> bool {
        self.records.len() < crate::MAX_RECORDS_PER_RUN
            && self.bytes.len().saturating_add(bytes) <= crate::MAX_RECORD_BYTES_PER_RUN
    }
    fn push_log(&mut self, major: u16, minor: u16, data: &[u8], items: &[u8]) {
        let words: Vec<u32> = items
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        self.push(RecordKind::Log, major, minor, data, &words);
    }
    fn push_stacktrace(&mut self, data: &[u8]) {
        self.push(RecordKind::StackTrace, 0, 0, data, &[]);
    }
}

impl<E: HitEnv + 'static> HostData for HostState<E> {
    type Env = E;
    type Sink = Sink;
    fn env(&self) -> &E {
        &self.env
    }
    fn env_mut(&mut self) -> &mut E {
        &mut self.env
    }
    fn sink(&self) -> &Sink {
        &self.sink
    }
    fn sink_mut(&mut self) -> &mut Sink {
        &mut self.sink
    }
    fn memory(&self) -> Option<Memory> {
        self.memory
    }
    fn writes_allowed(&self) -> bool {
        self.writes_allowed
    }
}

/// A record as compared: (is a log, major, minor, data, items).
type Rec = (bool, u16, u16, Vec<u8>, Vec<u32>);

/// One run's observable result: outcome text, records, environment.
#[derive(Debug, PartialEq)]
struct Observed {
    outcome: String,
    records: Vec<Rec>,
    env: rpn2wasm::model::ModelEnv,
}

fn records(s: &Sink) -> Vec<Rec> {
    s.records
        .iter()
        .map(|r| {
            (
                r.kind == RecordKind::Log,
                r.major,
                r.minor,
                s.data(r).to_vec(),
                s.item_words(r).to_vec(),
            )
        })
        .collect()
}

fn outcome_text(r: Result<i32, wasmtime::Error>) -> String {
    match r {
        Ok(c) => format!("returned {c}"),
        Err(e) => match e.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => "fuel".to_string(),
            Some(t) => t.to_string(),
            None => e.root_cause().to_string(),
        },
    }
}

#[test]
fn every_example_behaves_the_same_under_both_host_implementations() {
    let dir = wprobe_tests::examples_dir();
    let engine = runtime::engine::new_engine().unwrap();
    let mut checked = 0;
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rpn"))
        .collect();
    paths.sort();
    for path in paths {
        let program = wprobe_tests::build_file(&path, &[]);
        let wasm = rpn2wasm::compile_program(program).wasm;
        let loaded = runtime::load::load(&engine, &wasm, None).unwrap();
        let fuel = runtime::engine::fuel_for(loaded.manifest.jmpmax, loaded.manifest.fuel, None);
        let gvars = loaded.manifest.gvars as usize;
        let mk_env = |a: u64| {
            let mut e = rpn2wasm::model::ModelEnv::probe_target_hit(a);
            e.gvars = std::vec![0; gvars];
            e
        };
        // Both sides: the runtime's linker (`Runner`) and this crate's.
        let mut runner = runtime::runner::Runner::new(&engine, mk_env(1)).unwrap();
        runner.add(&loaded, None).unwrap();
        let limits = || {
            StoreLimitsBuilder::new()
                .memory_size(runtime::engine::MAX_MEMORY_BYTES)
                .trap_on_grow_failure(false)
                .build()
        };
        let mut store = Store::new(&engine, HostState::new(mk_env(1), limits()));
        store.limiter(|s| &mut s.limits);
        let mut linker = wasmtime::Linker::new(&engine);
        add_to_linker(&mut linker).unwrap();
        store.set_fuel(runtime::engine::FLUSH_FUEL).unwrap();
        let inst = linker.instantiate(&mut store, &loaded.module).unwrap();
        let mem = inst.get_memory(&mut store, hostabi::MEMORY_EXPORT).unwrap();
        for (k, probe) in loaded.manifest.probes.iter().enumerate() {
            let f = inst
                .get_typed_func::<(), i32>(&mut store, &probe.export)
                .unwrap();
            // Several hits in a row: local and global variables persist.
            for a in 1..=3u64 {
                runner.store.data_mut().env = {
                    let mut e = mk_env(a);
                    e.gvars = runner.store.data().env.gvars.clone();
                    e
                };
                runner.store.data_mut().sink.clear();
                let want_outcome = runner.run(0, k);
                let want = Observed {
                    outcome: match want_outcome {
                        runtime::runner::RunOutcome::Returned(o) => {
                            format!("returned {}", o as i32)
                        }
                        runtime::runner::RunOutcome::FuelExhausted => "fuel".to_string(),
                        runtime::runner::RunOutcome::Trapped(m) => m,
                        runtime::runner::RunOutcome::Interrupted => "interrupted".to_string(),
                    },
                    records: records(&runner.store.data().sink),
                    env: runner.store.data().env.clone(),
                };
                store.data_mut().env = {
                    let mut e = mk_env(a);
                    e.gvars = store.data().env.gvars.clone();
                    e
                };
                store.data_mut().sink.clear();
                store.data_mut().memory = Some(mem);
                store.set_fuel(fuel).unwrap();
                let r = f.call(&mut store, ());
                let fuel_out =
                    matches!(&r, Err(e) if e.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel));
                let mut got_outcome = outcome_text(r);
                if fuel_out {
                    if let Ok(fl) =
                        inst.get_typed_func::<(), i32>(&mut store, hostabi::FLUSH_EXPORT)
                    {
                        store.set_fuel(runtime::engine::FLUSH_FUEL).unwrap();
                        let _ = fl.call(&mut store, ());
                    }
                    got_outcome = "fuel".to_string();
                }
                let got = Observed {
                    outcome: got_outcome,
                    records: records(&store.data().sink),
                    env: store.data().env.clone(),
                };
                assert_eq!(got, want, "{} probe {k} hit {a}", path.display());
                checked += 1;
            }
        }
    }
    std::eprintln!("{checked} handler runs compared");
    assert!(checked >= 30, "only {checked} runs compared");
}
