//! The worked examples of the spec (§11.6, Appendix B).

use super::*;

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
