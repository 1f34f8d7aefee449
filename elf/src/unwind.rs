//! The code ranges of a module's unwind table (`.eh_frame`): one Frame
//! Description Entry per function, compiled or hand-written with CFI,
//! whether or not a symbol names it. A stripped module keeps them (the C++
//! unwinder and `backtrace` need them), so they bound the static functions
//! a stripped program's symbol tables no longer list, and the
//! implementations an IFUNC resolver chooses (glibc's `__strchr_avx2`),
//! which have no dynamic symbol.

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};

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

/// The `[start, end)` link-time ranges of the FDEs of `section` in `file`,
/// sorted and without empty ones. An entry that does not parse ends the
/// walk (what was read before it is kept): the table is a hint for
/// finding functions, never trusted for more than their bounds.
pub fn fde_ranges(file: &[u8], section: EhFrameSection) -> Vec<(u64, u64)> {
    let Some(data) = file.get(section.offset..section.offset.saturating_add(section.size)) else {
        return Vec::new();
    };
    let eh = EhFrame::new(data, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(section.addr);
    let mut out = Vec::new();
    let mut entries = eh.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else {
            continue;
        };
        let (start, len) = (fde.initial_address(), fde.len());
        if len > 0 {
            out.push((start, start.saturating_add(len)));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
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
