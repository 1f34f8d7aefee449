//! What every import uses: bounds checks of guest pointers, the guest's
//! memory, the fuel charged for the work a call does, status codes.

use crate::{BYTES_PER_FUEL, HostData, MEMORY_CALL_FUEL};
use core::ops::Range;
use hostabi::Status;
use hostabi::imports::MAX_MEM_ACCESS_BYTES;
use wasmtime::{Caller, Memory};
use wasmtime::{bail, format_err};

/// Bounds-checks `ptr..ptr+len` in guest memory.
pub(crate) fn range(mem: &[u8], ptr: i32, len: i32, what: &str) -> wasmtime::Result<Range<usize>> {
    let (p, n) = (ptr as u32 as usize, len as u32 as usize);
    match p.checked_add(n) {
        Some(end) if end <= mem.len() => Ok(p..end),
        _ => bail!(
            "{what}: guest range 0x{p:x}+{n} is outside the handler's memory ({} bytes)",
            mem.len()
        ),
    }
}

pub(crate) fn memory<T: HostData>(caller: &Caller<'_, T>) -> wasmtime::Result<Memory> {
    caller
        .data()
        .memory()
        .ok_or_else(|| format_err!("handler module exports no memory"))
}

pub(crate) fn max_len(len: i32, what: &str) -> wasmtime::Result<()> {
    if len as u32 > MAX_MEM_ACCESS_BYTES {
        bail!(
            "{what}: length {} exceeds the limit of {MAX_MEM_ACCESS_BYTES} bytes",
            len as u32
        );
    }
    Ok(())
}

pub(crate) fn st(s: Status) -> i32 {
    s as i32
}

/// Charges fuel for `bytes` moved by a host import; a run whose fuel drops
/// to zero traps with `OutOfFuel` at its next operator.
pub(crate) fn charge<T: HostData>(c: &mut Caller<'_, T>, bytes: u64) {
    let cost = bytes / BYTES_PER_FUEL;
    if cost > 0
        && let Ok(fuel) = c.get_fuel()
    {
        let _ = c.set_fuel(fuel.saturating_sub(cost));
    }
}

/// Charges fuel for a call reaching the traced process's memory that moves
/// `bytes` ([`MEMORY_CALL_FUEL`] plus the bytes).
pub(crate) fn charge_access<T: HostData>(c: &mut Caller<'_, T>, bytes: u64) {
    charge(c, bytes + MEMORY_CALL_FUEL * BYTES_PER_FUEL);
}
