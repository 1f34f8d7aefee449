//! What reaches the call trees, from the session's record hook
//! (`RecordHook`), with the probe it belongs to: the probe says which
//! function it is and whether it is the entry or the return, so nothing
//! carries a name or an address to look up.
//!
//! * With the built-in handlers no handler runs: every transport reports
//!   each call as typed events (`RecordHook::call`): [`Event::Entered`]
//!   (its `rsp`, no argument), [`Event::Returned`] (`rax`, the entry's
//!   `rsp`, the call's duration) and [`Event::Unwound`].
//! * A `--handler` module's runs log records (`RecordHook::run`); the
//!   standard record of each handler (major [`TRACE_MAJOR`]) is decoded
//!   into the same entries and returns:
//!   * entry, minor [`ENTRY_MINOR`]: `[rsp, args…]`;
//!   * exit, minor [`EXIT_MINOR`]: `[rax, entry rsp, elapsed ns, extras…]`.
//!
//!   Any other record it logs is shown under its call as text. A run
//!   without its standard record is counted (the summary says how many
//!   calls are then missing from the trees).
//!
//! Calls that ended without returning come as [`Event::Unwound`] under
//! either (no handler runs for them).

use std::cell::RefCell;
use std::rc::Rc;

use crate::out::format::{Format, RecordView};
use crate::out::sink::{RecordKind, Sink};
use crate::session::hook::{HookEvent, HookHit, RecordHook};
use crate::transport::calls::Left;
use crate::transport::{Event, ExitStatus};

use super::tree::{Cause, FuncId, How, Thread, Tree};
use super::views::Views;

/// Major code of the records of `--handler` modules' trace handlers ("tr").
pub const TRACE_MAJOR: u16 = 0x7472;
/// Minor code of an entry record.
pub const ENTRY_MINOR: u16 = 1;
/// Minor code of an exit record.
pub const EXIT_MINOR: u16 = 2;

/// Which function and which end each probe of each program is.
#[derive(Clone, Debug, Default)]
pub struct ProbeMap {
    /// By program, by manifest index: (function, is the exit).
    pub by_prog: Vec<Vec<(FuncId, bool)>>,
}

/// Counts of what did not go as it should.
#[derive(Clone, Copy, Debug, Default)]
pub struct Problems {
    /// Entry handler runs without an entry record.
    pub entries_without_record: u64,
    /// Exit handler runs without an exit record.
    pub exits_without_record: u64,
    /// Return-probe calls that ran no handler (`missed`).
    pub missed: u64,
    /// Hits the transport could not deliver.
    pub lost: u64,
}

/// The state of a trace: the trees and their views, and the counts.
pub struct TraceState {
    /// Probe identities.
    pub probes: ProbeMap,
    /// The call trees (and, through them, the views).
    pub tree: Tree<Views>,
    /// The counts.
    pub problems: Problems,
    /// The processes whose exit was reported.
    pub exited: Vec<i32>,
    words: Vec<u64>,
    note: String,
}

impl TraceState {
    /// A trace feeding `tree`.
    pub fn new(probes: ProbeMap, tree: Tree<Views>) -> TraceState {
        TraceState {
            probes,
            tree,
            problems: Problems::default(),
            exited: Vec::new(),
            words: Vec::with_capacity(16),
            note: String::new(),
        }
    }
}

/// The hook given to the session (the state is shared with the command).
pub struct Hook(pub Rc<RefCell<TraceState>>);

fn words_of(data: &[u8], out: &mut Vec<u64>) -> bool {
    out.clear();
    if !data.len().is_multiple_of(8) {
        return false;
    }
    out.extend(
        data.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("invariant: chunks of 8"))),
    );
    true
}

impl RecordHook for Hook {
    /// A `--handler` module's handler ran: its standard record is the
    /// call's entry or return, its other records notes under the call.
    fn run(&mut self, hit: &HookHit, sink: &Sink) {
        let mut guard = self.0.borrow_mut();
        let st = &mut *guard;
        let Some(&(func, is_exit)) = st
            .probes
            .by_prog
            .get(hit.prog)
            .and_then(|p| p.get(hit.index))
        else {
            return;
        };
        let th = Thread {
            pid: hit.pid as i32,
            tid: hit.tid as i32,
        };
        let want = if is_exit { EXIT_MINOR } else { ENTRY_MINOR };
        let need = if is_exit { 3 } else { 1 };
        let mut standard = false;
        for r in &sink.records {
            let data = sink.data(r);
            if !standard
                && r.kind == RecordKind::Log
                && r.major == TRACE_MAJOR
                && r.minor == want
                && words_of(data, &mut st.words)
                && st.words.len() >= need
            {
                standard = true;
                let w = &st.words;
                if is_exit {
                    st.tree
                        .exit(th, func, hit.time_ns, w[0], w[1], w[2], &w[3..]);
                } else {
                    st.tree.enter(th, func, hit.time_ns, w[0], hit.ip, &w[1..]);
                }
                continue;
            }
            // Another record of a custom handler: shown as text.
            st.note.clear();
            let view = RecordView {
                seq: 0,
                stacktrace: r.kind == RecordKind::StackTrace,
                probe: "",
                pid: hit.pid,
                tid: hit.tid,
                cpu: hit.cpu,
                major: r.major,
                minor: r.minor,
                time_ns: hit.time_ns,
                data,
                items: sink.item_words(r),
            };
            crate::out::format::record(&mut st.note, Format::Text, &view);
            let head = format!(" pid {} tid {} cpu {} ", hit.pid, hit.tid, hit.cpu);
            let text = st
                .note
                .strip_prefix(head.as_str())
                .unwrap_or(&st.note)
                .trim_end()
                .to_string();
            st.tree.note(th, func, hit.time_ns, text);
        }
        if !standard {
            if is_exit {
                st.problems.exits_without_record += 1;
            } else {
                st.problems.entries_without_record += 1;
            }
        }
    }

    fn tick(&mut self) {
        self.0.borrow_mut().tree.sink.tick();
    }

    fn event(&mut self, ev: &HookEvent) {
        let mut guard = self.0.borrow_mut();
        let st = &mut *guard;
        match *ev {
            HookEvent::ProcessStarted { pid, parent } => {
                st.tree.forked(pid, parent);
                st.tree
                    .sink
                    .process(pid, &format!("process {pid} started (parent {parent})"));
            }
            HookEvent::Exec { pid } => {
                st.tree.end_process(pid, How::Unwound(Cause::Exec));
                st.tree.sink.process(pid, &format!("process {pid} exec'd"));
            }
            HookEvent::ProcessExited { pid, status } => {
                st.exited.push(pid);
                st.tree.end_process(pid, How::Unwound(Cause::ProcessEnded));
                let how = match status {
                    ExitStatus::Code(c) => format!("exited with status {c}"),
                    ExitStatus::Signal(s) => format!("killed by signal {s}"),
                };
                st.tree.sink.process(pid, &format!("process {pid} {how}"));
            }
            HookEvent::NotArmed { prog, index } => {
                if let Some(&(func, _)) = st.probes.by_prog.get(prog).and_then(|p| p.get(index)) {
                    st.tree.drop_function(func);
                }
            }
            HookEvent::Lost { count, .. } => st.problems.lost += count,
            HookEvent::Missed { count, .. } => st.problems.missed += count,
        }
    }

    /// A call entered, returned or ended without returning, as the
    /// transport told it: the one path of the built-in handlers' calls.
    fn call(&mut self, prog: usize, index: usize, ev: &Event<'_>) {
        let mut guard = self.0.borrow_mut();
        let st = &mut *guard;
        let Some(&(func, true)) = st.probes.by_prog.get(prog).and_then(|p| p.get(index)) else {
            return;
        };
        match *ev {
            Event::Entered {
                pid,
                tid,
                rsp,
                time_ns,
                ip,
                ..
            } => {
                st.tree
                    .enter(Thread { pid, tid }, func, time_ns, rsp, ip, &[]);
            }
            Event::Returned {
                pid,
                tid,
                time_ns,
                rax,
                entry_rsp,
                elapsed_ns,
                ..
            } => {
                st.tree.exit(
                    Thread { pid, tid },
                    func,
                    time_ns,
                    rax,
                    entry_rsp,
                    elapsed_ns,
                    &[],
                );
            }
            Event::Unwound {
                pid,
                tid,
                entry_rsp,
                cause,
                ..
            } => {
                let how = match cause {
                    Left::Unwound => How::Unwound(Cause::Reported),
                    Left::ThreadExit => How::Unwound(Cause::ThreadExit),
                    Left::ProcessExit => How::Unwound(Cause::ProcessEnded),
                    Left::Exec => How::Unwound(Cause::Exec),
                    Left::Detach | Left::Suspend | Left::Disabled => How::Running,
                };
                st.tree.unwound(Thread { pid, tid }, func, entry_rsp, how);
            }
            _ => {}
        }
    }
}
