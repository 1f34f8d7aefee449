//! The heap extension, I/O ports and `callk`, and malformed programs.

use super::*;

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
