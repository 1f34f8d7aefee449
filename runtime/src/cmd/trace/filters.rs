//! The options that choose which calls are shown: `-F` and `-N` (which
//! functions they name, the later of the two counting for a function both
//! name) and `--min-duration`.

use super::funcs::Func;

/// A `-F` or `-N` pattern, with its place among them on the command line
/// (uftrace's rule: of a `-F` and a `-N` naming one function, the later
/// one counts).
#[derive(Clone, Debug)]
pub struct OrderedGlob {
    /// The pattern.
    pub glob: String,
    /// Its place among the `-F` and `-N` patterns.
    pub seq: usize,
}

/// clap parses the values of `-F` and `-N` in their command-line order:
/// a count taken as each is parsed is their order.
pub(super) fn ordered_glob(s: &str) -> Result<OrderedGlob, String> {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    Ok(OrderedGlob {
        glob: s.to_string(),
        seq: SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    })
}

/// Per function, the place of the last glob matching its symbol or its
/// shown name; empty without globs; an error when none matches.
fn matching(
    funcs: &[Func],
    globs: &[OrderedGlob],
    option: &str,
) -> Result<Vec<Option<usize>>, String> {
    if globs.is_empty() {
        return Ok(Vec::new());
    }
    let hits: Vec<Option<usize>> = funcs
        .iter()
        .map(|f| {
            globs
                .iter()
                .filter(|g| f.matches(&g.glob))
                .map(|g| g.seq)
                .max()
        })
        .collect();
    if !hits.iter().any(Option::is_some) {
        let sep = format!(" {option} ");
        let names: Vec<&str> = globs.iter().map(|g| g.glob.as_str()).collect();
        return Err(format!(
            "{option} {}: no traced function matches",
            names.join(&sep)
        ));
    }
    Ok(hits)
}

/// Per function, whether `-F` names it and whether `-N` does: a function
/// both name counts as named by the later option only.
pub(super) fn filter_and_notrace(
    funcs: &[Func],
    filter: &[OrderedGlob],
    notrace: &[OrderedGlob],
) -> Result<(Vec<bool>, Vec<bool>), String> {
    let f = matching(funcs, filter, "-F")?;
    let n = matching(funcs, notrace, "-N")?;
    let at = |v: &[Option<usize>], i: usize| v.get(i).copied().flatten();
    let filter_hit = (0..f.len())
        .map(|i| at(&f, i).is_some_and(|s| at(&n, i).is_none_or(|t| s > t)))
        .collect();
    let notrace_hit = (0..n.len())
        .map(|i| at(&n, i).is_some_and(|t| at(&f, i).is_none_or(|s| t > s)))
        .collect();
    Ok((filter_hit, notrace_hit))
}

/// `--min-duration`: `NUMBER[ns|us|ms|s]` (fractions allowed) in ns.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let (num, unit) = crate::out::units::number_and_unit(s);
    let scale: f64 = match unit {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => {
            return Err(format!(
                "--min-duration {s}: unknown unit (ns, us, ms or s)"
            ));
        }
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("--min-duration {s}: not a duration such as 10us"))?;
    Ok((v * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500"), Ok(500));
        assert_eq!(parse_duration("10us"), Ok(10_000));
        assert_eq!(parse_duration("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_duration("2s"), Ok(2_000_000_000));
        assert!(parse_duration("2h").is_err());
        assert!(parse_duration("ms").is_err());
    }
}
