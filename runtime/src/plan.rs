//! `--transport auto`, the default: which transport serves a run.
//!
//! A planner above the transports (its own stage, between
//! [`transport`](crate::transport) and [`session`](crate::session)): it
//! reads the registry's [`Capabilities`](crate::transport::Capabilities)
//! and the run's needs, and imports no transport. In order of preference:
//!
//! 1. **inproc**: the handlers run in the target behind a jump (no trap,
//!    no system call per hit); within it, each site where no jump fits
//!    gets a trap (a ptrace stop per hit) and says why. Probes in
//!    libraries the process loads later (`dlopen`) are armed when the
//!    dynamic linker reports them (a trap at its `r_brk`).
//! 2. **ptrace**: what needs the thread stopped at the hit or a tracer
//!    present all along: `exit 1` (debugger hand-off), `exit 3` (core
//!    file), `-f` (fork children).
//! 3. **perf**: kernel uprobes, for a process another tracer holds
//!    (ptrace cannot attach) when the programs only read, and for every
//!    system-wide run (probes with no `-c`/`-p`: a uprobe on the file
//!    fires in every process that runs it, which neither an agent in one
//!    process nor a ptrace tracer can do).
//!
//! Each candidate is checked exactly as a forced `--transport NAME` would
//! be (the session's check, the transport's preflight), so `auto` fails
//! only where every transport would; a candidate that fails to start
//! (attach refused, agent not loadable) hands the run to the next one
//! ([`Plan::fallbacks`]) before anything of the target ran.

use crate::transport::{TRANSPORTS, TransportInfo};

/// The `--transport` value that lets the planner choose.
pub const AUTO: &str = "auto";

/// The transports `auto` considers, best first.
const PREFERENCE: [&str; 3] = ["inproc", "ptrace", "perf"];

/// What the run needs that the session's own check does not know.
#[derive(Clone, Debug, Default)]
pub struct Needs {
    /// Modules of probes that no process maps when arming starts (a
    /// library the program `dlopen`s): only a transport that arms later
    /// libraries serves them.
    pub later_modules: Vec<String>,
    /// Those of them that are programs (an executable the command or a
    /// child executes, as `taskset … PROG` does): only a transport that
    /// follows an exec, or arms files, serves them.
    pub later_programs: Vec<String>,
    /// `-p PID` names a process another tracer holds (its name and pid):
    /// no ptrace-based transport can attach.
    pub traced_by: Option<String>,
    /// A program reads registers chosen at run time (`read_reg` with a
    /// computed id): a transport that lacks some registers would give it
    /// zeros where a forced `--transport` only warns.
    pub registers_at_run_time: bool,
    /// Two probes closer than a 5-byte jump (`Session::
    /// probes_closer_than_a_jump`): the in-process transport would arm
    /// only the first.
    pub close_probes: Option<String>,
    /// No `-c`/`-p` and probes on files: the run is system-wide
    /// ([`crate::transport::Target::System`]).
    pub system_wide: bool,
    /// `-f`: a fork child may execute a program whose probes are to be
    /// armed (which cannot be known before the run).
    pub follow_forks: bool,
}

/// The transport chosen for a run, and why.
#[derive(Debug)]
pub struct Plan {
    /// The transport.
    pub info: &'static TransportInfo,
    /// The user named it (`--transport NAME`).
    pub forced: bool,
    /// Why it was chosen (for `-v` and the JSON statistics).
    pub reason: String,
    /// The better transports passed over, each with why.
    pub passed_over: Vec<(&'static str, String)>,
    /// The other candidates that passed every check, best first: where
    /// the chosen one fails to start, the run goes on with the next.
    pub fallbacks: Vec<&'static TransportInfo>,
}

impl Plan {
    /// One line for `-v`: the choice and the reasons.
    pub fn describe(&self) -> String {
        let mut s = format!("transport {}: {}", self.info.name, self.reason);
        for (name, why) in &self.passed_over {
            s.push_str(&format!("; not {name}: {why}"));
        }
        s
    }
}

/// The `--transport` values: `auto` and every transport of the registry
/// (`filter` keeps those a command can use).
pub fn names(filter: fn(&TransportInfo) -> bool) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![(
        AUTO,
        "the default: the in-process transport where the run allows it, else ptrace (exit 1/3), \
         else perf (a process another tracer holds); -v says which and why",
    )];
    v.extend(
        TRANSPORTS
            .iter()
            .filter(|t| filter(t))
            .map(|t| (t.name, t.about)),
    );
    v
}

/// Chooses the transport for `requested` (`auto` or a transport's name):
/// `check` is what a forced transport is checked with (the session's
/// check, with the transport's preflight). A forced transport's failed
/// check is the error; under `auto`, the error says why each candidate
/// cannot serve.
pub fn choose(
    requested: &str,
    needs: &Needs,
    check: &dyn Fn(&'static TransportInfo) -> Result<(), String>,
) -> Result<Plan, String> {
    if requested != AUTO {
        let info = crate::transport::by_name(requested).ok_or_else(|| {
            format!(
                "unknown transport `{requested}` (one of: {AUTO}, {})",
                TRANSPORTS
                    .iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        if needs.system_wide && !info.caps.system_wide {
            return Err(format!(
                "--transport {}: {}",
                info.name,
                crate::transport::NOT_SYSTEM_WIDE
            ));
        }
        check(info)?;
        return Ok(Plan {
            info,
            forced: true,
            reason: "named with --transport".into(),
            passed_over: Vec::new(),
            fallbacks: Vec::new(),
        });
    }
    let mut passed_over = Vec::new();
    let mut ok: Vec<&'static TransportInfo> = Vec::new();
    for name in PREFERENCE {
        let Some(info) = crate::transport::by_name(name) else {
            continue;
        };
        match unmet(info, needs).map_or_else(|| check(info), Err) {
            Ok(()) => ok.push(info),
            Err(why) if ok.is_empty() => passed_over.push((info.name, why)),
            Err(_) => {}
        }
    }
    let Some((&info, rest)) = ok.split_first() else {
        // The same reason from every transport is the run's own problem
        // (too many watchpoints, say): said once, as a forced one says it.
        if let Some((_, first)) = passed_over.first()
            && passed_over.iter().all(|(_, why)| why == first)
        {
            return Err(first.clone());
        }
        return Err(format!(
            "no transport can run this (--transport auto tried each): {}",
            passed_over
                .iter()
                .map(|(n, why)| format!("{n}: {why}"))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    };
    let reason = if needs.system_wide {
        "system-wide (no -c/-p): kernel uprobes on the probed files fire in every process that \
         runs them, those started later included"
            .to_string()
    } else if passed_over.is_empty() {
        "the fastest; the run needs nothing it lacks".to_string()
    } else {
        "the first that serves the run".to_string()
    };
    Ok(Plan {
        info,
        forced: false,
        reason,
        passed_over,
        fallbacks: rest.to_vec(),
    })
}

/// The files a process maps when probes are first armed: for a launched
/// command, its executable (found on `PATH`) and the libraries the dynamic
/// linker loads at startup; for `-p PID`, the files mapped now.
pub fn files_at_start(command: &[std::ffi::OsString], pid: Option<i32>) -> Vec<std::path::PathBuf> {
    if let Some(pid) = pid {
        let mut v: Vec<std::path::PathBuf> = crate::proc::procmaps::read(pid)
            .map(|maps| {
                maps.into_iter()
                    .filter(|m| m.is_file())
                    .map(|m| std::path::PathBuf::from(m.path))
                    .collect()
            })
            .unwrap_or_default();
        v.dedup();
        return v;
    }
    let Some(first) = command.first() else {
        return Vec::new();
    };
    let cmd = std::path::Path::new(first);
    let Some(dir) = crate::probe::programs::command_dir(command) else {
        return Vec::new();
    };
    let exe = crate::proc::procmaps::canonical(&dir.join(cmd.file_name().unwrap_or_default()));
    let env = wprobe_elf::startup::LoaderEnv::from_env();
    let mut v = wprobe_elf::startup::startup_libraries(&exe, &env);
    v.insert(0, exe);
    v
}

/// The probe modules (as programs name them: a path or a bare name) that
/// none of `files` is.
pub fn later_modules(modules: &[String], files: &[std::path::PathBuf]) -> Vec<String> {
    modules
        .iter()
        .filter(|module| crate::proc::procmaps::module_file(module, files).is_none())
        .cloned()
        .collect()
}

/// The modules among `modules` that are programs rather than libraries:
/// an `ET_EXEC` file, or an `ET_DYN` one with an interpreter and no
/// soname (a PIE executable), found by path or by name in `dirs`.
pub fn programs_among(modules: &[String], dirs: &[std::path::PathBuf]) -> Vec<String> {
    modules
        .iter()
        .filter(|module| {
            let file = if module.contains('/') {
                Some(std::path::PathBuf::from(module.as_str()))
            } else {
                dirs.iter().map(|d| d.join(module)).find(|f| f.is_file())
            };
            file.and_then(|f| wprobe_elf::ElfInfo::open(&f).ok())
                .is_some_and(|e| !e.is_dyn || (e.interp.is_some() && e.soname.is_none()))
        })
        .cloned()
        .collect()
}

/// `-p PID`: the reason a process cannot be traced at all (gone, a
/// zombie, a kernel thread; held by another tracer when the user forced a
/// transport that uses ptrace), as an error; a process another tracer
/// holds is noted in `needs` for `auto`.
pub fn check_attach(
    pid: i32,
    forced: Option<&TransportInfo>,
    needs: &mut Needs,
) -> Result<(), String> {
    use crate::proc::procinfo::Untraceable;
    let why = crate::proc::procinfo::untraceable(pid);
    let fatal = match &why {
        Untraceable::Gone | Untraceable::Zombie | Untraceable::KernelThread => true,
        Untraceable::Traced { tracer, comm } => {
            needs.traced_by = Some(format!("{comm} (pid {tracer})"));
            forced.is_some_and(|info| info.caps.uses_ptrace)
        }
        Untraceable::Other { .. } => false,
    };
    match why.explain(pid) {
        Some(reason) if fatal => Err(match why {
            // A live wprobe's in-process run (its threads kept seized):
            // named as its journal names it, with how to stop it.
            Untraceable::Traced { tracer, .. } if inproc_holder(pid) == Some(tracer) => {
                crate::transport::common::journal::traced_by(pid, tracer)
            }
            _ => reason,
        }),
        _ => Ok(()),
    }
}

/// The live wprobe whose in-process journal of process `pid` names it.
fn inproc_holder(pid: i32) -> Option<i32> {
    use crate::transport::common::journal;
    journal::live_holder(&journal::inproc_path(pid))
}

/// What `info` lacks for `needs`, in words.
fn unmet(info: &TransportInfo, needs: &Needs) -> Option<String> {
    if needs.system_wide && !info.caps.system_wide {
        return Some(
            "a system-wide run (no -c/-p) needs probes that fire in every process running the \
             file, started later too; it serves one process"
                .into(),
        );
    }
    if let Some(who) = &needs.traced_by
        && info.caps.uses_ptrace
    {
        return Some(format!(
            "the process is traced by {who} (ptrace attaches once)"
        ));
    }
    if !needs.later_programs.is_empty() && !info.caps.follows_exec && !info.caps.arms_files {
        return Some(format!(
            "probes in {}, a program executed after the start: it does not arm a new image",
            needs.later_programs.join(", ")
        ));
    }
    if needs.follow_forks && !info.caps.follows_exec_in_children && !info.caps.arms_files {
        return Some("-f: it follows fork children, but not into the programs they execute".into());
    }
    if !needs.later_modules.is_empty() && !info.caps.later_libraries && !info.caps.arms_files {
        return Some(format!(
            "probes in {} which the process loads after it starts (dlopen): it arms at the \
             start only",
            needs.later_modules.join(", ")
        ));
    }
    if let Some(why) = &needs.close_probes
        && info.name == "inproc"
    {
        return Some(format!("{why}: it could arm only the first"));
    }
    if needs.registers_at_run_time && info.registers.is_some() {
        return Some(
            "a program reads registers chosen at run time, and it does not provide every \
             register"
                .into(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &'static TransportInfo) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn auto_prefers_the_in_process_transport() {
        let p = choose(AUTO, &Needs::default(), &none).unwrap();
        assert_eq!(p.info.name, "inproc");
        assert!(!p.forced);
        assert!(p.passed_over.is_empty());
        let next: Vec<_> = p.fallbacks.iter().map(|t| t.name).collect();
        assert_eq!(next, ["ptrace", "perf"]);
    }

    #[test]
    fn a_failed_check_moves_on_and_says_why() {
        let check = |t: &'static TransportInfo| {
            if t.caps.debugger_handoff {
                Ok(())
            } else {
                Err(format!("{} cannot hand off", t.name))
            }
        };
        let p = choose(AUTO, &Needs::default(), &check).unwrap();
        assert_eq!(p.info.name, "ptrace");
        assert_eq!(
            p.describe(),
            "transport ptrace: the first that serves the run; not inproc: inproc cannot hand off"
        );
        assert!(p.fallbacks.is_empty());
    }

    #[test]
    fn follow_forks_stays_in_process() {
        let needs = Needs {
            follow_forks: true,
            ..Needs::default()
        };
        // inproc follows fork children into the programs they execute.
        let p = choose(AUTO, &needs, &none).unwrap();
        assert_eq!(p.info.name, "inproc");
        assert!(p.passed_over.is_empty());
        assert!(TRANSPORTS.iter().all(|t| unmet(t, &needs).is_none()));
    }

    #[test]
    fn later_libraries_and_other_tracers() {
        let needs = Needs {
            later_modules: vec!["libplugin.so".into()],
            ..Needs::default()
        };
        // Every transport arms libraries loaded later now.
        assert_eq!(choose(AUTO, &needs, &none).unwrap().info.name, "inproc");
        // A program executed later: inproc follows the exec too.
        let needs = Needs {
            later_modules: vec!["/bin/prog".into()],
            later_programs: vec!["/bin/prog".into()],
            ..Needs::default()
        };
        assert_eq!(choose(AUTO, &needs, &none).unwrap().info.name, "inproc");
        assert!(TRANSPORTS.iter().all(|t| unmet(t, &needs).is_none()));
        let needs = Needs {
            traced_by: Some("gdb (pid 7)".into()),
            ..Needs::default()
        };
        let p = choose(AUTO, &needs, &none).unwrap();
        assert_eq!(p.info.name, "perf");
        assert_eq!(p.passed_over.len(), 2);
    }

    #[test]
    fn a_system_wide_run_goes_to_perf_and_a_forced_other_is_refused() {
        let needs = Needs {
            system_wide: true,
            ..Needs::default()
        };
        let p = choose(AUTO, &needs, &none).unwrap();
        assert_eq!(p.info.name, "perf");
        assert!(p.describe().starts_with(
            "transport perf: system-wide (no -c/-p): kernel uprobes on the probed files fire in \
             every process that runs them, those started later included; not inproc: a \
             system-wide run"
        ));
        assert!(p.fallbacks.is_empty());
        for name in ["inproc", "ptrace"] {
            let e = choose(name, &needs, &none).unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "--transport {name}: a probe with no -c/-p is system-wide"
                )),
                "{e}"
            );
        }
        assert_eq!(choose("perf", &needs, &none).unwrap().info.name, "perf");
    }

    #[test]
    fn nothing_serves_then_every_reason_is_given() {
        let check = |t: &'static TransportInfo| Err(format!("{} says no", t.name));
        let e = choose(AUTO, &Needs::default(), &check).unwrap_err();
        assert_eq!(
            e,
            "no transport can run this (--transport auto tried each): inproc: inproc says no; \
             ptrace: ptrace says no; perf: perf says no"
        );
    }

    #[test]
    fn a_reason_every_transport_gives_is_said_once() {
        let check = |_: &'static TransportInfo| Err("too many watchpoints".to_string());
        assert_eq!(
            choose(AUTO, &Needs::default(), &check).unwrap_err(),
            "too many watchpoints"
        );
    }

    #[test]
    fn a_forced_transport_is_checked_alone() {
        let check = |t: &'static TransportInfo| Err(format!("{} says no", t.name));
        assert_eq!(
            choose("ptrace", &Needs::default(), &check).unwrap_err(),
            "ptrace says no"
        );
        assert!(
            choose("nope", &Needs::default(), &none)
                .unwrap_err()
                .starts_with("unknown transport `nope` (one of: auto, ptrace")
        );
    }
}
