//! A module file's bytes: the file mapped read-only, or read into memory
//! (a file that cannot be mapped, and bytes given rather than read).
//! Mapped, a 7 MB executable costs only the pages parsing and planning
//! touch, shared with the page cache, rather than a copy of all of it.

use std::fs::File;
use std::ops::Deref;

/// A module file's bytes.
#[derive(Debug)]
pub(crate) enum FileBytes {
    /// The file mapped (private, read-only).
    Mapped(memmap2::Mmap),
    /// The bytes read or given.
    Read(Vec<u8>),
}

impl FileBytes {
    /// `file` (of `len` bytes) mapped; `None` when it cannot be (an empty
    /// file, a file system that does not map).
    pub(crate) fn map(file: &File, len: u64) -> Option<FileBytes> {
        if len == 0 {
            return None;
        }
        #[expect(
            unsafe_code,
            reason = "mapping a file: sound while no one truncates it (see below)"
        )]
        // SAFETY: the mapping is private and read-only, and wprobe never
        // writes module files. What `memmap2` cannot rule out is another
        // process truncating or writing the file while it is mapped: the
        // bytes would change under the slices handed out, or reading past
        // the new end would fault. Module files are the code processes run
        // (they map the same files: an in-place rewrite breaks them
        // first); package managers replace them by renaming a new file
        // over the old, which leaves this mapping on the old one.
        let m = unsafe { memmap2::MmapOptions::new().len(len as usize).map(file) };
        m.ok().map(FileBytes::Mapped)
    }
}

impl Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Read(v) => v,
        }
    }
}
