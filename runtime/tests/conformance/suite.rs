//! The suite's test files, read as bpftrace's runtime-test engine reads
//! them (`upstream-tests-README.md`): one file per suite, tests separated
//! by blank lines, `#` lines ignored, one directive per line, and `PROG`,
//! `EXPECT`, `EXPECT_REGEX` continued on lines indented past the
//! directive's name.

use std::path::Path;

/// bpftrace's default `TIMEOUT` (seconds).
pub const DEFAULT_TIMEOUT_S: u64 = 5;

/// How an expectation is matched against the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `EXPECT`: a whole line, surrounding whitespace ignored.
    Text,
    /// `EXPECT_NONE`: no such line.
    TextNone,
    /// `EXPECT_REGEX`: a (Python) regular expression, multi-line mode.
    Regex,
    /// `EXPECT_REGEX_NONE`: no match.
    RegexNone,
    /// `EXPECT_FILE`: the whole output, trimmed, equals the file's text.
    File,
    /// `EXPECT_JSON`: the output parsed as JSON (lines for `.ndjson`).
    Json,
}

/// One expectation.
#[derive(Clone, Debug)]
pub struct Expect {
    /// The text, pattern or file path (relative to the suite's root).
    pub what: String,
    /// How it is matched.
    pub mode: Mode,
}

/// One test case.
#[derive(Clone, Debug, Default)]
pub struct Test {
    /// Its suite (the file name).
    pub suite: String,
    /// `NAME`.
    pub name: String,
    /// `RUN`: a shell command with `{{BPFTRACE}}` and `{{BEFORE_PID}}`.
    pub run: Option<String>,
    /// `PROG`: a program run as `bpftrace -e PROG`.
    pub prog: Option<String>,
    /// The expectations.
    pub expects: Vec<Expect>,
    /// `EXPECT_FILE` or `EXPECT_JSON`: output before the probes are
    /// attached is dropped.
    pub exact: bool,
    /// `TIMEOUT` (seconds).
    pub timeout_s: u64,
    /// `BEFORE` commands (run while the program runs).
    pub befores: Vec<String>,
    /// `AFTER`: a shell command started once the probes are attached.
    pub after: Option<String>,
    /// `SETUP`.
    pub setup: Option<String>,
    /// `CLEANUP`.
    pub cleanup: Option<String>,
    /// `REQUIRES` commands (all must succeed, else the test is skipped).
    pub requires: Vec<String>,
    /// `REQUIRES_FEATURE` (a `!` prefix: must be absent).
    pub features: Vec<String>,
    /// `ENV` assignments.
    pub env: Vec<(String, String)>,
    /// `ARCH` (empty: any).
    pub arch: Vec<String>,
    /// `WILL_FAIL`: the exit status is not checked.
    pub will_fail: bool,
    /// `NEW_PIDNS`.
    pub new_pidns: bool,
    /// `SKIP_IF_ENV_HAS KEY=VALUE`.
    pub skip_if_env_has: Option<(String, String)>,
    /// `RETURN_CODE` (default 0).
    pub return_code: i32,
    /// `MIN_KERNEL`, `MAX_KERNEL`.
    pub kernel_range: (Option<String>, Option<String>),
}

impl Test {
    /// `suite.name`, as bpftrace's runner names a test.
    pub fn id(&self) -> String {
        format!("{}.{}", self.suite, self.name)
    }
}

/// The tests of one suite file; an error names the file and the test.
pub fn read_file(path: &Path) -> Result<Vec<Test>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let suite = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tests = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with('#') {
            continue;
        }
        let blank = *line == "\n";
        if !blank {
            block.push(line);
        }
        if (blank || i + 1 == lines.len()) && !block.is_empty() {
            let t = read_test(&block, &suite).map_err(|e| format!("{}: {e}", path.display()))?;
            if t.arch.is_empty() || t.arch.iter().any(|a| a == std::env::consts::ARCH) {
                tests.push(t);
            }
            block.clear();
        }
    }
    Ok(tests)
}

fn read_test(lines: &[&str], suite: &str) -> Result<Test, String> {
    let mut t = Test {
        suite: suite.to_string(),
        timeout_s: DEFAULT_TIMEOUT_S,
        ..Test::default()
    };
    let mut prev = String::new();
    let mut timeout = None;
    for raw in lines {
        let item = raw.strip_suffix('\n').unwrap_or(raw);
        // A line indented past the previous directive's name continues it.
        let indent = prev.len() + 1;
        if !prev.is_empty()
            && item.len() >= indent
            && item.as_bytes()[..indent]
                .iter()
                .all(u8::is_ascii_whitespace)
        {
            let rest = &item[indent..];
            match prev.as_str() {
                "PROG" => {
                    let p = t.prog.get_or_insert_with(String::new);
                    p.push('\n');
                    p.push_str(rest);
                    continue;
                }
                "EXPECT" | "EXPECT_REGEX" => {
                    if let Some(e) = t.expects.last_mut() {
                        e.what.push('\n');
                        e.what.push_str(rest);
                    }
                    continue;
                }
                _ => {}
            }
        }
        let trimmed = item.trim();
        let (name, value) = match trimmed.split_once(char::is_whitespace) {
            Some((n, v)) => (n, v.trim_start().to_string()),
            None => (trimmed, String::new()),
        };
        prev = name.to_string();
        let expect = |mode| Expect {
            what: value.clone(),
            mode,
        };
        match name {
            "NAME" => t.name = value,
            "RUN" => t.run = Some(value),
            "PROG" => t.prog = Some(value),
            "EXPECT" => t.expects.push(expect(Mode::Text)),
            "EXPECT_NONE" => t.expects.push(expect(Mode::TextNone)),
            "EXPECT_REGEX" => t.expects.push(expect(Mode::Regex)),
            "EXPECT_REGEX_NONE" => t.expects.push(expect(Mode::RegexNone)),
            "EXPECT_FILE" => {
                t.exact = true;
                t.expects.push(expect(Mode::File));
            }
            "EXPECT_JSON" => {
                t.exact = true;
                t.expects.push(expect(Mode::Json));
            }
            "TIMEOUT" => {
                timeout = Some(
                    value
                        .trim()
                        .parse::<u64>()
                        .map_err(|_| format!("bad TIMEOUT `{value}`"))?,
                )
            }
            "BEFORE" => t.befores.push(value),
            "AFTER" => t.after = Some(value),
            "SETUP" => t.setup = Some(value),
            "CLEANUP" => t.cleanup = Some(value),
            "MIN_KERNEL" => t.kernel_range.0 = Some(value),
            "MAX_KERNEL" => t.kernel_range.1 = Some(value),
            "REQUIRES" => t.requires.push(value),
            "ENV" => {
                for kv in value.split_whitespace() {
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| format!("bad ENV `{kv}`"))?;
                    t.env.push((k.to_string(), v.to_string()));
                }
            }
            "ARCH" => t.arch = value.split('|').map(|a| a.trim().to_string()).collect(),
            "REQUIRES_FEATURE" => t
                .features
                .extend(value.split(' ').filter(|f| !f.is_empty()).map(String::from)),
            "WILL_FAIL" => t.will_fail = true,
            "NEW_PIDNS" => t.new_pidns = true,
            "SKIP_IF_ENV_HAS" => {
                let (k, v) = value.split_once('=').unwrap_or((value.as_str(), ""));
                t.skip_if_env_has = Some((k.to_string(), v.to_string()));
            }
            "RETURN_CODE" => {
                t.return_code = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad RETURN_CODE `{value}`"))?
            }
            other => return Err(format!("unknown directive `{other}` in test `{}`", t.name)),
        }
    }
    if t.name.is_empty() {
        return Err("a test without NAME".into());
    }
    if t.run.is_some() == t.prog.is_some() {
        return Err(format!(
            "test `{}` needs exactly one of RUN and PROG",
            t.name
        ));
    }
    if let Some(s) = timeout {
        t.timeout_s = s;
    }
    Ok(t)
}

/// Every suite file of `dir` (its `runtime/` folder), sorted by name.
pub fn read_all(dir: &Path) -> Result<Vec<Test>, String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            !p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    let mut all = Vec::new();
    for f in files {
        all.extend(read_file(&f)?);
    }
    Ok(all)
}
