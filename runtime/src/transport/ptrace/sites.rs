//! Breakpoint sites and watchpoint slots: arming an `int3` (checked against
//! `opcode =`, journaled in attach mode), removing one (only over our own
//! int3), the debug registers of every thread, and the registers of every
//! thread for a core file.

use nix::errno::Errno;

use super::mem::Site;
use super::threads::WatchSlot;
use super::{ArmError, BpId, PtraceError, PtraceTracer, WatchKind, WpId};
use crate::arch::{self, BREAKPOINT_INSN};
use crate::proc::procmaps;
use crate::sys::ptrace as sys;

impl PtraceTracer {
    /// Arms an `int3` at `addr` in `pid` (shared by its threads). Several
    /// probes may share an address: one `int3`, one id per call.
    pub fn insert_breakpoint(
        &mut self,
        pid: i32,
        addr: u64,
        expected: Option<u8>,
    ) -> Result<BpId, ArmError> {
        self.insert_site(pid, addr, expected, false)?;
        let id = BpId(self.next_bp);
        self.next_bp += 1;
        let p = self.procs.get(&pid).ok_or(ArmError::NotTraced { pid })?;
        p.mem
            .borrow_mut()
            .sites
            .get_mut(&addr)
            .expect("invariant: site just inserted")
            .ids
            .push(id);
        self.bps.insert(id, (pid, addr));
        Ok(id)
    }

    pub(super) fn insert_site(
        &mut self,
        pid: i32,
        addr: u64,
        expected: Option<u8>,
        internal: bool,
    ) -> Result<(), ArmError> {
        self.insert_site_for(pid, addr, expected, internal, false)
    }

    /// Arms the site at `addr` for a probe, for wprobe itself (`internal`:
    /// the dynamic linker's hook) or as a return site (`ret`); the last
    /// two accept an instruction that does not decode (it is then
    /// single-stepped).
    fn insert_site_for(
        &mut self,
        pid: i32,
        addr: u64,
        expected: Option<u8>,
        internal: bool,
        ret: bool,
    ) -> Result<(), ArmError> {
        let tid = self.any_tid(pid);
        let p = self.procs.get(&pid).ok_or(ArmError::NotTraced { pid })?;
        let launched = p.launched;
        let mut m = p.mem.borrow_mut();
        if let Some(s) = m.sites.get_mut(&addr) {
            if let Some(e) = expected
                && self.opts.verify_opcodes
                && e != s.orig
            {
                return Err(ArmError::OpcodeMismatch {
                    addr,
                    expected: e,
                    found: s.orig,
                });
            }
            s.internal |= internal;
            s.ret |= ret;
            return Ok(());
        }
        if !m.is_exec(addr) {
            return Err(ArmError::NotExecutable { pid, addr });
        }
        let mut b = [0u8];
        if m.read_raw(addr, &mut b) != 1 {
            return Err(ArmError::NotExecutable { pid, addr });
        }
        if b[0] == BREAKPOINT_INSN {
            return Err(ArmError::AlreadyTrapped { addr });
        }
        if let Some(e) = expected
            && self.opts.verify_opcodes
            && e != b[0]
        {
            return Err(ArmError::OpcodeMismatch {
                addr,
                expected: e,
                found: b[0],
            });
        }
        let (insn, kind) = m.plan(addr);
        if insn.is_none() && !internal && !ret {
            return Err(ArmError::NotAnInstructionBoundary { addr });
        }
        if !launched {
            // Attach mode: never an int3 that `repair` could not undo.
            let inode = procmaps::find(&m.maps, addr).map_or(0, |mp| mp.inode);
            match self.journal.as_mut() {
                Some(Ok(j)) => j.record(addr, b[0], inode).map_err(|e| ArmError::Journal {
                    reason: format!("writing the patch journal: {e}"),
                })?,
                Some(Err(e)) => {
                    return Err(ArmError::Journal {
                        reason: e.to_string(),
                    });
                }
                None => {
                    return Err(ArmError::Journal {
                        reason: "no patch journal".into(),
                    });
                }
            }
        }
        m.poke(tid, addr, &[BREAKPOINT_INSN])
            .map_err(|e| PtraceError::sys("writing int3", pid, e))?;
        m.ever_armed.insert(addr);
        let origin = m.origin_of(addr);
        m.sites.insert(
            addr,
            Site {
                orig: b[0],
                ids: Vec::new(),
                internal,
                insn,
                kind,
                ool: None,
                ret,
                ret_refs: 0,
                origin,
            },
        );
        Ok(())
    }

    /// Arms (or keeps) the `int3` at return address `addr` in `pid` for one
    /// more tracked call that returns there. The address is where a `ret`
    /// will jump, so it starts an instruction; it must lie in an
    /// executable mapping.
    pub fn retain_return_site(&mut self, pid: i32, addr: u64) -> Result<(), ArmError> {
        self.insert_site_for(pid, addr, None, false, true)?;
        let p = self.procs.get(&pid).ok_or(ArmError::NotTraced { pid })?;
        let mut m = p.mem.borrow_mut();
        let s = m
            .sites
            .get_mut(&addr)
            .expect("invariant: site just inserted");
        s.ret_refs += 1;
        Ok(())
    }

    /// One tracked call that returned to `addr` in `pid` is done with it
    /// (returned or gone); the site stays armed while idle (see
    /// [`PtraceTracer::drop_idle_return_site`]).
    pub fn release_return_site(&mut self, pid: i32, addr: u64) {
        if let Some(p) = self.procs.get(&pid)
            && let Some(s) = p.mem.borrow_mut().sites.get_mut(&addr)
            && s.ret
        {
            s.ret_refs = s.ret_refs.saturating_sub(1);
        }
    }

    /// Removes the return site at `addr` in `pid` when nothing needs it
    /// (a hit found no tracked call returning there): the original byte
    /// goes back.
    pub fn drop_idle_return_site(&mut self, pid: i32, addr: u64) {
        let tid = self.any_tid(pid);
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let mut m = p.mem.borrow_mut();
        let Some(s) = m.sites.get(&addr) else {
            return;
        };
        if !s.ret || !s.unused() {
            return;
        }
        let orig = s.orig;
        m.sites.remove(&addr);
        let mut now = [0u8];
        if m.read_raw(addr, &mut now) == 1 && now[0] == BREAKPOINT_INSN {
            let _ = m.poke(tid, addr, &[orig]);
        }
    }

    /// Removes one logical probe; the `int3` goes when its last probe does.
    /// Removing an id whose process exited or exec'd is not an error.
    pub fn remove_breakpoint(&mut self, id: BpId) -> Result<(), PtraceError> {
        let Some((_, addr)) = self.bps.remove(&id) else {
            return Ok(());
        };
        let pids: Vec<i32> = self.procs.keys().copied().collect();
        let mut first_err = None;
        for pid in pids {
            let tid = self.any_tid(pid);
            let p = &self.procs[&pid];
            let mut m = p.mem.borrow_mut();
            let Some(s) = m.sites.get_mut(&addr) else {
                continue;
            };
            let Some(i) = s.ids.iter().position(|x| *x == id) else {
                continue;
            };
            s.ids.remove(i);
            if s.unused() {
                let orig = s.orig;
                m.sites.remove(&addr);
                // Only over our own int3 (see `ProcMem::restore_all`).
                let mut now = [0u8];
                if m.read_raw(addr, &mut now) == 1 && now[0] != BREAKPOINT_INSN {
                    continue;
                }
                if let Err(e) = m.poke(tid, addr, &[orig])
                    && e != Errno::ESRCH
                    && first_err.is_none()
                {
                    first_err = Some(PtraceError::Restore {
                        pid,
                        addr,
                        errno: e,
                    });
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Arms a hardware watchpoint on every thread of `pid` (and on threads
    /// created later).
    pub fn insert_watchpoint(
        &mut self,
        pid: i32,
        addr: u64,
        len: u8,
        kind: WatchKind,
    ) -> Result<WpId, ArmError> {
        crate::transport::BadWatchpoint::check(addr, len, kind)?;
        let p = self.procs.get(&pid).ok_or(ArmError::NotTraced { pid })?;
        let Some(slot) = p.wps.iter().position(Option::is_none) else {
            return Err(ArmError::NoDebugRegister {
                limit: arch::DEBUG_REGISTERS as u8,
            });
        };
        let id = WpId(self.next_wp);
        self.next_wp += 1;
        self.proc_mut(pid).wps[slot] = Some(WatchSlot {
            id,
            addr,
            len,
            kind,
        });
        if let Err(e) = self.apply_debugregs(pid) {
            self.proc_mut(pid).wps[slot] = None;
            let _ = self.apply_debugregs(pid);
            return Err(ArmError::Provider(e));
        }
        self.wps.insert(id, (pid, slot));
        Ok(id)
    }

    /// Removes a watchpoint.
    pub fn remove_watchpoint(&mut self, id: WpId) -> Result<(), PtraceError> {
        let Some((pid, slot)) = self.wps.remove(&id) else {
            return Ok(());
        };
        match self.procs.get_mut(&pid) {
            Some(p) if p.wps[slot].is_some_and(|w| w.id == id) => p.wps[slot] = None,
            _ => return Ok(()),
        }
        self.apply_debugregs(pid)
    }

    /// Writes DR0-3 and DR7 of every thread of `pid`, stopping running ones
    /// for the duration.
    fn apply_debugregs(&mut self, pid: i32) -> Result<(), PtraceError> {
        let held = self.stop_world(pid, 0);
        let p = &self.procs[&pid];
        let dr7 = p.dr7();
        let wps = p.wps;
        let tids = p.threads.clone();
        let mut res = Ok(());
        for tid in tids {
            if self.threads.get(&tid).is_none_or(|t| t.new) {
                continue;
            }
            if let Err(e) = set_debugregs(tid, &wps, dr7)
                && e != Errno::ESRCH
            {
                res = Err(PtraceError::sys(
                    "PTRACE_POKEUSER (debug registers)",
                    tid,
                    e,
                ));
            }
        }
        self.resume_all(&held);
        res
    }

    /// The registers of every other thread of `pid` than `except` (which is
    /// stopped at a hit): each is stopped for the read, then resumed as it
    /// was. For a core file of the whole process.
    pub fn other_threads_registers(
        &mut self,
        pid: i32,
        except: i32,
    ) -> Vec<(i32, arch::Regs, Option<arch::FpRegs>)> {
        let held = self.stop_world(pid, except);
        let tids: Vec<i32> = self
            .procs
            .get(&pid)
            .map(|p| p.threads.iter().copied().filter(|t| *t != except).collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        for t in tids {
            let mut r = crate::sys::regs::zero_regs();
            if sys::getregs(t, &mut r).is_err() {
                continue;
            }
            let mut f = crate::sys::regs::zero_fpregs();
            let fp = sys::getfpregs(t, &mut f).ok().map(|()| f);
            out.push((t, r, fp));
        }
        self.resume_all(&held);
        out
    }
}

/// Writes the debug registers of one stopped thread.
pub(super) fn set_debugregs(
    tid: i32,
    wps: &[Option<WatchSlot>; arch::DEBUG_REGISTERS],
    dr7: u64,
) -> Result<(), Errno> {
    // Disable first so that changing addresses never arms a stale combination.
    sys::pokeuser(tid, arch::debugreg_offset(7), 0)?;
    for (i, w) in wps.iter().enumerate() {
        if let Some(w) = w {
            sys::pokeuser(tid, arch::debugreg_offset(i), w.addr)?;
        }
    }
    if dr7 != 0 {
        sys::pokeuser(tid, arch::debugreg_offset(7), dr7)?;
    }
    Ok(())
}
