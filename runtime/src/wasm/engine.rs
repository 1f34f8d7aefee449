//! The wasmtime engine and the sandbox policy of every handler: fuel per
//! hit, memory and stack limits. Policy values are named constants with the
//! reason they have the value they have.

use wasmtime::{Config, Engine, OptLevel};

/// Fuel given to one handler run when neither the program nor the command
/// line says otherwise. Wasmtime charges about one unit per Wasm operator;
/// 100 M units is well under a second of handler time on this class of
/// machine, far more than any legitimate handler needs, and bounds a runaway
/// one (spec §16 [A 13]: the watchdog that `jmpmax` cannot be).
pub const DEFAULT_FUEL_PER_HIT: u64 = 100_000_000;

/// Fuel per counted branch allowed by a program's `jmpmax`: a compiled RPN
/// instruction costs at most a few dozen operators and a loop body between
/// two counted branches is bounded by the code image, so this keeps fuel far
/// above what `jmpmax` itself permits for realistic handlers while still
/// ending pathological ones (exception loops) quickly.
pub const FUEL_PER_JUMP: u64 = 20_000;

/// Minimum fuel per hit derived from `jmpmax` (handlers with `jmpmax = 0`
/// still run their straight-line code, calls and exception handlers).
pub const MIN_DERIVED_FUEL: u64 = 10_000_000;

/// Fuel given to the `wprobe_flush` export after a fuel exhaustion.
pub const FLUSH_FUEL: u64 = 1_000_000;

/// Largest linear memory a handler module may have or grow to (16 MiB).
pub const MAX_MEMORY_BYTES: usize = 16 << 20;

/// Maximum native stack used by Wasm code; deeper recursion traps with a
/// stack-overflow trap instead of touching the host's guard page. Must stay
/// well below the host thread's stack (8 MiB main thread).
pub const MAX_WASM_STACK_BYTES: usize = 512 << 10;

/// Builds the engine shared by all modules of a run. `WPROBE_PERFMAP=1`
/// writes a perf map of the compiled handlers, so `perf record`/`perf report`
/// attribute time to handler functions by name.
pub fn new_engine() -> anyhow::Result<Engine> {
    let mut c = Config::new();
    c.consume_fuel(true);
    // SIGINT/SIGTERM interrupt a running handler ([`interrupt_on`]): a
    // handler given a huge `--fuel` never holds the target stopped or the
    // user waiting.
    c.epoch_interruption(true);
    c.max_wasm_stack(MAX_WASM_STACK_BYTES);
    c.cranelift_opt_level(OptLevel::Speed);
    if std::env::var_os("WPROBE_PERFMAP").is_some() {
        // `perf record` then names handler functions (/tmp/perf-PID.map).
        c.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    Ok(Engine::new(&c)?)
}

/// Fuel per hit for a program with this `jmpmax`, unless overridden.
pub fn fuel_for(jmpmax: u16, manifest_fuel: u64, override_fuel: Option<u64>) -> u64 {
    if let Some(f) = override_fuel {
        return f;
    }
    if manifest_fuel != 0 {
        return manifest_fuel;
    }
    ((jmpmax as u64 + 1) * FUEL_PER_JUMP).clamp(MIN_DERIVED_FUEL, DEFAULT_FUEL_PER_HIT)
}

/// Interrupts a handler still running in `engine` [`INTERRUPT_GRACE`]
/// after `stop` became true (the flag SIGINT/SIGTERM set): a thread bumps
/// the engine's epoch, and a handler run (whose deadline is the next epoch)
/// traps at its next loop back-edge or call. The grace lets a handler that
/// was merely running at that moment (microseconds) finish and write its
/// records; a long one is cut short. Polls every [`INTERRUPT_POLL`].
pub fn interrupt_on(engine: &Engine, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let engine = engine.clone();
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(INTERRUPT_POLL);
        }
        std::thread::sleep(INTERRUPT_GRACE);
        engine.increment_epoch();
    });
}

/// How long a handler running when wprobe is asked to stop may go on.
pub const INTERRUPT_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// How often the interrupt thread looks at the stop flag.
pub const INTERRUPT_POLL: std::time::Duration = std::time::Duration::from_millis(10);
