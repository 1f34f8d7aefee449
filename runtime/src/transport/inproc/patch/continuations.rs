//! Continuation sites: a site after each direct `call` of a function (or
//! of its PLT entry or GOT slot, in its own module and in the others that
//! import it), where its calls are seen returning when no return site
//! can see them.

use std::path::{Path, PathBuf};

use agent_abi::site_kind;

use super::Patcher;
use super::Shape;
use crate::proc::procmaps::Mapping;
use crate::transport::inproc::code::ModuleCode;
use crate::transport::inproc::world::World;

/// Most continuation sites planned for one function's calls.
const MAX_CONTINUATIONS: usize = 1024;

/// The link-time addresses in `module` after its direct `call`s of the
/// function at `entry` (named `name`; with `elsewhere`, of its PLT entry
/// or GOT slot too), sorted, at most [`MAX_CONTINUATIONS`]: the
/// continuation sites of its own module that
/// [`Patcher::plan_continuations`] plans (and keeps, with `keep`), and
/// whose windows are planned ahead (`ahead`).
pub(super) fn own_continuations(
    module: &ModuleCode,
    entry: u64,
    name: &str,
    elsewhere: bool,
    keep: bool,
) -> Vec<u64> {
    let elf = module.elf();
    let mut targets = vec![entry];
    // Its PLT entry and its GOT slot (`call *slot(%rip)`).
    if elsewhere {
        targets.extend(
            elf.imports
                .iter()
                .filter(|(_, n)| n == name)
                .map(|&(a, _)| a),
        );
    }
    let mut conts: Vec<u64> = targets
        .iter()
        .flat_map(|&t| module.returns_of_calls_to(t, keep))
        .collect();
    conts.sort_unstable();
    conts.dedup();
    conts.truncate(MAX_CONTINUATIONS);
    conts
}

impl Patcher {
    /// Plans a continuation site ([`site_kind::CONT`]) at the instruction
    /// after each direct `call` of the function entered at `entry` (link-
    /// time; module `path`, load bias `bias`), or of its PLT entry or GOT
    /// slot in its own module or in the other modules that import it, at
    /// most [`MAX_CONTINUATIONS`]: where a jump fits and no other site is
    /// (a trap only with `traps`: every return there would stop). A later
    /// window that needs those bytes takes them back (`check`).
    #[allow(
        clippy::too_many_arguments,
        reason = "the planner's state, the stopped process and the entry's facts"
    )]
    pub(super) fn plan_continuations(
        &mut self,
        world: &mut World,
        maps: &[Mapping],
        path: &Path,
        bias: u64,
        entry: u64,
        name: &str,
        elsewhere: bool,
        traps: bool,
    ) -> usize {
        let Some(Ok(module)) = self.modules.get(path.as_os_str()) else {
            return 0;
        };
        let conts = own_continuations(module, entry, name, elsewhere, true);
        let mut sites: Vec<u64> = conts.iter().map(|&c| c.wrapping_add(bias)).collect();
        // The calls of the other modules that import it: through their PLT
        // entry, or `call *slot(%rip)` through their GOT slot (`-fno-plt`).
        if elsewhere {
            sites.extend(self.continuations_elsewhere(maps, path, name));
        }
        sites.truncate(MAX_CONTINUATIONS);
        let mut covered = 0;
        for at in sites {
            if let Some(&i) = self.by_probe_addr.get(&at) {
                covered += usize::from(self.sites[i].kind == site_kind::CONT);
                continue;
            }
            if let Ok(c) = self.check(world, maps, at, None, Shape::Probe)
                && (traps || c.trap.is_none())
                && self.add(world, c, site_kind::CONT).is_ok()
            {
                covered += 1;
            }
        }
        covered
    }

    /// The run-time addresses after the calls of `name` in the modules the
    /// process maps other than `own` that import it, by their PLT entry or
    /// their GOT slot (a module's imports read once; its code swept only
    /// when it imports a name a traced function needs).
    fn continuations_elsewhere(&mut self, maps: &[Mapping], own: &Path, name: &str) -> Vec<u64> {
        let mut out = Vec::new();
        let mut seen: Vec<PathBuf> = Vec::new();
        for m in maps.iter().filter(|m| m.exec && m.is_file()) {
            if !self.imports.contains_key(&m.path) {
                let p = crate::proc::procmaps::canonical(Path::new(&m.path));
                let names = wprobe_elf::info::ElfInfo::open_shared(&p)
                    .map(|e| e.imports.iter().map(|(_, n)| n.clone()).collect())
                    .unwrap_or_default();
                self.imports.insert(m.path.clone(), (p, names));
            }
            let (p, imports) = &self.imports[&m.path];
            // Canonical paths: the same file is the same bytes.
            if p.as_os_str() == own.as_os_str()
                || seen.iter().any(|s| s.as_os_str() == p.as_os_str())
                || !imports.contains(name)
            {
                continue;
            }
            let p = p.clone();
            seen.push(p.clone());
            let Ok(module) = self.module(&p).as_ref() else {
                continue;
            };
            let Some(bias) = module.bias_of(m) else {
                continue;
            };
            let elf = module.elf();
            let mut conts: Vec<u64> = elf
                .imports
                .iter()
                .filter(|(_, n)| n == name)
                .flat_map(|&(a, _)| module.returns_of_calls_to(a, true))
                .collect();
            conts.sort_unstable();
            conts.dedup();
            out.extend(conts.into_iter().map(|c| c.wrapping_add(bias)));
        }
        out
    }
}
