//! Where the text views write: standard output or `-o FILE` (buffered and
//! flushed as `wprobe run`'s records are: [`crate::out::output::RecordOut`]),
//! or with `--ff` one file per thread, `FILE.TID`. A write that fails is
//! counted (lines lost) and reported at the end, never silent; the run is
//! asked to stop, as there is no point tracing into a destination that
//! refuses data.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::out::output::RecordOut;

/// Bytes of lines gathered before they go to a single destination at once.
pub const BATCH_BYTES: usize = 16 << 10;

/// The text destination of a run. A view formats its lines into a buffer
/// of its own and gives it here after each line ([`TextOut::line_in`]);
/// for a single destination the lines are left there and handed on in
/// batches (each write to it takes a lock: once per line, that was a tenth
/// of a traced call's cost to wprobe), at [`BATCH_BYTES`], at the
/// session's tick and at the end ([`TextOut::hand_on`]); at once on a
/// terminal and with `--ff`.
pub struct TextOut {
    main: Option<RecordOut>,
    /// Lines left in the view's buffer, not handed on yet.
    batch_lines: u64,
    immediate: bool,
    per_thread: Option<PerThread>,
    stop: Arc<AtomicBool>,
    /// A header written at the top of each per-thread file.
    header: String,
}

struct PerThread {
    base: PathBuf,
    files: HashMap<i32, std::io::BufWriter<std::fs::File>>,
    lost: u64,
    error: Option<String>,
}

impl TextOut {
    /// Lines to `dest` (`immediate`: written at once, for a terminal).
    pub fn single(dest: Box<dyn Write + Send>, immediate: bool, stop: Arc<AtomicBool>) -> TextOut {
        Self::to(RecordOut::new(dest).immediate(immediate), immediate, stop)
    }

    /// Lines to `file`, created by wprobe for them (`-o FILE`): nothing
    /// else writes there, so batches go out whole
    /// ([`RecordOut::whole_writes`]).
    pub fn file(file: std::fs::File, stop: Arc<AtomicBool>) -> TextOut {
        Self::to(
            RecordOut::new(Box::new(file)).whole_writes(true),
            false,
            stop,
        )
    }

    fn to(out: RecordOut, immediate: bool, stop: Arc<AtomicBool>) -> TextOut {
        TextOut {
            main: Some(out.stop_on_failure(stop.clone())),
            batch_lines: 0,
            immediate,
            per_thread: None,
            stop,
            header: String::new(),
        }
    }

    /// Lines of thread TID to `base.TID` (`--ff`).
    pub fn per_thread(base: PathBuf, stop: Arc<AtomicBool>) -> TextOut {
        TextOut {
            main: None,
            batch_lines: 0,
            immediate: false,
            per_thread: Some(PerThread {
                base,
                files: HashMap::new(),
                lost: 0,
                error: None,
            }),
            stop,
            header: String::new(),
        }
    }

    /// Whether each thread has its own file.
    pub fn is_per_thread(&self) -> bool {
        self.per_thread.is_some()
    }

    /// Writes `header` first: at once to a single destination, at the top
    /// of each file with `--ff`.
    pub fn set_header(&mut self, header: &str) {
        if let Some(m) = &mut self.main {
            m.write(header.as_bytes(), 0);
        } else {
            self.header = header.to_string();
        }
    }

    /// A line of thread `tid` was appended to `buf` (which holds nothing
    /// else but lines left there before): written now, or left there for
    /// the next batch.
    pub fn line_in(&mut self, tid: i32, buf: &mut String) {
        if self.main.is_some() && !self.immediate {
            self.batch_lines += 1;
            if buf.len() >= BATCH_BYTES {
                self.hand_on(buf);
            }
            return;
        }
        self.lines(tid, buf, 1);
        buf.clear();
    }

    /// Hands the lines left in `buf` to the single destination (which
    /// writes them within [`crate::out::output::FLUSH_INTERVAL`]), and empties it.
    pub fn hand_on(&mut self, buf: &mut String) {
        if let Some(m) = &mut self.main
            && !buf.is_empty()
        {
            m.write(buf.as_bytes(), self.batch_lines);
            buf.clear();
            self.batch_lines = 0;
        }
    }

    /// Writes whole lines of thread `tid` at once.
    pub fn lines(&mut self, tid: i32, text: &str, lines: u64) {
        if let Some(m) = &mut self.main {
            m.write(text.as_bytes(), lines);
            return;
        }
        let Some(pt) = &mut self.per_thread else {
            return;
        };
        if pt.error.is_some() {
            pt.lost += lines;
            return;
        }
        let res = match pt.files.entry(tid) {
            std::collections::hash_map::Entry::Occupied(e) => {
                e.into_mut().write_all(text.as_bytes())
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                let mut name = pt.base.clone().into_os_string();
                name.push(format!(".{tid}"));
                match std::fs::File::create(&name) {
                    Ok(f) => {
                        let w = v.insert(std::io::BufWriter::new(f));
                        w.write_all(self.header.as_bytes())
                            .and_then(|()| w.write_all(text.as_bytes()))
                    }
                    Err(e) => Err(std::io::Error::new(
                        e.kind(),
                        format!("creating {}: {e}", PathBuf::from(name).display()),
                    )),
                }
            }
        };
        if let Err(e) = res {
            pt.lost += lines;
            pt.error = Some(e.to_string());
            self.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Writes everything out (a view hands on its lines first); lines that
    /// could not be written, and why.
    pub fn finish(&mut self) -> Option<(u64, String)> {
        if let Some(m) = &mut self.main {
            m.flush();
            return m.lost();
        }
        let pt = self.per_thread.as_mut()?;
        for w in pt.files.values_mut() {
            if let Err(e) = w.flush()
                && pt.error.is_none()
            {
                pt.error = Some(e.to_string());
            }
        }
        pt.error.clone().map(|e| (pt.lost, e))
    }
}
