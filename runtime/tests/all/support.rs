//! Helpers shared by the runtime's real-process tests: the test registry
//! ([`case`]), building and running targets and `wprobe` ([`cli`]), driving
//! the ptrace provider directly ([`tracer`]), oracles decoded from the
//! binaries ([`disasm`]), the host-call oracle
//! shared with the fuzz target ([`host_calls`]), the paths into the
//! crate its sources name ([`crate_paths`]), and the traced program's
//! side: started piped, its code as the file has it, its calls as
//! `wprobe trace` counted them ([`target`]).

pub mod case;
pub mod cli;
pub mod crate_paths;
pub mod disasm;
pub mod host_calls;
pub mod target;
pub mod tracer;
