//! The session driven by the scripted transport ([`crate::transport::fake`]):
//! each event kind in, the records, statistics, hook events and transport
//! calls out. No process, no root: a probe is resolved in a small module
//! file written here, mapped where the test says.

use std::sync::{Arc, Mutex};

use super::hook::{HookEvent, HookHit, RecordHook};
use super::{EVERY_CALL, LoadedProgram, Session};
use crate::out::sink::Sink;
use crate::transport::calls::Left;
use crate::transport::fake::{
    self, Call, EXE_BASE, Fake, FakeHit, FakeRun, LIB_BASE, Output, PID, SITE, Step, engine, exe,
    lib, mapping, program,
};
use crate::transport::{Action, Capabilities, Event, ExitStatus, Insert, RunCounts, TargetOutcome};

/// What the record hook saw, one line per call, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl RecordHook for Seen {
    fn run(&mut self, hit: &HookHit, sink: &Sink) {
        let data: Vec<u8> = sink
            .records
            .iter()
            .flat_map(|r| sink.bytes[r.data.clone()].to_vec())
            .collect();
        self.0.lock().unwrap().push(format!(
            "run {}:{} pid {} tid {} ip {:#x} records {} data {data:?}",
            hit.prog,
            hit.index,
            hit.pid,
            hit.tid,
            hit.ip,
            sink.records.len()
        ));
    }
    fn event(&mut self, ev: &HookEvent) {
        self.0.lock().unwrap().push(format!("{ev:?}"));
    }
    fn call(&mut self, prog: usize, index: usize, ev: &Event<'_>) {
        let s = match ev {
            Event::Entered { tid, rsp, .. } => {
                format!("entered {prog}:{index} tid {tid} rsp {rsp:#x}")
            }
            Event::Returned {
                tid,
                rax,
                entry_rsp,
                elapsed_ns,
                ..
            } => format!(
                "returned {prog}:{index} tid {tid} rsp {entry_rsp:#x} rax {rax} in {elapsed_ns}"
            ),
            Event::Unwound {
                tid,
                entry_rsp,
                cause,
                ..
            } => format!("unwound {prog}:{index} tid {tid} rsp {entry_rsp:#x} {cause:?}"),
            other => format!("call {other:?}"),
        };
        self.0.lock().unwrap().push(s);
    }
    fn tick(&mut self) {
        self.0.lock().unwrap().push("tick".into());
    }
}

/// A session of `programs` writing text into the returned buffer.
fn session(programs: Vec<LoadedProgram>) -> (Session, Output) {
    let out = Output::default();
    let s = Session::new(
        engine(),
        programs,
        crate::session::RunOptions::for_tests(true),
        Box::new(out.clone()),
    )
    .expect("session");
    (s, out)
}

/// A session whose records go to a hook instead.
fn hooked(programs: Vec<LoadedProgram>) -> (Session, Seen) {
    let (mut s, _) = session(programs);
    let seen = Seen::default();
    s.set_record_hook(Box::new(seen.clone()));
    (s, seen)
}

/// The fake transport with the executable mapped in [`PID`].
fn transport(caps: Capabilities) -> Fake {
    fake::traced(caps)
}

/// Arms at the start, runs the script, detaches.
fn run(s: &mut Session, t: &mut Fake, steps: Vec<Step>) -> Option<ExitStatus> {
    s.arm_at_start(t, PID, false).expect("arming");
    t.script(steps);
    let stop = std::sync::atomic::AtomicBool::new(false);
    s.run(t, &stop).expect("run")
}

fn stats(s: &Session, i: usize) -> super::ProbeStats {
    s.stats()[i].1.clone()
}

fn hit(ip: u64) -> FakeHit {
    FakeHit::at(PID, PID, ip)
}

fn ev(e: Event<'static>) -> Step {
    Step::Event(e)
}

const LOG_RDI: &str = "name = {exe}\noffset = 0x401000\n push r, rdi\n log 1\n exit\n";

#[test]
fn hits_run_the_handler_on_the_hits_registers_and_memory() {
    let p = program(
        "p",
        "name = {exe}\noffset = 0x401000\n push r, rdi\n push r, rsi\n push mem, u32\n log 2\n exit\n",
    );
    let (mut s, out) = session(vec![p]);
    let mut t = transport(fake::CAPS);
    let status = run(
        &mut s,
        &mut t,
        vec![
            Step::Hit(
                vec![0],
                hit(SITE)
                    .reg("rdi", 7)
                    .reg("rsi", 0x5000)
                    .mem(0x5000, &[1, 2, 0, 0]),
            ),
            Step::Hit(vec![0], hit(SITE).reg("rdi", 9)),
            ev(Event::ProcessExited {
                pid: PID,
                status: ExitStatus::Code(3),
            }),
        ],
    );
    assert_eq!(status, Some(ExitStatus::Code(3)));
    assert_eq!(t.inserts(), [(0, PID, SITE)]);
    assert!(matches!(
        t.calls[0],
        Call::Insert {
            what: Insert::Breakpoint { opcode: None },
            ..
        }
    ));
    assert_eq!(t.calls.last(), Some(&Call::Detach));
    let st = stats(&s, 0);
    assert_eq!((st.hits, st.runs, st.records), (2, 2, 2));
    assert_eq!(
        out.text(),
        "p:0x401000 pid 1000001 tid 1000001 cpu 0 1.0: (513, 7)\n\
         p:0x401000 pid 1000001 tid 1000001 cpu 0 1.0: (empty)\n",
        "the second hit's memory is unreadable: its handler faults, no value logged"
    );
}

#[test]
fn ignore_then_maxhits_removes_the_probe_and_later_hits_do_not_count() {
    let p = program(
        "p",
        "name = {exe}\noffset = 0x401000\nignore = 1\nmaxhits = 2\n push r, rdi\n log 1\n exit\n",
    );
    let (mut s, seen) = hooked(vec![p]);
    let mut t = transport(fake::CAPS);
    let hits = (1..=5).map(|i| Step::Hit(vec![0], hit(SITE).reg("rdi", i)));
    run(&mut s, &mut t, hits.collect());
    let st = stats(&s, 0);
    assert_eq!((st.hits, st.ignored, st.runs, st.records), (3, 1, 2, 2));
    let armed = t.armed(0, PID).unwrap();
    assert_eq!(t.removes(), [armed], "removed once, after the second run");
    assert_eq!(t.delivered, 5);
    assert_eq!(
        seen.lines(),
        [2, 3].map(|v| format!(
            "run 0:0 pid {PID} tid {PID} ip {SITE:#x} records 1 data [{v}, 0, 0, 0, 0, 0, 0, 0]"
        ))
    );
}

#[test]
fn remove_disarms_the_probe_in_every_process() {
    let p = program("p", "name = {exe}\noffset = 0x401000\n remove\n");
    let (mut s, seen) = hooked(vec![p]);
    let mut t = transport(fake::CAPS);
    let child = PID + 1;
    run(
        &mut s,
        &mut t,
        vec![
            ev(Event::ProcessStarted {
                pid: child,
                parent: PID,
            }),
            Step::Hit(vec![0], FakeHit::at(child, child, SITE)),
            Step::Hit(vec![0], hit(SITE)),
        ],
    );
    assert_eq!(t.inserts(), [(0, PID, SITE), (0, child, SITE)]);
    let (a, b) = (t.armed(0, PID).unwrap(), t.armed(0, child).unwrap());
    assert_eq!(t.removes(), [a, b]);
    let st = stats(&s, 0);
    assert_eq!((st.hits, st.runs), (1, 1));
    assert_eq!(
        seen.lines(),
        [
            format!("ProcessStarted {{ pid: {child}, parent: {PID} }}"),
            format!("run 0:0 pid {child} tid {child} ip {SITE:#x} records 1 data []"),
        ]
    );
}

#[test]
fn a_fork_child_is_armed_hit_and_forgotten_when_it_exits() {
    let (mut s, seen) = hooked(vec![program("p", LOG_RDI)]);
    let mut t = transport(fake::CAPS);
    let child = PID + 1;
    let status = run(
        &mut s,
        &mut t,
        vec![
            ev(Event::ProcessStarted {
                pid: child,
                parent: PID,
            }),
            Step::Hit(vec![0], FakeHit::at(child, child + 1, SITE).reg("rdi", 1)),
            ev(Event::ProcessExited {
                pid: child,
                status: ExitStatus::Signal(9),
            }),
            Step::Hit(vec![0], hit(SITE).reg("rdi", 2)),
            ev(Event::ProcessExited {
                pid: PID,
                status: ExitStatus::Code(0),
            }),
        ],
    );
    assert_eq!(status, Some(ExitStatus::Code(0)));
    assert_eq!(t.inserts(), [(0, PID, SITE), (0, child, SITE)]);
    assert!(
        t.removes().is_empty(),
        "an ended process's probes are gone with it"
    );
    assert!(s.probes[0].armed.is_empty(), "both processes forgotten");
    assert_eq!(
        seen.lines(),
        [
            format!("ProcessStarted {{ pid: {child}, parent: {PID} }}"),
            format!(
                "run 0:0 pid {child} tid {} ip {SITE:#x} records 1 data [1, 0, 0, 0, 0, 0, 0, 0]",
                child + 1
            ),
            format!("ProcessExited {{ pid: {child}, status: Signal(9) }}"),
            format!(
                "run 0:0 pid {PID} tid {PID} ip {SITE:#x} records 1 data [2, 0, 0, 0, 0, 0, 0, 0]"
            ),
            format!("ProcessExited {{ pid: {PID}, status: Code(0) }}"),
        ]
    );
}

#[test]
fn exec_forgets_and_rearms_the_process() {
    let (mut s, seen) = hooked(vec![program("p", LOG_RDI)]);
    let mut t = transport(fake::CAPS);
    run(
        &mut s,
        &mut t,
        vec![ev(Event::Exec { pid: PID }), Step::Hit(vec![0], hit(SITE))],
    );
    assert_eq!(t.inserts(), [(0, PID, SITE), (0, PID, SITE)]);
    assert!(
        t.removes().is_empty(),
        "the exec took the old image's probes"
    );
    assert_eq!(s.probes[0].armed, [(PID, t.armed(0, PID).unwrap())]);
    assert_eq!(seen.lines()[0], format!("Exec {{ pid: {PID} }}"));
    assert_eq!(stats(&s, 0).runs, 1);
}

#[test]
fn a_library_mapped_later_is_armed_and_unmapped_forgotten() {
    let lib_site = LIB_BASE + 0x1000;
    let (mut s, seen) = hooked(vec![
        program("p", LOG_RDI),
        program(
            "l",
            "name = {lib}\noffset = 0x1000\n push r, rdi\n log 1\n exit\n",
        ),
    ]);
    let mut t = transport(fake::CAPS);
    s.arm_at_start(&mut t, PID, false).unwrap();
    assert_eq!(s.pending(), 1, "the library is not mapped yet");
    let moved = LIB_BASE + 0x10_0000;
    t.script(vec![
        Step::Map(
            PID,
            vec![mapping(exe(), EXE_BASE), mapping(lib(), LIB_BASE)],
        ),
        ev(Event::LibrariesChanged { pid: PID }),
        Step::Hit(vec![1], hit(lib_site).reg("rdi", 5)),
        // dlclose: the transport says the probe went with the library.
        Step::Map(PID, vec![mapping(exe(), EXE_BASE)]),
        Step::Unmap(vec![crate::transport::Armed(102)]),
        ev(Event::LibrariesChanged { pid: PID }),
        // dlopen again, elsewhere.
        Step::Map(PID, vec![mapping(exe(), EXE_BASE), mapping(lib(), moved)]),
        ev(Event::LibrariesChanged { pid: PID }),
        Step::Hit(vec![1], hit(moved + 0x1000).reg("rdi", 6)),
    ]);
    let stop = std::sync::atomic::AtomicBool::new(false);
    s.run(&mut t, &stop).unwrap();
    assert_eq!(
        t.inserts(),
        [(0, PID, SITE), (1, PID, lib_site), (1, PID, moved + 0x1000)]
    );
    assert_eq!(t.armed(1, PID), Some(crate::transport::Armed(103)));
    assert!(t.removes().is_empty());
    assert_eq!(s.pending(), 0);
    assert_eq!(
        seen.lines(),
        [
            format!(
                "run 1:0 pid {PID} tid {PID} ip {lib_site:#x} records 1 data [5, 0, 0, 0, 0, 0, 0, 0]"
            ),
            format!(
                "run 1:0 pid {PID} tid {PID} ip {:#x} records 1 data [6, 0, 0, 0, 0, 0, 0, 0]",
                moved + 0x1000
            ),
        ]
    );
}

#[test]
fn a_library_a_child_unmaps_stays_armed_in_its_parent() {
    // The in-process transport's handle of a probe is its tag, the same in
    // every process: a fork child's dlclose must not forget the parent's.
    let child = PID + 1;
    let (mut s, _) = hooked(vec![
        program("p", LOG_RDI),
        program(
            "l",
            "name = {lib}\noffset = 0x1000\n push r, rdi\n log 1\n exit\n",
        ),
    ]);
    let mut t = transport(fake::CAPS);
    t.map(child, vec![mapping(exe(), EXE_BASE)]);
    s.arm_at_start(&mut t, PID, false).unwrap();
    let shared = crate::transport::Armed(7);
    s.probes[1].armed = vec![(PID, shared), (child, shared)];
    t.script(vec![
        Step::Unmap(vec![shared]),
        ev(Event::LibrariesChanged { pid: child }),
    ]);
    let stop = std::sync::atomic::AtomicBool::new(false);
    s.run(&mut t, &stop).unwrap();
    assert_eq!(s.probes[1].armed, [(PID, shared)]);
}

#[test]
fn lost_hits_are_counted_as_dropped() {
    let (mut s, seen) = hooked(vec![program("p", LOG_RDI)]);
    let mut t = transport(fake::CAPS);
    run(
        &mut s,
        &mut t,
        vec![
            ev(Event::Lost { tag: 0, count: 5 }),
            Step::Hit(vec![0], hit(SITE)),
            ev(Event::Lost { tag: 0, count: 1 }),
            ev(Event::Lost { tag: 7, count: 2 }),
        ],
    );
    let st = stats(&s, 0);
    assert_eq!((st.hits, st.dropped), (1, 6));
    assert_eq!(s.dropped_unattributed(), 2);
    let lines = seen.lines();
    assert_eq!(lines[0], "Lost { prog: Some(0), index: 0, count: 5 }");
    assert_eq!(lines[2], "Lost { prog: Some(0), index: 0, count: 1 }");
    assert_eq!(lines[3], "Lost { prog: None, index: 0, count: 2 }");
}

const RETURN: &str = "name = {exe}\noffset = 0x401000\nreturn = yes\nmaxactive = 3\n push r, rax\n push entry, rdi\n log 2\n exit\n";

#[test]
fn return_probes_count_missed_left_running_and_unwound_frames_innermost_first() {
    let (mut s, seen) = hooked(vec![program("r", RETURN)]);
    let mut t = transport(fake::CAPS);
    let unwound = |rsp, cause| {
        ev(Event::Unwound {
            tag: 0,
            pid: PID,
            tid: PID,
            entry_rsp: rsp,
            entry_ns: 1,
            cause,
        })
    };
    run(
        &mut s,
        &mut t,
        vec![
            unwound(0x6e00, Left::Unwound),
            unwound(0x6f00, Left::Unwound),
            unwound(0x7000, Left::ThreadExit),
            ev(Event::Missed {
                tag: 0,
                count: 3,
                depth: 0,
            }),
            Step::Hit(vec![0], hit(SITE).reg("rax", 42).entry_reg("rdi", 4)),
            ev(Event::LeftRunning { tag: 0, count: 2 }),
        ],
    );
    assert_eq!(
        t.calls[0],
        Call::Insert {
            tag: 0,
            pid: PID,
            addr: SITE,
            what: Insert::Return {
                opcode: None,
                maxactive: 3,
                entry_notice: false
            },
            armed: crate::transport::Armed(101),
        }
    );
    let st = stats(&s, 0);
    assert_eq!((st.hits, st.runs), (1, 1));
    assert_eq!(st.missed, 3 + 3 + 2, "unwound, missed and left running");
    assert_eq!(st.unwound, 2, "a thread's exit is no unwinding");
    assert_eq!(
        seen.lines(),
        [
            format!("unwound 0:0 tid {PID} rsp 0x6e00 Unwound"),
            format!("unwound 0:0 tid {PID} rsp 0x6f00 Unwound"),
            format!("unwound 0:0 tid {PID} rsp 0x7000 ThreadExit"),
            "Missed { prog: 0, index: 0, count: 3 }".to_string(),
            format!(
                "run 0:0 pid {PID} tid {PID} ip {SITE:#x} records 1 data [4, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0]"
            ),
            // LeftRunning: no hook event (a call tree closes its open calls).
        ]
    );
}

#[test]
fn entry_notices_and_every_call_change_how_a_return_probe_is_armed() {
    let (mut s, seen) = hooked(vec![program("r", RETURN)]);
    s.request_entry_notices(0);
    s.track_every_call(0);
    let mut t = transport(fake::CAPS);
    run(
        &mut s,
        &mut t,
        vec![
            ev(Event::Entered {
                tag: 0,
                pid: PID,
                tid: PID,
                rsp: 0x7000,
                time_ns: 10,
                ip: SITE,
            }),
            ev(Event::Tick),
            ev(Event::Returned {
                tag: 0,
                pid: PID,
                tid: PID,
                time_ns: 30,
                ip: SITE,
                rax: 8,
                entry_rsp: 0x7000,
                elapsed_ns: 20,
            }),
            // Not a probe's: no hook call.
            ev(Event::Entered {
                tag: 9,
                pid: PID,
                tid: PID,
                rsp: 0x7000,
                time_ns: 40,
                ip: SITE,
            }),
        ],
    );
    assert!(matches!(
        t.calls[0],
        Call::Insert {
            what: Insert::Return {
                maxactive: EVERY_CALL,
                entry_notice: true,
                ..
            },
            ..
        }
    ));
    assert_eq!(t.calls[1], Call::SetTick(super::hook::HOOK_TICK));
    assert_eq!(
        seen.lines(),
        [
            format!("entered 0:0 tid {PID} rsp 0x7000"),
            "tick".to_string(),
            format!("returned 0:0 tid {PID} rsp 0x7000 rax 8 in 20"),
        ]
    );
    let st = stats(&s, 0);
    assert_eq!(
        (st.hits, st.runs, st.missed),
        (1, 0, 0),
        "the return is the probe's hit; no handler ran"
    );
}

/// A recursion 4 deep of a return probe with entry notices where a thread
/// tracks 2 calls, told as ptrace and perf tell it ([`Step::Enter`],
/// [`Step::Return`]) or as the in-process agent does (its events and
/// counters): the same hook calls and the same statistics, each return a
/// hit, the 2 calls beyond the depth missed (`missed_depth`).
#[test]
fn every_transports_returns_are_hits_and_calls_beyond_the_depth_missed_depth() {
    let frame = |d: u64| 0x7000 - 0x100 * d;
    let tell = |ptrace: bool| {
        let (mut s, seen) = hooked(vec![program("r", RETURN)]);
        s.request_entry_notices(0);
        s.track_every_call(0);
        let mut t = transport(fake::CAPS);
        t.track_at_most(2);
        let enter = |d: u64| {
            let ret = if d == 0 { 0x40_0500 } else { SITE + 5 };
            hit(SITE)
                .reg("rsp", frame(d))
                .mem(frame(d), &u64::to_le_bytes(ret))
        };
        let steps: Vec<Step> = if ptrace {
            (0..4)
                .map(|d| Step::Enter(vec![], enter(d)))
                .chain((0..4).rev().map(|d| {
                    let to = if d == 0 { 0x40_0500 } else { SITE + 5 };
                    Step::Return(hit(to).reg("rsp", frame(d) + 8).reg("rax", d))
                }))
                .collect()
        } else {
            let entered = |d: u64| {
                ev(Event::Entered {
                    tag: 0,
                    pid: PID,
                    tid: PID,
                    rsp: frame(d),
                    time_ns: 0,
                    ip: SITE,
                })
            };
            let returned = |d: u64| {
                ev(Event::Returned {
                    tag: 0,
                    pid: PID,
                    tid: PID,
                    time_ns: 0,
                    ip: SITE,
                    rax: d,
                    entry_rsp: frame(d),
                    elapsed_ns: 0,
                })
            };
            (0..4)
                .map(entered)
                .chain([ev(Event::Counted {
                    tag: 0,
                    counts: RunCounts {
                        missed: 2,
                        missed_depth: 2,
                        ..RunCounts::default()
                    },
                })])
                .chain((0..2).rev().map(returned))
                .collect()
        };
        run(&mut s, &mut t, steps);
        let st = stats(&s, 0);
        let mut lines = seen.lines();
        lines.sort();
        ((st.hits, st.runs, st.missed, st.missed_depth), lines)
    };
    let (counts, lines) = tell(true);
    assert_eq!(counts, (2, 0, 2, 2));
    let mut want: Vec<String> = (0..4)
        .map(|d| format!("entered 0:0 tid {PID} rsp {:#x}", frame(d)))
        .chain((0..2).map(|d| format!("returned 0:0 tid {PID} rsp {:#x} rax {d} in 0", frame(d))))
        .chain(std::iter::repeat_n(
            "Missed { prog: 0, index: 0, count: 1 }".to_string(),
            2,
        ))
        .collect();
    want.sort();
    assert_eq!(lines, want);
    let (counts_in_target, mut lines) = tell(false);
    assert_eq!(counts_in_target, counts);
    // The agent counts its missed calls together.
    let i = lines.iter().position(|l| l.starts_with("Missed")).unwrap();
    assert_eq!(lines.remove(i), "Missed { prog: 0, index: 0, count: 2 }");
    want.retain(|l| !l.starts_with("Missed"));
    assert_eq!(lines, want);
}

#[test]
fn a_faulting_step_discards_the_records_of_probes_without_logonfault() {
    let p = program(
        "p",
        "name = {exe}\noffset = 0x401000\n push r, rdi\n log 1\n exit\n\
         offset = 0x401000\nlogonfault = yes\n push r, rsi\n log 1\n exit\n",
    );
    let (mut s, out) = session(vec![p]);
    let mut t = transport(Capabilities {
        step_faults: true,
        ..fake::CAPS
    });
    run(
        &mut s,
        &mut t,
        vec![
            Step::Hit(vec![1, 0], hit(SITE).reg("rdi", 1).reg("rsi", 2)),
            ev(Event::Stepped {
                tid: PID,
                fault: Some(libc::SIGSEGV),
            }),
            Step::Hit(vec![0, 1], hit(SITE).reg("rdi", 3).reg("rsi", 4)),
            ev(Event::Stepped {
                tid: PID,
                fault: None,
            }),
        ],
    );
    let values: Vec<String> = out
        .text()
        .lines()
        .map(|l| l.rsplit_once(": ").unwrap().1.to_string())
        .collect();
    assert_eq!(values, ["(2)", "(3)", "(4)"], "{}", out.text());
    let (a, b) = (stats(&s, 0), stats(&s, 1));
    assert_eq!((a.runs, a.records, a.faulted, a.discarded), (2, 1, 1, 1));
    assert_eq!((b.runs, b.records, b.faulted, b.discarded), (2, 2, 1, 0));
}

#[test]
fn exit_1_hands_off_where_the_transport_can_and_is_counted_where_not() {
    let text = "name = {exe}\noffset = 0x401000\n exit 1\n";
    let steps = || vec![Step::Hit(vec![0], hit(SITE)), Step::Hit(vec![0], hit(SITE))];
    let (mut s, _) = hooked(vec![program("p", text)]);
    let mut t = transport(fake::CAPS);
    run(&mut s, &mut t, steps());
    assert_eq!(t.actions, [Action::HandoffToDebugger; 2]);
    assert_eq!(s.unhonoured, [0, 0]);

    let (mut s, _) = hooked(vec![program("p", text)]);
    let mut t = transport(Capabilities {
        debugger_handoff: false,
        ..fake::CAPS
    });
    run(&mut s, &mut t, steps());
    assert!(t.actions.is_empty());
    assert_eq!(s.unhonoured, [2, 0]);
}

#[test]
fn a_probe_the_transport_refuses_is_reported_and_disabled() {
    let (mut s, seen) = hooked(vec![program("p", LOG_RDI)]);
    let mut t = transport(fake::CAPS);
    t.refuse.insert(0, crate::transport::Error::arm("no room"));
    run(&mut s, &mut t, vec![Step::Hit(vec![0], hit(SITE))]);
    assert!(t.inserts().is_empty());
    // The transport's error, its kind kept.
    assert_eq!(
        s.arm_failures(),
        [(0, 0, crate::transport::Error::arm("no room"))]
    );
    assert_eq!(s.arm_failures()[0].2.to_string(), "no room");
    assert_eq!(seen.lines(), ["NotArmed { prog: 0, index: 0 }"]);
    assert_eq!(
        stats(&s, 0).hits,
        0,
        "a disabled probe's hit is not counted"
    );
}

#[test]
fn a_probe_the_target_ran_maxhits_times_is_removed() {
    let p = program(
        "p",
        "name = {exe}\noffset = 0x401000\nmaxhits = 3\n push r, rdi\n log 1\n exit\n",
    );
    let (mut s, _seen) = hooked(vec![p]);
    let mut t = transport(fake::CAPS);
    t.in_target = true;
    let counted = |hits, runs| {
        ev(Event::Counted {
            tag: 0,
            counts: fake::counts(hits, runs, 0),
        })
    };
    run(
        &mut s,
        &mut t,
        vec![counted(2, 2), counted(1, 1), counted(0, 0)],
    );
    let armed = t.armed(0, PID).unwrap();
    assert_eq!(t.removes(), [armed], "removed once, when the runs reach 3");
    assert_eq!(stats(&s, 0).runs, 3);
}

#[test]
fn handlers_run_in_the_target_report_runs_and_counts() {
    let (mut s, seen) = hooked(vec![program("p", LOG_RDI)]);
    let mut t = transport(fake::CAPS);
    t.in_target = true;
    let mut records = Sink::default();
    records.push(crate::out::sink::RecordKind::Log, 1, 0, &[7, 0], &[]);
    let ran = |outcome, records| FakeRun {
        pid: PID,
        tid: PID + 2,
        time_ns: 5,
        ip: SITE,
        outcome,
        records,
    };
    run(
        &mut s,
        &mut t,
        vec![
            Step::Ran(
                0,
                ran(TargetOutcome::Returned(hostabi::Outcome::Exit), records),
            ),
            ev(Event::Counted {
                tag: 0,
                counts: RunCounts {
                    dropped: 1,
                    ..fake::counts(5, 4, 2)
                },
            }),
            Step::Ran(
                0,
                ran(
                    TargetOutcome::Returned(hostabi::Outcome::Remove),
                    Sink::default(),
                ),
            ),
        ],
    );
    assert_eq!(
        t.calls[1..3],
        [
            Call::SetTick(super::hook::HOOK_TICK),
            Call::LoadHandlers(1, 1)
        ]
    );
    let armed = t.armed(0, PID).unwrap();
    assert_eq!(t.removes(), [armed]);
    let st = stats(&s, 0);
    assert_eq!(
        (st.hits, st.runs, st.missed, st.dropped, st.records),
        (5, 4, 2, 1, 1)
    );
    assert_eq!(
        seen.lines(),
        [
            format!(
                "run 0:0 pid {PID} tid {} ip {SITE:#x} records 1 data [7, 0]",
                PID + 2
            ),
            "Missed { prog: 0, index: 0, count: 2 }".to_string(),
            format!(
                "run 0:0 pid {PID} tid {} ip {SITE:#x} records 0 data []",
                PID + 2
            ),
        ]
    );
}

/// A location a program probes again is told apart by `#N`, in order; the
/// others keep their labels.
#[test]
fn labels_probed_again_are_numbered() {
    let probe = |label: &str| super::ProbeState {
        prog: 0,
        index: 0,
        label: label.to_string(),
        enabled: true,
        armed: Vec::new(),
        ever_armed: false,
        stats: super::ProbeStats::default(),
        link: None,
    };
    let mut probes = vec![probe("p:f"), probe("p:g"), probe("p:f"), probe("p:f")];
    super::distinct_labels(&mut probes);
    let labels: Vec<&str> = probes.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(labels, ["p:f", "p:g", "p:f#2", "p:f#3"]);
}
