//! The traced processes and wprobe's own process as the system shows
//! them: `/proc/PID/maps` and why a process cannot be traced, the signals
//! that stop a run, and the rule for the files only the user can change.

pub mod privdir;
pub mod procinfo;
pub mod procmaps;
pub mod stopsig;
