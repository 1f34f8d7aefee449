//! The imports that reach the traced process's memory: `read_mem`,
//! `read_str`, `write_mem`, `check_access`.

use crate::HostData;
use crate::guest::{charge_access, max_len, memory, range, st};
use hostabi::Status;
use hostabi::env::HitEnv as _;
use wasmtime::Caller;

pub(crate) fn read_mem<T: HostData>(
    mut c: Caller<'_, T>,
    addr: i64,
    dst: i32,
    len: i32,
) -> wasmtime::Result<i32> {
    max_len(len, "read_mem")?;
    charge_access(&mut c, len as u32 as u64);
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let r = range(data, dst, len, "read_mem")?;
    Ok(state.env_mut().read_mem(addr as u64, &mut data[r]) as i32)
}

pub(crate) fn read_str<T: HostData>(
    mut c: Caller<'_, T>,
    addr: i64,
    dst: i32,
    max: i32,
) -> wasmtime::Result<i32> {
    max_len(max, "read_str")?;
    charge_access(&mut c, max as u32 as u64);
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let r = range(data, dst, max, "read_str")?;
    Ok(match state.env_mut().read_str(addr as u64, &mut data[r]) {
        Ok(n) => n as i32,
        Err(i) => -(i as i32) - 1,
    })
}

pub(crate) fn write_mem<T: HostData>(
    mut c: Caller<'_, T>,
    addr: i64,
    src: i32,
    len: i32,
) -> wasmtime::Result<i32> {
    max_len(len, "write_mem")?;
    charge_access(&mut c, len as u32 as u64);
    if !c.data().writes_allowed() {
        return Ok(st(Status::NotPermitted));
    }
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let r = range(data, src, len, "write_mem")?;
    Ok(st(state.env_mut().write_mem(addr as u64, &data[r])))
}

pub(crate) fn check_access<T: HostData>(mut c: Caller<'_, T>, addr: i64, access: i32) -> i32 {
    let write = match access {
        1 => false,
        3 => true,
        _ => return st(Status::BadArgument),
    };
    charge_access(&mut c, 0);
    if c.data_mut().env_mut().check_access(addr as u64, write) {
        st(Status::Ok)
    } else {
        st(Status::Fault)
    }
}
