//! Arithmetic and logic, division, shifts and rotates, bit propagation.

use super::*;

// ----- arithmetic -----

#[test]
fn add_sub_mul_logic_wrap() {
    let min = i64::MIN as u64;
    let max = i64::MAX as u64;
    let r = hit(vec![
        PushImm(max),
        PushImm(1),
        Add, // MIN
        PushImm(u64::MAX),
        PushImm(1),
        Add, // 0
        PushImm(5),
        PushImm(3),
        Sub, // 3 − 5 (TOS − NOS)
        PushImm(1),
        PushImm(min),
        Sub, // MIN − 1 = MAX
        PushImm((1 << 32) + 1),
        PushImm((1 << 32) - 1),
        Mul, // 2^64 − 1
        PushImm(u64::MAX),
        PushImm(u64::MAX),
        Mul, // 1
        PushImm(0xF0F0),
        PushImm(0xFF00),
        And,
        PushImm(0xF0F0),
        PushImm(0xFF00),
        Or,
        PushImm(0xF0F0),
        PushImm(0xFF00),
        Xor,
        PushImm(0),
        Neg,
        PushImm(min),
        Neg,
        LogN(11),
    ]);
    let mut expect = vec![
        min,
        0,
        -2i64 as u64,
        max,
        u64::MAX,
        1,
        0xF000,
        0xFFF0,
        0x0FF0,
        u64::MAX,
        max,
    ];
    expect.reverse();
    assert_eq!(words(&r), expect);
}

#[test]
fn div_and_idiv_edges() {
    let min = i64::MIN as u64;
    let cases: [(u64, u64, Op, u64, u64); 9] = [
        (17, 5, Div, 3, 2),
        (u64::MAX, 2, Div, u64::MAX / 2, 1),
        (min, u64::MAX, Div, 0, min),
        (1, u64::MAX, Div, 0, 1),
        (-17i64 as u64, 5, Idiv, -3i64 as u64, -2i64 as u64),
        (17, -5i64 as u64, Idiv, -3i64 as u64, 2),
        (-17i64 as u64, -5i64 as u64, Idiv, 3, -2i64 as u64),
        (min, u64::MAX, Idiv, min, 0),
        (i64::MAX as u64, u64::MAX, Idiv, min + 1, 0),
    ];
    for (x, y, op, quot, rem) in cases {
        let r = hit(vec![PushImm(x), PushImm(y), op.clone(), LogN(2)]);
        assert_eq!(words(&r), [quot, rem], "{x:#x} {op:?} {y:#x}");
    }
}

#[test]
fn division_by_zero_pops_both_and_pushes_nothing() {
    for op in [Div, Idiv] {
        let r = hit(vec![
            Sx(6),
            PushImm(0xAA),
            PushImm(5),
            PushImm(0),
            op.clone(),
            LogN(1),
            LogN(4),
        ]);
        assert_eq!(words(&r), [DBZ, 0, 0, 0xAA]);
        assert_eq!(r.outcome, Outcome::Exit);
        // Uncaught: the run ends, records still produced.
        let r = hit(vec![PushImm(5), PushImm(0), op, PushImm(1), LogN(1)]);
        assert_eq!(r.outcome, Outcome::Uncaught);
        assert_eq!(data(&r), &[] as &[u8]);
        assert_eq!(r.last_exception, (DBZ, NONE, 0, 0));
    }
}

#[test]
fn shifts_and_rotates_take_count_mod_64() {
    let v = 0x8000_0000_0000_0001u64;
    let cases: [(ShiftOp, u64, u64); 16] = [
        (ShiftOp::Shl, 0, v),
        (ShiftOp::Shl, 1, 2),
        (ShiftOp::Shl, 63, 0x8000_0000_0000_0000),
        (ShiftOp::Shl, 64, v),
        (ShiftOp::Shl, 65, 2),
        (ShiftOp::Shr, 0, v),
        (ShiftOp::Shr, 63, 1),
        (ShiftOp::Shr, 64, v),
        (ShiftOp::Shr, 65, 0x4000_0000_0000_0000),
        (ShiftOp::Rol, 1, 3),
        (ShiftOp::Rol, 64, v),
        (ShiftOp::Rol, 65, 3),
        (ShiftOp::Ror, 1, 0xC000_0000_0000_0000),
        (ShiftOp::Ror, 63, 3),
        (ShiftOp::Ror, 65, 0xC000_0000_0000_0000),
        (ShiftOp::Rol, 255, 0xC000_0000_0000_0000),
    ];
    for (op, c, want) in cases {
        let r = hit(vec![PushImm(v), ShiftImm(op, c as u8), LogN(1)]);
        assert_eq!(words(&r), [want], "{op:?} {c}");
        // Stack form: count below, value on top.
        let r = hit(vec![PushImm(c), PushImm(v), Shift(op), LogN(1)]);
        assert_eq!(words(&r), [want], "{op:?} {c} (stack)");
    }
    let r = hit(vec![
        PushImm(u64::MAX),
        PushImm(v),
        Shift(ShiftOp::Shl),
        LogN(1),
    ]);
    assert_eq!(words(&r), [0x8000_0000_0000_0000]);
    let r = hit(vec![
        PushImm(1 << 32),
        PushImm(v),
        Shift(ShiftOp::Shr),
        LogN(1),
    ]);
    assert_eq!(words(&r), [v]);
}

#[test]
fn bit_propagation_edges() {
    use PropOp::*;
    let cases: [(PropOp, u64, u64, u64); 17] = [
        (Pbl, 8, 0x80, 0xFFFF_FFFF_FFFF_FF80),
        (Pbl, 8, 0x17F, 0x7F),
        (Pbl, 1, 0x11, u64::MAX),
        (Pbl, 1, 0xFFFF_FFFF_FFFF_FFFE, 0),
        (Pbl, 64, 0x8000_0000_0000_0001, 0x8000_0000_0000_0001),
        (Pbl, 63, 0x4000_0000_0000_0000, 0xC000_0000_0000_0000),
        (Pbr, 1, 0x1234, 0x1234),
        (Pbr, 8, 0x1280, 0x12FF),
        (Pbr, 8, 0x127F, 0x1200),
        (Pbr, 64, 0x8000_0000_0000_0000, u64::MAX),
        (Pbr, 64, 0x7FFF_FFFF_FFFF_FFFF, 0),
        (Pzl, 1, 0xFF, 1),
        (Pzl, 16, 0x12345, 0x2345),
        (Pzl, 64, u64::MAX, u64::MAX),
        (Pzr, 1, u64::MAX, u64::MAX),
        (Pzr, 4, 0x1234, 0x1230),
        (Pzr, 64, u64::MAX, 0x8000_0000_0000_0000),
    ];
    for (op, n, v, want) in cases {
        let r = hit(vec![PushImm(v), PropImm(op, n as u8), LogN(1)]);
        assert_eq!(words(&r), [want], "{op:?} {n} {v:#x}");
        let r = hit(vec![PushImm(v), PushImm(n), Prop(op), LogN(1)]);
        assert_eq!(words(&r), [want], "{op:?} {n} {v:#x} (stack)");
    }
    // Stack form with a bad bit number: v is not popped.
    for n in [0u64, 65, u64::MAX] {
        let r = hit(vec![
            Sx(5),
            PushImm(0x1234),
            PushImm(n),
            Prop(Pbr),
            Exit,
            LogN(4),
        ]);
        assert_eq!(words(&r), [IOP, 3, n, 0x1234]);
    }
}
