//! `-T`: tracef's call tree. One line per entry and per exit, in the order
//! they happened, the thread first (`--no-pid` leaves it out), the time
//! with `-t`/`-u`, the calls indented `--offset` spaces per level (3):
//!
//! ```text
//! [pid 1234] ==> main() at 0x00401136 [prog.c:14]
//! [pid 1234]    ==> f() at 0x00401120 [prog.c:4]
//! [pid 1234]    <== f() [rax = 0x2a]
//! [pid 1234] <== main() [rax = 0x0]
//! ```
//!
//! `-i` leaves out the addresses, `-l` adds `[file:line]` from DWARF. A
//! call left without returning ends with `[unwound]` (and why) instead of
//! its return value; processes appear as `+++ process … +++` lines.

use std::fmt::Write as _;
use std::rc::Rc;

use super::super::out::{BATCH_BYTES, TextOut};
use super::super::tree::{How, Step, StepKind};
use super::{Table, TidColumn, TimeFmt, View, push_args, push_hex, push_spaces};

/// What `-T` shows.
#[derive(Clone, Copy, Debug)]
pub struct TreeOpts {
    /// `--no-pid` not given.
    pub pid: bool,
    /// `-i` not given.
    pub ip: bool,
    /// `-l`.
    pub lines: bool,
    /// `--offset`.
    pub offset: usize,
    /// `-t` / `-u`.
    pub time: TimeFmt,
}

/// The call-tree view.
pub struct CallTreeView {
    funcs: Table,
    out: TextOut,
    opts: TreeOpts,
    /// The lines not handed on yet (see [`TextOut::line_in`]).
    buf: String,
    last_ns: u64,
    /// `[pid TID] `.
    tid: TidColumn,
    /// By function: the address of its last call and that address as
    /// shown (a function's calls share it; formatting it at each call cost
    /// a tenth of a call's time).
    addrs: Vec<(u64, String)>,
}

impl CallTreeView {
    /// Lines to `out`.
    pub fn new(funcs: Table, out: TextOut, opts: TreeOpts) -> CallTreeView {
        CallTreeView {
            funcs,
            out,
            opts,
            buf: String::with_capacity(BATCH_BYTES + 256),
            last_ns: 0,
            tid: TidColumn::default(),
            addrs: Vec::new(),
        }
    }

    fn prefix(&mut self, tid: i32, time_ns: u64, depth: u32) {
        if self.opts.pid {
            self.buf.push_str(self.tid.get(tid, |out, tid| {
                let _ = write!(out, "[pid {tid}] ");
            }));
        }
        self.opts.time.push(&mut self.buf, time_ns);
        push_spaces(&mut self.buf, depth as usize * self.opts.offset);
    }
}

impl View for CallTreeView {
    fn step(&mut self, s: &Step) {
        self.last_ns = self.last_ns.max(s.time_ns);
        let funcs = Rc::clone(&self.funcs);
        let f = funcs.get(s.func as usize);
        let name = f.map_or("?", |f| f.shown.as_str());
        self.prefix(s.th.tid, s.time_ns, s.depth);
        match &s.kind {
            StepKind::Enter { ip, args } => {
                self.buf.push_str("==> ");
                self.buf.push_str(name);
                push_args(&mut self.buf, args);
                if self.opts.ip {
                    self.buf.push_str(" at ");
                    let i = s.func as usize;
                    if self.addrs.len() <= i {
                        self.addrs.resize(i + 1, (0, String::new()));
                    }
                    let (last, text) = &mut self.addrs[i];
                    if *last != *ip || text.is_empty() {
                        text.clear();
                        push_hex(text, *ip, 8);
                        *last = *ip;
                    }
                    self.buf.push_str(text);
                }
                if self.opts.lines
                    && let Some(l) = f.and_then(|f| f.line.as_ref())
                {
                    let _ = write!(self.buf, " [{l}]");
                }
            }
            StepKind::Exit {
                rax, extras, how, ..
            } => {
                self.buf.push_str("<== ");
                self.buf.push_str(name);
                push_args(&mut self.buf, &[]);
                self.buf.push_str(" [");
                match (how, rax) {
                    (How::Returned, Some(v)) => {
                        self.buf.push_str("rax = ");
                        push_hex(&mut self.buf, *v, 1);
                    }
                    (How::Unwound(c), _) => self.buf.push_str(c.describe()),
                    (How::Running, _) => self.buf.push_str("still running"),
                    (How::Returned, None) => self.buf.push_str("returned"),
                }
                self.buf.push(']');
                for (i, v) in extras.iter().enumerate() {
                    self.buf.push_str(if i == 0 { " = " } else { ", " });
                    crate::out::format::word(&mut self.buf, *v);
                }
            }
            StepKind::Note { text } => {
                self.buf.push_str("--- ");
                self.buf.push_str(text);
            }
        }
        self.buf.push('\n');
        self.out.line_in(s.th.tid, &mut self.buf);
    }

    fn process(&mut self, pid: i32, text: &str) {
        self.prefix(pid, self.last_ns, 0);
        let _ = writeln!(self.buf, "+++ {text} +++");
        self.out.line_in(pid, &mut self.buf);
    }

    fn tick(&mut self) {
        self.out.hand_on(&mut self.buf);
    }

    fn finish(&mut self) -> Result<(), String> {
        self.out.hand_on(&mut self.buf);
        match self.out.finish() {
            Some((n, e)) => Err(format!("{n} lines of the trace lost: {e}")),
            None => Ok(()),
        }
    }
}

impl Drop for CallTreeView {
    fn drop(&mut self) {
        self.out.hand_on(&mut self.buf);
    }
}
