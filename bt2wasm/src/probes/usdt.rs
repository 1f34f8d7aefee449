//! `usdt:PATH:PROVIDER:NAME` and `usdt:PATH:NAME` (bpftrace's spellings):
//! one concrete probe per site of every matching USDT probe, its
//! arguments typed by the note. `PATH` resolves as for uprobes (a path, a
//! library name such as `libc`, a program on `PATH`, a wildcard); with
//! `-p` it may be empty (`usdt::PROVIDER:NAME`: the process's executable
//! and every file it maps). An empty or absent provider matches any.

use super::uprobe::uprobe_module;
use super::{Concrete, Env, Kind};
use crate::diag::{Sink, codes};
use crate::elf::{glob_binaries, resolve_binary};
use rpn2wasm::Span;
use std::path::{Path, PathBuf};

/// Expands a `usdt` attach point (its parts split at `:`).
pub fn expand(parts: &[&str], span: Span, env: &mut Env, diags: &mut Sink) -> Vec<Concrete> {
    let (target, provider, name) = match parts {
        [_, t, n] => (*t, None, *n),
        [_, t, p, n] => (*t, (!p.is_empty()).then_some(*p), *n),
        [_] => ("", None, "*"),
        _ => {
            diags.error(
                codes::ATTACH_POINT,
                span,
                "usdt probe type requires 2 or 3 arguments",
            );
            return Vec::new();
        }
    };
    let name = if name.is_empty() { "*" } else { name };
    let files = files(target, env);
    let Some(files) = files else {
        diags.error_note(
            codes::BINARY,
            span,
            format!("usdt target file '{target}' does not exist or is not executable"),
            "give a path, a library name such as `libc`, or a program on PATH; with -p it may be left empty",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for (path, shown) in files {
        out.extend(sites_of(
            &path,
            &shown,
            target,
            (provider, name),
            span,
            env,
            diags,
        ));
    }
    if out.is_empty() {
        let p = provider.map(|p| format!("{p}:")).unwrap_or_default();
        diags.error(
            codes::NO_MATCH,
            span,
            format!("No probes matched 'usdt:{target}:{p}{name}'"),
        );
    }
    out
}

/// The files a target names, each with the path the `probe` builtin shows.
fn files(target: &str, env: &Env) -> Option<Vec<(PathBuf, String)>> {
    let mut mapped = env.mapped.clone();
    if let Some(pid) = env.pid
        && let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe"))
    {
        mapped.insert(0, exe.to_string_lossy().into_owned());
    }
    if target.is_empty() || (target == "*" && env.pid.is_some()) {
        env.pid?;
        let mut seen = Vec::new();
        for m in mapped {
            if !seen.contains(&m) {
                seen.push(m);
            }
        }
        return Some(
            seen.into_iter()
                .map(|m| (PathBuf::from(&m), m))
                .filter(|(p, _)| p.is_file())
                .collect(),
        );
    }
    if target.contains(['*', '?']) {
        let mut found = glob_binaries(target, &mapped);
        if found.is_empty() && !mapped.is_empty() && target.contains('/') {
            // `./dir/prog*` with -p: the files of the directory.
            found = glob_binaries(target, &[]);
        }
        return Some(
            found
                .into_iter()
                .map(|p| {
                    let s = p.to_string_lossy().into_owned();
                    (p, s)
                })
                .collect(),
        );
    }
    let path = resolve_binary(target, &mapped)?;
    let shown = if target.starts_with("lib") && !target.contains('/') {
        path.display().to_string()
    } else {
        target.to_string()
    };
    Some(vec![(path, shown)])
}

fn sites_of(
    path: &Path,
    shown: &str,
    target: &str,
    (provider, name): (Option<&str>, &str),
    span: Span,
    env: &mut Env,
    diags: &mut Sink,
) -> Vec<Concrete> {
    let Ok(bin) = env.binary(path) else {
        // Wildcards and -p listings pass over what is not ELF.
        if !target.contains(['*', '?']) && !target.is_empty() {
            diags.error(
                codes::BINARY,
                span,
                format!("usdt target file '{}' is not an ELF file", path.display()),
            );
        }
        return Vec::new();
    };
    let by_name = !target.contains('/') && bin.is_dyn && target.starts_with("lib");
    let Some(module) = uprobe_module(&path.to_string_lossy(), path, by_name, span, diags) else {
        return Vec::new();
    };
    bin.usdt_sites()
        .into_iter()
        .filter(|s| wprobe_elf::usdt::matches(s, provider, name))
        .map(|s| Concrete {
            name: format!("usdt:{shown}:{}:{}", s.provider, s.name),
            func: s.name.clone(),
            provider: "usdt",
            params: None,
            kind: Kind::Usdt {
                module: module.clone(),
                addr: s.addr,
                fixed: !by_name,
                opcode: bin.bytes_at(s.addr, 1).first().copied(),
                semaphore: s.semaphore,
                args: s.args,
            },
        })
        .collect()
}
