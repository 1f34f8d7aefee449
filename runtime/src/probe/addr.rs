//! Addresses that mean different things, as different types where they
//! cross module boundaries: a link-time address (what the ELF file and
//! `objdump -d` say) and a run-time address (where it is in one process:
//! the link-time address plus the module's load bias). Mixing them up is
//! a compile error rather than a probe in the wrong place.

use std::fmt;

/// A link-time address: a symbol's value in its ELF file, plus an addend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkAddr(pub u64);

/// A run-time address in one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunAddr(pub u64);

impl LinkAddr {
    /// Where this address is in a process that loaded its module at `bias`.
    pub fn relocate(self, bias: u64) -> RunAddr {
        RunAddr(self.0.wrapping_add(bias))
    }
}

impl RunAddr {
    /// The load bias of a module in which this run-time address is link-time
    /// address `link` (the bias a hit at this address implies).
    pub fn bias_from(self, link: LinkAddr) -> u64 {
        self.0.wrapping_sub(link.0)
    }

    /// The link-time address this is in a module loaded at `bias`.
    pub fn unrelocate(self, bias: u64) -> LinkAddr {
        LinkAddr(self.0.wrapping_sub(bias))
    }
}

impl fmt::LowerHex for LinkAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

impl fmt::LowerHex for RunAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relocation_round_trips_and_wraps() {
        let l = LinkAddr(0x1139);
        let r = l.relocate(0x5555_5555_4000);
        assert_eq!(r, RunAddr(0x5555_5555_5139));
        assert_eq!(r.bias_from(l), 0x5555_5555_4000);
        assert_eq!(r.unrelocate(0x5555_5555_4000), l);
        assert_eq!(LinkAddr(8).relocate(u64::MAX), RunAddr(7));
        assert_eq!(format!("{:#x}", r), "0x555555555139");
    }
}
