//! Probe resolution (spec §2.7, §6.2, §6.3, DESIGN "manifest probe points ─
//! resolve"): which mapping of a traced process is a program's module, its
//! load bias, and each probe's run-time address. ELF files are parsed once
//! per run (cached by path); nothing here runs per hit.

use crate::probe::addr::{LinkAddr, RunAddr};
use crate::proc::procmaps::{self, Mapping, ModuleKey};
use hostabi::manifest::{LocationKind, ProbeKind, ProbeSpec};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wprobe_elf::{ElfInfo, Lookup};

/// Why a probe could not be placed in a process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The module is not (yet) mapped in the process.
    #[error("module `{0}` is not mapped in the process")]
    NotMapped(String),
    /// The probe's symbol is not in the module.
    #[error("symbol `{symbol}` not found in {path}")]
    UnknownSymbol {
        /// The symbol.
        symbol: String,
        /// The module file.
        path: String,
    },
    /// Several symbols match case-insensitively.
    #[error("symbol `{symbol}` is ambiguous in {path}: {candidates}")]
    AmbiguousSymbol {
        /// The symbol.
        symbol: String,
        /// The module file.
        path: String,
        /// The candidates.
        candidates: String,
    },
    /// The mapped module is not the file the program was built against.
    #[error(
        "`{symbol}` is at {mapped:#x} in {path}, but the program was built for it at {built:#x}: \
         the process maps another build of the module; rebuild the program against it"
    )]
    ModuleChanged {
        /// The location's symbol.
        symbol: String,
        /// The mapped file.
        path: String,
        /// The link-time value the program carries.
        built: u64,
        /// The value in the mapped file.
        mapped: u64,
    },
    /// The module file cannot be read or parsed.
    #[error("{0}")]
    Module(String),
    /// An IFUNC whose implementation cannot be found in the process.
    #[error(
        "`{symbol}` in {path} is an IFUNC (its code is chosen when the module is loaded) and \
         {why}; probe the implementation by its own name or address"
    )]
    Ifunc {
        /// The symbol.
        symbol: String,
        /// The module file.
        path: String,
        /// Why its implementation is not known.
        why: String,
    },
    /// An IFUNC whose implementation the process has not chosen yet (its
    /// slot is not relocated: the dynamic linker has not run the resolver).
    #[error("`{symbol}` is an IFUNC whose implementation process {pid} has not chosen yet")]
    IfuncPending {
        /// The symbol.
        symbol: String,
        /// The process.
        pid: i32,
    },
    /// A breakpoint outside executable memory, or an offset outside the module (§6.2).
    #[error("invalid offset: 0x{addr:x} is not {what}")]
    InvalidOffset {
        /// Run-time address.
        addr: u64,
        /// "in an executable mapping" / "in a mapping of `m`".
        what: String,
    },
}

/// A resolved module in one process.
#[derive(Clone)]
pub struct Located {
    /// Its ELF file.
    pub elf: Arc<ElfInfo>,
    /// Load bias in the process.
    pub bias: u64,
    /// The mapped path.
    pub path: String,
}

/// ELF files read so far, by path.
#[derive(Default)]
pub struct Resolver {
    elves: HashMap<PathBuf, Arc<ElfInfo>>,
}

impl Resolver {
    /// The parsed ELF file at `path` (cached).
    pub fn elf(&mut self, path: &Path) -> Result<Arc<ElfInfo>, ResolveError> {
        if let Some(e) = self.elves.get(path) {
            return Ok(e.clone());
        }
        let e = ElfInfo::open_shared(path).map_err(ResolveError::Module)?;
        self.elves.insert(path.to_path_buf(), e.clone());
        Ok(e)
    }

    /// Finds module `module` among `maps`: a path, or a bare name (base
    /// name, soname, or short library name such as `libc`); `exe` is the
    /// process's executable path (preferred for bare names).
    pub fn locate(
        &mut self,
        maps: &[Mapping],
        module: &str,
        exe: Option<&str>,
    ) -> Result<Located, ResolveError> {
        let mapped: Option<String> = if module.contains('/') {
            let key = ModuleKey::Path(Path::new(module));
            maps.iter()
                .find(|m| procmaps::maps_module(m, &key))
                .map(|m| m.path.clone())
        } else {
            // Base name, soname or short library name (`libc`), as the
            // user wrote it (see `wprobe_elf::locate`).
            let mut names: Vec<&str> = Vec::new();
            for m in maps.iter().filter(|m| m.is_file()) {
                if names.contains(&m.path.as_str()) {
                    continue;
                }
                let soname = || {
                    self.elf(Path::new(&m.path))
                        .ok()
                        .and_then(|e| e.soname.clone())
                };
                if wprobe_elf::locate::matches_mapped(module, &m.path, soname) {
                    names.push(m.path.as_str());
                }
            }
            match exe {
                Some(e) if names.contains(&e) => Some(e.to_string()),
                _ => names.first().map(|s| s.to_string()),
            }
        };
        let path = mapped.ok_or_else(|| ResolveError::NotMapped(module.to_string()))?;
        let elf = self.elf(Path::new(&path))?;
        let first = elf.first_load.unwrap_or((0, 0));
        let bias = if elf.is_dyn {
            procmaps::load_bias(maps, &ModuleKey::Path(Path::new(&path)), first)
                .ok_or_else(|| ResolveError::NotMapped(module.to_string()))?
        } else {
            0
        };
        Ok(Located { elf, bias, path })
    }
}

/// Link-time value of a probe's location (its symbol resolved in `elf` when
/// the manifest did not carry a build-time value).
pub fn link_value(p: &ProbeSpec, elf: &ElfInfo) -> Result<LinkAddr, ResolveError> {
    if let Some(v) = p.value {
        // The program was built against a file found by name; the process
        // may map another build of the library (another version, another
        // machine): the symbol must still be where the build saw it.
        if let Some(s) = &p.location.symbol
            && let Lookup::Found(sym) = elf.lookup(s)
            && sym.value.wrapping_add(p.location.addend) != v
        {
            return Err(ResolveError::ModuleChanged {
                symbol: s.clone(),
                path: elf.path.display().to_string(),
                built: v,
                mapped: sym.value.wrapping_add(p.location.addend),
            });
        }
        return Ok(LinkAddr(v));
    }
    match &p.location.symbol {
        None => Ok(LinkAddr(p.location.addend)),
        Some(s) => match elf.lookup(s) {
            Lookup::Found(sym) => Ok(LinkAddr(sym.value.wrapping_add(p.location.addend))),
            Lookup::NotFound => Err(ResolveError::UnknownSymbol {
                symbol: s.clone(),
                path: elf.path.display().to_string(),
            }),
            Lookup::Ambiguous(c) => Err(ResolveError::AmbiguousSymbol {
                symbol: s.clone(),
                path: elf.path.display().to_string(),
                candidates: c
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        },
    }
}

/// The probe's symbol when it is an IFUNC (`STT_GNU_IFUNC`: the symbol's
/// code is a resolver that picks an implementation at load time).
pub fn ifunc_symbol<'a>(p: &ProbeSpec, elf: &'a ElfInfo) -> Option<&'a wprobe_elf::Symbol> {
    let s = p.location.symbol.as_deref()?;
    match elf.lookup(s) {
        Lookup::Found(sym) if sym.kind == wprobe_elf::SymKind::Ifunc => Some(sym),
        _ => None,
    }
}

/// Where the implementation an IFUNC resolved to lives in process `pid`:
/// the value the dynamic linker stored in the module's `R_X86_64_IRELATIVE`
/// slot for that resolver (how the module's own calls reach it).
fn ifunc_target(
    sym: &wprobe_elf::Symbol,
    p: &ProbeSpec,
    loc: &Located,
    maps: &[Mapping],
    pid: i32,
) -> Result<RunAddr, ResolveError> {
    let err = |why: String| ResolveError::Ifunc {
        symbol: sym.name.clone(),
        path: loc.elf.path.display().to_string(),
        why,
    };
    if p.location.addend != 0 {
        return Err(err(format!(
            "an offset into it (+{:#x}) means nothing in the implementation",
            p.location.addend
        )));
    }
    let slot = loc.elf.irelative_slot(sym.value).ok_or_else(|| {
        err(if loc.elf.interp.is_none() && loc.elf.soname.is_none() {
            "a static executable chooses the implementation in its own start-up code, \
             which records the choice nowhere wprobe reads"
                .into()
        } else {
            "the module records no choice for it (no IRELATIVE relocation)".into()
        })
    })?;
    let at = LinkAddr(slot).relocate(loc.bias);
    let mut b = [0u8; 8];
    if crate::sys::mem::vm_read(pid, at.0, &mut b) != Ok(8) {
        return Err(err(format!("its slot at {at:#x} cannot be read")));
    }
    let target = u64::from_le_bytes(b);
    // Before the dynamic linker ran the resolver the slot holds what the
    // file holds (a PLT stub's address, relocated or not) or the resolver.
    let file = loc
        .elf
        .bytes_at(slot, 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes);
    if [
        0,
        file,
        file.wrapping_add(loc.bias),
        sym.value.wrapping_add(loc.bias),
    ]
    .contains(&target)
    {
        return Err(ResolveError::IfuncPending {
            symbol: sym.name.clone(),
            pid,
        });
    }
    if !procmaps::find(maps, target).is_some_and(|m| m.exec) {
        return Err(err(format!(
            "its slot at {at:#x} holds {target:#x}, which is not executable code"
        )));
    }
    Ok(RunAddr(target))
}

/// Run-time address of a probe in process `pid`, where its module is
/// `loc` (spec §6.3), checked against the mappings (§6.2). A breakpoint on
/// an IFUNC is placed on the implementation the process selected.
pub fn probe_address(
    p: &ProbeSpec,
    loc: &Located,
    maps: &[Mapping],
    module: &str,
    pid: i32,
) -> Result<RunAddr, ResolveError> {
    if p.kind == ProbeKind::Breakpoint
        && let Some(sym) = ifunc_symbol(p, &loc.elf)
    {
        return ifunc_target(sym, p, loc, maps, pid);
    }
    let value = link_value(p, &loc.elf)?;
    let addr = match (p.location.kind, &p.location.symbol) {
        (LocationKind::Offset, _) | (LocationKind::Address, Some(_)) => value.relocate(loc.bias),
        // `address = NUMBER`: already a run-time address.
        (LocationKind::Address, None) => RunAddr(value.0),
    };
    let run = addr;
    let addr = addr.0;
    let m = procmaps::find(maps, addr);
    // A return probe on the GOT slot of an import: the calls through the
    // slot (`trace --plt` of `-fno-plt` code; the in-process transport
    // points the slot at a stub, the others refuse).
    let got_slot = p.kind == ProbeKind::Breakpoint
        && p.r#return
        && p.location.kind == LocationKind::Offset
        && loc.elf.is_import_slot(value.0);
    if matches!(p.kind, ProbeKind::Breakpoint | ProbeKind::WatchExec)
        && !m.is_some_and(|m| m.exec)
        && !got_slot
    {
        return Err(ResolveError::InvalidOffset {
            addr,
            what: "in an executable mapping".into(),
        });
    }
    if p.location.kind == LocationKind::Offset
        && p.kind == ProbeKind::Breakpoint
        && m.is_none_or(|m| m.path != loc.path)
    {
        return Err(ResolveError::InvalidOffset {
            addr,
            what: format!("in a mapping of `{module}`"),
        });
    }
    Ok(run)
}
