//! Shared pieces of the benchmarks (bench stage: measures, never ships): the
//! four handler shapes of the per-hit benchmark as RPN source with their
//! equivalent native Rust, the synthetic hit they run on, the three engines
//! (compiled under wasmtime, reference interpreter, native), and the
//! generated 1,000-instruction program of the compile-time benchmark.
//!
//! The unit tests at the bottom check that the three engines produce the
//! same bytes for every shape, so the benchmarks compare equal work.

pub mod clock;
pub mod library;

use hostabi::env::HitEnv;
use rpn2wasm::ast::Program;
use rpn2wasm::interp::{self, Limits, ProgramState, RunResult};
use rpn2wasm::model::{ModelEnv, probe_target as t};
use rpn2wasm::symbols::MapSymbols;
use runtime::wasm::runner::{RunOutcome, Runner};
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;
use wasmtime::TypedFunc;

/// The file header shared by the shapes: one breakpoint probe on `target_fn`.
macro_rules! probe_header {
    () => {
        "name = probe_target\nmajor = 9\noffset = target_fn\nopcode = 0x55\nminor = 1\n"
    };
}

/// One handler shape: the RPN source and the same work in native Rust.
pub struct Shape {
    /// Short name (the criterion group name).
    pub name: &'static str,
    /// The RPN program (one probe, probe 0).
    pub source: &'static str,
    /// The same computation against the same environment, writing the log
    /// record's data bytes into `out` (cleared first, capacity kept).
    pub native: fn(&mut ModelEnv, &mut Vec<u8>),
}

/// Register id of `rdi` (spec §13.1).
const RDI: u16 = 0x0A;
/// Register id of `rsi` (spec §13.1).
const RSI: u16 = 0x0B;

/// Iterations of the loop shape.
pub const LOOP_ITERATIONS: u64 = 100;
/// Memory reads of the memory shape.
pub const MEM_READS: u64 = 20;

/// The empty handler: only the implicit `exit` (an empty log record).
const TRIVIAL: &str = probe_header!();

/// Log `rdi` and `rsi` (64-bit words, first popped first).
const LOG_REGS: &str = concat!(
    probe_header!(),
    "        push r, rsi\n",
    "        push r, rdi\n",
    "        log 2\n",
);

/// Sum 100 + 99 + … + 1 on the RPN stack with a 100-iteration `loop`, log it.
/// Stack: acc n; each iteration acc := acc + n, then `loop` decrements n.
const LOOP: &str = concat!(
    probe_header!(),
    "        push 0              // acc\n",
    "        push 100            // n\n",
    "top:    dup 1               // acc n n\n",
    "        push tsp, 2         // acc n n acc\n",
    "        add                 // acc n n+acc\n",
    "        pop tsp, 2          // acc' n\n",
    "        loop top            // n := n - 1; again while n != 0\n",
    "        ros 1               // drop the exhausted counter\n",
    "        log 1\n",
);

/// Twenty 8-byte reads of the target's `.data` page (from `greeting`,
/// 8 bytes apart), summed; the sum is logged.
const MEM_READS_SRC: &str = concat!(
    probe_header!(),
    "        push 0\n",
    "        push greeting + 0\n        push mem, u64\n        add\n",
    "        push greeting + 8\n        push mem, u64\n        add\n",
    "        push greeting + 16\n        push mem, u64\n        add\n",
    "        push greeting + 24\n        push mem, u64\n        add\n",
    "        push greeting + 32\n        push mem, u64\n        add\n",
    "        push greeting + 40\n        push mem, u64\n        add\n",
    "        push greeting + 48\n        push mem, u64\n        add\n",
    "        push greeting + 56\n        push mem, u64\n        add\n",
    "        push greeting + 64\n        push mem, u64\n        add\n",
    "        push greeting + 72\n        push mem, u64\n        add\n",
    "        push greeting + 80\n        push mem, u64\n        add\n",
    "        push greeting + 88\n        push mem, u64\n        add\n",
    "        push greeting + 96\n        push mem, u64\n        add\n",
    "        push greeting + 104\n        push mem, u64\n        add\n",
    "        push greeting + 112\n        push mem, u64\n        add\n",
    "        push greeting + 120\n        push mem, u64\n        add\n",
    "        push greeting + 128\n        push mem, u64\n        add\n",
    "        push greeting + 136\n        push mem, u64\n        add\n",
    "        push greeting + 144\n        push mem, u64\n        add\n",
    "        push greeting + 152\n        push mem, u64\n        add\n",
    "        log 1\n",
);

fn native_trivial(_env: &mut ModelEnv, out: &mut Vec<u8>) {
    out.clear();
}

fn native_log_regs(env: &mut ModelEnv, out: &mut Vec<u8>) {
    out.clear();
    let a = env.read_reg_any(RDI, 0).unwrap_or(0);
    let b = env.read_reg_any(RSI, 0).unwrap_or(0);
    out.extend_from_slice(&a.to_le_bytes());
    out.extend_from_slice(&b.to_le_bytes());
}

fn native_loop(_env: &mut ModelEnv, out: &mut Vec<u8>) {
    out.clear();
    let (mut acc, mut n) = (0u64, LOOP_ITERATIONS);
    loop {
        // `black_box` keeps rustc from replacing the loop by its closed
        // form, so the native side also runs 100 iterations.
        acc = black_box(acc.wrapping_add(n));
        n -= 1;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&acc.to_le_bytes());
}

fn native_mem_reads(env: &mut ModelEnv, out: &mut Vec<u8>) {
    out.clear();
    let mut sum = 0u64;
    for i in 0..MEM_READS {
        let mut w = [0u8; 8];
        if env.read_mem(t::GREETING + 8 * i, &mut w) != w.len() {
            // The RPN program would raise INVALID_ADDR here; the bench hit
            // maps every address read, so this never happens.
            return;
        }
        sum = sum.wrapping_add(u64::from_le_bytes(w));
    }
    out.extend_from_slice(&sum.to_le_bytes());
}

/// The four shapes of the per-hit benchmark.
pub const SHAPES: [Shape; 4] = [
    Shape {
        name: "trivial",
        source: TRIVIAL,
        native: native_trivial,
    },
    Shape {
        name: "log_two_regs",
        source: LOG_REGS,
        native: native_log_regs,
    },
    Shape {
        name: "loop_100",
        source: LOOP,
        native: native_loop,
    },
    Shape {
        name: "mem_reads_20",
        source: MEM_READS_SRC,
        native: native_mem_reads,
    },
];

/// Symbols of the reference build of the examples' target program.
pub fn symbols() -> MapSymbols {
    MapSymbols::new([
        ("target_fn", t::TARGET_FN),
        ("bump", t::BUMP),
        ("main", t::MAIN),
        ("greeting", t::GREETING),
        ("origin", t::ORIGIN),
        ("counter", t::COUNTER),
    ])
}

/// Build options with [`symbols`].
pub fn options() -> rpn2wasm::Options {
    rpn2wasm::Options {
        symbols: Some(Box::new(symbols())),
        module_dirs: Vec::new(),
        ..rpn2wasm::Options::default()
    }
}

/// Runs the front end on `source`, panicking with the rendered diagnostics.
pub fn build(source: &str) -> Program {
    match rpn2wasm::frontend_str(Path::new("bench.rpn"), source, &options()) {
        Ok((p, _)) => p,
        Err((d, map)) => panic!(
            "bench program does not build:\n{}\n{source}",
            d.render(&map)
        ),
    }
}

/// The hit every shape runs on: `target_fn(2, 7, greeting)` of the
/// examples' target (registers set, `.text`, `.data` and stack mapped).
pub fn hit() -> ModelEnv {
    ModelEnv::probe_target_hit(2)
}

/// Validates a module with wasmparser; panics with the offset on failure.
pub fn validate(wasm: &[u8]) {
    if let Err(e) = wasmparser::Validator::new().validate_all(wasm) {
        panic!(
            "invalid module: {} (at offset 0x{:x})",
            e.message(),
            e.offset()
        );
    }
}

/// A program compiled, loaded and instantiated under wasmtime, ready to run
/// hits on [`hit`] with the runtime's default fuel per hit.
pub struct CompiledHandler {
    /// The runner (its store holds the env and the sink).
    pub runner: Runner<ModelEnv>,
}

impl CompiledHandler {
    /// Compiles `program` and instantiates it in a fresh store on `engine`.
    pub fn new(engine: &wasmtime::Engine, program: &Program) -> CompiledHandler {
        let c = rpn2wasm::compile_program(program.clone());
        validate(&c.wasm);
        let loaded =
            runtime::wasm::load::load(engine, &c.wasm, None).expect("load compiled module");
        let mut runner = Runner::new(engine, hit()).expect("runner");
        runner.add(&loaded, None).expect("instantiate");
        CompiledHandler { runner }
    }

    /// One hit: clears the sink (keeping its capacity, as the runtime does
    /// after draining it), sets the fuel and calls the handler.
    #[inline]
    pub fn run(&mut self) -> RunOutcome {
        self.runner.store.data_mut().sink.clear();
        self.runner.run(0, 0)
    }

    /// The handler export as a typed function, for calling it without
    /// [`Runner::run`] (to measure what `Runner::run` itself costs). Runs
    /// one hit through [`CompiledHandler::run`] first, so the store knows
    /// the program's memory.
    pub fn handler(&mut self) -> TypedFunc<(), i32> {
        let _ = self.run();
        let instance = self.runner.programs[0].instance;
        instance
            .get_typed_func::<(), i32>(&mut self.runner.store, "probe0")
            .expect("compiled modules export probe0")
    }

    /// One hit without [`Runner::run`]: sink cleared, fuel set, `handler` called.
    #[inline]
    pub fn run_direct(&mut self, handler: &TypedFunc<(), i32>) -> i32 {
        self.runner.store.data_mut().sink.clear();
        self.runner
            .store
            .set_fuel(runtime::wasm::engine::DEFAULT_FUEL_PER_HIT)
            .expect("fuel enabled");
        handler
            .call(&mut self.runner.store, ())
            .expect("handler returns")
    }
}

/// The floor of a handler call under wasmtime with the runtime's engine
/// settings: a store holding one module whose export `f` returns the
/// constant 1 (no imports, no memory); each call sets the fuel first.
pub struct EmptyCall {
    store: wasmtime::Store<()>,
    f: TypedFunc<(), i32>,
}

/// `(module (func (export "f") (result i32) i32.const 1))`.
const EMPTY_MODULE: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
    0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f, // type: () -> i32
    0x03, 0x02, 0x01, 0x00, // function 0: type 0
    0x07, 0x05, 0x01, 0x01, b'f', 0x00, 0x00, // export "f" = func 0
    0x0a, 0x06, 0x01, 0x04, 0x00, 0x41, 0x01, 0x0b, // code: i32.const 1
];

impl EmptyCall {
    /// Instantiates the empty module on `engine`.
    pub fn new(engine: &wasmtime::Engine) -> EmptyCall {
        validate(EMPTY_MODULE);
        let module = wasmtime::Module::new(engine, EMPTY_MODULE).expect("empty module compiles");
        let mut store = wasmtime::Store::new(engine, ());
        store.set_fuel(1000).expect("fuel enabled");
        // The engine interrupts at its next epoch (wprobe's SIGINT path).
        store.set_epoch_deadline(1);
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instantiates");
        let f = instance.get_typed_func(&mut store, "f").expect("export f");
        EmptyCall { store, f }
    }

    /// One call: fuel set, `f` called.
    #[inline]
    pub fn run(&mut self) -> i32 {
        self.store
            .set_fuel(runtime::wasm::engine::DEFAULT_FUEL_PER_HIT)
            .expect("fuel enabled");
        self.f.call(&mut self.store, ()).expect("f returns")
    }
}

/// A program run by the reference interpreter on its own copy of [`hit`].
pub struct InterpretedHandler {
    /// The program.
    pub program: Program,
    /// Its local variables.
    pub state: ProgramState,
    /// The hit environment.
    pub env: ModelEnv,
    /// Default limits.
    pub limits: Limits,
}

impl InterpretedHandler {
    /// Prepares `program` for interpretation.
    pub fn new(program: &Program) -> InterpretedHandler {
        InterpretedHandler {
            state: ProgramState::new(program),
            program: program.clone(),
            env: hit(),
            limits: Limits::default(),
        }
    }

    /// One hit.
    #[inline]
    pub fn run(&mut self) -> RunResult {
        interp::run(
            &self.program,
            0,
            &mut self.state,
            &mut self.env,
            &self.limits,
        )
    }
}

/// The native version of a shape on its own copy of [`hit`].
pub struct NativeHandler {
    f: fn(&mut ModelEnv, &mut Vec<u8>),
    /// The hit environment.
    pub env: ModelEnv,
    /// The reused output buffer.
    pub out: Vec<u8>,
}

impl NativeHandler {
    /// Prepares the native version of `shape`.
    pub fn new(shape: &Shape) -> NativeHandler {
        NativeHandler {
            f: shape.native,
            env: hit(),
            out: Vec::with_capacity(64),
        }
    }

    /// One hit; returns the record bytes.
    #[inline]
    pub fn run(&mut self) -> &[u8] {
        (self.f)(&mut self.env, &mut self.out);
        &self.out
    }
}

/// A well-formed program of exactly `blocks × 10` written instructions (plus
/// the two implicit terminators) mixing what handlers do: immediates,
/// register and memory reads, arithmetic, shifts, local variables, a
/// procedure call and logging. Deterministic. `blocks` must be at least 1.
pub fn generated_program(blocks: usize) -> String {
    let mut s = String::from(concat!(
        "name = probe_target\nmajor = 3\nvars = 8\n",
        "offset = target_fn\nopcode = 0x55\n",
    ));
    let regs = ["rdi", "rsi", "rdx", "rcx", "rax", "rbx", "r8", "r9"];
    for i in 0..blocks {
        let lv = i % 8;
        let last = i + 1 == blocks;
        let _ = writeln!(s, "b{i}:     push {}", 0x1000 + i * 7);
        let _ = writeln!(s, "        push r, {}", regs[i % regs.len()]);
        let _ = writeln!(s, "        add");
        let _ = writeln!(s, "        push greeting + {}", i % 24);
        let _ = writeln!(s, "        push mem, u{}", [8, 16, 32, 64][i % 4]);
        let _ = writeln!(s, "        xor");
        if !last {
            // The last block leaves this out to make room for the
            // procedure's instruction in the count.
            let _ = writeln!(s, "        shl {}", i % 13);
        }
        let _ = writeln!(s, "        pop lv, {lv}");
        let _ = writeln!(s, "        push lv, {lv}");
        if last {
            let _ = writeln!(s, "        log 1");
        } else {
            // Keeps the stack balanced: the procedure drops the value.
            let _ = writeln!(s, "        call drop1");
        }
    }
    s.push_str("proc drop1\n        ros 1\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostabi::Outcome;
    use rpn2wasm::interp::RecordKind;
    use runtime::out::sink::RecordKind as SinkKind;

    #[test]
    fn three_engines_agree_on_every_shape() {
        let engine = runtime::wasm::engine::new_engine().expect("engine");
        for shape in &SHAPES {
            let program = build(shape.source);
            let mut interp = InterpretedHandler::new(&program);
            let mut compiled = CompiledHandler::new(&engine, &program);
            let mut native = NativeHandler::new(shape);
            // Twice: the second hit must match too (buffers reused).
            for _ in 0..2 {
                let want = interp.run();
                assert_eq!(want.outcome, Outcome::Exit, "{}", shape.name);
                assert_eq!(want.records.len(), 1, "{}", shape.name);
                let out = compiled.run();
                assert_eq!(out, RunOutcome::Returned(Outcome::Exit), "{}", shape.name);
                let sink = &compiled.runner.store.data().sink;
                assert_eq!(sink.records.len(), 1, "{}", shape.name);
                let (r, w) = (&sink.records[0], &want.records[0]);
                let RecordKind::Log { major, minor } = w.kind else {
                    panic!("{}: not a log record", shape.name)
                };
                assert_eq!(
                    (r.kind, r.major, r.minor),
                    (SinkKind::Log, major, minor),
                    "{}",
                    shape.name
                );
                assert_eq!(sink.data(r), w.data.as_slice(), "{}: data", shape.name);
                assert_eq!(
                    sink.item_words(r),
                    w.items.as_slice(),
                    "{}: items",
                    shape.name
                );
                assert_eq!(native.run(), w.data.as_slice(), "{}: native", shape.name);
            }
        }
    }

    #[test]
    fn direct_call_and_empty_call_return_exit() {
        let engine = runtime::wasm::engine::new_engine().expect("engine");
        let mut h = CompiledHandler::new(&engine, &build(LOG_REGS));
        let f = h.handler();
        assert_eq!(h.run_direct(&f), Outcome::Exit as i32);
        assert_eq!(h.runner.store.data().sink.records.len(), 1);
        assert_eq!(EmptyCall::new(&engine).run(), 1);
    }

    #[test]
    fn shapes_compute_what_they_say() {
        let mut interp = InterpretedHandler::new(&build(LOOP));
        let r = interp.run();
        assert_eq!(r.records[0].data, 5050u64.to_le_bytes());
        let mut interp = InterpretedHandler::new(&build(MEM_READS_SRC));
        let r = interp.run();
        assert_eq!(r.records[0].data.len(), 8);
        assert!(
            r.records[0].data != [0; 8],
            "reads must see the `.data` page"
        );
        let mut interp = InterpretedHandler::new(&build(LOG_REGS));
        let r = interp.run();
        let mut want = 2u64.to_le_bytes().to_vec();
        want.extend_from_slice(&7u64.to_le_bytes());
        assert_eq!(r.records[0].data, want);
    }

    #[test]
    fn generated_program_builds_to_a_valid_module_and_runs() {
        let src = generated_program(100);
        let program = build(&src);
        // `bodies` include the implicit terminators (one per body).
        let written: usize = program.bodies.iter().map(|b| b.insns.len()).sum();
        assert_eq!(written, 1000 + 2);
        let c = rpn2wasm::compile_program(program.clone());
        validate(&c.wasm);
        let mut h = InterpretedHandler::new(&program);
        let r = h.run();
        assert_eq!(r.outcome, Outcome::Exit);
        assert_eq!(r.records[0].data.len(), 8);
    }
}
