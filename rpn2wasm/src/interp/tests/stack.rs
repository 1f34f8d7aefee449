//! The circular RPN stack, stack instructions and the TSP/SBP slot forms.

use super::*;

// ----- stack -----

/// `n` pushes of 1, 2, … n; then S[1023], S[2], S[2] are pushed (that is,
/// the oldest value, n − 1 and n), TSP is saved and the four are logged.
fn after_pushes(n: u64) -> Vec<u64> {
    let mut ops: Vec<Op> = (1..=n).map(PushImm).collect();
    ops.extend([
        SlotImm(SlotOp::Push, StackRel::Tsp, 1023),
        SlotImm(SlotOp::Push, StackRel::Tsp, 2),
        SlotImm(SlotOp::Push, StackRel::Tsp, 2),
        SaveTsp,
        LogN(4),
    ]);
    words(&hit(ops))
}

#[test]
fn circular_stack_wraps_silently() {
    // The first push writes slot 1023.
    assert_eq!(
        words(&hit(vec![PushImm(0xA), SaveTsp, LogN(2)])),
        [1023, 0xA]
    );
    // After n pushes TSP = −n mod 1024 and S[1023] is the oldest surviving
    // value (0 if that slot was never written). Results: TSP before the
    // save (−(n + 3) mod 1024), then S[0], S[1] and S[1023] after the pushes.
    assert_eq!(after_pushes(1023), [1022, 1023, 1022, 0]);
    assert_eq!(after_pushes(1024), [1021, 1024, 1023, 1]);
    assert_eq!(after_pushes(1025), [1020, 1025, 1024, 2]);
    assert_eq!(after_pushes(5000), [117, 5000, 4999, 5000 - 1023]);
    // Popping a fresh stack yields zeros and moves TSP on.
    assert_eq!(words(&hit(vec![LogN(3), SaveTsp, LogN(1)])), [0, 0, 0, 3]);
    // 1024 pops bring TSP back to 0.
    let r = hit(vec![
        Ros(255),
        Ros(255),
        Ros(255),
        Ros(255),
        Ros(4),
        SaveTsp,
        LogN(1),
    ]);
    assert_eq!(words(&r), [0]);
}

#[test]
fn xchg_dup_ros() {
    let r = hit(vec![PushImm(1), PushImm(2), PushImm(3), Xchg, LogN(3)]);
    assert_eq!(words(&r), [2, 3, 1]);
    let r = hit(vec![PushImm(9), PushImm(7), DupImm(0), LogN(2)]);
    assert_eq!(words(&r), [7, 9]);
    let r = hit(vec![PushImm(9), PushImm(7), DupImm(2), LogN(4)]);
    assert_eq!(words(&r), [7, 7, 7, 9]);
    // Stack form: n below, v on top; n mod 256 + 1 copies.
    let r = hit(vec![PushImm(9), PushImm(1), PushImm(7), Dup, LogN(3)]);
    assert_eq!(words(&r), [7, 7, 9]);
    let r = hit(vec![PushImm(9), PushImm(256), PushImm(7), Dup, LogN(2)]);
    assert_eq!(words(&r), [7, 9]);
    let r = hit(vec![PushImm(9), PushImm(0), PushImm(7), Dup, LogN(2)]);
    assert_eq!(words(&r), [7, 9]);
    let r = hit(vec![PushImm(9), PushImm(0x103), PushImm(7), Dup, LogN(5)]);
    assert_eq!(words(&r), [7, 7, 7, 7, 9]);
    let r = hit(vec![PushImm(9), PushImm(8), Ros(0), Ros(1), LogN(1)]);
    assert_eq!(words(&r), [9]);
}

#[test]
fn tsp_and_sbp_slot_forms() {
    use SlotOp::*;
    use StackRel::*;
    let p = |v: &[u64]| v.iter().map(|x| PushImm(*x)).collect::<Vec<_>>();
    let cat = |a: Vec<Op>, b: Vec<Op>| [a, b].concat();
    // push tsp, k: S[k] before the push.
    let r = hit(cat(p(&[10, 20, 30]), vec![SlotImm(Push, Tsp, 2), LogN(1)]));
    assert_eq!(words(&r), [10]);
    // push tsp: k popped first, S[k] relative to TSP after the pop.
    let r = hit(cat(p(&[10, 20, 30, 2]), vec![Slot(Push, Tsp), LogN(4)]));
    assert_eq!(words(&r), [10, 30, 20, 10]);
    // Negative k: S[−1] is the slot just above TOS.
    let r = hit(cat(
        p(&[10, 20, 30]),
        vec![Ros(1), SlotImm(Push, Tsp, -1), LogN(1)],
    ));
    assert_eq!(words(&r), [30]);
    let r = hit(cat(
        p(&[10, 20, 30, u64::MAX]),
        vec![Slot(Push, Tsp), LogN(1)],
    ));
    assert_eq!(words(&r), [u64::MAX]);
    // −32768 ≡ 0 (mod 1024).
    let r = hit(cat(p(&[10, 20]), vec![SlotImm(Push, Tsp, -32768), LogN(1)]));
    assert_eq!(words(&r), [20]);
    // pop tsp, 1 overwrites NOS with TOS and drops TOS.
    let r = hit(cat(
        p(&[0x33, 0x44, 0x55]),
        vec![SlotImm(Pop, Tsp, 1), LogN(2)],
    ));
    assert_eq!(words(&r), [0x55, 0x33]);
    // pop tsp: v then k popped; S[k] relative to TSP after both pops.
    let r = hit(cat(p(&[1, 2, 3, 1, 9]), vec![Slot(Pop, Tsp), LogN(3)]));
    assert_eq!(words(&r), [3, 9, 1]);
    // copy tsp, k and copy tsp.
    let r = hit(cat(
        p(&[10, 20, 30, 99]),
        vec![SlotImm(Copy, Tsp, 3), LogN(4)],
    ));
    assert_eq!(words(&r), [99, 30, 20, 99]);
    let r = hit(cat(p(&[1, 2, 3, 2]), vec![Slot(Copy, Tsp), LogN(3)]));
    assert_eq!(words(&r), [3, 2, 3]);
    // SBP starts at 0: B[−1] is slot 1023, the first push.
    let r = hit(cat(p(&[0x11, 0x22]), vec![SlotImm(Push, Sbp, -1), LogN(1)]));
    assert_eq!(words(&r), [0x11]);
    // SBP frame: save tsp / restore sbp.
    let r = hit(cat(
        p(&[0x77, 0x66]),
        vec![
            SaveTsp,
            RestoreSbp,
            PushImm(0xEE),
            SlotImm(Push, Sbp, 1),
            SlotImm(Push, Sbp, 0),
            PushImm(1),
            Slot(Push, Sbp),
            SlotImm(Pop, Sbp, 1),  // B[1] := 0x77 (TOS), popped
            SlotImm(Copy, Sbp, 0), // B[0] := 0x66 (TOS)
            PushImm(0),
            PushImm(0x55),
            Slot(Pop, Sbp), // B[0] := 0x55
            PushImm(1),
            Slot(Copy, Sbp), // B[1] := 0x66 (TOS after popping k)
            SaveSbp,
            LogN(6),
        ],
    ));
    assert_eq!(words(&r), [1022, 0x66, 0x77, 0xEE, 0x55, 0x66]);
    // restore tsp takes the value mod 1024.
    let r = hit(vec![
        PushImm(5000),
        RestoreTsp,
        SaveTsp,
        PushImm(u64::MAX),
        RestoreSbp,
        SaveSbp,
        LogN(2),
    ]);
    assert_eq!(words(&r), [1023, 904]);
}
