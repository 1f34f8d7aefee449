//! `-l`: the source file and line of each traced function's entry, from the
//! DWARF line tables of its module (addr2line over gimli), looked up once
//! per function at start. A module without DWARF (or with compressed debug
//! sections, which are not read) gives no line; the output then shows none.

use std::collections::HashMap;
use std::path::PathBuf;

use gimli::{EndianSlice, LittleEndian};
use goblin::elf::Elf;

use super::funcs::Func;

type R<'a> = EndianSlice<'a, LittleEndian>;

/// Fills `line` of every function whose module has DWARF for its entry.
pub fn fill(funcs: &mut [Func]) {
    let mut by_module: HashMap<PathBuf, Vec<usize>> = HashMap::new();
    for (i, f) in funcs.iter().enumerate() {
        by_module.entry(f.module.clone()).or_default().push(i);
    }
    for (module, idx) in by_module {
        let Ok(bytes) = std::fs::read(&module) else {
            continue;
        };
        let Some(ctx) = context(&bytes) else { continue };
        for i in idx {
            if let Ok(Some(loc)) = ctx.find_location(funcs[i].link)
                && let (Some(file), Some(line)) = (loc.file, loc.line)
            {
                funcs[i].line = Some(format!("{file}:{line}"));
            }
        }
    }
}

/// The addr2line context of an ELF file's DWARF (`None` without
/// `.debug_info`, or when it does not parse).
fn context(bytes: &[u8]) -> Option<addr2line::Context<R<'_>>> {
    let elf = Elf::parse(bytes).ok()?;
    let section = |name: &str| -> &[u8] {
        elf.section_headers
            .iter()
            .find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name))
            .filter(|s| s.sh_type != goblin::elf::section_header::SHT_NOBITS)
            .filter(|s| s.sh_flags & u64::from(goblin::elf::section_header::SHF_COMPRESSED) == 0)
            .and_then(|s| {
                let start = usize::try_from(s.sh_offset).ok()?;
                bytes.get(start..start.checked_add(usize::try_from(s.sh_size).ok()?)?)
            })
            .unwrap_or(&[])
    };
    if section(".debug_info").is_empty() {
        return None;
    }
    let load = |id: gimli::SectionId| -> Result<R<'_>, gimli::Error> {
        Ok(EndianSlice::new(section(id.name()), LittleEndian))
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    addr2line::Context::from_dwarf(dwarf).ok()
}
