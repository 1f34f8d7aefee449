//! `wprobe trace --plt` on `swapcontext` coroutines
//! (`tests/progs/ucontext_co.c`): uftrace's t014 shape (a context whose
//! stack is an array in `main`'s frame, above the switching calls) and a
//! coroutine on a stack of its own resumed three times, whose calls stay
//! open across the switches. The function column is asserted exactly,
//! the same under `inproc`, `ptrace` and `auto`, at `-O0` and `-O2`, with
//! no call `unwound`, and the report's call counts by hand.

use std::path::PathBuf;

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{function_column, gcc, output_within, progs, scratch, stderr, wprobe};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(swapcontext_trees_under_inproc, Need::Ptrace),
    case!(swapcontext_trees_under_ptrace, Need::Ptrace),
    case!(swapcontext_trees_under_auto, Need::Ptrace),
];

fn ucontext_co(opt: &str) -> PathBuf {
    gcc(
        &format!("ucontext_co{opt}"),
        &progs().join("ucontext_co.c"),
        &[opt, "-g"],
    )
}

/// The tree, by hand. t014's part is uftrace's expected tree (`NAME@plt`
/// for its `NAME`). The coroutine's: a `swapcontext` that switches to a
/// stack whose calls are open shows that stack's lines at the depths of
/// its own open calls (its `swapcontext` closing first); a `swapcontext`
/// left open marks the switch away; every call is closed by its own
/// return.
const TREE: &str = "\
main() {
  getcontext@plt();
  makecontext@plt();
  foo() {
    swapcontext@plt() {
      bar() {
        getpid@plt();
      } /* bar */
    } /* swapcontext@plt */
  } /* foo */
  baz();
  getcontext@plt();
  makecontext@plt();
  resume() {
    swapcontext@plt() {
      co_body() {
        co_step() {
          leaf();
          swapcontext@plt() {
    } /* swapcontext@plt */
    leaf();
  } /* resume */
  resume() {
    swapcontext@plt() {
          } /* swapcontext@plt */
          leaf();
        } /* co_step */
        co_step() {
          leaf();
          swapcontext@plt() {
    } /* swapcontext@plt */
    leaf();
  } /* resume */
  resume() {
    swapcontext@plt() {
          } /* swapcontext@plt */
          leaf();
        } /* co_step */
      } /* co_body */
    } /* swapcontext@plt */
    leaf();
  } /* resume */
} /* main */";

fn swapcontext_trees(tr: &str) {
    for opt in ["-O0", "-O2"] {
        let prog = ucontext_co(opt);
        let mut c = wprobe();
        c.args(["trace", "--transport", tr, "--plt", "-F", "main", "--"])
            .arg(&prog)
            .current_dir(scratch());
        let o = output_within(c, 120);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{tr} {opt}: {err}");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(!text.contains("unwound"), "{tr} {opt}:\n{text}");
        // The function column (durations and thread ids aside).
        assert_eq!(function_column(&text), TREE, "{tr} {opt}:\n{text}\n{err}");
        // 25 calls shown, and the ones before main (ptrace traces the
        // start-up code the other transports refuse): none unwound.
        let summary = err
            .lines()
            .find(|l| l.starts_with("wprobe: trace: "))
            .unwrap_or_else(|| panic!("{tr} {opt}: no summary: {err}"));
        assert!(summary.ends_with(" returned, 0 unwound)"), "{summary}");

        // The report counts every call once, by hand.
        let mut c = wprobe();
        c.args(["trace", "--transport", tr, "--plt", "-F", "main"])
            .args(["--report", "--format", "json", "--"])
            .arg(&prog)
            .current_dir(scratch());
        let o = output_within(c, 120);
        assert_eq!(o.status.code(), Some(0), "{tr} {opt}: {}", stderr(&o));
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
        let mut calls: Vec<(String, u64)> = rows
            .iter()
            .map(|r| {
                (
                    r["function"].as_str().unwrap().to_string(),
                    r["calls"].as_u64().unwrap(),
                )
            })
            .collect();
        calls.sort();
        let want: Vec<(String, u64)> = [
            ("bar", 1),
            ("baz", 1),
            ("co_body", 1),
            ("co_step", 2),
            ("foo", 1),
            ("getcontext@plt", 2),
            ("getpid@plt", 1),
            ("leaf", 7),
            ("main", 1),
            ("makecontext@plt", 2),
            ("resume", 3),
            ("swapcontext@plt", 6),
        ]
        .iter()
        .map(|&(f, n)| (f.to_string(), n))
        .collect();
        assert_eq!(calls, want, "{tr} {opt}");
    }
}

fn swapcontext_trees_under_inproc() {
    swapcontext_trees("inproc");
}

fn swapcontext_trees_under_ptrace() {
    swapcontext_trees("ptrace");
}

fn swapcontext_trees_under_auto() {
    swapcontext_trees("auto");
}
