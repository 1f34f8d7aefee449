//! Opening the in-process transport: the patch journal's directory made
//! first, then the target stopped, a command launched to the point where
//! its startup libraries are mapped (`launch`) or every thread of a running
//! process seized (`world`), and the transport's state at the start (the
//! stopped threads' program counters handed to the patcher: no window may
//! go under one).

use std::time::Duration;

use super::patch::Patcher;
use super::world::World;
use super::{INFO, InProc, Life, Phase, ProbeMarks, Run, launch, traps};
use crate::out::sink::Sink;
use crate::transport::{Error, OpenOptions, Target, Transport};

pub(super) fn open(target: Target<'_>, o: &OpenOptions) -> Result<Box<dyn Transport>, Error> {
    // The patch journal's directory, before anything is launched or
    // stopped: a command is never started only to be let go untraced.
    let dir = crate::transport::common::journal::dir();
    crate::proc::privdir::ensure_dir(&dir).map_err(|problem| Error::File {
        path: dir.clone(),
        errno: problem.errno(),
        message: format!("journal directory {}: {problem}", dir.display()),
    })?;
    let tsc0 = agent_loader::region::tsc_now();
    agent_loader::region::anchor_clock();
    let (pid, launched, world) = match target {
        Target::System => {
            return Err(Error::unsupported(
                INFO.name,
                format!("--transport inproc: {}", crate::transport::NOT_SYSTEM_WIDE),
            ));
        }
        Target::Launch(argv) => {
            let pid =
                launch::launch(argv).map_err(|e| Error::anyhow(None, &e, format!("{e:#}")))?;
            // `WPROBE_FAIL_OPEN=inproc` (debug builds, tests): fail here, the
            // command launched but none of its code run, as a failure to
            // start would.
            if cfg!(debug_assertions)
                && std::env::var("WPROBE_FAIL_OPEN").is_ok_and(|v| v == INFO.name)
            {
                crate::sys::process::kill_and_reap(pid);
                return Err(Error::other(format!(
                    "process {pid}: failing as WPROBE_FAIL_OPEN asks (a test)"
                )));
            }
            match World::launched(pid) {
                Ok(w) => (pid, true, w),
                Err(e) => {
                    crate::sys::process::kill_and_reap(pid);
                    return Err(Error::anyhow(Some(pid), &e, format!("{e:#}")));
                }
            }
        }
        Target::Attach(pid) => {
            if pid <= 0 || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(Error::gone(pid, format!("no such process: {pid}")));
            }
            crate::transport::common::journal::held_by_another_run(pid, INFO.name)?;
            let world = World::stop(pid).map_err(|e| match e.downcast::<Error>() {
                Ok(e) => e,
                Err(e) => Error::anyhow(Some(pid), &e, format!("{e:#}")),
            })?;
            (pid, false, world)
        }
    };
    let mut t = InProc::blank(pid, launched, tsc0, o.ring_full, o.follow_forks);
    if let Target::Launch(argv) = target {
        // A script (a pyenv shim, a wrapper that ends in `exec prog`)
        // usually executes the program the run is about: its exec is
        // followed, the probes armed in the new image.
        t.follow_exec = argv.first().is_some_and(|c| launch::is_script(c));
    }
    t.patcher.thread_pcs = world.thread_pcs();
    t.world = Some(world);
    Ok(Box::new(t))
}

impl InProc {
    /// The transport's state for process `pid`, before anything is armed.
    pub(super) fn blank(
        pid: i32,
        launched: bool,
        tsc0: (u64, u64),
        ring_full: crate::transport::RingFull,
        follow_forks: bool,
    ) -> InProc {
        InProc {
            pid,
            launched,
            world: None,
            maps: crate::proc::procmaps::read(pid).unwrap_or_default(),
            patcher: Patcher::default(),
            armed: Default::default(),
            run: Run::Arming,
            removed: Vec::new(),
            marks: ProbeMarks::default(),
            agent: None,
            preloaded: None,
            program_maps: Vec::new(),
            reported: Vec::new(),
            sink: Sink::default(),
            items: Vec::new(),
            tick: None,
            life: Life::Alive,
            pidfd: None,
            heartbeat: None,
            code_left_alone: Vec::new(),
            detach_time: Duration::ZERO,
            tsc0,
            handlers_paused: false,
            phase: Phase::Armed,
            allocations_armed: 0,
            traps: None,
            watches: traps::Watches::default(),
            watchdog: None,
            watchdog_starting: None,
            ring_full,
            sites_sent: 0,
            sites_dropped: Vec::new(),
            enabled: Default::default(),
            later_biases: Vec::new(),
            unmapped: Vec::new(),
            rdebug: None,
            library_events: 0,
            taken: false,
            said: Default::default(),
            children: traps::Children::default(),
            trap_stops: Default::default(),
            follow_exec: false,
            reload: false,
            carried_gvars: Vec::new(),
            follow_forks,
            join: None,
            execs: Default::default(),
            joined_parent: 0,
            exits_due: Vec::new(),
            child_arms: Default::default(),
            child_event: None,
        }
    }
}
