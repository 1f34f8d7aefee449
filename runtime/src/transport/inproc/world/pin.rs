//! The launched command's thread and wprobe's on one CPU while the agent
//! is loaded ([`World::pin_together`]), and their CPUs given back.

use super::World;

/// What [`World::pin_together`] changed.
pub(super) struct Pinned {
    /// The command's CPUs.
    pub(super) target: libc::cpu_set_t,
    /// Those of wprobe's thread that traces it.
    pub(super) tracer: libc::cpu_set_t,
    /// The one CPU both were put on.
    pub(super) one: libc::cpu_set_t,
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pinned")
    }
}

impl World {
    /// Puts the launched command's thread and this one on this thread's
    /// CPU until the release (called when the agent is about to be
    /// loaded). Loading it goes back and forth between them a hundred
    /// times and more (each injected system call, each of the agent's own
    /// while it starts: ptrace stops), and a stop that wakes the other
    /// thread on another CPU pays for that CPU's wake-up (an interrupt,
    /// and on a virtual machine an idle virtual CPU's return): mapping and
    /// starting the agent in python3.11 took 2.4 to 16 ms on one machine,
    /// 5 to 5.5 ms on one CPU, and the whole commit 2.5 to 3 ms less
    /// (docs/BENCHMARKS.md). Not for planning, which is better off with
    /// wprobe's other threads free to run beside it. Only for a launched
    /// command, which dies with wprobe until it is let go
    /// (`PTRACE_O_EXITKILL`): a wprobe killed meanwhile leaves no command
    /// behind on one CPU. Nothing is changed when either cannot run there.
    pub(in crate::transport::inproc) fn pin_together(&mut self) {
        use crate::sys::process as p;
        if self.kill_on_exit == 0 || self.pinned.is_some() {
            return;
        }
        let Some(cpu) = p::current_cpu() else {
            return;
        };
        let (Some(target), Some(tracer)) = (p::affinity(self.pid), p::affinity(0)) else {
            return;
        };
        let (Some(one), Some(_)) = (p::only_cpu(&target, cpu), p::only_cpu(&tracer, cpu)) else {
            return;
        };
        if !p::set_affinity(self.pid, &one) {
            return;
        }
        if !p::set_affinity(0, &one) {
            p::set_affinity(self.pid, &target);
            return;
        }
        self.pinned = Some(Pinned {
            target,
            tracer,
            one,
        });
        // The threads this one starts meanwhile (the sites' specifications
        // made beside the agent's loading) run on the other CPUs.
        p::set_unpinned(Some(tracer));
    }

    /// Gives the command and this thread their CPUs back
    /// ([`World::pin_together`]).
    pub(in crate::transport::inproc) fn unpin(&mut self) {
        if let Some(p) = self.pinned.take() {
            crate::sys::process::set_affinity(self.pid, &p.target);
            crate::sys::process::set_affinity(0, &p.tracer);
            crate::sys::process::set_unpinned(None);
            // Threads started meanwhile still on that CPU (the heartbeat).
            crate::sys::process::threads_back_from(&p.one, &p.tracer);
        }
    }
}
