//! Running one test as bpftrace's runner does, adapted to a process
//! tracer (`shared/conformance/README.md`): `{{BPFTRACE}}` is `wprobe
//! run`; a uprobe or usdt test with `BEFORE` gets `-p` and that process's
//! pid; one that starts its program only in `AFTER` gets that command as
//! the traced command (`-c`). Standard output and error are one stream; the
//! test ends when the command exits or at its `TIMEOUT` (then SIGTERM, and
//! SIGKILL a second later), and every process it started is killed.

use crate::scope::{Group, shell_words};
use crate::suite::Test;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where and with what tests run.
pub struct Setting {
    /// The `wprobe` binary (a link to it named `bpftrace`).
    pub wprobe: PathBuf,
    /// The working directory: `runtime/` (the suite's), `testprogs/`,
    /// `testlibs/` (built).
    pub work: PathBuf,
    /// Variables every test gets (PATH, the module cache).
    pub env: Vec<(String, String)>,
}

/// What a run gave.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Standard output and error, interleaved as written.
    pub output: String,
    /// The shell's exit status (`None`: killed).
    pub code: Option<i32>,
    /// Ended by its timeout.
    pub timed_out: bool,
    /// The command run.
    pub command: String,
    /// Wall time.
    pub elapsed: Duration,
}

/// A test's run.
pub enum Ran {
    /// It ran.
    Done(Outcome),
    /// Not run, with the reason (an unmet `REQUIRES`, ...).
    Skipped(String),
    /// Its `SETUP` or `BEFORE` failed.
    Broken(String),
}

/// Quotes for `sh`.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn sh(cmd: &str, s: &Setting) -> Command {
    let mut c = Command::new("/bin/sh");
    c.arg("-c").arg(cmd).current_dir(&s.work).env_clear();
    for (k, v) in &s.env {
        c.env(k, v);
    }
    c
}

fn kill_group(child: &mut Child, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), sig);
}

fn reap(mut child: Child) {
    kill_group(&mut child, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
}

/// `(pid, ppid, comm)` of every process.
fn processes() -> Vec<(i32, i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(l), Some(r)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[l + 1..r].to_string();
        let ppid = stat[r + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        out.push((pid, ppid, comm));
    }
    out
}

/// The pid of a process named `comm` that is `root` or descends from it.
/// Waits, at most half a second, for process `pid` to sleep: a BEFORE
/// program found by its name may still be in the dynamic linker, its
/// libraries not mapped yet (`-l 'usdt:*' -p PID` then listed nothing:
/// "lists linked library probes by pid" failed once in a full run); the
/// test programs sleep in a loop once started.
fn settled(pid: i32) {
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command's closing parenthesis.
        let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
        // Asleep, or gone (a page-in wait, `D`, may be the linker's).
        if matches!(state, Some('S') | None) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn find_descendant(root: i32, comm: &str) -> Option<i32> {
    let ps = processes();
    let mut family = vec![root];
    let mut i = 0;
    while i < family.len() {
        let p = family[i];
        family.extend(ps.iter().filter(|(_, pp, _)| *pp == p).map(|(c, _, _)| *c));
        i += 1;
    }
    ps.iter()
        .find(|(pid, _, c)| family.contains(pid) && c == comm)
        .map(|(pid, _, _)| *pid)
}

/// Whether a command needs a shell (anything but plain words).
fn needs_shell(cmd: &str) -> bool {
    !cmd.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || c == ' '
            || matches!(c, '_' | '.' | '/' | '-' | '=' | ',' | ':' | '+')
    })
}

/// Whether a test of `group` runs system-wide (no `-p`/`-c`, none
/// added): its uprobes fire in every process running the probed files,
/// those of tests running alongside too, so it runs alone.
pub fn system_wide(t: &crate::suite::Test, group: Group) -> bool {
    let text = t.run.as_deref().unwrap_or("");
    let has_p = text.contains(" -p ") || text.contains("--pid");
    let has_c = text.contains(" -c ") || text.contains("-c ./");
    matches!(group, Group::Uprobe | Group::Usdt)
        && !has_p
        && !has_c
        && t.befores.len() != 1
        && t.after.is_none()
}

/// The command line of a test, adapted; `before_pid` is the BEFORE process.
/// Returns it and whether `AFTER` became the traced command.
pub fn command_line(
    t: &Test,
    group: Group,
    s: &Setting,
    before_pid: Option<i32>,
    serial: usize,
) -> (String, bool) {
    let mut bpf = format!("{} run", quote(&s.wprobe.to_string_lossy()));
    let text = t.run.as_deref().unwrap_or("");
    let has_p = text.contains(" -p ") || text.contains("--pid");
    let has_c = text.contains(" -c ") || text.contains("-c ./");
    let mut after_used = false;
    if matches!(group, Group::Uprobe | Group::Usdt) {
        if let Some(pid) = before_pid.filter(|_| t.befores.len() == 1) {
            // One process to trace: traced with -p, not system-wide (tests
            // of other suites running alongside may run the same programs).
            // Several: system-wide, as bpftrace runs them all.
            if !has_p {
                bpf.push_str(&format!(" -p {pid}"));
            }
        } else if let Some(after) = &t.after
            && !has_p
            && !has_c
        {
            let after = after.trim();
            let cmd = if needs_shell(after) {
                // A shell command: a script that execs it, so that the
                // traced process runs it (and its exec is followed).
                let script = s.work.join(format!("after-{serial}.sh"));
                let _ = std::fs::write(&script, format!("#!/bin/sh\nexec {after}\n"));
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755));
                script.to_string_lossy().into_owned()
            } else {
                after.to_string()
            };
            bpf.push_str(&format!(" -c {}", quote(&cmd)));
            after_used = true;
        }
    }
    let line = match (&t.run, &t.prog) {
        (Some(run), _) => {
            let mut r = run.replace("{{BPFTRACE}}", &bpf);
            if let Some(pid) = before_pid {
                r = r.replace("{{BEFORE_PID}}", &pid.to_string());
            }
            r
        }
        (None, Some(prog)) => {
            let json = t
                .expects
                .first()
                .is_some_and(|e| e.mode == crate::suite::Mode::Json);
            format!(
                "{bpf}{} -e {}",
                if json { " -q -f json" } else { "" },
                quote(prog)
            )
        }
        (None, None) => String::new(),
    };
    (line, after_used)
}

/// Runs `cmd` in the shell; whether it succeeded.
fn run_quietly(cmd: &str, s: &Setting) -> Result<(), String> {
    let o = sh(cmd, s)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if o.status.success() {
        Ok(())
    } else {
        let mut msg = String::from_utf8_lossy(&o.stdout).into_owned();
        msg.push_str(&String::from_utf8_lossy(&o.stderr));
        Err(msg.trim().to_string())
    }
}

fn kernel_version() -> Vec<u64> {
    nix::sys::utsname::uname()
        .map(|u| {
            u.release()
                .to_string_lossy()
                .split(|c: char| !c.is_ascii_digit())
                .filter(|p| !p.is_empty())
                .take(3)
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn version(v: &str) -> Vec<u64> {
    v.split('.').filter_map(|p| p.trim().parse().ok()).collect()
}

/// Runs one test (of group `group`), at most `cap` long.
pub fn run(t: &Test, group: Group, s: &Setting, cap: Duration, serial: usize) -> Ran {
    if let Some((k, v)) = &t.skip_if_env_has
        && std::env::var(k).ok().as_deref() == Some(v.as_str())
    {
        return Ran::Skipped(format!("SKIP_IF_ENV_HAS {k}={v}"));
    }
    let kv = kernel_version();
    if let Some(min) = &t.kernel_range.0
        && kv < version(min)
    {
        return Ran::Skipped(format!("the kernel is older than {min}"));
    }
    if let Some(max) = &t.kernel_range.1
        && kv > version(max)
    {
        return Ran::Skipped(format!("the kernel is newer than {max}"));
    }
    for r in &t.requires {
        if run_quietly(r, s).is_err() {
            return Ran::Skipped(format!("REQUIRES `{r}` fails here"));
        }
    }
    if let Some(setup) = &t.setup
        && let Err(e) = run_quietly(setup, s)
    {
        return Ran::Broken(format!("SETUP failed: {e}"));
    }
    let timeout = Duration::from_secs(t.timeout_s).min(cap);
    let start = Instant::now();
    let mut befores = Vec::new();
    let mut before_pid = None;
    for b in &t.befores {
        let words = shell_words(b);
        let Some(first) = words.first() else { continue };
        let child = Command::new(first)
            .args(&words[1..])
            .current_dir(&s.work)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                befores.into_iter().for_each(reap);
                return Ran::Broken(format!("BEFORE `{b}`: {e}"));
            }
        };
        let comm: String = Path::new(words.last().unwrap_or(first))
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .chars()
            .take(15)
            .collect();
        let root = child.id() as i32;
        befores.push(child);
        let found = loop {
            if let Some(p) = find_descendant(root, &comm) {
                break Some(p);
            }
            if start.elapsed() > timeout {
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        match found {
            Some(p) => {
                settled(p);
                before_pid = before_pid.or(Some(p));
            }
            None => {
                befores.into_iter().for_each(reap);
                return Ran::Broken(format!("BEFORE `{b}`: no process `{comm}` appeared"));
            }
        }
    }
    let (command, after_used) = command_line(t, group, s, before_pid, serial);
    let out_path = s.work.join(format!("out-{serial}.txt"));
    let outcome = match std::fs::File::create(&out_path) {
        Ok(f) => {
            let f2 = f.try_clone();
            let mut c = sh(&command, s);
            for (k, v) in &t.env {
                c.env(k, v);
            }
            c.stdin(Stdio::null()).stdout(f).process_group(0);
            if let Ok(f2) = f2 {
                c.stderr(f2);
            }
            watch(c, t, after_used, s, &out_path, timeout, command)
        }
        Err(e) => Outcome {
            output: format!("runner: {}: {e}", out_path.display()),
            command,
            ..Outcome::default()
        },
    };
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(s.work.join(format!("after-{serial}.sh")));
    befores.into_iter().for_each(reap);
    if let Some(c) = &t.cleanup {
        let _ = run_quietly(c, s);
    }
    Ran::Done(outcome)
}

/// Whether a process of process group `pg` has a thread that is not a
/// zombie (a zombie leader whose other threads still run is alive: the
/// last of them closes the files).
fn live_in_group(pg: i32) -> bool {
    // pid (comm) state ppid pgrp ...
    let fields = |st: &str| -> Option<(String, i32)> {
        let rest = st.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some((f.first()?.to_string(), f.get(2)?.parse().ok()?))
    };
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return false;
    };
    rd.filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .any(|e| {
            let in_group = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|st| fields(&st))
                .is_some_and(|(_, g)| g == pg);
            in_group
                && std::fs::read_dir(e.path().join("task")).is_ok_and(|tasks| {
                    tasks.filter_map(|t| t.ok()).any(|t| {
                        std::fs::read_to_string(t.path().join("stat"))
                            .ok()
                            .and_then(|st| fields(&st))
                            .is_some_and(|(state, _)| state != "Z" && state != "X")
                    })
                })
        })
}

/// How long a program may take to start (compile, attach) before its
/// timeout starts counting anyway.
const ATTACH_GRACE: Duration = Duration::from_secs(2);

/// Runs the command to its end or its timeout, starting `AFTER` once the
/// probes are attached (the tracer's attach line, or a second at most).
fn watch(
    mut c: Command,
    t: &Test,
    after_used: bool,
    s: &Setting,
    out_path: &Path,
    timeout: Duration,
    command: String,
) -> Outcome {
    let start = Instant::now();
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            return Outcome {
                output: format!("runner: spawning sh: {e}"),
                command,
                ..Outcome::default()
            };
        }
    };
    let mut after: Option<Child> = None;
    let mut after_pending = t.after.is_some() && !after_used;
    let mut timed_out = false;
    // As bpftrace's runner, the timeout counts from the attachment (the
    // line the tracer prints then); without one, from the start plus a
    // grace for compiling the program.
    let mut deadline = start + timeout + ATTACH_GRACE;
    let mut attached = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(_) => break None,
        }
        if !attached || after_pending {
            let so_far = std::fs::read_to_string(out_path).unwrap_or_default();
            if !attached && so_far.contains(crate::verdict::ATTACHED) {
                attached = true;
                deadline = Instant::now() + timeout;
            }
            if after_pending && (attached || start.elapsed() > Duration::from_secs(1)) {
                after_pending = false;
                after = sh(t.after.as_deref().unwrap_or(""), s)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .process_group(0)
                    .spawn()
                    .ok();
            }
        }
        if Instant::now() > deadline {
            timed_out = true;
            kill_group(&mut child, nix::sys::signal::Signal::SIGTERM);
            let until = Instant::now() + Duration::from_secs(1);
            let st = loop {
                if let Ok(Some(st)) = child.try_wait() {
                    break Some(st);
                }
                if Instant::now() > until {
                    kill_group(&mut child, nix::sys::signal::Signal::SIGKILL);
                    break child.wait().ok();
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            break st;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    // bpftrace's runner reads the output to its end: what the shell left
    // running (a command in the background, a pipeline's other side) may
    // still write. Wait for the process group to empty (to the deadline,
    // or a second after a timeout), then kill what remains.
    let pg = nix::unistd::Pid::from_raw(child.id() as i32);
    let until = if timed_out {
        Instant::now() + Duration::from_secs(1)
    } else {
        deadline.max(Instant::now())
    };
    while Instant::now() < until && nix::sys::signal::killpg(pg, None).is_ok() {
        std::thread::sleep(Duration::from_millis(10));
    }
    if Instant::now() >= until && !timed_out && nix::sys::signal::killpg(pg, None).is_ok() {
        timed_out = true;
        kill_group(&mut child, nix::sys::signal::Signal::SIGTERM);
        let grace = Instant::now() + Duration::from_secs(1);
        while Instant::now() < grace && nix::sys::signal::killpg(pg, None).is_ok() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    kill_group(&mut child, nix::sys::signal::Signal::SIGKILL);
    // A tracer killed in its teardown holds its uprobes until its files
    // are closed: a system-wide one's breakpoints are in every process
    // running the probed files, the next test's too. Wait until every
    // process of the group is gone or a zombie (its files closed).
    let closed_by = Instant::now() + Duration::from_secs(30);
    while Instant::now() < closed_by && live_in_group(child.id() as i32) {
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(a) = after {
        reap(a);
    }
    let mut bytes = Vec::new();
    if let Ok(mut f) = std::fs::File::open(out_path) {
        let _ = f.read_to_end(&mut bytes);
    }
    Outcome {
        output: String::from_utf8_lossy(&bytes).into_owned(),
        code: status.and_then(|s| s.code()),
        timed_out,
        command,
        elapsed: start.elapsed(),
    }
}
