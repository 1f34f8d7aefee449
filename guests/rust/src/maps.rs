//! Maps, output events and run facts: safe wrappers of the `map_*`,
//! `emit_event`, `clock_ns`, `current_uid`, `current_comm` and `child_pid`
//! imports. Maps are declared in the manifest (`map NAME KIND key=... `
//! lines, see `docs/hostabi.md`); a map is named by its index there.

use crate::{Status, raw};

/// Aggregates `value` into `map[key]` with `op` (a [`crate::map_op`] constant).
/// `Err(Status::Full)` when the map was full (the update is counted and
/// reported by wprobe at exit).
pub fn map_update(map: u32, key: &[u8], op: i32, value: i64) -> Result<(), Status> {
    // SAFETY: the host reads `key.len()` bytes at `key`.
    Status::check(unsafe {
        raw::map_update(map as i32, key.as_ptr() as i32, key.len() as i32, op, value)
    })
}

/// Sets `map[key] = value` in an `assign` map.
pub fn map_store(map: u32, key: &[u8], value: &[u8]) -> Result<(), Status> {
    // SAFETY: the host reads the two ranges.
    Status::check(unsafe {
        raw::map_store(
            map as i32,
            key.as_ptr() as i32,
            key.len() as i32,
            value.as_ptr() as i32,
            value.len() as i32,
        )
    })
}

/// Copies the value of `map[key]` into `dst`; returns the value's size,
/// `Err(Status::NotFound)` when the key is absent.
pub fn map_lookup(map: u32, key: &[u8], dst: &mut [u8]) -> Result<usize, Status> {
    // SAFETY: the host reads `key` and writes at most `dst.len()` bytes.
    let r = unsafe {
        raw::map_lookup(
            map as i32,
            key.as_ptr() as i32,
            key.len() as i32,
            dst.as_mut_ptr() as i32,
            dst.len() as i32,
        )
    };
    if r >= 0 {
        Ok(r as usize)
    } else {
        Err(Status::check(r).err().unwrap_or(Status::BadArgument))
    }
}

/// The first entry of `map` at or after `cursor` (start at 0): copies its
/// key into `key` and its value into `val` and returns its position (pass
/// position + 1 next); `Err(Status::NotFound)` past the last entry.
pub fn map_entry(map: u32, cursor: u64, key: &mut [u8], val: &mut [u8]) -> Result<u64, Status> {
    // SAFETY: the host writes at most `key.len()` and `val.len()` bytes.
    let r = unsafe {
        raw::map_entry(
            map as i32,
            cursor as i64,
            key.as_mut_ptr() as i32,
            key.len() as i32,
            val.as_mut_ptr() as i32,
            val.len() as i32,
        )
    };
    if r >= 0 {
        Ok(r as u64)
    } else {
        Err(Status::check(r).err().unwrap_or(Status::BadArgument))
    }
}

/// Removes `map[key]`.
pub fn map_delete(map: u32, key: &[u8]) -> Result<(), Status> {
    // SAFETY: the host reads `key.len()` bytes.
    Status::check(unsafe { raw::map_delete(map as i32, key.as_ptr() as i32, key.len() as i32) })
}

/// Removes every key of `map`.
pub fn map_clear(map: u32) -> Result<(), Status> {
    // SAFETY: no pointers.
    Status::check(unsafe { raw::map_clear(map as i32) })
}

/// Zeroes every value of `map`, keeping the keys.
pub fn map_zero(map: u32) -> Result<(), Status> {
    // SAFETY: no pointers.
    Status::check(unsafe { raw::map_zero(map as i32) })
}

/// Emits an output event (`kind` an [`crate::event_kind`] constant, `id`
/// an entry of the module's `wprobe.events` section, `data` its arguments).
pub fn emit_event(kind: i32, id: u32, data: &[u8]) -> Result<(), Status> {
    // SAFETY: the host reads `data.len()` bytes.
    Status::check(unsafe {
        raw::emit_event(kind, id as i32, data.as_ptr() as i32, data.len() as i32)
    })
}

/// A clock at the hit in nanoseconds (`clock` a [`crate::clock`] constant).
pub fn clock_ns(clock: i32) -> u64 {
    // SAFETY: no pointers; an unknown clock traps.
    unsafe { raw::clock_ns(clock) as u64 }
}

/// Real user id of the hit process.
pub fn uid() -> i64 {
    // SAFETY: no pointers.
    unsafe { raw::current_uid() }
}

/// Real group id of the hit thread.
pub fn gid() -> i64 {
    // SAFETY: no pointers.
    unsafe { raw::current_gid() }
}

/// NUMA node of the CPU the hit thread last ran on.
pub fn numa_node() -> i64 {
    // SAFETY: no pointers.
    unsafe { raw::current_numa_node() }
}

/// The hit thread's name, copied into `buf`; returns the bytes written.
pub fn comm(buf: &mut [u8]) -> &[u8] {
    // SAFETY: the host writes at most `buf.len()` bytes.
    let n = unsafe { raw::current_comm(buf.as_mut_ptr() as i32, buf.len() as i32) };
    &buf[..(n.max(0) as usize).min(buf.len())]
}

/// Process id of the command wprobe launched (0 when it attached).
pub fn child_pid() -> u64 {
    // SAFETY: no pointers.
    unsafe { raw::child_pid() as u64 }
}
