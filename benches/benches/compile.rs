//! Compile time (bench stage): a generated 1,000-instruction RPN program
//! taken to validated Wasm (front end, code generation and wasmparser
//! validation, each measured alone and together), and wasmtime's own
//! compilation of the resulting module with the runtime's engine settings,
//! measured separately (and, for scale, wasmtime's compilation of the
//! module of an empty handler). Times are CPU time of the benchmarking
//! thread unless `WPROBE_BENCH_CLOCK=wall` (see `wprobe_benches::clock`).

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;
use wprobe_benches::clock::BenchClock;
use wprobe_benches::{SHAPES, generated_program, options, validate};

/// Written instructions of the generated program (10 per block).
const BLOCKS: usize = 100;

fn compile(c: &mut Criterion<BenchClock>) {
    let src = generated_program(BLOCKS);
    let opts = options();
    let frontend = |text: &str| match rpn2wasm::frontend_str(Path::new("bench.rpn"), text, &opts) {
        Ok((p, _)) => p,
        Err((d, map)) => panic!("generated program does not build:\n{}", d.render(&map)),
    };
    let program = frontend(&src);
    let wasm = rpn2wasm::compile_program(program.clone()).wasm;
    validate(&wasm);
    let engine = runtime::wasm::engine::new_engine().expect("engine");

    let mut group = c.benchmark_group("compile_1000_insns");
    group.bench_function("frontend", |b| {
        b.iter(|| black_box(frontend(black_box(&src))))
    });
    group.bench_function("codegen", |b| {
        b.iter_batched(
            || program.clone(),
            |p| black_box(rpn2wasm::compile_program(p).wasm),
            criterion::BatchSize::SmallInput,
        )
    });
    group.bench_function("validate", |b| b.iter(|| validate(black_box(&wasm))));
    group.bench_function("source_to_validated_wasm", |b| {
        b.iter(|| {
            let w = rpn2wasm::compile_program(frontend(black_box(&src))).wasm;
            validate(&w);
            black_box(w)
        })
    });
    group.bench_function("wasmtime_module_new", |b| {
        b.iter(|| {
            black_box(wasmtime::Module::new(&engine, black_box(&wasm)).expect("wasmtime compiles"))
        })
    });
    // The fixed part of wasmtime's compilation: the module of an empty
    // handler still carries the runtime helpers.
    let trivial = rpn2wasm::compile_program(frontend(SHAPES[0].source)).wasm;
    group.bench_function("wasmtime_module_new_trivial_program", |b| {
        b.iter(|| {
            black_box(
                wasmtime::Module::new(&engine, black_box(&trivial)).expect("wasmtime compiles"),
            )
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(BenchClock::from_env())
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = compile
}
criterion_main!(benches);
