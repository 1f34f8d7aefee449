//! Logging: the `log` instructions, overflow and PLP backout, fault records,
//! `pop lp`.

use super::*;

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

pub(super) const G: u64 = crate::model::probe_target::GREETING;

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
