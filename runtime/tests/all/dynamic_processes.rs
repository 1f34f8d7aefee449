//! Programs that change under the tracer: fork children that call a
//! library, one of which execs another traced program; a library closed
//! and another opened at its address, then the first again. Counted
//! exactly, as written down here by hand, under the default (`auto`) and
//! under ptrace (and perf, which arms files), with nothing missed or
//! misplaced.

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, output_within, progs, scratch, stderr, wprobe};
use std::path::PathBuf;

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(
        a_library_opened_where_one_was_closed_is_traced_each_time,
        Need::Ptrace
    ),
    case!(
        a_library_opened_where_one_was_closed_is_traced_each_time_under_perf,
        Need::Perf
    ),
    case!(
        a_program_executed_by_a_wrapper_and_its_dlopen_are_counted,
        Need::Ptrace
    ),
    case!(
        fork_children_and_an_exec_call_the_library_as_counted,
        Need::Ptrace
    ),
    case!(a_fork_and_exec_trace_reports_every_call, Need::Ptrace),
    case!(
        a_scripts_exec_is_followed_where_its_library_probes_were_armed,
        Need::Ptrace
    ),
];

/// `dlreopen` and its two libraries, built in the scratch directory.
pub(crate) fn dlreopen() -> PathBuf {
    for lib in ["libreopen_a", "libreopen_b"] {
        gcc(
            &format!("{lib}.so"),
            &progs().join(format!("{lib}.c")),
            &["-O0", "-shared", "-fPIC"],
        );
    }
    gcc("dlreopen", &progs().join("dlreopen.c"), &["-O0"])
}

/// `wprobe run` of the one-liner `prog` on `cmd` under `tr`: the maps
/// printed at exit (sorted lines) and the command's output.
pub(crate) fn counts(tr: &str, extra: &[&str], prog: &str, cmd: &str) -> (Vec<String>, String) {
    let mut c = wprobe();
    c.args(["run", "--transport", tr])
        .args(extra)
        .args(["-e", prog, "-c", cmd]);
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{tr}: {err}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut maps: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with('@'))
        .map(String::from)
        .collect();
    maps.sort();
    let own = out
        .lines()
        .filter(|l| !l.starts_with('@') && !l.is_empty() && !l.starts_with("Attaching"))
        .collect::<Vec<_>>()
        .join("\n");
    (maps, err + &own)
}

fn reopen_counts(tr: &str) {
    let exe = dlreopen();
    let dir = scratch();
    let d = dir.display();
    let prog = format!(
        "uprobe:{d}/libreopen_a.so:fa {{ @a = count(); }} \
         uprobe:{d}/libreopen_b.so:fb {{ @b = count(); }} \
         uprobe:{d}/libreopen_b.so:fb2 {{ @b2 = count(); }}"
    );
    let (maps, out) = counts(tr, &[], &prog, &format!("{} {d}", exe.display()));
    // fa: 3 calls, then 1 after the reopen; fb at the address fa had.
    assert!(out.contains("sum=43 same_address=1"), "{tr}: {out}");
    assert_eq!(maps, ["@a: 4", "@b2: 2", "@b: 2"], "{tr}: {out}");
}

/// `dlopen(a)`, `dlclose(a)`, `dlopen(b)` mapped where `a` was, then
/// `a` again: under ptrace the probe of `a` at that address stayed on
/// record after the close, so `b`'s function there was never armed
/// (`@b` missing) and `a` was not armed again; now the sites of an
/// unmapped library are forgotten (`ProcMem::drop_unmapped`) and its
/// probes armed anew where it comes back. Under inproc (and `auto`, which
/// chooses it), a trap at the dynamic linker's `r_brk` stops the thread
/// that opened a library until its probes' jumps are written; the stub
/// areas and the agent's own memory must not take the gap a closed
/// library left (`same_address=1`).
fn a_library_opened_where_one_was_closed_is_traced_each_time() {
    reopen_counts("ptrace");
    reopen_counts("inproc");
    reopen_counts("auto");
}

/// The same counts under perf (uprobes on the files).
fn a_library_opened_where_one_was_closed_is_traced_each_time_under_perf() {
    reopen_counts("perf");
}

/// A wrapper (`env`) executes `dlthreads`, whose second thread calls
/// `hot` in a loop while its main thread opens `libreopen_a.so`, calls
/// `fa2` 5 times and closes it, twice: `main` 1, `fa` 10, `fa2`
/// returning 2, 4, 6, 8, 10 twice each. Under inproc (and `auto`, which takes it: the program is
/// executed after the start) the agent is loaded into the new image at
/// the exec, before any of its code ran, and the library's probes armed
/// at the dynamic linker's `r_brk` while the other thread runs its hot
/// probe; the maps go on from the old image's agent. The same under
/// ptrace.
fn a_program_executed_by_a_wrapper_and_its_dlopen_are_counted() {
    dlreopen();
    let exe = gcc(
        "dlthreads",
        &progs().join("dlthreads.c"),
        &["-O0", "-pthread"],
    );
    let d = scratch();
    let prog = format!(
        "uprobe:{e}:main {{ @m = count(); }} \
         uprobe:{e}:hot {{ @h = count(); }} \
         uprobe:{d}/libreopen_a.so:fa {{ @a = count(); }} \
         uretprobe:{d}/libreopen_a.so:fa2 {{ @r[retval] = count(); }}",
        e = exe.display(),
        d = d.display()
    );
    let cmd = format!("env X=1 {} {} 5 2", exe.display(), d.display());
    for tr in ["inproc", "auto", "ptrace"] {
        let (maps, out) = counts(tr, &["-v"], &prog, &cmd);
        assert!(out.contains("s=60 hot>0=1"), "{tr}: {out}");
        if tr == "auto" {
            assert!(out.contains("wprobe: transport inproc:"), "{tr}: {out}");
        }
        let maps: Vec<&str> = maps
            .iter()
            .map(String::as_str)
            .filter(|m| !m.starts_with("@h: "))
            .collect();
        assert_eq!(
            maps,
            [
                "@a: 10",
                "@m: 1",
                "@r[10]: 2",
                "@r[2]: 2",
                "@r[4]: 2",
                "@r[6]: 2",
                "@r[8]: 2"
            ],
            "{tr}: {out}"
        );
    }
}

/// `forklib`, `forkexecd` and their library, in the scratch directory.
pub(crate) fn forklib() -> (PathBuf, PathBuf) {
    let dir = scratch();
    let lib_flags = ["-O0", "-shared", "-fPIC"];
    gcc("libforkwork.so", &progs().join("libforkwork.c"), &lib_flags);
    let l = format!("-L{}", dir.display());
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let flags = ["-O0", l.as_str(), "-lforkwork", rpath.as_str()];
    (
        gcc("forklib", &progs().join("forklib.c"), &flags),
        gcc("forkexecd", &progs().join("forkexecd.c"), &flags),
    )
}

/// `forklib` calls `lib_add` once, forks three children one after the
/// other: two call `work` (two `lib_add` each), the third execs
/// `forkexecd` (three `exec_work`, one `lib_add`). With `--follow`:
/// `work` 2, `exec_work` 3, `lib_add` 5 in forklib's processes and 1 in
/// forkexecd, under `auto` (which chooses inproc) and ptrace.
fn fork_children_and_an_exec_call_the_library_as_counted() {
    let (exe, execd) = forklib();
    let d = scratch();
    let prog = format!(
        "uprobe:{}:work {{ @w = count(); }} \
         uprobe:{}/libforkwork.so:lib_add {{ @l[comm] = count(); }} \
         uprobe:{}:exec_work {{ @e = count(); }}",
        exe.display(),
        d.display(),
        execd.display()
    );
    let cmd = format!("{} {}", exe.display(), execd.display());
    for tr in ["auto", "ptrace"] {
        let (maps, out) = counts(tr, &["--follow"], &prog, &cmd);
        assert!(out.contains("forkexecd 13"), "{tr}: {out}");
        assert!(out.contains("forklib done 101"), "{tr}: {out}");
        assert_eq!(
            maps,
            ["@e: 3", "@l[forkexecd]: 1", "@l[forklib]: 5", "@w: 2"],
            "{tr}: {out}"
        );
    }
}

/// `wprobe trace -f --plt --report` of forklib: each process's calls,
/// counted as written here. The parent: `main`, 3 `fork@plt`, 3
/// `waitpid@plt`, `printf@plt`, 1 `lib_add@plt`; each child continues
/// `main` (its own tree from the fork: `main` and `fork@plt` once more
/// each); two call `work` (2 `lib_add@plt` each) and `_exit@plt`, the
/// third `execl@plt` (never returns here: the new image is another
/// program). The same under `auto` (inproc) and ptrace; inproc traces no C
/// start-up function (`_init`, `frame_dummy`…: no jump fits), 6 calls
/// fewer.
fn a_fork_and_exec_trace_reports_every_call() {
    let (exe, execd) = forklib();
    for tr in ["auto", "ptrace"] {
        let mut c = wprobe();
        c.args(["trace", "--transport", tr, "-f", "--plt", "--report", "--"])
            .arg(&exe)
            .arg(&execd);
        let o = output_within(c, 120);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{tr}: {err}");
        let text = String::from_utf8_lossy(&o.stdout);
        let calls = |f: &str| -> String {
            text.lines()
                .find(|l| l.split_whitespace().last() == Some(f))
                .and_then(|l| l.split_whitespace().rev().nth(1).map(String::from))
                .unwrap_or_else(|| panic!("{tr}: no {f} in\n{text}"))
        };
        for (f, n) in [
            ("main", "4"),
            ("fork@plt", "6"),
            ("waitpid@plt", "3"),
            ("printf@plt", "1"),
            ("work", "2"),
            ("lib_add@plt", "5"),
            ("_exit@plt", "2"),
            ("execl@plt", "1"),
        ] {
            assert_eq!(calls(f), n, "{tr}: {f}\n{text}");
        }
        let summary = if tr == "ptrace" {
            "wprobe: trace: 24 calls (21 returned, 3 unwound)"
        } else {
            "wprobe: trace: 18 calls (15 returned, 3 unwound)"
        };
        assert!(err.contains(summary), "{tr}: {err}");
    }
}

/// A shell script that ends in `exec getppid5`, traced with a probe on the
/// C library's `getppid` (which the shell maps too, so no probe waits for
/// the program): the program's 5 calls are counted after the exec under
/// inproc and auto (which follow a launched script's exec) as under
/// ptrace. Before, inproc armed the shell's copy and lost the program's.
fn a_scripts_exec_is_followed_where_its_library_probes_were_armed() {
    let exe = gcc("getppid5", &progs().join("getppid5.c"), &["-O0"]);
    let script = scratch().join("wrap_getppid5.sh");
    std::fs::write(&script, format!("#!/bin/sh\nexec {}\n", exe.display())).unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    let prog = "uprobe:libc:getppid /comm == \"getppid5\"/ { @n = count(); }";
    for tr in ["inproc", "auto", "ptrace"] {
        let (maps, out) = counts(tr, &[], prog, &script.display().to_string());
        assert!(out.contains("done 5"), "{tr}: {out}");
        assert_eq!(maps, ["@n: 5"], "{tr}: {out}");
    }
}
