//! `-f` under the in-process transport: fork children followed, their
//! agents woken with the parent's region (one ring, one set of counters
//! and maps), the programs they execute (`posix_spawn` and vfork children
//! too) armed with agents that join that region, their calls counted and
//! nested as under ptrace, their bytes put back at detach, and `wprobe
//! repair` for each after wprobe's death; the libraries a child opens and
//! closes after its fork armed and forgotten in it. Counts and call trees
//! written down by hand.

use crate::case;
use crate::dynamic_processes::{counts, dlreopen, forklib};
use crate::support::case::{Case, Need};
use crate::support::cli::{
    gcc, live_bytes, load_bias, output_within, progs, scratch, signal, stderr, sym, wait_patched,
    wprobe,
};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(
        fork_children_and_grandchildren_are_counted_in_process,
        Need::Ptrace
    ),
    case!(
        a_fork_child_that_executes_a_program_is_followed_into_it,
        Need::Ptrace
    ),
    case!(
        posix_spawn_and_vfork_children_are_followed_into_their_programs,
        Need::Ptrace
    ),
    case!(
        programs_executed_by_the_process_and_its_children_fork_followed_children,
        Need::Ptrace
    ),
    case!(
        an_in_process_fork_trace_nests_each_child_from_its_fork,
        Need::Ptrace
    ),
    case!(
        fork_children_are_restored_at_detach_and_repaired_after_a_kill,
        Need::Ptrace
    ),
    case!(
        a_child_armed_after_its_exec_is_restored_at_detach,
        Need::Ptrace
    ),
    case!(
        a_fork_childs_dlopen_is_traced_and_its_dlclose_forgotten,
        Need::Ptrace
    ),
    case!(
        a_library_a_child_opened_is_restored_at_detach_and_repaired_after_a_kill,
        Need::Ptrace
    ),
    case!(
        a_grandchild_has_the_library_its_parent_opened_and_arms_its_own,
        Need::Ptrace
    ),
    case!(libraries_are_armed_in_children_across_execs, Need::Ptrace),
    case!(
        a_program_with_no_probes_a_child_executes_has_its_dlopens_armed,
        Need::Ptrace
    ),
    case!(
        a_child_forked_just_before_its_parent_executes_a_program_is_followed,
        Need::Ptrace
    ),
    case!(
        a_vfork_childs_calls_are_its_own_before_it_executes_a_program,
        Need::Ptrace
    ),
    case!(a_vfork_childs_hits_carry_its_own_pid_and_tid, Need::Ptrace),
    case!(
        a_library_opened_while_children_are_forked_is_counted_in_the_parent,
        Need::Ptrace
    ),
];

/// `forkall 3 1000 2`: three children, each forking two of its own; all
/// nine call `target` 1000 times (the parent none).
fn fork_children_and_grandchildren_are_counted_in_process() {
    let exe = gcc(
        "forkall",
        &progs().join("forkall.c"),
        &["-O2", "-fPIE", "-pie"],
    );
    let prog = format!(
        "uprobe:{}:target {{ @c[pid] = count(); @n = count(); }}",
        exe.display()
    );
    let cmd = format!("{} 3 1000 2", exe.display());
    forkall_counts("inproc", &prog, &cmd, 3, 9, 1000);
}

/// `wprobe run --follow` under `tr` of a command running forkall (`ok`
/// children reporting): `@n` is `procs` processes' `each` calls, one
/// `@c[pid]` line of `each` per process.
fn forkall_counts(tr: &str, prog: &str, cmd: &str, ok: u32, procs: usize, each: u32) {
    let (maps, out) = counts(tr, &["--follow"], prog, cmd);
    assert!(out.contains(&format!("ok={ok}")), "{tr}: {out}");
    let total = format!("@n: {}", procs as u32 * each);
    assert_eq!(
        maps.last().map(String::as_str),
        Some(total.as_str()),
        "{tr}: {maps:?}\n{out}"
    );
    let per_pid: Vec<&String> = maps.iter().filter(|l| l.starts_with("@c[")).collect();
    assert_eq!(per_pid.len(), procs, "{tr}: {maps:?}\n{out}");
    let end = format!("]: {each}");
    assert!(per_pid.iter().all(|l| l.ends_with(&end)), "{tr}: {maps:?}");
}

/// forklib under inproc: as under ptrace (`dynamic_processes`), `work` 2,
/// `exec_work` 3, `lib_add` 5 in forklib's processes and 1 in forkexecd,
/// which the third child executes.
fn a_fork_child_that_executes_a_program_is_followed_into_it() {
    let (exe, execd) = forklib();
    let prog = format!(
        "uprobe:{}:work {{ @w = count(); }} \
         uprobe:{}/libforkwork.so:lib_add {{ @l[comm] = count(); }} \
         uprobe:{}:exec_work {{ @e = count(); }}",
        exe.display(),
        exe.parent().unwrap().display(),
        execd.display()
    );
    let cmd = format!("{} {}", exe.display(), execd.display());
    let (maps, out) = counts("inproc", &["--follow"], &prog, &cmd);
    assert!(out.contains("forkexecd 13"), "{out}");
    assert!(out.contains("forklib done 101"), "{out}");
    assert_eq!(
        maps,
        ["@e: 3", "@l[forkexecd]: 1", "@l[forklib]: 5", "@w: 2"],
        "{out}"
    );
}

/// spawnexec runs forkexecd through `posix_spawn`, then through vfork and
/// execv: each run's 3 `exec_work` under its own pid, its `lib_add` once,
/// spawnexec's own `work` twice. Five times: a vfork child that executes a
/// program at once (held at its first stop until its start is reported)
/// once raced the session's view of it.
fn posix_spawn_and_vfork_children_are_followed_into_their_programs() {
    let (_, execd) = forklib();
    let exe = gcc("spawnexec", &progs().join("spawnexec.c"), &["-O0"]);
    let prog = format!(
        "uprobe:{}:work {{ @w = count(); }} \
         uprobe:{}/libforkwork.so:lib_add {{ @l[comm] = count(); }} \
         uprobe:{}:exec_work {{ @e[pid] = count(); }}",
        exe.display(),
        execd.parent().unwrap().display(),
        execd.display()
    );
    let cmd = format!("{} {}", exe.display(), execd.display());
    for _ in 0..5 {
        let (maps, out) = counts("inproc", &["--follow"], &prog, &cmd);
        assert!(out.contains("spawn done 6"), "{out}");
        assert_eq!(out.matches("forkexecd 13").count(), 2, "{out}");
        let e: Vec<&String> = maps.iter().filter(|l| l.starts_with("@e[")).collect();
        assert_eq!(e.len(), 2, "{maps:?}\n{out}");
        assert!(e.iter().all(|l| l.ends_with("]: 3")), "{maps:?}");
        assert!(maps.contains(&"@l[forkexecd]: 2".to_string()), "{maps:?}");
        assert!(maps.contains(&"@w: 2".to_string()), "{maps:?}");
    }
}

/// `wprobe trace -f --plt` of forklib under inproc: as under ptrace, each
/// child continues `main` from its `fork@plt`, the two that call `work`
/// end in `_exit@plt`, and the one that executes forkexecd ends its calls
/// there (`execl@plt` unwound by the exec). The
/// counts of the same trace (`--report`) are `dynamic_processes`'s, under
/// `auto` (inproc) and ptrace.
fn an_in_process_fork_trace_nests_each_child_from_its_fork() {
    let (exe, execd) = forklib();
    let mut c = wprobe();
    c.args(["trace", "--transport", "inproc", "-f", "--plt", "--"])
        .arg(&exe)
        .arg(&execd);
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let text = String::from_utf8_lossy(&o.stdout);
    // Each child's first line returns from the fork it inherited.
    let children: Vec<&str> = text
        .lines()
        .filter(|l| l.ends_with("} /* main: return not seen: a call inherited at fork */"))
        .collect();
    assert_eq!(children.len(), 3, "{text}");
    for l in &children {
        let tid = l
            .split('[')
            .nth(1)
            .and_then(|r| r.split(']').next())
            .unwrap();
        let first = text
            .lines()
            .find(|x| x.contains(&format!("[{tid}]")))
            .unwrap();
        assert!(
            first.ends_with("|   } /* fork@plt */"),
            "{tid}: {first}\n{text}"
        );
    }
    // The third child's `execl@plt` ends with its exec (on one line, or
    // closed after its parent's lines that came meanwhile).
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("execl@plt") && l.contains("unwound: exec"))
            .count(),
        1,
        "{text}"
    );
    // Each `_exit@plt` ends with its child, on one line, or closed after
    // the parent's lines that came meanwhile (the lines are in time order;
    // a child's end is reported among the runs where it was seen, which is
    // not always before its parent's next line: not asserted).
    let lines: Vec<&str> = text.lines().collect();
    let ended: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("_exit@plt") && lines[i].contains("unwound: process ended"))
        .collect();
    // A `waitpid` a child's lines interrupt closes on a line of its own;
    // one entered after the child ended (seen in CI) is one line.
    let waited: Vec<usize> = (0..lines.len())
        .filter(|&i| {
            lines[i].ends_with("} /* waitpid@plt */") || lines[i].ends_with("|   waitpid@plt();")
        })
        .collect();
    assert_eq!(ended.len(), 2, "{text}");
    assert_eq!(waited.len(), 3, "{text}");
}

/// `sh SCRIPT`: sh executes `sh SCRIPT2` (its last command: the process
/// itself executes it), which forks a child that executes `forkall 2 100`
/// (not its last command), whose two children call `target` 100 times
/// each: a program the process executes, then one its child executes,
/// then that program's own fork children, all followed. Under inproc
/// (forced) and auto, as under ptrace.
fn programs_executed_by_the_process_and_its_children_fork_followed_children() {
    let exe = gcc(
        "forkall",
        &progs().join("forkall.c"),
        &["-O2", "-fPIE", "-pie"],
    );
    let dir = exe.parent().unwrap();
    let inner = dir.join("inner.sh");
    std::fs::write(&inner, format!("{} 2 100\ntrue\n", exe.display())).unwrap();
    let outer = dir.join("outer.sh");
    std::fs::write(&outer, format!("sh {}\n", inner.display())).unwrap();
    let prog = format!(
        "uprobe:{}:target {{ @c[pid] = count(); @n = count(); }}",
        exe.display()
    );
    let cmd = format!("sh {}", outer.display());
    for tr in ["inproc", "auto", "ptrace"] {
        forkall_counts(tr, &prog, &cmd, 2, 2, 100);
    }
}

/// Processes killed (`SIGKILL`) when dropped: a test that fails leaves
/// none of its targets running.
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
    }
}

/// The address of `target` in process `pid` and its original bytes.
fn target_in(exe: &Path, pid: u32) -> (u64, Vec<u8>) {
    let link = sym(exe, "target");
    let orig = {
        let elf = std::fs::read(exe).unwrap();
        // A PIE's text is mapped at its file offset's address (Debian's gcc).
        elf[link as usize..link as usize + 5].to_vec()
    };
    (load_bias(pid, exe) + link, orig)
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// forkspin, attached with `-p --follow`: after SIGUSR1 it forks two
/// children, which are followed (counted). SIGINT to wprobe: every
/// process goes on running with its original bytes. Attached again and
/// two more children forked, wprobe SIGKILLed: the children keep running,
/// still patched (their agents dormant), and `wprobe repair --pid` puts
/// each back.
fn fork_children_are_restored_at_detach_and_repaired_after_a_kill() {
    let exe: PathBuf = gcc("forkspin", &progs().join("forkspin.c"), &["-O1"]);
    let mut spin = Command::new(&exe)
        .arg("2")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let parent = spin.id();
    let mut pids = std::io::BufReader::new(spin.stdout.take().unwrap()).lines();
    let mut all = vec![parent];
    let prog = format!("uprobe:{}:target {{ @[pid] = count(); }}", exe.display());
    let attach = || {
        let mut c = wprobe();
        c.args(["run", "--transport", "inproc", "--follow", "-p"])
            .arg(parent.to_string())
            .args(["-e", &prog])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (addr, orig) = target_in(&exe, parent);
    let cleanup = |all: &[u32]| {
        for p in all {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
    };
    // Detach with live children.
    let w = attach();
    wait_patched(parent, addr, orig[0]);
    signal(parent, "USR1");
    let kids: Vec<u32> = (0..2)
        .map(|_| pids.next().unwrap().unwrap().trim().parse().unwrap())
        .collect();
    all.extend(&kids);
    std::thread::sleep(std::time::Duration::from_millis(500));
    signal(w.id(), "INT");
    let o = crate::support::cli::output_within_child(w, 60);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    if o.status.code() != Some(0) {
        cleanup(&all);
    }
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for p in std::iter::once(parent).chain(kids.iter().copied()) {
        assert!(out.contains(&format!("@[{p}]: ")), "{p}: {out}");
        assert!(alive(p), "{p}");
        assert_eq!(live_bytes(p, addr, 5), orig, "process {p} left patched");
    }
    // Killed with live children: dormant, patched, repaired.
    let mut w = attach();
    wait_patched(parent, addr, orig[0]);
    signal(parent, "USR1");
    let kids: Vec<u32> = (0..2)
        .map(|_| pids.next().unwrap().unwrap().trim().parse().unwrap())
        .collect();
    all.extend(&kids);
    std::thread::sleep(std::time::Duration::from_millis(500));
    w.kill().unwrap();
    w.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for &p in std::iter::once(&parent).chain(&kids) {
        assert!(alive(p), "{p}");
        assert_ne!(live_bytes(p, addr, 5), orig, "process {p} not patched");
        let o = output_within(
            {
                let mut c = wprobe();
                c.args(["repair", "--pid", &p.to_string()]);
                c
            },
            30,
        );
        assert_eq!(o.status.code(), Some(0), "{p}: {}", stderr(&o));
        assert_eq!(live_bytes(p, addr, 5), orig, "process {p} not repaired");
        assert!(alive(p), "{p}");
    }
    cleanup(&all);
    let _ = spin.wait();
}

/// `forkspin 1 forkspin`, attached with `-p --follow`: at SIGUSR1 it forks
/// a child that executes forkspin again (`forkspin 0`), armed in its new
/// image with an agent that joins the region (its `target` patched there).
/// SIGINT to wprobe: both processes go on running, their bytes original.
fn a_child_armed_after_its_exec_is_restored_at_detach() {
    let exe: PathBuf = gcc("forkspin", &progs().join("forkspin.c"), &["-O1"]);
    let mut spin = Command::new(&exe)
        .arg("1")
        .arg(&exe)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let parent = spin.id();
    let mut pids = std::io::BufReader::new(spin.stdout.take().unwrap()).lines();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (addr, orig) = target_in(&exe, parent);
    let prog = format!("uprobe:{}:target {{ @[pid] = count(); }}", exe.display());
    let mut c = wprobe();
    c.args(["run", "--transport", "inproc", "--follow", "-p"])
        .arg(parent.to_string())
        .args(["-e", &prog])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let w = c.spawn().unwrap();
    wait_patched(parent, addr, orig[0]);
    signal(parent, "USR1");
    let child: u32 = pids.next().unwrap().unwrap().trim().parse().unwrap();
    // Killed whatever the outcome (a failed assertion left them running).
    let _reap = KillOnDrop(vec![child, parent]);
    // Its new image, armed (an address of its own: a PIE mapped anew).
    // Before its exec the child runs forkspin too (forked, `forkspin 1
    // PROG`): its new image is the one whose arguments are `PROG 0`.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (caddr, _) = loop {
        let execed = std::fs::read(format!("/proc/{child}/cmdline"))
            .is_ok_and(|c| c.ends_with(b"\x000\x00"));
        if execed
            && std::fs::read_to_string(format!("/proc/{child}/maps"))
                .is_ok_and(|m| m.contains("forkspin"))
        {
            break target_in(&exe, child);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "child {child} never ran forkspin"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    wait_patched(child, caddr, orig[0]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    signal(w.id(), "INT");
    let o = crate::support::cli::output_within_child(w, 60);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let kill = |p: u32| {
        let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
    };
    let ok = o.status.code() == Some(0);
    let results = [
        (parent, live_bytes(parent, addr, 5), alive(parent)),
        (child, live_bytes(child, caddr, 5), alive(child)),
    ];
    kill(child);
    kill(parent);
    let _ = spin.wait();
    assert!(ok, "{}", stderr(&o));
    assert!(out.contains(&format!("@[{child}]: ")), "{out}");
    for (p, bytes, live) in results {
        assert!(live, "{p}");
        assert_eq!(bytes, orig, "process {p} left patched");
    }
}

/// `wprobe trace -f -T -i` of forkdl under `tr`, with `args`: the output,
/// the parent's pid written `PARENT` and the child's `CHILD`.
fn forkdl_tree(tr: &str, args: &[&str]) -> String {
    let (text, pids) = trace_tree("forkdl", tr, args);
    assert_eq!(pids.len(), 1, "{tr}: {text}");
    text
}

/// `wprobe trace -f -T -i` under `tr`, with `args`, of `tests/progs/NAME.c`
/// given the scratch directory (where dlreopen's libraries are), which
/// exits with 0 and prints nothing or (forkdl) `child status 51`: the
/// output, the parent's pid written `PARENT` and the children's `CHILD`,
/// `CHILD2`… in the order they started; their pids.
fn trace_tree(name: &str, tr: &str, args: &[&str]) -> (String, Vec<String>) {
    trace_tree_with(name, tr, args, &[])
}

/// [`trace_tree`] with more arguments for the program (after the scratch
/// directory).
pub(crate) fn trace_tree_with(
    name: &str,
    tr: &str,
    args: &[&str],
    prog_args: &[&str],
) -> (String, Vec<String>) {
    dlreopen();
    let exe = gcc(name, &progs().join(format!("{name}.c")), &["-O0"]);
    let dir = scratch();
    let out = dir.join(format!("{name}-{tr}.txt"));
    let mut c = wprobe();
    c.args(["trace", "--transport", tr, "-f", "-T", "-i", "-o"])
        .arg(&out)
        .args(args)
        .arg("--")
        .arg(&exe)
        .arg(&dir)
        .args(prog_args);
    let o = output_within(c, 120);
    assert_eq!(o.status.code(), Some(0), "{tr}: {}", stderr(&o));
    // forkdl: fa2(1) + fa2(2) + fb2(3) = 25; fb2 where fa2 was.
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.is_empty() || said == "child status 51\n",
        "{tr}: {said}{}",
        stderr(&o)
    );
    let mut text = std::fs::read_to_string(&out).unwrap();
    let started: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| {
            let r = l.split("+++ process ").nth(1)?;
            let (pid, r) = r.split_once(" started (parent ")?;
            Some((
                pid.to_string(),
                r.trim_end_matches(" +++").trim_end_matches(')').to_string(),
            ))
        })
        .collect();
    let Some(parent) = started.first().map(|s| s.1.clone()) else {
        panic!("{tr}: no child in {text}");
    };
    let mut names = vec![(parent.clone(), "PARENT".to_string())];
    for (k, (pid, _)) in started.iter().enumerate() {
        let n = if k == 0 {
            "CHILD".to_string()
        } else {
            format!("CHILD{}", k + 1)
        };
        names.push((pid.clone(), n));
    }
    for (pid, n) in &names {
        text = text
            .replace(&format!("[pid {pid}]"), &format!("[pid {n}]"))
            .replace(&format!("process {pid} "), &format!("process {n} "))
            .replace(&format!("(parent {pid})"), &format!("(parent {n})"));
    }
    (text, started.into_iter().map(|s| s.0).collect())
}

/// forkdlnest: a child opens libreopen_a.so and calls `fa2`, then forks;
/// its child (which has the library, armed, from its parent) calls `fa2`,
/// opens libreopen_b.so and calls `fb2`; its parent calls `fa2` again.
/// Under inproc and `auto` as under ptrace, three times.
fn a_grandchild_has_the_library_its_parent_opened_and_arms_its_own() {
    let d = scratch();
    let a = d.join("libreopen_a.so");
    let b = d.join("libreopen_b.so");
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let args = ["--lib", a, "--lib", b, "-F", "fa2", "-F", "fb2"];
    for _ in 0..3 {
        for tr in ["inproc", "auto", "ptrace"] {
            let (text, pids) = trace_tree("forkdlnest", tr, &args);
            assert_eq!(pids.len(), 2, "{tr}: {text}");
            assert_eq!(
                text,
                "\
[pid CHILD] +++ process CHILD started (parent PARENT) +++
[pid CHILD] ==> fa2()
[pid CHILD]    ==> fa()
[pid CHILD]    <== fa() [rax = 0x2]
[pid CHILD] <== fa2() [rax = 0x4]
[pid CHILD2] +++ process CHILD2 started (parent CHILD) +++
[pid CHILD2] ==> fa2()
[pid CHILD2]    ==> fa()
[pid CHILD2]    <== fa() [rax = 0x3]
[pid CHILD2] <== fa2() [rax = 0x6]
[pid CHILD2] ==> fb2()
[pid CHILD2]    ==> fb()
[pid CHILD2]    <== fb() [rax = 0x5]
[pid CHILD2] <== fb2() [rax = 0xf]
[pid CHILD2] +++ process CHILD2 exited with status 0 +++
[pid CHILD] ==> fa2()
[pid CHILD]    ==> fa()
[pid CHILD]    <== fa() [rax = 0x5]
[pid CHILD] <== fa2() [rax = 0xa]
[pid CHILD] +++ process CHILD exited with status 0 +++
[pid PARENT] +++ process PARENT exited with status 0 +++
",
                "{tr}"
            );
        }
    }
}

/// forkdl: a fork child opens libreopen_a.so, calls `fa2` twice, closes
/// it, opens libreopen_b.so (mapped where the first was), calls `fb2`
/// once, closes it and exits; the parent waits. Under inproc and `auto`
/// (which takes it), as under ptrace: the libraries the child opens are
/// armed in it at the dynamic linker's `r_brk` (the same rules as in the
/// main process: `--lib` names them, `-F` filters), and a library opened
/// where a closed one was gets sites of its own (`fb2` and `fb`, not
/// `fa2` and `fa` again). Three times each: fork tests were flaky.
fn a_fork_childs_dlopen_is_traced_and_its_dlclose_forgotten() {
    let d = scratch();
    let a = d.join("libreopen_a.so");
    let b = d.join("libreopen_b.so");
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let both = ["--lib", a, "--lib", b, "-F", "fa2", "-F", "fb2"];
    let only_a = ["--lib", a, "-F", "fa2", "-F", "fb2"];
    for _ in 0..3 {
        for tr in ["inproc", "auto", "ptrace"] {
            assert_eq!(
                forkdl_tree(tr, &both),
                "\
[pid CHILD] +++ process CHILD started (parent PARENT) +++
[pid CHILD] ==> fa2()
[pid CHILD]    ==> fa()
[pid CHILD]    <== fa() [rax = 0x2]
[pid CHILD] <== fa2() [rax = 0x4]
[pid CHILD] ==> fa2()
[pid CHILD]    ==> fa()
[pid CHILD]    <== fa() [rax = 0x3]
[pid CHILD] <== fa2() [rax = 0x6]
[pid CHILD] ==> fb2()
[pid CHILD]    ==> fb()
[pid CHILD]    <== fb() [rax = 0x5]
[pid CHILD] <== fb2() [rax = 0xf]
[pid CHILD] +++ process CHILD exited with status 51 +++
[pid PARENT] +++ process PARENT exited with status 0 +++
",
                "{tr}"
            );
            // The second library not named: not traced, though it takes
            // the first one's place.
            assert_eq!(
                forkdl_tree(tr, &only_a),
                "\
[pid CHILD] +++ process CHILD started (parent PARENT) +++
[pid CHILD] ==> fa2()
[pid CHILD]    ==> fa()
[pid CHILD]    <== fa() [rax = 0x2]
[pid CHILD] <== fa2() [rax = 0x4]
[pid CHILD] ==> fa2()
[pid CHILD]    ==> fa()
[pid CHILD]    <== fa() [rax = 0x3]
[pid CHILD] <== fa2() [rax = 0x6]
[pid CHILD] +++ process CHILD exited with status 51 +++
[pid PARENT] +++ process PARENT exited with status 0 +++
",
                "{tr}"
            );
        }
    }
}

/// Waits until process `pid`'s tracer is `tracer` (wprobe attached and
/// its threads seized: the probes armed), at most 20 s.
fn wait_traced_by(pid: u32, tracer: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let want = format!("TracerPid:\t{tracer}\n");
    while !std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| s.contains(&want)) {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} not traced by {tracer} within 20 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// forkdlspin, attached with `-p --follow` and a probe on `fa` of a
/// library it does not map: at SIGUSR1 it forks a child that opens the
/// library and calls it; the probe is armed in the child (counted).
/// SIGINT to wprobe: the child goes on with the library's original bytes.
/// Attached again and another child forked, wprobe SIGKILLed: the child
/// keeps running, its library patched (the agent dormant), and `wprobe
/// repair --pid` puts it back (the library's sites are in the child's
/// journal).
fn a_library_a_child_opened_is_restored_at_detach_and_repaired_after_a_kill() {
    dlreopen();
    let lib = scratch().join("libreopen_a.so");
    let exe = gcc("forkdlspin", &progs().join("forkdlspin.c"), &["-O0"]);
    let mut spin = Command::new(&exe)
        .arg(&lib)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let parent = spin.id();
    let mut addrs = std::io::BufReader::new(spin.stdout.take().unwrap()).lines();
    let mut reap = KillOnDrop(vec![parent]);
    let link = sym(&lib, "fa");
    // Its text is mapped at its file offset's address.
    let orig = std::fs::read(&lib).unwrap()[link as usize..link as usize + 5].to_vec();
    let prog = format!("uprobe:{}:fa {{ @[pid] = count(); }}", lib.display());
    let attach = || {
        let mut c = wprobe();
        c.args(["run", "--transport", "inproc", "--follow", "-p"])
            .arg(parent.to_string())
            .args(["-e", &prog])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.spawn().unwrap()
    };
    let mut fork_child = |reap: &mut KillOnDrop| -> (u32, u64) {
        signal(parent, "USR1");
        let line = addrs.next().unwrap().unwrap();
        let addr = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap();
        // The child: the one process whose parent is forkdlspin not yet
        // known.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let kids = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
                .unwrap_or_default();
            if let Some(c) = kids
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .find(|p| !reap.0.contains(p))
            {
                reap.0.push(c);
                return (c, addr);
            }
            assert!(std::time::Instant::now() < deadline, "no child");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    // Detach with the child running in the library.
    let w = attach();
    wait_traced_by(parent, w.id());
    let (child, addr) = fork_child(&mut reap);
    wait_patched(child, addr, orig[0]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    signal(w.id(), "INT");
    let o = crate::support::cli::output_within_child(w, 60);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.contains(&format!("@[{child}]: ")), "{child}: {out}");
    assert!(alive(child) && alive(parent), "{child}");
    assert_eq!(
        live_bytes(child, addr, 5),
        orig,
        "process {child} left patched"
    );
    // Killed with the child running in the library: patched, repaired.
    let mut w = attach();
    wait_traced_by(parent, w.id());
    let (child, addr) = fork_child(&mut reap);
    wait_patched(child, addr, orig[0]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    w.kill().unwrap();
    w.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(alive(child), "{child}");
    assert_ne!(
        live_bytes(child, addr, 5),
        orig,
        "process {child} not patched"
    );
    let o = output_within(
        {
            let mut c = wprobe();
            c.args(["repair", "--pid", &child.to_string()]);
            c
        },
        30,
    );
    assert_eq!(o.status.code(), Some(0), "{child}: {}", stderr(&o));
    assert_eq!(
        live_bytes(child, addr, 5),
        orig,
        "process {child} not repaired"
    );
    assert!(alive(child), "{child}");
    drop(reap);
    let _ = spin.wait();
}

/// A child's `dlopen` across execs, under inproc and `auto` as under
/// ptrace: forkexecdl's child opens libreopen_a.so after its parent
/// executed `sleep` (the trap at `r_brk` is its parent's old image's);
/// `sh SCRIPT` forks a child that executes dlreopen (`main` probed: an
/// agent joins it), whose libraries (opened, closed, one at the other's
/// address, the first again) are armed in its new image: `fa` 4, `fb` 2,
/// `fa2` returning 2, 4, 6 and 16. Three times.
fn libraries_are_armed_in_children_across_execs() {
    let d = scratch();
    let a = d.join("libreopen_a.so");
    let b = d.join("libreopen_b.so");
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let only_child = |text: &str| -> String {
        text.lines()
            .filter(|l| l.starts_with("[pid CHILD] "))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let exe = dlreopen();
    // Not its last command: sh forks a child that executes it.
    let script = d.join("dlreopen.sh");
    std::fs::write(
        &script,
        format!("{} {}\ntrue\n", exe.display(), d.display()),
    )
    .unwrap();
    let cmd = format!("sh {}", script.display());
    let prog = format!(
        "uprobe:{e}:main {{ @m = count(); }} \
         uprobe:{a}:fa {{ @a = count(); }} \
         uprobe:{b}:fb {{ @b = count(); }} \
         uretprobe:{a}:fa2 {{ @r[retval] = count(); }}",
        e = exe.display()
    );
    for _ in 0..3 {
        for tr in ["inproc", "auto", "ptrace"] {
            let (text, pids) = trace_tree("forkexecdl", tr, &["--lib", a, "-F", "fa2"]);
            assert_eq!(pids.len(), 1, "{tr}: {text}");
            assert_eq!(
                only_child(&text),
                "\
[pid CHILD] +++ process CHILD started (parent PARENT) +++
[pid CHILD] ==> fa2()
[pid CHILD]    ==> fa()
[pid CHILD]    <== fa() [rax = 0x2]
[pid CHILD] <== fa2() [rax = 0x4]
[pid CHILD] +++ process CHILD exited with status 0 +++
",
                "{tr}: {text}"
            );
            let (maps, out) = counts(tr, &["--follow"], &prog, &cmd);
            assert!(out.contains("sum=43 same_address=1"), "{tr}: {out}");
            assert_eq!(
                maps,
                [
                    "@a: 4",
                    "@b: 2",
                    "@m: 1",
                    "@r[16]: 1",
                    "@r[2]: 1",
                    "@r[4]: 1",
                    "@r[6]: 1"
                ],
                "{tr}: {out}"
            );
        }
    }
}

/// forkthenexec: the parent forks a child and executes a program at once
/// (itself, calling `after` twice once the child ended), before the
/// child's first stop may be seen; the child calls `work` five times after
/// that exec and exits with 3. Under inproc and `auto` as under ptrace,
/// the child is followed with its parent's old image (its probes, agent
/// and trap sites), whenever its first stop comes: each process's lines
/// exactly. Twenty times each: the order of the child's first stop and
/// its parent's exec is the scheduler's.
fn a_child_forked_just_before_its_parent_executes_a_program_is_followed() {
    let of = |text: &str, who: &str| -> String {
        text.lines()
            .filter(|l| l.starts_with(&format!("[pid {who}] ")))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    for _ in 0..20 {
        for tr in ["inproc", "auto", "ptrace"] {
            let (text, pids) = trace_tree("forkthenexec", tr, &["-F", "work", "-F", "after"]);
            assert_eq!(pids.len(), 1, "{tr}: {text}");
            assert_eq!(
                of(&text, "CHILD"),
                "\
[pid CHILD] +++ process CHILD started (parent PARENT) +++
[pid CHILD] ==> work()
[pid CHILD] <== work() [rax = 0x0]
[pid CHILD] ==> work()
[pid CHILD] <== work() [rax = 0x2]
[pid CHILD] ==> work()
[pid CHILD] <== work() [rax = 0x4]
[pid CHILD] ==> work()
[pid CHILD] <== work() [rax = 0x6]
[pid CHILD] ==> work()
[pid CHILD] <== work() [rax = 0x8]
[pid CHILD] +++ process CHILD exited with status 3 +++
",
                "{tr}: {text}"
            );
            assert_eq!(
                of(&text, "PARENT"),
                "\
[pid PARENT] +++ process PARENT exec'd +++
[pid PARENT] ==> after()
[pid PARENT] <== after() [rax = 0x3]
[pid PARENT] ==> after()
[pid PARENT] <== after() [rax = 0x6]
[pid PARENT] +++ process PARENT exited with status 0 +++
",
                "{tr}: {text}"
            );
        }
    }
}

/// The lines of process `who` (`PARENT`, `CHILD`) of a [`trace_tree`].
pub(crate) fn lines_of(text: &str, who: &str) -> String {
    text.lines()
        .filter(|l| l.starts_with(&format!("[pid {who}] ")))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// vforkwork: a vfork child calls `child_work` twice, then executes
/// /bin/true (`exec`) or `_exit`s (`exit`); a child made as `posix_spawn`
/// makes its own (`clone`: `clone(CLONE_VM | CLONE_VFORK)` on a stack of
/// its own) calls it twice from `in_clone` and executes /bin/true; the
/// parent then calls `parent_work`. Under inproc and `auto` as under
/// ptrace, each process's lines exactly: the child's calls in its own
/// tree, under its pid (they were its parent's under inproc: the child
/// runs on its parent's memory and thread pointer, and the agent told
/// processes apart by them). Five times each.
fn a_vfork_childs_calls_are_its_own_before_it_executes_a_program() {
    let args = ["-F", "child_work", "-F", "parent_work", "-F", "in_clone"];
    let parent = "\
[pid PARENT] ==> parent_work()
[pid PARENT] <== parent_work() [rax = 0x6]
[pid PARENT] +++ process PARENT exited with status 0 +++
";
    let work = "\
[pid CHILD] ==> child_work()
[pid CHILD] <== child_work() [rax = 0x2]
[pid CHILD] ==> child_work()
[pid CHILD] <== child_work() [rax = 0x3]
";
    let start = "[pid CHILD] +++ process CHILD started (parent PARENT) +++\n";
    let execd = "\
[pid CHILD] +++ process CHILD exec'd +++
[pid CHILD] +++ process CHILD exited with status 0 +++
";
    let cases = [
        ("exec", format!("{start}{work}{execd}")),
        (
            "exit",
            format!("{start}{work}[pid CHILD] +++ process CHILD exited with status 0 +++\n"),
        ),
        (
            "clone",
            format!(
                "{start}[pid CHILD] ==> in_clone()\n{}[pid CHILD] <== in_clone() [unwound: exec]\n{execd}",
                work.replace("[pid CHILD] ", "[pid CHILD]    ")
            ),
        ),
    ];
    for _ in 0..5 {
        for (mode, child) in &cases {
            for tr in ["inproc", "auto", "ptrace"] {
                let (text, pids) = trace_tree_with("vforkwork", tr, &args, &[mode]);
                assert_eq!(pids.len(), 1, "{tr} {mode}: {text}");
                assert_eq!(lines_of(&text, "CHILD"), *child, "{tr} {mode}: {text}");
                assert_eq!(lines_of(&text, "PARENT"), parent, "{tr} {mode}: {text}");
            }
        }
    }
}

/// `wprobe run -f` of vforkwork under inproc, `auto` and ptrace: the hits
/// of a vfork child (`exec`, `exit`; `clone`, made as `posix_spawn` makes
/// its child) carry its pid and tid, not its parent's; `posix_spawn`'s own
/// child (`spawn`) hits `execve` in libc under its pid, the parent never.
fn a_vfork_childs_hits_carry_its_own_pid_and_tid() {
    let exe = gcc("vforkwork", &progs().join("vforkwork.c"), &["-O0"]);
    let prog = format!(
        "uprobe:{e}:child_work {{ @c[pid] = count(); @ct[tid] = count(); }} \
         uprobe:{e}:parent_work {{ @p[pid] = count(); @pt[tid] = count(); }} \
         uprobe:libc:execve {{ @x[pid] = count(); }}",
        e = exe.display()
    );
    // `@m[PID]: N` lines: (PID, N).
    let keyed = |maps: &[String], m: &str| -> Vec<(u32, u32)> {
        maps.iter()
            .filter_map(|l| {
                let (k, n) = l.strip_prefix(&format!("@{m}["))?.split_once("]: ")?;
                Some((k.parse().ok()?, n.parse().ok()?))
            })
            .collect()
    };
    for tr in ["inproc", "auto", "ptrace"] {
        for mode in ["exec", "exit", "clone", "spawn"] {
            let cmd = format!("{} x {mode}", exe.display());
            let (maps, out) = counts(tr, &["--follow"], &prog, &cmd);
            let p = keyed(&maps, "p");
            assert_eq!(p.len(), 1, "{tr} {mode}: {maps:?}\n{out}");
            let parent = p[0].0;
            assert_eq!(keyed(&maps, "pt"), p, "{tr} {mode}: {maps:?}");
            let c = keyed(&maps, "c");
            let x = keyed(&maps, "x");
            if mode == "spawn" {
                assert!(c.is_empty(), "{tr} {mode}: {maps:?}");
                assert_eq!(x.len(), 1, "{tr} {mode}: {maps:?}\n{out}");
                assert_ne!(x[0].0, parent, "{tr} {mode}: {maps:?}");
                assert_eq!(x[0].1, 1, "{tr} {mode}: {maps:?}");
                continue;
            }
            assert_eq!(c.len(), 1, "{tr} {mode}: {maps:?}\n{out}");
            assert_ne!(c[0].0, parent, "{tr} {mode}: {maps:?}");
            assert_eq!(c[0].1, 2, "{tr} {mode}: {maps:?}");
            assert_eq!(keyed(&maps, "ct"), c, "{tr} {mode}: {maps:?}");
            let execs = if mode == "exit" {
                vec![]
            } else {
                vec![(c[0].0, 1)]
            };
            assert_eq!(x, execs, "{tr} {mode}: {maps:?}");
        }
    }
}

/// A program a followed child executes that has none of the run's probes
/// at its start but opens a library that has them (`sh SCRIPT` forks a
/// child that executes dlreopen; only libreopen_a.so's `fa` and
/// libreopen_b.so's `fb` are probed): its image gets an agent all the
/// same, and the library's probes are armed in it when it opens them —
/// `fa` 4 times, `fb` twice, under inproc and `auto` as under ptrace.
/// Before, the image was followed with no agent and its calls went
/// uncounted (no `@a`, no `@b`), silently.
fn a_program_with_no_probes_a_child_executes_has_its_dlopens_armed() {
    let d = scratch();
    let exe = dlreopen();
    let script = d.join("dlreopen-noprobe.sh");
    std::fs::write(
        &script,
        format!("{} {}\ntrue\n", exe.display(), d.display()),
    )
    .unwrap();
    let cmd = format!("sh {}", script.display());
    let prog = format!(
        "uprobe:{a}:fa {{ @a = count(); }} uprobe:{b}:fb {{ @b = count(); }}",
        a = d.join("libreopen_a.so").display(),
        b = d.join("libreopen_b.so").display()
    );
    for tr in ["inproc", "auto", "ptrace"] {
        let (maps, out) = counts(tr, &["--follow"], &prog, &cmd);
        assert!(out.contains("sum=43 same_address=1"), "{tr}: {out}");
        assert_eq!(maps, ["@a: 4", "@b: 2"], "{tr}: {out}");
    }
}

/// `wprobe run --follow` (and without it) of forkdlopen
/// (`tests/progs/forkdlopen.c`): a
/// thread opens, calls and closes a library 100 times while the main
/// thread forks 30 children that call `child_fn` twice, under inproc,
/// `auto` and ptrace: every call counted (`@a: 100`, `@c: 60`). Under
/// inproc the run hung (a fork's event stop took the place of the stop
/// `stop_all` had asked for), the probe was disabled everywhere once a
/// child forked between the library's mapping and its arming could not
/// have it (`@a: 3`), and a parent held at its fork event was picked to
/// run the agent's calls (the injected `mmap` failed with ENOSYS).
fn a_library_opened_while_children_are_forked_is_counted_in_the_parent() {
    let lib = gcc(
        "libreopen_a.so",
        &progs().join("libreopen_a.c"),
        &["-O0", "-shared", "-fPIC"],
    );
    let exe = gcc("forkdlopen", &progs().join("forkdlopen.c"), &["-O0"]);
    let prog = format!(
        "uprobe:{}:fa {{ @a = count(); }} uprobe:{}:child_fn {{ @c = count(); }}",
        lib.display(),
        exe.display()
    );
    let cmd = format!("{} {} 30 100", exe.display(), lib.display());
    for tr in ["inproc", "auto", "ptrace"] {
        for round in 0..3 {
            let (maps, out) = counts(tr, &["--follow"], &prog, &cmd);
            assert_eq!(maps, ["@a: 100", "@c: 60"], "{tr}, run {round}: {out}");
            assert!(out.contains("ok 30 forks, fa 100"), "{tr}: {out}");
            assert!(!out.contains("wprobe:"), "{tr}, run {round}: {out}");
        }
        // Not followed: the children count nothing, and are let go with
        // nothing said (under ptrace a child forked between the library's
        // mapping and its arming was said to have rewritten its code, or
        // its bytes could not be restored: EIO, the run failed).
        let (maps, out) = counts(tr, &[], &prog, &cmd);
        assert_eq!(maps, ["@a: 100"], "{tr}, not followed: {out}");
        assert!(!out.contains("wprobe:"), "{tr}, not followed: {out}");
    }
}
