//! Differential testing of the compiler (spec P2): random well-formed
//! programs run in the reference interpreter and compiled under wasmtime on
//! the same random hits must give identical records, item descriptors,
//! outcomes, environment changes and variables. Cases the interpreter's
//! watchdog ends are discarded (with their program). The seed is fixed and
//! printed on failure; `WPROBE_DIFF_SEED` / `WPROBE_DIFF_PROGRAMS` override.

use hostabi::Outcome;
use rpn2wasm::interp::RecordKind;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use wprobe_tests::randprog::{self, Rng};
use wprobe_tests::{Pair, build_text};

const DEFAULT_SEED: u64 = 0x5EED_2026_1122;
const DEFAULT_PROGRAMS: u64 = 2000;
const INPUTS_PER_PROGRAM: usize = 8;
/// Interpreter instruction budget for generated programs (watchdog).
const INSN_BUDGET: u64 = 20_000;
/// Wasm fuel: far above what INSN_BUDGET instructions can cost, so running
/// out of fuel where the interpreter finished is a failure.
const FUEL: u64 = 400_000_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Default, Debug)]
struct Stats {
    programs: u64,
    /// Runs the programs would have made (inputs x probes).
    planned: u64,
    runs: u64,
    discarded_programs: u64,
    /// Planned runs not made because their program was discarded.
    discarded_runs: u64,
    raised: u64,
    uncaught: u64,
    log_full: u64,
    jmpmax: u64,
    stack_traces: u64,
    nontrivial: u64,
    /// Programs whose stack extent the compiler bounded (partial zero-fill).
    bounded_extent: u64,
    /// Programs compiled without write-through stores.
    elided: u64,
    /// Runs of return probes (hits that are returns, with an entry state).
    return_runs: u64,
    /// Programs reading the entry state (`push entry`, `push elapsed`).
    entry_programs: u64,
}

#[test]
fn compiled_code_matches_the_interpreter_on_random_programs() {
    let seed = env_u64("WPROBE_DIFF_SEED", DEFAULT_SEED);
    let n = env_u64("WPROBE_DIFF_PROGRAMS", DEFAULT_PROGRAMS);
    let mut st = Stats::default();
    let mut forms = [0u64; FORMS.len()];
    for i in 0..n {
        let pseed = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9));
        let mut r = Rng::new(pseed);
        let src = randprog::program(&mut r);
        for (k, f) in FORMS.iter().enumerate() {
            forms[k] += u64::from(src.contains(f));
        }
        st.entry_programs += u64::from(src.contains("push entry") || src.contains("push elapsed"));
        let outcome = catch_unwind(AssertUnwindSafe(|| run_program(&src, &mut r, &mut st)));
        if let Err(e) = outcome {
            eprintln!(
                "differential failure: WPROBE_DIFF_SEED={seed} program #{i} (program seed {pseed:#x})\n--- program ---\n{src}---"
            );
            resume_unwind(e);
        }
        st.programs += 1;
    }
    println!("differential: {st:?}");
    assert_eq!(st.runs + st.discarded_runs, st.planned, "{st:?}");
    assert!(
        st.discarded_runs * 50 <= st.planned,
        "more than 2% of the planned runs were discarded: {st:?}"
    );
    assert!(
        st.nontrivial * 100 >= st.runs * 80,
        "fewer than 80% of runs were non-trivial: {st:?}"
    );
    assert!(
        st.raised > 0 && st.log_full > 0 && st.jmpmax > 0 && st.stack_traces > 0,
        "{st:?}"
    );
    assert!(
        st.return_runs * 10 >= st.runs,
        "fewer than 10% of runs were return probes: {st:?}"
    );
    if n >= DEFAULT_PROGRAMS {
        let missing: Vec<&str> = FORMS
            .iter()
            .zip(forms)
            .filter(|(_, c)| *c == 0)
            .map(|(f, _)| *f)
            .collect();
        assert!(missing.is_empty(), "forms never generated: {missing:?}");
    }
}

/// Instruction forms the generator must produce (each in some program).
const FORMS: &[&str] = &[
    "\npop gv\n",
    "\nmove gv\n",
    "pop gv, ",
    "move gv, ",
    "pushh u8,",
    "pushh u16,",
    "pushh u32,",
    "pushh u64,",
    "poph u8,",
    "poph u16,",
    "poph u32,",
    "poph u64,",
    "exit 2\n",
    "exit 1\n",
    "exit 3\n",
    "push procid",
    "push task",
    "push r, cpuid",
    "return = yes\n",
    "maxactive = 0\n",
    "maxactive = 4096\n",
    "push elapsed\n",
    "push entry, rdi\n",
    "push entry, rsi\n",
    "push entry, rdx\n",
    "push entry, rcx\n",
    "push entry, r8\n",
    "push entry, r9\n",
    "push entry, rsp\n",
];

fn run_program(src: &str, r: &mut Rng, st: &mut Stats) {
    let program = build_text(src);
    let probes = program.probes.len();
    let logmax = program.header.logmax as usize;
    let mut pair = Pair::new(program, Some(FUEL));
    pair.limits.insn_budget = INSN_BUDGET;
    st.bounded_extent += u64::from(pair.facts.extent < 1024);
    st.elided += u64::from(pair.facts.elide);
    st.planned += (INPUTS_PER_PROGRAM * probes) as u64;
    for input in 0..INPUTS_PER_PROGRAM {
        let env = randprog::hit(r);
        for probe in 0..probes {
            let Some(res) = pair.both(probe, &env, &format!("input {input}, probe {probe}")) else {
                st.discarded_programs += 1;
                st.discarded_runs +=
                    (INPUTS_PER_PROGRAM * probes) as u64 - (input * probes + probe) as u64;
                return;
            };
            st.runs += 1;
            st.return_runs += u64::from(pair.program.probes[probe].r#return);
            let code = pair.last_exception.0;
            if code != 0 {
                st.raised += 1;
            }
            if code & 0x4 != 0 {
                st.jmpmax += 1;
            }
            if res.outcome == Some(Outcome::Uncaught) {
                st.uncaught += 1;
            }
            let mut nontrivial = code != 0;
            for rec in &res.records {
                match rec.kind {
                    RecordKind::Log { .. } => {
                        if logmax > 0 && rec.data.len() + 8 > logmax {
                            st.log_full += 1;
                        }
                        nontrivial |= !rec.data.is_empty();
                    }
                    RecordKind::StackTrace => {
                        st.stack_traces += 1;
                        nontrivial = true;
                    }
                }
            }
            if nontrivial {
                st.nontrivial += 1;
            }
        }
    }
}

/// Programs the compiler's stack analysis can bound (see
/// `randprog::disciplined_program`): the same comparison, with most
/// programs compiled without write-through stores and with a bounded
/// zero-fill, which random programs rarely reach.
#[test]
fn compiled_code_matches_the_interpreter_on_stack_disciplined_programs() {
    let seed = env_u64("WPROBE_DIFF_SEED", DEFAULT_SEED) ^ 0xD15C_1F11;
    let n = env_u64("WPROBE_DIFF_PROGRAMS", DEFAULT_PROGRAMS) / 2;
    let mut st = Stats::default();
    for i in 0..n {
        let pseed = seed.wrapping_add(i.wrapping_mul(0x9E37_79B9));
        let mut r = Rng::new(pseed);
        let src = randprog::disciplined_program(&mut r);
        let outcome = catch_unwind(AssertUnwindSafe(|| run_program(&src, &mut r, &mut st)));
        if let Err(e) = outcome {
            eprintln!(
                "differential failure (disciplined): WPROBE_DIFF_SEED={} program #{i} (program seed {pseed:#x})\n--- program ---\n{src}---",
                seed ^ 0xD15C_1F11
            );
            resume_unwind(e);
        }
        st.programs += 1;
    }
    println!("differential (disciplined): {st:?}");
    assert_eq!(st.runs + st.discarded_runs, st.planned, "{st:?}");
    assert!(
        st.discarded_runs * 50 <= st.planned,
        "more than 2% of the planned runs were discarded: {st:?}"
    );
    assert!(
        st.bounded_extent * 100 >= st.programs * 70 && st.elided * 100 >= st.programs * 45,
        // The rest log inside loops or procedures: a masked LOG_OVERFLOW
        // leaves elements unpopped, so their depth can grow without bound.
        // About 30% read slots above TOS on purpose (bounded, not elided).
        "the analysis should bound at least 70% of these programs: {st:?}"
    );
}

/// Loop unrolling (the compiler emits a short single-block loop closed by
/// `loop` as 4 or 2 copies of its body): every way out of every copy, by
/// the counter reaching zero or by MAX_JMPS at any jump count, with and
/// without a handler catching MAX_JMPS, agrees with the interpreter, and
/// the bodies are really unrolled.
#[test]
fn unrolled_loops_agree_at_every_exit_and_every_jump_limit() {
    // (body, copies the compiler makes of it, counter change per iteration)
    let sum = "dup 1\npush tsp, 2\nadd\npop tsp, 2\n";
    let bodies: [(String, usize); 4] = [
        // The benchmark's loop: acc += n.
        (sum.to_string(), 4),
        // Three times that, with constants left in the cache: 12 instructions.
        (format!("{sum}push 7\nxor\n{sum}push 7\nxor\n{sum}"), 2),
        // Leaves a constant on top, then swaps it under the counter and drops it.
        ("push 9\nxchg\npop tsp, 1\n".to_string(), 4),
        // Moves the counter away from zero: only MAX_JMPS ends it.
        ("push 2\nadd\n".to_string(), 4),
    ];
    let (mut exits, mut limits) = (0, 0);
    for (body, copies) in &bodies {
        for handler in [false, true] {
            for jmpmax in (1..=10).chain([1000]) {
                let (sx, tail) = if handler {
                    ("        sx caught\n", "caught: log 3\n        exit\n")
                } else {
                    ("", "")
                };
                for n in 0..=9u64 {
                    let src = format!(
                        "name = unroll\nmajor = 1\njmpmax = {jmpmax}\naddress = 0x1000\nopcode = 0x55\n{sx}        push 0\n        push {n}\ntop:\n{body}        loop top\n        ros 1\n        log 1\n        exit\n{tail}"
                    );
                    let program = build_text(&src);
                    let manifest = rpn2wasm::manifest::build(&program);
                    let generated = rpn2wasm::codegen::generate_with_marks(&program, &manifest);
                    let back_edge = program.bodies[0]
                        .insns
                        .iter()
                        .position(|i| matches!(i.op, rpn2wasm::ast::Op::Loop(_)))
                        .expect("a loop instruction");
                    let emitted = generated.marks[0]
                        .iter()
                        .filter(|(i, _)| *i == back_edge)
                        .count();
                    assert_eq!(emitted, *copies, "copies of `loop` in\n{src}");
                    let mut pair = Pair::new(program, Some(FUEL));
                    let what = format!("jmpmax {jmpmax}, n {n}, handler {handler}:\n{src}");
                    let env = randprog::hit(&mut Rng::new(n));
                    let res = pair.both(0, &env, &what).expect("the interpreter finished");
                    if pair.last_exception.0 & 0x4 != 0 {
                        limits += 1;
                    } else {
                        exits += 1;
                        assert_eq!(res.outcome, Some(Outcome::Exit), "{what}");
                    }
                    if body == sum && jmpmax == 1000 && n > 0 {
                        let want = (1..=n).sum::<u64>().to_le_bytes();
                        assert_eq!(res.records[0].data, want, "{what}");
                    }
                }
            }
        }
    }
    println!("unrolled loops: {exits} left through the counter, {limits} through MAX_JMPS");
    assert!(exits >= 200 && limits >= 400, "{exits} {limits}");
}
