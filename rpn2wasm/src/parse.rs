//! parse (front end, in progress).

use crate::{Options, SourceMap, ast, diag::Diagnostics};
use std::path::Path;

/// Front end on a file.
pub fn parse_file(
    _path: &Path,
    _opts: &Options,
) -> Result<(ast::Program, SourceMap), (Diagnostics, SourceMap)> {
    Err((Diagnostics::default(), SourceMap::default()))
}

/// Front end on in-memory text.
pub fn parse_text(
    _path: &Path,
    _text: Vec<u8>,
    _opts: &Options,
) -> Result<(ast::Program, SourceMap), (Diagnostics, SourceMap)> {
    Err((Diagnostics::default(), SourceMap::default()))
}
