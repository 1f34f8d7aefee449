//! Uprobe definitions in tracefs (`uprobe_events`), for perf tracepoint
//! events that threads and children can inherit.
//!
//! Why not the uprobe PMU (`perf_event_open` with the path pointer in
//! `config1`): when a task-bound uprobe-PMU event is inherited at
//! `clone`/`fork`, the kernel re-initialises it in the context of the
//! *traced* task and reads the path through the pointer given by wprobe,
//! which means nothing there: initialisation fails and so does the
//! target's `clone` (`pthread_create` returns an error; measured on this
//! kernel, 6.18). A tracefs uprobe is a tracepoint; inheriting its perf
//! event needs no user pointer. The definitions are named
//! `wprobe_<pid>/p<n>`, removed when the run ends, and definitions left by
//! a wprobe that was killed (its pid no longer exists) are removed by the
//! next run. A definition alone patches nothing: the kernel inserts the
//! breakpoint only while a perf event uses it. tracefs is mounted when it
//! is not (see [`root`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::PerfError;

/// Where tracefs is mounted, or can be.
const TRACEFS: &str = "/sys/kernel/tracing";
/// The older place, under debugfs.
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// The tracefs directory with `uprobe_events`. When tracefs is not mounted
/// (as after a fresh boot: `/sys/kernel/tracing` is an empty directory
/// until something mounts it), it is mounted there, as `perf probe` and
/// bpftrace do; this needs root or CAP_SYS_ADMIN, and without them the
/// error names the command that fixes it.
pub fn root() -> Result<PathBuf, PerfError> {
    if let Some(r) = find()? {
        return Ok(r);
    }
    let dir = Path::new(TRACEFS);
    if !dir.is_dir() {
        return Err(PerfError::NoTracefs {
            reason: format!("{TRACEFS} does not exist: this kernel has no tracefs (CONFIG_FTRACE)"),
            hint: "use --transport ptrace".into(),
        });
    }
    match crate::sys::process::mount_tracefs(TRACEFS) {
        Ok(()) => {}
        Err(nix::errno::Errno::EBUSY) => {} // mounted meanwhile
        Err(e) => {
            let why = if matches!(e, nix::errno::Errno::EPERM | nix::errno::Errno::EACCES) {
                "wprobe may not mount it (that needs root or CAP_SYS_ADMIN)".to_string()
            } else {
                format!(
                    "mounting it failed: {}",
                    std::io::Error::from_raw_os_error(e as i32)
                )
            };
            return Err(PerfError::NoTracefs {
                reason: format!("tracefs is not mounted at {TRACEFS} and {why}"),
                hint: format!(
                    "run `sudo mount -t tracefs nodev {TRACEFS}`, or use --transport ptrace"
                ),
            });
        }
    }
    match find()? {
        Some(r) => Ok(r),
        None => Err(PerfError::NoTracefs {
            reason: format!(
                "tracefs is mounted at {TRACEFS} but has no uprobe_events: this kernel was built \
                 without uprobe events (CONFIG_UPROBE_EVENTS)"
            ),
            hint: "use --transport ptrace".into(),
        }),
    }
}

/// A mounted tracefs with `uprobe_events`, if any.
fn find() -> Result<Option<PathBuf>, PerfError> {
    for r in [TRACEFS, DEBUGFS_TRACING] {
        let p = PathBuf::from(r);
        match std::fs::metadata(p.join("uprobe_events")) {
            Ok(_) => return Ok(Some(p)),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(error(format!("opening {r}/uprobe_events"), e));
            }
            Err(_) => {}
        }
    }
    Ok(None)
}

fn append(root: &Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(root.join("uprobe_events"))?;
    f.write_all(line.as_bytes())
}

fn error(what: String, e: std::io::Error) -> PerfError {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => PerfError::PermissionDenied {
            what,
            hint: super::permission_hint(
                std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                    .ok()
                    .as_deref(),
            ),
        },
        _ => PerfError::Open { what, source: e },
    }
}

/// The uprobe definitions of this wprobe process.
#[derive(Debug)]
pub struct Uprobes {
    root: PathBuf,
    group: String,
    defined: Vec<String>,
    next: u32,
}

impl Uprobes {
    /// Finds tracefs and removes definitions left by dead wprobe processes.
    pub fn new() -> Result<Uprobes, PerfError> {
        let root = root()?;
        let u = Uprobes {
            group: format!("wprobe_{}", std::process::id()),
            root,
            defined: Vec::new(),
            next: 0,
        };
        u.remove_stale();
        Ok(u)
    }

    fn remove_stale(&self) {
        let Ok(text) = std::fs::read_to_string(self.root.join("uprobe_events")) else {
            return;
        };
        for line in text.lines() {
            let Some(name) = line.split_whitespace().next().and_then(|n| n.get(2..)) else {
                continue;
            };
            let Some(pid) = name
                .strip_prefix("wprobe_")
                .and_then(|r| r.split('/').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = append(&self.root, &format!("-:{name}\n"));
            }
        }
    }

    /// Defines a uprobe at `offset` in `path` (with a USDT semaphore at
    /// file offset `ref_ctr`, which the kernel counts); returns its
    /// tracepoint id.
    pub fn define(
        &mut self,
        path: &str,
        offset: u64,
        ref_ctr: Option<u64>,
    ) -> Result<u64, PerfError> {
        let what = format!("uprobe {path}:{offset:#x}");
        if path.is_empty() || path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(PerfError::Open {
                what,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "tracefs uprobe paths cannot contain white space",
                ),
            });
        }
        let event = format!("p{}", self.next);
        self.next += 1;
        let name = format!("{}/{event}", self.group);
        let ctr = ref_ctr.map(|r| format!("({r:#x})")).unwrap_or_default();
        append(&self.root, &format!("p:{name} {path}:{offset:#x}{ctr}\n"))
            .map_err(|e| error(format!("defining {what} in tracefs"), e))?;
        self.defined.push(name);
        let id_path = self
            .root
            .join("events")
            .join(&self.group)
            .join(&event)
            .join("id");
        let id = std::fs::read_to_string(&id_path).map_err(|e| error(what.clone(), e))?;
        id.trim().parse().map_err(|_| PerfError::Open {
            what,
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {id:?}", id_path.display()),
            ),
        })
    }

    /// Removes every definition (call after closing the events that use them).
    pub fn remove_all(&mut self) {
        for name in std::mem::take(&mut self.defined) {
            let _ = append(&self.root, &format!("-:{name}\n"));
        }
    }
}

impl Drop for Uprobes {
    fn drop(&mut self) {
        self.remove_all();
    }
}
