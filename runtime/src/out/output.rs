//! Where records go, and what happens when they cannot go there. Records
//! reach their destination within [`FLUSH_INTERVAL`] (at once on a
//! terminal), so `tail -f` of an `-o` file follows a run and a killed
//! wprobe loses at most that much. A write that fails (a full disk, a
//! closed pipe) is never silent: the records it carried are counted as
//! lost, the first error is kept for the summary, and the run is asked to
//! stop (there is no point tracing into a destination that refuses data);
//! `wprobe run` then exits non-zero. Also [`elog!`](crate::elog): messages
//! to standard error that never panic when it is closed.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Longest time a written record may stay in wprobe's buffer.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Buffered bytes that trigger a write regardless of time.
const BUFFER_BYTES: usize = 64 << 10;

/// Writes of at most this many bytes to a pipe are atomic (POSIX PIPE_BUF).
const PIPE_BUF: usize = 4096;

struct Inner {
    dest: Box<dyn Write + Send>,
    buf: Vec<u8>,
    /// Records in `buf`.
    pending: u64,
    lost: u64,
    error: Option<std::io::Error>,
    stop: Option<Arc<AtomicBool>>,
    /// Nobody else writes to the destination: no cutting into pieces.
    whole: bool,
}

impl Inner {
    fn flush(&mut self) {
        if self.buf.is_empty() || self.error.is_some() {
            return;
        }
        // Whole lines, at most PIPE_BUF bytes per write where lines allow:
        // the traced command may write to the same pipe or file, and a
        // write of up to PIPE_BUF bytes is never interleaved with another.
        // A destination of wprobe's own takes the buffer in one write.
        let mut res = Ok(());
        let mut rest: &[u8] = &self.buf;
        while !rest.is_empty() && res.is_ok() {
            let cut = if self.whole || rest.len() <= PIPE_BUF {
                rest.len()
            } else {
                match rest[..PIPE_BUF].iter().rposition(|&b| b == b'\n') {
                    Some(i) => i + 1,
                    None => rest
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(rest.len(), |i| i + 1),
                }
            };
            res = self.dest.write_all(&rest[..cut]);
            rest = &rest[cut..];
        }
        let res = res.and_then(|()| self.dest.flush());
        self.buf.clear();
        match res {
            Ok(()) => self.pending = 0,
            Err(e) => {
                self.lost += std::mem::take(&mut self.pending);
                self.error = Some(e);
                if let Some(s) = &self.stop {
                    s.store(true, Ordering::SeqCst);
                }
            }
        }
    }
}

/// The record destination of a run. Records are appended to a buffer
/// (under an uncontended lock, no allocation once it has grown) and written
/// by a flusher thread every [`FLUSH_INTERVAL`], off the path of a hit; on
/// a terminal each batch is written at once.
pub struct RecordOut {
    inner: Arc<Mutex<Inner>>,
    immediate: bool,
    done: Arc<AtomicBool>,
    flusher: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RecordOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordOut")
            .field("immediate", &self.immediate)
            .finish()
    }
}

impl RecordOut {
    /// Records written to `dest`, within [`FLUSH_INTERVAL`].
    pub fn new(dest: Box<dyn Write + Send>) -> RecordOut {
        let inner = Arc::new(Mutex::new(Inner {
            dest,
            buf: Vec::with_capacity(BUFFER_BYTES),
            pending: 0,
            lost: 0,
            error: None,
            stop: None,
            whole: false,
        }));
        let done = Arc::new(AtomicBool::new(false));
        let (i, d) = (inner.clone(), done.clone());
        let flusher = std::thread::Builder::new()
            .name("wprobe-flush".into())
            .spawn(move || {
                while !d.load(Ordering::SeqCst) {
                    // Woken at once when the output is dropped (no exit
                    // waits up to an interval for the flusher).
                    std::thread::park_timeout(FLUSH_INTERVAL);
                    if let Ok(mut g) = i.lock() {
                        g.flush();
                    }
                }
            })
            .ok();
        RecordOut {
            inner,
            immediate: false,
            done,
            flusher,
        }
    }

    /// Writes every batch through at once (for a terminal).
    pub fn immediate(mut self, yes: bool) -> RecordOut {
        self.immediate = yes;
        self
    }

    /// The destination is wprobe's own (a file it created for `-o`), which
    /// nothing else writes to: what is buffered goes out in one write,
    /// not in pieces of at most PIPE_BUF bytes cut at line ends (they keep
    /// lines whole where the traced command writes to the same pipe or
    /// file; on a file of its own they only cost system calls and pages
    /// written in parts).
    pub fn whole_writes(self, yes: bool) -> RecordOut {
        if let Ok(mut g) = self.inner.lock() {
            g.whole = yes;
        }
        self
    }

    /// Sets `stop` when a write fails.
    pub fn stop_on_failure(self, stop: Arc<AtomicBool>) -> RecordOut {
        if let Ok(mut g) = self.inner.lock() {
            g.stop = Some(stop);
        }
        self
    }

    /// Queues the text of `records` records.
    pub fn write(&mut self, text: &[u8], records: u64) {
        let Ok(mut g) = self.inner.lock() else {
            return;
        };
        if g.error.is_some() {
            g.lost += records;
            return;
        }
        g.buf.extend_from_slice(text);
        g.pending += records;
        if self.immediate || g.buf.len() >= BUFFER_BYTES {
            g.flush();
        }
    }

    /// Writes what is buffered now.
    pub fn flush(&mut self) {
        if let Ok(mut g) = self.inner.lock() {
            g.flush();
        }
    }

    /// Records that could not be written, and why.
    pub fn lost(&self) -> Option<(u64, String)> {
        let g = self.inner.lock().ok()?;
        g.error.as_ref().map(|e| (g.lost, e.to_string()))
    }
}

impl Drop for RecordOut {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        self.flush();
        if let Some(t) = self.flusher.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Writes a command's result to standard output. A reader that went away
/// (`wprobe list | head`) is not an error: the rest is not wanted. Any
/// other failure is returned.
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `eprintln!` that ignores a closed or failing standard error (a tool must
/// not panic because its diagnostics cannot be shown), writing each message
/// with one system call.
#[macro_export]
macro_rules! elog {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut s = format!($($arg)*);
        s.push('\n');
        let _ = std::io::stderr().lock().write_all(s.as_bytes());
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn failed_writes_count_every_record_and_ask_to_stop() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut o = RecordOut::new(Box::new(Full)).stop_on_failure(stop.clone());
        o.write(b"a\nb\n", 2);
        o.write(b"c\n", 1);
        o.flush();
        o.write(b"d\n", 1);
        o.flush();
        let (n, e) = o.lost().unwrap();
        assert_eq!(n, 4);
        assert_eq!(
            e,
            std::io::Error::from_raw_os_error(libc::ENOSPC).to_string()
        );
        assert!(stop.load(Ordering::SeqCst));
    }

    struct Writes(Arc<Mutex<Vec<Vec<u8>>>>);
    impl Write for Writes {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().push(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_are_whole_lines_of_at_most_pipe_buf_bytes() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut o = RecordOut::new(Box::new(Writes(seen.clone())));
        let line = format!("{}\n", "x".repeat(99));
        for _ in 0..300 {
            o.write(line.as_bytes(), 1);
        }
        o.write(format!("{}\n", "y".repeat(5000)).as_bytes(), 1);
        o.flush();
        let writes = seen.lock().unwrap();
        let total: usize = writes.iter().map(Vec::len).sum();
        assert_eq!(total, 300 * 100 + 5001);
        for w in writes.iter() {
            assert!(w.ends_with(b"\n"));
            assert!(
                w.len() <= PIPE_BUF || !w[..w.len() - 1].contains(&b'\n'),
                "{}",
                w.len()
            );
        }
    }

    #[test]
    fn a_destination_of_its_own_takes_the_buffer_in_one_write() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut o = RecordOut::new(Box::new(Writes(seen.clone()))).whole_writes(true);
        let line = format!("{}\n", "x".repeat(99));
        for _ in 0..300 {
            o.write(line.as_bytes(), 1);
        }
        o.flush();
        let writes = seen.lock().unwrap();
        assert_eq!(writes.iter().map(Vec::len).collect::<Vec<_>>(), [300 * 100]);
    }
}
