//! Results, per-group counts, the per-test report and the ratchet.

use crate::Entry;
use crate::exec::{Outcome, Ran};
use crate::scope::{Group, Outside};
use crate::suite::Test;
use crate::verdict::{Class, Verdict};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// What happened to one test.
#[derive(Debug)]
pub enum Result {
    /// Not decided yet.
    Pending,
    /// Outside every group.
    Outside(Outside),
    /// In a group, not run: the reason.
    Skipped(String),
    /// Passed (with its wall time).
    Passed(Duration),
    /// Failed: class, why, the run (when there was one).
    Failed(Class, String, Option<Box<Outcome>>),
}

impl Result {
    /// The result of a run.
    pub fn of(t: &Test, r: Ran, work: &Path) -> Result {
        match r {
            Ran::Skipped(why) => Result::Skipped(why),
            Ran::Broken(why) => Result::Failed(Class::Unclear, why, None),
            Ran::Done(o) => match crate::verdict::judge(t, &o, work) {
                Verdict::Pass => Result::Passed(o.elapsed),
                Verdict::Fail(c, why) => Result::Failed(c, why, Some(Box::new(o))),
            },
        }
    }

    /// Wall time of the run, if there was one.
    pub fn elapsed(&self) -> Option<Duration> {
        match self {
            Result::Passed(d) => Some(*d),
            Result::Failed(_, _, Some(o)) => Some(o.elapsed),
            _ => None,
        }
    }
}

/// One line per test (`-v`).
pub fn line(t: &Test, r: &Result) -> String {
    match r {
        Result::Pending => format!("[ PENDING ] {}", t.id()),
        Result::Outside(o) => format!("[ OUTSIDE ] {} ({o:?})", t.id()),
        Result::Skipped(why) => format!("[ SKIPPED ] {} ({why})", t.id()),
        Result::Passed(d) => format!("[  PASSED ] {} ({} ms)", t.id(), d.as_millis()),
        Result::Failed(c, why, _) => format!("[  FAILED ] {} [{}] {why}", t.id(), c.name()),
    }
}

/// Counts of one group.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Tests in the group.
    pub tests: usize,
    /// Passed.
    pub passed: usize,
    /// Failed, by class.
    pub failed: BTreeMap<Class, usize>,
    /// Skipped.
    pub skipped: usize,
}

impl Counts {
    fn failed_total(&self) -> usize {
        self.failed.values().sum()
    }

    fn render(&self, name: &str) -> String {
        let f = |c| self.failed.get(&c).copied().unwrap_or(0);
        format!(
            "{name}: {} tests: {} pass, {} fail ({} wrong result, {} unclear error, {} clear refusal), {} skipped",
            self.tests,
            self.passed,
            self.failed_total(),
            f(Class::Wrong),
            f(Class::Unclear),
            f(Class::Refusal),
            self.skipped
        )
    }

    fn add(&mut self, r: &Result) {
        self.tests += 1;
        match r {
            Result::Passed(_) => self.passed += 1,
            Result::Failed(c, _, _) => *self.failed.entry(*c).or_default() += 1,
            Result::Skipped(_) => self.skipped += 1,
            Result::Pending | Result::Outside(_) => {}
        }
    }
}

/// Every group's counts and the total.
pub struct Summary {
    /// Per group.
    pub groups: Vec<(Group, Counts)>,
    /// All groups.
    pub all: Counts,
    /// Tests outside the groups, by kind.
    pub outside: BTreeMap<&'static str, usize>,
}

impl Summary {
    /// Counts the entries.
    pub fn of(entries: &[Entry]) -> Summary {
        let mut groups: Vec<(Group, Counts)> =
            Group::ALL.iter().map(|g| (*g, Counts::default())).collect();
        let mut all = Counts::default();
        let mut outside = BTreeMap::new();
        for e in entries {
            match (&e.result, e.group) {
                (Result::Outside(o), _) => {
                    let k = match o {
                        Outside::Kernel(_) => "the kernel",
                        Outside::PidNamespace(_) => "PID namespaces",
                        Outside::NotInScope(_) => "watchpoints",
                    };
                    *outside.entry(k).or_default() += 1;
                }
                (r, Some(g)) => {
                    if let Some((_, c)) = groups.iter_mut().find(|(x, _)| *x == g) {
                        c.add(r);
                    }
                    all.add(r);
                }
                (_, None) => {}
            }
        }
        Summary {
            groups,
            all,
            outside,
        }
    }

    /// The summary: a line per group, the total, what is outside.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (g, c) in &self.groups {
            s += &format!("conformance: {}\n", c.render(g.name()));
        }
        s += &format!("conformance: {}\n", self.all.render("all"));
        let out: Vec<String> = self
            .outside
            .iter()
            .map(|(k, n)| format!("{n} ({k})"))
            .collect();
        s += &format!("conformance: outside the groups: {}\n", out.join(", "));
        s
    }
}

/// The per-test report: every failure with its command and output.
pub fn full(
    entries: &[Entry],
    summary: &Summary,
    build_failures: &[String],
    build: Duration,
    total: Duration,
) -> String {
    let mut s = summary.render();
    s += &format!(
        "test programs: built or reused in {:.1}s; did not build: {}\nwhole run: {:.1}s\n\n",
        build.as_secs_f64(),
        if build_failures.is_empty() {
            "none".to_string()
        } else {
            build_failures.join("; ")
        },
        total.as_secs_f64()
    );
    for g in Group::ALL {
        s += &format!("## {}\n\n", g.name());
        for e in entries.iter().filter(|e| e.group == Some(g)) {
            s += &line(&e.test, &e.result);
            s.push('\n');
            if let Result::Failed(_, _, Some(o)) = &e.result {
                s += &format!("    command: {}\n", o.command);
                s += &format!(
                    "    exit: {:?}{}, {} ms\n",
                    o.code,
                    if o.timed_out { " (timed out)" } else { "" },
                    o.elapsed.as_millis()
                );
                let out: String = o.output.chars().take(3000).collect();
                for l in out.lines() {
                    s += &format!("    | {l}\n");
                }
            }
        }
        s.push('\n');
    }
    s += "## outside the groups\n\n";
    for e in entries.iter().filter(|e| e.group.is_none()) {
        s += &line(&e.test, &e.result);
        s.push('\n');
    }
    s
}

/// `ratchet.txt`: the pass count the run may not fall below, the suite
/// time budget, and the tests allowed to give a wrong result (a list that
/// only shrinks).
pub struct Ratchet {
    /// Fewest passes allowed.
    pub passed: usize,
    /// Seconds each suite may take (its tests' wall times added up).
    pub suite_budget_s: u64,
    /// `suite.name` of the known wrong results.
    pub wrong: Vec<String>,
}

impl Ratchet {
    /// Reads the file: `passed N`, `suite_budget_s N`, `wrong SUITE.NAME` lines.
    pub fn read(text: &str) -> std::result::Result<Ratchet, String> {
        let mut r = Ratchet {
            passed: 0,
            suite_budget_s: 120,
            wrong: Vec::new(),
        };
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line.split_once(' ').unwrap_or((line, ""));
            let bad = || format!("ratchet.txt:{}: `{line}`", n + 1);
            match k {
                "passed" => r.passed = v.trim().parse().map_err(|_| bad())?,
                "suite_budget_s" => r.suite_budget_s = v.trim().parse().map_err(|_| bad())?,
                "wrong" => r.wrong.push(v.trim().to_string()),
                _ => return Err(bad()),
            }
        }
        Ok(r)
    }

    /// Whether the run keeps the ratchet; says why not.
    pub fn check(&self, entries: &[Entry], s: &Summary) -> bool {
        let mut ok = true;
        if s.all.passed < self.passed {
            println!(
                "conformance: RATCHET: {} tests pass, fewer than the {} recorded in runtime/tests/conformance/ratchet.txt",
                s.all.passed, self.passed
            );
            ok = false;
        } else if s.all.passed > self.passed {
            println!(
                "conformance: {} tests pass, more than the {} recorded: raise `passed` in runtime/tests/conformance/ratchet.txt",
                s.all.passed, self.passed
            );
        }
        for e in entries {
            if let Result::Failed(Class::Wrong, why, _) = &e.result
                && !self.wrong.contains(&e.test.id())
            {
                println!(
                    "conformance: RATCHET: wrong result in {}: {why}",
                    e.test.id()
                );
                ok = false;
            }
        }
        ok
    }
}
