//! Registers, memory access and verification, system values and immediates.

use super::logging::G;
use super::*;

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
