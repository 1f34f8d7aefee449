//! The site table: the patched sites a stub's `dispatch` names (their
//! address, probes, return probes, kind), published whole by
//! `wprobe_agent_sites` and read without a lock; and the patched windows'
//! original bytes, which a handler's read of the program's code sees.

use agent_abi::{AgentError, BiasEntry, ControlHeader, MAX_SITES, SiteEntry, SitesRequest};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use crate::control::{control_call, read_req};
use crate::{agent, ctrl, err, trapnet};

/// A patched site: the address handlers see as `rip`, and its probes.
#[derive(Clone)]
pub(crate) struct Site {
    pub(crate) addr: u64,
    /// Its probes (in the buffers of the request that added it, as the
    /// slices below: two allocations a request, not four a site).
    pub(crate) probes: &'static [u32],
    /// [`agent_abi::site_kind`].
    pub(crate) kind: u32,
    /// Return probes whose function enters here.
    pub(crate) ret_probes: &'static [u32],
    /// The bytes its jump (or trap) replaces, and where.
    pub(crate) window: Option<(u64, &'static [u8])>,
    /// A near site's cave (the padding its `jmp rel8` leads to): where,
    /// and the bytes the file has there.
    pub(crate) cave: Option<(u64, &'static [u8])>,
    /// A trap site's stub.
    pub(crate) trap_stub: Option<u64>,
    /// What the site does first to the count of calls that make a vfork
    /// child ([`agent_abi::vfork_mark`]; 0: nothing).
    pub(crate) vfork: u32,
}

/// The site table, set by `wprobe_agent_sites` (before any stub can reach
/// a new site's `dispatch`; with every thread of the process stopped when
/// sites are added later). A table is never changed once published, nor
/// freed: `dispatch` reads it without a lock, and a thread stopped in a
/// hit may still hold a site of the table an addition replaced.
static SITES: AtomicPtr<Vec<Option<Site>>> = AtomicPtr::new(core::ptr::null_mut());
/// The patched windows with the bytes the jumps replaced, sorted by
/// address (published with the site table, never changed afterwards nor
/// freed): a handler's read of the program's code sees the file's bytes
/// there, as under ptrace.
static WINDOWS: AtomicPtr<Vec<Window>> = AtomicPtr::new(core::ptr::null_mut());

/// The longest of [`WINDOWS`] (bytes).
static LONGEST_WINDOW: AtomicU64 = AtomicU64::new(0);

/// A patched window and its original bytes.
struct Window {
    addr: u64,
    orig: &'static [u8],
}

/// The first `n` of `left` (the rest of a request's buffer), taken from
/// it; `None` past its end (entries that changed between the two passes).
fn take<T>(left: &mut &'static mut [T], n: usize) -> Option<&'static mut [T]> {
    if n > left.len() {
        return None;
    }
    let (head, rest) = core::mem::take(left).split_at_mut(n);
    *left = rest;
    Some(head)
}

/// Puts the original bytes of the patched windows that `buf` (read at
/// `addr`) overlaps back into it.
pub(crate) fn original_code(addr: u64, buf: &mut [u8]) {
    // SAFETY: published with the site table, never freed.
    let Some(ws) = (unsafe { WINDOWS.load(Ordering::Acquire).as_ref() }) else {
        return;
    };
    let end = addr.saturating_add(buf.len() as u64);
    // The first window that may end after `addr` (windows do not
    // overlap: none that starts a longest window's length before `addr`).
    let longest = LONGEST_WINDOW.load(Ordering::Relaxed);
    let mut i = ws.partition_point(|w| w.addr.saturating_add(longest) <= addr);
    while let Some(w) = ws.get(i) {
        if w.addr >= end {
            break;
        }
        let w_end = w.addr + w.orig.len() as u64;
        let (a, b) = (w.addr.max(addr), w_end.min(end));
        if a < b {
            buf[(a - addr) as usize..(b - addr) as usize]
                .copy_from_slice(&w.orig[(a - w.addr) as usize..(b - w.addr) as usize]);
        }
        i += 1;
    }
}

// ---------------------------------------------------------------------------
// sites

/// Adds the sites of the [`SitesRequest`] at `req_off` to the site table
/// (an entry with the id of an earlier site replaces it) and sets the load
/// biases it lists: at the start, before any stub that calls `dispatch` is
/// reachable; later (a library mapped), with every other thread stopped.
/// Returns 0 or an [`AgentError`] code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_sites(req_off: usize) -> i32 {
    control_call(sites_inner, req_off)
}

extern "C" fn sites_inner(arg: *mut u8) -> i64 {
    // SAFETY: `control_call` passes a pointer to the offset.
    let req_off = unsafe { *(arg as *const usize) } as u64;
    let Some(c) = ctrl::get() else {
        return AgentError::NotInitialized as i64;
    };
    let req: SitesRequest = match read_req(c, req_off, "sites request") {
        Ok(r) => r,
        Err(e) => return e,
    };
    // SAFETY: published tables are never changed nor freed.
    let mut table: Vec<Option<Site>> = match unsafe { SITES.load(Ordering::Acquire).as_ref() } {
        Some(t) => t.clone(),
        None => Vec::new(),
    };
    // Two passes over the entries: the first sizes the request's lists
    // and the table, the second fills them (no buffer grown, no copy of
    // the entries kept between).
    let entry = |i: u64| -> Result<SiteEntry, i64> {
        let e: SiteEntry = read_req(
            c,
            req.sites_off + i * core::mem::size_of::<SiteEntry>() as u64,
            "site entry",
        )?;
        if e.site >= MAX_SITES {
            return Err(err(
                AgentError::TooManySites,
                format_args!("site {}", e.site),
            ));
        }
        Ok(e)
    };
    let cave_len = |e: &SiteEntry| if e.cave != 0 { e.cave_len } else { 0 };
    let (mut n_ids, mut n_bytes, mut top) = (0usize, 0usize, table.len());
    for i in 0..u64::from(req.n_sites) {
        let e = match entry(i) {
            Ok(e) => e,
            Err(e) => return e,
        };
        n_ids += e.n_probes as usize + e.n_ret as usize;
        n_bytes += e.orig_len as usize + cave_len(&e) as usize;
        top = top.max(e.site as usize + 1);
    }
    // Each id and byte comes from the region: more than it holds is a
    // request to refuse before anything is allocated for it.
    let room = c.region_size as usize;
    if n_ids.saturating_mul(4) > room || n_bytes > room {
        return err(
            AgentError::BadRequest,
            format_args!("sites' lists of {n_ids} probes and {n_bytes} bytes"),
        );
    }
    let mut ids: &'static mut [u32] = Box::leak(alloc::vec![0u32; n_ids].into_boxed_slice());
    let mut bytes: &'static mut [u8] = Box::leak(alloc::vec![0u8; n_bytes].into_boxed_slice());
    table.resize_with(top, || None);
    for i in 0..u64::from(req.n_sites) {
        let e = match entry(i) {
            Ok(e) => e,
            Err(e) => return e,
        };
        let probes = match probe_list(c, &mut ids, e.probes_off, e.n_probes, e.site) {
            Ok(p) => p,
            Err(e) => return e,
        };
        let ret_probes = match probe_list(c, &mut ids, e.ret_off, e.n_ret, e.site) {
            Ok(p) => p,
            Err(e) => return e,
        };
        let window = match original_bytes(
            c,
            &mut bytes,
            e.window,
            (e.orig_off, e.orig_len),
            e.site,
            "original",
        ) {
            Ok(w) => w,
            Err(e) => return e,
        };
        // A near site's cave: its padding reads as the file has it too.
        let cave = match original_bytes(
            c,
            &mut bytes,
            e.cave,
            (e.cave_off, cave_len(&e)),
            e.site,
            "cave",
        ) {
            Ok(w) => w,
            Err(e) => return e,
        };
        let Some(slot) = table.get_mut(e.site as usize) else {
            return err(
                AgentError::BadRequest,
                format_args!("site {}: not in the first pass", e.site),
            );
        };
        *slot = Some(Site {
            addr: e.addr,
            probes,
            kind: e.kind,
            ret_probes,
            window,
            cave,
            trap_stub: (e.trap != 0).then_some(e.stub),
            vfork: e.vfork,
        });
    }
    if req.n_biases != 0 {
        let Some(a) = agent() else {
            return AgentError::NotInitialized as i64;
        };
        for i in 0..u64::from(req.n_biases) {
            let b: BiasEntry = match read_req(
                c,
                req.biases_off + i * core::mem::size_of::<BiasEntry>() as u64,
                "bias entry",
            ) {
                Ok(b) => b,
                Err(e) => return e,
            };
            if let Some(Some(p)) = a.probes.get_mut(b.probe as usize) {
                p.load_bias = b.load_bias;
            }
        }
    }
    let mut windows: Vec<Window> = Vec::new();
    let mut traps: Vec<(u64, u64)> = Vec::new();
    for s in table.iter().flatten() {
        if let Some((addr, orig)) = s.window {
            windows.push(Window { addr, orig });
            if let Some(stub) = s.trap_stub {
                traps.push((addr, stub));
            }
        }
        if let Some((addr, orig)) = s.cave {
            windows.push(Window { addr, orig });
        }
    }
    windows.sort_unstable_by_key(|w| w.addr);
    let longest = windows
        .iter()
        .map(|w| w.orig.len() as u64)
        .max()
        .unwrap_or(0);
    // The longest first: a reader that sees the new windows sees a bound
    // at least as large as theirs.
    LONGEST_WINDOW.fetch_max(longest, Ordering::Relaxed);
    // The old tables stay (see `SITES`).
    WINDOWS.store(Box::into_raw(Box::new(windows)), Ordering::Release);
    if trapnet::arm(traps) {
        c.stats.trap_net.store(1, Ordering::Relaxed);
    }
    crate::fast::publish(
        table
            .iter()
            .map(|s| s.as_ref().map(crate::fast::entry_of).unwrap_or_default())
            .collect(),
    );
    SITES.store(Box::into_raw(Box::new(table)), Ordering::Release);
    0
}

/// The `n` probe ids at `off` of the control region (site `site`'s),
/// in the next `n` of `ids` (a request's buffer: never freed, as the
/// tables whose sites point into it).
fn probe_list(
    c: &ControlHeader,
    ids: &mut &'static mut [u32],
    off: u64,
    n: u32,
    site: u32,
) -> Result<&'static [u32], i64> {
    let bad = || err(AgentError::BadRequest, format_args!("site {site} probes"));
    let out = take(ids, n as usize).ok_or_else(bad)?;
    for (k, slot) in out.iter_mut().enumerate() {
        let p: u32 = match ctrl::bytes(c, off + 4 * k as u64, 4) {
            Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            None => return Err(bad()),
        };
        if u64::from(p) >= c.probes_cap {
            return Err(err(AgentError::TooManySites, format_args!("probe {p}")));
        }
        *slot = p;
    }
    Ok(out)
}

/// The file's bytes at `at` that a site's request carries (`len` bytes
/// at offset `off` of the control region; none when `len` is 0), in the
/// next `len` of `bytes` (a request's buffer); the error of a range
/// outside the region (`what`: the window's "original" bytes or the
/// "cave" ones).
fn original_bytes(
    c: &ControlHeader,
    bytes: &mut &'static mut [u8],
    at: u64,
    (off, len): (u64, u32),
    site: u32,
    what: &str,
) -> Result<Option<(u64, &'static [u8])>, i64> {
    if len == 0 {
        return Ok(None);
    }
    let bad = || {
        err(
            AgentError::BadRequest,
            format_args!("site {site} {what} bytes"),
        )
    };
    let from = ctrl::bytes(c, off, u64::from(len)).ok_or_else(bad)?;
    let out = take(bytes, len as usize).ok_or_else(bad)?;
    out.copy_from_slice(&from);
    Ok(Some((at, out)))
}

#[inline(always)]
pub(crate) fn site(id: u32) -> Option<&'static Site> {
    // SAFETY: published tables are never changed nor freed.
    let t = unsafe { SITES.load(Ordering::Acquire).as_ref()? };
    t.get(id as usize)?.as_ref()
}
