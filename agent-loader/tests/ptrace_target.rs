//! The agent injected into a real gcc-built C process stopped under ptrace:
//! loaded, initialised, a module loaded, handlers run by making the target's
//! thread call `wprobe_agent_dispatch`; then detached. The target's output
//! is the same as an untraced run, the handlers' effects are in the shared
//! region, and no signal disposition or alternate stack of the target
//! changed (seen from outside, before/after, and from inside at its exit).

mod common;

use agent_abi::{SAVED_REGS_SIZE, SavedRegs, rec};
use agent_loader::ptrace::PtraceTarget;
use agent_loader::target::syscall_ok;
use agent_loader::{RegionLayout, Target, agent_image, load_agent};
use common::*;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn build_target() -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/target.c");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("agent_target");
    let st = Command::new("gcc")
        .args(["-O1", "-g", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(st.success());
    out
}

/// The target thread's alternate signal stack, queried by injecting
/// `sigaltstack(NULL, buf)` with `buf` on its stack below the red zone.
fn altstack(t: &mut PtraceTarget) -> [u8; 24] {
    let sp = t.regs().unwrap().rsp - 4096;
    syscall_ok(t, libc::SYS_sigaltstack, [0, sp, 0, 0, 0, 0]).unwrap();
    let mut b = [0u8; 24];
    t.read_mem(sp, &mut b).unwrap();
    b
}

fn maps(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap()
}

fn frame_bytes(f: &SavedRegs) -> Vec<u8> {
    // SAFETY: SavedRegs is plain integers.
    unsafe { std::slice::from_raw_parts(f as *const SavedRegs as *const u8, SAVED_REGS_SIZE) }
        .to_vec()
}

#[test]
fn runs_handlers_inside_a_traced_c_process() {
    let exe = build_target();
    let img = agent_image().unwrap();
    let engine = agent_loader::compile::agent_engine().unwrap();

    // Reference output, untraced.
    let reference = Command::new(&exe).arg("40").output().unwrap();
    assert!(reference.status.success());
    let reference = String::from_utf8(reference.stdout).unwrap();
    let expect_tail: Vec<&str> = reference.lines().skip(1).collect();

    let mut child = Command::new(&exe)
        .arg("40")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let pid = child.id() as i32;
    assert_eq!(first.trim(), format!("ready {pid}"));
    // Let it get into its loop (and a sleep).
    std::thread::sleep(std::time::Duration::from_millis(50));

    let mut t = PtraceTarget::seize(pid, pid).unwrap();
    let regs_before = t.regs().unwrap();
    let sig_before = sig_lines(pid);
    let alt_before = altstack(&mut t);

    let rss = |pid: i32| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap()
    };
    let rss0 = rss(pid);
    let t0 = std::time::Instant::now();
    let mut a = load_agent(&mut t, &img, RegionLayout::default()).unwrap();
    let t_init = t0.elapsed();
    {
        use std::sync::atomic::Ordering::Relaxed;
        let h = a.region.header();
        eprintln!(
            "init: {t_init:?} (debug-build tracer); thread key mode {}, TCB tid offset 0x{:x}",
            h.thread_key.load(Relaxed),
            h.tcb_tid_off.load(Relaxed)
        );
    }
    eprintln!(
        "agent at 0x{:x} in pid {pid}, region at 0x{:x}, guard 0x{:x}",
        a.base, a.region_addr, a.guard
    );
    assert_ne!(a.guard, 0, "MADV_WIPEONFORK is available on this kernel");
    // No page of the target is writable and executable.
    for l in maps(pid).lines() {
        let perms = l.split_whitespace().nth(1).unwrap();
        assert!(!(perms.contains('w') && perms.contains('x')), "{l}");
    }
    // The agent's text is r-x, its RELRO r--.
    let agent_maps: Vec<String> = maps(pid)
        .lines()
        .filter(|l| {
            let a0 = u64::from_str_radix(l.split('-').next().unwrap(), 16).unwrap();
            a0 >= a.base && a0 < a.base + img.span
        })
        .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
        .collect();
    assert!(agent_maps.iter().any(|p| p == "r-xp"), "{agent_maps:?}");
    assert!(agent_maps.iter().any(|p| p == "r--p"), "{agent_maps:?}");

    let t0 = std::time::Instant::now();
    load(
        &mut t,
        &mut a,
        &engine,
        COUNT_WAT,
        &[(1, "count")],
        1,
        1_000_000,
    )
    .unwrap();
    eprintln!(
        "load of a module: {:?} (precompilation included)",
        t0.elapsed()
    );
    load(
        &mut t,
        &mut a,
        &engine,
        LOGREGS_WAT,
        &[(2, "logregs")],
        0,
        1_000_000,
    )
    .unwrap();

    // A frame in the target's scratch page, as a stub would have saved it.
    let frame = SavedRegs {
        rdi: 30,
        rsi: 12,
        rip: 0x40_1000,
        rsp: regs_before.rsp,
        rflags: 0x202,
        ..Default::default()
    };
    let faddr = a.scratch + 64;
    t.write_mem(faddr, &frame_bytes(&frame)).unwrap();
    for _ in 0..5 {
        assert_eq!(a.dispatch(&mut t, 1, faddr).unwrap(), 0);
    }
    assert_eq!(a.dispatch(&mut t, 2, faddr).unwrap(), 0);
    assert_eq!(
        a.region.gvars(),
        vec![5],
        "the handler counted in the target"
    );
    let mut back = vec![0u8; SAVED_REGS_SIZE];
    t.read_mem(faddr, &mut back).unwrap();
    // SAFETY: SAVED_REGS_SIZE bytes of plain integers.
    let back: SavedRegs = unsafe { std::ptr::read_unaligned(back.as_ptr() as *const SavedRegs) };
    assert_eq!(back.rax, 42, "write_reg landed in the target's frame");
    assert_eq!(back.rbx, 0x1234);
    let recs = a.region.drain();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].header.kind, rec::LOG);
    assert_eq!(recs[0].header.tid as i32, pid);
    let w: Vec<u64> = hostabi::record::words(&recs[0].data).collect();
    assert_eq!(&w[..2], &[30, 12]);
    assert_eq!(w[8], pid as u64, "current_tid in the target");
    assert_eq!(w[9], pid as u64, "current_pid in the target");
    assert_eq!(w[7], regs_before.fs_base, "fs_base of the target thread");
    let s = a.region.stats();
    assert_eq!((s.handled, s.threads, s.trapped), (6, 1, 0));

    eprintln!(
        "target RSS: {rss0} kB before the agent, {} kB after init, two loads and 6 hits",
        rss(pid)
    );
    // Signal state, from the outside.
    assert_eq!(
        altstack(&mut t),
        alt_before,
        "sigaltstack of the target thread"
    );
    assert_eq!(sig_lines(pid), sig_before);
    // The thread's registers are exactly as they were.
    let regs_after = t.regs().unwrap();
    assert_eq!(
        (
            regs_after.rip,
            regs_after.rsp,
            regs_after.rax,
            regs_after.orig_rax
        ),
        (
            regs_before.rip,
            regs_before.rsp,
            regs_before.rax,
            regs_before.orig_rax
        )
    );
    t.detach().unwrap();

    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "{st}");
    let got: Vec<&str> = rest.lines().collect();
    assert_eq!(got, expect_tail, "the target's output is unchanged");
    assert!(rest.contains("altstack same size=65536 flags=0"), "{rest}");
    assert!(rest.contains("sigcgt same"), "{rest}");
    // The region outlives the target on our side.
    assert_eq!(a.region.gvars(), vec![5]);
}
