//! Which file a module name means. A module is named (in `name =`,
//! `--probe MODULE:…`, one-liner probes) by a path, or by a bare name:
//!
//! * the base name of a file: `probe_target`, `libc.so.6`;
//! * a library's soname (`libstdc++.so.6`, whose file may be
//!   `libstdc++.so.6.0.30`);
//! * a short library name, as bpftrace accepts them: `libc` means
//!   `libc.so.*` (also the old `libc-2.31.so` spelling).
//!
//! In a running process the name is matched against the files it maps
//! ([`matches_mapped`]); before a process exists (compiling, listing) it is
//! looked for as a command would be (current directory, `PATH`) and then as
//! the dynamic linker would find a library ([`locate_file`]: `ld.so.cache`,
//! then the standard directories).

use std::path::{Path, PathBuf};

/// The directories the dynamic linker searches after its cache (x86-64
/// Debian/Ubuntu multiarch first, then the traditional ones).
pub const LIBRARY_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/local/lib",
];

/// The last component of a path.
pub fn base_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// Whether `name` is a short library name (`libc`: no `/`, no `.so`).
pub fn is_short_library_name(name: &str) -> bool {
    !name.contains('/') && !name.contains(".so") && name.starts_with("lib")
}

/// Whether file base name `base` is what short library name `name` means:
/// `libc.so`, `libc.so.6`, `libc-2.31.so`.
fn short_name_matches(name: &str, base: &str) -> bool {
    let Some(rest) = base.strip_prefix(name) else {
        return false;
    };
    rest.starts_with(".so")
        || (rest.starts_with('-')
            && rest.ends_with(".so")
            && rest[1..rest.len() - 3]
                .bytes()
                .all(|c| c.is_ascii_digit() || c == b'.'))
}

/// Whether bare module name `name` (no `/`) means the mapped file at
/// `path`: its base name, its soname (asked for only when the base name
/// could be a version of it), or the short library name.
pub fn matches_mapped(name: &str, path: &str, soname: impl FnOnce() -> Option<String>) -> bool {
    let base = base_name(path);
    if base == name {
        return true;
    }
    if is_short_library_name(name) {
        return short_name_matches(name, base);
    }
    // `libstdc++.so.6` mapped as `libstdc++.so.6.0.30`: compare sonames.
    match name.find(".so") {
        Some(i) if base.starts_with(&name[..i + 3]) => soname().is_some_and(|s| s == name),
        _ => false,
    }
}

/// Finds the file of module `module` before any process maps it: a path
/// as given; a bare name in the current directory, in `dirs`, on `PATH`
/// (executables), then as the dynamic linker would (libraries by file name,
/// soname or short name in `ld.so.cache`, then [`LIBRARY_DIRS`]).
pub fn locate_file(module: &str, dirs: &[PathBuf]) -> Result<PathBuf, String> {
    if module.contains('/') {
        let p = PathBuf::from(module);
        return match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => Ok(p),
            Ok(_) => Err(format!("module file `{module}` is not a regular file")),
            Err(_) => Err(format!("module file `{module}` not found")),
        };
    }
    let mut candidates: Vec<PathBuf> = vec![Path::new(".").join(module)];
    candidates.extend(dirs.iter().map(|d| d.join(module)));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join(module)));
    }
    if let Some(p) = candidates.into_iter().find(|p| p.is_file()) {
        return Ok(p);
    }
    if let Some(p) = library(module) {
        return Ok(p);
    }
    Err(format!(
        "module `{module}` not found in the current directory{}, in PATH, in the dynamic \
         linker's cache ({}) or in {}",
        dirs.iter()
            .map(|d| format!(", in {}", d.display()))
            .collect::<String>(),
        crate::ldcache::CACHE,
        LIBRARY_DIRS.join(", ")
    ))
}

/// The library `name` (file name, soname or short name) as the dynamic
/// linker would find it.
pub fn library(name: &str) -> Option<PathBuf> {
    let short = is_short_library_name(name);
    let cache = crate::ldcache::entries();
    if let Some((_, p)) = cache.iter().find(|(k, _)| k == name) {
        return Some(p.clone());
    }
    if short {
        // Several versions (libssl.so.1.1, libssl.so.3): the newest.
        let mut matching: Vec<&(String, PathBuf)> = cache
            .iter()
            .filter(|(k, _)| short_name_matches(name, k))
            .collect();
        matching.sort_by_key(|e| version_key(&e.0));
        if let Some((_, p)) = matching.last() {
            return Some(p.clone());
        }
    }
    for d in LIBRARY_DIRS {
        let dir = Path::new(d);
        let exact = dir.join(name);
        if exact.is_file() {
            return Some(exact);
        }
        if short {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut found: Vec<PathBuf> = rd
                .filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|b| short_name_matches(name, b))
                })
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect();
            found.sort_by_key(|p| version_key(base_name(&p.to_string_lossy())));
            if let Some(p) = found.pop() {
                return Some(p);
            }
        }
    }
    None
}

/// The numbers of a library file name, for ordering versions.
fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_as_users_write_them() {
        let none = || None;
        assert!(matches_mapped(
            "libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            none
        ));
        assert!(matches_mapped(
            "libc",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            none
        ));
        assert!(matches_mapped("libc", "/lib/libc-2.31.so", none));
        assert!(!matches_mapped("libc", "/lib/libcrypt.so.1", none));
        assert!(!matches_mapped("libc", "/lib/libc-tools.so", none));
        assert!(matches_mapped("probe_target", "/tmp/x/probe_target", none));
        assert!(!matches_mapped("probe", "/tmp/x/probe_target", none));
        assert!(matches_mapped(
            "libstdc++.so.6",
            "/usr/lib/libstdc++.so.6.0.30",
            || Some("libstdc++.so.6".into())
        ));
        assert!(!matches_mapped(
            "libstdc++.so.6",
            "/usr/lib/libstdc++.so.6.0.30",
            || Some("libstdc++.so.7".into())
        ));
        assert!(matches_mapped(
            "libstdc++",
            "/usr/lib/libstdc++.so.6.0.30",
            none
        ));
    }

    #[test]
    fn libc_is_found_by_soname_and_short_name() {
        let by_soname = locate_file("libc.so.6", &[]).unwrap();
        let by_short = locate_file("libc", &[]).unwrap();
        assert_eq!(
            std::fs::canonicalize(&by_soname).unwrap(),
            std::fs::canonicalize(&by_short).unwrap()
        );
        assert!(base_name(&by_soname.to_string_lossy()).starts_with("libc.so"));
        let e = locate_file("libno_such_library_here", &[]).unwrap_err();
        assert!(
            e.contains("dynamic linker's cache (/etc/ld.so.cache)"),
            "{e}"
        );
    }

    #[test]
    fn versions_order_numerically() {
        assert!(version_key("libssl.so.3") > version_key("libssl.so.1.1"));
        assert!(version_key("libx.so.10") > version_key("libx.so.9"));
    }
}
