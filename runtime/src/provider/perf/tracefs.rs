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
//! breakpoint only while a perf event uses it.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::PerfError;

/// The tracefs mount point: `Ok(None)` when there is none.
pub fn root() -> Result<Option<PathBuf>, PerfError> {
    for r in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
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
        let root = root()?.ok_or_else(|| PerfError::NoUprobePmu {
            reason: "tracefs with uprobe_events is not mounted at /sys/kernel/tracing".into(),
        })?;
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

    /// Defines a uprobe at `offset` in `path`; returns its tracepoint id.
    pub fn define(&mut self, path: &str, offset: u64) -> Result<u64, PerfError> {
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
        append(&self.root, &format!("p:{name} {path}:{offset:#x}\n"))
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
