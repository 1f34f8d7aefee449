//! Quantities with units as the command line writes them (`10us`, `2m`,
//! `1.5s`).

/// A duration argument (`--min-duration 10us`, `--metrics-linger 2m`) cut
/// into its number (digits and `.`) and its unit (trimmed; empty when
/// none), for the option's own units and messages.
pub(crate) fn number_and_unit(s: &str) -> (&str, &str) {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    (num, unit.trim())
}
