//! CLI goldens, in the wasm-tools style: every file of `runtime/tests/cli/`
//! is a case. Its first lines say how `wprobe` is run on it (`// RUN: ARGS`
//! in `.rpn`, `.bt` and `.cmd` files, `;; RUN: ARGS` in `.wat` files; `%`
//! is the file's name; several RUN lines run in turn), from that directory,
//! with a private module cache; `NAME.EXT.out` holds the exit status,
//! standard output and standard error of each run. `BLESS=1` rewrites the
//! `.out` files instead of comparing them. Error messages (`file:line:col`
//! and the caret), `--help` texts and refusals are asserted byte for byte.

use std::path::{Path, PathBuf};

use crate::support::cli::wprobe;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli")
}

/// One trial per case file, named `cli_goldens::FILE`.
pub fn trials() -> Vec<libtest_mimic::Trial> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("runtime/tests/cli")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "rpn" || e == "bt" || e == "wat" || e == "cmd")
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            libtest_mimic::Trial::test(format!("cli_goldens::{name}"), move || {
                check(&p).map_err(Into::into)
            })
        })
        .collect()
}

/// The RUN lines of a case.
fn runs(text: &str, name: &str) -> Vec<Vec<String>> {
    text.lines()
        .map_while(|l| {
            let l = l.trim_start();
            l.strip_prefix("// RUN:")
                .or_else(|| l.strip_prefix(";; RUN:"))
                .or_else(|| (l.starts_with("//") || l.starts_with(";;")).then_some(""))
        })
        .filter(|r| !r.trim().is_empty())
        .map(|r| {
            r.split_whitespace()
                .map(|w| {
                    if w == "%" {
                        name.to_string()
                    } else {
                        w.to_string()
                    }
                })
                .collect()
        })
        .collect()
}

fn check(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let runs = runs(&text, &name);
    if runs.is_empty() {
        return Err(format!("{name}: no `// RUN:` line"));
    }
    let cache = tempdir(&name);
    let mut got = String::new();
    for args in &runs {
        let out = wprobe()
            .args(args)
            .current_dir(dir())
            .env("WPROBE_CACHE_DIR", &cache)
            .env_remove("WPROBE_DEBUG")
            .env("COLUMNS", "100")
            .output()
            .map_err(|e| e.to_string())?;
        got.push_str(&format!(
            "$ wprobe {}\nstatus: {}\n--- stdout\n{}--- stderr\n{}",
            args.join(" "),
            out.status
                .code()
                .map_or("signal".to_string(), |c| c.to_string()),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let _ = std::fs::remove_dir_all(&cache);
    // Where the checkout is: `$CLI` in the expected output.
    let got = got.replace(&dir().display().to_string(), "$CLI");
    let expected_path = path.with_file_name(format!("{name}.out"));
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&expected_path, &got).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&expected_path).map_err(|e| {
        format!(
            "{}: {e} (run with BLESS=1 to create it)",
            expected_path.display()
        )
    })?;
    if expected != got {
        return Err(format!(
            "{name}: output differs from {} (BLESS=1 rewrites it)\n{}",
            expected_path.display(),
            diff(&expected, &got)
        ));
    }
    Ok(())
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "wprobe-goldens-{}-{}",
        std::process::id(),
        name.replace('.', "_")
    ));
    let _ = std::fs::create_dir_all(&d);
    d
}

/// The lines that differ, `-` expected, `+` got.
fn diff(expected: &str, got: &str) -> String {
    let (e, g): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), got.lines().collect());
    let mut out = String::new();
    for i in 0..e.len().max(g.len()) {
        match (e.get(i), g.get(i)) {
            (Some(a), Some(b)) if a == b => {}
            (a, b) => {
                if let Some(a) = a {
                    out.push_str(&format!("-{a}\n"));
                }
                if let Some(b) = b {
                    out.push_str(&format!("+{b}\n"));
                }
            }
        }
    }
    out
}
