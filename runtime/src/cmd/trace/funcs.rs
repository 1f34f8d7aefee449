//! Which functions `wprobe trace` traces: every function symbol of the
//! executable and the functions its unwind table bounds that no symbol
//! names (`sub_ADDR`), its PLT entries (`--plt`), the functions of the shared
//! libraries named by `--lib GLOB`; minus `-X` and the functions that
//! cannot be traced, each listed once with the reason. The parts of
//! functions the compiler moved away from them (GCC's `.cold` fragments,
//! named or found in a stripped module by their unwind entry starting
//! inside a frame) are not functions: not traced, their time their
//! function's. Everything about a
//! function that output needs (its name as shown, its source line) is
//! computed here, once, at start.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use wprobe_elf::{ElfInfo, SymKind};

use wprobe_elf::glob as glob_match;

/// Where a traced function comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A function symbol of the executable.
    Exe,
    /// A PLT entry of the executable (`--plt`): a call to a library.
    Plt,
    /// The GOT slot through which the executable calls a library function
    /// that has no PLT entry (`--plt`; code built with `-fno-plt`): traced
    /// by pointing the slot at a stub (the in-process transport only).
    Got,
    /// A function of a shared library (`--lib`).
    Lib,
}

/// A traced function.
#[derive(Clone, Debug)]
pub struct Func {
    /// Its symbol (`puts@plt` for a PLT entry).
    pub name: String,
    /// As shown: demangled unless `--no-demangle`.
    pub shown: String,
    /// The names of its other symbols (aliases of one address), each as
    /// it is and as shown: `-F`, `-N`, `-X` and `--handler` globs match
    /// them too.
    pub aliases: Vec<String>,
    /// The module file (canonical path).
    pub module: PathBuf,
    /// Link-time address of its entry.
    pub link: u64,
    /// The first byte there (checked before arming).
    pub opcode: u8,
    /// Where it comes from.
    pub origin: Origin,
    /// `file:line` of its entry (`-l`), when DWARF says.
    pub line: Option<String>,
}

impl Func {
    /// Whether `glob` matches one of its names: its symbol, its shown
    /// name or one of its [`Func::aliases`].
    pub fn matches(&self, glob: &str) -> bool {
        glob_match(glob, &self.name)
            || glob_match(glob, &self.shown)
            || self.aliases.iter().any(|a| glob_match(glob, a))
    }

    /// Whether one of `set`'s patterns matches one of its names.
    pub fn matched_by(&self, set: &wprobe_elf::glob::GlobSet) -> bool {
        set.matches(&self.name)
            || set.matches(&self.shown)
            || self.aliases.iter().any(|a| set.matches(a))
    }
}

/// Whether calls of `f` switch the thread to another stack and come back
/// on this one when another context switches back (`swapcontext`, or its
/// PLT entry): see `agent_abi::pairing`. (`setcontext` leaves its stack
/// for good, as `longjmp` does; `makecontext`, `getcontext` stay on it.)
pub fn switches_stack(f: &Func) -> bool {
    let base = f.name.split('@').next().unwrap_or("");
    matches!(base, "swapcontext" | "__swapcontext")
}

/// Whether calls of `f` raise or resume a C++ exception (`__cxa_throw`,
/// `__cxa_rethrow`, `_Unwind_Resume`, ..., or their PLT entries): the calls
/// an exception leaves while one of them is open are closed at the catch
/// (or the landing pad that proves them left), as uftrace shows them.
/// (`_Unwind_ForcedUnwind`, `pthread_exit`'s and `pthread_cancel`'s, is not
/// an exception.)
pub fn throws(f: &Func) -> bool {
    let base = f.name.split('@').next().unwrap_or("");
    matches!(
        base,
        "__cxa_throw"
            | "__cxa_rethrow"
            | "_Unwind_Resume"
            | "_Unwind_RaiseException"
            | "_Unwind_Resume_or_Rethrow"
            | "_ZSt17rethrow_exceptionNSt15__exception_ptr13exception_ptrE"
    )
}

/// A function that is not traced, and why (listed at start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotTraced {
    /// Its name.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// What to trace.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// `--plt`.
    pub plt: bool,
    /// `--lib GLOB` (repeatable).
    pub libs: Vec<String>,
    /// `-X GLOB`: not traced (mangled or shown name).
    pub exclude: wprobe_elf::glob::GlobSet,
    /// `-F GLOB`: a start-up function named by a filter is traced anyway.
    pub filters: Vec<String>,
    /// How names are shown.
    pub demangle: Demangle,
}

/// How C++ and Rust names are shown (`--demangle=MODE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Demangle {
    /// `ns::f`: no parameters, template arguments or return type
    /// (uftrace's default).
    #[default]
    Simple,
    /// `ns::f(int)`.
    Full,
    /// The symbol as it is (`--no-demangle`).
    No,
}

/// C run-time start-up code, not traced unless a `-F` names it (uftrace
/// skips the same): `_start` never returns, and the others run before
/// `main` on every program.
const STARTUP: &[&str] = &["_start", "__libc_csu_init", "__libc_csu_fini"];

/// Functions that share their caller's stack with a child (`vfork`: the
/// child runs on the parent's stack until it execs or exits, and returns
/// through the parent's return addresses): a return probe cannot pair
/// their returns with their calls. Functions that return twice (`setjmp`,
/// `getcontext`) are traced: their first return is their call's, and a
/// `longjmp` or `setcontext` back to them lands at their return address
/// without a call open there (the calls it leaves are closed as unwound).
const RETURNS_TWICE: &[&str] = &["vfork", "__vfork"];

/// The functions to trace, and those not traced with why.
pub fn select(
    exe: &Path,
    libraries: &[PathBuf],
    sel: &Selection,
) -> Result<(Vec<Func>, Vec<NotTraced>), String> {
    let mut funcs = Vec::new();
    let mut skipped = Vec::new();
    let elf = ElfInfo::open_shared(exe)?;
    let exe_path = crate::proc::procmaps::canonical(exe);
    module_functions(&elf, &exe_path, Origin::Exe, sel, &mut funcs, &mut skipped);
    if sel.plt {
        imports(&elf, &exe_path, sel, &mut funcs, &mut skipped);
    }
    for lib in libraries {
        match ElfInfo::open_shared(lib) {
            Ok(e) => {
                let p = crate::proc::procmaps::canonical(lib);
                module_functions(&e, &p, Origin::Lib, sel, &mut funcs, &mut skipped);
            }
            Err(e) => skipped.push(NotTraced {
                name: lib.display().to_string(),
                reason: format!("library not read: {e}"),
            }),
        }
    }
    Ok((funcs, skipped))
}

/// Whether a `-X` glob matches one of `names`.
fn excluded(sel: &Selection, names: &[&str]) -> bool {
    names.iter().any(|n| sel.exclude.matches(n))
}

fn named_by_filter(sel: &Selection, name: &str) -> bool {
    sel.filters.iter().any(|g| glob_match(g, name))
}

fn shown_name(sel: &Selection, name: &str) -> String {
    match sel.demangle {
        Demangle::Simple => wprobe_elf::demangle_short(name).into_owned(),
        Demangle::Full => wprobe_elf::demangle(name).into_owned(),
        Demangle::No => name.to_string(),
    }
}

/// The functions of one module by the project's one rule
/// ([`wprobe_elf::functions`]): one per address, under its preferred name
/// (global before local, then the fewest leading underscores, then the
/// shortest, then the first in name order; `-X` matches any of its
/// names), fragments left out, those no
/// symbol names as `sub_ADDR` (the executable's entry point `_start`):
/// the named ones in address order, then the unnamed ones.
fn module_functions(
    elf: &ElfInfo,
    path: &Path,
    origin: Origin,
    sel: &Selection,
    funcs: &mut Vec<Func>,
    skipped: &mut Vec<NotTraced>,
) {
    let module = path.display().to_string();
    let qualify = |name: &str| {
        if origin == Origin::Lib {
            format!("{name} ({module})")
        } else {
            name.to_string()
        }
    };
    let mut all = wprobe_elf::functions::of(elf);
    all.sort_by_key(|f| f.is_unnamed());
    for f in all {
        // A part of a function moved away from it (`main.cold`): entered
        // by a jump inside its function's call, whose time it is.
        if f.fragment {
            continue;
        }
        let (name, shown, aliases) = match f.name() {
            Some(n) => {
                let aliases = f.aliases[1..]
                    .iter()
                    .flat_map(|s| [s.name.clone(), shown_name(sel, &s.name)])
                    .collect();
                (n.to_string(), shown_name(sel, n), aliases)
            }
            // Named by its link-time address (`sub_1a2b0`), the
            // executable's entry point `_start` (start-up code, below).
            None if origin == Origin::Exe && f.start == elf.entry => {
                ("_start".to_string(), "_start".to_string(), Vec::new())
            }
            None => {
                let n = unnamed_name(f.start);
                (n.clone(), n, Vec::new())
            }
        };
        let func = Func {
            name,
            shown,
            aliases,
            module: path.to_path_buf(),
            link: f.start,
            opcode: 0,
            origin,
            line: None,
        };
        if func.matched_by(&sel.exclude) {
            continue;
        }
        let mut skip = |reason: String| {
            skipped.push(NotTraced {
                name: qualify(&func.shown),
                reason,
            })
        };
        if origin == Origin::Exe
            && STARTUP.contains(&func.name.as_str())
            && !sel.filters.iter().any(|g| func.matches(g))
        {
            skip("C start-up code (name it with -F to trace it)".into());
            continue;
        }
        if f.is_unnamed() {
            // Bounded by the unwind table: in an executable segment.
            if let Some(opcode) = elf.first_byte(f.start) {
                funcs.push(Func { opcode, ..func });
            }
            continue;
        }
        if RETURNS_TWICE.contains(&func.name.as_str()) {
            skip("shares its caller's stack with the child: its returns cannot be paired with its calls".into());
            continue;
        }
        if f.kind == SymKind::Ifunc {
            skip(
                "IFUNC resolver: calls go to the implementation it selects, which has no \
                 symbol here"
                    .into(),
            );
            continue;
        }
        if !elf.is_exec_vaddr(f.start) {
            skip(format!("{:#x} is not in an executable segment", f.start));
            continue;
        }
        let Some(opcode) = elf.first_byte(f.start) else {
            skip(format!("{:#x} has no bytes in the file", f.start));
            continue;
        };
        funcs.push(Func { opcode, ..func });
    }
}

/// The name `wprobe trace` gives a function no symbol names: `sub_` and
/// its link-time address in hex, as disassemblers name them.
pub fn unnamed_name(link: u64) -> String {
    format!("sub_{link:x}")
}

/// C run-time start-up functions the executable calls through the
/// dynamic linker (`_start`'s call of `__libc_start_main`, the
/// destructors' `__cxa_finalize`, weak hooks): not traced unless a `-F`
/// names them.
const STARTUP_IMPORTS: &[&str] = &[
    "__libc_start_main",
    "__cxa_finalize",
    "__gmon_start__",
    "_ITM_deregisterTMCloneTable",
    "_ITM_registerTMCloneTable",
];

/// The library functions the executable calls (`--plt`), each named
/// `SYMBOL@plt`, once: through its PLT entries ([`Origin::Plt`]: entry
/// `i` of `.plt.sec`, else entry `i + 1` of `.plt`, belongs to relocation
/// `i` of `.rela.plt`), then through a GOT slot and no PLT entry
/// ([`Origin::Got`]: `call *f@GOTPCREL(%rip)`, code built with
/// `-fno-plt`; its entry the slot).
fn imports(
    elf: &ElfInfo,
    path: &Path,
    sel: &Selection,
    funcs: &mut Vec<Func>,
    skipped: &mut Vec<NotTraced>,
) {
    let plt = elf.plt_entries().map(|(a, n)| (a, n, Origin::Plt));
    let got = elf
        .got_only_imports()
        .into_iter()
        .map(|(a, n)| (a, n, Origin::Got));
    let mut seen = HashSet::new();
    for (addr, name, origin) in plt.collect::<Vec<_>>().into_iter().chain(got) {
        if !seen.insert(name) {
            continue;
        }
        let plt_name = format!("{name}@plt");
        let shown = format!("{}@plt", shown_name(sel, name));
        if excluded(sel, &[&plt_name, &shown, name, &shown_name(sel, name)]) {
            continue;
        }
        if STARTUP_IMPORTS.contains(&name)
            && !named_by_filter(sel, &plt_name)
            && !named_by_filter(sel, name)
        {
            continue;
        }
        if RETURNS_TWICE.contains(&name) {
            skipped.push(NotTraced {
                name: shown,
                reason: "shares its caller's stack with the child: its returns cannot be paired with its calls".into(),
            });
            continue;
        }
        let opcode = match (origin, elf.first_byte(addr)) {
            (_, Some(b)) => b,
            // A slot of the GOT is patched, not probed.
            (Origin::Got, None) => 0,
            (_, None) => {
                skipped.push(NotTraced {
                    name: shown,
                    reason: format!("PLT entry {addr:#x} has no bytes in the file"),
                });
                continue;
            }
        };
        funcs.push(Func {
            name: plt_name,
            shown,
            aliases: Vec::new(),
            module: path.to_path_buf(),
            link: addr,
            opcode,
            origin,
            line: None,
        });
    }
}

/// The shared libraries `--lib` globs name, for a command about to be
/// launched: the dynamic linker and the libraries the program loads at
/// startup (found as the dynamic linker finds them,
/// [`wprobe_elf::startup::startup_objects`]) whose base name or soname
/// matches; a glob without wildcards that names none of them names a
/// library the program may load later (`dlopen`), found by path or name.
pub fn libraries_for_launch(exe: &Path, globs: &[String]) -> Result<Vec<PathBuf>, String> {
    if globs.is_empty() {
        return Ok(Vec::new());
    }
    let objects =
        wprobe_elf::startup::startup_objects(exe, &wprobe_elf::startup::LoaderEnv::from_env());
    let interpreter = objects
        .interpreter
        .map(|p| wprobe_elf::startup::StartupLibrary {
            soname: ElfInfo::open(&p).ok().and_then(|e| e.soname.clone()),
            path: crate::proc::procmaps::canonical(&p),
        });
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut out: Vec<(PathBuf, Option<String>)> = Vec::new();
    for lib in interpreter.into_iter().chain(objects.libraries) {
        if seen.insert(lib.path.clone()) && lib_matches(&lib.path, lib.soname.as_deref(), globs) {
            out.push((lib.path, lib.soname));
        }
    }
    for g in globs.iter().filter(|g| !g.contains(['*', '?'])) {
        if out
            .iter()
            .any(|(p, so)| lib_matches(p, so.as_deref(), std::slice::from_ref(g)))
        {
            continue;
        }
        let found = if g.contains('/') {
            Some(PathBuf::from(g)).filter(|p| p.is_file())
        } else {
            wprobe_elf::locate::library(g)
        };
        match found {
            Some(p) => {
                let canon = crate::proc::procmaps::canonical(&p);
                if seen.insert(canon.clone()) {
                    out.push((canon, None));
                }
            }
            None => return Err(format!("--lib {g}: no such library")),
        }
    }
    let mut out: Vec<PathBuf> = out.into_iter().map(|(p, _)| p).collect();
    out.sort();
    Ok(out)
}

/// The shared libraries `--lib` globs name among those process `pid` maps.
pub fn libraries_of_process(pid: i32, exe: &Path, globs: &[String]) -> Vec<PathBuf> {
    if globs.is_empty() {
        return Vec::new();
    }
    let exe = crate::proc::procmaps::canonical(exe);
    let Ok(maps) = crate::proc::procmaps::read(pid) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for m in maps.iter().filter(|m| m.is_file()) {
        let p = crate::proc::procmaps::canonical(Path::new(&m.path));
        if p == exe || out.contains(&p) {
            continue;
        }
        let soname = ElfInfo::open(&p).ok().and_then(|e| e.soname.clone());
        if lib_matches(&p, soname.as_deref(), globs) {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn lib_matches(path: &Path, soname: Option<&str>, globs: &[String]) -> bool {
    let base = path
        .file_name()
        .map(|b| b.to_string_lossy().into_owned())
        .unwrap_or_default();
    let full = path.display().to_string();
    globs.iter().any(|g| {
        glob_match(g, &base)
            || glob_match(g, &full)
            || soname.is_some_and(|s| glob_match(g, s))
            || (wprobe_elf::locate::is_short_library_name(g)
                && wprobe_elf::locate::matches_mapped(g, &full, || None))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_globs_match_base_names_sonames_and_short_names() {
        let p = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert!(lib_matches(p, Some("libc.so.6"), &["libc*".into()]));
        assert!(lib_matches(p, None, &["libc".into()]));
        assert!(lib_matches(p, None, &["*/libc.so.6".into()]));
        assert!(!lib_matches(p, None, &["libm*".into()]));
        let s = Path::new("/usr/lib/libstdc++.so.6.0.30");
        assert!(lib_matches(
            s,
            Some("libstdc++.so.6"),
            &["libstdc++.so.6".into()]
        ));
    }
}
