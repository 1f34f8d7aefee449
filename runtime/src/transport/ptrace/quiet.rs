//! Threads asleep in a system call, left undisturbed when attaching and
//! detaching (`wprobe run -p`). Any ptrace-stop of a thread blocked in
//! `epoll_wait`, `select`, `poll`, … makes that call fail with `EINTR`
//! (signal(7), "Interruption of system calls … by stop signals"), which
//! programs rarely expect from a tracer: strace -f and gdb cause it too.
//! Such a thread need not be stopped: it is seized without an interrupt
//! (breakpoints are written through `/proc/PID/mem`, which needs no
//! stopped thread), and when wprobe detaches it is left seized; the kernel
//! detaches it without waking it when wprobe exits (ptrace's tracer-exit
//! rule), after every byte was restored.
//!
//! Leaving one is safe only if it has not run since it was looked at:
//! [`Asleep`] is sampled before the bytes are restored and again after,
//! and a thread whose sample changed (woken, switched, another call, a pc
//! elsewhere) is stopped and detached as any other.

use std::fs;

/// A thread asleep in a system call, as `/proc` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asleep {
    /// The system call number.
    pub nr: i64,
    /// The user-space program counter (after the `syscall` instruction).
    pub pc: u64,
    /// Voluntary plus involuntary context switches: unchanged means it
    /// has not run in between.
    pub switches: u64,
}

/// `tid` of `pid` if it is asleep in a system call (state `S` or `D`, a
/// system call in `/proc/…/syscall`), else `None` (running, stopped,
/// gone, or not readable).
pub fn asleep(pid: i32, tid: i32) -> Option<Asleep> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let state_before = state(&dir)?;
    if !matches!(state_before, 'S' | 'D') {
        return None;
    }
    let sc = fs::read_to_string(format!("{dir}/syscall")).ok()?;
    let mut f = sc.split_whitespace();
    let nr: i64 = f.next()?.parse().ok()?;
    if nr < 0 {
        return None;
    }
    let pc = u64::from_str_radix(f.last()?.trim_start_matches("0x"), 16).ok()?;
    let switches = switches(&dir)?;
    // Still asleep after reading the call: the fields belong together.
    if state(&dir)? != state_before {
        return None;
    }
    Some(Asleep { nr, pc, switches })
}

fn state(dir: &str) -> Option<char> {
    let stat = fs::read_to_string(format!("{dir}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

fn switches(dir: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("{dir}/status")).ok()?;
    let mut n = 0;
    let mut seen = 0;
    for l in status.lines() {
        if let Some(v) = l
            .strip_prefix("voluntary_ctxt_switches:")
            .or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
        {
            n += v.trim().parse::<u64>().ok()?;
            seen += 1;
        }
    }
    (seen == 2).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_thread_is_asleep_and_this_one_is_not() {
        let pid = std::process::id() as i32;
        let me = nix::unistd::gettid().as_raw();
        assert_eq!(asleep(pid, me), None, "this thread is running");
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(500));
        });
        let tid = rx.recv().unwrap();
        let mut seen = None;
        for _ in 0..100 {
            seen = asleep(pid, tid);
            if seen.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let a = seen.expect("the sleeping thread is seen asleep");
        assert_eq!(a.nr, libc::SYS_clock_nanosleep);
        assert_eq!(asleep(pid, tid), Some(a), "nothing changed while it slept");
        h.join().unwrap();
        assert_eq!(asleep(pid, tid), None, "gone");
    }
}
