//! The shared libraries a program loads at startup, found as the dynamic
//! linker will find them: `LD_PRELOAD`, then the `DT_NEEDED` entries of
//! the executable and, breadth first, of each library found, each looked
//! for in `DT_RPATH` (of the object and of the executable, unless the
//! object has a `DT_RUNPATH`), `LD_LIBRARY_PATH`, `DT_RUNPATH` (`$ORIGIN`
//! is the directory of the object naming it), then `ld.so.cache` and the
//! default directories ([`crate::locate::library`]). For a tracer that
//! arms probes on these files before the dynamic linker maps them (their
//! constructors run before the program's entry point).

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use goblin::elf::Elf;

/// The dynamic linker's environment of the program (its values of
/// `LD_LIBRARY_PATH` and `LD_PRELOAD`).
#[derive(Clone, Debug, Default)]
pub struct LoaderEnv {
    /// `LD_LIBRARY_PATH`'s directories.
    pub library_path: Vec<PathBuf>,
    /// `LD_PRELOAD`'s libraries (paths or names).
    pub preload: Vec<String>,
}

impl LoaderEnv {
    /// From the values of `LD_LIBRARY_PATH` and `LD_PRELOAD`.
    pub fn new(library_path: Option<&OsStr>, preload: Option<&OsStr>) -> LoaderEnv {
        LoaderEnv {
            library_path: library_path
                .map(|v| {
                    std::env::split_paths(v)
                        .filter(|d| !d.as_os_str().is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            preload: preload
                .map(|v| {
                    v.to_string_lossy()
                        .split([':', ' '])
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Of this process's environment.
    pub fn from_env() -> LoaderEnv {
        LoaderEnv::new(
            std::env::var_os("LD_LIBRARY_PATH").as_deref(),
            std::env::var_os("LD_PRELOAD").as_deref(),
        )
    }
}

/// The search path entries of one object (`DT_RPATH`/`DT_RUNPATH` lists,
/// `$ORIGIN` expanded).
fn split(list: &[&str], origin: &Path) -> Vec<PathBuf> {
    let origin = origin.display().to_string();
    list.iter()
        .flat_map(|l| l.split(':'))
        .filter(|d| !d.is_empty())
        .map(|d| PathBuf::from(d.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin)))
        .collect()
}

/// Where the dynamic linker finds library `name` named by an object whose
/// search directories are `dirs`.
fn find(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .or_else(|| crate::locate::library(name))
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// One library a program loads at startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupLibrary {
    /// Its canonical path.
    pub path: PathBuf,
    /// Its `DT_SONAME`, when it has one.
    pub soname: Option<String>,
}

/// The libraries executable `exe` loads at startup (canonical paths, in
/// load order; the executable and its interpreter excluded). Files that
/// cannot be read or parsed, and names not found, are left out (the
/// dynamic linker would fail, or the library is mapped some other way).
pub fn startup_libraries(exe: &Path, env: &LoaderEnv) -> Vec<PathBuf> {
    startup_objects(exe, env)
        .libraries
        .into_iter()
        .map(|l| l.path)
        .collect()
}

/// What [`startup_objects`] finds.
#[derive(Clone, Debug, Default)]
pub struct StartupObjects {
    /// The executable's `PT_INTERP` (the dynamic linker), as it names it.
    pub interpreter: Option<PathBuf>,
    /// The libraries, in load order (see [`startup_libraries`]).
    pub libraries: Vec<StartupLibrary>,
}

/// The objects executable `exe` loads at startup: its interpreter and the
/// libraries of [`startup_libraries`], each with its soname.
pub fn startup_objects(exe: &Path, env: &LoaderEnv) -> StartupObjects {
    let mut out = StartupObjects::default();
    let mut seen: HashSet<PathBuf> = HashSet::new();
    seen.insert(canonical(exe));
    let Ok(bytes) = std::fs::read(exe) else {
        return out;
    };
    let Ok(g) = Elf::parse(&bytes) else {
        return out;
    };
    if let Some(interp) = g.interpreter {
        seen.insert(canonical(Path::new(interp)));
        out.interpreter = Some(PathBuf::from(interp));
    }
    let exe_dir = exe.parent().unwrap_or(Path::new("/"));
    // The executable's DT_RPATH applies to every object it loads.
    let exe_rpath = if g.runpaths.is_empty() {
        split(&g.rpaths, exe_dir)
    } else {
        Vec::new()
    };
    let mut queue: VecDeque<PathBuf> = VecDeque::new();
    for p in &env.preload {
        if let Some(f) = find(p, &env.library_path) {
            queue.push_back(f);
        }
    }
    let enqueue = |file: &Path, g: &Elf, queue: &mut VecDeque<PathBuf>| {
        let dir = file.parent().unwrap_or(Path::new("/"));
        let mut dirs = Vec::new();
        if g.runpaths.is_empty() {
            dirs.extend(split(&g.rpaths, dir));
            dirs.extend(exe_rpath.iter().cloned());
        }
        dirs.extend(env.library_path.iter().cloned());
        dirs.extend(split(&g.runpaths, dir));
        for name in &g.libraries {
            if let Some(p) = find(name, &dirs) {
                queue.push_back(p);
            }
        }
    };
    enqueue(exe, &g, &mut queue);
    while let Some(file) = queue.pop_front() {
        let canon = canonical(&file);
        if !seen.insert(canon.clone()) {
            continue;
        }
        let parsed = std::fs::read(&file).ok();
        let g = parsed.as_deref().and_then(|b| Elf::parse(b).ok());
        out.libraries.push(StartupLibrary {
            path: canon,
            soname: g.as_ref().and_then(|g| g.soname).map(str::to_string),
        });
        if let Some(g) = g {
            enqueue(&file, &g, &mut queue);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_executable_loads_libc() {
        let libs = startup_libraries(Path::new("/bin/ls"), &LoaderEnv::default());
        assert!(
            libs.iter().any(|p| p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libc.so"))),
            "{libs:?}"
        );
        assert!(
            !libs
                .iter()
                .any(|p| p.to_string_lossy().contains("ld-linux"))
        );
    }

    #[test]
    fn loader_environment_lists_are_split() {
        let e = LoaderEnv::new(
            Some(OsStr::new("/a::/b")),
            Some(OsStr::new("x.so y.so:/z.so")),
        );
        assert_eq!(e.library_path, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(e.preload, ["x.so", "y.so", "/z.so"]);
    }
}
