//! `wprobe trace -f --plt` on a daemon (`tests/progs/daemonize.c`,
//! uftrace's s-daemon shape): the parent exits inside `daemon()` after its
//! fork, the child returns from it and goes on. The parent's calls are
//! continued in the child: the duration view shows no exit line for them
//! in the parent (as uftrace), the child's lines close them. Asserted
//! exactly per process under `inproc` and `auto`; under `ptrace`, which
//! does not track the returns of the calls a child inherits, the parent's
//! lines.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, output_within, progs, scratch, stderr, wprobe};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(
        a_daemons_calls_are_continued_in_the_child_under_inproc,
        Need::Ptrace
    ),
    case!(
        a_daemons_calls_are_continued_in_the_child_under_auto,
        Need::Ptrace
    ),
    case!(
        a_daemons_parent_leaves_its_calls_open_under_ptrace,
        Need::Ptrace
    ),
];

fn daemonize() -> PathBuf {
    gcc("daemonize", &progs().join("daemonize.c"), &["-O0", "-g"])
}

/// The function column of each thread's lines, threads in the order they
/// first appear.
fn per_thread(tr: &str) -> Vec<Vec<String>> {
    let mut c = wprobe();
    c.args([
        "trace",
        "--transport",
        tr,
        "-f",
        "--plt",
        "-F",
        "main",
        "--",
    ])
    .arg(daemonize())
    .current_dir(scratch());
    let o = output_within(c, 120);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{tr}: {err}");
    let text = String::from_utf8_lossy(&o.stdout);
    let mut order = Vec::new();
    let mut lines: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in text.lines().skip(1) {
        let Some((head, func)) = l.split_once("] | ") else {
            panic!("{tr}: {l}\n{text}");
        };
        let tid = head.rsplit('[').next().unwrap_or("").trim().to_string();
        if !lines.contains_key(&tid) {
            order.push(tid.clone());
        }
        lines.entry(tid).or_default().push(func.to_string());
    }
    order.iter().map(|t| lines[t].clone()).collect()
}

const PARENT: &[&str] = &["main() {", "  daemon@plt() {"];

fn a_daemons_calls_are_continued_in_the_child(tr: &str) {
    let threads = per_thread(tr);
    let child = [
        "  } /* daemon@plt */",
        "  a() {",
        "    b() {",
        "      c() {",
        "        getpid@plt();",
        "      } /* c */",
        "    } /* b */",
        "  } /* a */",
        "} /* main */",
    ];
    assert_eq!(threads, [PARENT.to_vec(), child.to_vec()], "{tr}");
}

fn a_daemons_calls_are_continued_in_the_child_under_inproc() {
    a_daemons_calls_are_continued_in_the_child("inproc");
}

fn a_daemons_calls_are_continued_in_the_child_under_auto() {
    a_daemons_calls_are_continued_in_the_child("auto");
}

fn a_daemons_parent_leaves_its_calls_open_under_ptrace() {
    let threads = per_thread("ptrace");
    assert_eq!(threads.len(), 2, "{threads:?}");
    assert_eq!(threads[0], PARENT, "{threads:?}");
    assert_eq!(threads[1][0], "  } /* daemon@plt */", "{threads:?}");
}
