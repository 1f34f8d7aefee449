//! codegen (in progress).

use crate::ast::Program;
use hostabi::manifest::Manifest;

/// Generates the module.
pub fn generate(_program: &Program, _manifest: &Manifest) -> Vec<u8> {
    Vec::new()
}
