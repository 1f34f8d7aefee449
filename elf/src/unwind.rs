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
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        if let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
            each(&eh, &bases, &fde);
        }
    }
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
        let has = match fde.lsda() {
            Some(gimli::Pointer::Direct(a)) | Some(gimli::Pointer::Indirect(a)) => a != 0,
            None => false,
        };
        let (start, len) = (fde.initial_address(), fde.len());
        if has && len > 0 {
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
        let entry_like = matches!(
            row.cfa(),
            CfaRule::RegisterAndOffset { register, offset: 8 } if register.0 == RSP
        );
        if !entry_like {
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
}
