//! ELF symbol tables of module files (executables and shared objects), read
//! with goblin: `.symtab` and `.dynsym`, name → link-time value, size and
//! first instruction byte; `ET_DYN` (PIE or shared object) detection; the
//! first `PT_LOAD` segment for load-bias computation; the interpreter path
//! and `DT_SONAME`. This is what symbol resolution, instruction-boundary
//! checks and `wprobe list` need, for the compilers and the runtime alike
//! (one reader, one matching rule: [`ElfInfo::lookup`]). Only regular files
//! of at most [`MAX_MODULE_BYTES`] are read. Never panics on a malformed
//! file: every failure is an [`ElfError`].

use std::io::Read;
use std::path::{Path, PathBuf};

use goblin::elf::{Elf, header, program_header, sym};

/// Largest module file read (bytes). Real shared objects stay far below
/// (a browser's largest library is about 200 MB); the bound keeps a path
/// such as `/dev/zero` or a huge data file from exhausting memory.
pub const MAX_MODULE_BYTES: u64 = 1 << 30;

/// A failure to read or parse a module file.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a well-formed ELF file.
    #[error("{path}: not a valid ELF file: {msg}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// goblin's message.
        msg: String,
    },
    /// A script (`#!`): the kernel runs its interpreter, whose code is
    /// what runs.
    #[error(
        "{path}: a script run by {interpreter} (`#!{line}`), not an ELF program: name the \
         program to trace, e.g. `{interpreter} {path}`, or the program the script executes"
    )]
    Script {
        /// The file.
        path: PathBuf,
        /// Its `#!` line, without the `#!`.
        line: String,
        /// The program the kernel runs for it: the `#!` line's path, or,
        /// for `/usr/bin/env NAME`, NAME found in `PATH`.
        interpreter: String,
    },
    /// Not a regular file (a device, a FIFO, a directory...).
    #[error("{path}: not a regular file")]
    NotRegular {
        /// The file.
        path: PathBuf,
    },
    /// Larger than [`MAX_MODULE_BYTES`].
    #[error(
        "{path}: {size} bytes, more than the {MAX_MODULE_BYTES} bytes wprobe reads of a module"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The file is ELF but not x86-64 little-endian 64-bit.
    #[error("{path}: not an x86-64 ELF file (machine {machine})")]
    WrongArch {
        /// The file.
        path: PathBuf,
        /// `e_machine`.
        machine: u16,
    },
}

/// Kind of a symbol, from `st_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymKind {
    /// `STT_FUNC`.
    Func,
    /// `STT_GNU_IFUNC`: the symbol is the *resolver*, which the dynamic
    /// linker calls once to choose the implementation (`strlen` in glibc).
    Ifunc,
    /// `STT_OBJECT` and `STT_TLS`.
    Object,
    /// Anything else with a value (`STT_NOTYPE` labels, …).
    Other,
}

/// One defined symbol of a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Name as in the string table (no version suffix).
    pub name: String,
    /// Link-time value (`st_value`).
    pub value: u64,
    /// Size in bytes (`st_size`).
    pub size: u64,
    /// Kind.
    pub kind: SymKind,
    /// Global or weak binding (not local).
    pub global: bool,
    /// Found in `.dynsym` (otherwise `.symtab`).
    pub dynamic: bool,
}

impl Symbol {
    /// Whether the symbol names code (a function or an IFUNC resolver).
    pub fn is_code(&self) -> bool {
        matches!(self.kind, SymKind::Func | SymKind::Ifunc)
    }
}

/// What the tracer needs to know about one module file.
#[derive(Debug)]
pub struct ElfInfo {
    /// The file.
    pub path: PathBuf,
    /// `ET_DYN`: a PIE executable or a shared object (needs a load bias).
    pub is_dyn: bool,
    /// `e_entry`.
    pub entry: u64,
    /// `(p_vaddr, p_offset)` of the first `PT_LOAD` segment.
    pub first_load: Option<(u64, u64)>,
    /// `PT_INTERP`, when present.
    pub interp: Option<String>,
    /// `DT_SONAME`, when present (shared objects).
    pub soname: Option<String>,
    /// `DT_NEEDED`: the libraries it needs, in order.
    pub needed: Vec<String>,
    /// Defined symbols, sorted by name then value; deduplicated across tables.
    pub symbols: Vec<Symbol>,
    /// `R_X86_64_IRELATIVE` relocations: `(GOT slot, resolver)`, both
    /// link-time, sorted by resolver. At load the dynamic linker calls the
    /// resolver (an IFUNC's code) and writes the implementation it returns
    /// into the slot.
    pub irelative: Vec<(u64, u64)>,
    /// Functions the module calls through the dynamic linker (in other
    /// modules, or its own exported ones): `(address, name)` of each PLT
    /// entry (`.plt.sec`, else `.plt`) and of each GOT slot a `JUMP_SLOT`
    /// or `GLOB_DAT` relocation fills with a function symbol, link-time,
    /// sorted by address.
    pub imports: Vec<(u64, String)>,
    /// `PT_LOAD` segments: `(p_vaddr, p_memsz, p_offset, p_filesz, p_flags)`.
    segments: Vec<(u64, u64, u64, u64, u32)>,
    /// `.eh_frame`, when the module has one.
    eh_frame: Option<crate::unwind::EhFrameSection>,
    /// Executable sections that hold no function (`.plt`, `.plt.sec`,
    /// `.plt.got`, `.init`, `.fini`): `[start, end)`, link-time.
    not_functions: Vec<(u64, u64)>,
    /// Its FDEs' ranges, those that start inside a frame and those with an
    /// LSDA, read in one walk of the table at the first need
    /// ([`ElfInfo::unwind_ranges`], [`ElfInfo::fragment_starts`],
    /// [`ElfInfo::has_landing_pads`]).
    unwind: std::sync::OnceLock<crate::unwind::Scan>,
    /// The code symbols with a size, by address (see [`CodeIndex`]).
    code: CodeIndex,
    bytes: crate::filebytes::FileBytes,
}

/// The code symbols with a size, sorted by `(value, global)` (ties in
/// [`ElfInfo::symbols`]' order), with the highest end among each prefix:
/// the function containing an address is found by a binary search and a
/// short walk back, not a scan of every symbol (arming a program of
/// 30,000 functions looked each up by a scan: seconds).
#[derive(Debug, Default)]
struct CodeIndex {
    /// Indices into `symbols`.
    order: Vec<u32>,
    /// `max_end[i]`: the highest `value + size` of `order[..=i]`.
    max_end: Vec<u64>,
}

impl CodeIndex {
    fn new(symbols: &[Symbol]) -> CodeIndex {
        let mut order: Vec<u32> = (0..symbols.len() as u32)
            .filter(|&i| symbols[i as usize].is_code() && symbols[i as usize].size > 0)
            .collect();
        order.sort_by_key(|&i| (symbols[i as usize].value, symbols[i as usize].global));
        let mut top = 0u64;
        let max_end = order
            .iter()
            .map(|&i| {
                let s = &symbols[i as usize];
                top = top.max(s.value.saturating_add(s.size));
                top
            })
            .collect();
        CodeIndex { order, max_end }
    }

    /// Index into `symbols` of the innermost function containing `vaddr`
    /// (latest start; at the same start a global one, then the last).
    fn containing(&self, symbols: &[Symbol], vaddr: u64) -> Option<usize> {
        // Symbols starting at or before `vaddr`, latest (value, global)
        // last; the first of them, walking back, that contains `vaddr` is
        // the innermost. None before `k` reaches it once max_end says so.
        let mut k = self
            .order
            .partition_point(|&i| symbols[i as usize].value <= vaddr);
        while k > 0 && self.max_end[k - 1] > vaddr {
            k -= 1;
            let s = &symbols[self.order[k] as usize];
            if vaddr < s.value.saturating_add(s.size) {
                return Some(self.order[k] as usize);
            }
        }
        None
    }

    /// Index into `symbols` of the function starting at `vaddr` (a global
    /// one, then the last).
    fn starting_at(&self, symbols: &[Symbol], vaddr: u64) -> Option<usize> {
        let k = self
            .order
            .partition_point(|&i| symbols[i as usize].value <= vaddr);
        let i = *self.order[..k].last()? as usize;
        (symbols[i].value == vaddr).then_some(i)
    }
}

/// The result of looking a name up.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// Exactly one symbol (exact match, or the unique case-insensitive one).
    Found(&'a Symbol),
    /// No such symbol.
    NotFound,
    /// Several case-insensitive matches and no exact one.
    Ambiguous(Vec<&'a Symbol>),
}

/// One parsing of a module file, shared by whoever asks ([`ElfInfo::open_shared`]).
type Parsing = std::sync::Arc<std::sync::OnceLock<Result<std::sync::Arc<ElfInfo>, String>>>;

/// The module files parsed by [`ElfInfo::open_shared`], by path and version
/// (device, inode, size, modification time).
type Parsed = std::collections::HashMap<(PathBuf, u64, u64, u64, i64), Parsing>;

/// At most this many parsings are kept by [`ElfInfo::open_shared`]; past it,
/// those no one holds any more are forgotten.
const SHARED_KEPT: usize = 64;

impl ElfInfo {
    /// [`ElfInfo::open`], once per version of the file in this process:
    /// the probes' resolution, the function list of `wprobe trace` and the
    /// in-process transport's planning (on threads of their own, a reading
    /// ahead among them) share one parsing of each module file (python3.11:
    /// its symbols and unwind table read once rather than three times). A
    /// thread asking for a file another is parsing waits for it. The error
    /// is [`ElfError`]'s text; a file whose metadata cannot be read is
    /// opened afresh.
    pub fn open_shared(path: &Path) -> Result<std::sync::Arc<ElfInfo>, String> {
        use std::os::unix::fs::MetadataExt;
        static SHARED: std::sync::OnceLock<std::sync::Mutex<Parsed>> = std::sync::OnceLock::new();
        let fresh = || {
            ElfInfo::open(path)
                .map(std::sync::Arc::new)
                .map_err(|e| e.to_string())
        };
        let Ok(meta) = std::fs::metadata(path) else {
            return fresh();
        };
        let key = (
            path.to_path_buf(),
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
        );
        let parsing = {
            let mut shared = SHARED
                .get_or_init(Default::default)
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if shared.len() >= SHARED_KEPT && !shared.contains_key(&key) {
                // Those only this table holds (done, and dropped by all).
                shared.retain(|_, p| {
                    std::sync::Arc::strong_count(p) > 1
                        || p.get().is_some_and(|r| {
                            r.as_ref()
                                .is_ok_and(|e| std::sync::Arc::strong_count(e) > 1)
                        })
                });
            }
            shared.entry(key).or_default().clone()
        };
        parsing.get_or_init(fresh).clone()
    }

    /// Maps (or reads) and parses a module file: a regular file of at most
    /// [`MAX_MODULE_BYTES`] (checked on the open file, and the read is
    /// bounded too, in case it grows meanwhile).
    pub fn open(path: &Path) -> Result<ElfInfo, ElfError> {
        let io = |source| ElfError::Io {
            path: path.to_path_buf(),
            source,
        };
        let f = std::fs::File::open(path).map_err(io)?;
        let meta = f.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(ElfError::NotRegular {
                path: path.to_path_buf(),
            });
        }
        if meta.len() > MAX_MODULE_BYTES {
            return Err(ElfError::TooLarge {
                path: path.to_path_buf(),
                size: meta.len(),
            });
        }
        if let Some(mapped) = crate::filebytes::FileBytes::map(&f, meta.len()) {
            return Self::parse(path, mapped);
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        f.take(MAX_MODULE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.len() as u64 > MAX_MODULE_BYTES {
            return Err(ElfError::TooLarge {
                path: path.to_path_buf(),
                size: bytes.len() as u64,
            });
        }
        Self::from_bytes(path, bytes)
    }

    /// Parses a module from its bytes; `path` is used in messages only.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<ElfInfo, ElfError> {
        Self::parse(path, crate::filebytes::FileBytes::Read(bytes))
    }

    /// [`ElfInfo::from_bytes`], the bytes mapped or read.
    fn parse(path: &Path, bytes: crate::filebytes::FileBytes) -> Result<ElfInfo, ElfError> {
        let perr = |e: goblin::error::Error| ElfError::Parse {
            path: path.to_path_buf(),
            msg: e.to_string(),
        };
        if let Some(line) = crate::script::shebang(&bytes) {
            return Err(ElfError::Script {
                path: path.to_path_buf(),
                interpreter: crate::script::interpreter(&line),
                line,
            });
        }
        let elf = Elf::parse(&bytes).map_err(perr)?;
        if elf.header.e_machine != header::EM_X86_64 || !elf.is_64 || !elf.little_endian {
            return Err(ElfError::WrongArch {
                path: path.to_path_buf(),
                machine: elf.header.e_machine,
            });
        }
        let segments: Vec<_> = elf
            .program_headers
            .iter()
            .filter(|p| p.p_type == program_header::PT_LOAD)
            .map(|p| (p.p_vaddr, p.p_memsz, p.p_offset, p.p_filesz, p.p_flags))
            .collect();
        let mut symbols = Vec::new();
        let versym = elf.versym.as_ref();
        // Definitions of a version callers no longer link to
        // (`memcpy@GLIBC_2.2.5`, beside the default `memcpy@@GLIBC_2.14`).
        let mut old_versions: Vec<(String, u64)> = Vec::new();
        let mut collect =
            |syms: &goblin::elf::Symtab<'_>, strtab: &goblin::strtab::Strtab<'_>, dynamic: bool| {
                for (k, s) in syms.iter().enumerate() {
                    let hidden = dynamic
                        && versym
                            .and_then(|v| v.get_at(k))
                            .is_some_and(|v| v.is_hidden());
                    if s.st_shndx == 0
                        || s.st_type() == sym::STT_SECTION
                        || s.st_type() == sym::STT_FILE
                    {
                        continue;
                    }
                    let Some(name) = strtab.get_at(s.st_name) else {
                        continue;
                    };
                    if name.is_empty() {
                        continue;
                    }
                    if hidden {
                        old_versions.push((name.to_string(), s.st_value));
                    }
                    let kind = match s.st_type() {
                        sym::STT_FUNC => SymKind::Func,
                        sym::STT_GNU_IFUNC => SymKind::Ifunc,
                        sym::STT_OBJECT | sym::STT_TLS => SymKind::Object,
                        _ => SymKind::Other,
                    };
                    symbols.push(Symbol {
                        name: name.to_string(),
                        value: s.st_value,
                        size: s.st_size,
                        kind,
                        global: s.st_bind() != sym::STB_LOCAL,
                        dynamic,
                    });
                }
            };
        collect(&elf.syms, &elf.strtab, false);
        collect(&elf.dynsyms, &elf.dynstrtab, true);
        // R_X86_64_IRELATIVE.
        const IRELATIVE: u32 = 37;
        let mut irelative: Vec<(u64, u64)> = elf
            .dynrelas
            .iter()
            .chain(elf.pltrelocs.iter())
            .filter(|r| r.r_type == IRELATIVE)
            .filter_map(|r| Some((r.r_offset, u64::try_from(r.r_addend?).ok()?)))
            .collect();
        irelative.sort_by_key(|&(slot, resolver)| (resolver, slot));
        symbols.sort_by(|a, b| (&a.name, a.value, a.dynamic).cmp(&(&b.name, b.value, b.dynamic)));
        symbols.dedup_by(|b, a| a.name == b.name && a.value == b.value);
        // Where a name has a default version too, the name means that one.
        old_versions.sort();
        let has_default = |name: &str, symbols: &[Symbol]| {
            let i = symbols.partition_point(|s| s.name.as_str() < name);
            symbols[i..].iter().take_while(|s| s.name == name).any(|s| {
                old_versions
                    .binary_search(&(s.name.clone(), s.value))
                    .is_err()
            })
        };
        let keep: Vec<bool> = symbols
            .iter()
            .map(|s| {
                !(s.dynamic
                    && old_versions
                        .binary_search(&(s.name.clone(), s.value))
                        .is_ok()
                    && has_default(&s.name, &symbols))
            })
            .collect();
        let mut keep = keep.into_iter();
        symbols.retain(|_| keep.next().unwrap_or(true));
        let imports = imports(&elf);
        let eh_frame = elf
            .section_headers
            .iter()
            .find(|h| {
                h.sh_type == goblin::elf::section_header::SHT_PROGBITS
                    && elf.shdr_strtab.get_at(h.sh_name) == Some(".eh_frame")
            })
            .map(|h| crate::unwind::EhFrameSection {
                addr: h.sh_addr,
                offset: h.sh_offset as usize,
                size: h.sh_size as usize,
            });
        let not_functions = elf
            .section_headers
            .iter()
            .filter(|h| {
                matches!(
                    elf.shdr_strtab.get_at(h.sh_name),
                    Some(".plt" | ".plt.sec" | ".plt.got" | ".init" | ".fini")
                )
            })
            .map(|h| (h.sh_addr, h.sh_addr.saturating_add(h.sh_size)))
            .collect();
        let info = ElfInfo {
            path: path.to_path_buf(),
            is_dyn: elf.header.e_type == header::ET_DYN,
            entry: elf.entry,
            first_load: segments.first().map(|s| (s.0, s.2)),
            interp: elf.interpreter.map(str::to_string),
            soname: elf.soname.map(str::to_string),
            needed: elf.libraries.iter().map(|s| s.to_string()).collect(),
            symbols,
            irelative,
            imports,
            segments,
            eh_frame,
            not_functions,
            unwind: std::sync::OnceLock::new(),
            code: CodeIndex::default(),
            bytes: crate::filebytes::FileBytes::Read(Vec::new()),
        };
        let code = CodeIndex::new(&info.symbols);
        Ok(ElfInfo {
            bytes,
            code,
            ..info
        })
    }

    /// The function of another module that the PLT entry or GOT slot at
    /// link-time address `addr` leads to (see [`ElfInfo::imports`]).
    pub fn import_at(&self, addr: u64) -> Option<&str> {
        let i = self.imports.binary_search_by_key(&addr, |e| e.0).ok()?;
        Some(&self.imports[i].1)
    }

    /// The PLT entries among [`ElfInfo::imports`] (not the GOT slots):
    /// `(link-time address, name)`, each [`PLT_ENTRY_BYTES`] long.
    pub fn plt_entries(&self) -> impl Iterator<Item = (u64, &str)> {
        self.imports
            .iter()
            .filter(|(a, _)| self.not_functions.iter().any(|&(s, e)| s <= *a && *a < e))
            .map(|(a, n)| (*a, n.as_str()))
    }

    /// The GOT slots among [`ElfInfo::imports`] of the functions the
    /// module calls through no PLT entry: code built with `-fno-plt`
    /// calls them as `call *f@GOTPCREL(%rip)` (`jmp` for a tail call), the
    /// slots found by those instructions' bytes (`ff 15`/`ff 25` and a
    /// displacement landing on the slot) in the executable segments, out
    /// of `.plt.got`; a slot only read (a function's address taken) is not
    /// one.
    /// `(link-time address, name)`, one per name, by address.
    pub fn got_only_imports(&self) -> Vec<(u64, &str)> {
        let plt: std::collections::HashSet<&str> = self.plt_entries().map(|(_, n)| n).collect();
        let mut seen = std::collections::HashSet::new();
        let slots: Vec<(u64, &str)> = self
            .imports
            .iter()
            .filter(|(a, n)| {
                !self.is_exec_vaddr(*a) && !plt.contains(n.as_str()) && seen.insert(n.as_str())
            })
            .map(|(a, n)| (*a, n.as_str()))
            .collect();
        if slots.is_empty() {
            return slots;
        }
        let wanted: std::collections::HashSet<u64> = slots.iter().map(|&(a, _)| a).collect();
        let mut called = std::collections::HashSet::new();
        for &(va, _, off, filesz, flags) in &self.segments {
            if flags & program_header::PF_X == 0 {
                continue;
            }
            let (Ok(off), Ok(len)) = (usize::try_from(off), usize::try_from(filesz)) else {
                continue;
            };
            let Some(code) = self.bytes.get(off..off.saturating_add(len)) else {
                continue;
            };
            for (i, w) in code.windows(6).enumerate() {
                let here = va + i as u64;
                // `.plt.got`'s `jmp *slot`: the linker's entry for a
                // function whose address is also taken, called as a PLT
                // entry (`call ENTRY`), not a `-fno-plt` call.
                if w[0] == 0xff
                    && (w[1] == 0x15 || w[1] == 0x25)
                    && !self
                        .not_functions
                        .iter()
                        .any(|&(s, e)| s <= here && here < e)
                {
                    let disp = i32::from_le_bytes([w[2], w[3], w[4], w[5]]);
                    let at = (here + 6).wrapping_add_signed(i64::from(disp));
                    if wanted.contains(&at) {
                        called.insert(at);
                    }
                }
            }
        }
        slots
            .into_iter()
            .filter(|(a, _)| called.contains(a))
            .collect()
    }

    /// Whether link-time address `addr` is the GOT slot of an import (a
    /// `JUMP_SLOT` or `GLOB_DAT` relocation's, see [`ElfInfo::imports`]).
    pub fn is_import_slot(&self, addr: u64) -> bool {
        self.import_at(addr).is_some() && !self.is_exec_vaddr(addr)
    }

    /// Whether link-time address `addr` starts a PLT entry (see
    /// [`ElfInfo::plt_entries`]).
    pub fn is_plt_entry(&self, addr: u64) -> bool {
        self.import_at(addr).is_some()
            && self
                .not_functions
                .iter()
                .any(|&(s, e)| s <= addr && addr < e)
    }

    /// Looks a symbol up: an exact match first, then a unique case-insensitive
    /// one (spec §16 [A 2]). Several symbols with the exact name and different
    /// values (local statics in different files) are `Ambiguous`.
    pub fn lookup(&self, name: &str) -> Lookup<'_> {
        let i = self.symbols.partition_point(|s| s.name.as_str() < name);
        let exact: Vec<&Symbol> = self.symbols[i..]
            .iter()
            .take_while(|s| s.name == name)
            .collect();
        match exact.len() {
            1 => return Lookup::Found(exact[0]),
            0 => {}
            _ => {
                // Prefer the global definition if exactly one is global.
                let globals: Vec<_> = exact.iter().copied().filter(|s| s.global).collect();
                if globals.len() == 1 {
                    return Lookup::Found(globals[0]);
                }
                return Lookup::Ambiguous(exact);
            }
        }
        let ci: Vec<&Symbol> = self
            .symbols
            .iter()
            .filter(|s| s.name.eq_ignore_ascii_case(name))
            .collect();
        match ci.len() {
            0 => Lookup::NotFound,
            1 => Lookup::Found(ci[0]),
            _ => Lookup::Ambiguous(ci),
        }
    }

    /// The symbol whose range `[value, value+size)` contains `vaddr` (or equals it
    /// for size 0), preferring functions. Linear scan: meant for listings and messages.
    pub fn symbol_at(&self, vaddr: u64) -> Option<&Symbol> {
        self.symbols
            .iter()
            .filter(|s| {
                s.value == vaddr || (s.value < vaddr && vaddr < s.value.saturating_add(s.size))
            })
            .min_by_key(|s| (!s.is_code(), vaddr - s.value))
    }

    /// The function (with a size) whose code contains `vaddr`: the innermost
    /// (latest start) when symbols overlap, a global one before a local one
    /// at the same start.
    pub fn function_containing(&self, vaddr: u64) -> Option<&Symbol> {
        Some(&self.symbols[self.code.containing(&self.symbols, vaddr)?])
    }

    /// The code symbol with a size that starts at `vaddr` (a global one
    /// before a local one).
    pub fn function_starting_at(&self, vaddr: u64) -> Option<&Symbol> {
        Some(&self.symbols[self.code.starting_at(&self.symbols, vaddr)?])
    }

    /// The `[start, end)` link-time ranges of the module's unwind table
    /// entries, sorted ([`crate::unwind`]): the bounds of its functions,
    /// named or not. Read once.
    pub fn unwind_ranges(&self) -> &[(u64, u64)] {
        &self.unwind_scan().ranges
    }

    /// The unwind table's facts ([`crate::unwind::scan`]), read once.
    fn unwind_scan(&self) -> &crate::unwind::Scan {
        self.unwind.get_or_init(|| match self.eh_frame {
            Some(s) => crate::unwind::scan(&self.bytes, s),
            None => crate::unwind::Scan::default(),
        })
    }

    /// The link-time starts of the unwind table entries that begin inside
    /// a frame (a function's part moved away from it, such as GCC's `.cold`
    /// fragments; see [`crate::unwind::fragment_starts`]), sorted. Read
    /// once.
    pub fn fragment_starts(&self) -> &[u64] {
        &self.unwind_scan().fragments
    }

    /// Whether an unwind table entry with a language-specific data area
    /// (an LSDA: C++ `catch` clauses and cleanups, whose landing pads the
    /// unwinder resumes at) covers code of the link-time range `[start,
    /// end)`. Read once.
    pub fn has_landing_pads(&self, start: u64, end: u64) -> bool {
        let r = &self.unwind_scan().lsda;
        let k = r.partition_point(|&(_, e)| e <= start);
        r[k..]
            .iter()
            .take_while(|&&(s, _)| s < end)
            .any(|&(s, e)| s < end && start < e)
    }

    /// Whether the code at link-time address `vaddr` is a part of a
    /// function moved away from it (its symbol is `NAME.cold`, or its
    /// unwind table entry starts inside a frame), entered by a jump from
    /// its function: not a function of its own.
    pub fn is_fragment(&self, vaddr: u64, name: Option<&str>) -> bool {
        name.is_some_and(crate::unwind::is_fragment_name)
            || self.fragment_starts().binary_search(&vaddr).is_ok()
    }

    /// The unwind table's range that starts at `vaddr`, when no code
    /// symbol with a size covers `vaddr` and it is not in the PLT or
    /// `.init`/`.fini`: a function the symbol tables do not name (a static
    /// function of a stripped module, an IFUNC's implementation).
    pub fn unnamed_function_at(&self, vaddr: u64) -> Option<(u64, u64)> {
        if self.function_containing(vaddr).is_some() {
            return None;
        }
        if self
            .not_functions
            .iter()
            .any(|&(a, b)| a <= vaddr && vaddr < b)
        {
            return None;
        }
        let r = self.unwind_ranges();
        let i = r.partition_point(|&(s, _)| s < vaddr);
        r.get(i).copied().filter(|&(s, _)| s == vaddr)
    }

    /// The `[start, end)` link-time ranges of the code symbols with a
    /// size, sorted, without duplicates.
    pub fn named_functions(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self
            .symbols
            .iter()
            .filter(|s| s.is_code() && s.size > 0)
            .map(|s| (s.value, s.value.saturating_add(s.size)))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The functions no symbol names: the unwind table's ranges in
    /// executable segments that meet no code symbol with a size, outside
    /// the PLT and `.init`/`.fini` (a stripped program's functions, the
    /// static ones of a program that exports only some, the
    /// implementations of a library's IFUNCs). Sorted.
    pub fn unnamed_functions(&self) -> Vec<(u64, u64)> {
        let named = self.named_functions();
        // `reach[i]`: the furthest end of the symbols up to `i`.
        let reach: Vec<u64> = named
            .iter()
            .scan(0u64, |m, &(_, e)| {
                *m = (*m).max(e);
                Some(*m)
            })
            .collect();
        let meets = |&(s, e): &(u64, u64)| {
            let i = named.partition_point(|&(ns, _)| ns < e);
            i > 0 && reach[i - 1] > s
        };
        self.unwind_ranges()
            .iter()
            .copied()
            .filter(|r| !meets(r))
            .filter(|&(s, e)| !self.not_functions.iter().any(|&(a, b)| s < b && a < e))
            .filter(|&(s, _)| self.is_exec_vaddr(s))
            .collect()
    }

    /// The GOT slot (link-time) the dynamic linker fills with the address
    /// of function `name` of another module (a `JUMP_SLOT` or `GLOB_DAT`
    /// relocation; see [`ElfInfo::imports`]).
    pub fn got_slot(&self, name: &str) -> Option<u64> {
        self.imports
            .iter()
            .find(|(at, n)| n == name && !self.is_exec_vaddr(*at))
            .map(|&(at, _)| at)
    }

    /// File offset of link-time address `vaddr`, if it lies in a file-backed
    /// part of a `PT_LOAD` segment.
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find_map(|&(va, _memsz, off, filesz, _)| {
                (va <= vaddr && vaddr < va.saturating_add(filesz)).then(|| off + (vaddr - va))
            })
    }

    /// The link-time address of file offset `off`, if it lies in the file
    /// image of a `PT_LOAD` segment.
    pub fn vaddr_of_offset(&self, off: u64) -> Option<u64> {
        self.segments
            .iter()
            .find_map(|&(va, _memsz, o, filesz, _)| {
                (o <= off && off < o.saturating_add(filesz)).then(|| va + (off - o))
            })
    }

    /// Whether `vaddr` lies in an executable `PT_LOAD` segment.
    pub fn is_exec_vaddr(&self, vaddr: u64) -> bool {
        self.exec_segments()
            .any(|(va, end)| va <= vaddr && vaddr < end)
    }

    /// The lowest start and the highest end of the executable segments
    /// (link-time): no address outside is one [`ElfInfo::is_exec_vaddr`]
    /// takes, the test to make first of many words of data.
    pub fn exec_span(&self) -> Option<(u64, u64)> {
        let lo = self.exec_segments().map(|(va, _)| va).min()?;
        let hi = self.exec_segments().map(|(_, end)| end).max()?;
        Some((lo, hi))
    }

    /// The executable segments' link-time ranges.
    fn exec_segments(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segments
            .iter()
            .filter(|s| s.4 & program_header::PF_X != 0)
            .map(|&(va, memsz, _, _, _)| (va, va.saturating_add(memsz)))
    }

    /// Up to `n` bytes of the file at link-time address `vaddr` (fewer at the
    /// end of the segment's file image).
    pub fn bytes_at(&self, vaddr: u64, n: usize) -> Option<&[u8]> {
        // One walk of the segments for the offset and the segment's end
        // (the planner asks hundreds of thousands of times).
        let (off, seg_end) = self.segments.iter().find_map(|&(va, _, o, fs, _)| {
            (va <= vaddr && vaddr < va.saturating_add(fs))
                .then(|| (o + (vaddr - va), o.saturating_add(fs)))
        })?;
        let off = usize::try_from(off).ok()?;
        let end = off
            .saturating_add(n)
            .min(usize::try_from(seg_end).ok()?)
            .min(self.bytes.len());
        self.bytes.get(off..end)
    }

    /// The first byte of the instruction at `vaddr` (the `opcode =` of a probe).
    pub fn first_byte(&self, vaddr: u64) -> Option<u8> {
        self.bytes_at(vaddr, 1).and_then(|b| b.first().copied())
    }

    /// The GOT slot (link-time) where the dynamic linker stores the
    /// implementation IFUNC resolver `resolver` selected, if the module has
    /// an `R_X86_64_IRELATIVE` relocation for it (glibc has one for each
    /// IFUNC it calls itself).
    pub fn irelative_slot(&self, resolver: u64) -> Option<u64> {
        let i = self.irelative.partition_point(|&(_, r)| r < resolver);
        self.irelative
            .get(i)
            .filter(|&&(_, r)| r == resolver)
            .map(|&(slot, _)| slot)
    }

    /// The whole file.
    pub fn file_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether the module is a Go program: it has Go's build information
    /// section (`.go.buildinfo`), or the runtime's stack-growth function
    /// (`runtime.morestack`), which runs a function's entry again.
    pub fn is_go(&self) -> bool {
        self.symbols.iter().any(|s| s.name == "runtime.morestack")
            || goblin::elf::Elf::parse(&self.bytes).is_ok_and(|e| {
                e.section_headers
                    .iter()
                    .any(|sh| e.shdr_strtab.get_at(sh.sh_name) == Some(".go.buildinfo"))
            })
    }
}

/// Size of one PLT entry on x86-64 (`.plt` and `.plt.sec`).
pub const PLT_ENTRY_BYTES: u64 = 16;
const PLT_ENTRY: u64 = PLT_ENTRY_BYTES;

/// The PLT entries and GOT slots of `elf` that lead to functions of other
/// modules (or to the module's own exported functions, through its PLT),
/// by link-time address: entry `i` of `.plt.sec` (IBT binaries),
/// else entry `i + 1` of `.plt`, belongs to relocation `i` of `.rela.plt`;
/// a GOT slot to the `JUMP_SLOT` or `GLOB_DAT` relocation that fills it
/// (`call *f@GOTPCREL(%rip)` with `-fno-plt`).
fn imports(elf: &Elf<'_>) -> Vec<(u64, String)> {
    const GLOB_DAT: u32 = 6;
    const JUMP_SLOT: u32 = 7;
    let name = |r: &goblin::elf::Reloc| {
        let s = elf.dynsyms.get(r.r_sym)?;
        // Undefined, or the module's own exported function called through
        // its PLT (interposable: libstdc++'s `operator delete`).
        let is_func = matches!(
            s.st_type(),
            sym::STT_FUNC | sym::STT_NOTYPE | sym::STT_GNU_IFUNC
        );
        is_func
            .then(|| elf.dynstrtab.get_at(s.st_name))
            .flatten()
            .filter(|n| !n.is_empty())
            .map(str::to_string)
    };
    let section = |want: &str| {
        elf.section_headers
            .iter()
            .find(|h| elf.shdr_strtab.get_at(h.sh_name) == Some(want))
            .map(|h| h.sh_addr)
    };
    let plt = match (section(".plt.sec"), section(".plt")) {
        (Some(sec), _) => Some((sec, 0)),
        (None, Some(plt)) => Some((plt, 1)),
        (None, None) => None,
    };
    let mut out = Vec::new();
    for (i, r) in elf.pltrelocs.iter().enumerate() {
        let Some(n) = name(&r) else { continue };
        if let Some((base, first)) = plt {
            out.push((base + PLT_ENTRY * (i as u64 + first), n.clone()));
        }
        if r.r_type == JUMP_SLOT {
            out.push((r.r_offset, n));
        }
    }
    for r in elf.dynrelas.iter().filter(|r| r.r_type == GLOB_DAT) {
        if let Some(n) = name(&r) {
            out.push((r.r_offset, n));
        }
    }
    out.sort();
    out.dedup_by_key(|e| e.0);
    out
}

#[cfg(test)]
mod tests {
    /// One parsing per file version: the same for every caller and thread;
    /// a file that cannot be read is an error each time.
    #[test]
    fn open_shared_parses_a_file_once() {
        let exe = std::env::current_exe().unwrap();
        let a = ElfInfo::open_shared(&exe).unwrap();
        let b = std::thread::spawn({
            let exe = exe.clone();
            move || ElfInfo::open_shared(&exe).unwrap()
        })
        .join()
        .unwrap();
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        assert_eq!(a.symbols.len(), ElfInfo::open(&exe).unwrap().symbols.len());
        let missing = Path::new("/nonexistent/wprobe-open-shared");
        assert!(ElfInfo::open_shared(missing).is_err());
        assert!(ElfInfo::open_shared(missing).is_err());
    }

    #[test]
    fn imports_name_the_functions_of_other_modules() {
        // This test binary calls libc through its PLT or its GOT.
        let exe = std::env::current_exe().unwrap();
        let info = ElfInfo::open(&exe).unwrap();
        assert!(info.imports.windows(2).all(|w| w[0].0 < w[1].0));
        let names: Vec<&str> = info.imports.iter().map(|e| e.1.as_str()).collect();
        for f in ["malloc", "free", "write"] {
            assert!(names.contains(&f), "{f}: {names:?}");
        }
        for (addr, name) in &info.imports {
            assert_eq!(info.import_at(*addr), Some(name.as_str()));
            assert_eq!(info.import_at(addr + 1), None);
        }
    }

    use super::*;

    /// glibc defines `memcpy` twice: `memcpy@GLIBC_2.2.5` (a function, the
    /// version programs linked before 2.14 call) and the default
    /// `memcpy@@GLIBC_2.14` (an IFUNC). The name means the default one,
    /// not an ambiguity.
    #[test]
    fn a_name_means_its_default_version() {
        let libc = crate::locate::library("libc.so.6").expect("libc.so.6");
        let info = ElfInfo::open(&libc).unwrap();
        match info.lookup("memcpy") {
            Lookup::Found(s) => assert_eq!(s.kind, SymKind::Ifunc, "{s:?}"),
            other => panic!("memcpy in {}: {other:?}", libc.display()),
        }
    }

    #[test]
    fn own_test_binary_has_symbols() {
        let exe = std::env::current_exe().unwrap();
        let info = ElfInfo::open(&exe).unwrap();
        assert!(info.first_load.is_some());
        assert!(!info.symbols.is_empty());
        assert!(matches!(info.lookup("main"), Lookup::Found(_)));
        assert_eq!(info.lookup("no_such_symbol_xyz"), Lookup::NotFound);
    }

    /// What the index answers, by a scan of every symbol.
    fn containing_by_scan(symbols: &[Symbol], vaddr: u64) -> Option<usize> {
        (0..symbols.len())
            .filter(|&i| {
                let s = &symbols[i];
                s.is_code() && s.size > 0 && s.value <= vaddr && vaddr < s.value + s.size
            })
            .max_by_key(|&i| (symbols[i].value, symbols[i].global))
    }

    fn sym(name: &str, value: u64, size: u64, global: bool) -> Symbol {
        Symbol {
            name: name.into(),
            value,
            size,
            kind: SymKind::Func,
            global,
            dynamic: false,
        }
    }

    #[test]
    fn the_code_index_finds_the_innermost_function() {
        let symbols = vec![
            sym("a", 0x100, 0x100, true),
            sym("b_local", 0x110, 0x10, false),
            sym("c", 0x110, 0x20, true),
            sym("d", 0x300, 0x10, true),
            sym("d_alias", 0x300, 0x10, false),
            sym("empty", 0x400, 0, true),
        ];
        let idx = CodeIndex::new(&symbols);
        let name = |v| {
            idx.containing(&symbols, v)
                .map(|i| symbols[i].name.as_str())
        };
        assert_eq!(name(0xff), None);
        assert_eq!(name(0x100), Some("a"));
        assert_eq!(name(0x115), Some("c"));
        assert_eq!(name(0x125), Some("c"));
        assert_eq!(name(0x130), Some("a"));
        assert_eq!(name(0x1ff), Some("a"));
        assert_eq!(name(0x200), None);
        assert_eq!(name(0x305), Some("d"));
        assert_eq!(name(0x400), None);
        let start = |v| {
            idx.starting_at(&symbols, v)
                .map(|i| symbols[i].name.as_str())
        };
        assert_eq!(start(0x110), Some("c"));
        assert_eq!(start(0x300), Some("d"));
        assert_eq!(start(0x301), None);
        assert_eq!(start(0x400), None);
        for v in 0xf0..0x420 {
            assert_eq!(
                idx.containing(&symbols, v),
                containing_by_scan(&symbols, v),
                "{v:#x}"
            );
        }
        // And on every function of this test binary, at its edges.
        let exe = std::env::current_exe().unwrap();
        let info = ElfInfo::open(&exe).unwrap();
        let n = info.symbols.len();
        for s in info.symbols.iter().filter(|s| s.is_code() && s.size > 0) {
            for v in [
                s.value.saturating_sub(1),
                s.value,
                s.value + s.size / 2,
                s.value + s.size - 1,
                s.value + s.size,
            ] {
                assert_eq!(
                    info.code.containing(&info.symbols, v),
                    containing_by_scan(&info.symbols, v),
                    "{v:#x} ({n} symbols)"
                );
            }
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for len in [0, 4, 16, 64] {
            let mut b = vec![0u8; len];
            if len >= 4 {
                b[..4].copy_from_slice(b"\x7fELF");
            }
            assert!(ElfInfo::from_bytes(Path::new("x"), b).is_err());
        }
    }
}
