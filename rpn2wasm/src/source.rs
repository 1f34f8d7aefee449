//! Source files and spans. Spans are byte offsets into one original file
//! (before preprocessing); line and column are computed only when a
//! diagnostic is rendered.

use std::path::PathBuf;

/// Index of a file in a [`SourceMap`].
pub type FileId = u32;

/// A byte range `lo..hi` of file `file`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// The file.
    pub file: FileId,
    /// First byte.
    pub lo: u32,
    /// One past the last byte.
    pub hi: u32,
}

/// One source file as read from disk (or given in memory).
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Path as given or resolved (used in diagnostics).
    pub path: PathBuf,
    /// The raw bytes (may be invalid UTF-8; that is diagnosed, not assumed away).
    pub bytes: Vec<u8>,
}

/// All files read for one compilation: the main file is file 0, then every include.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    /// Files by id.
    pub files: Vec<SourceFile>,
}

impl SourceMap {
    /// Adds a file and returns its id.
    pub fn add(&mut self, path: PathBuf, bytes: Vec<u8>) -> FileId {
        self.files.push(SourceFile { path, bytes });
        (self.files.len() - 1) as FileId
    }

    /// 1-based line and column of a byte offset: columns count characters
    /// (a tab is one column, a CR before LF is not part of the line).
    pub fn line_col(&self, file: FileId, offset: u32) -> (u32, u32) {
        let Some(f) = self.files.get(file as usize) else {
            return (1, 1);
        };
        let end = (offset as usize).min(f.bytes.len());
        let before = &f.bytes[..end];
        let line = before.iter().filter(|b| **b == b'\n').count() as u32 + 1;
        let start = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |p| p + 1);
        let col = String::from_utf8_lossy(&before[start..]).chars().count() as u32 + 1;
        (line, col)
    }

    /// The text of the line holding `offset`, without its line terminator.
    pub fn line_text(&self, file: FileId, offset: u32) -> String {
        let Some(f) = self.files.get(file as usize) else {
            return String::new();
        };
        let off = (offset as usize).min(f.bytes.len());
        let start = f.bytes[..off]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |p| p + 1);
        let end = f.bytes[off..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(f.bytes.len(), |p| off + p);
        let line = &f.bytes[start..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        String::from_utf8_lossy(line).into_owned()
    }
}
