//! The handler modules of a trace: the built-in one (`guests/trace/trace.wat`)
//! or those `--handler [GLOB=]FILE` names, the functions each runs for, the
//! manifest of each (an entry probe and a return probe on every one of its
//! functions), and their loading.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hostabi::manifest::{ArgSource, Location, LocationKind, MAX_MAXACTIVE, Manifest, ProbeSpec};
use hostabi::regs;

use crate::session::LoadedProgram;

use super::TraceArgs;
use super::funcs::Func;
use super::records::ProbeMap;

/// The built-in handlers (`guests/trace/trace.wat`).
pub const HANDLERS_WAT: &str = include_str!("../../../../guests/trace/trace.wat");
/// The export run at each entry.
pub const ENTRY_EXPORT: &str = "trace_entry";
/// The export run at each return.
pub const EXIT_EXPORT: &str = "trace_exit";

/// One handler module and the functions it runs for.
pub(super) struct HandlerModule {
    pub(super) label: String,
    pub(super) path: Option<PathBuf>,
    pub(super) bytes: Vec<u8>,
    pub(super) funcs: Vec<usize>,
}

/// Splits `--handler` values into the default module and per-glob ones.
pub(super) fn handler_modules(a: &TraceArgs, funcs: &[Func]) -> Result<Vec<HandlerModule>, String> {
    let mut default: Option<PathBuf> = None;
    let mut scoped: Vec<(String, PathBuf)> = Vec::new();
    for h in &a.handlers {
        match h.split_once('=') {
            Some((g, f)) if !Path::new(h).is_file() => scoped.push((g.to_string(), f.into())),
            _ => {
                if default.replace(h.into()).is_some() {
                    return Err("--handler FILE (for every function) given twice".into());
                }
            }
        }
    }
    let mut modules: Vec<HandlerModule> = Vec::new();
    let mut by_path: HashMap<PathBuf, usize> = HashMap::new();
    // One module for every function (no `GLOB=` handler): no look-up per
    // function (10,000 of them in a large program).
    if scoped.is_empty() {
        if funcs.is_empty() {
            return Ok(modules);
        }
        let m = module_for(&mut modules, &mut by_path, default.as_ref())?;
        modules[m].funcs = (0..funcs.len()).collect();
        return Ok(modules);
    }
    for (i, f) in funcs.iter().enumerate() {
        let scoped_hit = scoped.iter().find(|(g, _)| f.matches(g)).map(|(_, p)| p);
        let m = module_for(&mut modules, &mut by_path, scoped_hit.or(default.as_ref()))?;
        modules[m].funcs.push(i);
    }
    for (g, _) in &scoped {
        let used = funcs.iter().any(|f| f.matches(g));
        if !used {
            return Err(format!("--handler {g}=…: no traced function matches `{g}`"));
        }
    }
    Ok(modules)
}

/// The index in `modules` of the handler module at `p` (the built-in one
/// for `None`), read the first time.
fn module_for(
    modules: &mut Vec<HandlerModule>,
    by_path: &mut HashMap<PathBuf, usize>,
    p: Option<&PathBuf>,
) -> Result<usize, String> {
    let key = p.cloned().unwrap_or_default();
    if let Some(&i) = by_path.get(&key) {
        return Ok(i);
    }
    let (label, bytes) = match p {
        None => ("trace".to_string(), HANDLERS_WAT.as_bytes().to_vec()),
        Some(p) => {
            if p.extension().is_some_and(|e| e == "rpn" || e == "bt") {
                return Err(format!(
                    "--handler {}: give a .wasm or .wat module exporting `{ENTRY_EXPORT}` and \
                     `{EXIT_EXPORT}` (see guests/trace/trace.wat)",
                    p.display()
                ));
            }
            (
                crate::probe::programs::program_label(p),
                crate::probe::programs::read_module_file(p)?,
            )
        }
    };
    modules.push(HandlerModule {
        label,
        path: p.cloned(),
        bytes,
        funcs: Vec::new(),
    });
    by_path.insert(key, modules.len() - 1);
    Ok(modules.len() - 1)
}

/// What `trace_entry` may take as parameters, in order (`args`): `rsp` at
/// the entry, the call's identity in its thread.
fn entry_args() -> [ArgSource; 1] {
    [ArgSource::Reg(regs::RSP)]
}

/// What `trace_exit` may take as parameters, in order (`args`): the return
/// value, the entry's `rsp`, the call's duration in ns.
fn exit_args() -> [ArgSource; 3] {
    [
        ArgSource::Reg(regs::RAX),
        ArgSource::Entry(regs::RSP),
        ArgSource::Elapsed,
    ]
}

/// How many of [`entry_args`] and [`exit_args`] the module's handlers take
/// (a prefix of each): the parameter counts of its `trace_entry` and
/// `trace_exit` exports; 0 for a module that does not parse (its load says
/// why) or an export missing.
fn taken_args(bytes: &[u8]) -> (usize, usize) {
    let Ok(wasm) = crate::wasm::load::to_wasm(bytes) else {
        return (0, 0);
    };
    let Ok(facts) = crate::wasm::load::inspect(&wasm) else {
        return (0, 0);
    };
    let n = |name: &str, most: usize| {
        facts
            .func_exports
            .get(name)
            .map_or(0, |t| t.params().len().min(most))
    };
    (
        n(ENTRY_EXPORT, entry_args().len()),
        n(EXIT_EXPORT, exit_args().len()),
    )
}

/// The manifest of one handler module: an entry probe and a return probe
/// on each of its functions, their handlers taking the first `taken` of
/// [`entry_args`] and [`exit_args`].
fn manifest(
    exe: &Path,
    funcs: &[Func],
    which: &[usize],
    taken: (usize, usize),
    with_entry: bool,
) -> (Manifest, Vec<(u32, bool)>) {
    let mut m = Manifest {
        module: exe.display().to_string(),
        ..Manifest::default()
    };
    let mut map = Vec::with_capacity(which.len() * 2);
    m.probes
        .reserve(which.len() * if with_entry { 2 } else { 1 });
    for &i in which {
        let f = &funcs[i];
        let loc = Location {
            kind: LocationKind::Offset,
            symbol: None,
            addend: f.link,
        };
        let mut entry = ProbeSpec::breakpoint(ENTRY_EXPORT, loc);
        entry.value = Some(f.link);
        entry.opcode = Some(f.opcode);
        entry.maxhits = 0;
        if f.module != exe {
            entry.module = Some(f.module.display().to_string());
        }
        // The entry probe a copy only when it is armed too (not for the
        // built-in module, whose calls the transport reports).
        let armed_entry = with_entry.then(|| {
            let mut e = entry.clone();
            e.args = entry_args()[..taken.0].to_vec();
            e
        });
        let mut exit = entry;
        exit.export = EXIT_EXPORT.into();
        exit.r#return = true;
        exit.maxactive = MAX_MAXACTIVE;
        exit.args = exit_args()[..taken.1].to_vec();
        // The return probe first: a transport that patches code plans the
        // function's windows for both ends at once (a short function takes
        // one window for its entry and its `ret`).
        m.probes.push(exit);
        map.push((i as u32, true));
        if let Some(entry) = armed_entry {
            m.probes.push(entry);
            map.push((i as u32, false));
        }
    }
    (m, map)
}

/// Loads each handler module with its manifest (without the entry probes
/// where `notices` says the transport reports the calls: the built-in
/// module's): the session's programs, and which function and end each
/// probe of each is.
pub(super) fn load(
    engine: &wasmtime::Engine,
    cache: &crate::wasm::cache::Cache,
    exe: &Path,
    funcs: &[Func],
    modules: &[HandlerModule],
    notices: &[bool],
) -> Result<(Vec<LoadedProgram>, ProbeMap), String> {
    let mut programs = Vec::new();
    let mut probes = ProbeMap::default();
    for (hm, &notice) in modules.iter().zip(notices) {
        let (m, map) = manifest(exe, funcs, &hm.funcs, taken_args(&hm.bytes), !notice);
        let path = hm.path.as_deref();
        let (module, outcome) =
            crate::wasm::load::load_cached(engine, &hm.bytes, path, Some(m), cache).map_err(
                |e| match path {
                    Some(p) => format!("loading {}: {e}", p.display()),
                    None => format!("loading the built-in trace handlers: {e}"),
                },
            )?;
        if let Some(p) = path {
            crate::probe::programs::debug_cache_outcome(p, &outcome);
        }
        programs.push(LoadedProgram {
            label: hm.label.clone(),
            module,
        });
        probes.by_prog.push(map);
    }
    Ok((programs, probes))
}
