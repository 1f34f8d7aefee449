//! Cost of one `wprobe_agent_dispatch` called from native code in the same
//! process, broken down, next to today's `Runner::run`, all in one run.
//!
//! Method: for each row, time N and 2N back-to-back calls (CPU time of the
//! benchmarking thread, `CLOCK_THREAD_CPUTIME_ID`, as wprobe's criterion
//! benches do, so time the 2-core VM gives to other processes does not
//! count) and take (t2 − t1) / N, which cancels the fixed costs of a
//! measurement; rows are measured in interleaved rounds (every row once per
//! round) so drift of the shared VM hits all rows alike; the table gives the
//! median and the minimum over the rounds, and each ratio is the median of
//! the per-round ratios.
//!
//! `cargo bench -p agent-loader --bench dispatch` (ROUNDS, TARGET_MS env vars).

#[path = "../tests/common/mod.rs"]
mod common;

use agent_abi::{SavedRegs, bench};
use agent_loader::{LoadedAgent, ModuleSpec, RegionLayout, SelfTarget, agent_image, load_agent};
use std::hint::black_box;

type Dispatch = unsafe extern "C" fn(u32, *mut SavedRegs) -> i64;
type Bench = unsafe extern "C" fn(u32, u32, u64, *mut SavedRegs) -> u64;

const SITE_COUNT: u32 = 1;
const SITE_EMPTY: u32 = 2;
const SITE_RPN: u32 = 3;
const SITE_NONE: u32 = 9;

struct Row {
    name: &'static str,
    run: Box<dyn FnMut(u64) -> f64>, // n iterations -> elapsed ns
    samples: Vec<f64>,
}

/// CPU time of this thread, ns.
fn cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

fn timed(mut f: impl FnMut(u64)) -> impl FnMut(u64) -> f64 {
    move |n| {
        let t = cpu_ns();
        f(n);
        cpu_ns() - t
    }
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(21);
    let target_ms: f64 = std::env::var("TARGET_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20.0);

    // The agent, in this process, with three handlers.
    let img = agent_image().expect("agent");
    let mut t = SelfTarget::new().unwrap();
    let mut a: LoadedAgent = load_agent(&mut t, &img, RegionLayout::default()).unwrap();
    let engine = agent_loader::compile::agent_engine().unwrap();
    common::load(
        &mut t,
        &mut a,
        &engine,
        common::COUNT_WAT,
        &[(SITE_COUNT, "count"), (SITE_EMPTY, "empty")],
        1,
        runtime::engine::DEFAULT_FUEL_PER_HIT,
    )
    .unwrap();

    // Today's path: the benches' RPN "trivial" handler under `Runner::run`.
    let rt_engine = runtime::engine::new_engine().unwrap();
    let shape = &wprobe_benches::SHAPES[0];
    assert_eq!(shape.name, "trivial");
    let program = wprobe_benches::build(shape.source);
    let mut compiled = wprobe_benches::CompiledHandler::new(&rt_engine, &program);
    // The same RPN module, precompiled for the agent.
    let rpn_wasm = rpn2wasm::compile_program(program.clone()).wasm;
    let rpn_cwasm = agent_loader::compile::precompile(&engine, &rpn_wasm).unwrap();
    let p0 = &compiled.runner.programs[0];
    a.load_module(
        &mut t,
        &ModuleSpec {
            cwasm: &rpn_cwasm,
            sites: &[(SITE_RPN, p0.manifest.probes[0].export.as_str())],
            gvars: u32::from(p0.manifest.gvars),
            fuel: p0.fuel,
            load_bias: 0,
            writes_allowed: true,
        },
    )
    .unwrap();

    // SAFETY: the agent's entry points, mapped by the loader.
    let dispatch: Dispatch = unsafe { std::mem::transmute::<u64, Dispatch>(a.dispatch) };
    // SAFETY: as above.
    let benchf: Bench = unsafe { std::mem::transmute::<u64, Bench>(a.bench) };
    let frame = Box::leak(Box::new(SavedRegs {
        rdi: 2,
        rsi: 7,
        ..Default::default()
    })) as *mut SavedRegs;
    // Sanity: every path returns what it should.
    // SAFETY: valid frame.
    unsafe {
        assert_eq!(dispatch(SITE_COUNT, frame), 0);
        assert_eq!(dispatch(SITE_EMPTY, frame), 0);
        assert_eq!(dispatch(SITE_RPN, frame), 0);
        assert_eq!(
            dispatch(SITE_NONE, frame),
            agent_abi::Skip::NoHandler as i64
        );
    }
    assert_eq!(
        compiled.run(),
        runtime::runner::RunOutcome::Returned(hostabi::Outcome::Exit)
    );

    // Stubs on real functions (agent-loader/testdata/patchme.c).
    let lib = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libpatchme_bench.so");
    let st = std::process::Command::new("gcc")
        .args(["-O1", "-fno-ipa-icf", "-fPIC", "-shared", "-o"])
        .arg(&lib)
        .arg(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/patchme.c"))
        .status()
        .unwrap();
    assert!(st.success());
    let cl = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: our test library.
    let h = unsafe { libc::dlopen(cl.as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null());
    let fsym = |n: &str| -> u64 {
        let c = std::ffi::CString::new(n).unwrap();
        // SAFETY: valid handle and name.
        let p = unsafe { libc::dlsym(h, c.as_ptr()) };
        assert!(!p.is_null());
        p as u64
    };
    type Add3 = extern "C" fn(i64, i64, i64) -> i64;
    // SAFETY: C functions of this signature.
    let f = |n: &str| unsafe { std::mem::transmute::<u64, Add3>(fsym(n)) };
    let (plain, nop, nohandler, counted) = (
        f("add3_plain"),
        f("add3_nop"),
        f("add3_nohandler"),
        f("add3"),
    );
    extern "C" fn native_nop(_site: u32, _frame: *mut SavedRegs) -> i64 {
        0
    }
    let stubs = agent_loader::loader::map_near(
        &mut t,
        fsym("add3"),
        4096,
        libc::PROT_READ | libc::PROT_EXEC,
    )
    .unwrap();
    let mut at = stubs;
    for (name, id, callee) in [
        ("add3_nop", 0, native_nop as *const () as u64),
        ("add3_nohandler", SITE_NONE, a.dispatch),
        ("add3", SITE_COUNT, a.dispatch),
    ] {
        let addr = fsym(name);
        let mut code = [0u8; 32];
        agent_loader::Target::read_mem(&mut t, addr, &mut code).unwrap();
        let site = agent_loader::stub::decode_site(&code, addr).unwrap();
        let n = agent_loader::loader::install_stub(&mut t, &site, id, callee, at).unwrap();
        at += (n as u64).next_multiple_of(64);
    }
    assert_eq!(plain(1, 2, 3), 14);
    assert_eq!(nop(1, 2, 3), 14);
    assert_eq!(nohandler(1, 2, 3), 14);
    assert_eq!(counted(1, 2, 3), 14);
    let call = |g: Add3| {
        timed(move |n| {
            for i in 0..n {
                black_box(g(black_box(i as i64), 1, 1));
            }
        })
    };

    // The counting handler under std wasmtime, in this process, with the
    // same host functions (hostfns): once with the agent's Config, once
    // with the runtime's (signals-based traps, 4 GiB reservations).
    struct Data {
        env: rpn2wasm::model::ModelEnv,
        sink: NoSink,
        memory: Option<wasmtime::Memory>,
    }
    struct NoSink;
    impl hostfns::RecordSink for NoSink {
        fn has_room(&self, _: usize) -> bool {
            true
        }
        fn push_log(&mut self, _: u16, _: u16, _: &[u8], _: &[u8]) {}
        fn push_stacktrace(&mut self, _: &[u8]) {}
    }
    impl hostfns::HostData for Data {
        type Env = rpn2wasm::model::ModelEnv;
        type Sink = NoSink;
        fn env(&self) -> &Self::Env {
            &self.env
        }
        fn env_mut(&mut self) -> &mut Self::Env {
            &mut self.env
        }
        fn sink(&self) -> &NoSink {
            &self.sink
        }
        fn sink_mut(&mut self) -> &mut NoSink {
            &mut self.sink
        }
        fn memory(&self) -> Option<wasmtime::Memory> {
            self.memory
        }
        fn writes_allowed(&self) -> bool {
            true
        }
    }
    let std_call = |engine: &wasmtime::Engine| {
        let module =
            wasmtime::Module::new(engine, wat::parse_str(common::COUNT_WAT).unwrap()).unwrap();
        let mut env = rpn2wasm::model::ModelEnv::probe_target_hit(2);
        env.gvars = vec![0];
        let mut store = wasmtime::Store::new(
            engine,
            Data {
                env,
                sink: NoSink,
                memory: None,
            },
        );
        let mut linker = wasmtime::Linker::new(engine);
        hostfns::add_to_linker(&mut linker).unwrap();
        store.set_fuel(1_000_000).unwrap();
        let inst = linker.instantiate(&mut store, &module).unwrap();
        store.data_mut().memory = inst.get_memory(&mut store, "memory");
        let f = inst.get_typed_func::<(), i32>(&mut store, "count").unwrap();
        timed(move |n| {
            for _ in 0..n {
                store
                    .set_fuel(runtime::engine::DEFAULT_FUEL_PER_HIT)
                    .unwrap();
                black_box(f.call(&mut store, ()).unwrap());
            }
        })
    };
    let std_agent_cfg = std_call(&engine);
    let std_runtime_cfg = std_call(&rt_engine);

    let d = |site: u32| {
        timed(move |n| {
            for _ in 0..n {
                // SAFETY: valid frame.
                black_box(unsafe { dispatch(site, frame) });
            }
        })
    };
    let inside = |what: u32, site: u32| {
        // SAFETY: valid frame; the agent times the loop itself.
        move |n: u64| unsafe { benchf(what, site, n, frame) as f64 }
    };
    let mut rows: Vec<Row> = vec![
        Row {
            name: "patched C function, stub + dispatch(count)",
            run: Box::new(call(counted)),
            samples: vec![],
        },
        Row {
            name: "patched C function, stub + dispatch(no handler)",
            run: Box::new(call(nohandler)),
            samples: vec![],
        },
        Row {
            name: "patched C function, stub + native no-op callee",
            run: Box::new(call(nop)),
            samples: vec![],
        },
        Row {
            name: "unpatched C function (baseline)",
            run: Box::new(call(plain)),
            samples: vec![],
        },
        Row {
            name: "dispatch: trivial counting handler (gvar_get+gvar_set), fuel",
            run: Box::new(d(SITE_COUNT)),
            samples: vec![],
        },
        Row {
            name: "dispatch: RPN `trivial` (same module as Runner::run)",
            run: Box::new(d(SITE_RPN)),
            samples: vec![],
        },
        Row {
            name: "dispatch: empty Wasm handler, fuel",
            run: Box::new(d(SITE_EMPTY)),
            samples: vec![],
        },
        Row {
            name: "dispatch: site without handler (empty dispatch)",
            run: Box::new(d(SITE_NONE)),
            samples: vec![],
        },
        Row {
            name: "  in agent: thread slot lookup",
            run: Box::new(inside(bench::SLOT, 0)),
            samples: vec![],
        },
        Row {
            name: "  in agent: slot + stack switch",
            run: Box::new(inside(bench::STACK_SWITCH, 0)),
            samples: vec![],
        },
        Row {
            name: "  in agent: Store::set_fuel",
            run: Box::new(inside(bench::SET_FUEL, SITE_COUNT)),
            samples: vec![],
        },
        Row {
            name: "  in agent: set_fuel + call, empty handler",
            run: Box::new(inside(bench::CALL, SITE_EMPTY)),
            samples: vec![],
        },
        Row {
            name: "  in agent: set_fuel + call, counting handler",
            run: Box::new(inside(bench::CALL, SITE_COUNT)),
            samples: vec![],
        },
        Row {
            name: "  in agent: dispatch(count) looped inside",
            run: Box::new(inside(bench::DISPATCH, SITE_COUNT)),
            samples: vec![],
        },
        Row {
            name: "std wasmtime, agent Config: set_fuel + call, counting",
            run: Box::new(std_agent_cfg),
            samples: vec![],
        },
        Row {
            name: "std wasmtime, runtime Config: set_fuel + call, counting",
            run: Box::new(std_runtime_cfg),
            samples: vec![],
        },
        Row {
            name: "Runner::run, RPN `trivial` (today, std wasmtime)",
            run: Box::new(timed(move |n| {
                for _ in 0..n {
                    black_box(compiled.run());
                }
            })),
            samples: vec![],
        },
    ];

    // Calibrate N per row: ~target_ms for 2N.
    let mut ns: Vec<u64> = Vec::new();
    for r in &mut rows {
        let mut n = 1000u64;
        loop {
            let el = (r.run)(n);
            if el > target_ms * 1e6 / 3.0 || n > 1 << 30 {
                break;
            }
            n *= 2;
        }
        ns.push(n);
    }
    for _ in 0..rounds {
        for (r, &n) in rows.iter_mut().zip(&ns) {
            let t1 = (r.run)(n);
            let t2 = (r.run)(2 * n);
            r.samples.push((t2 - t1) / n as f64);
        }
    }
    let med = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let min = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
    println!(
        "\n{rounds} rounds; per row N ≈ {:?} (2N ≈ {target_ms} ms)",
        ns
    );
    println!("{:<62} {:>9} {:>9}", "ns per call", "median", "min");
    for r in &rows {
        println!(
            "{:<62} {:>9.1} {:>9.1}",
            r.name,
            med(&r.samples),
            min(&r.samples)
        );
    }
    let ratio = |i: usize, j: usize| {
        let v: Vec<f64> = rows[i]
            .samples
            .iter()
            .zip(&rows[j].samples)
            .map(|(a, b)| a / b)
            .collect();
        med(&v)
    };
    let runner = rows.len() - 1;
    let diff = |i: usize, j: usize| {
        let v: Vec<f64> = rows[i]
            .samples
            .iter()
            .zip(&rows[j].samples)
            .map(|(a, b)| a - b)
            .collect();
        med(&v)
    };
    println!("\nper-hit overhead over the unpatched call (median of per-round differences):");
    println!(
        "  stub alone (native no-op callee)      {:>7.1} ns",
        diff(2, 3)
    );
    println!(
        "  stub + empty dispatch                 {:>7.1} ns",
        diff(1, 3)
    );
    println!(
        "  stub + dispatch(trivial counting)     {:>7.1} ns",
        diff(0, 3)
    );
    println!("\nratios (median of per-round ratios):");
    println!(
        "  (stub + dispatch(count) - baseline) / Runner::run(trivial) = {:.2}",
        {
            let v: Vec<f64> = (0..rows[0].samples.len())
                .map(|k| (rows[0].samples[k] - rows[3].samples[k]) / rows[runner].samples[k])
                .collect();
            med(&v)
        }
    );
    println!(
        "  dispatch(count)     / Runner::run(trivial) = {:.2}",
        ratio(4, runner)
    );
    println!(
        "  dispatch(RPN trivial) / Runner::run(trivial) = {:.2}",
        ratio(5, runner)
    );
    println!(
        "  dispatch(empty)     / Runner::run(trivial) = {:.2}",
        ratio(6, runner)
    );
    println!(
        "  empty dispatch      / dispatch(count)      = {:.2}",
        ratio(7, 4)
    );
    let s = a.region.stats();
    println!(
        "\nagent counters: handled {} contended {} trapped {} fuel {}",
        s.handled, s.contended, s.trapped, s.fuel_exhausted
    );
}
