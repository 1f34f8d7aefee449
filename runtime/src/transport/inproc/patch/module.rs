//! The module files' code (functions, branch targets), read once at its
//! first need, by this thread or by the thread that reads ahead the other
//! files the process maps executable (the return probes of one module ask
//! for the others'), whichever comes first (`code::read_shared`).

use std::path::{Path, PathBuf};

use super::{Patcher, mapping_of};
use crate::proc::procmaps::Mapping;
use crate::transport::Error;
use crate::transport::inproc::code::ModuleCode;

/// Where a run-time address is in the files the process maps: its
/// mapping, that mapping's file (canonical path) and the offset in it.
pub(super) struct ModuleAt<'m> {
    /// The mapping the address is in.
    pub(super) m: &'m Mapping,
    /// Its file's canonical path (the key of [`Patcher::module`]).
    pub(super) path: PathBuf,
    /// The address's offset in that file.
    pub(super) file_off: u64,
}

/// Where `addr` is in `maps`; `None` where nothing is mapped.
pub(super) fn module_at(maps: &[Mapping], addr: u64) -> Option<ModuleAt<'_>> {
    let m = mapping_of(maps, addr)?;
    Some(ModuleAt {
        m,
        path: crate::proc::procmaps::canonical(Path::new(&m.path)),
        file_off: addr - m.start + m.offset,
    })
}

/// The mapping asked for last ([`Patcher::module_of_mapping`]): its
/// range, offset and inode, its file's canonical path and its code.
pub(super) type LastModule = (
    (u64, u64, u64, u64),
    std::sync::Arc<Path>,
    std::sync::Arc<ModuleCode>,
);

impl Patcher {
    /// The code of the module file mapping `m` maps, and the file's
    /// canonical path: the last mapping asked for kept at hand (planning
    /// asks for one module's at each of its windows, one after another:
    /// no path made and hashed for each). A file that cannot be read is
    /// the error of [`Patcher::module`], with its path.
    pub(super) fn module_of_mapping(
        &mut self,
        m: &Mapping,
    ) -> Result<(std::sync::Arc<Path>, std::sync::Arc<ModuleCode>), Error> {
        let id = (m.start, m.end, m.offset, m.inode);
        if let Some((at, path, code)) = &self.last_module
            && *at == id
        {
            return Ok((path.clone(), code.clone()));
        }
        let path = crate::proc::procmaps::canonical(Path::new(&m.path));
        let code = match self.module(&path) {
            Ok(c) => c.clone(),
            Err(e) => {
                return Err(e
                    .clone()
                    .context(format_args!("reading {}", path.display())));
            }
        };
        let path: std::sync::Arc<Path> = path.into();
        self.last_module = Some((id, path.clone(), code.clone()));
        Ok((path, code))
    }

    /// The code of module file `p`, read at its first need (or taken from
    /// the reading another thread did or is doing: only that file's is
    /// waited for, not those read ahead before it).
    pub(super) fn module(&mut self, p: &Path) -> &Result<std::sync::Arc<ModuleCode>, Error> {
        if !self.modules.contains_key(p.as_os_str()) {
            self.modules.insert(
                p.as_os_str().to_os_string(),
                crate::transport::inproc::code::read_shared(p),
            );
        }
        &self.modules[p.as_os_str()]
    }

    /// Starts reading, on a thread of its own, the code of the files the
    /// process maps executable that no one read yet (once per process):
    /// the return probes of one module ask for the others' too (the
    /// functions its functions tail-call, the calls of its PLT entries),
    /// and the process is stopped meanwhile, its CPU free.
    pub(super) fn read_ahead(&mut self, maps: &[Mapping]) {
        if self.reading_ahead {
            return;
        }
        self.reading_ahead = true;
        let mut paths = Self::exec_paths(maps);
        paths.retain(|p| !self.modules.contains_key(p.as_os_str()));
        // Not those another thread reads already (the executable, from the
        // launch on: the libraries are read meanwhile, not after it).
        paths.retain(|p| !crate::transport::inproc::code::reading_started(p));
        // No thread: each read at its first need, as without it.
        let _ = std::thread::Builder::new()
            .name("wprobe-read".into())
            .spawn(move || {
                for p in paths {
                    let _ = crate::transport::inproc::code::read_shared(&p);
                }
            });
    }

    /// Saves in the plan cache what planning learnt of each module file
    /// read (`crate::transport::inproc::plans`).
    pub(in crate::transport::inproc) fn save_plans(&self) {
        for m in self.modules.values().flatten() {
            m.save_plans();
        }
    }

    /// [`Patcher::save_plans`] on a thread of its own, while the target
    /// runs (a whole program's plans: 1.7 MB encoded and written, 40 ms
    /// after a cold start); [`Patcher::wait_for_plans`] waits for it. No
    /// thread when nothing was learnt (a warm run).
    pub(in crate::transport::inproc) fn save_plans_behind(&mut self) {
        let modules: Vec<std::sync::Arc<ModuleCode>> = self
            .modules
            .values()
            .flatten()
            .filter(|m| m.plans_to_save())
            .cloned()
            .collect();
        if modules.is_empty() {
            return;
        }
        self.wait_for_plans();
        let saving = std::thread::Builder::new()
            .name("wprobe-plans".into())
            .spawn({
                let modules = modules.clone();
                move || {
                    for m in modules {
                        m.save_plans();
                    }
                }
            });
        match saving {
            Ok(h) => self.saving = Some(h),
            Err(_) => modules.iter().for_each(|m| m.save_plans()),
        }
    }

    /// Waits for the plans being saved behind ([`Patcher::save_plans_behind`]).
    pub(in crate::transport::inproc) fn wait_for_plans(&mut self) {
        if let Some(h) = self.saving.take() {
            let _ = h.join();
        }
    }

    /// The executable mappings of files, with their canonical paths.
    pub(super) fn exec_files(maps: &[Mapping]) -> Vec<(PathBuf, &Mapping)> {
        maps.iter()
            .filter(|m| m.exec && m.is_file())
            .map(|m| (crate::proc::procmaps::canonical(Path::new(&m.path)), m))
            .collect()
    }

    /// The canonical paths of the files mapped executable, each once, in
    /// address order (the executable first).
    pub(super) fn exec_paths(maps: &[Mapping]) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = Vec::new();
        for (p, _) in Self::exec_files(maps) {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        paths
    }
}

/// The run-time address of file offset `off` of module `p` in its
/// executable mappings (`exec`, [`Patcher::exec_files`]).
pub(super) fn run_time_at(exec: &[(PathBuf, &Mapping)], p: &Path, off: u64) -> Option<u64> {
    exec.iter()
        .filter(|(q, _)| q == p)
        .find(|(_, m)| off >= m.offset && off - m.offset < m.end - m.start)
        .map(|(_, m)| m.start + (off - m.offset))
}
