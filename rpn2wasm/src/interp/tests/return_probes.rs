//! Return probes (§6.5, §9.16): entry values and elapsed time.

use super::*;

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
