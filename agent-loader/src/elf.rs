//! The agent object as the loader sees it: its loadable segments, the
//! relocations to apply (R_X86_64_RELATIVE only) and its entry points.
//! Anything a tiny loader cannot honour is refused here, with the reason.

use anyhow::{Context, Result, bail, ensure};
use goblin::elf::{Elf, dynamic, header, program_header as ph};
use std::collections::HashMap;

/// One `PT_LOAD` segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Virtual address (relative to the load base).
    pub vaddr: u64,
    /// Size in memory.
    pub memsz: u64,
    /// Bytes from the file (at the start of the segment).
    pub data: Vec<u8>,
    /// `PROT_*` bits.
    pub prot: i32,
}

/// A parsed, checked agent object.
#[derive(Clone, Debug)]
pub struct AgentImage {
    /// Loadable segments, by address.
    pub segments: Vec<Segment>,
    /// `PT_GNU_RELRO` range (relative), made read-only at mapping time.
    pub relro: Option<(u64, u64)>,
    /// `(offset, addend)` of every R_X86_64_RELATIVE relocation.
    pub relative: Vec<(u64, u64)>,
    /// Bytes of address space the object spans (page-rounded).
    pub span: u64,
    /// Defined dynamic symbols (entry points), relative addresses.
    pub symbols: HashMap<String, u64>,
}

const PAGE: u64 = 4096;
const R_X86_64_RELATIVE: u32 = 8;

fn page_up(v: u64) -> u64 {
    v.div_ceil(PAGE) * PAGE
}

impl AgentImage {
    /// Parses and checks an agent object.
    pub fn parse(bytes: &[u8]) -> Result<AgentImage> {
        let elf = Elf::parse(bytes).context("parsing the agent ELF")?;
        ensure!(
            elf.header.e_machine == header::EM_X86_64 && elf.is_64,
            "agent is not an x86-64 ELF"
        );
        ensure!(
            elf.header.e_type == header::ET_DYN,
            "agent is not position-independent (ET_DYN)"
        );
        ensure!(elf.interpreter.is_none(), "agent has an interpreter");
        ensure!(
            elf.libraries.is_empty(),
            "agent needs shared libraries: {:?}",
            elf.libraries
        );
        let mut segments = Vec::new();
        let mut relro = None;
        for p in &elf.program_headers {
            match p.p_type {
                ph::PT_LOAD => {
                    let off = p.p_offset as usize;
                    let n = p.p_filesz as usize;
                    let data = bytes
                        .get(off..off + n)
                        .context("segment outside the file")?
                        .to_vec();
                    let mut prot = 0;
                    if p.is_read() {
                        prot |= libc::PROT_READ;
                    }
                    if p.is_write() {
                        prot |= libc::PROT_WRITE;
                    }
                    if p.is_executable() {
                        prot |= libc::PROT_EXEC;
                    }
                    ensure!(
                        prot & (libc::PROT_WRITE | libc::PROT_EXEC)
                            != libc::PROT_WRITE | libc::PROT_EXEC,
                        "agent has a writable and executable segment"
                    );
                    segments.push(Segment {
                        vaddr: p.p_vaddr,
                        memsz: p.p_memsz,
                        data,
                        prot,
                    });
                }
                ph::PT_TLS => bail!("agent has thread-local storage (PT_TLS)"),
                ph::PT_GNU_RELRO => relro = Some((p.p_vaddr, p.p_vaddr + p.p_memsz)),
                _ => {}
            }
        }
        ensure!(!segments.is_empty(), "agent has no loadable segment");
        segments.sort_by_key(|s| s.vaddr);
        for w in segments.windows(2) {
            ensure!(
                page_up(w[0].vaddr + w[0].memsz) <= w[1].vaddr & !(PAGE - 1),
                "agent segments share a page"
            );
        }
        if let Some(d) = &elf.dynamic {
            for dy in &d.dyns {
                match dy.d_tag {
                    dynamic::DT_INIT | dynamic::DT_INIT_ARRAY | dynamic::DT_PREINIT_ARRAY => {
                        bail!("agent has constructors (a loader would have to run them)")
                    }
                    dynamic::DT_REL | 36 => {
                        bail!("agent has REL/RELR relocations (only RELA is applied)")
                    }
                    _ => {}
                }
            }
        }
        let mut relative = Vec::new();
        for r in elf.dynrelas.iter().chain(elf.pltrelocs.iter()) {
            ensure!(
                r.r_type == R_X86_64_RELATIVE && r.r_sym == 0,
                "agent has a relocation of type {} (only R_X86_64_RELATIVE is applied)",
                r.r_type
            );
            relative.push((r.r_offset, r.r_addend.unwrap_or(0) as u64));
        }
        ensure!(elf.dynrels.is_empty(), "agent has REL relocations");
        let mut symbols = HashMap::new();
        for s in elf.dynsyms.iter() {
            if s.st_shndx == 0 {
                if let Some(n) = elf.dynstrtab.get_at(s.st_name)
                    && !n.is_empty()
                {
                    bail!("agent has an undefined symbol: {n}");
                }
                continue;
            }
            if let Some(n) = elf.dynstrtab.get_at(s.st_name) {
                symbols.insert(n.to_string(), s.st_value);
            }
        }
        let last = segments.last().expect("checked non-empty");
        let span = page_up(last.vaddr + last.memsz);
        let img = AgentImage {
            segments,
            relro,
            relative,
            span,
            symbols,
        };
        for &(off, _) in &img.relative {
            ensure!(
                img.segment_of(off, 8).is_some(),
                "relocation at 0x{off:x} outside the segments"
            );
        }
        Ok(img)
    }

    /// Index of the segment holding `[addr, addr + n)` in memory.
    pub fn segment_of(&self, addr: u64, n: u64) -> Option<usize> {
        self.segments
            .iter()
            .position(|s| addr >= s.vaddr && addr + n <= s.vaddr + s.memsz)
    }

    /// Relative address of a symbol.
    pub fn symbol(&self, name: &str) -> Result<u64> {
        self.symbols
            .get(name)
            .copied()
            .with_context(|| format!("agent does not export {name}"))
    }

    /// Segment contents at load base `base`: relocations applied, each as
    /// (relative vaddr, bytes up to the end of the file part or the last
    /// relocated word, whichever is further).
    pub fn relocated(&self, base: u64) -> Vec<(u64, Vec<u8>)> {
        let mut out: Vec<(u64, Vec<u8>)> = self
            .segments
            .iter()
            .map(|s| (s.vaddr, s.data.clone()))
            .collect();
        for &(off, addend) in &self.relative {
            let i = self.segment_of(off, 8).expect("checked at parse");
            let (va, buf) = &mut out[i];
            let at = (off - *va) as usize;
            if buf.len() < at + 8 {
                buf.resize(at + 8, 0);
            }
            buf[at..at + 8].copy_from_slice(&base.wrapping_add(addend).to_le_bytes());
        }
        out
    }

    /// Size of the memory the object occupies once mapped (sum of the
    /// page-rounded segments).
    pub fn mapped_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| page_up(s.vaddr + s.memsz) - (s.vaddr & !(PAGE - 1)))
            .sum()
    }
}
