//! One hit of one probe, under the store lock: its `ignore` count, the
//! handler run (fuel, parameters, `wprobe_flush` after a fuel exhaustion),
//! the probe's counters, the outcome (`remove`, `maxhits`: the rules of
//! `agent_abi::policy`, which the tracer's session applies too), the first
//! trap's message and the run's records pushed to the ring.

use agent_abi::{ControlHeader, ProbeSlot, RunHeader, policy, probe_flag, rec, run_outcome};
use core::fmt::Write as _;
use core::sync::atomic::{AtomicU64, Ordering};
use hostabi::Outcome;
use hostabi::manifest::MAX_HANDLER_ARGS;
use wasmtime::Trap;

use crate::dispatch::HitArgs;
use crate::params::param_values;
use crate::{FLUSH_FUEL, agent, ctrl, ring, thread};

/// Adds one to a counter only the holder of the store lock writes (no
/// locked read-modify-write).
#[inline(always)]
fn bump(n: &AtomicU64) {
    n.store(n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

/// One hit of probe `p`: `ignore`, the handler run, its counters, outcome
/// and records. Returns whether the handler ran. The caller holds the
/// store lock.
#[inline(always)]
pub(crate) fn run_probe(c: &ControlHeader, slot: &ProbeSlot, p: u32, h: &HitArgs) -> bool {
    let Some(a) = agent() else {
        return false;
    };
    bump(&slot.hits);
    let ignored = slot.ignored.load(Ordering::Relaxed);
    if policy::ignores(slot.ignore, ignored) {
        slot.ignored.store(ignored + 1, Ordering::Relaxed);
        return false;
    }
    let Some(Some(pf)) = a.probes.get(p as usize) else {
        return false;
    };
    let prog = &a.programs[pf.program as usize];
    {
        let d = a.store.data_mut();
        d.env.frame = h.frame;
        d.env.tid = h.tid;
        d.env.pid = h.pid;
        d.env.fs_base = h.fs_base;
        d.env.load_bias = pf.load_bias;
        // At most `MAX_USDT_ARGS` (the load refuses more).
        let n = pf.usdt.len();
        d.usdt_len = n;
        if n != 0 {
            d.usdt[..n].copy_from_slice(&pf.usdt[..n]);
        }
        d.env.now.set(h.now.get());
        d.env.tsc = h.tsc.get();
        if h.fresh.replace(false) {
            // The span of the thread's stack the stub and the dispatcher
            // use: from the dispatcher's lowest frame (saved where it
            // switched to the agent stack) up to the red zone.
            let top = h.slot.stack.load(Ordering::Relaxed);
            // SAFETY: the header of this thread's agent stack, which the
            // stack switch of this hit wrote.
            let low = unsafe { (*(top as *const thread::StackHeader)).saved_sp };
            d.env.agent_stack = (low.min(h.below_red_zone), h.below_red_zone);
            d.env.dead_valid = false;
        }
        d.sink.clear();
        d.services.map = prog.map;
        d.memory = prog.memory;
        d.writes_allowed = prog.writes_allowed;
    }
    let _ = a.store.set_fuel(prog.fuel);
    let mut args = [0; MAX_HANDLER_ARGS];
    param_values(&mut args, &mut a.store.data_mut().env, &pf.args);
    let res = pf.handler.call(&mut a.store, &args);
    // What a trap message is made of; formatted only for the probe's first
    // trap (not per run: the 512-byte buffer is not even zeroed otherwise).
    let mut bad_code = None;
    let mut error = None;
    let outcome = match res {
        Ok(code) => match Outcome::from_code(code) {
            Some(o) => {
                if o == Outcome::Uncaught {
                    bump(&slot.uncaught);
                }
                code
            }
            None => {
                bump(&slot.traps);
                bad_code = Some(code);
                run_outcome::TRAPPED
            }
        },
        Err(e) => {
            if e.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
                bump(&slot.fuel_exhausted);
                if let Some(f) = &prog.flush {
                    let _ = a.store.set_fuel(FLUSH_FUEL);
                    let _ = f.call(&mut a.store, ());
                }
                run_outcome::FUEL
            } else {
                bump(&slot.traps);
                error = Some(e);
                run_outcome::TRAPPED
            }
        }
    };
    let runs = slot.runs.load(Ordering::Relaxed) + 1;
    slot.runs.store(runs, Ordering::Relaxed);
    let first_trap = outcome == run_outcome::TRAPPED
        && slot.flags.load(Ordering::Relaxed) & probe_flag::TRAP_REPORTED == 0;
    if first_trap {
        slot.flags
            .fetch_or(probe_flag::TRAP_REPORTED, Ordering::Relaxed);
        let mut trap = ctrl::FixedBuf::<512>::new();
        if let Some(code) = bad_code {
            let _ = write!(trap, "handler returned {code}, not an outcome code");
        } else if let Some(e) = &error {
            // As the runtime's `trap_message`: the trap, or the root cause
            // of a host-raised error (without its context).
            match e.downcast_ref::<Trap>() {
                Some(t) => {
                    let _ = write!(trap, "{t}");
                }
                None => {
                    let _ = write!(trap, "{}", e.root_cause());
                }
            }
        }
        a.store
            .data_mut()
            .sink
            .push(rec::TRAP, 0, 0, trap.bytes(), &[]);
    }
    let tells = matches!(
        Outcome::from_code(outcome),
        Some(
            Outcome::Remove
                | Outcome::Stop
                | Outcome::DebuggerHandoff
                | Outcome::CoreDump
                | Outcome::CrashDump
        )
    );
    let d = a.store.data_mut();
    if !d.sink.is_empty() || tells {
        let head = RunHeader {
            probe: p,
            tid: h.tid,
            cpu: hostabi::env::HitEnv::cpu(&d.env) as u32,
            outcome,
            pid: d.env.pid,
            time_ns: hostabi::env::HitEnv::now_ns(&d.env),
            ip: h.ip.get(),
            ..Default::default()
        };
        if !ring::push_entry(c, d.sink.entry(head)) {
            bump(&slot.dropped);
        }
    }
    d.env.frame = core::ptr::null_mut();
    // `remove` and `maxhits`. Other outcomes leave the probe alone: `exit()`
    // is bpftrace's, asynchronous; the handlers keep running (their map
    // updates count) until the tracer, told by this run's entry, has
    // detached; the tracer prints none of their output.
    let removed = outcome == Outcome::Remove as i32;
    if policy::after_run(removed, slot.maxhits, runs) == policy::Next::Disable {
        slot.enabled.store(0, Ordering::Relaxed);
    }
    true
}
