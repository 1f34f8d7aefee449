//! The host-import robustness oracle, shared by the
//! seeded smoke run in `runtime/tests/sandbox.rs` and the cargo-fuzz target
//! `fuzz/fuzz_targets/host_calls.rs`.
//!
//! A module generated from `hostabi::HOST_IMPORTS` re-exports every import
//! as `call_NAME` with the import's own signature. Input bytes choose the
//! import and each argument (edge values of pointers and lengths around the
//! memory end, `u32::MAX`, overflowing `ptr + len`, register ids, mapped and
//! unmapped addresses), and sometimes scribble over the guest memory so
//! record decoders see garbage. Every call must return or trap — never
//! panic the host — and the store must stay usable for the next call.

#![allow(dead_code, reason = "each includer uses a different subset")]

use hostabi::ValType;
use rpn2wasm::model::ModelEnv;
use runtime::wasm::runner::Runner;
use wasmtime::{Func, Val};

/// Counts of one run.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Import calls made.
    pub calls: u64,
    /// Calls that returned.
    pub ok: u64,
    /// Calls that trapped.
    pub trapped: u64,
    /// Distinct imports called at least once.
    pub imports_called: usize,
}

/// A loaded module re-exporting every import, in a store around a model hit.
pub struct Harness {
    runner: Runner<ModelEnv>,
    funcs: Vec<Func>,
    probe: Func,
    called: Vec<bool>,
    /// Counts so far.
    pub stats: Stats,
}

/// Base of the mapped region of the model process.
const MAPPED: u64 = 0x40_1000;

fn module_text() -> String {
    let mut s = String::from("(module\n");
    for i in hostabi::HOST_IMPORTS {
        let params: Vec<&str> = i.params.iter().map(|(_, t)| t.wat()).collect();
        let results: Vec<&str> = i.results.iter().map(|t| t.wat()).collect();
        s += &format!(
            "  (import \"wprobe\" \"{0}\" (func ${0} (param {1}) (result {2})))\n",
            i.name,
            params.join(" "),
            results.join(" ")
        );
    }
    s += "  (memory (export \"memory\") 1 4)\n";
    for i in hostabi::HOST_IMPORTS {
        let params: Vec<&str> = i.params.iter().map(|(_, t)| t.wat()).collect();
        let results: Vec<&str> = i.results.iter().map(|t| t.wat()).collect();
        let gets: String = (0..i.params.len())
            .map(|n| format!("(local.get {n}) "))
            .collect();
        s += &format!(
            "  (func (export \"call_{0}\") (param {1}) (result {2}) {3}(call ${0}))\n",
            i.name,
            params.join(" "),
            results.join(" "),
            gets
        );
    }
    s + ")\n"
}

impl Harness {
    /// A fresh harness (compiles the module: a few milliseconds).
    pub fn new() -> Harness {
        let engine = runtime::wasm::engine::new_engine().expect("engine");
        let wasm = wat::parse_str(module_text()).expect("generated module parses");
        let manifest = hostabi::manifest::Manifest {
            module: "model".into(),
            ..Default::default()
        };
        let loaded = runtime::wasm::load::load(&engine, &wasm, Some(manifest)).expect("loads");
        let mut env = ModelEnv::new();
        let bytes: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        env.map(MAPPED, bytes, true, true)
            .map(0x60_0000, vec![0x55; 4096], true, false)
            .with_gvars(4)
            .add_io_port(0x80, 0x1234)
            .set_reg(0x0a, 7);
        let mut runner = Runner::new(&engine, env).expect("runner");
        let prog = runner.add(&loaded, None).expect("instantiates");
        let instance = runner.programs[prog].instance;
        let memory = instance.get_memory(&mut runner.store, "memory");
        runner.store.data_mut().memory = memory;
        let funcs = hostabi::HOST_IMPORTS
            .iter()
            .map(|i| {
                instance
                    .get_func(&mut runner.store, &format!("call_{}", i.name))
                    .expect("re-export")
            })
            .collect();
        let probe = instance
            .get_func(&mut runner.store, "call_current_tid")
            .expect("re-export");
        Harness {
            runner,
            funcs,
            probe,
            called: vec![false; hostabi::HOST_IMPORTS.len()],
            stats: Stats::default(),
        }
    }

    fn mem_len(&mut self) -> u64 {
        let m = self.runner.store.data().memory.expect("memory set");
        m.data_size(&self.runner.store) as u64
    }

    /// One argument of type `t` chosen by `sel` and `raw`.
    fn arg(&mut self, t: ValType, sel: u8, raw: u64) -> Val {
        let mem = self.mem_len();
        let v: u64 = match sel % 16 {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            3 => i32::MAX as u64,
            4 => i32::MIN as i64 as u64,
            5 => u32::MAX as u64,
            6 => mem.wrapping_sub(raw % 16),
            7 => mem + raw % 16,
            8 => raw % 64,
            9 => raw % 0x130,
            10 => MAPPED + raw % 9000,
            11 => 0x60_0000 + raw % 5000,
            12 => hostabi::imports::MAX_MEM_ACCESS_BYTES as u64 + raw % 3 - 1,
            13 => raw % 70_000,
            14 => mem.wrapping_sub(raw % 70_000),
            _ => raw,
        };
        match t {
            ValType::I32 => Val::I32(v as i32),
            ValType::I64 => Val::I64(v as i64),
        }
    }

    /// Writes `bytes` into guest memory at `at` (clamped).
    fn scribble(&mut self, at: u64, bytes: &[u8]) {
        let m = self.runner.store.data().memory.expect("memory set");
        let data = m.data_mut(&mut self.runner.store);
        let at = (at as usize) % data.len();
        let n = bytes.len().min(data.len() - at);
        data[at..at + n].copy_from_slice(&bytes[..n]);
    }

    /// Runs the operations encoded in `data` (any bytes are valid input).
    pub fn run_bytes(&mut self, data: &[u8]) {
        let mut r = Reader { data, pos: 0 };
        while r.pos < data.len() {
            let op = r.byte() as usize;
            let n = hostabi::HOST_IMPORTS.len();
            if op % (n + 2) >= n {
                let at = r.word();
                let len = r.byte() as usize;
                let bytes: Vec<u8> = (0..len).map(|_| r.byte()).collect();
                self.scribble(at, &bytes);
                continue;
            }
            let index = op % (n + 2);
            let import = &hostabi::HOST_IMPORTS[index];
            let args: Vec<Val> = import
                .params
                .iter()
                .map(|(_, t)| {
                    let sel = r.byte();
                    let raw = r.word();
                    self.arg(*t, sel, raw)
                })
                .collect();
            self.call(index, &args);
        }
    }

    /// Calls import `index` with `args`; checks the store is usable afterwards.
    pub fn call(&mut self, index: usize, args: &[Val]) {
        let import = &hostabi::HOST_IMPORTS[index];
        let mut results = vec![Val::I64(0); import.results.len()];
        self.runner
            .store
            .set_fuel(10_000_000)
            .expect("fuel enabled");
        self.stats.calls += 1;
        self.called[index] = true;
        match self.funcs[index].call(&mut self.runner.store, args, &mut results) {
            Ok(()) => self.stats.ok += 1,
            Err(_) => self.stats.trapped += 1,
        }
        self.runner.store.data_mut().sink.clear();
        let mut tid = [Val::I64(0)];
        self.runner.store.set_fuel(1000).expect("fuel enabled");
        self.probe
            .call(&mut self.runner.store, &[], &mut tid)
            .expect("the store stays usable after any call");
        assert_eq!(tid[0].unwrap_i64(), 1000);
        self.stats.imports_called = self.called.iter().filter(|c| **c).count();
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn word(&mut self) -> u64 {
        (0..8).fold(0, |w, i| w | (self.byte() as u64) << (8 * i))
    }
}

/// The seeded smoke run: `calls` random import calls from `seed`.
pub fn smoke(seed: u64, calls: u64) -> Stats {
    let mut h = Harness::new();
    let mut x = seed | 1;
    let mut bytes = Vec::new();
    while h.stats.calls < calls {
        bytes.clear();
        for _ in 0..4096 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push((x >> 24) as u8);
        }
        h.run_bytes(&bytes);
    }
    h.stats.clone()
}
