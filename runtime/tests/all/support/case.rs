//! The test registry of this binary: every test is a [`Case`] with the
//! facilities it needs ([`Need`]). A case whose needs are missing is
//! reported as `ignored` (with the reason printed before the run), never as
//! `ok`; in CI (`CI` set to anything but empty, `0` or `false`) it runs
//! anyway and fails with the reason, so a machine that lacks what the test
//! command installs cannot pass silently.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// Something a test needs from the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// ptrace of the tests' own children (launching traced commands).
    Ptrace,
    /// Effective uid 0 (defining uprobes, running wprobe as another user).
    Root,
    /// The perf transport: root (tracefs uprobes) and the uprobe PMU.
    Perf,
    /// gdb, to check what `exit 1` / `exit 3` leave behind.
    Gdb,
    /// `setpriv`, to run wprobe as another user.
    Setpriv,
    /// `unshare`, for tests in a private mount namespace.
    Unshare,
    /// `script`, for tests that need a terminal.
    Script,
    /// bpftrace, to compare one-liners with it.
    Bpftrace,
    /// A debug build of wprobe (its fault-injection hooks).
    DebugBuild,
    /// uftrace, to compare `wprobe trace` with it.
    Uftrace,
    /// Prometheus and promtool (Debian's `prometheus`), to scrape and parse
    /// what `wprobe run --metrics` serves.
    Prometheus,
    /// Hardware watchpoints: such tests run one at a time. A CPU has 4
    /// debug registers; watchpoints of tests running side by side on one
    /// CPU oversubscribe them, perf then multiplexes the breakpoints
    /// (missing accesses), and the kernel may deliver a stray SIGTRAP when
    /// one is uninstalled as it fires (seen once: a perf-transport target
    /// killed by SIGTRAP while another test's watchpoints came and went).
    DebugRegisters,
    /// The handler toolchains of `guests/build.sh` (clang and wasm-ld, the
    /// wasm32 Rust target, Zig, the AssemblyScript compiler), as
    /// scripts/setup.sh installs them.
    GuestToolchains,
}

impl Need {
    /// `Ok` when the machine has it, else why not and how to get it.
    pub fn check(self) -> Result<(), String> {
        static CACHE: OnceLock<Vec<(Need, Result<(), String>)>> = OnceLock::new();
        let all = CACHE.get_or_init(|| {
            [
                Need::Ptrace,
                Need::Root,
                Need::Perf,
                Need::Gdb,
                Need::Setpriv,
                Need::Unshare,
                Need::Script,
                Need::Bpftrace,
                Need::DebugBuild,
                Need::Uftrace,
                Need::Prometheus,
                Need::DebugRegisters,
                Need::GuestToolchains,
            ]
            .into_iter()
            .map(|n| (n, n.probe()))
            .collect()
        });
        all.iter()
            .find(|(n, _)| *n == self)
            .map(|(_, r)| r.clone())
            .expect("invariant: every need is probed")
    }

    fn probe(self) -> Result<(), String> {
        match self {
            Need::DebugRegisters => Ok(()),
            Need::GuestToolchains => guest_toolchains(),
            Need::Ptrace => super::tracer::ptrace_status(),
            Need::Root => {
                if is_root() {
                    Ok(())
                } else {
                    Err("needs root".into())
                }
            }
            Need::Perf => {
                if !Path::new("/sys/bus/event_source/devices/uprobe/type").exists() {
                    return Err("the kernel has no uprobe support (CONFIG_UPROBE_EVENTS)".into());
                }
                if !is_root() {
                    return Err(
                        "the perf transport tests need root (uprobes are defined in tracefs)"
                            .into(),
                    );
                }
                Ok(())
            }
            Need::Gdb => tool("gdb", &["--version"], "scripts/setup.sh installs it"),
            Need::Setpriv => tool("setpriv", &["--version"], "util-linux"),
            Need::Unshare => tool("unshare", &["--version"], "util-linux"),
            Need::Script => tool("script", &["--version"], "util-linux (bsdutils)"),
            Need::Bpftrace => tool("bpftrace", &["--version"], "scripts/setup.sh installs it"),
            Need::Uftrace => tool("uftrace", &["--version"], "scripts/setup.sh installs it"),
            Need::Prometheus => tool("prometheus", &["--version"], "scripts/setup.sh installs it")
                .and(tool(
                    "promtool",
                    &["--version"],
                    "scripts/setup.sh installs it",
                )),
            Need::DebugBuild => {
                if cfg!(debug_assertions) {
                    Ok(())
                } else {
                    Err("the fault injection exists in debug builds only".into())
                }
            }
        }
    }
}

/// Whether `guests/build.sh` finds every toolchain it uses.
fn guest_toolchains() -> Result<(), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    tool("clang", &["--version"], "scripts/setup.sh installs it")?;
    tool("wasm-ld", &["--version"], "scripts/setup.sh installs lld")?;
    let venv_zig = root.join(".tools/zig-venv/bin/python");
    if !venv_zig.exists() && tool("zig", &["version"], "").is_err() {
        return Err(
            "needs Zig (scripts/setup.sh installs its PyPI wheel in .tools/zig-venv)".into(),
        );
    }
    if !root
        .join("guests/assemblyscript/node_modules/.bin/asc")
        .exists()
    {
        return Err(
            "needs the AssemblyScript compiler (scripts/setup.sh: npm ci in guests/assemblyscript)"
                .into(),
        );
    }
    Ok(())
}

fn tool(name: &str, args: &[&str], hint: &str) -> Result<(), String> {
    match Command::new(name).args(args).output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(format!("needs `{name}` ({hint})")),
    }
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Whether this is a CI run (`CI` set and not `0`/`false`/empty).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The transports a [`Body::PerTransport`] test runs under, each a test of
/// its own (`module::test::TRANSPORT`), with what each needs.
pub const TRANSPORTS: &[(&str, Need)] = &[("ptrace", Need::Ptrace), ("perf", Need::Perf)];

/// The transports a [`Body::EveryTransport`] test runs under: those of
/// [`TRANSPORTS`], the in-process one (breakpoint-only features), and
/// `auto`, the default (the planner's choice: inproc, or ptrace where the
/// test's run needs it).
pub const EVERY_TRANSPORT: &[(&str, Need)] = &[
    ("ptrace", Need::Ptrace),
    ("perf", Need::Perf),
    ("inproc", Need::Ptrace),
    ("auto", Need::Ptrace),
];

/// What a test runs.
#[derive(Clone, Copy)]
pub enum Body {
    /// One test.
    Plain(fn()),
    /// One test per transport of [`TRANSPORTS`], given its name.
    PerTransport(fn(&'static str)),
    /// One test per transport of [`EVERY_TRANSPORT`], given its name.
    EveryTransport(fn(&'static str)),
}

/// One test: a name, what it needs, and its body (which panics on failure).
#[derive(Clone, Copy)]
pub struct Case {
    /// `module::function`.
    pub name: &'static str,
    /// What it needs from the machine.
    pub needs: &'static [Need],
    /// The test.
    pub body: Body,
}

/// A [`Case`] for function `$f` of the current module, with its needs;
/// `case!(f @ per_transport, …)` runs `f(transport)` once per transport,
/// `case!(f @ every_transport, …)` under the in-process transport too.
#[macro_export]
macro_rules! case {
    ($f:ident @ every_transport $(, $need:expr)* $(,)?) => {
        $crate::support::case::Case {
            name: concat!(module_path!(), "::", stringify!($f)),
            needs: &[$($need),*],
            body: $crate::support::case::Body::EveryTransport($f),
        }
    };
    ($f:ident @ per_transport $(, $need:expr)* $(,)?) => {
        $crate::support::case::Case {
            name: concat!(module_path!(), "::", stringify!($f)),
            needs: &[$($need),*],
            body: $crate::support::case::Body::PerTransport($f),
        }
    };
    ($f:ident $(, $need:expr)* $(,)?) => {
        $crate::support::case::Case {
            name: concat!(module_path!(), "::", stringify!($f)),
            needs: &[$($need),*],
            body: $crate::support::case::Body::Plain($f),
        }
    };
}

impl Case {
    /// The libtest-mimic trials of this case (one, or one per transport).
    pub fn trials(self) -> Vec<libtest_mimic::Trial> {
        let name = self.name.strip_prefix("all::").unwrap_or(self.name);
        match self.body {
            Body::Plain(f) => vec![trial(name.to_string(), self.needs.to_vec(), Box::new(f))],
            Body::PerTransport(f) | Body::EveryTransport(f) => match self.body {
                Body::PerTransport(_) => TRANSPORTS,
                _ => EVERY_TRANSPORT,
            }
            .iter()
            .map(|&(tr, need)| {
                let mut needs = self.needs.to_vec();
                needs.push(need);
                trial(format!("{name}::{tr}"), needs, Box::new(move || f(tr)))
            })
            .collect(),
        }
    }
}

/// The libtest-mimic trial: ignored (outside CI) when a need is missing.
fn trial(
    name: String,
    needs: Vec<Need>,
    run: Box<dyn FnOnce() + Send + std::panic::UnwindSafe>,
) -> libtest_mimic::Trial {
    {
        let missing: Vec<String> = needs.iter().filter_map(|n| n.check().err()).collect();
        if missing.is_empty() {
            let serial = needs.contains(&Need::DebugRegisters);
            return libtest_mimic::Trial::test(name, move || {
                static DEBUG_REGISTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
                let _one_at_a_time = serial.then(|| {
                    DEBUG_REGISTERS
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                });
                std::panic::catch_unwind(run).map_err(|e| panic_message(&e).into())
            });
        }
        let why = missing.join("; ");
        if in_ci() {
            libtest_mimic::Trial::test(name, move || {
                Err(
                    format!("CI must run this test, but the machine lacks what it needs: {why}")
                        .into(),
                )
            })
        } else {
            eprintln!("SKIP {name}: {why}");
            libtest_mimic::Trial::test(name, move || Err(format!("skipped: {why}").into()))
                .with_ignored_flag(true)
        }
    }
}

fn panic_message(e: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = e.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = e.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "panicked".into()
    }
}
