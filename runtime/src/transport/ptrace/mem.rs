//! The memory of one traced address space: the `/proc/PID/mem` descriptor,
//! the cached mappings, and the breakpoint sites (address → original byte,
//! logical probes, step-over plan, out-of-line slot). Reads through here
//! return the original bytes where our `int3`s are; checked writes honour the
//! process's own page permissions and never remove an `int3` (they update
//! the saved original byte instead). Shared (`Rc`) between processes that
//! share one address space (vfork) and with the [`super::PtraceHit`] of a stop.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::rc::Rc;

use nix::errno::Errno;

use super::BpId;
use crate::arch::{self, BREAKPOINT_INSN, Insn, MAX_INSN_BYTES, StepKind};
use crate::proc::procmaps::{self, Mapping};
use crate::sys::ptrace as sys;

/// An out-of-line slot holding a relocated copy of a displaced instruction.
#[derive(Clone, Copy, Debug)]
pub struct OolSlot {
    /// Address of the slot in the tracee.
    pub addr: u64,
    /// Address of the jump back (just after the relocated instruction).
    pub jump: u64,
}

/// One address where we keep an `int3`.
#[derive(Clone, Debug)]
pub struct Site {
    /// The byte the `int3` replaced (as the process would see it).
    pub orig: u8,
    /// Logical probes at this address (empty for internal sites only).
    pub ids: Vec<BpId>,
    /// The dynamic linker's `r_brk` (library events).
    pub internal: bool,
    /// The displaced instruction, decoded from the original bytes.
    pub insn: Option<Insn>,
    /// How it is stepped over.
    pub kind: StepKind,
    /// Its out-of-line slot, once allocated.
    pub ool: Option<OolSlot>,
    /// Armed as a return site: a return address of tracked calls of return
    /// probes (see `super::seam`); kept while idle until a hit finds no
    /// call returning there.
    pub ret: bool,
    /// Tracked calls that return here (in this address space).
    pub ret_refs: u32,
    /// The mapping the site was armed in: its file's inode and its load
    /// base (start minus file offset). A library unmapped (`dlclose`), or
    /// another mapped in its place, no longer holds the `int3`.
    pub origin: (u64, u64),
}

impl Site {
    /// Nothing needs this site any more: no probe, no return, not internal.
    pub fn unused(&self) -> bool {
        self.ids.is_empty() && !self.internal && self.ret_refs == 0
    }
}

/// A scratch page mapped in the tracee for out-of-line execution.
#[derive(Clone, Copy, Debug)]
pub struct Scratch {
    /// First address.
    pub base: u64,
    /// Slots handed out.
    pub used: usize,
}

/// One traced address space.
#[derive(Debug)]
pub struct ProcMem {
    /// A process (thread group id) using this address space.
    pub pid: i32,
    /// `/proc/PID/mem`, opened read-write.
    pub fd: Option<File>,
    /// Cached `/proc/PID/maps`.
    pub maps: Rc<Vec<Mapping>>,
    /// Breakpoint sites by address.
    pub sites: BTreeMap<u64, Site>,
    /// Every address where we ever put an `int3` (stale-trap detection).
    pub ever_armed: HashSet<u64>,
    /// A checked write touched the bytes of a probed instruction: re-plan.
    pub code_dirty: bool,
    /// Scratch pages for out-of-line execution.
    pub scratch: Vec<Scratch>,
    /// Mapping a scratch page failed once: do not try again.
    pub scratch_failed: bool,
    /// Address of a `syscall` instruction usable for injection.
    pub syscall_insn: Option<u64>,
    /// Slots by address: (slot, jump back, original address, original length).
    pub ool_index: Vec<(u64, u64, u64, u8)>,
    /// Whether an access outside the cached mappings may re-read
    /// `/proc/PID/maps` (once per stop: a handler looping over an unmapped
    /// address must not re-read the maps of a large process each time).
    pub may_refresh: bool,
}

impl ProcMem {
    /// Opens the memory of `pid` and reads its mappings.
    pub fn open(pid: i32) -> ProcMem {
        let fd = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .ok();
        ProcMem {
            pid,
            fd,
            maps: Rc::new(procmaps::read(pid).unwrap_or_default()),
            sites: BTreeMap::new(),
            ever_armed: HashSet::new(),
            code_dirty: false,
            scratch: Vec::new(),
            scratch_failed: false,
            syscall_insn: None,
            ool_index: Vec::new(),
            may_refresh: true,
        }
    }

    /// A copy for a forked child (same bytes and sites, its own descriptor).
    pub fn fork_copy(&self, child: i32) -> ProcMem {
        let mut m = ProcMem::open(child);
        m.sites = self.sites.clone();
        // The child's copies of live calls are not tracked (spec §6.5): its
        // return sites stay armed until a hit finds no call returning there.
        for s in m.sites.values_mut() {
            s.ret_refs = 0;
        }
        m.ever_armed = self.ever_armed.clone();
        m.scratch = self.scratch.clone();
        m.scratch_failed = self.scratch_failed;
        m.syscall_insn = self.syscall_insn;
        m.ool_index = self.ool_index.clone();
        m
    }

    /// Re-reads the mappings.
    pub fn refresh_maps(&mut self) {
        if let Ok(m) = procmaps::read(self.pid) {
            self.maps = Rc::new(m);
        }
    }

    /// Raw read (our `int3`s visible): process_vm_readv, then /proc/PID/mem for the rest.
    pub fn read_raw(&self, addr: u64, buf: &mut [u8]) -> usize {
        let mut done = crate::sys::mem::vm_read(self.pid, addr, buf).unwrap_or(0);
        if done < buf.len()
            && let Some(fd) = &self.fd
        {
            while done < buf.len() {
                let Some(at) = addr.checked_add(done as u64) else {
                    break;
                };
                match crate::sys::mem::pread(fd, &mut buf[done..], at) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => done += n,
                }
            }
        }
        done
    }

    /// Replaces our `int3`s in `buf` (read at `addr`) by the original bytes.
    pub fn shadow(&self, addr: u64, buf: &mut [u8]) {
        let end = addr.saturating_add(buf.len() as u64);
        for (a, s) in self.sites.range(addr..end) {
            buf[(a - addr) as usize] = s.orig;
        }
    }

    /// Read as the process sees its memory (original bytes under our `int3`s).
    /// Returns how many leading bytes could be read; bytes of unreadable
    /// mappings are not returned.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) -> usize {
        let mut n = crate::sys::mem::vm_read(self.pid, addr, buf).unwrap_or(0);
        if n < buf.len() {
            // Partial read (page boundary, page-in failure): retry the rest
            // through /proc/PID/mem, but only where the process may read.
            let rest = buf.len() - n;
            let at = addr.wrapping_add(n as u64);
            let ok = self.range_ok(at, rest as u64, false);
            if ok > 0
                && let Some(fd) = &self.fd
            {
                let want = ok.min(rest as u64) as usize;
                if let Ok(m) = crate::sys::mem::pread(fd, &mut buf[n..n + want], at) {
                    n += m;
                }
            }
        }
        self.shadow(addr, &mut buf[..n]);
        n
    }

    /// How many bytes from `addr` (up to `len`) lie in mappings with the access.
    fn range_ok_in(maps: &[Mapping], addr: u64, len: u64, write: bool) -> u64 {
        let mut at = addr;
        let end = addr.saturating_add(len);
        while at < end {
            match procmaps::find(maps, at) {
                Some(m) if m.read && (!write || m.write) => at = m.end.min(end),
                _ => break,
            }
        }
        at - addr
    }

    /// Like `range_ok_in` on the cached maps, refreshing them on a miss at
    /// most once per stop (see [`ProcMem::may_refresh`]).
    pub fn range_ok(&mut self, addr: u64, len: u64, write: bool) -> u64 {
        let n = Self::range_ok_in(&self.maps, addr, len, write);
        if n == len || !self.may_refresh {
            return n;
        }
        self.may_refresh = false;
        self.refresh_maps();
        Self::range_ok_in(&self.maps, addr, len, write)
    }

    /// Forced write (ignores page protections, as a debugger writes text):
    /// /proc/PID/mem, falling back to PTRACE_POKEDATA through `tid`.
    pub fn poke(&self, tid: i32, addr: u64, data: &[u8]) -> Result<(), Errno> {
        if let Some(fd) = &self.fd
            && crate::sys::mem::pwrite(fd, data, addr) == Ok(data.len())
        {
            return Ok(());
        }
        // Word-wise read-modify-write.
        let mut off = 0usize;
        while off < data.len() {
            let a = addr + off as u64;
            let base = a & !7;
            let mut word = sys::peekdata(tid, base)?.to_le_bytes();
            let first = (a - base) as usize;
            let n = (8 - first).min(data.len() - off);
            word[first..first + n].copy_from_slice(&data[off..off + n]);
            sys::pokedata(tid, base, u64::from_le_bytes(word))?;
            off += n;
        }
        Ok(())
    }

    /// A write the process itself could do: all of `data` must lie in writable
    /// mappings. Our `int3`s stay; the saved original bytes take the new values.
    /// Returns `false` (nothing written) when any byte is not writable.
    pub fn write_checked(&mut self, tid: i32, addr: u64, data: &[u8]) -> bool {
        let len = data.len() as u64;
        if addr.checked_add(len).is_none() || self.range_ok(addr, len, true) != len {
            return false;
        }
        let end = addr + len;
        // Does the write touch a probed instruction (int3 or the bytes after it)?
        let lo = addr.saturating_sub(MAX_INSN_BYTES as u64);
        if self.sites.range(lo..end).next().is_some() {
            self.code_dirty = true;
        }
        let mut chunk = [0u8; 256];
        let mut off = 0usize;
        while off < data.len() {
            let n = (data.len() - off).min(chunk.len());
            let a = addr + off as u64;
            chunk[..n].copy_from_slice(&data[off..off + n]);
            for (sa, s) in self.sites.range_mut(a..a + n as u64) {
                let i = (sa - a) as usize;
                s.orig = chunk[i];
                chunk[i] = BREAKPOINT_INSN;
            }
            if self.poke(tid, a, &chunk[..n]).is_err() {
                return false;
            }
            off += n;
        }
        true
    }

    /// Reads the original bytes of the instruction at `addr` (up to 15 bytes).
    pub fn insn_bytes(&mut self, addr: u64) -> ([u8; 16], usize) {
        let mut b = [0u8; 16];
        let mut n = self.read_raw(addr, &mut b[..MAX_INSN_BYTES]);
        if n == 0 {
            return (b, 0);
        }
        self.shadow(addr, &mut b[..n]);
        // Never read past an executable mapping's end into garbage semantics.
        n = n.min(MAX_INSN_BYTES);
        (b, n)
    }

    /// Decodes and classifies the instruction at site `addr`.
    pub fn plan(&mut self, addr: u64) -> (Option<Insn>, StepKind) {
        let (b, n) = self.insn_bytes(addr);
        match arch::decode(addr, &b[..n]) {
            Some(insn) => (Some(insn), arch::classify(&insn)),
            None => (None, StepKind::SingleStep),
        }
    }

    /// Re-plans every site after a handler rewrote code bytes.
    pub fn replan_all(&mut self) {
        let addrs: Vec<u64> = self.sites.keys().copied().collect();
        for a in addrs {
            let (insn, kind) = self.plan(a);
            if let Some(s) = self.sites.get_mut(&a) {
                s.insn = insn;
                s.kind = kind;
                s.ool = None;
            }
        }
        self.code_dirty = false;
    }

    /// The out-of-line slot containing `rip`: (slot, jump, original address, length).
    pub fn ool_at(&self, rip: u64) -> Option<(u64, u64, u64, u8)> {
        let page = rip & !0xfff;
        if !self.scratch.iter().any(|s| s.base == page) {
            return None;
        }
        self.ool_index
            .iter()
            .copied()
            .find(|&(slot, _, _, _)| slot <= rip && rip < slot + arch::OOL_SLOT_BYTES as u64)
    }

    /// Writes the original byte back at every site where our `int3` still
    /// is (detach, scrub). Errors other than the address space being gone
    /// are returned; so are the sites the process rewrote meanwhile (a JIT),
    /// left as it wrote them: `(address, byte found)`.
    pub fn restore_all(&mut self, tid: i32) -> Result<Vec<(u64, u8)>, (u64, Errno)> {
        let mut first_err = None;
        let mut left_alone = Vec::new();
        for (&a, s) in &self.sites {
            // Only over our own int3: a process that rewrote its code (a
            // JIT) keeps what it wrote.
            let mut now = [0u8];
            if self.read_raw(a, &mut now) == 1 && now[0] != BREAKPOINT_INSN {
                left_alone.push((a, now[0]));
                continue;
            }
            if let Err(e) = self.poke(tid, a, &[s.orig])
                && first_err.is_none()
            {
                first_err = Some((a, e));
            }
        }
        self.sites.clear();
        match first_err {
            Some(e) => Err(e),
            None => Ok(left_alone),
        }
    }

    /// Whether `addr` lies in an executable mapping (refreshing once on a miss).
    /// The mapping identity of `addr` (see [`Site::origin`]).
    pub fn origin_of(&self, addr: u64) -> (u64, u64) {
        procmaps::find(&self.maps, addr)
            .map_or((0, 0), |m| (m.inode, m.start.wrapping_sub(m.offset)))
    }

    /// Forgets the sites whose mapping is gone or is another one now (a
    /// library closed, another opened at its address), without writing:
    /// their `int3`s went with the old mapping. Returns the probe ids
    /// they held. The maps must be fresh.
    pub fn drop_unmapped(&mut self) -> Vec<BpId> {
        let maps = self.maps.clone();
        let mut gone = Vec::new();
        self.sites.retain(|&addr, s| {
            let now = procmaps::find(&maps, addr)
                .filter(|m| m.exec)
                .map(|m| (m.inode, m.start.wrapping_sub(m.offset)));
            if s.internal || now == Some(s.origin) {
                return true;
            }
            gone.append(&mut s.ids);
            false
        });
        gone
    }

    pub fn is_exec(&mut self, addr: u64) -> bool {
        if procmaps::find(&self.maps, addr).is_some_and(|m| m.exec) {
            return true;
        }
        self.refresh_maps();
        procmaps::find(&self.maps, addr).is_some_and(|m| m.exec)
    }
}
