//! Branches, the jump counter (`jmpmax`, `loop`) and procedures (`call`,
//! `ret`, call depth).

use super::*;

// ----- branches and jmpmax -----

#[test]
fn conditional_jumps_test_tos_without_popping() {
    let min = i64::MIN as u64;
    let max = i64::MAX as u64;
    type J = fn(InsnIdx) -> Op;
    type Pred = fn(i64) -> bool;
    let table: [(J, Pred); 6] = [
        (Jz, |v| v == 0),
        (Jnz, |v| v != 0),
        (Jlt, |v| v < 0),
        (Jle, |v| v <= 0),
        (Jgt, |v| v > 0),
        (Jge, |v| v >= 0),
    ];
    for (j, pred) in table {
        for v in [0, 1, u64::MAX, min, max] {
            let r = hit(vec![PushImm(v), j(3), PushImm(0xF), PushImm(7), LogN(2)]);
            let want = if pred(v as i64) { [7, v] } else { [7, 0xF] };
            assert_eq!(words(&r), want, "{:?} {v:#x}", j(3));
        }
    }
}

#[test]
fn jmpmax_counts_loop_executions_and_saturates() {
    let b = Builder::new().header(|h| h.jmpmax = 3).probe(vec![
        Sx(4),
        PushImm(10),
        Loop(2), // 3 executions allowed, the 4th raises without decrementing
        Exit,
        LogN(4),
        Sx(7),
        Jmp(6), // saturated: raises again
        LogN(3),
        PushImm(1),
        Jz(0), // not taken: not counted, no exception
        LogN(1),
        PushImm(1),
        Jnz(0), // taken: raises, nobody catches it
        PushImm(0xDEAD),
        LogN(1),
    ]);
    let r = hit_with(b);
    assert_eq!(words(&r), [MAXJ, 3, 0, 7, MAXJ, 3, 0, 1]);
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(r.last_exception, (MAXJ, NONE, 3, 0));
}

#[test]
fn loop_counts_untaken_executions_and_wraps_from_zero() {
    let b = Builder::new().header(|h| h.jmpmax = 1).probe(vec![
        Sx(6),
        PushImm(1),
        Loop(2), // TOS 1 → 0, not taken, but counted
        PushImm(2),
        Loop(4), // limit reached: TOS stays 2
        Exit,
        LogN(5),
    ]);
    assert_eq!(words(&hit_with(b)), [MAXJ, 1, 0, 2, 0]);
    let b = Builder::new().header(|h| h.jmpmax = 5).probe(vec![
        Sx(4),
        PushImm(0),
        Loop(2),
        Exit,
        LogN(4),
    ]);
    assert_eq!(words(&hit_with(b)), [MAXJ, 5, 0, u64::MAX - 4]);
    let b = Builder::new().header(|h| h.jmpmax = 0).probe(vec![
        PushImm(1),
        LogN(1),
        Jmp(3),
        PushImm(2),
        LogN(1),
    ]);
    let r = hit_with(b);
    assert_eq!(words(&r), [1]);
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(r.last_exception, (MAXJ, NONE, 0, 0));
}

// ----- procedures -----

#[test]
fn call_and_ret_pass_results_on_the_stack_and_restore_sbp() {
    let b = Builder::new()
        .probe(vec![PushImm(1), Call(0), PushImm(3), SaveSbp, LogN(4)])
        .proc_("p", vec![PushImm(2), PushImm(7), RestoreSbp]);
    assert_eq!(words(&hit_with(b)), [0, 3, 2, 1]);
}

#[test]
fn call_depth_limit_is_32_frames() {
    let b = Builder::new()
        .header(|h| h.vars = 1)
        .probe(vec![
            Sx(3),
            Call(0),
            Exit,
            LogN(3),
            VarImm(VarOp::Push, VarSpace::Local, 0),
            LogN(1),
        ])
        .proc_("rec", vec![VarImm(VarOp::Inc, VarSpace::Local, 0), Call(0)]);
    assert_eq!(words(&hit_with(b)), [CSO, 32, 0, 32]);
}

#[test]
fn ret_in_the_base_frame_raises() {
    let r = hit(vec![Sx(2), Ret, LogN(3)]);
    assert_eq!(words(&r), [CSO, 0, 0]);
    let r = hit(vec![PushImm(1), LogN(1), Ret, PushImm(2), LogN(1)]);
    assert_eq!(words(&r), [1]);
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(r.last_exception, (CSO, NONE, 0, 0));
}
