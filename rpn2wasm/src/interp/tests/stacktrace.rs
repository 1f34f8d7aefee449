//! Stack traces: automatic and explicit `log st`, `pop stp`, and the
//! validation of `trace lv`/`trace gv`.

use super::*;

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
