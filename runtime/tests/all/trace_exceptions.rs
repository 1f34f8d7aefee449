//! `wprobe trace --plt` on a C++ exception thrown through traced frames
//! (`tests/progs/throw_tree.cpp`: uftrace's s-exception3 shape, a cleanup
//! landing pad and a rethrow on the way to the catch): the calls the
//! exception leaves are closed at the catch (or the landing pad that proves
//! them left) and shown as uftrace shows them, ordinary exits; the
//! function column is asserted exactly, the same under `inproc`, `ptrace`
//! and `auto`, at `-O0` and `-O2`. The C++ run-time's throwing and
//! catching calls are hidden with `-N`, as uftrace never hooks them.
//!
//! And a catch block that ends in a tail call out of the module
//! (`tests/progs/catch_tail.cpp` at `-O2`: `jmp __cxa_end_catch@plt`,
//! whose returns no return site sees): its calls are seen returning where
//! they return, at the continuation sites after their callers' calls,
//! with no ptrace stop under `inproc` and `auto`.

use std::path::PathBuf;

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{function_column, gcc, output_within, progs, scratch, stderr, wprobe};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(exception_trees_under_inproc, Need::Ptrace),
    case!(exception_trees_under_ptrace, Need::Ptrace),
    case!(exception_trees_under_auto, Need::Ptrace),
    case!(catch_tail_trees_under_inproc, Need::Ptrace),
    case!(catch_tail_trees_under_ptrace, Need::Ptrace),
    case!(catch_tail_trees_under_auto, Need::Ptrace),
];

fn throw_tree(opt: &str) -> PathBuf {
    gcc(
        &format!("throw_tree{opt}"),
        &progs().join("throw_tree.cpp"),
        &[opt, "-g", "-lstdc++"],
    )
}

/// The run-time's calls uftrace does not hook (`skip_syms` in its
/// `libmcount/plthook.c`).
const HIDDEN: &[&str] = &[
    "__cxa_throw@plt",
    "__cxa_rethrow@plt",
    "__cxa_begin_catch@plt",
    "__cxa_end_catch@plt",
    "_Unwind_Resume@plt",
];

/// The tree, by hand (uftrace's for this program, `NAME@plt` for its
/// `NAME`): `thrower` ends at the landing pad in `cleanup` (its
/// destructor's call), `cleanup` and `rethrower` at the catches.
const TREE: &str = "\
main() {
  rethrower() {
    cleanup() {
      Guard::Guard();
      thrower() {
        __cxa_allocate_exception@plt();
      } /* thrower */
      Guard::~Guard();
    } /* cleanup */
  } /* rethrower */
  after();
  after();
} /* main */";

/// `wprobe trace --transport TR --plt -F main` (the run-time's throw and
/// catch calls hidden, [`HIDDEN`]; `debug`: with `WPROBE_DEBUG`) of
/// `prog`, built at `opt`: the function column of its tree (after the
/// header), the whole output and the standard error.
fn plt_tree(tr: &str, opt: &str, prog: &std::path::Path, debug: bool) -> (String, String, String) {
    let mut c = wprobe();
    c.args(["trace", "--transport", tr, "--plt", "-F", "main"]);
    for h in HIDDEN {
        c.args(["-N", h]);
    }
    c.arg("--").arg(prog).current_dir(scratch());
    if debug {
        c.env("WPROBE_DEBUG", "1");
    }
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{tr} {opt}: {err}");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    (function_column(&text), text, err)
}

fn exception_trees(tr: &str) {
    for opt in ["-O0", "-O2"] {
        let prog = throw_tree(opt);
        let (funcs, text, err) = plt_tree(tr, opt, &prog, false);
        assert_eq!(funcs, TREE, "{tr} {opt}:\n{text}\n{err}");

        // tracef's view says which calls the exception left (those whose
        // return the transport saw, the unwinder resuming at their return
        // address, are returned): none is a plain `[unwound]`.
        let mut c = wprobe();
        c.args(["trace", "--transport", tr, "--plt", "-F", "main", "-T"])
            .args(["--no-pid", "-i", "-N", "__cxa_*_catch@plt", "--"])
            .arg(&prog)
            .current_dir(scratch());
        let o = output_within(c, 120);
        assert_eq!(o.status.code(), Some(0), "{tr} {opt}: {}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        let left: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("unwound"))
            .map(str::trim)
            .collect();
        assert!(
            left.contains(&"<== _Unwind_Resume@plt() [unwound: exception]")
                && left.iter().all(|l| l.ends_with("[unwound: exception]")),
            "{tr} {opt}:\n{text}"
        );
    }
}

fn exception_trees_under_inproc() {
    exception_trees("inproc");
}

fn exception_trees_under_ptrace() {
    exception_trees("ptrace");
}

fn exception_trees_under_auto() {
    exception_trees("auto");
}

/// `catch_tail.cpp`'s tree (as `ptrace` shows it): `catcher` returns
/// through `__cxa_end_catch`, each time, `dispatch` with it.
const CATCH_TAIL_TREE: &str = "\
main() {
  dispatch() {
    catcher() {
      Guard::Guard();
      thrower() {
        __cxa_allocate_exception@plt();
      } /* thrower */
      Guard::~Guard();
      handled();
    } /* catcher */
  } /* dispatch */
  catcher() {
    Guard::Guard();
    thrower() {
      __cxa_allocate_exception@plt();
    } /* thrower */
    Guard::~Guard();
    handled();
  } /* catcher */
  handled();
} /* main */";

/// Traces `catch_tail.cpp` at `-O0` and `-O2` under `tr` (with
/// `WPROBE_DEBUG`, which says any ptrace stop at a trap site): the exact
/// tree; under `inproc` and `auto`, no ptrace stop at `-O2` (at `-O0`
/// only `dispatch`'s `ret`, which has no window, traps, once).
fn catch_tail_trees(tr: &str) {
    for opt in ["-O0", "-O2"] {
        let prog = gcc(
            &format!("catch_tail{opt}"),
            &progs().join("catch_tail.cpp"),
            &[opt, "-g", "-lstdc++"],
        );
        let (funcs, text, err) = plt_tree(tr, opt, &prog, true);
        assert_eq!(funcs, CATCH_TAIL_TREE, "{tr} {opt}:\n{text}\n{err}");
        let stops: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("ptrace stops at trap sites"))
            .collect();
        if tr == "ptrace" {
            continue;
        }
        if opt == "-O2" {
            assert!(stops.is_empty(), "{tr} {opt}: {err}");
        } else {
            assert!(
                stops.len() == 1
                    && stops[0]
                        .contains(": 1 ptrace stops at trap sites; the busiest: _Z8dispatchi at "),
                "{tr} {opt}: {err}"
            );
        }
    }
}

fn catch_tail_trees_under_inproc() {
    catch_tail_trees("inproc");
}

fn catch_tail_trees_under_ptrace() {
    catch_tail_trees("ptrace");
}

fn catch_tail_trees_under_auto() {
    catch_tail_trees("auto");
}
