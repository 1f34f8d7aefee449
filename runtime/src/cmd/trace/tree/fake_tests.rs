//! The call trees and views of `wprobe trace` fed by a session over the
//! scripted transport ([`crate::transport::fake`]): the transport's entry
//! notices, returns, unwound frames, forks, exits and losses go through the
//! session and the trace's record hook into the trees, and out of the
//! default (duration) view, as in a real trace, without a process.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::super::funcs::{Func, Origin};
use super::super::out::TextOut;
use super::super::records::{Hook, ProbeMap, TraceState};
use super::super::views::duration::DurationView;
use super::super::views::{Clock, TimeFmt, View, Views};
use super::{Filters, StepKind, Tree};
use crate::session::Session;
use crate::transport::calls::Left;
use crate::transport::fake::{self, Fake, FakeHit, Output, PID, SITE, Step, exe, program};
use crate::transport::{Event, ExitStatus};

/// `main` at [`SITE`] and `work` 0x100 after it, return probes whose
/// handlers log the trace's exit record `[rax, entry rsp, elapsed]`.
const PROGRAM: &str = "name = {exe}\nmajor = 0x7472\n\
    offset = 0x401000\nreturn = yes\nminor = 2\n push elapsed\n push entry, rsp\n push r, rax\n log 3\n exit\n\
    offset = 0x401100\nreturn = yes\nminor = 2\n push elapsed\n push entry, rsp\n push r, rax\n log 3\n exit\n";

const MAIN: u64 = SITE;
const WORK: u64 = SITE + 0x100;

fn func(name: &str, link: u64) -> Func {
    Func {
        name: name.to_string(),
        shown: name.to_string(),
        aliases: Vec::new(),
        module: exe().into(),
        link,
        opcode: 0x55,
        origin: Origin::Exe,
        line: None,
    }
}

/// Every step and process line, briefly (as the tree's own tests write
/// them: `depth>func`, `depth<func dur/self how`, `#pid text`).
struct Brief(Rc<RefCell<Vec<String>>>);

impl View for Brief {
    fn step(&mut self, s: &super::Step) {
        let line = match &s.kind {
            StepKind::Enter { .. } => format!("{} {}>{}", s.th.tid, s.depth, s.func),
            StepKind::Exit {
                how,
                dur_ns,
                self_ns,
                ..
            } => format!(
                "{} {}<{} {dur_ns}/{self_ns} {how:?}",
                s.th.tid, s.depth, s.func
            ),
            StepKind::Note { text } => format!("{} {}#{text}", s.th.tid, s.depth),
        };
        self.0.borrow_mut().push(line);
    }
    fn process(&mut self, pid: i32, text: &str) {
        self.0.borrow_mut().push(format!("#{pid} {text}"));
    }
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// A trace over the fake transport: a session of one program whose
/// probes are the functions and ends `by_prog` says, its record hook the
/// trace's, feeding the trees of `main` and `work` to the brief lines and
/// the duration view; the transport's [`PID`] mapped.
struct FakeTrace {
    session: Session,
    t: Fake,
    state: Rc<RefCell<TraceState>>,
    brief: Rc<RefCell<Vec<String>>>,
    text: Output,
    stop: Arc<AtomicBool>,
}

impl FakeTrace {
    /// The trace of RPN `program` (`notices`: its return probes armed with
    /// entry notices, as the built-in handlers are), `-f` as
    /// `follow_forks` says.
    fn new(program_text: &str, notices: bool, by_prog: Vec<(u32, bool)>, follow: bool) -> Self {
        let mut session = Session::new(
            fake::engine(),
            vec![program("trace", program_text)],
            crate::session::RunOptions::for_tests(follow),
            Box::new(std::io::sink()),
        )
        .expect("session");
        if notices {
            session.request_entry_notices(0);
        }
        let brief = Rc::new(RefCell::new(Vec::new()));
        let text = Output::default();
        let table = Rc::new(vec![func("main", MAIN), func("work", WORK)]);
        let stop = Arc::new(AtomicBool::new(false));
        let duration = DurationView::new(
            table,
            TextOut::single(Box::new(text.clone()), false, stop.clone()),
            TimeFmt::local(Clock::None),
            false,
        );
        let views = Views {
            list: vec![Box::new(Brief(brief.clone())), Box::new(duration)],
        };
        let state = Rc::new(RefCell::new(TraceState::new(
            ProbeMap {
                by_prog: vec![by_prog],
            },
            Tree::new(Filters::default(), views),
        )));
        session.set_record_hook(Box::new(Hook(state.clone())));
        FakeTrace {
            session,
            t: fake::traced(fake::CAPS),
            state,
            brief,
            text,
            stop,
        }
    }

    /// Arms (`probes` of them), runs `steps`, finishes the trees: the exit
    /// status.
    fn run(&mut self, probes: usize, steps: impl IntoIterator<Item = Step>) -> Option<ExitStatus> {
        assert_eq!(
            self.session.arm_at_start(&mut self.t, PID, false),
            Ok(probes)
        );
        self.t.script(steps);
        let status = self.session.run(&mut self.t, &self.stop).expect("run");
        let errors = {
            let mut st = self.state.borrow_mut();
            st.tree.finish();
            st.tree.sink.finish()
        };
        assert!(errors.is_empty(), "{errors:?}");
        status
    }

    /// The brief lines and the duration view's text.
    fn out(&self) -> (Vec<String>, String) {
        (self.brief.borrow().clone(), self.text.text())
    }
}

fn entered(tag: usize, tid: i32, rsp: u64, time_ns: u64, ip: u64) -> Step {
    Step::Event(Event::Entered {
        tag,
        pid: tid,
        tid,
        rsp,
        time_ns,
        ip,
    })
}

fn returned(tag: usize, tid: i32, rsp: u64, time_ns: u64, elapsed_ns: u64) -> Step {
    Step::Event(Event::Returned {
        tag,
        pid: tid,
        tid,
        time_ns,
        ip: 0,
        rax: 0,
        entry_rsp: rsp,
        elapsed_ns,
    })
}

fn unwound(tag: usize, rsp: u64, cause: Left) -> Step {
    Step::Event(Event::Unwound {
        tag,
        pid: PID,
        tid: PID,
        entry_rsp: rsp,
        entry_ns: 0,
        cause,
    })
}

#[test]
fn a_trace_over_the_fake_transport_builds_the_trees_and_the_duration_view() {
    let mut f = FakeTrace::new(PROGRAM, true, vec![(0, true), (1, true)], true);
    let child = PID + 1;
    let status = f.run(
        2,
        [
            entered(0, PID, 0x7000, 1000, MAIN),
            entered(1, PID, 0x6f00, 1010, WORK),
            returned(1, PID, 0x6f00, 1030, 20),
            // work calls itself, then both calls are abandoned (longjmp):
            // the transport tells the innermost first.
            entered(1, PID, 0x6f00, 1040, WORK),
            entered(1, PID, 0x6e00, 1050, WORK),
            unwound(1, 0x6e00, Left::Unwound),
            unwound(1, 0x6f00, Left::Unwound),
            // A fork: the child returns from main, which it inherited.
            Step::Event(Event::ProcessStarted {
                pid: child,
                parent: PID,
            }),
            returned(0, child, 0x7000, 1100, 100),
            Step::Event(Event::ProcessExited {
                pid: child,
                status: ExitStatus::Code(0),
            }),
            Step::Event(Event::Missed {
                tag: 1,
                count: 2,
                depth: 0,
            }),
            Step::Event(Event::Lost { tag: 0, count: 3 }),
            // main returns in the parent, its handler run at the return.
            Step::Hit(
                vec![0],
                FakeHit {
                    time_ns: 1200,
                    elapsed_ns: Some(200),
                    ..FakeHit::at(PID, PID, MAIN)
                }
                .reg("rax", 5)
                .entry_reg("rsp", 0x7000),
            ),
            // A call still running when the process ends.
            entered(1, PID, 0x6f00, 1300, WORK),
            Step::Event(Event::LeftRunning { tag: 1, count: 1 }),
            Step::Event(Event::ProcessExited {
                pid: PID,
                status: ExitStatus::Signal(15),
            }),
        ],
    );
    assert_eq!(status, Some(ExitStatus::Signal(15)));
    let (lines, text) = f.out();
    let st = f.state.borrow();
    assert_eq!(
        lines,
        [
            "1000001 0>0",
            "1000001 1>1",
            "1000001 1<1 20/20 Returned",
            "1000001 1>1",
            "1000001 2>1",
            "1000001 2<1 0/0 Unwound(Reported)",
            "1000001 1<1 10/10 Unwound(Reported)",
            "#1000002 process 1000002 started (parent 1000001)",
            "1000002 0<0 100/70 Returned",
            "#1000002 process 1000002 exited with status 0",
            "1000001 0<0 200/170 Returned",
            "1000001 0>1",
            "1000001 0<1 0/0 Unwound(ProcessEnded)",
            "#1000001 process 1000001 killed by signal 15",
        ]
    );
    assert_eq!((st.problems.missed, st.problems.lost), (2, 3));
    assert_eq!(st.exited, [child, PID]);
    let stats = f.session.stats();
    assert_eq!(
        stats[1].1.missed,
        2 + 2 + 1,
        "missed, unwound, left running"
    );
    assert_eq!(stats[1].1.unwound, 2);
    assert_eq!((stats[0].1.runs, stats[0].1.dropped), (1, 3));
    assert_eq!(
        text,
        "# DURATION     TID     FUNCTION\n\
         \x20           [1000001] | main() {\n\
         \x20  0.020 us [1000001] |   work();\n\
         \x20           [1000001] |   work() {\n\
         \x20           [1000001] |     work(); /* unwound */\n\
         \x20  0.010 us [1000001] |   } /* work: unwound */\n\
         \x20  0.100 us [1000002] | } /* main */\n\
         \x20  0.200 us [1000001] | } /* main */\n\
         \x20           [1000001] | work(); /* unwound: process ended */\n"
    );
}

/// Return probes on `main` and `work` (at most one live call of `work`),
/// whose handlers log the trace's exit record; with `entries`, entry probes
/// too, whose handlers log the entry record `[rsp]`: a `--handler` module's
/// probes, the order `handlers::manifest` gives them.
fn traced(entries: bool) -> String {
    let exit = " push elapsed\n push entry, rsp\n push r, rax\n log 3\n exit\n";
    let entry = "minor = 1\n push r, rsp\n log 1\n exit\n";
    let mut text = "name = {exe}\nmajor = 0x7472\n".to_string();
    for (offset, max) in [("0x401000", ""), ("0x401100", "maxactive = 1\n")] {
        text += &format!("offset = {offset}\nreturn = yes\n{max}minor = 2\n{exit}");
        if entries {
            text += &format!("offset = {offset}\n{entry}");
        }
    }
    text
}

/// A thread of [`PID`] at `ip` with `rsp`, `rax` and the word `ret` at
/// `rsp` (a return address, at an entry), at `time_ns`.
fn at(ip: u64, rsp: u64, ret: Option<u64>, rax: u64, time_ns: u64) -> FakeHit {
    let h = FakeHit {
        time_ns,
        ..FakeHit::at(PID, PID, ip)
    }
    .reg("rsp", rsp)
    .reg("rax", rax);
    match ret {
        Some(r) => h.mem(rsp, &r.to_le_bytes()),
        None => h,
    }
}

/// The trees and duration view of `main` and `work` called as ptrace and
/// perf see calls ([`Step::Enter`], [`Step::Return`]): with the built-in
/// handlers (`notices`: return probes only, armed with entry notices) or a
/// `--handler` module (entry probes run before the entry is tracked, as
/// ptrace runs them); the brief lines, the view's text, and the handler
/// runs of every probe.
fn trace_as_ptrace_and_perf(notices: bool) -> (Vec<String>, String, Vec<u64>) {
    let by_prog = if notices {
        vec![(0, true), (1, true)]
    } else {
        vec![(0, true), (0, false), (1, true), (1, false)]
    };
    let mut f = FakeTrace::new(&traced(!notices), notices, by_prog, false);
    let probes = if notices { 2 } else { 4 };
    // An entry: a `--handler` module's entry probe runs its handler before
    // the call is tracked.
    let enter = |ip: u64, rsp: u64, ret: u64, time_ns: u64| {
        let tags = match (notices, ip == MAIN) {
            (true, _) => vec![],
            (false, true) => vec![1],
            (false, false) => vec![3],
        };
        vec![Step::Enter(tags, at(ip, rsp, Some(ret), 0, time_ns))]
    };
    let ret = |to: u64, rsp: u64, rax: u64, time_ns: u64| {
        vec![Step::Return(at(to, rsp, None, rax, time_ns))]
    };
    let status = f.run(
        probes,
        [
            enter(MAIN, 0x7000, 0x40_0500, 1000),
            enter(WORK, 0x6f00, MAIN + 5, 1010),
            ret(MAIN + 5, 0x6f08, 7, 1030),
            // work calls itself: the inner call is one live call too many
            // (missed: entered, its return not tracked) ...
            enter(WORK, 0x6f00, MAIN + 9, 1040),
            enter(WORK, 0x6e00, WORK + 5, 1050),
            // ... and main calls work again from the same frame: the
            // first call was abandoned (longjmp).
            enter(WORK, 0x6f00, MAIN + 13, 1060),
            ret(MAIN + 13, 0x6f08, 1, 1070),
            ret(0x40_0500, 0x7008, 0, 1100),
            vec![Step::Event(Event::ProcessExited {
                pid: PID,
                status: ExitStatus::Code(0),
            })],
        ]
        .into_iter()
        .flatten(),
    );
    assert_eq!(status, Some(ExitStatus::Code(0)));
    let st = f.state.borrow();
    assert_eq!(
        (
            st.problems.missed,
            st.problems.entries_without_record,
            st.problems.exits_without_record
        ),
        (1, 0, 0)
    );
    let runs = f.session.stats().iter().map(|(_, s)| s.runs).collect();
    let (lines, text) = f.out();
    (lines, text, runs)
}

#[test]
fn ptrace_and_perf_report_the_built_in_handlers_calls_as_events_and_run_no_handler() {
    let (lines, text, runs) = trace_as_ptrace_and_perf(true);
    assert_eq!(runs, [0, 0], "no handler runs at an entry or a return");
    assert_eq!(
        lines,
        [
            "1000001 0>0",
            "1000001 1>1",
            "1000001 1<1 20/20 Returned",
            "1000001 1>1",
            "1000001 2>1",
            "1000001 2<1 0/0 Unwound(OuterReturned)",
            "1000001 1<1 10/10 Unwound(Reported)",
            "1000001 1>1",
            "1000001 1<1 10/10 Returned",
            "1000001 0<0 100/60 Returned",
            "#1000001 process 1000001 exited with status 0",
        ]
    );
    assert_eq!(
        text,
        "# DURATION     TID     FUNCTION\n\
         \x20           [1000001] | main() {\n\
         \x20  0.020 us [1000001] |   work();\n\
         \x20           [1000001] |   work() {\n\
         \x20           [1000001] |     work(); /* unwound: an outer call returned */\n\
         \x20  0.010 us [1000001] |   } /* work: unwound */\n\
         \x20  0.010 us [1000001] |   work();\n\
         \x20  0.100 us [1000001] | } /* main */\n"
    );
}

#[test]
fn a_handler_modules_records_give_the_trees_the_built_in_handlers_events_give() {
    let (lines, text, runs) = trace_as_ptrace_and_perf(false);
    assert_eq!(
        runs,
        [1, 1, 2, 4],
        "main's return and entry, work's two returns tracked and four entries"
    );
    let (want_lines, want_text, _) = trace_as_ptrace_and_perf(true);
    assert_eq!(lines, want_lines);
    assert_eq!(text, want_text);
}

/// `main` calls `work`, which calls itself 3 times, where a thread tracks
/// 3 calls (the transports' `agent_abi::MAX_TRACKED_CALLS`, lowered): as
/// ptrace and perf tell it (`ptrace`: [`Step::Enter`], [`Step::Return`],
/// the calls paired by the code they share) or as the in-process agent
/// does (every entry told, the returns of the calls it tracked, its
/// counters). The brief lines, the duration view's text, and each
/// probe's (hits, missed, missed_depth).
fn beyond_the_depth(ptrace: bool) -> (Vec<String>, String, Vec<(u64, u64, u64)>) {
    let mut f = FakeTrace::new(PROGRAM, true, vec![(0, true), (1, true)], false);
    f.session.track_every_call(0);
    f.t.track_at_most(3);
    // Frames 0x100 apart, each `work` called from the one above.
    let frame = |d: u64| 0x7000 - 0x100 * d;
    let steps: Vec<Step> = if ptrace {
        let caller = |d: u64| match d {
            0 => 0x40_0500,
            1 => MAIN + 5,
            _ => WORK + 5,
        };
        let mut v: Vec<Step> = (0..5u64)
            .map(|d| {
                let ip = if d == 0 { MAIN } else { WORK };
                Step::Enter(vec![], at(ip, frame(d), Some(caller(d)), 0, 1000 + 10 * d))
            })
            .collect();
        v.extend(
            (0..5u64)
                .rev()
                .map(|d| Step::Return(at(caller(d), frame(d) + 8, None, d, 1100 - 10 * d))),
        );
        v
    } else {
        let mut v: Vec<Step> = (0..5u64)
            .map(|d| {
                let (tag, ip) = if d == 0 { (0, MAIN) } else { (1, WORK) };
                entered(tag, PID, frame(d), 1000 + 10 * d, ip)
            })
            .collect();
        // The agent counts the calls it could not track.
        v.push(Step::Event(Event::Counted {
            tag: 1,
            counts: crate::transport::RunCounts {
                missed: 2,
                missed_depth: 2,
                ..Default::default()
            },
        }));
        v.extend((0..3u64).rev().map(|d| {
            let tag = usize::from(d > 0);
            let now = 1100 - 10 * d;
            returned(tag, PID, frame(d), now, now - (1000 + 10 * d))
        }));
        v
    };
    let status = f.run(
        2,
        steps.into_iter().chain([Step::Event(Event::ProcessExited {
            pid: PID,
            status: ExitStatus::Code(0),
        })]),
    );
    assert_eq!(status, Some(ExitStatus::Code(0)));
    assert_eq!(f.state.borrow().problems.missed, 2);
    let counts = f
        .session
        .stats()
        .iter()
        .map(|(_, s)| (s.hits, s.missed, s.missed_depth))
        .collect();
    let (lines, text) = f.out();
    (lines, text, counts)
}

#[test]
fn calls_beyond_a_threads_depth_show_the_same_tree_under_every_transport() {
    let (lines, text, counts) = beyond_the_depth(true);
    assert_eq!(
        lines,
        [
            "1000001 0>0",
            "1000001 1>1",
            "1000001 2>1",
            "1000001 3>1",
            "1000001 4>1",
            // Closed when the innermost tracked call returns, at 1080.
            "1000001 4<1 40/40 Unwound(OuterReturned)",
            "1000001 3<1 50/10 Unwound(OuterReturned)",
            "1000001 2<1 60/10 Returned",
            "1000001 1<1 80/20 Returned",
            "1000001 0<0 100/20 Returned",
            "#1000001 process 1000001 exited with status 0",
        ]
    );
    assert_eq!(
        text,
        "# DURATION     TID     FUNCTION\n\
         \x20           [1000001] | main() {\n\
         \x20           [1000001] |   work() {\n\
         \x20           [1000001] |     work() {\n\
         \x20           [1000001] |       work() {\n\
         \x20  0.040 us [1000001] |         work(); /* unwound: an outer call returned */\n\
         \x20  0.050 us [1000001] |       } /* work: unwound: an outer call returned */\n\
         \x20  0.060 us [1000001] |     } /* work */\n\
         \x20  0.080 us [1000001] |   } /* work */\n\
         \x20  0.100 us [1000001] | } /* main */\n"
    );
    assert_eq!(
        counts,
        [(1, 0, 0), (2, 2, 2)],
        "each return a hit; the 2 calls beyond the depth missed"
    );
    assert_eq!(beyond_the_depth(false), (lines, text, counts), "in-process");
}
