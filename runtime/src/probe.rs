//! The probes of a run: the program files given to `run` and `bench`
//! (with `--probe LOCATION=EXPORT` specs), their locations resolved to
//! run-time addresses (link-time and run-time addresses kept apart), and
//! the transport chosen to serve them (`--transport auto`).

pub mod addr;
pub mod plan;
pub mod probespec;
pub mod programs;
pub mod resolve;
