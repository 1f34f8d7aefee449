//! Edge operands: every arithmetic, logic, shift, rotate
//! and bit-propagation instruction on 0, 1, −1, i64 min/max, 2^32±1 and the
//! shift counts 0/63/64/65, in both engines; plus the exact results the
//! spec pins down (division by zero, MIN / −1, counts taken mod 64).

use hostabi::Outcome;
use rpn2wasm::model::ModelEnv;
use wprobe_tests::randprog::EDGE_VALUES;
use wprobe_tests::{HitResult, Pair, build_text};

/// Runs `cases` (each a body) as probes of one program in both engines.
fn run_cases(cases: &[String]) -> Vec<HitResult> {
    let mut src = String::from("name = edge\nexcpt_mask = 0x0fff\n");
    for (i, body) in cases.iter().enumerate() {
        src.push_str(&format!(
            "address = 0x{:x}\nopcode = 0x55\nsx h\n{body}\nlog 3\nexit\nh: log 3\n",
            0x1000 + i
        ));
    }
    let mut pair = Pair::new(build_text(&src), None);
    let env = ModelEnv::new();
    (0..cases.len())
        .map(|i| pair.both(i, &env, &cases[i]).expect("no budget issue"))
        .collect()
}

fn words(r: &HitResult) -> Vec<u64> {
    rpn2wasm::interp::Record::clone(&r.records[0])
        .data
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn v(x: u64) -> String {
    format!("0x{x:x}")
}

#[test]
fn binary_operators_on_edge_values() {
    for op in [
        "add", "sub", "mul", "and", "or", "xor", "div", "idiv", "shl", "shr", "rol", "ror", "xchg",
    ] {
        let mut cases = Vec::new();
        for x in EDGE_VALUES {
            for y in EDGE_VALUES {
                cases.push(format!("push {}\npush {}\n{op}", v(*x), v(*y)));
            }
        }
        let res = run_cases(&cases);
        assert_eq!(res.len(), EDGE_VALUES.len().pow(2), "{op}");
    }
}

#[test]
fn unary_and_immediate_forms_on_edge_values() {
    let mut cases = Vec::new();
    for x in EDGE_VALUES {
        cases.push(format!("push {}\nneg", v(*x)));
        for n in [0, 1, 31, 32, 63, 64, 65, 255] {
            for op in ["shl", "shr", "rol", "ror"] {
                cases.push(format!("push {}\n{op} {n}", v(*x)));
            }
        }
        for n in [1, 2, 8, 31, 32, 33, 63, 64] {
            for op in ["pbl", "pbr", "pzl", "pzr"] {
                cases.push(format!("push {}\n{op} {n}", v(*x)));
            }
        }
        for n in [0u64, 1, 32, 64, 65, u64::MAX] {
            for op in ["pbl", "pbr", "pzl", "pzr"] {
                cases.push(format!("push {}\npush {}\n{op}", v(*x), v(n)));
            }
        }
    }
    let res = run_cases(&cases);
    assert_eq!(res.len(), cases.len());
}

#[test]
fn pinned_results() {
    let min = i64::MIN as u64;
    let cases = [
        format!("push {}\npush {}\nidiv", v(min), v(u64::MAX)), // MIN / -1
        "push 5\npush 0\ndiv".to_string(),                      // divide by zero
        "push -17\npush 5\nidiv".to_string(),                   // truncation toward zero
        "push 64\npush 0x81\nshl".to_string(),                  // count mod 64
        "push 3\npush 5\nsub".to_string(),                      // TOS - NOS
        "push 0x80\npbl 8".to_string(),
        "push 0x1234\npush 0\npzr".to_string(), // INVALID_OPERAND(3, 0), v not popped
    ];
    let r = run_cases(&cases);
    // log 3 after the operation logs the top three words (TOS first).
    assert_eq!(words(&r[0])[..2], [min, 0]);
    assert_eq!(words(&r[1]), [0x20, 0, 0], "DIVIDE_BY_ZERO(0, 0) caught");
    assert_eq!(words(&r[2])[..2], [-3i64 as u64, -2i64 as u64]);
    assert_eq!(words(&r[3])[0], 0x81);
    assert_eq!(words(&r[4])[0], 2);
    assert_eq!(words(&r[5])[0], 0xFFFF_FFFF_FFFF_FF80);
    assert_eq!(words(&r[6]), [0x40, 3, 0]);
    assert!(r.iter().all(|x| x.outcome == Some(Outcome::Exit)));
}

#[test]
fn circular_stack_wraps_at_1024() {
    for pushes in [1023u32, 1024, 1025, 5000] {
        let src = format!(
            "name = wrap\njmpmax = 65535\naddress = 0x1000\nopcode = 0x55\npush {pushes}\nl: dup 1\nloop l\nros 1\nlog 8\npush 0\npush 3\ntrace pv\nsave tsp\nlog 1\n"
        );
        let mut pair = Pair::new(build_text(&src), None);
        let r = pair
            .both(0, &ModelEnv::new(), &format!("{pushes} pushes"))
            .unwrap();
        assert_eq!(r.outcome, Some(Outcome::Exit));
    }
}
