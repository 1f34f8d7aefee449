//! The code of a stopped process as planning reads it: in chunks of
//! [`CHUNK`] bytes, each read once while the process stays stopped, the
//! bytes wprobe writes put in them (nothing else writes them while the
//! process is stopped), all forgotten when it runs.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Mutex;

/// Bytes of one chunk (python3.11's 20,000 windows in 3 MB of code: 50
/// reads rather than 20,000).
pub(super) const CHUNK: u64 = 64 << 10;

/// The chunks read, by address (each as long as it could be read).
#[derive(Debug, Default)]
pub(super) struct Chunks(Mutex<HashMap<u64, Vec<u8>>>);

impl Chunks {
    /// Fills `buf` with the bytes at `addr`, reading each chunk missing
    /// with `fill(chunk_address, chunk)` (the number of leading bytes it
    /// read); whether all of `buf` was there.
    pub(super) fn read(
        &self,
        addr: u64,
        buf: &mut [u8],
        fill: impl Fn(u64, &mut [u8]) -> usize,
    ) -> bool {
        let mut code = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = 0;
        while done < buf.len() {
            let Some(at) = addr.checked_add(done as u64) else {
                break;
            };
            let base = at & !(CHUNK - 1);
            let chunk = code.entry(base).or_insert_with(|| {
                let mut v = vec![0u8; CHUNK as usize];
                let n = fill(base, &mut v);
                v.truncate(n);
                v
            });
            let off = (at - base) as usize;
            let n = chunk.len().saturating_sub(off).min(buf.len() - done);
            if n == 0 {
                break;
            }
            buf[done..done + n].copy_from_slice(&chunk[off..off + n]);
            done += n;
        }
        done == buf.len()
    }

    /// Puts `data`, just written at `addr`, in the chunks read of those
    /// bytes.
    pub(super) fn written(&self, addr: u64, data: &[u8]) {
        let mut code = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if code.is_empty() || data.is_empty() {
            return;
        }
        let end = addr.saturating_add(data.len() as u64);
        let mut base = addr & !(CHUNK - 1);
        while base < end {
            if let Some(chunk) = code.get_mut(&base) {
                let lo = addr.max(base);
                let hi = end.min(base + chunk.len() as u64);
                if lo < hi {
                    let (c, d) = ((lo - base) as usize, (lo - addr) as usize);
                    let n = (hi - lo) as usize;
                    chunk[c..c + n].copy_from_slice(&data[d..d + n]);
                }
            }
            let Some(next) = base.checked_add(CHUNK) else {
                break;
            };
            base = next;
        }
    }

    /// Forgets the chunks of the `len` bytes at `addr`, or every chunk
    /// (`len` 0).
    pub(super) fn forget(&self, addr: u64, len: usize) {
        let mut code = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if len == 0 {
            code.clear();
            return;
        }
        let first = addr & !(CHUNK - 1);
        let last = addr.saturating_add(len as u64 - 1) & !(CHUNK - 1);
        code.retain(|&base, _| base < first || base > last);
    }
}
