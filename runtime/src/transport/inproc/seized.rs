//! What the in-process transport's seized threads are seized with (the
//! ptrace options) and the watchpoints they are served for: shared by the
//! process's threads (`traps`) and the followed children's (`forks`).

/// Options of every seized thread.
pub(super) const OPTIONS: libc::c_int = libc::PTRACE_O_TRACECLONE
    | libc::PTRACE_O_TRACEFORK
    | libc::PTRACE_O_TRACEVFORK
    | libc::PTRACE_O_TRACEEXEC;

/// A watchpoint of a run.
#[derive(Clone, Copy, Debug)]
pub(super) struct Watch {
    /// The range watched.
    pub(super) addr: u64,
    /// 1, 2, 4 or 8.
    pub(super) len: u8,
    /// Write or read/write.
    pub(super) kind: crate::arch::WatchKind,
    /// The stub a triggering thread is moved to.
    pub(super) stub: u64,
}

/// The watchpoints of a run (at most one per debug register).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Watches {
    /// By slot (the perf event's `sig_data`).
    pub(super) slots: [Option<Watch>; crate::arch::DEBUG_REGISTERS],
}

impl Watches {
    /// Whether there is one.
    pub(super) fn any(&self) -> bool {
        self.slots.iter().any(Option::is_some)
    }
}
