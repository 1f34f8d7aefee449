//! Variables in all their forms, and local variables across hits.

use super::*;

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
