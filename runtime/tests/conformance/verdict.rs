//! Checking a run against its expectations as bpftrace's runner does
//! (whole-line text, Python regular expressions in multi-line mode, JSON
//! compared as values, files compared after trimming, the exit status
//! unless `WILL_FAIL` or a timeout), and sorting failures into classes:
//! a **clear refusal** (wprobe said what it does not do, at
//! `file:line:col` with the source line and a caret under that column), a
//! **wrong result** (the run ended as a successful one does, with no error
//! message, and its output is not bpftrace's), or an **unclear error**
//! (everything else: an error without a position, a crash, a hang, a
//! silent difference).

use crate::exec::Outcome;
use crate::suite::{Mode, Test};
use std::path::Path;

/// How a failed test failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A successful-looking run whose output differs.
    Wrong,
    /// An error without a position, a crash, a timeout, a silent difference.
    Unclear,
    /// A positioned refusal with a caret.
    Refusal,
}

impl Class {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Class::Wrong => "wrong result",
            Class::Unclear => "unclear error",
            Class::Refusal => "clear refusal",
        }
    }
}

/// A test's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every expectation met.
    Pass,
    /// Failed: the class and what failed.
    Fail(Class, String),
}

/// bpftrace's `^\s*TEXT\s*$` in multi-line mode.
fn has_line(output: &str, text: &str) -> bool {
    let pat = format!("(?m)^\\s*{}\\s*$", regex::escape(text));
    regex::Regex::new(&pat).is_ok_and(|r| r.is_match(output))
}

/// A Python pattern in Rust's dialect: inside a class, `[` and the set
/// operators `&&`, `--`, `~~` are literals in Python (nested classes and
/// set operations in Rust), and so is a `]` just after the opening `[`;
/// outside a class, a `{` that opens no repetition is a literal in Python
/// and an error in Rust.
fn regex_of(pat: &str) -> Result<regex::Regex, String> {
    let chars: Vec<char> = pat.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let mut in_class = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && i + 1 < chars.len() {
            out.push(c);
            out.push(chars[i + 1]);
            i += 2;
            continue;
        }
        if in_class {
            match c {
                ']' => {
                    in_class = false;
                    out.push(']');
                }
                '[' => out.push_str("\\["),
                '&' | '-' | '~' if chars.get(i + 1) == Some(&c) => {
                    out.push('\\');
                    out.push(c);
                }
                _ => out.push(c),
            }
            i += 1;
            continue;
        }
        match c {
            '[' => {
                in_class = true;
                out.push('[');
                if chars.get(i + 1) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                if chars.get(i + 1) == Some(&']') {
                    out.push_str("\\]");
                    i += 1;
                }
            }
            '{' => {
                let rest: String = chars[i + 1..].iter().collect();
                let rep = rest.find('}').is_some_and(|j| {
                    let inner = &rest[..j];
                    !inner.is_empty() && inner.chars().all(|c| c.is_ascii_digit() || c == ',')
                });
                out.push_str(if rep { "{" } else { "\\{" });
            }
            '}' if !out.ends_with(|d: char| d.is_ascii_digit() || d == ',') => out.push_str("\\}"),
            c => out.push(c),
        }
        i += 1;
    }
    regex::Regex::new(&format!("(?m){out}")).map_err(|e| format!("pattern `{pat}`: {e}"))
}

fn json_equal(output: &str, file: &Path) -> Result<bool, String> {
    let want = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let out = output.trim();
    let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).ok();
    if file.extension().is_some_and(|e| e == "ndjson") {
        let w: Vec<&str> = want.trim().lines().collect();
        let o: Vec<&str> = out.lines().collect();
        return Ok(w.len() == o.len()
            && w.iter().zip(&o).all(|(a, b)| {
                let (a, b) = (parse(a), parse(b));
                a.is_some() && a == b
            }));
    }
    if out.lines().count() != 1 {
        return Ok(false);
    }
    let (a, b) = (parse(out), parse(want.trim()));
    Ok(a.is_some() && a == b)
}

/// Whether `expect` holds for `output` (`root`: where expectation files are).
fn holds(mode: Mode, what: &str, output: &str, root: &Path) -> Result<bool, String> {
    Ok(match mode {
        Mode::Text => has_line(output, what),
        Mode::TextNone => !has_line(output, what),
        Mode::Regex => regex_of(what)?.is_match(output),
        Mode::RegexNone => !regex_of(what)?.is_match(output),
        Mode::File => {
            let f = std::fs::read_to_string(root.join(what)).map_err(|e| format!("{what}: {e}"))?;
            output.trim() == f.trim()
        }
        Mode::Json => json_equal(output, &root.join(what))?,
    })
}

/// The line the tracer prints once its probes are attached when
/// `__BPFTRACE_NOTIFY_PROBES_ATTACHED` is set (bpftrace's test hook).
pub const ATTACHED: &str = "__BPFTRACE_NOTIFY_PROBES_ATTACHED";

/// The output bpftrace's runner compares for an exact expectation: what
/// follows the attach line, when there is one.
fn after_attach(output: &str) -> &str {
    let mut at = 0;
    for line in output.split_inclusive('\n') {
        at += line.len();
        if line.trim_end() == ATTACHED {
            return &output[at..];
        }
    }
    output
}

/// A positioned diagnostic with its source line and a caret under its
/// column: `NAME:LINE:COL: error[CODE]: MESSAGE`, `  | SOURCE`, `  | ^^^`.
/// Returns the message of the first one.
pub fn refusal(output: &str) -> Option<String> {
    let lines: Vec<&str> = output.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let Some(e) = l.find(": error[") else {
            continue;
        };
        let head: Vec<&str> = l[..e].rsplitn(3, ':').collect();
        let [col, line, _file] = head[..] else {
            continue;
        };
        let (Ok(col), Ok(_line)) = (col.parse::<usize>(), line.parse::<usize>()) else {
            continue;
        };
        let (Some(src), Some(caret)) = (lines.get(i + 1), lines.get(i + 2)) else {
            continue;
        };
        let (Some(_), Some(c)) = (src.strip_prefix("  | "), caret.strip_prefix("  | ")) else {
            continue;
        };
        let pos = c.find('^');
        if col >= 1 && pos.is_some_and(|p| c[..p].chars().count() == col - 1) {
            return Some(l[e + 2..].to_string());
        }
    }
    None
}

/// Whether the output has an error message of any kind.
fn has_error(output: &str) -> bool {
    output.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("error")
            || l.starts_with("ERROR")
            || l.contains(": error")
            || l.starts_with("wprobe: error")
    })
}

/// The verdict on a run.
pub fn judge(t: &Test, o: &Outcome, root: &Path) -> Verdict {
    let text = if t.exact {
        after_attach(&o.output)
    } else {
        &o.output
    };
    let mut failed = Vec::new();
    for e in &t.expects {
        match holds(e.mode, &e.what, text, root) {
            Ok(true) => {}
            Ok(false) => failed.push(format!("{:?} {}", e.mode, e.what)),
            Err(err) => failed.push(format!("{:?}: runner: {err}", e.mode)),
        }
    }
    let code_ok = t.will_fail || o.timed_out || o.code == Some(t.return_code);
    if failed.is_empty() && code_ok {
        return Verdict::Pass;
    }
    let mut why = failed.join("; ");
    if !code_ok {
        if !why.is_empty() {
            why.push_str("; ");
        }
        why.push_str(&format!(
            "exit status {} (expected {})",
            o.code.map_or("none (killed)".into(), |c| c.to_string()),
            t.return_code
        ));
    }
    if let Some(msg) = refusal(&o.output) {
        return Verdict::Fail(Class::Refusal, format!("{why} -- refused: {msg}"));
    }
    let clean_end = o.code == Some(t.return_code) || (o.timed_out && o.output.contains(ATTACHED));
    if clean_end && !has_error(&o.output) && !failed.is_empty() && !o.output.trim().is_empty() {
        return Verdict::Fail(Class::Wrong, why);
    }
    if o.timed_out {
        why.push_str(" (timed out)");
    }
    Verdict::Fail(Class::Unclear, why)
}

/// Checks the runner's reading of Python patterns (this binary has no
/// test harness of its own: it runs this first).
pub fn self_check() -> Result<(), String> {
    let cases: [(&str, &str); 4] = [
        // `[{ .n = 0x[0-9a-f]` is one class in Python.
        (
            r"@[{ .n = 0x[0-9a-f]+, .c = 120 }]: 1",
            "@[{ .n = 0x7ffd22d3764c, .c = 120 }]: 1",
        ),
        (r"a{b}", "a{b}"),
        (r"X{3}", "XXX"),
        (r"[]a]", "]"),
    ];
    for (p, text) in cases {
        if !regex_of(p)?.is_match(text) {
            return Err(format!(
                "runner: pattern `{p}` does not match `{text}` as in Python"
            ));
        }
    }
    Ok(())
}
