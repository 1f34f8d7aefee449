//! Bookkeeping of traced threads and processes: which tids we trace, whether
//! each is running or held in a ptrace-stop (and with which signal it must
//! resume), and per process its address space, threads, debug-register
//! slots and relation to its parent. Pure data; no system calls.

use std::cell::RefCell;
use std::rc::Rc;

use super::mem::ProcMem;
use super::{WatchKind, WpId};
use crate::transport::common::rdebug::RDebug;

/// Where a traced thread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TState {
    /// Resumed by us; a stop will be reported.
    Running,
    /// In a ptrace-stop we hold; resume with `Thread::sig`.
    Held,
    /// In group-stop, restarted with PTRACE_LISTEN (stopped for the program).
    Listening,
    /// Seized while asleep in a system call and never stopped by us (see
    /// `quiet`): running as far as we know; a stop it reaches is reported
    /// as for `Running`, and stopping it (`stop_world`) interrupts its call.
    Free,
}

/// A traced thread.
#[derive(Debug)]
pub struct Thread {
    /// Its process (thread group id).
    pub pid: i32,
    /// Where it is.
    pub state: TState,
    /// Signal to deliver when it is resumed (0 for none).
    pub sig: i32,
    /// Auto-attached and its initial stop not seen yet.
    pub new: bool,
    /// Where its CPU number is read (found at its first hit that needs it).
    pub cpu_src: super::hit::CpuSource,
    /// A hit whose handler already ran but whose displaced instruction did
    /// not execute (a signal arrived while the thread was about to run it
    /// out of line; its PC was moved back to the probe so that the signal
    /// handler sees the program's address): `(address, rsp)`. When the
    /// thread traps there again with the same stack pointer, after the
    /// signal handler returned, that is the same hit, not a new one.
    pub rerun: Option<(u64, u64)>,
}

impl Thread {
    /// A thread in state `state`.
    pub fn new(pid: i32, state: TState, new: bool) -> Thread {
        Thread {
            pid,
            state,
            sig: 0,
            new,
            cpu_src: Default::default(),
            rerun: None,
        }
    }
}

/// How a traced process is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcKind {
    /// Probed; hits are reported.
    Traced,
    /// A vfork child we do not follow: it shares the parent's memory (with our
    /// `int3`s), so we step it over hits silently until it execs or exits.
    VforkShadow,
    /// A fork child we do not follow: scrub its inherited `int3`s and detach
    /// it at its first stop.
    Scrub,
}

/// One debug-register slot in use.
#[derive(Clone, Copy, Debug)]
pub struct WatchSlot {
    /// Its id.
    pub id: WpId,
    /// Watched address.
    pub addr: u64,
    /// Length (1, 2, 4, 8).
    pub len: u8,
    /// Kind.
    pub kind: WatchKind,
}

/// A traced process.
#[derive(Debug)]
pub struct Process {
    /// Thread group id.
    pub pid: i32,
    /// Its address space.
    pub mem: Rc<RefCell<ProcMem>>,
    /// Its traced threads.
    pub threads: Vec<i32>,
    /// Debug-register slots DR0-DR3.
    pub wps: [Option<WatchSlot>; crate::arch::DEBUG_REGISTERS],
    /// Treatment.
    pub kind: ProcKind,
    /// Parent process (0 when launched or attached).
    pub parent: i32,
    /// The dynamic linker's hook, when armed.
    pub rdebug: Option<RDebug>,
    /// We launched it (let it run on at detach; no journal).
    pub launched: bool,
}

impl Process {
    /// A process with one address space and no threads yet.
    pub fn new(
        pid: i32,
        mem: Rc<RefCell<ProcMem>>,
        kind: ProcKind,
        parent: i32,
        launched: bool,
    ) -> Process {
        Process {
            pid,
            mem,
            threads: Vec::new(),
            wps: [None; crate::arch::DEBUG_REGISTERS],
            kind,
            parent,
            rdebug: None,
            launched,
        }
    }

    /// DR7 value for the slots in use.
    pub fn dr7(&self) -> u64 {
        self.wps
            .iter()
            .enumerate()
            .filter_map(|(i, w)| w.map(|w| crate::arch::dr7_bits(i, w.len, w.kind)))
            .fold(0, |a, b| a | b)
    }
}
