//! Uprobe attach points (`uprobe:BIN:FUNC`, `uretprobe:...`): the binary
//! resolved (a path, a library's short name, a glob, `/proc/PID/root/...`),
//! the functions a name or a glob matches (C++ names too), and offsets and
//! addresses checked against instruction boundaries.

use super::{Concrete, Env, Kind, in_process_root, parse_u64};
use crate::diag::{Sink, codes};
use crate::elf::{Binary, find_library, resolve_binary};
use rpn2wasm::Span;
use std::path::PathBuf;

/// For a library named by its short name (`libpthread`) and a function
/// `spec` names without a wildcard that `bin` does not define: the first
/// library `bin` needs (`DT_NEEDED`) that defines it, and its path.
fn moved_function(
    target: &str,
    spec: &str,
    bin: &std::rc::Rc<Binary>,
    env: &mut Env,
) -> Option<(std::path::PathBuf, std::rc::Rc<Binary>)> {
    if target.contains('/') || !target.starts_with("lib") {
        return None;
    }
    let name = spec.strip_prefix("cpp:").unwrap_or(spec);
    let name = name.split_once('+').map_or(name, |(f, _)| f);
    if name.is_empty()
        || name.contains(['*', '?', '['])
        || name.starts_with("0x")
        || bin.func(name).is_some()
    {
        return None;
    }
    bin.needed().iter().find_map(|lib| {
        let p = find_library(lib)?;
        let b = env.binary(&p).ok()?;
        b.func(name).is_some().then_some((p, b))
    })
}

pub(crate) fn uprobe(
    parts: &[&str],
    ret: bool,
    span: Span,
    env: &mut Env,
    diags: &mut Sink,
) -> Vec<Concrete> {
    let full = if ret { "uretprobe" } else { "uprobe" };
    let owned = uprobe_parts(parts, env);
    let parts: Vec<&str> = owned.iter().map(String::as_str).collect();
    if parts.len() != 3 || parts[1].is_empty() || parts[2].is_empty() {
        diags.error(
            codes::ATTACH_POINT,
            span,
            format!("{full} probe type requires 2 arguments"),
        );
        return Vec::new();
    }
    let (target, spec) = (parts[1], parts[2]);
    if target.contains(['*', '?']) {
        return uprobe_each_binary(parts[0], target, spec, ret, span, env, diags);
    }
    let Some((path, bin)) = open_binary(target, full, span, env, diags) else {
        return Vec::new();
    };
    // A function a library named by its short name does not define, one of
    // the libraries it needs does: glibc 2.34 moved libpthread's, libdl's
    // and librt's functions into libc, leaving those libraries as stubs
    // that need libc (`uprobe:libpthread:pthread_create`, bpftrace's
    // threadsnoop.bt). The probe goes where the dynamic linker binds the
    // name: the first needed library that defines it.
    let (path, bin) = match moved_function(target, spec, &bin, env) {
        Some(found) => found,
        None => (path, bin),
    };
    // Libraries named without a path are bound at run time to the file the
    // target maps (by base name) and located by symbol there.
    let by_name = !target.contains('/') && bin.is_dyn && target.starts_with("lib");
    let Some(module) = uprobe_module(target, &path, by_name, span, diags) else {
        return Vec::new();
    };
    // bpftrace names a library found by its short name by the path found.
    let shown_target = if target.starts_with("lib") && !target.contains('/') {
        path.display().to_string()
    } else {
        target.to_string()
    };
    let shown = |f: &str| format!("{full}:{shown_target}:{f}");
    let (cpp, spec) = match spec.strip_prefix("cpp:") {
        Some(s) => (true, s),
        None => (false, spec),
    };
    // FUNC+OFF
    let Some((func_pat, off)) = func_offset(spec, ret, span, diags) else {
        return Vec::new();
    };
    // BIN:ADDR
    if off.is_none()
        && let Some(addr) = parse_u64(spec)
    {
        let Some(f) = address_func(&bin, addr, ret, target, span, diags) else {
            return Vec::new();
        };
        return vec![Concrete {
            kind: Kind::Uprobe {
                ret,
                module,
                symbol: None,
                offset: addr,
                value: Some(addr),
                opcode: bin.bytes_at(addr, 1).first().copied(),
            },
            name: shown(spec),
            func: f.name.clone(),
            provider: full,
            params: None,
        }];
    }
    let matches = uprobe_matches(&bin, cpp, func_pat, target, &shown, span, diags);
    if matches.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for f in matches {
        let o = off.unwrap_or(0);
        if f.size == 0 && !unsized_accepted(&f.name, env, span, diags) {
            continue;
        }
        if o > 0 {
            if f.size > 0 && o >= f.size {
                diags.error(
                    codes::NOT_BOUNDARY,
                    span,
                    format!(
                        "Offset outside the function bounds ('{}' size is {})",
                        f.name, f.size
                    ),
                );
                continue;
            }
            if !check_boundary(&bin, &f, o, target, span, diags) {
                continue;
            }
        }
        let addr = f.value.wrapping_add(o);
        let params = if ret || o != 0 {
            None
        } else {
            crate::dwarf::function_params(bin.bytes(), &f.name)
        };
        out.push(Concrete {
            kind: Kind::Uprobe {
                ret,
                module: module.clone(),
                symbol: Some(f.name.clone()),
                offset: o,
                value: (!by_name).then_some(addr),
                opcode: if by_name {
                    None
                } else {
                    bin.bytes_at(addr, 1).first().copied()
                },
            },
            name: match (cpp, off) {
                (true, Some(_)) => shown(&format!("cpp:{func_pat}+{o}")),
                (true, None) => shown(&format!("cpp:{func_pat}")),
                (false, Some(_)) => shown(&format!("{}+{o}", f.name)),
                (false, None) => shown(&f.name),
            },
            func: f.name.clone(),
            provider: full,
            params,
        });
    }
    out
}

/// The binary a uprobe's `target` names (a path, a library's short name, a
/// program on PATH), opened; `None` after an error.
fn open_binary(
    target: &str,
    full: &str,
    span: Span,
    env: &mut Env,
    diags: &mut Sink,
) -> Option<(PathBuf, std::rc::Rc<Binary>)> {
    let Some(path) = resolve_binary(target, &env.mapped) else {
        diags.error_note(
            codes::BINARY,
            span,
            format!("{full} target file '{target}' does not exist or is not executable"),
            "give a path, a library name such as `libc`, or a program on PATH",
        );
        return None;
    };
    let bin = match env.binary(&path) {
        Ok(b) => b,
        Err(e) => {
            diags.error(codes::BINARY, span, e);
            return None;
        }
    };
    Some((path, bin))
}

/// FUNC and OFF of `FUNC+OFF` (no offset in a return probe); `None` after
/// an error.
fn func_offset<'s>(
    spec: &'s str,
    ret: bool,
    span: Span,
    diags: &mut Sink,
) -> Option<(&'s str, Option<u64>)> {
    Some(match spec.split_once('+') {
        Some((f, o)) => {
            if ret {
                diags.error(codes::ATTACH_POINT, span, "Offset not allowed");
                return None;
            }
            match parse_u64(o) {
                Some(o) => (f, Some(o)),
                None => {
                    diags.error(codes::ATTACH_POINT, span, "Invalid offset");
                    return None;
                }
            }
        }
        None => (spec, None),
    })
}

/// The parts of a uprobe attach point as one form: with `-p`, the binary
/// left out is the process's executable; `BIN:cpp:FUNC` (an unquoted
/// `ns::f` spans parts) keeps FUNC with its language as one part.
fn uprobe_parts(parts: &[&str], env: &Env) -> Vec<String> {
    let owned: Vec<String> = if parts.len() == 2 && env.pid.is_some() {
        // With -p, the binary may be left out: the process's executable.
        let exe = std::fs::read_link(format!("/proc/{}/exe", env.pid.unwrap_or(0)))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        vec![parts[0].to_string(), exe, parts[1].to_string()]
    } else {
        parts.iter().map(|s| s.to_string()).collect()
    };
    // `uprobe:BIN:cpp:FUNC`: FUNC is a C++ name (demangled, without its
    // parameters), kept with its language as one part.
    match owned.as_slice() {
        // Unquoted, `ns::f` spans parts.
        [p, bin, lang, func @ ..] if lang == "cpp" && !func.is_empty() => {
            vec![p.clone(), bin.clone(), format!("cpp:{}", func.join(":"))]
        }
        _ => owned,
    }
}

/// A uprobe on every binary `target` (a glob) matches; those where no
/// function matches are left out, as bpftrace does.
fn uprobe_each_binary(
    provider: &str,
    target: &str,
    spec: &str,
    ret: bool,
    span: Span,
    env: &mut Env,
    diags: &mut Sink,
) -> Vec<Concrete> {
    let full = if ret { "uretprobe" } else { "uprobe" };
    let mut mapped = env.mapped.clone();
    if let Some(pid) = env.pid
        && let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe"))
    {
        mapped.push(exe.to_string_lossy().into_owned());
    }
    let files = crate::elf::glob_binaries(target, &mapped);
    let mut out = Vec::new();
    for f in files {
        let mut quiet = Sink::default();
        let p = f.to_string_lossy().into_owned();
        out.extend(uprobe(&[provider, &p, spec], ret, span, env, &mut quiet));
    }
    if out.is_empty() {
        diags.error(
            codes::NO_MATCH,
            span,
            format!("No probes matched '{full}:{target}:{spec}'"),
        );
    }
    out
}

/// The module a uprobe names: a library named without a path by its base
/// name (bound at run time to the file the target maps), a file under
/// `/proc/PID/root/` by the path the process maps, anything else by its
/// canonical path; `None` after an error. A usdt probe's module too.
pub(super) fn uprobe_module(
    target: &str,
    path: &std::path::Path,
    by_name: bool,
    span: Span,
    diags: &mut Sink,
) -> Option<String> {
    Some(if by_name {
        path.file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else if let Some(inside) = in_process_root(target) {
        // `/proc/PID/root/PATH`: the file as that process (maybe in
        // another mount namespace) maps it; the run reads it by that path.
        if !same_file(path, std::path::Path::new(&inside)) {
            diags.error(
                codes::UNSUPPORTED,
                span,
                format!(
                    "probes in a process whose files are not at the same paths here \
                     (another root: pivot_root, chroot, a container) are not supported: \
                     wprobe reads the module by the path the process maps, {inside}, \
                     which here is not {target}"
                ),
            );
            return None;
        }
        inside
    } else {
        std::fs::canonicalize(path)
            .unwrap_or(path.to_path_buf())
            .to_string_lossy()
            .into_owned()
    })
}

/// The function containing `addr`, a probe address (`BIN:ADDR`) checked to
/// be an instruction boundary; `None` after an error.
fn address_func(
    bin: &Binary,
    addr: u64,
    ret: bool,
    target: &str,
    span: Span,
    diags: &mut Sink,
) -> Option<crate::elf::Func> {
    if ret {
        diags.error(
            codes::ATTACH_POINT,
            span,
            "uretprobe on an address is not supported: give a function",
        );
        return None;
    }
    let Some(f) = bin.func_at(addr) else {
        diags.error_note(
            codes::NOT_BOUNDARY,
            span,
            format!("Could not determine the instruction boundary of {target}:0x{addr:x}: no function symbol contains it"),
            "wprobe places probes only where it can check the instruction boundary",
        );
        return None;
    };
    if !check_boundary(bin, &f, addr - f.value, target, span, diags) {
        return None;
    }
    Some(f)
}

/// The functions of `bin` a uprobe's FUNC (a name or a glob, C++ names
/// with `cpp`) matches; none after an error.
fn uprobe_matches(
    bin: &Binary,
    cpp: bool,
    func_pat: &str,
    target: &str,
    shown: &dyn Fn(&str) -> String,
    span: Span,
    diags: &mut Sink,
) -> Vec<crate::elf::Func> {
    use wprobe_elf::NameForm;
    // Each name as bpftrace probes it: the C++ name without parameters
    // with `cpp:`, else the symbol.
    let matches: Vec<crate::elf::Func> = if cpp || func_pat.contains(['*', '?']) {
        let forms: &[NameForm] = if cpp {
            &[NameForm::Cpp]
        } else {
            &[NameForm::Raw]
        };
        bin.matching(func_pat, forms)
            .into_iter()
            .filter(|f| f.size > 0 && bin.is_code(f.value))
            .cloned()
            .collect()
    } else {
        bin.func(func_pat).cloned().into_iter().collect()
    };
    if matches.is_empty() {
        if func_pat.contains('*') {
            diags.error(
                codes::NO_MATCH,
                span,
                format!("No probes matched '{}'", shown(func_pat)),
            );
        } else {
            diags.error(
                codes::NO_MATCH,
                span,
                format!("Could not resolve symbol: {target}:{func_pat}, cannot attach probe."),
            );
        }
    }
    matches
}

/// Whether a probe on `name`, a symbol of size 0 (`_init`), is accepted:
/// as bpftrace, only with `--unsafe` (its instruction boundaries cannot be
/// checked), and only where the transport needs no function bounds.
fn unsized_accepted(name: &str, env: &Env, span: Span, diags: &mut Sink) -> bool {
    if !env.unsafe_calls {
        diags.error(
            codes::NOT_BOUNDARY,
            span,
            format!(
                "Could not determine boundary for {name} (symbol has size 0); \
                 use --unsafe to force attachment"
            ),
        );
        return false;
    }
    if !env.unsized_symbols {
        diags.error(
            codes::NOT_BOUNDARY,
            span,
            format!(
                "{name} has size 0: the in-process transport places no probe in a function \
                 whose bounds it does not know; use --transport ptrace (or perf)"
            ),
        );
        return false;
    }
    true
}

/// Whether `a` and `b` name the same file (device and inode).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Checks that `off` is an instruction start of `f`; reports the nearest ones.
fn check_boundary(
    bin: &Binary,
    f: &crate::elf::Func,
    off: u64,
    target: &str,
    span: Span,
    diags: &mut Sink,
) -> bool {
    let Some(b) = bin.boundaries(f) else {
        diags.error(
            codes::NOT_BOUNDARY,
            span,
            format!(
                "Could not read the code of {}:{} to check the instruction boundary",
                target, f.name
            ),
        );
        return false;
    };
    if b.contains(&off) {
        return true;
    }
    let before = b.iter().rev().find(|x| **x < off).copied();
    let after = b.iter().find(|x| **x > off).copied();
    let near: Vec<String> = before
        .into_iter()
        .chain(after)
        .map(|x| format!("{}+{x}", f.name))
        .collect();
    diags.error_note(
        codes::NOT_BOUNDARY,
        span,
        format!(
            "Could not add uprobe into middle of instruction: {target}:{}+{off}",
            f.name
        ),
        format!("nearest instruction boundaries: {}", near.join(", ")),
    );
    false
}
