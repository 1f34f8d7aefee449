//! The global-variable imports: `gvar_count`, `gvar_get`, `gvar_set`.

use crate::HostData;
use hostabi::env::HitEnv as _;
use wasmtime::{Caller, bail};

pub(crate) fn gvar_count<T: HostData>(mut c: Caller<'_, T>) -> i64 {
    c.data_mut().env_mut().gvars().len() as i64
}

pub(crate) fn gvar_get<T: HostData>(mut c: Caller<'_, T>, i: i64) -> wasmtime::Result<i64> {
    let g = c.data_mut().env_mut().gvars();
    match g.get(i as u64 as usize) {
        Some(v) if (i as u64) < g.len() as u64 => Ok(*v as i64),
        _ => bail!("gvar_get: index {} >= gvar_count {}", i as u64, g.len()),
    }
}

pub(crate) fn gvar_set<T: HostData>(mut c: Caller<'_, T>, i: i64, v: i64) -> wasmtime::Result<()> {
    let g = c.data_mut().env_mut().gvars();
    let n = g.len();
    match g.get_mut(i as u64 as usize) {
        Some(slot) if (i as u64) < n as u64 => {
            *slot = v as u64;
            Ok(())
        }
        _ => bail!("gvar_set: index {} >= gvar_count {n}", i as u64),
    }
}
