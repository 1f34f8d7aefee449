//! The stubs a module's plans keep ([`super::Plans::stubs`]): a few under
//! each window ([`StubSlot`]), each with what it was generated for, their
//! code end to end in one buffer. A large program keeps 20,000 stubs: one
//! allocation for their bytes and none for a window with one stub (the
//! common case), rather than two allocations a stub — fewer to make when
//! the plan is read, fewer pages touched. They are kept in order too, the
//! order a plan is written and read in: a warm run's planner asks for
//! them in that order and finds each after the last, in memory it reads
//! in turn, not by a look in the table.

use super::{HashMap, StubKey, StubSlot};

/// Stubs kept under one window (a window planned twice in a run has
/// both; see [`KeptStubs::keep`]).
const MOST: usize = 4;

/// A stub kept: its key, where its code is in [`KeptStubs::code`], and
/// whether its window still keeps it (not replaced since).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kept {
    key: StubKey,
    at: u32,
    len: u32,
    live: bool,
}

/// The stubs kept under one window, as indices into [`KeptStubs::seq`]:
/// one inline, more in a vector.
#[derive(Clone, Debug)]
enum Under {
    One(u32),
    Many(Vec<u32>),
}

impl Under {
    fn as_slice(&self) -> &[u32] {
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
    /// Every stub kept, in the order it was read from the plan or kept
    /// since (a replaced one stays, no window's any more): a plan written
    /// in this order is read back in the order the planner asks for its
    /// stubs, one after another ([`KeptStubs::get`]'s `next`).
    seq: Vec<Kept>,
    slots: HashMap<StubSlot, Under>,
    /// The stub after the last one asked for, in `seq`: most often the
    /// next asked for (planning goes through a program in the order the
    /// run that kept them did), found there without a look in `slots`,
    /// whose entries are one cache miss each for the tens of thousands of
    /// stubs a large program has.
    next: std::cell::Cell<usize>,
}

impl KeptStubs {
    /// The code kept for `key`.
    pub(in crate::transport::inproc) fn get(&self, key: &StubKey) -> Option<&[u8]> {
        let i = match self.seq.get(self.next.get()) {
            Some(k) if k.key == *key && self.is_live(self.next.get()) => self.next.get(),
            _ => self.find(key)?,
        };
        self.next.set(i + 1);
        Some(self.get_kept(&self.seq[i]))
    }

    /// The index in `seq` of the stub kept for `key`, through `slots`.
    fn find(&self, key: &StubKey) -> Option<usize> {
        self.slots
            .get(&key.link())?
            .as_slice()
            .iter()
            .map(|&i| i as usize)
            .find(|&i| self.seq.get(i).is_some_and(|k| k.key == *key))
    }

    /// Whether `seq[i]` is a stub its window keeps (not one replaced).
    fn is_live(&self, i: usize) -> bool {
        self.seq.get(i).is_some_and(|k| k.live)
    }

    /// Keeps the stub `code` generated for `key`: for a window with no stub
    /// kept, or with stubs kept at the same load bias, the newest few of
    /// them (a window planned twice in a run has both); a stub kept where
    /// the module loads elsewhere at each run, as address space layout
    /// randomisation does, stays the only one: no plan rewritten for stubs
    /// no later run can use. Whether anything changed.
    pub(in crate::transport::inproc) fn keep(&mut self, key: StubKey, code: &[u8]) -> bool {
        if let Some(i) = self.find(&key)
            && self.get_kept(&self.seq[i]) == code
        {
            return false;
        }
        let kept: Vec<u32> = match self.slots.get(&key.link()) {
            Some(u) => u.as_slice().to_vec(),
            None => Vec::new(),
        };
        let same = kept.iter().position(|&i| self.seq[i as usize].key == key);
        if same.is_none()
            && kept
                .iter()
                .any(|&i| self.seq[i as usize].key.bias() != key.bias())
        {
            return false;
        }
        let Some(new) = self.put(key, code) else {
            return false;
        };
        let mut kept = kept;
        let dropped = match same {
            Some(i) => Some(std::mem::replace(&mut kept[i], new)),
            None => {
                let oldest = (kept.len() >= MOST).then(|| kept.remove(0));
                kept.push(new);
                oldest
            }
        };
        if let Some(d) = dropped {
            self.seq[d as usize].live = false;
        }
        let under = match <[u32; 1]>::try_from(kept) {
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

    /// Every stub kept, with its key, in the order they were read and kept
    /// (see `seq`).
    pub(in crate::transport::inproc) fn iter(&self) -> impl Iterator<Item = (&StubKey, &[u8])> {
        (0..self.seq.len())
            .filter(|&i| self.is_live(i))
            .map(|i| (&self.seq[i].key, self.get_kept(&self.seq[i])))
    }

    /// Room for `n` stubs of about `bytes` bytes in all.
    pub(in crate::transport::inproc) fn reserve(&mut self, n: usize, bytes: usize) {
        self.slots.reserve(n);
        self.seq.reserve(n);
        self.code.reserve(bytes);
    }

    /// `code` appended to the buffer and `seq`, as kept for `key`: its
    /// index in `seq`; `None` past 4 GiB or 4 billion stubs.
    fn put(&mut self, key: StubKey, code: &[u8]) -> Option<u32> {
        let at = u32::try_from(self.code.len()).ok()?;
        let len = u32::try_from(code.len()).ok()?;
        at.checked_add(len)?;
        let i = u32::try_from(self.seq.len()).ok()?;
        self.code.extend_from_slice(code);
        self.seq.push(Kept {
            key,
            at,
            len,
            live: true,
        });
        Some(i)
    }

    /// The code of `k`.
    fn get_kept(&self, k: &Kept) -> &[u8] {
        self.code
            .get(k.at as usize..(k.at + k.len) as usize)
            .unwrap_or(&[])
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
                        && a.iter().zip(b).all(|(&x, &y)| {
                            let (x, y) = (&self.seq[x as usize], &other.seq[y as usize]);
                            x.key == y.key && self.get_kept(x) == other.get_kept(y)
                        })
                })
            })
    }
}
