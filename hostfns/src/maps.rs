//! The map imports: `map_update`, `map_store`, `map_lookup`, `map_entry`,
//! `map_delete`, `map_clear`, `map_zero`, on the running program's map
//! region (`mapstore`).

use crate::guest::{charge, memory, range, st};
use crate::{HostData, Services as _};
use hostabi::Status;
use hostabi::maps::Op;
use mapstore::{MapError, Store, StoreView};
use wasmtime::Caller;

fn map_status(e: MapError) -> i32 {
    match e {
        MapError::Full => st(Status::Full),
        _ => st(Status::BadArgument),
    }
}

pub(crate) fn map_update<T: HostData>(
    mut c: Caller<'_, T>,
    map: i32,
    kp: i32,
    kl: i32,
    op: i32,
    v: i64,
) -> wasmtime::Result<i32> {
    charge(&mut c, kl as u32 as u64);
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let k = range(data, kp, kl, "map_update key")?;
    let Some(op) = u8::try_from(op).ok().and_then(Op::from_u8) else {
        return Ok(st(Status::BadArgument));
    };
    let Some(r) = state.services_mut().map_region() else {
        return Ok(st(Status::BadArgument));
    };
    Ok(match Store::new(r).update(map as u32, &data[k], op, v) {
        Ok(()) => st(Status::Ok),
        Err(e) => map_status(e),
    })
}

pub(crate) fn map_store<T: HostData>(
    mut c: Caller<'_, T>,
    map: i32,
    kp: i32,
    kl: i32,
    vp: i32,
    vl: i32,
) -> wasmtime::Result<i32> {
    charge(&mut c, kl as u32 as u64 + vl as u32 as u64);
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let k = range(data, kp, kl, "map_store key")?;
    let v = range(data, vp, vl, "map_store value")?;
    let Some(r) = state.services_mut().map_region() else {
        return Ok(st(Status::BadArgument));
    };
    Ok(match Store::new(r).store(map as u32, &data[k], &data[v]) {
        Ok(()) => st(Status::Ok),
        Err(e) => map_status(e),
    })
}

pub(crate) fn map_lookup<T: HostData>(
    mut c: Caller<'_, T>,
    map: i32,
    kp: i32,
    kl: i32,
    dp: i32,
    dl: i32,
) -> wasmtime::Result<i32> {
    charge(&mut c, kl as u32 as u64 + dl as u32 as u64);
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let k = range(data, kp, kl, "map_lookup key")?;
    let d = range(data, dp, dl, "map_lookup destination")?;
    let Some(r) = state.services().map_view() else {
        return Ok(st(Status::BadArgument));
    };
    // The value is in the region, the key and destination in guest
    // memory: look up first (the key borrowed), then copy.
    match StoreView::new(r).lookup(map as u32, &data[k]) {
        Ok(Some(v)) => {
            let n = v.len().min(d.len());
            data[d.start..d.start + n].copy_from_slice(&v[..n]);
            Ok(v.len() as i32)
        }
        Ok(None) => Ok(st(Status::NotFound)),
        Err(e) => Ok(map_status(e)),
    }
}

pub(crate) fn map_entry<T: HostData>(
    mut c: Caller<'_, T>,
    map: i32,
    cursor: i64,
    kp: i32,
    kl: i32,
    vp: i32,
    vl: i32,
) -> wasmtime::Result<i32> {
    charge(&mut c, kl as u32 as u64 + vl as u32 as u64);
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let k = range(data, kp, kl, "map_entry key")?;
    let v = range(data, vp, vl, "map_entry value")?;
    let Some(r) = state.services().map_view() else {
        return Ok(st(Status::BadArgument));
    };
    let Ok(from) = u32::try_from(cursor) else {
        return Ok(st(Status::NotFound));
    };
    match StoreView::new(r).entry_from(map as u32, from) {
        Ok(Some((slot, key, val))) => {
            let n = key.len().min(k.len());
            data[k.start..k.start + n].copy_from_slice(&key[..n]);
            let n = val.len().min(v.len());
            data[v.start..v.start + n].copy_from_slice(&val[..n]);
            Ok(slot.min(i32::MAX as u32) as i32)
        }
        Ok(None) => Ok(st(Status::NotFound)),
        Err(e) => Ok(map_status(e)),
    }
}

pub(crate) fn map_delete<T: HostData>(
    mut c: Caller<'_, T>,
    map: i32,
    kp: i32,
    kl: i32,
) -> wasmtime::Result<i32> {
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let k = range(data, kp, kl, "map_delete key")?;
    let Some(r) = state.services_mut().map_region() else {
        return Ok(st(Status::BadArgument));
    };
    Ok(match Store::new(r).delete(map as u32, &data[k]) {
        Ok(true) => st(Status::Ok),
        Ok(false) => st(Status::NotFound),
        Err(e) => map_status(e),
    })
}

pub(crate) fn map_clear<T: HostData>(mut c: Caller<'_, T>, map: i32) -> i32 {
    let Some(r) = c.data_mut().services_mut().map_region() else {
        return st(Status::BadArgument);
    };
    match Store::new(r).clear(map as u32) {
        Ok(()) => st(Status::Ok),
        Err(e) => map_status(e),
    }
}

pub(crate) fn map_zero<T: HostData>(mut c: Caller<'_, T>, map: i32) -> i32 {
    let Some(r) = c.data_mut().services_mut().map_region() else {
        return st(Status::BadArgument);
    };
    match Store::new(r).zero(map as u32) {
        Ok(()) => st(Status::Ok),
        Err(e) => map_status(e),
    }
}
