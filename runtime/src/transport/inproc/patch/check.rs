//! A window checked against the eligibility rules, the module's file and
//! the stopped process before any site is added: no thread inside it, no
//! overlap with another site's window or a cave, the bytes in memory the
//! file's; where no jump fits, a near jump to a cave (`near`) or a trap.
//! Continuation sites not patched yet give their bytes up to it.

use std::path::Path;

use agent_abi::site_kind;
use agent_loader::nearjump::CAVE_LEN;
use agent_loader::stub::Site;
use agent_loader::window::{self, Refusal};

use super::Patcher;
use super::Shape;
use super::near::{cave_in, near_jumps};
use super::windows::window_of;
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::code::ModuleCode;
use crate::transport::inproc::world::World;
use crate::transport::{Error, Rule};

/// A window checked against the process, not yet given a stub.
pub(super) struct Checked {
    pub(super) site: Site,
    pub(super) orig: Vec<u8>,
    pub(super) inode: u64,
    /// A trap site: its function, and why no jump.
    pub(super) trap: Option<(String, String)>,
    /// A near site: its cave's address and the bytes there, and why no
    /// 5-byte jump.
    pub(super) cave: Option<(u64, Vec<u8>, String)>,
    /// The module of the window and its load bias: its plans keep the
    /// site's stub.
    pub(super) module: Option<(std::sync::Arc<ModuleCode>, u64)>,
}

impl Patcher {
    /// Takes site `i` (not patched) out: never patched now, no window, no
    /// bytes (its stub stays, unused); a trap site's trap is neither
    /// written nor said.
    pub(super) fn retire(&mut self, i: usize) {
        let s = &mut self.sites[i];
        if self.by_probe_addr.get(&s.site.probe) == Some(&i) {
            self.by_probe_addr.remove(&s.site.probe);
        }
        self.by_window.remove(s.site.addr, i);
        if let Some(c) = s.cave.take() {
            self.caves.remove(&c.addr);
        }
        s.patch.clear();
        s.orig.clear();
        s.site.len = 0;
        if s.trap.take().is_some() {
            let at = s.site.addr;
            self.trap_funcs.remove(&at);
            let head = format!("{at:#x} ");
            self.notes.retain(|(_, n)| !n.starts_with(&head));
        }
    }

    /// Checks a window at `addr` (a `ret` when `ret`) against the rules,
    /// the file and the process, without changing anything but this: the
    /// continuation sites not yet patched that the window meets give their
    /// bytes up ([`Patcher::retire`]).
    pub(super) fn check(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        addr: u64,
        opcode: Option<u8>,
        shape: Shape,
    ) -> Result<Checked, Error> {
        let refused = |rule, message| Error::refused(rule, Some(addr), message);
        self.outside_copies(addr)?;
        let m = super::mapping_of(maps, addr)
            .filter(|m| m.exec)
            .ok_or_else(|| {
                refused(
                    Rule::NotExecutable,
                    format!("invalid address: {addr:#x} is not in an executable mapping"),
                )
            })?;
        let file_off = addr - m.start + m.offset;
        if !m.is_file() {
            return Err(Error::refused_at(
                Rule::NotExecutable,
                addr,
                format_args!(
                    "is in an anonymous mapping ({}): only code of module files can be patched",
                    if m.path.is_empty() {
                        "no file"
                    } else {
                        &m.path
                    }
                ),
            ));
        }
        let (path, module) = self.module_of_mapping(m)?;
        let module = &module;
        let link = module.vaddr_of_offset(file_off).ok_or_else(|| {
            Error::refused_at(
                Rule::NotExecutable,
                addr,
                format_args!("is not in a loaded segment of {}", path.display()),
            )
        })?;
        let bias = addr.wrapping_sub(link);
        if let Some(op) = opcode {
            verify_opcode(world, addr, op)?;
        }
        let (func, after) = module
            .function_and_padding(link, bias)
            .ok_or_else(|| refused(Rule::Patch, Refusal::NoFunction.to_string()))?;
        let fend = func.start + func.code.len() as u64;
        // A window an earlier planning of this file chose or refused (the
        // plan cache), else chosen now and kept.
        let planned = window_of(
            module,
            shape,
            false,
            link,
            bias,
            func,
            after,
            &mut self.decoded,
        );
        let planned = planned.and_then(|site| self.clear_of_threads_and_caves(site));
        // Where no 5-byte jump fits, a 2-byte one to a cave in padding.
        let mut cave = None;
        let planned = match planned {
            Ok(site) => Ok(site),
            Err(why) if !near_jumps() => Err(why),
            Err(why) => match self.near_window(world, module, func, after, addr, bias, shape) {
                Ok((site, c)) => {
                    cave = Some((c, why));
                    Ok(site)
                }
                Err(near) => Err(format!("{why}; nor a near jump: {near}")),
            },
        };
        let (site, trap) = match planned {
            Ok(site) => (site, None),
            Err(why) if shape != Shape::Whole => {
                let code = module.bytes_at(link, 16).unwrap_or(&[]);
                let site = window::plan_trap(addr, code, shape == Shape::Ret)
                    .map_err(|r| refused(Rule::Patch, format!("{why}; and no trap either: {r}")))?;
                let name = function_name(module, func.start.wrapping_sub(bias));
                let why = format!("in {name}: no jump can go there ({why})");
                (site, Some((name, why)))
            }
            Err(why) => return Err(refused(Rule::Patch, why)),
        };
        let cave = match cave {
            Some((c, why)) => {
                let bytes = module
                    .bytes_at(c.wrapping_sub(bias), CAVE_LEN)
                    .ok_or_else(|| {
                        refused(Rule::Patch, format!("{c:#x}: cave outside the file's code"))
                            .alike("its entry cave outside the file's code")
                    })?
                    .to_vec();
                let name = function_name(module, func.start.wrapping_sub(bias));
                Some((c, bytes, format!("in {name}: {why}")))
            }
            None => None,
        };
        let orig = file_bytes(world, module, &site, bias, &path)?;
        let module = Some((module.clone(), bias));
        self.take_window(&site, fend)?;
        let orig = if trap.is_some() {
            orig[..1].to_vec()
        } else {
            orig
        };
        if let Some((c, _, _)) = &cave {
            self.caves.insert(*c);
        }
        Ok(Checked {
            site,
            orig,
            inode: m.inode,
            trap,
            cave,
            module,
        })
    }

    /// `site` when no stopped thread stands inside its window (a jump must
    /// not go under one) and its window meets no near jump's cave (a
    /// `ret`'s window completed by padding).
    pub(super) fn clear_of_threads_and_caves(&self, site: Site) -> Result<Site, String> {
        let end = site.addr + site.len as u64;
        if let Some((tid, pc)) = self
            .thread_pcs
            .iter()
            .find(|(_, pc)| *pc > site.addr && *pc < end)
        {
            return Err(format!(
                "thread {tid} is stopped at {pc:#x}, inside the {} bytes the jump replaces",
                site.len
            ));
        }
        if let Some(c) = cave_in(&self.caves, site.addr, end) {
            return Err(format!(
                "the {} bytes the jump replaces at {:#x} meet the cave of a near jump at {c:#x}",
                site.len, site.addr
            ));
        }
        Ok(site)
    }

    /// Takes the window of `site` (in a function ending at `fend`): the
    /// continuation sites not patched yet that it meets give their bytes
    /// up; refused if it meets another site's window or a cave; the padding
    /// it takes after its `ret` or its function is no cave's. Refused
    /// ([`Rule::Patch`]) as the probe at the site's address.
    pub(super) fn take_window(&mut self, site: &Site, fend: u64) -> Result<(), Error> {
        let (lo, hi) = (site.addr, site.addr + site.len as u64);
        // The windows it meets (one scan: most meet none).
        let mut meeting: Vec<(u64, usize)> = self
            .by_window
            .near(lo, hi)
            // A site with no window (a return stub's only) has no bytes.
            .filter(|&(_, i)| {
                let o = &self.sites[i];
                o.site.len > 0 && o.site.addr < hi && lo < o.site.addr + o.site.len as u64
            })
            .collect();
        // In address order: a refusal names the first.
        meeting.sort_unstable();
        let meeting: Vec<usize> = meeting.into_iter().map(|(_, i)| i).collect();
        // Continuation sites not patched yet give their bytes up.
        let give_up = meeting.iter().all(|&i| {
            let o = &self.sites[i];
            o.kind == site_kind::CONT && !o.patched
        });
        if give_up {
            for &i in &meeting {
                self.retire(i);
            }
        } else if let Some(o) = meeting.first().map(|&i| &self.sites[i]) {
            return Err(Error::refused(
                Rule::Patch,
                Some(site.probe),
                format!(
                    "the {} bytes the jump replaces at {lo:#x} overlap those of the probe at \
                     {:#x}",
                    site.len, o.site.probe
                ),
            )
            .alike(
                "the bytes its jump would replace overlap those of another probe's jump (a \
                 function starting inside them)",
            ));
        }
        // Nor the cave of another site.
        if let Some(c) = cave_in(&self.caves, lo, hi) {
            return Err(Error::refused(
                Rule::Patch,
                Some(site.probe),
                format!(
                    "the {} bytes the jump replaces at {lo:#x} overlap the near jump's cave at \
                     {c:#x}",
                    site.len
                ),
            ));
        }
        // The padding a window takes is no cave's: after its function, or
        // inside it after its `ret` (alignment before another part of the
        // function, where the near jump of a later `ret` of the same
        // function, checked before this window is a site, looks for one).
        let pad = site.ret.map_or(fend, |r| r.next_ip().min(fend));
        if hi > pad {
            self.tails.insert(lo.max(pad), hi);
        }
        Ok(())
    }
}

/// The bytes of `site`'s window in the file of `module` (load bias
/// `bias`, at `path`), checked to be those in memory.
pub(super) fn file_bytes(
    world: &World,
    module: &ModuleCode,
    site: &Site,
    bias: u64,
    path: &Path,
) -> Result<Vec<u8>, Error> {
    let wlink = site.addr.wrapping_sub(bias);
    let orig = module
        .bytes_at(wlink, site.len)
        .filter(|b| b.len() == site.len)
        .ok_or_else(|| {
            Error::refused(
                Rule::Patch,
                Some(site.addr),
                format!("{:#x}: window outside the file's code", site.addr),
            )
            .alike("its entry window outside the file's code")
        })?
        .to_vec();
    // The bytes in memory (on the stack: a window is a few bytes).
    let mut stack = [0u8; 64];
    let mut heap = Vec::new();
    let now: &mut [u8] = match stack.get_mut(..site.len) {
        Some(s) => s,
        None => {
            heap.resize(site.len, 0);
            &mut heap
        }
    };
    if world.peek_code(site.addr, now) != site.len || *now != orig[..] {
        // A jump or a trap where the file has neither: most likely a
        // wprobe's, killed before it could put the bytes back.
        let ours = matches!(now.first(), Some(0xe9 | 0xeb | 0xcc | 0xf4)) && now[..] != orig[..];
        return Err(Error::refused(
            Rule::Occupied,
            Some(site.addr),
            format!(
                "the code at {:#x} in memory differs from {} (changed by the process or another \
             tool{})",
                site.addr,
                path.display(),
                if ours {
                    format!(
                        "; a jump or a breakpoint there may be a killed wprobe's: `wprobe repair \
                     --pid {}` puts the file's bytes back",
                        world.pid()
                    )
                } else {
                    String::new()
                }
            ),
        ));
    }
    Ok(orig)
}

/// Checks that the byte at `addr` in the process is `op` (the opcode the
/// probe was built for).
fn verify_opcode(world: &World, addr: u64, op: u8) -> Result<(), Error> {
    let mut b = [0u8];
    if world.peek_code(addr, &mut b) != 1 {
        return Err(Error::Os {
            pid: Some(world.pid()),
            addr: Some(addr),
            errno: None,
            message: format!("cannot read {addr:#x}"),
        });
    }
    if b[0] != op {
        return Err(Error::refused(
            Rule::OpcodeMismatch,
            Some(addr),
            format!(
                "opcode mismatch at {addr:#x}: expected {op:#04x}, found {:#04x}",
                b[0]
            ),
        ));
    }
    Ok(())
}

/// The name of the function starting at link-time `start` in `module`
/// (its address when no symbol names it).
fn function_name(module: &ModuleCode, start: u64) -> String {
    module
        .elf()
        .function_starting_at(start)
        .map_or_else(|| format!("{start:#x}"), |s| s.name.clone())
}
