//! wprobe's in-process agent: a `no_std`, libc-free object that the tracer
//! maps into a traced process and calls through a few C entry points (see
//! `agent_abi::sym`). It runs precompiled Wasm handler modules with wasmtime
//! 48 built for a custom platform: no signal handlers, no `sigaltstack`, no
//! TLS of its own (per-thread state is keyed by the thread pointer and found
//! from the agent stack), no libc, no output; its memory comes from its own
//! anonymous mappings.
//!
//! One store holds every program (global variables shared, local variables
//! persisting: the ptrace transport's semantics); hits of all threads take
//! turns on it through the store lock in the shared region. Per probe, the
//! agent applies `ignore`, `maxhits` and `remove` (the rules of
//! `agent_abi::policy`, the same code the tracer's session applies for the
//! other transports) and keeps the counters the tracer reports; handler
//! runs with records (or with an outcome the tracer must act on) go to the
//! shared ring.
//!
//! Every entry point switches to an agent stack before running Rust code
//! that may allocate or enter wasmtime; a panic (a bug) records its message
//! in the control region, marks the agent dead and returns from the entry
//! point, leaving the target running with every later hit skipped.
//!
//! The entry points, each in a module of its own: `init`
//! (`wprobe_agent_init`), `load` (`wprobe_agent_load`), `sites`
//! (`wprobe_agent_sites` and the site table), `dispatch`
//! (`wprobe_agent_dispatch`, the per-hit path), `fast`
//! (`wprobe_agent_fast`, the notices' fast path) and `bench`
//! (`wprobe_agent_bench`); `wprobe_agent_trap` is here. Behind them:
//! `control` (how `load` and `sites` run), `params` (a handler's
//! parameters), `run` (one probe's run, its counters and outcome),
//! `calls` (return probes' tracked calls) and `panic`. Below those, the
//! shared region (`ctrl`, `ring`, `lock`), the host functions
//! (`host`), the threads' slots and stacks (`thread`), the platform
//! wasmtime needs (`platform`, `sync`, `heap`, `mem`), `trapnet`,
//! `vdso` and the system calls (`sys`).

#![no_std]
#![allow(
    clippy::missing_safety_doc,
    reason = "C entry points, documented in agent_abi"
)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;

mod bench;
mod calls;
mod control;
mod ctrl;
mod dispatch;
mod fast;
mod heap;
mod host;
mod init;
mod load;
mod lock;
mod mem;
mod panic;
mod params;
mod platform;
mod ring;
mod run;
mod sites;
mod sync;
mod sys;
mod thread;
mod trapnet;
mod vdso;

use agent_abi::AgentError;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicPtr, Ordering};
use host::AgentHost;
use hostfns::Handler;
use params::Param;
use wasmtime::{Engine, Linker, Memory, Store, TypedFunc};

/// Fuel given to `wprobe_flush` after a fuel exhaustion, and to start functions.
const FLUSH_FUEL: u64 = 1_000_000;

/// A loaded program.
struct Program {
    memory: Option<Memory>,
    flush: Option<TypedFunc<(), i32>>,
    fuel: u64,
    /// Its map region in the shared region (offset, length; length 0: none).
    map: (u64, u64),
    writes_allowed: bool,
}

/// The handler of a probe: `(i64 × args) -> i32` returns an outcome code;
/// `(i64 × args) -> ()` returns nothing, which means EXIT
/// (docs/hostabi.md).
struct ProbeFn {
    program: u16,
    handler: Handler,
    /// What it takes as parameters (the manifest's `args`).
    args: Box<[Param]>,
    load_bias: u64,
    /// Its USDT arguments, at most `MAX_USDT_ARGS` (parsed at load, which
    /// refuses more; a probe with none, as most are, allocates nothing: a
    /// whole program's probes stay a few dozen bytes each).
    usdt: Box<[hostabi::usdt::UsdtArg]>,
}

/// Everything wasmtime: one engine, one store for every program (global
/// variables shared, local variables persisting: the ptrace semantics),
/// guarded by the store lock of the control region.
struct Agent {
    engine: Engine,
    linker: Linker<AgentHost>,
    store: Store<AgentHost>,
    programs: Vec<Program>,
    probes: Vec<Option<ProbeFn>>,
}

static AGENT: AtomicPtr<Agent> = AtomicPtr::new(core::ptr::null_mut());

/// A single `int3`: where a function called by the tracer returns to.
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub extern "C" fn wprobe_agent_trap() {
    core::arch::naked_asm!("int3", "ud2");
}

fn err(e: AgentError, msg: core::fmt::Arguments<'_>) -> i64 {
    let mut b = ctrl::FixedBuf::<{ agent_abi::ERR_MSG_BYTES }>::new();
    let _ = b.write_fmt(msg);
    ctrl::set_error(e as i32, b.bytes());
    e as i64
}

/// The agent, for code running under the store lock or `CONTROL_BUSY`.
fn agent<'a>() -> Option<&'a mut Agent> {
    // SAFETY: set once by init; callers hold the store lock (or run the
    // tracer-serialised control path with the store lock held).
    unsafe { AGENT.load(Ordering::Acquire).as_mut() }
}
