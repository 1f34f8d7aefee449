//! Mapping the agent into a target and talking to it.
//!
//! 1. A scratch page (RW) for the strings and frames the tracer passes.
//! 2. An inaccessible reservation of the object's span, then each segment
//!    mapped over it (`MAP_FIXED`, anonymous) **with its final protection**
//!    (text `r-x`, RELRO `r--`, data `rw-`): no page of the target is ever
//!    writable and executable. The relocated contents are written through
//!    the target's forced-write path (`/proc/PID/mem`).
//! 3. A fork-guard page (`MADV_WIPEONFORK`): a forked child sees it zeroed
//!    and its inherited agent stays dormant.
//! 4. The control region: a memfd created *in the target*, opened by the
//!    tracer through `/proc/PID/fd/N`, mapped `MAP_SHARED` on both sides,
//!    closed in the target.
//! 5. `wprobe_agent_init(region, len, guard)`.

use crate::elf::AgentImage;
use crate::region::{Region, RegionLayout, RunFacts};
use crate::target::{Target, syscall_ok};
use agent_abi::{AgentError, BiasEntry, LoadRequest, ProbeEntry, SiteEntry, SitesRequest, sym};
use anyhow::{Context, Result, bail};
use std::fs::File;

const PAGE: u64 = 4096;
const MADV_WIPEONFORK: u64 = 18;
const MFD_CLOEXEC: u64 = 1;

/// The agent, mapped and initialised in a target.
pub struct LoadedAgent {
    /// Load base of the object in the target.
    pub base: u64,
    /// Address of the control region in the target.
    pub region_addr: u64,
    /// The tracer's mapping of the control region.
    pub region: Region,
    /// The fork-guard page in the target (0 when the kernel lacks
    /// `MADV_WIPEONFORK`).
    pub guard: u64,
    /// A scratch page (RW) in the target, for frames and strings.
    pub scratch: u64,
    /// `wprobe_agent_init`.
    pub init: u64,
    /// `wprobe_agent_load`.
    pub load: u64,
    /// `wprobe_agent_sites`.
    pub sites: u64,
    /// `wprobe_agent_dispatch`.
    pub dispatch: u64,
    /// `wprobe_agent_fast`.
    pub fast: u64,
    /// `wprobe_agent_fast_table` (a pointer's address).
    pub fast_table: u64,
    /// `wprobe_agent_trap` (an `int3`).
    pub trap: u64,
    /// `wprobe_agent_bench`.
    pub bench: u64,
}

/// A failure reported by the agent.
#[derive(Debug)]
pub struct AgentFailure {
    /// The code.
    pub code: AgentError,
    /// The agent's message.
    pub message: String,
}

impl std::fmt::Display for AgentFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "agent: {:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for AgentFailure {}

fn mmap<T: Target + ?Sized>(t: &mut T, addr: u64, len: u64, prot: i32, flags: i32) -> Result<u64> {
    syscall_ok(
        t,
        libc::SYS_mmap,
        [addr, len, prot as u64, flags as u64, u64::MAX, 0],
    )
    .context("mmap in the target")
}

/// The agent's object, scratch page and fork-guard page mapped into `t`:
/// (base, scratch, guard).
fn map_image<T: Target + ?Sized>(t: &mut T, image: &AgentImage) -> Result<(u64, u64, u64)> {
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let scratch = mmap(t, 0, PAGE, libc::PROT_READ | libc::PROT_WRITE, anon)?;
    let base = mmap(
        t,
        0,
        image.span,
        libc::PROT_NONE,
        anon | libc::MAP_NORESERVE,
    )?;
    // Segments, with their final protections (RELRO read-only).
    for s in &image.segments {
        let lo = s.vaddr & !(PAGE - 1);
        let hi = (s.vaddr + s.memsz).next_multiple_of(PAGE);
        let mut cuts = vec![(lo, hi, s.prot)];
        if let Some((rlo, rhi)) = image.relro
            && s.prot & libc::PROT_WRITE != 0
            && rlo < hi
            && rhi > lo
        {
            let rlo = rlo.max(lo) & !(PAGE - 1);
            let rhi = rhi.min(hi).next_multiple_of(PAGE);
            cuts = vec![
                (lo, rlo, s.prot),
                (rlo, rhi, libc::PROT_READ),
                (rhi, hi, s.prot),
            ];
        }
        for (a, b, prot) in cuts {
            if b > a {
                mmap(t, base + a, b - a, prot, anon | libc::MAP_FIXED)?;
            }
        }
    }
    for (va, bytes) in image.relocated(base) {
        t.write_mem(base + va, &bytes)
            .context("writing the agent's segments")?;
    }
    // Fork guard.
    let guard = mmap(t, 0, PAGE, libc::PROT_READ | libc::PROT_WRITE, anon)?;
    let guard = match syscall_ok(
        t,
        libc::SYS_madvise,
        [guard, PAGE, MADV_WIPEONFORK, 0, 0, 0],
    ) {
        Ok(_) => guard,
        Err(_) => 0,
    };
    Ok((base, scratch, guard))
}

/// The agent at `base` with its region, its entry points found.
fn loaded(
    image: &AgentImage,
    (base, scratch, guard): (u64, u64, u64),
    region_addr: u64,
    region: Region,
) -> Result<LoadedAgent> {
    let sym = |n: &str| image.symbol(n).map(|v| base + v);
    Ok(LoadedAgent {
        base,
        region_addr,
        region,
        guard,
        scratch,
        init: sym(sym::INIT)?,
        load: sym(sym::LOAD)?,
        sites: sym(sym::SITES)?,
        dispatch: sym(sym::DISPATCH)?,
        fast: sym(sym::FAST)?,
        fast_table: sym(sym::FAST_TABLE)?,
        trap: sym(sym::TRAP)?,
        bench: sym(sym::BENCH)?,
    })
}

/// Maps `image` into `t` and initialises it with a fresh control region.
pub fn load_agent<T: Target + ?Sized>(
    t: &mut T,
    image: &AgentImage,
    layout: RegionLayout,
    facts: RunFacts,
) -> Result<LoadedAgent> {
    let (base, scratch, guard) = map_image(t, image)?;
    // Control region.
    let size = layout.size();
    t.write_mem(scratch, b"wprobe-agent\0")?;
    let fd = syscall_ok(
        t,
        libc::SYS_memfd_create,
        [scratch, MFD_CLOEXEC, 0, 0, 0, 0],
    )?;
    let mapped = (|| -> Result<(u64, Region)> {
        syscall_ok(t, libc::SYS_ftruncate, [fd, size, 0, 0, 0, 0])?;
        let file = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/fd/{fd}", t.pid()))
            .context("opening the target's memfd")?;
        let region = Region::map(file, layout, facts)?;
        let addr = map_shared(t, fd, size)?;
        Ok((addr, region))
    })();
    syscall_ok(t, libc::SYS_close, [fd, 0, 0, 0, 0, 0])?;
    let (region_addr, region) = mapped?;
    init(t, image, (base, scratch, guard), region_addr, region, false)
}

/// Maps `image` into `t` and initialises it with `region`, the control
/// region of another process's agent (see `wprobe_agent_init`'s `join`):
/// `t` opens it at `path` (the tracer's own descriptor of it, as
/// `/proc/PID/fd/N`), maps it shared, closes it.
pub fn join_agent<T: Target + ?Sized>(
    t: &mut T,
    image: &AgentImage,
    region: Region,
    path: &str,
) -> Result<LoadedAgent> {
    let (base, scratch, guard) = map_image(t, image)?;
    let size = region.layout().size();
    let mut name = path.as_bytes().to_vec();
    name.push(0);
    t.write_mem(scratch, &name)?;
    let fd = syscall_ok(
        t,
        libc::SYS_openat,
        [
            libc::AT_FDCWD as u64,
            scratch,
            (libc::O_RDWR | libc::O_CLOEXEC) as u64,
            0,
            0,
            0,
        ],
    )
    .with_context(|| format!("opening {path} in the target"))?;
    let mapped = map_shared(t, fd, size);
    syscall_ok(t, libc::SYS_close, [fd, 0, 0, 0, 0, 0])?;
    init(t, image, (base, scratch, guard), mapped?, region, true)
}

/// Maps `size` bytes of the file `fd` of `t` shared and read-write (the
/// control region); its address in `t`.
fn map_shared<T: Target + ?Sized>(t: &mut T, fd: u64, size: u64) -> Result<u64> {
    syscall_ok(
        t,
        libc::SYS_mmap,
        [
            0,
            size,
            (libc::PROT_READ | libc::PROT_WRITE) as u64,
            libc::MAP_SHARED as u64,
            fd,
            0,
        ],
    )
}

/// Runs `wprobe_agent_init` in `t` for the agent `image` mapped at
/// `mapped` (base, scratch, guard), its control region `region` mapped at
/// `region_addr` (`join`: the region of another process's agent).
fn init<T: Target + ?Sized>(
    t: &mut T,
    image: &AgentImage,
    mapped: (u64, u64, u64),
    region_addr: u64,
    region: Region,
    join: bool,
) -> Result<LoadedAgent> {
    let (size, guard) = (region.layout().size(), mapped.2);
    let a = loaded(image, mapped, region_addr, region)?;
    let args = [region_addr, size, guard, u64::from(join), 0, 0];
    let r = t.call(a.init, args, a.trap)? as i32;
    if r != 0 {
        return Err(a.failure(r).into());
    }
    Ok(a)
}

/// One probe of a program.
#[derive(Clone, Debug)]
pub struct ProbeSpec<'a> {
    /// Its id (its slot in the region's probe table).
    pub probe: u32,
    /// Its handler export.
    pub export: &'a str,
    /// Load bias of its module (the `load_bias` import).
    pub load_bias: u64,
    /// Its handler's parameters (the manifest's `args`).
    pub args: &'a [hostabi::manifest::ArgSource],
    /// Its USDT arguments (the manifest's `usdt_args`; empty: none).
    pub usdt_args: &'a [hostabi::usdt::UsdtArg],
}

/// What a program is loaded for.
#[derive(Clone, Debug)]
pub struct ModuleSpec<'a> {
    /// `Engine::precompile_module` output for the agent's configuration.
    pub cwasm: &'a [u8],
    /// Its probes.
    pub probes: &'a [ProbeSpec<'a>],
    /// Global variables the program declares.
    pub gvars: u32,
    /// Fuel per handler run.
    pub fuel: u64,
    /// Its map region in the region's map area: (offset, length); (0, 0)
    /// when it declares no map.
    pub map: (u64, u64),
    /// Whether handlers may write registers and memory.
    pub writes_allowed: bool,
}

/// One patched site for [`LoadedAgent::set_sites`].
#[derive(Clone, Debug)]
pub struct SiteSpec {
    /// The id its stub passes to `dispatch`.
    pub site: u32,
    /// The probe address (what handlers see as `rip`).
    pub addr: u64,
    /// Its probes, in the order their handlers run.
    pub probes: Vec<u32>,
    /// [`agent_abi::site_kind`].
    pub kind: u32,
    /// Return probes whose function enters here (their calls are tracked).
    pub ret_probes: Vec<u32>,
    /// The address of the first byte the jump replaces, and the bytes it
    /// replaces (the module file's).
    pub window: (u64, Vec<u8>),
    /// An `int3` goes at the site (no jump fits).
    pub trap: bool,
    /// The site's stub.
    pub stub: u64,
    /// A near site's cave (its `jmp rel32` to the stub, in padding) and
    /// the bytes it replaces (the file's).
    pub cave: Option<(u64, Vec<u8>)>,
    /// What it does to the count of calls that make a vfork child
    /// ([`agent_abi::vfork_mark`]; 0: nothing).
    pub vfork: u32,
}

/// The bytes of the scratch area one site takes in a request of
/// [`LoadedAgent::set_sites`]: its entry, and its lists and bytes, each
/// put at a multiple of 8.
fn request_bytes(s: &SiteSpec) -> u64 {
    let up = |n: usize| (n as u64).next_multiple_of(8);
    std::mem::size_of::<SiteEntry>() as u64
        + up(4 * s.probes.len())
        + up(4 * s.ret_probes.len())
        + up(s.window.1.len())
        + s.cave.as_ref().map_or(0, |(_, b)| up(b.len()))
        + 8
}

/// Views plain `#[repr(C)]` data as bytes.
fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: `T` is plain data (repr(C) structs of integers, no padding
    // that matters: the agent reads them back as the same type).
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

impl LoadedAgent {
    fn failure(&self, code: i32) -> AgentFailure {
        let (_, message) = self.region.error();
        AgentFailure {
            code: AgentError::from_code(code).unwrap_or(AgentError::BadRequest),
            message: if AgentError::from_code(code).is_some() {
                message
            } else {
                format!("unknown code {code}: {message}")
            },
        }
    }

    /// Loads a program; returns its index.
    pub fn load_module<T: Target + ?Sized>(
        &mut self,
        t: &mut T,
        m: &ModuleSpec<'_>,
    ) -> Result<u32> {
        self.region.reset_scratch();
        let module_off = self.region.put(m.cwasm)?;
        let mut entries = Vec::new();
        for p in m.probes {
            let name_off = self.region.put(p.export.as_bytes())?;
            if p.args.len() > agent_abi::arg::MAX {
                anyhow::bail!("probe {}: {} handler parameters", p.probe, p.args.len());
            }
            let mut args = [0u32; agent_abi::arg::MAX];
            for (code, a) in args.iter_mut().zip(p.args) {
                use hostabi::manifest::ArgSource;
                *code = match *a {
                    ArgSource::Reg(id) => agent_abi::arg::REG | u32::from(id),
                    ArgSource::Entry(id) => agent_abi::arg::ENTRY | u32::from(id),
                    ArgSource::Elapsed => agent_abi::arg::ELAPSED,
                };
            }
            let usdt = hostabi::usdt::render_args(p.usdt_args);
            let usdt_off = if usdt.is_empty() {
                0
            } else {
                self.region.put(usdt.as_bytes())?
            };
            entries.push(ProbeEntry {
                usdt_off,
                usdt_len: usdt.len() as u32,
                _pad2: 0,
                probe: p.probe,
                name_len: p.export.len() as u32,
                name_off,
                load_bias: p.load_bias,
                n_args: p.args.len() as u32,
                _pad: 0,
                args,
            });
        }
        let probes_off = self.region.put(as_bytes(&entries))?;
        let req = LoadRequest {
            module_off,
            module_len: m.cwasm.len() as u64,
            probes_off,
            n_probes: entries.len() as u32,
            gvars: m.gvars,
            fuel: m.fuel,
            map_off: m.map.0,
            map_len: m.map.1,
            writes_allowed: u32::from(m.writes_allowed),
            _pad: 0,
        };
        let req_off = self.region.put(as_bytes(std::slice::from_ref(&req)))?;
        let r = t.call(self.load, [req_off, 0, 0, 0, 0, 0], self.trap)? as i32;
        if r < 0 {
            return Err(self.failure(r).into());
        }
        Ok(r as u32)
    }

    /// Adds sites to the agent's site table (an id sent again replaces its
    /// site), before any of their stubs is reachable, and sets the load
    /// biases of probes armed since their program was loaded: `(probe,
    /// bias)`. Sites that do not fit in the region's scratch area at once
    /// (a region laid out before the sites were planned) go in as many
    /// requests as they need, the biases with the last; returns how many.
    pub fn set_sites<T: Target + ?Sized>(
        &mut self,
        t: &mut T,
        sites: &[SiteSpec],
        biases: &[(u32, u64)],
    ) -> Result<usize> {
        // Room for the sites' entries and lists, after the biases and the
        // request itself.
        let fixed = (biases.len() * std::mem::size_of::<BiasEntry>()
            + std::mem::size_of::<SitesRequest>()
            + 64) as u64;
        let room = self.region.layout().scratch_size.saturating_sub(fixed);
        let mut rest = sites;
        let mut requests = 0;
        loop {
            let mut used = 0u64;
            let n = rest
                .iter()
                .take_while(|s| {
                    used += request_bytes(s);
                    used <= room
                })
                .count()
                // One site at least: a site that does not fit alone says
                // so (the scratch area full).
                .max(1)
                .min(rest.len());
            let (now, later) = rest.split_at(n);
            let last = later.is_empty();
            self.set_sites_once(t, now, if last { biases } else { &[] })?;
            requests += 1;
            if last {
                return Ok(requests);
            }
            rest = later;
        }
    }

    /// [`LoadedAgent::set_sites`] in one request.
    fn set_sites_once<T: Target + ?Sized>(
        &mut self,
        t: &mut T,
        sites: &[SiteSpec],
        biases: &[(u32, u64)],
    ) -> Result<()> {
        self.region.reset_scratch();
        let mut entries = Vec::with_capacity(sites.len());
        for s in sites {
            let probes_off = self.region.put(as_bytes(&s.probes))?;
            let ret_off = self.region.put(as_bytes(&s.ret_probes))?;
            let orig_off = self.region.put(&s.window.1)?;
            let (cave, cave_orig) = match &s.cave {
                Some((a, b)) => (*a, b.as_slice()),
                None => (0, &[][..]),
            };
            let cave_off = if cave_orig.is_empty() {
                0
            } else {
                self.region.put(cave_orig)?
            };
            entries.push(SiteEntry {
                site: s.site,
                n_probes: s.probes.len() as u32,
                probes_off,
                addr: s.addr,
                kind: s.kind,
                n_ret: s.ret_probes.len() as u32,
                ret_off,
                window: s.window.0,
                orig_off,
                orig_len: s.window.1.len() as u32,
                trap: u32::from(s.trap),
                stub: s.stub,
                cave,
                cave_off,
                cave_len: cave_orig.len() as u32,
                vfork: s.vfork,
            });
        }
        let sites_off = self.region.put(as_bytes(&entries))?;
        let biases: Vec<BiasEntry> = biases
            .iter()
            .map(|&(probe, load_bias)| BiasEntry {
                probe,
                _pad: 0,
                load_bias,
            })
            .collect();
        let biases_off = self.region.put(as_bytes(&biases))?;
        let req = SitesRequest {
            sites_off,
            n_sites: entries.len() as u32,
            n_biases: biases.len() as u32,
            biases_off,
        };
        let req_off = self.region.put(as_bytes(std::slice::from_ref(&req)))?;
        let r = t.call(self.sites, [req_off, 0, 0, 0, 0, 0], self.trap)? as i32;
        if r < 0 {
            return Err(self.failure(r).into());
        }
        Ok(())
    }

    /// What the stub areas' slots hold (`stub::trampoline`): `dispatch`,
    /// the fast path, the address of the fast table's pointer.
    pub fn slots(&self) -> [u64; 3] {
        [self.dispatch, self.fast, self.fast_table]
    }

    /// Makes the target call `dispatch(site, frame)`; returns its result.
    pub fn dispatch<T: Target + ?Sized>(&self, t: &mut T, site: u32, frame: u64) -> Result<i64> {
        Ok(t.call(
            self.dispatch,
            [u64::from(site), frame, 0, 0, 0, 0],
            self.trap,
        )? as i64)
    }
}

/// Checks a kernel result the way the loader's callers need (a helper for
/// targets returning raw results).
pub fn check(r: u64, what: &str) -> Result<u64> {
    if r > (-4096i64) as u64 {
        bail!(
            "{what}: {}",
            std::io::Error::from_raw_os_error(-(r as i64) as i32)
        );
    }
    Ok(r)
}

/// Maps `len` bytes with `prot` at a free address within ±2 GiB (minus
/// 1 MiB of slack) of `near`, for code that `near` must reach with a rel32.
pub fn map_near<T: Target + ?Sized>(t: &mut T, near: u64, len: u64, prot: i32) -> Result<u64> {
    const REACH: u64 = (1 << 31) - (1 << 20);
    const MAP_FIXED_NOREPLACE: i32 = 0x10_0000;
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid()))?;
    let mut ranges: Vec<(u64, u64)> = maps
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect();
    ranges.sort();
    // Candidates: just below and just above every mapping, nearest first.
    let mut cands: Vec<u64> = Vec::new();
    let mut prev_end = 0x10_0000u64;
    for &(lo, hi) in &ranges {
        if lo >= prev_end + len {
            cands.push(prev_end);
            cands.push(lo - len);
        }
        prev_end = prev_end.max(hi);
    }
    cands.push(prev_end);
    cands.retain(|c| c.abs_diff(near) < REACH && *c % PAGE == 0 && *c < 0x7fff_ffff_0000);
    cands.sort_by_key(|c| c.abs_diff(near));
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
    for c in cands {
        if let Ok(a) = mmap(t, c, len, prot, flags) {
            if a == c {
                return Ok(a);
            }
            // An old kernel ignoring MAP_FIXED_NOREPLACE placed it elsewhere.
            syscall_ok(t, libc::SYS_munmap, [a, len, 0, 0, 0, 0])?;
        }
    }
    bail!("no free range within rel32 reach of 0x{near:x}")
}
