//! What more than one transport uses, so that no transport folder imports
//! from another (each imports only the seam, `transport.rs`, this module
//! and the crate's modules outside `transport/`):
//!
//! * the patch journals' directory, files and the byte journal of
//!   breakpoints and trap sites, with `wprobe repair`'s restore for it
//!   ([`journal`]: ptrace's `int3`s in attach mode and the in-process
//!   transport's trap sites; the in-process jumps' own format is in
//!   `inproc/journal.rs`, found through [`journal::inproc_path`]);
//! * the watchdog that restores those bytes when wprobe dies
//!   ([`watchdog`]: started by ptrace in attach mode and by inproc with its
//!   trap sites);
//! * the dynamic linker's hooks for library events (`rdebug`);
//! * the failures of `perf_event_open` with their hints (`perf_event`:
//!   perf's events, inproc's watchpoints), and the hint when ptrace is
//!   refused (`ptrace_hint`: ptrace's attach, inproc's).

pub mod journal;
pub(crate) mod perf_event;
pub(crate) mod rdebug;
pub mod watchdog;

/// What to change when ptrace is refused (the Yama scope in force).
pub(crate) fn ptrace_hint() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    format!(
        "ptrace is restricted (/proc/sys/kernel/yama/ptrace_scope = {scope}); \
         run as the same user with ptrace_scope 0, or with CAP_SYS_PTRACE"
    )
}
