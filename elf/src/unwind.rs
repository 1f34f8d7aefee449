//! The code ranges of a module's unwind table (`.eh_frame`): one Frame
//! Description Entry per function, compiled or hand-written with CFI,
//! whether or not a symbol names it. A stripped module keeps them (the C++
//! unwinder and `backtrace` need them), so they bound the static functions
//! a stripped program's symbol tables no longer list, and the
//! implementations an IFUNC resolver chooses (glibc's `__strchr_avx2`),
//! which have no dynamic symbol.

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, UnwindContext, UnwindSection,
};

/// DWARF's number of `rsp` on x86-64.
const RSP: u16 = 7;

/// Where `.eh_frame` is: its link-time address and its bytes' range in
/// the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EhFrameSection {
    /// `sh_addr`.
    pub addr: u64,
    /// `sh_offset`.
    pub offset: usize,
    /// `sh_size`.
    pub size: usize,
}

/// `.eh_frame`'s bytes as gimli reads them.
type Slice<'a> = gimli::EndianSlice<'a, LittleEndian>;

/// Calls `each` with every FDE of `section` in `file` that parses, with
/// the table and its bases (to unwind with). An entry the walk cannot
/// step over ends it: the table is a hint for finding functions, never
/// trusted for more than their bounds.
fn each_fde<'a>(
    file: &'a [u8],
    section: EhFrameSection,
    mut each: impl FnMut(&EhFrame<Slice<'a>>, &BaseAddresses, &gimli::FrameDescriptionEntry<Slice<'a>>),
) {
    let Some(data) = file.get(section.offset..section.offset.saturating_add(section.size)) else {
        return;
    };
    let eh = EhFrame::new(data, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(section.addr);
    let mut entries = eh.entries(&bases);
    // Each CIE parsed once (a module's thousands of FDEs share a few).
    let mut cies: std::collections::HashMap<
        gimli::EhFrameOffset<usize>,
        gimli::CommonInformationEntry<Slice<'a>>,
    > = std::collections::HashMap::new();
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial.parse(|s, b, o| {
            if let Some(c) = cies.get(&o) {
                return Ok(c.clone());
            }
            let c = s.cie_from_offset(b, o)?;
            cies.insert(o, c.clone());
            Ok(c)
        });
        if let Ok(fde) = fde {
            each(&eh, &bases, &fde);
        }
    }
}

/// What one walk of a module's unwind table finds ([`scan`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// [`fde_ranges`].
    pub ranges: Vec<(u64, u64)>,
    /// [`fragment_starts`].
    pub fragments: Vec<u64>,
    /// [`lsda_ranges`].
    pub lsda: Vec<(u64, u64)>,
}

/// [`fde_ranges`], [`fragment_starts`] and [`lsda_ranges`] in one walk of
/// the table (python3.11's 7,000 FDEs: three walks were a fifth of
/// `wprobe trace`'s work before planning).
pub fn scan(file: &[u8], section: EhFrameSection) -> Scan {
    let mut ctx = Box::new(UnwindContext::new());
    let mut s = Scan::default();
    // Whether the row the initial instructions of a CIE make (by its
    // offset) is a function entry's: the row at the start of each FDE of
    // it whose own instructions change nothing before the first address
    // advance, as most do (found once for each CIE, not evaluated again
    // for each of thousands of FDEs).
    let mut initial: std::collections::HashMap<usize, bool> = std::collections::HashMap::new();
    each_fde(file, section, |eh, bases, fde| {
        let (start, len) = (fde.initial_address(), fde.len());
        if len == 0 {
            return;
        }
        s.ranges.push((start, start.saturating_add(len)));
        if lsda_of(fde) {
            s.lsda.push((start, start.saturating_add(len)));
        }
        let cie_only = matches!(
            fde.instructions(eh, bases).next(),
            Ok(None | Some(gimli::CallFrameInstruction::AdvanceLoc { .. }))
        );
        let at_entry = match initial.get(&fde.cie().offset()) {
            Some(&e) if cie_only => Some(e),
            _ => match fde.unwind_info_for_address(eh, bases, &mut ctx, start) {
                Ok(row) => {
                    let e = entry_like(row);
                    if cie_only {
                        initial.insert(fde.cie().offset(), e);
                    }
                    Some(e)
                }
                Err(_) => None,
            },
        };
        if at_entry == Some(false) {
            s.fragments.push(start);
        }
    });
    s.ranges.sort_unstable();
    s.ranges.dedup();
    s.fragments.sort_unstable();
    s.fragments.dedup();
    s.lsda.sort_unstable();
    s
}

/// Whether `fde` has a language-specific data area.
fn lsda_of(fde: &gimli::FrameDescriptionEntry<Slice<'_>>) -> bool {
    match fde.lsda() {
        Some(gimli::Pointer::Direct(a)) | Some(gimli::Pointer::Indirect(a)) => a != 0,
        None => false,
    }
}

/// Whether the canonical frame address of `row` is `rsp + 8`, as at a
/// function's entry (nothing on the stack but the return address).
fn entry_like(row: &gimli::UnwindTableRow<usize>) -> bool {
    matches!(
        row.cfa(),
        CfaRule::RegisterAndOffset { register, offset: 8 } if register.0 == RSP
    )
}

/// The `[start, end)` link-time ranges of the FDEs of `section` in `file`,
/// sorted and without empty ones. An entry the walk cannot step over ends
/// it: the table is a hint for finding functions, never trusted for more
/// than their bounds.
pub fn fde_ranges(file: &[u8], section: EhFrameSection) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    each_fde(file, section, |_, _, fde| {
        let (start, len) = (fde.initial_address(), fde.len());
        if len > 0 {
            out.push((start, start.saturating_add(len)));
        }
    });
    out.sort_unstable();
    out.dedup();
    out
}

/// The `[start, end)` link-time ranges of the FDEs of `section` in `file`
/// that have a language-specific data area (an LSDA: the call sites whose
/// exceptions land in the function, C++ `catch` clauses and cleanups),
/// sorted by start.
pub fn lsda_ranges(file: &[u8], section: EhFrameSection) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    each_fde(file, section, |_, _, fde| {
        let (start, len) = (fde.initial_address(), fde.len());
        if lsda_of(fde) && len > 0 {
            out.push((start, start.saturating_add(len)));
        }
    });
    out.sort_unstable();
    out
}

/// The starts of the FDEs of `section` in `file` that begin inside a
/// frame: where, at their first instruction, the canonical frame address
/// is not `rsp + 8` (a function's entry has nothing on the stack but its
/// return address). These are the parts of functions the compiler moved
/// away from them (GCC's `.cold` fragments: `main.cold`, `f [clone
/// .cold]`), entered by a jump from their function's frame, never by a
/// call. Sorted.
pub fn fragment_starts(file: &[u8], section: EhFrameSection) -> Vec<u64> {
    let mut ctx = Box::new(UnwindContext::new());
    let mut out = Vec::new();
    each_fde(file, section, |eh, bases, fde| {
        let start = fde.initial_address();
        if fde.len() == 0 {
            return;
        }
        let Ok(row) = fde.unwind_info_for_address(eh, bases, &mut ctx, start) else {
            return;
        };
        if !entry_like(row) {
            out.push(start);
        }
    });
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether `name` is the symbol of a part of a function the compiler moved
/// away from it: GCC names them `NAME.cold` (`main.cold`, `f.part.0.cold`,
/// `_Z3foov.cold`, shown `foo() [clone .cold]`), with a number when there
/// are several (`NAME.cold.1`). `NAME.part.0`, `NAME.constprop.0` and
/// `NAME.isra.0` are functions of their own.
pub fn is_fragment_name(name: &str) -> bool {
    name.split('.').skip(1).any(|c| c == "cold")
}

#[cfg(test)]
mod tests {
    #[test]
    fn fragment_names() {
        use super::is_fragment_name;
        for n in ["main.cold", "f.cold.1", "f.part.0.cold", "_Z3foov.cold"] {
            assert!(is_fragment_name(n), "{n}");
        }
        for n in [
            "main",
            "f.part.0",
            "f.constprop.0",
            "cold",
            "f.isra.0",
            "coldf",
        ] {
            assert!(!is_fragment_name(n), "{n}");
        }
    }

    /// The FDEs of this test's own executable: sorted, non-empty, and one
    /// of them is the range of this very function's symbol.
    #[test]
    fn ranges_of_the_running_test_cover_its_functions() {
        let path = std::env::current_exe().unwrap();
        let info = crate::ElfInfo::open(&path).unwrap();
        let ranges = info.unwind_ranges();
        assert!(ranges.len() > 100, "{} ranges", ranges.len());
        assert!(ranges.windows(2).all(|w| w[0] <= w[1]));
        assert!(ranges.iter().all(|&(s, e)| s < e));
        let f = info
            .symbols
            .iter()
            .find(|s| {
                s.name
                    .contains("ranges_of_the_running_test_cover_its_functions")
                    && s.size > 0
            })
            .expect("the test's symbol");
        assert!(
            ranges.contains(&(f.value, f.value + f.size)),
            "no FDE for {} at {:#x}+{:#x}",
            f.name,
            f.value,
            f.size
        );
    }

    /// One walk ([`super::scan`]) finds what the three walks of their own
    /// find, in modules with `.cold` fragments and with C++ landing pads
    /// (the C++ runtime), and in this test's executable.
    #[test]
    fn one_walk_is_the_three() {
        let mut paths = vec![std::env::current_exe().unwrap()];
        for p in [
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/bin/python3.11",
        ] {
            paths.push(std::path::PathBuf::from(p));
        }
        let mut checked = 0;
        for path in paths {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let elf = goblin::elf::Elf::parse(&bytes).unwrap();
            let Some(h) = elf
                .section_headers
                .iter()
                .find(|h| elf.shdr_strtab.get_at(h.sh_name) == Some(".eh_frame"))
            else {
                continue;
            };
            let section = super::EhFrameSection {
                addr: h.sh_addr,
                offset: h.sh_offset as usize,
                size: h.sh_size as usize,
            };
            let s = super::scan(&bytes, section);
            assert_eq!(s.ranges, super::fde_ranges(&bytes, section), "{path:?}");
            assert_eq!(
                s.fragments,
                super::fragment_starts(&bytes, section),
                "{path:?}"
            );
            assert_eq!(s.lsda, super::lsda_ranges(&bytes, section), "{path:?}");
            assert!(s.ranges.len() > 100, "{path:?}");
            checked += 1;
        }
        assert!(checked >= 1);
    }
}
