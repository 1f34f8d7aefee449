//! `wprobe run -l [PATTERN]` / `-lv`, as `bpftrace -l` lists: the probes of
//! a program (`-l -e PROGRAM`, `-l script.bt`), or the probes matching a
//! pattern `PROVIDER:TARGET:GLOB` where the provider and the target may be
//! wildcards (`*:./app:*`, `uprobe:./lib*:f*`), with `-p` the files the
//! process maps (`-l -p PID` alone: every function of them), and
//! `interval:*` its four units. Kernel probe types list nothing: wprobe
//! traces user space. With `-v`, each function's DWARF parameters.

use crate::cmd::run::RunArgs;
use crate::cmd::{CliError, CmdResult};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Runs the listing.
pub fn list(a: &RunArgs) -> CmdResult {
    let mut out = String::new();
    let opts = super::oneliner::options(a);
    // A program: the probes it attaches.
    let program = match (&a.program_text, a.programs.first()) {
        (Some(t), _) => Some(("-e".to_string(), t.clone())),
        (None, Some(p)) if crate::cmd::is_bt(p) && p.is_file() => {
            let text =
                std::fs::read(p).map_err(|e| CliError::user(format!("{}: {e}", p.display())))?;
            Some((
                p.display().to_string(),
                String::from_utf8_lossy(&text).into_owned(),
            ))
        }
        _ => None,
    };
    if let Some((name, text)) = program {
        match bt2wasm::probe_names(&name, &text, &opts) {
            Ok(names) => {
                for n in names {
                    out.push_str(&shown_probe(&n));
                    out.push('\n');
                }
            }
            Err((d, map)) => {
                return Err(CliError::user(crate::probe::programs::diagnostics_failure(
                    &d.render(&map),
                    &format!("could not list the probes of `{name}`"),
                )));
            }
        }
        let _ = std::io::stdout().write_all(out.as_bytes());
        return Ok(ExitCode::SUCCESS);
    }
    let pattern = match a.programs.first() {
        Some(p) => {
            let s = p.to_string_lossy().into_owned();
            if s.ends_with(".bt") {
                crate::elog!(
                    "WARNING: It appears that '{s}' is a filename but the file does not exist. Treating '{s}' as a search pattern."
                );
            }
            s
        }
        None if a.pid.is_some() => "uprobe:*".to_string(),
        None => "*".to_string(),
    };
    let parts: Vec<&str> = pattern.split(':').collect();
    let provider = parts[0];
    if glob(provider, "interval") {
        for u in ["hz", "ms", "s", "us"] {
            out.push_str(&format!("interval:{u}:\n"));
        }
    }
    for full in ["uprobe", "uretprobe"] {
        // `*` providers list uprobes once (uretprobes are the same functions).
        let named = matches!((provider, full), ("u", "uprobe") | ("ur", "uretprobe"));
        if !(named || glob(provider, full)) || (full == "uretprobe" && provider.contains('*')) {
            continue;
        }
        let (target, func) = match parts.as_slice() {
            [_, t, g] => (t.to_string(), g.to_string()),
            // C++ names (demangled, without parameters) match `cpp:GLOB`.
            [_, t, lang, g @ ..] if *lang == "cpp" && !g.is_empty() => {
                (t.to_string(), format!("cpp:{}", g.join(":")))
            }
            [_, t, _lang, g] => (t.to_string(), g.to_string()),
            [_, g] if a.pid.is_some() => ("*".to_string(), g.to_string()),
            [_] if a.pid.is_some() => ("*".to_string(), "*".to_string()),
            [_] => continue,
            _ => {
                return Err(CliError::user(format!(
                    "-l pattern `{pattern}` is not {full}:BINARY:GLOB"
                )));
            }
        };
        for (path, shown) in targets(&target, a.pid)? {
            list_functions(&mut out, full, &path, &shown, &func, a.verbose)?;
        }
    }
    if provider == "U" || glob(provider, "usdt") {
        list_usdt(&mut out, &parts, a.pid, a.verbose)?;
    } else if a.programs.is_empty() && a.pid.is_some() {
        // `-l -p PID`: the process's USDT probes too.
        list_usdt(&mut out, &["usdt"], a.pid, a.verbose)?;
    }
    let _ = std::io::stdout().write_all(out.as_bytes());
    Ok(ExitCode::SUCCESS)
}

/// `usdt:TARGET[:PROVIDER]:NAME` (with `-p`, `usdt:*` or `usdt`): one
/// line per probe (several sites list once), sorted; with `-v` each
/// argument's spec and type.
fn list_usdt(
    out: &mut String,
    parts: &[&str],
    pid: Option<i32>,
    verbose: bool,
) -> Result<(), CliError> {
    let (target, prov, name) = match parts {
        [_, t, n] => (t.to_string(), None, n.to_string()),
        [_, t, p, n] => (
            t.to_string(),
            (!p.is_empty()).then(|| p.to_string()),
            n.to_string(),
        ),
        [_, g] if pid.is_some() => ("*".to_string(), None, g.to_string()),
        [_] if pid.is_some() => ("*".to_string(), None, "*".to_string()),
        [_] => return Ok(()),
        _ => {
            return Err(CliError::user(format!(
                "-l pattern `{}` is not usdt:BINARY:[PROVIDER:]GLOB",
                parts.join(":")
            )));
        }
    };
    let target = if target.is_empty() {
        "*".to_string()
    } else {
        target
    };
    let name = if name.is_empty() {
        "*".to_string()
    } else {
        name
    };
    if pid.is_none() && target.contains(['*', '?']) && !target.contains('/') {
        // Without a process, `*` names no file (bpftrace lists nothing).
        return Ok(());
    }
    for (path, shown) in targets(&target, pid)? {
        let Ok(bin) = bt2wasm::elf::Binary::open(&path) else {
            continue;
        };
        let mut rows: Vec<(String, String, String)> = bin
            .usdt_sites()
            .into_iter()
            .filter(|s| wprobe_elf::usdt::matches(s, prov.as_deref(), &name))
            .map(|s| (s.provider, s.name, s.args_text))
            .collect();
        rows.sort();
        rows.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        for (p, n, args) in rows {
            out.push_str(&format!("usdt:{shown}:{p}:{n}\n"));
            if verbose {
                for (i, a) in args.split_ascii_whitespace().enumerate() {
                    out.push_str(&format!("    arg{i}: {a}\n"));
                }
            }
        }
    }
    Ok(())
}

fn glob(pattern: &str, name: &str) -> bool {
    bt2wasm::elf::glob(pattern, name)
}

/// A probe's name as `-l` shows it (interval probes without their count).
fn shown_probe(n: &str) -> String {
    match n.strip_prefix("interval:") {
        Some(rest) => format!("interval:{}:", rest.split(':').next().unwrap_or_default()),
        None => n.to_string(),
    }
}

/// The binaries of a target: a path, a library or program name, or a
/// wildcard (over the files the process maps with `-p`); each with the
/// name it is shown by.
fn targets(target: &str, pid: Option<i32>) -> Result<Vec<(PathBuf, String)>, CliError> {
    let mut mapped: Vec<String> = Vec::new();
    if let Some(pid) = pid {
        if let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) {
            mapped.push(exe.to_string_lossy().into_owned());
        }
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        for l in maps.lines() {
            if let Some(p) = l.split_whitespace().nth(5)
                && p.starts_with('/')
                && !mapped.iter().any(|m| m == p)
            {
                mapped.push(p.to_string());
            }
        }
    }
    if target.contains(['*', '?']) {
        // A process's files are opened through its root (it may live in
        // another mount namespace) and shown as it names them.
        let open = |p: &Path| match pid {
            Some(pid) if p.is_absolute() => {
                PathBuf::from(format!("/proc/{pid}/root{}", p.display()))
            }
            _ => p.to_path_buf(),
        };
        let mut v: Vec<(PathBuf, String)> = bt2wasm::elf::glob_binaries(target, &mapped)
            .into_iter()
            .map(|p| (open(&p), p.display().to_string()))
            .filter(|(p, _)| {
                std::fs::read(p)
                    .map(|b| b.starts_with(b"\x7fELF"))
                    .unwrap_or(false)
            })
            .collect();
        v.sort();
        v.dedup();
        return Ok(v);
    }
    let Some(path) = bt2wasm::elf::resolve_binary(target, &mapped) else {
        return Err(CliError::user(format!(
            "uprobe target file '{target}' does not exist or is not executable"
        )));
    };
    // A library found by its short name is shown by its path (as bpftrace does).
    let shown = if target.starts_with("lib") && !target.contains('/') {
        path.display().to_string()
    } else {
        target.to_string()
    };
    Ok(vec![(path, shown)])
}

/// The functions of `path` matching `func`, one line each.
fn list_functions(
    out: &mut String,
    full: &str,
    path: &Path,
    shown: &str,
    func: &str,
    verbose: bool,
) -> Result<(), CliError> {
    let bin = match bt2wasm::elf::Binary::open(path) {
        Ok(b) => b,
        // A wildcard may match files that are not ELF objects.
        Err(e) if shown.contains('*') => {
            let _ = e;
            return Ok(());
        }
        Err(e) => return Err(CliError::user(e.to_string())),
    };
    let debug = if verbose {
        bt2wasm::dwarf::Debug::load(bin.bytes())
    } else {
        None
    };
    for f in &bin.funcs {
        let name = match func.strip_prefix("cpp:") {
            Some(g) => match bt2wasm::probes::cpp_name(&f.name) {
                Some(n) if f.size > 0 && glob(g, &n) => format!("cpp:{n}"),
                _ => continue,
            },
            None if glob(func, &f.name) => f.name.clone(),
            None => continue,
        };
        out.push_str(&format!("{full}:{shown}:{name}\n"));
        if let Some(d) = &debug
            && let Some(params) = d.params(&f.name)
        {
            for p in params {
                out.push_str(&format!("    {} {}\n", p.type_name, p.name));
            }
        }
    }
    Ok(())
}
