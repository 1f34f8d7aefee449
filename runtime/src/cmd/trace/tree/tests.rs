//! Unit tests of the call tree: pairing, unwinds, parked calls, filters,
//! forks.

use super::*;

#[derive(Default)]
struct Collect(Vec<Step>);
impl Sink for Collect {
    fn step(&mut self, s: &Step) {
        self.0.push(s.clone());
    }
}

const T: Thread = Thread { pid: 1, tid: 1 };

fn brief(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match &s.kind {
            StepKind::Enter { .. } => format!("{}>{}", s.depth, s.func),
            StepKind::Exit {
                how,
                dur_ns,
                self_ns,
                ..
            } => format!(
                "{}<{} {dur_ns}/{self_ns}{}",
                s.depth,
                s.func,
                match how {
                    How::Returned => String::new(),
                    How::Unwound(c) => format!(" Unwound({c:?})"),
                    How::Running => " running".into(),
                }
            ),
            StepKind::Note { text } => format!("{}#{text}", s.depth),
        })
        .collect()
}

fn tree(filters: Filters) -> Tree<Collect> {
    Tree::new(filters, Collect::default())
}

#[test]
fn nested_calls_pair_by_function_and_rsp_with_self_time() {
    let mut t = tree(Filters::default());
    t.enter(T, 0, 100, 0x1000, 0, &[]);
    t.enter(T, 1, 110, 0x0ff0, 0, &[]);
    t.exit(T, 1, 130, 7, 0x0ff0, 20, &[]);
    t.enter(T, 1, 140, 0x0ff0, 0, &[]);
    t.exit(T, 1, 145, 7, 0x0ff0, 5, &[]);
    t.exit(T, 0, 200, 0, 0x1000, 100, &[]);
    assert_eq!(
        brief(&t.sink.0),
        ["0>0", "1>1", "1<1 20/20", "1>1", "1<1 5/5", "0<0 100/75"]
    );
    assert_eq!(t.depth(T), 0);
}

#[test]
fn a_return_past_open_calls_closes_them_as_unwound() {
    // longjmp from 2 to 0's caller... 0 returns while 1 and 2 are open.
    let mut t = tree(Filters::default());
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 10, 0x0f00, 0, &[]);
    t.enter(T, 2, 20, 0x0e00, 0, &[]);
    t.exit(T, 0, 100, 0, 0x1000, 100, &[]);
    assert_eq!(
        brief(&t.sink.0),
        [
            "0>0",
            "1>1",
            "2>2",
            "2<2 80/80 Unwound(OuterReturned)",
            "1<1 90/10 Unwound(OuterReturned)",
            "0<0 100/10"
        ]
    );
    assert_eq!(t.counters.unwound, 2);
}

/// A coroutine (3: body, 4: step, 5: leaf) on its own stack, resumed
/// by 1 (calling 2, `swapcontext`) from 0: its calls are parked while
/// the thread runs main's stack, and taken back, at their depths, when
/// its `swapcontext` returns; nothing is unwound.
#[test]
fn calls_of_a_stack_switched_away_from_are_parked_and_taken_back() {
    let mut t = tree(Filters::default());
    t.set_switches(vec![false, false, true, false, false, false]);
    t.enter(T, 0, 0, 0x8000, 0, &[]);
    t.enter(T, 1, 10, 0x7f00, 0, &[]);
    t.enter(T, 2, 20, 0x7e00, 0, &[]);
    t.enter(T, 3, 30, 0x3000, 0, &[]);
    t.enter(T, 4, 40, 0x2f00, 0, &[]);
    // The coroutine yields: main's swapcontext returns.
    t.enter(T, 2, 50, 0x2e00, 0, &[]);
    t.exit(T, 2, 60, 0, 0x7e00, 40, &[]);
    assert_eq!(t.depth(T), 5, "two on main's stack, three parked");
    t.enter(T, 5, 62, 0x7e00, 0, &[]);
    t.exit(T, 5, 63, 0, 0x7e00, 1, &[]);
    t.exit(T, 1, 64, 0, 0x7f00, 54, &[]);
    // Resumed: the coroutine's swapcontext returns, its step calls
    // the leaf and returns, the body returns, main's returns.
    t.enter(T, 1, 70, 0x7f00, 0, &[]);
    t.enter(T, 2, 71, 0x7e00, 0, &[]);
    t.exit(T, 2, 80, 0, 0x2e00, 30, &[]);
    t.enter(T, 5, 81, 0x2e00, 0, &[]);
    t.exit(T, 5, 82, 0, 0x2e00, 1, &[]);
    t.exit(T, 4, 83, 0, 0x2f00, 43, &[]);
    t.exit(T, 3, 84, 0, 0x3000, 54, &[]);
    t.exit(T, 2, 85, 0, 0x7e00, 14, &[]);
    t.exit(T, 1, 86, 0, 0x7f00, 16, &[]);
    t.exit(T, 0, 90, 0, 0x8000, 90, &[]);
    let got: Vec<String> = brief(&t.sink.0)
        .into_iter()
        .map(|s| s.split(' ').next().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        got,
        [
            "0>0", "1>1", "2>2", "3>3", "4>4", "5>2", // switch to main
            "2<2", "2>5", "2<5", "1<1", "1>1", "2>2", // switch back
            "5<2", "5>5", "5<5", "4<4", "3<3", "2<2", "1<1", "0<0"
        ]
    );
    assert_eq!(t.counters.unwound, 0);
    assert_eq!(t.counters.returned, 10);
    assert_eq!(t.depth(T), 0);
}

/// A view following the steps of the same run with [`OpenSteps`] sees
/// each call's caller on its own stack, and each exit close its call.
#[test]
fn views_follow_parked_calls_through_the_steps() {
    let mut t = tree(Filters::default());
    t.set_switches(vec![false, false, true, false, false, false]);
    for (f, at, rsp) in [(0, 0, 0x8000), (1, 10, 0x7f00), (2, 20, 0x7e00)] {
        t.enter(T, f, at, rsp, 0, &[]);
    }
    t.enter(T, 3, 30, 0x3000, 0, &[]);
    t.enter(T, 4, 40, 0x2f00, 0, &[]);
    t.enter(T, 2, 50, 0x2e00, 0, &[]);
    t.exit(T, 2, 60, 0, 0x7e00, 40, &[]);
    t.enter(T, 5, 62, 0x7e00, 0, &[]);
    t.exit(T, 5, 63, 0, 0x7e00, 1, &[]);
    t.enter(T, 2, 71, 0x7e01, 0, &[]);
    t.exit(T, 2, 80, 0, 0x2e00, 30, &[]);
    t.enter(T, 5, 81, 0x2e00, 0, &[]);
    t.exit(T, 5, 82, 0, 0x2e00, 1, &[]);
    t.exit(T, 4, 83, 0, 0x2f00, 43, &[]);
    let mut open = OpenSteps::<FuncId>::default();
    let mut seen = Vec::new();
    for s in &t.sink.0 {
        match s.kind {
            StepKind::Enter { .. } => {
                seen.push(format!("{}<-{:?}", s.func, open.top()));
                open.enter(s, s.func);
            }
            StepKind::Exit { .. } => {
                let got = open.exit(s, |f| f == 2);
                assert_eq!(got, Some(s.func), "{s:?}");
            }
            StepKind::Note { .. } => {}
        }
    }
    assert_eq!(
        seen,
        [
            "0<-None",
            "1<-Some(0)",
            "2<-Some(1)",
            "3<-Some(2)",
            "4<-Some(3)",
            "2<-Some(4)",
            "5<-Some(1)",
            "2<-Some(1)",
            "5<-Some(4)"
        ]
    );
    assert_eq!(open.open().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
}

/// The end of a thread closes its parked calls too.
#[test]
fn parked_calls_end_with_their_thread() {
    let mut t = tree(Filters::default());
    t.set_switches(vec![false, false, true]);
    t.enter(T, 0, 0, 0x8000, 0, &[]);
    t.enter(T, 2, 10, 0x7e00, 0, &[]);
    t.enter(T, 1, 20, 0x3000, 0, &[]);
    t.enter(T, 2, 30, 0x2f00, 0, &[]);
    t.exit(T, 2, 40, 0, 0x7e00, 30, &[]);
    t.end_process(T.pid, How::Unwound(Cause::ProcessEnded));
    assert_eq!(t.counters.unwound, 3);
    assert_eq!(t.depth(T), 0);
}

#[test]
fn reported_unwinds_and_orphan_returns() {
    let mut t = tree(Filters::default());
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 10, 0x0f00, 0, &[]);
    t.enter(T, 2, 50, 0x0e00, 0, &[]);
    t.unwound(T, 2, 0x0e00, How::Unwound(Cause::Reported));
    t.unwound(T, 1, 0x0f00, How::Unwound(Cause::Reported));
    t.exit(T, 3, 60, 0, 0x0a00, 5, &[]);
    t.exit(T, 0, 100, 0, 0x1000, 100, &[]);
    assert_eq!(
        brief(&t.sink.0),
        [
            "0>0",
            "1>1",
            "2>2",
            "2<2 0/0 Unwound(Reported)",
            "1<1 40/40 Unwound(Reported)",
            "0<0 100/60"
        ]
    );
    assert_eq!(t.counters.orphan_returns, 1);
}

/// A C++ exception (3: `__cxa_throw`, thrown in 2, caught in 0): the
/// calls it leaves, reported one by one innermost first as under
/// `inproc`, are closed as left by it, up to the thread's next entry; a
/// later unwind without a thrower open stays a plain one.
#[test]
fn calls_an_exception_leaves_are_closed_as_left_by_it() {
    let mut t = tree(Filters::default());
    t.set_throwers(vec![false, false, false, true]);
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 10, 0x0f00, 0, &[]);
    t.enter(T, 2, 20, 0x0e00, 0, &[]);
    t.enter(T, 3, 30, 0x0d00, 0, &[]);
    t.unwound(T, 3, 0x0d00, How::Unwound(Cause::Reported));
    t.unwound(T, 2, 0x0e00, How::Unwound(Cause::Reported));
    t.unwound(T, 1, 0x0f00, How::Unwound(Cause::Reported));
    // The catch's first call; then a `longjmp`-like unwind.
    t.enter(T, 2, 40, 0x0f00, 0, &[]);
    t.unwound(T, 2, 0x0f00, How::Unwound(Cause::Reported));
    t.exit(T, 0, 100, 0, 0x1000, 100, &[]);
    assert_eq!(
        brief(&t.sink.0),
        [
            "0>0",
            "1>1",
            "2>2",
            "3>3",
            "3<3 0/0 Unwound(Exception)",
            "2<2 10/10 Unwound(Exception)",
            "1<1 20/10 Unwound(Exception)",
            "1>2",
            "1<2 0/0 Unwound(Reported)",
            "0<0 100/80"
        ]
    );
}

/// Under `ptrace` the calls above a call that returns (the unwinder
/// resumed at its return address) are closed by that return: left by the
/// exception when a thrower is among them, else as before.
#[test]
fn a_return_past_a_thrower_closes_the_calls_as_left_by_the_exception() {
    let mut t = tree(Filters::default());
    t.set_throwers(vec![false, false, false, true]);
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 10, 0x0f00, 0, &[]);
    t.enter(T, 2, 20, 0x0e00, 0, &[]);
    t.enter(T, 3, 30, 0x0d00, 0, &[]);
    t.exit(T, 1, 50, 0, 0x0f00, 40, &[]);
    t.enter(T, 1, 60, 0x0f00, 0, &[]);
    t.enter(T, 2, 70, 0x0e00, 0, &[]);
    t.exit(T, 1, 80, 0, 0x0f00, 20, &[]);
    t.exit(T, 0, 100, 0, 0x1000, 100, &[]);
    let hows: Vec<String> = brief(&t.sink.0)
        .into_iter()
        .filter(|s| s.contains('<'))
        .collect();
    assert_eq!(
        hows,
        [
            "3<3 20/20 Unwound(Exception)",
            "2<2 30/10 Unwound(Exception)",
            "1<1 40/10",
            "2<2 10/10 Unwound(OuterReturned)",
            "1<1 20/10",
            "0<0 100/40"
        ]
    );
}

#[test]
fn recursion_and_the_end_of_a_process() {
    let mut t = tree(Filters::default());
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 0, 10, 0x0f00, 0, &[]);
    t.exit(T, 0, 20, 0, 0x0f00, 10, &[]);
    t.enter(T, 1, 30, 0x0f00, 0, &[]);
    t.end_process(1, How::Unwound(Cause::ProcessEnded));
    assert_eq!(
        brief(&t.sink.0),
        [
            "0>0",
            "1>0",
            "1<0 10/10",
            "1>1",
            "1<1 0/0 Unwound(ProcessEnded)",
            "0<0 30/20 Unwound(ProcessEnded)"
        ]
    );
    assert_eq!(t.depth(T), 0);
}

#[test]
fn filters_show_matching_subtrees_to_a_depth() {
    let mut t = tree(Filters {
        filter_hit: vec![false, true, false, false],
        max_depth: Some(2),
        ..Filters::default()
    });
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 1, 0x0f00, 0, &[]);
    t.enter(T, 2, 2, 0x0e00, 0, &[]);
    t.enter(T, 3, 3, 0x0d00, 0, &[]);
    t.exit(T, 3, 4, 0, 0x0d00, 1, &[]);
    t.exit(T, 2, 5, 0, 0x0e00, 3, &[]);
    t.exit(T, 1, 6, 0, 0x0f00, 5, &[]);
    t.exit(T, 0, 7, 0, 0x1000, 7, &[]);
    assert_eq!(brief(&t.sink.0), ["0>1", "1>2", "1<2 3/3", "0<1 5/2"]);
}

#[test]
fn depth_counts_from_the_nearest_filtered_call() {
    let mut t = tree(Filters {
        filter_hit: vec![false, true, false, true, false],
        max_depth: Some(1),
        ..Filters::default()
    });
    for (i, rsp) in [0x1000, 0x0f00, 0x0e00, 0x0d00, 0x0c00].iter().enumerate() {
        t.enter(T, i as FuncId, i as u64, *rsp, 0, &[]);
    }
    t.exit(T, 4, 5, 0, 0x0c00, 1, &[]);
    t.exit(T, 3, 6, 0, 0x0d00, 3, &[]);
    t.exit(T, 2, 7, 0, 0x0e00, 5, &[]);
    t.exit(T, 1, 8, 0, 0x0f00, 7, &[]);
    t.exit(T, 0, 9, 0, 0x1000, 9, &[]);
    assert_eq!(brief(&t.sink.0), ["0>1", "1>3", "1<3 3/3", "0<1 7/4"]);
}

#[test]
fn notrace_hides_a_call_and_everything_inside_it() {
    let mut t = tree(Filters {
        notrace_hit: vec![false, true, false],
        ..Filters::default()
    });
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 1, 0x0f00, 0, &[]);
    t.enter(T, 2, 2, 0x0e00, 0, &[]);
    t.exit(T, 2, 3, 0, 0x0e00, 1, &[]);
    t.exit(T, 1, 4, 0, 0x0f00, 3, &[]);
    t.enter(T, 2, 5, 0x0f00, 0, &[]);
    t.exit(T, 2, 6, 0, 0x0f00, 1, &[]);
    t.exit(T, 0, 8, 0, 0x1000, 8, &[]);
    assert_eq!(brief(&t.sink.0), ["0>0", "1>2", "1<2 1/1", "0<0 8/7"]);
    assert_eq!(t.counters.calls, 4);
    assert_eq!(t.counters.returned, 4);
}

#[test]
fn min_duration_holds_back_and_drops_short_calls() {
    let mut t = tree(Filters {
        min_ns: 10,
        ..Filters::default()
    });
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 1, 0x0f00, 0, &[]);
    t.enter(T, 2, 2, 0x0e00, 0, &[]);
    t.exit(T, 2, 3, 0, 0x0e00, 1, &[]);
    t.exit(T, 1, 4, 0, 0x0f00, 3, &[]);
    assert!(t.sink.0.is_empty());
    t.enter(T, 1, 5, 0x0f00, 0, &[]);
    t.enter(T, 2, 6, 0x0e00, 0, &[]);
    t.exit(T, 2, 20, 0, 0x0e00, 14, &[]);
    // 0 has run 20 ns: decided, shown with what is known of it.
    assert_eq!(brief(&t.sink.0), ["0>0", "1>1", "2>2", "2<2 14/14"]);
    t.exit(T, 1, 21, 0, 0x0f00, 16, &[]);
    t.exit(T, 0, 30, 0, 0x1000, 30, &[]);
    assert_eq!(
        brief(&t.sink.0),
        ["0>0", "1>1", "2>2", "2<2 14/14", "1<1 16/2", "0<0 30/14"]
    );
}

#[test]
fn a_fork_childs_first_call_closes_the_forking_call_it_returned_from() {
    // main (0) calls fork (1); the child's first call (2) is made from
    // main at fork's return-address slot: fork returned in the child.
    let mut t = tree(Filters::default());
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 1, 0x0f00, 0, &[]);
    t.forked(2, 1);
    let c = Thread { pid: 2, tid: 2 };
    t.enter(c, 2, 5, 0x0f00, 0, &[]);
    t.exit(c, 2, 6, 7, 0x0f00, 1, &[]);
    t.end_process(2, How::Unwound(Cause::ProcessEnded));
    t.exit(T, 1, 7, 2, 0x0f00, 6, &[]);
    t.exit(T, 0, 8, 0, 0x1000, 8, &[]);
    let child: Vec<Step> = t.sink.0.iter().filter(|s| s.th == c).cloned().collect();
    assert_eq!(
        brief(&child),
        ["1<1 4/4", "1>2", "1<2 1/1", "0<0 6/1 Unwound(Inherited)"]
    );
    assert_eq!(t.counters.unwound, 0);
    assert_eq!(t.counters.calls, 3);
}

#[test]
fn a_fork_child_continues_the_forking_threads_calls() {
    let mut t = tree(Filters::default());
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 1, 0x0f00, 0, &[]);
    t.forked(2, 1);
    let c = Thread { pid: 2, tid: 2 };
    t.exit(c, 1, 5, 0, 0x0f00, 4, &[]);
    t.exit(c, 0, 6, 0, 0x1000, 6, &[]);
    t.exit(T, 1, 7, 1, 0x0f00, 6, &[]);
    t.exit(T, 0, 8, 0, 0x1000, 8, &[]);
    let child: Vec<Step> = t.sink.0.iter().filter(|s| s.th == c).cloned().collect();
    assert_eq!(brief(&child), ["1<1 4/4", "0<0 6/2"]);
    assert_eq!(t.depth(c), 0);
    assert_eq!(t.depth(T), 0);
    assert_eq!(t.counters.orphan_returns, 0);
}

/// A daemon: the parent forks inside 1 (`daemon()`) and ends there with
/// no traced call since: its calls are continued in the child, which
/// returns from them. A parent that called something after its fork ends
/// its own calls.
#[test]
fn a_parent_ending_in_the_calls_it_forked_from_leaves_them_to_the_child() {
    let mut t = tree(Filters::default());
    t.enter(T, 0, 0, 0x1000, 0, &[]);
    t.enter(T, 1, 1, 0x0f00, 0, &[]);
    t.forked(2, 1);
    t.end_process(1, How::Unwound(Cause::ProcessEnded));
    let c = Thread { pid: 2, tid: 2 };
    t.enter(c, 2, 5, 0x0f00, 0, &[]);
    t.exit(c, 2, 6, 0, 0x0f00, 1, &[]);
    t.exit(c, 0, 8, 0, 0x1000, 8, &[]);
    assert_eq!(
        brief(&t.sink.0),
        [
            "0>0",
            "1>1",
            "1<1 0/0 Unwound(InChild)",
            "0<0 1/1 Unwound(InChild)",
            "1<1 4/4",
            "1>2",
            "1<2 1/1",
            "0<0 8/3"
        ]
    );

    let mut t = tree(Filters::default());
    let p = Thread { pid: 3, tid: 3 };
    t.enter(p, 0, 0, 0x1000, 0, &[]);
    t.forked(4, 3);
    t.enter(p, 1, 1, 0x0f00, 0, &[]);
    t.end_process(3, How::Unwound(Cause::ProcessEnded));
    assert_eq!(
        brief(&t.sink.0),
        [
            "0>0",
            "1>1",
            "1<1 0/0 Unwound(ProcessEnded)",
            "0<0 1/1 Unwound(ProcessEnded)"
        ]
    );

    // A child that executes a program continues none of them.
    let mut t = tree(Filters::default());
    let p = Thread { pid: 5, tid: 5 };
    t.enter(p, 0, 0, 0x1000, 0, &[]);
    t.forked(6, 5);
    t.end_process(6, How::Unwound(Cause::Exec));
    t.end_process(5, How::Unwound(Cause::ProcessEnded));
    assert_eq!(brief(&t.sink.0), ["0>0", "0<0 0/0 Unwound(ProcessEnded)"]);
}
