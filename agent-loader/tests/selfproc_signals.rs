//! The agent in this test process under signals and fork (a separate test
//! binary: it installs a SIGUSR2 handler, which would race the signal-state
//! checks of `selfproc`).

mod common;

use agent_abi::{SavedRegs, Skip};
use agent_loader::{LoadedAgent, RegionLayout, SelfTarget, agent_image, load_agent};
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

static SIGNAL_RESULT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
static SIGNAL_DISPATCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn on_sigusr2(_: libc::c_int) {
    type D = unsafe extern "C" fn(u32, *mut SavedRegs) -> i64;
    let d = SIGNAL_DISPATCH.load(Ordering::SeqCst);
    // SAFETY: the agent's dispatch (async-signal-safe: no libc, no locks
    // waited on) with a frame on this handler's stack.
    let r = unsafe {
        let f: D = std::mem::transmute::<u64, D>(d);
        let mut fr = SavedRegs::default();
        f(1, &mut fr)
    };
    SIGNAL_RESULT.store(r, Ordering::SeqCst);
}

/// A signal handler of the process runs on a thread while that thread is
/// inside a handler, and hits a probe: the nested hit is skipped and
/// counted, the outer handler completes.
#[test]
fn a_probe_hit_from_a_signal_handler_inside_a_handler_is_skipped() {
    let (mut t, mut a, e) = setup();
    load(
        &mut t,
        &mut a,
        &e,
        SPIN_WAT,
        &[(1, "spin")],
        1,
        1_000_000_000,
    )
    .unwrap();
    SIGNAL_DISPATCH.store(a.dispatch, Ordering::SeqCst);
    // SAFETY: installing a handler for SIGUSR2, which nothing else in this
    // test binary uses.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr2 as *const () as usize;
        assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
    }
    // SAFETY: pthread_self is always valid.
    let me = unsafe { libc::pthread_self() } as usize;
    let killer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(5));
        // SAFETY: the test thread is alive (it joins us).
        unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR2) };
    });
    let mut f = SavedRegs::default();
    let r = dispatch(&a, 1, &mut f);
    killer.join().unwrap();
    assert_eq!(r, 0, "the interrupted handler completed");
    assert_eq!(a.region.gvars(), vec![1]);
    let nested = SIGNAL_RESULT.load(Ordering::SeqCst);
    // The signal may (rarely) land after the handler returned; then it ran
    // the handler itself.
    if nested == Skip::Reentered as i64 {
        assert_eq!(a.region.stats().reentered, 1);
    } else {
        assert_eq!(nested, 0);
        eprintln!("signal arrived after the handler: not a reentrancy test this time");
    }
}

/// A forked child inherits the agent but stays dormant (fork guard wiped),
/// and touches nothing of the parent's shared region.
#[test]
fn a_forked_child_is_dormant() {
    let (mut t, mut a, e) = setup();
    load(&mut t, &mut a, &e, COUNT_WAT, &[(1, "count")], 1, 1_000_000).unwrap();
    let mut f = SavedRegs::default();
    assert_eq!(dispatch(&a, 1, &mut f), 0);
    let before = a.region.stats();
    let d = a.dispatch;
    // SAFETY: the child only calls the agent (no libc, no allocation) and _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        type D = unsafe extern "C" fn(u32, *mut SavedRegs) -> i64;
        // SAFETY: as above.
        unsafe {
            let df: D = std::mem::transmute::<u64, D>(d);
            let mut fr = SavedRegs::default();
            let r = df(1, &mut fr);
            libc::_exit(if r == Skip::Dormant as i64 { 0 } else { 1 });
        }
    }
    let mut st = 0;
    // SAFETY: our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
    assert!(
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
        "child status {st:#x}"
    );
    assert_eq!(a.region.stats(), before, "the child counted nothing");
    assert_eq!(a.region.gvars(), vec![1]);
    assert_eq!(dispatch(&a, 1, &mut f), 0, "the parent's agent still runs");
    assert_eq!(a.region.gvars(), vec![2]);
}
