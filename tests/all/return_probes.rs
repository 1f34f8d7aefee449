//! Return probes (spec §6.5, §9.16; `docs/hostabi.md`) on the model
//! environment: the worked example's exact records in both engines, the
//! compiled code against the interpreter on every entry register, and the
//! host imports `entry_reg` / `elapsed_ns` trapping where they must. The
//! transports that catch real returns are tested by the runtime.

use hostabi::Outcome;
use hostabi::env::EntryState;
use hostabi::regs::{self, ENTRY_REGS};
use rpn2wasm::interp::{Record, RecordKind};
use rpn2wasm::model::{ModelEnv, probe_target as t};
use runtime::wasm::runner::{RunOutcome, Runner};
use wprobe_tests::{Pair, build_file, build_text, engine, examples_dir};

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Example 16 in the interpreter and compiled, on the modelled run: one
/// record per return, in call order, exactly as its header says.
#[test]
fn ex16_return_probe_records_in_both_engines() {
    let program = build_file(&examples_dir().join("16_return_probe.rpn"), &[]);
    assert!(program.probes[0].r#return);
    assert_eq!(program.probes[0].maxactive, 4);
    let manifest = rpn2wasm::manifest::build(&program);
    assert!(manifest.encode().contains("  return yes\n  maxactive 4\n"));
    let mut pair = Pair::new(program.clone(), None);
    let (records, outcomes) =
        wprobe_tests::scenario(&program, |i, env, what| pair.both(i, env, &what));
    assert_eq!(outcomes, [Outcome::Exit; 3]);
    let want: Vec<Record> = (0..3u64)
        .map(|a| {
            let mut data = words(&[1500 + 250 * a, 7 * a + 13, a]);
            data.extend_from_slice(&[1, 13, 0]);
            data.extend_from_slice(b"hello, probes");
            data.extend(words(&[8, t::TARGET_FN_RETURN]));
            assert_eq!(data.len(), 56);
            Record {
                kind: RecordKind::Log {
                    major: 16,
                    minor: 1,
                },
                data,
                items: records[a as usize].items.clone(),
            }
        })
        .collect();
    assert_eq!(records, want);
}

/// Every entry register and `push elapsed`, in a return probe's body and in
/// a procedure, agree between the engines on random entry states; the
/// registers of the return stay what `push r` reads.
#[test]
fn every_entry_register_agrees_between_the_engines() {
    let names = ["rdi", "rsi", "rdx", "rcx", "r8", "r9", "rsp"];
    let mut src = String::from("name = t\nmajor = 3\naddress = 0x401000\nreturn = yes\n");
    for n in &names[..4] {
        src += &format!("  push entry, {n}\n");
    }
    src += "  push elapsed\n  push r, rdi\n  push r, rsp\n  log 7\n  call rest\nproc rest\n";
    for n in &names[4..] {
        src += &format!("  push entry, {}\n", n.to_uppercase());
    }
    src += "  log 3\n";
    let program = build_text(&src);
    let mut pair = Pair::new(program, None);
    let mut rng = wprobe_tests::randprog::Rng::new(16);
    for i in 0..50 {
        let mut env = wprobe_tests::randprog::hit(&mut rng);
        let entry = env.entry.expect("random hits carry an entry state");
        let r = pair.both(0, &env, &format!("hit {i}")).expect("finishes");
        let mut want = words(&[
            env.reg(regs::RSP),
            env.reg(regs::RDI),
            entry.elapsed_ns,
            entry.regs[3],
            entry.regs[2],
            entry.regs[1],
            entry.regs[0],
        ]);
        want.extend(words(&[entry.regs[6], entry.regs[5], entry.regs[4]]));
        assert_eq!(r.records[0].data, want, "hit {i}");
        // Without an entry state (not a return), the interpreter reads 0
        // while the host traps: the runtime never runs a return handler so.
        env.entry = None;
        let (wasm, _, raw) = pair.wasm(0, &env, &[]);
        assert_eq!(wasm.outcome, None, "{raw:?}");
    }
}

/// A WAT return handler calling `entry_reg(id)` then `elapsed_ns()`.
fn wat_handler(id: u16) -> Vec<u8> {
    let text = format!(
        r#"(module
  (import "wprobe" "entry_reg" (func $entry_reg (param i32) (result i64)))
  (import "wprobe" "elapsed_ns" (func $elapsed_ns (result i64)))
  (import "wprobe" "gvar_set" (func $gvar_set (param i64 i64)))
  (func (export "on_return") (result i32)
    (call $gvar_set (i64.const 0) (call $entry_reg (i32.const {id})))
    (call $gvar_set (i64.const 1) (call $elapsed_ns))
    (i32.const 0))
  (@custom "wprobe.manifest" "wprobe-manifest 1\nabi {abi}\nmodule m\ngvars 2\nprobe on_return\n  location offset f\n  return yes\n"))"#,
        abi = hostabi::ABI_VERSION
    );
    wat::parse_str(text).expect("valid WAT")
}

fn run_wat(id: u16, entry: Option<EntryState>) -> (RunOutcome, Vec<u64>) {
    let wasm = wat_handler(id);
    let loaded = runtime::wasm::load::load(engine(), &wasm, None).expect("loads");
    assert!(loaded.manifest.probes[0].r#return);
    let mut env = ModelEnv::new();
    env.with_gvars(2);
    env.entry = entry;
    let mut runner = Runner::new(engine(), env).expect("runner");
    runner.add(&loaded, None).expect("instantiate");
    let out = runner.run(0, 0);
    (out, runner.store.data().env.gvars.clone())
}

/// The imports answer the seven entry registers of a return hit, and trap
/// for any other id or outside a return hit (docs/hostabi.md).
#[test]
fn entry_imports_answer_return_hits_and_trap_otherwise() {
    let entry = EntryState {
        regs: [10, 11, 12, 13, 14, 15, 16],
        elapsed_ns: 777,
    };
    for (i, id) in ENTRY_REGS.iter().enumerate() {
        let (out, g) = run_wat(*id, Some(entry));
        assert_eq!(out, RunOutcome::Returned(Outcome::Exit));
        assert_eq!(g, [10 + i as u64, 777]);
    }
    for bad in [regs::RAX, regs::RIP, regs::RDI + regs::ALIAS_BASE, 0xFFFF] {
        let (out, g) = run_wat(bad, Some(entry));
        let RunOutcome::Trapped(msg) = out else {
            panic!("id 0x{bad:x}: {out:?}")
        };
        assert!(
            msg.contains("is not rdi, rsi, rdx, rcx, r8, r9 or rsp"),
            "{msg}"
        );
        assert_eq!(g, [0, 0]);
    }
    let (out, _) = run_wat(regs::RDI, None);
    let RunOutcome::Trapped(msg) = out else {
        panic!("{out:?}")
    };
    assert!(msg.contains("not the return of a return probe"), "{msg}");
}
