//! ptrace provider: probes in a shared library (linked, and dlopen'ed after
//! start: LibrariesChanged) and hardware watchpoints (write, read/write,
//! execute, threads created later).

use crate::case;
use crate::support::case::{Case, Need};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(probe_in_a_linked_shared_library, Need::Ptrace),
    case!(dlopen_after_start_reports_libraries_changed, Need::Ptrace),
    case!(
        write_watchpoint_sees_each_write_after_it_happened,
        Need::Ptrace,
        Need::DebugRegisters
    ),
    case!(
        read_write_and_exec_watchpoints,
        Need::Ptrace,
        Need::DebugRegisters
    ),
    case!(
        watchpoint_on_threads_created_later,
        Need::Ptrace,
        Need::DebugRegisters
    ),
];

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::support::tracer::*;
use hostabi::env::HitEnv;
use runtime::transport::ptrace::{
    PtraceAction, PtraceEvent, PtraceTracer, TraceOptions, WatchKind, WpId,
};

fn opts() -> TraceOptions {
    TraceOptions {
        follow_forks: false,
        verify_opcodes: true,
    }
}

fn argv(prog: &Path, out: &Path, args: &[&str]) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![prog.into(), format!(">{}", out.display()).into()];
    v.extend(args.iter().map(Into::into));
    v
}

fn libs() -> (PathBuf, PathBuf, PathBuf) {
    let lib = build("libprobe.so", "lib.c", &["-O2", "-shared", "-fPIC"]);
    let dir = lib.parent().unwrap().to_path_buf();
    let linked = build(
        "uselib-linked",
        "uselib.c",
        &[
            "-O2",
            &format!("-L{}", dir.display()),
            "-Wl,--no-as-needed",
            "-l:libprobe.so",
            &format!("-Wl,-rpath,{}", dir.display()),
        ],
    );
    let dl = build("uselib-dl", "uselib.c", &["-O2", "-ldl"]);
    (lib, linked, dl)
}

fn lib_hits(prog: &Path, args: &[&str], lib: &Path) -> (u64, u64, String) {
    let out = out_file();
    let mut t = PtraceTracer::launch(&argv(prog, &out, args), opts()).unwrap();
    let pid = t.main_pid();
    let lib = lib.to_path_buf();
    let mut armed = false;
    let mut lib_events = 0;
    let mut hits = 0;
    let stop = AtomicBool::new(false);
    t.run(&stop, &mut |t, ev| {
        match ev {
            PtraceEvent::LibrariesChanged { pid: p } => {
                lib_events += 1;
                let mapped = t.maps(p).iter().any(|m| m.path.ends_with("libprobe.so"));
                if mapped && !armed {
                    let a = addr_of(t, p, &lib, "lib_target");
                    t.insert_breakpoint(p, a, Some(opcode(&lib, "lib_target")))
                        .unwrap();
                    armed = true;
                }
            }
            PtraceEvent::Breakpoint { .. } => hits += 1,
            _ => {}
        }
        PtraceAction::Continue
    })
    .unwrap();
    assert!(
        armed,
        "libprobe.so seen in a LibrariesChanged event of {pid}"
    );
    (hits, lib_events, std::fs::read_to_string(&out).unwrap())
}

fn probe_in_a_linked_shared_library() {
    let _t = timeout("lib", 120);
    let (lib, linked, _) = libs();
    let plain = run_plain(&[linked.to_str().unwrap(), "5000"]);
    let (hits, events, out) = lib_hits(&linked, &["5000"], &lib);
    assert_eq!(hits, 5000);
    assert!(events >= 1);
    assert_eq!(out, plain);
}

fn dlopen_after_start_reports_libraries_changed() {
    let _t = timeout("dlopen", 120);
    let (lib, _, dl) = libs();
    let l = lib.to_str().unwrap();
    let plain = run_plain(&[dl.to_str().unwrap(), "5000", "dl", l]);
    let (hits, events, out) = lib_hits(&dl, &["5000", "dl", l], &lib);
    assert_eq!(hits, 5000);
    assert!(events >= 2, "initial load and dlopen: {events}");
    assert_eq!(out, plain);
}

/// Per watchpoint: (rip, value of g_write, tid) of each hit.
type Seen = HashMap<WpId, Vec<(u64, u64, u64)>>;

fn watch_run(
    n: u64,
    threads: u64,
    arm: &dyn Fn(&mut PtraceTracer, i32, &Path) -> Vec<WpId>,
) -> (Seen, String, u64) {
    let prog = build("watch", "watch.c", &["-O2", "-fPIE", "-pie"]);
    let out = out_file();
    let mut t = PtraceTracer::launch(
        &argv(&prog, &out, &[&n.to_string(), &threads.to_string()]),
        opts(),
    )
    .unwrap();
    let pid = t.main_pid();
    let ids = arm(&mut t, pid, &prog);
    let g_write = addr_of(&mut t, pid, &prog, "g_write");
    let bias = g_write - sym(&prog, "g_write").0;
    let mut seen: HashMap<_, Vec<(u64, u64, u64)>> = HashMap::new();
    let stop = AtomicBool::new(false);
    t.run(&stop, &mut |_, ev| {
        if let PtraceEvent::Watchpoint { wp, hit } = ev {
            assert!(ids.contains(&wp));
            let mut b = [0u8; 8];
            assert_eq!(hit.read_mem(g_write, &mut b), 8);
            seen.entry(wp)
                .or_default()
                .push((hit.regs().rip, u64::from_le_bytes(b), hit.tid()));
        }
        PtraceAction::Continue
    })
    .unwrap();
    (seen, std::fs::read_to_string(&out).unwrap(), bias)
}

fn write_watchpoint_sees_each_write_after_it_happened() {
    let _t = timeout("ww", 120);
    let n = 500;
    let prog = build("watch", "watch.c", &["-O2", "-fPIE", "-pie"]);
    let (seen, out, bias) = watch_run(n, 0, &|t, pid, prog| {
        let a = addr_of(t, pid, prog, "g_write");
        vec![t.insert_watchpoint(pid, a, 8, WatchKind::Write).unwrap()]
    });
    let v = seen.values().next().unwrap();
    assert_eq!(v.len() as u64, n);
    for (i, (_, val, _)) in v.iter().enumerate() {
        assert_eq!(*val, i as u64 + 1, "value visible after the write");
    }
    // RIP is the instruction after the store: main's one store to g_write.
    let after = crate::support::disasm::after_stores(&prog, "main", "g_write");
    assert_eq!(after.len(), 1, "{after:x?}");
    assert!(
        v.iter().all(|(rip, _, _)| rip - bias == after[0]),
        "every hit right after main's store at {:#x}: {:x?}",
        after[0],
        &v[..3]
    );
    assert!(out.starts_with("s="));
}

fn read_write_and_exec_watchpoints() {
    let _t = timeout("rwx", 120);
    let n = 300;
    let prog = build("watch", "watch.c", &["-O2", "-fPIE", "-pie"]);
    let fn_addr = std::cell::Cell::new(0);
    let (seen, out, _) = watch_run(n, 0, &|t, pid, prog| {
        let r = addr_of(t, pid, prog, "g_read");
        let f = addr_of(t, pid, prog, "watched_fn");
        fn_addr.set(f);
        vec![
            t.insert_watchpoint(pid, r, 8, WatchKind::ReadWrite)
                .unwrap(),
            t.insert_watchpoint(pid, f, 1, WatchKind::Exec).unwrap(),
        ]
    });
    assert_eq!(seen.len(), 2);
    let mut counts: Vec<usize> = seen.values().map(Vec::len).collect();
    counts.sort();
    assert_eq!(counts, vec![n as usize, n as usize], "{out}");
    let exec_hits = seen
        .values()
        .find(|v| v[0].0 == fn_addr.get())
        .expect("exec watchpoint: rip = function");
    assert!(exec_hits.iter().all(|h| h.0 == fn_addr.get()));
    let _ = prog;
}

fn watchpoint_on_threads_created_later() {
    let _t = timeout("wthreads", 120);
    let n = 2000;
    let (seen, out, _) = watch_run(n, 4, &|t, pid, prog| {
        let a = addr_of(t, pid, prog, "g_shared");
        vec![t.insert_watchpoint(pid, a, 8, WatchKind::Write).unwrap()]
    });
    let v = seen.values().next().unwrap();
    assert_eq!(v.len() as u64, 4 * n);
    let tids: std::collections::HashSet<u64> = v.iter().map(|h| h.2).collect();
    assert_eq!(tids.len(), 4);
    assert!(out.ends_with(&format!("shared={}\n", 4 * n)), "{out}");
}
