//! The paths into the crate that a Rust source file names, read as the
//! compiler resolves them: `crate::a::b`, grouped uses (`use
//! crate::{a::{b, c}, d as e}`), `super::` chains (inline `mod` blocks
//! counted), `$crate::` in macros; comments, strings and character
//! literals are not code and are skipped. What `layers.rs` checks the
//! stages of `runtime/src` with.

/// One path into the crate: where it is written and what it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CratePath {
    /// The line it is written on (1-based).
    pub line: usize,
    /// Its segments from the crate root (`super`s resolved, a group's
    /// `self` dropped, a glob's `*` not kept).
    pub segments: Vec<String>,
}

impl CratePath {
    /// The path as written from the root: `crate::a::b`.
    pub fn text(&self) -> String {
        format!("crate::{}", self.segments.join("::"))
    }
}

/// The text of a Rust source with its comments, string literals and
/// character literals blanked (newlines kept, so lines still count).
pub fn code_of(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        let skipped = if rest.starts_with("//") {
            rest.find('\n').unwrap_or(rest.len())
        } else if rest.starts_with("/*") {
            block_comment_len(rest)
        } else if let Some(n) = raw_string_len(src, i) {
            n
        } else if rest.starts_with('"') {
            string_len(rest)
        } else if rest.starts_with('\'') {
            char_literal_len(rest).unwrap_or(0)
        } else {
            0
        };
        if skipped == 0 {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        } else {
            out.extend(rest[..skipped].chars().filter(|&c| c == '\n'));
            out.push(' ');
            i += skipped;
        }
    }
    out
}

/// The length of the block comment at the start of `s` (they nest).
fn block_comment_len(s: &str) -> usize {
    let mut depth = 0;
    let mut i = 0;
    while i < s.len() {
        if s[i..].starts_with("/*") {
            depth += 1;
            i += 2;
        } else if s[i..].starts_with("*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += s[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    s.len()
}

/// The length of the string literal (`"…"`, escapes honoured) at the
/// start of `s`.
fn string_len(s: &str) -> usize {
    let b = s.as_bytes();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The length of the raw string (`r"…"`, `r#"…"#`, `br#"…"#`) starting at
/// `i` of `src`, if one does.
fn raw_string_len(src: &str, i: usize) -> Option<usize> {
    let b = src.as_bytes();
    let ident = |k: usize| b[k].is_ascii_alphanumeric() || b[k] == b'_';
    let start = match b[i] {
        b'r' if i == 0 || !ident(i - 1) => i + 1,
        b'b' if b.get(i + 1) == Some(&b'r') && (i == 0 || !ident(i - 1)) => i + 2,
        _ => return None,
    };
    let hashes = b[start..].iter().take_while(|&&c| c == b'#').count();
    if b.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let close = format!("\"{}", "#".repeat(hashes));
    let body = start + hashes + 1;
    let end = src[body..]
        .find(&close)
        .map_or(src.len(), |k| body + k + close.len());
    Some(end - i)
}

/// The length of the character literal (`'a'`, `'\n'`, `'\u{41}'`) at the
/// start of `s`, or `None` for a lifetime or a label (`'a`).
fn char_literal_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices().skip(1);
    let (_, c) = chars.next()?;
    if c == '\\' {
        // The escaped character, then up to the closing quote.
        return s.get(3..)?.find('\'').map(|k| k + 4);
    }
    let (k, close) = chars.next()?;
    (close == '\'').then_some(k + 1)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The paths into the crate that `src` names, in the file whose module
/// path is `module` (`["transport", "inproc"]` for
/// `transport/inproc.rs`).
pub fn crate_paths(src: &str, module: &[&str]) -> Vec<CratePath> {
    let code = code_of(src);
    let b = code.as_bytes();
    let mut out = Vec::new();
    // The inline `mod NAME {` blocks open at `i`, with the brace depth
    // each opened at.
    let mut inline: Vec<(String, i64)> = Vec::new();
    let mut depth: i64 = 0;
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\n' => line += 1,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
            }
            _ => {}
        }
        let word_start = i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b':');
        if !word_start {
            i += 1;
            continue;
        }
        let Some(rest) = code.get(i..) else {
            // Inside a multi-byte character.
            i += 1;
            continue;
        };
        if let Some(name) = inline_mod(rest) {
            inline.push((name, depth));
            depth += 1;
            let open = i + rest.find('{').unwrap_or(0);
            line += code[i..open].matches('\n').count();
            i = open + 1;
            continue;
        }
        if !(rest.starts_with("crate::")
            || rest.starts_with("$crate::")
            || rest.starts_with("super::"))
        {
            i += 1;
            continue;
        }
        let here: Vec<&str> = module
            .iter()
            .copied()
            .chain(inline.iter().map(|(n, _)| n.as_str()))
            .collect();
        let Some((base, after)) = path_start(rest, &here) else {
            i += 1;
            continue;
        };
        let mut end = i + after;
        let mut found = Vec::new();
        use_tree(b, &mut end, &base, &mut found);
        out.extend(
            found
                .into_iter()
                .filter(|s| !s.is_empty())
                .map(|segments| CratePath { line, segments }),
        );
        line += code[i..end].matches('\n').count();
        i = end;
    }
    out
}

/// `mod NAME {` at the start of `s`: NAME.
fn inline_mod(s: &str) -> Option<String> {
    let rest = s.strip_prefix("mod")?;
    let rest_t = rest.trim_start();
    if rest_t.len() == rest.len() {
        return None;
    }
    let name: String = rest_t
        .chars()
        .take_while(|&c| c.is_ascii_alphanumeric() || c == '_')
        .collect();
    let tail = rest_t[name.len()..].trim_start();
    (!name.is_empty() && tail.starts_with('{')).then_some(name)
}

/// A path from the crate root at the start of `s` (`crate::`, `$crate::`,
/// or `super::` chains that leave the module `here`): the segments it
/// starts with and where the rest begins.
fn path_start(s: &str, here: &[&str]) -> Option<(Vec<String>, usize)> {
    for prefix in ["crate::", "$crate::"] {
        if s.starts_with(prefix) {
            return Some((Vec::new(), prefix.len()));
        }
    }
    let mut ups = 0;
    let mut k = 0;
    while s[k..].starts_with("super::") {
        ups += 1;
        k += "super::".len();
    }
    if ups == 0 || ups > here.len() {
        return None;
    }
    let base = here[..here.len() - ups]
        .iter()
        .map(|s| s.to_string())
        .collect();
    Some((base, k))
}

/// Reads the use tree (or plain path) at `b[*i..]` below `prefix` into
/// `out`, one entry per leaf; leaves `*i` after it.
fn use_tree(b: &[u8], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut segs = prefix.to_vec();
    loop {
        skip_space(b, i);
        if b.get(*i) == Some(&b'{') {
            *i += 1;
            loop {
                while b
                    .get(*i)
                    .is_some_and(|c| c.is_ascii_whitespace() || *c == b',')
                {
                    *i += 1;
                }
                match b.get(*i) {
                    Some(b'}') => {
                        *i += 1;
                        return;
                    }
                    None => return,
                    _ => {
                        let before = *i;
                        use_tree(b, i, &segs, out);
                        if *i == before {
                            // Not a path (a stray character): step on.
                            *i += 1;
                        }
                    }
                }
            }
        }
        let start = *i;
        while b.get(*i).is_some_and(|&c| is_ident(c)) {
            *i += 1;
        }
        if *i == start {
            // `*`, or the end of the path.
            if b.get(*i) == Some(&b'*') {
                *i += 1;
            }
            out.push(segs);
            return;
        }
        let word = String::from_utf8_lossy(&b[start..*i]).into_owned();
        if word != "self" {
            segs.push(word);
        }
        let after = *i;
        skip_space(b, i);
        if b[*i..].starts_with(b"::") {
            *i += 2;
            continue;
        }
        if b[*i..].starts_with(b"as") && b.get(*i + 2).is_some_and(u8::is_ascii_whitespace) {
            *i += 2;
            skip_space(b, i);
            while b.get(*i).is_some_and(|&c| is_ident(c)) {
                *i += 1;
            }
        } else {
            *i = after;
        }
        out.push(segs);
        return;
    }
}

fn skip_space(b: &[u8], i: &mut usize) {
    while b.get(*i).is_some_and(u8::is_ascii_whitespace) {
        *i += 1;
    }
}

/// The macros `src` exports at the crate root (`#[macro_export]
/// macro_rules! NAME`): reached as `crate::NAME` from anywhere.
pub fn exported_macros(src: &str) -> Vec<String> {
    let code = code_of(src);
    let mut out = Vec::new();
    for (k, _) in code.match_indices("#[macro_export]") {
        let rest = &code[k..];
        if let Some(m) = rest.find("macro_rules!") {
            let name: String = rest[m + "macro_rules!".len()..]
                .trim_start()
                .chars()
                .take_while(|&c| c.is_ascii_alphanumeric() || c == '_')
                .collect();
            out.push(name);
        }
    }
    out
}
