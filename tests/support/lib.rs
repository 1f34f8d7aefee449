//! Helpers shared by the integration tests and benchmarks: building RPN
//! programs, validating every module, and running a handler both in the
//! reference interpreter and compiled under wasmtime on the same synthetic
//! hit, so the two can be compared.

use hostabi::Outcome;
use rpn2wasm::ast::Program;
use rpn2wasm::codegen::stackinfo::{self, StackFacts};
use rpn2wasm::interp::{self, Limits, ProgramState, Record, RecordKind};
use rpn2wasm::model::ModelEnv;
use runtime::out::sink::RecordKind as SinkKind;
use runtime::wasm::runner::{RunOutcome, Runner};
use std::path::{Path, PathBuf};

pub mod randprog;

/// The repository's copy of the example programs.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// Symbols of the reference build of `probe_target` (examples/README of the spec).
pub fn reference_symbols() -> rpn2wasm::symbols::MapSymbols {
    use rpn2wasm::model::probe_target as t;
    rpn2wasm::symbols::MapSymbols::new([
        ("target_fn", t::TARGET_FN),
        ("bump", t::BUMP),
        ("main", t::MAIN),
        ("greeting", t::GREETING),
        ("origin", t::ORIGIN),
        ("counter", t::COUNTER),
    ])
}

/// Options with the reference symbols and `-D` definitions.
pub fn options(defines: &[(&str, &str)]) -> rpn2wasm::Options {
    rpn2wasm::Options {
        defines: defines
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        include_dirs: Vec::new(),
        symbols: Some(Box::new(reference_symbols())),
        module_dirs: Vec::new(),
    }
}

/// Runs the front end on a file, panicking with the rendered diagnostics.
pub fn build_file(path: &Path, defines: &[(&str, &str)]) -> Program {
    match rpn2wasm::frontend(path, &options(defines)) {
        Ok((p, _)) => p,
        Err((d, map)) => panic!("{} does not build:\n{}", path.display(), d.render(&map)),
    }
}

/// Runs the front end on text, panicking with the rendered diagnostics.
pub fn build_text(text: &str) -> Program {
    match rpn2wasm::frontend_str(Path::new("test.rpn"), text, &options(&[])) {
        Ok((p, _)) => p,
        Err((d, map)) => panic!("program does not build:\n{}\n{text}", d.render(&map)),
    }
}

/// Validates a module with wasmparser (every module compiled by a test goes through here).
pub fn validate(wasm: &[u8]) {
    if let Err(e) = wasmparser::Validator::new().validate_all(wasm) {
        panic!(
            "invalid module: {} at offset 0x{:x}",
            e.message(),
            e.offset()
        );
    }
}

/// Compiles a program to a validated module.
pub fn compile(program: &Program) -> Vec<u8> {
    let c = rpn2wasm::compile_program(program.clone());
    validate(&c.wasm);
    c.wasm
}

/// A wasmtime engine shared by a test binary (compiling the engine once).
pub fn engine() -> &'static wasmtime::Engine {
    static E: std::sync::OnceLock<wasmtime::Engine> = std::sync::OnceLock::new();
    E.get_or_init(|| runtime::wasm::engine::new_engine().expect("engine"))
}

/// The result of one hit, comparable across the two engines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HitResult {
    /// How the run ended (`None`: the Wasm run trapped or ran out of fuel).
    pub outcome: Option<Outcome>,
    /// Records in emission order.
    pub records: Vec<Record>,
}

/// A program loaded in both engines, with persistent variables.
pub struct Pair {
    /// The program.
    pub program: Program,
    state: ProgramState,
    gvars: Vec<u64>,
    runner: Runner<ModelEnv>,
    /// Interpreter limits.
    pub limits: Limits,
    /// The interpreter's last last-exception registers (code, handler, p1, p2), for statistics.
    pub last_exception: (u64, u64, u64, u64),
    /// The interpreter's final machine state of the last run.
    pub last_state: Option<interp::FinalState>,
    /// What the compiler's stack analysis proved about the program.
    pub facts: StackFacts,
}

impl Pair {
    /// Compiles and loads `program`; `fuel` overrides the fuel per hit.
    pub fn new(program: Program, fuel: Option<u64>) -> Pair {
        let wasm = compile(&program);
        let loaded =
            runtime::wasm::load::load(engine(), &wasm, None).expect("load compiled module");
        let mut runner = Runner::new(engine(), ModelEnv::new()).expect("runner");
        runner.add(&loaded, fuel).expect("instantiate");
        let gvars = vec![0; program.header.gvars as usize];
        let facts = stackinfo::analyze(&program);
        Pair {
            state: ProgramState::new(&program),
            program,
            gvars,
            runner,
            limits: Limits {
                capture_state: true,
                ..Limits::default()
            },
            last_exception: (0, 0, 0, 0),
            last_state: None,
            facts,
        }
    }

    /// Runs probe `probe` on `env` in the interpreter; returns the result, the env afterwards
    /// and whether the instruction budget ran out.
    pub fn interp(&mut self, probe: usize, env: &ModelEnv) -> (HitResult, ModelEnv, bool) {
        let mut env = env.clone();
        env.gvars = self.gvars.clone();
        let r = interp::run(
            &self.program,
            probe,
            &mut self.state,
            &mut env,
            &self.limits,
        );
        self.gvars = env.gvars.clone();
        self.last_exception = r.last_exception;
        self.last_state = r.state.clone();
        let budget = r.outcome == Outcome::BudgetExceeded;
        (
            HitResult {
                outcome: Some(r.outcome),
                records: r.records,
            },
            env,
            budget,
        )
    }

    /// Runs probe `probe` on `env` compiled; returns the result and the env afterwards.
    pub fn wasm(
        &mut self,
        probe: usize,
        env: &ModelEnv,
        gvars: &[u64],
    ) -> (HitResult, ModelEnv, RunOutcome) {
        let mut env = env.clone();
        env.gvars = gvars.to_vec();
        self.runner.store.data_mut().env = env;
        self.runner.store.data_mut().sink.clear();
        let out = self.runner.run(0, probe);
        let data = self.runner.store.data();
        let records = data
            .sink
            .records
            .iter()
            .map(|r| Record {
                kind: match r.kind {
                    // RPN modules emit no events; keep them visible if one did.
                    SinkKind::Log | SinkKind::Event => RecordKind::Log {
                        major: r.major,
                        minor: r.minor,
                    },
                    SinkKind::StackTrace => RecordKind::StackTrace,
                },
                data: data.sink.data(r).to_vec(),
                items: data.sink.item_words(r).to_vec(),
            })
            .collect();
        let outcome = match &out {
            RunOutcome::Returned(o) => Some(*o),
            RunOutcome::FuelExhausted => Some(Outcome::BudgetExceeded),
            RunOutcome::Trapped(_) | RunOutcome::Interrupted => None,
        };
        (HitResult { outcome, records }, data.env.clone(), out)
    }

    /// Local variables of the compiled instance.
    pub fn wasm_locals(&self) -> Vec<u64> {
        let mem = self.runner.memory(0);
        let base = rpn2wasm::codegen::layout::VARS as usize;
        (0..self.program.header.vars as usize)
            .map(|i| {
                let b = &mem[base + 8 * i..base + 8 * i + 8];
                u64::from_le_bytes(b.try_into().expect("8 bytes"))
            })
            .collect()
    }

    /// The compiled instance's final stack, TSP and SBP.
    pub fn wasm_state(&mut self) -> interp::FinalState {
        let mem = self.runner.memory(0);
        let base = rpn2wasm::codegen::layout::STACK as usize;
        let stack = (0..1024)
            .map(|i| {
                u64::from_le_bytes(
                    mem[base + 8 * i..base + 8 * i + 8]
                        .try_into()
                        .expect("8 bytes"),
                )
            })
            .collect();
        let inst = self.runner.programs[0].instance;
        let mut global = |name: &str| {
            inst.get_global(&mut self.runner.store, name)
                .and_then(|g| g.get(&mut self.runner.store).i32())
                .expect("exported RPN register") as u32
        };
        interp::FinalState {
            stack,
            tsp: global("rpn_tsp"),
            sbp: global("rpn_sbp"),
        }
    }

    /// Local variables of the interpreter.
    pub fn interp_locals(&self) -> &[u64] {
        &self.state.locals
    }

    /// Runs one hit in both engines and asserts identical results, env and
    /// variables; returns the interpreter's result (`None` when its budget ran out).
    pub fn both(&mut self, probe: usize, env: &ModelEnv, what: &str) -> Option<HitResult> {
        let gvars_before = self.gvars.clone();
        let (ri, ei, budget) = self.interp(probe, env);
        if budget {
            // The interpreter's watchdog ended it; the Wasm side would run to its
            // fuel limit instead. Such cases are discarded (and the pair with them,
            // since its variables may now differ).
            return None;
        }
        let (rw, ew, raw) = self.wasm(probe, env, &gvars_before);
        assert_eq!(
            rw, ri,
            "{what}: compiled vs interpreter records/outcome differ (wasm run: {raw:?})"
        );
        assert_eq!(ew, ei, "{what}: environment after the hit differs");
        assert_eq!(
            self.wasm_locals(),
            self.interp_locals(),
            "{what}: local variables differ"
        );
        if ri.outcome != Some(Outcome::Abort) || rw.outcome.is_some() {
            let want = self.last_state.clone().expect("captured");
            let got = self.wasm_state();
            assert_eq!(
                (got.tsp, got.sbp),
                (want.tsp, want.sbp),
                "{what}: TSP/SBP differ"
            );
            // Slots above TOS hold popped values; a program the analysis
            // proves never reads them may leave them unwritten.
            let first: usize = match (self.facts.elide, want.tsp) {
                (false, _) => 0,
                // Depth 0 (TSP 0): no live slot.
                (true, 0) => 1024,
                (true, t) => t as usize,
            };
            let compared = first..1024;
            let diff: Vec<usize> = compared
                .filter(|i| got.stack[*i] != want.stack[*i])
                .collect();
            assert!(diff.is_empty(), "{what}: stack slots differ: {diff:?}");
        }
        Some(ri)
    }
}

/// One event of the modelled target run.
pub struct TargetEvent {
    /// The address that fires (the probe location's link-time value).
    pub addr: u64,
    /// The watch kind, for a watchpoint event.
    pub watch: Option<rpn2wasm::ast::WatchKind>,
    /// Whether it is the return of a call that entered at `addr` (a return
    /// probe's hit, spec §6.5).
    pub ret: bool,
    /// The modelled hit.
    pub env: ModelEnv,
}

/// The events of one run of `probe_target` with no arguments, in order:
/// entries of `main`, `target_fn` and `target_fn + 1`, the writes of
/// `counter`, the returns of `target_fn`, and `bump`.
pub fn target_events() -> Vec<TargetEvent> {
    use rpn2wasm::ast::WatchKind;
    use rpn2wasm::model::probe_target as t;
    let ev = |addr, watch, ret, env| TargetEvent {
        addr,
        watch,
        ret,
        env,
    };
    let mut v = vec![ev(t::MAIN, None, false, ModelEnv::probe_target_main())];
    for a in 0..3 {
        v.push(ev(t::TARGET_FN, None, false, ModelEnv::probe_target_hit(a)));
        let mut second = ModelEnv::probe_target_hit(a);
        second.set_reg(hostabi::regs::RIP, t::TARGET_FN + 1);
        second.set_reg(hostabi::regs::RSP, t::RSP_IN_CALLEE - 8);
        v.push(ev(t::TARGET_FN + 1, None, false, second));
        let store = ModelEnv::probe_target_store(a);
        v.push(ev(t::COUNTER, Some(WatchKind::W), false, store));
        let ret = ModelEnv::probe_target_return(a);
        v.push(ev(t::TARGET_FN, None, true, ret));
    }
    v.push(ev(t::BUMP, None, false, ModelEnv::probe_target_bump()));
    v
}

/// Runs the target scenario through `hit` (probe index, env) → result, applying
/// `maxhits` and `remove` as the runtime does; returns all records and outcomes.
pub fn scenario(
    program: &Program,
    mut hit: impl FnMut(usize, &ModelEnv, String) -> Option<HitResult>,
) -> (Vec<Record>, Vec<Outcome>) {
    let mut hits = vec![0u32; program.probes.len()];
    let mut disabled = vec![false; program.probes.len()];
    let (mut records, mut outcomes) = (Vec::new(), Vec::new());
    for TargetEvent {
        addr,
        watch,
        ret,
        env,
    } in target_events()
    {
        for (i, p) in program.probes.iter().enumerate() {
            if p.value != addr || p.watch != watch || p.r#return != ret || disabled[i] {
                continue;
            }
            let r = hit(i, &env, format!("probe {i} at 0x{addr:x}"))
                .expect("examples stay within the instruction budget");
            hits[i] += 1;
            if r.outcome == Some(Outcome::Remove) || hits[i] >= p.maxhits {
                disabled[i] = true;
            }
            records.extend(r.records);
            outcomes.push(r.outcome.expect("interpreter outcome"));
        }
    }
    (records, outcomes)
}

/// The records the reference interpreter produces for `program` on the modelled target run.
pub fn interpreter_scenario(program: &Program) -> Vec<Record> {
    let mut state = ProgramState::new(program);
    let mut gvars = vec![0; program.header.gvars as usize];
    scenario(program, |probe, env, _| {
        let mut env = env.clone();
        env.gvars = gvars.clone();
        let r = interp::run(program, probe, &mut state, &mut env, &Limits::default());
        gvars = env.gvars.clone();
        Some(HitResult {
            outcome: Some(r.outcome),
            records: r.records,
        })
    })
    .0
}

/// A scratch directory for this test process. The first use removes those
/// of test processes that are gone (this harness has no end-of-run hook).
pub fn scratch_dir() -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("wprobe-tests-")) else {
                continue;
            };
            if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    });
    let d = std::env::temp_dir().join(format!("wprobe-tests-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Compiles a C file with gcc (cached per output name within the process).
pub fn build_c(src: &Path, out_name: &str, flags: &[&str]) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = scratch_dir().join(out_name);
    if out.exists() {
        return out;
    }
    let tmp = scratch_dir().join(format!("{out_name}.tmp{}", std::process::id()));
    let st = std::process::Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .arg(src)
        .status()
        .expect("gcc runs");
    assert!(st.success(), "gcc failed for {}", src.display());
    std::fs::rename(&tmp, &out).expect("rename");
    out
}

/// `probe_target` built exactly as the examples require.
pub fn probe_target() -> PathBuf {
    build_c(
        &examples_dir().join("probe_target.c"),
        "probe_target",
        &[
            "-O0",
            "-g",
            "-fno-pie",
            "-no-pie",
            "-fcf-protection=none",
            "-fno-omit-frame-pointer",
        ],
    )
}

/// A `Write` that keeps what is written, shareable with the session.
#[derive(Clone, Default)]
pub struct SharedBuf(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedBuf {
    /// The JSON lines written so far.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
            .collect()
    }
}
