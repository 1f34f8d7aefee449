//! The host side of the service imports (`map_*`, `emit_event`,
//! `clock_ns`, `current_uid`, `current_comm`, `child_pid`) and the state
//! behind them: one bounded map region per program (`mapstore`, laid out
//! from the manifest's `map` lines), the run's clocks, and small caches of
//! `/proc` facts. Every guest pointer is bounds-checked (a bad one traps
//! the handler); map operations never allocate once the region exists.

use crate::host::{HostState, MAX_RECORD_BYTES_PER_RUN, MAX_RECORDS_PER_RUN};
use crate::sink::RecordKind;
use hostabi::env::HitEnv;
use hostabi::event::{EventKind, MAX_EVENT_BYTES};
use hostabi::manifest::MapDecl;
use hostabi::maps::{MapKind, Op};
use hostabi::{IMPORT_MODULE, ImportId, Status};
use mapstore::buckets::Linear;
use mapstore::{MapError, MapSpec, Store, StoreView};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use wasmtime::{Caller, Linker, bail};

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
}

impl Default for Services {
    fn default() -> Services {
        let (real, mono) = (clock(libc::CLOCK_REALTIME), clock(libc::CLOCK_MONOTONIC));
        Services {
            prog: 0,
            maps: Vec::new(),
            start_mono_ns: mono,
            mono_offset_ns: real.wrapping_sub(mono),
            child_pid: 0,
            special: false,
            comm: HashMap::new(),
            uid: HashMap::new(),
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
        if let Some(u) = self.uid.get(&pid) {
            return *u;
        }
        let u = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(-1);
        if self.uid.len() > 4096 {
            self.uid.clear();
        }
        self.uid.insert(pid, u);
        u
    }
}

fn st(s: Status) -> i32 {
    s as i32
}

fn map_status(e: MapError) -> i32 {
    match e {
        MapError::Full => st(Status::Full),
        _ => st(Status::BadArgument),
    }
}

/// `ptr..ptr+len` of guest memory, or a trap.
fn range(mem: &[u8], ptr: i32, len: i32, what: &str) -> wasmtime::Result<std::ops::Range<usize>> {
    let (p, n) = (ptr as u32 as usize, len as u32 as usize);
    match p.checked_add(n) {
        Some(end) if end <= mem.len() => Ok(p..end),
        _ => bail!(
            "{what}: guest range 0x{p:x}+{n} is outside the handler's memory ({} bytes)",
            mem.len()
        ),
    }
}

fn memory<E>(c: &Caller<'_, HostState<E>>) -> wasmtime::Result<wasmtime::Memory> {
    c.data()
        .memory
        .ok_or_else(|| wasmtime::format_err!("handler module exports no memory"))
}

/// One unit of fuel per 16 bytes a service import moves (as host.rs charges).
fn charge<E>(c: &mut Caller<'_, HostState<E>>, bytes: u64) {
    let cost = bytes / crate::host::BYTES_PER_FUEL;
    if cost > 0
        && let Ok(f) = c.get_fuel()
    {
        let _ = c.set_fuel(f.saturating_sub(cost));
    }
}

/// Defines the service imports in `linker`.
pub fn add_to_linker<E: HitEnv + 'static>(linker: &mut Linker<HostState<E>>) -> anyhow::Result<()> {
    let m = IMPORT_MODULE;
    let name = |id: ImportId| id.import().name;
    linker.func_wrap(
        m,
        name(ImportId::map_update),
        |mut c: Caller<'_, HostState<E>>,
         map: i32,
         kp: i32,
         kl: i32,
         op: i32,
         v: i64|
         -> wasmtime::Result<i32> {
            charge(&mut c, kl as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let k = range(data, kp, kl, "map_update key")?;
            let Some(op) = u8::try_from(op).ok().and_then(Op::from_u8) else {
                return Ok(st(Status::BadArgument));
            };
            let Some(r) = state.services.region() else {
                return Ok(st(Status::BadArgument));
            };
            Ok(
                match Store::new(&mut r.bytes).update(map as u32, &data[k], op, v) {
                    Ok(()) => st(Status::Ok),
                    Err(e) => map_status(e),
                },
            )
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_store),
        |mut c: Caller<'_, HostState<E>>,
         map: i32,
         kp: i32,
         kl: i32,
         vp: i32,
         vl: i32|
         -> wasmtime::Result<i32> {
            charge(&mut c, kl as u32 as u64 + vl as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let k = range(data, kp, kl, "map_store key")?;
            let v = range(data, vp, vl, "map_store value")?;
            let Some(r) = state.services.region() else {
                return Ok(st(Status::BadArgument));
            };
            Ok(
                match Store::new(&mut r.bytes).store(map as u32, &data[k], &data[v]) {
                    Ok(()) => st(Status::Ok),
                    Err(e) => map_status(e),
                },
            )
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_lookup),
        |mut c: Caller<'_, HostState<E>>,
         map: i32,
         kp: i32,
         kl: i32,
         dp: i32,
         dl: i32|
         -> wasmtime::Result<i32> {
            charge(&mut c, kl as u32 as u64 + dl as u32 as u64);
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let k = range(data, kp, kl, "map_lookup key")?;
            let d = range(data, dp, dl, "map_lookup destination")?;
            let Some(r) = state.services.region() else {
                return Ok(st(Status::BadArgument));
            };
            let key = data[k].to_vec();
            match StoreView::new(&r.bytes).lookup(map as u32, &key) {
                Ok(Some(v)) => {
                    let n = v.len().min(d.len());
                    data[d.start..d.start + n].copy_from_slice(&v[..n]);
                    Ok(v.len() as i32)
                }
                Ok(None) => Ok(st(Status::NotFound)),
                Err(e) => Ok(map_status(e)),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_delete),
        |mut c: Caller<'_, HostState<E>>, map: i32, kp: i32, kl: i32| -> wasmtime::Result<i32> {
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let k = range(data, kp, kl, "map_delete key")?;
            let Some(r) = state.services.region() else {
                return Ok(st(Status::BadArgument));
            };
            Ok(
                match Store::new(&mut r.bytes).delete(map as u32, &data[k]) {
                    Ok(true) => st(Status::Ok),
                    Ok(false) => st(Status::NotFound),
                    Err(e) => map_status(e),
                },
            )
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_clear),
        |mut c: Caller<'_, HostState<E>>, map: i32| -> i32 {
            let Some(r) = c.data_mut().services.region() else {
                return st(Status::BadArgument);
            };
            match Store::new(&mut r.bytes).clear(map as u32) {
                Ok(()) => st(Status::Ok),
                Err(e) => map_status(e),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::map_zero),
        |mut c: Caller<'_, HostState<E>>, map: i32| -> i32 {
            let Some(r) = c.data_mut().services.region() else {
                return st(Status::BadArgument);
            };
            match Store::new(&mut r.bytes).zero(map as u32) {
                Ok(()) => st(Status::Ok),
                Err(e) => map_status(e),
            }
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::emit_event),
        |mut c: Caller<'_, HostState<E>>,
         kind: i32,
         id: i32,
         dp: i32,
         dl: i32|
         -> wasmtime::Result<i32> {
            let Some(kind) = EventKind::from_code(kind) else {
                return Ok(st(Status::BadArgument));
            };
            if dl as u32 > MAX_EVENT_BYTES || !(0..=0xFFFF).contains(&id) {
                return Ok(st(Status::TooLarge));
            }
            charge(&mut c, dl as u32 as u64);
            let sink = &c.data().sink;
            if sink.records.len() >= MAX_RECORDS_PER_RUN
                || sink.bytes.len() + dl as u32 as usize > MAX_RECORD_BYTES_PER_RUN
            {
                return Ok(st(Status::TooLarge));
            }
            let mem = memory(&c)?;
            let (data, state) = mem.data_and_store_mut(&mut c);
            let d = range(data, dp, dl, "emit_event data")?;
            let mut bytes = data[d].to_vec();
            if kind == EventKind::PrintMap {
                // The map as it is now: later operations of the same run
                // (`clear`, `zero`) must not change what this print shows.
                snapshot_map(
                    &state.services,
                    id as u32,
                    &mut bytes,
                    MAX_RECORD_BYTES_PER_RUN - state.sink.bytes.len(),
                );
            }
            state
                .sink
                .push(RecordKind::Event, kind as u16, id as u16, &bytes, &[]);
            Ok(st(Status::Ok))
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::clock_ns),
        |c: Caller<'_, HostState<E>>, id: i32| -> wasmtime::Result<i64> {
            let s = &c.data().services;
            let real = if s.special {
                clock(libc::CLOCK_REALTIME)
            } else {
                c.data().env.now_ns()
            };
            let mono = real.wrapping_sub(s.mono_offset_ns);
            Ok(match id {
                hostabi::imports::clock::MONOTONIC => mono as i64,
                hostabi::imports::clock::SINCE_START => mono.saturating_sub(s.start_mono_ns) as i64,
                hostabi::imports::clock::REALTIME => real as i64,
                _ => bail!("clock_ns: no clock {id}"),
            })
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::current_uid),
        |mut c: Caller<'_, HostState<E>>| -> i64 {
            let pid = if c.data().services.special {
                std::process::id() as u64
            } else {
                c.data().env.pid()
            };
            c.data_mut().services.uid(pid)
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::current_comm),
        |mut c: Caller<'_, HostState<E>>, dp: i32, dl: i32| -> wasmtime::Result<i32> {
            let (pid, tid) = if c.data().services.special {
                let p = std::process::id() as u64;
                (p, p)
            } else {
                (c.data().env.pid(), c.data().env.tid())
            };
            let (b, n) = c.data_mut().services.comm(pid, tid);
            let mem = memory(&c)?;
            let data = mem.data_mut(&mut c);
            let d = range(data, dp, dl, "current_comm")?;
            let n = n.min(d.len());
            data[d.start..d.start + n].copy_from_slice(&b[..n]);
            Ok(n as i32)
        },
    )?;
    linker.func_wrap(
        m,
        name(ImportId::child_pid),
        |c: Caller<'_, HostState<E>>| c.data().services.child_pid as i64,
    )?;
    Ok(())
}

/// Appends a snapshot of map `map` of the running program to a PRINT_MAP
/// event's data (after its 16 bytes of top and div): u32 key length, u32
/// value length, then `(key, value)` pairs. Left out when it would exceed
/// `room` bytes (the printer then reads the map as it is when printing).
fn snapshot_map(s: &Services, map: u32, out: &mut Vec<u8>, room: usize) {
    let Some(Some(r)) = s.maps.get(s.prog) else {
        return;
    };
    let view = r.view();
    let (Ok((k, v)), Ok(entries)) = (view.sizes(map), view.entries(map)) else {
        return;
    };
    let len = view.stats(map).map(|st| st.len as usize).unwrap_or(0);
    if 24 + len * (k + v) as usize > room {
        return;
    }
    out.resize(16, 0);
    out.extend_from_slice(&k.to_le_bytes());
    out.extend_from_slice(&v.to_le_bytes());
    for (key, val) in entries {
        out.extend_from_slice(key);
        out.extend_from_slice(val);
    }
}

/// Whether `kind` takes 8-byte integer updates (for the printers).
pub fn is_scalar(kind: MapKind) -> bool {
    matches!(
        kind,
        MapKind::Count | MapKind::Sum | MapKind::Min | MapKind::Max
    )
}
