//! Which tests are wprobe's, and in which group: the probes a test's
//! program uses decide (`shared/conformance/README.md`): only `uprobe`,
//! `uretprobe` (and `u`, `ur`) with `BEGIN`/`END`/`interval` make the
//! uprobe group, `usdt` among them the usdt group, only
//! `BEGIN`/`END`/`interval` or no probe at all the language group.
//! Kernel probes, watchpoints and PID namespaces are outside; so are tests
//! listed in `out_of_scope.txt`, each with its reason.

use crate::suite::Test;
use std::path::Path;

/// The groups results are counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// uprobe / uretprobe (with BEGIN, END, interval).
    Uprobe,
    /// usdt (with uprobes, BEGIN, END, interval).
    Usdt,
    /// BEGIN, END, interval only, or no probe.
    Language,
}

impl Group {
    /// Every group, in report order.
    pub const ALL: [Group; 3] = [Group::Uprobe, Group::Usdt, Group::Language];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Group::Uprobe => "uprobe",
            Group::Usdt => "usdt",
            Group::Language => "language",
        }
    }
}

/// Why a test is not counted in any group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outside {
    /// It needs the kernel: its probes, a kernel feature, kernel types.
    Kernel(String),
    /// It needs PID namespaces.
    PidNamespace(String),
    /// Its probes are not among the README's in-scope types (watchpoints).
    NotInScope(String),
}

/// What the suite says about one test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Counted in this group.
    In(Group),
    /// Not counted.
    Out(Outside),
}

/// Features of bpftrace's `REQUIRES_FEATURE` that wprobe has by its own
/// means (DWARF reading, loops bounded by fuel, library path resolution,
/// the probed function known per probe) or through the perf transport
/// (`uprobe_refcount`: a USDT semaphore is the uprobe's `ref_ctr_offset`,
/// raised by the kernel in every process mapping the file, as a
/// system-wide run needs).
const HAVE: &[&str] = &[
    "loop",
    "dwarf",
    "libpath_resolv",
    "get_func_ip",
    "uprobe_refcount",
];

/// Probe types (with their aliases) and what they are.
fn provider_kind(p: &str) -> Option<&'static str> {
    Some(match p {
        "BEGIN" | "END" | "interval" | "i" => "special",
        "uprobe" | "u" | "uretprobe" | "ur" => "uprobe",
        "usdt" | "U" => "usdt",
        "watchpoint" | "w" | "asyncwatchpoint" | "aw" => "watchpoint",
        "kprobe" | "k" | "kretprobe" | "kr" | "tracepoint" | "t" | "rawtracepoint" | "rt"
        | "software" | "s" | "hardware" | "h" | "profile" | "p" | "kfunc" | "f" | "kretfunc"
        | "fr" | "fentry" | "fexit" | "iter" | "it" | "self" | "*" => "kernel",
        _ => return None,
    })
}

/// Splits a shell command into words, honouring quotes and escapes (enough
/// for the suite's RUN lines; operators stay inside words or alone).
pub fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut any = false;
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\'' => {
                any = true;
                for d in it.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    cur.push(d);
                }
            }
            '"' => {
                any = true;
                while let Some(d) = it.next() {
                    match d {
                        '"' => break,
                        '\\' if matches!(it.peek(), Some('"' | '\\' | '$' | '`')) => {
                            cur.extend(it.next());
                        }
                        _ => cur.push(d),
                    }
                }
            }
            '\\' => {
                any = true;
                cur.extend(it.next());
            }
            c if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The program text of a test, if it has one: `PROG`, `-e '…'` of `RUN`,
/// a `.bt` file it runs, or the pattern of `-l` (as a probe without body).
pub fn program_text(t: &Test, root: &Path) -> Option<String> {
    if let Some(p) = &t.prog {
        return Some(p.clone());
    }
    let run = t.run.as_deref()?;
    let words = shell_words(run);
    let mut list = false;
    let mut pattern = None;
    for (i, w) in words.iter().enumerate() {
        if w == "-e" {
            return words.get(i + 1).cloned();
        }
        if w.ends_with(".bt") && !w.starts_with('-') {
            return std::fs::read_to_string(root.join(w)).ok();
        }
        if w.starts_with('-') && !w.starts_with("--") && w.contains('l') && w.len() <= 4 {
            list = true;
            pattern = words
                .get(i + 1)
                .filter(|p| !p.starts_with('-') && p.contains(':'))
                .cloned();
        }
    }
    if list {
        // `-l` alone (or with -p) lists everything: the kernel's probes too.
        return Some(match pattern {
            Some(p) => format!("{p} {{}}"),
            None if run.contains("{{BEFORE_PID}}") => "uprobe:x:y {}".to_string(),
            None => "kprobe:x {}".to_string(),
        });
    }
    None
}

/// The attach points' providers of a program (strings and comments
/// removed; C definitions and `config` blocks skipped).
pub fn providers(prog: &str) -> Vec<String> {
    let text = strip(prog);
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut header = String::new();
    for c in text.chars() {
        match c {
            '{' => {
                if depth == 0 {
                    let h = std::mem::take(&mut header);
                    let words: Vec<&str> = h
                        .split(|c: char| c.is_whitespace() || c == ',')
                        .filter(|w| !w.is_empty())
                        .collect();
                    let skip = words.first().is_some_and(|w| {
                        matches!(*w, "struct" | "union" | "enum" | "config" | "typedef")
                            || w.starts_with('#')
                    });
                    if !skip {
                        for w in words {
                            if w.starts_with('/') {
                                break;
                            }
                            let name: String = w
                                .chars()
                                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '*')
                                .collect();
                            let rest = &w[name.len()..];
                            if !name.is_empty() && (rest.is_empty() || rest.starts_with(':')) {
                                out.push(name);
                            }
                        }
                    }
                }
                depth += 1;
            }
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    header.clear();
                }
            }
            ';' if depth == 0 => header.clear(),
            '\n' if depth == 0 && header.trim_start().starts_with('#') => header.clear(),
            c if depth == 0 => header.push(c),
            _ => {}
        }
    }
    out
}

/// The program without string literals (kept as `""`) and comments.
fn strip(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else {
            let ch = s[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The test's scope, before the out-of-scope list is applied.
pub fn classify(t: &Test, root: &Path) -> Scope {
    if t.new_pidns || t.suite == "pid_namespace" {
        return Scope::Out(Outside::PidNamespace(
            "it runs its processes in a new PID namespace".into(),
        ));
    }
    for f in &t.features {
        if let Some(f) = f.strip_prefix('!') {
            if HAVE.contains(&f) {
                return Scope::Out(Outside::Kernel(format!(
                    "it needs the kernel to lack {f}, which wprobe has"
                )));
            }
        } else if !HAVE.contains(&f.as_str()) {
            return Scope::Out(Outside::Kernel(format!(
                "it needs the kernel's `{f}` (REQUIRES_FEATURE)"
            )));
        }
    }
    let providers = program_text(t, root)
        .map(|p| providers(&p))
        .unwrap_or_default();
    let mut kinds: Vec<&str> = Vec::new();
    for p in &providers {
        match provider_kind(p) {
            Some(k) => kinds.push(k),
            None => {
                return Scope::Out(Outside::Kernel(format!(
                    "its probe type `{p}` is not one of user space"
                )));
            }
        }
    }
    if let Some(p) = providers
        .iter()
        .find(|p| provider_kind(p) == Some("kernel"))
    {
        return Scope::Out(Outside::Kernel(format!("it uses `{p}` probes")));
    }
    if kinds.contains(&"watchpoint") {
        return Scope::Out(Outside::NotInScope(
            "watchpoint probes are not among the README's in-scope probe types".into(),
        ));
    }
    Scope::In(if kinds.contains(&"usdt") {
        Group::Usdt
    } else if kinds.contains(&"uprobe") {
        Group::Uprobe
    } else {
        Group::Language
    })
}

/// One entry of `out_of_scope.txt`.
#[derive(Clone, Debug)]
pub struct Listed {
    /// `suite.name`.
    pub id: String,
    /// The reason as written.
    pub reason: String,
    /// Whether the reason is the kernel or PID namespaces (the test is then
    /// not counted); any other reason counts the test as failed.
    pub accepted: bool,
}

/// Reads `out_of_scope.txt`: `SUITE | NAME | REASON` lines, `#` comments.
/// A reason counts only when it starts with `the kernel:` or `PID namespaces:`.
pub fn read_listed(text: &str) -> Result<Vec<Listed>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.splitn(3, " | ").collect();
        let [suite, name, reason] = f[..] else {
            return Err(format!(
                "out_of_scope.txt:{}: expected `SUITE | NAME | REASON`",
                n + 1
            ));
        };
        let accepted = reason.starts_with("the kernel:") || reason.starts_with("PID namespaces:");
        out.push(Listed {
            id: format!("{suite}.{name}"),
            reason: reason.to_string(),
            accepted,
        });
    }
    Ok(out)
}
