//! The windows and the return sites a module's plans keep
//! ([`super::Plans::windows`], [`super::Plans::rets`]), by key, in an
//! order: the order the planner asked for them in the run that saved
//! them, which a plan is written and read in. A warm run's planner asks
//! for them in that order again and finds each after the last, in memory
//! it reads in turn, rather than by a look in the table (one cache miss
//! each, for the 20,000 and more windows of a large program).

use std::hash::Hash;

use super::{HashMap, Window, WindowShape};

thread_local! {
    /// Whether this thread plans ahead of the planner (`patch::ahead`).
    static AHEAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one that plans ahead of the planner
/// (`patch::ahead`): its looks ([`Ordered::look`]) and what it keeps
/// ([`Ordered::keep`]) are not the planner's and leave the order as it is.
pub(in crate::transport::inproc) fn plan_ahead_here() {
    AHEAD.set(true);
}

/// A window's key: its shape and link-time address.
pub(in crate::transport::inproc) type WindowKey = (WindowShape, u64);

/// The windows kept ([`super::Plans::windows`]).
pub(in crate::transport::inproc) type KeptWindows = Ordered<WindowKey, Window>;

/// Values by key, in the order the planner asked for them ([`Ordered::ask`]),
/// then in the order kept.
#[derive(Debug)]
pub(in crate::transport::inproc) struct Ordered<K, V> {
    /// Every value, in the order read from the plan or kept since.
    seq: Vec<(K, V)>,
    /// Where each is in `seq`.
    index: HashMap<K, u32>,
    /// The value after the last one the planner asked for, in `seq`.
    next: usize,
    /// The values the planner asked for, in the order it asked (each
    /// once): the order the plan is written in ([`Ordered::iter`]).
    asked: Vec<u32>,
    /// Whether `seq[i]` is in `asked`.
    in_asked: Vec<bool>,
}

impl<K, V> Default for Ordered<K, V> {
    fn default() -> Self {
        Ordered {
            seq: Vec::new(),
            index: HashMap::default(),
            next: 0,
            asked: Vec::new(),
            in_asked: Vec::new(),
        }
    }
}

impl<K: Copy + Eq + Hash, V: Clone> Ordered<K, V> {
    /// The value kept for `key` (a look of any thread's).
    pub(in crate::transport::inproc) fn get(&self, key: &K) -> Option<&V> {
        let i = *self.index.get(key)?;
        self.seq.get(i as usize).map(|(_, v)| v)
    }

    /// The value kept for `key`, asked by the planner: tried first after
    /// the last one it asked for, and noted in the order it asks.
    pub(in crate::transport::inproc) fn ask(&mut self, key: &K) -> Option<V> {
        let i = match self.seq.get(self.next) {
            Some((k, _)) if k == key => self.next,
            _ => *self.index.get(key)? as usize,
        };
        self.next = i + 1;
        if !self.in_asked[i] {
            self.in_asked[i] = true;
            self.asked.push(i as u32);
        }
        Some(self.seq[i].1.clone())
    }

    /// The value kept for `key`: [`Ordered::ask`] on the planner's thread,
    /// a look that leaves the order as it is on the thread planning ahead
    /// ([`plan_ahead_here`]).
    pub(in crate::transport::inproc) fn look(&mut self, key: &K) -> Option<V> {
        if AHEAD.get() {
            self.get(key).cloned()
        } else {
            self.ask(key)
        }
    }

    /// Keeps `value` for `key`, found now: on the planner's thread, in the
    /// order it asks too, as one found kept.
    pub(in crate::transport::inproc) fn keep(&mut self, key: K, value: V) {
        self.insert(key, value);
        if !AHEAD.get() {
            self.ask(&key);
        }
    }

    /// Keeps `value` for `key` (in place of one kept for it); the one it
    /// replaces.
    pub(in crate::transport::inproc) fn insert(&mut self, key: K, value: V) -> Option<V> {
        if let Some(&i) = self.index.get(&key) {
            return Some(std::mem::replace(&mut self.seq[i as usize].1, value));
        }
        let i = u32::try_from(self.seq.len()).ok()?;
        self.seq.push((key, value));
        self.in_asked.push(false);
        self.index.insert(key, i);
        None
    }

    /// How many values are kept.
    pub(in crate::transport::inproc) fn len(&self) -> usize {
        self.seq.len()
    }

    /// Whether none is.
    pub(in crate::transport::inproc) fn is_empty(&self) -> bool {
        self.seq.is_empty()
    }

    /// Room for `n` values.
    pub(in crate::transport::inproc) fn reserve(&mut self, n: usize) {
        self.seq.reserve(n);
        self.in_asked.reserve(n);
        self.index.reserve(n);
    }

    /// Every value kept: those the planner asked for, in the order it
    /// asked, then the others in the order they were kept.
    pub(in crate::transport::inproc) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let rest = (0..self.seq.len()).filter(|&i| !self.in_asked[i]);
        self.asked
            .iter()
            .map(|&i| i as usize)
            .chain(rest)
            .map(|i| (&self.seq[i].0, &self.seq[i].1))
    }
}

/// Equal when the same values are kept for the same keys (in any order).
impl<K: Copy + Eq + Hash, V: Clone + PartialEq> PartialEq for Ordered<K, V> {
    fn eq(&self, other: &Ordered<K, V>) -> bool {
        self.len() == other.len() && self.seq.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

/// The tests' `plans.windows[&key]`.
#[cfg(test)]
impl<K: Copy + Eq + Hash, V: Clone> std::ops::Index<&K> for Ordered<K, V> {
    type Output = V;

    fn index(&self, key: &K) -> &V {
        self.get(key).expect("a value kept for the key")
    }
}

impl<K: Copy + Eq + Hash, V: Clone> FromIterator<(K, V)> for Ordered<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Ordered<K, V> {
        let mut w = Ordered::default();
        for (k, v) in iter {
            w.insert(k, v);
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(n: u64) -> Window {
        Window {
            probe: 0x40_1000 + n,
            addr: 0x40_1000 + n,
            len: 5,
            displaced: 1,
            ret: false,
        }
    }

    /// The windows come back in the order the planner asked for them (a
    /// plan is written in it), then the others in the order kept; each
    /// found by any look, and one kept again replaced in place.
    #[test]
    fn windows_in_the_order_asked() {
        let key = |n: u64| (WindowShape::Probe, 0x40_1000 + 0x10 * n);
        let mut w: KeptWindows = (0..6).map(|n| (key(n), win(n))).collect();
        for n in [4, 1, 1, 5, 2] {
            assert_eq!(w.ask(&key(n)), Some(win(n)));
        }
        assert_eq!(w.ask(&key(9)), None);
        let order: Vec<u64> = w.iter().map(|(k, _)| (k.1 - 0x40_1000) / 0x10).collect();
        assert_eq!(order, [4, 1, 5, 2, 0, 3]);
        assert_eq!(w.insert(key(3), win(33)), Some(win(3)));
        assert_eq!(w.get(&key(3)), Some(&win(33)));
        assert_eq!(w.len(), 6);
        let again: KeptWindows = w.iter().map(|(k, v)| (*k, *v)).collect();
        assert!(again == w);
    }
}
