//! Symbol lookup for symbolic expressions (spec §2.7): exact match first,
//! then a unique case-insensitive match. (Skeleton: the front end completes it.)

/// Why a symbol could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymbolError {
    /// No symbol of that name (even case-insensitively).
    Unknown,
    /// Several symbols match case-insensitively and none exactly.
    Ambiguous(Vec<String>),
    /// The module file could not be read or parsed (message says why).
    Module(String),
}

/// A source of ELF symbols: `st_value` by name.
pub trait Symbols {
    /// Looks a symbol up; returns its exact name and `st_value`.
    fn lookup(&self, name: &str) -> Result<(String, u64), SymbolError>;
}
