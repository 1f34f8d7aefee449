//! The state behind the service imports (`map_*`, `emit_event`,
//! `clock_ns`, `current_uid`, `current_comm`, `child_pid`; the imports
//! themselves are `hostfns`'s): one bounded map region per program
//! (`mapstore`, laid out from the manifest's `map` lines), the run's
//! clocks, and small caches of `/proc` facts. Map operations never
//! allocate once the region exists.

use hostabi::manifest::MapDecl;
use hostabi::maps::MapKind;
use mapstore::buckets::Linear;
use mapstore::{MapSpec, StoreView};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The map region of one program, with its declarations.
pub struct MapRegion {
    /// The region (`mapstore` layout).
    pub bytes: Vec<u8>,
    /// The manifest's `map` lines, by index.
    pub decls: Vec<MapDecl>,
}

impl MapRegion {
    /// A read-only view for printing.
    pub fn view(&self) -> StoreView<'_> {
        StoreView::new(&self.bytes)
    }
}

/// How long a thread name read from `/proc` is reused (threads rarely rename).
const COMM_TTL: Duration = Duration::from_millis(250);

/// State of the service imports, part of the store's data.
pub struct Services {
    /// Program whose handler is running (set by the runner before each call).
    pub prog: usize,
    /// Map regions by program (`None`: the program declares no map).
    pub maps: Vec<Option<MapRegion>>,
    /// `CLOCK_MONOTONIC` when the run started (bpftrace `elapsed` counts from it).
    pub start_mono_ns: u64,
    /// `CLOCK_REALTIME - CLOCK_MONOTONIC`, to place a hit's wall-clock time on
    /// the monotonic clock.
    pub mono_offset_ns: u64,
    /// Pid of the launched command (0 when attached).
    pub child_pid: u64,
    /// A `begin`/`end`/`interval` probe is running: there is no hit, the
    /// identity builtins describe wprobe itself (as bpftrace's do).
    pub special: bool,
    comm: HashMap<u64, ([u8; 16], usize, Instant)>,
    uid: HashMap<u64, i64>,
    gid: HashMap<u64, i64>,
}

impl Default for Services {
    fn default() -> Services {
        let mono = clock(libc::CLOCK_MONOTONIC);
        Services {
            prog: 0,
            maps: Vec::new(),
            start_mono_ns: mono,
            mono_offset_ns: crate::sys::time::realtime_minus_monotonic(),
            child_pid: 0,
            special: false,
            comm: HashMap::new(),
            uid: HashMap::new(),
            gid: HashMap::new(),
        }
    }
}

/// A clock's current value in nanoseconds.
pub fn clock(id: libc::clockid_t) -> u64 {
    crate::sys::time::clock_ns(id)
}

/// The `mapstore` specs of a manifest's maps, or why they are invalid.
pub fn map_specs(decls: &[MapDecl]) -> Result<Vec<MapSpec>, String> {
    decls
        .iter()
        .map(|d| {
            let linear = match d.lhist {
                Some((a, b, c)) => Some(
                    Linear::new(a, b, c)
                        .ok_or_else(|| format!("map {}: invalid lhist({a}, {b}, {c})", d.name))?,
                ),
                None => None,
            };
            Ok(MapSpec {
                kind: d.kind,
                key_size: d.key_size() as u32,
                value_size: d.value.as_ref().map_or(8, |v| v.size() as u32),
                max_keys: d.max_keys,
                linear,
                hist_bits: d.hist_bits,
            })
        })
        .collect()
}

impl Services {
    /// Lays out the map region of the next program (index `maps.len()`).
    pub fn add_program(&mut self, decls: &[MapDecl]) -> anyhow::Result<()> {
        if decls.is_empty() {
            self.maps.push(None);
            return Ok(());
        }
        let specs = map_specs(decls).map_err(anyhow::Error::msg)?;
        let size = mapstore::region_size(&specs).map_err(|e| anyhow::anyhow!("maps: {e}"))?;
        let mut bytes = vec![0u8; size as usize];
        mapstore::init(&mut bytes, &specs).map_err(|e| anyhow::anyhow!("maps: {e}"))?;
        self.maps.push(Some(MapRegion {
            bytes,
            decls: decls.to_vec(),
        }));
        Ok(())
    }

    fn region(&mut self) -> Option<&mut MapRegion> {
        self.maps.get_mut(self.prog)?.as_mut()
    }

    /// Forgets the thread names read so far (a process executed a new
    /// program: its threads are named after it now).
    pub fn forget_names(&mut self) {
        self.comm.clear();
    }

    /// The thread name of `tid` in `pid` (cached for a short while).
    fn comm(&mut self, pid: u64, tid: u64) -> ([u8; 16], usize) {
        let now = Instant::now();
        if let Some((b, n, t)) = self.comm.get(&tid)
            && now.duration_since(*t) < COMM_TTL
        {
            return (*b, *n);
        }
        let text = std::fs::read(format!("/proc/{pid}/task/{tid}/comm"))
            .or_else(|_| std::fs::read(format!("/proc/{pid}/comm")))
            .unwrap_or_default();
        let text = text.strip_suffix(b"\n").unwrap_or(&text);
        let mut b = [0u8; 16];
        let n = text.len().min(15);
        b[..n].copy_from_slice(&text[..n]);
        if self.comm.len() > 4096 {
            self.comm.clear();
        }
        self.comm.insert(tid, (b, n, now));
        (b, n)
    }

    /// The real uid of `pid` (cached).
    fn uid(&mut self, pid: u64) -> i64 {
        cached_id(&mut self.uid, pid, || {
            status_id(
                std::fs::read_to_string(format!("/proc/{pid}/status")),
                "Uid:",
            )
        })
    }
}

impl Services {
    /// The real gid of thread `tid` of `pid` (cached by thread).
    fn gid(&mut self, pid: u64, tid: u64) -> i64 {
        cached_id(&mut self.gid, tid, || {
            let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
                .or_else(|_| std::fs::read_to_string(format!("/proc/{pid}/status")));
            status_id(status, "Gid:")
        })
    }
}

/// The id of `key` in `cache`, else `read`'s, kept (the cache emptied when
/// it grew past 4,096 ids).
fn cached_id(cache: &mut HashMap<u64, i64>, key: u64, read: impl FnOnce() -> i64) -> i64 {
    if let Some(v) = cache.get(&key) {
        return *v;
    }
    let v = read();
    if cache.len() > 4096 {
        cache.clear();
    }
    cache.insert(key, v);
    v
}

/// The real id on the line `field` (`Uid:`, `Gid:`) of a `status` file's
/// text; -1 when it was not read or has none.
fn status_id(status: std::io::Result<String>, field: &str) -> i64 {
    status
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(-1)
}

/// The NUMA node of each CPU, from `/sys/devices/system/node/node*/cpulist`,
/// read once per run (empty when the machine has no such directory: one node).
fn numa_nodes() -> &'static [u16] {
    static NODES: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    NODES.get_or_init(|| {
        let mut by_cpu = Vec::new();
        let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else {
            return by_cpu;
        };
        for ent in dir.flatten() {
            let name = ent.file_name();
            let Some(node) = name
                .to_str()
                .and_then(|n| n.strip_prefix("node"))
                .and_then(|n| n.parse::<u16>().ok())
            else {
                continue;
            };
            let Ok(list) = std::fs::read_to_string(ent.path().join("cpulist")) else {
                continue;
            };
            for cpu in parse_cpu_list(list.trim()) {
                if by_cpu.len() <= cpu {
                    by_cpu.resize(cpu + 1, 0);
                }
                by_cpu[cpu] = node;
            }
        }
        by_cpu
    })
}

/// The CPUs of a sysfs cpu list (`0-3,8,10-11`).
fn parse_cpu_list(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            cpus.extend(a..=b.min(a + 65536));
        }
    }
    cpus
}

impl hostfns::Services for Services {
    fn map_region(&mut self) -> Option<&mut [u8]> {
        self.region().map(|r| r.bytes.as_mut_slice())
    }
    fn map_view(&self) -> Option<&[u8]> {
        self.maps
            .get(self.prog)?
            .as_ref()
            .map(|r| r.bytes.as_slice())
    }
    fn special(&self) -> bool {
        self.special
    }
    fn own_pid(&self) -> u64 {
        u64::from(std::process::id())
    }
    fn realtime_now(&self) -> u64 {
        clock(libc::CLOCK_REALTIME)
    }
    fn start_mono_ns(&self) -> u64 {
        self.start_mono_ns
    }
    fn mono_offset_ns(&self) -> u64 {
        self.mono_offset_ns
    }
    fn boot_offset_ns(&self) -> u64 {
        let m1 = clock(libc::CLOCK_MONOTONIC);
        let b = clock(libc::CLOCK_BOOTTIME);
        hostfns::clock_offset(m1, b, clock(libc::CLOCK_MONOTONIC), false)
    }
    fn tai_offset_ns(&self) -> u64 {
        let r1 = clock(libc::CLOCK_REALTIME);
        let t = clock(libc::CLOCK_TAI);
        hostfns::clock_offset(r1, t, clock(libc::CLOCK_REALTIME), true)
    }
    fn uid(&mut self, pid: u64) -> i64 {
        Services::uid(self, pid)
    }
    fn gid(&mut self, pid: u64, tid: u64) -> i64 {
        Services::gid(self, pid, tid)
    }
    fn numa_node(&self, cpu: u64) -> i64 {
        numa_nodes().get(cpu as usize).map_or(0, |&n| i64::from(n))
    }
    fn comm(&mut self, pid: u64, tid: u64) -> ([u8; 16], usize) {
        Services::comm(self, pid, tid)
    }
    fn child_pid(&self) -> u64 {
        self.child_pid
    }
}

/// Whether `kind` takes 8-byte integer updates (for the printers).
pub fn is_scalar(kind: MapKind) -> bool {
    matches!(
        kind,
        MapKind::Count | MapKind::Sum | MapKind::Min | MapKind::Max
    )
}
