//! Write wprobe probe handlers in Rust.
//!
//! A handler module is a `cdylib` built for `wasm32-unknown-unknown`. It
//! declares its probe points with [`manifest!`] (which emits the
//! `wprobe.manifest` custom section), defines one handler per probe with
//! [`handler!`], and talks to the traced thread through the safe functions
//! of this crate: registers ([`read_reg`], [`write_reg`]), memory
//! ([`read_mem`], [`read_u64`], [`read_str`], [`write_mem`]), identity
//! ([`tid`], [`pid`], [`cpu`]), the run's global variables ([`gvar_get`],
//! [`gvar_set`]), records ([`Log`], [`emit_log`]), and, in the handler of a
//! return probe (`return yes;`), the entry of the returning call
//! ([`entry_arg`], [`entry_rsp`], [`elapsed_ns`]), and, in the handler of
//! a USDT site (`usdt_args`), the probe's arguments ([`usdt_arg`]).
//!
//! ```ignore
//! #![no_std]
//! use wprobe_guest::{Log, Outcome, handler, manifest, read_reg, reg};
//!
//! manifest! {
//!     module "probe_target";
//!     major 1;
//!     probe on_call;
//!         location "offset target_fn";
//!         opcode 0x55;
//! }
//!
//! handler!(fn on_call() -> Outcome {
//!     let mut log = Log::<64, 4>::new();
//!     log.words(&[read_reg(reg::RDI)]);
//!     let _ = log.emit(1, 0);
//!     Outcome::Exit
//! });
//! ```
//!
//! Everything ABI-specific (the raw imports in [`raw`], [`Status`],
//! [`Outcome`], the register ids in [`reg`], limits) lives in `src/abi.rs`,
//! generated from wprobe's `hostabi` crate and checked in (a test of the
//! wprobe repository fails when it is stale), so this crate has no
//! dependencies and builds outside the repository. [`ABI_VERSION`] names the
//! ABI it speaks; wprobe refuses modules built for another one. No
//! allocator is needed; nothing here panics.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![no_std]
#![deny(missing_docs)]

mod abi;
pub use abi::*;

mod maps;
pub use maps::{
    child_pid, clock_ns, comm, emit_event, map_clear, map_delete, map_lookup, map_store,
    map_update, map_zero, uid,
};

/// A register id of the host ABI (see [`reg`] for the named ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg(pub u16);

/// Value of a register of the hit thread (the low 64 bits; a 32-bit alias
/// such as [`reg::EAX`] reads zero-extended). Earlier [`write_reg`] calls
/// of this hit are visible.
pub fn read_reg(r: Reg) -> u64 {
    read_reg_part(r, 0)
}

/// Part `part` (0 low, 1 high) of a register; the high part exists only for
/// 80- and 128-bit registers (an unknown part traps the handler).
pub fn read_reg_part(r: Reg, part: u8) -> u64 {
    // SAFETY: no pointers; the host checks the id and part.
    unsafe { raw::read_reg(r.0 as i32, part as i32) as u64 }
}

/// Sets a register of the hit thread, applied when the handler returns.
pub fn write_reg(r: Reg, value: u64) -> Result<(), Status> {
    // SAFETY: no pointers.
    Status::check(unsafe { raw::write_reg(r.0 as i32, value as i64) })
}

/// Copies memory of the traced process at `addr` into `buf`; returns the
/// number of leading bytes that could be read (`buf.len()` when all were).
/// At most [`MAX_MEM_ACCESS_BYTES`] are read per call.
pub fn read_mem(addr: u64, buf: &mut [u8]) -> usize {
    let n = buf.len().min(MAX_MEM_ACCESS_BYTES);
    // SAFETY: the host writes at most `n` bytes at `buf`, which we own mutably.
    unsafe { raw::read_mem(addr as i64, buf.as_mut_ptr() as i32, n as i32) as u32 as usize }
}

/// The little-endian 8-byte word at `addr`, if all 8 bytes are readable.
pub fn read_u64(addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    (read_mem(addr, &mut b) == 8).then_some(u64::from_le_bytes(b))
}

/// Copies the NUL-terminated string at `addr` into `buf` (at most
/// `buf.len()` bytes examined). `Ok(bytes)` without the NUL, or `Err(i)` when
/// byte `i` could not be read.
pub fn read_str(addr: u64, buf: &mut [u8]) -> Result<&[u8], usize> {
    let n = buf.len().min(MAX_MEM_ACCESS_BYTES);
    // SAFETY: the host writes at most `n` bytes at `buf`.
    let r = unsafe { raw::read_str(addr as i64, buf.as_mut_ptr() as i32, n as i32) };
    if r >= 0 {
        Ok(&buf[..(r as usize).min(n)])
    } else {
        Err((-(r as i64) - 1) as usize)
    }
}

/// Writes `data` to the traced process at `addr`, all or nothing.
pub fn write_mem(addr: u64, data: &[u8]) -> Result<(), Status> {
    if data.len() > MAX_MEM_ACCESS_BYTES {
        return Err(Status::TooLarge);
    }
    // SAFETY: the host reads `data.len()` bytes at `data`.
    Status::check(unsafe { raw::write_mem(addr as i64, data.as_ptr() as i32, data.len() as i32) })
}

/// Whether the byte at `addr` is readable (and writable, with `write`) by the process.
pub fn check_access(addr: u64, write: bool) -> bool {
    // SAFETY: no pointers.
    unsafe { raw::check_access(addr as i64, if write { 3 } else { 1 }) == 0 }
}

/// Thread id of the hit thread.
pub fn tid() -> u64 {
    // SAFETY: no arguments.
    unsafe { raw::current_tid() as u64 }
}

/// Process id of the hit thread.
pub fn pid() -> u64 {
    // SAFETY: no arguments.
    unsafe { raw::current_pid() as u64 }
}

/// CPU the hit thread last ran on.
pub fn cpu() -> u64 {
    // SAFETY: no arguments.
    unsafe { raw::current_cpu() as u64 }
}

/// The hit thread's thread pointer (`fs_base`), 0 if unavailable.
pub fn thread_pointer() -> u64 {
    // SAFETY: no arguments.
    unsafe { raw::thread_pointer() as u64 }
}

/// Load bias of the probed module in the hit process (0 for non-PIE executables).
pub fn load_bias() -> u64 {
    // SAFETY: no arguments.
    unsafe { raw::load_bias() as u64 }
}

/// Wall-clock time of the hit, nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    // SAFETY: no arguments.
    unsafe { raw::now_ns() as u64 }
}

/// CPUID with EAX = `leaf`, ECX = `subleaf`: `[eax, ebx, ecx, edx]`.
pub fn cpuid(leaf: u32, subleaf: u32) -> [u32; 4] {
    // SAFETY: no pointers; indexes 0..=3 are valid.
    core::array::from_fn(|i| unsafe { raw::cpuid(leaf as i32, subleaf as i32, i as i32) as u32 })
}

/// Number of global variables of the run (the largest `gvars` of its programs).
pub fn gvar_count() -> u64 {
    // SAFETY: no arguments.
    unsafe { raw::gvar_count() as u64 }
}

/// Global variable `index`, or `None` beyond [`gvar_count`].
pub fn gvar_get(index: u64) -> Option<u64> {
    // SAFETY: the index is checked first, so the import does not trap.
    (index < gvar_count()).then(|| unsafe { raw::gvar_get(index as i64) as u64 })
}

/// Sets global variable `index`; `false` (nothing set) beyond [`gvar_count`].
pub fn gvar_set(index: u64, value: u64) -> bool {
    if index >= gvar_count() {
        return false;
    }
    // SAFETY: the index is checked above.
    unsafe { raw::gvar_set(index as i64, value as i64) };
    true
}

/// Reads a virtual I/O port of width 1, 2 or 4 bytes.
pub fn io_in(port: u64, width: u8) -> Result<u64, Status> {
    let mut v = [0u8; 8];
    // SAFETY: the host writes 8 bytes at `v`.
    let s = unsafe { raw::io_in(port as i64, width as i32, v.as_mut_ptr() as i32) };
    Status::check(s).map(|()| u64::from_le_bytes(v))
}

/// Writes the low `width` bytes of `value` to a virtual I/O port.
pub fn io_out(port: u64, width: u8, value: u64) -> Result<(), Status> {
    // SAFETY: no pointers.
    Status::check(unsafe { raw::io_out(port as i64, width as i32, value as i64) })
}

/// Emits a log record: `data` with `items` descriptors (see [`item`]).
/// Prefer [`Log`], which builds both.
pub fn emit_log(major: u16, minor: u16, data: &[u8], items: &[u32]) -> Result<(), Status> {
    if data.len() > MAX_LOG_DATA_BYTES || items.len() > MAX_LOG_ITEMS {
        return Err(Status::TooLarge);
    }
    // SAFETY: the host reads `data.len()` bytes and `items.len()` u32s.
    Status::check(unsafe {
        raw::emit_log(
            major as i32,
            minor as i32,
            data.as_ptr() as i32,
            data.len() as i32,
            items.as_ptr() as i32,
            items.len() as i32,
        )
    })
}

/// Emits a stack-trace record from a stack-trace area (spec §12).
pub fn emit_stacktrace(area: &[u8]) -> Result<(), Status> {
    if area.len() > MAX_STACKTRACE_BYTES {
        return Err(Status::TooLarge);
    }
    // SAFETY: the host reads `area.len()` bytes.
    Status::check(unsafe { raw::emit_stacktrace(area.as_ptr() as i32, area.len() as i32) })
}

/// Calls the host's `callk` hook (does nothing without one).
pub fn callk() {
    // SAFETY: no arguments.
    unsafe { raw::callk() }
}

/// In the handler of a return probe (manifest `return yes`): argument `n`
/// (0 = the first, in rdi, … 5 = the sixth, in r9) of the call that is
/// returning, as it was at the call's entry; `None` for `n` > 5. The
/// handler of a probe that is not a return probe traps here.
pub fn entry_arg(n: usize) -> Option<u64> {
    let r = reg::ENTRY[..6].get(n)?;
    // SAFETY: no pointers; `r` is an entry register, so the host does not
    // trap for the id.
    Some(unsafe { raw::entry_reg(r.0 as i32) as u64 })
}

/// In the handler of a return probe: `rsp` at the entry of the returning
/// call (the address of its return address). The handler of a probe that
/// is not a return probe traps here.
pub fn entry_rsp() -> u64 {
    // SAFETY: no pointers; `rsp` is an entry register.
    unsafe { raw::entry_reg(reg::RSP.0 as i32) as u64 }
}

/// In the handler of a return probe: nanoseconds between the entry of the
/// returning call and its return. The handler of a probe that is not a
/// return probe traps here.
pub fn elapsed_ns() -> u64 {
    // SAFETY: no arguments.
    unsafe { raw::elapsed_ns() as u64 }
}

/// In the handler of a USDT site: argument `index` (0-based) of the
/// probe, extended from its size as the site's spec says. The handler of a
/// probe that is not a USDT site, or an index the site does not have,
/// traps here.
pub fn usdt_arg(index: u32) -> i64 {
    // SAFETY: no pointers; the host checks the index.
    unsafe { raw::usdt_arg(index as i32) }
}

/// An item descriptor: item of `kind` (an [`item_kind`] constant) starting at `offset`.
pub const fn item(offset: u16, kind: u32) -> u32 {
    offset as u32 | kind << 16
}

/// A log record under construction: up to `N` data bytes and `I` items, on
/// the stack. Items that do not fit are dropped whole and counted in
/// [`Log::truncated`].
pub struct Log<const N: usize, const I: usize> {
    data: [u8; N],
    len: usize,
    items: [u32; I],
    count: usize,
    /// Items that did not fit.
    pub truncated: u32,
}

impl<const N: usize, const I: usize> Default for Log<N, I> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize, const I: usize> Log<N, I> {
    /// An empty record.
    pub const fn new() -> Self {
        Log {
            data: [0; N],
            len: 0,
            items: [0; I],
            count: 0,
            truncated: 0,
        }
    }

    /// Reserves `n` bytes for an item of `kind`; the slice to fill, or `None`.
    fn item(&mut self, kind: u32, n: usize) -> Option<&mut [u8]> {
        let end = self.len.checked_add(n)?;
        if end > N || self.count >= I || self.len > u16::MAX as usize {
            self.truncated += 1;
            return None;
        }
        self.items[self.count] = item(self.len as u16, kind);
        self.count += 1;
        let start = self.len;
        self.len = end;
        Some(&mut self.data[start..end])
    }

    /// Appends raw 8-byte words (printed `(a, b, ...)`).
    pub fn words(&mut self, words: &[u64]) -> &mut Self {
        if let Some(dst) = self.item(item_kind::RAW_WORDS, words.len() * 8) {
            for (d, w) in dst.chunks_exact_mut(8).zip(words) {
                d.copy_from_slice(&w.to_le_bytes());
            }
        }
        self
    }

    /// Appends raw bytes (printed as hex).
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        if let Some(dst) = self.item(item_kind::RAW_BYTES, bytes.len()) {
            dst.copy_from_slice(bytes);
        }
        self
    }

    /// Appends a token-prefixed item: token, u16 count, then `body`.
    fn tokenized(&mut self, token: u8, count: u16, body: &[u8]) -> &mut Self {
        if let Some(dst) = self.item(item_kind::TOKENIZED, 3 + body.len()) {
            dst[0] = token;
            dst[1..3].copy_from_slice(&count.to_le_bytes());
            dst[3..].copy_from_slice(body);
        }
        self
    }

    /// Appends a string (printed quoted, escaped).
    pub fn str(&mut self, s: &[u8]) -> &mut Self {
        let s = &s[..s.len().min(u16::MAX as usize)];
        self.tokenized(token::STRING, s.len() as u16, s)
    }

    /// Appends memory bytes (printed as a memory dump).
    pub fn memory(&mut self, bytes: &[u8]) -> &mut Self {
        let b = &bytes[..bytes.len().min(u16::MAX as usize)];
        self.tokenized(token::MEMORY, b.len() as u16, b)
    }

    /// The data area so far.
    pub fn data(&self) -> &[u8] {
        &self.data[..self.len]
    }

    /// Emits the record with `major` and `minor`.
    pub fn emit(&self, major: u16, minor: u16) -> Result<(), Status> {
        emit_log(
            major,
            minor,
            &self.data[..self.len],
            &self.items[..self.count],
        )
    }
}

/// Declares the module's probe points: emits the `wprobe.manifest` custom
/// section (format `wprobe-manifest 1`; the ABI version line is added for
/// you). The body is the manifest text itself, one `key value;` per line:
/// file keys first (`module` is required), then `probe EXPORT;` opening each
/// probe, followed by that probe's keys (`location` is required). Values
/// are string literals, numbers, or words (`yes`, `w`), written as the
/// manifest format wants them (see `docs/hostabi.md`).
///
/// ```ignore
/// wprobe_guest::manifest! {
///     module "probe_target";
///     major 11;
///     probe on_write;
///         location "offset counter";
///         watch w;
///         length 8;
/// }
/// ```
#[macro_export]
macro_rules! manifest {
    ( $( $key:ident $val:tt ; )* ) => {
        const _: () = {
            const TEXT: &str = concat!(
                $crate::__manifest_head!(),
                $( stringify!($key), " ", $crate::__manifest_value!($val), "\n", )*
            );
            #[used]
            #[unsafe(link_section = "wprobe.manifest")]
            static MANIFEST: [u8; TEXT.len()] = $crate::__bytes(TEXT);
        };
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __manifest_value {
    ($v:literal) => {
        $v
    };
    ($v:ident) => {
        stringify!($v)
    };
}

/// Copies a string into a byte array at compile time (for [`manifest!`]).
#[doc(hidden)]
pub const fn __bytes<const L: usize>(s: &str) -> [u8; L] {
    let b = s.as_bytes();
    let mut out = [0u8; L];
    let mut i = 0;
    while i < L && i < b.len() {
        out[i] = b[i];
        i += 1;
    }
    out
}

/// Defines a handler export: `handler!(fn name() -> Outcome { body })`
/// becomes `#[no_mangle] extern "C" fn name() -> i32` returning the outcome code.
///
/// A handler may take up to six `u64` parameters, the values its probe's
/// manifest line `args` names, in order (registers, and in a return probe
/// `entry.REG` and `elapsed`): `handler!(fn on_ret(rax: u64, took: u64) ->
/// Outcome { … })` with `args rax elapsed;` in [`manifest!`]. They are the
/// values [`read_reg`], [`entry_arg`]/[`entry_rsp`] and [`elapsed_ns`] would
/// return, passed in without a host call each.
#[macro_export]
macro_rules! handler {
    ($(#[$m:meta])* fn $name:ident($($arg:ident : u64),* $(,)?) -> Outcome $body:block) => {
        $(#[$m])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: u64),*) -> i32 {
            #[allow(unused_variables)]
            fn inner($($arg: u64),*) -> $crate::Outcome $body
            inner($($arg),*) as i32
        }
    };
}

#[cfg(all(feature = "panic-handler", target_arch = "wasm32", not(test)))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}
