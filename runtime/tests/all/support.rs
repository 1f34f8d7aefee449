//! Helpers shared by the runtime's real-process tests: the test registry
//! ([`case`]), building and running targets and `wprobe` ([`cli`]), driving
//! the ptrace provider directly ([`tracer`]), oracles decoded from the
//! binaries ([`disasm`]), the host-call oracle
//! shared with the fuzz target ([`host_calls`]), and the paths into the
//! crate its sources name ([`crate_paths`]).

pub mod case;
pub mod cli;
pub mod crate_paths;
pub mod disasm;
pub mod host_calls;
pub mod tracer;
