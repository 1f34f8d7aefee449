//! Exceptions (masks, handlers, propagation, `push x`/`rx`), exits and
//! terminations, reserved opcodes, the instruction budget, `setmin`/`setmaj`.

use super::*;

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
