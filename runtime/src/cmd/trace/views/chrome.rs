//! `--chrome FILE`: the calls as Chrome trace events (the JSON object form
//! with `traceEvents`), which Perfetto UI and `chrome://tracing` open: a
//! `B` event at each entry and an `E` event at each exit, per thread
//! (`pid`, `tid`), timestamps in microseconds from the start of the trace.
//! A call left without returning ends with an `E` event whose `args` say
//! so. Written as the trace goes (a buffered file), closed at the end.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::super::tree::{How, Step, StepKind};
use super::{Table, View};

/// The Chrome trace-event view.
pub struct ChromeView {
    funcs: Table,
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    base_ns: u64,
    first: bool,
    buf: String,
    error: Option<String>,
}

impl ChromeView {
    /// Creates `path`; times are counted from `base_ns` (ns since the epoch).
    pub fn create(funcs: Table, path: &Path, base_ns: u64) -> Result<ChromeView, String> {
        let f =
            std::fs::File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        let mut v = ChromeView {
            funcs,
            path: path.to_path_buf(),
            file: std::io::BufWriter::new(f),
            base_ns,
            first: true,
            buf: String::with_capacity(256),
            error: None,
        };
        v.put("{\"traceEvents\":[\n");
        Ok(v)
    }

    fn put(&mut self, s: &str) {
        if self.error.is_none()
            && let Err(e) = self.file.write_all(s.as_bytes())
        {
            self.error = Some(e.to_string());
        }
    }

    fn event(&mut self, s: &Step, ph: char, args: Option<&str>) {
        self.buf.clear();
        if !self.first {
            self.buf.push_str(",\n");
        }
        self.first = false;
        self.buf.push_str("{\"name\":");
        let name = self
            .funcs
            .get(s.func as usize)
            .map_or("?", |f| f.shown.as_str());
        crate::out::format::json_string(&mut self.buf, name.as_bytes());
        let t = s.time_ns.saturating_sub(self.base_ns);
        let _ = write!(
            self.buf,
            ",\"cat\":\"function\",\"ph\":\"{ph}\",\"ts\":{}.{:03},\"pid\":{},\"tid\":{}",
            t / 1000,
            t % 1000,
            s.th.pid,
            s.th.tid
        );
        if let Some(a) = args {
            self.buf.push_str(",\"args\":{\"exit\":");
            crate::out::format::json_string(&mut self.buf, a.as_bytes());
            self.buf.push('}');
        }
        self.buf.push('}');
        let b = std::mem::take(&mut self.buf);
        self.put(&b);
        self.buf = b;
    }
}

impl View for ChromeView {
    fn step(&mut self, s: &Step) {
        match &s.kind {
            StepKind::Enter { .. } => self.event(s, 'B', None),
            StepKind::Exit { how, .. } => {
                let why = match how {
                    How::Returned => None,
                    How::Unwound(c) => Some(c.describe()),
                    How::Running => Some("still running"),
                };
                self.event(s, 'E', why);
            }
            StepKind::Note { .. } => {}
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        self.put("\n],\"displayTimeUnit\":\"ns\"}\n");
        if self.error.is_none()
            && let Err(e) = self.file.flush()
        {
            self.error = Some(e.to_string());
        }
        match &self.error {
            Some(e) => Err(format!("writing {}: {e}", self.path.display())),
            None => Ok(()),
        }
    }
}
