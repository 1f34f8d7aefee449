//! Per-hit cost of a handler (bench stage): for each of the four shapes of
//! `wprobe_benches::SHAPES`, the same handler compiled under wasmtime
//! (`Runner::run`: fuel set, call, sink cleared), run by the reference
//! interpreter, and written as native Rust, all against the same synthetic
//! hit, in one criterion group per shape. Two more functions break the
//! compiled cost down: `compiled_direct` calls the handler export without
//! `Runner::run` (same fuel, same sink clearing), and the `floor` group
//! times a call of an empty Wasm function under the same engine settings.
//! Times are CPU time of the benchmarking thread unless
//! `WPROBE_BENCH_CLOCK=wall` (see `wprobe_benches::clock`).

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;
use wprobe_benches::clock::BenchClock;
use wprobe_benches::{
    CompiledHandler, EmptyCall, InterpretedHandler, NativeHandler, SHAPES, build,
};

fn handlers(c: &mut Criterion<BenchClock>) {
    let engine = runtime::wasm::engine::new_engine().expect("engine");
    for shape in &SHAPES {
        let program = build(shape.source);
        let mut group = c.benchmark_group(shape.name);
        let mut compiled = CompiledHandler::new(&engine, &program);
        group.bench_function("compiled", |b| b.iter(|| black_box(compiled.run())));
        let handler = compiled.handler();
        group.bench_function("compiled_direct", |b| {
            b.iter(|| black_box(compiled.run_direct(&handler)))
        });
        let mut interp = InterpretedHandler::new(&program);
        group.bench_function("interpreter", |b| b.iter(|| black_box(interp.run())));
        let mut native = NativeHandler::new(shape);
        group.bench_function("native", |b| b.iter(|| black_box(native.run().len())));
        group.finish();
    }
    let mut empty = EmptyCall::new(&engine);
    c.bench_function("floor/wasm_empty_call", |b| {
        b.iter(|| black_box(empty.run()))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(BenchClock::from_env())
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = handlers
}
criterion_main!(benches);
