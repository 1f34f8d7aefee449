//! The default view: uftrace's `replay` output. One line per entry and
//! exit, the duration on exit lines, the thread in brackets, the calls
//! indented two spaces per level; a call whose exit is the next step of the
//! output is one line (`f();` with its duration), as uftrace merges leaves:
//!
//! ```text
//! # DURATION     TID     FUNCTION
//!             [  1234] | main() {
//!    0.150 us [  1234] |   leaf();
//!    1.234 us [  1234] | } /* main */
//! ```
//!
//! Words a custom handler logs after the standard ones show as arguments
//! (`f(1, 2) {`) and values (`} = 3; /* f */`); a call left without
//! returning says so in its comment (`} /* f: unwound */`), but for the
//! calls a C++ exception left, closed at the catch as uftrace shows them
//! (`} /* f */`), and those a fork child continues when their process
//! ends (a daemon's parent in `daemon()`), which the child's lines close:
//! no exit line here, as uftrace shows them.

use std::fmt::Write as _;
use std::rc::Rc;

use rustc_hash::FxHashMap as HashMap;

use super::super::out::{BATCH_BYTES, TextOut};
use super::super::tree::{Cause, FuncId, How, Step, StepKind, Thread};
use super::{Table, TidColumn, TimeFmt, View, push_args, push_spaces, time_unit};

/// uftrace's header line.
pub const HEADER: &str = "# DURATION     TID     FUNCTION\n";

/// The duration view.
pub struct DurationView {
    lines: Lines,
    /// The entries held back, one place per output stream (one stream, or
    /// one per thread with `--ff`): printed as a leaf when its exit comes
    /// next. Places are reused, their fields set one by one (a whole
    /// [`Step`] moved in and out at every call cost more than the line's
    /// formatting).
    pending: Vec<Held>,
    /// Each stream's place in `pending` (looked up at every step: no
    /// insertion or removal per call, and no scan of a list as long as
    /// the threads with `--ff`).
    places: HashMap<i32, usize>,
}

/// An entry not printed yet: what its line shows.
#[derive(Debug)]
struct Held {
    /// Whether an entry waits here.
    waiting: bool,
    th: Thread,
    depth: u32,
    func: FuncId,
    time_ns: u64,
    args: Vec<u64>,
}

/// The formatting of lines, and where they go.
struct Lines {
    funcs: Table,
    out: TextOut,
    time: TimeFmt,
    /// `-l`.
    source: bool,
    /// The lines not handed on yet (see [`TextOut::line_in`]).
    buf: String,
    /// ` [   TID] | `.
    tid: TidColumn,
}

impl DurationView {
    /// Lines to `out`; `lines`: `-l` (`/* file:line */` after entries).
    pub fn new(funcs: Table, mut out: TextOut, time: TimeFmt, lines: bool) -> DurationView {
        out.set_header(HEADER);
        DurationView {
            lines: Lines {
                funcs,
                out,
                time,
                source: lines,
                buf: String::with_capacity(BATCH_BYTES + 256),
                tid: TidColumn::default(),
            },
            pending: Vec::new(),
            places: HashMap::default(),
        }
    }

    fn stream(&self, tid: i32) -> i32 {
        if self.lines.out.is_per_thread() {
            tid
        } else {
            0
        }
    }

    /// Holds entry `s` (of `stream`) back in place `at` (a new one when
    /// `None`).
    fn hold(&mut self, at: Option<usize>, stream: i32, s: &Step, args: &[u64]) {
        let h = match at {
            Some(i) => &mut self.pending[i],
            None => {
                self.places.insert(stream, self.pending.len());
                self.pending.push(Held {
                    waiting: false,
                    th: s.th,
                    depth: 0,
                    func: 0,
                    time_ns: 0,
                    args: Vec::new(),
                });
                self.pending.last_mut().expect("invariant: just pushed")
            }
        };
        h.waiting = true;
        h.th = s.th;
        h.depth = s.depth;
        h.func = s.func;
        h.time_ns = s.time_ns;
        h.args.clear();
        h.args.extend_from_slice(args);
    }
}

impl Lines {
    fn prefix(&mut self, time_ns: u64, tid: i32, depth: u32, dur: Option<u64>) {
        self.time.push(&mut self.buf, time_ns);
        self.buf.push(' ');
        time_unit(&mut self.buf, dur.unwrap_or(0));
        self.buf.push_str(self.tid.get(tid, |out, tid| {
            let _ = write!(out, " [{tid:>6}] | ");
        }));
        push_spaces(&mut self.buf, 2 * depth as usize);
    }

    fn push_name(&mut self, func: u32) {
        let funcs = Rc::clone(&self.funcs);
        self.buf
            .push_str(funcs.get(func as usize).map_or("?", |f| f.shown.as_str()));
    }

    fn write(&mut self, tid: i32) {
        self.out.line_in(tid, &mut self.buf);
    }

    fn enter_line(&mut self, h: &Held) {
        self.prefix(h.time_ns, h.th.tid, h.depth, None);
        self.push_name(h.func);
        push_args(&mut self.buf, &h.args);
        self.buf.push_str(" {");
        self.source(h.func);
        self.buf.push('\n');
        self.write(h.th.tid);
    }

    fn source(&mut self, func: u32) {
        let funcs = Rc::clone(&self.funcs);
        if self.source
            && let Some(l) = funcs.get(func as usize).and_then(|f| f.line.as_ref())
        {
            self.buf.push_str(" /* ");
            self.buf.push_str(l);
            self.buf.push_str(" */");
        }
    }

    fn leaf_line(&mut self, enter: &Held, exit: &Step) {
        let StepKind::Exit {
            dur_ns,
            extras,
            how,
            ..
        } = &exit.kind
        else {
            return;
        };
        self.prefix(enter.time_ns, enter.th.tid, enter.depth, Some(*dur_ns));
        self.push_name(enter.func);
        push_args(&mut self.buf, &enter.args);
        values(&mut self.buf, extras);
        self.buf.push(';');
        match how {
            // uftrace shows the calls an exception left as returned.
            How::Returned | How::Unwound(Cause::Exception) => self.source(enter.func),
            How::Unwound(c) => {
                self.buf.push_str(" /* ");
                self.buf.push_str(c.describe());
                self.buf.push_str(" */");
            }
            How::Running => self.buf.push_str(" /* still running */"),
        }
        self.buf.push('\n');
        self.write(enter.th.tid);
    }

    fn exit_line(&mut self, s: &Step) {
        let StepKind::Exit {
            dur_ns,
            extras,
            how,
            ..
        } = &s.kind
        else {
            return;
        };
        self.prefix(s.time_ns, s.th.tid, s.depth, Some(*dur_ns));
        self.buf.push('}');
        values(&mut self.buf, extras);
        if !extras.is_empty() {
            self.buf.push(';');
        }
        self.buf.push_str(" /* ");
        self.push_name(s.func);
        match how {
            How::Returned | How::Unwound(Cause::Exception) => {}
            How::Unwound(c) => {
                self.buf.push_str(": ");
                self.buf.push_str(c.describe());
            }
            How::Running => self.buf.push_str(": still running"),
        }
        self.buf.push_str(" */\n");
        self.write(s.th.tid);
    }

    fn note_line(&mut self, s: &Step) {
        let StepKind::Note { text } = &s.kind else {
            return;
        };
        self.prefix(s.time_ns, s.th.tid, s.depth, None);
        self.buf.push_str("/* ");
        self.buf.push_str(text);
        self.buf.push_str(" */\n");
        self.write(s.th.tid);
    }
}

/// ` = a, b` for the words an exit handler logged after the standard ones.
fn values(out: &mut String, extras: &[u64]) {
    for (i, v) in extras.iter().enumerate() {
        out.push_str(if i == 0 { " = " } else { ", " });
        crate::out::format::word(out, *v);
    }
}

impl View for DurationView {
    fn step(&mut self, s: &Step) {
        // A call a fork child continues (uftrace leaves it open here).
        let continued = matches!(
            s.kind,
            StepKind::Exit {
                how: How::Unwound(Cause::InChild),
                ..
            }
        );
        let stream = self.stream(s.th.tid);
        let at = self.places.get(&stream).copied();
        if continued {
            // No exit line (the fork child's lines close it); an entry of
            // its thread held back is no leaf.
            if let Some(i) = at
                && self.pending[i].waiting
                && self.pending[i].th == s.th
            {
                self.pending[i].waiting = false;
                self.lines.enter_line(&self.pending[i]);
            }
            return;
        }
        if let Some(i) = at
            && self.pending[i].waiting
        {
            let p = &mut self.pending[i];
            p.waiting = false;
            // The exit of the call just entered (not of a call of another
            // stack taken back at the same depth: same function, entered
            // at the same time).
            if p.th == s.th
                && p.depth == s.depth
                && matches!(s.kind, StepKind::Exit { entry_ns, .. }
                    if p.func == s.func && entry_ns == p.time_ns)
            {
                self.lines.leaf_line(p, s);
                return;
            }
            self.lines.enter_line(p);
        }
        match &s.kind {
            StepKind::Enter { args, .. } => self.hold(at, stream, s, args),
            StepKind::Exit { .. } => self.lines.exit_line(s),
            StepKind::Note { .. } => self.lines.note_line(s),
        }
    }

    fn tick(&mut self) {
        self.lines.out.hand_on(&mut self.lines.buf);
    }

    fn finish(&mut self) -> Result<(), String> {
        let mut left: Vec<&Held> = self.pending.iter().filter(|h| h.waiting).collect();
        left.sort_by_key(|h| (h.time_ns, h.th));
        for h in left {
            self.lines.enter_line(h);
        }
        self.pending.clear();
        self.places.clear();
        self.lines.out.hand_on(&mut self.lines.buf);
        match self.lines.out.finish() {
            Some((n, e)) => Err(format!("{n} lines of the trace lost: {e}")),
            None => Ok(()),
        }
    }
}

impl Drop for DurationView {
    fn drop(&mut self) {
        self.lines.out.hand_on(&mut self.lines.buf);
    }
}
