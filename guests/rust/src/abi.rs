//! The host ABI as seen by the SDK: raw imports, codes, register ids, limits.
//!
//! GENERATED from the hostabi crate (`hostabi::rustsdk::render`). Do not edit:
//! run `BLESS=1 cargo test -p hostabi --test rustsdk` after changing hostabi.

/// The raw host imports (module `wprobe`), exactly as `hostabi` declares them.
///
/// # Safety
///
/// Pointer arguments are offsets in this module's memory that the host writes
/// or reads; prefer the safe wrappers of the crate root.
pub mod raw {
    #[link(wasm_import_module = "wprobe")]
    unsafe extern "C" {
        /// Value of register `reg` (a `Reg` id) of the hit thread, as the handler sees it (earlier
        /// `write_reg` calls included). `part` 0 is the low 64 bits; part 1 the high bits of an 80-
        /// or 128-bit register. A 32-bit alias reads the low 32 bits zero-extended. An unknown id
        /// or part traps; a register the transport cannot provide reads 0.
        pub fn read_reg(reg: i32, part: i32) -> i64;

        /// Set register `reg` of the hit thread; applied when the handler returns, whatever its
        /// outcome. A 32-bit alias sets the 64-bit register to the zero-extended low 32 bits.
        /// Returns OK, READ_ONLY for a register that may not be written, NOT_PERMITTED when the
        /// transport cannot write (perf), BAD_ARGUMENT for an unknown id.
        pub fn write_reg(reg: i32, value: i64) -> i32;

        /// Copy `len` bytes of the traced process at `addr` to guest memory at `dst_ptr`. Returns
        /// `len` when every byte was read, otherwise the number k < len of bytes readable from
        /// `addr` (the first unreadable byte is `addr + k`; bytes after k are unspecified). Bytes
        /// under the runtime's own breakpoints read as the original bytes. `len` above
        /// MAX_MEM_ACCESS_BYTES traps.
        pub fn read_mem(addr: i64, dst_ptr: i32, len: i32) -> i32;

        /// Copy the NUL-terminated string at `addr` to `dst_ptr`, examining at most `max` bytes.
        /// Returns n >= 0, the number of bytes copied before a NUL or `max` (the NUL is not
        /// copied), or -(i + 1) when byte i (i < max, before any NUL) could not be read.
        pub fn read_str(addr: i64, dst_ptr: i32, max: i32) -> i32;

        /// Write `len` bytes from guest memory at `src_ptr` to the traced process at `addr`, all or
        /// nothing. Returns OK, FAULT when a byte is unmapped or not writable by the process,
        /// NOT_PERMITTED when the transport cannot write (perf).
        pub fn write_mem(addr: i64, src_ptr: i32, len: i32) -> i32;

        /// Whether one byte at `addr` is accessible to the traced process per its mappings:
        /// `access` 1 = readable, 3 = readable and writable. Returns OK or FAULT. Never reads or
        /// writes the byte.
        pub fn check_access(addr: i64, access: i32) -> i32;

        /// Thread id of the thread that hit the probe.
        pub fn current_tid() -> i64;

        /// Process id (thread-group id) of the thread that hit the probe.
        pub fn current_pid() -> i64;

        /// CPU the hit thread last ran on.
        pub fn current_cpu() -> i64;

        /// The hit thread's thread pointer (`fs_base`, `pthread_self()` for glibc and musl); 0 if
        /// unavailable.
        pub fn thread_pointer() -> i64;

        /// Load bias of the program's module (`name =` / manifest `module`) in the hit process: 0
        /// for ET_EXEC, the mapping bias for PIE executables and shared libraries.
        pub fn load_bias() -> i64;

        /// Wall-clock time of the hit in nanoseconds since the Unix epoch.
        pub fn now_ns() -> i64;

        /// Execute CPUID on the runtime's CPU with EAX = `leaf`, ECX = `subleaf`, and return EAX,
        /// EBX, ECX or EDX (index 0, 1, 2, 3) zero-extended. Another index traps.
        pub fn cpuid(leaf: i32, subleaf: i32, index: i32) -> i64;

        /// Current number of global variables shared by all programs of the run (the largest
        /// `gvars` of any program loaded).
        pub fn gvar_count() -> i64;

        /// Value of global variable `index`. An index >= gvar_count() traps: check it first.
        pub fn gvar_get(index: i64) -> i64;

        /// Set global variable `index`. An index >= gvar_count() traps: check it first.
        pub fn gvar_set(index: i64, value: i64);

        /// Read a virtual I/O port (width 1, 2 or 4 bytes) into 8 bytes at `dst_ptr`,
        /// zero-extended. Returns OK, or NO_DEVICE when the host has no virtual handler for the
        /// port (real ports are never touched).
        pub fn io_in(port: i64, width: i32, dst_ptr: i32) -> i32;

        /// Write the low `width` bytes of `value` to a virtual I/O port. Returns OK or NO_DEVICE.
        pub fn io_out(port: i64, width: i32, value: i64) -> i32;

        /// Emit this hit's log record: the host writes the record header (facility 1, the program's
        /// header fields, `major`, `minor`) followed by `data_len` bytes at `data_ptr`. `items_ptr`
        /// points to `items_count` u32 item descriptors (`record::LogItem`) that say where each
        /// logged item starts, so the output can be decoded exactly. Returns OK, or TOO_LARGE when
        /// data_len > MAX_LOG_DATA_BYTES or items_count > MAX_LOG_ITEMS.
        pub fn emit_log(
            major: i32,
            minor: i32,
            data_ptr: i32,
            data_len: i32,
            items_ptr: i32,
            items_count: i32,
        ) -> i32;

        /// Emit this hit's stack-trace record: header with major 0, minor 0, mask 0x0007, then the
        /// stack-trace area (`record::stacktrace`). Returns OK, TOO_LARGE, or BAD_ARGUMENT when the
        /// area does not parse.
        pub fn emit_stacktrace(data_ptr: i32, data_len: i32) -> i32;

        /// Call the host's callk hook (RPN `callk`). Does nothing when no hook is registered.
        pub fn callk();

        /// Aggregate `value` into entry `key` of map `map` (an index of the manifest's `map` lines)
        /// with `op` (`mapstore::Op`: COUNT, ADD, MIN, MAX, AVG, HIST, LHIST, SET), creating the
        /// entry when absent. `key_len` must be the map's key size. Returns OK; FULL when the entry
        /// is new and the map already holds its maximum number of keys (the update is dropped and
        /// counted, and reported at exit); BAD_ARGUMENT for an unknown map, a wrong key size or an
        /// op the map's kind does not take.
        pub fn map_update(map: i32, key_ptr: i32, key_len: i32, op: i32, value: i64) -> i32;

        /// Set entry `key` of an `assign` map to the `val_len` bytes at `val_ptr` (the map's value
        /// size). Returns OK, FULL (counted, as for map_update) or BAD_ARGUMENT.
        pub fn map_store(map: i32, key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32) -> i32;

        /// Copy the value of entry `key` of map `map` to `dst_ptr` (at most `dst_len` bytes).
        /// Returns the value's size in bytes (integers are 8-byte little-endian; `avg`/`stats`
        /// values are count then total; histograms are their bucket counts), NOT_FOUND when the key
        /// is absent, BAD_ARGUMENT for an unknown map or a wrong key size.
        pub fn map_lookup(map: i32, key_ptr: i32, key_len: i32, dst_ptr: i32, dst_len: i32) -> i32;

        /// Remove entry `key` of map `map`. Returns OK, NOT_FOUND or BAD_ARGUMENT.
        pub fn map_delete(map: i32, key_ptr: i32, key_len: i32) -> i32;

        /// Remove every entry of map `map` (bpftrace `clear`). Returns OK or BAD_ARGUMENT.
        pub fn map_clear(map: i32) -> i32;

        /// Set every value of map `map` to zero, keeping its keys (bpftrace `zero`). Returns OK or
        /// BAD_ARGUMENT.
        pub fn map_zero(map: i32) -> i32;

        /// Emit an output event (`event::EventKind`): PRINTF with `id` a printf entry of the
        /// module's `wprobe.events` section and the data its arguments laid out as the entry says;
        /// PRINT_MAP with `id` a map index and 16 bytes (top, div); PRINT_VALUE with `id` a value
        /// entry and the value's bytes; TIME with `id` a time entry; CAT and SYSTEM with `id` a
        /// printf entry giving a file's path or a shell command (bpftrace `cat`, `system`); EXIT
        /// with `id` 0 and an i64 exit status (bpftrace `exit(code)`; the handler then returns
        /// STOP). wprobe formats events when it writes them. Returns OK, TOO_LARGE (data_len >
        /// MAX_EVENT_BYTES or the run's record budget is spent) or BAD_ARGUMENT (unknown kind).
        pub fn emit_event(kind: i32, id: i32, data_ptr: i32, data_len: i32) -> i32;

        /// A clock at the hit, in nanoseconds: `clock::MONOTONIC` (bpftrace `nsecs`),
        /// `clock::SINCE_START` (time since the run started, bpftrace `elapsed`), `clock::REALTIME`
        /// (since the Unix epoch), `clock::BOOTTIME` (`CLOCK_BOOTTIME`, bpftrace `nsecs(boot)`),
        /// `clock::TAI` (`CLOCK_TAI`, bpftrace `nsecs(tai)` and `nsecs(sw_tai)`). Another id traps.
        pub fn clock_ns(clock: i32) -> i64;

        /// Real user id of the process that hit the probe (-1 if unknown).
        pub fn current_uid() -> i64;

        /// Copy the hit thread's name (`/proc/PID/task/TID/comm`, at most 15 bytes, no NUL) to
        /// `dst_ptr`, at most `len` bytes. Returns the number of bytes copied.
        pub fn current_comm(dst_ptr: i32, len: i32) -> i32;

        /// Process id of the command wprobe launched (bpftrace `cpid`), 0 when it attached to a
        /// process instead.
        pub fn child_pid() -> i64;

        /// In the handler of a return probe (manifest `return yes`): the value register `reg` had
        /// at the entry of the call that is returning. `reg` is one of the six SysV argument
        /// registers rdi, rsi, rdx, rcx, r8, r9 or rsp, by `Reg` id (`regs::ENTRY_REGS`); any other
        /// id traps, and so does a call from the handler of a probe that is not a return probe
        /// (every i64 is a possible register value, so there is no room for a status).
        pub fn entry_reg(reg: i32) -> i64;

        /// In the handler of a return probe: nanoseconds between the entry of the returning call
        /// and its return, both taken by the runtime with a monotonic clock when it caught them
        /// (the tracer's own stops are included). Traps in the handler of a probe that is not a
        /// return probe.
        pub fn elapsed_ns() -> i64;

        /// Iterate map `map` (bpftrace `for ($kv : @m)`, `len(@m)`): copy the key and the value of
        /// its first entry at or after `cursor` (start at 0) to `key_ptr` and `val_ptr` (at most
        /// `key_len` and `val_len` bytes). Returns that entry's position (the next call passes
        /// position + 1; deleting the entry found does not move the others), NOT_FOUND past the
        /// last entry, BAD_ARGUMENT for an unknown map.
        pub fn map_entry(
            map: i32,
            cursor: i64,
            key_ptr: i32,
            key_len: i32,
            val_ptr: i32,
            val_len: i32,
        ) -> i32;

        /// Argument `index` (0-based) of the USDT probe that fired (manifest `usdt_args`, from the
        /// site's `.note.stapsdt` spec), sign- or zero-extended from its size as the spec says. An
        /// argument whose register or memory cannot be read is 0. An index the site does not have
        /// traps, and so does a call from the handler of a probe that is not a USDT site.
        pub fn usdt_arg(index: i32) -> i64;

        /// Real group id of the thread that hit the probe (-1 if unknown); wprobe's own in a
        /// `begin`, `end` or `interval` probe.
        pub fn current_gid() -> i64;

        /// NUMA node of the CPU the hit thread last ran on (`current_cpu`); 0 on a machine with one
        /// node.
        pub fn current_numa_node() -> i64;
    }
}

/// Host ABI version these bindings were generated for.
pub const ABI_VERSION: u32 = 5;

/// Name of the custom section carrying the manifest.
pub const MANIFEST_SECTION: &str = "wprobe.manifest";

/// Largest length accepted by `read_mem`, `read_str` and `write_mem`.
pub const MAX_MEM_ACCESS_BYTES: usize = 1048576;

/// Largest log data area of one record.
pub const MAX_LOG_DATA_BYTES: usize = 65535;

/// Largest number of item descriptors of one record.
pub const MAX_LOG_ITEMS: usize = 65535;

/// Largest stack-trace area.
pub const MAX_STACKTRACE_BYTES: usize = 65535;

/// Live calls of a return probe tracked per process when its manifest has no
/// `maxactive` (or `maxactive 0`).
pub const DEFAULT_MAXACTIVE: u32 = 64;

/// Largest `maxactive` of a return probe.
pub const MAX_MAXACTIVE: u32 = 4096;

/// The manifest header lines (`wprobe-manifest` format and ABI version), used by
/// [`manifest!`](crate::manifest!).
#[doc(hidden)]
#[macro_export]
macro_rules! __manifest_head {
    () => {
        "wprobe-manifest 1\nabi 5\n"
    };
}

/// Recoverable failures reported by host imports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    /// `FAULT`
    Fault = -1,
    /// `READ_ONLY`
    ReadOnly = -2,
    /// `NOT_PERMITTED`
    NotPermitted = -3,
    /// `BAD_ARGUMENT`
    BadArgument = -4,
    /// `TOO_LARGE`
    TooLarge = -5,
    /// `NO_DEVICE`
    NoDevice = -6,
    /// `NOT_FOUND`
    NotFound = -7,
    /// `FULL`
    Full = -8,
}

impl Status {
    /// `Ok(())` for OK (0), the status otherwise (unknown codes read as `BadArgument`).
    pub fn check(code: i32) -> Result<(), Status> {
        match code {
            0 => Ok(()),
            -1 => Err(Status::Fault),
            -2 => Err(Status::ReadOnly),
            -3 => Err(Status::NotPermitted),
            -4 => Err(Status::BadArgument),
            -5 => Err(Status::TooLarge),
            -6 => Err(Status::NoDevice),
            -7 => Err(Status::NotFound),
            -8 => Err(Status::Full),
            _ => Err(Status::BadArgument),
        }
    }
}

/// How a handler run ends: the value a handler returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Outcome {
    /// `EXIT`
    Exit = 0,
    /// `ABORT`
    Abort = 1,
    /// `REMOVE`
    Remove = 2,
    /// `DEBUGGER_HANDOFF`
    DebuggerHandoff = 3,
    /// `CRASH_DUMP`
    CrashDump = 4,
    /// `CORE_DUMP`
    CoreDump = 5,
    /// `UNCAUGHT`
    Uncaught = 6,
    /// `BUDGET_EXCEEDED`
    BudgetExceeded = 7,
    /// `STOP`
    Stop = 8,
}

/// Register ids for [`read_reg`](crate::read_reg) and [`write_reg`](crate::write_reg) (x86-64).
pub mod reg {
    use crate::Reg;

    /// `cs`: 16 bits.
    pub const CS: Reg = Reg(0x000);

    /// `ds`: 16 bits.
    pub const DS: Reg = Reg(0x001);

    /// `es`: 16 bits.
    pub const ES: Reg = Reg(0x002);

    /// `fs`: 16 bits.
    pub const FS: Reg = Reg(0x003);

    /// `gs`: 16 bits.
    pub const GS: Reg = Reg(0x004);

    /// `ss`: 16 bits.
    pub const SS: Reg = Reg(0x005);

    /// `rax`: 64 bits, writable.
    pub const RAX: Reg = Reg(0x006);

    /// `rbx`: 64 bits, writable.
    pub const RBX: Reg = Reg(0x007);

    /// `rcx`: 64 bits, writable.
    pub const RCX: Reg = Reg(0x008);

    /// `rdx`: 64 bits, writable.
    pub const RDX: Reg = Reg(0x009);

    /// `rdi`: 64 bits, writable.
    pub const RDI: Reg = Reg(0x00a);

    /// `rsi`: 64 bits, writable.
    pub const RSI: Reg = Reg(0x00b);

    /// `rflags`: 64 bits.
    pub const RFLAGS: Reg = Reg(0x00c);

    /// `rip`: 64 bits.
    pub const RIP: Reg = Reg(0x00d);

    /// `rsp`: 64 bits.
    pub const RSP: Reg = Reg(0x00e);

    /// `rbp`: 64 bits, writable.
    pub const RBP: Reg = Reg(0x00f);

    /// `r8`: 64 bits, writable.
    pub const R8: Reg = Reg(0x010);

    /// `r9`: 64 bits, writable.
    pub const R9: Reg = Reg(0x011);

    /// `r10`: 64 bits, writable.
    pub const R10: Reg = Reg(0x012);

    /// `r11`: 64 bits, writable.
    pub const R11: Reg = Reg(0x013);

    /// `r12`: 64 bits, writable.
    pub const R12: Reg = Reg(0x014);

    /// `r13`: 64 bits, writable.
    pub const R13: Reg = Reg(0x015);

    /// `r14`: 64 bits, writable.
    pub const R14: Reg = Reg(0x016);

    /// `r15`: 64 bits, writable.
    pub const R15: Reg = Reg(0x017);

    /// `orig_rax`: 64 bits.
    pub const ORIG_RAX: Reg = Reg(0x018);

    /// `fs_base`: 64 bits.
    pub const FS_BASE: Reg = Reg(0x019);

    /// `gs_base`: 64 bits.
    pub const GS_BASE: Reg = Reg(0x01a);

    /// `dr0`: 64 bits.
    pub const DR0: Reg = Reg(0x02c);

    /// `dr1`: 64 bits.
    pub const DR1: Reg = Reg(0x02d);

    /// `dr2`: 64 bits.
    pub const DR2: Reg = Reg(0x02e);

    /// `dr3`: 64 bits.
    pub const DR3: Reg = Reg(0x02f);

    /// `dr6`: 64 bits.
    pub const DR6: Reg = Reg(0x032);

    /// `dr7`: 64 bits.
    pub const DR7: Reg = Reg(0x033);

    /// `cpuid`: 0 bits.
    pub const CPUID: Reg = Reg(0x03c);

    /// `fr0`: 80 bits.
    pub const FR0: Reg = Reg(0x03e);

    /// `fr1`: 80 bits.
    pub const FR1: Reg = Reg(0x03f);

    /// `fr2`: 80 bits.
    pub const FR2: Reg = Reg(0x040);

    /// `fr3`: 80 bits.
    pub const FR3: Reg = Reg(0x041);

    /// `fr4`: 80 bits.
    pub const FR4: Reg = Reg(0x042);

    /// `fr5`: 80 bits.
    pub const FR5: Reg = Reg(0x043);

    /// `fr6`: 80 bits.
    pub const FR6: Reg = Reg(0x044);

    /// `fr7`: 80 bits.
    pub const FR7: Reg = Reg(0x045);

    /// `fcw`: 16 bits.
    pub const FCW: Reg = Reg(0x046);

    /// `fsw`: 16 bits.
    pub const FSW: Reg = Reg(0x047);

    /// `ftw`: 8 bits.
    pub const FTW: Reg = Reg(0x048);

    /// `fip`: 64 bits.
    pub const FIP: Reg = Reg(0x049);

    /// `fdp`: 64 bits.
    pub const FDP: Reg = Reg(0x04b);

    /// `xmm0`: 128 bits.
    pub const XMM0: Reg = Reg(0x04d);

    /// `xmm1`: 128 bits.
    pub const XMM1: Reg = Reg(0x04e);

    /// `xmm2`: 128 bits.
    pub const XMM2: Reg = Reg(0x04f);

    /// `xmm3`: 128 bits.
    pub const XMM3: Reg = Reg(0x050);

    /// `xmm4`: 128 bits.
    pub const XMM4: Reg = Reg(0x051);

    /// `xmm5`: 128 bits.
    pub const XMM5: Reg = Reg(0x052);

    /// `xmm6`: 128 bits.
    pub const XMM6: Reg = Reg(0x053);

    /// `xmm7`: 128 bits.
    pub const XMM7: Reg = Reg(0x054);

    /// `mxcsr`: 32 bits.
    pub const MXCSR: Reg = Reg(0x055);

    /// `fop`: 16 bits.
    pub const FOP: Reg = Reg(0x056);

    /// `xmm8`: 128 bits.
    pub const XMM8: Reg = Reg(0x058);

    /// `xmm9`: 128 bits.
    pub const XMM9: Reg = Reg(0x059);

    /// `xmm10`: 128 bits.
    pub const XMM10: Reg = Reg(0x05a);

    /// `xmm11`: 128 bits.
    pub const XMM11: Reg = Reg(0x05b);

    /// `xmm12`: 128 bits.
    pub const XMM12: Reg = Reg(0x05c);

    /// `xmm13`: 128 bits.
    pub const XMM13: Reg = Reg(0x05d);

    /// `xmm14`: 128 bits.
    pub const XMM14: Reg = Reg(0x05e);

    /// `xmm15`: 128 bits.
    pub const XMM15: Reg = Reg(0x05f);

    /// `eax`: 32 bits, writable.
    pub const EAX: Reg = Reg(0x106);

    /// `ebx`: 32 bits, writable.
    pub const EBX: Reg = Reg(0x107);

    /// `ecx`: 32 bits, writable.
    pub const ECX: Reg = Reg(0x108);

    /// `edx`: 32 bits, writable.
    pub const EDX: Reg = Reg(0x109);

    /// `edi`: 32 bits, writable.
    pub const EDI: Reg = Reg(0x10a);

    /// `esi`: 32 bits, writable.
    pub const ESI: Reg = Reg(0x10b);

    /// `eflags`: 32 bits.
    pub const EFLAGS: Reg = Reg(0x10c);

    /// `eip`: 32 bits.
    pub const EIP: Reg = Reg(0x10d);

    /// `esp`: 32 bits.
    pub const ESP: Reg = Reg(0x10e);

    /// `ebp`: 32 bits, writable.
    pub const EBP: Reg = Reg(0x10f);

    /// `r8d`: 32 bits, writable.
    pub const R8D: Reg = Reg(0x110);

    /// `r9d`: 32 bits, writable.
    pub const R9D: Reg = Reg(0x111);

    /// `r10d`: 32 bits, writable.
    pub const R10D: Reg = Reg(0x112);

    /// `r11d`: 32 bits, writable.
    pub const R11D: Reg = Reg(0x113);

    /// `r12d`: 32 bits, writable.
    pub const R12D: Reg = Reg(0x114);

    /// `r13d`: 32 bits, writable.
    pub const R13D: Reg = Reg(0x115);

    /// `r14d`: 32 bits, writable.
    pub const R14D: Reg = Reg(0x116);

    /// `r15d`: 32 bits, writable.
    pub const R15D: Reg = Reg(0x117);

    /// The registers whose entry values a return probe's handler reads
    /// ([`entry_arg`](crate::entry_arg), [`entry_rsp`](crate::entry_rsp)): the
    /// six argument registers in order, then `rsp`.
    pub const ENTRY: [Reg; 7] = [RDI, RSI, RDX, RCX, R8, R9, RSP];
}

/// Log data tokens of token-prefixed items.
pub mod token {
    /// Token `MEMORY`.
    pub const MEMORY: u8 = 0x00;

    /// Token `STRING`.
    pub const STRING: u8 = 0x01;

    /// Token `LOCAL_VARS`.
    pub const LOCAL_VARS: u8 = 0x05;

    /// Token `GLOBAL_VARS`.
    pub const GLOBAL_VARS: u8 = 0x06;

    /// Token `WORDS`.
    pub const WORDS: u8 = 0x07;

    /// Token `FAULT`.
    pub const FAULT: u8 = 0xff;
}

/// Item kinds of log item descriptors (bits 16-23 of a descriptor).
pub mod item_kind {
    /// `RAW_WORDS`.
    pub const RAW_WORDS: u32 = 0x80;

    /// `RAW_BYTES`.
    pub const RAW_BYTES: u32 = 0x81;

    /// `TOKENIZED`.
    pub const TOKENIZED: u32 = 0x82;
}

/// Ops of [`map_update`] (`map_op::COUNT`, ...).
pub mod map_op {
    /// `COUNT`.
    pub const COUNT: i32 = 1;

    /// `ADD`.
    pub const ADD: i32 = 2;

    /// `MIN`.
    pub const MIN: i32 = 3;

    /// `MAX`.
    pub const MAX: i32 = 4;

    /// `AVG`.
    pub const AVG: i32 = 5;

    /// `HIST`.
    pub const HIST: i32 = 6;

    /// `LHIST`.
    pub const LHIST: i32 = 7;

    /// `SET`.
    pub const SET: i32 = 8;
}

/// Kinds of [`emit_event`] events.
pub mod event_kind {
    /// `PRINTF`.
    pub const PRINTF: i32 = 1;

    /// `PRINT_MAP`.
    pub const PRINT_MAP: i32 = 2;

    /// `PRINT_VALUE`.
    pub const PRINT_VALUE: i32 = 3;

    /// `TIME`.
    pub const TIME: i32 = 4;

    /// `CAT`.
    pub const CAT: i32 = 5;

    /// `SYSTEM`.
    pub const SYSTEM: i32 = 6;

    /// `EXIT`.
    pub const EXIT: i32 = 7;
}

/// Clock ids of [`clock_ns`].
pub mod clock {
    /// `MONOTONIC`.
    pub const MONOTONIC: i32 = 0;

    /// `SINCE_START`.
    pub const SINCE_START: i32 = 1;

    /// `REALTIME`.
    pub const REALTIME: i32 = 2;

    /// `BOOTTIME`.
    pub const BOOTTIME: i32 = 3;

    /// `TAI`.
    pub const TAI: i32 = 4;
}
