//! Library paths (bench stage):
//!
//! * **load**: what `wprobe run` pays per `.rpn` program before tracing
//!   starts (front end, code generation, validation and ABI gate, then
//!   `Module::new` or a hit in the compiled-module cache), for the
//!   1,000-instruction program of the `compile` bench and for a program of
//!   100 probes on one symbol. `cold` runs with the cache off; `cached`
//!   with a warm cache in a temporary directory (every iteration is a hit).
//!   Three functions break the cached figure down: `to_wasm` (front end
//!   and code generation only), `abi_gate_only` (`load::inspect`:
//!   validation and the facts the ABI gate checks, as on a miss; a hit
//!   skips the validation, see `load::load_cached`) and `cache_hit_only`
//!   (`Cache::get_or_compile` on the Wasm bytes: key, read, checksum,
//!   `Module::deserialize`).
//! * **decode**: `hostabi::record` decoding of typical records (every item
//!   or frame read), in records per second.
//! * **format**: `runtime::out::format::record` in text and JSON lines (which
//!   decodes as it goes), in records per second, into a reused buffer
//!   cleared when it passes 64 KiB (the session clears it per hit).
//!
//! Times are CPU time of the benchmarking thread unless
//! `WPROBE_BENCH_CLOCK=wall` (see `wprobe_benches::clock`); the load path
//! makes system calls (file reads, mmap, mprotect), whose kernel time the
//! thread's CPU clock includes.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use runtime::out::format::{Format, record};
use runtime::wasm::cache::{Cache, CacheOutcome};
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;
use wprobe_benches::clock::BenchClock;
use wprobe_benches::library::{
    TempCache, TypicalRecord, decode, load_rpn, many_probe_program, two_words_record,
    typical_records,
};
use wprobe_benches::{generated_program, options};

fn load(c: &mut Criterion<BenchClock>) {
    let engine = runtime::wasm::engine::new_engine().expect("engine");
    let tmp = TempCache::new("load");
    let programs = [
        ("load_1000_insns", generated_program(100)),
        ("load_100_probes", many_probe_program(100)),
    ];
    for (name, src) in &programs {
        let mut group = c.benchmark_group(*name);
        group.sample_size(10);
        group.bench_function("cold", |b| {
            b.iter(|| black_box(load_rpn(&engine, black_box(src), &Cache::disabled())))
        });
        // Warm the cache, and check that what follows really hits.
        load_rpn(&engine, src, &tmp.cache);
        assert_eq!(load_rpn(&engine, src, &tmp.cache).1, CacheOutcome::Hit);
        group.bench_function("cached", |b| {
            b.iter(|| {
                let (m, o) = load_rpn(&engine, black_box(src), &tmp.cache);
                debug_assert!(o.is_hit());
                black_box(m)
            })
        });
        let to_wasm = |s: &str| {
            let p = match rpn2wasm::frontend_str(Path::new("bench.rpn"), s, &options()) {
                Ok((p, _)) => p,
                Err((d, map)) => panic!("{}", d.render(&map)),
            };
            rpn2wasm::compile_program(p).wasm
        };
        group.bench_function("to_wasm", |b| b.iter(|| black_box(to_wasm(black_box(src)))));
        let wasm = to_wasm(src);
        group.bench_function("abi_gate_only", |b| {
            b.iter(|| black_box(runtime::wasm::load::inspect(black_box(&wasm)).expect("valid")))
        });
        group.bench_function("cache_hit_only", |b| {
            b.iter(|| {
                let (m, o) = tmp
                    .cache
                    .get_or_compile(&engine, black_box(&wasm))
                    .expect("loads");
                debug_assert!(o.is_hit());
                black_box(m)
            })
        });
        group.finish();
    }
}

/// The two record sets: the most common record alone, and the typical mix.
fn record_sets() -> [(&'static str, Vec<TypicalRecord>); 2] {
    [
        ("two_words", vec![two_words_record()]),
        ("typical_mix", typical_records()),
    ]
}

fn decode_and_format(c: &mut Criterion<BenchClock>) {
    let mut group = c.benchmark_group("decode");
    for (name, recs) in &record_sets() {
        group.throughput(Throughput::Elements(recs.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), recs, |b, recs| {
            b.iter(|| {
                let mut n = 0u64;
                for r in recs {
                    n = n.wrapping_add(decode(black_box(r)));
                }
                black_box(n)
            })
        });
    }
    group.finish();
    for (fmt_name, fmt) in [("format_text", Format::Text), ("format_json", Format::Json)] {
        let mut group = c.benchmark_group(fmt_name);
        for (name, recs) in &record_sets() {
            group.throughput(Throughput::Elements(recs.len() as u64));
            let mut out = String::with_capacity(1 << 17);
            let mut seq = 0u64;
            group.bench_with_input(BenchmarkId::from_parameter(name), recs, |b, recs| {
                b.iter(|| {
                    if out.len() > 1 << 16 {
                        out.clear();
                    }
                    for r in recs {
                        record(&mut out, fmt, &r.view(seq));
                        seq += 1;
                    }
                    black_box(out.len())
                })
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(BenchClock::from_env())
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = load, decode_and_format
}
criterion_main!(benches);
