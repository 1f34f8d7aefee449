//! A trapped `ret`'s epilogue run in a stub of its own, entered by the far
//! jumps that lead to it.
//!
//! A `ret` whose window no jump can take because an instruction just
//! before it is a branch target (`pop %rbx; ret`, where `pop` is where
//! other paths join) traps. When that branch target is reached by direct
//! `jmp rel32`/`jcc rel32` instructions (GCC's `.cold` parts jumping back
//! to a shared epilogue, a hot function ending in a jump to another's), the
//! epilogue (at most [`MOST_INSNS`] plain instructions from the branch
//! target, and the `ret`) gets a return stub of its own — the epilogue
//! relocated, the dispatch, the `ret` — and each such jump is rewritten to
//! the same jump to that stub (a window of exactly its own bytes, planned
//! and checked as any: no thread inside, no other window, the file's
//! bytes, journaled and restored). The trap stays for the other ways in
//! (the fall-through, short jumps) — unless the jumps sent were every
//! branch to the epilogue (the sweep's count): then nothing lands inside
//! it any more, and the `ret` takes a window after all, planned with that
//! branch target taken as reached by none (`window::Decoded::sending`),
//! the trap site retired. Planned after everything else of a commit, so
//! that no window planned for a probe loses its bytes to one.

use std::collections::HashMap;
use std::path::PathBuf;

use agent_abi::site_kind;
use agent_loader::stub::{JMP_LEN, Site};
use agent_loader::window;
use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction};

use super::check::{Checked, file_bytes};
use super::module::module_at;
use super::{Patcher, Planned, Shape};
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::code::ModuleCode;
use crate::transport::inproc::world::World;

/// The most instructions of an epilogue before its `ret`.
const MOST_INSNS: usize = 4;

/// A trapped `ret`'s epilogue: from the branch target nearest before the
/// `ret` (the `ret` itself at the nearest) to the `ret`.
struct Epilogue {
    /// The trap site of the `ret`.
    site: usize,
    /// The `ret`, at its run-time address.
    ret: Instruction,
    /// The instructions before it, from the branch target.
    insns: Vec<Instruction>,
    /// The branch target, run-time and link-time.
    start: u64,
    link: u64,
    /// The module's load bias.
    bias: u64,
}

impl Patcher {
    /// Gives the trapped `ret`s planned since the last call epilogue stubs
    /// entered by the far jumps to them (see the module's doc). Nothing
    /// is refused: a jump that cannot be rewritten keeps going to the
    /// trap.
    pub(in crate::transport::inproc) fn plan_fragments(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
    ) {
        let from = std::mem::replace(&mut self.fragments_from, self.sites.len());
        let mut found: HashMap<PathBuf, Vec<Epilogue>> = HashMap::new();
        // The function decoded last: a function's trapped `ret`s come one
        // after the other, and need it decoded once.
        let mut last: Option<(u64, Vec<Instruction>)> = None;
        for i in from..self.sites.len() {
            let s = &self.sites[i];
            if s.kind != site_kind::RET || s.trap.is_none() {
                continue;
            }
            let r = s.site.probe;
            if let Some((path, e)) = self.epilogue(maps, i, r, &mut last) {
                found.entry(path).or_default().push(e);
            }
        }
        for (path, eps) in found {
            let Some(Ok(module)) = self.modules.get(path.as_os_str()).cloned() else {
                continue;
            };
            for e in eps {
                let from = module.far_jumps_to(e.link);
                if !from.is_empty() {
                    self.retarget(world, maps, &module, e, &from);
                }
            }
        }
        self.fragments_from = self.sites.len();
    }

    /// The epilogue of the `ret` at `r` (trap site `site`) and its
    /// module's path, when it has one: plain instructions (no branch, no
    /// call) back to the nearest branch target. `last`: the function
    /// decoded last (its run-time start), taken or replaced.
    fn epilogue(
        &mut self,
        maps: &[Mapping],
        site: usize,
        r: u64,
        last: &mut Option<(u64, Vec<Instruction>)>,
    ) -> Option<(PathBuf, Epilogue)> {
        let at = module_at(maps, r)?;
        let path = at.path.clone();
        let module = self.module(&path).as_ref().ok()?.clone();
        let link = module.vaddr_of_offset(at.file_off)?;
        let bias = r.wrapping_sub(link);
        let func = module.function(link, bias)?;
        if last.as_ref().is_none_or(|(start, _)| *start != func.start) {
            *last = Some((func.start, Vec::new()));
        }
        let insns = &mut last.as_mut()?.1;
        decode_to(func, insns, r);
        let insns = &*insns;
        let k = insns.iter().position(|i| i.ip() == r)?;
        if insns[k].flow_control() != FlowControl::Return {
            return None;
        }
        let target = |i: &Instruction| module.targets.0.contains(&i.ip().wrapping_sub(bias));
        let mut j = k;
        while !target(&insns[j]) {
            if j == 0 || k - j >= MOST_INSNS {
                return None;
            }
            j -= 1;
            if insns[j].flow_control() != FlowControl::Next {
                return None;
            }
        }
        let start = insns[j].ip();
        Some((
            path,
            Epilogue {
                site,
                ret: insns[k],
                insns: insns[j..k].to_vec(),
                start,
                link: start.wrapping_sub(bias),
                bias,
            },
        ))
    }

    /// The stub of epilogue `e` and the jumps at `sources` (link-time
    /// addresses of `jmp rel32`/`jcc rel32` candidates to it) sent there,
    /// those that are instructions of their function and whose window is
    /// checked clear.
    fn retarget(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        module: &ModuleCode,
        e: Epilogue,
        sources: &[u64],
    ) {
        let mut jumps = Vec::new();
        for &link in sources {
            let s = link.wrapping_add(e.bias);
            if !far_jump_at(module, link, e.bias, e.start) {
                continue;
            }
            match self.check(world, maps, s, None, Shape::Probe) {
                Ok(c)
                    if c.trap.is_none()
                        && c.cave.is_none()
                        && c.site.addr == s
                        && c.site.len == c.orig.len() =>
                {
                    jumps.push(c)
                }
                Ok(c) => self.release(&c),
                Err(_) => {}
            }
        }
        if jumps.is_empty() {
            return;
        }
        let site = Site {
            probe: e.ret.ip(),
            addr: e.start,
            displaced: e.insns.clone(),
            len: 0,
            ret: Some(e.ret),
        };
        let id = self.sites.len() as u32;
        let Ok((area, at, code)) = self.stub_for(world, &site, id, None) else {
            for c in &jumps {
                self.release(c);
            }
            return;
        };
        self.areas[area].put(at, &code);
        let trapped = &self.sites[e.site];
        let mut stub_site = Planned::bare_return(site, at);
        stub_site.ret_tags = trapped.ret_tags.clone();
        stub_site.ret_of = trapped.ret_of;
        self.push_site(stub_site);
        let mut sent = Vec::with_capacity(jumps.len());
        for c in jumps {
            let Some(patch) = jump_to(&c.orig, c.site.addr, at) else {
                self.release(&c);
                continue;
            };
            sent.push(format!("{:#x}", c.site.addr));
            self.push_site(Planned {
                site: c.site,
                tags: Vec::new(),
                ret_tags: Vec::new(),
                // A jump sent elsewhere is no return site of the
                // statistics.
                ret_of: None,
                kind: site_kind::RET,
                orig: c.orig,
                patch,
                inode: c.inode,
                patched: false,
                trap: None,
                stub: at,
                cave: None,
            });
        }
        // Every branch to the epilogue sent: nothing lands inside it any
        // more, and the `ret` may take a window after all.
        let all = module.targets.2.get(&e.link).copied() == Some(sent.len() as u32);
        let window = all && self.window_after_sending(world, maps, module, &e);
        self.near_notes.push(format!(
            "{:#x}: its epilogue from {:#x} also runs in a return stub at {at:#x}, the jump{} at \
             ({}) sent there ({})",
            e.ret.ip(),
            e.start,
            if sent.len() == 1 { "" } else { "s" },
            sent.join(", "),
            if window {
                "every branch there: the `ret` takes a window after all"
            } else {
                "the trap stays for the other ways in"
            }
        ));
    }

    /// Gives the `ret` of `e` a window instead of its trap now that no
    /// branch lands on its epilogue (every one sent to the epilogue's
    /// stub): planned with that target taken as reached by none, checked
    /// as any (no thread inside, no other window, the file's bytes), the
    /// trap site retired. Whether it did.
    fn window_after_sending(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        module: &ModuleCode,
        e: &Epilogue,
    ) -> bool {
        let r = e.ret.ip();
        let Some(at) = module_at(maps, r) else {
            return false;
        };
        let (path, inode) = (at.path.clone(), at.m.inode);
        let Some(func) = module.function(r.wrapping_sub(e.bias), e.bias) else {
            return false;
        };
        let fend = func.start + func.code.len() as u64;
        let after = module.padding_after(fend.wrapping_sub(e.bias));
        let decoded = window::Decoded::new(func, &module.targets).sending(e.start);
        let Ok(site) = window::plan_ret_in(r, func, &decoded, after, &module.targets, JMP_LEN)
        else {
            return false;
        };
        let Ok(site) = self.clear_of_threads_and_caves(site) else {
            return false;
        };
        let Ok(orig) = file_bytes(world, module, &site, e.bias, &path) else {
            return false;
        };
        // The trap's byte is inside the window: its site is out of the
        // way while the window is taken, and back if it cannot be; once
        // the window's stub is made, retired (its trap neither written nor
        // said).
        self.by_window.remove(r, e.site);
        if self.take_window(&site, fend).is_err() {
            self.by_window
                .insert(r, self.sites[e.site].site.len, e.site);
            return false;
        }
        let trapped = self.sites[e.site].clone();
        let c = Checked {
            site,
            orig,
            inode,
            trap: None,
            cave: None,
            module: None,
        };
        // `add` maps the `ret`'s address to the new site.
        match self.add(world, c, site_kind::RET) {
            Ok(i) => {
                self.sites[i].ret_tags = trapped.ret_tags;
                self.sites[i].ret_of = trapped.ret_of;
                self.retire(e.site);
                self.by_probe_addr.insert(r, i);
                true
            }
            Err(_) => {
                self.by_window
                    .insert(r, self.sites[e.site].site.len, e.site);
                false
            }
        }
    }
}

/// The instructions of `f` decoded from its start at run-time addresses
/// (`insns`, what was decoded so far) extended up to the first at or
/// after `to` (a function with a trapped `ret` can be 100 KB of code: its
/// tail is not decoded for a `ret` near its start).
fn decode_to(f: agent_loader::window::Function<'_>, insns: &mut Vec<Instruction>, to: u64) {
    let from = match insns.last() {
        Some(i) if i.ip() >= to => return,
        Some(i) => i.next_ip(),
        None => f.start,
    };
    let Some(code) = f.code.get(from.wrapping_sub(f.start) as usize..) else {
        return;
    };
    let mut d = Decoder::with_ip(64, code, from, DecoderOptions::NONE);
    let mut i = Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut i);
        insns.push(i);
        if i.ip() >= to {
            break;
        }
    }
}

/// The first instruction of `f` at or after run-time `at`, decoded from
/// the function's start.
fn first_at(f: agent_loader::window::Function<'_>, at: u64) -> Option<Instruction> {
    let mut d = Decoder::with_ip(64, f.code, f.start, DecoderOptions::NONE);
    let mut i = Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut i);
        if i.ip() >= at {
            return Some(i);
        }
    }
    None
}

/// Whether link-time `link` in `module` (load bias `bias`) is an
/// instruction of its function, a `jmp rel32` or a `jcc rel32` with no
/// prefix, to run-time `to`.
pub(super) fn far_jump_at(module: &ModuleCode, link: u64, bias: u64, to: u64) -> bool {
    let at = link.wrapping_add(bias);
    module
        .function(link, bias)
        .and_then(|f| first_at(f, at))
        .is_some_and(|i| {
            i.ip() == at
                && i.near_branch_target() == to
                && match i.code() {
                    Code::Jmp_rel32_64 => i.len() == 5,
                    _ => i.is_jcc_near() && i.len() == 6,
                }
        })
}

/// The bytes of the jump `orig` at `at` (`e9 rel32`, `0f 8x rel32`) sent
/// to `to`: the same opcode, another displacement; `None` out of reach.
pub(super) fn jump_to(orig: &[u8], at: u64, to: u64) -> Option<Vec<u8>> {
    let op = match orig {
        [0xe9, ..] if orig.len() == 5 => 1,
        [0x0f, b, ..] if b & 0xf0 == 0x80 && orig.len() == 6 => 2,
        _ => return None,
    };
    let rel = i32::try_from((to as i64).wrapping_sub((at + orig.len() as u64) as i64)).ok()?;
    let mut b = orig[..op].to_vec();
    b.extend_from_slice(&rel.to_le_bytes());
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::jump_to;

    #[test]
    fn a_jump_keeps_its_opcode_and_gets_a_new_displacement() {
        // jmp 0x1000 → 0x2000 from 0x1000: rel = 0x2000 - 0x1005.
        assert_eq!(
            jump_to(&[0xe9, 0, 0, 0, 0], 0x1000, 0x2000),
            Some(vec![0xe9, 0xfb, 0x0f, 0, 0])
        );
        // je (0f 84) at 0x1000 to 0x800: rel = 0x800 - 0x1006.
        assert_eq!(
            jump_to(&[0x0f, 0x84, 1, 2, 3, 4], 0x1000, 0x800),
            Some(vec![0x0f, 0x84, 0xfa, 0xf7, 0xff, 0xff])
        );
        // Not a far jump, or out of reach.
        assert_eq!(jump_to(&[0xeb, 0x10], 0x1000, 0x800), None);
        assert_eq!(jump_to(&[0xe9, 0, 0, 0, 0], 0, 1 << 40), None);
    }
}
