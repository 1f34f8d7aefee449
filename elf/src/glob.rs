//! Shell-style name patterns (`*` any run, `?` one character), as
//! `wprobe list`, `wprobe trace -F` and bpftrace's probe wildcards use them.

/// Whether `name` matches `pattern`. Allocates nothing: `wprobe trace`
/// tests every `-F`/`-X` pattern against every name of every function.
pub fn glob(pattern: &str, name: &str) -> bool {
    if !has_wildcard(pattern) {
        return pattern == name;
    }
    let at = |s: &str, i: usize| s[i..].chars().next();
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while let Some(d) = at(name, ni) {
        match at(pattern, pi) {
            Some(c) if c == '?' || c == d => {
                pi += c.len_utf8();
                ni += d.len_utf8();
            }
            Some('*') => {
                star = Some(pi);
                mark = ni;
                pi += 1;
            }
            _ => match star {
                Some(s) => {
                    pi = s + 1;
                    mark += at(name, mark).map_or(1, char::len_utf8);
                    ni = mark;
                }
                None => return false,
            },
        }
    }
    pattern[pi..].bytes().all(|c| c == b'*')
}

/// Patterns tested together: those without a wildcard looked up in a
/// hash set, the others tried one by one (`wprobe trace` given hundreds
/// of `-X NAME`, tested against every name of ten thousand functions).
#[derive(Clone, Debug, Default)]
pub struct GlobSet {
    exact: std::collections::HashSet<String>,
    wild: Vec<String>,
}

impl GlobSet {
    /// The set of `patterns`.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> GlobSet {
        let mut set = GlobSet::default();
        for p in patterns.iter().map(AsRef::as_ref) {
            if has_wildcard(p) {
                set.wild.push(p.to_string());
            } else {
                set.exact.insert(p.to_string());
            }
        }
        set
    }

    /// Whether one of the patterns matches `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.exact.contains(name) || self.wild.iter().any(|p| glob(p, name))
    }

    /// Whether there is no pattern.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wild.is_empty()
    }
}

/// Whether `pattern` has a wildcard (otherwise it names one thing).
pub fn has_wildcard(pattern: &str) -> bool {
    pattern.contains(['*', '?'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("f*", "foo"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(!glob("a*b", "ab c"));
        assert!(glob("ma?loc", "malloc"));
        assert!(!glob("ma?loc", "maloc"));
        assert!(glob("*_fn", "target_fn"));
        assert!(glob("*alloc", "calloc"));
        assert!(!glob("m?lloc", "mallloc"));
        assert!(!glob("free", "freeze"));
        assert!(!glob("", "x"));
        assert!(has_wildcard("a*") && has_wildcard("a?") && !has_wildcard("abc"));
        assert!(glob("?é*", "xéz") && !glob("??", "é") && glob("?", "é"));
    }

    /// The rule before it stopped allocating, as the reference.
    fn reference(pattern: &str, name: &str) -> bool {
        let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
        let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
        while ni < n.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
                pi += 1;
                ni += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some(pi);
                mark = ni;
                pi += 1;
            } else if let Some(s) = star {
                pi = s + 1;
                mark += 1;
                ni = mark;
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }

    #[test]
    fn a_set_matches_as_its_patterns_one_by_one() {
        let set = GlobSet::new(&["main", "f*", "g?", "é"]);
        for name in ["main", "foo", "f", "gx", "g", "é", "mainx", "xf", ""] {
            let one = ["main", "f*", "g?", "é"].iter().any(|p| glob(p, name));
            assert_eq!(set.matches(name), one, "{name}");
        }
        assert!(GlobSet::new::<&str>(&[]).is_empty() && !set.is_empty());
    }

    #[test]
    fn every_short_pattern_and_name_as_the_reference() {
        let alphabet = ['a', 'b', '*', '?', 'é'];
        let strings = |max: usize| {
            let mut all = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..max {
                last = last
                    .iter()
                    .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                    .collect();
                all.extend(last.iter().cloned());
            }
            all
        };
        let (patterns, names) = (strings(4), strings(4));
        let mut n = 0;
        for p in &patterns {
            for s in &names {
                assert_eq!(glob(p, s), reference(p, s), "{p:?} {s:?}");
                n += 1;
            }
        }
        assert_eq!(n, 781 * 781);
    }
}
