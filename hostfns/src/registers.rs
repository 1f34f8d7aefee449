//! The register imports (`read_reg`, `write_reg`) and the table they look
//! register ids up in.

use crate::HostData;
use crate::guest::st;
use hostabi::env::HitEnv as _;
use hostabi::{Status, regs};
use wasmtime::{Caller, bail};

/// Highest register id + 1 of [`regs::REGS`].
const REG_ID_LIMIT: usize = 0x118;

/// Index into [`regs::REGS`] of each register id (`u8::MAX`: no register):
/// `read_reg` is on the hot path of handlers that log registers, and
/// `regs::by_id` is a linear scan of the table.
static REG_INDEX: [u8; REG_ID_LIMIT] = {
    let mut t = [u8::MAX; REG_ID_LIMIT];
    let mut i = 0;
    while i < regs::REGS.len() {
        t[regs::REGS[i].id as usize] = i as u8;
        i += 1;
    }
    t
};

/// `regs::by_id`, by table.
#[inline]
pub fn reg_by_id(id: u16) -> Option<&'static regs::RegInfo> {
    match REG_INDEX.get(id as usize) {
        Some(&i) if i != u8::MAX => Some(&regs::REGS[i as usize]),
        _ => None,
    }
}

pub(crate) fn read_reg<T: HostData>(
    mut c: Caller<'_, T>,
    reg: i32,
    part: i32,
) -> wasmtime::Result<i64> {
    let info = u16::try_from(reg).ok().and_then(reg_by_id);
    match info {
        Some(r) if r.id != regs::CPUID && (0..r.parts() as i32).contains(&part) => {
            // `HitEnv::read_reg_any` without its second table scan:
            // the same base register, the same alias masking.
            let v = c.data_mut().env_mut().read_reg(r.base_id(), part as u8);
            let v = if r.is_alias() {
                v.map(|v| v & 0xFFFF_FFFF)
            } else {
                v
            };
            Ok(v.unwrap_or(0) as i64)
        }
        _ => bail!("read_reg: no register id 0x{reg:x} part {part}"),
    }
}

pub(crate) fn write_reg<T: HostData>(mut c: Caller<'_, T>, reg: i32, value: i64) -> i32 {
    if !c.data().writes_allowed() {
        return st(Status::NotPermitted);
    }
    match u16::try_from(reg) {
        Ok(r) => st(c.data_mut().env_mut().write_reg_any(r, value as u64)),
        Err(_) => st(Status::BadArgument),
    }
}
