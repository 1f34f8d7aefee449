//! Fork children under `-f`. A fork child inherits the patched code and a
//! copy of the agent whose fork-guard page the kernel wiped
//! (`MADV_WIPEONFORK`): unfollowed, it stays dormant and the child is let
//! go with its trap sites put back (`traps`). Followed, the child is held
//! at its first stop while wprobe
//!
//! 1. writes the child's journals (copies of its parent's: the same sites,
//!    the same bytes), so that `wprobe repair --pid CHILD` restores it
//!    after a death of wprobe, as the parent's;
//! 2. writes the child's pid and the guard's magic into its copy of the
//!    guard page: its agent wakes, with the parent's control region (one
//!    ring, one set of counters, maps and global variables for every
//!    process, as under ptrace) and a store of its own (see
//!    [`agent_abi::fork_guard`]);
//!
//! then lets it go, its threads seized like the parent's (trap sites,
//! clones, forks, exec and exit seen). At detach each child's threads are
//! stopped and its journaled sites put back where our bytes still are.
//!
//! The libraries a followed child maps later are armed in it (`forklibs`:
//! its thread at the dynamic linker's `r_brk` held in
//! [`Children::at_library`], its journals lent for the writes).
//!
//! A `vfork` child (`posix_spawn`'s too) shares its parent's memory, agent
//! and guard page until it executes a program or exits. While it lives the
//! target counts the calls that make one itself
//! ([`agent_abi::fork_guard::VFORK_CALLS_WORD`], `patch::vfork_marks`);
//! when the threads are seized (followed, or for trap sites), the guard
//! page's [`agent_abi::fork_guard::VFORK_WORD`] counts it too, and
//! [`agent_abi::fork_guard::VFORK_FOLLOWED_WORD`] says whether it is
//! followed: the agent tells its hits from its parent's by the pid the
//! kernel gives. Followed, it is held at its first stop until its start
//! is reported, its runs carry its own pid and tid, its calls are tracked
//! apart; not followed, its hits run nothing and leave its parent's
//! tracked calls alone. A child that executes a program is armed there
//! (`joined`), or let go when not followed.

use std::collections::{BTreeMap, BTreeSet};

use super::journal;
use super::world::World;
use crate::sys::ptrace::{self as sys, Status};
use crate::transport::ExitStatus;
use crate::transport::common::journal as trap_journal;

/// A fork child followed.
#[derive(Debug)]
pub(super) struct Kid {
    /// Its parent.
    pub(super) parent: i32,
    /// Its patch journal (a copy of its parent's), removed once restored.
    journal: Option<journal::Journal>,
    /// Its trap journal, likewise.
    trap_journal: Option<trap_journal::Journal>,
}

/// The fork and vfork children of the seized threads, handed from one
/// [`super::traps::Traps`] to the next (the threads are taken again after
/// each library event).
#[derive(Debug, Default)]
pub(super) struct Children {
    /// Fork children whose first stop is awaited, with their parents.
    pub(super) forked: BTreeMap<i32, i32>,
    /// vfork children kept until they exec or exit, with their parents.
    pub(super) vforked: BTreeMap<i32, i32>,
    /// Followed (`-f`): the agent's fork-guard page, where a child's pid
    /// and the magic are written.
    pub(super) follow: Option<u64>,
    /// The agent's fork-guard page, followed or not: where the vfork
    /// children running on the process's memory are counted.
    pub(super) vfork_guard: Option<u64>,
    /// The fork children followed, by pid.
    pub(super) kids: BTreeMap<i32, Kid>,
    /// The watchpoints of each followed child's image (its parent's at the
    /// fork: a child of a process that executed a program since keeps the
    /// old image's, stubs included), by pid; none for a child without.
    pub(super) watches: BTreeMap<i32, super::seized::Watches>,
    /// Their threads (tid → pid).
    pub(super) threads: BTreeMap<i32, i32>,
    /// New threads and processes stopped before the event that made them
    /// was seen: held there until it is.
    pub(super) early: BTreeSet<i32>,
    /// Processes started (pid, parent) and ended, not yet reported.
    /// Under `-f` a forking thread is held at its fork event, and a child
    /// at its first stop, until the start is reported (the parent's runs
    /// before the fork first, none of the child's before): see `held`.
    pub(super) started: Vec<(i32, i32)>,
    /// (pid, status, wall-clock ns when its end was seen).
    pub(super) exited: Vec<(i32, ExitStatus, u64)>,
    /// What to say once (a child that executed a program).
    pub(super) notes: Vec<String>,
    /// Threads stopped (at a fork event, or a child's first stop) until
    /// the starts are reported; then resumed.
    pub(super) held: Vec<i32>,
    /// Children whose start was reported.
    pub(super) reported: BTreeSet<i32>,
    /// vfork children followed whose first stop is awaited: held there
    /// until their start is reported (the session arms them as they are,
    /// their parent's image, not the program they may execute at once).
    pub(super) vfork_first: BTreeSet<i32>,
    /// Followed children stopped at their exec, not let go: (pid, tid,
    /// parent); the transport loads an agent into the new image
    /// (`joined`).
    pub(super) exec_stops: Vec<(i32, i32, i32)>,
    /// The trap sites of the children whose image is not their root
    /// process's (a child that executed a program, and its own children),
    /// by pid: trap address → stub.
    pub(super) redirect: BTreeMap<i32, std::collections::HashMap<u64, u64>>,
    /// The fork-guard page of those children's agents, by pid (else
    /// [`Children::follow`]'s; 0: no agent).
    pub(super) guards: BTreeMap<i32, u64>,
    /// Threads of followed children stopped at the dynamic linker's
    /// `r_brk` (moved to its stub), with their process: held until the
    /// transport armed what the child mapped (`forklibs`).
    pub(super) at_library: BTreeMap<i32, i32>,
    /// The dynamic linker's `r_brk` of the followed children whose
    /// libraries are armed (`forklibs`), by pid: where their threads are
    /// held in [`Children::at_library`].
    pub(super) r_brk: BTreeMap<i32, u64>,
    /// Fork children of a process that executed a program before their
    /// first stop was seen, by pid: what adopting them takes of the image
    /// they have, their parent's old one (`InProc::on_exec`).
    pub(super) pre_exec: BTreeMap<i32, OldImage>,
}

/// What a fork child whose parent executed a program before the child's
/// first stop was seen needs of its parent's old image, its own image:
/// adopted with it as any fork child is with its parent's
/// ([`Children::adopt`]), or let go with its trap sites put back.
#[derive(Debug)]
pub(super) struct OldImage {
    /// The old agent's fork-guard page (0: no agent).
    guard: u64,
    /// Copies of the parent's journals, made at its exec (the parent's
    /// went with its image); `None`: none could be.
    journals: Option<(Option<journal::Journal>, Option<trap_journal::Journal>)>,
    /// The old image's trap sites: trap address → stub.
    redirect: std::collections::HashMap<u64, u64>,
    /// Their original bytes: trap address → byte.
    pub(super) orig: std::collections::HashMap<u64, u8>,
}

impl OldImage {
    fn remove_journals(self) {
        if let Some((j, t)) = self.journals {
            Kid {
                parent: 0,
                journal: j,
                trap_journal: t,
            }
            .remove_journals();
        }
    }
}

impl Children {
    /// The process of thread `tid`, if it is a followed child's (vfork
    /// children included).
    pub(super) fn pid_of(&self, tid: i32) -> Option<i32> {
        self.threads
            .get(&tid)
            .copied()
            .or_else(|| self.vforked.contains_key(&tid).then_some(tid))
    }

    /// Whether a followed child is still running (or is to be, its first
    /// stop awaited).
    pub(super) fn alive(&self) -> bool {
        !self.kids.is_empty()
            || (self.follow.is_some() && (!self.vforked.is_empty() || !self.forked.is_empty()))
    }

    /// Process `pid` executed a program: its fork children whose first
    /// stop is awaited keep its old image, its agent whose fork-guard page
    /// is `guard` (0: none) and its trap sites `redirect`, with their
    /// original bytes `orig`; followed (`-f`), they get copies of its
    /// journals now, before they go with its image. Each is adopted with
    /// these at its first stop ([`Children::adopt`]), not with what the
    /// new image gets.
    pub(super) fn parent_execed(
        &mut self,
        pid: i32,
        guard: u64,
        redirect: &std::collections::HashMap<u64, u64>,
        orig: &std::collections::HashMap<u64, u8>,
    ) {
        let waiting: Vec<i32> = self
            .forked
            .iter()
            .filter(|&(_, &p)| p == pid)
            .map(|(&c, _)| c)
            .collect();
        for child in waiting {
            let journals = if self.follow.is_some() {
                match copy_journals(pid, child) {
                    Ok(j) => Some(j),
                    Err(e) => {
                        self.notes.push(format!(
                            "process {child} (forked by {pid}) is not traced: its journal: {e}"
                        ));
                        None
                    }
                }
            } else {
                None
            };
            let old = OldImage {
                guard,
                journals,
                redirect: redirect.clone(),
                orig: orig.clone(),
            };
            if let Some(o) = self.pre_exec.insert(child, old) {
                o.remove_journals();
            }
        }
    }

    /// Child `child` ended or is let go before its adoption: the copies of
    /// its parent's old journals, if any, removed.
    pub(super) fn forget_pre_exec(&mut self, child: i32) {
        if let Some(o) = self.pre_exec.remove(&child) {
            o.remove_journals();
        }
    }

    /// A new child `child` of `parent` (`vfork`: sharing its memory).
    /// Whether the forking thread is to be held until the start is
    /// reported (see [`Children::started`]).
    pub(super) fn born(&mut self, child: i32, parent: i32, vfork: bool) -> bool {
        if vfork {
            self.vforked.insert(child, parent);
            if self.follow.is_some() {
                self.vfork_first.insert(child);
            }
            // Before the child runs (stopped at its first stop).
            self.count_vforked(self.memory_of(parent));
        } else {
            self.forked.insert(child, parent);
        }
        if self.follow.is_some() {
            self.started.push((child, parent));
        }
        self.follow.is_some()
    }

    /// The process whose memory `pid` runs on: a vfork child's parent's
    /// (up a chain of vfork children), else its own.
    fn memory_of(&self, mut pid: i32) -> i32 {
        // A chain longer than this is a cycle (pids reused): stop there.
        for _ in 0..64 {
            match self.vforked.get(&pid) {
                Some(&p) if p != pid => pid = p,
                _ => break,
            }
        }
        pid
    }

    /// Writes how many vfork children run on the memory of process `root`
    /// into its agent's fork-guard page, and whether they are followed
    /// ([`agent_abi::fork_guard::VFORK_WORD`] and the word after it). A
    /// write that fails leaves the children's runs attributed to `root`,
    /// and says so.
    fn count_vforked(&mut self, root: i32) {
        let Some(guard) = self
            .guards
            .get(&root)
            .copied()
            .or(self.follow)
            .or(self.vfork_guard)
            .filter(|&g| g != 0)
        else {
            return;
        };
        let n = self
            .vforked
            .keys()
            .filter(|&&k| self.memory_of(k) == root)
            .count() as u64;
        const _: () = assert!(
            agent_abi::fork_guard::VFORK_FOLLOWED_WORD == agent_abi::fork_guard::VFORK_WORD + 1
        );
        let at = guard + (agent_abi::fork_guard::VFORK_WORD * 8) as u64;
        let mut words = [0u8; 16];
        words[..8].copy_from_slice(&n.to_le_bytes());
        words[8..].copy_from_slice(&u64::from(self.follow.is_some()).to_le_bytes());
        let wrote = std::fs::File::options()
            .write(true)
            .open(format!("/proc/{root}/mem"))
            .map_err(|e| e.to_string())
            .and_then(|mem| match crate::sys::mem::pwrite(&mem, &words, at) {
                Ok(16) => Ok(()),
                Ok(k) => Err(format!("{k} of 16 bytes written")),
                Err(e) => Err(e.to_string()),
            });
        if let Err(e) = wrote
            && n != 0
        {
            self.notes.push(format!(
                "process {root}: the runs of its vfork children before they execute a program \
                 are shown as its own ({e})"
            ));
        }
    }

    /// vfork child `pid` executed a program or ended: the memory it ran on
    /// counts one vfork child less.
    fn vfork_ended(&mut self, pid: i32) -> Option<i32> {
        let root = self.memory_of(pid);
        let parent = self.vforked.remove(&pid)?;
        if root != pid {
            self.count_vforked(root);
        }
        Some(parent)
    }

    /// Child `child`, stopped at its first stop: resumed now if not
    /// followed or its start was reported, else held until it is.
    pub(super) fn resume_child(&mut self, child: i32) {
        if self.follow.is_none() || self.reported.contains(&child) {
            let _ = sys::cont(child, 0);
        } else {
            self.held.push(child);
        }
    }

    /// The starts are reported: the threads held for them go on.
    pub(super) fn release_held(&mut self) {
        for tid in std::mem::take(&mut self.held) {
            let _ = sys::cont(tid, 0);
        }
    }

    /// Follows fork child `child`, stopped at its first stop (see the
    /// module's documentation); false when it cannot be (its journals not
    /// written, its memory not writable): the caller lets it go with its
    /// traps put back, as an unfollowed child.
    pub(super) fn adopt(&mut self, child: i32, parent: i32) -> bool {
        // Its parent executed a program since the fork: the child has the
        // old image (see [`Children::parent_execed`]).
        let old = self.pre_exec.remove(&child);
        // 0: the parent's image has no agent (nothing of the run's probes
        // in it): the child is followed all the same, for what it runs.
        let guard = match &old {
            Some(o) => Some(o.guard),
            None => self.guards.get(&parent).copied().or(self.follow),
        };
        let Some(guard) = guard else {
            return false;
        };
        let (journals, redirect) = match old {
            Some(OldImage { journals: None, .. }) => return false,
            Some(OldImage {
                journals: Some(j),
                redirect,
                ..
            }) => (Ok(j), Some(redirect)),
            None => (copy_journals(parent, child), None),
        };
        let (journal, trap_journal) = match journals {
            Ok(j) => j,
            Err(e) => {
                self.notes.push(format!(
                    "process {child} (forked by {parent}) is not traced: its journal: {e}"
                ));
                return false;
            }
        };
        let mut words = [0u8; 16];
        words[..8].copy_from_slice(&agent_abi::fork_guard::MAGIC.to_le_bytes());
        words[8..].copy_from_slice(&u64::from(child as u32).to_le_bytes());
        let woke = guard == 0
            || std::fs::File::options()
                .write(true)
                .open(format!("/proc/{child}/mem"))
                .ok()
                .and_then(|mem| crate::sys::mem::pwrite(&mem, &words, guard).ok())
                .is_some_and(|n| n == words.len());
        let kid = Kid {
            parent,
            journal,
            trap_journal,
        };
        if !woke {
            self.notes.push(format!(
                "process {child} (forked by {parent}) is not traced: its agent could not be woken"
            ));
            kid.remove_journals();
            return false;
        }
        self.kids.insert(child, kid);
        self.threads.insert(child, child);
        if let Some(r) = redirect {
            // Its image is not its root process's any more.
            self.guards.insert(child, guard);
            self.redirect.insert(child, r);
            return true;
        }
        if self.guards.contains_key(&parent) {
            self.guards.insert(child, guard);
        }
        if let Some(r) = self.redirect.get(&parent).cloned() {
            self.redirect.insert(child, r);
        }
        true
    }

    /// The journals of followed child `pid`, lent to the patcher of its
    /// libraries (`forklibs`) for an installation; handed back with
    /// [`Children::return_journals`].
    pub(super) fn lend_journals(&mut self, pid: i32) -> super::patch::Journals {
        match self.kids.get_mut(&pid) {
            Some(k) => (k.journal.take(), k.trap_journal.take()),
            None => (None, None),
        }
    }

    /// The journals lent by [`Children::lend_journals`], back (those
    /// created meanwhile too).
    pub(super) fn return_journals(&mut self, pid: i32, journals: super::patch::Journals) {
        match self.kids.get_mut(&pid) {
            Some(k) => {
                k.journal = journals.0;
                k.trap_journal = journals.1;
            }
            None => Kid {
                parent: 0,
                journal: journals.0,
                trap_journal: journals.1,
            }
            .remove_journals(),
        }
    }

    /// Thread `tid` of a followed child ended (`Some(status)`: the
    /// process did).
    pub(super) fn thread_ended(&mut self, tid: i32, status: Option<ExitStatus>) {
        self.at_library.remove(&tid);
        let Some(pid) = self.pid_of(tid) else {
            return;
        };
        self.threads.remove(&tid);
        if tid != pid {
            return;
        }
        self.r_brk.remove(&pid);
        if self.vfork_ended(pid).is_some() || self.kids.contains_key(&pid) {
            if let Some(k) = self.kids.remove(&pid) {
                // Its patched image is gone with it.
                k.remove_journals();
            }
            self.threads.retain(|_, p| *p != pid);
            if self.follow.is_some()
                && let Some(s) = status
            {
                self.exited.push((pid, s, wall_ns()));
            }
        }
    }

    /// A followed child (or a vfork child) executed a program: its image,
    /// and our bytes with it, are gone. Followed, it stays stopped at its
    /// exec for the transport ([`Children::exec_stops`]); else it is let go.
    pub(super) fn execed(&mut self, tid: i32) {
        let Some(pid) = self.pid_of(tid) else {
            return;
        };
        self.at_library.retain(|_, p| *p != pid);
        self.r_brk.remove(&pid);
        let vfork_parent = self.vfork_ended(pid);
        let mut parent = vfork_parent;
        if let Some(k) = self.kids.remove(&pid) {
            parent = Some(k.parent);
            k.remove_journals();
        }
        self.threads.retain(|_, p| *p != pid);
        self.redirect.remove(&pid);
        self.guards.remove(&pid);
        match parent {
            Some(parent) if self.follow.is_some() => self.exec_stops.push((pid, tid, parent)),
            _ => {
                let _ = sys::detach(tid, 0);
            }
        }
    }

    /// A child that executed a program, its new image armed and its agent
    /// joined to the region (`joined`): its stopped thread `tid` and its
    /// journals, its trap sites (`redirect`) and its agent's fork-guard
    /// page (0: no agent, its image has none of the run's probes). It goes
    /// on, served like the other children.
    pub(super) fn joined(
        &mut self,
        pid: i32,
        tid: i32,
        parent: i32,
        journals: (Option<journal::Journal>, Option<trap_journal::Journal>),
        redirect: std::collections::HashMap<u64, u64>,
        guard: u64,
    ) {
        self.kids.insert(
            pid,
            Kid {
                parent,
                journal: journals.0,
                trap_journal: journals.1,
            },
        );
        self.threads.insert(tid, pid);
        if !redirect.is_empty() {
            self.redirect.insert(pid, redirect);
        }
        self.guards.insert(pid, guard);
        // Its start was reported (it was followed before its exec).
        self.reported.insert(pid);
        // The injections that loaded its agent set other options: its
        // clones, forks and execs are to be seen again.
        let _ = sys::setoptions(tid, super::seized::OPTIONS);
        let _ = sys::cont(tid, 0);
    }

    /// Puts back the journaled bytes of every followed child and lets it
    /// go (the agents are dormant already: the region is disabled).
    /// Returns what failed, per child.
    pub(super) fn restore_all(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        // Threads at a library event are stopped too (at `r_brk`'s stub).
        let held: BTreeSet<i32> = std::mem::take(&mut self.held)
            .into_iter()
            .chain(std::mem::take(&mut self.at_library).into_keys())
            .collect();
        for (pid, kid) in std::mem::take(&mut self.kids) {
            let tids: Vec<i32> = self
                .threads
                .iter()
                .filter(|(_, p)| **p == pid)
                .map(|(t, _)| *t)
                .collect();
            self.threads.retain(|_, p| *p != pid);
            match restore_kid(pid, &tids, &held) {
                Ok(()) => kid.remove_journals(),
                Err(e) => errors.push(format!(
                    "process {pid} (forked by {}): {e:#}; `wprobe repair --pid {pid}` restores it",
                    kid.parent
                )),
            }
        }
        // Children never adopted: the copies of their parent's journals
        // are not theirs.
        for (_, o) in std::mem::take(&mut self.pre_exec) {
            o.remove_journals();
        }
        // vfork children share their parent's memory, restored with it.
        let roots: BTreeSet<i32> = self.vforked.keys().map(|&k| self.memory_of(k)).collect();
        for (pid, _) in std::mem::take(&mut self.vforked) {
            let _ = sys::detach(pid, 0);
        }
        for root in roots {
            self.count_vforked(root);
        }
        errors
    }
}

/// Wall-clock time, ns (the clock of the runs' times).
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Kid {
    fn remove_journals(self) {
        if let Some(j) = self.journal {
            j.remove();
        }
        if let Some(j) = self.trap_journal {
            j.remove();
        }
    }
}

/// The child's journals, copies of its parent's (each only if the parent
/// has one: this run wrote them, in its journal directory).
fn copy_journals(
    parent: i32,
    child: i32,
) -> std::io::Result<(Option<journal::Journal>, Option<trap_journal::Journal>)> {
    let dir = trap_journal::dir();
    let has = |ext: &str| dir.join(format!("{parent}.{ext}")).exists();
    let sites = copy_journal(
        has("inproc"),
        || journal::read(parent),
        |entries| {
            let mut j = journal::Journal::create(child)?;
            j.record(&entries)?;
            Ok(j)
        },
    )?;
    let traps = copy_journal(
        has("journal"),
        || trap_journal::read(parent),
        |entries| {
            let mut j = trap_journal::Journal::create(child)?;
            j.record_all(&entries)?;
            Ok(j)
        },
    )?;
    Ok((sites, traps))
}

/// A journal of the child made by `write` of the entries `read` gives of
/// the parent's, when the parent has one (`has`, and `read` finds it).
fn copy_journal<E, J>(
    has: bool,
    read: impl FnOnce() -> std::io::Result<E>,
    write: impl FnOnce(E) -> std::io::Result<J>,
) -> std::io::Result<Option<J>> {
    if !has {
        return Ok(None);
    }
    match read() {
        Ok(entries) => write(entries).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Stops the threads `tids` of child `pid` (seized; those in `held` are
/// stopped already), puts back its
/// journaled bytes where ours still are, and lets them go with the signals
/// that came meanwhile.
fn restore_kid(pid: i32, tids: &[i32], held: &BTreeSet<i32>) -> anyhow::Result<()> {
    let traps: BTreeSet<u64> = trap_journal::read(pid)
        .unwrap_or_default()
        .into_iter()
        .map(|(addr, _, _)| addr)
        .collect();
    let mut stopped = BTreeMap::new();
    for &tid in tids {
        if held.contains(&tid) {
            // Stopped at its first stop already.
            stopped.insert(tid, 0);
        } else if let Some(sig) = stop_thread(tid, &traps) {
            stopped.insert(tid, sig);
        }
    }
    if stopped.is_empty() {
        // Gone meanwhile: nothing to restore.
        return Ok(());
    }
    let mut w = World::adopt(pid, stopped)?;
    let r = restore_sites(&w, pid);
    w.release();
    r
}

/// Interrupts seized thread `tid` and waits for its stop; the signal it
/// was about to take (held, delivered at release), or `None` when it ended.
/// The fault of one of our `traps` is not held: the thread is at the site,
/// whose instruction it runs once the byte is back.
fn stop_thread(tid: i32, traps: &BTreeSet<u64>) -> Option<i32> {
    sys::interrupt(tid).ok()?;
    let mut held = 0;
    let mut after_event = false;
    loop {
        let raw = match sys::wait_interrupted(tid, after_event) {
            Ok(Some((_, raw))) => raw,
            _ => return None,
        };
        let st = sys::decode_status(raw);
        after_event = sys::is_event_stop(st);
        match st {
            Status::Exited(_) | Status::Signaled(_) => return None,
            Status::Stopped {
                event: libc::PTRACE_EVENT_STOP,
                ..
            } => return Some(held),
            Status::Stopped { sig, event: 0 } => {
                // A signal on its way: held for the release, the thread on
                // to the interrupt's stop.
                let mut r = crate::sys::regs::zero_regs();
                let ours = sig == libc::SIGSEGV
                    && sys::getregs(tid, &mut r).is_ok()
                    && traps.contains(&r.rip);
                if !ours {
                    held = sig;
                }
                sys::cont(tid, 0).ok()?;
            }
            _ => {
                sys::cont(tid, 0).ok()?;
            }
        }
    }
}

/// Puts back the bytes of the journals of `pid` where ours still are. A
/// thread at one of our jumps (a site's, or a near jump's cave) is moved to
/// where the jump goes, as running it would.
fn restore_sites(w: &World, pid: i32) -> anyhow::Result<()> {
    let sites = journal::read(pid).unwrap_or_default();
    for tid in w.tids() {
        let Some(r) = w.regs(tid) else { continue };
        if let Some(e) = sites
            .iter()
            .find(|e| e.addr == r.rip && e.patch.first() == Some(&0xe9) && e.patch.len() >= 5)
        {
            let mut now = [0u8; 5];
            if w.peek(e.addr, &mut now) == 5 && now[..] == e.patch[..5] {
                let rel = i32::from_le_bytes([now[1], now[2], now[3], now[4]]);
                let to = e.addr.wrapping_add(5).wrapping_add(rel as i64 as u64);
                w.set_pc(tid, to)?;
            }
        }
    }
    let mut first_err = None;
    for e in &sites {
        let mut now = vec![0u8; e.patch.len()];
        if w.peek(e.addr, &mut now) == now.len()
            && now == e.patch
            && let Err(err) = w.poke(e.addr, &e.orig)
        {
            first_err.get_or_insert(err);
        }
    }
    for (addr, orig, _) in trap_journal::read(pid).unwrap_or_default() {
        let mut now = [0u8; 1];
        if w.peek(addr, &mut now) == 1
            && now[0] == super::TRAP_INSN
            && let Err(err) = w.poke(addr, &[orig])
        {
            first_err.get_or_insert(err);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl super::InProc {
    /// Whether `pid` is a fork child followed (`-f`; vfork children too).
    pub(super) fn follows(&self, pid: i32) -> bool {
        let has = |c: &Children| c.kids.contains_key(&pid) || c.vforked.contains_key(&pid);
        self.traps.as_ref().is_some_and(|t| has(&t.kids)) || has(&self.children)
    }

    /// `insert` in a fork child followed: it has its parent's probes (the
    /// same bytes, a copy of the same agent), and only those.
    pub(super) fn insert_in_child(
        &mut self,
        tag: usize,
        pid: i32,
        addr: u64,
        what: crate::transport::Insert,
    ) -> Result<crate::transport::Armed, crate::transport::Error> {
        use crate::transport::Error;
        if !self.follows(pid) {
            return Err(Error::gone(pid, format!("process {pid} is not traced")));
        }
        // Whatever it is (a watchpoint too: the child's threads got its
        // perf events at the child's first stop, `Traps::first_stop`).
        let _ = what;
        if self.armed_in(pid).contains_key(&tag) {
            return Ok(crate::transport::Armed(tag as u64));
        }
        Err(Error::unsupported(
            super::INFO.name,
            format!(
                "process {pid}: {addr:#x} is not armed in its parent; a fork child has its \
                 parent's probes under --transport inproc"
            ),
        ))
    }
}
