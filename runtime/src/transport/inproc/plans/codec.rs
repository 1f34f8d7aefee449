//! The plan files' payload: varints, deltas and a string table
//! ([`encode`], [`decode`]).

use super::*;
use crate::transport::inproc::radix::sort_by_address;

/// Appends numbers as LEB128 varints (signed ones zigzag-encoded) and
/// strings as indices into a table written before them.
#[derive(Default)]
struct W {
    out: Vec<u8>,
    /// The strings, in the order of their first use.
    table: Vec<String>,
    /// Their indices.
    index: HashMap<String, u64>,
}

impl W {
    fn u64(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }
    /// A difference, zigzag-encoded (small either way).
    fn delta(&mut self, from: u64, to: u64) {
        let d = to.wrapping_sub(from) as i64;
        self.u64(((d << 1) ^ (d >> 63)) as u64);
    }
    /// Sorted addresses, each as the difference from the one before.
    fn addrs(&mut self, vs: &[u64]) {
        self.u64(vs.len() as u64);
        let mut last = 0;
        for &v in vs {
            self.delta(last, v);
            last = v;
        }
    }
    /// Address lists by address, sorted by it, each key as the
    /// difference from the one before.
    fn addr_lists(&mut self, m: &HashMap<u64, Vec<u64>>) {
        let mut all: Vec<(&u64, &Vec<u64>)> = m.iter().collect();
        all.sort_unstable_by_key(|(k, _)| **k);
        self.u64(all.len() as u64);
        let mut last = 0;
        for (&k, vs) in all {
            self.delta(last, k);
            self.addrs(vs);
            last = k;
        }
    }
    fn str(&mut self, s: &str) {
        let n = self.table.len() as u64;
        let i = *self.index.entry(s.to_string()).or_insert_with(|| {
            self.table.push(s.to_string());
            n
        });
        self.u64(i);
    }
    fn strs(&mut self, ss: &[String]) {
        self.u64(ss.len() as u64);
        for s in ss {
            self.str(s);
        }
    }
    /// The string table, then the numbers.
    fn finish(self) -> Vec<u8> {
        let mut head = W::default();
        head.u64(self.table.len() as u64);
        for s in &self.table {
            head.u64(s.len() as u64);
            head.out.extend_from_slice(s.as_bytes());
        }
        head.out.extend_from_slice(&self.out);
        head.out
    }
}

/// Reads what [`W`] wrote; `None` past the end or on a malformed number.
struct R<'a> {
    bytes: &'a [u8],
    table: Vec<String>,
}

impl R<'_> {
    fn u64(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for k in 0..10 {
            let (&b, t) = self.bytes.split_first()?;
            self.bytes = t;
            // The tenth byte holds bit 63 only.
            if k == 9 && b > 1 {
                return None;
            }
            v |= u64::from(b & 0x7f) << (7 * k);
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }
    fn delta(&mut self, from: u64) -> Option<u64> {
        let z = self.u64()?;
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        Some(from.wrapping_add(d as u64))
    }
    /// A count of items of at least `each` bytes (bounded by what is left).
    fn count(&mut self, each: usize) -> Option<usize> {
        let n = usize::try_from(self.u64()?).ok()?;
        (n <= self.bytes.len() / each.max(1)).then_some(n)
    }
    fn addrs(&mut self) -> Option<Vec<u64>> {
        let n = self.count(1)?;
        let mut last = 0;
        (0..n)
            .map(|_| {
                last = self.delta(last)?;
                Some(last)
            })
            .collect()
    }
    /// What [`W::addr_lists`] wrote.
    fn addr_lists(&mut self) -> Option<HashMap<u64, Vec<u64>>> {
        let n = self.count(2)?;
        let mut m = HashMap::with_capacity_and_hasher(n, Default::default());
        let mut last = 0;
        for _ in 0..n {
            let k = self.delta(last)?;
            m.insert(k, self.addrs()?);
            last = k;
        }
        Some(m)
    }
    fn str(&mut self) -> Option<String> {
        let i = usize::try_from(self.u64()?).ok()?;
        self.table.get(i).cloned()
    }
    fn strs(&mut self) -> Option<Vec<String>> {
        let n = self.count(1)?;
        (0..n).map(|_| self.str()).collect()
    }
    /// The string table [`W::finish`] wrote first.
    fn table(&mut self) -> Option<()> {
        let n = self.count(1)?;
        let mut table = Vec::with_capacity(n);
        for _ in 0..n {
            let len = self.count(1)?;
            let (h, t) = self.bytes.split_at_checked(len)?;
            self.bytes = t;
            table.push(String::from_utf8(h.to_vec()).ok()?);
        }
        self.table = table;
        Some(())
    }
}

/// Sorted, for a deterministic file.
fn sorted<'a>(s: impl Iterator<Item = &'a u64>) -> Vec<u64> {
    let mut v: Vec<u64> = s.copied().collect();
    sort_by_address(&mut v, |&a| a);
    v
}

/// The payload of `sweep` and `plans`: varints, addresses as differences
/// (from the address before in a sorted list, or from the entry they
/// belong to), names once in a table. The branch targets are kept once:
/// the sweep's counts by target (`.2`), and apart only the targets of
/// `.0` without a count (none, as the sweep makes them).
#[cfg(test)]
pub(super) fn encode(sweep: &Sweep, plans: &Plans) -> Vec<u8> {
    let swept = encode_sweep(&sweep.funcs, &sweep.targets, &sweep.tail_jumps);
    encode_after(&swept, plans)
}

/// The part of [`encode`]'s payload that a sweep makes (its functions,
/// targets and tail calls through a pointer; no string), which
/// [`encode_after`] puts before the plans' part: made once a module is
/// swept, while it is planned, rather than when its plans are saved.
pub(in crate::transport::inproc) fn encode_sweep(
    funcs: &[(u64, u64)],
    targets: &BranchTargets,
    tail_jumps: &rustc_hash::FxHashSet<u64>,
) -> Vec<u8> {
    let mut w = W::default();
    w.u64(funcs.len() as u64);
    let mut last = 0;
    for &(s, e) in funcs {
        w.delta(last, s);
        w.u64(e - s);
        last = s;
    }
    let t = targets;
    let mut counts: Vec<(u64, u32)> = t.2.iter().map(|(&a, &n)| (a, n)).collect();
    sort_by_address(&mut counts, |c| c.0);
    w.u64(counts.len() as u64);
    let mut last = 0;
    for (a, n) in counts {
        w.delta(last, a);
        // `u32::MAX` (a jump table's target) as 0, one byte.
        w.u64(u64::from(n.wrapping_add(1)));
        last = a;
    }
    w.addrs(&sorted(t.0.iter().filter(|a| !t.2.contains_key(a))));
    w.addrs(&sorted(t.1.iter()));
    let mut unknown: Vec<(u64, u64)> = t.3.iter().flatten().map(|(&a, &b)| (a, b)).collect();
    sort_by_address(&mut unknown, |u| u.0);
    w.u64(u64::from(t.3.is_some()));
    w.u64(unknown.len() as u64);
    let mut last = 0;
    for (a, b) in unknown {
        w.delta(last, a);
        w.delta(a, b);
        last = a;
    }
    w.addrs(&sorted(tail_jumps.iter()));
    w.out
}

/// [`encode`]'s payload of the sweep part `swept` ([`encode_sweep`]) and
/// `plans`.
pub(super) fn encode_after(swept: &[u8], plans: &Plans) -> Vec<u8> {
    let mut w = W {
        out: swept.to_vec(),
        ..W::default()
    };
    // In the order the planner asked for them (`KeptWindows::iter`), not
    // sorted: read back in that order, each is found after the one before.
    let windows: Vec<(&(WindowShape, u64), &Window)> = plans.windows.iter().collect();
    w.u64(windows.len() as u64);
    let mut last = 0;
    for (&(shape, at), win) in windows {
        w.u64(shape as u64);
        w.delta(last, at);
        w.delta(at, win.probe);
        w.delta(at, win.addr);
        w.u64(u64::from(win.len));
        w.u64(u64::from(win.displaced) << 1 | u64::from(win.ret));
        last = at;
    }
    // In the order the planner asked for them, as the windows.
    let rets: Vec<(&u64, &ReturnSites)> = plans.rets.iter().map(|(o, r)| (o, &**r)).collect();
    w.u64(rets.len() as u64);
    let mut last = 0;
    for (&off, r) in rets {
        w.delta(last, off);
        w.str(&r.function);
        w.u64(r.rets.len() as u64);
        for &a in &r.rets {
            w.delta(off, a);
        }
        w.strs(&r.followed);
        w.strs(&r.outside);
        w.u64(r.indirect.len() as u64);
        for &a in &r.indirect {
            w.delta(off, a);
        }
        w.u64(u64::from(r.never_returns));
        last = off;
    }
    w.addr_lists(&plans.calls);
    w.addr_lists(&plans.jumps);
    let mut blocks: Vec<(&u64, &usize)> = plans.blocks.iter().collect();
    blocks.sort_unstable();
    w.u64(blocks.len() as u64);
    let mut last = 0;
    for (&end, &n) in blocks {
        w.delta(last, end);
        w.u64(n as u64);
        last = end;
    }
    let mut inner: Vec<(&u64, &Vec<(u64, usize)>)> = plans.inner.iter().collect();
    inner.sort_unstable_by_key(|(s, _)| **s);
    w.u64(inner.len() as u64);
    let mut last = 0;
    for (&start, blocks) in inner {
        w.delta(last, start);
        w.u64(blocks.len() as u64);
        for &(at, n) in blocks {
            w.delta(start, at);
            w.u64(n as u64);
        }
        last = start;
    }
    // In the order they were kept (a cold run's: the order the planner
    // asks for them), not sorted: read back in that order, each is found
    // after the one before (`KeptStubs::get`).
    let stubs: Vec<(&StubKey, &[u8])> = plans.stubs.iter().collect();
    w.u64(stubs.len() as u64);
    let mut last = 0;
    for (k, code) in stubs {
        w.delta(last, k.addr);
        w.delta(k.addr, k.probe);
        w.u64(u64::from(k.len));
        w.u64(u64::from(k.displaced) << 1 | u64::from(k.ret));
        w.u64(u64::from(k.id));
        w.delta(k.addr, k.base);
        w.delta(k.base, k.at);
        w.u64(k.bias);
        w.u64(code.len() as u64);
        w.out.extend_from_slice(code);
        last = k.addr;
    }
    copies_into(&mut w, &plans.copies);
    let mut refusals: Vec<_> = plans.refusals.iter().collect();
    refusals.sort_unstable_by_key(|(k, _)| (k.0 as u8, k.1));
    w.u64(refusals.len() as u64);
    let mut last = 0;
    for (&(shape, at), (bias, why)) in refusals {
        w.u64(shape as u64);
        w.delta(last, at);
        w.u64(*bias);
        w.str(why);
        last = at;
    }
    w.finish()
}

/// [`encode`]'s payload read back; `None` if it is not one.
pub(super) fn decode(payload: &[u8]) -> Option<(Sweep, Plans)> {
    let mut r = R {
        bytes: payload,
        table: Vec::new(),
    };
    r.table()?;
    let sweep = sweep_of(&mut r)?;
    let windows = windows_of(&mut r)?;
    let rets = rets_of(&mut r)?;
    let calls = r.addr_lists()?;
    let jumps = r.addr_lists()?;
    let n = r.count(2)?;
    let mut blocks = HashMap::with_capacity_and_hasher(n, Default::default());
    let mut last = 0;
    for _ in 0..n {
        let end = r.delta(last)?;
        blocks.insert(end, usize::try_from(r.u64()?).ok()?);
        last = end;
    }
    let n = r.count(2)?;
    let mut inner = HashMap::with_capacity_and_hasher(n, Default::default());
    let mut last = 0;
    for _ in 0..n {
        let start = r.delta(last)?;
        let k = r.count(2)?;
        let found = (0..k)
            .map(|_| Some((r.delta(start)?, usize::try_from(r.u64()?).ok()?)))
            .collect::<Option<Vec<_>>>()?;
        inner.insert(start, found);
        last = start;
    }
    let stubs = stubs_of(&mut r)?;
    let copies = copies_of(&mut r)?;
    let n = r.count(3)?;
    let mut refusals = HashMap::with_capacity_and_hasher(n, Default::default());
    let mut last = 0;
    for _ in 0..n {
        let shape = WindowShape::from_u64(r.u64()?)?;
        let at = r.delta(last)?;
        let bias = r.u64()?;
        refusals.insert((shape, at), (bias, r.str()?));
        last = at;
    }
    if !r.bytes.is_empty() {
        return None;
    }
    Some((
        sweep,
        Plans {
            windows,
            refusals,
            rets,
            calls,
            jumps,
            blocks,
            inner,
            stubs,
            copies,
            added: false,
        },
    ))
}

/// The sweep's part of a payload.
fn sweep_of(r: &mut R) -> Option<Sweep> {
    let n = r.count(2)?;
    let mut last = 0;
    let funcs = (0..n)
        .map(|_| {
            let s = r.delta(last)?;
            last = s;
            Some((s, s.checked_add(r.u64()?)?))
        })
        .collect::<Option<Vec<_>>>()?;
    // Sorted (as the sweep makes them; each no longer than its end).
    if !funcs.is_sorted() {
        return None;
    }
    let n = r.count(2)?;
    // The branch targets' own (agent_loader's) tables.
    let mut t0 = rustc_hash::FxHashSet::with_capacity_and_hasher(n, Default::default());
    let mut t2 = rustc_hash::FxHashMap::with_capacity_and_hasher(n, Default::default());
    let mut last = 0;
    for _ in 0..n {
        let a = r.delta(last)?;
        t2.insert(a, r.u32()?.wrapping_sub(1));
        t0.insert(a);
        last = a;
    }
    t0.extend(r.addrs()?);
    let t1: rustc_hash::FxHashSet<u64> = r.addrs()?.into_iter().collect();
    let has_unknown = r.u64()? != 0;
    let n = r.count(2)?;
    let mut unknown = rustc_hash::FxHashMap::with_capacity_and_hasher(n, Default::default());
    let mut last = 0;
    for _ in 0..n {
        let a = r.delta(last)?;
        unknown.insert(a, r.delta(a)?);
        last = a;
    }
    let tail_jumps = r.addrs()?.into_iter().collect();
    Some(Sweep {
        funcs,
        targets: BranchTargets(t0, t1, t2, has_unknown.then_some(unknown)),
        tail_jumps,
    })
}

/// The windows' part of a payload.
fn windows_of(r: &mut R) -> Option<super::KeptWindows> {
    let n = r.count(6)?;
    let mut windows = super::KeptWindows::default();
    windows.reserve(n);
    let mut last = 0;
    for _ in 0..n {
        let shape = WindowShape::from_u64(r.u64()?)?;
        let at = r.delta(last)?;
        let probe = r.delta(at)?;
        let addr = r.delta(at)?;
        let len = r.u32()?;
        let d = r.u64()?;
        let win = Window {
            probe,
            addr,
            len,
            displaced: u32::try_from(d >> 1).ok()?,
            ret: d & 1 != 0,
        };
        windows.insert((shape, at), win);
        last = at;
    }
    Some(windows)
}

/// The return sites' part of a payload.
fn rets_of(r: &mut R) -> Option<super::Ordered<u64, std::sync::Arc<ReturnSites>>> {
    let n = r.count(7)?;
    let mut rets = super::Ordered::default();
    rets.reserve(n);
    let mut last = 0;
    for _ in 0..n {
        let off = r.delta(last)?;
        let function = r.str()?;
        let k = r.count(1)?;
        let ret_offs = (0..k).map(|_| r.delta(off)).collect::<Option<_>>()?;
        let followed = r.strs()?;
        let outside = r.strs()?;
        let k = r.count(1)?;
        let indirect = (0..k).map(|_| r.delta(off)).collect::<Option<_>>()?;
        let sites = ReturnSites {
            function,
            rets: ret_offs,
            followed,
            outside,
            indirect,
            never_returns: r.u64()? != 0,
        };
        rets.insert(off, std::sync::Arc::new(sites));
        last = off;
    }
    Some(rets)
}

/// The stubs' part of a payload.
fn stubs_of(r: &mut R) -> Option<super::KeptStubs> {
    let n = r.count(9)?;
    let mut stubs = super::KeptStubs::default();
    // The code is most of what is left.
    stubs.reserve(n, r.bytes.len());
    let mut last = 0;
    for _ in 0..n {
        let addr = r.delta(last)?;
        let probe = r.delta(addr)?;
        let len = r.u32()?;
        let d = r.u64()?;
        let id = r.u32()?;
        let base = r.delta(addr)?;
        let at = r.delta(base)?;
        let bias = r.u64()?;
        let key = StubKey {
            addr,
            probe,
            len,
            displaced: u32::try_from(d >> 1).ok()?,
            ret: d & 1 != 0,
            id,
            base,
            at,
            bias,
        };
        let k = r.count(1)?;
        let (code, rest) = r.bytes.split_at_checked(k)?;
        r.bytes = rest;
        stubs.push(key, code)?;
        last = addr;
    }
    Some(stubs)
}

/// The copies kept ([`super::KeptCopies`]), by function: addresses as
/// differences from the function's run-time address.
fn copies_into(w: &mut W, copies: &super::KeptCopies) {
    let all = copies.sorted();
    w.u64(all.len() as u64);
    let mut last = 0;
    for c in all {
        let k = &c.key;
        let start = k.link.wrapping_add(k.bias);
        w.delta(last, k.link);
        w.u64(k.bias);
        w.delta(start, k.window.0);
        w.u64(u64::from(k.window.1));
        w.u64(u64::from(k.window.2));
        w.u64(u64::from(k.id));
        w.delta(start, k.base);
        w.delta(k.base, k.at);
        w.u64(k.ret_stubs.len() as u64);
        for &(r, s) in &k.ret_stubs {
            w.delta(start, r);
            w.delta(k.base, s);
        }
        w.u64(c.returns.len() as u64);
        for &(from, to) in &c.returns {
            w.delta(start, from);
            w.delta(k.at, to);
        }
        w.u64(c.code.len() as u64);
        w.out.extend_from_slice(&c.code);
        last = k.link;
    }
}

/// The copies' part of a payload.
fn copies_of(r: &mut R) -> Option<super::KeptCopies> {
    let n = r.count(10)?;
    let mut copies = super::KeptCopies::default();
    let mut last = 0;
    for _ in 0..n {
        let link = r.delta(last)?;
        let bias = r.u64()?;
        let start = link.wrapping_add(bias);
        let window = (r.delta(start)?, r.u32()?, r.u32()?);
        let id = r.u32()?;
        let base = r.delta(start)?;
        let at = r.delta(base)?;
        let k = r.count(2)?;
        let ret_stubs = (0..k)
            .map(|_| Some((r.delta(start)?, r.delta(base)?)))
            .collect::<Option<Vec<_>>>()?;
        let k = r.count(2)?;
        let returns = (0..k)
            .map(|_| Some((r.delta(start)?, r.delta(at)?)))
            .collect::<Option<Vec<_>>>()?;
        let k = r.count(1)?;
        let (code, rest) = r.bytes.split_at_checked(k)?;
        r.bytes = rest;
        copies.push(super::KeptCopy {
            key: super::CopyKey {
                link,
                bias,
                window,
                id,
                base,
                at,
                ret_stubs,
            },
            code: code.to_vec(),
            returns,
        })?;
        last = link;
    }
    Some(copies)
}
