//! The documentation cites only files the repository has: every path in
//! backquotes in `README.md` and `docs/*.md` that begins with one of the
//! repository's top-level folders names a file or folder of the checkout
//! (paths of other projects, such as the kernel's `kernel/events/uprobes.c`,
//! begin with none of them, and placeholders such as `NAME.rs` are left
//! out); and no source file cites the design notes the repository does not
//! keep (`RELIABILITY`, `DESIGN.md`).

use crate::case;
use crate::support::case::Case;
use crate::support::cli::repo;
use std::path::Path;

pub const CASES: &[Case] = &[
    case!(docs_cite_only_files_the_repository_has),
    case!(sources_cite_no_design_note_the_repository_lacks),
];

/// The repository's top-level folders (those a cited path can begin with).
fn top_folders(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect();
    v.sort();
    v
}

/// The backquoted spans of `text` that look like a repository path:
/// `FOLDER/...` with FOLDER one of `tops`, no spaces, no placeholder.
fn cited_paths(text: &str, tops: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        if i % 2 == 0 || span.contains(char::is_whitespace) || span.contains(['*', '<', '{', '$']) {
            continue;
        }
        let Some((first, rest)) = span.split_once('/') else {
            continue;
        };
        if rest.is_empty() || !tops.iter().any(|t| t == first) || span.contains("NAME") {
            continue;
        }
        // `path:line` and `path::item` cite a file too.
        let path = span.split(':').next().unwrap_or(span);
        out.push(path.trim_end_matches(['.', ',', ')']).to_string());
    }
    out
}

fn docs_cite_only_files_the_repository_has() {
    let root = repo();
    let tops = top_folders(&root);
    assert!(tops.iter().any(|t| t == "runtime"), "{tops:?}");
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.push(root.join("README.md"));
    docs.sort();
    let mut missing = Vec::new();
    let mut cited = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for p in cited_paths(&text, &tops) {
            cited += 1;
            if !root.join(&p).exists() {
                missing.push(format!(
                    "{}: `{p}`",
                    doc.strip_prefix(&root).unwrap_or(doc).display()
                ));
            }
        }
    }
    // The docs do cite files: the check reads them.
    assert!(cited > 100, "only {cited} paths cited in {docs:?}");
    assert!(
        missing.is_empty(),
        "cited but absent:\n{}",
        missing.join("\n")
    );
}

fn sources_cite_no_design_note_the_repository_lacks() {
    let root = repo();
    let mut found = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if p
                .extension()
                .is_some_and(|x| x == "rs" || x == "c" || x == "sh")
            {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                for (n, line) in text.lines().enumerate() {
                    if line.contains("RELIABILITY") || line.contains("DESIGN.md") {
                        found.push(format!(
                            "{}:{}",
                            p.strip_prefix(&root).unwrap().display(),
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    // This file names them, in its checks.
    found.retain(|f| !f.starts_with("runtime/tests/all/docs.rs"));
    assert!(found.is_empty(), "cited: {found:?}");
}
