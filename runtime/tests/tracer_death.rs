//! What happens to traced processes when wprobe itself dies (RELIABILITY
//! T3): a launched command and every descendant it forked under `-f` are
//! killed with the tracer (PTRACE_O_EXITKILL), so nothing is left running
//! with breakpoints in it, nor stopped in a tracing stop.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("wprobe-death-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn build(src: &str) -> PathBuf {
    let out = scratch().join(src.trim_end_matches(".c"));
    let st = Command::new("gcc")
        .args([
            "-O0",
            "-fno-omit-frame-pointer",
            "-fno-pie",
            "-no-pie",
            "-fcf-protection=none",
            "-o",
        ])
        .arg(&out)
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/progs")
                .join(src),
        )
        .status()
        .expect("gcc");
    assert!(st.success());
    out
}

/// The state letter of `/proc/PID/stat`, `None` when the process is gone.
fn state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    after.chars().next()
}

#[test]
fn sigkill_of_wprobe_kills_the_launched_command_and_its_traced_children() {
    let exe = build("forever.c");
    let prog = scratch().join("count.rpn");
    std::fs::write(
        &prog,
        format!(
            "name = {}\noffset = target\nopcode = 0x55\n push r, rdi\n log 1\n",
            exe.display()
        ),
    )
    .unwrap();
    let mut w = Command::new(env!("CARGO_BIN_EXE_wprobe"))
        .arg("run")
        .arg("-f")
        .arg("-o")
        .arg(scratch().join("records.txt"))
        .arg(&prog)
        .arg("--")
        .arg(&exe)
        .arg("3")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The command's output is wprobe's standard output (records go to -o).
    let mut lines = BufReader::new(w.stdout.take().unwrap()).lines();
    let mut pids = Vec::new();
    while pids.len() < 4 {
        let l = lines.next().expect("the target prints its pids").unwrap();
        pids.push(l.strip_prefix("pid ").unwrap().parse::<i32>().unwrap());
    }
    // Let every process hit its breakpoint a few times.
    std::thread::sleep(Duration::from_millis(300));
    for p in &pids {
        assert!(
            matches!(state(*p), Some('R' | 'S' | 't')),
            "{p}: {:?}",
            state(*p)
        );
    }
    w.kill().unwrap(); // SIGKILL
    w.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let alive: Vec<(i32, char)> = pids
            .iter()
            .filter_map(|p| state(*p).filter(|s| *s != 'Z').map(|s| (*p, s)))
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still alive 1 s after the tracer's SIGKILL: {alive:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
