//! `--report`: per function, its calls, total time and self time, as
//! uftrace's `report` prints them (sorted by total time), or as JSON with
//! `--format json`: `[{"function","calls","total_ns","self_ns"}, …]`. The
//! total time of a recursive function counts its outermost calls only (the
//! inner ones are inside them), as uftrace counts it; self time is a
//! call's time minus its shown callees'. Calls left without returning count
//! with the time until they were left.

use rustc_hash::FxHashMap as HashMap;
use std::fmt::Write as _;

use super::super::out::TextOut;
use super::super::tree::{OpenSteps, Step, StepKind, Thread};
use super::{Table, View, time_unit};

#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    calls: u64,
    total_ns: u64,
    self_ns: u64,
}

/// The report view.
pub struct ReportView {
    funcs: Table,
    out: TextOut,
    json: bool,
    totals: Vec<Totals>,
    /// Each thread's shown calls, to tell recursive calls: their place in
    /// `stacks` by thread, and the thread looked up last with its place
    /// (a thread's steps come in runs: most steps then hash nothing).
    stacks: Vec<OpenSteps<u32>>,
    index: HashMap<Thread, usize>,
    last: Option<(Thread, usize)>,
}

impl ReportView {
    /// Written to `out` at the end; `json`: `--format json`.
    pub fn new(funcs: Table, out: TextOut, json: bool) -> ReportView {
        let n = funcs.len();
        ReportView {
            funcs,
            out,
            json,
            totals: vec![Totals::default(); n],
            stacks: Vec::new(),
            index: HashMap::default(),
            last: None,
        }
    }

    /// The place in `stacks` of thread `th`'s shown calls.
    fn stack(&mut self, th: Thread) -> usize {
        match self.last {
            Some((t, i)) if t == th => i,
            _ => {
                let next = self.stacks.len();
                let i = *self.index.entry(th).or_insert(next);
                if i == next {
                    self.stacks.push(OpenSteps::default());
                }
                self.last = Some((th, i));
                i
            }
        }
    }

    /// The rows: (name, calls, total, self), in report order.
    fn rows(&self) -> Vec<(&str, u64, u64, u64)> {
        let mut rows: Vec<(&str, u64, u64, u64)> = self
            .totals
            .iter()
            .enumerate()
            .filter(|(_, t)| t.calls > 0)
            .map(|(i, t)| (self.funcs[i].shown.as_str(), t.calls, t.total_ns, t.self_ns))
            .collect();
        rows.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)));
        rows
    }
}

impl View for ReportView {
    fn step(&mut self, s: &Step) {
        let i = self.stack(s.th);
        let stack = &mut self.stacks[i];
        match &s.kind {
            StepKind::Enter { .. } => stack.enter(s, s.func),
            StepKind::Exit {
                dur_ns, self_ns, ..
            } => {
                let funcs = &self.funcs;
                stack.exit(s, |f| {
                    funcs
                        .get(f as usize)
                        .is_some_and(crate::cmd::trace::funcs::switches_stack)
                });
                let recursive = stack.open().any(|&f| f == s.func);
                if let Some(t) = self.totals.get_mut(s.func as usize) {
                    t.calls += 1;
                    t.self_ns += self_ns;
                    if !recursive {
                        t.total_ns += dur_ns;
                    }
                }
            }
            StepKind::Note { .. } => {}
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        let rows = self.rows();
        let mut text = String::new();
        if self.json {
            text.push_str("[\n");
            for (i, (name, calls, total, own)) in rows.iter().enumerate() {
                text.push_str("{\"function\":");
                crate::out::format::json_string(&mut text, name.as_bytes());
                let _ = write!(
                    text,
                    ",\"calls\":{calls},\"total_ns\":{total},\"self_ns\":{own}}}"
                );
                text.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
            }
            text.push_str("]\n");
        } else {
            let width = rows
                .iter()
                .map(|r| r.0.len())
                .max()
                .unwrap_or(0)
                .clamp(20, 49);
            let _ = writeln!(
                text,
                "  {:>10}  {:>10}  {:>10}  Function",
                "Total time", "Self time", "Calls"
            );
            let _ = writeln!(
                text,
                "  {0}  {0}  {0}  {1}",
                "=".repeat(10),
                "=".repeat(width)
            );
            for (name, calls, total, own) in &rows {
                text.push_str("  ");
                time_unit(&mut text, *total);
                text.push_str("  ");
                time_unit(&mut text, *own);
                let _ = writeln!(text, "  {calls:>10}  {name}");
            }
        }
        let lines = text.lines().count() as u64;
        self.out.lines(0, &text, lines);
        match self.out.finish() {
            Some((n, e)) => Err(format!("{n} lines of the report lost: {e}")),
            None => Ok(()),
        }
    }
}
