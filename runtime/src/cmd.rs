//! The subcommands of `wprobe`: each module holds its arguments (clap) and
//! what it does; `cli` parses the command line and dispatches.

pub mod bench;
pub mod compile;
pub mod list;
pub mod repair;
pub mod run;
pub mod trace;
