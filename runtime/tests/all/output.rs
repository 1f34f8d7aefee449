//! Where records go and what happens when they cannot go there: nothing
//! lost silently (a full disk, a closed pipe: the records are counted, the
//! exit status is non-zero, the target is detached cleanly), nothing held
//! back (records reach a file within a bounded delay, and survive a
//! SIGKILL of wprobe), and no panic when standard output or error is gone.

use crate::case;
use crate::support::case::Case;
use crate::support::cli::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(a_full_disk_loses_records_loudly_and_the_command_is_unharmed),
    case!(a_closed_pipe_loses_records_loudly),
    case!(closed_stderr_and_a_closed_listing_pipe_do_not_panic),
    case!(records_reach_the_file_while_tracing_and_survive_a_sigkill),
];

fn log_program(name: &str) -> std::path::PathBuf {
    let exe = probe_target();
    write(
        name,
        format!(
            "name = {}\noffset = target_fn\n push r, rdi\n log 1\n",
            exe.display()
        ),
    )
}

fn a_full_disk_loses_records_loudly_and_the_command_is_unharmed() {
    let p = log_program("full.rpn");
    let o = wprobe()
        .arg("run")
        .arg(&p)
        .args(["-o", "/dev/full", "--"])
        .arg(probe_target())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.ends_with(
            "error: 3 records lost: writing /dev/full failed: No space left on device (os error 28) \
             (the command exited with status 0)\n"
        ),
        "{err}"
    );
    // The command's own output is whole.
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&Command::new(probe_target()).output().unwrap().stdout)
    );
}

fn a_closed_pipe_loses_records_loudly() {
    let p = log_program("pipe.rpn");
    let mut w = wprobe()
        .arg("run")
        .arg(&p)
        .args(["--format", "json", "--"])
        .arg(probe_target())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(w.stdout.take()); // the reader is gone before anything is written
    let o = w.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("records lost: writing standard output failed: Broken pipe"),
        "{err}"
    );
}

fn closed_stderr_and_a_closed_listing_pipe_do_not_panic() {
    let p = log_program("nostderr.rpn");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} run {} -o /dev/null -- {} 2>&-; echo run=$?",
            env!("CARGO_BIN_EXE_wprobe"),
            p.display(),
            probe_target().display(),
        ))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.ends_with("run=0\n"), "a panic exits 101: {out}");
    // `list | head`: the listing stops quietly when its reader is gone.
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} list libc | head -c 10 >/dev/null; echo list=${{PIPESTATUS[0]}}",
            env!("CARGO_BIN_EXE_wprobe"),
        ))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out, "list=0\n", "{}", stderr(&o));
}

fn records_reach_the_file_while_tracing_and_survive_a_sigkill() {
    let exe = slow_target();
    let p = write(
        "flush.rpn",
        format!(
            "name = {}\noffset = work\n push r, rdi\n log 1\n",
            exe.display()
        ),
    );
    let file = scratch().join("flush.jsonl");
    let _ = std::fs::remove_file(&file);
    let mut w = wprobe()
        .arg("run")
        .arg(&p)
        .args(["--format", "json", "-o"])
        .arg(&file)
        .arg("--")
        .arg(&exe)
        .arg("1000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // slow_target calls work() every few milliseconds: records must show
    // up in the file within the flush interval (100 ms), well before the
    // run ends.
    let t0 = Instant::now();
    let lines = loop {
        let n = std::fs::read_to_string(&file)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if n >= 3 {
            break n;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no records in the file after 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(lines >= 3);
    std::thread::sleep(Duration::from_millis(300));
    w.kill().unwrap(); // SIGKILL
    w.wait().unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.lines().count() >= lines,
        "records written before the kill stay"
    );
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
        assert_eq!(v["kind"], "log");
    }
}
