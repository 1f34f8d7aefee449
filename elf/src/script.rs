//! Scripts given where a program is expected: the `#!` line the kernel
//! reads (`binfmt_script`) and the program it runs for it, so that an
//! error can name what to trace instead.

use std::path::Path;

/// The `#!` line of a file starting with `bytes` (without the `#!`, the
/// line's surrounding blanks trimmed), or `None` if it has none.
pub fn shebang(bytes: &[u8]) -> Option<String> {
    let rest = bytes.strip_prefix(b"#!")?;
    let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    // The kernel reads at most 256 bytes of it (BINPRM_BUF_SIZE).
    let line = &rest[..end.min(256)];
    Some(String::from_utf8_lossy(line).trim().to_string())
}

/// The program the kernel runs for a script whose `#!` line is `line`:
/// its first word, or, for `/usr/bin/env NAME` (no option), NAME as found
/// in `PATH` (NAME itself when it is not found).
pub fn interpreter(line: &str) -> String {
    let mut words = line.split_whitespace();
    let first = words.next().unwrap_or_default();
    if Path::new(first).file_name().is_some_and(|n| n == "env")
        && let Some(name) = words.next()
        && !name.starts_with('-')
        && !name.contains('=')
    {
        return find_in_path(name).unwrap_or_else(|| name.to_string());
    }
    first.to_string()
}

/// `name` in the directories of `PATH`, as `execvp` finds it.
fn find_in_path(name: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    if name.contains('/') {
        return Some(name.to_string());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .map(|p| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shebang_line_is_read_without_its_marker_and_blanks() {
        assert_eq!(shebang(b"#!/bin/sh\necho hi\n").as_deref(), Some("/bin/sh"));
        assert_eq!(
            shebang(b"#! /usr/bin/env bash \n").as_deref(),
            Some("/usr/bin/env bash")
        );
        assert_eq!(shebang(b"#!/bin/sh").as_deref(), Some("/bin/sh"));
        assert_eq!(shebang(b"\x7fELF\x02\x01"), None);
        assert_eq!(shebang(b""), None);
    }

    #[test]
    fn the_interpreter_is_the_first_word_or_what_env_finds() {
        assert_eq!(interpreter("/bin/sh -e"), "/bin/sh");
        // `sh` is in every PATH a test runs with; `env -S` is not followed.
        let sh = interpreter("/usr/bin/env sh");
        assert!(sh.starts_with('/') && sh.ends_with("/sh"), "{sh}");
        assert_eq!(interpreter("/usr/bin/env -S sh -e"), "/usr/bin/env");
        assert_eq!(
            interpreter("/usr/bin/env no-such-program-anywhere"),
            "no-such-program-anywhere"
        );
        assert_eq!(interpreter(""), "");
    }
}
