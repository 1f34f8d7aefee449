//! Unit tests of the reference interpreter on hand-built programs.

use super::*;
use crate::ast::{
    Body, BodyOwner, FileHeader, Insn, LocationKind, Op, Probe, Proc, SlotOp, StackRel, VarOp,
    VarSpace, Width,
};
use crate::model::ModelEnv;
use crate::source::Span;
use Op::*;
use hostabi::record::{ItemKind, LogItem, decode_stacktrace};
use hostabi::regs;

// ----- builder -----

/// Builds a checked-looking program: probe bodies first, then procedures,
/// each with its implicit terminator, offsets laid out as in §15.
struct Builder {
    header: FileHeader,
    probes: Vec<(Probe, Vec<Op>)>,
    procs: Vec<(String, Vec<Op>)>,
}

fn probe_cfg(value: u64) -> Probe {
    Probe {
        kind: LocationKind::Offset,
        symbol: None,
        value,
        addend: 0,
        length: 1,
        opcode: Some(0x55),
        watch: None,
        group: None,
        r#type: None,
        minor: 0,
        ignore: 0,
        maxhits: 0x7FFF_FFFF,
        logonfault: false,
        excpt_mask: 0x0FFF,
        heap: 0,
        r#return: false,
        maxactive: 0,
        usdt: Vec::new(),
        body: 0,
        span: Span::default(),
    }
}

impl Builder {
    fn new() -> Builder {
        Builder {
            header: FileHeader {
                name: "probe_target".into(),
                ..FileHeader::default()
            },
            probes: Vec::new(),
            procs: Vec::new(),
        }
    }

    fn header(mut self, f: impl FnOnce(&mut FileHeader)) -> Builder {
        f(&mut self.header);
        self
    }

    fn probe(mut self, ops: Vec<Op>) -> Builder {
        let mut p = probe_cfg(0x401146);
        p.excpt_mask = self.header.excpt_mask;
        p.heap = self.header.heap;
        self.probes.push((p, ops));
        self
    }

    /// Adjusts the last probe.
    fn cfg(mut self, f: impl FnOnce(&mut Probe)) -> Builder {
        if let Some((p, _)) = self.probes.last_mut() {
            f(p);
        }
        self
    }

    fn proc_(mut self, name: &str, ops: Vec<Op>) -> Builder {
        self.procs.push((name.into(), ops));
        self
    }

    fn build(self) -> Program {
        let mut bodies = Vec::new();
        let mut probes = Vec::new();
        let mut procs = Vec::new();
        let mut offset = 0u32;
        let mut lay = |owner: BodyOwner, mut ops: Vec<Op>, term: Op| {
            ops.push(term);
            let insns = ops
                .into_iter()
                .map(|op| {
                    let insn = Insn {
                        span: Span::default(),
                        offset,
                        op,
                    };
                    offset += insn.op.size();
                    insn
                })
                .collect();
            bodies.push(Body { owner, insns });
            bodies.len() - 1
        };
        for (i, (mut p, ops)) in self.probes.into_iter().enumerate() {
            p.body = lay(BodyOwner::Probe(i), ops, Exit);
            probes.push(p);
        }
        for (i, (name, ops)) in self.procs.into_iter().enumerate() {
            let body = lay(BodyOwner::Proc(i), ops, Ret);
            procs.push(Proc {
                name,
                body,
                span: Span::default(),
            });
        }
        Program {
            header: self.header,
            probes,
            procs,
            bodies,
            code_size: offset,
        }
    }
}

fn run_on(p: &Program, probe: usize, env: &mut ModelEnv) -> RunResult {
    let mut st = ProgramState::new(p);
    run(p, probe, &mut st, env, &Limits::default())
}

/// Runs probe 0 of a one-probe program with default header on a target_fn(5) hit.
fn hit(ops: Vec<Op>) -> RunResult {
    let p = Builder::new().probe(ops).build();
    run_on(&p, 0, &mut ModelEnv::probe_target_hit(5))
}

fn hit_with(b: Builder) -> RunResult {
    let p = b.build();
    run_on(&p, 0, &mut ModelEnv::probe_target_hit(5))
}

fn data(r: &RunResult) -> &[u8] {
    &r.records[0].data
}

fn words(r: &RunResult) -> Vec<u64> {
    data(r)
        .chunks(8)
        .map(|c| {
            let mut a = [0u8; 8];
            a[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(a)
        })
        .collect()
}

fn item(offset: u16, kind: ItemKind) -> u32 {
    LogItem { offset, kind }.encode()
}

fn le(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

const IA: u64 = 0x0001;
const MAXJ: u64 = 0x0004;
const CSO: u64 = 0x0010;
const DBZ: u64 = 0x0020;
const IOP: u64 = 0x0040;
const IOPC: u64 = 0x0080;
const LOGOV: u64 = 0x1000;
const NONE: u64 = HANDLER_NONE;

// ----- spec examples -----

#[test]
fn spec_11_6_example() {
    let r = hit(vec![
        PushImm(7),
        PushImm(9),
        LogN(2),
        PushImm(2),
        PushImm(1),
        PushImm(2),
        Log,
    ]);
    let expect: Vec<u8> = [&le(9)[..], &le(7), &[7, 2, 0], &le(1), &le(2)].concat();
    assert_eq!(data(&r), &expect[..]);
    assert_eq!(data(&r).len(), 35);
    assert_eq!(
        r.records[0].items,
        [item(0, ItemKind::RawWords), item(16, ItemKind::Tokenized)]
    );
    assert_eq!(r.outcome, Outcome::Exit);
    assert_eq!(r.records.len(), 1);
    assert_eq!(r.insns, 8);
    assert_eq!(r.last_exception, (0, NONE, 0, 0));
}

#[test]
fn appendix_b_worked_example() {
    let p = Builder::new()
        .header(|h| h.major = 7)
        .probe(vec![PushImm(3), PushImm(2), LogN(1), Loop(1), LogN(1)])
        .build();
    let offs: Vec<u32> = p.bodies[0].insns.iter().map(|i| i.offset).collect();
    assert_eq!(offs, [0, 9, 18, 21, 30, 33]);
    assert_eq!(p.code_size, 34);
    let r = run_on(&p, 0, &mut ModelEnv::probe_target_hit(0));
    let mut expect = Vec::new();
    for _ in 0..3 {
        expect.extend(le(2));
    }
    expect.extend(le(0));
    assert_eq!(data(&r), &expect[..]);
    assert_eq!(r.records[0].kind, RecordKind::Log { major: 7, minor: 0 });
    assert_eq!(r.records[0].items.len(), 4);
}

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

// ----- exceptions -----

#[test]
fn masked_maskable_exception_is_ignored() {
    // LOG_OVERFLOW is masked by default: the instruction ends, the run goes on.
    let b = Builder::new().header(|h| h.logmax = 8).probe(vec![
        PushImm(1),
        PushImm(2),
        LogN(2),
        PushImm(5),
        Add,
        PushImm(3),
        Sub,
        PopLp, // LP := min(3 − 6, LP): no change
        SaveTsp,
        PushImm(0),
        Sx(14),
        Rx, // x-field 0: ignored
        Exit,
        Exit,
        PushImm(0xBAD),
    ]);
    let r = hit_with(b);
    assert_eq!(words(&r), [2]);
    assert_eq!(r.outcome, Outcome::Exit);
    assert_eq!(r.last_exception, (0, NONE, 0, 0));
}

#[test]
fn masked_non_maskable_exception_terminates() {
    let b = Builder::new()
        .probe(vec![
            Sx(5),
            PushImm(0xAB),
            LogN(1),
            PushImm(0x10),
            PushMem(Width::U64),
            PushImm(0xCD),
            LogN(1),
        ])
        .cfg(|p| p.excpt_mask = 0x0FFE);
    let p = b.build();
    let r = run_on(&p, 0, &mut ModelEnv::probe_target_hit(0));
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(words(&r), [0xAB]);
    let h = u64::from(p.bodies[0].insns[5].offset);
    assert_eq!(r.last_exception, (IA, h, 0x10, 0));
}

#[test]
fn handlers_are_one_shot() {
    let r = hit(vec![
        Sx(5),
        PushImm(1),
        PushImm(0),
        Div,
        Exit,
        LogN(3),
        PushImm(1),
        PushImm(0),
        Div,
        PushImm(0xEE),
        LogN(1),
    ]);
    assert_eq!(words(&r), [DBZ, 0, 0]);
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(r.last_exception, (DBZ, NONE, 0, 0));
    // ux clears a handler.
    let r = hit(vec![Sx(5), Ux, PushImm(1), PushImm(0), Div, LogN(3)]);
    assert_eq!(r.outcome, Outcome::Uncaught);
    // The most recent sx wins.
    let r = hit(vec![
        Sx(6),
        Sx(7),
        PushImm(1),
        PushImm(0),
        Div,
        Exit,
        PushImm(0x66),
        LogN(1),
    ]);
    assert_eq!(words(&r), [DBZ]);
}

#[test]
fn propagation_through_implicit_returns_restores_sbp() {
    let b = Builder::new()
        .probe(vec![
            Sx(6),
            PushImm(0x11),
            SaveTsp,
            RestoreSbp, // SBP = 1023
            Call(0),
            Exit,
            LogN(3),
            SaveSbp,
            LogN(1),
            Ros(1),
            LogN(1),
        ])
        .proc_("outer", vec![PushImm(0x22), SaveTsp, RestoreSbp, Call(1)])
        .proc_(
            "inner",
            vec![PushImm(7), RestoreSbp, PushImm(1), PushImm(0), Div],
        );
    let r = hit_with(b);
    assert_eq!(words(&r), [DBZ, 0, 0, 1023, 0x11]);
    assert_eq!(r.last_exception, (DBZ, NONE, 0, 0));
    assert_eq!(r.outcome, Outcome::Exit);
}

#[test]
fn handler_in_an_intermediate_frame_and_last_exception_handler_offset() {
    let b = Builder::new()
        .probe(vec![Call(0), PushImm(0xF1), LogN(1)])
        .proc_(
            "mid",
            vec![Sx(3), Call(1), Ret, LogN(3), PushImm(0xF0), LogN(1)],
        )
        .proc_("leaf", vec![Sx(3), PushImm(0x10), PushMem(Width::U8), Ret]);
    let p = b.build();
    let r = run_on(&p, 0, &mut ModelEnv::probe_target_hit(0));
    // leaf's own handler catches first (one-shot), then returns normally.
    // Note: leaf's handler index 3 is its `ret`.
    assert_eq!(words(&r), [0xF1]);
    let leaf = p.procs[1].body;
    let h = u64::from(p.bodies[leaf].insns[3].offset);
    assert_eq!(r.last_exception, (IA, h, 0x10, 0));
    // Without a handler in leaf, mid's catches.
    let b = Builder::new()
        .probe(vec![Call(0), PushImm(0xF1), LogN(1)])
        .proc_(
            "mid",
            vec![Sx(3), Call(1), Ret, LogN(3), PushImm(0xF0), LogN(1)],
        )
        .proc_("leaf", vec![PushImm(0x10), PushMem(Width::U8)]);
    let r = hit_with(b);
    assert_eq!(words(&r), [IA, 0x10, 0, 0xF0, 0xF1]);
    assert_eq!(r.last_exception, (IA, NONE, 0x10, 0));
}

#[test]
fn push_x_and_rx_obey_the_mask() {
    // push x initially: 0, 0, 0.
    let r = hit(vec![PushX, LogN(3)]);
    assert_eq!(words(&r), [0, 0, 0]);
    // USER masked (default): rx does nothing, the stack is untouched.
    let r = hit(vec![
        PushImm(0x99),
        PushImm(2),
        PushImm(1),
        PushImm(0x3_8000),
        Rx,
        LogN(4),
    ]);
    assert_eq!(words(&r), [0x3_8000, 1, 2, 0x99]);
    assert_eq!(r.last_exception, (0, NONE, 0, 0));
    // USER enabled: the handler sees the same three words, pushed once.
    let b = Builder::new()
        .probe(vec![
            Sx(7),
            PushImm(0x99),
            PushImm(2),
            PushImm(1),
            PushImm(0x3_8000),
            Rx,
            Exit,
            LogN(4),
            PushX,
            LogN(3),
        ])
        .cfg(|p| p.excpt_mask = 0x8FFF);
    let p = b.build();
    let r = run_on(&p, 0, &mut ModelEnv::new());
    assert_eq!(words(&r), [0x3_8000, 1, 2, 0x99, 0x3_8000, 1, 2]);
    let h = u64::from(p.bodies[0].insns[7].offset);
    assert_eq!(r.last_exception, (0x3_8000, h, 1, 2));
    // rx of a non-maskable code behaves like that exception; masked: terminates.
    let r = hit(vec![
        PushImm(0),
        PushImm(5),
        PushImm(IA),
        Rx,
        PushImm(7),
        LogN(1),
    ]);
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(r.last_exception, (IA, NONE, 5, 0));
    let b = Builder::new()
        .probe(vec![
            PushImm(0),
            PushImm(5),
            PushImm(IA),
            Rx,
            PushImm(7),
            LogN(1),
        ])
        .cfg(|p| p.excpt_mask = 0);
    let r = hit_with(b);
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(data(&r), &[] as &[u8]);
}

#[test]
fn exit_facilities_and_terminations() {
    for (n, o) in [
        (1u8, Outcome::DebuggerHandoff),
        (2, Outcome::CrashDump),
        (3, Outcome::CoreDump),
    ] {
        let r = hit(vec![PushImm(4), LogN(1), ExitN(n), PushImm(5), LogN(1)]);
        assert_eq!(r.outcome, o);
        assert_eq!(words(&r), [4]);
    }
    for n in [0u8, 4, 7, 255] {
        let r = hit(vec![Sx(2), ExitN(n), LogN(3)]);
        assert_eq!(words(&r), [IOP, 4, u64::from(n)]);
    }
    let r = hit(vec![PushImm(4), LogN(1), Abort]);
    assert_eq!(r.outcome, Outcome::Abort);
    assert!(r.records.is_empty());
    let r = hit(vec![
        PushImm(4),
        LogN(1),
        LogSt,
        Remove,
        PushImm(5),
        LogN(1),
    ]);
    assert_eq!(r.outcome, Outcome::Remove);
    assert_eq!(r.records.len(), 2);
    assert_eq!(words(&r), [4]);
    // Implicit exit: an empty body still produces an (empty) log record.
    let r = hit(vec![]);
    assert_eq!(r.outcome, Outcome::Exit);
    assert_eq!(r.records.len(), 1);
    assert_eq!(r.records[0].kind, RecordKind::Log { major: 1, minor: 0 });
    assert!(r.records[0].data.is_empty() && r.records[0].items.is_empty());
    assert_eq!(r.insns, 1);
}

#[test]
fn reserved_instructions_raise_invalid_opcode_with_their_offset() {
    let b = Builder::new().probe(vec![
        Sx(3),
        PushImm(1),
        Suspend,
        LogN(3),
        Sx(6),
        Resume,
        LogN(3),
    ]);
    let p = b.build();
    let r = run_on(&p, 0, &mut ModelEnv::new());
    let o2 = u64::from(p.bodies[0].insns[2].offset);
    let o5 = u64::from(p.bodies[0].insns[5].offset);
    assert_eq!((o2, o5), (18, 31));
    assert_eq!(words(&r), [IOPC, 0x0F, o2, IOPC, 0x10, o5]);
}

#[test]
fn instruction_budget() {
    let p = Builder::new().probe(vec![PushImm(1), LogN(1)]).build();
    let lim = |n| Limits {
        insn_budget: n,
        ..Limits::default()
    };
    let mut st = ProgramState::new(&p);
    let r = run(&p, 0, &mut st, &mut ModelEnv::new(), &lim(3));
    assert_eq!((r.outcome, r.insns), (Outcome::Exit, 3));
    let r = run(&p, 0, &mut st, &mut ModelEnv::new(), &lim(2));
    assert_eq!((r.outcome, r.insns), (Outcome::BudgetExceeded, 2));
    assert_eq!(words(&r), [1]);
    let r = run(&p, 0, &mut st, &mut ModelEnv::new(), &lim(0));
    assert_eq!((r.outcome, r.insns), (Outcome::BudgetExceeded, 0));
    assert_eq!(r.records.len(), 1);
    // A handler loop that never branches: only the budget stops it.
    let p = Builder::new()
        .probe(vec![Sx(0), PushImm(1), PushImm(0), Div])
        .build();
    let r = run(&p, 0, &mut st, &mut ModelEnv::new(), &lim(1000));
    assert_eq!((r.outcome, r.insns), (Outcome::BudgetExceeded, 1000));
    assert_eq!(Limits::default().insn_budget, 16_777_216);
}

#[test]
fn out_of_range_probe_runs_nothing() {
    let p = Builder::new().probe(vec![]).build();
    let r = run_on(&p, 1, &mut ModelEnv::new());
    assert_eq!(r.outcome, Outcome::Abort);
    assert!(r.records.is_empty());
}

#[test]
fn setmin_setmaj() {
    let b = Builder::new()
        .header(|h| h.major = 9)
        .probe(vec![
            PushImm(0x1_2345),
            SetMin,
            PushImm(0x1_0000),
            SetMaj, // low 16 bits 0: unchanged
        ])
        .cfg(|p| p.minor = 4);
    let r = hit_with(b);
    assert_eq!(
        r.records[0].kind,
        RecordKind::Log {
            major: 9,
            minor: 0x2345
        }
    );
    let r = hit(vec![
        SetMinImm(7),
        SetMajImm(0xFFFF),
        PushImm(0x5_0003),
        SetMaj,
    ]);
    assert_eq!(r.records[0].kind, RecordKind::Log { major: 3, minor: 7 });
}

// ----- logging -----

fn logmax(n: u16) -> Builder {
    Builder::new().header(|h| h.logmax = n)
}

#[test]
fn log_overflow_partial_writes_and_plp_backout() {
    let b = logmax(40).header(|h| h.excpt_mask = 0x1FFF).probe(vec![
        Sx(10),
        PushImm(0xAA),
        LogN(1),
        PushImm(1),
        PushImm(2),
        PushImm(3),
        PushImm(4),
        PushImm(5),
        LogN(5), // 4 of 5 fit
        Exit,
        PushLp,
        PushPlp,
        PopLp,
        LogN(4),
        LogN(1), // no room: LOG_OVERFLOW again, uncaught
    ]);
    let r = hit_with(b);
    assert_eq!(words(&r), [0xAA, 40, LOGOV, 40, 0]);
    assert_eq!(
        r.records[0].items,
        [item(0, ItemKind::RawWords), item(8, ItemKind::RawWords)]
    );
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(r.last_exception, (LOGOV, NONE, 40, 0));
}

#[test]
fn log_b_partial_and_plp_with_masked_overflow() {
    let p = logmax(3)
        .header(|h| h.vars = 3)
        .probe(vec![
            PushImm(0x141),
            PushImm(0x142),
            PushImm(0x143),
            PushImm(0x144),
            LogB(4),
            PushPlp,
            VarImm(VarOp::Pop, VarSpace::Local, 0),
            PushLp,
            VarImm(VarOp::Pop, VarSpace::Local, 1),
            VarImm(VarOp::Pop, VarSpace::Local, 2),
        ])
        .build();
    let mut st = ProgramState::new(&p);
    let r = run(&p, 0, &mut st, &mut ModelEnv::new(), &Limits::default());
    assert_eq!(data(&r), &[0x44, 0x43, 0x42]);
    assert_eq!(r.records[0].items, [item(0, ItemKind::RawBytes)]);
    assert_eq!(st.locals, [0, 3, 0x141]);
}

#[test]
fn log_stack_count_forms() {
    // room < 3: nothing written, the count is popped, elements stay.
    let p = logmax(2)
        .header(|h| h.vars = 1)
        .probe(vec![
            PushImm(5),
            PushImm(1),
            Log,
            VarImm(VarOp::Pop, VarSpace::Local, 0),
        ])
        .build();
    let mut st = ProgramState::new(&p);
    let r = run(&p, 0, &mut st, &mut ModelEnv::new(), &Limits::default());
    assert!(data(&r).is_empty() && r.records[0].items.is_empty());
    assert_eq!(st.locals, [5]);
    // Exactly the prefix fits.
    let r = hit_with(logmax(3).probe(vec![PushImm(0), Log]));
    assert_eq!(data(&r), &[7, 0, 0]);
    let r = hit_with(logmax(3).probe(vec![
        PushImm(9),
        PushImm(1),
        Log,
        PushPlp,
        PushImm(0x10),
        Add,
        SetMin,
    ]));
    assert_eq!(data(&r), &[7, 0, 0]);
    assert_eq!(
        r.records[0].kind,
        RecordKind::Log {
            major: 1,
            minor: 0x10
        }
    );
    // The count is taken mod 65536.
    let r = hit(vec![PushImm(9), PushImm(0x1_0001), Log]);
    assert_eq!(data(&r), &[&[7, 1, 0][..], &le(9)].concat()[..]);
    // logmax 0: nothing to write is fine, anything else overflows.
    let r = hit_with(logmax(0).probe(vec![LogN(0), LogB(0), PushImm(1), LogN(1), PushLp, SetMin]));
    assert!(data(&r).is_empty() && r.records[0].items.is_empty());
    assert_eq!(r.records[0].kind, RecordKind::Log { major: 1, minor: 0 });
}

const G: u64 = crate::model::probe_target::GREETING;

fn log_str_hit(b: Builder, len: u64, addr: u64, env: &mut ModelEnv) -> RunResult {
    let p = b.probe(vec![PushImm(len), PushImm(addr), LogStr]).build();
    run_on(&p, 0, env)
}

fn strrec(s: &[u8]) -> Vec<u8> {
    [&[1u8][..], &(s.len() as u16).to_le_bytes(), s].concat()
}

fn faultrec(addr: u64) -> Vec<u8> {
    [&[0xFFu8, 8, 0][..], &le(addr)].concat()
}

#[test]
fn log_str_edge_cases() {
    let env = || ModelEnv::probe_target_hit(0);
    let hello = b"hello, probes";
    // len 0: an empty string item.
    let r = log_str_hit(Builder::new(), 0, G, &mut env());
    assert_eq!(data(&r), &strrec(b"")[..]);
    assert_eq!(r.records[0].items, [item(0, ItemKind::Tokenized)]);
    // Huge len, cut at the NUL.
    let r = log_str_hit(Builder::new(), u64::MAX, G, &mut env());
    assert_eq!(data(&r), &strrec(hello)[..]);
    // Cut at len: no error.
    let r = log_str_hit(
        logmax(8).header(|h| h.excpt_mask = 0x1FFF),
        5,
        G,
        &mut env(),
    );
    assert_eq!(
        (data(&r), r.outcome),
        (&strrec(b"hello")[..], Outcome::Exit)
    );
    // Exactly fits (room = 3 + 13).
    let r = log_str_hit(
        logmax(16).header(|h| h.excpt_mask = 0x1FFF),
        64,
        G,
        &mut env(),
    );
    assert_eq!((data(&r), r.outcome), (&strrec(hello)[..], Outcome::Exit));
    // One over: truncated record stays, LOG_OVERFLOW.
    let r = log_str_hit(
        logmax(15).header(|h| h.excpt_mask = 0x1FFF),
        64,
        G,
        &mut env(),
    );
    assert_eq!(data(&r), &strrec(b"hello, probe")[..]);
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(r.last_exception, (LOGOV, NONE, 15, 0));
    let r = log_str_hit(logmax(15), 64, G, &mut env());
    assert_eq!(
        (data(&r), r.outcome),
        (&strrec(b"hello, probe")[..], Outcome::Exit)
    );
    // len = avail with a longer string: cut at len, no overflow; len = avail + 1: overflow.
    let r = log_str_hit(
        logmax(8).header(|h| h.excpt_mask = 0x1FFF),
        5,
        G,
        &mut env(),
    );
    assert_eq!(r.outcome, Outcome::Exit);
    let r = log_str_hit(
        logmax(8).header(|h| h.excpt_mask = 0x1FFF),
        6,
        G,
        &mut env(),
    );
    assert_eq!(
        (data(&r), r.outcome),
        (&strrec(b"hello")[..], Outcome::Uncaught)
    );
    // Fault on the first byte: fault record + INVALID_ADDR.
    let r = log_str_hit(Builder::new(), 64, 0x10, &mut env());
    assert_eq!(data(&r), &faultrec(0x10)[..]);
    assert_eq!(r.records[0].items, [item(0, ItemKind::Tokenized)]);
    assert_eq!(r.outcome, Outcome::Uncaught);
    assert_eq!(r.last_exception, (IA, NONE, 0x10, 0));
    // Fault after some bytes: nothing of the string is kept.
    let mut e = ModelEnv::new();
    e.map(0x1000, b"abc".to_vec(), true, false);
    let r = log_str_hit(Builder::new(), 64, 0x1000, &mut e.clone());
    assert_eq!(data(&r), &faultrec(0x1003)[..]);
    assert_eq!(r.last_exception, (IA, NONE, 0x1003, 0));
    // ... but a len that stops before the hole reads fine.
    let r = log_str_hit(Builder::new(), 3, 0x1000, &mut e.clone());
    assert_eq!(data(&r), &strrec(b"abc")[..]);
    // The byte just beyond the room is examined: here it faults.
    let r = log_str_hit(logmax(6), 64, 0x1000, &mut e.clone());
    assert_eq!((data(&r), r.outcome), (&[][..], Outcome::Uncaught));
    assert_eq!(r.last_exception, (IA, NONE, 0x1003, 0));
    let r = log_str_hit(logmax(5), 64, 0x1000, &mut e.clone());
    assert_eq!((data(&r), r.outcome), (&strrec(b"ab")[..], Outcome::Exit));
    // room < 3: LOG_OVERFLOW, nothing read (so no fault).
    let r = log_str_hit(logmax(2), 64, 0x10, &mut env());
    assert_eq!((data(&r), r.outcome), (&[][..], Outcome::Exit));
    // room < 11: no fault record, INVALID_ADDR all the same.
    let r = log_str_hit(logmax(10), 64, 0x10, &mut env());
    assert_eq!((data(&r), r.outcome), (&[][..], Outcome::Uncaught));
    assert!(r.records[0].items.is_empty());
    let r = log_str_hit(logmax(11), 64, 0x10, &mut env());
    assert_eq!(data(&r), &faultrec(0x10)[..]);
    // An unreadable (but mapped) region faults too.
    let mut e = ModelEnv::new();
    e.map(0x2000, b"xyz\0".to_vec(), false, true);
    let r = log_str_hit(Builder::new(), 64, 0x2000, &mut e);
    assert_eq!(data(&r), &faultrec(0x2000)[..]);
}

#[test]
fn fault_record_is_removed_by_plp_backout() {
    let r = hit(vec![
        Sx(7),
        PushImm(0xAA),
        LogN(1),
        PushImm(64),
        PushImm(0x10),
        LogStr,
        Exit,
        PushLp,
        PushPlp,
        PopLp,
        LogN(4),
    ]);
    assert_eq!(words(&r), [0xAA, 19, IA, 0x10, 0]);
    assert_eq!(
        r.records[0].items,
        [item(0, ItemKind::RawWords), item(8, ItemKind::RawWords)]
    );
}

#[test]
fn log_mrf_cases() {
    use crate::model::probe_target::ORIGIN;
    let mrf = |b: Builder, len: u64, addr: u64, env: &mut ModelEnv| {
        let p = b.probe(vec![PushImm(len), PushImm(addr), LogMrf]).build();
        run_on(&p, 0, env)
    };
    let env = || ModelEnv::probe_target_hit(0);
    let r = mrf(Builder::new(), 16, ORIGIN, &mut env());
    let want: Vec<u8> = [&[0u8, 16, 0][..], &le(3), &le(-4i64 as u64)].concat();
    assert_eq!(data(&r), &want[..]);
    assert_eq!(r.records[0].items, [item(0, ItemKind::Tokenized)]);
    let r = mrf(Builder::new(), 0, 0x10, &mut env());
    assert_eq!((data(&r), r.outcome), (&[0u8, 0, 0][..], Outcome::Exit));
    // Truncated to the room, LOG_OVERFLOW.
    let r = mrf(
        logmax(10).header(|h| h.excpt_mask = 0x1FFF),
        16,
        ORIGIN,
        &mut env(),
    );
    assert_eq!(data(&r), &[0, 7, 0, 3, 0, 0, 0, 0, 0, 0][..]);
    assert_eq!(r.last_exception, (LOGOV, NONE, 10, 0));
    // room < 3: nothing, not even a fault.
    let r = mrf(logmax(2), 16, 0x10, &mut env());
    assert_eq!((data(&r), r.outcome), (&[][..], Outcome::Exit));
    // Fault after some bytes: no partial data, fault record at the first bad byte.
    let mut e = ModelEnv::new();
    e.map(0x1000, b"abc".to_vec(), true, false);
    let r = mrf(Builder::new(), 8, 0x1000, &mut e);
    assert_eq!(data(&r), &faultrec(0x1003)[..]);
    assert_eq!(r.last_exception, (IA, NONE, 0x1003, 0));
    // The read is limited to the room, so a hole beyond it is not seen.
    let r = mrf(
        logmax(6).header(|h| h.excpt_mask = 0x1FFF),
        8,
        0x1000,
        &mut e,
    );
    assert_eq!(data(&r), b"\x00\x03\x00abc");
    assert_eq!(r.last_exception, (LOGOV, NONE, 6, 0));
}

#[test]
fn log_lv_and_gv() {
    let p = Builder::new()
        .header(|h| {
            h.vars = 3;
            h.gvars = 1;
        })
        .probe(vec![
            PushImm(0),
            PushImm(3),
            LogVars(VarSpace::Local),
            Sx(8),
            PushImm(1),
            PushImm(5),
            LogVars(VarSpace::Local), // 2 written, then INVALID_OPERAND(1, 3)
            Exit,
            LogN(3),
            Sx(14),
            PushImm(u64::MAX),
            PushImm(1),
            LogVars(VarSpace::Global),
            Exit,
            LogN(3),
            PushImm(7),
            PushImm(0),
            LogVars(VarSpace::Global), // n = 0: fine even with a bad index
            PushImm(1),
            PushImm(1),
            LogVars(VarSpace::Global), // the env has 2 globals
        ])
        .build();
    let mut st = ProgramState::new(&p);
    st.locals = vec![11, 12, 13];
    let mut env = ModelEnv::new();
    env.gvars = vec![21, 22];
    let r = run(&p, 0, &mut st, &mut env, &Limits::default());
    let want: Vec<u8> = [
        &[5u8, 3, 0][..],
        &le(11),
        &le(12),
        &le(13),
        &[5, 2, 0],
        &le(12),
        &le(13),
        &le(IOP),
        &le(1),
        &le(3),
        &[6, 0, 0],
        &le(IOP),
        &le(2),
        &le(u64::MAX),
        &[6, 0, 0],
        &[6, 1, 0],
        &le(22),
    ]
    .concat();
    assert_eq!(data(&r), &want[..]);
    assert_eq!(
        r.records[0].items,
        [
            item(0, ItemKind::Tokenized),
            item(27, ItemKind::Tokenized),
            item(46, ItemKind::RawWords),
            item(70, ItemKind::Tokenized),
            item(73, ItemKind::RawWords),
            item(97, ItemKind::Tokenized),
            item(100, ItemKind::Tokenized),
        ]
    );
    // Room for the prefix and one variable only.
    let p = logmax(11)
        .header(|h| {
            h.vars = 3;
            h.excpt_mask = 0x1FFF;
        })
        .probe(vec![PushImm(0), PushImm(3), LogVars(VarSpace::Local)])
        .build();
    let r = run(&p, 0, &mut st, &mut env, &Limits::default());
    assert_eq!(data(&r), &[&[5u8, 1, 0][..], &le(11)].concat()[..]);
    assert_eq!(r.last_exception, (LOGOV, NONE, 11, 0));
}

#[test]
fn pop_lp_only_shortens_and_drops_descriptors() {
    let r = hit(vec![
        PushImm(1),
        LogN(1),
        PushImm(2),
        LogB(1),
        PushImm(3),
        PushImm(1),
        Log,
        PushImm(100),
        PopLp, // no effect
        PushImm(9),
        PopLp, // cuts into the `log` item at 9: it goes
        PushLp,
        PushPlp,
        LogN(2),
    ]);
    assert_eq!(data(&r), &[&le(1)[..], &[2], &le(20), &le(9)].concat()[..]);
    assert_eq!(
        r.records[0].items,
        [
            item(0, ItemKind::RawWords),
            item(8, ItemKind::RawBytes),
            item(9, ItemKind::RawWords),
        ]
    );
}

// ----- stack traces -----

fn st_header(name: &[u8], loc: u64, id: u16, major: u16, minor: u16, count: u16) -> Vec<u8> {
    [
        &[1u8][..],
        &(name.len() as u16).to_le_bytes(),
        name,
        &le(loc),
        &id.to_le_bytes(),
        &major.to_le_bytes(),
        &minor.to_le_bytes(),
        &[2],
        &count.to_le_bytes(),
    ]
    .concat()
}

fn st_record(last: [u64; 4], frames: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::new();
    for w in last {
        v.extend(le(w));
    }
    v.extend([3u8]);
    v.extend((frames.len() as u16).to_le_bytes());
    for f in frames {
        v.extend(f);
    }
    v
}

fn st_frame(called: u64, ret: u64, slots: &[u64], lv: &[u64], gv: &[u64]) -> Vec<u8> {
    let mut v = [le(called), le(ret)].concat();
    for (tok, ws) in [(4u8, slots), (5, lv), (6, gv)] {
        v.push(tok);
        v.extend((ws.len() as u16).to_le_bytes());
        for w in ws {
            v.extend(le(*w));
        }
    }
    v
}

fn pt() -> Builder {
    Builder::new().header(|h| {
        h.name = "pt".into();
        h.id = 5;
        h.major = 10;
        h.vars = 2;
        h.gvars = 1;
    })
}

#[test]
fn autostacktrace_is_taken_before_dispatch_byte_exact() {
    let p = pt()
        .header(|h| h.autostacktrace = true)
        .probe(vec![Sx(3), Call(0), Exit, LogN(3)])
        .cfg(|p| p.minor = 3)
        .proc_("outer", vec![Call(1)])
        .proc_(
            "inner",
            vec![
                PushImm(0xabc),
                SaveTsp,
                PushImm(1),
                TracePv,
                PushImm(0),
                PushImm(2),
                TraceVars(VarSpace::Local),
                PushImm(0),
                PushImm(1),
                TraceVars(VarSpace::Global),
                PushImm(42),
                PushImm(0),
                Div,
            ],
        )
        .build();
    assert_eq!(
        [p.bodies[1].insns[0].offset, p.bodies[2].insns[0].offset],
        [23, 33]
    );
    let mut st = ProgramState::new(&p);
    st.locals = vec![5, 0x77];
    let mut env = ModelEnv::new();
    env.gvars = vec![0x99];
    let r = run(&p, 0, &mut st, &mut env, &Limits::default());
    assert_eq!(words(&r), [DBZ, 0, 0]);
    assert_eq!(r.records.len(), 2);
    assert_eq!(r.records[1].kind, RecordKind::StackTrace);
    assert!(r.records[1].items.is_empty());
    let want = [
        st_header(b"pt", 0x401146, 5, 10, 3, 1),
        st_record(
            [DBZ, NONE, 0, 0],
            &[
                st_frame(33, 32, &[0xabc], &[5, 0x77], &[0x99]),
                st_frame(23, 18, &[], &[], &[]),
            ],
        ),
    ]
    .concat();
    assert_eq!(r.records[1].data, want);
    let mut n = 0;
    decode_stacktrace(&r.records[1].data, |_| n += 1).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn explicit_log_st_and_header_codes_at_write_time() {
    let r = hit_with(pt().probe(vec![
        SetMajImm(5),
        LogSt,
        SetMajImm(6),
        SetMinImm(2),
        LogSt,
        PushStp,
        LogN(1),
    ]));
    assert_eq!(words(&r), [22 + 70]);
    assert_eq!(r.records[0].kind, RecordKind::Log { major: 6, minor: 2 });
    let rec = st_record([0, NONE, 0, 0], &[]);
    let want = [st_header(b"pt", 0x401146, 5, 5, 0, 2), rec.clone(), rec].concat();
    assert_eq!(r.records[1].data, want);
}

#[test]
fn stack_trace_records_are_whole_or_nothing() {
    // Header only fits: it stays, with a count of 0.
    let r = hit_with(pt().header(|h| h.excpt_log = 22).probe(vec![LogSt, LogSt]));
    assert_eq!(r.records[1].data, st_header(b"pt", 0x401146, 5, 10, 0, 0));
    // Not even the header fits: nothing, no record.
    let r = hit_with(pt().header(|h| h.excpt_log = 21).probe(vec![LogSt]));
    assert_eq!(r.records.len(), 1);
    // A record may fill the area exactly; the next one is dropped whole.
    let r = hit_with(
        pt().header(|h| h.excpt_log = 57)
            .probe(vec![LogSt, LogSt, PushStp, LogN(1)]),
    );
    assert_eq!(words(&r), [57]);
    assert_eq!(r.records[1].data.len(), 57);
    // A huge RPN-trace range cannot fit: the record is dropped, no panic;
    // then a small range (start 5000 mod 1024) fits: 35 + 25 + 2 × 8 bytes.
    let r = hit_with(pt().probe(vec![Call(0)]).proc_(
        "p",
        vec![
            PushImm(0),
            PushImm(u64::MAX),
            TracePv,
            LogSt,
            PushImm(5000),
            PushImm(2),
            TracePv,
            LogSt,
        ],
    ));
    assert_eq!(r.records[1].data.len(), 22 + 76);
    // Slots wrap modulo 1024 and are logged in increasing slot order.
    let r = hit_with(pt().probe(vec![PushImm(0x1), Call(0)]).proc_(
        "p",
        vec![
            PushImm(0x2),
            PushImm(1023 + 1024),
            PushImm(3),
            TracePv,
            LogSt,
        ],
    ));
    let want = [
        st_header(b"pt", 0x401146, 5, 10, 0, 1),
        st_record([0, NONE, 0, 0], &[st_frame(19, 18, &[1, 0, 0], &[], &[])]),
    ]
    .concat();
    assert_eq!(r.records[1].data, want);
}

#[test]
fn pop_stp_snaps_to_record_boundaries() {
    let r = hit_with(pt().probe(vec![
        LogSt,
        LogSt,
        LogSt,
        PushStp,
        PushImm(100),
        PopStp,
        PushStp,
        PushImm(200),
        PopStp,
        PushStp,
        PushImm(57),
        PopStp,
        PushStp,
        PushImm(56),
        PopStp,
        PushStp,
        PushImm(22),
        PopStp,
        PushStp,
        PushImm(21),
        PopStp,
        PushStp,
        LogN(7),
    ]));
    assert_eq!(words(&r), [0, 22, 22, 57, 92, 92, 127]);
    assert_eq!(r.records.len(), 1);
    // Truncation rewrites the count; an emptied area gets a fresh header.
    let r = hit_with(pt().probe(vec![LogSt, LogSt, LogSt, PushImm(100), PopStp]));
    let rec = st_record([0, NONE, 0, 0], &[]);
    let want = [
        st_header(b"pt", 0x401146, 5, 10, 0, 2),
        rec.clone(),
        rec.clone(),
    ]
    .concat();
    assert_eq!(r.records[1].data, want);
    let r = hit_with(pt().probe(vec![LogSt, PurgeSt, SetMinImm(9), LogSt]));
    let want = [st_header(b"pt", 0x401146, 5, 10, 9, 1), rec.clone()].concat();
    assert_eq!(r.records[1].data, want);
    let r = hit_with(pt().probe(vec![LogSt, PushImm(3), PopStp, SetMinImm(9), LogSt]));
    assert_eq!(r.records[1].data, want);
}

#[test]
fn autostacktrace_on_masked_non_maskable_and_not_on_ignored() {
    let r = hit_with(
        pt().header(|h| {
            h.autostacktrace = true;
            h.logmax = 0;
        })
        .probe(vec![
            PushImm(1),
            LogN(1),
            PushImm(0x10),
            PushMem(Width::U8),
            LogN(1),
        ])
        .cfg(|p| p.excpt_mask = 0x0FFE),
    );
    assert_eq!(r.outcome, Outcome::Uncaught);
    let want = [
        st_header(b"pt", 0x401146, 5, 10, 0, 1),
        st_record([IA, NONE, 0x10, 0], &[]),
    ]
    .concat();
    assert_eq!(r.records[1].data, want);
}

#[test]
fn trace_lv_gv_validation() {
    let b = pt().probe(vec![
        Sx(5),
        PushImm(1),
        PushImm(2),
        TraceVars(VarSpace::Local),
        Exit,
        LogN(3),
        Sx(11),
        PushImm(5),
        PushImm(1),
        TraceVars(VarSpace::Local),
        Exit,
        LogN(3),
        Sx(17),
        PushImm(0),
        PushImm(4),
        TraceVars(VarSpace::Global),
        Exit,
        LogN(3),
        PushImm(100),
        PushImm(0),
        TraceVars(VarSpace::Local),
        Sx(26),
        PushImm(u64::MAX),
        PushImm(u64::MAX),
        TraceVars(VarSpace::Global),
        Exit,
        LogN(3),
    ]);
    let p = b.build();
    let mut env = ModelEnv::new();
    env.gvars = vec![0; 3];
    let r = run_on(&p, 0, &mut env);
    assert_eq!(
        words(&r),
        [IOP, 1, 2, IOP, 1, 5, IOP, 2, 3, IOP, 2, u64::MAX]
    );
    assert_eq!(r.outcome, Outcome::Exit);
    // A failed trace leaves the range as it was.
    let r = hit_with(pt().probe(vec![Call(0)]).proc_(
        "p",
        vec![
            PushImm(1),
            PushImm(1),
            TraceVars(VarSpace::Local),
            Sx(7),
            PushImm(0),
            PushImm(3),
            TraceVars(VarSpace::Local),
            LogSt,
        ],
    ));
    // The handler (offset 57) was armed when the exception was generated.
    let want = st_record([IOP, 57, 1, 2], &[st_frame(10, 9, &[], &[0], &[])]);
    assert_eq!(r.records[1].data[22..], want[..]);
}

// ----- registers, memory, system values -----

#[test]
fn registers() {
    let mut env = ModelEnv::probe_target_hit(5);
    env.set_reg(0x0A, 0x1_0000_0005)
        .set_reg_part(0x4D, 1, 0xAA)
        .set_reg_part(0x4D, 0, 0xBB)
        .set_reg_part(0x3E, 1, 0x3FFF)
        .set_reg_part(0x3E, 0, 1 << 63);
    let r = |reg| PushReg { reg, user: false };
    let u = |reg| PushReg { reg, user: true };
    let w = |reg| PopReg { reg, user: false };
    let p = Builder::new()
        .probe(vec![
            r(0x0A),
            u(0x10A),
            r(0x4D),
            u(0x3E),
            PushImm(0x1_0000_0007),
            r(regs::CPUID),
            r(0x999),
            LogN(11),
            PushImm(100),
            w(0x0B),
            r(0x0B),
            PushImm(u64::MAX),
            PopReg {
                reg: 0x10B,
                user: true,
            },
            r(0x0B),
            PushImm(1),
            w(0x0D), // read-only: ignored
            r(0x0D),
            LogN(3),
        ])
        .build();
    let res = run_on(&p, 0, &mut env);
    assert_eq!(
        words(&res),
        [
            0,
            7,
            0,
            7 ^ 0x1234,
            0x4321,
            1 << 63,
            0x3FFF,
            0xBB,
            0xAA,
            5,
            0x1_0000_0005,
            0x401146,
            0xFFFF_FFFF,
            100,
        ]
    );
    assert_eq!(env.reg_writes, [(0x0B, 100), (0x0B, 0xFFFF_FFFF)]);
    assert_eq!(env.reg(0x0B), 0xFFFF_FFFF);
}

#[test]
fn memory_access_and_verification() {
    use crate::model::probe_target::{COUNTER, TARGET_FN};
    let mut env = ModelEnv::probe_target_hit(2);
    let p = Builder::new()
        .probe(vec![
            PushImm(G),
            PushMem(Width::U8),
            PushImm(G),
            PushMem(Width::U16),
            PushImm(G),
            PushMem(Width::U32),
            PushImm(G),
            PushMem(Width::U64),
            LogN(4),
            Sx(13),
            PushImm(0x404ffc),
            PushMem(Width::U64), // only 4 bytes mapped
            Exit,
            LogN(3),
            PushImm(COUNTER),
            PushImm(0x1234_5678_9abc_def0),
            PopMem(Width::U16),
            Sx(22),
            PushImm(TARGET_FN),
            PushImm(0),
            PopMem(Width::U8), // not writable
            Exit,
            LogN(3),
            Sx(28),
            PushImm(0x404ffc),
            PushImm(u64::MAX),
            PopMem(Width::U64), // crosses into unmapped memory
            Exit,
            LogN(3),
            PushImm(G),
            Vfyr,
            PushImm(G),
            Vfyrw,
            PushImm(TARGET_FN),
            Vfyrw,
            PushImm(TARGET_FN),
            Vfyr,
            PushImm(0),
            Vfyr,
            LogN(5),
        ])
        .build();
    let r = run_on(&p, 0, &mut env);
    assert_eq!(
        words(&r),
        [
            u64::from_le_bytes(*b"hello, p"),
            0x6c6c_6568,
            0x6568,
            0x68,
            IA,
            0x404ffc,
            0,
            IA,
            TARGET_FN,
            0,
            IA,
            0x404ffc,
            0,
            1,
            0,
            1,
            0,
            0,
        ]
    );
    assert_eq!(env.peek_u64(COUNTER), Some(0xdef0)); // counter was 1
    assert_eq!(env.mem_writes, [(COUNTER, vec![0xf0, 0xde])]);
    assert_eq!(env.peek(0x404ffc, 4), Some(vec![0; 4]));
    assert_eq!(env.peek(TARGET_FN, 1), Some(vec![0x55]));
}

#[test]
fn system_values_and_immediates() {
    let mut env = ModelEnv::probe_target_hit(0);
    env.load_bias = 0x1000;
    let r = run_on(
        &Builder::new()
            .probe(vec![
                PushPid,
                PushProcid,
                PushTask,
                PushSym { value: 0x401146 },
                PushSym { value: u64::MAX },
                PushWid,
                PushByte(0xFF),
                PushImm(-1i64 as u64),
                LogN(8),
            ])
            .build(),
        0,
        &mut env,
    );
    assert_eq!(
        words(&r),
        [
            u64::MAX,
            0xFF,
            0xFFFF_FFFF_FFFF_FFC0,
            0xFFF,
            0x402146,
            crate::model::probe_target::THREAD_POINTER,
            3,
            4242,
        ]
    );
}

// ----- variables -----

#[test]
fn variables_all_forms() {
    use VarOp::*;
    use VarSpace::*;
    let p = Builder::new()
        .header(|h| {
            h.vars = 2;
            h.gvars = 1;
        })
        .probe(vec![
            PushImm(5),
            VarImm(Pop, Local, 1),
            VarImm(Inc, Local, 1),
            VarImm(Dec, Local, 0), // wraps to 2^64 − 1
            PushImm(42),
            VarImm(Move, Global, 0),
            PushImm(2),
            Var(Move, Global), // the env has 3 globals: index 2 is fine
            PushImm(2),
            Var(Inc, Global),
            PushImm(1),
            PushImm(77),
            Var(Pop, Local),
            PushImm(1),
            Var(Push, Local),
            PushImm(0),
            Var(Dec, Global),
            LogN(2),
            Sx(22),
            PushImm(2),
            Var(Push, Local),
            Exit,
            LogN(3),
            Sx(28),
            PushImm(3),
            PushImm(9),
            Var(Pop, Global),
            Exit,
            LogN(3),
            Sx(33),
            PushImm(u64::MAX),
            Var(Inc, Local),
            Exit,
            LogN(3),
            Sx(39),
            PushImm(8),
            PushImm(5),
            Var(Move, Local),
            Exit,
            LogN(4),
            VarImm(Push, Local, 1),
            VarImm(Push, Global, 0),
            LogN(2),
        ])
        .build();
    let mut st = ProgramState::new(&p);
    let mut env = ModelEnv::new();
    env.gvars = vec![0; 3];
    let r = run(&p, 0, &mut st, &mut env, &Limits::default());
    assert_eq!(
        words(&r),
        [
            77,
            42,
            IOP,
            1,
            2,
            IOP,
            2,
            3,
            IOP,
            1,
            u64::MAX,
            IOP,
            1,
            5,
            8,
            41,
            77,
        ]
    );
    assert_eq!(st.locals, [u64::MAX, 77]);
    assert_eq!(env.gvars, [41, 0, 43]);
}

#[test]
fn local_variables_persist_across_hits() {
    let p = Builder::new()
        .header(|h| h.vars = 1)
        .probe(vec![
            VarImm(VarOp::Inc, VarSpace::Local, 0),
            VarImm(VarOp::Push, VarSpace::Local, 0),
            LogN(1),
        ])
        .build();
    let mut st = ProgramState::new(&p);
    let mut env = ModelEnv::new();
    for i in 1..=3 {
        let r = run(&p, 0, &mut st, &mut env, &Limits::default());
        assert_eq!(words(&r), [i]);
    }
    assert_eq!(st.locals, [3]);
}

// ----- heap, I/O, callk -----

#[test]
fn heap_extension() {
    let p = Builder::new()
        .header(|h| h.heap = 16)
        .probe(vec![
            PushImm(8),
            Malloc,
            PushImm(8),
            Malloc,
            Sx(8),
            PushImm(1),
            Malloc, // HEAP_NOMEM(1, 0)
            Exit,
            LogN(5),
            PushImm(1),
            Free,
            PushImm(4),
            Malloc,
            LogN(1),
            Sx(17),
            PushImm(99),
            Free,
            LogN(3),
            PushImm(0xBBBB),
            PushImm(0x1AAAA),
            PushImm(2),
            PushImm(0),
            PopH(Width::U16, 2),
            PushImm(2),
            PushImm(0),
            PushH(Width::U32, 2),
            LogN(2),
            Sx(31),
            PushImm(2),
            PushImm(0),
            PushH(Width::U64, 2), // second value out of the block
            LogN(4),
            Sx(37),
            PushImm(7),
            PushImm(2),
            PushImm(u64::MAX),
            PopH(Width::U8, 1), // offset overflow; 7 stays
            LogN(4),
            Sx(42),
            PushImm(5),
            PushImm(3),
            PushH(Width::U8, 1),
            LogN(3),
            PushWid,
            LogN(1),
            PushImm(2),
            PushImm(6),
            PushH(Width::U16, 0),
            PushImm(3),
            PushImm(4),
            PopH(Width::U64, 0),
            PushImm(0x11),
            PushImm(3),
            PushImm(2),
            PopH(Width::U16, 1),
            PushImm(3),
            PushImm(0),
            PushH(Width::U32, 1),
            LogN(1),
        ])
        .build();
    let r = run_on(&p, 0, &mut ModelEnv::new());
    assert_eq!(
        words(&r),
        [
            0x100,
            1,
            0,
            2,
            1,
            3,
            0x200,
            99,
            0,
            0,
            0xBBBB_AAAA,
            0x400,
            2,
            8,
            0xBBBB_AAAA,
            0x400,
            2,
            u64::MAX,
            7,
            0x200,
            5,
            3,
            -64i64 as u64,
            0x11_0000,
        ]
    );
    // Without a heap only zero-size blocks can be allocated.
    let r = hit(vec![PushImm(0), Malloc, Sx(5), PushImm(1), Malloc, LogN(4)]);
    assert_eq!(words(&r), [0x100, 1, 0, 1]);
}

#[test]
fn io_ports_and_callk() {
    let mut env = ModelEnv::new();
    env.add_io_port(0x60, 0x1234_5678_9abc);
    let p = Builder::new()
        .probe(vec![
            PushImm(0x60),
            PushIo(Width::U8),
            PushImm(0x60),
            PushIo(Width::U32),
            PushImm(0x60),
            PushImm(0xAB_CDEF),
            PopIo(Width::U16),
            PushImm(0x60),
            PushIo(Width::U16),
            LogN(3),
            Sx(14),
            PushImm(0x61),
            PushIo(Width::U8),
            Exit,
            LogN(3),
            Sx(20),
            PushImm(0x62),
            PushImm(1),
            PopIo(Width::U8),
            Exit,
            LogN(3),
            Callk,
            Callk,
        ])
        .build();
    let r = run_on(&p, 0, &mut env);
    assert_eq!(
        words(&r),
        [0xCDEF, 0x5678_9abc, 0xbc, IOP, 5, 0x61, IOP, 5, 0x62]
    );
    assert_eq!(env.io_writes, [(0x60, 2, 0xCDEF)]);
    assert_eq!(env.callk_count, 2);
}

#[test]
fn malformed_programs_do_not_panic() {
    let mut p = Builder::new()
        .probe(vec![Jmp(100), Call(7)])
        .proc_("p", vec![Jmp(50)])
        .build();
    let r = run_on(&p, 0, &mut ModelEnv::new());
    assert_eq!(r.outcome, Outcome::Exit);
    p.bodies[0].insns[0].op = Call(0);
    let r = run_on(&p, 0, &mut ModelEnv::new());
    assert_eq!(r.outcome, Outcome::Exit);
    p.probes[0].body = 99;
    let r = run_on(&p, 0, &mut ModelEnv::new());
    assert_eq!(r.outcome, Outcome::Exit);
    let mut st = ProgramState::default();
    p.header.vars = 4;
    p.bodies[0].insns[0].op = VarImm(VarOp::Inc, VarSpace::Local, 3);
    p.probes[0].body = 0;
    run(&p, 0, &mut st, &mut ModelEnv::new(), &Limits::default());
    assert_eq!(st.locals, [0, 0, 0, 1]);
    p.bodies[0].insns[0].op = VarImm(VarOp::Inc, VarSpace::Global, 3);
    let r = run(&p, 0, &mut st, &mut ModelEnv::new(), &Limits::default());
    assert_eq!(r.last_exception, (IOP, NONE, 2, 3));
}

// ----- return probes (§6.5, §9.16) -----

#[test]
fn entry_values_and_elapsed_time_of_a_return_hit() {
    use hostabi::regs::{R8, R9, RAX, RCX, RDI, RDX, RSI, RSP};
    let p = Builder::new()
        .probe(vec![
            PushEntry(RSP),
            PushEntry(R9),
            PushEntry(R8),
            PushEntry(RCX),
            PushEntry(RDX),
            PushEntry(RSI),
            PushEntry(RDI),
            PushElapsed,
            PushReg {
                reg: RAX,
                user: false,
            },
            LogN(9),
            Suspend,
        ])
        .cfg(|c| c.r#return = true)
        .build();
    let mut env = ModelEnv::probe_target_return(2);
    env.entry = Some(hostabi::env::EntryState {
        regs: [1, 2, 3, 4, 5, 6, 7],
        elapsed_ns: 900,
    });
    let r = run_on(&p, 0, &mut env);
    assert_eq!(words(&r), [27, 900, 1, 2, 3, 4, 5, 6, 7]);
    // `push entry, R` is 3 bytes, `push elapsed` 1 (Appendix A).
    let offsets: Vec<u32> = p.bodies[0].insns.iter().map(|i| i.offset).collect();
    assert_eq!(&offsets[..11], [0, 3, 6, 9, 12, 15, 18, 21, 22, 25, 28]);
    assert_eq!(r.last_exception, (IOPC, NONE, 0x0F, 28));
    // A model hit without entry state (not a return) reads zeros.
    let r = run_on(&p, 0, &mut ModelEnv::probe_target_hit(2));
    assert_eq!(&words(&r)[1..], [0; 8]);
}
