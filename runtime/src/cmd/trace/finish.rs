//! The end of a trace: the trees finished (also where the transport
//! reported the launched command's exit only as its status) and their
//! outputs' errors, the summary line and its warnings, the launched command
//! waited for when it was detached, and the exit status.

use std::cell::RefCell;
use std::rc::Rc;

use crate::cmd::{CliError, CmdResult, command_exit_code, wait_child};
use crate::proc::stopsig::StopSignals;
use crate::session::Session;
use crate::transport::{ExitStatus, Report};

use super::TraceArgs;
use super::records::{Hook, TraceState};

/// After the run (its `result` and the transport's `report`): the trees
/// finished and printed, what was traced said, the traced command's exit
/// status, or the run's or the outputs' failure (reported last).
pub(super) fn finish(
    a: &TraceArgs,
    session: &Session,
    state: &Rc<RefCell<TraceState>>,
    signals: &StopSignals,
    main: i32,
    result: anyhow::Result<Option<ExitStatus>>,
    report: Report,
) -> CmdResult {
    // A failed run still finishes and prints the trees it has; the error
    // is reported last, with its exit status (2: wprobe's own failure).
    let mut failure = None;
    let mut status = match result {
        Ok(s) => s,
        Err(e) => {
            failure = Some(CliError::internal(format!("{e:#}")));
            None
        }
    };
    // A transport that ends with the launched process (perf) reports its
    // exit status, not an exit event: the trees end with it all the same.
    if let Some(s) = status.or(report.exit_status)
        && !state.borrow().exited.contains(&main)
    {
        use crate::session::hook::RecordHook;
        Hook(state.clone()).event(&crate::session::hook::HookEvent::ProcessExited {
            pid: main,
            status: s,
        });
    }
    let errors = {
        let mut st = state.borrow_mut();
        st.tree.finish();
        st.tree.sink.finish()
    };
    if !errors.is_empty() {
        let lines = errors.join("\nerror: ");
        match &mut failure {
            Some(f) => f.message = format!("{}\nerror: {lines}", f.message),
            None => failure = Some(CliError::user(lines)),
        }
    }
    summary(session, &state.borrow());
    for (pid, addr, found) in &report.code_left_alone {
        crate::elog!(
            "wprobe: warning: process {pid} rewrote its code at {addr:#x} (now {found:#04x}) \
             while it was traced there: left as the process wrote it"
        );
    }
    status = status.or(report.exit_status);
    if a.pid.is_none() && status.is_none() {
        if let Some(sig) = signals.forward_after_detach(main, &report.detach_signals) {
            crate::elog!(
                "wprobe: detached; signal {sig} passed on to process {main}, waiting for it to exit"
            );
        } else {
            crate::elog!("wprobe: detached; waiting for process {main} to exit");
        }
        status = wait_child(main);
    }
    if let Some(f) = failure {
        return Err(f);
    }
    Ok(command_exit_code(status))
}

/// One line of what was traced, and a warning for anything lost.
fn summary(session: &Session, st: &TraceState) {
    let c = st.tree.counters;
    let p = st.problems;
    let stats = session.stats();
    let traps: u64 = stats.iter().map(|(_, s)| s.traps).sum();
    let fuel: u64 = stats.iter().map(|(_, s)| s.fuel_exhausted).sum();
    let dropped: u64 =
        stats.iter().map(|(_, s)| s.dropped).sum::<u64>() + session.dropped_unattributed();
    crate::elog!(
        "wprobe: trace: {} calls ({} returned, {} unwound{})",
        c.calls,
        c.returned,
        c.unwound,
        if c.running > 0 {
            format!(", {} still running when the trace ended", c.running)
        } else {
            String::new()
        }
    );
    let warn = |n: u64, what: &str| {
        if n > 0 {
            crate::elog!("wprobe: warning: {n} {what}");
        }
    };
    // The number said below.
    const _: () = assert!(agent_abi::MAX_TRACKED_CALLS == 1_048_576);
    warn(
        p.missed,
        "calls not tracked to their return (more than 1,048,576 live calls in one thread, or a \
         return address that cannot take a breakpoint, as after a call that never returns): \
         shown entered, closed when an outer call returns; their returns are not in the trace",
    );
    warn(
        dropped.max(p.lost),
        "hits the transport could not deliver (the kernel dropped them): missing from the trace",
    );
    warn(
        c.orphan_returns,
        "returns whose call was not seen: not in the trace",
    );
    warn(
        p.entries_without_record,
        "entries whose handler logged no trace record (major 0x7472, minor 1): not in the trace",
    );
    warn(
        p.exits_without_record,
        "returns whose handler logged no trace record (major 0x7472, minor 2): not in the trace",
    );
    warn(traps, "handler runs trapped");
    warn(fuel, "handler runs ran out of fuel");
}
