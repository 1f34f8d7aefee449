//! The agent loaded into this very test process (the loader's full path,
//! with `SelfTarget`), and handlers dispatched from native code.

mod common;

use agent_abi::{AgentError, SavedRegs, Skip, rec};
use agent_loader::loader::AgentFailure;
use agent_loader::{LoadedAgent, ModuleSpec, RegionLayout, SelfTarget, agent_image, load_agent};
use common::*;
use std::sync::atomic::Ordering;

fn setup() -> (SelfTarget, LoadedAgent, wasmtime::Engine) {
    let img = agent_image().expect("agent builds");
    let mut t = SelfTarget::new().unwrap();
    let a = load_agent(&mut t, &img, RegionLayout::default()).expect("agent loads");
    let e = agent_loader::compile::agent_engine().unwrap();
    (t, a, e)
}

fn dispatch(a: &LoadedAgent, site: u32, f: &mut SavedRegs) -> i64 {
    type D = unsafe extern "C" fn(u32, *mut SavedRegs) -> i64;
    // SAFETY: the agent's dispatch entry point, mapped by the loader.
    let d: D = unsafe { std::mem::transmute::<u64, D>(a.dispatch) };
    // SAFETY: a valid frame.
    unsafe { d(site, f) }
}

fn gettid() -> u64 {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

fn altstack() -> (usize, usize, i32) {
    // SAFETY: querying only.
    unsafe {
        let mut ss: libc::stack_t = std::mem::zeroed();
        assert_eq!(libc::sigaltstack(std::ptr::null(), &mut ss), 0);
        (ss.ss_sp as usize, ss.ss_size, ss.ss_flags)
    }
}

#[test]
fn image_is_self_contained() {
    let img = agent_image().unwrap();
    for s in [
        agent_abi::sym::INIT,
        agent_abi::sym::LOAD,
        agent_abi::sym::DISPATCH,
        agent_abi::sym::TRAP,
        agent_abi::sym::BENCH,
    ] {
        img.symbol(s).unwrap();
    }
    assert!(!img.relative.is_empty());
    eprintln!(
        "agent: {} segments, {} KiB mapped, {} relocations",
        img.segments.len(),
        img.mapped_bytes() / 1024,
        img.relative.len()
    );
}

#[test]
fn counts_in_a_global_variable() {
    let (mut t, mut a, e) = setup();
    let p = load(
        &mut t,
        &mut a,
        &e,
        COUNT_WAT,
        &[(7, "count"), (8, "empty")],
        1,
        1_000_000,
    )
    .unwrap();
    assert_eq!(p, 0);
    let mut f = SavedRegs::default();
    for i in 0..1000u64 {
        assert_eq!(dispatch(&a, 7, &mut f), 0, "hit {i}");
    }
    assert_eq!(dispatch(&a, 8, &mut f), 0);
    assert_eq!(a.region.gvars(), vec![1000]);
    // No allocation per hit (a thread's first hit may allocate).
    let allocs = a.region.stats().allocations;
    for _ in 0..1000 {
        assert_eq!(dispatch(&a, 7, &mut f), 0);
    }
    assert_eq!(
        a.region.stats().allocations,
        allocs,
        "a hit allocates nothing"
    );
    assert_eq!(a.region.gvars(), vec![2000]);
    let s = a.region.stats();
    assert_eq!(s.handled, 2001);
    assert_eq!(s.threads, 1);
    assert_eq!(dispatch(&a, 9, &mut f), Skip::NoHandler as i64);
    assert_eq!(a.region.stats().no_handler, 1);
    // The tracer's switch.
    a.region.set_enabled(false);
    assert_eq!(dispatch(&a, 7, &mut f), Skip::Dormant as i64);
    a.region.set_enabled(true);
    assert_eq!(dispatch(&a, 7, &mut f), 0);
    assert_eq!(a.region.gvars(), vec![2001]);
}

#[test]
fn logs_and_writes_registers() {
    let (mut t, mut a, e) = setup();
    load(
        &mut t,
        &mut a,
        &e,
        LOGREGS_WAT,
        &[(3, "logregs")],
        0,
        1_000_000,
    )
    .unwrap();
    let mut f = SavedRegs {
        rdi: 40,
        rsi: 2,
        rip: 0x40_1234,
        rsp: 0x7ffd_0000_1000,
        rflags: 0x246,
        rax: 0xffff_ffff_dead_beef,
        ..Default::default()
    };
    f.xmm[1] = [0x1111, 0x2222_3333_4444_5555];
    assert_eq!(dispatch(&a, 3, &mut f), 0);
    assert_eq!(f.rax, 42, "write_reg(rax) landed in the frame");
    assert_eq!(f.rbx, 0x1234);
    assert_eq!(f.rip, 0x40_1234, "rip is read-only");
    let recs = a.region.drain();
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(
        (r.header.kind, r.header.major, r.header.minor, r.header.site),
        (rec::LOG, 7, 9, 3)
    );
    assert_eq!(r.header.tid as u64, gettid());
    assert_eq!(r.items, vec![0x0080_0000]);
    let w: Vec<u64> = hostabi::record::words(&r.data).collect();
    // SAFETY: reading this thread's fs_base.
    let fs = unsafe {
        let mut v = 0u64;
        libc::syscall(libc::SYS_arch_prctl, 0x1003, &mut v);
        v
    };
    assert_eq!(
        w,
        vec![
            40,
            2,
            0x40_1234,
            0x7ffd_0000_1000,
            0x246,
            0x2222_3333_4444_5555,
            0xdead_beef,
            fs,
            gettid(),
            std::process::id() as u64,
            0,                                       // OK
            hostabi::Status::ReadOnly as i32 as u64, // rip
        ]
    );
    assert!(a.region.drain().is_empty());
}

#[test]
fn reads_memory_without_faulting() {
    let (mut t, mut a, e) = setup();
    load(
        &mut t,
        &mut a,
        &e,
        READMEM_WAT,
        &[(1, "readmem")],
        6,
        1_000_000,
    )
    .unwrap();
    let word: Box<u64> = Box::new(0x0123_4567_89ab_cdef);
    // An unmapped page: map one and unmap it again.
    // SAFETY: a fresh mapping we own.
    let hole = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        libc::munmap(p, 4096);
        p as u64
    };
    let mut f = SavedRegs {
        rdi: &*word as *const u64 as u64,
        rsi: hole,
        ..Default::default()
    };
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    assert_eq!(dispatch(&a, 1, &mut f), 0);
    let g = a.region.gvars();
    assert_eq!(g[0], 8, "all 8 bytes read");
    assert_eq!(g[1], 0x0123_4567_89ab_cdef);
    assert_eq!(g[2], 0, "nothing readable in the hole");
    assert_eq!(
        g[3] as i64,
        hostabi::Status::Fault as i64,
        "check_access(hole)"
    );
    assert_eq!(g[4] as i64, hostabi::Status::Ok as i64, "heap is writable");
    assert!(g[5] >= before && g[5] < before + 10_000_000_000, "now_ns");
    // A read running into the hole from the page below it stops there.
    // (The page below `hole` may be mapped or not; only check the bound.)
    f.rdi = hole - 4;
    assert_eq!(dispatch(&a, 1, &mut f), 0);
    assert!(a.region.gvars()[0] <= 4);
}

#[test]
fn fuel_traps_and_bad_outcomes_are_counted_and_survived() {
    let (mut t, mut a, e) = setup();
    load(
        &mut t,
        &mut a,
        &e,
        BAD_WAT,
        &[
            (1, "spin"),
            (2, "trap"),
            (3, "div"),
            (4, "weird"),
            (6, "deep"),
            (7, "grow"),
        ],
        0,
        10_000_000,
    )
    .unwrap();
    load(&mut t, &mut a, &e, COUNT_WAT, &[(5, "count")], 1, 1_000_000).unwrap();
    let mut f = SavedRegs::default();
    assert_eq!(dispatch(&a, 1, &mut f), Skip::FuelExhausted as i64);
    assert_eq!(dispatch(&a, 2, &mut f), Skip::Trapped as i64);
    assert!(
        a.region.error().1.contains("unreachable"),
        "{:?}",
        a.region.error()
    );
    assert_eq!(dispatch(&a, 3, &mut f), Skip::Trapped as i64);
    assert!(
        a.region.error().1.contains("divide by zero"),
        "{:?}",
        a.region.error()
    );
    assert_eq!(dispatch(&a, 4, &mut f), Skip::BadOutcome as i64);
    assert_eq!(dispatch(&a, 5, &mut f), 0);
    assert_eq!(dispatch(&a, 6, &mut f), Skip::Trapped as i64);
    assert!(
        a.region.error().1.contains("call stack exhausted"),
        "{:?}",
        a.region.error()
    );
    assert_eq!(
        dispatch(&a, 7, &mut f),
        1,
        "memory grows to the limit and no further"
    );
    let s = a.region.stats();
    assert_eq!((s.fuel_exhausted, s.trapped, s.handled), (1, 4, 2));
    assert_eq!(a.region.gvars(), vec![1]);
}

#[test]
fn refuses_artifacts_of_another_configuration() {
    let (mut t, mut a, _) = setup();
    let wasm = wat::parse_str(COUNT_WAT).unwrap();
    let spec = |c: &[u8]| -> Vec<u8> { c.to_vec() };
    let try_load = |t: &mut SelfTarget, a: &mut LoadedAgent, c: &[u8]| -> AgentFailure {
        let err = a
            .load_module(
                t,
                &ModuleSpec {
                    cwasm: c,
                    sites: &[(1, "count")],
                    gvars: 1,
                    fuel: 1000,
                    load_bias: 0,
                    writes_allowed: false,
                },
            )
            .unwrap_err();
        err.downcast::<AgentFailure>().unwrap()
    };
    // wprobe's default engine: signals-based traps, 4 GiB reservations, AVX.
    let default = wasmtime::Engine::new(&wasmtime::Config::new()).unwrap();
    let c = spec(&default.precompile_module(&wasm).unwrap());
    let f = try_load(&mut t, &mut a, &c);
    assert_eq!(f.code, AgentError::Incompatible);
    eprintln!("default engine: {}", f.message);
    // wprobe's default tunables (signals-based traps, 4 GiB reservations), no AVX.
    let mut cfg = wasmtime::Config::new();
    for fl in agent_abi::engine::CRANELIFT_FLAGS_OFF {
        // SAFETY: turning CPU features off.
        unsafe {
            cfg.cranelift_flag_set(fl, "false");
        }
    }
    cfg.consume_fuel(true);
    let tun = wasmtime::Engine::new(&cfg).unwrap();
    let f = try_load(&mut t, &mut a, &tun.precompile_module(&wasm).unwrap());
    assert_eq!(f.code, AgentError::Incompatible);
    assert!(f.message.contains("memory reservation"), "{}", f.message);
    eprintln!("default tunables: {}", f.message);
    // Same tunables, AVX allowed.
    let mut cfg = wasmtime::Config::new();
    agent_abi::engine::configure(&mut cfg);
    let avx = wasmtime::Engine::new(&cfg).unwrap();
    if std::arch::is_x86_feature_detected!("avx") {
        let f = try_load(&mut t, &mut a, &avx.precompile_module(&wasm).unwrap());
        assert_eq!(f.code, AgentError::Incompatible);
        assert!(f.message.contains("has_avx"), "{}", f.message);
        eprintln!("AVX allowed: {}", f.message);
    }
    // Fuel off.
    let mut cfg = agent_loader::compile::agent_config();
    cfg.consume_fuel(false);
    let nofuel = wasmtime::Engine::new(&cfg).unwrap();
    let f = try_load(&mut t, &mut a, &nofuel.precompile_module(&wasm).unwrap());
    assert_eq!(f.code, AgentError::Incompatible);
    assert!(f.message.contains("fuel"), "{}", f.message);
    eprintln!("fuel off: {}", f.message);
    // Not an artifact at all.
    let f = try_load(&mut t, &mut a, &wasm);
    assert_eq!(f.code, AgentError::NotPrecompiled);
    // A missing export.
    let good = agent_loader::compile::agent_engine().unwrap();
    let c = good.precompile_module(&wasm).unwrap();
    let err = a
        .load_module(
            &mut t,
            &ModuleSpec {
                cwasm: &c,
                sites: &[(1, "nope")],
                gvars: 1,
                fuel: 1000,
                load_bias: 0,
                writes_allowed: false,
            },
        )
        .unwrap_err()
        .downcast::<AgentFailure>()
        .unwrap();
    assert_eq!(err.code, AgentError::MissingExport);
    // The agent is still fine.
    load(&mut t, &mut a, &good, COUNT_WAT, &[(1, "count")], 1, 1000).unwrap();
    let mut f = SavedRegs::default();
    assert_eq!(dispatch(&a, 1, &mut f), 0);
}

#[test]
fn no_signal_state_changes_on_any_thread() {
    let before_sig = sig_lines(std::process::id() as i32);
    let before_alt = altstack();
    let (mut t, mut a, e) = setup();
    load(&mut t, &mut a, &e, COUNT_WAT, &[(1, "count")], 1, 1_000_000).unwrap();
    let mut f = SavedRegs::default();
    assert_eq!(dispatch(&a, 1, &mut f), 0);
    assert_eq!(altstack(), before_alt, "this thread's sigaltstack");
    // Threads entering the agent for the first time.
    let d = a.dispatch;
    let hs: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let before = altstack();
                let mut f = SavedRegs::default();
                type D = unsafe extern "C" fn(u32, *mut SavedRegs) -> i64;
                // SAFETY: as in `dispatch`.
                let dfn: D = unsafe { std::mem::transmute::<u64, D>(d) };
                // SAFETY: a valid frame.
                let r = unsafe { dfn(1, &mut f) };
                (before, altstack(), r)
            })
        })
        .collect();
    for h in hs {
        let (b, after, r) = h.join().unwrap();
        assert_eq!(b, after, "a new thread's sigaltstack");
        assert!(r == 0 || r == Skip::Contended as i64);
    }
    assert_eq!(sig_lines(std::process::id() as i32), before_sig);
    assert_eq!(a.region.stats().threads, 5);
}

#[test]
fn concurrent_hits_are_all_accounted_for() {
    let (mut t, mut a, e) = setup();
    load(&mut t, &mut a, &e, COUNT_WAT, &[(1, "count")], 1, 1_000_000).unwrap();
    let d = a.dispatch;
    const N: u64 = 20_000;
    let hs: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                type D = unsafe extern "C" fn(u32, *mut SavedRegs) -> i64;
                // SAFETY: as in `dispatch`.
                let dfn: D = unsafe { std::mem::transmute::<u64, D>(d) };
                let mut f = SavedRegs::default();
                let mut ok = 0u64;
                for _ in 0..N {
                    // SAFETY: a valid frame.
                    match unsafe { dfn(1, &mut f) } {
                        0 => ok += 1,
                        r => assert_eq!(r, Skip::Contended as i64),
                    }
                }
                ok
            })
        })
        .collect();
    let ok: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    let s = a.region.stats();
    assert_eq!(a.region.gvars(), vec![ok], "every handled hit counted once");
    assert_eq!(s.handled, ok);
    assert_eq!(s.handled + s.contended, 4 * N);
    eprintln!("4 threads x {N}: handled {ok}, contended {}", s.contended);
    let _ = a.region.header().stats.threads.load(Ordering::Relaxed);
}

/// glibc gives a new thread the TCB (and thread pointer) of a joined one:
/// the slot is reused and the new thread is still identified correctly.
#[test]
fn threads_on_a_reused_tcb_are_told_apart() {
    let (mut t, mut a, e) = setup();
    load(
        &mut t,
        &mut a,
        &e,
        LOGREGS_WAT,
        &[(3, "logregs")],
        0,
        1_000_000,
    )
    .unwrap();
    let d = a.dispatch;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (tid, fs) = std::thread::spawn(move || {
            type D = unsafe extern "C" fn(u32, *mut SavedRegs) -> i64;
            // SAFETY: as in `dispatch`.
            let dfn: D = unsafe { std::mem::transmute::<u64, D>(d) };
            let mut f = SavedRegs::default();
            // SAFETY: a valid frame.
            assert_eq!(unsafe { dfn(3, &mut f) }, 0);
            let mut fs = 0u64;
            // SAFETY: reading this thread's fs_base.
            unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1003, &mut fs) };
            (gettid(), fs)
        })
        .join()
        .unwrap();
        seen.push((tid, fs));
    }
    let recs = a.region.drain();
    assert_eq!(recs.len(), 4);
    for (r, (tid, fs)) in recs.iter().zip(&seen) {
        let w: Vec<u64> = hostabi::record::words(&r.data).collect();
        assert_eq!((w[8], w[7]), (*tid, *fs), "current_tid and fs_base");
        assert_eq!(u64::from(r.header.tid), *tid);
    }
    let distinct_fs = {
        let mut v: Vec<u64> = seen.iter().map(|s| s.1).collect();
        v.sort();
        v.dedup();
        v.len() as u64
    };
    assert_eq!(a.region.stats().threads, distinct_fs);
    eprintln!("4 threads, {distinct_fs} distinct thread pointers");
}

/// A bug in the agent (a panic) kills the agent, not the process: the
/// entry point returns `Dead`, the message is in the region, later hits are
/// skipped as dormant, later loads refused.
#[test]
fn a_panic_in_the_agent_leaves_the_process_running() {
    let (mut t, mut a, e) = setup();
    load(&mut t, &mut a, &e, COUNT_WAT, &[(1, "count")], 1, 1_000_000).unwrap();
    let mut f = SavedRegs::default();
    assert_eq!(dispatch(&a, 1, &mut f), 0);
    type B = unsafe extern "C" fn(u32, u32, u64, *mut SavedRegs) -> u64;
    // SAFETY: the agent's bench entry point.
    let b: B = unsafe { std::mem::transmute::<u64, B>(a.bench) };
    // SAFETY: a valid frame.
    let r = unsafe { b(agent_abi::bench::PANIC, 0, 0, &mut f) } as i64;
    assert_eq!(r, AgentError::Dead as i64);
    let (code, msg) = a.region.error();
    assert_eq!(code, AgentError::Dead as i32);
    assert!(
        msg.contains("agent panic") && msg.contains("index out of bounds"),
        "{msg}"
    );
    assert_eq!(
        a.region.header().state.load(Ordering::Relaxed),
        agent_abi::state::DEAD
    );
    assert_eq!(dispatch(&a, 1, &mut f), Skip::Dormant as i64);
    let err = load(&mut t, &mut a, &e, COUNT_WAT, &[(2, "count")], 1, 1000)
        .unwrap_err()
        .downcast::<AgentFailure>()
        .unwrap();
    assert_eq!(err.code, AgentError::Dead);
    assert_eq!(a.region.gvars(), vec![1]);
}
