//! ptrace provider: breakpoint hit counts (T1), PIE / non-PIE / -O0 / -O2 /
//! CET builds, every step-over path (emulation, out of line, single-step),
//! arm errors (T15) and tracee death (T2).

use crate::case;
use crate::support::case::{Case, Need};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(exact_hit_count_and_untraced_output_t1, Need::Ptrace),
    case!(builds_pie_nopie_o0_o2_cet, Need::Ptrace),
    case!(every_step_over_path_is_exact_and_measured, Need::Ptrace),
    case!(per_path_cost, Need::Ptrace),
    case!(arm_errors_t15, Need::Ptrace),
    case!(sigkill_of_the_tracee_while_stopped_t2, Need::Ptrace),
    case!(handler_register_writes_are_applied, Need::Ptrace),
];

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::support::tracer::*;
use runtime::transport::ptrace::{
    ArmError, BpId, ExitStatus, PtraceAction, PtraceError, PtraceEvent, PtraceTracer, StepPolicy,
    TraceOptions,
};

fn opts() -> TraceOptions {
    TraceOptions {
        follow_forks: false,
        verify_opcodes: true,
    }
}

/// Launches `prog` with args, arms `target`, runs; returns (hits, output, summary).
fn count_hits(
    prog: &std::path::Path,
    sym_name: &str,
    args: &[&str],
    policy: StepPolicy,
) -> (u64, String, runtime::transport::ptrace::RunSummary) {
    let out = out_file();
    let mut argv: Vec<std::ffi::OsString> = vec![prog.into(), format!(">{}", out.display()).into()];
    argv.extend(args.iter().map(Into::into));
    let mut t = PtraceTracer::launch(&argv, opts()).unwrap();
    t.set_step_policy(policy);
    let pid = t.main_pid();
    let a = addr_of(&mut t, pid, prog, sym_name);
    let bp = t
        .insert_breakpoint(pid, a, Some(opcode(prog, sym_name)))
        .unwrap();
    let mut hits = 0u64;
    let mut exited = None;
    let stop = AtomicBool::new(false);
    let summary = t
        .run(&stop, &mut |_, ev| {
            match ev {
                PtraceEvent::Breakpoint { bp: ids, hit } => {
                    assert_eq!(ids, &[bp]);
                    assert_eq!(hit.regs().rip, a, "rip must be the probe address");
                    hits += 1;
                }
                PtraceEvent::ProcessExited { pid: p, status } if p == pid => exited = Some(status),
                _ => {}
            }
            PtraceAction::Continue
        })
        .unwrap();
    assert_eq!(exited, Some(ExitStatus::Code(0)));
    (hits, std::fs::read_to_string(&out).unwrap(), summary)
}

fn exact_hit_count_and_untraced_output_t1() {
    let _t = timeout("t1", 120);
    let prog = build("calls-pie-O2", "calls.c", &["-O2", "-fPIE", "-pie"]);
    let n = 100_000;
    let plain = run_plain(&[prog.to_str().unwrap(), &n.to_string()]);
    let start = Instant::now();
    let (hits, out, s) = count_hits(&prog, "target", &[&n.to_string()], StepPolicy::Auto);
    let el = start.elapsed();
    assert_eq!(hits, n);
    assert_eq!(out, plain);
    eprintln!(
        "T1: {n} hits in {el:?} ({:.2} us/hit), summary {s:?}",
        el.as_secs_f64() * 1e6 / n as f64
    );
}

fn builds_pie_nopie_o0_o2_cet() {
    let _t = timeout("builds", 120);
    for (name, flags) in [
        ("calls-nopie-O0", &["-O0", "-fno-PIE", "-no-pie"][..]),
        ("calls-pie-O0", &["-O0", "-fPIE", "-pie"][..]),
        ("calls-nopie-O2", &["-O2", "-fno-PIE", "-no-pie"][..]),
        ("calls-cet-O2", &["-O2", "-fcf-protection=full"][..]),
        ("calls-cet-O0", &["-O0", "-fcf-protection=full"][..]),
    ] {
        let prog = build(name, "calls.c", flags);
        let plain = run_plain(&[prog.to_str().unwrap(), "5000"]);
        let (hits, out, s) = count_hits(&prog, "target", &["5000"], StepPolicy::Auto);
        assert_eq!(hits, 5000, "{name}");
        assert_eq!(out, plain, "{name}");
        if name.starts_with("calls-cet") {
            assert_eq!(
                opcode(&prog, "target"),
                0xf3,
                "CET build starts with endbr64"
            );
        }
        assert!(
            s.emulated >= 5000 && s.single_stepped == 0,
            "{name}: first instruction emulated: {s:?}"
        );
    }
}

/// Every instruction of every asm function probed; each path counted and timed.
fn all_instructions(policy: StepPolicy) -> (u64, runtime::transport::ptrace::RunSummary, f64) {
    let prog = build("asmfuncs", "asmfuncs.c", &["-O1", "-fPIE", "-pie"]);
    let n = 2000u64;
    let plain = run_plain(&[prog.to_str().unwrap(), &n.to_string()]);
    let out = out_file();
    let argv: Vec<std::ffi::OsString> = vec![
        prog.clone().into(),
        format!(">{}", out.display()).into(),
        n.to_string().into(),
    ];
    let mut t = PtraceTracer::launch(&argv, opts()).unwrap();
    t.set_step_policy(policy);
    let pid = t.main_pid();
    let info = wprobe_elf::ElfInfo::open(&prog).unwrap();
    let mut expected: HashMap<BpId, (String, u64)> = HashMap::new();
    for f in [
        "f_push",
        "f_sub",
        "f_lea",
        "f_endbr",
        "f_nop",
        "f_jmp",
        "f_call",
        "f_ool",
        "f_ool2",
        "f_movimm",
        "f_pushimm",
        "f_rep",
    ] {
        if let Ok(only) = std::env::var("WPROBE_TEST_FUNCS")
            && !only.split(',').any(|o| o == f)
        {
            continue;
        }
        let (v, size) = sym(&prog, f);
        let base = addr_of(&mut t, pid, &prog, f);
        let bytes = info.bytes_at(v, size as usize).unwrap().to_vec();
        let mut off = 0usize;
        while off < bytes.len() {
            let insn = runtime::arch::decode(base + off as u64, &bytes[off..]).unwrap();
            let id = t
                .insert_breakpoint(pid, base + off as u64, Some(bytes[off]))
                .unwrap();
            // ud2 after the jmp and the f_ool2 fall-through are not executed every time.
            let count = match (f, off) {
                ("f_jmp", 2) => 0,
                ("f_ool2", o) if (6..12).contains(&o) => 1,
                ("f_ool2", o) if o >= 12 => n - 1,
                // f_call calls f_lea too.
                ("f_lea", _) => 2 * n,
                _ => n,
            };
            expected.insert(id, (format!("{f}+{off}"), count));
            off += insn.len as usize;
        }
    }
    let mut counts: HashMap<BpId, u64> = HashMap::new();
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let s = t
        .run(&stop, &mut |_, ev| {
            if let PtraceEvent::Breakpoint { bp, .. } = ev {
                for id in bp {
                    *counts.entry(*id).or_default() += 1;
                }
            }
            PtraceAction::Continue
        })
        .unwrap();
    let el = start.elapsed().as_secs_f64();
    for (id, (name, want)) in &expected {
        assert_eq!(
            counts.get(id).copied().unwrap_or(0),
            *want,
            "{name} under {policy:?}"
        );
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap(), plain, "{policy:?}");
    let total: u64 = counts.values().sum();
    (total, s, el * 1e6 / total as f64)
}

fn every_step_over_path_is_exact_and_measured() {
    let _t = timeout("paths", 300);
    let (hits, s, us) = all_instructions(StepPolicy::Auto);
    eprintln!("Auto: {hits} hits, {us:.2} us/hit, {s:?}");
    assert!(s.emulated > 0 && s.out_of_line > 0, "{s:?}");
    let (hits, s, us) = all_instructions(StepPolicy::NoEmulation);
    eprintln!("NoEmulation: {hits} hits, {us:.2} us/hit, {s:?}");
    assert_eq!(s.emulated, 0);
    let (hits, s, us) = all_instructions(StepPolicy::SingleStepOnly);
    eprintln!("SingleStepOnly: {hits} hits, {us:.2} us/hit, {s:?}");
    assert!(s.single_stepped >= hits, "{s:?}");
}

fn per_path_cost() {
    let _t = timeout("cost", 300);
    let prog = build("calls-pie-O2", "calls.c", &["-O2", "-fPIE", "-pie"]);
    let n = 20_000u64;
    for policy in [
        StepPolicy::Auto,
        StepPolicy::NoEmulation,
        StepPolicy::SingleStepOnly,
    ] {
        let start = Instant::now();
        let (hits, _, s) = count_hits(&prog, "target", &[&n.to_string()], policy);
        let el = start.elapsed();
        assert_eq!(hits, n);
        eprintln!(
            "COST {policy:?}: {:.2} us/hit ({s:?})",
            el.as_secs_f64() * 1e6 / n as f64
        );
    }
    let start = Instant::now();
    run_plain(&[prog.to_str().unwrap(), &n.to_string()]);
    eprintln!("COST untraced run: {:?}", start.elapsed());
}

fn arm_errors_t15() {
    let _t = timeout("t15", 60);
    let prog = build("calls-pie-O2", "calls.c", &["-O2", "-fPIE", "-pie"]);
    let argv: Vec<std::ffi::OsString> = vec![
        prog.clone().into(),
        format!(">{}", out_file().display()).into(),
        "10".into(),
    ];
    let mut t = PtraceTracer::launch(&argv, opts()).unwrap();
    let pid = t.main_pid();
    let a = addr_of(&mut t, pid, &prog, "target");
    let real = opcode(&prog, "target");
    let before = read_mem(pid, a, 16);
    match t.insert_breakpoint(pid, a, Some(real ^ 0xff)) {
        Err(
            e @ ArmError::OpcodeMismatch {
                addr,
                expected,
                found,
            },
        ) => {
            assert_eq!((addr, expected, found), (a, real ^ 0xff, real));
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("{a:#x}"))
                    && msg.contains(&format!("{:#04x}", real ^ 0xff))
                    && msg.contains(&format!("{real:#04x}")),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(read_mem(pid, a, 16), before, "nothing written on error");
    // Outside any executable mapping: the stack, and address 0.
    let stack = t
        .maps(pid)
        .iter()
        .find(|m| m.path == "[stack]")
        .unwrap()
        .start;
    assert!(matches!(
        t.insert_breakpoint(pid, stack, None),
        Err(ArmError::NotExecutable { .. })
    ));
    assert!(matches!(
        t.insert_breakpoint(pid, 0, None),
        Err(ArmError::NotExecutable { .. })
    ));
    // Our own int3 then a foreign one.
    let id = t.insert_breakpoint(pid, a, Some(real)).unwrap();
    let id2 = t.insert_breakpoint(pid, a, Some(real)).unwrap();
    assert_ne!(id, id2);
    assert_eq!(read_mem(pid, a, 1), [0xcc]);
    t.remove_breakpoint(id).unwrap();
    assert_eq!(read_mem(pid, a, 1), [0xcc], "still armed for id2");
    t.remove_breakpoint(id2).unwrap();
    assert_eq!(read_mem(pid, a, 16), before);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .unwrap();
        f.write_all_at(&[0xcc], a).unwrap();
    }
    assert!(
        matches!(t.insert_breakpoint(pid, a, None), Err(ArmError::AlreadyTrapped { addr }) if addr == a)
    );
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .unwrap();
        f.write_all_at(&before[..1], a).unwrap();
    }
    // Watchpoint errors.
    use runtime::transport::ptrace::WatchKind;
    let g = stack & !7;
    assert!(matches!(
        t.insert_watchpoint(pid, g + 1, 4, WatchKind::Write),
        Err(ArmError::BadWatchpoint { .. })
    ));
    assert!(matches!(
        t.insert_watchpoint(pid, g, 3, WatchKind::Write),
        Err(ArmError::BadWatchpoint { .. })
    ));
    let mut ids = vec![];
    for k in 0..4 {
        ids.push(
            t.insert_watchpoint(pid, g + 8 * k, 8, WatchKind::Write)
                .unwrap(),
        );
    }
    assert!(matches!(
        t.insert_watchpoint(pid, g + 64, 8, WatchKind::Write),
        Err(ArmError::NoDebugRegister { limit: 4 })
    ));
    for id in ids {
        t.remove_watchpoint(id).unwrap();
    }
    drop(t);
    // No such pid.
    assert!(matches!(
        PtraceTracer::attach(i32::MAX - 7, opts()),
        Err(PtraceError::NoSuchProcess { .. })
    ));
    // Command not found is an error, not a hang.
    match PtraceTracer::launch(&["/nonexistent/wprobe-no-such-cmd".into()], opts()) {
        Err(PtraceError::CommandNotFound { cmd }) => assert!(cmd.contains("no-such-cmd")),
        other => panic!("{other:?}"),
    }
}

fn sigkill_of_the_tracee_while_stopped_t2() {
    let _t = timeout("t2", 60);
    let prog = build("calls-pie-O2", "calls.c", &["-O2", "-fPIE", "-pie"]);
    let argv: Vec<std::ffi::OsString> = vec![
        prog.clone().into(),
        format!(">{}", out_file().display()).into(),
        "0".into(),
    ];
    let mut t = PtraceTracer::launch(&argv, opts()).unwrap();
    let pid = t.main_pid();
    let a = addr_of(&mut t, pid, &prog, "target");
    t.insert_breakpoint(pid, a, None).unwrap();
    let stop = AtomicBool::new(false);
    let mut hits = 0;
    let mut status = None;
    let start = Instant::now();
    t.run(&stop, &mut |_, ev| {
        match ev {
            PtraceEvent::Breakpoint { .. } => {
                hits += 1;
                if hits == 100 {
                    // Killed while stopped at the breakpoint, inside the handler.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            PtraceEvent::ProcessExited { status: s, .. } => status = Some(s),
            _ => {}
        }
        PtraceAction::Continue
    })
    .unwrap();
    assert_eq!(status, Some(ExitStatus::Signal(libc::SIGKILL)));
    assert!(start.elapsed().as_secs() < 10);
    // No zombie left.
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

fn handler_register_writes_are_applied() {
    let _t = timeout("regwrite", 60);
    use hostabi::env::HitEnv;
    let prog = build("calls-nopie-O0", "calls.c", &["-O0", "-fno-PIE", "-no-pie"]);
    let out = out_file();
    let argv: Vec<std::ffi::OsString> = vec![
        prog.clone().into(),
        format!(">{}", out.display()).into(),
        "10".into(),
    ];
    let mut t = PtraceTracer::launch(&argv, opts()).unwrap();
    let pid = t.main_pid();
    let a = addr_of(&mut t, pid, &prog, "target");
    t.insert_breakpoint(pid, a, None).unwrap();
    let stop = AtomicBool::new(false);
    let mut gv = vec![0u64; 4];
    t.run(&stop, &mut |_, ev| {
        if let PtraceEvent::Breakpoint { hit, .. } = ev {
            hit.with_gvars(&mut gv, |env| {
                // rdi = i; make every call target(0).
                assert!(env.read_reg(0x0A, 0).unwrap() < 10);
                assert_eq!(env.write_reg(0x0A, 0), hostabi::Status::Ok);
                assert_eq!(env.read_reg(0x0A, 0), Some(0));
                assert_eq!(env.write_reg(0x0D, 0), hostabi::Status::ReadOnly);
                assert_eq!(env.read_reg(0x0D, 0), Some(a));
                let mut b = [0u8; 1];
                assert_eq!(env.read_mem(a, &mut b), 1);
                assert_ne!(b[0], 0xcc, "our int3 is shadowed");
                assert!(env.check_access(a, false) && !env.check_access(a, true));
                assert_eq!(
                    env.write_mem(a, &[0x90]),
                    hostabi::Status::Fault,
                    "text is not writable by the process"
                );
                let sp = env.read_reg(0x0E, 0).unwrap();
                let mut w = [0u8; 8];
                assert_eq!(env.read_mem(sp, &mut w), 8);
                assert_eq!(env.write_mem(sp, &w), hostabi::Status::Ok);
                assert!(env.read_reg(0x4D, 1).is_some(), "xmm0 high via GETFPREGS");
                assert!(env.read_reg(0x33, 0).is_some(), "dr7");
                let _ = env.cpu();
                assert_eq!(env.tid(), pid as u64);
                env.gvars()[0] += 1;
            });
        }
        PtraceAction::Continue
    })
    .unwrap();
    assert_eq!(gv[0], 10);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "sum=10\n");
}
