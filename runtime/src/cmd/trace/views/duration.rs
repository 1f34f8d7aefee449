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
//! returning says so in its comment (`} /* f: unwound */`).

use std::fmt::Write as _;
use std::rc::Rc;

use super::super::out::TextOut;
use super::super::tree::{How, Step, StepKind};
use super::{Table, TidColumn, TimeFmt, View, push_args, time_unit};

/// uftrace's header line.
pub const HEADER: &str = "# DURATION     TID     FUNCTION\n";

/// The duration view.
pub struct DurationView {
    funcs: Table,
    out: TextOut,
    time: TimeFmt,
    lines: bool,
    /// The entries not yet printed, with their output stream (one stream,
    /// or one per thread with `--ff`; at most one entry each): printed as
    /// a leaf when its exit comes next. A list: it holds one entry at most
    /// without `--ff`, and it is looked up at every step.
    pending: Vec<(i32, Step)>,
    buf: String,
    /// ` [   TID] | `.
    tid: TidColumn,
}

impl DurationView {
    /// Lines to `out`; `lines`: `-l` (`/* file:line */` after entries).
    pub fn new(funcs: Table, mut out: TextOut, time: TimeFmt, lines: bool) -> DurationView {
        out.set_header(HEADER);
        DurationView {
            funcs,
            out,
            time,
            lines,
            pending: Vec::new(),
            buf: String::with_capacity(256),
            tid: TidColumn::default(),
        }
    }

    fn stream(&self, tid: i32) -> i32 {
        if self.out.is_per_thread() { tid } else { 0 }
    }

    fn prefix(&mut self, s: &Step, dur: Option<u64>) {
        self.time.push(&mut self.buf, s.time_ns);
        self.buf.push(' ');
        time_unit(&mut self.buf, dur.unwrap_or(0));
        self.buf.push_str(self.tid.get(s.th.tid, |out, tid| {
            let _ = write!(out, " [{tid:>6}] | ");
        }));
        for _ in 0..s.depth {
            self.buf.push_str("  ");
        }
    }

    fn push_name(&mut self, func: u32) {
        let funcs = Rc::clone(&self.funcs);
        self.buf
            .push_str(funcs.get(func as usize).map_or("?", |f| f.shown.as_str()));
    }

    fn write(&mut self, tid: i32) {
        self.out.lines(tid, &self.buf, 1);
        self.buf.clear();
    }

    fn enter_line(&mut self, s: &Step) {
        let StepKind::Enter { args, .. } = &s.kind else {
            return;
        };
        self.prefix(s, None);
        self.push_name(s.func);
        push_args(&mut self.buf, args);
        self.buf.push_str(" {");
        self.source(s.func);
        self.buf.push('\n');
        self.write(s.th.tid);
    }

    fn source(&mut self, func: u32) {
        let funcs = Rc::clone(&self.funcs);
        if self.lines
            && let Some(l) = funcs.get(func as usize).and_then(|f| f.line.as_ref())
        {
            self.buf.push_str(" /* ");
            self.buf.push_str(l);
            self.buf.push_str(" */");
        }
    }

    fn leaf_line(&mut self, enter: &Step, exit: &Step) {
        let (
            StepKind::Enter { args, .. },
            StepKind::Exit {
                dur_ns,
                extras,
                how,
                ..
            },
        ) = (&enter.kind, &exit.kind)
        else {
            return;
        };
        self.prefix(enter, Some(*dur_ns));
        self.push_name(enter.func);
        push_args(&mut self.buf, args);
        values(&mut self.buf, extras);
        self.buf.push(';');
        match how {
            How::Returned => self.source(enter.func),
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
        self.prefix(s, Some(*dur_ns));
        self.buf.push('}');
        values(&mut self.buf, extras);
        if !extras.is_empty() {
            self.buf.push(';');
        }
        self.buf.push_str(" /* ");
        self.push_name(s.func);
        match how {
            How::Returned => {}
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
        self.prefix(s, None);
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
        crate::format::word(out, *v);
    }
}

impl View for DurationView {
    fn step(&mut self, s: &Step) {
        let stream = self.stream(s.th.tid);
        if let Some(at) = self.pending.iter().position(|(st, _)| *st == stream) {
            let (_, p) = self.pending.swap_remove(at);
            if p.th == s.th && p.depth == s.depth && matches!(s.kind, StepKind::Exit { .. }) {
                self.leaf_line(&p, s);
                return;
            }
            self.enter_line(&p);
        }
        match &s.kind {
            StepKind::Enter { .. } => {
                self.pending.push((stream, s.clone()));
            }
            StepKind::Exit { .. } => self.exit_line(s),
            StepKind::Note { .. } => self.note_line(s),
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        let mut left: Vec<Step> = self.pending.drain(..).map(|(_, s)| s).collect();
        left.sort_by_key(|s| (s.time_ns, s.th));
        for p in left {
            self.enter_line(&p);
        }
        match self.out.finish() {
            Some((n, e)) => Err(format!("{n} lines of the trace lost: {e}")),
            None => Ok(()),
        }
    }
}
