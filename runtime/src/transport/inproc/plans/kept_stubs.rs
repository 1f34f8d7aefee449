//! The stubs a module's plans keep ([`super::Plans::stubs`]): a few under
//! each window ([`StubSlot`]), each with what it was generated for, their
//! code end to end in one buffer. A large program keeps 20,000 stubs: one
//! allocation for their bytes and none for a window with one stub (the
//! common case), rather than two allocations a stub — fewer to make when
//! the plan is read, fewer pages touched, and a lookup that finds the key
//! in the table's own slot.

use super::{HashMap, StubKey, StubSlot};

/// Stubs kept under one window (a window planned twice in a run has
/// both; see [`KeptStubs::keep`]).
const MOST: usize = 4;

/// A stub kept: its key and where its code is in [`KeptStubs::code`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kept {
    key: StubKey,
    at: u32,
    len: u32,
}

/// The stubs kept under one window: one inline, more in a vector.
#[derive(Clone, Debug)]
enum Under {
    One(Kept),
    Many(Vec<Kept>),
}

impl Under {
    fn as_slice(&self) -> &[Kept] {
        match self {
            Under::One(k) => std::slice::from_ref(k),
            Under::Many(v) => v,
        }
    }
}

/// The stubs kept ([`super::Plans::stubs`]).
#[derive(Clone, Debug, Default)]
pub(in crate::transport::inproc) struct KeptStubs {
    /// Every stub's code, end to end (a stub replaced leaves its old bytes
    /// behind, dropped when the plan is written and read again).
    code: Vec<u8>,
    slots: HashMap<StubSlot, Under>,
}

impl KeptStubs {
    /// The code kept for `key`.
    pub(in crate::transport::inproc) fn get(&self, key: &StubKey) -> Option<&[u8]> {
        let k = self
            .slots
            .get(&key.link())?
            .as_slice()
            .iter()
            .find(|k| k.key == *key)?;
        self.code.get(k.at as usize..(k.at + k.len) as usize)
    }

    /// Keeps the stub `code` generated for `key`: for a window with no stub
    /// kept, or with stubs kept at the same load bias, the newest few of
    /// them (a window planned twice in a run has both); a stub kept where
    /// the module loads elsewhere at each run, as address space layout
    /// randomisation does, stays the only one: no plan rewritten for stubs
    /// no later run can use. Whether anything changed.
    pub(in crate::transport::inproc) fn keep(&mut self, key: StubKey, code: &[u8]) -> bool {
        if self.get(&key) == Some(code) {
            return false;
        }
        let kept = match self.slots.get(&key.link()) {
            Some(u) => u.as_slice().to_vec(),
            None => Vec::new(),
        };
        let same = kept.iter().position(|k| k.key == key);
        if same.is_none() && kept.iter().any(|k| k.key.bias() != key.bias()) {
            return false;
        }
        let Some(new) = self.put(key, code) else {
            return false;
        };
        let mut kept = kept;
        match same {
            Some(i) => kept[i] = new,
            None => {
                if kept.len() >= MOST {
                    kept.remove(0);
                }
                kept.push(new);
            }
        }
        let under = match <[Kept; 1]>::try_from(kept) {
            Ok([one]) => Under::One(one),
            Err(many) => Under::Many(many),
        };
        self.slots.insert(key.link(), under);
        true
    }

    /// Adds a stub read from a plan (after those of its window read
    /// before it).
    pub(in crate::transport::inproc) fn push(&mut self, key: StubKey, code: &[u8]) -> Option<()> {
        let new = self.put(key, code)?;
        match self.slots.get_mut(&key.link()) {
            None => {
                self.slots.insert(key.link(), Under::One(new));
            }
            Some(Under::One(first)) => {
                let first = *first;
                self.slots.insert(key.link(), Under::Many(vec![first, new]));
            }
            Some(Under::Many(v)) => v.push(new),
        }
        Some(())
    }

    /// Every stub kept, with its key.
    pub(in crate::transport::inproc) fn iter(&self) -> impl Iterator<Item = (&StubKey, &[u8])> {
        self.slots.values().flat_map(|u| {
            u.as_slice().iter().map(|k| {
                let code = self
                    .code
                    .get(k.at as usize..(k.at + k.len) as usize)
                    .unwrap_or(&[]);
                (&k.key, code)
            })
        })
    }

    /// Room for `n` stubs of about `bytes` bytes in all.
    pub(in crate::transport::inproc) fn reserve(&mut self, n: usize, bytes: usize) {
        self.slots.reserve(n);
        self.code.reserve(bytes);
    }

    /// `code` appended to the buffer, as kept for `key`; `None` past 4 GiB.
    fn put(&mut self, key: StubKey, code: &[u8]) -> Option<Kept> {
        let at = u32::try_from(self.code.len()).ok()?;
        let len = u32::try_from(code.len()).ok()?;
        at.checked_add(len)?;
        self.code.extend_from_slice(code);
        Some(Kept { key, at, len })
    }
}

/// Equal when every window keeps the same stubs, in the same order, with
/// the same code (wherever the bytes are in the buffer).
impl PartialEq for KeptStubs {
    fn eq(&self, other: &KeptStubs) -> bool {
        self.slots.len() == other.slots.len()
            && self.slots.iter().all(|(slot, u)| {
                other.slots.get(slot).is_some_and(|o| {
                    let (a, b) = (u.as_slice(), o.as_slice());
                    a.len() == b.len()
                        && a.iter()
                            .zip(b)
                            .all(|(x, y)| x.key == y.key && self.get_kept(x) == other.get_kept(y))
                })
            })
    }
}

impl KeptStubs {
    /// The code of `k`.
    fn get_kept(&self, k: &Kept) -> &[u8] {
        self.code
            .get(k.at as usize..(k.at + k.len) as usize)
            .unwrap_or(&[])
    }
}
