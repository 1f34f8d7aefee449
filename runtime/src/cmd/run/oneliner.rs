//! The one-liner side of `wprobe run`: `-e PROGRAM`, `script.bt` files,
//! `--event SPEC` probe events, `-c CMD` (`-l` listings: `listing`), and runs
//! without a traced process (programs with only `BEGIN`, `END` and
//! `interval` probes). Programs are compiled by `bt2wasm` and then loaded
//! like any other module: the session, the transports and the output path
//! are shared.

use crate::cmd::run::RunArgs;
use crate::session::{LoadedProgram, Session};
use crate::wasm::cache::Cache;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cmd::CmdResult;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cmd::is_bt;

/// Whether `path` names a program of any kind wprobe runs.
fn is_program_file(path: &Path) -> bool {
    is_bt(path)
        || path
            .extension()
            .is_some_and(|e| e == "rpn" || e == "wasm" || e == "wat")
}

/// Whether the run has one-liner inputs (`-e`, `.bt`, `--event`).
pub fn active(a: &RunArgs) -> bool {
    a.program_text.is_some() || !a.events.is_empty() || a.programs.iter().any(|p| is_bt(p))
}

/// Whether a loaded module uses one-liner features (maps, output events,
/// `begin`/`end`/`interval` probes).
pub fn is_oneliner_module(m: &crate::wasm::load::LoadedModule) -> bool {
    !m.manifest.maps.is_empty()
        || !m.events.is_empty()
        || m.manifest
            .probes
            .iter()
            .any(|p| p.trigger != hostabi::manifest::Trigger::Hit)
}

/// Moves `-c CMD` (split on spaces, as bpftrace does) into the command,
/// and takes bpftrace's positional parameters out of the program list:
/// after `-e PROGRAM`, or after a `.bt` file (or `-`), the words that are
/// not program files are `$1`, `$2`, ...
pub fn normalize(mut a: RunArgs) -> RunArgs {
    let first_bt = a.programs.iter().position(|p| is_bt(p));
    let from = if a.program_text.is_some() && !a.list {
        Some(0)
    } else {
        first_bt.map(|i| i + 1)
    };
    if let Some(from) = from {
        type Indexed = Vec<(usize, PathBuf)>;
        let (keep, params): (Indexed, Indexed) = a
            .programs
            .drain(..)
            .enumerate()
            .partition(|(i, p)| *i < from || is_program_file(p));
        a.programs = keep.into_iter().map(|(_, p)| p).collect();
        a.params = params
            .into_iter()
            .map(|(_, p)| p.to_string_lossy().into_owned())
            .collect();
    }
    if let Some(c) = a.cmd.take() {
        a.command = c
            .split(' ')
            .filter(|w| !w.is_empty())
            .map(Into::into)
            .collect();
    }
    a
}

/// The compile options of this run (environment variables as bpftrace reads them).
pub fn options(a: &RunArgs) -> bt2wasm::Options {
    let env_u32 = |name: &str, default: u32, max: u32| -> u32 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|v| *v > 0)
            .map_or(default, |v| v.min(max))
    };
    let command = crate::probe::programs::command_dir(&a.command).and_then(|d| {
        let name = Path::new(a.command.first()?).file_name()?;
        Some(d.join(name))
    });
    bt2wasm::Options {
        check: bt2wasm::check::Options {
            strlen: env_u32(
                "BPFTRACE_MAX_STRLEN",
                env_u32("BPFTRACE_STRLEN", 64, 4096),
                4096,
            ),
            map_keys: env_u32(
                "BPFTRACE_MAP_KEYS_MAX",
                hostabi::maps::DEFAULT_MAX_KEYS,
                hostabi::maps::MAX_KEYS_PER_MAP,
            ),
            ustack_frames: 127,
            has_child: !a.command.is_empty(),
            stack_mode: std::env::var("BPFTRACE_STACK_MODE")
                .ok()
                .filter(|m| matches!(m.as_str(), "bpftrace" | "perf" | "raw"))
                .unwrap_or_else(|| "bpftrace".into()),
            unsafe_calls: a.unsafe_calls,
        },
        pid: a.pid,
        command,
        params: a.params.clone(),
        no_process: a.pid.is_none() && a.command.is_empty(),
        unsized_symbols: a.transport == "ptrace" || a.transport == "perf",
    }
}

/// What the `config` blocks of the one-liner programs compiled by this
/// process decide for the run (a `wprobe run` compiles its programs, then
/// runs them: the run reads it once they are loaded).
static RUN_CONFIG: std::sync::Mutex<Option<bt2wasm::check::config::RunConfig>> =
    std::sync::Mutex::new(None);

/// The `config` decisions of the programs compiled so far (the defaults
/// when none had a block).
pub fn run_config() -> bt2wasm::check::config::RunConfig {
    RUN_CONFIG
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default()
}

/// Whether symbols are demangled: `BPFTRACE_CPP_DEMANGLE` when set (it
/// wins over the program's `config` block, as in bpftrace), else what the
/// block said (`configured`).
pub fn cpp_demangle(configured: bool) -> bool {
    match std::env::var("BPFTRACE_CPP_DEMANGLE") {
        Ok(v) => !matches!(v.as_str(), "0" | "false"),
        Err(_) => configured,
    }
}

/// Compiles a `.bt` file or `-e` text; the error is the rendered diagnostics.
pub fn compile_text(name: &str, text: &str, opts: &bt2wasm::Options) -> Result<Vec<u8>, String> {
    match bt2wasm::compile(name, text, opts) {
        Ok(c) => {
            for w in &c.warnings {
                crate::elog!("{w}");
            }
            if c.config != bt2wasm::check::config::RunConfig::default() {
                *RUN_CONFIG.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.config.clone());
            }
            Ok(c.wasm)
        }
        Err((d, map)) => {
            let n = d.0.len();
            Err(crate::probe::programs::diagnostics_failure(
                &d.render(&map),
                &format!(
                    "could not compile `{name}` ({n} error{})",
                    if n == 1 { "" } else { "s" }
                ),
            ))
        }
    }
}

/// Loads the `-e` program and the `--event` specs as programs of the run.
pub fn extra_programs(
    engine: &wasmtime::Engine,
    a: &RunArgs,
    cache: &Cache,
) -> Result<Vec<LoadedProgram>, String> {
    let opts = options(a);
    let mut out = Vec::new();
    if let Some(text) = &a.program_text {
        let wasm = compile_text("-e", text, &opts)?;
        let (module, _) = crate::wasm::load::load_cached(engine, &wasm, None, None, cache)
            .map_err(|e| format!("loading the -e program: {e}"))?;
        out.push(LoadedProgram {
            label: "-e".into(),
            module,
        });
    }
    if !a.events.is_empty() {
        let wasm = match bt2wasm::compile_events(&a.events, &opts) {
            Ok(c) => c.wasm,
            Err((d, map)) => {
                return Err(crate::probe::programs::diagnostics_failure(
                    &d.render(&map),
                    "could not compile the probe events",
                ));
            }
        };
        let (module, _) = crate::wasm::load::load_cached(engine, &wasm, None, None, cache)
            .map_err(|e| format!("loading the probe events: {e}"))?;
        out.push(LoadedProgram {
            label: "event".into(),
            module,
        });
    }
    Ok(out)
}

/// A `.bt` file compiled and loaded.
pub fn load_file(
    engine: &wasmtime::Engine,
    path: &Path,
    a: &RunArgs,
    cache: &Cache,
) -> Result<LoadedProgram, String> {
    let (name, text) = if path.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
            .map_err(|e| format!("reading the program on standard input: {e}"))?;
        ("stdin".to_string(), b)
    } else {
        let b = std::fs::read(path).map_err(|e| {
            crate::probe::programs::diagnostics_failure(
                &crate::cmd::cmdline::at_own_arg(
                    path.as_os_str(),
                    &format!("failed to open file '{}': {}", path.display(), io_words(&e)),
                ),
                &format!("could not read `{}`", path.display()),
            )
        })?;
        (path.display().to_string(), b)
    };
    let text = String::from_utf8_lossy(&text);
    let wasm = compile_text(&name, &text, &options(a))?;
    let (module, _) = crate::wasm::load::load_cached(engine, &wasm, None, None, cache)
        .map_err(|e| format!("loading {}: {e}", path.display()))?;
    Ok(LoadedProgram {
        label: crate::probe::programs::program_label(path),
        module,
    })
}

/// An I/O error's words without the `(os error N)` Rust adds.
fn io_words(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Runs a session that traces no process: `begin` probes, the interval
/// probes until `exit()` or a signal, `end` probes, the maps.
pub fn run_without_target(mut session: Session, stop: &AtomicBool) -> CmdResult {
    session.begin();
    let tick = session.tick_period();
    while !stop.load(Ordering::SeqCst) {
        let nap = tick.unwrap_or(std::time::Duration::from_millis(20));
        std::thread::sleep(nap.min(std::time::Duration::from_millis(20)));
        if tick.is_some() {
            session.tick();
        }
        session.metrics_tick_idle();
    }
    session.end();
    session.summary();
    session.publish_final_metrics();
    Ok(crate::out::btout::requested_exit_status().map_or(ExitCode::SUCCESS, ExitCode::from))
}

/// After the transport stopped: a command still running after `exit()` is
/// sent SIGTERM (as bpftrace does), the `end` probes run and the maps are
/// printed. Returns the exit status to report (`None` after `exit()`).
pub fn finish(
    session: &mut Session,
    launched: Option<i32>,
    status: Option<crate::transport::ExitStatus>,
) -> Option<crate::transport::ExitStatus> {
    let exited = session.exited();
    if exited && let Some(pid) = launched {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    session.end();
    if exited { None } else { status }
}

/// `wprobe bench -e PROGRAM`: the program text as a `.bt` file of the
/// temporary directory (so that every bench mode, `--end-to-end` included,
/// takes it as a program file).
pub fn bench_program_file(text: &str) -> Result<std::path::PathBuf, String> {
    let h = blake3::hash(text.as_bytes()).to_hex();
    let p = std::env::temp_dir().join(format!("wprobe-e-{}.bt", &h[..16]));
    std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))?;
    Ok(p)
}
