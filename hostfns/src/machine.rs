//! The imports about the machine rather than the process: `cpuid`, the
//! virtual I/O ports (`io_in`, `io_out`) and the `callk` hook.

use crate::HostData;
use crate::guest::{memory, range, st};
use hostabi::Status;
use hostabi::env::HitEnv as _;
use wasmtime::{Caller, bail};

pub(crate) fn cpuid<T: HostData>(
    mut c: Caller<'_, T>,
    leaf: i32,
    sub: i32,
    index: i32,
) -> wasmtime::Result<i64> {
    let v = c.data_mut().env_mut().cpuid(leaf as u32, sub as u32);
    match v.get(index as u32 as usize) {
        Some(x) => Ok(*x as i64),
        None => bail!("cpuid: index {index} is not 0..=3"),
    }
}

pub(crate) fn io_in<T: HostData>(
    mut c: Caller<'_, T>,
    port: i64,
    width: i32,
    dst: i32,
) -> wasmtime::Result<i32> {
    let mask = match width {
        1 => 0xFF,
        2 => 0xFFFF,
        4 => 0xFFFF_FFFF,
        _ => return Ok(st(Status::BadArgument)),
    };
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let r = range(data, dst, 8, "io_in")?;
    match state.env_mut().io_in(port as u64, width as u8) {
        Some(v) => {
            data[r].copy_from_slice(&(v & mask).to_le_bytes());
            Ok(st(Status::Ok))
        }
        None => Ok(st(Status::NoDevice)),
    }
}

pub(crate) fn io_out<T: HostData>(mut c: Caller<'_, T>, port: i64, width: i32, v: i64) -> i32 {
    let mask: u64 = match width {
        1 => 0xFF,
        2 => 0xFFFF,
        4 => 0xFFFF_FFFF,
        _ => return st(Status::BadArgument),
    };
    if c.data_mut()
        .env_mut()
        .io_out(port as u64, width as u8, v as u64 & mask)
    {
        st(Status::Ok)
    } else {
        st(Status::NoDevice)
    }
}

pub(crate) fn callk<T: HostData>(mut c: Caller<'_, T>) {
    c.data_mut().env_mut().callk();
}
