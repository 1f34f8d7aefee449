//! The relocated copies of whole functions a module's plans keep
//! ([`super::Plans::copies`]): a function whose `ret` no jump can take
//! runs as a copy in a stub area (`patch::whole`), made by relocating
//! every instruction of it (`agent_loader::whole::generate`, iced-x86's
//! block encoder: python3.11 has about 170 such functions, and their
//! relocation was a twentieth of a warm run's planning). The copy is the
//! same bytes for the same inputs ([`CopyKey`]), which a module loaded at
//! the same address, as a non-PIE executable is, with the same probes
//! gives again.

use super::HashMap;

/// What a copy was made for, in run-time addresses: the same key, the
/// same bytes (the function's code, and so its relocation, is the module
/// file's, which the plan's own key names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::transport::inproc) struct CopyKey {
    /// The function's link-time address.
    pub(in crate::transport::inproc) link: u64,
    /// The module's load bias.
    pub(in crate::transport::inproc) bias: u64,
    /// The entry site's window: its address, length and how many
    /// instructions it displaces.
    pub(in crate::transport::inproc) window: (u64, u32, u32),
    /// The entry site's id.
    pub(in crate::transport::inproc) id: u32,
    /// The stub area's base (its trampoline).
    pub(in crate::transport::inproc) base: u64,
    /// The copy's address.
    pub(in crate::transport::inproc) at: u64,
    /// Each `ret` of the function and its return stub.
    pub(in crate::transport::inproc) ret_stubs: Vec<(u64, u64)>,
}

/// A copy kept: its code, and for each return address inside it, the
/// address of its copy (`agent_loader::whole::Copy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::transport::inproc) struct KeptCopy {
    pub(in crate::transport::inproc) key: CopyKey,
    pub(in crate::transport::inproc) code: Vec<u8>,
    pub(in crate::transport::inproc) returns: Vec<(u64, u64)>,
}

/// The copies kept, one a function (by its link-time address).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::transport::inproc) struct KeptCopies {
    by_link: HashMap<u64, KeptCopy>,
}

impl KeptCopies {
    /// The copy kept for `key`.
    pub(in crate::transport::inproc) fn get(&self, key: &CopyKey) -> Option<&KeptCopy> {
        self.by_link.get(&key.link).filter(|k| k.key == *key)
    }

    /// Keeps `copy`, made for its key: for a function with no copy kept,
    /// or with one kept at the same load bias (replaced); one kept where
    /// the module loads elsewhere at each run, as address space layout
    /// randomisation does, stays: no plan rewritten for copies no later
    /// run can use. Whether anything changed.
    pub(in crate::transport::inproc) fn keep(&mut self, copy: KeptCopy) -> bool {
        match self.by_link.get(&copy.key.link) {
            Some(k) if *k == copy || k.key.bias != copy.key.bias => false,
            _ => {
                self.by_link.insert(copy.key.link, copy);
                true
            }
        }
    }

    /// Adds a copy read from a plan; `None` for a second of one function.
    pub(in crate::transport::inproc) fn push(&mut self, copy: KeptCopy) -> Option<()> {
        match self.by_link.entry(copy.key.link) {
            std::collections::hash_map::Entry::Occupied(_) => None,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(copy);
                Some(())
            }
        }
    }

    /// Every copy kept, by the function's link-time address.
    pub(in crate::transport::inproc) fn sorted(&self) -> Vec<&KeptCopy> {
        let mut all: Vec<&KeptCopy> = self.by_link.values().collect();
        all.sort_unstable_by_key(|k| k.key.link);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(bias: u64, at: u64, code: u8) -> KeptCopy {
        KeptCopy {
            key: CopyKey {
                link: 0x1040,
                bias,
                window: (0x1040 + bias, 5, 1),
                id: 3,
                base: 0x3c_0000,
                at,
                ret_stubs: vec![(0x1060 + bias, 0x3c_0300)],
            },
            code: vec![code; 8],
            returns: vec![(0x1050 + bias, at + 0x10)],
        }
    }

    /// A copy is found only under its whole key; one at the same bias is
    /// replaced, one at another bias kept (no plan rewritten under ASLR).
    #[test]
    fn a_copy_is_kept_under_its_whole_key_and_once_under_aslr() {
        let mut k = KeptCopies::default();
        assert!(k.keep(copy(0, 0x3c_0400, 1)));
        assert!(!k.keep(copy(0, 0x3c_0400, 1)), "the same: nothing changes");
        assert_eq!(k.get(&copy(0, 0x3c_0400, 9).key).unwrap().code, [1; 8]);
        assert!(k.get(&copy(0, 0x3c_0500, 1).key).is_none(), "another place");
        assert!(k.keep(copy(0, 0x3c_0500, 2)), "the same bias: replaced");
        assert!(k.get(&copy(0, 0x3c_0400, 1).key).is_none());
        assert!(
            !k.keep(copy(0x7f00_0000_0000, 0x3c_0500, 3)),
            "another bias"
        );
        assert_eq!(k.get(&copy(0, 0x3c_0500, 2).key).unwrap().code, [2; 8]);
        assert_eq!(k.sorted().len(), 1);
        assert!(
            k.push(copy(0, 0x3c_0600, 4)).is_none(),
            "a second of one function"
        );
    }
}
