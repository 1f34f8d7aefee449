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

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use goblin::elf::Elf;
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

/// Whether calls of `f` switch the thread to another stack and come back
/// on this one when another context switches back (`swapcontext`, or its
/// PLT entry): see `agent_abi::pairing`. (`setcontext` leaves its stack
/// for good, as `longjmp` does; `makecontext`, `getcontext` stay on it.)
pub fn switches_stack(f: &Func) -> bool {
    let base = f.name.split('@').next().unwrap_or("");
    matches!(base, "swapcontext" | "__swapcontext")
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
    pub exclude: Vec<String>,
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

/// Size of one PLT entry on x86-64 (`.plt` and `.plt.sec`).
const PLT_ENTRY: u64 = 16;

/// The functions to trace, and those not traced with why.
pub fn select(
    exe: &Path,
    libraries: &[PathBuf],
    sel: &Selection,
) -> Result<(Vec<Func>, Vec<NotTraced>), String> {
    let mut funcs = Vec::new();
    let mut skipped = Vec::new();
    let elf = ElfInfo::open(exe).map_err(|e| e.to_string())?;
    let exe_path = crate::proc::procmaps::canonical(exe);
    module_functions(&elf, &exe_path, Origin::Exe, sel, &mut funcs, &mut skipped);
    if sel.plt {
        plt_entries(&elf, &exe_path, sel, &mut funcs, &mut skipped)?;
        got_calls(&elf, &exe_path, sel, &mut funcs, &mut skipped);
    }
    for lib in libraries {
        match ElfInfo::open(lib) {
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

fn excluded(sel: &Selection, name: &str, shown: &str) -> bool {
    sel.exclude
        .iter()
        .any(|g| glob_match(g, name) || glob_match(g, shown))
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

/// The function symbols of one module: one per address (an alias is traced
/// under one name: global before local, then the shortest, then the first
/// in name order), in address order.
fn module_functions(
    elf: &ElfInfo,
    path: &Path,
    origin: Origin,
    sel: &Selection,
    funcs: &mut Vec<Func>,
    skipped: &mut Vec<NotTraced>,
) {
    let mut by_addr: HashMap<u64, &wprobe_elf::Symbol> = HashMap::new();
    for s in elf.symbols.iter().filter(|s| s.is_code()) {
        by_addr
            .entry(s.value)
            .and_modify(|cur| {
                let better = (s.global && !cur.global)
                    || (s.global == cur.global
                        && (s.name.len(), &s.name) < (cur.name.len(), &cur.name));
                if better {
                    *cur = s;
                }
            })
            .or_insert(s);
    }
    let named: HashSet<u64> = by_addr.keys().copied().collect();
    let mut syms: Vec<&wprobe_elf::Symbol> = by_addr.into_values().collect();
    syms.sort_by_key(|s| (s.value, s.name.clone()));
    let module = path.display().to_string();
    let qualify = |name: &str| {
        if origin == Origin::Lib {
            format!("{name} ({module})")
        } else {
            name.to_string()
        }
    };
    for s in syms {
        // A part of a function moved away from it (`main.cold`): entered
        // by a jump inside its function's call, whose time it is.
        if elf.is_fragment(s.value, Some(&s.name)) {
            continue;
        }
        let shown = shown_name(sel, &s.name);
        if excluded(sel, &s.name, &shown) {
            continue;
        }
        let mut skip = |reason: String| {
            skipped.push(NotTraced {
                name: qualify(&shown),
                reason,
            })
        };
        if origin == Origin::Exe
            && STARTUP.contains(&s.name.as_str())
            && !named_by_filter(sel, &s.name)
        {
            skip("C start-up code (name it with -F to trace it)".into());
            continue;
        }
        if RETURNS_TWICE.contains(&s.name.as_str()) {
            skip("shares its caller's stack with the child: its returns cannot be paired with its calls".into());
            continue;
        }
        if s.kind == SymKind::Ifunc {
            skip(
                "IFUNC resolver: calls go to the implementation it selects, which has no \
                 symbol here"
                    .into(),
            );
            continue;
        }
        if !elf.is_exec_vaddr(s.value) {
            skip(format!("{:#x} is not in an executable segment", s.value));
            continue;
        }
        let Some(opcode) = elf.first_byte(s.value) else {
            skip(format!("{:#x} has no bytes in the file", s.value));
            continue;
        };
        funcs.push(Func {
            name: s.name.clone(),
            shown,
            module: path.to_path_buf(),
            link: s.value,
            opcode,
            origin,
            line: None,
        });
    }
    // The functions no symbol names, bounded by the unwind table: named
    // by their link-time address (`sub_1a2b0`), the executable's entry
    // point `_start` (start-up code, as above).
    for (start, _) in elf.unnamed_functions() {
        // A symbol without a size names it (crtstuff's `frame_dummy`).
        if named.contains(&start) || elf.is_fragment(start, None) {
            continue;
        }
        let name = if origin == Origin::Exe && start == elf.entry {
            "_start".to_string()
        } else {
            unnamed_name(start)
        };
        if excluded(sel, &name, &name) {
            continue;
        }
        if origin == Origin::Exe && name == "_start" && !named_by_filter(sel, &name) {
            skipped.push(NotTraced {
                name,
                reason: "C start-up code (name it with -F to trace it)".into(),
            });
            continue;
        }
        let Some(opcode) = elf.first_byte(start) else {
            continue;
        };
        funcs.push(Func {
            shown: name.clone(),
            name,
            module: path.to_path_buf(),
            link: start,
            opcode,
            origin,
            line: None,
        });
    }
}

/// The name `wprobe trace` gives a function no symbol names: `sub_` and
/// its link-time address in hex, as disassemblers name them.
pub fn unnamed_name(link: u64) -> String {
    format!("sub_{link:x}")
}

/// The PLT entries of the executable, named `SYMBOL@plt`: entry `i` of
/// `.plt.sec` (IBT binaries), else entry `i + 1` of `.plt`, belongs to
/// relocation `i` of `.rela.plt`.
fn plt_entries(
    elf: &ElfInfo,
    path: &Path,
    sel: &Selection,
    funcs: &mut Vec<Func>,
    skipped: &mut Vec<NotTraced>,
) -> Result<(), String> {
    let g = Elf::parse(elf.file_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    let section = |name: &str| {
        g.section_headers
            .iter()
            .find(|h| g.shdr_strtab.get_at(h.sh_name) == Some(name))
    };
    let (base, first) = match (section(".plt.sec"), section(".plt")) {
        (Some(sec), _) => (sec.sh_addr, 0),
        (None, Some(plt)) => (plt.sh_addr, 1),
        (None, None) => return Ok(()),
    };
    let mut seen = HashSet::new();
    for (i, r) in g.pltrelocs.iter().enumerate() {
        let Some(sym) = g.dynsyms.get(r.r_sym) else {
            continue;
        };
        let Some(name) = g.dynstrtab.get_at(sym.st_name) else {
            continue;
        };
        if name.is_empty() || !seen.insert(name.to_string()) {
            continue;
        }
        let addr = base + PLT_ENTRY * (i as u64 + first);
        let plt_name = format!("{name}@plt");
        let shown = format!("{}@plt", shown_name(sel, name));
        if excluded(sel, &plt_name, &shown) || excluded(sel, name, &shown_name(sel, name)) {
            continue;
        }
        if RETURNS_TWICE.contains(&name) {
            skipped.push(NotTraced {
                name: shown,
                reason: "shares its caller's stack with the child: its returns cannot be paired with its calls".into(),
            });
            continue;
        }
        let Some(opcode) = elf.first_byte(addr) else {
            skipped.push(NotTraced {
                name: shown,
                reason: format!("PLT entry {addr:#x} has no bytes in the file"),
            });
            continue;
        };
        funcs.push(Func {
            name: plt_name,
            shown,
            module: path.to_path_buf(),
            link: addr,
            opcode,
            origin: Origin::Plt,
            line: None,
        });
    }
    Ok(())
}

/// C run-time start-up functions the executable reaches through a GOT
/// slot (`_start`'s call of `__libc_start_main`, the destructors'
/// `__cxa_finalize`, weak hooks): not traced unless a `-F` names them.
const STARTUP_IMPORTS: &[&str] = &[
    "__libc_start_main",
    "__cxa_finalize",
    "__gmon_start__",
    "_ITM_deregisterTMCloneTable",
    "_ITM_registerTMCloneTable",
];

/// The library functions the executable calls through a GOT slot and no
/// PLT entry (`call *f@GOTPCREL(%rip)`, code built with `-fno-plt`),
/// named `SYMBOL@plt` as the calls through a PLT entry are: one function
/// per slot, its entry the slot (see [`Origin::Got`]).
fn got_calls(
    elf: &ElfInfo,
    path: &Path,
    sel: &Selection,
    funcs: &mut Vec<Func>,
    skipped: &mut Vec<NotTraced>,
) {
    for (slot, name) in elf.got_only_imports() {
        let plt_name = format!("{name}@plt");
        let shown = format!("{}@plt", shown_name(sel, name));
        if excluded(sel, &plt_name, &shown) || excluded(sel, name, &shown_name(sel, name)) {
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
        funcs.push(Func {
            name: plt_name,
            shown,
            module: path.to_path_buf(),
            link: slot,
            opcode: elf.bytes_at(slot, 1).map_or(0, |b| b[0]),
            origin: Origin::Got,
            line: None,
        });
    }
}

/// The shared libraries `--lib` globs name, for a command about to be
/// launched: the libraries the executable needs (`DT_NEEDED`, closed over
/// their own needs, found as the dynamic linker finds them: `DT_RPATH`,
/// `LD_LIBRARY_PATH`, `DT_RUNPATH`, then `ld.so.cache` and the default
/// directories) whose base name or soname matches; a glob without
/// wildcards that names none of them names a library the program may load
/// later (`dlopen`), found by path or name.
pub fn libraries_for_launch(exe: &Path, globs: &[String]) -> Result<Vec<PathBuf>, String> {
    if globs.is_empty() {
        return Ok(Vec::new());
    }
    let env_dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|d| !d.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    let mut out: Vec<(PathBuf, Option<String>)> = Vec::new();
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut queue: Vec<PathBuf> = vec![exe.to_path_buf()];
    let mut first = true;
    while let Some(file) = queue.pop() {
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        let Ok(g) = Elf::parse(&bytes) else { continue };
        if first {
            if let Some(interp) = g.interpreter {
                queue.push(PathBuf::from(interp));
            }
            first = false;
        } else {
            let canon = crate::proc::procmaps::canonical(&file);
            if seen.insert(canon.clone()) && lib_matches(&canon, g.soname, globs) {
                out.push((canon, g.soname.map(str::to_string)));
            }
        }
        let dirs = search_dirs(&file, &g, &env_dirs);
        for name in &g.libraries {
            if let Some(p) = needed_library(name, &dirs) {
                let canon = crate::proc::procmaps::canonical(&p);
                if !seen.contains(&canon) {
                    queue.push(p);
                }
            }
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

/// The directories the dynamic linker searches, before `ld.so.cache`, for
/// the `DT_NEEDED` libraries of `file`: its `DT_RPATH` (ignored when it
/// has a `DT_RUNPATH`), `LD_LIBRARY_PATH`, its `DT_RUNPATH`; `$ORIGIN`
/// is the directory of `file`.
fn search_dirs(file: &Path, g: &Elf, env_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let origin = file
        .parent()
        .unwrap_or(Path::new("/"))
        .display()
        .to_string();
    let split = |list: &[&str]| -> Vec<PathBuf> {
        list.iter()
            .flat_map(|l| l.split(':'))
            .filter(|d| !d.is_empty())
            .map(|d| PathBuf::from(d.replace("${ORIGIN}", &origin).replace("$ORIGIN", &origin)))
            .collect()
    };
    let mut dirs = Vec::new();
    if g.runpaths.is_empty() {
        dirs.extend(split(&g.rpaths));
    }
    dirs.extend(env_dirs.iter().cloned());
    dirs.extend(split(&g.runpaths));
    dirs
}

/// Where the dynamic linker finds `DT_NEEDED` entry `name`: a path as it
/// is, else the first of `dirs` holding it, else `ld.so.cache` and the
/// default directories.
fn needed_library(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .or_else(|| wprobe_elf::locate::library(name))
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
