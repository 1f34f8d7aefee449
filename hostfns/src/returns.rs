//! The imports of return probes and USDT sites (`entry_reg`, `elapsed_ns`,
//! `usdt_arg`): every i64 is a possible value, so a call the host cannot
//! answer traps (spec §6.5; `docs/hostabi.md`).

use crate::HostData;
use hostabi::env::HitEnv as _;
use hostabi::regs;
use wasmtime::{Caller, bail};

pub(crate) fn entry_reg<T: HostData>(mut c: Caller<'_, T>, reg: i32) -> wasmtime::Result<i64> {
    let Some(id) = u16::try_from(reg)
        .ok()
        .filter(|id| regs::entry_index(*id).is_some())
    else {
        bail!("entry_reg: register id 0x{reg:x} is not rdi, rsi, rdx, rcx, r8, r9 or rsp");
    };
    match c.data_mut().env_mut().entry_reg(id) {
        Some(v) => Ok(v as i64),
        None => bail!("entry_reg: this hit is not the return of a return probe"),
    }
}

pub(crate) fn elapsed_ns<T: HostData>(c: Caller<'_, T>) -> wasmtime::Result<i64> {
    match c.data().env().elapsed_ns() {
        Some(v) => Ok(v as i64),
        None => bail!("elapsed_ns: this hit is not the return of a return probe"),
    }
}

pub(crate) fn usdt_arg<T: HostData>(mut c: Caller<'_, T>, index: i32) -> wasmtime::Result<i64> {
    let args = c.data().usdt_args();
    if args.is_empty() {
        bail!("usdt_arg: this probe is not a USDT site with arguments");
    }
    let Some(a) = args.get(index as u32 as usize).copied() else {
        bail!(
            "usdt_arg: index {} but the USDT site has {} argument(s)",
            index as u32,
            args.len()
        );
    };
    Ok(a.value(c.data_mut().env_mut()).unwrap_or(0) as i64)
}
