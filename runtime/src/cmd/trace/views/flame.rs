//! `--flame FILE.svg`: a flame graph of the calls (the `inferno` crate),
//! every thread merged: each box is a call path, as wide as the time spent
//! in it (self time, in ns, summed over the calls on that path). The paths
//! are kept as a tree of (caller path, function) nodes while tracing, one
//! lookup per entry; the folded lines inferno reads are made at the end.
//! No box is left out for being narrow: every function called is in the
//! file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::super::tree::{OpenSteps, Step, StepKind, Thread};
use super::{Table, View};

#[derive(Debug)]
struct Node {
    func: u32,
    parent: usize,
    self_ns: u64,
}

/// The flame-graph view.
pub struct FlameView {
    funcs: Table,
    path: PathBuf,
    title: String,
    /// Node 0 is the root (no function).
    nodes: Vec<Node>,
    children: HashMap<(usize, u32), usize>,
    /// Each thread's open calls, as nodes.
    stacks: HashMap<Thread, OpenSteps<usize>>,
}

impl FlameView {
    /// Written to `path` at the end, with `title`.
    pub fn new(funcs: Table, path: &Path, title: String) -> FlameView {
        FlameView {
            funcs,
            path: path.to_path_buf(),
            title,
            nodes: vec![Node {
                func: u32::MAX,
                parent: 0,
                self_ns: 0,
            }],
            children: HashMap::new(),
            stacks: HashMap::new(),
        }
    }

    /// The folded stacks (`a;b;c NS`), in node order.
    pub fn folded(&self) -> Vec<String> {
        let mut out = Vec::new();
        for i in 1..self.nodes.len() {
            if self.nodes[i].self_ns == 0 {
                continue;
            }
            let mut path = Vec::new();
            let mut n = i;
            while n != 0 {
                path.push(self.name(self.nodes[n].func));
                n = self.nodes[n].parent;
            }
            path.reverse();
            out.push(format!("{} {}", path.join(";"), self.nodes[i].self_ns));
        }
        out
    }

    fn name(&self, func: u32) -> String {
        // `;` separates frames and a space the count in folded lines.
        self.funcs
            .get(func as usize)
            .map_or("?".to_string(), |f| f.shown.replace(';', ":"))
    }
}

impl View for FlameView {
    fn step(&mut self, s: &Step) {
        let stack = self.stacks.entry(s.th).or_default();
        match &s.kind {
            StepKind::Enter { .. } => {
                let parent = stack.top().copied().unwrap_or(0);
                let next = self.nodes.len();
                let id = *self.children.entry((parent, s.func)).or_insert(next);
                if id == next {
                    self.nodes.push(Node {
                        func: s.func,
                        parent,
                        self_ns: 0,
                    });
                }
                stack.enter(s, id);
            }
            StepKind::Exit { self_ns, .. } => {
                let funcs = &self.funcs;
                let switches = |f: u32| {
                    funcs
                        .get(f as usize)
                        .is_some_and(crate::cmd::trace::funcs::switches_stack)
                };
                if let Some(id) = stack.exit(s, switches) {
                    // At least 1: a call that took no measurable time is
                    // still in the graph.
                    self.nodes[id].self_ns += (*self_ns).max(1);
                }
            }
            StepKind::Note { .. } => {}
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        let lines = self.folded();
        if lines.is_empty() {
            return Err(format!(
                "{}: not written: no traced call to draw",
                self.path.display()
            ));
        }
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = self.title.clone();
        opts.count_name = "ns".into();
        opts.min_width = 0.0;
        opts.deterministic = true;
        let f = std::fs::File::create(&self.path)
            .map_err(|e| format!("creating {}: {e}", self.path.display()))?;
        let mut w = std::io::BufWriter::new(f);
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut w)
            .and_then(|()| std::io::Write::flush(&mut w))
            .map_err(|e| format!("writing {}: {e}", self.path.display()))
    }
}
