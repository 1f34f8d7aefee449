//! vfork children under the in-process transport as under ptrace: not
//! followed, their hits run nothing and leave the tracked calls of the
//! thread that made them alone (they run on its memory and thread
//! pointer); followed (`-f`), a vfork child of a vfork child has calls of
//! its own, its maker's intact when it resumes. Counts and call trees
//! written down by hand, the same under inproc, `auto` and ptrace.

use crate::case;
use crate::dynamic_processes::counts;
use crate::inproc_forks::{lines_of, trace_tree_with};
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, output_within, progs, scratch, stderr, wprobe};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(an_unfollowed_vfork_childs_hits_count_nothing, Need::Ptrace),
    case!(
        vfork_children_are_told_apart_with_the_process_not_held,
        Need::Ptrace
    ),
    case!(
        an_unfollowed_vfork_child_leaves_its_parents_calls_alone,
        Need::Ptrace
    ),
    case!(
        a_vfork_child_of_a_vfork_child_has_calls_of_its_own,
        Need::Ptrace
    ),
    case!(
        a_vfork_child_of_a_vfork_child_counts_under_its_own_pid,
        Need::Ptrace
    ),
];

/// The modes of vforkwork (`tests/progs/vforkwork.c`) whose child calls
/// `child_work` twice, and of vforknest (`tests/progs/vforknest.c`).
const WORK_MODES: [&str; 3] = ["exec", "exit", "clone"];
const NEST_MODES: [&str; 2] = ["exec", "exit"];

/// `wprobe run` without `-f` of vforkwork (`exec`, `exit`, `clone`,
/// `spawn`) and vforknest (`exec`, `exit`), under inproc, `auto` and
/// ptrace: the children's calls (`child_work`, `grand_work`, `middle` and
/// its returns) count nothing, the parent's `parent_work` once and its
/// `main` returns once. Under inproc the children's hits were the
/// parent's (`@c: 2`; vforknest `@c: 3`, `@g: 2`, `@m: 1`, `@r: 1`).
fn an_unfollowed_vfork_childs_hits_count_nothing() {
    let work = gcc("vforkwork", &progs().join("vforkwork.c"), &["-O0"]);
    let nest = gcc("vforknest", &progs().join("vforknest.c"), &["-O0"]);
    let prog = |e: &std::path::Path| {
        format!(
            "uprobe:{e}:child_work {{ @c = count(); }} \
             uprobe:{e}:parent_work {{ @p = count(); }} \
             uretprobe:{e}:main {{ @x = count(); }}",
            e = e.display()
        )
    };
    let nest_prog = format!(
        "{} uprobe:{e}:grand_work {{ @g = count(); }} \
         uprobe:{e}:middle {{ @m = count(); }} \
         uretprobe:{e}:middle {{ @r = count(); }}",
        prog(&nest),
        e = nest.display()
    );
    for tr in ["inproc", "auto", "ptrace"] {
        for mode in WORK_MODES.iter().chain(&["spawn"]) {
            let cmd = format!("{} x {mode}", work.display());
            let (maps, out) = counts(tr, &[], &prog(&work), &cmd);
            assert_eq!(maps, ["@p: 1", "@x: 1"], "{tr} {mode}: {out}");
        }
        for mode in NEST_MODES {
            let cmd = format!("{} x {mode}", nest.display());
            let (maps, out) = counts(tr, &[], &nest_prog, &cmd);
            assert_eq!(maps, ["@p: 1", "@x: 1"], "{tr} {mode}: {out}");
        }
    }
}

/// `wprobe run` without `-f` of vforkwork `tracer` (vfork, the child's
/// two `child_work` calls, exec) under inproc and `auto`: the child's hits
/// count nothing, and the parent, asked after its child is gone, is
/// traced by no process (`TracerPid: 0`): the target marks its vfork
/// children itself (`patch::vfork_marks`), nothing holds its threads to
/// see them made. The marks are named under `WPROBE_DEBUG`.
fn vfork_children_are_told_apart_with_the_process_not_held() {
    let work = gcc("vforkwork", &progs().join("vforkwork.c"), &["-O0"]);
    let e = work.display();
    let prog = format!(
        "uprobe:{e}:child_work {{ @c = count(); }} uprobe:{e}:parent_work {{ @p = count(); }}"
    );
    for tr in ["inproc", "auto"] {
        let (maps, out) = counts(tr, &[], &prog, &format!("{e} x tracer"));
        assert_eq!(maps, ["@p: 1"], "{tr}: {out}");
        let tracer: Vec<&str> = out.lines().filter(|l| l.starts_with("TracerPid")).collect();
        assert_eq!(tracer, ["TracerPid:\t0"], "{tr}: {out}");
    }
    let mut c = wprobe();
    c.env("WPROBE_DEBUG", "1")
        .args(["run", "--transport", "inproc", "-e", &prog, "-c"])
        .arg(format!("{e} x tracer"));
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    for f in ["vfork", "posix_spawn", "posix_spawnp", "clone"] {
        assert!(
            err.lines().any(
                |l| l.starts_with(&format!("wprobe: debug: vfork marks: {f} at 0x"))
                    && l.contains(": its entry and ")
            ),
            "no marks for {f}: {err}"
        );
    }
}

/// `wprobe trace` without `-f` (`-T -i`) under `tr` of `tests/progs/NAME.c`
/// given a scratch directory and `mode`, tracing `main` and what it calls:
/// the lines of the process whose `main` is traced, its pid written
/// `PARENT`.
fn unfollowed_tree(name: &str, tr: &str, mode: &str) -> String {
    let exe = gcc(name, &progs().join(format!("{name}.c")), &["-O0"]);
    let dir = scratch();
    let out = dir.join(format!("{name}-{tr}-{mode}.txt"));
    let mut c = wprobe();
    c.args(["trace", "--transport", tr, "-T", "-i", "-o"])
        .arg(&out)
        .args(["-F", "main", "-F", "child_work", "-F", "parent_work"])
        .args(["-F", "middle", "-F", "grand_work", "-F", "in_clone"])
        .arg("--")
        .arg(&exe)
        .arg(&dir)
        .arg(mode);
    let o = output_within(c, 120);
    assert_eq!(o.status.code(), Some(0), "{tr} {mode}: {}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    let Some(pid) = text
        .lines()
        .find_map(|l| l.strip_suffix("] ==> main()")?.strip_prefix("[pid "))
    else {
        panic!("{tr} {mode}: no main in {text}");
    };
    let text = text
        .replace(&format!("[pid {pid}]"), "[pid PARENT]")
        .replace(&format!("process {pid} "), "process PARENT ");
    lines_of(&text, "PARENT")
}

/// `wprobe trace` without `-f` of vforkwork (`exec`, `exit`, `clone`) and
/// vforknest (`exec`, `exit`: its child returns from `middle`, its
/// grandchild leaves it open), under inproc, `auto` and ptrace: the
/// parent's tree exactly, `main` calling `parent_work`. Under inproc the
/// children's calls were in it, and vforknest's child's left `main`
/// unwound with `done` and `middle` open under it.
fn an_unfollowed_vfork_child_leaves_its_parents_calls_alone() {
    let parent = "\
[pid PARENT] ==> main()
[pid PARENT]    ==> parent_work()
[pid PARENT]    <== parent_work() [rax = 0x6]
[pid PARENT] <== main() [rax = 0x0]
[pid PARENT] +++ process PARENT exited with status 0 +++
";
    for tr in ["inproc", "auto", "ptrace"] {
        for mode in WORK_MODES {
            let text = unfollowed_tree("vforkwork", tr, mode);
            assert_eq!(text, parent, "{tr} vforkwork {mode}");
        }
        for mode in NEST_MODES {
            let text = unfollowed_tree("vforknest", tr, mode);
            assert_eq!(text, parent, "{tr} vforknest {mode}");
        }
    }
}

/// `wprobe trace -f` of vforknest (`exec`, `exit`) under inproc, `auto`
/// and ptrace, three times each: the child's calls around its own vfork
/// child's, the grandchild's from inside `middle` (inherited, never
/// returned from), each process's lines exactly. Under inproc the
/// grandchild's calls took the child's place: the child's return from
/// `middle` was lost (`middle` and a `done` it never entered there left
/// unwound, its last `child_work` nested in `middle`).
fn a_vfork_child_of_a_vfork_child_has_calls_of_its_own() {
    let args = [
        "-F",
        "child_work",
        "-F",
        "parent_work",
        "-F",
        "middle",
        "-F",
        "grand_work",
    ];
    let parent = "\
[pid PARENT] ==> parent_work()
[pid PARENT] <== parent_work() [rax = 0x6]
[pid PARENT] +++ process PARENT exited with status 0 +++
";
    for _ in 0..3 {
        for mode in NEST_MODES {
            let (end, ended) = if mode == "exec" {
                ("exec", "[pid WHO] +++ process WHO exec'd +++\n")
            } else {
                ("process ended", "")
            };
            let ended = format!("{ended}[pid WHO] +++ process WHO exited with status 0 +++\n");
            let child = format!(
                "\
[pid CHILD] +++ process CHILD started (parent PARENT) +++
[pid CHILD] ==> middle()
[pid CHILD]    ==> child_work()
[pid CHILD]    <== child_work() [rax = 0x2]
[pid CHILD]    ==> child_work()
[pid CHILD]    <== child_work() [rax = 0x3]
[pid CHILD] <== middle() [rax = 0x0]
[pid CHILD] ==> child_work()
[pid CHILD] <== child_work() [rax = 0x4]
{}",
                ended.replace("WHO", "CHILD")
            );
            let grandchild = format!(
                "\
[pid CHILD2] +++ process CHILD2 started (parent CHILD) +++
[pid CHILD2]    ==> grand_work()
[pid CHILD2]    <== grand_work() [rax = 0xc]
[pid CHILD2]    ==> grand_work()
[pid CHILD2]    <== grand_work() [rax = 0xd]
[pid CHILD2]    ==> done()
[pid CHILD2]    <== done() [unwound: {end}]
[pid CHILD2] <== middle() [return not seen: a call inherited at fork]
{}",
                ended.replace("WHO", "CHILD2")
            );
            for tr in ["inproc", "auto", "ptrace"] {
                let (text, pids) = trace_tree_with("vforknest", tr, &args, &[mode]);
                assert_eq!(pids.len(), 2, "{tr} {mode}: {text}");
                assert_eq!(lines_of(&text, "PARENT"), parent, "{tr} {mode}: {text}");
                assert_eq!(lines_of(&text, "CHILD"), child, "{tr} {mode}: {text}");
                assert_eq!(lines_of(&text, "CHILD2"), grandchild, "{tr} {mode}: {text}");
            }
        }
    }
}

/// `wprobe run -f` of vforknest (`exec`, `exit`) under inproc, `auto` and
/// ptrace: per pid, the child's 3 `child_work` and its one return from
/// `middle` (entered once), the grandchild's 2 `grand_work` and their 2
/// returns and no return from `middle`, the parent's `parent_work` once:
/// three processes. Under inproc the grandchild's tracked calls took the
/// child's place: its return from `middle` was not counted.
fn a_vfork_child_of_a_vfork_child_counts_under_its_own_pid() {
    let exe = gcc("vforknest", &progs().join("vforknest.c"), &["-O0"]);
    let prog = format!(
        "uprobe:{e}:child_work {{ @c[pid] = count(); }} \
         uprobe:{e}:grand_work {{ @g[pid] = count(); }} \
         uretprobe:{e}:grand_work {{ @gr[pid] = count(); }} \
         uprobe:{e}:middle {{ @m[pid] = count(); }} \
         uretprobe:{e}:middle {{ @r[pid] = count(); }} \
         uprobe:{e}:parent_work {{ @p[pid] = count(); }}",
        e = exe.display()
    );
    for tr in ["inproc", "auto", "ptrace"] {
        for mode in NEST_MODES {
            let cmd = format!("{} x {mode}", exe.display());
            let (maps, out) = counts(tr, &["--follow"], &prog, &cmd);
            let pid_of = |m: &str| -> String {
                let l: Vec<&String> = maps.iter().filter(|l| l.starts_with(m)).collect();
                assert_eq!(l.len(), 1, "{tr} {mode} {m}: {maps:?}\n{out}");
                l[0][m.len()..].split_once(']').unwrap().0.to_string()
            };
            let (child, grandchild, parent) = (pid_of("@c["), pid_of("@gr["), pid_of("@p["));
            assert_ne!(child, grandchild, "{tr} {mode}: {maps:?}");
            assert_ne!(child, parent, "{tr} {mode}: {maps:?}");
            assert_ne!(grandchild, parent, "{tr} {mode}: {maps:?}");
            let mut want = vec![
                format!("@c[{child}]: 3"),
                format!("@g[{grandchild}]: 2"),
                format!("@gr[{grandchild}]: 2"),
                format!("@m[{child}]: 1"),
                format!("@p[{parent}]: 1"),
                format!("@r[{child}]: 1"),
            ];
            want.sort();
            assert_eq!(maps, want, "{tr} {mode}: {out}");
        }
    }
}
