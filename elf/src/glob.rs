//! Shell-style name patterns (`*` any run, `?` one character), as
//! `wprobe list`, `wprobe trace -F` and bpftrace's probe wildcards use them.

/// Whether `name` matches `pattern`.
pub fn glob(pattern: &str, name: &str) -> bool {
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
    }
}
