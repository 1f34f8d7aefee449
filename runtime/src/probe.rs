//! The probes of a run: the program files given to `run` and `bench`
//! (with `--probe LOCATION=EXPORT` specs), loaded, and their locations
//! resolved to run-time addresses (link-time and run-time addresses kept
//! apart). The transport that serves them is chosen above the transports,
//! in [`crate::plan`].

pub mod addr;
pub mod probespec;
pub mod programs;
pub mod resolve;
