//! The platform API wasmtime 48 expects from a `no_std` embedder with
//! `custom-virtual-memory` (`crates/wasmtime/src/runtime/vm/sys/custom/capi.rs`):
//! anonymous mappings and their protections, the page size, and memory
//! images (declined: linear memories are initialised by copying). TLS is in
//! `thread.rs`, the lock hooks of `custom-sync-primitives` in `sync.rs`.
//! No `wasmtime_init_traps`: the agent builds without `custom-native-signals`,
//! so wasmtime installs no signal handler and checks bounds in code.

use crate::sys;

const WASMTIME_PROT_READ: u32 = 1;
const WASMTIME_PROT_WRITE: u32 = 2;
const WASMTIME_PROT_EXEC: u32 = 4;

fn prot(p: u32) -> usize {
    let mut r = 0;
    if p & WASMTIME_PROT_READ != 0 {
        r |= sys::PROT_READ;
    }
    if p & WASMTIME_PROT_WRITE != 0 {
        r |= sys::PROT_WRITE;
    }
    if p & WASMTIME_PROT_EXEC != 0 {
        r |= sys::PROT_EXEC;
    }
    r
}

/// Inaccessible reservations are not charged against the commit limit.
fn flags(p: u32) -> usize {
    let f = sys::MAP_PRIVATE | sys::MAP_ANONYMOUS;
    if p == 0 { f | sys::MAP_NORESERVE } else { f }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_mmap_new(size: usize, prot_flags: u32, ret: &mut *mut u8) -> i32 {
    match sys::mmap(0, size, prot(prot_flags), flags(prot_flags)) {
        Ok(p) => {
            *ret = p;
            0
        }
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_mmap_remap(addr: *mut u8, size: usize, prot_flags: u32) -> i32 {
    match sys::mmap(
        addr as usize,
        size,
        prot(prot_flags),
        flags(prot_flags) | sys::MAP_FIXED,
    ) {
        Ok(_) => 0,
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_munmap(ptr: *mut u8, size: usize) -> i32 {
    // SAFETY: wasmtime unmaps only what it mapped through us.
    unsafe { sys::munmap(ptr, size) }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_mprotect(ptr: *mut u8, size: usize, prot_flags: u32) -> i32 {
    // SAFETY: wasmtime changes only what it mapped through us.
    unsafe { sys::mprotect(ptr, size, prot(prot_flags)) }
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_page_size() -> usize {
    4096
}

/// Opaque memory image type of the C API (never created).
#[repr(C)]
pub struct WasmtimeMemoryImage {
    _private: [u8; 0],
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_memory_image_new(
    _ptr: *const u8,
    _len: usize,
    ret: &mut *mut WasmtimeMemoryImage,
) -> i32 {
    // "No image, no failure": wasmtime copies data segments instead.
    *ret = core::ptr::null_mut();
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_memory_image_map_at(
    _image: *mut WasmtimeMemoryImage,
    _addr: *mut u8,
    _len: usize,
) -> i32 {
    // Unreachable: no image is ever created.
    sys::ENOSYS
}

#[unsafe(no_mangle)]
pub extern "C" fn wasmtime_memory_image_free(_image: *mut WasmtimeMemoryImage) {}
