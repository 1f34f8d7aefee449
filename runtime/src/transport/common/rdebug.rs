//! Library events: where the dynamic linker calls `_dl_debug_state` (the
//! `r_brk` of `struct r_debug`) each time it changes the link map (dlopen,
//! dlclose, and the initial load). A breakpoint there tells the tracer to
//! refresh the mappings and report `LibrariesChanged`. Only reads files and
//! `/proc`; never writes the tracee.

use std::path::Path;

use crate::proc::procmaps::{self, Mapping, ModuleKey};
use wprobe_elf::{ElfInfo, Lookup};

/// The dynamic linker's hooks in one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RDebug {
    /// Run-time address of `_dl_debug_state` (r_brk).
    pub brk: u64,
    /// Run-time address of `_r_debug`, when exported.
    pub r_debug: Option<u64>,
}

/// Offset of `r_state` in `struct r_debug` (int r_version; pad; r_map; r_brk).
pub const R_STATE_OFFSET: u64 = 24;

/// `RT_CONSISTENT`: the link map is stable (after an add or delete).
pub const RT_CONSISTENT: u32 = 0;

fn is_dynamic_linker(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.starts_with("ld-linux")
        || base.starts_with("ld-musl")
        || (base.starts_with("ld-") && base.contains(".so"))
}

/// Finds the dynamic linker among `maps` and its `r_brk`. `None` for static
/// executables or when the linker file cannot be read.
pub fn find(maps: &[Mapping]) -> Option<RDebug> {
    let m = maps
        .iter()
        .find(|m| m.is_file() && m.offset == 0 && is_dynamic_linker(&m.path))?;
    let path = Path::new(&m.path);
    let info = ElfInfo::open(path).ok()?;
    let key = ModuleKey::Inode {
        dev_major: m.dev_major,
        dev_minor: m.dev_minor,
        inode: m.inode,
    };
    let bias = procmaps::load_bias(maps, &key, info.first_load?)?;
    let brk = match info.lookup("_dl_debug_state") {
        Lookup::Found(s) => bias.wrapping_add(s.value),
        _ => return None,
    };
    let r_debug = match info.lookup("_r_debug") {
        Lookup::Found(s) => Some(bias.wrapping_add(s.value)),
        _ => None,
    };
    Some(RDebug { brk, r_debug })
}
