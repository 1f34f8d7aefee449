//! Prototype stubs on real code: functions of a gcc-built C library loaded
//! into this test process are patched (`jmp stub` at their entry); the
//! stubs save the frame, call the agent's dispatch, restore, run the
//! displaced instructions relocated and jump back. Handlers see the
//! arguments, their register writes take effect, XMM state survives the
//! agent, RIP-relative displaced code still addresses the right data.

mod common;

use agent_loader::loader::{install_stub, map_near};
use agent_loader::stub::decode_site;
use agent_loader::{RegionLayout, SelfTarget, Target, agent_image, load_agent};
use std::ffi::CString;
use std::path::PathBuf;

/// Bumps rdi by 100 and counts in gvar 0.
const BUMP_WAT: &str = r#"
(module
  (import "wprobe" "read_reg" (func $rr (param i32 i32) (result i64)))
  (import "wprobe" "write_reg" (func $wr (param i32 i64) (result i32)))
  (import "wprobe" "gvar_get" (func $gg (param i64) (result i64)))
  (import "wprobe" "gvar_set" (func $gs (param i64 i64)))
  (import "wprobe" "emit_log" (func $log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "bump") (result i32)
    (drop (call $wr (i32.const 0x0A) (i64.add (call $rr (i32.const 0x0A) (i32.const 0)) (i64.const 100))))
    (call $gs (i64.const 0) (i64.add (call $gg (i64.const 0)) (i64.const 1)))
    (i32.const 0))
  ;; logs xmm0, xmm1 (low), rip, rsp; then computes in float registers
  ;; itself (f64 ops) to clobber what it can.
  (func (export "floats") (result i32) (local $f f64)
    (i64.store (i32.const 0) (call $rr (i32.const 0x4D) (i32.const 0)))
    (i64.store (i32.const 8) (call $rr (i32.const 0x4E) (i32.const 0)))
    (i64.store (i32.const 16) (call $rr (i32.const 0x0D) (i32.const 0)))
    (i64.store (i32.const 24) (call $rr (i32.const 0x0E) (i32.const 0)))
    (local.set $f (f64.mul (f64.reinterpret_i64 (i64.load (i32.const 0))) (f64.const 3.0)))
    (f64.store (i32.const 32) (f64.sqrt (local.get $f)))
    (i32.store (i32.const 1024) (i32.const 0x00800000))
    (drop (call $log (i32.const 1) (i32.const 2) (i32.const 0) (i32.const 40) (i32.const 1024) (i32.const 1)))
    (call $gs (i64.const 1) (i64.add (call $gg (i64.const 1)) (i64.const 1)))
    (i32.const 0))
  (func (export "count2") (result i32)
    (call $gs (i64.const 2) (i64.add (call $gg (i64.const 2)) (i64.const 1)))
    (i32.const 0)))
"#;

fn build_lib() -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/patchme.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("libpatchme.so");
    let st = std::process::Command::new("gcc")
        .args(["-O1", "-fno-ipa-icf", "-fPIC", "-shared", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    out
}

fn sym(h: *mut libc::c_void, name: &str) -> u64 {
    let c = CString::new(name).unwrap();
    // SAFETY: a valid handle and name.
    let p = unsafe { libc::dlsym(h, c.as_ptr()) };
    assert!(!p.is_null(), "{name}");
    p as u64
}

type Add3 = extern "C" fn(i64, i64, i64) -> i64;
type Fmadd = extern "C" fn(f64, f64, f64) -> f64;
type Acc = extern "C" fn(i64) -> i64;

#[test]
fn patched_functions_run_handlers_and_still_compute() {
    let lib = build_lib();
    let c = CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading our own test library.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null());
    let (add3_a, fm_a, acc_a) = (sym(h, "add3"), sym(h, "fmadd"), sym(h, "accumulate"));
    // SAFETY: the library's functions have these C signatures.
    let (add3, fmadd, acc): (Add3, Fmadd, Acc) = unsafe {
        (
            std::mem::transmute::<u64, Add3>(add3_a),
            std::mem::transmute::<u64, Fmadd>(fm_a),
            std::mem::transmute::<u64, Acc>(acc_a),
        )
    };
    assert_eq!(add3(1, 2, 3), 14);
    assert_eq!(fmadd(1.5, 2.0, 0.25), 3.25);
    assert_eq!(acc(5), 5);

    let img = agent_image().unwrap();
    let mut t = SelfTarget::new().unwrap();
    let mut a = load_agent(&mut t, &img, RegionLayout::default()).unwrap();
    let engine = agent_loader::compile::agent_engine().unwrap();
    common::load(
        &mut t,
        &mut a,
        &engine,
        BUMP_WAT,
        &[(1, "bump"), (2, "floats"), (3, "count2")],
        3,
        1_000_000,
    )
    .unwrap();

    let stubs = map_near(&mut t, add3_a, 4096, libc::PROT_READ | libc::PROT_EXEC).unwrap();
    let mut at = stubs;
    for (addr, id) in [(add3_a, 1u32), (fm_a, 2), (acc_a, 3)] {
        let mut code = [0u8; 32];
        t.read_mem(addr, &mut code).unwrap();
        let site = decode_site(&code, addr).unwrap();
        eprintln!(
            "site {id} at 0x{:x}: {} displaced bytes in {} instructions",
            site.addr,
            site.len,
            site.displaced.len()
        );
        let n = install_stub(&mut t, &site, id, a.dispatch, at).unwrap();
        at += (n as u64).next_multiple_of(64);
    }

    // add3: the handler adds 100 to the first argument.
    assert_eq!(add3(1, 2, 3), 114);
    assert_eq!(add3(-100, 0, 0), 0);
    assert_eq!(a.region.gvars()[0], 2);

    // fmadd: the arguments reach the handler; the float result is intact
    // although the agent and the handler used the XMM registers.
    for k in 0..10 {
        let x = 1.5 + k as f64;
        assert_eq!(fmadd(x, 2.0, 0.25), x * 2.0 + 0.25);
    }
    let recs = a.region.drain();
    assert_eq!(recs.len(), 10);
    let w: Vec<u64> = hostabi::record::words(&recs[0].data).collect();
    assert_eq!(f64::from_bits(w[0]), 1.5);
    assert_eq!(f64::from_bits(w[1]), 2.0);
    assert_eq!(w[2], fm_a, "rip is the probed instruction");
    assert_eq!(
        w[3] % 16,
        8,
        "rsp at a function entry (return address on top)"
    );
    assert_eq!(f64::from_bits(w[4]), (1.5f64 * 3.0).sqrt());

    // accumulate: its displaced window holds a RIP-relative access.
    assert_eq!(acc(10), 15);
    assert_eq!(acc(1), 16);
    assert_eq!(a.region.gvars()[2], 2);

    // Threads through the same stubs.
    let hs: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let mut ran = 0u64;
                for i in 0..5000i64 {
                    let r = add3(i, 1, 1);
                    assert!(r == i + 105 || r == i + 5, "{r}");
                    ran += u64::from(r == i + 105);
                }
                ran
            })
        })
        .collect();
    let ran: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    let s = a.region.stats();
    assert_eq!(a.region.gvars()[0], 2 + ran);
    assert_eq!(ran + s.contended, 20_000);
    eprintln!("threads: {ran} handled, {} contended", s.contended);
}
