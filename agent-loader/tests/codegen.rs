//! The stubs save only XMM0–15 and MXCSR, which is enough only if no code
//! that runs during a hit uses VEX/EVEX encodings (a VEX.128 write zeroes the
//! upper half of the YMM register of the probed code). Checked on the
//! machine code itself: the agent's executable segment, and handler modules
//! (scalar float and SIMD-heavy ones included) compiled for the agent.

mod common;

use agent_loader::agent_image;
use goblin::elf::Elf;
use iced_x86::{Decoder, DecoderOptions, EncodingKind, Mnemonic};

/// (instructions, VEX/EVEX/XOP-encoded instructions, first few of those).
fn scan(code: &[u8], ip: u64) -> (usize, usize, Vec<String>) {
    let mut d = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let (mut n, mut bad, mut ex) = (0, 0, Vec::new());
    while d.can_decode() {
        let i = d.decode();
        n += 1;
        if matches!(
            i.encoding(),
            EncodingKind::VEX | EncodingKind::EVEX | EncodingKind::XOP
        ) {
            // BMI1/BMI2 are VEX-encoded but touch only general registers.
            let gpr_only = matches!(
                i.mnemonic(),
                Mnemonic::Andn
                    | Mnemonic::Bextr
                    | Mnemonic::Blsi
                    | Mnemonic::Blsmsk
                    | Mnemonic::Blsr
                    | Mnemonic::Bzhi
                    | Mnemonic::Mulx
                    | Mnemonic::Pdep
                    | Mnemonic::Pext
                    | Mnemonic::Rorx
                    | Mnemonic::Sarx
                    | Mnemonic::Shlx
                    | Mnemonic::Shrx
            );
            if !gpr_only {
                bad += 1;
                if ex.len() < 5 {
                    ex.push(format!("0x{:x}: {:?} {:?}", i.ip(), i.mnemonic(), i.code()));
                }
            }
        }
    }
    (n, bad, ex)
}

#[test]
fn the_agent_has_no_vex_code() {
    let img = agent_image().unwrap();
    let text = img
        .segments
        .iter()
        .find(|s| s.prot & libc::PROT_EXEC != 0)
        .unwrap();
    let (n, bad, ex) = scan(&text.data, text.vaddr);
    eprintln!("agent text: {n} instructions decoded");
    assert!(n > 10_000);
    assert_eq!(bad, 0, "VEX/EVEX instructions in the agent: {ex:?}");
}

const SIMD_WAT: &str = r#"
(module
  (memory (export "memory") 1)
  (func (export "floats") (param f64 f32) (result f64)
    (f64.add
      (f64.sqrt (f64.mul (local.get 0) (f64.const 3.5)))
      (f64.promote_f32 (f32.nearest (f32.div (local.get 1) (f32.const 7.0))))))
  (func (export "simd") (param i32) (result i32)
    (local v128)
    (local.set 1 (v128.load (local.get 0)))
    (local.set 1 (f32x4.add (local.get 1) (f32x4.mul (local.get 1) (local.get 1))))
    (local.set 1 (i32x4.add (local.get 1) (i8x16.swizzle (local.get 1) (local.get 1))))
    (local.set 1 (f64x2.sqrt (f64x2.max (local.get 1) (local.get 1))))
    (v128.store (local.get 0) (local.get 1))
    (i32x4.extract_lane 2 (i32x4.mul (local.get 1) (local.get 1))))
  (func (export "fma") (param f32 f32 f32) (result f32)
    (f32.add (f32.mul (local.get 0) (local.get 1)) (local.get 2))))
"#;

#[test]
fn handlers_compiled_for_the_agent_have_no_vex_code() {
    let engine = agent_loader::compile::agent_engine().unwrap();
    for (name, wat) in [
        ("count", common::COUNT_WAT),
        ("logregs", common::LOGREGS_WAT),
        ("readmem", common::READMEM_WAT),
        ("simd", SIMD_WAT),
    ] {
        let cwasm = common::cwasm(&engine, wat);
        let elf = Elf::parse(&cwasm).unwrap();
        let mut total = 0;
        for sh in &elf.section_headers {
            if sh.is_executable() && sh.sh_size > 0 {
                let r = sh.sh_offset as usize..(sh.sh_offset + sh.sh_size) as usize;
                let (n, bad, ex) = scan(&cwasm[r], sh.sh_addr);
                total += n;
                assert_eq!(bad, 0, "{name}: VEX/EVEX instructions: {ex:?}");
            }
        }
        assert!(total > 10, "{name}: {total} instructions");
    }
    // The same SIMD module with the runtime's default flags does use AVX on
    // a machine that has it (so the scan does detect VEX code).
    if std::arch::is_x86_feature_detected!("avx") {
        let mut c = wasmtime::Config::new();
        agent_abi::engine::configure(&mut c);
        let e = wasmtime::Engine::new(&c).unwrap();
        let cwasm = common::cwasm(&e, SIMD_WAT);
        let elf = Elf::parse(&cwasm).unwrap();
        let bad: usize = elf
            .section_headers
            .iter()
            .filter(|sh| sh.is_executable() && sh.sh_size > 0)
            .map(|sh| {
                let r = sh.sh_offset as usize..(sh.sh_offset + sh.sh_size) as usize;
                scan(&cwasm[r], sh.sh_addr).1
            })
            .sum();
        assert!(bad > 0, "with AVX allowed, Cranelift emits VEX code");
    }
}

#[test]
fn the_cranelift_flags_exist() {
    // An unknown flag makes Engine::new fail; the agent's flags do not.
    agent_loader::compile::agent_engine().unwrap();
    let mut c = agent_loader::compile::agent_config();
    // SAFETY: a bogus flag, to see it refused.
    unsafe {
        c.cranelift_flag_set("has_no_such_feature", "false");
    }
    assert!(wasmtime::Engine::new(&c).is_err());
}
